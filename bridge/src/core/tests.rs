//! Table and scenario tests for the decision core. Scenarios are timed scripts:
//! `at(0).poll([...])`, `at(95).tick()`, then the events and state expected.

use std::borrow::Cow;
use std::collections::BTreeMap;

use chrono::{TimeDelta, TimeZone};

use super::labels::{Alert, AlertState, Annotations, Labels, Text};
use super::*;
use crate::config::{Config, InventoryNode, Loaded};

const DAY: i64 = 86_400;
const WEEK: i64 = 7 * DAY;

fn config(yaml: &str) -> Loaded {
    Config::parse("test.yaml", yaml)
        .unwrap()
        .resolve("test.yaml", yaml)
        .unwrap()
}

/// An alert under construction: `alert("SmartFailing").on("n1").critical()`.
#[derive(Clone)]
struct A(Alert<'static>);

fn alert(name: &str) -> A {
    let mut labels = Labels::default();
    labels.insert("alertname", name.to_string());
    A(Alert {
        labels,
        annotations: Annotations::default(),
        fingerprint: Cow::Owned(format!("fp-{name}")),
        starts_at: None,
        ends_at: None,
        state: AlertState::Active,
    })
}

impl A {
    fn label(mut self, k: &str, v: &str) -> A {
        self.0.labels.insert(k.to_string(), v.to_string());
        self.0.fingerprint = Cow::Owned(format!("{}|{k}={v}", self.0.fingerprint));
        self
    }
    fn on(self, node: &str) -> A {
        self.label("node", node)
    }
    fn condition(self, ctype: &str, reason: &str) -> A {
        self.label("hale_condition", ctype)
            .label("hale_reason", reason)
    }
    fn critical(self) -> A {
        self.label("severity", "critical")
    }
    fn sticky(self) -> A {
        self.label("hale_sticky", "true")
    }
    fn summary(mut self, text: &str) -> A {
        self.0.annotations.summary = Some(Text::new(text.to_string()));
        self
    }
    fn suppressed(mut self) -> A {
        self.0.state = AlertState::Suppressed;
        self
    }
    fn resolved(mut self) -> A {
        self.0.state = AlertState::Resolved;
        self
    }
    fn starts(mut self, t: Time) -> A {
        self.0.starts_at = Some(Cow::Owned(t.to_rfc3339()));
        self
    }
    /// Alertmanager's `endsAt` for an active alert: `secs` after `t0()`.
    fn expires(mut self, secs: i64) -> A {
        self.0.ends_at = Some(Cow::Owned((t0() + TimeDelta::seconds(secs)).to_rfc3339()));
        self
    }
}

fn watchdog() -> A {
    alert("Watchdog").label("hale_signal", "watchdog")
}
fn heartbeat(node: &str) -> A {
    alert("HaleNodeReporting")
        .label("hale_signal", "heartbeat")
        .on(node)
}
fn smart_failing(node: &str) -> A {
    alert("SmartFailing")
        .on(node)
        .condition("disk_degraded", "SmartFailing")
        .critical()
        .summary("SMART health check failing on /dev/sda")
}
fn gpu_ecc_correctable(node: &str, gpu: &str) -> A {
    alert("GpuEccCorrectable")
        .on(node)
        .label("gpu", gpu)
        .condition("gpu_ecc_errors", "GpuEccCorrectable")
        .summary(&format!("correctable ECC errors on GPU {gpu}"))
}
fn gpu_ecc_uncorrectable(node: &str, gpu: &str) -> A {
    alert("GpuEccUncorrectable")
        .on(node)
        .label("gpu", gpu)
        .condition("gpu_ecc_errors", "GpuEccUncorrectable")
        .critical()
        .sticky()
        .summary(&format!("uncorrectable ECC error on GPU {gpu}"))
}
fn collector_failed(node: &str, collector: &str) -> A {
    alert("CollectorFailed")
        .on(node)
        .label("hale_signal", "collector_failed")
        .label("collector", collector)
}

fn t0() -> Time {
    Utc.with_ymd_and_hms(2026, 8, 5, 12, 0, 0).unwrap()
}

/// A timed script against one fleet.
struct Script {
    cfg: Loaded,
    fleet: Fleet,
    now: Time,
    events: Vec<Event>,
    last: Outcome,
}

fn script(yaml: &str) -> Script {
    Script {
        cfg: config(yaml),
        fleet: Fleet::new(t0()),
        now: t0(),
        events: Vec::new(),
        last: Outcome::default(),
    }
}

impl Script {
    fn at(&mut self, secs: i64) -> &mut Self {
        self.now = t0() + TimeDelta::seconds(secs);
        self
    }
    fn record(&mut self, out: Outcome) -> &mut Self {
        self.events.extend(out.events.iter().cloned());
        self.last = out;
        self
    }
    fn poll(&mut self, alerts: &[A]) -> &mut Self {
        let alerts: Vec<Alert> = alerts.iter().map(|a| a.0.clone()).collect();
        let out = self.fleet.poll(&self.cfg, self.now, &alerts);
        self.record(out)
    }
    fn webhook(&mut self, alerts: &[A]) -> &mut Self {
        let alerts: Vec<Alert> = alerts.iter().map(|a| a.0.clone()).collect();
        let out = self.fleet.webhook(&self.cfg, self.now, &alerts);
        self.record(out)
    }
    fn fail(&mut self) -> &mut Self {
        let out = self
            .fleet
            .poll_failed(&self.cfg, self.now, "connection refused".into());
        self.record(out)
    }
    fn tick(&mut self) -> &mut Self {
        let out = self.fleet.tick(&self.cfg, self.now);
        self.record(out)
    }
    fn failure(&mut self, node: &str) -> &mut Self {
        let out = self
            .fleet
            .attribute_failure(
                &self.cfg,
                self.now,
                node,
                "job-1",
                Some("disk_degraded"),
                None,
            )
            .unwrap();
        self.record(out)
    }
    /// Event types recorded since the last call, in order.
    fn took(&mut self) -> Vec<String> {
        self.events
            .drain(..)
            .map(|e| format!("{} {}", e.node_id, e.kind.name()))
            .collect()
    }
    fn node(&self, id: &str) -> &Node {
        &self.fleet.nodes[id]
    }
    fn score(&self, id: &str) -> Option<u8> {
        self.node(id).score.as_ref().map(|s| s.value)
    }
    fn health(&self, id: &str) -> Health {
        let node = self.node(id);
        node.health(self.cfg.settings_for(&node.labels))
    }
}

#[test]
fn seed_worked_numbers_for_conditions() {
    let mut s = script("");
    s.at(0)
        .poll(&[watchdog(), heartbeat("n1"), smart_failing("n1")]);
    assert_eq!(s.score("n1"), Some(60), "SMART failing costs 40");

    let mut s = script("");
    let four: Vec<A> = (0..4)
        .map(|g| gpu_ecc_correctable("n2", &g.to_string()))
        .chain([watchdog()])
        .collect();
    s.at(0).poll(&four);
    assert_eq!(
        s.score("n2"),
        Some(90),
        "four correctable alerts are one condition"
    );
    let mut more = four.clone();
    more.push(gpu_ecc_uncorrectable("n2", "1"));
    s.at(30).poll(&more);
    assert_eq!(
        s.score("n2"),
        Some(55),
        "the episode escalates to uncorrectable: 45"
    );
    let c = &s.node("n2").conditions["gpu_ecc_errors"];
    assert_eq!(
        (c.severity, c.reason.as_str()),
        (Severity::Critical, "GpuEccUncorrectable")
    );
    assert_eq!(c.observations, 2);
    assert_eq!(
        s.node("n2").score.as_ref().unwrap().breakdown,
        vec![Deduction {
            reason: "GpuEccUncorrectable".into(),
            points: 45
        }]
    );
}

#[test]
fn seed_worked_numbers_for_failure_decay() {
    let mut s = script("");
    s.at(0).poll(&[watchdog(), heartbeat("n1")]);
    assert_eq!(s.score("n1"), Some(100));
    s.failure("n1").failure("n1").failure("n1");
    assert_eq!(s.score("n1"), Some(85), "three failures at 5 points");
    // Rounded half away from zero: 15 × 2^-1 = 7.5 → 8.
    let cases = [(WEEK, 92), (2 * WEEK, 96), (4 * WEEK, 99), (5 * WEEK, 100)];
    for (after, want) in cases {
        s.at(after).poll(&[watchdog(), heartbeat("n1")]);
        assert_eq!(s.score("n1"), Some(want), "{} weeks on", after / WEEK);
    }
    s.failure("n1");
    assert_eq!(
        s.score("n1"),
        Some(80),
        "a new failure restores the whole tally (4 × 5)"
    );
    assert_eq!(s.node("n1").failures.total, 4, "the count is never reset");
}

#[test]
fn failure_deduction_table() {
    let settings = config("").cluster_settings;
    let mut node = Node::new("n");
    node.failures.total = 3;
    node.failures.last = Some(t0());
    for (hours, want) in [(0, 15), (84, 11), (168, 8), (336, 4), (672, 1), (840, 0)] {
        let now = t0() + TimeDelta::hours(hours);
        assert_eq!(node.failure_deduction(&settings, now), want, "{hours} h");
    }
}

#[test]
fn severity_never_downgrades_and_messages_keep_each_source() {
    let mut s = script("");
    let hw = alert("GpuXid79")
        .on("n1")
        .label("gpu", "0")
        .condition("gpu_xid_errors", "GpuXidHardware")
        .critical()
        .sticky()
        .summary("Xid 79 on GPU 0");
    let app = alert("GpuXid13")
        .on("n1")
        .label("gpu", "1")
        .condition("gpu_xid_errors", "GpuXidApplication")
        .summary("Xid 13 on GPU 1");
    s.at(0).poll(&[watchdog(), hw.clone(), app.clone()]);
    let c = &s.node("n1").conditions["gpu_xid_errors"];
    assert_eq!(c.severity, Severity::Critical);
    assert_eq!(c.message, "Xid 13 on GPU 1; Xid 79 on GPU 0");
    // The hardware Xid's alert ends; the application one fires on: still critical.
    s.at(30).poll(&[watchdog(), app]);
    let c = &s.node("n1").conditions["gpu_xid_errors"];
    assert_eq!(
        (c.severity, c.reason.as_str()),
        (Severity::Critical, "GpuXidHardware")
    );
    assert_eq!(c.message, "Xid 13 on GPU 1");
    assert_eq!(s.score("n1"), Some(55));
}

#[test]
fn non_sticky_clears_when_all_feeding_alerts_end() {
    let mut s = script("");
    let a = gpu_ecc_correctable("n1", "0");
    let b = gpu_ecc_correctable("n1", "1");
    s.at(0).poll(&[watchdog(), a.clone(), b.clone()]);
    s.took();
    s.at(30).poll(&[watchdog(), a]);
    assert!(s.node("n1").conditions.contains_key("gpu_ecc_errors"));
    assert_eq!(
        s.took(),
        Vec::<String>::new(),
        "one alert ending changes nothing visible"
    );
    s.at(60).poll(&[watchdog()]);
    assert!(s.node("n1").conditions.is_empty());
    assert_eq!(s.took(), ["n1 CONDITION_CLEARED", "n1 SCORE_CHANGED"]);
    assert_eq!(s.score("n1"), Some(100), "points come back at once");
}

#[test]
fn sticky_stays_until_an_operator_clears_it() {
    let mut s = script("");
    s.at(0).poll(&[
        watchdog(),
        heartbeat("n1"),
        gpu_ecc_uncorrectable("n1", "0"),
    ]);
    s.at(30).poll(&[watchdog(), heartbeat("n1")]);
    assert_eq!(
        s.score("n1"),
        Some(55),
        "sticky: still raised after the alert ended"
    );
    assert!(s.node("n1").conditions["gpu_ecc_errors"].sources.is_empty());
    s.took();
    let out = s
        .fleet
        .clear_condition(&s.cfg, s.now, "n1", "gpu_ecc_errors", "GPU replaced")
        .unwrap();
    s.record(out);
    assert_eq!(s.score("n1"), Some(100));
    let events = std::mem::take(&mut s.events);
    assert_eq!(
        events[0].message,
        "gpu_ecc_errors cleared by operator: GPU replaced"
    );
    assert!(matches!(
        &events[0].kind,
        EventKind::ConditionCleared { cleared_by, .. } if cleared_by == "operator"
    ));
    assert_eq!(
        s.fleet
            .clear_condition(&s.cfg, s.now, "n1", "gpu_ecc_errors", ""),
        Err(CoreError::UnknownCondition {
            node: "n1".into(),
            condition: "gpu_ecc_errors".into()
        })
    );
    assert_eq!(
        s.fleet.clear_condition(&s.cfg, s.now, "nope", "x", ""),
        Err(CoreError::UnknownNode("nope".into()))
    );
}

#[test]
fn suppressed_conditions_cost_nothing() {
    let mut s = script("");
    s.at(0).poll(&[
        watchdog(),
        heartbeat("n1"),
        smart_failing("n1").suppressed(),
    ]);
    let c = &s.node("n1").conditions["disk_degraded"];
    assert!(c.suppressed());
    assert_eq!(s.score("n1"), Some(100));
    assert_eq!(s.health("n1"), Health::Healthy);
    s.at(30)
        .poll(&[watchdog(), heartbeat("n1"), smart_failing("n1")]);
    assert_eq!(s.score("n1"), Some(60), "the silence expired");
}

#[test]
fn a_suppressed_watchdog_still_proves_the_pipeline() {
    let mut s = script("");
    s.at(0).poll(&[watchdog().suppressed(), heartbeat("n1")]);
    assert!(s.last.trusted);
    assert!(s.fleet.trust.source_up);
}

#[test]
fn missing_watchdog_clears_nothing_then_goes_stale() {
    let mut s = script("");
    s.at(0).poll(&[
        watchdog(),
        heartbeat("n1"),
        smart_failing("n1"),
        heartbeat("n2"),
    ]);
    s.took();
    s.at(30).poll(&[]);
    assert!(!s.last.trusted);
    assert!(!s.fleet.trust.source_up);
    assert_eq!(
        s.score("n1"),
        Some(60),
        "an empty answer is not a healthy fleet"
    );
    assert_eq!(s.took(), Vec::<String>::new());
    s.at(89).poll(&[]);
    assert!(!s.fleet.trust.stale, "stale only after staleAfter (90 s)");
    s.at(90).poll(&[]);
    assert!(s.fleet.trust.stale);
    for id in ["n1", "n2"] {
        assert!(s.node(id).conditions.contains_key(TELEMETRY_STALE));
    }
    assert_eq!(s.health("n2"), Health::Unknown);
    assert_eq!(
        s.health("n1"),
        Health::Degraded,
        "fault evidence wins over Unknown"
    );
    assert_eq!(
        s.took(),
        ["n1 CONDITION_RAISED", "n2 CONDITION_RAISED"],
        "telemetry_stale on every node"
    );
    // Long after every heartbeat threshold: nobody is missed while hale is blind.
    s.at(600).tick();
    assert_eq!(s.took(), Vec::<String>::new());
    // Trust returns: stale clears, the poll reconciles (SMART ended meanwhile).
    s.at(630)
        .poll(&[watchdog(), heartbeat("n1"), heartbeat("n2")]);
    assert!(!s.fleet.trust.stale && s.fleet.trust.source_up);
    assert!(s.node("n1").conditions.is_empty());
    assert_eq!(s.score("n1"), Some(100));
    assert_eq!(
        s.took(),
        [
            "n1 CONDITION_CLEARED",
            "n2 CONDITION_CLEARED",
            "n1 CONDITION_CLEARED",
            "n1 SCORE_CHANGED"
        ]
    );
}

#[test]
fn unreachable_source_is_the_same_as_a_missing_watchdog() {
    let mut s = script("");
    s.at(0).poll(&[watchdog(), smart_failing("n1")]);
    s.at(30).fail();
    assert!(!s.fleet.trust.source_up);
    assert_eq!(
        s.fleet.trust.last_error.as_deref(),
        Some("connection refused")
    );
    s.at(100).fail();
    assert!(s.fleet.trust.stale);
    assert!(s.node("n1").conditions.contains_key("disk_degraded"));
    assert!(s.node("n1").conditions.contains_key(TELEMETRY_STALE));
    assert_eq!(s.score("n1"), Some(60), "telemetry_stale costs nothing");
}

#[test]
fn watchdog_not_required_trusts_any_answer() {
    let mut s = script("alertmanager: { requireWatchdog: false }");
    s.at(0).poll(&[smart_failing("n1")]);
    s.at(30).poll(&[]);
    assert!(s.last.trusted);
    assert!(s.node("n1").conditions.is_empty());
}

#[test]
fn heartbeat_thresholds() {
    // (report interval label, seconds of silence, missed?)
    let cases: &[(Option<&str>, i64, bool)] = &[
        (None, 89, false),
        (None, 90, true), // 3 × 30 s
        (Some("1s"), 14, false),
        (Some("1s"), 15, true), // 15 s floor
        (Some("10m"), 1799, false),
        (Some("10m"), 1800, true),
        (Some("2d"), 3 * DAY - 1, false), // interval capped at 24 h
        (Some("2d"), 3 * DAY, true),
    ];
    for (interval, silence, missed) in cases {
        let mut s = script("alertmanager: { requireWatchdog: false, staleAfter: 30d }");
        let mut hb = heartbeat("n1");
        if let Some(i) = interval {
            hb = hb.label("hale_report_interval", i);
        }
        s.at(0).poll(&[hb]);
        s.at(*silence).tick();
        assert_eq!(
            s.node("n1").conditions.contains_key(HEARTBEAT_MISSED),
            *missed,
            "interval {interval:?}, {silence} s"
        );
    }
}

#[test]
fn heartbeat_missed_and_resumed() {
    let mut s = script("");
    s.at(0)
        .poll(&[watchdog(), heartbeat("n1"), smart_failing("n2")]);
    s.took();
    // Other alerts about n1 do not count as its heartbeat; n2 never had one.
    s.at(30)
        .poll(&[watchdog(), smart_failing("n1"), smart_failing("n2")]);
    s.at(60)
        .poll(&[watchdog(), smart_failing("n1"), smart_failing("n2")]);
    s.took();
    s.at(90)
        .poll(&[watchdog(), smart_failing("n1"), smart_failing("n2")]);
    assert_eq!(s.took(), ["n1 HEARTBEAT_MISSED"]);
    assert_eq!(s.health("n1"), Health::Degraded, "SMART at 60 still shows");
    let missed = s.fleet.nodes["n1"].conditions[HEARTBEAT_MISSED].clone();
    assert_eq!(
        missed.message,
        format!("no heartbeat since {}", t0().to_rfc3339())
    );
    s.at(120).tick();
    assert_eq!(
        s.took(),
        Vec::<String>::new(),
        "missed once, not every tick"
    );
    s.at(150).poll(&[watchdog(), heartbeat("n1")]);
    assert_eq!(
        s.took(),
        [
            "n1 HEARTBEAT_RESUMED",
            "n1 CONDITION_CLEARED",
            "n2 CONDITION_CLEARED",
            "n1 SCORE_CHANGED",
            "n2 SCORE_CHANGED"
        ]
    );
    assert_eq!(s.health("n1"), Health::Healthy);
}

#[test]
fn health_state_table() {
    // (alerts on n1, expected score, expected health)
    let cases: Vec<(Vec<A>, Option<u8>, Health)> = vec![
        (vec![heartbeat("n1")], Some(100), Health::Healthy),
        (
            vec![collector_failed("n1", "smart")],
            Some(100),
            Health::Unknown,
        ),
        (
            vec![collector_failed("n1", "smart"), smart_failing("n1")],
            Some(60),
            Health::Degraded,
        ),
        (
            vec![alert("Odd").on("n1").label("severity", "warning")],
            Some(95),
            Health::Degraded,
        ),
        (
            vec![alert("Odd").on("n1").label("severity", "info")],
            Some(100),
            Health::Healthy,
        ),
        (
            vec![
                alert("Odd").on("n1").critical(),
                smart_failing("n1"),
                gpu_ecc_uncorrectable("n1", "0"),
            ],
            Some(0),
            Health::Degraded,
        ),
    ];
    for (alerts, score, health) in cases {
        let mut s = script("");
        let mut all = alerts.clone();
        all.push(watchdog());
        s.at(0).poll(&all);
        assert_eq!(
            (s.score("n1"), s.health("n1")),
            (score, health),
            "{:?}",
            s.node("n1").conditions
        );
    }
}

#[test]
fn collector_failures_name_the_collectors() {
    let mut s = script("");
    s.at(0).poll(&[
        watchdog(),
        collector_failed("n1", "smart"),
        collector_failed("n1", "edac"),
    ]);
    let c = &s.node("n1").conditions[COLLECTOR_FAILED];
    assert_eq!(c.message, "collectors failed: edac, smart");
    assert_eq!(s.node("n1").score.as_ref().unwrap().breakdown, vec![]);
}

#[test]
fn unavailable_signals_are_shown_not_scored() {
    let mut s = script("");
    let gpu = alert("GpuUnavailable")
        .on("n1")
        .label("hale_signal", "unavailable")
        .label("signal", "gpu");
    s.at(0).poll(&[watchdog(), gpu]);
    assert_eq!(
        s.node("n1").unavailable.values().collect::<Vec<_>>(),
        ["gpu"]
    );
    assert!(s.node("n1").conditions.is_empty());
    assert_eq!(s.health("n1"), Health::Healthy);
    s.at(30).poll(&[watchdog()]);
    assert!(s.node("n1").unavailable.is_empty());
}

#[test]
fn first_score_counts_as_a_change_from_100() {
    let mut s = script("");
    s.at(0)
        .poll(&[watchdog(), heartbeat("healthy"), smart_failing("sick")]);
    assert_eq!(s.took(), ["sick CONDITION_RAISED", "sick SCORE_CHANGED"]);
    let e = s
        .fleet
        .nodes
        .get("sick")
        .and_then(|n| n.score.clone())
        .unwrap();
    assert_eq!(e.scored_by, "cluster");
    s.at(30)
        .poll(&[watchdog(), heartbeat("healthy"), smart_failing("sick")]);
    assert_eq!(s.took(), Vec::<String>::new(), "no change, no event");
}

#[test]
fn job_failure_alert_instances_count_once() {
    let mut s = script("");
    let fail = alert("JobFailedOnNode")
        .on("n1")
        .label("hale_signal", "job_failure")
        .label("hale_job", "train-7")
        .starts(t0());
    s.at(0).poll(&[watchdog(), heartbeat("n1"), fail.clone()]);
    s.at(30).poll(&[watchdog(), heartbeat("n1"), fail.clone()]);
    s.at(40).webhook(std::slice::from_ref(&fail));
    assert_eq!(s.node("n1").failures.total, 1);
    s.at(60).poll(&[watchdog(), heartbeat("n1")]);
    s.at(90).poll(&[
        watchdog(),
        heartbeat("n1"),
        fail.starts(t0() + TimeDelta::seconds(85)),
    ]);
    assert_eq!(
        s.node("n1").failures.total,
        2,
        "a new instance of the alert counts again"
    );
    assert_eq!(s.score("n1"), Some(90));
}

#[test]
fn webhook_adds_and_resolves_but_never_clears_while_stale() {
    let mut s = script("");
    s.at(0).poll(&[watchdog(), heartbeat("n1")]);
    s.at(5).webhook(&[smart_failing("n1")]);
    assert_eq!(s.score("n1"), Some(60));
    s.at(10).webhook(&[smart_failing("n1").resolved()]);
    assert_eq!(s.score("n1"), Some(100));
    s.at(20).webhook(&[smart_failing("n1")]);
    s.at(200).fail();
    assert!(s.fleet.trust.stale);
    s.at(205).webhook(&[smart_failing("n1").resolved()]);
    assert!(
        s.node("n1").conditions.contains_key("disk_degraded"),
        "an untrusted resolve waits for the next trusted poll"
    );
}

/// Prometheus re-sends the watchdog every minute with `endsAt` four minutes on, as
/// Alertmanager's API then reports it; `sent` is the last re-send.
fn watchdog_sent(sent: i64) -> A {
    watchdog().expires(sent + 240)
}

fn edac(node: &str) -> A {
    alert("CorrectableMemoryErrors")
        .on(node)
        .condition("memory_errors", "CorrectableMemoryErrors")
}

#[test]
fn an_alert_gone_before_its_expiry_was_resolved() {
    let mut s = script("");
    s.at(0)
        .poll(&[watchdog_sent(0), heartbeat("n1"), edac("n1").expires(240)]);
    s.took();
    s.at(30).poll(&[watchdog_sent(0), heartbeat("n1")]);
    assert!(!s.node("n1").conditions.contains_key("memory_errors"));
    assert_eq!(s.took(), ["n1 CONDITION_CLEARED", "n1 SCORE_CHANGED"]);
}

#[test]
fn an_alert_that_may_have_expired_ends_once_the_watchdog_moved_twice() {
    let mut s = script("");
    // Sent at 0 with Prometheus's 4-minute expiry, never again.
    s.at(0)
        .poll(&[watchdog_sent(0), heartbeat("n1"), edac("n1").expires(240)]);
    s.took();
    s.at(240).poll(&[watchdog_sent(60), heartbeat("n1")]);
    s.at(270).poll(&[watchdog_sent(60), heartbeat("n1")]);
    s.at(300).poll(&[watchdog_sent(120), heartbeat("n1")]);
    assert!(
        s.node("n1").conditions.contains_key("memory_errors"),
        "one re-send may come from a Prometheus that has not evaluated the rule yet"
    );
    assert_eq!(s.took(), Vec::<String>::new());
    s.at(360).poll(&[watchdog_sent(180), heartbeat("n1")]);
    assert!(!s.node("n1").conditions.contains_key("memory_errors"));
    assert_eq!(s.took(), ["n1 CONDITION_CLEARED", "n1 SCORE_CHANGED"]);
    assert_eq!(s.score("n1"), Some(100));
}

#[test]
fn prometheus_stopping_clears_nothing() {
    // Prometheus stops after its re-send at 60 s: every alert it sent expires in
    // Alertmanager at 300 s, the watchdog a little later (another rule group).
    let mut s = script("alertmanager: { staleAfter: 90s }");
    let sent = edac("n1").expires(300);
    for t in (0..=270).step_by(30) {
        s.at(t)
            .poll(&[watchdog_sent(62), heartbeat("n1"), sent.clone()]);
    }
    s.took();
    s.at(300).poll(&[watchdog_sent(62), heartbeat("n1")]);
    // Alertmanager notifies the expiry as a resolution, with the expiry as its end.
    s.at(302).webhook(&[edac("n1").resolved().expires(300)]);
    s.at(330).poll(&[heartbeat("n1")]);
    s.at(400).poll(&[]);
    assert!(s.fleet.trust.stale);
    assert!(s.node("n1").conditions.contains_key("memory_errors"));
    assert_eq!(
        s.took(),
        ["n1 CONDITION_RAISED"],
        "only telemetry_stale is raised; nothing is cleared"
    );

    // Prometheus back: the watchdog is re-sent first, the rule evaluated next.
    s.at(430).poll(&[watchdog_sent(425), heartbeat("n1")]);
    s.at(440)
        .poll(&[watchdog_sent(425), heartbeat("n1"), edac("n1").expires(665)]);
    assert_eq!(s.took(), ["n1 CONDITION_CLEARED"], "telemetry_stale ends");
    let back = &s.node("n1").conditions["memory_errors"];
    assert!(
        back.sources
            .values()
            .all(|source| source.vanished.is_none())
    );
}

#[test]
fn heartbeats_gone_with_the_watchdog_are_not_missed() {
    let mut s = script("alertmanager: { staleAfter: 1h }");
    s.at(0).poll(&[watchdog(), heartbeat("n1")]);
    s.at(30).poll(&[]);
    s.at(200).tick();
    assert!(!s.node("n1").conditions.contains_key("heartbeat_missed"));
    s.at(230).poll(&[watchdog()]);
    s.at(231).tick();
    assert!(
        s.node("n1").conditions.contains_key("heartbeat_missed"),
        "a trusted answer without it: the node is missing"
    );
}

#[test]
fn a_notified_resolution_ends_at_once_and_a_notified_expiry_waits() {
    let mut s = script("");
    s.at(0).poll(&[
        watchdog_sent(0),
        heartbeat("n1"),
        edac("n1").expires(240),
        smart_failing("n2").expires(240),
    ]);
    // Resolved by Prometheus at 10, long before it would have expired.
    s.at(12).webhook(&[edac("n1").resolved().expires(10)]);
    assert!(!s.node("n1").conditions.contains_key("memory_errors"));
    // Expired: the notification's end is the expiry itself.
    let n2 = smart_failing("n2");
    s.at(242).webhook(&[n2.clone().resolved().expires(240)]);
    assert!(s.node("n2").conditions.contains_key("disk_degraded"));
    s.at(250).poll(&[watchdog_sent(60), heartbeat("n1")]);
    s.at(260).poll(&[watchdog_sent(120), heartbeat("n1")]);
    assert!(s.node("n2").conditions.contains_key("disk_degraded"));
    s.at(270).poll(&[watchdog_sent(180), heartbeat("n1")]);
    assert!(!s.node("n2").conditions.contains_key("disk_degraded"));
}

#[test]
fn webhook_only_mode_trusts_the_watchdog_by_webhook() {
    let mut s = script("alertmanager: { pollInterval: 0, staleAfter: 60s }");
    s.at(0).webhook(&[watchdog(), smart_failing("n1")]);
    assert!(s.fleet.trust.source_up);
    s.at(59).webhook(&[smart_failing("n1")]);
    assert!(!s.fleet.trust.stale);
    s.at(60).tick();
    assert!(s.fleet.trust.stale);
    s.at(61).webhook(&[watchdog()]);
    assert!(!s.fleet.trust.stale);
}

#[test]
fn alerts_without_a_node_are_counted() {
    let mut s = script("");
    s.at(0).poll(&[
        watchdog(),
        alert("ClusterWide"),
        alert("Other"),
        heartbeat("n1"),
    ]);
    assert_eq!(s.last.unmatched, 2);
    assert_eq!(s.fleet.nodes.len(), 1);
}

#[test]
fn instance_port_is_stripped_so_exporters_meet() {
    let mut s = script("");
    let ne = alert("SmartFailing")
        .label("instance", "10.0.0.14:9100")
        .condition("disk_degraded", "SmartFailing")
        .critical();
    let dcgm = alert("GpuEccUncorrectable")
        .label("instance", "10.0.0.14:9400")
        .condition("gpu_ecc_errors", "GpuEccUncorrectable")
        .critical();
    s.at(0).poll(&[watchdog(), ne, dcgm]);
    assert_eq!(s.fleet.nodes.keys().collect::<Vec<_>>(), ["10.0.0.14"]);
    assert_eq!(s.score("10.0.0.14"), Some(15));
}

#[test]
fn inventory_nodes_are_unscored_until_they_report_and_pools_price_them() {
    let mut s = script(
        "nodeHealth: { penalties: { SmartFailing: 30 } }\npools:\n  - name: gpu\n    selector: { pool: gpu }\n    nodeHealth: { penalties: { SmartFailing: 50 } }\n",
    );
    let inv = [
        InventoryNode {
            id: "gpu-14".into(),
            hostname: Some("gpu14.example".into()),
            labels: BTreeMap::from([("pool".into(), "gpu".into())]),
        },
        InventoryNode {
            id: "cpu-1".into(),
            hostname: None,
            labels: BTreeMap::new(),
        },
    ];
    let out = s.fleet.register(&s.cfg, s.now, &inv);
    assert_eq!(out.dirty.len(), 2);
    assert_eq!(s.score("gpu-14"), None);
    assert_eq!(s.health("gpu-14"), Health::Unknown);
    s.at(0)
        .poll(&[watchdog(), smart_failing("gpu-14"), smart_failing("cpu-1")]);
    let gpu = s.node("gpu-14").score.clone().unwrap();
    assert_eq!((gpu.value, gpu.scored_by.as_str()), (50, "gpu"));
    let cpu = s.node("cpu-1").score.clone().unwrap();
    assert_eq!((cpu.value, cpu.scored_by.as_str()), (70, "cluster"));
    assert!(
        s.fleet.register(&s.cfg, s.now, &inv).dirty.is_empty(),
        "unchanged, not rewritten"
    );
}

#[test]
fn nodes_born_while_stale_are_stale() {
    let mut s = script("");
    s.at(100).fail();
    assert!(s.fleet.trust.stale);
    s.at(101).webhook(&[smart_failing("late")]);
    assert!(s.node("late").conditions.contains_key(TELEMETRY_STALE));
    assert_eq!(s.score("late"), None, "untrusted input is not a report");
}

#[test]
fn decommission_forgets_the_node() {
    let mut s = script("");
    s.at(0).poll(&[watchdog(), smart_failing("n1")]);
    s.took();
    let out = s.fleet.decommission(&s.cfg, s.now, "n1").unwrap();
    assert_eq!(out.removed, ["n1"]);
    s.record(out);
    assert_eq!(s.took(), ["n1 NODE_DECOMMISSIONED"]);
    assert!(s.fleet.nodes.is_empty());
    assert_eq!(
        s.fleet.decommission(&s.cfg, s.now, "n1"),
        Err(CoreError::UnknownNode("n1".into()))
    );
}

#[test]
fn events_render_with_their_typed_fields() {
    let e = Event {
        node_id: "n1".into(),
        kind: EventKind::ScoreChanged {
            score: 55,
            previous_score: 90,
            scored_by: "cluster".into(),
        },
        occurred_at: t0(),
        message: "score 90 -> 55".into(),
    };
    let json = serde_json::to_value(&e).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "nodeId": "n1", "type": "SCORE_CHANGED", "score": 55, "previousScore": 90,
            "scoredBy": "cluster", "occurredAt": "2026-08-05T12:00:00Z", "message": "score 90 -> 55"
        })
    );
    assert_eq!(serde_json::from_value::<Event>(json).unwrap(), e);
}

