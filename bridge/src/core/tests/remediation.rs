//! The reboot flow and fencing (DESIGN §8) as timed scripts: queue order, failure
//! domain waves, node types, the window, blocking alerts, the failure budget, a
//! restart after the reboot was sent, and fencing's guards.

use super::*;
use crate::core::policy::{Action, Done, Facts, FenceStep, FlowStep, PowerOp};

/// A script over `yaml`, its inventory registered.
fn fleet(yaml: &str) -> Script {
    let loaded = Config::parse("test.yaml", yaml)
        .unwrap()
        .resolve("test.yaml", yaml)
        .unwrap();
    let mut s = script(yaml);
    let listed: Vec<Listed> = loaded.config.inventory.iter().map(|n| n.listed()).collect();
    let out = s.fleet.register(&s.cfg, s.now, &listed);
    s.record(out);
    s
}

fn uptime(node: &str, priority: &str) -> A {
    alert("WorkerUptimeTooHigh")
        .on(node)
        .condition("uptime_too_high", "WorkerUptimeTooHigh")
        .label("hale_remediation", "reboot")
        .label("priority", priority)
        .summary("up for 31 days")
}

fn beat(node: &str) -> A {
    heartbeat(node).label("hale_report_interval", "5s")
}

impl Script {
    fn remediate(&mut self, facts: &Facts) -> &mut Self {
        let out = self.fleet.remediate(&self.cfg, self.now, facts);
        self.record(out)
    }
    fn flows(&mut self) -> &mut Self {
        self.remediate(&Facts::default())
    }
    /// Perform every pending action as the service would, each one done, with a
    /// pass of the flows after each round (as its tick would); the actions
    /// performed, `node:action`.
    fn act(&mut self) -> Vec<String> {
        let mut done = Vec::new();
        loop {
            let round = self.act_once();
            if round.is_empty() {
                return done;
            }
            done.extend(round);
            self.flows();
        }
    }
    fn act_once(&mut self) -> Vec<String> {
        let mut done = Vec::new();
        let ids: Vec<String> = self.fleet.nodes.keys().cloned().collect();
        for id in ids {
            while let Some(p) = self.fleet.next_action(&id) {
                if matches!(
                    p.action,
                    Action::Power {
                        op: PowerOp::Reboot,
                        ..
                    }
                ) {
                    let out = self.fleet.reboot_sending(self.now, &id);
                    self.record(out);
                }
                done.push(format!("{id}:{}", p.action.name()));
                let out = self
                    .fleet
                    .action_done(&self.cfg, self.now, &id, &p, &Done::default());
                self.record(out);
            }
        }
        done
    }
    fn step(&self, id: &str) -> Option<FlowStep> {
        self.node(id).policy.flow.as_ref().map(|f| f.step)
    }
    /// Events of `types` since the last call, `node TYPE`.
    fn took_of(&mut self, types: &[&str]) -> Vec<String> {
        self.took()
            .into_iter()
            .filter(|e| types.iter().any(|t| e.ends_with(t)))
            .collect()
    }
}

/// A policy event on a node no report has scored yet says so (`score: null`),
/// rather than an invented 100.
#[test]
fn a_policy_event_on_an_unscored_node_has_no_score() {
    let mut s = fleet("inventory: [ { id: n1 } ]\n");
    s.at(0).poll(&[watchdog()]);
    assert_eq!(s.score("n1"), None);
    let out = s
        .fleet
        .recommend_reboot(&s.cfg, s.now, "n1", "kernel update")
        .unwrap();
    s.record(out);
    let scores: Vec<Option<u8>> = s
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::PolicyRecommended { score, .. } => Some(*score),
            _ => None,
        })
        .collect();
    assert_eq!(scores, [None]);
}

const RACKS: &str = "
nodeHealth: { mode: cordon, maxUnavailablePercent: 100 }
remediation: { failureDomainLabel: rack, maxPerDomain: 2, verifyTimeout: 5m, returnTimeout: 10m }
inventory:
  - { id: n1, labels: { rack: r1 } }
  - { id: n2, labels: { rack: r1 } }
  - { id: n3, labels: { rack: r2 } }
  - { id: n4, labels: { rack: r2 } }
";

fn all_beating(except: &[&str], alerts: &[A]) -> Vec<A> {
    let mut v = vec![watchdog()];
    for n in ["n1", "n2", "n3", "n4"] {
        if !except.contains(&n) {
            v.push(beat(n));
        }
    }
    v.extend(alerts.iter().cloned());
    v
}

#[test]
fn a_rack_at_a_time_in_priority_order_each_node_through_every_step() {
    let mut s = fleet(RACKS);
    let uptimes = [
        uptime("n1", "P5"),
        uptime("n2", "P5"),
        uptime("n3", "P2"),
        uptime("n4", "P2"),
    ];
    s.at(0).poll(&all_beating(&[], &uptimes)).flows();
    // Rack r2 holds the urgent ones: both of it at once, r1 waits its turn.
    assert_eq!(s.step("n3"), Some(FlowStep::Cordon));
    assert_eq!(s.step("n4"), Some(FlowStep::Cordon));
    assert_eq!(s.step("n1"), Some(FlowStep::Queued));
    let list = s.fleet.remediations(&s.cfg, s.now, &Facts::default());
    assert_eq!(list.in_flight.len(), 2);
    assert!(
        list.queued[0]
            .waiting
            .as_deref()
            .unwrap()
            .contains("domainsAtOnce"),
        "{list:?}"
    );
    // Cordon done → diagnostics and drain; drain done → reboot (sent by the next
    // pass, once nothing holds it); reboot done → return.
    assert_eq!(
        s.act(),
        [
            "n3:cordon",
            "n3:drain",
            "n4:cordon",
            "n4:drain",
            "n3:reboot",
            "n4:reboot"
        ]
    );
    assert_eq!(s.step("n3"), Some(FlowStep::Return));
    let steps: Vec<String> = s
        .events
        .iter()
        .filter(|e| e.node_id == "n3")
        .filter_map(|e| match &e.kind {
            EventKind::RemediationStep { step, .. } => Some(step.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        steps,
        ["cordon", "diagnostics", "drain", "reboot", "return"]
    );
    assert_eq!(
        s.took_of(&["REMEDIATION_STARTED", "NODE_CORDONED"]),
        [
            "n3 REMEDIATION_STARTED",
            "n3 NODE_CORDONED",
            "n4 REMEDIATION_STARTED",
            "n4 NODE_CORDONED"
        ]
    );
    // Gone: the heartbeats stop, and are missed.
    s.at(10).poll(&all_beating(&["n3", "n4"], &uptimes)).flows();
    s.at(30).poll(&all_beating(&["n3", "n4"], &uptimes)).flows();
    assert!(s.node("n3").policy.flow.as_ref().unwrap().away);
    // Back, and the uptime alert ended: judged once it has settled (half of
    // verifyTimeout) with a poll since, then put back.
    s.at(40)
        .poll(&all_beating(&[], &uptimes[..2]))
        .flows()
        .flows();
    assert_eq!(s.step("n3"), Some(FlowStep::Verify));
    s.at(100).poll(&all_beating(&[], &uptimes[..2])).flows();
    assert_eq!(s.step("n3"), Some(FlowStep::Verify), "not settled yet");
    s.at(200).poll(&all_beating(&[], &uptimes[..2])).flows();
    assert_eq!(s.step("n3"), Some(FlowStep::Uncordon));
    // Put back, and at once rack r1's turn (the service's next pass).
    assert_eq!(
        s.act(),
        [
            "n3:uncordon",
            "n4:uncordon",
            "n1:cordon",
            "n1:drain",
            "n2:cordon",
            "n2:drain",
            "n1:reboot",
            "n2:reboot"
        ]
    );
    assert_eq!(s.step("n3"), None);
    assert_eq!(s.node("n3").status, Status::Ready);
    assert!(
        s.node("n3").policy.uncordoned_at.is_none(),
        "the flow's uncordon suppresses nothing"
    );
    let ends = s.took_of(&[
        "REMEDIATION_SUCCEEDED",
        "NODE_UNCORDONED",
        "REMEDIATION_STARTED",
    ]);
    let done = |n: &str| {
        ends.iter()
            .position(|e| *e == format!("{n} REMEDIATION_SUCCEEDED"))
    };
    let started = |n: &str| {
        ends.iter()
            .position(|e| *e == format!("{n} REMEDIATION_STARTED"))
    };
    assert!(
        started("n1") > done("n3") && started("n1") > done("n4") && done("n4").is_some(),
        "r1 only after r2: {ends:?}"
    );
    assert_eq!(s.step("n1"), Some(FlowStep::Return));
    assert_eq!(s.step("n2"), Some(FlowStep::Return));
}

/// An operator's active drain of a node a flow holds is the operator's.
#[test]
fn an_operators_drain_during_a_flow_is_the_operators() {
    let mut s = n1_asks_for_a_reboot();
    assert!(s.step("n1").is_some());
    let out = s.fleet.drain(s.now, "n1", true, "disk dying").unwrap();
    s.record(out);
    // The flow's cordon is the operator's now, as an operator's cordon makes it:
    // the flow, verified, leaves the node cordoned.
    assert_eq!(
        s.node("n1").policy.cordon.as_ref().map(|c| c.by),
        Some(crate::core::policy::Actor::Operator)
    );
    s.act();
    let drains: Vec<(String, String)> = s
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::NodeDrained { by, reason, .. } => Some((by.clone(), reason.clone())),
            _ => None,
        })
        .collect();
    assert!(
        drains.contains(&("operator".to_string(), "disk dying".to_string())),
        "{drains:?}"
    );
}

