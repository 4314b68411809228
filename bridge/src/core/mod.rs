//! The decision core: node conditions, heartbeats, trust in the alert source, the
//! reliability score and health state. Pure — state, configuration and `now` in; new
//! state and events out. No clock, no I/O, no async.

mod clock;
mod conditions;
mod events;
mod heartbeats;
mod ingest;
pub mod labels;
mod outcome;
pub mod policy;
pub mod replay;
pub mod settings;
mod small_map;
pub mod spread;
mod stamp;
mod step;
mod sweep;
#[cfg(test)]
mod tests;
mod trust;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use settings::Settings;

pub use conditions::MAX_CONDITIONS;
pub use events::{EVENT_TYPES, Event, EventKind};
pub use heartbeats::HeartbeatsDue;
pub use ingest::{Listed, NodeGroups, PollAnswer};
pub use outcome::{CoreError, Outcome};
pub use small_map::SmallMap;
pub use trust::Trust;

pub type Time = DateTime<Utc>;

/// Conditions that mean hale cannot fully see a node. They never cost points, keep a
/// node Unknown unless real fault evidence makes it Degraded, and are never a fault.
pub const BLIND_CONDITIONS: [&str; 3] = [HEARTBEAT_MISSED, TELEMETRY_STALE, COLLECTOR_FAILED];
pub const HEARTBEAT_MISSED: &str = "heartbeat_missed";
/// How stale the stored report and heartbeat times of a node that only reported may
/// grow: what they decide after a restart (retiring after `forgetAfter`, a missed
/// heartbeat only once a trusted poll has said who is alive) does not need them
/// fresher, and a 100,000-node fleet does not write 100,000 rows every poll.
pub const REPORTS_SAVED_EVERY: std::time::Duration = std::time::Duration::from_secs(300);
pub const TELEMETRY_STALE: &str = "telemetry_stale";
pub const COLLECTOR_FAILED: &str = "collector_failed";

/// The condition vocabulary every reported node publishes a metric series for, so a
/// raised condition moves an existing series instead of creating one.
pub const KNOWN_CONDITIONS: [&str; 9] = [
    "memory_errors",
    "machine_check_errors",
    "disk_degraded",
    "gpu_ecc_errors",
    "gpu_xid_errors",
    "gpu_throttling",
    HEARTBEAT_MISSED,
    TELEMETRY_STALE,
    COLLECTOR_FAILED,
];

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    #[default]
    Warning,
    Critical,
}

impl Severity {
    /// Metric value: 1 info, 2 warning, 3 critical (0 is "clear").
    pub fn level(self) -> u8 {
        self as u8 + 1
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Health {
    Healthy,
    Degraded,
    Unknown,
}

impl Health {
    pub const ALL: [Health; 3] = [Health::Healthy, Health::Degraded, Health::Unknown];

    pub fn as_str(self) -> &'static str {
        match self {
            Health::Healthy => "Healthy",
            Health::Degraded => "Degraded",
            Health::Unknown => "Unknown",
        }
    }
}

/// Service status of a node. Without an orchestrator every known node is `Ready`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Status {
    #[default]
    Ready,
    NotReady,
    Cordoned,
    Offline,
}

/// A short name held inline, without an allocation of its own up to 24 bytes: a
/// reason, a fault class, a fingerprint, a condition type, an alertname. A fleet
/// carries several per alert, and most are that short.
pub type Name = compact_str::CompactString;