#[test]
fn after_a_restart_only_a_trusted_poll_decides_who_is_missed() {
    let mut s = script("");
    s.at(0)
        .poll(&[watchdog(), heartbeat("n1"), heartbeat("n2")]);
    s.took();
    // hale was down for five minutes; its stored heartbeats are all old.
    let restarted = t0() + TimeDelta::seconds(300);
    s.fleet.trust.watching_since = restarted;
    s.at(301).tick();
    assert_eq!(
        s.took(),
        Vec::<String>::new(),
        "nobody is missed on stale memory"
    );
    s.at(302).poll(&[watchdog(), heartbeat("n2")]);
    assert_eq!(s.took(), ["n1 HEARTBEAT_MISSED"]);
}

#[test]
fn a_steady_poll_rewrites_no_evidence() {
    let mut s = script("");
    let alerts = [
        watchdog(),
        heartbeat("n1"),
        smart_failing("n1"),
        gpu_ecc_correctable("n1", "0"),
        collector_failed("n1", "smart"),
    ];
    s.at(0).poll(&alerts);
    assert!(s.last.dirty.contains("n1"));
    s.at(30).poll(&alerts);
    assert!(s.last.dirty.is_empty(), "{:?}", s.last.dirty);
    assert!(
        s.last.touched.contains("n1"),
        "report and heartbeat times moved"
    );
    assert_eq!(s.node("n1").conditions["disk_degraded"].observations, 2);
    // A second GPU joining the condition changes its evidence.
    let mut more = alerts.to_vec();
    more.push(gpu_ecc_correctable("n1", "1"));
    s.at(60).poll(&more);
    assert!(s.last.dirty.contains("n1"));
    assert_eq!(
        s.node("n1").conditions["gpu_ecc_errors"].message,
        "correctable ECC errors on GPU 0; correctable ECC errors on GPU 1"
    );
}

