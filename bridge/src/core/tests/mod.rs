//! Table and scenario tests for the decision core. Scenarios are timed scripts:
//! `at(0).poll([...])`, `at(95).tick()`, then the events and state expected.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use chrono::{TimeDelta, TimeZone};

mod hardening;
mod props;
mod remediation;

use super::labels::{Alert, AlertState, Annotations, Labels, Text};
use super::settings::CoreSettings;
use super::*;
use crate::config::Config;

const DAY: i64 = 86_400;
const WEEK: i64 = 7 * DAY;

fn config(yaml: &str) -> CoreSettings {
    Config::parse("test.yaml", yaml)
        .unwrap()
        .resolve("test.yaml", yaml)
        .unwrap()
        .core
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
    /// `startsAt` written as given.
    fn starts_text(mut self, text: &str) -> A {
        self.0.starts_at = Some(Cow::Owned(text.to_string()));
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
/// Job train-7 failed on `node` (`hale_signal="job_failure"`).
fn job_failed(node: &str) -> A {
    alert("JobFailedOnNode")
        .on(node)
        .label("hale_signal", "job_failure")
        .label("hale_job", "train-7")
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
    cfg: CoreSettings,
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
    /// `id`'s next action taken and done, as the act loop does it; the action.
    fn do_next(&mut self, id: &str) -> policy::Pending {
        let next = self.fleet.take_action(id).expect("an action queued");
        let out = self
            .fleet
            .action_done(&self.cfg, self.now, id, &next, &policy::Done::default());
        self.record(out);
        next
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
    /// hale stops and starts again now on what its store kept.
    fn restart(&mut self) -> &mut Self {
        let kept: Trust =
            serde_json::from_str(&serde_json::to_string(&self.fleet.trust).unwrap()).unwrap();
        self.fleet.trust = kept.resumed(self.now);
        self.fleet.trust.take_up();
        // What only the process remembered.
        self.fleet.clock_seen = None;
        self
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
    /// The events of type `kind` recorded since the last look.
    fn recorded(&self, kind: &str) -> Vec<&Event> {
        self.events
            .iter()
            .filter(|e| e.kind.name() == kind)
            .collect()
    }
    /// The orchestrator refuses the cordon queued for `id`.
    fn refuse_cordon(&mut self, id: &str) -> &mut Self {
        self.refuse(id, |a| matches!(a, policy::Action::Cordon { .. }))
    }
    /// The orchestrator refuses the first action queued for `id` that `which` picks.
    fn refuse(&mut self, id: &str, which: fn(&policy::Action) -> bool) -> &mut Self {
        let action = self
            .fleet
            .pending()
            .into_iter()
            .find(|(n, p)| n == id && which(&p.action))
            .expect("such an action queued")
            .1;
        let out = self
            .fleet
            .action_failed(&self.cfg, self.now, id, action.id, "refused: not ours");
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

/// Failures attributed after a node's first report are acted on at once: the
/// score they leave is its second, not a first to wait behind. A node never
/// reported stays unscored, whatever is attributed to it.
#[test]
fn failures_after_a_first_report_are_acted_on_without_another_report() {
    let mut s = script("");
    s.at(0).poll(&[watchdog(), heartbeat("n1")]);
    let listed = Listed {
        id: "n2".into(),
        hostname: None,
        labels: BTreeMap::new(),
    };
    s.fleet.register(&s.cfg, s.now, &[listed]);
    s.took();
    s.at(10);
    for _ in 0..12 {
        s.failure("n1").failure("n2");
    }
    assert_eq!(s.score("n1"), Some(40));
    assert_eq!(s.score("n2"), None);
    let took = s.took();
    assert!(
        took.contains(&"n1 POLICY_ACTED".to_string()),
        "gated: {took:?}"
    );
    // Two nodes: taking one out would leave half the pool; the guardrail halts.
    assert!(
        took.contains(&"n1 POLICY_HALTED".to_string()),
        "decided: {took:?}"
    );
    assert!(!took.iter().any(|e| e.starts_with("n2 POLICY")), "{took:?}");
    assert!(s.node("n1").policy.gated);
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

/// A failure reported after the fact keeps its own time: the deduction decays from
/// it, and the event carries it (the backtest replays the failure at that time).
#[test]
fn a_late_failure_report_keeps_when_the_job_failed() {
    let mut s = script("");
    s.at(0).poll(&[watchdog(), heartbeat("n1")]);
    s.at(2 * WEEK).poll(&[watchdog(), heartbeat("n1")]);
    s.took();
    let failed = t0() + chrono::TimeDelta::seconds(WEEK);
    let out = s
        .fleet
        .attribute_failure(&s.cfg, s.now, "n1", "old-job", None, Some(failed))
        .unwrap();
    s.record(out);
    assert_eq!(s.score("n1"), Some(97), "5 points a week old: 2.5 → 3 off");
    let e = s
        .events
        .iter()
        .find(|e| e.kind.name() == "JOB_FAILURE_ATTRIBUTED")
        .unwrap();
    assert!(
        matches!(e.kind, EventKind::JobFailureAttributed { failed_at: Some(t), .. } if t == failed),
        "{e:?}"
    );
    assert_eq!(e.occurred_at, s.now, "recorded when it was reported");
    // Nine of them, reported a week late, decay as old ones (45 points, a little
    // more than halved: score 78), nothing for the policy — live and in the
    // replay, which puts each back at its own time, not the report's (55 there).
    for _ in 0..8 {
        let out = s
            .fleet
            .attribute_failure(&s.cfg, s.now, "n1", "old-job", None, Some(failed))
            .unwrap();
        s.record(out);
    }
    s.at(2 * WEEK + 30).poll(&[watchdog(), heartbeat("n1")]);
    s.at(2 * WEEK + 60).poll(&[watchdog(), heartbeat("n1")]);
    assert_eq!(s.score("n1"), Some(78));
    let r = replay::backtest(&s.cfg, &s.fleet.nodes, &[], &s.events, None, s.now);
    assert!(r.recorded.is_empty(), "{r:?}");
    assert_eq!(r.candidate, r.recorded, "{r:?}");
}

/// A failure reported as older than `forgetAfter` is refused, as a `job_failure`
/// alert that started then is not counted: nothing changes, and the error says
/// why. One just inside it counts.
#[test]
fn a_failure_older_than_forget_after_is_refused() {
    let mut s = script("nodeIdentity: { forgetAfter: 7d }");
    s.at(0).poll(&[watchdog(), heartbeat("n1")]);
    s.at(2 * WEEK).poll(&[watchdog(), heartbeat("n1")]);
    s.took();
    let before = s.node("n1").clone();
    for failed in [
        chrono::DateTime::UNIX_EPOCH,
        s.now - TimeDelta::seconds(WEEK + 1),
    ] {
        let refused = s
            .fleet
            .attribute_failure(&s.cfg, s.now, "n1", "old-job", None, Some(failed))
            .unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("more than nodeIdentity.forgetAfter (7d) ago"),
            "{refused}"
        );
    }
    // Said as the configuration writes it.
    let mut short = script("nodeIdentity: { forgetAfter: 90m }");
    short.at(0).poll(&[watchdog(), heartbeat("n1")]);
    let refused = short
        .fleet
        .attribute_failure(
            &short.cfg,
            short.now,
            "n1",
            "j",
            None,
            Some(t0() - TimeDelta::hours(2)),
        )
        .unwrap_err();
    assert!(refused.to_string().contains("(1h30m) ago"), "{refused}");
    assert_eq!(*s.node("n1"), before, "nothing counted");
    let out = s
        .fleet
        .attribute_failure(
            &s.cfg,
            s.now,
            "n1",
            "late-job",
            None,
            Some(s.now - TimeDelta::seconds(WEEK - 60)),
        )
        .unwrap();
    s.record(out);
    assert_eq!(s.node("n1").failures.total, 1);
}

#[test]
fn failure_deduction_table() {
    let settings = config("").cluster;
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
    assert_eq!(
        c.message, "Xid 79 on GPU 0; Xid 13 on GPU 1",
        "the charged reason's message first"
    );
    // The hardware Xid's alert ends; the application one fires on: still critical,
    // still charged for the hardware Xid, whose message stays to explain it.
    s.took();
    s.at(30).poll(&[watchdog(), app]);
    let c = &s.node("n1").conditions["gpu_xid_errors"];
    assert_eq!(
        (c.severity, c.reason.as_str()),
        (Severity::Critical, "GpuXidHardware")
    );
    assert_eq!(c.message, "Xid 79 on GPU 0; Xid 13 on GPU 1");
    assert_eq!(s.score("n1"), Some(55));
    assert_eq!(
        s.took(),
        ["n1 CONDITION_UPDATED", "n1 POLICY_HALTED"],
        "an alert left it; and a second report of 55 in a one-node pool is a cordon \
         observe mode must say would be halted (20 % of 1 node is none)"
    );
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
        ["n1 CONDITION_UPDATED"],
        "one alert ending is recorded; the score stays"
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
    // hale's own conditions are never cleared by hand, in whatever case named.
    for own in ["heartbeat_missed", "Heartbeat_Missed", "TELEMETRY_STALE"] {
        let refused = s
            .fleet
            .clear_condition(&s.cfg, s.now, "n1", own, "x")
            .unwrap_err();
        assert!(
            matches!(
                refused,
                crate::core::outcome::CoreError::NotClearable { .. }
            ),
            "{own}: {refused}"
        );
    }
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
    // Its raise says so, for whoever reads the history or receives the event.
    let raised = s
        .events
        .drain(..)
        .find(|e| e.kind.name() == "CONDITION_RAISED")
        .unwrap();
    assert!(
        matches!(
            raised.kind,
            EventKind::ConditionRaised {
                suppressed: true,
                ..
            }
        ),
        "{raised:?}"
    );
    assert!(
        raised
            .message
            .contains("(suppressed: silenced or inhibited"),
        "{}",
        raised.message
    );
    let suppression = |s: &mut Script| -> Vec<(String, bool)> {
        s.events
            .drain(..)
            .map(|e| match e.kind {
                EventKind::ConditionUpdated { suppressed, .. } => (e.message, suppressed),
                k => (k.name().to_string(), false),
            })
            .collect()
    };
    s.at(30)
        .poll(&[watchdog(), heartbeat("n1"), smart_failing("n1")]);
    assert_eq!(s.score("n1"), Some(60), "the silence expired");
    let got = suppression(&mut s);
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(
        got[0].0.starts_with("disk_degraded no longer suppressed") && !got[0].1,
        "{got:?}"
    );
    assert_eq!(got[1].0, "SCORE_CHANGED");
    // Silenced again while raised: the score moves back, and the history says why.
    s.at(60).poll(&[
        watchdog(),
        heartbeat("n1"),
        smart_failing("n1").suppressed(),
    ]);
    assert_eq!(s.score("n1"), Some(100));
    let got = suppression(&mut s);
    assert!(
        got[0]
            .0
            .starts_with("disk_degraded suppressed: every alert")
            && got[0].1,
        "{got:?}"
    );
    assert_eq!(got[1].0, "SCORE_CHANGED");
}

/// Silenced or inhibited alerts beside a live one on the same condition count for
/// nothing: no severity, charge, stickiness, priority or remediation. A condition
/// they raised alone takes its latches from the first live alert that feeds it;
/// one a live alert fed keeps what the live alerts latched through a silence.
#[test]
fn silenced_alerts_beside_a_live_one_count_for_nothing() {
    let live = |node: &str| {
        alert("IoErrors")
            .on(node)
            .condition("disk_degraded", "IoErrors")
            .summary("I/O errors on /dev/sda")
    };
    let muted_reboot = |node: &str| {
        smart_failing(node)
            .label("hale_remediation", "reboot")
            .label("priority", "1")
            .sticky()
            .suppressed()
    };
    let mut s = script("");
    let both = |n: &str| vec![watchdog(), heartbeat(n), live(n), muted_reboot(n)];
    s.at(0).poll(&both("mixed"));
    let c = &s.node("mixed").conditions["disk_degraded"];
    assert_eq!(
        (
            c.severity,
            c.reason.as_str(),
            c.sticky,
            c.priority,
            c.remediation.as_deref()
        ),
        (Severity::Warning, "IoErrors", false, None, None),
        "raised beside a live alert"
    );
    assert!(!c.suppressed());
    assert_eq!(s.score("mixed"), Some(90));

    // Raised by the silenced alert alone: it shows what that says; the first live
    // alert starts the latches over.
    s.at(0)
        .poll(&[watchdog(), heartbeat("later"), muted_reboot("later")]);
    let c = &s.node("later").conditions["disk_degraded"];
    assert!(c.suppressed() && c.sticky && c.severity == Severity::Critical);
    assert_eq!(s.score("later"), Some(100));
    s.at(30).poll(&both("later"));
    let c = &s.node("later").conditions["disk_degraded"];
    assert_eq!(
        (
            c.severity,
            c.reason.as_str(),
            c.sticky,
            c.remediation.as_deref()
        ),
        (Severity::Warning, "IoErrors", false, None)
    );
    assert_eq!(s.score("later"), Some(90));
    // Both end: not sticky (only a silenced alert said so), it clears.
    s.at(60).poll(&[watchdog(), heartbeat("later")]);
    assert!(!s.node("later").conditions.contains_key("disk_degraded"));

    // A live sticky fault that ended keeps its latches through a silenced alert
    // and the end of its silence.
    let sticky_live = |n: &str| smart_failing(n).sticky();
    s.at(90)
        .poll(&[watchdog(), heartbeat("kept"), sticky_live("kept")]);
    s.at(120).poll(&[watchdog(), heartbeat("kept")]);
    s.at(150)
        .poll(&[watchdog(), heartbeat("kept"), live("kept").suppressed()]);
    s.at(180)
        .poll(&[watchdog(), heartbeat("kept"), live("kept")]);
    let c = &s.node("kept").conditions["disk_degraded"];
    assert!(c.sticky && c.severity == Severity::Critical && c.reason == "SmartFailing");
    assert_eq!(s.score("kept"), Some(60));
    s.at(210).poll(&[watchdog(), heartbeat("kept")]);
    assert!(
        s.node("kept").conditions.contains_key("disk_degraded"),
        "sticky"
    );
}

/// A worse severity with fewer points raises the severity, not the charge: the
/// charge only moves up while the condition is raised.
#[test]
fn an_escalation_never_lowers_the_charge() {
    let mut s = script("");
    let warning = alert("SmartWarning")
        .on("n1")
        .condition("disk_degraded", "SmartWarning");
    s.at(0)
        .poll(&[watchdog(), heartbeat("n1"), warning.clone()]);
    assert_eq!(s.score("n1"), Some(85));
    let xid = alert("WeirdCrit")
        .on("n1")
        .condition("disk_degraded", "GpuXidApplication")
        .critical();
    s.events.clear();
    s.at(30).poll(&[watchdog(), heartbeat("n1"), warning, xid]);
    let c = &s.node("n1").conditions["disk_degraded"];
    assert_eq!(
        (c.severity, c.reason.as_str()),
        (Severity::Critical, "SmartWarning")
    );
    assert_eq!(s.score("n1"), Some(85));
    assert!(
        s.events
            .iter()
            .any(|e| e.kind.name() == "CONDITION_ESCALATED"),
        "{:?}",
        s.events
    );
    assert!(!s.events.iter().any(|e| e.kind.name() == "SCORE_CHANGED"));
}

/// A reload that prices the reasons anew moves the charge, and the charged
/// reason's message leads the condition's again.
#[test]
fn a_reload_that_moves_the_charge_leads_with_its_message() {
    let mut s = script("");
    let disk = |name: &str, text: &str| {
        alert(name)
            .on("n1")
            .condition("disk_degraded", name)
            .critical()
            .summary(text)
    };
    let alerts = [
        watchdog(),
        heartbeat("n1"),
        disk("DeviceReadOnly", "a read-only"),
        disk("SmartFailing", "b failing"),
    ];
    s.at(0).poll(&alerts);
    let charged = s.node("n1").conditions["disk_degraded"].reason.to_string();
    let other = if charged == "SmartFailing" {
        "DeviceReadOnly"
    } else {
        "SmartFailing"
    };
    s.cfg = config(&format!("nodeHealth: {{ penalties: {{ {other}: 50 }} }}"));
    s.fleet.reconfigured();
    s.at(30).poll(&alerts);
    let c = &s.node("n1").conditions["disk_degraded"];
    assert_eq!(c.reason.as_str(), other);
    let lead = if other == "SmartFailing" {
        "b failing"
    } else {
        "a read-only"
    };
    assert!(c.message.starts_with(lead), "{}", c.message);
}

/// A score change says which penalties moved: a condition raised, and a reload
/// that prices a reason anew — which no condition event explains.
#[test]
fn a_score_change_says_which_penalties_moved() {
    let mut s = script("");
    let said = |s: &mut Script| -> Vec<String> {
        let said = s
            .recorded("SCORE_CHANGED")
            .iter()
            .map(|e| e.message.clone())
            .collect();
        s.events.clear();
        said
    };
    let alerts = [watchdog(), heartbeat("n1"), smart_failing("n1")];
    s.at(0).poll(&[watchdog(), heartbeat("n1")]);
    s.at(30).poll(&alerts);
    assert_eq!(
        said(&mut s),
        ["score 100 -> 60 (penalties: SmartFailing 0 -> 40)"]
    );
    s.cfg = config("nodeHealth: { penalties: { SmartFailing: 30 } }");
    s.fleet.reconfigured();
    s.at(60).poll(&alerts);
    assert_eq!(
        said(&mut s),
        ["score 60 -> 70 (penalties: SmartFailing 40 -> 30)"]
    );
}

/// One of several alerts silenced, or no longer: recorded as `CONDITION_UPDATED`.
#[test]
fn a_silence_over_one_of_several_alerts_is_recorded() {
    let mut s = script("");
    let io = alert("IoErrors")
        .on("n1")
        .condition("disk_degraded", "IoErrors");
    s.at(0)
        .poll(&[watchdog(), heartbeat("n1"), smart_failing("n1"), io.clone()]);
    s.events.clear();
    s.at(30).poll(&[
        watchdog(),
        heartbeat("n1"),
        smart_failing("n1"),
        io.clone().suppressed(),
    ]);
    let said: Vec<&str> = s.events.iter().map(|e| e.message.as_str()).collect();
    assert!(
        said.iter()
            .any(|m| m.starts_with("disk_degraded: 1 of the 2 alert(s) feeding it silenced")),
        "{said:?}"
    );
    s.events.clear();
    s.at(60)
        .poll(&[watchdog(), heartbeat("n1"), smart_failing("n1"), io]);
    let said: Vec<&str> = s.events.iter().map(|e| e.message.as_str()).collect();
    assert!(
        said.iter()
            .any(|m| m.starts_with("disk_degraded: 0 of the 2 alert(s)")),
        "{said:?}"
    );
    // The live one resolved, the silenced one left: said as now suppressed.
    s.at(90).poll(&[
        watchdog(),
        heartbeat("n1"),
        smart_failing("n1"),
        alert("IoErrors")
            .on("n1")
            .condition("disk_degraded", "IoErrors")
            .suppressed(),
    ]);
    s.events.clear();
    s.at(100).webhook(&[smart_failing("n1").resolved()]);
    let said: Vec<&str> = s.events.iter().map(|e| e.message.as_str()).collect();
    assert!(
        said.iter()
            .any(|m| m.starts_with("disk_degraded now fed by 1 alert(s)")
                && m.ends_with(
                    "(now suppressed: every alert feeding it is silenced or inhibited)"
                )),
        "{said:?}"
    );
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
    // Trust returns: stale clears, but what left meanwhile may be the expiry of a
    // stopped pipeline, so SMART's absence is held for holdAfterRestart (20 m).
    s.at(630)
        .poll(&[watchdog(), heartbeat("n1"), heartbeat("n2")]);
    assert!(!s.fleet.trust.stale && s.fleet.trust.source_up);
    assert!(s.fleet.trust.holding(s.now));
    assert!(s.node("n1").conditions.contains_key("disk_degraded"));
    assert_eq!(s.took(), ["n1 CONDITION_CLEARED", "n2 CONDITION_CLEARED"]);
    // Trust came back at 630 s: the hold ends 20 minutes later.
    s.at(630 + 1199)
        .poll(&[watchdog(), heartbeat("n1"), heartbeat("n2")]);
    assert!(s.node("n1").conditions.contains_key("disk_degraded"));
    s.at(630 + 1200)
        .poll(&[watchdog(), heartbeat("n1"), heartbeat("n2")]);
    assert!(s.node("n1").conditions.is_empty());
    assert_eq!(s.score("n1"), Some(100));
    assert_eq!(s.took(), ["n1 CONDITION_CLEARED", "n1 SCORE_CHANGED"]);
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
        // An answer without it, then: the pipeline shown alive past its window.
        s.at(*silence).poll(&[]);
        assert_eq!(
            s.node("n1").conditions.contains_key(HEARTBEAT_MISSED),
            *missed,
            "interval {interval:?}, {silence} s"
        );
    }
}

/// An inventory that changes one node of many writes that one: an event recorded
/// for a node (a cordon made outside hale) does not mark every node after it.
#[test]
fn an_inventory_writes_only_the_nodes_it_changed() {
    let mut s = script("orchestrator: { kind: kubernetes }");
    let ids = ["k1", "k2", "k3", "k4"];
    let all = |cordoned: &str| -> Vec<policy::Observed> {
        ids.iter()
            .map(|id| {
                let status = if *id == cordoned {
                    Status::Cordoned
                } else {
                    Status::Ready
                };
                shown(id, status)
            })
            .collect()
    };
    let out = s.fleet.observe(&s.cfg, s.now, &all(""));
    assert_eq!(out.dirty.len(), 4, "each new node written once");
    let out = s.fleet.observe(&s.cfg, s.now, &all(""));
    assert!(out.dirty.is_empty(), "{:?}", out.dirty);
    let out = s.fleet.observe(&s.cfg, s.now, &all("k2"));
    assert_eq!(
        out.events
            .iter()
            .map(|e| e.node_id.as_str())
            .collect::<Vec<_>>(),
        ["k2"]
    );
    assert_eq!(out.dirty.iter().collect::<Vec<_>>(), ["k2"]);
    // Its work counted on the cordoned node, and nothing else: written too (a
    // restart, or another leader, would otherwise wait on the count again).
    let mut counted = all("k2");
    counted[1].allocations = Some(0);
    assert!(!s.node("k2").policy.work_counted);
    let out = s.fleet.observe(&s.cfg, s.now, &counted);
    assert!(s.node("k2").policy.work_counted);
    assert_eq!(out.dirty.iter().collect::<Vec<_>>(), ["k2"]);
}

/// A tick waits for the earliest deadline the last look found; labels the
/// orchestrator's inventory changes may bring a node's deadline forward, and the
/// next tick looks again.
#[test]
fn new_labels_from_the_inventory_bring_a_miss_forward() {
    let mut s = script(
        "orchestrator: { kind: kubernetes }\n\
         nodeHealth: { heartbeatMissThreshold: 10 }\n\
         pools: [{ name: gpu, selector: { pool: gpu }, nodeHealth: { heartbeatMissThreshold: 2 } }]",
    );
    let mut cpu = shown("n1", Status::Ready);
    cpu.labels = [("pool".to_string(), "cpu".to_string())].into();
    let out = s.fleet.observe(&s.cfg, s.now, &[cpu]);
    s.record(out);
    // Missed 100 s after its last heartbeat in the cluster, 20 s in the pool.
    let every_10s = heartbeat("n1").label("hale_report_interval", "10s");
    s.at(0).poll(&[watchdog(), every_10s, smart_failing("n1")]);
    s.at(30).poll(&[watchdog(), smart_failing("n1")]);
    s.at(60).poll(&[watchdog(), smart_failing("n1")]);
    s.at(61).tick();
    s.took();
    // Now in the gpu pool, which misses a heartbeat after two intervals, not ten.
    let now = s.at(62).now;
    let out = s.fleet.observe(&s.cfg, now, &[shown("n1", Status::Ready)]);
    s.record(out);
    s.at(63).tick();
    assert_eq!(s.took(), ["n1 HEARTBEAT_MISSED"]);
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
    s.at(100)
        .poll(&[watchdog(), smart_failing("n1"), smart_failing("n2")]);
    let missed: Vec<&Event> = s
        .events
        .iter()
        .filter(|e| e.kind.name() == "HEARTBEAT_MISSED")
        .collect();
    assert!(
        missed[0]
            .message
            .ends_with("(100s ago; missed after 90s without one)"),
        "the time without one, and the window: {}",
        missed[0].message
    );
    assert_eq!(s.took(), ["n1 HEARTBEAT_MISSED"]);
    assert_eq!(s.health("n1"), Health::Degraded, "SMART at 60 still shows");
    let missed = s.fleet.nodes["n1"].conditions[HEARTBEAT_MISSED].clone();
    assert_eq!(missed.message, "no heartbeat since 2026-08-05T12:00:00Z");
    s.at(120).tick();
    assert_eq!(
        s.took(),
        Vec::<String>::new(),
        "missed once, not every tick"
    );
    s.at(150).poll(&[watchdog(), heartbeat("n1")]);
    let resumed = &s.recorded("HEARTBEAT_RESUMED")[0].message;
    assert_eq!(
        resumed,
        "heartbeat resumed (missing since its last heartbeat at 2026-08-05T12:00:00Z, 150s without one)",
        "since the last heartbeat, not since the miss was seen"
    );
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
    // Degraded takes evidence: at `degradedAtOrBelow: 100` any deduction
    // degrades, and a node nothing was deducted from — silent, say — is not.
    let strict = "nodeHealth: { degradedAtOrBelow: 100 }";
    let mut s = script(strict);
    s.at(0)
        .poll(&[watchdog(), heartbeat("n1"), heartbeat("n2")]);
    s.at(90).poll(&[
        watchdog(),
        heartbeat("n2"),
        alert("Odd").on("n2").label("severity", "info"),
        alert("Minor").on("n2").label("severity", "warning"),
    ]);
    assert_eq!(s.score("n1"), Some(100));
    assert!(s.node("n1").conditions.contains_key(HEARTBEAT_MISSED));
    assert_eq!(s.health("n1"), Health::Unknown, "silent, no evidence");
    assert_eq!(
        (s.score("n2"), s.health("n2")),
        (Some(95), Health::Degraded)
    );
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
    // Its class is its type's (DESIGN §3), not the alertname's.
    assert_eq!(c.fault_class, "COLLECTOR_FAILED");
    assert_eq!(s.node("n1").score.as_ref().unwrap().breakdown, vec![]);
    // The same alerts again change nothing.
    let events = s.events.len();
    s.at(30).poll(&[
        watchdog(),
        collector_failed("n1", "smart"),
        collector_failed("n1", "edac"),
    ]);
    assert_eq!(s.events.len(), events, "{:?}", &s.events[events..]);
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
    let fail = job_failed("n1").starts(t0());
    s.at(0).poll(&[watchdog(), heartbeat("n1"), fail.clone()]);
    s.at(30).poll(&[watchdog(), heartbeat("n1"), fail.clone()]);
    s.at(40).webhook(std::slice::from_ref(&fail));
    assert_eq!(s.node("n1").failures.total, 1);
    // The same alert twice in one delivery is one instance too.
    let twice = fail.clone().on("n2");
    s.at(45).webhook(&[twice.clone(), twice]);
    assert_eq!(s.node("n2").failures.total, 1);
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

/// An instance counts once however long it fires — past `forgetAfter`, when the
/// sweep forgets it — and when it drops out of one answer and comes back (an
/// Alertmanager restarted, its rule group not yet evaluated again).
#[test]
fn a_job_failure_firing_for_long_or_missing_from_a_poll_counts_once() {
    let mut s = script("nodeIdentity: { forgetAfter: 10m }");
    let fail = job_failed("n1").starts(t0());
    s.at(0).poll(&[watchdog(), heartbeat("n1"), fail.clone()]);
    s.at(30).poll(&[watchdog(), heartbeat("n1")]);
    s.at(60).poll(&[watchdog(), heartbeat("n1"), fail.clone()]);
    assert_eq!(
        s.node("n1").failures.total,
        1,
        "counted again on its return"
    );
    for t in (90..=1800).step_by(30) {
        s.at(t).poll(&[watchdog(), heartbeat("n1"), fail.clone()]);
    }
    assert_eq!(
        s.node("n1").failures.total,
        1,
        "counted again once forgotten"
    );
    assert!(s.node("n1").failures.counted_alerts.is_empty());
    // A new instance still counts.
    s.at(1830).poll(&[
        watchdog(),
        heartbeat("n1"),
        fail.starts(t0() + TimeDelta::seconds(1825)),
    ]);
    assert_eq!(s.node("n1").failures.total, 2);
}

/// A node remembers so many counted instances at most, the latest started: a job
/// alert flapping all week keeps its record small, and every instance still counts.
#[test]
fn counted_job_failures_are_remembered_up_to_a_bound() {
    let mut s = script("");
    let fail = job_failed("n1");
    s.at(0).poll(&[watchdog(), heartbeat("n1")]);
    for i in 0..300 {
        s.at(10 + i)
            .webhook(&[fail.clone().starts(t0() + TimeDelta::seconds(5 + i))]);
    }
    let node = s.node("n1");
    assert_eq!(node.failures.total, 300);
    assert_eq!(node.failures.counted_alerts.len(), 256);
    // The latest stay counted: sent again, not counted twice.
    s.at(400)
        .webhook(&[fail.starts(t0() + TimeDelta::seconds(5 + 299))]);
    assert_eq!(s.node("n1").failures.total, 300);
}

/// A silenced or inhibited job failure is not counted; should its silence end
/// while it fires, it counts then, once.
#[test]
fn a_silenced_job_failure_is_not_counted() {
    let mut s = script("");
    let fail = job_failed("n1").starts(t0());
    s.at(0)
        .poll(&[watchdog(), heartbeat("n1"), fail.clone().suppressed()]);
    s.at(10).webhook(&[fail.clone().suppressed()]);
    assert_eq!(s.node("n1").failures.total, 0);
    assert_eq!(s.score("n1"), Some(100));
    s.at(30).poll(&[watchdog(), heartbeat("n1"), fail.clone()]);
    s.at(60).poll(&[watchdog(), heartbeat("n1"), fail.clone()]);
    assert_eq!(s.node("n1").failures.total, 1);
    // Counted, then silenced, then live again: still the one failure.
    s.at(90)
        .poll(&[watchdog(), heartbeat("n1"), fail.clone().suppressed()]);
    s.at(100).webhook(&[fail.clone().suppressed()]);
    s.at(120).poll(&[watchdog(), heartbeat("n1"), fail]);
    assert_eq!(s.node("n1").failures.total, 1);
}

/// Alertmanager's webhook gives `startsAt` to the nanosecond, its API to the
/// millisecond: one instance delivered, polled, delivered again and polled counts
/// once, whatever the form of its time; a record that kept the time as sent reads
/// as the same instance.
#[test]
fn a_job_failure_delivered_and_polled_counts_once() {
    let mut s = script("");
    let fail = alert("JobFailed")
        .on("n1")
        .label("hale_signal", "job_failure")
        .label("hale_job", "sim-7");
    let delivered = fail.clone().starts_text("2026-08-05T11:59:58.829389123Z");
    let polled = fail.clone().starts_text("2026-08-05T11:59:58.829Z");
    let elsewhere = fail.clone().starts_text("2026-08-05T13:59:58.8293+02:00");
    s.at(0).poll(&[watchdog(), heartbeat("n1")]);
    s.at(5).webhook(std::slice::from_ref(&delivered));
    assert_eq!(s.node("n1").failures.total, 1);
    s.at(10)
        .poll(&[watchdog(), heartbeat("n1"), polled.clone()]);
    s.at(35).webhook(std::slice::from_ref(&delivered));
    s.at(40).webhook(std::slice::from_ref(&elsewhere));
    s.at(45)
        .poll(&[watchdog(), heartbeat("n1"), polled.clone()]);
    assert_eq!(s.node("n1").failures.total, 1);
    let counted = &s.node("n1").failures.counted_alerts;
    assert_eq!(counted.len(), 1, "{counted:?}");
    let key = counted.first().unwrap().clone();
    assert!(key.ends_with("@2026-08-05T11:59:58.829Z"), "{key}");

    let old = Failures {
        counted_alerts: [key.replace(".829Z", ".829389123Z")].into(),
        ..Failures::default()
    };
    let back: Failures = serde_json::from_str(&serde_json::to_string(&old).unwrap()).unwrap();
    assert_eq!(back.counted_alerts, [key].into());
    let unread = Failures {
        counted_alerts: ["abc@".to_string(), "abc@not a time".to_string()].into(),
        ..Failures::default()
    };
    let back: Failures = serde_json::from_str(&serde_json::to_string(&unread).unwrap()).unwrap();
    assert_eq!(back.counted_alerts, unread.counted_alerts, "kept as sent");
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

/// A watchdog not re-sent starts a hold, said once: each poll after it extends the
/// hold without saying it again (the log had a warning on every poll).
#[test]
fn a_watchdog_not_re_sent_is_said_once() {
    let mut s = script("");
    let mut said = Vec::new();
    for t in (0..=300).step_by(30) {
        s.at(t).poll(&[watchdog_sent(0), heartbeat("n1")]);
        if let Some(why) = &s.last.held {
            said.push((t, why.clone()));
        }
    }
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0]
            .1
            .starts_with("the watchdog has not been re-sent since "),
        "{said:?}"
    );
    assert!(s.fleet.trust.holding(s.now));
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
fn a_node_first_seen_while_stale_is_scored_by_the_first_trusted_poll() {
    let mut s = script("alertmanager: { staleAfter: 90s }");
    s.at(0).poll(&[watchdog_sent(0)]);
    s.at(100).fail();
    assert!(s.fleet.trust.stale);
    // Kept, but unscored: nothing trusted has said anything of it yet.
    s.at(110).webhook(&[edac("n1")]);
    assert_eq!(s.score("n1"), None);
    // The first trusted poll brings the same alert: nothing changed but the trust.
    s.at(111).poll(&[watchdog_sent(60), edac("n1")]);
    assert_eq!(s.score("n1"), Some(90));
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
    assert!(!s.node("n1").conditions.contains_key("heartbeat_missed"));
    s.at(300).poll(&[watchdog()]);
    s.at(320).tick();
    assert!(
        !s.node("n1").conditions.contains_key("heartbeat_missed"),
        "its window is over, but no trusted answer came since to show it missing"
    );
    s.at(330).poll(&[watchdog()]);
    assert!(
        s.node("n1").conditions.contains_key("heartbeat_missed"),
        "a trusted answer without it after a whole window: the node is missing"
    );
}

/// With polling off the watchdog may come as seldom as `staleAfter` allows:
/// heartbeats that stop with it leave every node as last seen until the source is
/// stale (so nothing acts on them missing: no fence).
#[test]
fn heartbeats_that_stop_with_the_watchdog_by_webhook_are_not_missed() {
    let mut s =
        script("alertmanager: { pollInterval: 0, staleAfter: 90s }\nnodeHealth: { mode: cordon }");
    let beat = |node: &str| heartbeat(node).label("hale_report_interval", "5s");
    s.at(0).webhook(&[watchdog(), beat("n1"), beat("n2")]);
    for t in 1..=89 {
        s.at(t).tick();
    }
    assert!(!s.fleet.trust.stale);
    for n in ["n1", "n2"] {
        assert!(
            !s.node(n).conditions.contains_key(HEARTBEAT_MISSED),
            "{n} missed on no news"
        );
    }
    s.at(90).tick();
    assert!(s.fleet.trust.stale, "the source is stale at staleAfter");
    assert!(
        s.events.iter().all(|e| !matches!(
            e.kind,
            EventKind::HeartbeatMissed { .. } | EventKind::RemediationStarted { .. }
        )),
        "{:?}",
        s.events
    );

    // n1's heartbeats keep coming without the watchdog (applied as trusted until
    // stale), n2's stop: a delivery of n1's shows nothing of n2's group, so n2 is
    // missing only once the watchdog comes again, past n2's window.
    let mut s = script("alertmanager: { pollInterval: 0, staleAfter: 90s }");
    s.at(0).webhook(&[watchdog(), beat("n1"), beat("n2")]);
    for t in (3..60).step_by(3) {
        s.at(t).webhook(&[beat("n1")]);
        s.tick();
    }
    assert!(!s.node("n2").conditions.contains_key(HEARTBEAT_MISSED));
    s.at(60).webhook(&[watchdog()]);
    s.tick();
    assert!(s.node("n2").conditions.contains_key(HEARTBEAT_MISSED));
    assert!(!s.node("n1").conditions.contains_key(HEARTBEAT_MISSED));
}

#[test]
fn a_notified_resolution_ends_at_once_and_a_notified_expiry_waits() {
    let mut s = script("alertmanager: { staleAfter: 1h }");
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
    assert!(s.node("n2").conditions.contains_key("disk_degraded"));
    // The watchdog has moved twice since: Prometheus kept sending, so it ended.
    s.at(260).poll(&[watchdog_sent(120), heartbeat("n1")]);
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

/// Without polling nothing reconciles later: a resolution that arrives while stale
/// is kept until trust returns and the hold that starts then lapses — unless the
/// alert fires again meanwhile (it had expired with a stopped Prometheus).
#[test]
fn webhook_only_keeps_a_stale_resolution_until_trust_and_its_hold() {
    let mut s =
        script("alertmanager: { pollInterval: 0, staleAfter: 60s, holdAfterRestart: 300s }");
    s.at(0)
        .webhook(&[watchdog(), smart_failing("n1"), smart_failing("n2")]);
    s.at(60).tick();
    assert!(s.fleet.trust.stale);
    s.at(70).webhook(&[
        smart_failing("n1").resolved(),
        smart_failing("n2").resolved(),
    ]);
    s.at(80).webhook(&[smart_failing("n2")]);
    s.at(200).tick();
    assert!(
        s.node("n1").conditions.contains_key("disk_degraded"),
        "not while stale"
    );
    s.at(300).webhook(&[watchdog()]);
    assert!(!s.fleet.trust.stale);
    assert!(s.fleet.trust.holding(s.now));
    for t in (350..600).step_by(50) {
        s.at(t).webhook(&[watchdog()]);
    }
    s.at(599).tick();
    assert!(
        s.node("n1").conditions.contains_key("disk_degraded"),
        "held"
    );
    s.at(600).tick();
    assert!(
        !s.node("n1").conditions.contains_key("disk_degraded"),
        "ended once the hold lapsed"
    );
    assert!(
        s.node("n2").conditions.contains_key("disk_degraded"),
        "fired again after its resolution"
    );
    assert!(!s.fleet.trust.held_resolutions);
}

/// What an alert says is kept to a bound: a megabyte of summary or a long label
/// value is clipped, and many alerts' texts joined in one condition are cut.
#[test]
fn alert_texts_are_kept_to_a_bound() {
    let mut s = script("");
    let huge = "é".repeat(600_000);
    let reason = "r".repeat(5_000);
    // Alertmanager's fingerprint is 16 hex digits; the helpers' grow with labels.
    let mut big = smart_failing("n1")
        .label("hale_reason", &reason)
        .summary(&huge);
    big.0.fingerprint = Cow::Borrowed("0123456789abcdef");
    s.at(0).poll(&[watchdog(), heartbeat("n1"), big]);
    let cond = &s.node("n1").conditions["disk_degraded"];
    assert!(cond.message.len() <= 1024, "{}", cond.message.len());
    // All the node keeps: what its record writes.
    let record = serde_json::to_string(s.node("n1")).unwrap();
    assert!(record.len() < 8 * 1024, "{}", record.len());
    assert!(cond.message.starts_with('é'));
    assert!(cond.reason.len() <= 1024);
    assert!(s.events.iter().all(|e| e.message.len() < 2 * 1024));
    let many: Vec<A> = (0..40)
        .map(|i| {
            alert(&format!("Disk{i}"))
                .on("n1")
                .condition("disk_degraded", "SmartFailing")
                .summary(&format!("{i}{}", "m".repeat(900)))
        })
        .chain([watchdog(), heartbeat("n1")])
        .collect();
    s.at(30).poll(&many);
    let message = &s.node("n1").conditions["disk_degraded"].message;
    assert!(message.len() <= 5 * 1024, "{}", message.len());
    assert!(
        message.ends_with("more"),
        "{}",
        &message[message.len() - 20..]
    );
}

/// A node one rule names 1,200 times keeps a source for the 64 most severe, so its
/// record stays far under a NATS message's 1 MiB; the condition is as severe as
/// its most severe alert.
#[test]
fn a_condition_keeps_a_bounded_number_of_sources() {
    let mut s = script("");
    let text = "x".repeat(1000);
    let flood = |n: usize| -> Vec<A> {
        (0..n)
            .map(|i| {
                let a = alert(&format!("Flood{i}"))
                    .on("n1")
                    .condition("disk_degraded", "SmartWarning")
                    .summary(&format!("{i} {text}"));
                if i == 1_199 { a.critical() } else { a }
            })
            .collect()
    };
    let mut polled = flood(1_200);
    polled.extend([watchdog(), heartbeat("n1")]);
    s.at(0).poll(&polled);
    let cond = &s.node("n1").conditions["disk_degraded"];
    assert_eq!(cond.sources.len(), 64);
    assert_eq!(cond.severity, Severity::Critical);
    // The alerts past the kept are counted: the message and events say how many.
    assert_eq!(cond.unkept, 1_136);
    assert!(cond.message.ends_with(" more"), "{}", cond.message);
    let more: usize = cond
        .message
        .rsplit("… and ")
        .next()
        .unwrap()
        .trim_end_matches(" more")
        .parse()
        .unwrap();
    assert!(more >= 1_136, "{more}");
    let raised = s
        .events
        .iter()
        .find(|e| e.kind.name() == "CONDITION_RAISED")
        .unwrap();
    assert!(raised.message.ends_with(" more"), "{}", raised.message);
    // Fewer alerts past the kept: an update that says so.
    s.events.clear();
    let mut fewer = flood(1_100);
    fewer.extend([watchdog(), heartbeat("n1")]);
    s.at(5).poll(&fewer);
    let cond = &s.node("n1").conditions["disk_degraded"];
    assert_eq!(cond.unkept, 1_036);
    assert!(
        s.events
            .iter()
            .any(|e| matches!(e.kind, EventKind::ConditionUpdated { alerts: 1_100, .. })),
        "{:?}",
        s.events
    );
    let record = serde_json::to_string(s.node("n1")).unwrap();
    assert!(record.len() < 256 * 1024, "{}", record.len());
    // Deliveries add no more once it is full.
    s.at(10).webhook(&flood(100));
    assert_eq!(s.node("n1").conditions["disk_degraded"].sources.len(), 64);
}

/// A record more than a store's message holds is cut down to fit: each condition
/// keeps its most severe sources (one at least), its severity and points as they
/// were, its message joined from what it kept; a record that fits comes back as
/// it is, and one that cannot fit even so is `None`.
#[test]
fn a_record_is_fitted_to_a_store_limit() {
    let mut s = script("");
    let text = "y".repeat(1000);
    let mut polled: Vec<A> = ["disk_degraded", "nic_flapping", "ecc_errors"]
        .into_iter()
        .flat_map(|ctype| {
            let text = &text;
            (0..64).map(move |i| {
                let a = alert(&format!("{ctype}{i}"))
                    .on("n1")
                    .condition(ctype, "SmartWarning")
                    .summary(&format!("{ctype} {i} {text}"));
                if i == 40 { a.critical() } else { a }
            })
        })
        .collect();
    polled.extend([watchdog(), heartbeat("n1")]);
    s.at(0).poll(&polled);
    let node = s.node("n1").clone();
    let size = |n: &Node| serde_json::to_string(n).unwrap().len();
    assert!(size(&node) > 192 * 1024, "{}", size(&node));

    assert_eq!(node.fitted(size(&node), size).as_ref(), Some(&node));
    let limit = 64 * 1024;
    let fitted = node.fitted(limit, size).expect("fits");
    assert!(size(&fitted) <= limit, "{}", size(&fitted));
    assert_eq!(fitted.score, node.score);
    for (ctype, cond) in node.conditions.iter() {
        let kept = &fitted.conditions[ctype.as_str()];
        assert!(
            !kept.sources.is_empty() && kept.sources.len() < 64,
            "{ctype}"
        );
        assert_eq!(kept.severity, Severity::Critical);
        assert_eq!(kept.reason, cond.reason);
        assert!(
            kept.sources
                .values()
                .any(|s| s.severity == Severity::Critical),
            "{ctype} keeps its critical alert"
        );
        // Joined again from the charged message and the kept alerts alone.
        let shown = |m: &str| kept.message.contains(&m[..40]);
        let mut messages: BTreeSet<&str> =
            kept.sources.values().map(|s| s.message.as_str()).collect();
        messages.insert(&kept.charged_message);
        let mut dropped = cond
            .sources
            .values()
            .filter(|s| !messages.contains(s.message.as_str()));
        assert!(dropped.all(|s| !shown(&s.message)), "{ctype}");
        let listed = messages.iter().filter(|m| shown(m)).count();
        let more = messages.len() - listed;
        assert!(
            more > 0,
            "{ctype}: the kept alerts' texts are more than a message joins"
        );
        assert!(
            kept.message.ends_with(&format!("… and {more} more")),
            "{ctype}"
        );
    }
    assert_eq!(node.fitted(2 * 1024, size), None);
}

/// Past the 64 kept, the live are kept before the silenced: 70 silenced critical
/// alerts do not push out the one live warning, nor make the condition suppressed.
#[test]
fn silenced_alerts_never_crowd_out_a_live_one() {
    let mut s = script("");
    let mut polled: Vec<A> = (0..70)
        .map(|i| {
            alert(&format!("Muted{i:02}"))
                .on("n1")
                .condition("c1", "GpuXidHardware")
                .critical()
                .suppressed()
        })
        .collect();
    polled.push(alert("ZLive").on("n1").condition("c1", "IoErrors"));
    polled.extend([watchdog(), heartbeat("n1")]);
    s.at(0).poll(&polled);
    let c = &s.node("n1").conditions["c1"];
    assert!(
        !c.suppressed()
            && c.sources
                .contains_key("fp-ZLive|node=n1|hale_condition=c1|hale_reason=IoErrors")
    );
    assert_eq!(
        (c.severity, c.reason.as_str()),
        (Severity::Warning, "IoErrors")
    );
    assert_eq!(s.score("n1"), Some(90));
}

/// Without polling, a delivery's alerts past the kept are counted too: the most any
/// delivery named past them (a delivery names only some of a condition's alerts).
#[test]
fn a_delivery_counts_the_alerts_past_the_kept() {
    let mut s = script("alertmanager: { pollInterval: 0 }");
    let many = |n: usize| -> Vec<A> {
        (0..n)
            .map(|i| {
                alert(&format!("Big{i:03}"))
                    .on("m2")
                    .condition("big", "Big")
            })
            .collect()
    };
    s.at(0).webhook(&[watchdog()]);
    s.at(1).webhook(&many(110));
    let c = &s.node("m2").conditions["big"];
    assert_eq!((c.sources.len(), c.unkept), (64, 46));
    assert!(c.message.ends_with("… and 46 more"), "{}", c.message);
    // A full condition counts each alert of a delivery once, whichever the cap
    // would have kept: 64 delivered, then 70 (ids that sort apart from their order).
    let unpadded = |n: usize| -> Vec<A> {
        (0..n)
            .map(|i| alert(&format!("Gpu{i}")).on("m3").condition("gpu", "Gpu"))
            .collect()
    };
    s.at(1).webhook(&unpadded(64));
    s.at(1).webhook(&unpadded(70));
    let c = &s.node("m3").conditions["gpu"];
    assert_eq!((c.sources.len(), c.unkept), (64, 6));
    s.events.clear();
    s.at(2).webhook(&many(120));
    assert_eq!(s.node("m2").conditions["big"].unkept, 56);
    assert!(
        s.events
            .iter()
            .any(|e| matches!(e.kind, EventKind::ConditionUpdated { alerts: 120, .. })),
        "{:?}",
        s.events
    );
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

/// `heartbeat_missed`, `telemetry_stale` and `collector_failed` are hale's view of
/// what it cannot see: an alert naming one as its type is unmatched and raises
/// nothing (a sticky one could never be cleared), and as a reason costs nothing.
#[test]
fn alerts_cannot_raise_hales_own_conditions_nor_price_its_reasons() {
    let mut s = script("");
    let claims = [
        alert("Forge")
            .on("f0")
            .condition("telemetry_stale", "Forge"),
        alert("Forge")
            .on("f0")
            .label("hale_condition", "heartbeat_missed"),
        alert("Forge")
            .on("f0")
            .label("hale_condition", "collector_failed"),
        alert("telemetry_stale").on("f0"),
        // In any case, with white space around it: one clear refuses.
        alert("Forge")
            .on("f0")
            .label("hale_condition", "HEARTBEAT_MISSED"),
        alert("Forge")
            .on("f0")
            .label("hale_condition", " Telemetry_Stale"),
        alert("Collector_Failed").on("f0"),
    ];
    for claim in claims {
        let claim = claim.critical().sticky();
        s.at(0).poll(&[watchdog(), claim.clone()]);
        assert_eq!(s.last.unmatched, 1, "polled");
        s.webhook(&[claim]);
        assert_eq!(s.last.unmatched, 1, "delivered");
        assert!(s.fleet.nodes.is_empty(), "no node brought in");
    }
    s.at(0).poll(&[
        watchdog(),
        heartbeat("f1"),
        alert("Forge")
            .on("f1")
            .condition("forged", "heartbeat_missed")
            .critical(),
        alert("Forge2")
            .on("f1")
            .condition("forged2", "collector_failed"),
        alert("Forge3")
            .on("f1")
            .condition("forged3", "Heartbeat_Missed")
            .critical(),
    ]);
    assert!(s.node("f1").conditions.contains_key("forged"));
    assert_eq!(s.score("f1"), Some(100), "hale's own reasons cost nothing");
}

/// A condition an earlier version let an alert raise under one of hale's own
/// names in another case is the alert's, and an operator clears it.
#[test]
fn an_alerts_condition_in_another_case_of_hales_own_clears() {
    let mut s = script("");
    s.at(0).poll(&[
        watchdog(),
        heartbeat("n1"),
        alert("Forge").on("n1").condition("old", "Forge").sticky(),
    ]);
    let node = s.fleet.nodes.get_mut("n1").unwrap();
    let held = node.conditions.remove("old").unwrap();
    node.conditions.insert("HEARTBEAT_MISSED".into(), held);
    let out = s
        .fleet
        .clear_condition(&s.cfg, s.now, "n1", "HEARTBEAT_MISSED", "forged")
        .unwrap();
    s.record(out);
    assert!(s.node("n1").conditions.is_empty());
    assert!(matches!(
        s.fleet
            .clear_condition(&s.cfg, s.now, "n1", "heartbeat_missed", "x"),
        Err(CoreError::NotClearable { .. })
    ));
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
        Listed {
            id: "gpu-14".into(),
            hostname: Some("gpu14.example".into()),
            labels: BTreeMap::from([("pool".into(), "gpu".into())]),
        },
        Listed {
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
    // Dropped from the list (a reload): known from alerts alone from now on, its
    // state kept; the node still listed is untouched.
    let out = s.fleet.register(&s.cfg, s.now, &inv[..1]);
    assert_eq!(out.dirty.iter().collect::<Vec<_>>(), ["cpu-1"]);
    assert_eq!(s.node("cpu-1").known_from, Origin::Alerts);
    assert_eq!(s.node("gpu-14").known_from, Origin::Inventory);
    assert_eq!(s.score("cpu-1"), Some(70));
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
    // Alerts still naming it bring back a record nothing acts on for a while, as
    // after a replacement (its machine gone on purpose).
    s.at(5).poll(&[watchdog(), smart_failing("n1")]);
    assert!(crate::core::policy::just_replaced(s.node("n1"), s.now));
    s.at(5 + 16 * 60).poll(&[watchdog(), smart_failing("n1")]);
    assert!(!crate::core::policy::just_replaced(s.node("n1"), s.now));
    s.fleet.nodes.remove("n1");
    // A node the inventory lists stays until the inventory lets it go: alerts
    // naming it again would bring it back outside its pool.
    let ids = s.pool("g", 2, "gpu");
    let e = s.fleet.decommission(&s.cfg, s.now, &ids[0]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "node g-0 is listed in the configuration's inventory, which would bring it back: remove it there and reload first"
    );
    assert_eq!(s.node(&ids[0]).labels["pool"], "gpu");
    let out = s.fleet.register(&s.cfg, s.now, &[]);
    s.record(out);
    let out = s.fleet.decommission(&s.cfg, s.now, &ids[0]).unwrap();
    assert_eq!(out.removed, [ids[0].clone()]);
    // So does one the orchestrator lists: it goes when it leaves the cluster.
    let out = s
        .fleet
        .observe(&s.cfg, s.now, &[shown("k1", Status::Ready)]);
    s.record(out);
    let e = s.fleet.decommission(&s.cfg, s.now, "k1").unwrap_err();
    assert!(e.to_string().contains("listed by the orchestrator"), "{e}");
    assert!(s.fleet.nodes.contains_key("k1"));
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
    s.at(300).restart();
    s.at(301).tick();
    assert_eq!(
        s.took(),
        Vec::<String>::new(),
        "nobody is missed on stale memory"
    );
    // Trust returns with the restart's first trusted poll: every heartbeat gets a
    // whole window from it.
    s.at(302).poll(&[watchdog(), heartbeat("n2")]);
    assert_eq!(s.took(), Vec::<String>::new());
    s.at(391).poll(&[watchdog(), heartbeat("n2")]);
    assert_eq!(s.took(), Vec::<String>::new());
    s.at(392).poll(&[watchdog(), heartbeat("n2")]);
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
        s.last.touched.is_empty(),
        "report and heartbeat times saved at the first poll are fresh enough"
    );
    assert_eq!(s.node("n1").last_report, Some(s.now));
    assert_eq!(s.node("n1").conditions["disk_degraded"].observations, 2);
    for t in (60..300).step_by(30) {
        s.at(t).poll(&alerts);
        assert!(
            s.last.touched.is_empty() && s.last.dirty.is_empty(),
            "at {t}"
        );
    }
    s.at(300).poll(&alerts);
    assert!(
        s.last.touched.contains("n1"),
        "report and heartbeat times saved every five minutes"
    );
    assert!(s.last.dirty.is_empty(), "{:?}", s.last.dirty);
    s.at(330).poll(&alerts);
    assert!(s.last.touched.is_empty());
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

/// A large Alertmanager answers slowly (half a minute at 500,000 alerts): polls
/// every 5 s then land 35 s apart, more than `staleAfter` (three poll intervals),
/// and a pipeline that answers every time is not stale. Staleness is counted
/// beyond three answers' time; a source that stops answering still goes stale.
#[test]
fn slow_answers_are_not_a_stale_source() {
    let mut s = script("alertmanager: { pollInterval: 5s }");
    let slow_poll = |s: &mut Script, at: i64| {
        let now = t0() + TimeDelta::seconds(at);
        s.now = now;
        let alerts: Vec<Alert> = [watchdog(), heartbeat("n1")]
            .iter()
            .map(|a| a.0.clone())
            .collect();
        let answer = PollAnswer {
            took: std::time::Duration::from_secs(30),
            ..PollAnswer::of(&alerts, now)
        };
        let out = s.fleet.poll_answer(&s.cfg, now, &answer);
        s.record(out);
    };
    for at in (0..600).step_by(35) {
        slow_poll(&mut s, at);
        s.at(at + 34).tick();
        assert!(!s.fleet.trust.stale, "at {}", at + 34);
    }
    assert!(!s.took().iter().any(|e| e.contains("CONDITION_RAISED")));
    // The last answer at 595: stale once 15 s + 3 × 30 s have passed without one.
    s.at(595 + 104).tick();
    assert!(!s.fleet.trust.stale);
    s.at(595 + 105).tick();
    assert!(s.fleet.trust.stale);
    // Fast answers allow staleAfter alone.
    let mut fast = script("alertmanager: { pollInterval: 5s }");
    fast.at(0).poll(&[watchdog(), heartbeat("n1")]);
    fast.at(15).tick();
    assert!(fast.fleet.trust.stale);
}

/// A poll's answer that arrived in time but waits to be applied (behind big
/// deliveries, on a loaded machine) is not a silent source: no step goes stale
/// while it waits, for `staleAfter` past its arrival at most; it ends no
/// staleness before it is judged.
#[test]
fn an_answer_waiting_to_be_applied_is_not_a_stale_source() {
    let mut s = script("alertmanager: { pollInterval: 2s, staleAfter: 6s }");
    let at = |secs: i64| t0() + TimeDelta::seconds(secs);
    s.at(0).poll(&[watchdog(), heartbeat("n1")]);
    // The next answer arrived at 3 and waits: a tick and a delivery at 7 and 8,
    // past `staleAfter` since the last trusted poll, leave the fleet as it was.
    s.fleet.trust.answer_waiting = Some(at(3));
    s.at(7).tick();
    s.at(8).webhook(&[heartbeat("n2")]);
    assert!(!s.fleet.trust.stale);
    // Applied at 8: trusted, nothing raised, no hold begun.
    s.fleet.trust.answer_waiting = None;
    s.at(8).poll(&[watchdog(), heartbeat("n1")]);
    assert!(!s.fleet.trust.stale && s.fleet.trust.hold_until.is_none());
    assert!(!s.took().iter().any(|e| e.contains(TELEMETRY_STALE)));
    // An answer waiting `staleAfter` since it arrived no longer stands in.
    s.fleet.trust.answer_waiting = Some(at(10));
    s.at(15).tick();
    assert!(!s.fleet.trust.stale);
    s.at(16).tick();
    assert!(s.fleet.trust.stale);
    // Nor does one that arrives while stale end it: only its judgement can.
    s.took();
    s.fleet.trust.answer_waiting = Some(at(17));
    s.at(17).tick();
    assert!(s.fleet.trust.stale);
    assert_eq!(s.took(), Vec::<String>::new());
}

/// What a steady poll holds in memory between saves — observation counts, the
/// policy's count of scored reports — is written by a clean stop: those nodes
/// whole, a node that only reported its report times; a node never reported is
/// not written.
#[test]
fn a_stop_writes_what_reports_held_in_memory() {
    let mut s = script("");
    let alerts = [
        watchdog(),
        heartbeat("n1"),
        smart_failing("n1"),
        heartbeat("n2"),
    ];
    let listed = Listed {
        id: "n3".into(),
        hostname: None,
        labels: BTreeMap::new(),
    };
    s.fleet.register(&s.cfg, s.now, &[listed]);
    s.at(0).poll(&alerts);
    for t in [30, 60, 90] {
        s.at(t).poll(&alerts);
        assert!(s.last.dirty.is_empty() && s.last.touched.is_empty());
    }
    assert_eq!(s.node("n1").conditions["disk_degraded"].observations, 4);
    assert_eq!(s.node("n2").policy.scored_reports, 2);
    let out = s.fleet.stop(&s.cfg, s.now);
    assert_eq!(
        out.dirty,
        BTreeSet::from(["n1".to_string(), "n2".to_string()])
    );
    assert!(out.touched.is_empty());
    // A node whose count was written with a change of its own: report times alone.
    s.fleet.nodes.get_mut("n2").unwrap().policy.count_unsaved = false;
    let out = s.fleet.stop(&s.cfg, s.now);
    assert_eq!(out.dirty, BTreeSet::from(["n1".to_string()]));
    assert_eq!(out.touched, BTreeSet::from(["n2".to_string()]));
}

#[test]
fn a_restart_does_not_end_staleness_without_trusted_input() {
    let mut s = script("");
    s.at(0).poll(&[watchdog(), heartbeat("n1")]);
    s.at(200).fail();
    assert!(s.fleet.trust.stale);
    s.took();
    // hale restarts: the stored trust says stale; the restart grace must not clear it.
    s.at(300).restart();
    s.at(301).tick();
    assert!(s.fleet.trust.stale);
    assert!(s.node("n1").conditions.contains_key(TELEMETRY_STALE));
    assert_eq!(s.took(), Vec::<String>::new());
    s.at(302).poll(&[watchdog(), heartbeat("n1")]);
    assert!(!s.fleet.trust.stale);
    assert_eq!(s.took(), ["n1 CONDITION_CLEARED"]);
}

/// Polling, a restart gives the source until its first poll is answered or two fail
/// (at most `staleAfter`, 90 s here) before the time since the last trusted answer
/// counts; without polling there is no grace: a hale restarted more often than
/// `staleAfter` still goes stale when the watchdog stops coming.
#[test]
fn a_restart_waits_for_the_first_poll_and_not_for_a_delivery() {
    let mut s = script("");
    s.at(0).poll(&[watchdog(), heartbeat("n1")]);
    s.at(100).restart();
    s.at(150).tick();
    assert!(!s.fleet.trust.stale, "the first poll is not in yet");
    s.at(160).fail();
    assert!(
        !s.fleet.trust.stale,
        "one failure may be Alertmanager starting too"
    );
    s.at(165).fail();
    assert!(
        s.fleet.trust.stale,
        "asked twice and no answer, 165 s after the last"
    );
    assert!(s.node("n1").conditions.contains_key(TELEMETRY_STALE));

    let mut s = script("");
    s.at(0).poll(&[watchdog(), heartbeat("n1")]);
    s.at(100).restart();
    s.at(189).tick();
    assert!(!s.fleet.trust.stale);
    s.at(190).tick();
    assert!(
        s.fleet.trust.stale,
        "staleAfter since the restart, no poll landed"
    );

    let mut s = script("alertmanager: { pollInterval: 0, staleAfter: 600s }");
    s.at(0).webhook(&[watchdog(), heartbeat("n1")]);
    assert!(s.fleet.trust.source_up);
    for restart in [200, 400, 590] {
        s.at(restart).restart();
        s.at(restart + 1).tick();
        assert!(!s.fleet.trust.stale, "{restart}");
    }
    s.at(600).tick();
    assert!(
        s.fleet.trust.stale,
        "600 s since the last watchdog, restarts or not"
    );
    s.at(610).webhook(&[watchdog(), heartbeat("n1")]);
    assert!(!s.fleet.trust.stale);
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
    let answer = PollAnswer {
        delivered: &delivered,
        ..PollAnswer::of(&stale_answer, at)
    };
    let out = s.fleet.poll_answer(&s.cfg, at, &answer);
    s.record(out);
    assert_eq!(s.took(), Vec::<String>::new(), "neither revived nor ended");
    assert!(!s.node("n1").conditions.contains_key("disk_degraded"));
    assert!(s.node("n1").conditions.contains_key("gpu_ecc_errors"));
}

// ---- Policy (DESIGN §6–§7) ----------------------------------------------------

fn ecc(node: &str) -> A {
    gpu_ecc_uncorrectable(node, "0")
}

/// A node whose score is 55 (SmartFailing 40 + GPU ECC correctable... ) is built
/// from conditions: `low(n)` scores 55, `very_low(n)` 15.
fn low(node: &str) -> Vec<A> {
    vec![heartbeat(node), ecc(node)]
}
fn very_low(node: &str) -> Vec<A> {
    vec![heartbeat(node), ecc(node), smart_failing(node)]
}

impl Script {
    /// Register `n` nodes `prefix-0..` in pool `pool`.
    fn pool(&mut self, prefix: &str, n: usize, pool: &str) -> Vec<String> {
        let inv: Vec<Listed> = (0..n)
            .map(|i| Listed {
                id: format!("{prefix}-{i}"),
                hostname: None,
                labels: [("pool".to_string(), pool.to_string())].into(),
            })
            .collect();
        let out = self.fleet.register(&self.cfg, self.now, &inv);
        self.record(out);
        inv.into_iter().map(|n| n.id).collect()
    }
    /// A trusted poll where `sick` nodes carry `alerts` and the rest only report.
    fn report(&mut self, ids: &[String], sick: &[&str], alerts: Sick) -> &mut Self {
        let mut all = vec![watchdog()];
        for id in ids {
            if sick.contains(&id.as_str()) {
                all.extend(alerts(id));
            } else {
                all.push(heartbeat(id));
            }
        }
        self.poll(&all)
    }
    fn policy_events(&mut self) -> Vec<String> {
        self.events
            .drain(..)
            .filter(|e| {
                let n = e.kind.name();
                n.starts_with("POLICY_") || (n.starts_with("NODE_") && n != "NODE_DECOMMISSIONED")
            })
            .map(|e| format!("{} {}", e.node_id, policy_detail(&e)))
            .collect()
    }
}

fn policy_detail(e: &Event) -> String {
    match &e.kind {
        EventKind::PolicyRecommended { action, .. } => format!("POLICY_RECOMMENDED {action}"),
        EventKind::PolicyActed { action, .. } => format!("POLICY_ACTED {action}"),
        EventKind::PolicyHalted {
            action, guardrail, ..
        } => format!("POLICY_HALTED {action} {guardrail}"),
        EventKind::NodeCordoned { by, .. } => format!("NODE_CORDONED {by}"),
        EventKind::NodeUncordoned { by, .. } => format!("NODE_UNCORDONED {by}"),
        EventKind::NodeDrained { by, active, .. } => format!("NODE_DRAINED {by} active={active}"),
        EventKind::NodeEvicted {
            fault_class,
            moved,
            failed,
            blocked: 0,
        } => format!("NODE_EVICTED {fault_class} moved={moved} failed={failed}"),
        EventKind::NodeEvicted {
            fault_class,
            moved,
            failed,
            blocked,
        } => format!("NODE_EVICTED {fault_class} moved={moved} failed={failed} blocked={blocked}"),
        other => other.name().to_string(),
    }
}

/// The alerts of a degraded node.
type Sick = fn(&str) -> Vec<A>;

const GPU_POOL: &str =
    "pools: [{ name: gpu, selector: { pool: gpu }, nodeHealth: { mode: MODE } }]";

fn pool_script(mode: &str) -> Script {
    script(&GPU_POOL.replace("MODE", mode))
}

#[test]
fn the_action_follows_mode_and_thresholds() {
    // (mode, alerts, expected conclusion events on the second report)
    let table: &[(&str, Sick, &[&str])] = &[
        ("observe", low, &["POLICY_RECOMMENDED cordon"]),
        (
            "observe",
            very_low,
            &["POLICY_ACTED gate", "POLICY_RECOMMENDED drain"],
        ),
        (
            "cordon",
            low,
            &["NODE_CORDONED hale", "POLICY_ACTED cordon"],
        ),
        (
            "cordon",
            very_low,
            &[
                "POLICY_ACTED gate",
                "NODE_CORDONED hale",
                "POLICY_ACTED cordon",
            ],
        ),
        ("drain", low, &["NODE_CORDONED hale", "POLICY_ACTED cordon"]),
        (
            "drain",
            very_low,
            &[
                "POLICY_ACTED gate",
                "NODE_CORDONED hale",
                "NODE_DRAINED hale active=false",
                "POLICY_ACTED drain",
            ],
        ),
    ];
    for (mode, alerts, want) in table {
        let mut s = pool_script(mode);
        let ids = s.pool("g", 10, "gpu");
        s.at(0).report(&ids, &["g-0"], *alerts);
        assert_eq!(
            s.policy_events(),
            Vec::<String>::new(),
            "{mode}: first score never acts"
        );
        s.at(30).report(&ids, &["g-0"], *alerts);
        let got = s.policy_events();
        let want: Vec<String> = want.iter().map(|w| format!("g-0 {w}")).collect();
        assert_eq!(got, want, "{mode}");
        let cordoned = s.node("g-0").status == Status::Cordoned;
        assert_eq!(
            cordoned,
            *mode != "observe",
            "{mode}: observe changes nothing"
        );
        // A node stuck there records nothing more.
        for t in (60..=7 * DAY).step_by(3600) {
            s.at(t).report(&ids, &["g-0"], *alerts);
        }
        assert_eq!(
            s.policy_events(),
            Vec::<String>::new(),
            "{mode}: one event per conclusion"
        );
    }
}

#[test]
fn rack_power_loss_acts_on_at_most_the_ceiling() {
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    let rack = ["g-3", "g-4", "g-5"];
    s.at(0).report(&ids, &[], low);
    s.at(30).report(&ids, &rack, low);
    s.at(60).report(&ids, &rack, low);
    let got = s.policy_events();
    assert_eq!(
        got,
        [
            "g-3 NODE_CORDONED hale",
            "g-3 POLICY_ACTED cordon",
            "g-4 NODE_CORDONED hale",
            "g-4 POLICY_ACTED cordon",
            "g-5 POLICY_HALTED cordon maxUnavailablePercent",
        ]
    );
    for t in [90, 120, 150] {
        s.at(t).report(&ids, &rack, low);
    }
    assert_eq!(
        s.policy_events(),
        Vec::<String>::new(),
        "the halt is recorded once"
    );
}

/// A halted drain whose score rises between the thresholds is still halted for
/// the drain: within an episode no conclusion steps down, a halt included.
#[test]
fn a_halted_drain_does_not_step_down_to_a_halted_cordon() {
    let mut s = pool_script("drain");
    let ids = s.pool("g", 10, "gpu");
    let rack = ["g-3", "g-4", "g-5"];
    s.at(0).report(&ids, &[], low);
    s.at(30).report(&ids, &rack, very_low);
    s.at(60).report(&ids, &rack, very_low);
    let halted: Vec<String> = s
        .policy_events()
        .into_iter()
        .filter(|e| e.starts_with("g-5"))
        .collect();
    assert_eq!(
        halted,
        [
            "g-5 POLICY_ACTED gate",
            "g-5 POLICY_HALTED drain maxUnavailablePercent"
        ]
    );
    let mut all = vec![watchdog()];
    for id in &ids {
        match id.as_str() {
            "g-3" | "g-4" => all.extend(very_low(id)),
            "g-5" => all.extend(low(id)),
            _ => all.push(heartbeat(id)),
        }
    }
    s.at(90).poll(&all);
    assert_eq!(s.policy_events(), Vec::<String>::new());
    assert!(matches!(
        s.node("g-5").policy.conclusion,
        Some(policy::Conclusion::Halted {
            action: policy::Verdict::Drain,
            ..
        })
    ));
}

/// A node an operator cordoned that then scores below cordonBelow: the policy's
/// verdict holds with nothing done, and its event says so rather than claim the
/// cordon as the policy's — in observe mode too, where it would do nothing.
#[test]
fn the_policy_claims_no_cordon_an_operator_made() {
    let table = [
        (
            "cordon",
            "POLICY_ACTED",
            "cordon: score 55; cordoned by operator already, so nothing done",
            "cordon: score 55",
        ),
        (
            "observe",
            "POLICY_RECOMMENDED",
            "would cordon: score 55; cordoned by operator already, so nothing would be done (observe mode changes nothing)",
            "would cordon: score 55 (observe mode changes nothing)",
        ),
    ];
    for (mode, kind, operators, other) in table {
        let mut s = pool_script(mode);
        let ids = s.pool("g", 10, "gpu");
        s.at(0).report(&ids, &[], low);
        s.at(30).report(&ids, &[], low);
        s.fleet.cordon(s.now, "g-0", "bios").unwrap();
        s.at(60).report(&ids, &["g-0", "g-1"], low);
        s.at(90).report(&ids, &["g-0", "g-1"], low);
        let concluded: Vec<(String, String)> = s
            .events
            .iter()
            .filter(|e| e.kind.name() == kind)
            .map(|e| (e.node_id.clone(), e.message.clone()))
            .collect();
        assert_eq!(
            concluded,
            [
                ("g-0".into(), operators.into()),
                ("g-1".into(), other.into())
            ],
            "{mode}"
        );
    }
}

/// A node an operator cordoned (in Slurm, drained: the drain is the cordon) that
/// then scores below drainBelow: hale does not drain it over them — no drain
/// sent to write its reason over theirs, no `NODE_DRAINED` claiming one — and
/// its verdict says so.
#[test]
fn the_policy_drains_no_node_an_operator_took_out() {
    let mut s = pool_script("drain");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &[], very_low);
    s.at(30).report(&ids, &[], very_low);
    s.fleet.cordon(s.now, "g-0", "disk swap - bob").unwrap();
    s.took();
    s.at(60).report(&ids, &["g-0"], very_low);
    s.at(90).report(&ids, &["g-0"], very_low);
    let score = s.score("g-0").unwrap();
    let messages: Vec<String> = s
        .events
        .iter()
        .filter(|e| e.node_id == "g-0" && e.kind.name() == "POLICY_ACTED")
        .map(|e| e.message.clone())
        .collect();
    let took = s.took();
    assert!(!took.iter().any(|e| e.contains("NODE_DRAINED")), "{took:?}");
    assert_eq!(
        messages.last().unwrap(),
        &format!("drain: score {score}; cordoned by operator already, so nothing done"),
        "{messages:?}"
    );
    assert!(
        !s.node("g-0")
            .policy
            .pending
            .iter()
            .any(|p| matches!(p.action, policy::Action::Drain { .. })),
        "no drain sent"
    );
}

/// An operator's verb without a reason says so without a dangling colon.
#[test]
fn operator_verbs_name_their_reason_when_given() {
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &[], low);
    let mut messages = Vec::new();
    for (id, reason) in [("g-0", ""), ("g-1", "firmware update")] {
        let out = s.fleet.cordon(s.now, id, reason).unwrap();
        messages.extend(out.events.iter().map(|e| e.message.clone()));
        let out = s.fleet.uncordon(s.now, id, reason).unwrap();
        messages.extend(out.events.iter().map(|e| e.message.clone()));
    }
    assert_eq!(
        messages,
        [
            "cordoned by operator",
            "uncordoned by operator",
            "cordoned by operator: firmware update",
            "uncordoned by operator: firmware update"
        ]
    );
}

/// A passive drain an operator made already, for the reason of their cordon or
/// of their last drain (or none given), changes nothing and records nothing;
/// another reason (recorded as the drain's: the cordon keeps its own), an active
/// drain, or one not done yet is recorded as asked.
#[test]
fn a_passive_drain_done_already_records_nothing() {
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &[], low);
    let out = s.fleet.drain(s.now, "g-0", false, "disk swap").unwrap();
    s.record(out);
    // Queued, not done yet: asked again, it is recorded again.
    let out = s.fleet.drain(s.now, "g-0", false, "disk swap").unwrap();
    assert!(!out.events.is_empty());
    while s.fleet.pending().iter().any(|(n, _)| n == "g-0") {
        s.do_next("g-0");
    }
    s.took();
    for reason in ["disk swap", ""] {
        let out = s.fleet.drain(s.now, "g-0", false, reason).unwrap();
        assert!(
            out.events.is_empty() && out.dirty.is_empty(),
            "{reason:?}: {:?}",
            out.events
        );
        assert!(s.fleet.pending().is_empty());
    }
    let out = s.fleet.drain(s.now, "g-0", false, "rack move").unwrap();
    s.record(out);
    assert_eq!(s.took(), ["g-0 NODE_DRAINED"]);
    assert_eq!(
        s.node("g-0").policy.cordon.as_ref().unwrap().reason,
        "disk swap"
    );
    while s.fleet.pending().iter().any(|(n, _)| n == "g-0") {
        s.do_next("g-0");
    }
    // The same drain again, for its own reason: nothing.
    let out = s.fleet.drain(s.now, "g-0", false, "rack move").unwrap();
    assert!(out.events.is_empty(), "{:?}", out.events);
    s.took();
    let out = s.fleet.drain(s.now, "g-0", true, "rack move").unwrap();
    assert!(
        s.fleet
            .pending()
            .iter()
            .any(|(n, p)| n == "g-0"
                && matches!(p.action, policy::Action::Drain { active: true, .. })),
        "{:?}",
        out.events
    );
}

/// An operator's cordon the orchestrator refuses is said in the history beside
/// its NODE_CORDONED, with why: the node stays as the orchestrator shows it.
#[test]
fn a_refused_operator_cordon_is_recorded_with_why() {
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &[], low);
    let out = s.fleet.cordon(s.now, "g-0", "firmware update").unwrap();
    s.record(out);
    assert_eq!(s.policy_events(), ["g-0 NODE_CORDONED operator"]);
    s.refuse_cordon("g-0");
    assert_eq!(s.node("g-0").status, Status::Ready);
    assert!(
        s.events.iter().any(|e| e
            .message
            .contains("the operator's cordon was refused: refused: not ours")),
        "why is said"
    );
    assert_eq!(s.policy_events(), ["g-0 POLICY_HALTED cordon orchestrator"]);
    // A node the orchestrator showed not ready (the one Fuzzball refuses to
    // drain) stays not ready, not shown ready until the next inventory.
    let mut down = shown("g-1", Status::NotReady);
    down.not_ready = true;
    let out = s.fleet.observe(&s.cfg, s.now, &[down]);
    s.record(out);
    let out = s.fleet.cordon(s.now, "g-1", "firmware update").unwrap();
    s.record(out);
    assert_eq!(s.node("g-1").status, Status::Cordoned);
    s.refuse_cordon("g-1");
    assert_eq!(s.node("g-1").status, Status::NotReady);
}

#[test]
fn operator_cordons_count_against_the_ceiling() {
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &[], low);
    let out = s.fleet.cordon(s.now, "g-0", "firmware update").unwrap();
    s.record(out);
    let out = s.fleet.cordon(s.now, "g-1", "firmware update").unwrap();
    s.record(out);
    s.policy_events();
    s.at(30).report(&ids, &["g-5"], low);
    s.at(60).report(&ids, &["g-5"], low);
    assert_eq!(
        s.policy_events(),
        ["g-5 POLICY_HALTED cordon maxUnavailablePercent"]
    );
    assert_eq!(s.node("g-5").status, Status::Ready);
}

/// An uncordon not yet done leaves the node out of service in the cluster: it
/// counts against the ceiling until the orchestrator has done it (an operator's
/// uncordon behind a slow cordon let another node be cordoned past the ceiling).
#[test]
fn an_uncordon_not_yet_done_counts_against_the_ceiling() {
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &[], low);
    for n in ["g-0", "g-1"] {
        let out = s.fleet.cordon(s.now, n, "firmware update").unwrap();
        s.record(out);
        s.do_next(n);
    }
    let out = s.fleet.uncordon(s.now, "g-0", "done early").unwrap();
    s.record(out);
    assert_eq!(s.node("g-0").status, Status::Ready);
    s.policy_events();
    s.at(30).report(&ids, &["g-5"], low);
    s.at(60).report(&ids, &["g-5"], low);
    assert_eq!(
        s.policy_events(),
        ["g-5 POLICY_HALTED cordon maxUnavailablePercent"]
    );
    // Done: g-0 is back in service, and g-5 is taken out.
    let uncordon = s.do_next("g-0");
    assert_eq!(uncordon.action, policy::Action::Uncordon);
    s.at(90).report(&ids, &["g-5"], low);
    assert_eq!(s.node("g-5").status, Status::Cordoned);
}

/// An operator's cordon asked again with a new reason records it (the node's
/// record and the event); asked again with the same one, it changes nothing.
#[test]
fn an_operators_cordon_asked_again_records_a_new_reason_only() {
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &[], low);
    s.policy_events();
    for reason in ["first", "second", "second", ""] {
        let out = s.fleet.cordon(s.now, "g-0", reason).unwrap();
        s.record(out);
    }
    assert_eq!(
        s.policy_events(),
        ["g-0 NODE_CORDONED operator", "g-0 NODE_CORDONED operator"]
    );
    let cordon = s.node("g-0").policy.cordon.clone().unwrap();
    assert_eq!(
        (cordon.by, cordon.reason.as_str()),
        (policy::Actor::Operator, "second")
    );
    assert!(
        s.node("g-0").policy.pending.iter().any(|p| p.action
            == policy::Action::Cordon {
                by: policy::Actor::Operator,
                reason: "second".into()
            }),
        "the node's record on the cluster follows"
    );
}

#[test]
fn a_manual_uncordon_holds_automation_off_for_the_window() {
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &["g-0"], low);
    s.at(30).report(&ids, &["g-0"], low);
    assert_eq!(s.node("g-0").status, Status::Cordoned);
    s.policy_events();
    let out = s.fleet.uncordon(s.now, "g-0", "checked the DIMM").unwrap();
    s.record(out);
    assert_eq!(s.policy_events(), ["g-0 NODE_UNCORDONED operator"]);
    // Still degraded, inside the 30-minute window: halted once, never re-cordoned.
    for t in (60..=29 * 60).step_by(30) {
        s.at(t).report(&ids, &["g-0"], low);
    }
    assert_eq!(
        s.policy_events(),
        ["g-0 POLICY_HALTED cordon cordonSuppressionMinutes"]
    );
    assert_eq!(s.node("g-0").status, Status::Ready);
    // After it: the policy acts again.
    s.at(31 * 60).report(&ids, &["g-0"], low);
    assert_eq!(
        s.policy_events(),
        ["g-0 NODE_CORDONED hale", "g-0 POLICY_ACTED cordon"]
    );
}

/// A restarted hale decides nothing on what its store kept until trusted input
/// arrives: the suppression window lapsed while it was down, and the stored
/// conditions may have ended since.
#[test]
fn after_a_restart_nothing_is_decided_before_trusted_input() {
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &["g-0"], low);
    s.at(30).report(&ids, &["g-0"], low);
    let out = s.fleet.uncordon(s.now, "g-0", "checked the DIMM").unwrap();
    s.record(out);
    s.at(60).report(&ids, &["g-0"], low);
    s.policy_events();
    // Down from 90 s; back after the window, Alertmanager not answering yet.
    s.at(2 * 3600).restart();
    for t in (2 * 3600..2 * 3600 + 60).step_by(10) {
        s.at(t).tick();
    }
    let out = s
        .fleet
        .poll_failed(&s.cfg, s.now, "connection refused".into());
    s.record(out);
    s.at(2 * 3600 + 70).tick();
    assert_eq!(s.policy_events(), Vec::<String>::new());
    assert_eq!(s.node("g-0").status, Status::Ready);
    // The first trusted poll still shows it degraded: now the policy acts.
    s.at(2 * 3600 + 80).report(&ids, &["g-0"], low);
    assert_eq!(
        s.policy_events(),
        ["g-0 NODE_CORDONED hale", "g-0 POLICY_ACTED cordon"]
    );
}