/// One alert feeding a condition, keyed by its fingerprint in [`Condition::sources`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Source {
    pub reason: Name,
    pub severity: Severity,
    pub message: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suppressed: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sticky: bool,
    pub fault_class: Name,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<String>,
    /// When Alertmanager would expire the alert unless Prometheus sent it again
    /// (its `endsAt` in the last poll that listed it).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "stamp::option"
    )]
    pub expires: Option<Time>,
    /// The alert left Alertmanager, possibly by expiring, when the watchdog had been
    /// refreshed this many times ([`Trust::watchdog_refreshes`]); the source ends
    /// once it has been refreshed twice more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vanished: Option<u64>,
    /// When hale first saw the alert (a hold keeps only alerts older than it).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "stamp::option"
    )]
    pub since: Option<Time>,
    /// Webhook only: when a delivery last named the alert. With no full picture to
    /// reconcile against, a source no delivery confirmed for `forgetAfter` has lost
    /// its resolution and is dropped.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "stamp::option"
    )]
    pub delivered: Option<Time>,
    /// The alert's `startsAt` when the source was taken: a resolution of an
    /// episode that started before it is an older episode's, and ends nothing.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "stamp::option"
    )]
    pub started: Option<Time>,
    /// How the alert shows as a Node condition (Sciuro's way); `None` for an alert
    /// Sciuro refuses, which is left off the Node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<labels::Notice>,
}

/// A raised condition: one episode of one (node, type).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Condition {
    /// The charged reason: what the penalty table prices. Of the reasons that fed the
    /// condition during its episode, the one of the worst severity, and among those
    /// the one with the most points; it only ever moves up while the condition is
    /// raised.
    pub reason: Name,
    /// Worst severity seen during the episode; never downgrades while raised.
    pub severity: Severity,
    /// The charged reason's latest message first, then each other source's.
    pub message: String,
    /// The latest message of an alert with the charged reason, kept after that
    /// alert ended so the message always explains the points.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub charged_message: String,
    #[serde(with = "stamp")]
    pub first_seen: Time,
    #[serde(with = "stamp")]
    pub last_seen: Time,
    pub observations: u64,
    /// Stays raised after its alerts end, until an operator clears it.
    pub sticky: bool,
    pub fault_class: Name,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<String>,
    /// Alerts currently feeding it, by fingerprint. Empty for a sticky condition whose
    /// alerts ended and for the conditions hale raises itself.
    #[serde(default)]
    pub sources: SmallMap<Name, Source>,
    /// Every alert that fed it, when it last had any, was silenced or inhibited: a
    /// sticky condition those alerts left stays suppressed until a live alert feeds
    /// it or an operator clears it (a silenced fault that ended is no live fault).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub silenced: bool,
    /// Raised by silenced or inhibited alerts, and no live one has fed it since: its
    /// latches (severity, charge, stickiness, priority, remediation) show what they
    /// say, and the first live alert starts them over. Otherwise they hold what live
    /// alerts said, and silenced ones add nothing. (Stored only when true: a record
    /// written before it reads as fed live.)
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub silenced_only: bool,
    /// Alerts feeding it beyond the sources kept ([`conditions::MAX_SOURCES`]), as
    /// the last poll counted them: said in its message and events.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unkept: u32,
}

