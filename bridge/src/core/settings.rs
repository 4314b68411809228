//! The settings the decision core decides with: per pool (modes, thresholds, the
//! penalty table, durations) and fleet-wide (node identity, how the alert source is
//! judged). The configuration module reads them from YAML; the core reads nothing
//! else — no file, no URL, no secret.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Deserialize;

use super::Severity;

/// Policy mode (DESIGN §6). Only `observe` changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Observe,
    Cordon,
    Drain,
    Replace,
}

/// Points deducted for a reason missing from the penalty table, by severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefaultPenalty {
    pub info: u32,
    pub warning: u32,
    pub critical: u32,
}

impl Default for DefaultPenalty {
    fn default() -> Self {
        Self {
            info: 0,
            warning: 5,
            critical: 25,
        }
    }
}

/// Fully resolved health settings for the cluster or one pool.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `cluster` or the pool's name: recorded with every score.
    pub name: String,
    pub heartbeat_miss_threshold: u32,
    pub report_interval: Duration,
    pub mode: Mode,
    pub cordon_below: u32,
    pub drain_below: u32,
    pub degraded_at_or_below: u32,
    pub max_unavailable_percent: u32,
    pub cordon_suppression: Duration,
    pub max_replacements_per_hour: u32,
    pub evict_on_fault_classes: BTreeSet<String>,
    pub max_eviction_restarts: u32,
    pub failure_tally_penalty: f64,
    pub failure_tally_half_life_hours: f64,
    pub penalties: BTreeMap<String, u32>,
    pub default_penalty: DefaultPenalty,
}

/// The penalty table of DESIGN §4, then the GPU reasons of `alerts/gpu.yml` beyond
/// it (memory faults priced as the ECC errors they are, an RMA-grade row-remap
/// failure as a fatal machine check, a pending reset as any warning, a GPU the
/// driver says cannot work until it is recovered as a hardware Xid).
pub const DEFAULT_PENALTIES: &[(&str, u32)] = &[
    ("CorrectableMemoryErrors", 10),
    ("UncorrectableMemoryErrors", 45),
    ("MachineCheckErrors", 10),
    ("FatalMachineCheck", 50),
    ("SmartWarning", 15),
    ("SmartFailing", 40),
    ("DeviceReadOnly", 40),
    ("IoErrors", 10),
    ("GpuEccCorrectable", 10),
    ("GpuEccUncorrectable", 45),
    ("GpuXidHardware", 45),
    ("GpuXidApplication", 5),
    ("GpuThrottling", 10),
    ("GpuRemappedRowsCorrectable", 10),
    ("GpuRemappedRowsUncorrectable", 45),
    ("GpuRowRemapFailure", 50),
    ("GpuRowRemapPending", 5),
    ("GpuRecoveryActionRequired", 45),
    ("GpuRetiredPagesPending", 5),
    ("GpuPcieReplays", 10),
    ("GpuNvlinkCrcErrors", 10),
    ("GpuNvlinkReplayErrors", 10),
    ("GpuNvlinkRecoveryErrors", 25),
];

impl Default for Settings {
    fn default() -> Self {
        Self {
            name: "cluster".into(),
            heartbeat_miss_threshold: 3,
            report_interval: Duration::from_secs(30),
            mode: Mode::Observe,
            cordon_below: 60,
            drain_below: 45,
            degraded_at_or_below: 95,
            max_unavailable_percent: 20,
            cordon_suppression: Duration::from_secs(30 * 60),
            max_replacements_per_hour: 3,
            evict_on_fault_classes: BTreeSet::new(),
            max_eviction_restarts: 3,
            failure_tally_penalty: 5.0,
            failure_tally_half_life_hours: 168.0,
            penalties: DEFAULT_PENALTIES
                .iter()
                .map(|(reason, points)| (reason.to_string(), *points))
                .collect(),
            default_penalty: DefaultPenalty::default(),
        }
    }
}