/// Conditions that clear when their alerts end, scoring 50.
fn flapping(node: &str) -> Vec<A> {
    vec![
        heartbeat(node),
        smart_failing(node),
        gpu_ecc_correctable(node, "0"),
    ]
}

#[test]
fn a_flapping_condition_records_one_conclusion() {
    let mut s = pool_script("observe");
    let ids = s.pool("g", 10, "gpu");
    for (i, t) in (0..3600).step_by(30).enumerate() {
        let sick: &[&str] = if i % 2 == 1 { &["g-0"] } else { &[] };
        s.at(t).report(&ids, sick, flapping);
    }
    assert_eq!(s.policy_events(), ["g-0 POLICY_RECOMMENDED cordon"]);
    // A recovery that holds makes the next degradation a new episode.
    s.at(4000).report(&ids, &[], flapping);
    s.at(4000 + 16 * 60).report(&ids, &[], flapping);
    s.at(6000).report(&ids, &["g-0"], flapping);
    assert_eq!(s.policy_events(), ["g-0 POLICY_RECOMMENDED cordon"]);
}

/// A gate done leaves the pools' counts standing: a fleet gated at once would
/// otherwise make every delivery meanwhile a pass over every node. A cordon done
/// has them counted afresh.
#[test]
fn a_gate_done_keeps_the_pools_counted() {
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &["g-0"], very_low);
    s.at(30).report(&ids, &["g-0"], very_low);
    let pending = s.fleet.pending();
    assert!(
        pending
            .iter()
            .any(|(_, p)| matches!(p.action, policy::Action::Gate { on: true })),
        "{pending:?}"
    );
    for (id, p) in pending {
        assert!(s.fleet.pools.is_some());
        let gate = matches!(p.action, policy::Action::Gate { .. });
        let out = s
            .fleet
            .action_done(&s.cfg, s.now, &id, &p, &policy::Done::default());
        s.record(out);
        assert_eq!(s.fleet.pools.is_some(), gate, "{p:?}");
        s.at(31).tick();
    }
}