impl Condition {
    /// Fed only by silenced or inhibited alerts (or, sticky with its alerts ended,
    /// last fed so): shown, but costs nothing and triggers nothing.
    pub fn suppressed(&self) -> bool {
        if self.sources.is_empty() {
            self.silenced
        } else {
            self.sources.values().all(|s| s.suppressed)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    #[serde(with = "stamp")]
    pub last: Time,
    #[serde(with = "secs")]
    pub interval: Duration,
}

/// Attributed job failures: the total is never reset; only its deduction decays.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Failures {
    pub total: u64,
    #[serde(default, with = "stamp::option")]
    pub last: Option<Time>,
    /// Count per reason (the condition or cause the failure was attributed to).
    #[serde(default)]
    pub by_reason: SmallMap<String, u64>,
    /// `job_failure` alert instances already counted ([`failure_instance`]).
    #[serde(default, deserialize_with = "counted_instances")]
    pub counted_alerts: BTreeSet<String>,
}

/// A `job_failure` alert instance: `fingerprint@startsAt`, the time in UTC to the
/// millisecond. Alertmanager's API gives `startsAt` to the millisecond and its
/// webhook to the nanosecond; cut to the API's precision, an instance polled and the
/// same instance delivered are one. A time that does not read stays as sent.
/// A time as messages and the CLI write it: RFC 3339 in UTC to the second
/// (`2026-12-07T12:03:15Z`), as `hale node events` shows an event's time.
pub fn shown_time(t: Time) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

pub fn failure_instance(fingerprint: &str, starts_at: &str) -> String {
    match labels::rfc3339(starts_at) {
        // Written to the millisecond, the rest cut off.
        Some(t) => format!(
            "{fingerprint}@{}",
            t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        ),
        None => format!("{fingerprint}@{starts_at}"),
    }
}

/// Instances as stored; a record from before [`failure_instance`] kept `startsAt` as
/// sent, and is read in its form, so an instance already counted is not counted again.
fn counted_instances<'de, D: serde::Deserializer<'de>>(d: D) -> Result<BTreeSet<String>, D::Error> {
    let stored = BTreeSet::<String>::deserialize(d)?;
    Ok(stored
        .into_iter()
        .map(|key| match key.rsplit_once('@') {
            Some((fingerprint, at)) => failure_instance(fingerprint, at),
            None => key,
        })
        .collect())
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deduction {
    pub reason: Name,
    pub points: u32,
}

/// The name the failure-tally line carries in a breakdown.
pub const FAILURE_DEDUCTION: &str = "attributed job failures";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Score {
    pub value: u8,
    pub breakdown: Vec<Deduction>,
    /// `cluster` or the pool whose settings priced it.
    pub scored_by: Name,
}

/// Everything hale knows about one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Orchestrator or inventory labels (pool selectors match these).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub status: Status,
    #[serde(default)]
    pub conditions: SmallMap<Name, Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat: Option<Heartbeat>,
    /// Signals not checked on this node, by the fingerprint of the alert saying so.
    #[serde(default)]
    pub unavailable: SmallMap<String, String>,
    #[serde(default)]
    pub failures: Failures,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<Score>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "stamp::option"
    )]
    pub last_report: Option<Time>,
    /// When this process last had the report and heartbeat times saved (memory only):
    /// a poll that merely confirms a node saves them every [`REPORTS_SAVED_EVERY`].
    #[serde(skip)]
    pub reports_saved: Option<Time>,
    /// Condition types outside [`KNOWN_CONDITIONS`] this node has carried, with when
    /// each was last raised or cleared, so their metric series persist at 0 after
    /// they clear — for `forgetAfter`, and never more than [`MAX_SEEN_TYPES`].
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "seen_types"
    )]
    pub seen_types: BTreeMap<String, Time>,
    /// Where hale learned of the node.
    #[serde(default)]
    pub known_from: Origin,
    /// When this record began: a node never reported is retired counting from here.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "stamp::option"
    )]
    pub known_since: Option<Time>,
    /// The orchestrator's id of the machine behind the name (a Kubernetes Node's
    /// uid): a new one under the same name is a new machine with a record of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Service state and the policy's memory of the node.
    #[serde(default)]
    pub policy: policy::NodePolicy,
    /// Alert episodes a resolution ended lately, by fingerprint: a firing
    /// notification of one of them is an Alertmanager HA peer's older picture,
    /// sent after the resolution, and raises nothing.
    #[serde(default, skip_serializing_if = "SmallMap::is_empty")]
    pub ended: SmallMap<Name, Ended>,
}

/// An alert episode a resolution ended: its `startsAt` (Alertmanager's clock)
/// and when hale took the resolution (hale's).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Ended {
    #[serde(with = "stamp")]
    pub started: Time,
    #[serde(with = "stamp")]
    pub at: Time,
}

/// Where hale learned of a node. Only a node known from alerts alone is retired when
/// they stop naming it; the others leave with the list that named them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    #[default]
    Alerts,
    Inventory,
    Orchestrator,
}

