//! Property tests of the core's invariants over random histories of polls, webhook
//! deliveries, ticks and operator actions: every score is within 0..=100 and is 100
//! minus its breakdown; a node's events, folded in order, give back its conditions
//! and score; no event is recorded without a change to the node's evidence; and
//! what a delivery decides against (pool occupancy, decaying deductions), kept
//! between whole passes, is what a whole pass would count; and remediation, which
//! looks only at the nodes it keeps, keeps every node it has anything to do with;
//! and no heartbeat can be late before the deadline a tick waits for.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

const NODES: [&str; 3] = ["n0", "n1", "n2"];

/// One alert a generated input may carry.
#[derive(Debug, Clone)]
enum Kind {
    Heartbeat,
    Smart,
    IoErrors,
    Edac,
    EccCorrectable(u8),
    EccUncorrectable,
    Collector,
    Unavailable,
    JobFailure,
    Custom(u8),
    Reboot,
}

#[derive(Debug, Clone)]
struct Gen {
    kind: Kind,
    node: usize,
    priority: Option<u8>,
    state: u8,
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        3 => Just(Kind::Heartbeat),
        1 => Just(Kind::Smart),
        1 => Just(Kind::IoErrors),
        1 => Just(Kind::Edac),
        1 => (0u8..3).prop_map(Kind::EccCorrectable),
        1 => Just(Kind::EccUncorrectable),
        1 => Just(Kind::Collector),
        1 => Just(Kind::Unavailable),
        1 => Just(Kind::JobFailure),
        1 => (0u8..3).prop_map(Kind::Custom),
        1 => Just(Kind::Reboot),
    ]
}

fn gen_alert() -> impl Strategy<Value = Gen> {
    (
        kind(),
        0..NODES.len(),
        proptest::option::of(0u8..10),
        0u8..10,
    )
        .prop_map(|(kind, node, priority, state)| Gen {
            kind,
            node,
            priority,
            state,
        })
}

impl Gen {
    fn alert(&self, webhook: bool) -> A {
        let n = NODES[self.node];
        let mut a = match &self.kind {
            Kind::Heartbeat => heartbeat(n),
            Kind::Smart => smart_failing(n),
            Kind::IoErrors => alert("IoErrors")
                .on(n)
                .condition("disk_degraded", "IoErrors")
                .summary("I/O errors"),
            Kind::Edac => edac(n),
            Kind::EccCorrectable(g) => gpu_ecc_correctable(n, &g.to_string()),
            Kind::EccUncorrectable => gpu_ecc_uncorrectable(n, "0"),
            Kind::Collector => collector_failed(n, "smart"),
            Kind::Unavailable => alert("GpuUnavailable")
                .on(n)
                .label("hale_signal", "unavailable")
                .label("signal", "gpu"),
            Kind::JobFailure => alert("JobFailed")
                .on(n)
                .label("hale_signal", "job_failure")
                .starts(t0()),
            Kind::Custom(i) => alert(&format!("Custom{i}")).on(n).critical(),
            Kind::Reboot => alert("WorkerUptimeTooHigh")
                .on(n)
                .condition("uptime_too_high", "WorkerUptimeTooHigh")
                .label("hale_remediation", "reboot"),
        };
        if let Some(p) = self.priority {
            a = a.label("priority", &p.to_string());
        }
        match self.state {
            0 if webhook => a.resolved(),
            1 if !webhook => a.suppressed(),
            _ => a,
        }
    }
}

/// One input of a history.
#[derive(Debug, Clone)]
enum Input {
    Poll { watchdog: bool, alerts: Vec<Gen> },
    Webhook { watchdog: bool, alerts: Vec<Gen> },
    Fail,
    Tick,
    Clear(usize),
    Failure(usize),
    Cordon(usize),
    Uncordon(usize),
    Reboot(usize),
}

fn input() -> impl Strategy<Value = Input> {
    let alerts = || proptest::collection::vec(gen_alert(), 0..8);
    prop_oneof![
        4 => (any::<bool>(), alerts()).prop_map(|(w, a)| Input::Poll { watchdog: w || a.len() % 3 != 0, alerts: a }),
        3 => (any::<bool>(), alerts()).prop_map(|(w, a)| Input::Webhook { watchdog: w, alerts: a }),
        1 => Just(Input::Fail),
        2 => Just(Input::Tick),
        1 => (0..NODES.len()).prop_map(Input::Clear),
        1 => (0..NODES.len()).prop_map(Input::Failure),
        1 => (0..NODES.len()).prop_map(Input::Cordon),
        1 => (0..NODES.len()).prop_map(Input::Uncordon),
        1 => (0..NODES.len()).prop_map(Input::Reboot),
    ]
}