/// A gate the orchestrator refuses (Fuzzball has none short of a cordon): the
/// node is not shown gated, and later reports do not ask again while the
/// decision stands; a new decision (lifted, then gated again) asks afresh.
#[test]
fn a_refused_gate_is_not_shown_and_not_asked_again() {
    let mut s = pool_script("observe");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &["g-0"], very_low);
    s.at(30).report(&ids, &["g-0"], very_low);
    let gate = |s: &Script| {
        s.fleet
            .pending()
            .into_iter()
            .find(|(_, p)| p.action == policy::Action::Gate { on: true })
    };
    let (id, p) = gate(&s).expect("the gate decided");
    let out = s
        .fleet
        .action_failed(&s.cfg, s.now, &id, p.id, "no scheduling gate");
    s.record(out);
    let shown = |s: &Script| s.node("g-0").policy.gate_holds();
    assert!(!shown(&s), "refused: not gated");
    s.at(60).report(&ids, &["g-0"], very_low);
    assert!(
        gate(&s).is_none(),
        "not asked again while the decision stands"
    );
    assert!(!shown(&s));
    // Recovered past the hold, then down again: a new decision, asked again.
    s.at(90).report(&ids, &[], very_low);
    s.at(90 + 16 * 60).report(&ids, &[], very_low);
    s.at(2000).report(&ids, &["g-0"], very_low);
    assert!(gate(&s).is_some(), "a new decision asks again");
    assert!(shown(&s), "decided and not refused: shown gated");
}

