//! `hale policy backtest`: the recorded history replayed through the same core with a
//! candidate configuration. Conditions, missed heartbeats, staleness and job failures
//! are put back on the nodes as the events recorded them, and the operators' cordons,
//! drains and uncordons are done again. Every change is a report, followed by the
//! next report and by one after the recovery hold (healthy nodes report without
//! recording events), and the orchestrator is taken to do whatever it is asked.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::policy::{Done, RECOVERY_HOLD};
use super::settings::CoreSettings;
use super::{
    Condition, Event, EventKind, Fleet, HEARTBEAT_MISSED, Listed, Name, Node, Score, Severity,
    SmallMap, Time,
};

/// What one configuration did, or would have done, to one node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tally {
    pub recommendations: u32,
    pub cordons: u32,
    pub drains: u32,
    pub replacements: u32,
    pub halts: u32,
    /// The halts by the guardrail that made each (its config key, or why).
    pub halted_by: BTreeMap<String, u32>,
}

impl Tally {
    /// Count `event` if it is one of the score policy's.
    pub fn count(&mut self, event: &Event) {
        if super::policy::out_of_band(event) {
            return;
        }
        match &event.kind {
            EventKind::PolicyRecommended { .. } => self.recommendations += 1,
            EventKind::NodeCordoned { by, .. } if by == "hale" => self.cordons += 1,
            EventKind::NodeDrained { by, .. } if by == "hale" => self.drains += 1,
            EventKind::NodeReplaced {} => self.replacements += 1,
            EventKind::PolicyHalted { guardrail, .. } => {
                self.halts += 1;
                *self.halted_by.entry(guardrail.clone()).or_default() += 1;
            }
            _ => {}
        }
    }