/// An operator's reboot of a node they had cordoned, verified while the node's
/// score is below cordonBelow, leaves the operator's cordon as the operator's:
/// not said on the node as hale's (which would let `replace` terminate it). (A
/// reboot the policy asks for gives such a node way: below.)
#[test]
fn a_verified_reboot_leaves_an_operators_cordon_the_operators() {
    let mut s = fleet(RACKS);
    let ecc = alert("UncorrectableMemoryErrors")
        .on("n1")
        .condition("memory_errors", "UncorrectableMemoryErrors")
        .critical();
    s.at(0).poll(&all_beating(&[], std::slice::from_ref(&ecc)));
    s.at(5).poll(&all_beating(&[], std::slice::from_ref(&ecc)));
    let out = s.fleet.cordon(s.now, "n1", "disk swap").unwrap();
    s.record(out);
    s.act();
    s.at(10);
    let out = s
        .fleet
        .request_reboot(s.now, "n1", "after the disk swap", false)
        .unwrap();
    s.record(out);
    s.poll(&all_beating(&[], std::slice::from_ref(&ecc)))
        .flows();
    assert!(s.step("n1").is_some());
    assert_eq!(s.act(), ["n1:drain", "n1:reboot"]);
    s.at(20)
        .poll(&all_beating(&["n1"], std::slice::from_ref(&ecc)))
        .flows();
    s.at(40)
        .poll(&all_beating(&["n1"], std::slice::from_ref(&ecc)))
        .flows();
    s.at(50)
        .poll(&all_beating(&[], std::slice::from_ref(&ecc)))
        .flows()
        .flows();
    s.at(400)
        .poll(&all_beating(&[], std::slice::from_ref(&ecc)))
        .flows();
    assert_eq!(s.step("n1"), None, "verified");
    assert!(s.score("n1").is_some_and(|v| v < 60));
    let cordon = s.node("n1").policy.cordon.as_ref().unwrap();
    assert_eq!(
        (cordon.by, cordon.reason.as_str()),
        (crate::core::policy::Actor::Operator, "disk swap")
    );
    assert!(s.act().is_empty(), "nothing said on the node");
}

/// Blind, a flow under way drains nothing: its cordon done while hale is stale, the
/// drain waits for trusted input.
#[test]
fn a_flow_drains_nothing_while_hale_is_stale() {
    let mut s = n1_asks_for_a_reboot();
    assert_eq!(s.step("n1"), Some(FlowStep::Cordon));
    s.at(100).fail();
    s.at(200).fail();
    assert!(s.fleet.trust.stale);
    assert_eq!(s.act(), ["n1:cordon"]);
    assert_eq!(s.step("n1"), Some(FlowStep::Cordon));
    // Past drainTimeout, blind all along: hale's wait, not a failure.
    s.at(700).fail().flows();
    assert_eq!(s.step("n1"), Some(FlowStep::Cordon));
    assert!(s.took_of(&["REMEDIATION_FAILED"]).is_empty());
    s.at(710)
        .poll(&all_beating(&[], &[uptime("n1", "P5")]))
        .flows();
    assert_eq!(s.act(), ["n1:drain", "n1:reboot"]);
}

/// A reboot or fence power-off this process recorded as sent and never sent (the
/// store did not take the record) is recorded again and sent; one an earlier
/// process recorded is not.
#[test]
fn a_send_is_recorded_again_only_by_the_process_that_never_sent_it() {
    let (mut s, id) = rack_with_one_fenced();
    assert!(s.fleet.fence_off_sending(s.now, &id).dirty.contains(&id));
    s.at(101);
    assert!(
        s.fleet.fence_off_sending(s.now, &id).dirty.contains(&id),
        "this process's record, not sent: recorded again"
    );
    s.at(102).restart();
    s.at(103);
    assert!(
        s.fleet.fence_off_sending(s.now, &id).dirty.is_empty(),
        "an earlier process's: never again"
    );
}

/// A reboot waiting its turn is ordered by the most urgent alert asking for it now:
/// a P1 that joins a queued P9 moves it up, ahead of a P5 queued before it.
#[test]
fn a_queued_reboot_takes_the_priority_of_its_most_urgent_alert() {
    let mut s = fleet(RACKS);
    let blocked = Facts {
        blocking: Some("CephHealthError fires".into()),
        ..Facts::default()
    };
    s.at(0)
        .poll(&all_beating(&[], &[uptime("n1", "P9"), uptime("n3", "P5")]))
        .remediate(&blocked);
    let xid = alert("GpuXidHardware")
        .on("n1")
        .condition("gpu_xid_errors", "GpuXidHardware")
        .label("hale_remediation", "reboot")
        .label("priority", "P1")
        .critical();
    s.at(10)
        .poll(&all_beating(
            &[],
            &[uptime("n1", "P9"), uptime("n3", "P5"), xid],
        ))
        .remediate(&blocked);
    let flow = s.node("n1").policy.flow.as_ref().unwrap();
    assert_eq!(
        (flow.priority, flow.trigger.as_deref()),
        (1, Some("gpu_xid_errors"))
    );
    let list = s.fleet.remediations(&s.cfg, s.now, &blocked);
    assert_eq!(list.queued[0].node, "n1", "{list:?}");
    // Every admission held back: none is said to wait on another's domain.
    assert!(!list.blocked.is_empty());
    assert!(list.queued.iter().all(|e| e.waiting.is_none()), "{list:?}");
}

/// A reboot the BMC confirmed (off, then on) needs no sighting of the node gone: a
/// hale restarted after the node came back finds it reporting for a whole
/// heartbeat window since the power-on, verifies and puts it back.
#[test]
fn a_reboot_the_bmc_confirmed_returns_without_hale_seeing_it_go() {
    let mut s = n1_asks_for_a_reboot();
    let by_bmc = Done {
        by_bmc: true,
        ..Done::default()
    };
    let (done, reboot) = to_the_reboot(&mut s, &by_bmc);
    let out = s.fleet.action_done(&s.cfg, s.now, "n1", &reboot, &by_bmc);
    s.record(out);
    assert_eq!(done, ["cordon", "drain", "reboot"]);
    assert_eq!(s.step("n1"), Some(FlowStep::Return));
    // hale down while the machine was off; back once it reports again.
    s.at(40).restart();
    s.at(41).poll(&all_beating(&[], &[])).flows();
    assert_eq!(s.step("n1"), Some(FlowStep::Verify));
    s.at(300).poll(&all_beating(&[], &[])).flows();
    assert_eq!(s.act(), ["n1:uncordon"]);
    assert_eq!(s.step("n1"), None);
    let succeeded = s
        .events
        .iter()
        .find(|e| e.kind.name() == "REMEDIATION_SUCCEEDED")
        .unwrap();
    assert!(
        succeeded
            .message
            .starts_with("reboot flow succeeded in 300s (queued 0s before it started)"),
        "{}",
        succeeded.message
    );
    assert!(s.took_of(&["REMEDIATION_FAILED"]).is_empty());
}

/// A reboot a stopped process sent, taken up by the next: the BMC read the machine
/// off and the new process powered it on, so the reboot happened — the node,
/// reporting a heartbeat window after that power-on, is back without hale having
/// seen it go.
#[test]
fn a_reboot_taken_up_and_powered_on_from_off_returns() {
    let mut s = n1_asks_for_a_reboot();
    to_the_reboot(&mut s, &Done::default());
    assert!(s.node("n1").policy.flow.as_ref().unwrap().sent.is_some());
    // Killed while the machine was going off; restarted, it finds it off.
    s.at(5).restart();
    s.at(6).poll(&all_beating(&[], &[])).flows();
    assert_eq!(s.step("n1"), Some(FlowStep::Return));
    let on = s.fleet.next_action("n1").expect("a power-on");
    assert_eq!(on.action.name(), "power_on");
    let from_off = Done {
        by_bmc: true,
        from_off: true,
        ..Done::default()
    };
    let out = s.fleet.action_done(&s.cfg, s.now, "n1", &on, &from_off);
    s.record(out);
    s.at(10).poll(&all_beating(&["n1"], &[])).flows();
    s.at(30).poll(&all_beating(&[], &[])).flows();
    assert_eq!(s.step("n1"), Some(FlowStep::Verify));
}

/// [`RACKS`], n1's uptime alert asking for a reboot, the flows passed once.
fn n1_asks_for_a_reboot() -> Script {
    let mut s = fleet(RACKS);
    s.at(0)
        .poll(&all_beating(&[], &[uptime("n1", "P5")]))
        .flows();
    s
}

/// n1's flow run as the service would, each action done as `done` says, up to its
/// reboot, recorded as being sent; the names of the actions taken (the reboot
/// last) and the reboot.
fn to_the_reboot(s: &mut Script, done: &Done) -> (Vec<&'static str>, crate::core::policy::Pending) {
    let mut taken = Vec::new();
    for _ in 0..10 {
        let Some(p) = s.fleet.next_action("n1") else {
            s.flows();
            continue;
        };
        taken.push(p.action.name());
        if p.action.name() == "reboot" {
            let out = s.fleet.reboot_sending(s.now, "n1");
            s.record(out);
            return (taken, p);
        }
        let out = s.fleet.action_done(&s.cfg, s.now, "n1", &p, done);
        s.record(out);
    }
    panic!("the flow sent no reboot: {taken:?}");
}

/// n1 in a flow, run up to the drain it queued; that drain's id.
fn flow_at_its_drain(s: &mut Script) -> u64 {
    s.at(0)
        .poll(&all_beating(&[], &[uptime("n1", "P5")]))
        .flows();
    for _ in 0..20 {
        let p = s.fleet.next_action("n1").expect("the flow goes on");
        if let Action::Drain {
            active: true,
            reason,
        } = &p.action
            && reason.starts_with("hale reboot: ")
        {
            return p.id;
        }
        let out = s
            .fleet
            .action_done(&s.cfg, s.now, "n1", &p, &Done::default());
        s.record(out);
        s.flows();
    }
    panic!("the flow queued no drain");
}

