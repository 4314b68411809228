//! The JSON shapes of the HTTP API (DESIGN §11), shared by the server that renders them
//! and the CLI that reads them.

use serde::{Deserialize, Serialize};

use crate::core::policy::{Conclusion, Cordon, Fence, Flow, OrchestratorHealth, RECOVERY_HOLD};
use crate::core::settings::Settings;
use crate::core::{Deduction, Health, Node, Severity, Status, Time};
use crate::store::StoredEvent;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionView {
    #[serde(rename = "type")]
    pub ctype: String,
    pub reason: String,
    pub severity: Severity,
    pub message: String,
    pub first_seen: Time,
    pub last_seen: Time,
    pub observations: u64,
    pub sticky: bool,
    pub suppressed: bool,
    pub fault_class: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailuresView {
    pub total: u64,
    pub last: Option<Time>,
    /// Points the tally costs now, after decay.
    pub deduction: u32,
    pub by_reason: std::collections::BTreeMap<String, u64>,
}

/// `GET /api/v1/nodes/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeView {
    pub id: String,
    pub cluster: String,
    pub hostname: String,
    pub status: Status,
    pub health: Health,
    /// `null` until the node's first report.
    pub score: Option<u8>,
    pub scored_by: Option<String>,
    pub breakdown: Vec<Deduction>,
    pub conditions: Vec<ConditionView>,
    pub failures: FailuresView,
    pub last_report: Option<Time>,
    pub last_heartbeat: Option<Time>,
    pub unavailable_signals: Vec<String>,
    pub jobs: u64,
    /// Who took the node out of service and why, while it is out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cordon: Option<Cordon>,
    /// The scheduling gate: new work kept off while the score is below drainBelow.
    pub gated: bool,
    /// The policy's standing conclusion about the node, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<Conclusion>,
    /// When a recovered node's standing conclusion lifts, unless it degrades again
    /// first (a recovery must hold 15 minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_lifts_at: Option<Time>,
    /// The reboot flow, queued or under way (DESIGN §8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<Flow>,
    /// A fence under way, or waiting for the node to report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<Fence>,
    /// The orchestrator's own health and score of the node (Fuzzball computes
    /// them), beside hale's and never part of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orchestrator_health: Option<OrchestratorHealth>,
}

impl NodeView {
    pub fn of(node: &Node, cluster: &str, settings: &Settings, now: Time) -> NodeView {
        let mut unavailable: Vec<String> = node.unavailable.values().cloned().collect();
        unavailable.sort();
        unavailable.dedup();
        NodeView {
            id: node.id.clone(),
            cluster: cluster.to_string(),
            hostname: node.hostname.clone().unwrap_or_else(|| node.id.clone()),
            status: node.status,
            health: node.health(settings),
            score: node.score.as_ref().map(|s| s.value),
            scored_by: node.score.as_ref().map(|s| s.scored_by.clone()),
            breakdown: node
                .score
                .as_ref()
                .map(|s| s.breakdown.clone())
                .unwrap_or_default(),
            conditions: node
                .conditions
                .iter()
                .map(|(ctype, c)| ConditionView {
                    ctype: ctype.clone(),
                    reason: c.reason.clone(),
                    severity: c.severity,
                    message: c.message.clone(),
                    first_seen: c.first_seen,
                    last_seen: c.last_seen,
                    observations: c.observations,
                    sticky: c.sticky,
                    suppressed: c.suppressed(),
                    fault_class: c.fault_class.clone(),
                    priority: c.priority,
                    remediation: c.remediation.clone(),
                })
                .collect(),
            failures: FailuresView {
                total: node.failures.total,
                last: node.failures.last,
                deduction: node.failure_deduction(settings, now),
                by_reason: node
                    .failures
                    .by_reason
                    .iter()
                    .map(|(k, v)| (k.clone(), *v))
                    .collect(),
            },
            last_report: node.last_report,
            last_heartbeat: node.heartbeat.as_ref().map(|h| h.last),
            unavailable_signals: unavailable,
            jobs: u64::from(node.policy.allocations),
            cordon: node.policy.cordon.clone(),
            gated: node.policy.gated,
            policy: node.policy.conclusion.clone(),
            policy_lifts_at: node
                .policy
                .recovered_since
                .filter(|_| node.policy.conclusion.is_some())
                .map(|since| since + RECOVERY_HOLD),
            remediation: node.policy.flow.clone(),
            fence: node.policy.fence.clone(),
            orchestrator_health: node.policy.orchestrator_health.clone(),
        }
    }
}

