//! The JSON shapes of the HTTP API (DESIGN §11), shared by the server that renders them
//! and the CLI that reads them.

use serde::{Deserialize, Serialize};

use crate::core::policy::{Conclusion, Cordon, Fence, Flow, OrchestratorHealth, RECOVERY_HOLD};
use crate::core::settings::Settings;
use crate::core::{Deduction, Health, Name, Node, Severity, Status, Time};
use crate::store::StoredEvent;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionView {
    #[serde(rename = "type")]
    pub ctype: Name,
    pub reason: Name,
    pub severity: Severity,
    pub message: String,
    pub first_seen: Time,
    pub last_seen: Time,
    pub observations: u64,
    pub sticky: bool,
    pub suppressed: bool,
    pub fault_class: Name,
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
    pub scored_by: Option<Name>,
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
    /// The scheduling gate: new work kept off while the score is below drainBelow
    /// (false where the orchestrator refused it: it has none).
    pub gated: bool,
    /// The policy's standing conclusion about the node, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<Conclusion>,
    /// When a recovered node's standing conclusion lifts, unless it degrades again
    /// first (a recovery must hold 15 minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_lifts_at: Option<Time>,
    /// The conditions that hold the policy back (`heartbeat_missed`,
    /// `telemetry_stale`, `collector_failed`): hale neither acts on nor decides
    /// for a node it cannot fully see, so `policy` is the last one decided.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policy_held_by: Vec<String>,
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
    /// Actions decided (by an operator or the policy) and not yet done, in the
    /// order they will be done: a status of `Cordoned` with a `cordon` here is
    /// hale's record, not yet the orchestrator's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PendingView>,
}

/// An action decided and not yet done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingView {
    /// Its id among the node's actions (not shown: only the server matches it).
    #[serde(skip)]
    pub id: u64,
    /// `cordon`, `uncordon`, `drain`, … (as `hale_policy_actions_total` names it).
    pub action: String,
    /// Why its last try failed, while it is to be tried again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_try: Option<Time>,
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
            gated: node.policy.gate_holds(),
            policy: node.policy.conclusion.clone(),
            policy_lifts_at: node
                .policy
                .recovered_since
                .filter(|_| node.policy.conclusion.is_some())
                .map(|since| since + RECOVERY_HOLD),
            policy_held_by: crate::core::BLIND_CONDITIONS
                .iter()
                .filter(|c| node.conditions.contains_key(**c))
                .map(|c| c.to_string())
                .collect(),
            remediation: node.policy.flow.clone(),
            fence: node.policy.fence.clone(),
            orchestrator_health: node.policy.orchestrator_health.clone(),
            pending: node
                .policy
                .pending
                .iter()
                .map(|p| PendingView {
                    id: p.id,
                    action: p.action.name().to_string(),
                    last_error: None,
                    last_try: None,
                })
                .collect(),
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
    pub scored_by: Option<Name>,
    pub conditions: Vec<Name>,
    pub last_report: Option<Time>,
    pub jobs: u64,
}

/// `GET /api/v1/nodes`: one page, in the order asked (id by default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeList {
    pub nodes: Vec<NodeSummary>,
    /// Present while more nodes match; pass it back as `pageToken`.
    #[serde(default)]
    pub next_page_token: Option<String>,
    /// How many nodes match the filters, on every page (only when `total=true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// With `allClusters=true`: the federation members that could not be asked,
    /// whose nodes the listing lacks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreachable: Vec<Unreachable>,
}

/// A cluster a listing could not include, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Unreachable {
    pub cluster: String,
    pub error: String,
}

/// What `GET /api/v1/nodes` orders by: `id`, `hostname`, `status`, `health`
/// (Degraded, Unknown, Healthy) or `score` (unscored first, then lowest first);
/// `-` before the name reverses it. Ties go by id.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sort {
    pub key: SortKey,
    pub descending: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SortKey {
    #[default]
    Id,
    Hostname,
    Status,
    Health,
    Score,
}

impl SortKey {
    pub const ALL: [SortKey; 5] = [
        SortKey::Id,
        SortKey::Hostname,
        SortKey::Status,
        SortKey::Health,
        SortKey::Score,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SortKey::Id => "id",
            SortKey::Hostname => "hostname",
            SortKey::Status => "status",
            SortKey::Health => "health",
            SortKey::Score => "score",
        }
    }
}

impl Sort {
    /// `score`, `-score`, …; `None` for anything else.
    pub fn parse(text: &str) -> Option<Sort> {
        let (descending, name) = match text.strip_prefix('-') {
            Some(name) => (true, name),
            None => (false, text),
        };
        let key = SortKey::ALL
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(name))?;
        Some(Sort { key, descending })
    }

    pub fn name(self) -> String {
        format!(
            "{}{}",
            if self.descending { "-" } else { "" },
            self.key.as_str()
        )
    }

    /// Where a node falls in this order: a rank, then text, then its id.
    pub fn key<'a>(
        self,
        id: &'a str,
        hostname: &'a str,
        status: Status,
        health: Health,
        score: Option<u8>,
    ) -> Key<'a> {
        let (rank, text) = match self.key {
            SortKey::Id => (0, ""),
            SortKey::Hostname => (0, hostname),
            SortKey::Status => (status_rank(status), ""),
            SortKey::Health => (health_rank(health), ""),
            SortKey::Score => (score.map_or(0, |s| u16::from(s) + 1), ""),
        };
        (rank, text, id)
    }
}

