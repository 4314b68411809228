//! Events: everything that happens to a node, as its history records it and the API
//! and webhooks render it (DESIGN §9).

use serde::{Deserialize, Serialize};

use super::{Severity, Time};

/// Something that happened to a node, recorded in its history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub node_id: String,
    #[serde(flatten)]
    pub kind: EventKind,
    #[serde(with = "crate::core::stamp")]
    pub occurred_at: Time,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "SCREAMING_SNAKE_CASE",
    rename_all_fields = "camelCase"
)]
pub enum EventKind {
    ConditionRaised {
        condition: String,
        reason: String,
        severity: Severity,
        /// What fault-triggered eviction matches; absent from older records.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fault_class: Option<String>,
        /// Fed only by silenced or inhibited alerts: shown, costing nothing,
        /// triggering nothing (absent when not).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        suppressed: bool,
    },
    ConditionEscalated {
        condition: String,
        reason: String,
        severity: Severity,
        previous_severity: Severity,
        /// As on [`EventKind::ConditionRaised`]: a silenced fault may escalate too.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        suppressed: bool,
    },
    ConditionCleared {
        condition: String,
        severity: Severity,
        /// `resolved` when its alerts ended; `operator` for a manual clear.
        cleared_by: String,
    },
    /// The alerts feeding a raised condition changed, or the reason it is charged
    /// for did, without a change of severity.
    ConditionUpdated {
        condition: String,
        /// The charged reason.
        reason: String,
        severity: Severity,
        /// The reasons of the alerts feeding it now (empty: only its stickiness
        /// keeps it raised).
        reasons: Vec<String>,
        /// How many alerts feed it now.
        alerts: u32,
        /// Every alert feeding it now is silenced or inhibited (absent when not).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        suppressed: bool,
    },
    ScoreChanged {
        score: u8,
        previous_score: u8,
        scored_by: String,
    },
    HeartbeatMissed {
        last_heartbeat: Time,
    },
    HeartbeatResumed {
        last_heartbeat: Time,
    },
    JobFailureAttributed {
        job: String,
        reason: String,
        total: u64,
        /// When the job failed (a report may come later than that, or an alert
        /// start before it); absent from older records.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failed_at: Option<Time>,
    },
    NodeDecommissioned {
        /// `operator` (`DELETE /api/v1/nodes/{id}`), `retired` (known only from
        /// alerts and named by none for `forgetAfter`) or `orchestrator` (gone from
        /// the cluster, or its name now belongs to a new machine).
        #[serde(default = "super::operator")]
        by: String,
    },
    PolicyRecommended {
        action: String,
        policy_mode: String,
        scored_by: String,
        /// `null` for a node not scored yet (an operator's reboot, a fence).
        score: Option<u8>,
    },
    PolicyActed {
        action: String,
        policy_mode: String,
        scored_by: String,
        /// `null` for a node not scored yet (an operator's reboot, a fence).
        score: Option<u8>,
        /// `replace`: allocations the node must finish before it is terminated.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        waiting_on: Option<u32>,
    },
    PolicyHalted {
        action: String,
        /// The guardrail that stopped it (its config key, or why).
        guardrail: String,
        policy_mode: String,
        scored_by: String,
        /// `null` for a node not scored yet (an operator's reboot, a fence).
        score: Option<u8>,
    },
    NodeCordoned {
        /// `hale` or `operator`.
        by: String,
        reason: String,
    },
    NodeUncordoned {
        by: String,
        reason: String,
    },
    NodeDrained {
        by: String,
        active: bool,
        reason: String,
        /// Allocations stopped and run again elsewhere (active drains).
        moved: u32,
        /// Allocations a disruption budget kept on the node past the orchestrator's
        /// timeout (they still run there).
        #[serde(default, skip_serializing_if = "super::is_zero")]
        blocked: u32,
        /// Allocations evicted that were still stopping when the orchestrator's
        /// wait for them ended.
        #[serde(default, skip_serializing_if = "super::is_zero")]
        stopping: u32,
        /// Allocations an active drain ended rather than moved (work that may not
        /// run again elsewhere: a Slurm job without `--requeue`).
        #[serde(default, skip_serializing_if = "super::is_zero")]
        failed: u32,
    },
    NodeEvicted {
        fault_class: String,
        moved: u32,
        failed: u32,
        /// As for `NODE_DRAINED`: left running on the faulty node.
        #[serde(default, skip_serializing_if = "super::is_zero")]
        blocked: u32,
    },
    NodeReplaced {},
    /// A silent node powered off through its BMC and its work released
    /// (`fenced`), or back and its work let in again (`restored`).
    NodeFenced {
        phase: String,
    },
    /// A power operation through the node's BMC.
    NodePower {
        /// `status`, `on`, `off`, `cycle`, `reset` or `reboot`.
        action: String,
        /// `done`, `unchanged` (already as asked) or `failed`.
        result: String,
        /// `operator`, or `hale` for a flow's or a fence's.
        by: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        force: bool,
    },
    RemediationStarted {
        /// `reboot` or `fence`.
        action: String,
        /// The condition that asked for it, or `operator`.
        trigger: String,
        by: String,
        priority: u8,
    },
    RemediationStep {
        action: String,
        /// `cordon`, `diagnostics`, `drain`, `reboot`, `return`, `verify`,
        /// `uncordon` (reboot); `off`, `release`, `on`, `restore` (fence).
        step: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        diagnostics: Option<Diagnostics>,
    },
    RemediationSucceeded {
        action: String,
    },
    RemediationFailed {
        action: String,
        /// The step that failed, or at which an operator cancelled the flow.
        step: String,
        /// An operator put the node back in service during the flow: not a
        /// failure of the flow's (`hale_remediations_total{result="cancelled"}`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cancelled: bool,
    },
}

