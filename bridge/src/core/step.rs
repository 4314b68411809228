//! One step of the core: inputs applied to the fleet under one `now`, collecting an
//! [`Outcome`]; every entry point ends in the same `finish` — trust, heartbeats, the
//! sweep, scores, the policy — so the rules hold whichever path fed them.

use super::conditions::stale_condition;
use super::outcome::Outcome;
use super::policy::Policy;
use super::settings::CoreSettings;
use super::trust::Keep;
use super::{Event, EventKind, FAILURE_DEDUCTION, Fleet, Node, Severity, TELEMETRY_STALE, Time};

/// Which nodes `finish` rescores.
pub(super) enum Scope {
    /// Every reported node (a poll, which may clear anything).
    All,
    /// Nodes this step touched, plus those whose failure deduction may have decayed.
    Touched,
}

/// One application of inputs to the fleet, collecting its outcome.
pub(super) struct Step<'f> {
    pub(super) fleet: &'f mut Fleet,
    pub(super) cfg: &'f CoreSettings,
    pub(super) now: Time,
    pub(super) out: Outcome,
    /// What this input may not end yet.
    pub(super) keep: Keep<'f>,
}

impl<'f> Step<'f> {
    pub(super) fn new(fleet: &'f mut Fleet, cfg: &'f CoreSettings, now: Time) -> Self {
        Step {
            fleet,
            cfg,
            now,
            out: Outcome::default(),
            keep: Keep::none(),
        }
    }

    pub(super) fn event(&mut self, node_id: &str, kind: EventKind, message: String) {
        Recorder {
            out: &mut self.out,
            now: self.now,
            id: node_id,
        }
        .event(kind, message);
    }

    /// The node, created unscored if new (stale from birth while the source is stale).
    pub(super) fn node(&mut self, id: &str) -> &mut Node {
        if !self.fleet.nodes.contains_key(id) {
            let mut node = Node::new(id);
            node.known_since = Some(self.now);
            let stale = self.fleet.trust.stale;
            if stale {
                node.conditions
                    .insert(TELEMETRY_STALE.into(), stale_condition(self.now));
            }
            self.fleet.nodes.insert(id.to_string(), node);
            self.out.dirty.insert(id.to_string());
            if stale {
                self.event(
                    id,
                    EventKind::ConditionRaised {
                        condition: TELEMETRY_STALE.into(),
                        reason: TELEMETRY_STALE.into(),
                        severity: Severity::Warning,
                        fault_class: None,
                    },
                    "telemetry stale: a new node, seen while hale has no trusted alert data".into(),
                );
            }
        }
        self.fleet.nodes.get_mut(id).expect("inserted above")
    }

    pub(super) fn finish(mut self, scope: Scope) -> Outcome {
        self.settle_trust();
        self.check_heartbeats();
        self.sweep();
        let Step {
            fleet,
            cfg,
            now,
            mut out,
            ..
        } = self;
        for (id, node) in fleet.nodes.iter_mut() {
            let wanted = match scope {
                Scope::All => true,
                Scope::Touched => {
                    out.dirty.contains(id) || out.touched.contains(id) || decaying(node)
                }
            };
            if wanted {
                rescore(
                    node,
                    &mut Recorder {
                        out: &mut out,
                        now,
                        id,
                    },
                    cfg,
                );
            }
        }
        Policy {
            cfg,
            now,
            out: &mut out,
        }
        .evaluate(fleet);
        out
    }
}

/// Whether the failure deduction is part of the node's score and may have decayed.
pub(super) fn decaying(node: &Node) -> bool {
    node.score
        .as_ref()
        .is_some_and(|s| s.breakdown.iter().any(|d| d.reason == FAILURE_DEDUCTION))
}

/// Recompute a reported node's score; record a change (a first score counts as a
/// change from 100).
pub(super) fn rescore(node: &mut Node, rec: &mut Recorder<'_, '_>, cfg: &CoreSettings) {
    if node.last_report.is_none() {
        return;
    }
    let settings = cfg.settings_for(&node.labels);
    if node
        .score
        .as_ref()
        .is_some_and(|s| node.score_is(s, settings, rec.now))
    {
        return;
    }
    let score = node.compute_score(settings, rec.now);
    let previous = node.score.as_ref().map_or(100, |s| s.value);
    let value = score.value;
    let scored_by = score.scored_by.clone();
    node.score = Some(score);
    rec.dirty();
    if value != previous {
        rec.event(
            EventKind::ScoreChanged {
                score: value,
                previous_score: previous,
                scored_by,
            },
            format!("score {previous} -> {value}"),
        );
    }
}

/// Group (key, item) pairs by key, keys in order, each group's items in the order they
/// came (the sort is stable). For 50,000 alerts a sort beats a map of vectors.
pub(super) fn group_by_key<'k, T>(mut pairs: Vec<(&'k str, T)>) -> Vec<(&'k str, Vec<T>)> {
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    let mut groups: Vec<(&'k str, Vec<T>)> = Vec::new();
    for (key, item) in pairs {
        match groups.last_mut() {
            Some((k, items)) if *k == key => items.push(item),
            _ => groups.push((key, vec![item])),
        }
    }
    groups
}

/// Records what happens to one node during a step.
pub(super) struct Recorder<'o, 'i> {
    pub(super) out: &'o mut Outcome,
    pub(super) now: Time,
    pub(super) id: &'i str,
}

impl Recorder<'_, '_> {
    pub(super) fn event(&mut self, kind: EventKind, message: String) {
        self.dirty();
        self.out.events.push(Event {
            node_id: self.id.to_string(),
            kind,
            occurred_at: self.now,
            message,
        });
    }

    pub(super) fn dirty(&mut self) {
        if !self.out.dirty.contains(self.id) {
            self.out.dirty.insert(self.id.to_string());
        }
    }

    pub(super) fn touched(&mut self) {
        if !self.out.touched.contains(self.id) {
            self.out.touched.insert(self.id.to_string());
        }
    }
}