/// A drain refused is the flow's or the operator's as its reason says. The flow's
/// fails the flow, the node left cordoned and said not drained — but an
/// operator's drain queued beside it is not the flow's to drop, and once done the
/// node is drained. An operator's refused is no failure of the flow.
#[test]
fn a_refused_drain_is_the_flows_or_the_operators_as_its_reason_says() {
    let drain = |s: &Script| s.node("n1").policy.cordon.clone().expect("cordoned");
    let mut s = fleet(RACKS);
    let flows = flow_at_its_drain(&mut s);
    let out = s
        .fleet
        .action_failed(&s.cfg, s.now, "n1", flows, "n1 is NOT_READY");
    s.record(out);
    assert_eq!(s.step("n1"), None);
    assert_eq!(
        s.took_of(&["REMEDIATION_FAILED"]),
        ["n1 REMEDIATION_FAILED"]
    );
    let c = drain(&s);
    assert!(!c.drained && c.drain_refused, "{c:?}");

    let mut s = fleet(RACKS);
    let flows = flow_at_its_drain(&mut s);
    let out = s.fleet.drain(s.now, "n1", true, "disk dying").unwrap();
    s.record(out);
    let out = s
        .fleet
        .action_failed(&s.cfg, s.now, "n1", flows, "n1 is NOT_READY");
    s.record(out);
    assert_eq!(s.step("n1"), None);
    let c = drain(&s);
    assert!(
        c.drained && !c.drain_refused,
        "the operator's still to do: {c:?}"
    );
    // The cordon the operator's drain made theirs, then that drain.
    let cordon = s.fleet.next_action("n1").unwrap();
    assert!(matches!(cordon.action, Action::Cordon { .. }), "{cordon:?}");
    let out = s
        .fleet
        .action_done(&s.cfg, s.now, "n1", &cordon, &Done::default());
    s.record(out);
    let p = s
        .fleet
        .next_action("n1")
        .expect("the operator's drain stays");
    assert_eq!(
        p.action,
        Action::Drain {
            active: true,
            reason: "disk dying".into()
        }
    );
    let out = s
        .fleet
        .action_done(&s.cfg, s.now, "n1", &p, &Done::default());
    s.record(out);
    let c = drain(&s);
    assert!(c.drained && !c.drain_refused, "{c:?}");

    let mut s = fleet(RACKS);
    flow_at_its_drain(&mut s);
    let out = s.fleet.drain(s.now, "n1", true, "disk dying").unwrap();
    s.record(out);
    let operators = s
        .fleet
        .pending()
        .into_iter()
        .find(|(_, p)| {
            p.action
                == Action::Drain {
                    active: true,
                    reason: "disk dying".into(),
                }
        })
        .unwrap()
        .1;
    s.took();
    let out = s
        .fleet
        .action_failed(&s.cfg, s.now, "n1", operators.id, "no");
    s.record(out);
    assert_eq!(s.step("n1"), Some(FlowStep::Drain));
    assert!(s.took_of(&["REMEDIATION_FAILED"]).is_empty());
}

/// The backtest replays the score policy: the reboot flow's verdicts and cordons
/// (which follow alerts asking for a reboot, not the score) are counted on neither
/// side, so the running configuration still reproduces its record.
#[test]
fn the_backtest_leaves_the_reboot_flow_out() {
    for (mode, flow_did) in [
        ("observe", "POLICY_RECOMMENDED"),
        ("cordon", "NODE_CORDONED"),
    ] {
        let mut s = fleet(&format!(
            "nodeHealth: {{ mode: {mode}, maxUnavailablePercent: 100 }}\ninventory: [ {{ id: n1 }}, {{ id: n2 }} ]\n"
        ));
        s.at(0)
            .poll(&[watchdog(), beat("n1"), beat("n2"), uptime("n1", "P3")]);
        s.flows().flows();
        let history = s.events.clone();
        assert!(
            history
                .iter()
                .any(|e| e.node_id == "n1" && e.kind.name() == flow_did),
            "{mode}: {history:?}"
        );
        let r = crate::core::replay::backtest(&s.cfg, &s.fleet.nodes, &[], &history, None, s.now);
        assert!(r.recorded.is_empty(), "{mode}: {r:?}");
        assert_eq!(r.candidate, r.recorded, "{mode}: {r:?}");
    }
}

/// Observe says what would really happen: a node whose flow failed lately gets no
/// reboot recommended until `retryAfter` has passed, as none would be queued.
#[test]
fn observe_recommends_no_reboot_within_retry_after() {
    let mut s = fleet(
        "nodeHealth: { maxUnavailablePercent: 100 }\ninventory: [ { id: n1 }, { id: n2 } ]\nremediation: { retryAfter: 1h }\n",
    );
    s.at(0).poll(&[watchdog(), beat("n1"), beat("n2")]);
    s.fleet.nodes.get_mut("n1").unwrap().policy.flow_failed_at = Some(s.now);
    s.at(30)
        .poll(&[watchdog(), beat("n1"), beat("n2"), uptime("n1", "P3")]);
    s.flows().flows();
    assert_eq!(s.took_of(&["POLICY_RECOMMENDED"]), Vec::<String>::new());
    s.at(3_700)
        .poll(&[watchdog(), beat("n1"), beat("n2"), uptime("n1", "P3")]);
    s.flows().flows();
    assert_eq!(
        s.took_of(&["POLICY_RECOMMENDED"]),
        ["n1 POLICY_RECOMMENDED"]
    );
}

#[test]
fn observe_only_recommends_and_holds_an_operators_queued_reboot() {
    let mut s = fleet(
        "nodeHealth: { maxUnavailablePercent: 100 }\ninventory: [ { id: n1 }, { id: n2 } ]\nremediation: { verifyTimeout: 5m }\n",
    );
    s.at(0)
        .poll(&[watchdog(), beat("n1"), beat("n2"), uptime("n1", "P3")]);
    s.flows().flows();
    assert_eq!(
        s.took_of(&["POLICY_RECOMMENDED", "REMEDIATION_STARTED"]),
        ["n1 POLICY_RECOMMENDED"]
    );
    assert_eq!(s.step("n1"), None);
    let out = s
        .fleet
        .request_reboot(s.now, "n2", "kernel update", false)
        .unwrap();
    s.record(out);
    assert!(matches!(
        s.fleet.request_reboot(s.now, "n2", "again", false),
        Ok(_) | Err(CoreError::Busy { .. })
    ));
    // (The API refuses one in observe; one queued before the switch is held.)
    s.flows();
    assert_eq!(
        s.step("n2"),
        Some(FlowStep::Queued),
        "held: the pool observes"
    );
    assert_eq!(
        s.fleet
            .request_reboot(s.now, "nope", "x", false)
            .unwrap_err(),
        CoreError::UnknownNode("nope".into())
    );
}

#[test]
fn a_condition_still_raised_after_the_reboot_fails_at_verify_and_waits_retry_after() {
    let mut s = fleet(
        "nodeHealth: { mode: cordon, maxUnavailablePercent: 100 }\ninventory: [ { id: n1 } ]\nremediation: { verifyTimeout: 1m, retryAfter: 1h }\n",
    );
    let up = uptime("n1", "P3");
    s.at(0).poll(&[watchdog(), beat("n1"), up.clone()]).flows();
    s.act();
    s.at(5).poll(&[watchdog(), up.clone()]).flows();
    s.at(30).poll(&[watchdog(), up.clone()]).flows();
    s.at(35).poll(&[watchdog(), beat("n1"), up.clone()]).flows();
    assert_eq!(s.step("n1"), Some(FlowStep::Verify));
    s.at(100)
        .poll(&[watchdog(), beat("n1"), up.clone()])
        .flows();
    assert_eq!(s.step("n1"), None);
    let failed: Vec<&Event> = s
        .events
        .iter()
        .filter(|e| e.kind.name() == "REMEDIATION_FAILED")
        .collect();
    assert!(
        matches!(&failed[0].kind, EventKind::RemediationFailed { step, cancelled: false, .. } if step == "verify"),
        "{failed:?}"
    );
    assert_eq!(
        s.node("n1").status,
        Status::Cordoned,
        "a failed flow leaves the node cordoned"
    );
    // Not re-admitted by the alert before retryAfter; after it, queued again.
    s.at(200).flows();
    assert_eq!(s.step("n1"), None);
    s.at(100 + 3601).poll(&[watchdog(), beat("n1"), up]).flows();
    assert!(s.step("n1").is_some());
    // The retry cures it: the cordon the failed flow left is the retry's to lift,
    // and the node goes back in service (not "out of service before the flow").
    s.act();
    s.at(3705).poll(&[watchdog()]).flows();
    s.at(3730).poll(&[watchdog()]).flows();
    s.at(3735).poll(&[watchdog(), beat("n1")]).flows();
    s.act();
    s.at(3800).poll(&[watchdog(), beat("n1")]).flows();
    s.act();
    assert_eq!(s.step("n1"), None);
    assert_eq!(
        s.took_of(&["REMEDIATION_SUCCEEDED", "NODE_UNCORDONED"]),
        ["n1 NODE_UNCORDONED", "n1 REMEDIATION_SUCCEEDED"]
    );
    assert_eq!(
        s.node("n1").status,
        Status::Ready,
        "the retry's cure leaves it cordoned"
    );
    assert!(s.node("n1").policy.cordon.is_none());
}

#[test]
fn failures_beyond_the_hourly_budget_halt_admission() {
    let mut s = fleet(
        "nodeHealth: { mode: cordon, maxUnavailablePercent: 100 }\ninventory: [ { id: n1 }, { id: n2 }, { id: n3 } ]\nremediation: { returnTimeout: 1m, maxFailuresPerHour: 1, domainsAtOnce: 2 }\n",
    );
    let alerts = [
        watchdog(),
        beat("n1"),
        beat("n2"),
        beat("n3"),
        uptime("n1", "P1"),
        uptime("n2", "P2"),
        uptime("n3", "P3"),
    ];
    s.at(0).poll(&alerts).flows();
    s.act();
    // n1 and n2 never go away: their reboots are not confirmed. One failure is
    // within the budget of one; the second is more than it, and halts.
    s.at(90).poll(&alerts).flows();
    assert_eq!(
        s.took_of(&["REMEDIATION_FAILED", "POLICY_HALTED"]),
        [
            "n1 REMEDIATION_FAILED",
            "n2 REMEDIATION_FAILED",
            "n2 POLICY_HALTED"
        ]
    );
    s.at(91).flows();
    assert_eq!(
        s.step("n3"),
        Some(FlowStep::Queued),
        "halted: nothing new admitted"
    );
    let list = s.fleet.remediations(&s.cfg, s.now, &Facts::default());
    assert!(list.blocked[0].contains("maxFailuresPerHour"), "{list:?}");
    // The hour passes: admitted again.
    s.at(90 + 3601).poll(&alerts).flows();
    assert_eq!(s.step("n3"), Some(FlowStep::Cordon));
}