/// A node's position in a sort: (rank, text, id), compared in that order.
pub type Key<'a> = (u16, &'a str, &'a str);

/// Worst first: what needs a look leads an ascending sort.
pub fn health_rank(h: Health) -> u16 {
    match h {
        Health::Degraded => 0,
        Health::Unknown => 1,
        Health::Healthy => 2,
    }
}

/// Out of service first.
pub fn status_rank(s: Status) -> u16 {
    match s {
        Status::Offline => 0,
        Status::NotReady => 1,
        Status::Cordoned => 2,
        Status::Ready => 3,
    }
}

/// A node's position in a sorted listing; a page token continues after one.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Place {
    pub rank: u16,
    pub text: String,
    pub id: String,
}

impl Place {
    pub fn of(key: Key<'_>) -> Place {
        Place {
            rank: key.0,
            text: key.1.to_string(),
            id: key.2.to_string(),
        }
    }

    pub fn key(&self) -> Key<'_> {
        (self.rank, &self.text, &self.id)
    }
}

/// Which nodes `GET /api/v1/nodes` lists.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeQuery {
    pub page_size: usize,
    /// Continue after this place (from a page's token, in the same sort).
    pub after: Option<Place>,
    pub health: Option<Health>,
    pub status: Option<Status>,
    /// The pool whose settings price the node (`cluster` for none).
    pub pool: Option<String>,
    pub cluster: Option<String>,
    /// Only nodes whose id or hostname holds this, in any case.
    pub search: Option<String>,
    pub sort: Sort,
    /// Count every match (`total`), which costs a look at every node.
    pub count: bool,
    /// This cluster's nodes, then every federation member's.
    pub all_clusters: bool,
}

/// `text` holds `needle` (already lowercase), case ignored: byte by byte for an
/// ASCII text (ids mostly are), else through its lowercase.
pub fn holds(text: &str, needle: &str) -> bool {
    if !text.is_ascii() {
        return text.to_lowercase().contains(needle);
    }
    let (hay, needle) = (text.as_bytes(), needle.as_bytes());
    needle.is_empty()
        || hay.windows(needle.len()).any(|w| {
            w.iter()
                .zip(needle)
                .all(|(a, b)| a.to_ascii_lowercase() == *b)
        })
}

/// A page token (opaque to clients): for the id order, the last id hex-encoded; for
/// another order, `j` and the hex of `[sort, rank, text, id]` in JSON.
pub fn page_token(sort: Sort, last: &Place) -> String {
    use crate::hex;
    if sort == Sort::default() {
        return hex(last.id.as_bytes());
    }
    let json = serde_json::json!([sort.name(), last.rank, last.text, last.id]);
    format!("j{}", hex(json.to_string().as_bytes()))
}

/// The place a [`page_token`] continues after, in `sort`; `None` for a token this
/// server did not issue, or issued for another order.
pub fn page_after(sort: Sort, token: &str) -> Option<Place> {
    use crate::unhex;
    match token.strip_prefix('j') {
        None if sort == Sort::default() => Some(Place {
            id: String::from_utf8(unhex(token)?).ok()?,
            ..Place::default()
        }),
        Some(json) if sort != Sort::default() => {
            let (name, rank, text, id): (String, u16, String, String) =
                serde_json::from_slice(&unhex(json)?).ok()?;
            (name == sort.name()).then_some(Place { rank, text, id })
        }
        _ => None,
    }
}

/// `GET /api/v1/clusters`: this hale's cluster, then each federation member's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterList {
    pub clusters: Vec<ClusterView>,
}

