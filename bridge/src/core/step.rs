//! One step of the core: inputs applied to the fleet under one `now`, collecting an
//! [`Outcome`]; every entry point ends in the same `finish` — trust, heartbeats, the
//! sweep, scores, the policy — so the rules hold whichever path fed them. What
//! `finish` looks at is scoped to what the step can have changed: a delivery costs
//! the nodes it touched, time and polls cost the fleet.

use std::collections::BTreeSet;

use super::conditions::stale_condition;
use super::outcome::Outcome;
use super::policy::{Policy, asks_reboot};
use super::settings::CoreSettings;
use super::trust::Keep;
use super::{
    Deduction, Event, EventKind, FAILURE_DEDUCTION, Fleet, Node, Severity, TELEMETRY_STALE, Time,
};

/// How often a tick passes the whole policy over the fleet (polls always do).
pub(super) const WHOLE_PASS_EVERY: chrono::TimeDelta = chrono::TimeDelta::seconds(10);

/// What `finish` looks at: a step costs in proportion to what it can have changed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    /// A poll, which may clear anything: every node rescored, the whole policy, and
    /// what time makes due.
    All,
    /// Time passed (a failed poll, a backtest step): missed heartbeats, the sweep,
    /// decaying failure deductions, the whole policy.
    Time,
    /// The clock's tick (every second): as `Time`, but the whole policy only when
    /// [`WHOLE_PASS_EVERY`] has passed since the last whole pass; between them the
    /// nodes the tick changed are decided, against the kept pool counts. What waits
    /// on time alone (a recovery's hold, a suppression window, a budget's hour) is
    /// decided at most that much later.
    Tick,
    /// A delivery or an operator's input: the nodes it touched, and no other.
    Touched,
    /// A slice of a poll: the nodes it touched rescored; the policy waits for the
    /// poll's last step, which passes it over every node.
    Slice,
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
        let mut out = Outcome::default();
        out.clock_back = fleet.clock_at(cfg, now, &mut out);
        Step {
            fleet,
            cfg,
            now,
            out,
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
        self.ensure(id);
        self.fleet.nodes.get_mut(id).expect("ensured")
    }

    /// Create the node unscored if it is new.
    pub(super) fn ensure(&mut self, id: &str) {
        if !self.fleet.nodes.contains_key(id) {
            let mut node = Node::new(id);
            node.known_since = Some(self.now);
            node.policy.replaced_at = super::policy::take_replaced(
                &mut self.fleet.ledger.replaced,
                id,
                self.now,
                &mut self.out.ledger,
            );
            let stale = self.fleet.trust.stale;
            if stale {
                node.conditions
                    .insert(TELEMETRY_STALE.into(), stale_condition(self.now));
            }
            self.fleet.nodes.insert(id.to_string(), Box::new(node));
            // A new member of its pool: the occupancy is counted afresh.
            self.fleet.pools = None;
            self.out.dirty.insert(id.to_string());
            if stale {
                self.event(
                    id,
                    EventKind::ConditionRaised {
                        condition: TELEMETRY_STALE.into(),
                        reason: TELEMETRY_STALE.into(),
                        severity: Severity::Warning,
                        fault_class: None,
                        suppressed: false,
                    },
                    "telemetry stale: a new node, seen while hale has no trusted alert data".into(),
                );
            }
        }
    }

    pub(super) fn finish(mut self, scope: Scope) -> Outcome {
        self.settle_trust();
        match scope {
            // A poll changes most nodes: its last step looks at every one anyway.
            Scope::All | Scope::Slice => self.fleet.heartbeats_due = None,
            Scope::Time | Scope::Tick | Scope::Touched => self.lower_heartbeats_due(),
        }
        if matches!(scope, Scope::All | Scope::Time | Scope::Tick) {
            self.check_heartbeats();
            self.sweep();
        }
        let Step {
            fleet,
            cfg,
            now,
            mut out,
            ..
        } = self;
        let decays = fleet.decaying.get_or_insert_with(|| {
            fleet
                .nodes
                .values()
                .filter(|n| decaying(n))
                .map(|n| n.id.clone())
                .collect()
        });
        let watch = &mut Watch {
            decays,
            remediation: fleet.remediation_watch.as_mut(),
        };
        let mut due = BTreeSet::new();
        match scope {
            // Each step scores what it changed, so only a change of settings (or a
            // fleet just loaded, scored under settings that may since have changed)
            // makes every score stale.
            Scope::All if fleet.rescore_all => {
                for node in fleet.nodes.values_mut() {
                    score(node, &mut out, now, cfg, watch);
                }
                fleet.rescore_all = false;
            }
            // A poll's nodes were scored by its slices: what is left is what this
            // step changed (missed heartbeats, the sweep) and what time decays.
            Scope::All => {
                let decayed = watch.decays.clone();
                score_changed(&mut fleet.nodes, &mut out, now, cfg, watch, &decayed);
            }
            Scope::Slice => {
                score_changed(
                    &mut fleet.nodes,
                    &mut out,
                    now,
                    cfg,
                    watch,
                    &BTreeSet::new(),
                );
            }
            Scope::Time | Scope::Tick | Scope::Touched => {
                // A node is rescored once whichever way it is due.
                due.extend(out.dirty.iter().chain(&out.touched).cloned());
                due.append(&mut out.rescore);
                if matches!(scope, Scope::Time | Scope::Tick) {
                    due.extend(watch.decays.iter().cloned());
                }
                for id in &due {
                    if let Some(node) = fleet.nodes.get_mut(id) {
                        score(node, &mut out, now, cfg, watch);
                    }
                }
            }
        }
        if scope == Scope::Slice {
            written_whole(fleet, &out);
            return out;
        }
        // Without kept counts any scope counts afresh: a whole pass.
        let whole = fleet.pools.is_none()
            || match scope {
                Scope::All | Scope::Time => true,
                Scope::Tick => fleet
                    .whole_pass_at
                    .is_none_or(|t| now.signed_duration_since(t) >= WHOLE_PASS_EVERY || now < t),
                Scope::Touched | Scope::Slice => false,
            };
        if whole {
            // Queued cordons a pool can no longer take go before it decides anew.
            out.absorb(fleet.limit_withdraws(cfg, now));
        }
        let mut policy = Policy {
            cfg,
            now,
            out: &mut out,
        };
        if whole {
            policy.evaluate(fleet);
            fleet.whole_pass_at = Some(now);
        } else {
            policy.evaluate_some(fleet, &due);
        }
        written_whole(fleet, &out);
        out
    }
}