#[test]
fn a_reboot_sent_before_a_restart_is_never_sent_again() {
    let mut s = fleet(
        "nodeHealth: { mode: cordon, maxUnavailablePercent: 100 }\ninventory: [ { id: n1 } ]\n",
    );
    s.at(0)
        .poll(&[watchdog(), beat("n1"), uptime("n1", "P3")])
        .flows();
    // Cordon and drain done; the reboot recorded as sent, then the process dies.
    for _ in 0..2 {
        let p = s.fleet.next_action("n1").unwrap();
        let out = s
            .fleet
            .action_done(&s.cfg, s.now, "n1", &p, &Done::default());
        s.record(out);
    }
    s.flows();
    let p = s.fleet.next_action("n1").unwrap();
    assert!(matches!(
        p.action,
        Action::Power {
            op: PowerOp::Reboot,
            ..
        }
    ));
    let out = s.fleet.reboot_sending(s.now, "n1");
    s.record(out);
    // A new process: what was stored, watched from later.
    let mut restarted = Fleet::new(t0() + TimeDelta::seconds(60));
    restarted.nodes = s.fleet.nodes.clone();
    restarted.ledger = s.fleet.ledger.clone();
    s.fleet = restarted;
    s.at(61).poll(&[watchdog(), uptime("n1", "P3")]).flows();
    assert_eq!(s.step("n1"), Some(FlowStep::Return));
    // Not the reboot again: only an on, for a machine the stop left off.
    assert_eq!(s.act(), ["n1:power_on"]);
    assert_eq!(s.step("n1"), Some(FlowStep::Return));
}

/// An operator's reboot goes ahead of every alert's, an alert's `priority="0"`
/// (`P0`) and an older request included.
#[test]
fn an_operators_reboot_is_queued_ahead_of_a_p0_alert() {
    let mut s = fleet(
        "nodeHealth: { mode: cordon, maxUnavailablePercent: 100 }\ninventory: [ { id: n1 }, { id: n2 } ]\nremediation: { window: { start: '13:00', end: '14:00', timeZone: UTC } }\n",
    );
    // Outside the window: both stay queued, in admission order.
    s.at(0)
        .poll(&[watchdog(), beat("n1"), beat("n2"), uptime("n1", "P0")])
        .flows();
    assert_eq!(s.step("n1"), Some(FlowStep::Queued));
    s.at(10);
    let out = s
        .fleet
        .request_reboot(s.now, "n2", "kernel update", false)
        .unwrap();
    s.record(out);
    let queued: Vec<String> = s
        .fleet
        .remediations(&s.cfg, s.now, &Facts::default())
        .queued
        .into_iter()
        .map(|e| e.node)
        .collect();
    assert_eq!(queued, ["n2", "n1"]);
}

#[test]
fn admission_waits_for_the_window_blocking_alerts_and_a_fresh_source() {
    let mut s = fleet(
        "nodeHealth: { mode: cordon, maxUnavailablePercent: 100 }\ninventory: [ { id: n1 } ]\nremediation: { window: { days: [wed], start: '13:00', end: '14:00', timeZone: UTC } }\n",
    );
    // t0 is Wednesday 2026-08-05 12:00 UTC: outside the window.
    s.at(0)
        .poll(&[watchdog(), beat("n1"), uptime("n1", "P3")])
        .flows();
    assert_eq!(s.step("n1"), Some(FlowStep::Queued));
    let blocked = s
        .fleet
        .remediations(&s.cfg, s.now, &Facts::default())
        .blocked;
    assert!(
        blocked[0].contains("outside remediation.window"),
        "{blocked:?}"
    );
    let facts = Facts {
        blocking: Some("blocking alert CephHealthError fires".into()),
        ..Facts::default()
    };
    s.at(3600)
        .poll(&[watchdog(), beat("n1"), uptime("n1", "P3")])
        .remediate(&facts);
    assert_eq!(
        s.step("n1"),
        Some(FlowStep::Queued),
        "a blocking alert fires"
    );
    // Stale: no watchdog for a long time.
    s.at(3700)
        .poll(&[beat("n1"), uptime("n1", "P3")])
        .at(3900)
        .tick()
        .flows();
    assert_eq!(
        s.step("n1"),
        Some(FlowStep::Queued),
        "hale's source is stale"
    );
    s.at(3910)
        .poll(&[watchdog(), beat("n1"), uptime("n1", "P3")])
        .flows();
    assert_eq!(s.step("n1"), Some(FlowStep::Cordon));
}

#[test]
fn node_types_exclude_and_pace_control_plane_and_storage() {
    let yaml = "
nodeHealth: { mode: cordon, maxUnavailablePercent: 100 }
remediation:
  domainsAtOnce: 5
  nodeTypes:
    - { name: control-plane, selector: { node-role.kubernetes.io/control-plane: '' }, allowed: true }
    - { name: storage, selector: { role: storage }, blockingAlerts: [ { alertname: CephHealthWarn } ] }
inventory:
  - { id: cp1, labels: { node-role.kubernetes.io/control-plane: '' } }
  - { id: cp2, labels: { node-role.kubernetes.io/control-plane: '' } }
  - { id: st1, labels: { role: storage } }
";
    let mut s = fleet(yaml);
    let alerts = [
        watchdog(),
        beat("cp1"),
        beat("cp2"),
        beat("st1"),
        uptime("cp1", "P3"),
        uptime("cp2", "P3"),
        uptime("st1", "P3"),
    ];
    let facts = Facts {
        blocked_types: [("storage".to_string(), "CephHealthWarn".to_string())].into(),
        ..Facts::default()
    };
    s.at(0).poll(&alerts).remediate(&facts);
    // One control-plane node at a time; storage held by its own blocking alert.
    assert_eq!(s.step("cp1"), Some(FlowStep::Cordon));
    assert_eq!(s.step("cp2"), Some(FlowStep::Queued));
    assert_eq!(s.step("st1"), Some(FlowStep::Queued));
    let list = s.fleet.remediations(&s.cfg, s.now, &facts);
    let waiting: Vec<String> = list
        .queued
        .iter()
        .filter_map(|e| e.waiting.clone())
        .collect();
    assert!(
        waiting
            .iter()
            .any(|w| w.contains("another control-plane node")),
        "{waiting:?}"
    );
    assert!(
        waiting.iter().any(|w| w.contains("CephHealthWarn")),
        "{waiting:?}"
    );
    s.remediate(&Facts::default());
    assert_eq!(s.step("st1"), Some(FlowStep::Cordon));

    // Without a type that allows them, control-plane nodes are never admitted.
    let mut s = fleet(
        "nodeHealth: { mode: cordon, maxUnavailablePercent: 100 }\ninventory: [ { id: cp1, labels: { node-role.kubernetes.io/control-plane: '' } } ]\n",
    );
    s.at(0)
        .poll(&[watchdog(), beat("cp1"), uptime("cp1", "P1")])
        .flows();
    assert_eq!(s.step("cp1"), Some(FlowStep::Queued));
}

const FENCED: &str = "
nodeHealth: { mode: cordon }
fencing: { after: 1m, maxPercent: 10 }
inventory:
  - { id: n0 }
  - { id: n1 }
  - { id: n2 }
  - { id: n3 }
  - { id: n4 }
  - { id: n5 }
  - { id: n6 }
  - { id: n7 }
  - { id: n8 }
  - { id: n9 }
";

fn beating(silent: &[&str]) -> Vec<A> {
    let mut v = vec![watchdog()];
    for i in 0..10 {
        let n = format!("n{i}");
        if !silent.contains(&n.as_str()) {
            v.push(beat(&n));
        }
    }
    v
}

/// A fenced machine is out of its pool's service, shown by no orchestrator
/// (`none` keeps it Ready in hale's books): a reboot that would take one more of the
/// pool out past `maxUnavailablePercent` waits until the fenced one is back.
#[test]
fn a_fenced_node_counts_against_max_unavailable_for_reboots() {
    let mut s = fleet(
        "nodeHealth: { mode: cordon, maxUnavailablePercent: 10 }\nfencing: { after: 1m, maxPercent: 10 }\ninventory: [ { id: n0 }, { id: n1 }, { id: n2 }, { id: n3 }, { id: n4 }, { id: n5 }, { id: n6 }, { id: n7 }, { id: n8 }, { id: n9 } ]\n",
    );
    s.at(0).poll(&beating(&[]));
    s.at(5)
        .poll(&beating(&["n0"]))
        .at(30)
        .poll(&beating(&["n0"]));
    s.at(100).poll(&beating(&["n0"])).flows();
    assert!(s.node("n0").policy.fence.is_some());
    s.act();
    assert_eq!(
        s.node("n0").status,
        Status::Ready,
        "no orchestrator shows it"
    );
    let mut alerts = beating(&["n0"]);
    alerts.push(uptime("n1", "P1"));
    s.at(130).poll(&alerts).flows();
    assert_eq!(
        s.step("n1"),
        Some(FlowStep::Queued),
        "one of ten fenced: another out is past 10%"
    );
    // n0 reports again, its fence ends: n1 is admitted.
    let mut alerts = beating(&[]);
    alerts.push(uptime("n1", "P1"));
    s.at(200).poll(&alerts).flows();
    s.act();
    assert!(s.node("n0").policy.fence.is_none());
    s.at(201).poll(&alerts).flows();
    assert!(
        s.step("n1").is_some_and(|st| st != FlowStep::Queued),
        "{:?}",
        s.step("n1")
    );
}

/// Observe says what would really happen: of a silent rack, as many "would fence"
/// as `fencing.maxPercent` allows, the rest held back by it.
#[test]
fn observe_recommends_no_more_fences_than_max_percent() {
    let mut s = fleet(&FENCED.replace("mode: cordon", "mode: observe"));
    let rack = ["n0", "n1", "n2", "n3", "n4"];
    s.at(0).poll(&beating(&[]));
    s.at(5).poll(&beating(&rack)).at(30).poll(&beating(&rack));
    s.at(100).poll(&beating(&rack)).flows();
    assert!(rack.iter().all(|n| s.node(n).policy.fence.is_none()));
    let verdicts = s.took_of(&["POLICY_RECOMMENDED", "POLICY_HALTED"]);
    assert_eq!(
        verdicts
            .iter()
            .filter(|v| v.ends_with("POLICY_RECOMMENDED"))
            .count(),
        1,
        "{verdicts:?}"
    );
    assert_eq!(
        verdicts
            .iter()
            .filter(|v| v.ends_with("POLICY_HALTED"))
            .count(),
        4,
        "{verdicts:?}"
    );
    s.at(101).flows();
    assert!(
        s.took_of(&["POLICY_RECOMMENDED", "POLICY_HALTED"])
            .is_empty()
    );
    // The one observe would fence reports again: the next in line would be fenced
    // now, and observe says so, though it was held back before.
    let first = verdicts
        .iter()
        .find(|v| v.ends_with("POLICY_RECOMMENDED"))
        .and_then(|v| v.split(' ').next())
        .unwrap()
        .to_string();
    let still: Vec<&str> = rack.iter().copied().filter(|n| *n != first).collect();
    s.at(130).poll(&beating(&still)).flows();
    s.at(131).flows();
    assert_eq!(
        s.took_of(&["POLICY_RECOMMENDED"]).len(),
        1,
        "the next silent node, held back before"
    );
}