    fn add(&mut self, other: &Tally) {
        self.recommendations += other.recommendations;
        self.cordons += other.cordons;
        self.drains += other.drains;
        self.replacements += other.replacements;
        self.halts += other.halts;
        for (guardrail, n) in &other.halted_by {
            *self.halted_by.entry(guardrail.clone()).or_default() += n;
        }
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
/// `known` (labels kept, evidence cleared) under `cfg`, with the candidate's
/// `inventory` on top, counting from `since`: what came before only rebuilds the
/// state the window starts in. Nothing is replayed after `now`: a report the
/// replay would take later has not happened yet.
pub fn backtest(
    cfg: &CoreSettings,
    known: &BTreeMap<String, Box<Node>>,
    inventory: &[Listed],
    history: &[Event],
    since: Option<Time>,
    now: Time,
) -> Backtest {
    let start = history
        .first()
        .map_or_else(chrono::Utc::now, |e| e.occurred_at);
    let mut fleet = Fleet::new(start);
    let mut report = Backtest {
        since,
        events_replayed: history
            .iter()
            .filter(|e| since.is_none_or(|s| e.occurred_at >= s))
            .count(),
        ..Backtest::default()
    };
    // The pools are today's nodes, evidence cleared, each from when its record
    // began. A healthy node reports without recording events, so one known before
    // the history begins has reported before; one whose record began within it
    // joins then (its first event, if sooner), unscored, as it did: the pool a
    // decision was made in is the pool it had, and the node's first score is one
    // the policy does not act on.
    let reported_before = |n: &mut Node| {
        n.policy.scored_reports = 1;
        n.score = Some(Score {
            value: 100,
            breakdown: Vec::new(),
            scored_by: Name::default(),
        });
    };
    let mut joining: BTreeMap<String, (Time, Box<Node>)> = BTreeMap::new();
    for (id, k) in known {
        let mut n = Node::new(id);
        n.labels = k.labels.clone();
        n.hostname = k.hostname.clone();
        n.policy.provisioned = k.policy.provisioned;
        match k.known_since.filter(|t| *t >= start) {
            Some(since) => {
                joining.insert(id.clone(), (since, Box::new(n)));
            }
            None => {
                reported_before(&mut n);
                fleet.nodes.insert(id.clone(), Box::new(n));
            }
        }
    }
    // The candidate's inventory as `hale serve` with it would read it: its labels
    // on top of those known (a node it moves to another pool is replayed there),
    // and the nodes it adds in their pools from the start.
    for l in inventory {
        let n = match joining.get_mut(&l.id) {
            Some((_, n)) => n,
            None => fleet.nodes.entry(l.id.clone()).or_insert_with(|| {
                let mut n = Node::new(&l.id);
                reported_before(&mut n);
                Box::new(n)
            }),
        };
        n.labels
            .extend(l.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        if l.hostname.is_some() {
            n.hostname = l.hostname.clone();
        }
    }
    // When each joins, soonest first.
    let mut joins: BTreeSet<(Time, String)> = joining
        .iter()
        .map(|(id, (since, _))| (*since, id.clone()))
        .collect();
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
        let interval = fleet
            .nodes
            .get(&e.node_id)
            .or_else(|| joining.get(&e.node_id).map(|(_, n)| n))
            .map_or(cfg.settings_for(&BTreeMap::new()), |n| {
                cfg.settings_for(&n.labels)
            })
            .report_interval;
        let confirm = e.occurred_at + chrono::TimeDelta::from_std(interval).expect("interval");
        // Reports at the change, the next one, and once a recovery could have held.
        let held = confirm + chrono::TimeDelta::from_std(RECOVERY_HOLD).expect("minutes");
        for at in [e.occurred_at, confirm, held] {
            steps.entry(at).or_default().insert(e.node_id.clone());
        }
    }
    for (at, touched) in steps.into_iter().take_while(|(at, _)| *at <= now) {
        let events = by_time.remove(&at).unwrap_or_default();
        let mut due: Vec<String> = events.iter().map(|e| e.node_id.clone()).collect();
        while joins.first().is_some_and(|(since, _)| *since <= at) {
            due.extend(joins.pop_first().map(|(_, id)| id));
        }
        for id in due {
            if let Some((since, n)) = joining.remove(&id) {
                joins.remove(&(since, id.clone()));
                fleet.nodes.insert(id, n);
                fleet.pools = None;
            }
        }
        for e in events {
            let node = fleet
                .nodes
                .entry(e.node_id.clone())
                .or_insert_with(|| Box::new(Node::new(&e.node_id)));
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
                // hale's withdrawal of a cordon it never performed is its own
                // doing (the replay performs every cordon at once), not an
                // operator's uncordon.
                EventKind::NodeUncordoned { by, reason }
                    if !(by == "hale" && reason.starts_with(super::policy::WITHDRAWN)) =>
                {
                    fleet.uncordon(at, &e.node_id, reason)
                }
                _ => Ok(super::Outcome::default()),
            };
        }
        let mut simulated = fleet.replayed(cfg, at, &touched).events;
        // The orchestrator does what it is asked, at once, leaving the node empty.
        let done = Done {
            remaining: Some(0),
            ..Done::default()
        };
        for (id, pending) in fleet.pending() {
            let out = fleet.action_done(cfg, at, &id, &pending, &done);
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
            fault_class,
            suppressed,
        } => {
            raise(
                node,
                condition,
                reason,
                *severity,
                fault_class.as_deref(),
                e.occurred_at,
            );
            suppress(node, condition, *suppressed);
        }
        EventKind::ConditionUpdated {
            condition,
            reason,
            severity,
            suppressed,
            ..
        } => {
            // What it is charged for now, as recorded.
            if let Some(cond) = node.conditions.get_mut(condition.as_str()) {
                cond.reason = reason.as_str().into();
                cond.severity = *severity;
            }
            suppress(node, condition, *suppressed);
        }
        EventKind::ConditionEscalated {
            condition,
            reason,
            severity,
            suppressed,
            ..
        } => {
            let class = node
                .conditions
                .get(condition.as_str())
                .map(|c| c.fault_class.clone());
            raise(
                node,
                condition,
                reason,
                *severity,
                class.as_deref(),
                e.occurred_at,
            );
            suppress(node, condition, *suppressed);
        }
        EventKind::ConditionCleared { condition, .. } => {
            node.conditions.remove(condition.as_str());
        }
        EventKind::HeartbeatMissed { .. } => raise(
            node,
            HEARTBEAT_MISSED,
            HEARTBEAT_MISSED,
            Severity::Warning,
            None,
            e.occurred_at,
        ),
        EventKind::HeartbeatResumed { .. } => {
            node.conditions.remove(HEARTBEAT_MISSED);
        }
        EventKind::JobFailureAttributed {
            reason, failed_at, ..
        } => {
            let f = &mut node.failures;
            f.total += 1;
            let at = failed_at.unwrap_or(e.occurred_at);
            f.last = Some(f.last.map_or(at, |l| l.max(at)));
            let count = f.by_reason.get(reason).copied().unwrap_or(0);
            f.by_reason.insert(reason.clone(), count + 1);
        }
        _ => {}
    }
}

/// A replayed condition as recorded: fed only by silenced or inhibited alerts or
/// not (a replayed condition has no alerts of its own, so its flag says it).
fn suppress(node: &mut Node, ctype: &str, suppressed: bool) {
    if let Some(cond) = node.conditions.get_mut(ctype) {
        cond.silenced = suppressed;
    }
}

/// `fault_class`: as recorded; older records name none, and the condition type
/// upper-cased is the label contract's default.
fn raise(
    node: &mut Node,
    ctype: &str,
    reason: &str,
    severity: Severity,
    fault_class: Option<&str>,
    at: Time,
) {
    node.conditions.insert(
        ctype.into(),
        Condition {
            reason: reason.into(),
            severity,
            message: String::new(),
            charged_message: String::new(),
            first_seen: at,
            last_seen: at,
            observations: 1,
            sticky: false,
            fault_class: fault_class.map_or_else(|| ctype.to_ascii_uppercase().into(), Name::from),
            priority: None,
            remediation: None,
            sources: SmallMap::new(),
            silenced: false,
            silenced_only: false,
            unkept: 0,
        },
    );
}