impl Origin {
    /// The stronger of two origins: an orchestrator's word outranks the inventory's,
    /// which outranks the alerts'.
    pub fn max_known(self, other: Origin) -> Origin {
        let rank = |o: Origin| match o {
            Origin::Alerts => 0,
            Origin::Inventory => 1,
            Origin::Orchestrator => 2,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }
}

/// The most condition types outside [`KNOWN_CONDITIONS`] a node keeps series for.
pub const MAX_SEEN_TYPES: usize = 64;

/// `seen_types` as stored: a map of type to time, or (older stores) a list of types,
/// which count as long cleared.
fn seen_types<'de, D: serde::Deserializer<'de>>(d: D) -> Result<BTreeMap<String, Time>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Stored {
        Timed(BTreeMap<String, Time>),
        Listed(Vec<String>),
    }
    Ok(match Stored::deserialize(d)? {
        Stored::Timed(m) => m,
        Stored::Listed(l) => l.into_iter().map(|t| (t, epoch())).collect(),
    })
}

impl Node {
    /// Asks the processor for the memory this node's record sits in, some way
    /// ahead of a pass over the fleet reading it (see [`labels::Alert::prefetch_labels`]).
    pub(crate) fn prefetch(&self) {
        let start = std::ptr::from_ref(self).cast::<u8>();
        for at in (0..std::mem::size_of::<Node>()).step_by(64) {
            labels::prefetch(start.wrapping_add(at));
        }
    }

    pub fn new(id: &str) -> Node {
        Node {
            id: id.to_string(),
            hostname: None,
            labels: BTreeMap::new(),
            status: Status::Ready,
            conditions: SmallMap::new(),
            heartbeat: None,
            unavailable: SmallMap::new(),
            failures: Failures::default(),
            score: None,
            last_report: None,
            reports_saved: None,
            seen_types: BTreeMap::new(),
            known_from: Origin::Alerts,
            known_since: None,
            uid: None,
            policy: policy::NodePolicy::default(),
            ended: SmallMap::new(),
        }
    }

    /// Remember that this node carried `ctype` at `now` (see `seen_types`).
    pub fn saw(&mut self, ctype: &str, now: Time) {
        if KNOWN_CONDITIONS.contains(&ctype) {
            return;
        }
        match self.seen_types.get_mut(ctype) {
            Some(t) => *t = now,
            None => {
                self.seen_types.insert(ctype.to_string(), now);
                self.cap_seen_types();
            }
        }
    }

    /// Forget the oldest types beyond [`MAX_SEEN_TYPES`] that are not raised now.
    fn cap_seen_types(&mut self) {
        while self.seen_types.len() > MAX_SEEN_TYPES {
            let oldest = self
                .seen_types
                .iter()
                .filter(|(t, _)| !self.conditions.contains_key(t.as_str()))
                .min_by_key(|(_, at)| **at)
                .map(|(t, _)| t.clone());
            match oldest {
                Some(t) => self.seen_types.remove(&t),
                None => break,
            };
        }
    }

    /// Forget the condition types not raised since `before`, and the oldest beyond
    /// [`MAX_SEEN_TYPES`]. Returns whether any was forgotten.
    pub fn forget_types(&mut self, before: Time) -> bool {
        let n = self.seen_types.len();
        let conditions = &self.conditions;
        self.seen_types
            .retain(|t, at| *at >= before || conditions.contains_key(t.as_str()));
        self.cap_seen_types();
        self.seen_types.len() != n
    }

    /// Health state exactly as DESIGN §4: unscored → Unknown; real fault evidence at or
    /// below `degradedAtOrBelow` → Degraded even when hale is partly blind; blind →
    /// Unknown; else Healthy.
    pub fn health(&self, settings: &Settings) -> Health {
        let Some(score) = &self.score else {
            return Health::Unknown;
        };
        // Degraded takes evidence: a score nothing was deducted from is none, even
        // under `degradedAtOrBelow: 100` (which then degrades any deduction).
        if score.value < 100 && u32::from(score.value) <= settings.degraded_at_or_below {
            Health::Degraded
        } else if BLIND_CONDITIONS
            .iter()
            .any(|c| self.conditions.contains_key(*c))
        {
            Health::Unknown
        } else {
            Health::Healthy
        }
    }