#[test]
fn a_rack_gone_silent_fences_no_more_than_max_percent() {
    let mut s = fleet(FENCED);
    let rack = ["n0", "n1", "n2", "n3", "n4"];
    s.at(0).poll(&beating(&[]));
    s.at(5).poll(&beating(&rack)).at(30).poll(&beating(&rack));
    s.at(100).poll(&beating(&rack)).flows();
    let fenced: Vec<&str> = rack
        .iter()
        .copied()
        .filter(|n| s.node(n).policy.fence.is_some())
        .collect();
    assert_eq!(fenced.len(), 1, "10% of 10 nodes: one");
    assert_eq!(
        s.took_of(&["POLICY_HALTED"]).len(),
        4,
        "each node held back is said once"
    );
    s.at(101).flows();
    assert!(
        s.took_of(&["POLICY_HALTED"]).is_empty(),
        "not again while still silent"
    );

    // The one fenced: off, released, NODE_FENCED, on; back: release taken back.
    let id = fenced[0].to_string();
    assert_eq!(
        s.act(),
        [
            format!("{id}:power_off"),
            format!("{id}:release"),
            format!("{id}:power_on")
        ]
    );
    assert_eq!(
        s.node(&id).policy.fence.as_ref().unwrap().step,
        FenceStep::Fenced
    );
    assert!(
        s.took_of(&["NODE_FENCED"])
            .contains(&format!("{id} NODE_FENCED"))
    );
    // Still counted while silent: nobody else fenced.
    s.at(200).poll(&beating(&rack)).flows();
    assert_eq!(
        rack.iter()
            .filter(|n| s.node(n).policy.fence.is_some())
            .count(),
        1
    );
    // It reports again: the release is taken back, the fence ends — and its place
    // in the budget goes to the next silent node.
    let still: Vec<&str> = rack.iter().copied().filter(|n| **n != id).collect();
    s.at(210).poll(&beating(&still)).flows();
    let done = s.act();
    assert_eq!(done[0], format!("{id}:unrelease"));
    assert!(s.node(&id).policy.fence.is_none());
    assert_eq!(done.len(), 4, "one more fenced, and only one: {done:?}");
    assert_eq!(
        still
            .iter()
            .filter(|n| s.node(n).policy.fence.is_some())
            .count(),
        1
    );
}

/// Five nodes of ten, a rack, silent since 5 s.
const RACK: [&str; 5] = ["n0", "n1", "n2", "n3", "n4"];

/// [`RACK`] gone silent, looked at 100 s in: one of its nodes fenced (its power-off
/// queued), the others held back by `maxPercent`; the script and that node.
fn rack_with_one_fenced() -> (Script, String) {
    let mut s = fleet(FENCED);
    s.at(0).poll(&beating(&[]));
    s.at(5).poll(&beating(&RACK)).at(30).poll(&beating(&RACK));
    s.at(100).poll(&beating(&RACK)).flows();
    let id = RACK
        .iter()
        .find(|n| s.node(n).policy.fence.is_some())
        .unwrap()
        .to_string();
    (s, id)
}

impl Script {
    /// Perform `id`'s actions as the service would until none is left, the one
    /// named `refused` refused for `why`, with a pass of the flows after each; the
    /// actions' names in order.
    fn fence_through(&mut self, id: &str, refused: &str, why: &str) -> Vec<&'static str> {
        self.fence_through_as(id, refused, why, &Done::default())
    }

    /// [`Script::fence_through`], the power-off answered `off` (the machine read
    /// off already, say).
    fn fence_through_as(
        &mut self,
        id: &str,
        refused: &str,
        why: &str,
        off: &Done,
    ) -> Vec<&'static str> {
        let mut done = Vec::new();
        while let Some(p) = self.fleet.next_action(id) {
            done.push(p.action.name());
            let answer = if p.action.name() == "power_off" {
                off
            } else {
                &Done::default()
            };
            let out = if p.action.name() == refused {
                self.fleet.action_failed(&self.cfg, self.now, id, p.id, why)
            } else {
                self.fleet.action_done(&self.cfg, self.now, id, &p, answer)
            };
            self.record(out);
            self.flows();
        }
        done
    }
}

/// A fence whose power-on fails leaves the machine off and its work released: it
/// stays fenced — counted toward `maxPercent`, so the rest of a silent rack is not
/// fenced in its place — and its release is taken back once it reports.
#[test]
fn a_fence_whose_power_on_fails_stays_counted_until_the_node_reports() {
    let (mut s, id) = rack_with_one_fenced();
    let rack = RACK;
    let done = s.fence_through(&id, "power_on", "the BMC never showed On");
    assert_eq!(done, ["power_off", "release", "power_on"]);
    assert_eq!(
        s.node(&id).policy.fence.as_ref().unwrap().step,
        FenceStep::Fenced
    );
    assert!(
        s.events.iter().any(|e| e
            .message
            .contains(&format!("power it on (hale node power {id} on)"))),
        "the event says what is left to do"
    );
    assert_eq!(
        s.took_of(&["REMEDIATION_FAILED"]),
        [format!("{id} REMEDIATION_FAILED")]
    );
    // An operator may power it on through hale: the fence only waits now.
    assert_eq!(crate::core::policy::power_busy(s.node(&id), true), None);
    assert!(
        crate::core::policy::power_busy(s.node(&id), false).is_some(),
        "an off would leave it fenced for good"
    );
    // Well past `fencing.after`, the rack still silent: no other node fenced.
    s.at(400).poll(&beating(&rack)).flows();
    assert!(s.act().is_empty());
    assert_eq!(
        rack.iter()
            .filter(|n| s.node(n).policy.fence.is_some())
            .collect::<Vec<_>>(),
        [&id.as_str()]
    );
    // Powered on by hand, it reports again: its release taken back.
    let others: Vec<&str> = rack.iter().copied().filter(|n| **n != id).collect();
    s.at(410).poll(&beating(&others)).flows();
    assert_eq!(s.act()[0], format!("{id}:unrelease"));
    assert!(s.node(&id).policy.fence.is_none());
}

/// An orchestrator that cannot release a fenced node's work (Slurm, Fuzzball): the
/// machine is powered off and on, the release recorded as failed once, and nothing
/// taken back once the node reports.
#[test]
fn a_fence_whose_release_fails_takes_nothing_back() {
    let (mut s, id) = rack_with_one_fenced();
    let done = s.fence_through(
        &id,
        "release",
        "this orchestrator cannot release a fenced node's work",
    );
    assert_eq!(done, ["power_off", "release", "power_on"]);
    let others: Vec<&str> = RACK.iter().copied().filter(|n| **n != id).collect();
    s.at(410).poll(&beating(&others)).flows();
    assert!(s.node(&id).policy.fence.is_none());
    assert!(
        s.fleet.next_action(&id).is_none(),
        "no release to take back"
    );
    assert_eq!(
        s.took_of(&["REMEDIATION_FAILED"]),
        [format!("{id} REMEDIATION_FAILED")],
        "failed once, at release"
    );
}

/// A machine the BMC reads off before the fence's power-off (switched off outside
/// hale: an operator's repair, a PSU swap) is fenced as found — its work released
/// where the orchestrator can — and left off: the fence never powers it on, whether
/// the release is done or refused, and says so.
#[test]
fn a_fence_that_finds_the_machine_off_leaves_it_off() {
    let found_off = Done {
        found_off: true,
        ..Done::default()
    };
    for (refused, fenced) in [("none", true), ("release", false)] {
        let (mut s, id) = rack_with_one_fenced();
        let done = s.fence_through_as(
            &id,
            refused,
            "this orchestrator cannot release a fenced node's work",
            &found_off,
        );
        assert_eq!(done, ["power_off", "release"], "no power-on ({refused})");
        let fence = s.node(&id).policy.fence.clone().unwrap();
        assert_eq!(fence.step, FenceStep::Fenced);
        assert_eq!(fence.unreleased, !fenced);
        assert!(
            s.events.iter().any(|e| e.message.contains(&format!(
                "left off, as it was found (switched off outside hale): power it on when it should return (hale node power {id} on)"
            ))),
            "{refused}: the event says it is left off"
        );
        // Powered on by its operator, it reports: the fence is over, its release
        // (if any) taken back.
        let others: Vec<&str> = RACK.iter().copied().filter(|n| **n != id).collect();
        s.at(410).poll(&beating(&others)).flows();
        let back: Vec<String> = s
            .act()
            .into_iter()
            .filter(|a| a.starts_with(&format!("{id}:")))
            .collect();
        let taken_back = if fenced {
            vec![format!("{id}:unrelease")]
        } else {
            Vec::new()
        };
        assert_eq!(back, taken_back);
        assert!(s.node(&id).policy.fence.is_none());
    }
}

impl Script {
    /// k1 and k2 report, then k1 falls silent while the orchestrator shows
    /// `seen(false)`, then `seen(true)` (not ready); looked at 100 s in.
    fn k1_falls_silent(&mut self, seen: impl Fn(bool) -> Vec<crate::core::policy::Observed>) {
        let out = self.fleet.observe(&self.cfg, self.now, &seen(false));
        self.record(out);
        self.at(0).poll(&[watchdog(), beat("k1"), beat("k2")]);
        self.at(5)
            .poll(&[watchdog(), beat("k2")])
            .at(30)
            .poll(&[watchdog(), beat("k2")]);
        let out = self.fleet.observe(&self.cfg, self.now, &seen(true));
        self.record(out);
        self.at(100).poll(&[watchdog(), beat("k2")]).flows();
    }
}

/// A node an operator took out of service (a cordon or drain of theirs: a
/// firmware update, a repair) is theirs: silent and not ready, it is never
/// fenced — a power-off could cut their work short — and its silence holds no
/// other node back.
#[test]
fn a_node_an_operator_took_out_of_service_is_never_fenced() {
    let mut s = script(
        "nodeHealth: { mode: cordon }\nfencing: { after: 1m, maxPercent: 50 }\norchestrator: { kind: kubernetes }\n",
    );
    let seen = |not_ready: bool| {
        let mut k1 = super::shown("k1", Status::Cordoned);
        k1.not_ready = not_ready;
        k1.cordoned_by = Some((crate::core::policy::Actor::Operator, "bios update".into()));
        vec![k1, super::shown("k2", Status::Ready)]
    };
    s.k1_falls_silent(seen);
    s.at(400).poll(&[watchdog(), beat("k2")]).flows();
    assert_eq!(s.act(), Vec::<String>::new());
    assert!(s.node("k1").policy.fence.is_none());
    assert!(
        s.took_of(&["REMEDIATION_STARTED", "POLICY_HALTED"])
            .is_empty()
    );
}