impl Settings {
    /// Points for a condition with this reason and severity.
    pub fn penalty(&self, reason: &str, severity: Severity) -> u32 {
        // hale's own blind reasons cost nothing, whichever condition carries them
        // and in whatever case.
        if super::BLIND_CONDITIONS
            .iter()
            .any(|b| b.eq_ignore_ascii_case(reason))
        {
            return 0;
        }
        self.penalties
            .get(reason)
            .copied()
            .unwrap_or(match severity {
                Severity::Info => self.default_penalty.info,
                Severity::Warning => self.default_penalty.warning,
                Severity::Critical => self.default_penalty.critical,
            })
    }
}

/// Which alert labels name a node, and how many nodes alerts may bring in.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    /// Labels tried in order; the first present names the node.
    pub labels: Vec<String>,
    /// Strip a trailing `:port` so exporters of one host meet on one node.
    pub strip_port: bool,
    /// A node known only from alerts, named by none this long, is retired.
    pub forget_after: Duration,
    /// Nodes alerts may bring in at most.
    pub max_nodes: usize,
    /// Whether an alert naming a node nobody listed creates it.
    pub create_from_alerts: bool,
}

impl Default for Identity {
    fn default() -> Self {
        Identity {
            labels: vec!["node".into(), "instance".into()],
            strip_port: true,
            forget_after: Duration::from_secs(7 * 86_400),
            max_nodes: 100_000,
            create_from_alerts: true,
        }
    }
}

/// How the alert source is judged (DESIGN §4, "Trusted input").
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    /// Polls give the whole picture; without them only webhook deliveries arrive.
    pub polling: bool,
    /// A poll (or, without polling, a delivery) counts as trusted only with the
    /// watchdog.
    pub require_watchdog: bool,
    /// Without trusted input this long, every node is `telemetry_stale`.
    pub stale_after: Duration,
    /// How long absences are held after a restart of the pipeline.
    pub hold_after_restart: Duration,
}

impl Default for Source {
    fn default() -> Self {
        Source {
            polling: true,
            require_watchdog: true,
            stale_after: Duration::from_secs(90),
            hold_after_restart: Duration::from_secs(20 * 60),
        }
    }
}

/// A pool: the nodes whose labels carry all of `selector` are priced by `settings`.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    pub selector: BTreeMap<String, String>,
    pub settings: Settings,
}

/// Everything the core decides with.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CoreSettings {
    /// The cluster's settings, for nodes no pool selects.
    pub cluster: Settings,
    /// First match wins.
    pub pools: Vec<Pool>,
    pub identity: Identity,
    pub source: Source,
    /// The reboot flow (DESIGN §8).
    pub remediation: Remediation,
    /// `None`: no `fencing` section, nothing is ever fenced.
    pub fencing: Option<Fencing>,
}

impl CoreSettings {
    /// The settings that price a node with these labels: the first matching pool's,
    /// else the cluster's.
    pub fn settings_for(&self, labels: &BTreeMap<String, String>) -> &Settings {
        self.pools
            .iter()
            .find(|p| p.selector.iter().all(|(k, v)| labels.get(k) == Some(v)))
            .map_or(&self.cluster, |p| &p.settings)
    }
}

/// The reboot flow's admission rules and timeouts (DESIGN §8, `remediation`).
#[derive(Debug, Clone, PartialEq)]
pub struct Remediation {
    /// The node label naming a node's failure domain (a rack); `None`, or a node
    /// without it: each node is a domain of its own.
    pub failure_domain_label: Option<String>,
    pub domains_at_once: u32,
    pub max_per_domain: u32,
    pub drain_timeout: Duration,
    pub return_timeout: Duration,
    pub verify_timeout: Duration,
    /// A node whose flow failed is not admitted again by an alert for this long.
    pub retry_after: Duration,
    /// This many failures in a rolling hour halt admission.
    pub max_failures_per_hour: u32,
    /// First match wins; a control-plane node no type allows is never admitted.
    pub node_types: Vec<NodeType>,
    /// `None`: any time.
    pub window: Option<Window>,
}