    /// Points the failure tally costs at `now`: `failureTallyPenalty × total ×
    /// 2^(−hours since the most recent failure / half-life)`, rounded half away from
    /// zero (7.5 → 8).
    pub fn failure_deduction(&self, settings: &Settings, now: Time) -> u32 {
        let Some(last) = self.failures.last else {
            return 0;
        };
        let hours = ((now - last).num_milliseconds().max(0) as f64) / 3_600_000.0;
        let raw = settings.failure_tally_penalty
            * self.failures.total as f64
            * (-hours / settings.failure_tally_half_life_hours).exp2();
        raw.round() as u32
    }

    /// The score from scratch: 100 − Σ penalties of active, unsuppressed conditions −
    /// the failure deduction, clamped to 0..=100.
    pub fn compute_score(&self, settings: &Settings, now: Time) -> Score {
        let (value, parts) = self.price(settings, now);
        Score {
            value,
            breakdown: parts
                .into_iter()
                .map(|(reason, points)| Deduction {
                    reason: reason.into(),
                    points,
                })
                .collect(),
            scored_by: settings.name.as_str().into(),
        }
    }

    /// Whether `score` is what [`Node::compute_score`] would return now, checked
    /// without building a new one (the steady state of every poll).
    pub fn score_is(&self, score: &Score, settings: &Settings, now: Time) -> bool {
        if score.scored_by != settings.name {
            return false;
        }
        // The deductions, on the stack for any node with a sane number of conditions.
        const ON_STACK: usize = 16;
        let mut parts = [("", 0u32); ON_STACK];
        let mut n = 0;
        let tally = self.failure_deduction(settings, now);
        for part in self
            .penalties(settings)
            .chain((tally > 0).then_some((FAILURE_DEDUCTION, tally)))
        {
            if n == ON_STACK {
                return self.compute_score(settings, now) == *score;
            }
            parts[n] = part;
            n += 1;
        }
        let parts = &mut parts[..n];
        if parts.len() != score.breakdown.len() {
            return false;
        }
        let total: u32 = parts.iter().map(|(_, p)| p).sum();
        if 100u32.saturating_sub(total) as u8 != score.value {
            return false;
        }
        // The stored order is canonical: largest first, then by reason.
        parts.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        parts
            .iter()
            .zip(&score.breakdown)
            .all(|((reason, points), d)| *reason == d.reason && *points == d.points)
    }

    /// (reason, points) of each active, unsuppressed condition that costs points.
    fn penalties<'n, 's>(
        &'n self,
        settings: &'s Settings,
    ) -> impl Iterator<Item = (&'n str, u32)> + use<'n, 's> {
        self.conditions
            .iter()
            .filter(|(ctype, c)| !c.suppressed() && !BLIND_CONDITIONS.contains(&ctype.as_str()))
            .map(|(_, c)| (c.reason.as_str(), settings.penalty(&c.reason, c.severity)))
            .filter(|(_, points)| *points > 0)
    }

    /// The value and its deductions, largest first.
    fn price(&self, settings: &Settings, now: Time) -> (u8, Vec<(&str, u32)>) {
        let mut parts: Vec<(&str, u32)> = self.penalties(settings).collect();
        let tally = self.failure_deduction(settings, now);
        if tally > 0 {
            parts.push((FAILURE_DEDUCTION, tally));
        }
        parts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let total: u32 = parts.iter().map(|(_, p)| p).sum();
        (100u32.saturating_sub(total) as u8, parts)
    }
}

pub(super) fn is_zero(n: &u32) -> bool {
    *n == 0
}

pub(super) fn operator() -> String {
    "operator".into()
}

pub(super) fn epoch() -> Time {
    DateTime::<Utc>::UNIX_EPOCH
}