#[test]
fn a_restart_does_not_end_staleness_without_trusted_input() {
    let mut s = script("");
    s.at(0).poll(&[watchdog(), heartbeat("n1")]);
    s.at(200).fail();
    assert!(s.fleet.trust.stale);
    s.took();
    // hale restarts: the stored trust says stale; the restart grace must not clear it.
    s.fleet.trust.watching_since = t0() + TimeDelta::seconds(300);
    s.at(301).tick();
    assert!(s.fleet.trust.stale);
    assert!(s.node("n1").conditions.contains_key(TELEMETRY_STALE));
    assert_eq!(s.took(), Vec::<String>::new());
    s.at(302).poll(&[watchdog(), heartbeat("n1")]);
    assert!(!s.fleet.trust.stale);
    assert_eq!(s.took(), ["n1 CONDITION_CLEARED"]);
}

#[test]
fn untrusted_heartbeats_neither_arm_nor_clear() {
    let mut s = script("");
    s.at(0).poll(&[watchdog(), heartbeat("n1")]);
    s.at(90).poll(&[watchdog()]);
    assert!(s.node("n1").conditions.contains_key(HEARTBEAT_MISSED));
    // An answer without the watchdog carries n1's heartbeat: not proof of life.
    s.at(95).poll(&[heartbeat("n1"), heartbeat("n2")]);
    assert!(s.node("n1").conditions.contains_key(HEARTBEAT_MISSED));
    assert!(
        s.node("n2").heartbeat.is_none(),
        "untrusted input arms nothing"
    );
    s.at(100).poll(&[watchdog(), heartbeat("n1")]);
    assert!(!s.node("n1").conditions.contains_key(HEARTBEAT_MISSED));
}