/// An operator's uncordon while hale's cordon is under way (an orchestrator slow
/// to answer): the node shows in service meanwhile, but the cordon may land yet,
/// so the uncordon stays queued and is sent after it — the verb waits for that,
/// rather than saying the node is back while the cordon lands. A cordon only
/// queued, or one whose try ended without landing, is withdrawn: the node shown
/// in service is the uncordon done.
#[test]
fn an_uncordon_behind_a_cordon_under_way_is_sent_after_it() {
    let ready = policy::Observed {
        labels: [("pool".to_string(), "gpu".to_string())].into(),
        ..shown("g-0", Status::Ready)
    };
    let queued = |s: &Script| -> Vec<policy::Action> {
        s.fleet
            .pending()
            .into_iter()
            .map(|(_, p)| p.action)
            .collect()
    };
    let cordoned = |s: &mut Script| {
        let ids = s.pool("g", 10, "gpu");
        s.at(0).report(&ids, &["g-0"], low);
        s.at(30).report(&ids, &["g-0"], low);
    };
    // Under way: it lands after the uncordon, which is then sent.
    let mut s = pool_script("cordon");
    cordoned(&mut s);
    let cordon = s.fleet.take_action("g-0").expect("hale's cordon queued");
    assert!(matches!(cordon.action, policy::Action::Cordon { .. }));
    let out = s.fleet.uncordon(s.now, "g-0", "changed my mind").unwrap();
    s.record(out);
    let out = s.fleet.observe(&s.cfg, s.now, std::slice::from_ref(&ready));
    s.record(out);
    assert_eq!(queued(&s), [policy::Action::Uncordon], "not taken for done");
    let out = s
        .fleet
        .action_done(&s.cfg, s.now, "g-0", &cordon, &policy::Done::default());
    s.record(out);
    assert_eq!(queued(&s), [policy::Action::Uncordon], "queued once");
    assert_eq!(s.node("g-0").status, Status::Ready);
    assert!(s.node("g-0").policy.cordon.is_none());
    let uncordon = s.do_next("g-0");
    assert_eq!(uncordon.action, policy::Action::Uncordon);
    assert!(queued(&s).is_empty());
    assert!(s.fleet.under_way.is_empty());

    // Under way and refused (never landed): the node in service is the uncordon.
    let mut s = pool_script("cordon");
    cordoned(&mut s);
    let cordon = s.fleet.take_action("g-0").unwrap();
    let out = s.fleet.uncordon(s.now, "g-0", "changed my mind").unwrap();
    s.record(out);
    let out = s
        .fleet
        .action_failed(&s.cfg, s.now, "g-0", cordon.id, "refused: not ours");
    s.record(out);
    let out = s.fleet.observe(&s.cfg, s.now, std::slice::from_ref(&ready));
    s.record(out);
    assert!(queued(&s).is_empty(), "{:?}", queued(&s));

    // Only queued: withdrawn, and the node in service is the uncordon done.
    let mut s = pool_script("cordon");
    cordoned(&mut s);
    let out = s.fleet.uncordon(s.now, "g-0", "changed my mind").unwrap();
    s.record(out);
    let out = s.fleet.observe(&s.cfg, s.now, std::slice::from_ref(&ready));
    s.record(out);
    assert!(queued(&s).is_empty(), "{:?}", queued(&s));
}

#[test]
fn the_first_score_never_acts() {
    let mut s = pool_script("drain");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &["g-0"], very_low);
    assert_eq!(s.policy_events(), Vec::<String>::new());
    assert_eq!(s.node("g-0").status, Status::Ready);
    assert!(!s.node("g-0").policy.gated);
    s.at(30).report(&ids, &["g-0"], very_low);
    assert!(s.node("g-0").policy.gated);
    assert_eq!(s.node("g-0").status, Status::Cordoned);
}

#[test]
fn blind_nodes_are_held_without_action_or_event() {
    for blind in ["collector_failed", "heartbeat_missed", "telemetry_stale"] {
        let mut s = pool_script("drain");
        let ids = s.pool("g", 10, "gpu");
        s.at(0).report(&ids, &[], low);
        let alerts: fn(&str) -> Vec<A> = |n| {
            let mut a = very_low(n);
            a.push(collector_failed(n, "gpu"));
            a
        };
        match blind {
            "collector_failed" => {
                s.at(30).report(&ids, &["g-0"], alerts);
                s.at(60).report(&ids, &["g-0"], alerts);
            }
            "heartbeat_missed" => {
                s.at(30).report(&ids, &[], low);
                s.at(200).poll(&[watchdog()]);
                assert!(s.node("g-0").conditions.contains_key("heartbeat_missed"));
                s.at(230)
                    .poll(&[watchdog(), ecc("g-0"), smart_failing("g-0")]);
                s.at(260)
                    .poll(&[watchdog(), ecc("g-0"), smart_failing("g-0")]);
            }
            _ => {
                s.at(30).report(&ids, &["g-0"], very_low);
                s.policy_events();
                s.at(200).fail();
                assert!(s.fleet.trust.stale);
                s.at(230).tick();
            }
        }
        let events: Vec<String> = s
            .policy_events()
            .into_iter()
            .filter(|e| e.starts_with("g-0") && blind != "telemetry_stale")
            .collect();
        assert_eq!(events, Vec::<String>::new(), "{blind}: no policy event");
        if blind != "telemetry_stale" {
            assert_eq!(s.node("g-0").status, Status::Ready, "{blind}: no action");
        }
    }
}

fn replace_pool(s: &mut Script, n: usize) -> Vec<String> {
    let ids = s.pool("c", n, "gpu");
    for id in &ids {
        s.fleet.nodes.get_mut(id).unwrap().policy.provisioned = true;
    }
    ids
}

/// Perform every pending action as an orchestrator that always succeeds, and
/// counts the work left on the node as the test set it.
fn act(s: &mut Script) {
    for (id, pending) in s.fleet.pending() {
        let remaining = s.fleet.nodes.get(&id).map(|n| n.policy.allocations);
        let done = policy::Done {
            remaining,
            ..policy::Done::default()
        };
        let out = s.fleet.action_done(&s.cfg, s.now, &id, &pending, &done);
        s.record(out);
    }
}

/// The orchestrator has counted the work on these nodes since they were taken out
/// (as many allocations as the test set). Like the inventory that reports it, this
/// leaves the pools to be counted afresh, so the next step passes over every node.
fn counted(s: &mut Script, ids: &[&str]) {
    for id in ids {
        s.fleet.nodes.get_mut(*id).unwrap().policy.work_counted = true;
    }
    s.fleet.pools = None;
}

/// The pending actions, by node, without their ids.
fn actions(s: &Script) -> Vec<(String, policy::Action)> {
    s.fleet
        .pending()
        .into_iter()
        .map(|(id, p)| (id, p.action))
        .collect()
}

/// The id of node `id`'s pending `action`.
fn pending_id(s: &Script, id: &str, action: &policy::Action) -> u64 {
    s.node(id)
        .policy
        .pending
        .iter()
        .find(|p| p.action == *action)
        .expect("pending")
        .id
}

#[test]
fn replace_waits_for_the_node_to_empty_then_terminates() {
    let mut s = pool_script("replace");
    let ids = replace_pool(&mut s, 10);
    s.fleet.nodes.get_mut("c-0").unwrap().policy.allocations = 2;
    s.at(0).report(&ids, &["c-0"], very_low);
    s.at(30).report(&ids, &["c-0"], very_low);
    assert!(
        actions(&s)
            .iter()
            .all(|(_, a)| *a != policy::Action::Terminate),
        "taken out just now: its work is not counted yet"
    );
    // The orchestrator cordons it and counts the 2 allocations on it.
    act(&mut s);
    s.tick();
    let waiting = s
        .events
        .iter()
        .find(|e| e.kind.name() == "POLICY_ACTED" && e.message.contains("waiting on 2"))
        .cloned();
    assert!(
        waiting.is_some(),
        "POLICY_ACTED names the allocations it waits on"
    );
    s.policy_events();
    s.fleet.nodes.get_mut("c-0").unwrap().policy.allocations = 0;
    s.at(60).report(&ids, &["c-0"], very_low);
    assert_eq!(
        actions(&s),
        [("c-0".to_string(), policy::Action::Terminate)]
    );
    act(&mut s);
    assert!(!s.fleet.nodes.contains_key("c-0"));
    let events = s.policy_events();
    assert_eq!(
        events.last().unwrap(),
        "c-0 NODE_REPLACED",
        "the node's last event"
    );
}

/// The old machine's alerts outlive its replacement by minutes: a record they (or
/// the orchestrator, still listing the name) make meanwhile is shown and scored,
/// and nothing acts on it for `REPLACED_HOLD`; after it, what is said of the name
/// counts afresh (a first score, then acted on).
#[test]
fn a_replaced_nodes_lingering_alerts_move_nothing() {
    let mut s = pool_script("replace");
    let ids = replace_pool(&mut s, 10);
    s.at(0).report(&ids, &["c-0"], very_low);
    s.at(30).report(&ids, &["c-0"], very_low);
    act(&mut s);
    counted(&mut s, &["c-0"]);
    s.at(60).report(&ids, &["c-0"], very_low);
    act(&mut s);
    assert!(!s.fleet.nodes.contains_key("c-0"), "replaced");
    let replaced_at = s.now;
    s.policy_events();
    for t in (90..60 + 15 * 60).step_by(30) {
        s.at(t).report(&ids, &["c-0"], very_low);
        act(&mut s);
    }
    let n = s.node("c-0");
    assert_eq!(n.policy.replaced_at, Some(replaced_at));
    assert_eq!(s.score("c-0"), Some(15), "scored, and shown");
    assert!(!s.node("c-0").policy.gated);
    assert!(actions(&s).is_empty(), "{:?}", actions(&s));
    assert!(s.policy_events().is_empty());
    assert!(
        s.fleet.ledger.replaced.is_empty(),
        "the mark went to the record"
    );
    // Past the hold: its first score there moves nothing, the next one acts.
    s.at(60 + 15 * 60).report(&ids, &["c-0"], very_low);
    assert!(s.policy_events().is_empty());
    s.at(90 + 15 * 60).report(&ids, &["c-0"], very_low);
    assert!(s.node("c-0").policy.gated, "{:?}", s.policy_events());
    // The orchestrator's listing takes the mark as the alerts do, and a marked
    // record that leaves the cluster leaves no departure in the history.
    s.fleet.ledger.replaced.insert("k9".into(), s.now);
    let out = s
        .fleet
        .observe(&s.cfg, s.now, &[shown("k9", Status::Ready)]);
    assert!(out.ledger);
    s.record(out);
    assert_eq!(s.node("k9").policy.replaced_at, Some(s.now));
    s.took();
    let out = s
        .fleet
        .observe(&s.cfg, s.now, &[shown("k8", Status::Ready)]);
    assert_eq!(out.removed, ["k9"]);
    s.record(out);
    assert!(!s.took().iter().any(|e| e.starts_with("k9")));
}

/// The hold follows the name, not the record: a new machine the orchestrator
/// shows under it meanwhile (a new uid) is held too; once the hold is over the
/// mark goes, and the name leaving the cluster is a departure as any other.
#[test]
fn the_replacement_hold_follows_the_name_and_then_ends() {
    let mut s = script("");
    let listed = |uid: &str| {
        let mut o = shown("k7", Status::Ready);
        o.uid = Some(uid.into());
        vec![o, shown("k8", Status::Ready)]
    };
    s.fleet.ledger.replaced.insert("k7".into(), s.now);
    let replaced_at = s.now;
    let out = s.fleet.observe(&s.cfg, s.now, &listed("u1"));
    s.record(out);
    assert_eq!(s.node("k7").policy.replaced_at, Some(replaced_at));
    s.at(60);
    let out = s.fleet.observe(&s.cfg, s.now, &listed("u2"));
    s.record(out);
    assert_eq!(s.node("k7").uid.as_deref(), Some("u2"));
    assert_eq!(
        s.node("k7").policy.replaced_at,
        Some(replaced_at),
        "held still"
    );
    assert!(
        !s.took()
            .iter()
            .any(|e| e.starts_with("k7 NODE_DECOMMISSIONED"))
    );
    // Past the hold a report clears the mark, and leaving is recorded.
    s.at(16 * 60)
        .poll(&[watchdog(), heartbeat("k7"), heartbeat("k8")]);
    s.at(16 * 60 + 30)
        .poll(&[watchdog(), heartbeat("k7"), heartbeat("k8")]);
    assert_eq!(s.node("k7").policy.replaced_at, None);
    s.took();
    let out = s
        .fleet
        .observe(&s.cfg, s.now, &[shown("k8", Status::Ready)]);
    s.record(out);
    assert!(s.took().contains(&"k7 NODE_DECOMMISSIONED".to_string()));
    // An entry older than the hold marks no record made under the name.
    s.fleet
        .ledger
        .replaced
        .insert("k6".into(), s.now - chrono::TimeDelta::minutes(20));
    let out = s.fleet.observe(
        &s.cfg,
        s.now,
        &[shown("k8", Status::Ready), shown("k6", Status::Ready)],
    );
    assert!(out.ledger, "the stale entry is gone from the ledger");
    s.record(out);
    assert_eq!(s.node("k6").policy.replaced_at, None);
}

#[test]
fn replace_spares_nodes_hale_did_not_take_out_or_did_not_provision() {
    let mut s = pool_script("replace");
    let ids = replace_pool(&mut s, 10);
    s.fleet.nodes.get_mut("c-1").unwrap().policy.provisioned = false;
    s.at(0).report(&ids, &["c-0", "c-1"], very_low);
    let out = s.fleet.drain(s.now, "c-0", false, "disk swap").unwrap();
    s.record(out);
    s.policy_events();
    s.at(30).report(&ids, &["c-0", "c-1"], very_low);
    let got = s.policy_events();
    assert!(
        got.contains(&"c-0 POLICY_HALTED replace notTakenOutByHale".to_string()),
        "{got:?}"
    );
    assert!(
        got.contains(&"c-1 POLICY_HALTED replace notProvisioned".to_string()),
        "{got:?}"
    );
    assert!(
        actions(&s)
            .iter()
            .all(|(_, a)| *a != policy::Action::Terminate)
    );
}

