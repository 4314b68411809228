//! What one step of the core produces — events, the nodes to persist, removals,
//! counts — and the errors an operator's request can meet. Shared by every part of
//! the core, so none of them imports another for it.

use std::collections::{BTreeMap, BTreeSet};

use super::Event;

/// What one step changed: events to record, nodes to persist, nodes removed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    pub events: Vec<Event>,
    /// Nodes whose evidence changed: persisted with the events, in one transaction.
    pub dirty: BTreeSet<String>,
    /// Nodes that only reported (report and heartbeat times, observation counts).
    pub touched: BTreeSet<String>,
    /// Nodes whose evidence changed in a way not worth a write of its own (a
    /// source's message or silence): rescored at the step's end, which empties
    /// it, and written if that changed the score.
    pub rescore: BTreeSet<String>,
    pub removed: Vec<String>,
    /// Alerts that named no node (and were not the watchdog).
    pub unmatched: u64,
    /// Whether this input was trusted (polls and webhooks).
    pub trusted: bool,
    /// Why absences began to be held in this step, when they did.
    pub held: Option<String>,
    /// New nodes refused by `nodeIdentity.maxNodes`, by id.
    pub refused: BTreeSet<String>,
    /// Nodes whose alerts raise more condition types than a node holds, and how
    /// many were not taken.
    pub crowded: BTreeMap<String, usize>,
    /// Whether the replacement budget changed (the ledger is written only then).
    pub ledger: bool,
    /// Workload owners whose restart count changed (written one row each).
    pub moved: BTreeSet<String>,
    /// How far the clock went back since the last step, when it did: what was
    /// recorded ahead of it was taken as now ([`super::Fleet`]'s `clock_seen`).
    pub clock_back: Option<chrono::TimeDelta>,
}

impl Outcome {
    /// Fold a later outcome into this one (a failed persist retried with the next
    /// step; the slices of a poll). Whether the input was trusted, and a hold it
    /// began, are the earlier one's word.
    pub fn absorb(&mut self, later: Outcome) {
        self.ledger |= later.ledger;
        self.unmatched += later.unmatched;
        self.refused.extend(later.refused);
        for (id, count) in later.crowded {
            *self.crowded.entry(id).or_default() += count;
        }
        if self.held.is_none() {
            self.held = later.held;
        }
        self.clock_back = self.clock_back.or(later.clock_back);
        self.moved.extend(later.moved);
        self.events.extend(later.events);
        self.dirty.extend(later.dirty);
        self.touched.extend(later.touched);
        self.rescore.extend(later.rescore);
        for id in later.removed {
            self.dirty.remove(&id);
            self.touched.remove(&id);
            self.rescore.remove(&id);
            self.removed.push(id);
        }
    }

    /// What the store writes for this outcome — the nodes to write or remove, the
    /// ledger's changes — with its events moved out, not copied: this outcome
    /// keeps the rest (which nodes changed, whether it was trusted, …).
    pub fn take_writes(&mut self) -> Outcome {
        Outcome {
            events: std::mem::take(&mut self.events),
            dirty: self.dirty.clone(),
            touched: self.touched.clone(),
            rescore: self.rescore.clone(),
            removed: self.removed.clone(),
            ledger: self.ledger,
            moved: self.moved.clone(),
            ..Outcome::default()
        }
    }
}

/// `node X is not known`; an empty id (`/api/v1/nodes//events`) said as such.
fn unknown_node(id: &str) -> String {
    if id.is_empty() {
        "no node is named: the id is empty".into()
    } else {
        format!("node {id} is not known")
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CoreError {
    #[error("{}", unknown_node(.0))]
    UnknownNode(String),
    #[error("node {node} has no condition {condition}")]
    UnknownCondition { node: String, condition: String },
    #[error(
        "node {node} is {status} and cannot be drained: only a READY or already cordoned node can be taken out of service"
    )]
    NotDrainable { node: String, status: &'static str },
    #[error(
        "{condition} on node {node} is hale's own view of what it cannot see; it clears when the node is visible again"
    )]
    NotClearable { node: String, condition: String },
    #[error("node {node}: {doing}")]
    Busy { node: String, doing: String },
    /// A failure reported as older than `nodeIdentity.forgetAfter`: a
    /// `job_failure` alert that started then is not counted either.
    #[error(
        "occurredAt {at} is more than nodeIdentity.forgetAfter ({after}) ago: not counted, as a job_failure alert that started then would not be"
    )]
    Forgotten { at: String, after: String },
    /// A node the inventory or the orchestrator lists: they would bring it back.
    #[error("node {node} is listed {by}, which would bring it back: {leave}")]
    Listed {
        node: String,
        by: &'static str,
        leave: &'static str,
    },
}