impl NodeSummary {
    /// The list entry of `node`, built without the whole view.
    pub fn of(node: &Node, cluster: &str, settings: &Settings) -> NodeSummary {
        NodeSummary {
            id: node.id.clone(),
            cluster: cluster.to_string(),
            hostname: node.hostname.clone().unwrap_or_else(|| node.id.clone()),
            status: node.status,
            health: node.health(settings),
            score: node.score.as_ref().map(|s| s.value),
            scored_by: node.score.as_ref().map(|s| s.scored_by.clone()),
            conditions: node.conditions.keys().cloned().collect(),
            last_report: node.last_report,
            jobs: u64::from(node.policy.allocations),
        }
    }
}

/// An entry of `GET /api/v1/nodes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSummary {
    pub id: String,
    pub cluster: String,
    pub hostname: String,
    pub status: Status,
    pub health: Health,
    pub score: Option<u8>,
    pub scored_by: Option<String>,
    pub conditions: Vec<String>,
    pub last_report: Option<Time>,
    pub jobs: u64,
}

/// `GET /api/v1/nodes`: one page, in id order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeList {
    pub nodes: Vec<NodeSummary>,
    /// Present while more nodes match; pass it back as `pageToken`.
    #[serde(default)]
    pub next_page_token: Option<String>,
}

/// Which nodes `GET /api/v1/nodes` lists.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeQuery {
    pub page_size: usize,
    /// Continue after this node id (from a page's token).
    pub after: Option<String>,
    pub health: Option<Health>,
    pub status: Option<Status>,
    /// The pool whose settings price the node (`cluster` for none).
    pub pool: Option<String>,
    pub cluster: Option<String>,
}

/// A page token: the last id of a page, hex-encoded (opaque to clients).
pub fn page_token(last_id: &str) -> String {
    last_id.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The id a [`page_token`] continues after; `None` for one this server did not issue.
pub fn page_after(token: &str) -> Option<String> {
    if token.len() % 2 != 0 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(token.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// One alert as hale last saw it (`GET /api/v1/alerts`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeenAlert {
    pub fingerprint: String,
    pub alertname: String,
    /// The node it names, if any.
    pub node: Option<String>,
    /// `condition:<type>` or the special signal (`heartbeat`, `watchdog`, …).
    pub meaning: String,
    pub severity: Severity,
    /// `active` or `suppressed`.
    pub state: String,
    pub starts_at: Option<Time>,
}

/// Whether hale trusts its alert source right now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceView {
    pub url: String,
    pub receiver: String,
    pub up: bool,
    pub stale: bool,
    pub last_trusted: Option<Time>,
    pub last_error: Option<String>,
    /// Until then an alert's absence ends nothing: the pipeline restarted lately.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_until: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlertsView {
    pub source: SourceView,
    pub alerts: Vec<SeenAlert>,
}

/// Body of `POST /api/v1/nodes/{id}/failures`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FailureReport {
    pub job: String,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub occurred_at: Option<Time>,
}

/// Body of `POST /api/v1/nodes/{id}/conditions/{type}/clear`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClearRequest {
    #[serde(default)]
    pub reason: String,
}

/// `POST /api/v1/nodes/{id}/{cordon|uncordon}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperateRequest {
    #[serde(default)]
    pub reason: String,
}

/// `POST /api/v1/nodes/{id}/power`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerRequest {
    /// `status`, `on`, `off`, `cycle` or `reset`.
    pub action: String,
    /// Skip the graceful shutdown of `off`.
    #[serde(default)]
    pub force: bool,
}

/// `POST /api/v1/nodes/{id}/reboot`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RebootRequest {
    #[serde(default)]
    pub reason: String,
    /// Skip the graceful shutdown.
    #[serde(default)]
    pub force: bool,
}

/// `POST /api/v1/nodes/{id}/drain`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainRequest {
    /// Also move the running work (it restarts from the beginning elsewhere).
    #[serde(default)]
    pub active: bool,
    #[serde(default)]
    pub reason: String,
}

/// `GET /api/v1/nodes/{id}/events`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventsView {
    pub events: Vec<StoredEvent>,
    /// Present while more events match; pass it back as `pageToken`.
    pub next_page_token: Option<String>,
}

/// Every error the API answers: `{error, detail}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    pub detail: String,
}