/// A node's evidence: what an event may only be recorded for a change of. Report
/// times, observation counts and re-sent expiries move on every report.
fn evidence(node: &Node) -> serde_json::Value {
    let mut v = serde_json::to_value(node).unwrap();
    let o = v.as_object_mut().unwrap();
    o.remove("last_report");
    if let Some(h) = o.get_mut("heartbeat").and_then(|h| h.as_object_mut()) {
        h.remove("last");
    }
    if let Some(p) = o.get_mut("policy").and_then(|p| p.as_object_mut()) {
        p.remove("counted_report");
        p.remove("scored_reports");
    }
    for c in o["conditions"].as_object_mut().unwrap().values_mut() {
        let c = c.as_object_mut().unwrap();
        c.remove("last_seen");
        c.remove("observations");
        for s in c["sources"].as_object_mut().unwrap().values_mut() {
            let s = s.as_object_mut().unwrap();
            s.remove("expires");
            s.remove("delivered");
        }
    }
    v
}

/// What a node's events say of it, folded in order: its conditions with their
/// severity, and its score (a first score counts as a change from 100).
#[derive(Debug, Default, PartialEq)]
struct Folded {
    conditions: BTreeMap<String, Severity>,
    score: Option<u8>,
}

fn fold(events: &[Event]) -> Folded {
    let mut f = Folded::default();
    for e in events {
        match &e.kind {
            EventKind::ConditionRaised {
                condition,
                severity,
                ..
            }
            | EventKind::ConditionEscalated {
                condition,
                severity,
                ..
            }
            | EventKind::ConditionUpdated {
                condition,
                severity,
                ..
            } => {
                f.conditions.insert(condition.clone(), *severity);
            }
            EventKind::ConditionCleared { condition, .. } => {
                f.conditions.remove(condition);
            }
            EventKind::HeartbeatMissed { .. } => {
                f.conditions
                    .insert(HEARTBEAT_MISSED.into(), Severity::Warning);
            }
            EventKind::HeartbeatResumed { .. } => {
                f.conditions.remove(HEARTBEAT_MISSED);
            }
            EventKind::ScoreChanged { score, .. } => f.score = Some(*score),
            EventKind::NodeDecommissioned { .. } => f = Folded::default(),
            _ => {}
        }
    }
    f
}