/// Observe's recommendations are the cordons `cordon` would make: switched over,
/// the nodes it recommended (first by the order their reports came in, where
/// scores tie) are the ones cordoned, not others of the same score by name.
#[test]
fn switching_from_observe_cordons_what_observe_recommended() {
    let yaml = "nodeHealth: { mode: observe, maxUnavailablePercent: 20 }";
    let mut s = script(yaml);
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &[], low);
    s.at(30).report(&ids, &[], low);
    // Reports come in one by one, g-9 and g-8 first: those two are recommended
    // (20% of ten), the rest held back.
    for (i, id) in ["g-9", "g-8", "g-0", "g-1", "g-2"].iter().enumerate() {
        s.at(40 + i as i64).webhook(&low(id)[1..]);
    }
    let recommended: Vec<String> = s
        .policy_events()
        .into_iter()
        .filter(|e| e.contains("POLICY_RECOMMENDED"))
        .collect();
    assert_eq!(
        recommended,
        [
            "g-9 POLICY_RECOMMENDED cordon",
            "g-8 POLICY_RECOMMENDED cordon"
        ]
    );
    s.cfg = config(&yaml.replace("observe", "cordon"));
    s.fleet.reconfigured();
    let mut sick = ["g-9", "g-8", "g-0", "g-1", "g-2"];
    s.at(60).report(&ids, &sick, low);
    sick.sort();
    let cordoned: Vec<&str> = sick
        .into_iter()
        .filter(|n| s.node(n).status == Status::Cordoned)
        .collect();
    assert_eq!(cordoned, ["g-8", "g-9"]);
}

/// A termination decided and not yet performed (the orchestrator still being
/// asked) is withdrawn when an operator takes the node over, through hale or
/// outside it: the node is no longer hale's to replace.
#[test]
fn an_operator_taking_the_node_over_withdraws_a_queued_termination() {
    for how in ["cordon", "drain", "outside"] {
        let outside = how == "outside";
        let (mut s, ids) = c0_termination_queued();
        pending_id(&s, "c-0", &policy::Action::Terminate);
        act_but_terminate(&mut s);
        let out = if outside {
            let mut taken = shown("c-0", Status::Cordoned);
            taken.cordoned_by = Some((policy::Actor::Operator, "ops: bios update".into()));
            taken.provisioned = true;
            s.fleet.observe(&s.cfg, s.now, &[taken])
        } else if how == "drain" {
            s.fleet.drain(s.now, "c-0", false, "investigating").unwrap()
        } else {
            s.fleet.cordon(s.now, "c-0", "investigating").unwrap()
        };
        s.record(out);
        assert!(
            s.node("c-0")
                .policy
                .pending
                .iter()
                .all(|p| p.action != policy::Action::Terminate),
            "{how}: {:?}",
            s.node("c-0").policy.pending
        );
        assert_eq!(
            s.node("c-0").policy.cordon.as_ref().map(|c| c.by),
            Some(policy::Actor::Operator),
            "{how}"
        );
        assert_ne!(
            s.fleet.next_action("c-0").map(|p| p.action),
            Some(policy::Action::Terminate)
        );
        s.at(60).report(&ids, &["c-0"], very_low);
        let got = s.policy_events();
        assert!(
            got.contains(&"c-0 POLICY_HALTED replace notTakenOutByHale".to_string()),
            "{got:?}"
        );
    }
}

/// A termination already under way when an operator takes the node over lands all
/// the same: the machine is gone, so its `NODE_REPLACED` is recorded and it is
/// counted against the hour's replacements.
#[test]
fn a_termination_under_way_when_an_operator_takes_the_node_over_is_recorded() {
    let (mut s, _) = c0_termination_queued();
    act_but_terminate(&mut s);
    let terminate = s.fleet.next_action("c-0").expect("its termination next");
    assert_eq!(terminate.action, policy::Action::Terminate);
    let out = s.fleet.cordon(s.now, "c-0", "investigating").unwrap();
    s.record(out);
    s.policy_events();
    let out = s
        .fleet
        .action_done(&s.cfg, s.now, "c-0", &terminate, &policy::Done::default());
    s.record(out);
    assert_eq!(s.policy_events(), ["c-0 NODE_REPLACED"]);
    assert!(!s.fleet.nodes.contains_key("c-0"));
    assert_eq!(s.fleet.ledger.replacements.values().flatten().count(), 1);
}

/// An operator's uncordon ends the episode: the drain it reached is not kept
/// behind the suppression, and once that lapses the policy decides afresh from
/// the score then — between the thresholds, a cordon and no drain.
#[test]
fn an_uncordon_ends_the_episode_and_the_policy_decides_afresh() {
    let mut s = pool_script("drain");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &["g-0"], very_low);
    s.at(30).report(&ids, &["g-0"], very_low);
    let events = s.policy_events();
    assert!(
        events.contains(&"g-0 POLICY_ACTED drain".to_string()),
        "{events:?}"
    );
    s.at(60).report(&ids, &["g-0"], low);
    assert!(s.policy_events().is_empty(), "the drain stands");
    let out = s.fleet.uncordon(s.now, "g-0", "checked it").unwrap();
    s.record(out);
    s.at(90).report(&ids, &["g-0"], low);
    assert_eq!(
        s.policy_events(),
        [
            "g-0 NODE_UNCORDONED operator",
            "g-0 POLICY_HALTED cordon cordonSuppressionMinutes"
        ]
    );
    s.at(90 + 1800).report(&ids, &["g-0"], low);
    // The gate lifts too: the score held above drainBelow past the recovery hold.
    assert_eq!(
        s.policy_events(),
        [
            "g-0 POLICY_ACTED ungate",
            "g-0 NODE_CORDONED hale",
            "g-0 POLICY_ACTED cordon"
        ]
    );
}

/// A pool switched to observe (a reload, or a start with it) stops what automation
/// queued there and has not done: a cordon not yet done is withdrawn and the node
/// stays in service; behind a cordon done, a termination is withdrawn and the
/// cordon stays. Each said; observe's recommendation follows.
#[test]
fn a_pool_switched_to_observe_withdraws_what_automation_queued() {
    // A cordon decided and not yet done (the orchestrator not answering).
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &["g-0"], low);
    s.at(30).report(&ids, &["g-0"], low);
    assert_eq!(s.node("g-0").status, Status::Cordoned);
    assert!(!s.node("g-0").policy.pending.is_empty());
    let untouched = s.fleet.observe_withdraws(&s.cfg, s.now);
    assert!(untouched.events.is_empty(), "the pool still cordons");
    s.policy_events();
    s.cfg = pool_script("observe").cfg;
    let out = s.fleet.observe_withdraws(&s.cfg, s.now);
    s.record(out);
    assert_eq!(s.policy_events(), ["g-0 POLICY_HALTED cordon observe"]);
    assert!(s.fleet.pending().is_empty());
    assert_eq!(s.node("g-0").status, Status::Ready);
    assert!(s.node("g-0").policy.cordon.is_none());
    s.at(60).report(&ids, &["g-0"], low);
    assert_eq!(s.policy_events(), ["g-0 POLICY_RECOMMENDED cordon"]);

    // A replacement: cordoned and drained, its termination queued.
    let (mut s, _) = c0_termination_queued();
    act_but_terminate(&mut s);
    assert_eq!(
        s.fleet.next_action("c-0").map(|p| p.action),
        Some(policy::Action::Terminate)
    );
    s.policy_events();
    s.cfg = pool_script("observe").cfg;
    let out = s.fleet.observe_withdraws(&s.cfg, s.now);
    assert!(
        out.events[0].message.contains("stays cordoned"),
        "{:?}",
        out.events
    );
    s.record(out);
    assert_eq!(s.policy_events(), ["c-0 POLICY_HALTED terminate observe"]);
    assert_eq!(s.fleet.next_action("c-0"), None);
    assert_eq!(
        s.node("c-0").status,
        Status::Cordoned,
        "automation never uncordons"
    );

    // A fault eviction runs in every mode: its cordon and eviction, queued in an
    // observe pool, stay through a reload or a start.
    let mut s = script("nodeHealth: { evictOnFaultClasses: [GPU_ECC_ERRORS] }");
    let mut ids = s.pool("g", 9, "gpu");
    ids.push("gpu-14".into());
    s.at(0).report(&ids, &[], low);
    s.at(30).report(&ids, &["gpu-14"], low);
    let queued = s.fleet.pending();
    assert!(
        queued
            .iter()
            .any(|(_, p)| matches!(p.action, policy::Action::Evict { .. }))
    );
    let out = s.fleet.observe_withdraws(&s.cfg, s.now);
    assert!(
        out.events.is_empty() && out.dirty.is_empty(),
        "{:?}",
        out.events
    );
    assert_eq!(s.fleet.pending(), queued);
}

/// New labels from the orchestrator move a node into a pool that observes: the
/// cordon automation queued for it in its old pool, not yet done, is withdrawn
/// there and then (the node stays in service), as a reload switching its pool
/// would; observe's recommendation follows. A node that stays put keeps its own.
#[test]
fn relabelled_into_an_observing_pool_a_node_loses_what_automation_queued() {
    let mut s = script(
        "orchestrator: { kind: kubernetes }\n\
         pools: [{ name: gpu, selector: { pool: gpu }, nodeHealth: { mode: cordon } },\n\
                 { name: lab, selector: { pool: lab }, nodeHealth: { mode: observe } }]",
    );
    // Ten in each pool: one node out of either stays within the guardrail.
    let ids: Vec<String> = (0..20)
        .map(|i| format!("{}-{}", if i < 10 { "g" } else { "l" }, i % 10))
        .collect();
    let inventory = |moved: &[&str]| -> Vec<policy::Observed> {
        ids.iter()
            .map(|id| {
                let mut o = shown(id, Status::Ready);
                if id.starts_with("l-") || moved.contains(&id.as_str()) {
                    o.labels = [("pool".to_string(), "lab".to_string())].into();
                }
                o
            })
            .collect()
    };
    let out = s.fleet.observe(&s.cfg, s.now, &inventory(&[]));
    s.record(out);
    s.at(0).report(&ids, &["g-0", "g-1"], low);
    s.at(30).report(&ids, &["g-0", "g-1"], low);
    for id in ["g-0", "g-1"] {
        assert!(
            s.node(id)
                .policy
                .pending
                .iter()
                .any(|p| matches!(p.action, policy::Action::Cordon { .. })),
            "{id}: its cordon queued and not done (the inventory still shows it ready)"
        );
    }
    s.policy_events();
    s.at(40);
    let out = s.fleet.observe(&s.cfg, s.now, &inventory(&["g-0"]));
    s.record(out);
    assert_eq!(s.policy_events(), ["g-0 POLICY_HALTED cordon observe"]);
    assert!(s.node("g-0").policy.pending.is_empty());
    assert_eq!(s.node("g-0").status, Status::Ready);
    assert!(s.node("g-0").policy.cordon.is_none());
    assert!(
        !s.node("g-1").policy.pending.is_empty(),
        "g-1 stays in its cordoning pool"
    );
    s.at(60).report(&ids, &["g-0", "g-1"], low);
    let events = s.policy_events();
    assert!(
        events.contains(&"g-0 POLICY_RECOMMENDED cordon".to_string()),
        "observe recommends what it no longer does: {events:?}"
    );
}

/// A pool of ten in `replace`, c-0 sick enough to go, its work counted: its
/// cordon, drain and termination queued.
fn c0_termination_queued() -> (Script, Vec<String>) {
    let mut s = pool_script("replace");
    let ids = replace_pool(&mut s, 10);
    s.at(0).report(&ids, &["c-0"], very_low);
    s.at(30).report(&ids, &["c-0"], very_low);
    counted(&mut s, &["c-0"]);
    s.tick();
    (s, ids)
}

/// Every pending action but a termination done, as an orchestrator that is still
/// being asked to terminate.
fn act_but_terminate(s: &mut Script) {
    for (id, pending) in s.fleet.pending() {
        if pending.action == policy::Action::Terminate {
            continue;
        }
        let done = policy::Done::default();
        let out = s.fleet.action_done(&s.cfg, s.now, &id, &pending, &done);
        s.record(out);
    }
}

#[test]
fn the_replacement_budget_is_spent_and_refilled_in_a_rolling_hour() {
    let mut s = script(
        "pools: [{ name: gpu, selector: { pool: gpu }, nodeHealth: { mode: replace, maxUnavailablePercent: 100, maxReplacementsPerHour: 3 } }]",
    );
    let ids = replace_pool(&mut s, 10);
    let sick = ["c-0", "c-1", "c-2", "c-3"];
    s.at(0).report(&ids, &sick, very_low);
    s.at(30).report(&ids, &sick, very_low);
    counted(&mut s, &sick);
    s.tick();
    // The orchestrator rejects one termination: not counted.
    let terminate = pending_id(&s, "c-0", &policy::Action::Terminate);
    let out = s
        .fleet
        .action_failed(&s.cfg, s.now, "c-0", terminate, "refused");
    s.record(out);
    act(&mut s);
    let live: Vec<String> = s.fleet.nodes.keys().cloned().collect();
    s.at(60).report(&live, &sick, very_low);
    act(&mut s);
    let got = s.policy_events();
    assert!(
        got.contains(&"c-0 POLICY_HALTED replace terminationRejected".to_string()),
        "{got:?}"
    );
    assert_eq!(
        got.iter().filter(|e| e.ends_with("NODE_REPLACED")).count(),
        3
    );
    // c-0's retry after 10 minutes finds the budget spent.
    s.at(700).report(&live, &sick, very_low);
    let halted: Vec<Event> = s
        .events
        .iter()
        .filter(|e| e.kind.name() == "POLICY_HALTED")
        .cloned()
        .collect();
    assert_eq!(halted.len(), 1, "{halted:?}");
    assert!(
        halted[0].message.contains("3 node(s) of pool gpu replaced"),
        "{}",
        halted[0].message
    );
    s.policy_events();
    // An hour after the first replacements the budget refills.
    s.at(30 + 3601).report(&live, &sick, very_low);
    act(&mut s);
    assert!(!s.fleet.nodes.contains_key("c-0"));
}

/// A termination asked again after a refusal stays halted until it is done: the
/// passes while it waits record nothing (one event per conclusion).
#[test]
fn a_retried_termination_stays_halted_until_done() {
    let mut s = script(
        "pools: [{ name: gpu, selector: { pool: gpu }, nodeHealth: { mode: replace, maxUnavailablePercent: 100 } }]",
    );
    let ids = replace_pool(&mut s, 10);
    s.at(0).report(&ids, &["c-0"], very_low);
    s.at(30).report(&ids, &["c-0"], very_low);
    counted(&mut s, &["c-0"]);
    s.tick();
    let terminate = pending_id(&s, "c-0", &policy::Action::Terminate);
    let out = s
        .fleet
        .action_failed(&s.cfg, s.now, "c-0", terminate, "refused");
    s.record(out);
    s.policy_events();
    // Retried after 10 minutes; two more passes before the orchestrator answers.
    for t in [700, 701, 710] {
        s.at(t).report(&ids, &["c-0"], very_low);
    }
    assert_eq!(s.policy_events(), Vec::<String>::new());
    assert!(actions(&s).contains(&("c-0".to_string(), policy::Action::Terminate)));
    act(&mut s);
    assert!(!s.fleet.nodes.contains_key("c-0"));
}

#[test]
fn a_crash_between_deciding_and_acting_neither_loses_nor_repeats() {
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &["g-0"], low);
    s.at(30).report(&ids, &["g-0"], low);
    // The decision is persisted with its pending action (the node's record)...
    let stored = serde_json::to_string(s.node("g-0")).unwrap();
    // ...and the process dies before acting. Restart: the record is loaded.
    let node: Node = serde_json::from_str(&stored).unwrap();
    let cordon = policy::Action::Cordon {
        by: policy::Actor::Hale,
        reason: "score below cordonBelow 60".into(),
    };
    let queued: Vec<&policy::Action> = node.policy.pending.iter().map(|p| &p.action).collect();
    assert_eq!(queued, [&cordon]);
    s.fleet.nodes.insert("g-0".into(), Box::new(node));
    s.policy_events();
    // The next report decides nothing new; the pending action is done once.
    s.at(60).report(&ids, &["g-0"], low);
    assert_eq!(s.policy_events(), Vec::<String>::new());
    assert_eq!(actions(&s), [("g-0".to_string(), cordon.clone())]);
    let id = pending_id(&s, "g-0", &cordon);
    act(&mut s);
    assert!(s.fleet.pending().is_empty());
    // A duplicate confirmation (the orchestrator answered twice) changes nothing.
    let confirmed = policy::Pending {
        id,
        action: cordon.clone(),
    };
    let out = s
        .fleet
        .action_done(&s.cfg, s.now, "g-0", &confirmed, &policy::Done::default());
    assert!(out.events.is_empty() && out.dirty.is_empty());
}

/// A fault eviction whose cordon the orchestrator refuses is not dropped: it is
/// halted, said once, and tried again once the cordon may be asked again.
#[test]
fn a_fault_eviction_whose_cordon_is_refused_is_tried_again() {
    let mut s = script("nodeHealth: { evictOnFaultClasses: [GPU_ECC_ERRORS] }");
    let mut ids = s.pool("g", 9, "gpu");
    ids.push("gpu-14".into());
    s.at(0).report(&ids, &[], low);
    s.at(30)
        .report(&ids, &["gpu-14"], low)
        .refuse_cordon("gpu-14");
    assert!(
        s.fleet.pending().is_empty(),
        "the eviction went with its cordon"
    );
    s.policy_events();
    s.at(60).report(&ids, &["gpu-14"], low);
    assert_eq!(
        s.policy_events(),
        ["gpu-14 POLICY_HALTED evict cordonRefused"],
        "said, not dropped"
    );
    // Ten minutes on: cordoned and evicted again.
    s.at(30 + 601).report(&ids, &["gpu-14"], low);
    let pending = s.fleet.pending();
    assert!(
        pending
            .iter()
            .any(|(_, p)| matches!(p.action, policy::Action::Evict { .. })),
        "{pending:?}"
    );
}

/// A fault eviction the orchestrator refused leaves the node it cordoned
/// cordoned, not drained: said as a refused drain, and not asked again while
/// that cordon lasts. Under an operator's cordon that drained nothing, a refusal
/// says nothing about a drain.
#[test]
fn a_refused_fault_eviction_leaves_the_node_cordoned_not_drained() {
    fn refuse_eviction(s: &mut Script, id: &str) {
        s.refuse(id, |a| matches!(a, policy::Action::Evict { .. }));
    }
    let mut s = script("nodeHealth: { evictOnFaultClasses: [GPU_ECC_ERRORS] }");
    let mut ids = s.pool("g", 12, "gpu");
    ids.extend(["gpu-14", "gpu-15", "gpu-16"].map(String::from));
    s.at(0).report(&ids, &[], low);
    s.fleet.cordon(s.now, "gpu-15", "firmware update").unwrap();
    s.fleet.drain(s.now, "gpu-16", false, "rack move").unwrap();
    s.at(30).report(&ids, &["gpu-14", "gpu-15", "gpu-16"], low);
    for id in ["gpu-14", "gpu-15", "gpu-16"] {
        let done: Vec<_> = s
            .fleet
            .pending()
            .into_iter()
            .filter(|(n, p)| {
                n == id
                    && matches!(
                        p.action,
                        policy::Action::Cordon { .. } | policy::Action::Drain { .. }
                    )
            })
            .collect();
        for (_, cordon) in done {
            let out = s
                .fleet
                .action_done(&s.cfg, s.now, id, &cordon, &policy::Done::default());
            s.record(out);
        }
    }
    let cordon = |s: &Script, id: &str| s.node(id).policy.cordon.clone().expect("cordoned");
    assert!(
        cordon(&s, "gpu-14").drained,
        "the eviction empties the node"
    );
    assert!(!cordon(&s, "gpu-15").drained);
    s.policy_events();
    refuse_eviction(&mut s, "gpu-14");
    refuse_eviction(&mut s, "gpu-15");
    refuse_eviction(&mut s, "gpu-16");
    let c = cordon(&s, "gpu-14");
    assert!(!c.drained && c.drain_refused, "{c:?}");
    let c = cordon(&s, "gpu-15");
    assert!(!c.drained && !c.drain_refused, "{c:?}");
    let c = cordon(&s, "gpu-16");
    assert!(
        c.drained && !c.drain_refused,
        "a drain done before stands: {c:?}"
    );
    assert_eq!(s.node("gpu-14").status, Status::Cordoned);
    assert_eq!(
        s.policy_events(),
        [
            "gpu-14 POLICY_HALTED evict orchestrator",
            "gpu-15 POLICY_HALTED evict orchestrator",
            "gpu-16 POLICY_HALTED evict orchestrator"
        ]
    );
    s.at(60).report(&ids, &["gpu-14", "gpu-15", "gpu-16"], low);
    assert!(
        s.fleet.pending().is_empty(),
        "neither asked again: {:?}",
        s.fleet.pending()
    );
}

/// A class matches written in any case: the default one is the upper-cased type,
/// and the eviction (its `NODE_EVICTED`) names the class so.
#[test]
fn a_fault_class_matches_in_any_case() {
    let mut s = script("nodeHealth: { evictOnFaultClasses: [gpu_ecc_errors] }");
    let mut ids = s.pool("g", 9, "gpu");
    ids.push("gpu-14".into());
    s.at(0).report(&ids, &[], low);
    s.at(30).report(&ids, &["gpu-14"], low);
    let classes: Vec<String> = s
        .fleet
        .pending()
        .into_iter()
        .filter_map(|(n, p)| match p.action {
            policy::Action::Evict { fault_class, .. } if n == "gpu-14" => Some(fault_class),
            _ => None,
        })
        .collect();
    assert_eq!(classes, ["GPU_ECC_ERRORS"]);
}

#[test]
fn fault_eviction_acts_in_observe_mode_and_names_the_fault() {
    let mut s = script("nodeHealth: { evictOnFaultClasses: [GPU_ECC_ERRORS] }");
    let mut ids = s.pool("g", 9, "gpu");
    ids.push("gpu-14".into());
    s.at(0).report(&ids, &[], low);
    s.at(30).report(&ids, &["gpu-14"], low);
    let pending = s.fleet.pending();
    let evict = pending
        .iter()
        .find(|(_, p)| matches!(p.action, policy::Action::Evict { .. }))
        .expect("evicted")
        .1
        .clone();
    let policy::Action::Evict { message, .. } = &evict.action else {
        unreachable!()
    };
    assert_eq!(
        message, "node gpu-14: GPU ECC errors; job failed and the node cordoned.",
        "the orchestrator adds how its work declares it may be moved"
    );
    assert_eq!(s.node("gpu-14").status, Status::Cordoned);
    let out = s.fleet.action_done(
        &s.cfg,
        s.now,
        "gpu-14",
        &evict,
        &policy::Done {
            moved: 1,
            failed: 2,
            moved_owners: vec!["job/train".into()],
            ..policy::Done::default()
        },
    );
    s.record(out);
    let got = s.policy_events();
    assert!(
        got.contains(&"gpu-14 NODE_EVICTED GPU_ECC_ERRORS moved=1 failed=2".to_string()),
        "{got:?}"
    );
    // Once per episode.
    act(&mut s);
    s.at(60).report(&ids, &["gpu-14"], low);
    assert!(s.fleet.pending().is_empty());
    // A blind condition names no fault and evicts nothing.
    let mut s = script("nodeHealth: { evictOnFaultClasses: [HEARTBEAT_MISSED] }");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &[], low);
    s.at(30).report(&ids, &[], low);
    s.at(200).report(&ids[1..], &[], low);
    assert!(s.node("g-0").conditions.contains_key("heartbeat_missed"));
    assert!(s.fleet.pending().is_empty());
}

#[test]
fn a_silenced_or_inhibited_fault_evicts_nothing() {
    let mut s = script("nodeHealth: { evictOnFaultClasses: [GPU_ECC_ERRORS] }");
    let mut ids = s.pool("g", 9, "gpu");
    ids.push("gpu-14".into());
    let silenced = |n: &str| vec![heartbeat(n), ecc(n).suppressed()];
    s.at(0).report(&ids, &[], low);
    s.at(30).report(&ids, &["gpu-14"], silenced);
    s.at(60).report(&ids, &["gpu-14"], silenced);
    assert!(s.node("gpu-14").conditions["gpu_ecc_errors"].suppressed());
    assert!(s.fleet.pending().is_empty(), "{:?}", s.fleet.pending());
    assert_eq!(s.node("gpu-14").status, Status::Ready);
    assert!(s.policy_events().is_empty());
    // The silence ends: the fault now evicts, once.
    s.at(90).report(&ids, &["gpu-14"], low);
    assert_eq!(s.node("gpu-14").status, Status::Cordoned);
    assert!(
        s.fleet
            .pending()
            .iter()
            .any(|(_, p)| matches!(p.action, policy::Action::Evict { .. }))
    );
    act(&mut s);
    // Silenced again and let go while still raised: evicted already, not again.
    s.at(120).report(&ids, &["gpu-14"], silenced);
    s.at(150).report(&ids, &["gpu-14"], low);
    assert!(s.fleet.pending().is_empty(), "{:?}", s.fleet.pending());
}