#[test]
fn a_job_failure_from_a_clock_ahead_counts_once() {
    let mut s = script("");
    let ahead = alert("JobFailedOnNode")
        .on("n1")
        .label("hale_signal", "job_failure")
        .starts(t0() + TimeDelta::seconds(20));
    s.at(0).poll(&[watchdog(), ahead.clone()]);
    s.at(10).webhook(std::slice::from_ref(&ahead));
    s.at(30).poll(&[watchdog(), ahead.clone()]);
    assert_eq!(s.node("n1").failures.total, 1);
    assert_eq!(
        s.node("n1").failures.last,
        Some(t0()),
        "decay is measured from now, not the future"
    );
}

#[test]
fn a_resolved_source_leaves_the_message() {
    let mut s = script("");
    let a = gpu_ecc_correctable("n1", "0");
    let b = gpu_ecc_correctable("n1", "1");
    s.at(0).poll(&[watchdog(), a.clone(), b.clone()]);
    s.at(5).webhook(&[b.resolved()]);
    assert_eq!(
        s.node("n1").conditions["gpu_ecc_errors"].message,
        "correctable ECC errors on GPU 0"
    );
}

#[test]
fn a_node_born_stale_records_why() {
    let mut s = script("");
    s.at(100).fail();
    s.took();
    s.at(101).webhook(&[smart_failing("late")]);
    let raised: Vec<String> = s
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ConditionRaised { condition, .. } => Some(condition.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(raised, [TELEMETRY_STALE, "disk_degraded"]);
}

#[test]
fn a_poll_fetched_before_a_delivery_does_not_undo_it() {
    let mut s = script("");
    let smart = smart_failing("n1");
    let ecc = gpu_ecc_uncorrectable("n1", "0");
    s.at(0).poll(&[watchdog(), heartbeat("n1"), smart.clone()]);
    // While the next poll was in flight: SMART resolved and ECC fired, by webhook.
    s.at(10).webhook(&[smart.clone().resolved(), ecc.clone()]);
    s.took();
    let stale_answer: Vec<Alert> = [watchdog(), heartbeat("n1"), smart.clone()]
        .iter()
        .map(|a| a.0.clone())
        .collect();
    let delivered: std::collections::BTreeSet<String> = [
        smart.0.fingerprint.to_string(),
        ecc.0.fingerprint.to_string(),
    ]
    .into();
    let at = t0() + TimeDelta::seconds(11);
    let out = s
        .fleet
        .poll_around(&s.cfg, at, at, &stale_answer, &delivered);
    s.record(out);
    assert_eq!(s.took(), Vec::<String>::new(), "neither revived nor ended");
    assert!(!s.node("n1").conditions.contains_key("disk_degraded"));
    assert!(s.node("n1").conditions.contains_key("gpu_ecc_errors"));
}