/// The nodes a step writes whole hold nothing more in memory alone.
fn written_whole(fleet: &mut super::Fleet, out: &Outcome) {
    for id in &out.dirty {
        if let Some(node) = fleet.nodes.get_mut(id) {
            node.policy.count_unsaved = false;
        }
    }
}

/// Rescore the nodes `out` says changed, and `more`, each at least once, without
/// gathering their ids anew (a slice may touch thousands).
fn score_changed(
    nodes: &mut std::collections::BTreeMap<String, Box<Node>>,
    out: &mut Outcome,
    now: Time,
    cfg: &CoreSettings,
    watch: &mut Watch<'_>,
    more: &BTreeSet<String>,
) {
    let dirty = std::mem::take(&mut out.dirty);
    let touched = std::mem::take(&mut out.touched);
    let rescore = std::mem::take(&mut out.rescore);
    let due = dirty
        .iter()
        .chain(touched.iter().filter(|id| !dirty.contains(*id)))
        .chain(
            rescore
                .iter()
                .chain(more)
                .filter(|id| !dirty.contains(*id) && !touched.contains(*id)),
        );
    for id in due {
        if let Some(node) = nodes.get_mut(id) {
            score(node, out, now, cfg, watch);
        }
    }
    // What scoring made dirty joins what was.
    let rescored = std::mem::replace(&mut out.dirty, dirty);
    out.dirty.extend(rescored);
    out.touched = touched;
}

/// The sets of nodes time-driven work looks at, which every node a step changed
/// passes through [`score`] to keep true.
struct Watch<'f> {
    /// Nodes whose score decays with time.
    decays: &'f mut BTreeSet<String>,
    /// Nodes remediation looks at ([`Fleet::remediation_watch`]).
    remediation: Option<&'f mut BTreeSet<String>>,
}

/// Rescore one node and keep the [`Watch`] sets.
fn score(node: &mut Node, out: &mut Outcome, now: Time, cfg: &CoreSettings, watch: &mut Watch<'_>) {
    let current = node.last_report.is_none()
        || node
            .score
            .as_ref()
            .is_some_and(|s| node.score_is(s, cfg.settings_for(&node.labels), now));
    if !current {
        let id = node.id.clone();
        rescore(node, &mut Recorder { out, now, id: &id }, cfg);
    }
    let decays = &mut watch.decays;
    if decaying(node) != decays.contains(&node.id) {
        if decaying(node) {
            decays.insert(node.id.clone());
        } else {
            decays.remove(&node.id);
        }
    }
    // Only added here: remediation drops a node once nothing of it is left to do.
    if let Some(watched) = watch.remediation.as_deref_mut()
        && !watched.contains(&node.id)
        && asks_reboot(node)
    {
        watched.insert(node.id.clone());
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
    let value = score.value;
    let scored_by = score.scored_by.clone();
    let old = node.score.replace(score);
    let previous = old.as_ref().map_or(100, |s| s.value);
    rec.dirty();
    if value != previous {
        let now = node.score.as_ref().map_or(&[][..], |s| &s.breakdown[..]);
        let was = old.as_ref().map_or(&[][..], |s| &s.breakdown[..]);
        rec.event(
            EventKind::ScoreChanged {
                score: value,
                previous_score: previous,
                scored_by: scored_by.into_string(),
            },
            format!("score {previous} -> {value}{}", penalties_moved(was, now)),
        );
    }
}

/// The penalties that moved between two breakdowns, as a score change says them
/// (` (penalties: SmartFailing 0 -> 40, attributed job failures 15 -> 8)`): a
/// change the conditions do not explain — a reload's new penalty table, a
/// failure tally decaying — is explained too.
fn penalties_moved(was: &[Deduction], now: &[Deduction]) -> String {
    let points = |list: &[Deduction], reason: &str| {
        list.iter()
            .find(|d| d.reason == reason)
            .map_or(0, |d| d.points)
    };
    let mut moved = Vec::new();
    for d in was.iter().chain(now) {
        let (a, b) = (points(was, &d.reason), points(now, &d.reason));
        let said = format!("{} {a} -> {b}", d.reason);
        if a != b && !moved.contains(&said) {
            moved.push(said);
        }
    }
    if moved.is_empty() {
        String::new()
    } else {
        format!(" (penalties: {})", moved.join(", "))
    }
}

/// A key to group by, its first [`Keyed::HEAD`] bytes read into one number when it
/// is made, where its text is at hand. Sorting 50,000 alerts in Alertmanager's order
/// (by fingerprint, which scatters a node's alerts over the whole answer) then
/// compares numbers and reads a key's text only past them, as the text is by then
/// in no cache.
#[derive(Clone, Copy)]
pub(super) struct Keyed<'k> {
    head: u128,
    key: &'k str,
}