/// An operator's cordon of a node being fenced, refused by the orchestrator (one
/// that will not cordon a node that is not ready), takes nothing of the fence's
/// with it: the machine is released and powered on, not left off.
#[test]
fn a_refused_operator_cordon_leaves_a_fence_to_finish() {
    let (mut s, id) = rack_with_one_fenced();
    let out = s.fleet.cordon(s.now, &id, "disk swap").unwrap();
    s.record(out);
    let done = s.fence_through(&id, "cordon", "the node is not ready");
    assert_eq!(done, ["power_off", "cordon", "release", "power_on"]);
    assert_eq!(
        s.node(&id).policy.fence.as_ref().unwrap().step,
        FenceStep::Fenced
    );
}

/// A fence whose power-off the BMC took without ever showing the machine off may
/// have switched it off: it stays counted toward `maxPercent` (the rest of a silent
/// rack is not fenced in its place), is not powered off again, leaves the
/// operator's power verbs free, and fails at off once the node reports.
#[test]
fn a_fence_whose_power_off_goes_unconfirmed_stays_counted_until_the_node_reports() {
    let (mut s, id) = rack_with_one_fenced();
    let off = s.fleet.next_action(&id).expect("its power-off queued");
    assert_eq!(off.action.name(), "power_off");
    s.took();
    let out = s.fleet.action_unconfirmed(
        &s.cfg,
        s.now,
        &id,
        off.id,
        "the machine still reads on after 60s (asked for off)",
    );
    s.record(out);
    s.flows();
    assert_eq!(
        s.node(&id).policy.fence.as_ref().unwrap().step,
        FenceStep::Unconfirmed
    );
    assert!(s.node(&id).policy.pending.is_empty(), "nothing more sent");
    assert_eq!(s.node(&id).policy.fences.len(), 1, "one of the day's three");
    assert!(
        s.events.iter().any(|e| e.node_id == id
            && e.message.contains("it may be off")
            && e.message.contains(&format!("hale node power {id} status"))),
        "the event says what is left to do"
    );
    assert_eq!(crate::core::policy::power_busy(s.node(&id), false), None);
    assert_eq!(crate::core::policy::power_busy(s.node(&id), true), None);
    // Well past `fencing.after`, the rack still silent: no other node fenced, and
    // no second power-off.
    s.at(400).poll(&beating(&RACK)).flows();
    assert!(s.act().is_empty());
    assert_eq!(
        RACK.iter()
            .filter(|n| s.node(n).policy.fence.is_some())
            .collect::<Vec<_>>(),
        [&id.as_str()]
    );
    // It reports again: the fence failed at off, and its place goes to the next.
    let others: Vec<&str> = RACK.iter().copied().filter(|n| **n != id).collect();
    s.at(410).poll(&beating(&others)).flows();
    assert!(s.node(&id).policy.fence.is_none());
    assert!(s.events.iter().any(|e| e.node_id == id
        && matches!(&e.kind, EventKind::RemediationFailed { step, cancelled: false, .. } if step == "off")));
    let next = s.act();
    assert_eq!(next.len(), 3, "one other node fenced: {next:?}");
    assert!(!next[0].starts_with(&format!("{id}:")), "{next:?}");
}

/// A node that reports again before its fence's power-off is done is no node to
/// switch off: the fence is withdrawn, said as cancelled; a power-off already under
/// way that lands all the same is followed by a power-on.
#[test]
fn a_fence_is_withdrawn_when_the_node_reports_before_its_power_off() {
    for (under_way, confirmed) in [(false, true), (true, true), (true, false)] {
        let (mut s, id) = rack_with_one_fenced();
        // Taken by the service (under way), or still queued.
        let off = if under_way {
            s.fleet.take_action(&id)
        } else {
            s.fleet.next_action(&id)
        }
        .expect("its power-off queued");
        assert_eq!(off.action.name(), "power_off");
        s.took();
        // Back: every node of the rack reports again.
        s.at(110).poll(&beating(&[])).flows();
        assert!(s.node(&id).policy.fence.is_none(), "under way: {under_way}");
        assert!(s.node(&id).policy.pending.is_empty());
        let cancelled: Vec<&str> = s
            .events
            .iter()
            .filter(|e| e.message.contains("fence withdrawn"))
            .map(|e| e.node_id.as_str())
            .collect();
        assert_eq!(cancelled, [id.as_str()]);
        if under_way {
            // Landed, or taken and never seen done (it may have landed): on again.
            let out = if confirmed {
                s.fleet
                    .action_done(&s.cfg, s.now, &id, &off, &Done::default())
            } else {
                s.fleet
                    .action_unconfirmed(&s.cfg, s.now, &id, off.id, "still reads on")
            };
            s.record(out);
            assert_eq!(
                s.act(),
                [format!("{id}:power_on")],
                "confirmed: {confirmed}"
            );
            assert!(s.node(&id).policy.fence_withdrawn.is_none());
        } else {
            assert!(s.act().is_empty(), "nothing switched off");
        }
    }
}

/// A fence withdrawn while its power-off was under way, and the process stopped
/// before the off landed: the next process, performing none of it, powers the
/// machine on (no change to one that is on).
#[test]
fn a_withdrawn_power_off_a_stopped_process_sent_is_followed_by_a_power_on() {
    let (mut s, id) = rack_with_one_fenced();
    s.fleet.take_action(&id).expect("its power-off taken");
    s.at(110).poll(&beating(&[])).flows();
    assert!(s.node(&id).policy.fence_withdrawn.is_some());
    // Killed; a new process has nothing under way.
    s.fleet.under_way.clear();
    s.at(115).restart();
    s.at(116).poll(&beating(&[])).flows();
    assert_eq!(s.act(), [format!("{id}:power_on")]);
    assert!(s.node(&id).policy.fence_withdrawn.is_none());
}

/// A machine an operator powered off is never fenced; powered on again, it is given
/// `fencing.after` to boot and report before its silence counts toward a fence.
#[test]
fn a_machine_an_operator_powers_on_gets_fencing_after_to_report() {
    let mut s = fleet(FENCED);
    s.at(0).poll(&beating(&[]));
    let power = |action: &str| crate::core::policy::PowerDone {
        action: action.into(),
        result: "done".into(),
        by: crate::core::policy::Actor::Operator,
        force: false,
        message: format!("power {action} by operator"),
    };
    // Held off from the moment the request leaves (a hale stopped before the
    // answer keeps the operator's intent), then recorded done.
    let (out, before) = s.fleet.hold_powered_off("n0", true);
    assert!(!before && out.dirty.contains("n0"));
    s.record(out);
    let out = s.fleet.record_power(s.now, "n0", power("off"));
    s.record(out);
    s.at(5).poll(&beating(&["n0"]));
    s.at(30).poll(&beating(&["n0"]));
    s.at(200).poll(&beating(&["n0"])).flows();
    assert!(
        s.node("n0").policy.fence.is_none(),
        "powered off on purpose"
    );
    let out = s.fleet.record_power(s.now, "n0", power("on"));
    s.record(out);
    s.at(201).poll(&beating(&["n0"])).flows();
    s.at(250).poll(&beating(&["n0"])).flows();
    assert!(s.node("n0").policy.fence.is_none(), "booting");
    s.at(261).poll(&beating(&["n0"])).flows();
    assert!(
        s.node("n0").policy.fence.is_some(),
        "silent a minute after its power-on"
    );
}

#[test]
fn no_fencing_while_stale_in_observe_or_past_three_a_day() {
    let mut s = fleet(FENCED);
    s.at(0).poll(&beating(&[]));
    s.at(5)
        .poll(&beating(&["n0"]))
        .at(30)
        .poll(&beating(&["n0"]));
    // Stale: the watchdog is gone, and with it hale's sight.
    s.at(100)
        .poll(&beating(&["n0"])[1..])
        .at(300)
        .tick()
        .flows();
    assert!(s.node("n0").policy.fence.is_none(), "never while stale");

    let mut s = fleet(&FENCED.replace("mode: cordon", "mode: observe"));
    s.at(0).poll(&beating(&[]));
    s.at(5)
        .poll(&beating(&["n0"]))
        .at(30)
        .poll(&beating(&["n0"]));
    s.at(100).poll(&beating(&["n0"])).flows().flows();
    assert!(s.node("n0").policy.fence.is_none());
    assert_eq!(
        s.took_of(&["POLICY_RECOMMENDED"]),
        ["n0 POLICY_RECOMMENDED"]
    );

    let mut s = fleet(FENCED);
    s.at(0).poll(&beating(&[]));
    s.fleet.nodes.get_mut("n0").unwrap().policy.fences = vec![t0(), t0(), t0()];
    s.at(5)
        .poll(&beating(&["n0"]))
        .at(30)
        .poll(&beating(&["n0"]));
    s.at(100).poll(&beating(&["n0"])).flows();
    assert!(s.node("n0").policy.fence.is_none());
    assert_eq!(s.took_of(&["POLICY_HALTED"]), ["n0 POLICY_HALTED"]);
}

#[test]
fn a_node_under_a_reboot_flow_is_never_fenced() {
    let mut s = fleet(&format!("{FENCED}remediation: {{ returnTimeout: 1h }}\n"));
    s.at(0).poll(&beating(&[])).flows();
    let out = s.fleet.request_reboot(s.now, "n0", "test", false).unwrap();
    s.record(out);
    s.flows();
    s.act();
    assert_eq!(s.step("n0"), Some(FlowStep::Return));
    s.at(5)
        .poll(&beating(&["n0"]))
        .at(30)
        .poll(&beating(&["n0"]));
    s.at(200).poll(&beating(&["n0"])).flows();
    assert!(s.node("n0").policy.fence.is_none());
    assert!(s.node("n0").policy.flow.as_ref().unwrap().away);
}

