//! What the policy remembers of each node (its service state, its standing
//! conclusion, its queue) and across nodes (the replacement budget, restart counts),
//! and the words its events use.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{Action, Pending};
use crate::core::Time;

/// What hale keeps about a node's service state and the policy's view of it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePolicy {
    /// The conclusion of the last policy event, so a report that reaches the same
    /// conclusion records nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conclusion: Option<Conclusion>,
    /// Reports that carried a score (counted to 2): a first score never acts.
    #[serde(default)]
    pub scored_reports: u8,
    /// The count above changed since the node was last written (memory only; a
    /// clean stop writes it).
    #[serde(skip)]
    pub count_unsaved: bool,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::core::stamp::option"
    )]
    pub counted_report: Option<Time>,
    /// Who took the node out of service, why and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cordon: Option<Cordon>,
    /// The last uncordon by an operator: automation leaves the node alone for
    /// `cordonSuppressionMinutes` after it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::core::stamp::option"
    )]
    pub uncordoned_at: Option<Time>,
    /// hale replaced the machine that had this name then: for [`super::REPLACED_HOLD`]
    /// after, what alerts still say of the name is the old machine's, and nothing
    /// acts on it (see [`Ledger::replaced`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::core::stamp::option"
    )]
    pub replaced_at: Option<Time>,
    /// New work kept off (the scheduling gate): the policy's decision.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gated: bool,
    /// The orchestrator refused the gate decided (Fuzzball has none): the node
    /// is not gated, though the decision stands (asked again only when it
    /// changes).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gate_refused: bool,
    /// The orchestrator provisioned it (it may be terminated in `replace` mode).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub provisioned: bool,
    /// Allocations running on the node, as the orchestrator last said.
    #[serde(default)]
    pub allocations: u32,
    /// The orchestrator has counted the node's allocations since it was taken out
    /// of service: only then may `allocations` say it is empty.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub work_counted: bool,
    /// Fault classes whose eviction ran during their current episode.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub evicted: BTreeSet<String>,
    /// Actions decided and not yet confirmed done: written with the decision, so a
    /// crash between deciding and acting neither loses nor repeats one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<Pending>,
    /// The id of the last action decided for this node.
    #[serde(default)]
    pub last_action: u64,
    /// Since when the score has been at or above `drainBelow` while gated.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::core::stamp::option"
    )]
    pub ungate_since: Option<Time>,
    /// Since when the score has been at or above `cordonBelow` while a conclusion
    /// stood.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::core::stamp::option"
    )]
    pub recovered_since: Option<Time>,
    /// A refused cordon or termination waits until then before it is tried again.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::core::stamp::option"
    )]
    pub retry_after: Option<Time>,
    /// Why the orchestrator refused it, for the halts that say so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// The reboot flow, queued or under way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<super::Flow>,
    /// When the node's last reboot flow failed: no alert re-admits it for
    /// `remediation.retryAfter`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::core::stamp::option"
    )]
    pub flow_failed_at: Option<Time>,
    /// The condition a reboot was recommended (observe) or refused for: said
    /// once per episode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommended_reboot: Option<String>,
    /// A fence under way, or waiting for the node to report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<super::Fence>,
    /// When the node was fenced in the last day (`fencing.perDay`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fences: Vec<Time>,
    /// A refusal (or recommendation) to fence was recorded for this silence.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fence_held: bool,
    /// What was recorded was observe's "would fence", not a refusal: said again
    /// when the other becomes true (another node of the pool came back).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fence_recommended: bool,
    /// The last fence that never got the node off: tried again after `fencing.after`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::core::stamp::option"
    )]
    pub fence_failed_at: Option<Time>,
    /// The power-off of a fence withdrawn because the node reported again before
    /// it was done: should it land all the same (it was under way), the machine is
    /// powered on again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence_withdrawn: Option<u64>,
    /// Reboots alerts asked for that succeeded in the last day: a fault a reboot
    /// does not cure is not rebooted without end.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reboots: Vec<Time>,
    /// An operator powered the machine off (`hale node power off`): neither a
    /// fence nor a flow powers it on until an operator does.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub powered_off: bool,
    /// When an operator last powered the machine on (`on`, `cycle`, `reset`): a
    /// silence is counted toward a fence from then, so a machine just started is
    /// given `fencing.after` to boot and report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub powered_on_at: Option<Time>,
    /// The orchestrator says it is not ready, whatever its status shows.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not_ready: bool,
    /// The orchestrator shows its work released (see [`super::Observed::released`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub released: bool,
    /// The orchestrator's own health of the node (Fuzzball's), shown beside hale's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orchestrator_health: Option<super::OrchestratorHealth>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cordon {
    pub by: Actor,
    pub reason: String,
    pub at: Time,
    /// A drain followed the cordon (passive unless an operator asked otherwise).
    #[serde(default)]
    pub drained: bool,
    /// The orchestrator refused the drain that followed: the node is cordoned, not
    /// drained, and the policy does not ask again while this cordon lasts (an
    /// operator's drain does).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drain_refused: bool,
    /// The reason an operator gave their drain, where it is not the cordon's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_reason: Option<String>,
}