impl<'k> Keyed<'k> {
    const HEAD: usize = 16;

    pub(super) fn new(key: &'k str) -> Self {
        let mut head = [0u8; Self::HEAD];
        let n = key.len().min(Self::HEAD);
        head[..n].copy_from_slice(&key.as_bytes()[..n]);
        Keyed {
            head: u128::from_be_bytes(head),
            key,
        }
    }

    /// The keys' order as text. Equal heads differ past them, or only in length
    /// where either key ends within them (the shorter then begins the longer).
    pub(super) fn order(&self, other: &Self) -> std::cmp::Ordering {
        self.head.cmp(&other.head).then_with(|| {
            let (a, b) = (self.key.as_bytes(), other.key.as_bytes());
            if a.len() > Self::HEAD && b.len() > Self::HEAD {
                a[Self::HEAD..].cmp(&b[Self::HEAD..])
            } else {
                a.len().cmp(&b.len())
            }
        })
    }
}

/// Group (key, item) pairs by key, keys in order, each group's items in the order they
/// came (the sort is stable). For 50,000 alerts a sort beats a map of vectors.
pub(super) fn group_by_key<'k, T>(mut pairs: Vec<(Keyed<'k>, T)>) -> Grouped<'k, T> {
    pairs.sort_by(|a, b| a.0.order(&b.0));
    let mut groups: Vec<(&'k str, std::ops::Range<usize>)> = Vec::new();
    let mut items = Vec::with_capacity(pairs.len());
    let mut last: Option<Keyed<'k>> = None;
    for (key, item) in pairs {
        match groups.last_mut() {
            Some((_, range)) if last.is_some_and(|k| k.order(&key).is_eq()) => range.end += 1,
            _ => groups.push((key.key, items.len()..items.len() + 1)),
        }
        last = Some(key);
        items.push(item);
    }
    Grouped { items, groups }
}

/// Items grouped by a key, in the key's order: two allocations however many groups.
pub(super) struct Grouped<'k, T> {
    items: Vec<T>,
    groups: Vec<(&'k str, std::ops::Range<usize>)>,
}

impl<'k, T> Grouped<'k, T> {
    pub(super) fn iter(&self) -> impl Iterator<Item = (&'k str, &[T])> {
        self.groups
            .iter()
            .map(|(k, range)| (*k, &self.items[range.clone()]))
    }

    /// The groups as ranges of the items, without their keys.
    pub(super) fn into_ranges(self) -> (Vec<std::ops::Range<usize>>, Vec<T>) {
        let ranges = self.groups.into_iter().map(|(_, range)| range).collect();
        (ranges, self.items)
    }

    /// How many groups there are.
    pub(super) fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether `key` is one of the groups.
    pub(super) fn has(&self, key: &str) -> bool {
        self.groups.binary_search_by(|(k, _)| (*k).cmp(key)).is_ok()
    }

    /// Keep only the groups `keep` says to.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&'k str, &[T]) -> bool) {
        let items = &self.items;
        self.groups
            .retain(|(k, range)| keep(k, &items[range.clone()]));
    }
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

    /// `count` of the node's condition types were not taken: it holds
    /// [`super::conditions::MAX_CONDITIONS`].
    pub(super) fn crowded(&mut self, count: usize) {
        *self.out.crowded.entry(self.id.to_string()).or_default() += count;
    }

    /// The node's score may have changed though nothing about it needs writing.
    pub(super) fn rescore(&mut self) {
        if !self.out.rescore.contains(self.id) {
            self.out.rescore.insert(self.id.to_string());
        }
    }

    pub(super) fn touched(&mut self) {
        if !self.out.touched.contains(self.id) {
            self.out.touched.insert(self.id.to_string());
        }
    }
}
