//! `hale policy backtest`: the recorded history replayed through the same core with a
//! candidate configuration. Conditions, missed heartbeats, staleness and job failures
//! are put back on the nodes as the events recorded them, and the operators' cordons,
//! drains and uncordons are done again; every change is a report,
//! confirmed by a second one a report interval later (a policy never acts on a first
//! score), and the orchestrator is taken to do whatever it is asked.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::policy::Done;
use super::{
    Condition, Event, EventKind, Fleet, HEARTBEAT_MISSED, Node, Score, Severity, SmallMap, Time,
};
use crate::config::Loaded;

/// What one configuration did, or would have done, to one node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tally {
    pub recommendations: u32,
    pub cordons: u32,
    pub drains: u32,
    pub replacements: u32,
    pub halts: u32,
}

impl Tally {
    /// Count `event` if it is one of the policy's.
    pub fn count(&mut self, event: &Event) {
        match &event.kind {
            EventKind::PolicyRecommended { .. } => self.recommendations += 1,
            EventKind::NodeCordoned { by, .. } if by == "hale" => self.cordons += 1,
            EventKind::NodeDrained { by, .. } if by == "hale" => self.drains += 1,
            EventKind::NodeReplaced {} => self.replacements += 1,
            EventKind::PolicyHalted { .. } => self.halts += 1,
            _ => {}
        }
    }

    fn add(&mut self, other: &Tally) {
        self.recommendations += other.recommendations;
        self.cordons += other.cordons;
        self.drains += other.drains;
        self.replacements += other.replacements;
        self.halts += other.halts;
    }

    pub fn is_empty(&self) -> bool {
        *self == Tally::default()
    }
}

/// The candidate beside what the running configuration recorded, per node and in all.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Backtest {
    pub since: Option<Time>,
    pub events_replayed: usize,
    pub candidate: Tally,
    pub recorded: Tally,
    pub nodes: BTreeMap<String, Side>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Side {
    pub candidate: Tally,
    pub recorded: Tally,
}

/// Replay `history` (every node's events, oldest first) on nodes that start as
/// `known` (labels kept, evidence cleared) under `cfg`, counting from `since`: what
/// came before only rebuilds the state the window starts in.
pub fn backtest(
    cfg: &Loaded,
    known: &BTreeMap<String, Node>,
    history: &[Event],
    since: Option<Time>,
) -> Backtest {
    let mut fleet = Fleet::new(
        history
            .first()
            .map_or_else(chrono::Utc::now, |e| e.occurred_at),
    );
    let mut report = Backtest {
        since,
        events_replayed: history
            .iter()
            .filter(|e| since.is_none_or(|s| e.occurred_at >= s))
            .count(),
        ..Backtest::default()
    };
    // The pool sizes are today's: every node the store knows, evidence cleared. A
    // healthy node reports without recording events, so each has reported before.
    for (id, k) in known {
        let mut n = Node::new(id);
        n.labels = k.labels.clone();
        n.hostname = k.hostname.clone();
        n.policy.provisioned = k.policy.provisioned;
        n.policy.scored_reports = 1;
        n.score = Some(Score {
            value: 100,
            breakdown: Vec::new(),
            scored_by: String::new(),
        });
        fleet.nodes.insert(id.clone(), n);
    }
    // Every recorded change is a report; the next report confirms it.
    let mut steps: BTreeMap<Time, BTreeSet<String>> = BTreeMap::new();
    let mut by_time: BTreeMap<Time, Vec<&Event>> = BTreeMap::new();
    let counted = |t: Time| since.is_none_or(|s| t >= s);
    for e in history {
        by_time.entry(e.occurred_at).or_default().push(e);
        if counted(e.occurred_at) {
            report
                .nodes
                .entry(e.node_id.clone())
                .or_default()
                .recorded
                .count(e);
        }
        let interval = known
            .get(&e.node_id)
            .map_or(cfg.settings_for(&BTreeMap::new()), |n| {
                cfg.settings_for(&n.labels)
            })
            .report_interval;
        let confirm = e.occurred_at + chrono::TimeDelta::from_std(interval).expect("interval");
        steps
            .entry(e.occurred_at)
            .or_default()
            .insert(e.node_id.clone());
        steps.entry(confirm).or_default().insert(e.node_id.clone());
    }
    for (at, touched) in steps {
        for e in by_time.remove(&at).unwrap_or_default() {
            let node = fleet
                .nodes
                .entry(e.node_id.clone())
                .or_insert_with(|| Node::new(&e.node_id));
            put_back(node, e);
            // What operators did, they do again: their cordons fill the pool, their
            // uncordons start the suppression window.
            let _ = match &e.kind {
                EventKind::NodeCordoned { by, reason } if by == "operator" => {
                    fleet.cordon(at, &e.node_id, reason)
                }
                EventKind::NodeDrained {
                    by, active, reason, ..
                } if by == "operator" => fleet.drain(at, &e.node_id, *active, reason),
                EventKind::NodeUncordoned { reason, .. } => fleet.uncordon(at, &e.node_id, reason),
                _ => Ok(super::Outcome::default()),
            };
        }
        let mut simulated = fleet.replayed(cfg, at, &touched).events;
        // The orchestrator does what it is asked, at once.
        for (id, action) in fleet.pending() {
            let out = fleet.action_done(cfg, at, &id, &action, &Done::default());
            simulated.extend(out.events);
        }
        if !counted(at) {
            continue;
        }
        for e in &simulated {
            report
                .nodes
                .entry(e.node_id.clone())
                .or_default()
                .candidate
                .count(e);
        }
    }
    report
        .nodes
        .retain(|_, side| !(side.candidate.is_empty() && side.recorded.is_empty()));
    for side in report.nodes.values() {
        report.candidate.add(&side.candidate);
        report.recorded.add(&side.recorded);
    }
    report
}

/// Put a recorded event's evidence back on its node.
fn put_back(node: &mut Node, e: &Event) {
    match &e.kind {
        EventKind::ConditionRaised {
            condition,
            reason,
            severity,
        }
        | EventKind::ConditionEscalated {
            condition,
            reason,
            severity,
            ..
        } => raise(node, condition, reason, *severity, e.occurred_at),
        EventKind::ConditionCleared { condition, .. } => {
            node.conditions.remove(condition);
        }
        EventKind::HeartbeatMissed { .. } => raise(
            node,
            HEARTBEAT_MISSED,
            HEARTBEAT_MISSED,
            Severity::Warning,
            e.occurred_at,
        ),
        EventKind::HeartbeatResumed { .. } => {
            node.conditions.remove(HEARTBEAT_MISSED);
        }
        EventKind::JobFailureAttributed { reason, .. } => {
            let f = &mut node.failures;
            f.total += 1;
            f.last = Some(e.occurred_at);
            let count = f.by_reason.get(reason).copied().unwrap_or(0);
            f.by_reason.insert(reason.clone(), count + 1);
        }
        _ => {}
    }
}

fn raise(node: &mut Node, ctype: &str, reason: &str, severity: Severity, at: Time) {
    node.conditions.insert(
        ctype.to_string(),
        Condition {
            reason: reason.to_string(),
            severity,
            message: String::new(),
            first_seen: at,
            last_seen: at,
            observations: 1,
            sticky: false,
            fault_class: ctype.to_ascii_uppercase(),
            priority: None,
            remediation: None,
            sources: SmallMap::new(),
        },
    );
}