#[test]
fn manual_operations_record_events_and_refuse_what_cannot_be() {
    let mut s = script("");
    s.at(0)
        .poll(&[watchdog(), heartbeat("a"), heartbeat("b"), heartbeat("c")]);
    s.fleet.nodes.get_mut("c").unwrap().status = Status::NotReady;
    let e = s.fleet.drain(s.now, "c", false, "x").unwrap_err();
    assert_eq!(
        e.to_string(),
        "node c is NOT_READY and cannot be drained: only a READY or already cordoned node can be taken out of service"
    );
    let out = s.fleet.cordon(s.now, "a", "bios").unwrap();
    s.record(out);
    let all = s.fleet.drain_all(s.now, false, "maintenance");
    assert_eq!(all.drained, ["b"], "only ready nodes count");
    s.record(all.outcome);
    let out = s.fleet.drain(s.now, "a", true, "failing disk").unwrap();
    s.record(out);
    let active = policy::Action::Drain {
        active: true,
        reason: "failing disk".into(),
    };
    let active = policy::Pending {
        id: pending_id(&s, "a", &active),
        action: active,
    };
    let out = s.fleet.action_done(
        &s.cfg,
        s.now,
        "a",
        &active,
        &policy::Done {
            moved: 4,
            ..policy::Done::default()
        },
    );
    s.record(out);
    assert_eq!(
        s.policy_events(),
        [
            "a NODE_CORDONED operator",
            "b NODE_CORDONED operator",
            "b NODE_DRAINED operator active=false",
            "a NODE_DRAINED operator active=true",
        ]
    );
    assert_eq!(s.node("b").status, Status::Cordoned);
}

#[test]
fn backtest_replays_history_with_a_candidate_and_reproduces_the_running_config() {
    let mut s = pool_script("observe");
    let ids = s.pool("g", 10, "gpu");
    let mut history = Vec::new();
    s.at(0).report(&ids, &[], low);
    s.at(30).report(&ids, &["g-1"], low);
    s.at(60).report(&ids, &["g-1", "g-2"], very_low);
    for t in (90..3600).step_by(30) {
        s.at(t).report(&ids, &["g-1", "g-2"], very_low);
    }
    history.append(&mut s.events);
    let known = s.fleet.nodes.clone();

    let same = replay::backtest(&s.cfg, &known, &[], &history, None, s.now);
    assert_eq!(
        same.recorded.recommendations, 3,
        "cordon, then drain for g-1: {same:?}"
    );
    assert_eq!(
        same.candidate, same.recorded,
        "the running config reproduces its record"
    );

    let drain = pool_script("drain");
    let r = replay::backtest(&drain.cfg, &known, &[], &history, None, s.now);
    assert_eq!(r.candidate.recommendations, 0);
    assert_eq!((r.candidate.cordons, r.candidate.drains), (2, 2), "{r:?}");
    assert_eq!(r.nodes["g-1"].candidate.drains, 1);
    assert_eq!(r.nodes["g-1"].recorded.recommendations, 2);

    // A candidate whose inventory moves g-1 to a pool of its own, which cordons
    // and never drains: g-1 is replayed there, g-2 where it was.
    let moved = script(
        "pools:\n  - { name: strict, selector: { pool: strict }, nodeHealth: { mode: cordon, drainBelow: 0, maxUnavailablePercent: 100 } }\n  - { name: gpu, selector: { pool: gpu }, nodeHealth: { mode: observe } }\n",
    );
    let inventory = [Listed {
        id: "g-1".into(),
        hostname: None,
        labels: [("pool".to_string(), "strict".to_string())].into(),
    }];
    let r = replay::backtest(&moved.cfg, &known, &inventory, &history, None, s.now);
    assert_eq!(
        (
            r.nodes["g-1"].candidate.cordons,
            r.nodes["g-1"].candidate.drains
        ),
        (1, 0),
        "{r:?}"
    );
    assert_eq!(r.nodes["g-2"].candidate.cordons, 0, "{r:?}");
}

/// A silenced fault stays suppressed through what it does while silenced: it
/// escalates (the event says it is suppressed), and, sticky, it outlives its alerts
/// still suppressed — costing nothing, evicting nothing — until a live alert feeds
/// it. The backtest replays each of those the same.
#[test]
fn a_silenced_sticky_fault_stays_suppressed_through_escalation_and_its_end() {
    let mut s = script("nodeHealth: { evictOnFaultClasses: [GPU_ECC_ERRORS] }");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &[], low);
    let warn = |n: &str| vec![heartbeat(n), gpu_ecc_correctable(n, "0").suppressed()];
    let both = |n: &str| {
        vec![
            heartbeat(n),
            gpu_ecc_correctable(n, "0").suppressed(),
            gpu_ecc_uncorrectable(n, "0").suppressed(),
        ]
    };
    s.at(30).report(&ids, &["g-1"], warn);
    s.at(60).report(&ids, &["g-1"], both);
    let escalated = s
        .events
        .iter()
        .find(|e| e.kind.name() == "CONDITION_ESCALATED")
        .unwrap();
    assert!(
        matches!(
            escalated.kind,
            EventKind::ConditionEscalated {
                suppressed: true,
                ..
            }
        ),
        "{escalated:?}"
    );
    // Its alerts end; sticky, it stays — suppressed, as they were.
    for t in [90, 120, 150] {
        s.at(t).report(&ids, &[], low);
    }
    let c = &s.node("g-1").conditions["gpu_ecc_errors"];
    assert!(c.sources.is_empty() && c.sticky && c.suppressed(), "{c:?}");
    assert_eq!(s.score("g-1"), Some(100));
    assert!(s.fleet.pending().is_empty(), "{:?}", s.fleet.pending());
    let r = replay::backtest(&s.cfg, &s.fleet.nodes, &[], &s.events, None, s.now);
    assert!(r.recorded.is_empty(), "{r:?}");
    assert_eq!(r.candidate, r.recorded, "{r:?}");
    // A live alert feeds it: it costs points, and evicts.
    s.at(180).report(&ids, &["g-1"], low);
    assert!(!s.node("g-1").conditions["gpu_ecc_errors"].suppressed());
    assert_eq!(s.score("g-1"), Some(55));
    assert!(!s.fleet.pending().is_empty());
}

/// A fault silenced in Alertmanager moved nothing live, and moves nothing in the
/// replay; once its silence ends it costs points in both.
#[test]
fn backtest_keeps_silenced_faults_silent() {
    let mut s = pool_script("observe");
    let ids = s.pool("g", 10, "gpu");
    let silenced = |n: &str| {
        vec![
            heartbeat(n),
            ecc(n).suppressed(),
            smart_failing(n).suppressed(),
        ]
    };
    s.at(0).report(&ids, &[], low);
    for t in (30..600).step_by(30) {
        s.at(t).report(&ids, &["g-1"], silenced);
    }
    let known = s.fleet.nodes.clone();
    let r = replay::backtest(&s.cfg, &known, &[], &s.events, None, s.now);
    assert!(r.recorded.is_empty(), "{r:?}");
    assert_eq!(r.candidate, r.recorded, "{r:?}");
    for t in (600..1200).step_by(30) {
        s.at(t).report(&ids, &["g-1"], very_low);
    }
    let r = replay::backtest(&s.cfg, &s.fleet.nodes, &[], &s.events, None, s.now);
    assert!(!r.recorded.is_empty(), "{r:?}");
    assert_eq!(r.candidate, r.recorded, "{r:?}");
}

/// Nodes whose records began within the history start the replay unscored, as
/// they did: their first score, which the policy never acts on, is not an action
/// in the replay either.
#[test]
fn backtest_of_new_nodes_reproduces_that_their_first_score_moved_nothing() {
    let mut s = script("alertmanager: { pollInterval: 0, requireWatchdog: false }");
    s.at(10).webhook(&[]);
    let sick: Vec<A> = (0..5)
        .map(|i| gpu_ecc_uncorrectable(&format!("x{i}"), "0"))
        .collect();
    s.at(20).webhook(&sick);
    assert_eq!(s.score("x0"), Some(55));
    let r = replay::backtest(&s.cfg, &s.fleet.nodes, &[], &s.events, None, s.now);
    assert!(r.recorded.is_empty(), "{r:?}");
    assert_eq!(r.candidate, r.recorded, "{r:?}");
    // Their next report is acted on, live and in the replay alike.
    s.at(50).webhook(&sick);
    let r = replay::backtest(&s.cfg, &s.fleet.nodes, &[], &s.events, None, s.now);
    assert!(!r.recorded.is_empty(), "{r:?}");
    assert_eq!(r.candidate, r.recorded, "{r:?}");
}

/// Nodes that joined after a decision are not in the pool it was made in: the
/// replay adds each when its record began, so a halt for room in a pool of five
/// stays a halt though ten more nodes joined later.
#[test]
fn backtest_counts_a_pool_as_it_was_when_each_decision_was_made() {
    let mut s = script("alertmanager: { pollInterval: 0, requireWatchdog: false }");
    let first: Vec<String> = (1..=5).map(|i| format!("p{i}")).collect();
    let heartbeats = |ids: &[String]| ids.iter().map(|id| heartbeat(id)).collect::<Vec<A>>();
    s.at(10).webhook(&heartbeats(&first));
    s.at(15);
    let out = s.fleet.cordon(s.now, "p5", "maintenance").unwrap();
    s.record(out);
    let sick = || vec![heartbeat("p1"), gpu_ecc_uncorrectable("p1", "0")];
    s.at(20).webhook(&sick());
    s.at(50).webhook(&sick());
    let mut history = s.events.clone();
    assert_eq!(
        s.policy_events(),
        [
            "p5 NODE_CORDONED operator",
            "p1 POLICY_HALTED cordon maxUnavailablePercent"
        ]
    );
    let later: Vec<String> = (1..=10).map(|i| format!("q{i}")).collect();
    s.at(100).webhook(&heartbeats(&later));
    s.at(130).webhook(&heartbeats(&later));
    history.extend(s.events.iter().cloned());
    // Live, p1 is recommended its cordon once the pool has room.
    assert_eq!(s.policy_events(), ["p1 POLICY_RECOMMENDED cordon"]);
    let r = replay::backtest(&s.cfg, &s.fleet.nodes, &[], &history, None, s.now);
    assert_eq!(
        (r.recorded.halts, r.recorded.recommendations),
        (1, 1),
        "{r:?}"
    );
    assert_eq!(r.candidate, r.recorded, "{r:?}");
}

#[test]
fn the_gate_follows_the_score_in_every_mode_and_never_an_unscored_node() {
    let mut s = script("nodeHealth: { penalties: { SmartFailing: 60 } }");
    let out = s.fleet.register(
        &s.cfg,
        s.now,
        &[Listed {
            id: "new".into(),
            hostname: None,
            labels: BTreeMap::new(),
        }],
    );
    s.record(out);
    s.at(0).poll(&[watchdog(), heartbeat("n1")]);
    s.at(30)
        .poll(&[watchdog(), heartbeat("n1"), smart_failing("n1")]);
    assert!(s.node("n1").policy.gated, "observe mode gates too");
    assert!(!s.node("new").policy.gated, "unscored: never gated");
    s.at(60).poll(&[watchdog(), heartbeat("n1")]);
    assert!(
        s.node("n1").policy.gated,
        "a recovery lifts it once it held"
    );
    s.at(60 + 15 * 60).poll(&[watchdog(), heartbeat("n1")]);
    assert!(
        !s.node("n1").policy.gated,
        "lifted when the score recovered"
    );
    assert_eq!(
        actions(&s),
        [
            ("n1".to_string(), policy::Action::Gate { on: true }),
            ("n1".to_string(), policy::Action::Gate { on: false }),
        ]
    );
}

#[test]
fn a_score_hovering_at_drain_below_records_no_storm() {
    // SmartFailing 40 + GpuEccCorrectable 10 = 50; with IoErrors 10 more, 40.
    let hover: Sick = |n| {
        vec![
            heartbeat(n),
            smart_failing(n),
            gpu_ecc_correctable(n, "0"),
            alert("IoErrors").on(n).condition("disk_io", "IoErrors"),
        ]
    };
    let settle: Sick = |n| vec![heartbeat(n), smart_failing(n), gpu_ecc_correctable(n, "0")];
    for mode in ["observe", "drain"] {
        let mut s = pool_script(mode);
        let ids = s.pool("g", 10, "gpu");
        s.at(0).report(&ids, &[], low);
        for (i, t) in (30..3600).step_by(30).enumerate() {
            s.at(t)
                .report(&ids, &["g-0"], if i % 2 == 0 { hover } else { settle });
        }
        let got = s.policy_events();
        let gates = got.iter().filter(|e| e.ends_with("gate")).count();
        assert_eq!(gates, 1, "{mode}: the gate closes once: {got:?}");
        let conclusions = got
            .iter()
            .filter(|e| {
                e.contains("RECOMMENDED")
                    || e.contains("POLICY_ACTED drain")
                    || e.contains("POLICY_ACTED cordon")
            })
            .count();
        assert_eq!(
            conclusions, 1,
            "{mode}: the drain it reached stands: {got:?}"
        );
    }
}

#[test]
fn the_replacement_budget_counts_terminations_decided_in_the_same_report() {
    let mut s = script(
        "pools: [{ name: gpu, selector: { pool: gpu }, nodeHealth: { mode: replace, maxUnavailablePercent: 100, maxReplacementsPerHour: 3 } }]",
    );
    let ids = replace_pool(&mut s, 10);
    let sick = ["c-0", "c-1", "c-2", "c-3"];
    s.at(0).report(&ids, &sick, very_low);
    s.at(30).report(&ids, &sick, very_low);
    counted(&mut s, &sick);
    s.tick();
    let terminations = actions(&s)
        .into_iter()
        .filter(|(_, a)| *a == policy::Action::Terminate)
        .count();
    assert_eq!(terminations, 3, "the fourth waits for the budget");
    let halted: Vec<String> = s
        .policy_events()
        .into_iter()
        .filter(|e| e.contains("maxReplacementsPerHour"))
        .collect();
    assert_eq!(halted, ["c-3 POLICY_HALTED replace maxReplacementsPerHour"]);
}

#[test]
fn an_operator_uncordon_withdraws_what_was_queued_to_take_the_node_out() {
    let (mut s, ids) = c0_termination_queued();
    assert!(actions(&s).contains(&("c-0".to_string(), policy::Action::Terminate)));
    let out = s.fleet.uncordon(s.now, "c-0", "not this one").unwrap();
    s.record(out);
    let left: Vec<policy::Action> = actions(&s).into_iter().map(|(_, a)| a).collect();
    assert_eq!(
        left,
        [policy::Action::Gate { on: true }, policy::Action::Uncordon],
        "cordon, drain and terminate withdrawn"
    );
    // An operator's cordon takes the node over: hale never replaces it.
    let out = s.fleet.cordon(s.now, "c-1", "mine").unwrap();
    s.record(out);
    s.at(60).report(&ids, &["c-0", "c-1"], very_low);
    assert_eq!(s.node("c-0").status, Status::Ready, "suppressed");
    assert!(
        !actions(&s)
            .iter()
            .any(|(n, a)| n == "c-1" && *a == policy::Action::Terminate)
    );
}

/// GPU ECC faults evicted in ten nodes of which two an operator cordoned: the
/// pool is at its 20 % out of service.
fn evictions_at_the_ceiling() -> (Script, Vec<String>) {
    let mut s = script("nodeHealth: { evictOnFaultClasses: [GPU_ECC_ERRORS] }");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &[], low);
    for id in ["g-8", "g-9"] {
        let out = s.fleet.cordon(s.now, id, "maintenance").unwrap();
        s.record(out);
    }
    s.policy_events();
    (s, ids)
}

/// `id`'s halts since the last look at the policy's events.
fn halts_of(s: &mut Script, id: &str) -> Vec<String> {
    let prefix = format!("{id} POLICY_HALTED");
    s.policy_events()
        .into_iter()
        .filter(|e| e.starts_with(&prefix))
        .collect()
}

#[test]
fn an_eviction_the_ceiling_stops_is_one_event() {
    let (mut s, ids) = evictions_at_the_ceiling();
    for t in (30..600).step_by(30) {
        s.at(t).report(&ids, &["g-0"], low);
    }
    let halted = s.recorded("POLICY_HALTED");
    assert_eq!(halted.len(), 1, "{halted:?}");
    assert_eq!(
        halted[0].message,
        "evict halted: it would take more than 20% of pool cluster out of service: 2 of its 10 node(s) are out, and 20% allows 2",
        "an eviction acts in every mode: halted, not 'would be' (the pool observes)"
    );
    assert_eq!(
        s.policy_events(),
        ["g-0 POLICY_HALTED evict maxUnavailablePercent"]
    );
    assert_eq!(s.node("g-0").status, Status::Ready);
}

/// A fault eviction held while the score's own halt already stands is said as
/// the eviction's: it acts in every mode, where the score's halt in an observing
/// pool changes nothing.
#[test]
fn an_eviction_held_after_the_scores_halt_is_said() {
    fn memory(node: &str) -> A {
        alert("MemoryEccUncorrectable")
            .on(node)
            .condition("memory_errors", "MemoryEccUncorrectable")
            .critical()
    }
    // Below drainBelow with no fault of the class; then with one.
    fn failing(node: &str) -> Vec<A> {
        vec![heartbeat(node), smart_failing(node), memory(node)]
    }
    fn failing_gpu(node: &str) -> Vec<A> {
        let mut a = failing(node);
        a.push(ecc(node));
        a
    }
    let (mut s, ids) = evictions_at_the_ceiling();
    s.at(30).report(&ids, &["g-0"], failing);
    s.at(60).report(&ids, &["g-0"], failing);
    let halted = halts_of(&mut s, "g-0");
    assert_eq!(halted, ["g-0 POLICY_HALTED drain maxUnavailablePercent"]);
    s.at(90).report(&ids, &["g-0"], failing_gpu);
    s.at(120).report(&ids, &["g-0"], failing_gpu);
    let halted = halts_of(&mut s, "g-0");
    assert_eq!(halted, ["g-0 POLICY_HALTED evict maxUnavailablePercent"]);
}

#[test]
fn the_orchestrators_inventory_records_cordons_made_outside_hale() {
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &[], low);
    let seen = |id: &str, status: Status| policy::Observed {
        not_ready: false,
        released: false,
        orchestrator_health: None,
        version: None,
        before: None,
        hostname: Some(format!("{id}.example")),
        provisioned: true,
        allocations: Some(3),
        ..shown(id, status)
    };
    let out = s
        .fleet
        .observe(&s.cfg, s.now, &[seen("g-1", Status::Cordoned)]);
    s.record(out);
    assert_eq!(s.policy_events(), ["g-1 NODE_CORDONED operator"]);
    assert_eq!(s.node("g-1").policy.allocations, 3);
    assert!(s.node("g-1").policy.provisioned);
    // kubectl uncordon: recorded, and automation stays off for the window.
    s.at(30);
    let out = s
        .fleet
        .observe(&s.cfg, s.now, &[seen("g-1", Status::Ready)]);
    s.record(out);
    assert_eq!(s.policy_events(), ["g-1 NODE_UNCORDONED operator"]);
    s.at(60).report(&ids, &["g-1"], low);
    s.at(90).report(&ids, &["g-1"], low);
    assert_eq!(
        s.policy_events(),
        ["g-1 POLICY_HALTED cordon cordonSuppressionMinutes"]
    );
    // Hale's own cordon, not yet performed, is not mistaken for an uncordon.
    s.at(120).report(&ids, &["g-2"], low);
    s.at(150).report(&ids, &["g-2"], low);
    assert_eq!(s.node("g-2").status, Status::Cordoned);
    let out = s
        .fleet
        .observe(&s.cfg, s.now, &[seen("g-2", Status::Ready)]);
    s.record(out);
    assert_eq!(s.node("g-2").status, Status::Cordoned);
    assert!(s.node("g-2").policy.cordon.is_some());
    // A cordon carrying hale's own record (another replica's, or one from before a
    // lost store) is hale's, with its reason, and starts no suppression.
    s.policy_events();
    let mut by_hale = seen("g-5", Status::Cordoned);
    by_hale.cordoned_by = Some((policy::Actor::Hale, "score below cordonBelow 60".into()));
    let out = s.fleet.observe(&s.cfg, s.now, &[by_hale]);
    s.record(out);
    assert_eq!(s.policy_events(), ["g-5 NODE_CORDONED hale"]);
    let cordon = s.node("g-5").policy.cordon.clone().unwrap();
    assert_eq!(cordon.reason, "score below cordonBelow 60");
    assert!(s.node("g-5").policy.uncordoned_at.is_none());
    // Drained again by someone else with a reason of their own (`scontrol`): the
    // cordon is the operator's now, with that reason; shown so again, nothing new.
    let mut by_operator = seen("g-5", Status::Cordoned);
    by_operator.cordoned_by = Some((policy::Actor::Operator, "ops: bios update".into()));
    for _ in 0..2 {
        let out = s
            .fleet
            .observe(&s.cfg, s.now, std::slice::from_ref(&by_operator));
        s.record(out);
    }
    assert_eq!(s.policy_events(), ["g-5 NODE_CORDONED operator"]);
    let cordon = s.node("g-5").policy.cordon.clone().unwrap();
    assert_eq!(
        (cordon.by, cordon.reason.as_str()),
        (policy::Actor::Operator, "ops: bios update")
    );
}

/// A follower (on a store of its own) decides the cordon its leader made, with a
/// reason of its own poll: the node shown cordoned by hale is that cordon done, so
/// an operator's uncordon is one — recorded, the window started, nothing left
/// queued to be sent once this replica leads.
#[test]
fn a_cordon_shown_done_by_hale_for_another_reason_is_done() {
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &["g-0"], low);
    s.at(30).report(&ids, &["g-0"], low);
    assert!(
        s.node("g-0")
            .policy
            .pending
            .iter()
            .any(|p| matches!(p.action, policy::Action::Cordon { .. })),
        "this replica's cordon queued"
    );
    s.policy_events();
    let mut by_leader = shown("g-0", Status::Cordoned);
    by_leader.cordoned_by = Some((policy::Actor::Hale, "the leader's own words".into()));
    let out = s.fleet.observe(&s.cfg, s.now, &[by_leader]);
    s.record(out);
    assert!(s.fleet.pending().is_empty(), "{:?}", s.fleet.pending());
    // kubectl uncordon: the operator's, with its window.
    s.at(60);
    let out = s
        .fleet
        .observe(&s.cfg, s.now, &[shown("g-0", Status::Ready)]);
    s.record(out);
    assert_eq!(s.policy_events(), ["g-0 NODE_UNCORDONED operator"]);
    assert!(s.fleet.pending().is_empty());
    s.at(90).report(&ids, &["g-0"], low);
    assert_eq!(
        s.policy_events(),
        ["g-0 POLICY_HALTED cordon cordonSuppressionMinutes"]
    );

    // A reboot flow's reason on the node is not the policy's cordon done: the
    // policy's words are still to be written there.
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &["g-0"], low);
    s.at(30).report(&ids, &["g-0"], low);
    let mut by_flow = shown("g-0", Status::Cordoned);
    by_flow.cordoned_by = Some((policy::Actor::Hale, "hale reboot: kernel".into()));
    let out = s.fleet.observe(&s.cfg, s.now, &[by_flow]);
    s.record(out);
    assert!(
        s.fleet
            .pending()
            .iter()
            .any(|(_, p)| matches!(p.action, policy::Action::Cordon { .. })),
        "{:?}",
        s.fleet.pending()
    );
}