/// What a node looked like when a reboot flow began working on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Diagnostics {
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<u8>,
    /// `type: reason (severity)` of each raised condition.
    pub conditions: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat: Option<Time>,
}

/// Every event type of the contract (DESIGN §9), including those later components
/// emit, so filters can name them today.
/// An event's message for `what` an operator did and the reason given, if any:
/// `cordoned by operator: disk swap`, or `cordoned by operator` without one.
pub(crate) fn with_reason(what: &str, reason: &str) -> String {
    match reason.trim() {
        "" => what.to_string(),
        reason => format!("{what}: {reason}"),
    }
}

pub const EVENT_TYPES: &[&str] = &[
    "CONDITION_RAISED",
    "CONDITION_ESCALATED",
    "CONDITION_CLEARED",
    "CONDITION_UPDATED",
    "SCORE_CHANGED",
    "HEARTBEAT_MISSED",
    "HEARTBEAT_RESUMED",
    "JOB_FAILURE_ATTRIBUTED",
    "POLICY_RECOMMENDED",
    "POLICY_ACTED",
    "POLICY_HALTED",
    "NODE_CORDONED",
    "NODE_UNCORDONED",
    "NODE_DRAINED",
    "NODE_EVICTED",
    "NODE_REPLACED",
    "NODE_FENCED",
    "NODE_POWER",
    "NODE_DECOMMISSIONED",
    "REMEDIATION_STARTED",
    "REMEDIATION_STEP",
    "REMEDIATION_SUCCEEDED",
    "REMEDIATION_FAILED",
];

impl EventKind {
    /// The `type` string, e.g. `SCORE_CHANGED`.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::ConditionRaised { .. } => "CONDITION_RAISED",
            EventKind::ConditionEscalated { .. } => "CONDITION_ESCALATED",
            EventKind::ConditionCleared { .. } => "CONDITION_CLEARED",
            EventKind::ConditionUpdated { .. } => "CONDITION_UPDATED",
            EventKind::ScoreChanged { .. } => "SCORE_CHANGED",
            EventKind::HeartbeatMissed { .. } => "HEARTBEAT_MISSED",
            EventKind::HeartbeatResumed { .. } => "HEARTBEAT_RESUMED",
            EventKind::JobFailureAttributed { .. } => "JOB_FAILURE_ATTRIBUTED",
            EventKind::NodeDecommissioned { .. } => "NODE_DECOMMISSIONED",
            EventKind::PolicyRecommended { .. } => "POLICY_RECOMMENDED",
            EventKind::PolicyActed { .. } => "POLICY_ACTED",
            EventKind::PolicyHalted { .. } => "POLICY_HALTED",
            EventKind::NodeCordoned { .. } => "NODE_CORDONED",
            EventKind::NodeUncordoned { .. } => "NODE_UNCORDONED",
            EventKind::NodeDrained { .. } => "NODE_DRAINED",
            EventKind::NodeEvicted { .. } => "NODE_EVICTED",
            EventKind::NodeReplaced {} => "NODE_REPLACED",
            EventKind::NodeFenced { .. } => "NODE_FENCED",
            EventKind::NodePower { .. } => "NODE_POWER",
            EventKind::RemediationStarted { .. } => "REMEDIATION_STARTED",
            EventKind::RemediationStep { .. } => "REMEDIATION_STEP",
            EventKind::RemediationSucceeded { .. } => "REMEDIATION_SUCCEEDED",
            EventKind::RemediationFailed { .. } => "REMEDIATION_FAILED",
        }
    }
}