#[test]
fn an_operator_uncordon_cancels_the_flow_and_suppression_keeps_the_alert_out() {
    let mut s = fleet(
        "nodeHealth: { mode: cordon, maxUnavailablePercent: 100 }\ninventory: [ { id: n1 } ]\n",
    );
    let alerts = [watchdog(), beat("n1"), uptime("n1", "P3")];
    s.at(0).poll(&alerts).flows();
    assert_eq!(s.step("n1"), Some(FlowStep::Cordon));
    s.took();
    let out = s.fleet.uncordon(s.now, "n1", "not today").unwrap();
    assert!(
        out.events.iter().any(|e| matches!(
            &e.kind,
            EventKind::RemediationFailed { step, cancelled: true, .. } if step == "cordon"
        )),
        "the operator's cancel, not a failure: {:?}",
        out.events
    );
    s.record(out);
    assert_eq!(s.step("n1"), None);
    assert_eq!(
        s.took_of(&["NODE_UNCORDONED", "REMEDIATION_FAILED"]),
        ["n1 NODE_UNCORDONED", "n1 REMEDIATION_FAILED"]
    );
    assert!(
        s.node("n1")
            .policy
            .pending
            .iter()
            .all(|p| !matches!(p.action, Action::Drain { .. } | Action::Power { .. }))
    );
    // The alert still fires: queued again, held by the operator's suppression.
    s.at(60).poll(&alerts).flows();
    assert_eq!(s.step("n1"), Some(FlowStep::Queued));
    let list = s.fleet.remediations(&s.cfg, s.now, &Facts::default());
    assert!(
        list.queued[0]
            .waiting
            .as_deref()
            .unwrap()
            .contains("cordonSuppressionMinutes"),
        "{list:?}"
    );
    s.at(31 * 60).poll(&alerts).flows();
    assert_eq!(s.step("n1"), Some(FlowStep::Cordon));
}

#[test]
fn a_pool_switched_to_observe_withdraws_what_its_alerts_queued() {
    let yaml = "nodeHealth: { mode: cordon, maxUnavailablePercent: 100 }\ninventory: [ { id: n1 } ]\nremediation: { window: { start: '13:00', end: '14:00' } }\n";
    let mut s = fleet(yaml);
    let alerts = [watchdog(), beat("n1"), uptime("n1", "P3")];
    s.at(0).poll(&alerts).flows();
    assert_eq!(
        s.step("n1"),
        Some(FlowStep::Queued),
        "waiting for the window"
    );
    s.cfg = config(&yaml.replace("mode: cordon", "mode: observe"));
    s.at(3600).poll(&alerts).flows();
    assert_eq!(
        s.step("n1"),
        None,
        "observe: withdrawn at the window, not run"
    );
    assert_eq!(
        s.took_of(&["POLICY_RECOMMENDED", "REMEDIATION_STARTED"]),
        ["n1 POLICY_RECOMMENDED"]
    );
}

/// Observe is the stop for an operator's queued reboot too: asked for before the
/// switch, it waits, saying why, and runs once the pool acts again.
#[test]
fn an_operators_queued_reboot_waits_while_its_pool_observes() {
    let yaml = "nodeHealth: { mode: cordon, maxUnavailablePercent: 100 }\ninventory: [ { id: n1 } ]\nremediation: { window: { start: '13:00', end: '14:00' } }\n";
    let mut s = fleet(yaml);
    s.at(0).poll(&[watchdog(), beat("n1")]);
    let out = s
        .fleet
        .request_reboot(s.now, "n1", "kernel update", false)
        .unwrap();
    s.record(out);
    assert_eq!(
        s.took_of(&["REMEDIATION_STEP"]),
        ["n1 REMEDIATION_STEP"],
        "recorded when asked for"
    );
    s.flows();
    assert_eq!(
        s.step("n1"),
        Some(FlowStep::Queued),
        "waiting for the window"
    );
    s.cfg = config(&yaml.replace("mode: cordon", "mode: observe"));
    s.at(3600).poll(&[watchdog(), beat("n1")]).flows();
    assert_eq!(s.step("n1"), Some(FlowStep::Queued), "held in observe");
    assert!(s.took_of(&["REMEDIATION_STARTED"]).is_empty());
    let held = s.fleet.remediations(&s.cfg, s.now, &Facts::default());
    let shown = format!("{held:?}");
    assert!(shown.contains("pool cluster is in observe"), "{shown}");
    s.cfg = config(yaml);
    s.at(3630).poll(&[watchdog(), beat("n1")]).flows();
    assert_eq!(
        s.took_of(&["REMEDIATION_STARTED"]),
        ["n1 REMEDIATION_STARTED"]
    );
    // Under way, it is not asked for twice.
    let e = s
        .fleet
        .request_reboot(s.now, "n1", "again", false)
        .unwrap_err();
    assert!(matches!(e, CoreError::Busy { .. }), "{e}");
}

#[test]
fn nodes_without_a_reachable_bmc_wait_and_say_why() {
    let mut s = fleet(
        "nodeHealth: { mode: cordon, maxUnavailablePercent: 100 }\ninventory: [ { id: n1 }, { id: n2 } ]\nremediation: { domainsAtOnce: 2 }\n",
    );
    let facts = Facts {
        bmc_checked: Some(["n1".to_string()].into()),
        no_bmc: [("n1".to_string(), "no BMC: give it one".to_string())].into(),
        ..Facts::default()
    };
    s.at(0)
        .poll(&[
            watchdog(),
            beat("n1"),
            beat("n2"),
            uptime("n1", "P1"),
            uptime("n2", "P1"),
        ])
        .remediate(&facts);
    assert_eq!(s.step("n1"), Some(FlowStep::Queued));
    assert_eq!(s.step("n2"), Some(FlowStep::Queued), "not looked for yet");
    let list = s.fleet.remediations(&s.cfg, s.now, &facts);
    let waiting: Vec<String> = list
        .queued
        .iter()
        .filter_map(|e| e.waiting.clone())
        .collect();
    assert!(
        waiting.contains(&"no BMC: give it one".to_string()),
        "said once: {waiting:?}"
    );
    assert!(
        waiting.contains(&"its BMC has not been looked up yet".to_string()),
        "not said to have none: {waiting:?}"
    );
    // An orchestrator that reboots on its own needs no BMC, and the flow says
    // whose reboot it sends.
    let own = Facts {
        can_reboot: true,
        ..facts
    };
    s.remediate(&own);
    assert_eq!(s.step("n1"), Some(FlowStep::Cordon));
    while s.step("n1") != Some(FlowStep::Reboot) && !s.act_once().is_empty() {
        s.remediate(&own);
    }
    assert_eq!(s.step("n1"), Some(FlowStep::Reboot));
    let said: Vec<&str> = s
        .events
        .iter()
        .filter(|e| e.node_id == "n1" && e.kind.name() == "REMEDIATION_STEP")
        .map(|e| e.message.as_str())
        .collect();
    assert!(
        said.iter()
            .any(|m| m.contains("rebooting through the orchestrator")),
        "{said:?}"
    );
    assert!(
        !said.iter().any(|m| m.contains("through the BMC")),
        "{said:?}"
    );
}

#[test]
fn a_cordon_left_by_an_unknown_flow_is_left_for_an_operator() {
    let mut s = fleet(
        "nodeHealth: { mode: cordon, maxUnavailablePercent: 100 }\ninventory: [ { id: n1 } ]\n",
    );
    s.at(0).poll(&[watchdog(), beat("n1")]);
    // What another replica's flow left: a cordon of hale's, for a reboot.
    let node = s.fleet.nodes.get_mut("n1").unwrap();
    node.status = Status::Cordoned;
    node.policy.cordon = Some(crate::core::policy::Cordon {
        by: crate::core::policy::Actor::Hale,
        reason: "hale reboot: WorkerUptimeTooHigh".into(),
        at: t0(),
        drained: true,
        drain_refused: false,
        drain_reason: None,
    });
    s.at(5)
        .poll(&[watchdog(), beat("n1"), uptime("n1", "P3")])
        .flows()
        .flows();
    assert_eq!(s.step("n1"), None);
    let halted: Vec<&Event> = s
        .events
        .iter()
        .filter(|e| e.kind.name() == "POLICY_HALTED")
        .collect();
    assert_eq!(halted.len(), 1, "said once");
    assert!(
        matches!(&halted[0].kind, EventKind::PolicyHalted { guardrail, .. } if guardrail == "remediation.unknownFlow")
    );
    // An operator's reboot of it goes ahead, but the unknown flow's cordon is not
    // its to lift: what that flow did is still for an operator to judge.
    let out = s
        .fleet
        .request_reboot(s.now, "n1", "kernel update", false)
        .unwrap();
    s.record(out);
    s.at(10).poll(&[watchdog(), beat("n1")]).flows();
    assert!(
        s.events
            .iter()
            .any(|e| e.kind.name() == "REMEDIATION_STEP"
                && e.message.contains("already out of service")),
        "{:?}",
        s.events.iter().map(|e| &e.message).collect::<Vec<_>>()
    );
}

/// A reboot the policy queued gives way, when its turn comes, to whoever took the
/// node out meanwhile: another hale's flow on the same cluster that cordoned it
/// first (`remediation.unknownFlow`: it would have rebooted the node twice), or an
/// operator's drain (`remediation.operatorCordon`: their job cancelled, their
/// machine power-cycled). Said once each; nothing is sent. An operator's own
/// request still goes ahead.
#[test]
fn a_queued_policy_reboot_gives_way_to_whoever_took_the_node_out_first() {
    use crate::core::policy::{Actor, Cordon};
    for (by, reason, guardrail) in [
        (
            Actor::Hale,
            "hale reboot: WorkerUptimeTooHigh [root@2026-12-07T21:37:37]",
            "remediation.unknownFlow",
        ),
        (
            Actor::Operator,
            "disk swap - bob",
            "remediation.operatorCordon",
        ),
    ] {
        // t0 is 12:00 UTC: queued outside the window, its turn at 12:01.
        let mut s = fleet(
            "nodeHealth: { mode: cordon, maxUnavailablePercent: 100 }\ninventory: [ { id: n1 } ]\nremediation: { window: { start: '12:01', end: '14:00', timeZone: UTC } }\n",
        );
        s.at(0).poll(&[watchdog(), beat("n1")]);
        s.at(5)
            .poll(&[watchdog(), beat("n1"), uptime("n1", "P9")])
            .flows();
        assert_eq!(s.step("n1"), Some(FlowStep::Queued), "{guardrail}");
        // Taken out by someone else before the flow's turn.
        let node = s.fleet.nodes.get_mut("n1").unwrap();
        node.status = Status::Cordoned;
        node.policy.cordon = Some(Cordon {
            by,
            reason: reason.into(),
            at: s.now,
            drained: true,
            drain_refused: false,
            drain_reason: None,
        });
        for t in [30, 60, 65, 90] {
            s.at(t)
                .poll(&[watchdog(), beat("n1"), uptime("n1", "P9")])
                .flows();
        }
        assert_eq!(s.step("n1"), None, "{guardrail}");
        assert!(s.act().is_empty(), "{guardrail}: nothing sent");
        let halted: Vec<&Event> = s
            .events
            .iter()
            .filter(|e| e.kind.name() == "POLICY_HALTED")
            .collect();
        assert_eq!(halted.len(), 1, "{guardrail}: said once");
        assert!(
            matches!(&halted[0].kind, EventKind::PolicyHalted { guardrail: g, .. } if g == guardrail),
            "{:?}",
            halted[0]
        );
        assert!(
            !s.events
                .iter()
                .any(|e| e.kind.name() == "REMEDIATION_STARTED"),
            "{guardrail}"
        );
        // The operator's own reboot of the node goes ahead.
        let out = s
            .fleet
            .request_reboot(s.now, "n1", "kernel update", false)
            .unwrap();
        s.record(out);
        s.at(100).poll(&[watchdog(), beat("n1")]).flows();
        assert!(
            s.step("n1").is_some_and(|st| st != FlowStep::Queued),
            "{guardrail}"
        );
    }
}