/// The same where the follower's inventory came only after both changes: the cordon
/// the operator's uncordon undid, newer than the last view taken and showing the
/// queued cordon done, is taken first — once, however often it is shown again. A
/// follower that never saw the cordon, with nothing queued, records both as its
/// leader did. Not taken: a cordon of another machine under the name, and what is
/// not a cordon undone (the state hale's own cordon left, brought by the watch
/// after hale recorded the cordon done).
#[test]
fn the_cordon_an_uncordon_undid_is_taken_once_where_it_was_missed() {
    let at = |o: policy::Observed, version: u64| policy::Observed {
        version: Some(version),
        ..o
    };
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    let out = s
        .fleet
        .observe(&s.cfg, s.now, &[at(shown("g-0", Status::Ready), 5)]);
    s.record(out);
    s.at(0).report(&ids, &["g-0"], low);
    s.at(30).report(&ids, &["g-0"], low);
    assert!(
        !s.fleet.pending().is_empty(),
        "this replica's cordon queued"
    );
    s.policy_events();
    let mut by_leader = at(shown("g-0", Status::Cordoned), 6);
    by_leader.cordoned_by = Some((policy::Actor::Hale, "the leader's own words".into()));
    let uncordoned = policy::Observed {
        before: Some(Box::new(by_leader)),
        ..at(shown("g-0", Status::Ready), 7)
    };
    s.at(60);
    for _ in 0..2 {
        let out = s
            .fleet
            .observe(&s.cfg, s.now, std::slice::from_ref(&uncordoned));
        s.record(out);
    }
    assert_eq!(s.policy_events(), ["g-0 NODE_UNCORDONED operator"]);
    assert!(s.fleet.pending().is_empty(), "{:?}", s.fleet.pending());
    assert_eq!(s.node("g-0").status, Status::Ready);
    s.at(90).report(&ids, &["g-0"], low);
    assert_eq!(
        s.policy_events(),
        ["g-0 POLICY_HALTED cordon cordonSuppressionMinutes"]
    );
    // Once the window is over the policy cordons g-0 again: the same old state,
    // shown again (the watch has brought nothing since), is not that cordon done.
    s.at(90 + 31 * 60).report(&ids, &["g-0"], low);
    let cordon_queued = |s: &Script| {
        s.fleet
            .pending()
            .iter()
            .any(|(id, p)| id == "g-0" && matches!(p.action, policy::Action::Cordon { .. }))
    };
    assert!(cordon_queued(&s), "{:?}", s.policy_events());
    s.policy_events();
    let out = s
        .fleet
        .observe(&s.cfg, s.now, std::slice::from_ref(&uncordoned));
    s.record(out);
    assert!(s.policy_events().is_empty());
    assert!(cordon_queued(&s));

    // Never seen cordoned, nothing queued: the cordon and the operator's uncordon
    // both recorded, as the leader recorded them, and the window holds.
    let out = s
        .fleet
        .observe(&s.cfg, s.now, &[at(shown("g-1", Status::Ready), 3)]);
    s.record(out);
    s.policy_events();
    let mut by_leader = at(shown("g-1", Status::Cordoned), 4);
    by_leader.cordoned_by = Some((policy::Actor::Hale, "score below cordonBelow 60".into()));
    let missed = policy::Observed {
        before: Some(Box::new(by_leader)),
        ..at(shown("g-1", Status::Ready), 5)
    };
    let out = s.fleet.observe(&s.cfg, s.now, &[missed]);
    s.record(out);
    assert_eq!(
        s.policy_events(),
        ["g-1 NODE_CORDONED hale", "g-1 NODE_UNCORDONED operator"]
    );
    s.at(90 + 32 * 60).report(&ids, &["g-1"], low);
    assert!(
        s.policy_events()
            .contains(&"g-1 POLICY_HALTED cordon cordonSuppressionMinutes".to_string())
    );

    // A new machine under the name since: the old one's cordon is not its.
    let out = s
        .fleet
        .observe(&s.cfg, s.now, &[at(shown("g-2", Status::Ready), 3)]);
    s.record(out);
    s.policy_events();
    let mut old_machine = at(shown("g-2", Status::Cordoned), 4);
    old_machine.uid = Some("old".into());
    old_machine.cordoned_by = Some((policy::Actor::Hale, "score below cordonBelow 60".into()));
    let renewed = policy::Observed {
        uid: Some("new".into()),
        before: Some(Box::new(old_machine)),
        ..at(shown("g-2", Status::Ready), 5)
    };
    let out = s.fleet.observe(&s.cfg, s.now, &[renewed]);
    s.record(out);
    assert!(s.policy_events().is_empty());
    // Nor a cordon newer than the view it comes with (the watch moved on while
    // the inventory was read): the next inventory shows it with its own state.
    let out = s
        .fleet
        .observe(&s.cfg, s.now, &[at(shown("g-4", Status::Ready), 3)]);
    s.record(out);
    let mut ahead = at(shown("g-4", Status::Cordoned), 6);
    ahead.cordoned_by = Some((policy::Actor::Hale, "score below cordonBelow 60".into()));
    let behind = policy::Observed {
        before: Some(Box::new(ahead)),
        ..at(shown("g-4", Status::Ready), 5)
    };
    let out = s.fleet.observe(&s.cfg, s.now, &[behind]);
    s.record(out);
    assert!(s.policy_events().is_empty());

    // The operator's cordon through hale, done at version 6 after the view at
    // version 3; the watch brings the state it left (version 5, a status write in
    // between): newer than the view taken, but no cordon undone.
    let out = s
        .fleet
        .observe(&s.cfg, s.now, &[at(shown("g-3", Status::Ready), 3)]);
    s.record(out);
    let out = s.fleet.cordon(s.now, "g-3", "bios").unwrap();
    s.record(out);
    let (_, cordon) = s
        .fleet
        .pending()
        .into_iter()
        .find(|(id, _)| id == "g-3")
        .unwrap();
    let out = s
        .fleet
        .action_done(&s.cfg, s.now, "g-3", &cordon, &policy::Done::default());
    s.record(out);
    s.policy_events();
    let mut cordoned = at(shown("g-3", Status::Cordoned), 6);
    cordoned.cordoned_by = Some((policy::Actor::Operator, "bios".into()));
    let shown_late = policy::Observed {
        before: Some(Box::new(at(shown("g-3", Status::Ready), 5))),
        ..cordoned
    };
    let out = s.fleet.observe(&s.cfg, s.now, &[shown_late]);
    s.record(out);
    assert!(s.policy_events().is_empty());
    assert_eq!(s.node("g-3").status, Status::Cordoned);
    assert_eq!(s.node("g-3").policy.cordon.as_ref().unwrap().reason, "bios");
}

/// A node hale cordoned while the orchestrator showed it not ready (its controller
/// restarting) reads Cordoned once the cordon is shown: it stayed NotReady, taken
/// for unseen by the reboot flow and fencing, and left out of `--status Cordoned`.
#[test]
fn a_cordon_shown_after_the_node_read_not_ready_is_its_status() {
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &[], low);
    let out = s.fleet.cordon(s.now, "g-0", "bios").unwrap();
    s.record(out);
    let mut unknown = shown("g-0", Status::NotReady);
    unknown.not_ready = true;
    let out = s.fleet.observe(&s.cfg, s.now, &[unknown]);
    s.record(out);
    assert_eq!(s.node("g-0").status, Status::NotReady);
    act(&mut s);
    let mut drained = shown("g-0", Status::Cordoned);
    drained.cordoned_by = Some((policy::Actor::Operator, "bios".into()));
    let out = s.fleet.observe(&s.cfg, s.now, &[drained]);
    s.record(out);
    assert_eq!(s.node("g-0").status, Status::Cordoned);
    assert!(!s.node("g-0").policy.not_ready);
}

#[test]
fn a_refused_cordon_leaves_the_node_in_service_and_is_not_an_uncordon() {
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &["g-0"], low);
    s.at(30).report(&ids, &["g-0"], low);
    s.policy_events();
    let cordon = s.node("g-0").policy.pending[0].id;
    let why = "node fz-1 is NOT_READY and cannot be drained";
    let out = s.fleet.action_failed(&s.cfg, s.now, "g-0", cordon, why);
    s.record(out);
    assert_eq!(s.node("g-0").status, Status::Ready);
    assert!(s.node("g-0").policy.cordon.is_none());
    assert!(s.fleet.pending().is_empty());
    // Halted at once, answering the cordon the history holds, with the
    // orchestrator's reason; no uncordon recorded; not asked again at once.
    let halt = s.events.last().unwrap().message.clone();
    assert!(halt.contains(&format!("out of service ({why})")), "{halt}");
    assert_eq!(
        s.policy_events(),
        ["g-0 POLICY_HALTED cordon cordonRefused"]
    );
    // The next report decides again, and does not say it twice.
    s.at(60).report(&ids, &["g-0"], low);
    assert_eq!(s.policy_events(), Vec::<String>::new());
    s.at(90).report(&ids, &["g-0"], low);
    assert_eq!(s.policy_events(), Vec::<String>::new());
    assert!(s.fleet.pending().is_empty());
    // Ten minutes on, asked again.
    s.at(30 + 601).report(&ids, &["g-0"], low);
    assert_eq!(
        s.policy_events(),
        ["g-0 NODE_CORDONED hale", "g-0 POLICY_ACTED cordon"]
    );
}

/// A cordon refused because someone drained the node between hale's read and its
/// write (Slurm: `drained outside hale meanwhile`): the history answers the
/// `NODE_CORDONED` hale recorded with the halt at once — the next decision finds
/// the node the operator's and says only that — so its cordons add up to what
/// the cluster saw.
#[test]
fn a_cordon_refused_for_someone_elses_drain_is_answered_in_the_history() {
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &["g-0"], low);
    s.at(30).report(&ids, &["g-0"], low);
    assert_eq!(
        s.policy_events(),
        ["g-0 NODE_CORDONED hale", "g-0 POLICY_ACTED cordon"]
    );
    let cordon = s.node("g-0").policy.pending[0].id;
    let why = "node g-0 was drained outside hale meanwhile (reason: bios - gina): the drain is the operator's";
    let out = s.fleet.action_failed(&s.cfg, s.now, "g-0", cordon, why);
    s.record(out);
    let mut drained = shown("g-0", Status::Cordoned);
    drained.cordoned_by = Some((policy::Actor::Operator, "bios - gina".into()));
    let out = s.fleet.observe(&s.cfg, s.now, &[drained]);
    s.record(out);
    s.at(60).report(&ids, &["g-0"], low);
    let acted = s
        .events
        .iter()
        .rfind(|e| e.kind.name() == "POLICY_ACTED")
        .map(|e| e.message.clone())
        .unwrap();
    assert!(
        acted.ends_with("cordoned by operator already, so nothing done"),
        "{acted}"
    );
    assert_eq!(
        s.policy_events(),
        [
            "g-0 POLICY_HALTED cordon cordonRefused",
            "g-0 NODE_CORDONED operator",
            "g-0 POLICY_ACTED cordon"
        ]
    );
}

/// An operator's uncordon puts behind it what the orchestrator refused before (a
/// termination, the pool then set back to cordon): the next decision is held by
/// the operator's uncordon, not blamed on a refusal that no longer stands.
#[test]
fn an_operators_uncordon_puts_a_refusal_behind_it() {
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &["g-0"], low);
    s.at(30).report(&ids, &["g-0"], low);
    act(&mut s);
    assert_eq!(s.node("g-0").status, Status::Cordoned);
    // As a refused termination leaves it.
    let later = s.now + chrono::TimeDelta::minutes(10);
    let node = s.fleet.nodes.get_mut("g-0").unwrap();
    node.policy.retry_after = Some(later);
    node.policy.refusal = Some("names no provisioner instance".into());
    s.policy_events();
    let out = s
        .fleet
        .observe(&s.cfg, s.now, &[shown("g-0", Status::Ready)]);
    s.record(out);
    s.at(60).report(&ids, &["g-0"], low);
    assert_eq!(
        s.policy_events(),
        [
            "g-0 NODE_UNCORDONED operator",
            "g-0 POLICY_HALTED cordon cordonSuppressionMinutes"
        ]
    );
}

/// A drain the orchestrator refused for good was recorded when it was queued: the
/// refusal is recorded beside it, with why, the node reads cordoned and not
/// drained, and the policy does not ask again — an operator does.
#[test]
fn a_refused_drain_is_said_in_the_history() {
    let mut s = pool_script("drain");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &[], low);
    s.at(30).report(&ids, &["g-0"], very_low);
    s.at(60).report(&ids, &["g-0"], very_low);
    assert!(
        s.policy_events()
            .contains(&"g-0 NODE_DRAINED hale active=false".to_string())
    );
    let drain = s
        .fleet
        .pending()
        .into_iter()
        .find(|(n, p)| n == "g-0" && matches!(p.action, policy::Action::Drain { .. }))
        .expect("a drain queued")
        .1;
    let out = s
        .fleet
        .action_failed(&s.cfg, s.now, "g-0", drain.id, "the controller said no");
    s.record(out);
    let halted = s.recorded("POLICY_HALTED");
    assert_eq!(halted.len(), 1, "{halted:?}");
    assert_eq!(policy_detail(halted[0]), "POLICY_HALTED drain orchestrator");
    assert_eq!(
        halted[0].message,
        "the drain was refused: the controller said no"
    );
    s.policy_events();
    s.at(90).report(&ids, &["g-0"], very_low);
    assert!(
        !s.fleet
            .pending()
            .iter()
            .any(|(_, p)| matches!(p.action, policy::Action::Drain { .. })),
        "not asked again"
    );
    let cordon = s.node("g-0").policy.cordon.clone().expect("still cordoned");
    assert!(!cordon.drained && cordon.drain_refused, "{cordon:?}");
    let out = s.fleet.drain(s.now, "g-0", false, "ops").unwrap();
    s.record(out);
    let cordon = s.node("g-0").policy.cordon.clone().expect("still cordoned");
    assert!(cordon.drained && !cordon.drain_refused, "{cordon:?}");
    assert!(
        s.fleet
            .pending()
            .iter()
            .any(|(_, p)| matches!(p.action, policy::Action::Drain { .. })),
        "the operator's drain queued"
    );
}

#[test]
fn heartbeats_get_a_full_window_to_return_with_trust() {
    let mut s = script("alertmanager: { staleAfter: 60s }");
    s.at(0).poll(&[watchdog(), heartbeat("n1")]);
    s.at(30).fail();
    s.at(600).fail();
    assert!(s.fleet.trust.stale);
    // The watchdog comes back before the heartbeats (another rule group).
    s.at(630).poll(&[watchdog()]);
    s.at(631).tick();
    assert!(
        !s.node("n1").conditions.contains_key("heartbeat_missed"),
        "an outage is not a missed node"
    );
    s.at(650).poll(&[watchdog(), heartbeat("n1")]);
    s.at(900).poll(&[watchdog()]);
    s.at(901).tick();
    assert!(s.node("n1").conditions.contains_key("heartbeat_missed"));
}

/// A store whose last trusted input lies ahead of the clock (the clock stepped back
/// across a restart, or the replica that wrote it ran ahead) is no evidence of
/// trust since this start, and staleness is counted from now, not from then.
#[test]
fn trust_recorded_ahead_of_the_clock_is_not_taken_at_a_restart() {
    let mut s = script("");
    s.at(1800).poll(&[watchdog(), heartbeat("n1")]);
    s.at(0).restart();
    assert!(!s.fleet.trust.trusted_since_start());
    s.at(30).fail();
    s.at(60).fail();
    s.at(95).tick();
    assert!(
        s.fleet.trust.stale,
        "stale after staleAfter, not half an hour"
    );
}

/// A poll that fails now and then, the source never stale, is no gap a heartbeat
/// could fall into (Alertmanager kept its alerts): a node gone silent is missed on
/// its own schedule, however often an answer fails in between.
#[test]
fn polls_failing_now_and_then_do_not_put_off_a_missed_heartbeat() {
    let mut s = script("");
    s.at(0)
        .poll(&[watchdog(), heartbeat("n1"), heartbeat("n2")]);
    // n1 goes silent after 0 s; one poll in two fails.
    for t in (30..=90).step_by(30) {
        s.at(t).fail();
        s.at(t + 15).poll(&[watchdog(), heartbeat("n2")]);
    }
    assert!(!s.fleet.trust.stale);
    s.at(106).tick();
    assert!(
        s.node("n1").conditions.contains_key("heartbeat_missed"),
        "missed 90 s after its last heartbeat"
    );
    assert!(!s.node("n2").conditions.contains_key("heartbeat_missed"));
}

#[test]
fn what_the_cluster_shows_done_is_not_done_again() {
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &["g-0"], low);
    s.at(30).report(&ids, &["g-0"], low);
    assert_eq!(
        s.policy_events(),
        ["g-0 NODE_CORDONED hale", "g-0 POLICY_ACTED cordon"]
    );
    let queued = |s: &Script| -> Vec<&'static str> {
        s.node("g-0")
            .policy
            .pending
            .iter()
            .map(|p| p.action.name())
            .collect()
    };
    assert!(queued(&s).contains(&"cordon"), "{:?}", queued(&s));
    // This replica follows: the leader cordoned the node (its record on it).
    let seen = |status: Status, gated: bool| policy::Observed {
        not_ready: false,
        released: false,
        orchestrator_health: None,
        version: None,
        before: None,
        cordoned_by: (status == Status::Cordoned).then(|| {
            (
                policy::Actor::Hale,
                "score below cordonBelow 60".to_string(),
            )
        }),
        gated: Some(gated),
        ..shown("g-0", status)
    };
    let out = s
        .fleet
        .observe(&s.cfg, s.now, &[seen(Status::Cordoned, false)]);
    s.record(out);
    assert!(!queued(&s).contains(&"cordon"), "{:?}", queued(&s));
    assert_eq!(
        s.policy_events(),
        Vec::<String>::new(),
        "nothing new happened"
    );
    // An operator's uncordon is then seen for what it is, on every replica.
    s.at(60);
    let out = s
        .fleet
        .observe(&s.cfg, s.now, &[seen(Status::Ready, false)]);
    s.record(out);
    assert_eq!(s.policy_events(), ["g-0 NODE_UNCORDONED operator"]);
    assert!(queued(&s).is_empty(), "{:?}", queued(&s));
}

#[test]
fn an_uncordon_seen_in_the_cluster_withdraws_a_queued_eviction() {
    let mut s = script("nodeHealth: { evictOnFaultClasses: [GPU_ECC_ERRORS] }");
    let mut ids = s.pool("g", 9, "gpu");
    ids.push("gpu-14".into());
    s.at(0).report(&ids, &[], low);
    s.at(30).report(&ids, &["gpu-14"], low);
    let queued = |s: &Script| -> Vec<&'static str> {
        s.node("gpu-14")
            .policy
            .pending
            .iter()
            .map(|p| p.action.name())
            .collect()
    };
    assert_eq!(queued(&s), ["cordon", "evict"]);
    let policy::Action::Cordon { by, reason } = s.node("gpu-14").policy.pending[0].action.clone()
    else {
        unreachable!()
    };
    let seen = |status: Status, evicted: Option<&str>| policy::Observed {
        not_ready: false,
        released: false,
        orchestrator_health: None,
        version: None,
        before: None,
        cordoned_by: (status == Status::Cordoned).then(|| (by, reason.clone())),
        evicted: evicted.map(str::to_string),
        ..shown("gpu-14", status)
    };
    // Another replica cordoned it; an operator then put it back in service before
    // this one performed the eviction it had queued.
    let out = s
        .fleet
        .observe(&s.cfg, s.now, &[seen(Status::Cordoned, None)]);
    s.record(out);
    assert_eq!(queued(&s), ["evict"]);
    s.at(40);
    let out = s.fleet.observe(&s.cfg, s.now, &[seen(Status::Ready, None)]);
    s.record(out);
    assert!(queued(&s).is_empty(), "{:?}", queued(&s));
}

#[test]
fn an_eviction_the_cluster_shows_done_is_not_done_again() {
    let mut s = script("nodeHealth: { evictOnFaultClasses: [GPU_ECC_ERRORS] }");
    let mut ids = s.pool("g", 9, "gpu");
    ids.push("gpu-14".into());
    s.at(0).report(&ids, &[], low);
    s.at(30).report(&ids, &["gpu-14"], low);
    let seen = |evicted: &str| policy::Observed {
        not_ready: false,
        released: false,
        orchestrator_health: None,
        version: None,
        before: None,
        evicted: Some(evicted.into()),
        ..shown("gpu-14", Status::Cordoned)
    };
    let evicts = |s: &Script| {
        s.node("gpu-14")
            .policy
            .pending
            .iter()
            .filter(|p| matches!(p.action, policy::Action::Evict { .. }))
            .count()
    };
    // An eviction for another fault says nothing about this one.
    let out = s.fleet.observe(&s.cfg, s.now, &[seen("DISK_DEGRADED")]);
    s.record(out);
    assert_eq!(evicts(&s), 1);
    let out = s.fleet.observe(&s.cfg, s.now, &[seen("GPU_ECC_ERRORS")]);
    s.record(out);
    assert_eq!(evicts(&s), 0);
}

#[test]
fn each_family_of_queued_actions_is_judged_by_its_last_entry() {
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &[], low);
    let seen = |status: Status, by: Option<(policy::Actor, &str)>, gated: bool| policy::Observed {
        not_ready: false,
        released: false,
        orchestrator_health: None,
        version: None,
        before: None,
        cordoned_by: by.map(|(a, r)| (a, r.to_string())),
        gated: Some(gated),
        ..shown("g-0", status)
    };
    let queued = |s: &Script| -> Vec<String> {
        s.node("g-0")
            .policy
            .pending
            .iter()
            .map(|p| format!("{:?}", p.action))
            .collect()
    };
    // An operator uncordons and cordons again while the first is not yet done:
    // the node still cordoned (by hale) is not the operator's cordon.
    s.fleet.nodes.get_mut("g-0").unwrap().policy.pending.clear();
    let out = s.fleet.cordon(s.now, "g-0", "rack work").unwrap();
    s.record(out);
    act(&mut s);
    let out = s.fleet.uncordon(s.now, "g-0", "done").unwrap();
    s.record(out);
    let out = s.fleet.cordon(s.now, "g-0", "more rack work").unwrap();
    s.record(out);
    assert_eq!(queued(&s).len(), 2, "{:?}", queued(&s));
    let out = s.fleet.observe(
        &s.cfg,
        s.now,
        &[seen(
            Status::Cordoned,
            Some((policy::Actor::Operator, "rack work")),
            false,
        )],
    );
    s.record(out);
    assert_eq!(queued(&s).len(), 2, "kept: {:?}", queued(&s));
    // Shown as the operator's new cordon: both done.
    let out = s.fleet.observe(
        &s.cfg,
        s.now,
        &[seen(
            Status::Cordoned,
            Some((policy::Actor::Operator, "more rack work")),
            false,
        )],
    );
    s.record(out);
    assert!(queued(&s).is_empty(), "{:?}", queued(&s));
    // The gate on then off, the first not yet done: the node shows it off, as the
    // last one wants, so neither is left to put the taint back.
    let node = s.fleet.nodes.get_mut("g-0").unwrap();
    node.policy.push(policy::Action::Gate { on: true });
    node.policy.push(policy::Action::Gate { on: false });
    let cordoned = seen(
        Status::Cordoned,
        Some((policy::Actor::Operator, "more rack work")),
        false,
    );
    let out = s
        .fleet
        .observe(&s.cfg, s.now, std::slice::from_ref(&cordoned));
    s.record(out);
    assert!(queued(&s).is_empty(), "{:?}", queued(&s));
    // Shown on while the last queued says off: both stay, in order.
    let node = s.fleet.nodes.get_mut("g-0").unwrap();
    node.policy.push(policy::Action::Gate { on: true });
    node.policy.push(policy::Action::Gate { on: false });
    let mut gated = cordoned;
    gated.gated = Some(true);
    let out = s.fleet.observe(&s.cfg, s.now, &[gated]);
    s.record(out);
    assert_eq!(
        queued(&s),
        ["Gate { on: true }", "Gate { on: false }"],
        "{:?}",
        queued(&s)
    );
}