impl Default for Remediation {
    fn default() -> Self {
        Remediation {
            failure_domain_label: None,
            domains_at_once: 1,
            max_per_domain: 1,
            drain_timeout: Duration::from_secs(10 * 60),
            return_timeout: Duration::from_secs(15 * 60),
            verify_timeout: Duration::from_secs(10 * 60),
            retry_after: Duration::from_secs(24 * 3600),
            max_failures_per_hour: 3,
            node_types: Vec::new(),
            window: None,
        }
    }
}

/// The node labels that mark a control-plane node.
pub const CONTROL_PLANE_LABELS: [&str; 2] = [
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
];

/// `remediation.nodeTypes[]`: a kind of node with rules of its own.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeType {
    /// Its name in `remediation list` and blocking facts (`nodeTypes[i]` unless named).
    pub name: String,
    pub selector: BTreeMap<String, String>,
    pub allowed: bool,
    /// `allowed: true` written: only then are control-plane nodes of this type
    /// admitted (a broad selector must not let them in by default).
    pub allowed_explicitly: bool,
    /// Replaces `remediation.maxPerDomain` for these nodes.
    pub max_per_domain: Option<u32>,
}

impl Remediation {
    /// The first node type whose selector the labels carry.
    pub fn node_type(&self, labels: &BTreeMap<String, String>) -> Option<&NodeType> {
        self.node_types
            .iter()
            .find(|t| t.selector.iter().all(|(k, v)| labels.get(k) == Some(v)))
    }
}

/// When new remediations may start: on `days`, from `start` to `end` (minutes after
/// midnight, local to `zone`); an `end` at or before `start` runs past midnight.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// Monday = 0 … Sunday = 6.
    pub days: BTreeSet<u8>,
    pub start: u16,
    pub end: u16,
    pub zone: jiff::tz::TimeZone,
    /// As written, for messages.
    pub shown: String,
}

impl Window {
    /// When the window opens next after `now` (within the coming week): the
    /// first minute [`Window::contains`] — a start in a daylight-saving gap opens
    /// when the gap ends.
    pub fn next_open(&self, now: super::Time) -> Option<super::Time> {
        let ts = jiff::Timestamp::from_millisecond(now.timestamp_millis()).ok()?;
        let today = ts.to_zoned(self.zone.clone()).date();
        let (hour, minute) = ((self.start / 60) as i8, (self.start % 60) as i8);
        (0..=8)
            .filter_map(|d| today.checked_add(jiff::Span::new().days(d)).ok())
            .filter(|date| {
                let day = date.weekday().to_monday_zero_offset() as u8;
                self.days.contains(&day)
            })
            .filter_map(|date| date.at(hour, minute, 0, 0).to_zoned(self.zone.clone()).ok())
            .filter_map(|at| {
                let mut at = at.timestamp();
                // A start in a gap is read past it: step back to where it opened.
                let minute = jiff::SignedDuration::from_mins(1);
                for _ in 0..180 {
                    let before = at.checked_sub(minute).ok()?;
                    if before <= ts || !self.contains_at(before) {
                        break;
                    }
                    at = before;
                }
                (at > ts && self.contains_at(at)).then_some(at)
            })
            .min()
            .and_then(|at| super::Time::from_timestamp_millis(at.as_millisecond()))
    }

    fn contains_at(&self, at: jiff::Timestamp) -> bool {
        super::Time::from_timestamp_millis(at.as_millisecond()).is_some_and(|t| self.contains(t))
    }

    /// When it opens next, as read in its zone, and how long until then.
    pub fn opens(&self, now: super::Time) -> Option<String> {
        let at = self.next_open(now)?;
        let local = jiff::Timestamp::from_millisecond(at.timestamp_millis())
            .ok()?
            .to_zoned(self.zone.clone());
        let wait = (at - now).num_minutes().max(1);
        Some(format!(
            "opens {} (in {}h {:02}m)",
            local.strftime("%a %Y-%m-%d %H:%M %Z"),
            wait / 60,
            wait % 60
        ))
    }