#[test]
fn a_cordoned_node_that_stops_being_ready_is_fenced_and_restored_when_ready() {
    let mut s = script(
        "nodeHealth: { mode: cordon }\nfencing: { after: 1m, maxPercent: 50 }\norchestrator: { kind: kubernetes }\n",
    );
    // Cordoned by hale (an operator's cordon is theirs: never fenced).
    let seen = |id: &str, status: Status, not_ready: bool| {
        let mut o = super::shown(id, status);
        o.not_ready = not_ready;
        if status == Status::Cordoned {
            o.cordoned_by = Some((
                crate::core::policy::Actor::Hale,
                "score below cordonBelow 60".into(),
            ));
        }
        o
    };
    let out = s.fleet.observe(
        &s.cfg,
        s.now,
        &[
            seen("k1", Status::Cordoned, false),
            seen("k2", Status::Ready, false),
        ],
    );
    s.record(out);
    s.at(0).poll(&[watchdog(), beat("k1"), beat("k2")]);
    // k1 hangs while cordoned: its status still reads Cordoned, its readiness is gone.
    s.at(5)
        .poll(&[watchdog(), beat("k2")])
        .at(30)
        .poll(&[watchdog(), beat("k2")]);
    let out = s.fleet.observe(
        &s.cfg,
        s.now,
        &[
            seen("k1", Status::Cordoned, true),
            seen("k2", Status::Ready, false),
        ],
    );
    s.record(out);
    s.at(100).poll(&[watchdog(), beat("k2")]).flows();
    assert_eq!(s.act(), ["k1:power_off", "k1:release", "k1:power_on"]);
    // Ready again, its heartbeat not yet back (its exporter may be held off by the
    // taint): the release is taken back all the same.
    let out = s.fleet.observe(
        &s.cfg,
        s.now,
        &[
            seen("k1", Status::Cordoned, false),
            seen("k2", Status::Ready, false),
        ],
    );
    s.record(out);
    s.at(110).poll(&[watchdog(), beat("k2")]).flows();
    assert_eq!(s.act(), ["k1:unrelease"]);
    assert!(s.node("k1").policy.fence.is_none());
}

/// A fence whose work was never released (an orchestrator that cannot) ends when
/// the node reports again, not when the orchestrator shows it ready: nothing holds
/// its exporter off.
#[test]
fn an_unreleased_fence_ends_when_the_node_reports_not_when_ready() {
    let mut s = script(
        "nodeHealth: { mode: cordon }\nfencing: { after: 1m, maxPercent: 50 }\norchestrator: { kind: kubernetes }\n",
    );
    let seen = |not_ready: bool| {
        let mut o = super::shown("k1", Status::Ready);
        o.not_ready = not_ready;
        vec![o, super::shown("k2", Status::Ready)]
    };
    s.k1_falls_silent(seen);
    let done = s.fence_through(
        "k1",
        "release",
        "this orchestrator cannot release a fenced node's work",
    );
    assert_eq!(done, ["power_off", "release", "power_on"]);
    let out = s.fleet.observe(&s.cfg, s.now, &seen(false));
    s.record(out);
    s.at(110).poll(&[watchdog(), beat("k2")]).flows();
    assert!(
        s.node("k1").policy.fence.is_some(),
        "ready, not reporting yet"
    );
    s.at(120)
        .poll(&[watchdog(), beat("k1"), beat("k2")])
        .flows();
    assert!(s.node("k1").policy.fence.is_none(), "reporting: over");
}

/// A node whose work the orchestrator shows released (the `out-of-service` taint a
/// replica that led before this one left, on a store of its own, or an operator's)
/// is fenced already as far as the cluster goes: never fenced again, and counted
/// toward `maxPercent`, so no other node of its pool is fenced in its place.
#[test]
fn a_node_released_by_another_counts_as_fenced_and_is_not_fenced_again() {
    let mut s = script(
        "nodeHealth: { mode: cordon }\nfencing: { after: 1m, maxPercent: 50 }\norchestrator: { kind: kubernetes }\n",
    );
    let seen = |id: &str, released: bool| {
        let mut o = super::shown(id, Status::NotReady);
        o.not_ready = true;
        o.released = released;
        o
    };
    let out = s.fleet.observe(
        &s.cfg,
        s.now,
        &[
            super::shown("k1", Status::Ready),
            super::shown("k2", Status::Ready),
        ],
    );
    s.record(out);
    s.at(0).poll(&[watchdog(), beat("k1"), beat("k2")]);
    // Both go silent and not ready; k1's work was released by the leader before.
    s.at(5).poll(&[watchdog()]).at(30).poll(&[watchdog()]);
    let out = s
        .fleet
        .observe(&s.cfg, s.now, &[seen("k1", true), seen("k2", false)]);
    s.record(out);
    s.at(100).poll(&[watchdog()]).flows();
    assert!(s.act().is_empty(), "50% of 2 is one, and k1 is it");
    assert!(s.node("k1").policy.fence.is_none() && s.node("k2").policy.fence.is_none());
    assert_eq!(
        s.took_of(&["POLICY_HALTED"]),
        ["k2 POLICY_HALTED"],
        "k2 held back by maxPercent"
    );
    // The taint taken back by an operator, both still silent: one fenced (k1,
    // silent as long as k2 and first by name).
    let out = s
        .fleet
        .observe(&s.cfg, s.now, &[seen("k1", false), seen("k2", false)]);
    s.record(out);
    s.at(101).flows();
    assert_eq!(s.act(), ["k1:power_off", "k1:release", "k1:power_on"]);
}

#[test]
fn an_inventory_that_lists_no_node_retires_none() {
    let mut s = script("orchestrator: { kind: kubernetes }\n");
    let out = s.fleet.observe(
        &s.cfg,
        s.now,
        &[
            super::shown("k1", Status::Ready),
            super::shown("k2", Status::Ready),
        ],
    );
    s.record(out);
    let out = s.fleet.observe(&s.cfg, s.now, &[]);
    assert!(out.removed.is_empty() && out.events.is_empty());
    assert_eq!(s.fleet.nodes.len(), 2);
    // One node gone from a list that still names the other: retired.
    let out = s
        .fleet
        .observe(&s.cfg, s.now, &[super::shown("k1", Status::Ready)]);
    assert_eq!(out.removed, ["k2"]);
}

#[test]
fn the_reboot_waits_for_what_the_drain_evicted_to_stop() {
    let mut s = fleet(
        "nodeHealth: { mode: cordon, maxUnavailablePercent: 100 }\ninventory: [ { id: n1 }, { id: n2 } ]\nremediation: { drainTimeout: 10m }\n",
    );
    let up = |n: &str| uptime(n, "P3");
    // Each drain answered as an orchestrator whose evicted work was still
    // stopping when it stopped waiting: the flow asks again, and reboots only
    // once nothing is left stopping.
    let drain = |s: &mut Script, id: &str, stopping: u32| {
        loop {
            let p = s.fleet.next_action(id).expect("an action pending");
            let done = match p.action {
                Action::Drain { active: true, .. } => Done {
                    stopping,
                    ..Done::default()
                },
                _ => Done::default(),
            };
            let out = s.fleet.action_done(&s.cfg, s.now, id, &p, &done);
            s.record(out);
            if matches!(p.action, Action::Drain { active: true, .. }) {
                break;
            }
        }
        s.flows();
    };
    s.at(0)
        .poll(&[watchdog(), beat("n1"), beat("n2"), up("n1")])
        .flows();
    drain(&mut s, "n1", 2);
    assert_eq!(s.step("n1"), Some(FlowStep::Drain));
    let drained: Vec<&Event> = s
        .events
        .iter()
        .filter(|e| e.kind.name() == "NODE_DRAINED")
        .collect();
    assert!(
        matches!(drained[..], [e] if matches!(e.kind, EventKind::NodeDrained { stopping: 2, .. })
            && e.message.contains("2 still stopping")),
        "{drained:?}"
    );
    s.at(60).flows();
    assert_eq!(
        s.step("n1"),
        Some(FlowStep::Drain),
        "no reboot while work stops"
    );
    drain(&mut s, "n1", 0);
    assert_eq!(s.step("n1"), Some(FlowStep::Reboot));

    // Still stopping past drainTimeout: the flow fails at its drain, never reboots.
    let mut s = fleet(
        "nodeHealth: { mode: cordon, maxUnavailablePercent: 100 }\ninventory: [ { id: n1 }, { id: n2 } ]\nremediation: { drainTimeout: 10m }\n",
    );
    s.at(0)
        .poll(&[watchdog(), beat("n1"), beat("n2"), up("n2")])
        .flows();
    drain(&mut s, "n2", 1);
    s.at(601);
    drain(&mut s, "n2", 1);
    assert_eq!(s.step("n2"), None);
    let failed = s
        .events
        .iter()
        .find(|e| e.kind.name() == "REMEDIATION_FAILED")
        .expect("the flow failed");
    assert!(
        matches!(&failed.kind, EventKind::RemediationFailed { step, .. } if step == "drain")
            && failed
                .message
                .contains("1 evicted allocation(s) still stopping"),
        "{failed:?}"
    );
}