/// A node of the `gpu` pool as an orchestrator shows it: its status, nothing more.
/// A node both the orchestrator and the configuration's inventory list carries the
/// orchestrator's labels with the configuration's on top, whichever spoke last: a
/// reload that registers the inventory again dropped the orchestrator's, and the
/// node was priced and acted on under another pool until its next inventory.
#[test]
fn inventory_labels_go_on_top_of_the_orchestrators() {
    let mut s = script("");
    let labels = |s: &Script, id: &str| -> Vec<(String, String)> {
        s.node(id).labels.clone().into_iter().collect()
    };
    let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
    let out = s
        .fleet
        .observe(&s.cfg, s.now, &[shown("n1", Status::Ready)]);
    s.record(out);
    let listed = |labels: &[(&str, &str)], hostname: Option<&str>| Listed {
        id: "n1".into(),
        hostname: hostname.map(str::to_string),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    let rack = listed(&[("rack", "r2")], Some("n1.example"));
    for _ in 0..2 {
        // Registered (at start, and again by a reload), then the orchestrator again.
        s.fleet.register(&s.cfg, s.now, std::slice::from_ref(&rack));
        assert_eq!(labels(&s, "n1"), [pair("pool", "gpu"), pair("rack", "r2")]);
        assert_eq!(s.node("n1").hostname.as_deref(), Some("n1.example"));
        let out = s
            .fleet
            .observe(&s.cfg, s.now, &[shown("n1", Status::Ready)]);
        s.record(out);
        assert_eq!(labels(&s, "n1"), [pair("pool", "gpu"), pair("rack", "r2")]);
        assert_eq!(s.node("n1").hostname.as_deref(), Some("n1.example"));
    }
    // Where both name a label, the configuration's value.
    s.fleet
        .register(&s.cfg, s.now, &[listed(&[("pool", "cpu")], None)]);
    let out = s
        .fleet
        .observe(&s.cfg, s.now, &[shown("n1", Status::Ready)]);
    s.record(out);
    assert_eq!(labels(&s, "n1"), [pair("pool", "cpu")]);
    // A node the configuration alone lists has its labels alone.
    s.fleet.register(
        &s.cfg,
        s.now,
        &[Listed {
            id: "bare".into(),
            hostname: None,
            labels: [pair("rack", "r9")].into(),
        }],
    );
    s.fleet.register(
        &s.cfg,
        s.now,
        &[Listed {
            id: "bare".into(),
            hostname: None,
            labels: BTreeMap::new(),
        }],
    );
    assert!(s.node("bare").labels.is_empty());
}

fn shown(id: &str, status: Status) -> policy::Observed {
    policy::Observed {
        not_ready: false,
        released: false,
        orchestrator_health: None,
        version: None,
        before: None,
        uid: None,
        id: id.into(),
        hostname: None,
        status,
        labels: [("pool".to_string(), "gpu".to_string())].into(),
        provisioned: false,
        allocations: None,
        cordoned_by: None,
        gated: None,
        evicted: None,
    }
}

#[test]
fn the_core_imports_nothing_from_the_edge() {
    let core = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core");
    let mut files = vec![core.clone()];
    let mut read = 0;
    while let Some(path) = files.pop() {
        if path.is_dir() {
            if path.ends_with("tests") {
                continue;
            }
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        read += 1;
        for line in text.lines().filter(|l| l.trim_start().starts_with("use ")) {
            assert!(
                !line.contains("crate::") || line.contains("crate::core"),
                "{}: {line}: the core is pure; the edge imports it, never the reverse",
                path.display()
            );
        }
    }
    assert!(read > 10, "read the core's files");
}

#[test]
fn a_delivery_looks_only_at_the_nodes_it_names_and_time_at_the_rest() {
    let mut s = script(
        "alertmanager: { staleAfter: 10h }\n\
         nodeHealth: { failureTallyHalfLifeHours: 1, reportIntervalSeconds: 86400 }",
    );
    s.at(0)
        .poll(&[watchdog(), heartbeat("n1"), heartbeat("n2")]);
    s.failure("n2").failure("n2").failure("n2");
    assert_eq!(s.score("n2"), Some(85));
    s.took();
    // Two half-lives later n2's deduction has decayed; a delivery about n1 does not
    // look at it.
    s.at(7200).webhook(&[smart_failing("n1")]);
    assert_eq!(s.took(), ["n1 CONDITION_RAISED", "n1 SCORE_CHANGED"]);
    assert!(!s.last.dirty.contains("n2") && !s.last.touched.contains("n2"));
    assert_eq!(s.score("n2"), Some(85));
    // The next tick does.
    s.at(7201).tick();
    assert_eq!(s.took(), ["n2 SCORE_CHANGED"]);
    assert_eq!(s.score("n2"), Some(96));
}

#[test]
fn ticks_pass_the_whole_policy_at_most_every_ten_seconds() {
    let mut s = script("nodeHealth: { penalties: { SmartFailing: 60 } }");
    s.at(0).poll(&[watchdog(), heartbeat("n1")]);
    s.at(10)
        .poll(&[watchdog(), heartbeat("n1"), smart_failing("n1")]);
    assert!(s.node("n1").policy.conclusion.is_some(), "would drain");
    s.at(30).poll(&[watchdog(), heartbeat("n1")]);
    assert_eq!(s.node("n1").policy.recovered_since, Some(s.now));
    // The recovery's hold (15 minutes) lapses at 930; the last whole pass was the
    // poll at 925.
    s.at(925).poll(&[watchdog(), heartbeat("n1")]);
    s.at(930).tick();
    assert!(
        s.node("n1").policy.conclusion.is_some(),
        "a tick 5 s after a whole pass decides only what it changed"
    );
    assert_eq!(s.fleet.whole_pass_at, Some(t0() + TimeDelta::seconds(925)));
    s.at(935).tick();
    assert!(
        s.node("n1").policy.conclusion.is_none(),
        "the tick 10 s after it passes over every node"
    );
    assert_eq!(s.fleet.whole_pass_at, Some(s.now));
}

/// The alerts of an answer, as the core reads them.
fn answer_of<const N: usize>(alerts: [A; N]) -> Vec<Alert<'static>> {
    alerts.into_iter().map(|a| a.0).collect()
}

/// A poll of `alerts` begun at the script's time, to be applied in slices.
fn begin_poll(s: &mut Script, alerts: &[Alert<'static>]) -> super::ingest::PollSlices {
    let answer = crate::core::PollAnswer::of(alerts, s.now);
    let groups = crate::core::NodeGroups::of(alerts, &s.cfg.identity);
    s.fleet.poll_begin(&s.cfg, s.now, &answer, groups).0
}

#[test]
fn a_reload_between_two_slices_of_a_poll_renames_nothing() {
    let mut s = script("");
    let reloaded = config("nodeIdentity: { labels: [hostname] }");
    let alerts = answer_of([watchdog(), smart_failing("n1"), smart_failing("n2")]);
    let none = BTreeSet::new();
    let mut slices = begin_poll(&mut s, &alerts);
    s.fleet
        .poll_slice(&s.cfg, s.now, &mut slices, &alerts, &none, 1);
    // The alerts carry no `hostname`: the nodes stay as the answer was grouped.
    while !slices.done() {
        s.fleet
            .poll_slice(&reloaded, s.now, &mut slices, &alerts, &none, 1);
    }
    s.fleet.poll_end(&reloaded, s.now, &slices);
    assert_eq!(s.fleet.nodes.keys().collect::<Vec<_>>(), ["n1", "n2"]);
}

#[test]
fn a_node_decommissioned_between_two_slices_of_a_poll_stays_gone() {
    let mut s = script("");
    s.at(0)
        .poll(&[watchdog(), smart_failing("n1"), heartbeat("n2")]);
    let alerts = answer_of([watchdog(), smart_failing("n1")]);
    s.at(30);
    let none = BTreeSet::new();
    let mut slices = begin_poll(&mut s, &alerts);
    s.fleet
        .poll_slice(&s.cfg, s.now, &mut slices, &alerts, &none, 1);
    // n2, silent in this answer, is decommissioned before its slice.
    s.fleet.decommission(&s.cfg, s.now, "n2").unwrap();
    while !slices.done() {
        s.fleet
            .poll_slice(&s.cfg, s.now, &mut slices, &alerts, &none, 1);
    }
    s.fleet.poll_end(&s.cfg, s.now, &slices);
    assert_eq!(s.fleet.nodes.keys().collect::<Vec<_>>(), ["n1"]);
}

#[test]
fn a_poll_in_slices_of_one_ends_what_it_does_not_name_wherever_it_sorts() {
    let mut s = script("");
    let all = ["a", "b", "c", "d", "e"];
    let mut first = vec![watchdog()];
    first.extend(all.iter().map(|n| smart_failing(n)));
    s.at(0).poll(&first);
    // The answer names b and d: a, c and e sit before, between and after them.
    let alerts = answer_of([watchdog(), smart_failing("b"), smart_failing("d")]);
    s.at(30);
    let none = BTreeSet::new();
    let mut slices = begin_poll(&mut s, &alerts);
    let mut applied = Vec::new();
    while !slices.done() {
        let out = s
            .fleet
            .poll_slice(&s.cfg, s.now, &mut slices, &alerts, &none, 1);
        let nodes: BTreeSet<&str> = out.events.iter().map(|e| e.node_id.as_str()).collect();
        assert!(nodes.len() <= 1, "one node a slice: {nodes:?}");
        applied.extend(nodes.into_iter().map(str::to_string));
    }
    s.fleet.poll_end(&s.cfg, s.now, &slices);
    for id in ["a", "c", "e"] {
        assert!(s.node(id).conditions.is_empty(), "{id} cleared");
        assert!(applied.iter().any(|n| n == id), "{id} applied in a slice");
    }
    for id in ["b", "d"] {
        assert!(
            s.node(id).conditions.contains_key("disk_degraded"),
            "{id} kept"
        );
    }
}

#[test]
fn a_gate_the_orchestrator_lost_is_set_again() {
    let mut s = pool_script("observe");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &[], low);
    s.fleet.nodes.get_mut("g-0").unwrap().policy.gated = true;
    let seen = |gated: bool| policy::Observed {
        not_ready: false,
        released: false,
        orchestrator_health: None,
        version: None,
        before: None,
        gated: Some(gated),
        ..shown("g-0", Status::Ready)
    };
    let gates = |s: &Script| {
        s.node("g-0")
            .policy
            .pending
            .iter()
            .filter(|p| matches!(p.action, policy::Action::Gate { on: true }))
            .count()
    };
    let out = s.fleet.observe(&s.cfg, s.now, &[seen(true)]);
    s.record(out);
    assert_eq!(gates(&s), 0, "shown gated: nothing to do");
    // Slurm reconfigured: its weights back, the gate gone.
    let out = s.fleet.observe(&s.cfg, s.now, &[seen(false)]);
    s.record(out);
    assert_eq!(gates(&s), 1);
    let out = s.fleet.observe(&s.cfg, s.now, &[seen(false)]);
    s.record(out);
    assert_eq!(gates(&s), 1, "queued once");
    let out = s.fleet.observe(&s.cfg, s.now, &[seen(true)]);
    s.record(out);
    assert_eq!(gates(&s), 0, "shown set again: done");
}

/// A poll spread over threads (thousands of nodes in one slice) is the same poll
/// on one thread: the same fleet, and the same events in the same
/// order, new nodes' first events (born stale) included.
#[test]
fn a_poll_spread_over_cores_is_the_poll_on_one() {
    let cfg = config("alertmanager: { staleAfter: 90s }\nnodeHealth: { mode: cordon }");
    let nodes = 4 * super::spread::PER_THREAD + 3;
    let node = |i: usize| format!("n{i:05}");
    // Untrusted and stale (no watchdog past staleAfter): half the nodes, new.
    let stale = |i: usize| {
        let mut alerts = vec![heartbeat(&node(i)).0];
        if i % 2 == 0 {
            alerts.push(gpu_ecc_correctable(&node(i), "0").0);
        }
        alerts
    };
    // Trusted: every node, faults on some.
    let faults = |i: usize| {
        let mut alerts = vec![heartbeat(&node(i)).0];
        if i % 7 == 0 {
            alerts.push(smart_failing(&node(i)).0);
        }
        if i % 3 == 0 {
            alerts.push(gpu_ecc_correctable(&node(i), "0").0);
        }
        if i % 11 == 0 {
            alerts.push(gpu_ecc_uncorrectable(&node(i), "1").0);
        }
        alerts
    };
    // Churn: faults moved, one text changed, some nodes silent, new ones.
    let churn = |i: usize| {
        let mut alerts = Vec::new();
        if i % 13 != 0 {
            alerts.push(heartbeat(&node(i)).0);
        }
        if i % 3 == 1 {
            alerts.push(gpu_ecc_correctable(&node(i), "0").0);
        }
        if i % 11 == 0 {
            alerts.push(gpu_ecc_uncorrectable(&node(i), "1").0);
        }
        if i % 5 == 0 {
            alerts.push(smart_failing(&node(i)).summary("SMART: 12 reallocated").0);
        }
        alerts
    };
    type Answer<'m> = &'m dyn Fn(usize) -> Vec<Alert<'static>>;
    let rounds: [(i64, bool, usize, Answer<'_>); 3] = [
        (120, false, nodes / 2, &stale),
        (150, true, nodes, &faults),
        (180, true, nodes + 50, &churn),
    ];
    let mut spread = Fleet::new(t0());
    let mut one = Fleet::new(t0());
    for (at, trusted, count, make) in rounds {
        let now = t0() + TimeDelta::seconds(at);
        let mut alerts: Vec<Alert<'static>> = (0..count).flat_map(make).collect();
        if trusted {
            alerts.push(watchdog().0);
        }
        // Three threads, whatever this machine has: the slice is spread.
        let (spread_out, threads) =
            super::spread::with_threads(3, || spread.poll(&cfg, now, &alerts));
        assert!(
            threads >= 1,
            "at {at} s: spread over {threads} more threads"
        );
        let (one_out, _) = super::spread::with_threads(1, || one.poll(&cfg, now, &alerts));
        assert_eq!(spread_out.events, one_out.events, "at {at} s");
        assert_eq!(spread_out, one_out, "at {at} s");
        assert_eq!(spread, one, "at {at} s");
        if !trusted {
            let born = spread_out.events.iter().filter(|e| {
                matches!(&e.kind, EventKind::ConditionRaised { condition, .. } if condition == TELEMETRY_STALE)
            });
            assert_eq!(born.count(), count, "every new node born stale");
        }
    }
    let named = (nodes..nodes + 50)
        .filter(|&i| !churn(i).is_empty())
        .count();
    assert_eq!(spread.nodes.len(), nodes + named, "the new nodes created");
}

/// Keys that a sort by their first 16 bytes alone would misorder or merge: equal
/// heads differing past them, a key that is another's head, keys ending in NUL
/// bytes inside the head, text past ASCII.
#[test]
fn grouping_orders_and_joins_keys_as_their_text_does() {
    let keys = [
        "rack-07-chassis-01-gpu",
        "rack-07-chassis-01",
        "rack-07-chassis-0",
        "rack-07-chassis-01-gp",
        "rack-07-chassis-02",
        "rack-07-chassis-01-gpu",
        "n1",
        "n1\0",
        "n1\0\0",
        "n10",
        "",
        "ñodo-β",
        "n1",
        "rack-07-chassis-0",
        "ñodo-α-with-a-long-tail",
    ];
    let pairs = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (super::step::Keyed::new(k), i))
        .collect();
    let grouped: Vec<(&str, Vec<usize>)> = super::step::group_by_key(pairs)
        .iter()
        .map(|(k, items)| (k, items.to_vec()))
        .collect();
    let mut want: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, k) in keys.iter().enumerate() {
        want.entry(k).or_default().push(i);
    }
    assert_eq!(grouped, want.into_iter().collect::<Vec<_>>());
}

/// An answer grouped by node on four cores, each reading and sorting its part,
/// leaves the fleet as one core does: the parts' nodes meet in one group each.
#[test]
fn an_answer_grouped_on_several_cores_applies_as_on_one() {
    // Enough alerts for four threads, each node's alerts scattered over the
    // answer as Alertmanager's order by fingerprint scatters them.
    let mut answer = vec![watchdog()];
    for round in 0..3 {
        for i in 0..400 {
            let node = if i % 2 == 0 {
                format!("rack-07-chassis-{i:03}-gpu")
            } else {
                format!("n{i}")
            };
            answer.push(match round {
                0 => heartbeat(&node),
                1 => smart_failing(&node),
                _ => gpu_ecc_correctable(&node, "0"),
            });
        }
    }
    answer.push(alert("NoNode").condition("disk_degraded", "NoNode"));
    let alerts: Vec<Alert<'static>> = answer.iter().map(|a| a.0.clone()).collect();
    let applied = |threads| {
        let mut s = script("");
        let (out, _) =
            crate::core::spread::with_threads(threads, || s.fleet.poll(&s.cfg, s.now, &alerts));
        (s.fleet, out)
    };
    let (one, one_out) = applied(1);
    let (four, four_out) = applied(4);
    assert_eq!(one.nodes.len(), 400);
    assert!(one.nodes.values().all(|n| n.conditions.len() == 2));
    assert_eq!((one_out.unmatched, one_out.trusted), (1, true));
    assert_eq!(four.nodes, one.nodes);
    assert_eq!(four_out, one_out);
}

/// A cordon decided and not yet done (the orchestrator not answering) is decided
/// again when its pool fills meanwhile: an operator's cordon seen in the
/// inventory, or a lower limit reloaded, withdraws the queued cordons past the
/// limit — the healthiest first, the last in id order where scores tie — so
/// nothing is performed past it; one under way is left to land.
#[test]
fn queued_cordons_a_pool_can_no_longer_take_are_withdrawn() {
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &["g-0", "g-1"], low);
    s.at(30).report(&ids, &["g-0", "g-1"], low);
    assert_eq!(
        s.policy_events(),
        [
            "g-0 NODE_CORDONED hale",
            "g-0 POLICY_ACTED cordon",
            "g-1 NODE_CORDONED hale",
            "g-1 POLICY_ACTED cordon"
        ]
    );
    // maxUnavailablePercent 20 of 10 nodes: two. An operator cordons a third.
    let out = s
        .fleet
        .observe(&s.cfg, s.now, &[shown("g-5", Status::Cordoned)]);
    s.record(out);
    assert_eq!(
        s.policy_events(),
        [
            "g-5 NODE_CORDONED operator",
            "g-1 NODE_UNCORDONED hale",
            "g-1 POLICY_HALTED cordon maxUnavailablePercent"
        ]
    );
    assert_eq!(s.node("g-1").status, Status::Ready);
    assert!(s.node("g-1").policy.cordon.is_none());
    assert_eq!(s.fleet.next_action("g-1"), None);
    assert!(matches!(
        s.fleet.next_action("g-0").map(|p| p.action),
        Some(policy::Action::Cordon { .. })
    ));
    // Still degraded: held by the limit, said once.
    s.at(60).report(&ids, &["g-0", "g-1"], low);
    assert!(s.policy_events().is_empty());
    assert_eq!(s.node("g-1").status, Status::Ready);

    // g-0's cordon under way when the limit is lowered to one node: left to land.
    let taken = s.fleet.take_action("g-0").unwrap();
    s.cfg = script(
        "pools: [{ name: gpu, selector: { pool: gpu }, nodeHealth: { mode: cordon, maxUnavailablePercent: 10 } }]",
    )
    .cfg;
    let out = s.fleet.limit_withdraws(&s.cfg, s.now);
    assert!(out.events.is_empty(), "{:?}", out.events);
    // Its try failed (the orchestrator still away): queued again, and withdrawn.
    s.fleet.end_action("g-0", taken.id);
    let out = s.fleet.limit_withdraws(&s.cfg, s.now);
    s.record(out);
    assert_eq!(
        s.policy_events(),
        [
            "g-0 NODE_UNCORDONED hale",
            "g-0 POLICY_HALTED cordon maxUnavailablePercent"
        ]
    );
    assert!(s.fleet.pending().is_empty());
    let said = &s.last.events[0].message;
    assert!(
        said.contains(
            "withdrawn before it was done: pool gpu has 2 of its 10 node(s) out of service"
        ),
        "{said}"
    );
    assert_eq!(
        s.last.events[1].message,
        "cordon halted: it would take more than 10% of pool gpu out of service: 1 of its 10 node(s) are out, and 10% allows 1"
    );
}

/// A node whose evidence ended before its cordon was done (the orchestrator not
/// answering meanwhile) stays in service: the cordon is withdrawn, and said. A
/// cordon done stays when the node recovers: automation never uncordons.
#[test]
fn a_queued_cordon_is_withdrawn_when_the_score_recovers_first() {
    let mut s = pool_script("cordon");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &["g-0"], flapping);
    s.at(30).report(&ids, &["g-0"], flapping);
    assert_eq!(
        s.policy_events(),
        ["g-0 NODE_CORDONED hale", "g-0 POLICY_ACTED cordon"]
    );
    s.at(60).report(&ids, &[], flapping);
    assert_eq!(s.policy_events(), ["g-0 NODE_UNCORDONED hale"]);
    assert!(
        s.last
            .events
            .last()
            .unwrap()
            .message
            .contains("withdrawn before it was done: the score recovered to 100 (cordonBelow 60)"),
        "{:?}",
        s.last.events
    );
    assert_eq!(s.node("g-0").status, Status::Ready);
    assert_eq!(s.fleet.next_action("g-0"), None);
    // Degraded again: a cordon of its own, done this time; then it recovers.
    s.at(90).report(&ids, &["g-0"], flapping);
    assert_eq!(
        s.policy_events(),
        ["g-0 NODE_CORDONED hale", "g-0 POLICY_ACTED cordon"]
    );
    s.do_next("g-0");
    s.at(120).report(&ids, &[], flapping);
    assert!(s.policy_events().is_empty());
    assert_eq!(s.node("g-0").status, Status::Cordoned);
}

/// A fault eviction queued (its cordon and the eviction, the orchestrator not
/// answering) whose fault ends before they are done is withdrawn: no job on a
/// node that recovered is failed. One whose fault stands stays queued.
#[test]
fn a_queued_fault_eviction_is_withdrawn_when_its_fault_ends_first() {
    let mut s = script("nodeHealth: { evictOnFaultClasses: [GPU_ECC_ERRORS] }");
    let ids = s.pool("g", 10, "gpu");
    s.at(0).report(&ids, &["g-0"], flapping);
    s.at(30).report(&ids, &["g-0"], flapping);
    let queued = |s: &Script| -> Vec<&'static str> {
        s.fleet
            .pending()
            .iter()
            .map(|(_, p)| p.action.name())
            .collect()
    };
    assert!(queued(&s).contains(&"evict"), "{:?}", queued(&s));
    s.policy_events();
    // Still faulting: it stays.
    s.at(60).report(&ids, &["g-0"], flapping);
    assert!(queued(&s).contains(&"evict"), "{:?}", queued(&s));
    assert!(s.policy_events().is_empty());
    s.at(90).report(&ids, &[], flapping);
    assert_eq!(s.policy_events(), ["g-0 NODE_UNCORDONED hale"]);
    assert!(queued(&s).is_empty(), "{:?}", queued(&s));
    assert_eq!(s.node("g-0").status, Status::Ready);
    assert!(s.node("g-0").policy.evicted.is_empty());
    // The fault again: evicted anew.
    s.at(120).report(&ids, &["g-0"], flapping);
    assert!(queued(&s).contains(&"evict"), "{:?}", queued(&s));
}

/// A poll judged trusted is no evidence of a heartbeat's absence until its alerts
/// are applied: a tick between its first step and its slices (hale resumed from a
/// stop, both due at once) misses no node the answer carries — nor does one after
/// a poll cut short (the store refused its first write, the lead was lost).
#[test]
fn a_poll_not_yet_applied_misses_no_heartbeat() {
    let mut s = script("");
    let beats = || [watchdog(), heartbeat("n1"), heartbeat("n2")];
    s.at(0).poll(&beats());
    s.took();
    // 100 s later (past the 90 s window): begun and judged, not yet applied.
    let alerts = answer_of([watchdog(), heartbeat("n1")]);
    s.at(100);
    let none = BTreeSet::new();
    let mut slices = begin_poll(&mut s, &alerts);
    s.at(101).tick();
    assert_eq!(s.took(), Vec::<String>::new(), "nothing applied yet");
    while !slices.done() {
        s.fleet
            .poll_slice(&s.cfg, s.now, &mut slices, &alerts, &none, 1);
    }
    let out = s.fleet.poll_end(&s.cfg, s.now, &slices);
    s.record(out);
    assert_eq!(s.took(), ["n2 HEARTBEAT_MISSED"], "the answer without n2's");
    // A poll cut short after its first step: the ticks wait for one applied.
    s.at(120).poll(&beats());
    s.took();
    s.at(300);
    let alerts = answer_of(beats());
    let _cut = begin_poll(&mut s, &alerts);
    s.at(301).tick().at(330).tick();
    assert_eq!(
        s.took(),
        Vec::<String>::new(),
        "{:?}",
        s.fleet.trust.applied
    );
}

/// hale did not run for longer than `staleAfter` (stopped, a paused machine
/// whose monotonic clock ran on): its own silence is no evidence. Told so, it
/// neither marks the fleet stale nor holds absences when the next poll answers,
/// and misses no heartbeat before it; a source that then fails twice is stale.
#[test]
fn a_time_hale_did_not_run_is_no_evidence() {
    let mut s = script("alertmanager: { pollInterval: 30s }");
    let beats = || [watchdog(), heartbeat("n1"), smart_failing("n2")];
    s.at(0).poll(&beats());
    s.took();
    // Stopped from 1 s to 600 s.
    s.at(600);
    s.fleet.trust.watch_again(s.now);
    s.tick();
    assert!(!s.fleet.trust.stale);
    assert_eq!(s.took(), Vec::<String>::new());
    s.at(601).poll(&beats());
    assert_eq!(s.took(), Vec::<String>::new());
    assert_eq!(
        s.fleet.trust.hold_until, None,
        "no hold: the pipeline had no gap"
    );
    // Stopped again, and Alertmanager down this time: stale once two polls fail.
    s.at(1300);
    s.fleet.trust.watch_again(s.now);
    s.tick().fail().at(1330).fail().at(1331).tick();
    assert!(s.fleet.trust.stale);
    let took = s.took();
    assert!(
        took.contains(&"n1 CONDITION_RAISED".to_string()),
        "{took:?}"
    );
    // Without being told, the same stop reads as the pipeline's silence.
    let mut t = script("alertmanager: { pollInterval: 30s }");
    t.at(0).poll(&beats());
    t.at(600).tick();
    assert!(t.fleet.trust.stale);
}