/// Run `history` under `yaml`, checking the per-step properties; returns the script.
fn run(yaml: &str, history: &[(u16, Input)]) -> Result<Script, TestCaseError> {
    let mut s = script(yaml);
    let polling = s.cfg.source.polling;
    let mut at = 0i64;
    for (gap, input) in history {
        at += i64::from(*gap);
        s.at(at);
        let before: BTreeMap<String, serde_json::Value> = s
            .fleet
            .nodes
            .iter()
            .map(|(id, n)| (id.clone(), evidence(n)))
            .collect();
        let mark = s.events.len();
        let with = |dog: bool, alerts: &[Gen], webhook: bool| {
            let mut all: Vec<A> = alerts.iter().map(|g| g.alert(webhook)).collect();
            if dog {
                all.push(watchdog_sent(at));
            }
            all
        };
        match input {
            Input::Poll { watchdog, alerts } if polling => {
                s.poll(&with(*watchdog, alerts, false));
            }
            Input::Poll { watchdog, alerts } | Input::Webhook { watchdog, alerts } => {
                s.webhook(&with(*watchdog, alerts, true));
            }
            Input::Fail if polling => {
                s.fail();
            }
            Input::Fail | Input::Tick => {
                // As `hale serve` ticks: the time-driven rules, then remediation.
                s.tick();
                let out = s.fleet.remediate(&s.cfg, s.now, &Default::default());
                s.record(out);
            }
            Input::Clear(i) => {
                let id = NODES[*i];
                let ctype = s.fleet.nodes.get(id).and_then(|n| {
                    n.conditions
                        .keys()
                        .find(|c| !BLIND_CONDITIONS.contains(&c.as_str()))
                        .cloned()
                });
                if let Some(ctype) = ctype {
                    let out = s
                        .fleet
                        .clear_condition(&s.cfg, s.now, id, &ctype, "checked")
                        .unwrap();
                    s.record(out);
                }
            }
            Input::Failure(i) => {
                if s.fleet.nodes.contains_key(NODES[*i]) {
                    s.failure(NODES[*i]);
                }
            }
            Input::Cordon(i) => {
                if let Ok(out) = s.fleet.cordon(s.now, NODES[*i], "maintenance") {
                    s.record(out);
                }
            }
            Input::Uncordon(i) => {
                if let Ok(out) = s.fleet.uncordon(s.now, NODES[*i], "done") {
                    s.record(out);
                }
            }
            Input::Reboot(i) => {
                if let Ok(out) = s.fleet.request_reboot(s.now, NODES[*i], "asked", false) {
                    s.record(out);
                }
            }
        }
        for node in s.fleet.nodes.values() {
            // The allocation-free check agrees with scoring from scratch.
            let settings = s.cfg.settings_for(&node.labels);
            let fresh = node.compute_score(settings, s.now);
            prop_assert!(node.score_is(&fresh, settings, s.now), "{}", node.id);
            // Each step scores what it changed: a reported node's score is
            // current, but for a failure deduction, which decays between ticks.
            let decays = |b: &[Deduction]| b.iter().any(|d| d.reason == FAILURE_DEDUCTION);
            if node.last_report.is_some()
                && !decays(&fresh.breakdown)
                && !node.score.as_ref().is_some_and(|k| decays(&k.breakdown))
            {
                prop_assert_eq!(
                    node.score.as_ref(),
                    Some(&fresh),
                    "{}'s score is stale",
                    node.id
                );
            }
            let mut other = fresh.clone();
            other.breakdown.reverse();
            prop_assert_eq!(
                node.score_is(&other, settings, s.now),
                other == fresh,
                "{} against its breakdown reordered",
                node.id
            );
            if let Some(score) = &node.score {
                let points: u32 = score.breakdown.iter().map(|d| d.points).sum();
                prop_assert!(score.value <= 100);
                prop_assert_eq!(
                    u32::from(score.value),
                    100u32.saturating_sub(points),
                    "score of {} against its breakdown",
                    node.id
                );
            }
        }
        // What a delivery decides against (the pools as last counted, kept up to
        // date by each decision since) is what a whole pass would count now; only
        // replacements may still include some that aged out of the hour.
        if let Some(kept) = &s.fleet.pools {
            let (counted, _) = crate::core::policy::count(
                &s.cfg,
                s.now,
                &s.fleet.ledger,
                s.fleet.nodes.values().map(Box::as_ref),
            );
            for (name, pool) in &counted {
                let held = kept.get(name);
                prop_assert_eq!(
                    held.map(|p| (p.size, p.out)),
                    Some((pool.size, pool.out)),
                    "occupancy of pool {} after {:?}",
                    name,
                    input
                );
                prop_assert!(held.is_some_and(|p| p.replaced >= pool.replaced));
            }
        }
        let decaying: std::collections::BTreeSet<String> = s
            .fleet
            .nodes
            .values()
            .filter(|n| crate::core::step::decaying(n))
            .map(|n| n.id.clone())
            .collect();
        if let Some(kept) = &s.fleet.decaying {
            prop_assert_eq!(kept, &decaying, "nodes with a decaying deduction");
        }
        // A tick skips the look at every heartbeat until the kept deadline: no node
        // not yet missed may be late before it.
        if let Some(due) = &s.fleet.heartbeats_due
            && due.since == s.fleet.trust.heartbeats_since()
        {
            for n in s.fleet.nodes.values() {
                let deadline = crate::core::heartbeats::deadline(&s.cfg, due.since, n);
                if let Some((at, _)) = deadline
                    && !n.conditions.contains_key(HEARTBEAT_MISSED)
                {
                    prop_assert!(
                        at >= due.at,
                        "{} is late at {} but none is looked for before {} after {:?}",
                        n.id,
                        at,
                        due.at,
                        input
                    );
                }
            }
        }
        // Remediation looks only at the nodes it keeps: every node it has anything
        // to do with must be among them.
        if let Some(kept) = &s.fleet.remediation_watch {
            for n in s.fleet.nodes.values() {
                let watched = crate::core::policy::asks_reboot(n)
                    || n.policy.flow.is_some()
                    || n.policy.recommended_reboot.is_some();
                prop_assert!(
                    !watched || kept.contains(&n.id),
                    "{} asks remediation for something, but is not kept for it after {:?}",
                    n.id,
                    input
                );
            }
        }
        for e in &s.events[mark..] {
            let Some(after) = s.fleet.nodes.get(&e.node_id) else {
                continue;
            };
            prop_assert!(
                before.get(&e.node_id) != Some(&evidence(after)),
                "{} recorded for {} without a change to its evidence",
                e.kind.name(),
                e.node_id
            );
        }
    }
    Ok(s)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 150,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn scores_add_up_events_replay_to_the_state_and_none_is_recorded_idly(
        polling in any::<bool>(),
        require in any::<bool>(),
        mode in prop_oneof![Just("observe"), Just("cordon"), Just("drain"), Just("replace")],
        unavailable in prop_oneof![Just(20u32), Just(67), Just(100)],
        history in proptest::collection::vec((1u16..400, input()), 1..40),
    ) {
        let yaml = format!(
            "alertmanager: {{ pollInterval: {}, requireWatchdog: {require}, staleAfter: 10m }}\n\
             nodeHealth: {{ mode: {mode}, maxUnavailablePercent: {unavailable} }}",
            if polling { "30s" } else { "0" },
        );
        let s = run(&yaml, &history)?;
        let mut by_node: BTreeMap<&str, Vec<Event>> = BTreeMap::new();
        for e in &s.events {
            by_node.entry(&e.node_id).or_default().push(e.clone());
        }
        for (id, node) in &s.fleet.nodes {
            let folded = fold(by_node.get(id.as_str()).map_or(&[][..], Vec::as_slice));
            let held: BTreeMap<String, Severity> = node
                .conditions
                .iter()
                .map(|(t, c)| (t.to_string(), c.severity))
                .collect();
            prop_assert_eq!(&folded.conditions, &held, "conditions of {} from its events", id);
            let score = node.score.as_ref().map(|s| s.value);
            prop_assert_eq!(
                folded.score.or(score.map(|_| 100)),
                score,
                "score of {} from its events",
                id
            );
        }
    }

    /// A poll applied a few nodes at a time is the poll applied in one go: the same
    /// fleet, the same events for each node, the same count of what named no node.
    #[test]
    fn a_poll_in_slices_is_the_poll_in_one_go(
        mode in prop_oneof![Just("observe"), Just("cordon"), Just("replace")],
        history in proptest::collection::vec((1u16..400, input()), 0..20),
        watchdog in any::<bool>(),
        last in proptest::collection::vec(gen_alert(), 0..8),
        size in 1usize..4,
    ) {
        let yaml = format!(
            "alertmanager: {{ pollInterval: 30s, staleAfter: 10m }}\nnodeHealth: {{ mode: {mode} }}"
        );
        let s = run(&yaml, &history)?;
        let at = (s.now - t0()).num_seconds() + 30;
        let now = t0() + TimeDelta::seconds(at);
        let mut alerts: Vec<Alert> = last.iter().map(|g| g.alert(false).0).collect();
        if watchdog {
            alerts.push(watchdog_sent(at).0);
        }
        let answer = crate::core::PollAnswer::of(&alerts, now);
        let mut whole = s.fleet.clone();
        let in_one_go = whole.poll_answer(&s.cfg, now, &answer);
        let mut sliced = s.fleet.clone();
        let (mut slices, mut in_slices) = sliced.poll_begin(
            &s.cfg,
            now,
            &answer,
            crate::core::NodeGroups::of(&alerts, &s.cfg.identity),
        );
        let none = std::collections::BTreeSet::new();
        while !slices.done() {
            in_slices.absorb(sliced.poll_slice(&s.cfg, now, &mut slices, &alerts, &none, size));
        }
        in_slices.absorb(sliced.poll_end(&s.cfg, now, &slices));
        prop_assert_eq!(&sliced, &whole);
        let by_node = |out: &Outcome| {
            let mut events: BTreeMap<String, Vec<Event>> = BTreeMap::new();
            for e in &out.events {
                events.entry(e.node_id.clone()).or_default().push(e.clone());
            }
            events
        };
        prop_assert_eq!(by_node(&in_slices), by_node(&in_one_go));
        prop_assert_eq!(
            (in_slices.unmatched, &in_slices.refused, in_slices.trusted),
            (in_one_go.unmatched, &in_one_go.refused, in_one_go.trusted)
        );
    }
}