/// One cluster as the overview shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterView {
    pub name: String,
    /// The federation member that answers for it; absent for this hale's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// Where its own hale is (members only), for its UI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// `null` when the cluster could not be asked: no health at all, never the
    /// last answer.
    pub health: Option<ClusterHealth>,
    /// Why there is no health.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A cluster's health as its own hale holds it now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterHealth {
    /// The worst state present: "All healthy", "2 degraded, worst 40", "1 unknown".
    pub state: String,
    pub nodes: u64,
    pub healthy: u64,
    pub degraded: u64,
    pub unknown: u64,
    /// The lowest score of any node (`null`: none is scored).
    pub lowest_score: Option<u8>,
    /// Whether hale trusts its alert source.
    pub source: SourceView,
    /// Nodes whose standing conclusion is a halt: what a guardrail stopped.
    pub halts: Vec<Halt>,
    /// The reboot flow and fencing: queued, under way, and what holds admissions.
    pub remediations: RemediationCounts,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Halt {
    pub node: String,
    pub action: crate::core::policy::Verdict,
    pub guardrail: crate::core::policy::Guardrail,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemediationCounts {
    pub queued: u64,
    pub in_flight: u64,
    pub fencing: u64,
    #[serde(default)]
    pub blocked: Vec<String>,
}

/// The worst state present, as the overview says it: "No nodes", "All healthy",
/// "2 degraded, worst 40", "1 unknown", or both of the last two.
pub fn worst_state(degraded: u64, worst_degraded: Option<u8>, unknown: u64, nodes: u64) -> String {
    if nodes == 0 {
        return "No nodes".into();
    }
    let mut parts = Vec::new();
    if degraded > 0 {
        parts.push(match worst_degraded {
            Some(score) => format!("{degraded} degraded, worst {score}"),
            None => format!("{degraded} degraded"),
        });
    }
    if unknown > 0 {
        parts.push(format!("{unknown} unknown"));
    }
    if parts.is_empty() {
        "All healthy".into()
    } else {
        parts.join(", ")
    }
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
    /// Contract labels hale read otherwise than written, and how.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Whether hale trusts its alert source right now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceView {
    pub url: String,
    pub receiver: String,
    /// Whether hale polls Alertmanager (`false`: webhook only, where `up` says
    /// nothing and trust comes from deliveries).
    #[serde(default = "polls")]
    pub polling: bool,
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

fn polls() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlertsView {
    pub source: SourceView,
    pub alerts: Vec<SeenAlert>,
}

/// The most an operator's reason, or a failure report's job or reason, may hold, in
/// bytes: it is kept on the node and in its events, written to the store with them.
pub const MAX_REASON: usize = 1024;

fn bounded<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    within(String::deserialize(d)?)
}

fn bounded_opt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Option::<String>::deserialize(d)?.map(within).transpose()
}

fn within<E: serde::de::Error>(text: String) -> Result<String, E> {
    if text.len() > MAX_REASON {
        return Err(E::custom(format!(
            "{} bytes: at most {MAX_REASON} are kept",
            text.len()
        )));
    }
    Ok(text)
}

/// Body of `POST /api/v1/nodes/{id}/failures`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FailureReport {
    #[serde(deserialize_with = "bounded")]
    pub job: String,
    #[serde(default, deserialize_with = "bounded_opt")]
    pub reason: Option<String>,
    #[serde(default, deserialize_with = "rfc3339_opt")]
    pub occurred_at: Option<Time>,
}

/// An RFC 3339 time, or a refusal that says that is what is expected.
fn rfc3339_opt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Time>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(d)?;
    let refused = |shown: &str| {
        let shown: String = shown.chars().take(64).collect();
        serde::de::Error::custom(format!(
            "{shown} is not an RFC 3339 time (such as 2026-12-06T09:30:00Z)"
        ))
    };
    match value {
        None | Some(serde_json::Value::Null) => Ok(None),
        // As chrono reads a time (a space for the `T` too).
        Some(serde_json::Value::String(text)) => text
            .parse::<chrono::DateTime<chrono::FixedOffset>>()
            .map(|t| Some(t.to_utc()))
            .map_err(|_| refused(&format!("{text:?}"))),
        Some(other) => Err(refused(&other.to_string())),
    }
}

/// Body of `POST /api/v1/nodes/{id}/conditions/{type}/clear`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClearRequest {
    #[serde(default, deserialize_with = "bounded")]
    pub reason: String,
}

/// `POST /api/v1/nodes/{id}/{cordon|uncordon}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperateRequest {
    #[serde(default, deserialize_with = "bounded")]
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
    #[serde(default, deserialize_with = "bounded")]
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
    #[serde(default, deserialize_with = "bounded")]
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

/// How a cordon's drain reads beside it: `, drained`, `, drain refused`, or nothing.
pub fn drain_note(c: &Cordon) -> &'static str {
    match (c.drained, c.drain_refused) {
        (true, _) => ", drained",
        (false, true) => ", drain refused",
        (false, false) => "",
    }
}

#[cfg(test)]
mod tests {
    use super::holds;

    /// A search ignores case beyond ASCII too (`?q=É` finds `uni-é`), the
    /// needle lowercased as the query parser leaves it.
    #[test]
    fn a_search_ignores_case_in_any_script() {
        for (text, query, found) in [
            ("rack1/N:3", "N:3", true),
            ("spare-1", "SPARE", true),
            ("uni-é", "É", true),
            ("UNI-É", "uni-é", true),
            ("Straße-1", "STRASSE", false),
            ("gpu-14", "gpu-15", false),
            ("gpu-14", "", true),
        ] {
            assert_eq!(holds(text, &query.to_lowercase()), found, "{text} {query}");
        }
    }
}