    /// Whether `now` falls inside the window.
    pub fn contains(&self, now: super::Time) -> bool {
        let Ok(ts) = jiff::Timestamp::from_millisecond(now.timestamp_millis()) else {
            return false;
        };
        let local = ts.to_zoned(self.zone.clone());
        let day = local.weekday().to_monday_zero_offset() as u8;
        let minute = local.hour() as u16 * 60 + local.minute() as u16;
        if self.start < self.end {
            self.days.contains(&day) && (self.start..self.end).contains(&minute)
        } else {
            // Past midnight: the evening of a listed day, or the morning after it.
            let yesterday = (day + 6) % 7;
            (self.days.contains(&day) && minute >= self.start)
                || (self.days.contains(&yesterday) && minute < self.end)
        }
    }
}

/// `fencing` (DESIGN §8).
#[derive(Debug, Clone, PartialEq)]
pub struct Fencing {
    /// How long a node must have been silent (and NotReady) before it is fenced.
    pub after: Duration,
    /// At most this percentage of a pool fenced at once (rounded down, at least 1).
    pub max_percent: u32,
    /// A node fenced this many times in a day is left off for an operator.
    pub per_day: u32,
    /// The orchestrator has a readiness of its own, which must say NotReady too;
    /// without one (`none`) the missed heartbeat alone decides.
    pub needs_not_ready: bool,
}

/// Durations are written `30s`, `5m`, `1h`, `1d`, `500ms` or `0`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    if t.is_empty() {
        return Err("`` is not a duration like 30s".into());
    }
    // One or more number-unit pairs, as Prometheus writes them: `90s`, `1m30s`, `1h30m`.
    let mut total = Duration::ZERO;
    let mut last = None;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("`{t}` is not a duration like 30s or 1m30s"));
        }
        let n: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("`{t}` is longer than a century"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (unit, after) = rest.split_at(unit_len);
        rest = after;
        let secs = |k: u64| Duration::from_secs(n.saturating_mul(k));
        let (rank, d) = match unit {
            "ms" => (0, Duration::from_millis(n)),
            "s" => (1, secs(1)),
            "m" => (2, secs(60)),
            "h" => (3, secs(3600)),
            "d" => (4, secs(86_400)),
            "w" => (5, secs(7 * 86_400)),
            "y" => (6, secs(365 * 86_400)),
            "" => return Err(format!("`{t}` has no unit (use ms, s, m, h, d, w or y)")),
            _ if unit.starts_with(['.', ',']) => {
                return Err(format!(
                    "`{t}` is not a duration: use whole numbers, like 1500ms or 1m30s"
                ));
            }
            _ if unit.starts_with(char::is_whitespace) => {
                return Err(format!(
                    "`{t}` is not a duration: write it with no spaces, like 30s or 1m30s"
                ));
            }
            _ => {
                return Err(format!(
                    "`{t}` has an unknown unit (use ms, s, m, h, d, w or y)"
                ));
            }
        };
        // As Prometheus: each unit once, the largest first (`1h30m`, not `30m1h`).
        if last.is_some_and(|l| rank >= l) {
            return Err(format!(
                "`{t}` repeats a unit or puts a smaller one first (write 1h30m, not 30m1h)"
            ));
        }
        last = Some(rank);
        total = total.saturating_add(d);
    }
    if total > MAX_DURATION {
        return Err(format!("`{t}` is longer than a century"));
    }
    Ok(total)
}

/// The longest duration hale reads: anything longer is a typo, and time arithmetic
/// with it could leave the calendar.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 86_400);

/// Serde: a duration written as [`parse_duration`] reads it.
pub fn de_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

/// Serde: an optional key that, when given, must hold a value — `key:` with
/// nothing after it is refused ("empty: …" in the configuration's error) rather
/// than read as the key left out, which for a section or a file turns a
/// safeguard off without a word.
pub fn de_present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    match Option::<T>::deserialize(d)? {
        Some(v) => Ok(Some(v)),
        None => Err(serde::de::Error::custom("cannot deserialize null")),
    }
}

/// Serde: an optional duration.
pub fn de_opt_duration<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    de_duration(d).map(Some)
}