impl Cordon {
    /// A drain follows the cordon, asked afresh.
    pub fn drain(&mut self) {
        self.drained = true;
        self.drain_refused = false;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Actor {
    Hale,
    Operator,
}

pub(super) fn hale_actor() -> Actor {
    Actor::Hale
}

impl Actor {
    pub fn as_str(self) -> &'static str {
        match self {
            Actor::Hale => "hale",
            Actor::Operator => "operator",
        }
    }
}

/// What the policy concluded about a node; a policy event marks each change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Conclusion {
    /// `observe`: what enforcement would do.
    Recommended { action: Verdict },
    /// Done (for `replace`: drained and waiting for the node to empty, or terminating).
    Acted { action: Verdict, waiting: bool },
    /// A guardrail stops the action.
    Halted {
        action: Verdict,
        guardrail: Guardrail,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// A fault eviction (`evictOnFaultClasses`, in every mode), below the score's
    /// verdicts: a score's halt after a held eviction replaces it, while an
    /// eviction held after a score's halt is said as itself (the step-down rule in
    /// `decide`).
    Evict,
    Cordon,
    Drain,
    Replace,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Evict => "evict",
            Verdict::Cordon => "cordon",
            Verdict::Drain => "drain",
            Verdict::Replace => "replace",
        }
    }
}

/// Named in the API as in events and the CLI ([`Guardrail::as_str`]); the
/// aliases read records written before the names were the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Guardrail {
    /// Acting would take more than `maxUnavailablePercent` of the pool out of service.
    #[serde(rename = "maxUnavailablePercent", alias = "maxUnavailable")]
    MaxUnavailable,
    /// An operator uncordoned the node less than `cordonSuppressionMinutes` ago.
    #[serde(rename = "cordonSuppressionMinutes", alias = "suppressed")]
    Suppressed,
    /// `replace` terminates only provisioned nodes.
    NotProvisioned,
    /// `replace` terminates only nodes hale itself took out of service.
    #[serde(rename = "notTakenOutByHale", alias = "notOurs")]
    NotOurs,
    /// `maxReplacementsPerHour` of the pool were replaced in the last hour.
    #[serde(rename = "maxReplacementsPerHour", alias = "replacementBudget")]
    ReplacementBudget,
    /// The orchestrator refused to terminate the node.
    TerminationRejected,
    /// The orchestrator refused to cordon the node (Fuzzball will not drain a node
    /// that is not ready): asked again after a while, not at once.
    CordonRefused,
}

impl Guardrail {
    pub fn as_str(self) -> &'static str {
        match self {
            Guardrail::MaxUnavailable => "maxUnavailablePercent",
            Guardrail::Suppressed => "cordonSuppressionMinutes",
            Guardrail::NotProvisioned => "notProvisioned",
            Guardrail::NotOurs => "notTakenOutByHale",
            Guardrail::ReplacementBudget => "maxReplacementsPerHour",
            Guardrail::TerminationRejected => "terminationRejected",
            Guardrail::CordonRefused => "cordonRefused",
        }
    }
}

impl NodePolicy {
    /// New work is kept off: the gate decided, and not refused.
    pub fn gate_holds(&self) -> bool {
        self.gated && !self.gate_refused
    }

    /// Queue `action` for the orchestrator.
    pub fn push(&mut self, action: Action) {
        self.last_action += 1;
        self.pending.push(Pending {
            id: self.last_action,
            action,
        });
    }

    pub(super) fn has(&self, action: &Action) -> bool {
        self.pending.iter().any(|p| p.action == *action)
    }
}

/// What the guardrails count across nodes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ledger {
    /// Terminations per pool in the last hour (`maxReplacementsPerHour`).
    #[serde(default)]
    pub replacements: BTreeMap<String, Vec<Time>>,
    /// How often each workload owner was moved by a fault eviction
    /// (`maxEvictionRestarts`). Stored one row per owner, written when it changes,
    /// and forgotten `forgetAfter` after the owner's last move.
    #[serde(default, skip_serializing, deserialize_with = "legacy_moves")]
    pub moves: BTreeMap<String, Moves>,
    /// Reboot flows that failed in the last hour (`remediation.maxFailuresPerHour`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flow_failures: Vec<Time>,
    /// Names hale terminated, and when, for [`super::REPLACED_HOLD`]: a record made under
    /// one meanwhile (the orchestrator still lists it, or its alerts still fire)
    /// takes the time as its `replaced_at`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replaced: BTreeMap<String, Time>,
}

/// The fault evictions that moved one workload owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Moves {
    pub count: u32,
    /// When it was last moved (unknown for counts an older store kept).
    pub last: Option<Time>,
}

/// Older stores kept the counts inside the ledger, without times.
fn legacy_moves<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, Moves>, D::Error> {
    let counts = BTreeMap::<String, u32>::deserialize(d)?;
    Ok(counts
        .into_iter()
        .map(|(owner, count)| (owner, Moves { count, last: None }))
        .collect())
}

impl Ledger {
    /// How often each owner was moved, as [`crate::orchestrator::plan_eviction`]
    /// reads it.
    pub fn move_counts(&self) -> BTreeMap<String, u32> {
        self.moves
            .iter()
            .map(|(o, m)| (o.clone(), m.count))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Guardrail;

    #[test]
    fn guardrails_are_named_as_their_events_name_them_and_old_records_still_read() {
        for g in [
            Guardrail::MaxUnavailable,
            Guardrail::Suppressed,
            Guardrail::NotProvisioned,
            Guardrail::NotOurs,
            Guardrail::ReplacementBudget,
            Guardrail::TerminationRejected,
            Guardrail::CordonRefused,
        ] {
            let json = serde_json::to_string(&g).unwrap();
            assert_eq!(json, format!("\"{}\"", g.as_str()));
            assert_eq!(serde_json::from_str::<Guardrail>(&json).unwrap(), g);
        }
        for (old, g) in [
            ("maxUnavailable", Guardrail::MaxUnavailable),
            ("suppressed", Guardrail::Suppressed),
            ("notOurs", Guardrail::NotOurs),
            ("replacementBudget", Guardrail::ReplacementBudget),
        ] {
            assert_eq!(
                serde_json::from_str::<Guardrail>(&format!("\"{old}\"")).unwrap(),
                g
            );
        }
    }
}