/// The whole fleet as the core sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Fleet {
    /// Each record boxed: a B-tree built in order keeps about half its slots free,
    /// and a free slot then costs a pointer, not a whole record.
    pub nodes: BTreeMap<String, Box<Node>>,
    pub trust: Trust,
    /// What the policy's guardrails count across nodes.
    pub ledger: policy::Ledger,
    /// When the sweep last looked over the fleet (this process's memory only).
    pub swept_at: Option<Time>,
    /// Nodes whose score carries a failure deduction, which decays with time: what a
    /// tick rescores (`None`: not counted yet).
    pub decaying: Option<std::collections::BTreeSet<String>>,
    /// Nodes remediation looks at every tick: a condition asks for a reboot, or it
    /// has a flow or a recommendation recorded (`None`: not gathered yet). A step
    /// adds each node it changed that asks, an operator's reboot its node, and
    /// remediation drops what it finds with nothing left to do.
    pub remediation_watch: Option<std::collections::BTreeSet<String>>,
    /// Before when no node's heartbeat can be late (`None`: look at every node).
    pub heartbeats_due: Option<HeartbeatsDue>,
    /// The pools' occupancy as the last whole policy pass counted it, kept up to date
    /// by the policy's own decisions; `None` after anything else changed a node's
    /// service state, pool or presence, so the next step counts afresh.
    pub pools: Option<policy::Pools>,
    /// When the policy last passed over every node (a tick passes it at most every
    /// ten seconds; this process's memory only).
    pub whole_pass_at: Option<Time>,
    /// Whether every score may be stale (a fleet just made or loaded, settings just
    /// changed): the next poll rescores every node, not only what it changed.
    pub rescore_all: bool,
    /// The configuration's `inventory` as last registered, by id (this process's
    /// memory only): its labels and hostname go on top of what an orchestrator's
    /// inventory says of the same node.
    pub listed: BTreeMap<String, Listed>,
    /// The orchestrator's version of each node's view last taken in (this
    /// process's memory only), where it keeps versions.
    pub versions: BTreeMap<String, u64>,
    /// The action this process is performing on each node now (its memory only):
    /// a cordon withdrawn by an uncordon while under way may still land, so the
    /// uncordon queued behind it is not taken for done by an inventory read first.
    pub under_way: BTreeMap<String, policy::Pending>,
    /// The latest clock a step ran at (this process's memory only): a step at an
    /// earlier one finds the clock stepped back ([`Fleet::clock_at`]).
    pub clock_seen: Option<Time>,
}

impl Fleet {
    pub fn new(now: Time) -> Fleet {
        Fleet {
            nodes: BTreeMap::new(),
            trust: Trust::new(now),
            ledger: policy::Ledger::default(),
            swept_at: None,
            whole_pass_at: None,
            decaying: None,
            remediation_watch: None,
            heartbeats_due: None,
            pools: None,
            rescore_all: true,
            listed: BTreeMap::new(),
            versions: BTreeMap::new(),
            under_way: BTreeMap::new(),
            clock_seen: None,
        }
    }

    /// The settings changed (a reload): pools are counted afresh by the next step,
    /// and every node rescored by the next poll.
    pub fn reconfigured(&mut self) {
        self.pools = None;
        self.rescore_all = true;
        self.heartbeats_due = None;
    }

    /// A reload shortened the poll interval at `now` (or turned polling on): the
    /// next answer is a poll away, so staleness counts from now until it comes.
    pub fn poll_interval_shortened(&mut self, now: Time) {
        self.trust.interval_shortened = Some(now);
    }
}

/// An optional duration stored as milliseconds.
pub(super) mod opt_millis {
    use chrono::TimeDelta;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<TimeDelta>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.num_milliseconds()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TimeDelta>, D::Error> {
        Ok(Option::<i64>::deserialize(d)?.and_then(TimeDelta::try_milliseconds))
    }
}

mod secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_secs)
    }
}
