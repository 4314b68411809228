//! The policy (DESIGN §6): after every report, what to do about each node's score and
//! faults — recommend, cordon, drain, replace, gate, evict — inside the guardrails.
//! Pure: it changes the fleet's bookkeeping, records one event per conclusion and
//! leaves the orchestrator's part as pending actions, which the service performs
//! and reports back ([`Fleet::action_done`], [`Fleet::action_failed`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::events::with_reason;
use super::outcome::Outcome;
use super::settings::{CoreSettings, Mode, Settings};
use super::{BLIND_CONDITIONS, Condition, Event, EventKind, Fleet, Name, Node, Status, Time};

mod fencing;
mod inventory;
mod operator;
mod queue;
mod remediation;
mod state;

pub use fencing::{Fence, FenceStep, power_busy};
pub use inventory::{Observed, OrchestratorHealth};
pub use operator::{DrainAll, PowerDone};
pub use queue::{Action, Done, Pending, PowerOp};
pub(crate) use remediation::asks_reboot;
pub use remediation::{Entry, Facts, Flow, FlowStep, REBOOT, Remediations};
pub use state::{Actor, Conclusion, Cordon, Guardrail, Ledger, Moves, NodePolicy, Verdict};

/// A rejected termination is not tried again sooner than this.
const TERMINATE_RETRY: Duration = Duration::from_secs(600);

/// The replacement budget's window.
const HOUR: Duration = Duration::from_secs(3600);

/// A recovery must hold this long before a new degradation is a new episode, so a
/// flapping condition records one conclusion, not one per flap.
pub const RECOVERY_HOLD: Duration = Duration::from_secs(15 * 60);

/// How long after hale replaced a node a record under its name is left alone:
/// the old machine's alerts take this long to leave (Alertmanager's default
/// `resolve_timeout` of 5 minutes after Prometheus stops sending them, and the
/// rules' own windows), and they are no evidence about the machine that follows.
pub const REPLACED_HOLD: Duration = Duration::from_secs(15 * 60);

/// Whether a record under the name of a node hale replaced is still within
/// [`REPLACED_HOLD`]: shown, scored, and acted on by nothing.
pub fn just_replaced(node: &Node, now: Time) -> bool {
    node.policy.replaced_at.is_some_and(|t| within_hold(t, now))
}

/// Whether a replacement at `at` is still within [`REPLACED_HOLD`] at `now`.
fn within_hold(at: Time, now: Time) -> bool {
    (now - at).to_std().unwrap_or_default() < REPLACED_HOLD
}

/// The mark a record made under `id` now takes from the ledger's `replaced` (see
/// [`state::Ledger::replaced`]): the replacement's time while its hold lasts.
/// `ledger_changed` is set when an entry left the ledger.
pub(in crate::core) fn take_replaced(
    replaced: &mut BTreeMap<String, Time>,
    id: &str,
    now: Time,
    ledger_changed: &mut bool,
) -> Option<Time> {
    let at = replaced.remove(id)?;
    *ledger_changed = true;
    within_hold(at, now).then_some(at)
}

/// Whether a node's view is incomplete: no policy acts on it, and none speaks of it.
pub fn blind(node: &Node) -> bool {
    BLIND_CONDITIONS
        .iter()
        .any(|c| node.conditions.contains_key(*c))
}

/// The reason of the cordon a fault eviction makes, before its class.
pub(super) const EVICTION_CORDON: &str = "fault eviction: ";

/// The failure message of work a fault eviction could not move (the first seed's);
/// the orchestrator adds how its work declares it may be moved instead
/// ([`crate::orchestrator::Orchestrator::restart_hint`]).
pub fn eviction_message(node: &str, fault: &str) -> String {
    format!("node {node}: {fault}; job failed and the node cordoned.")
}

/// The fault named to the work on a node: the description of its worst raised
/// condition in that class (never a blind condition, which names no fault).
fn fault_name(node: &Node, class: &str) -> Option<String> {
    faults(node)
        .filter(|(_, c)| c.fault_class.eq_ignore_ascii_case(class) && !c.suppressed())
        .max_by_key(|(_, c)| c.severity)
        .map(|(ctype, _)| describe_fault(ctype))
}

/// The node's raised conditions that name a fault (hale's blind ones name none).
fn faults(node: &Node) -> impl Iterator<Item = (&Name, &Condition)> {
    node.conditions
        .iter()
        .filter(|(ctype, _)| !BLIND_CONDITIONS.contains(&ctype.as_str()))
}

/// `gpu_ecc_errors` → `GPU ECC errors`.
fn describe_fault(ctype: &str) -> String {
    const UPPER: &[&str] = &["gpu", "ecc", "xid", "smart", "io", "cpu", "nvlink"];
    let words: Vec<String> = ctype
        .split('_')
        .enumerate()
        .map(|(i, w)| {
            if UPPER.contains(&w) {
                w.to_uppercase()
            } else if i == 0 {
                let mut c = w.chars();
                c.next()
                    .map(|f| f.to_uppercase().chain(c).collect())
                    .unwrap_or_default()
            } else {
                w.to_string()
            }
        })
        .collect();
    words.join(" ")
}

/// Whether an operator uncordoned the node less than `cordonSuppressionMinutes` ago.
fn suppressed(node: &Node, settings: &Settings, now: Time) -> bool {
    node.policy
        .uncordoned_at
        .is_some_and(|t| (now - t).to_std().unwrap_or_default() < settings.cordon_suppression)
}

/// Observe mode: whether the policy would have this node out of service by now
/// (a standing recommendation is a cordon or drain `cordon` mode would have done).
fn would_be_out(node: &Node, settings: &Settings) -> bool {
    settings.mode == Mode::Observe
        && matches!(node.policy.conclusion, Some(Conclusion::Recommended { .. }))
}

/// Each pool's occupancy now, and the nodes the policy has something to decide
/// about, worst score first (in the order given where scores tie). One pass, by
/// reference or mutable reference: the whole pass decides on the nodes it holds,
/// without looking each up again by id.
pub(in crate::core) fn count<N: std::ops::Deref<Target = Node>>(
    cfg: &CoreSettings,
    now: Time,
    ledger: &Ledger,
    nodes: impl Iterator<Item = N>,
) -> (Pools, Vec<(u8, N)>) {
    let mut pools: Pools = BTreeMap::new();
    let mut order = Vec::new();
    for node in nodes {
        let settings = cfg.settings_for(&node.labels);
        let pool = match pools.get_mut(settings.name.as_str()) {
            Some(pool) => pool,
            None => pools.entry(settings.name.clone()).or_default(),
        };
        pool.size += 1;
        if counted_out(&node, settings) {
            pool.out += 1;
        }
        if node.policy.has(&Action::Terminate) {
            pool.replaced += 1;
        }
        if let Some(score) = node.score.as_ref().map(|s| s.value)
            && concerns(&node, settings, score)
        {
            order.push((score, node));
        }
    }
    let hour_ago = now - chrono::TimeDelta::from_std(HOUR).expect("an hour");
    for (name, spent) in &ledger.replacements {
        if let Some(pool) = pools.get_mut(name) {
            pool.replaced += spent.iter().filter(|t| **t > hour_ago).count() as u32;
        }
    }
    // Stable: nodes of one score stay in the order given (by id, from the fleet) —
    // but for those the policy already took out or recommended (observe's
    // recommendations are the cordons another mode makes, in the order reports
    // came in), which keep their places ahead of the rest.
    order.sort_by_key(|(score, node)| {
        let standing = matches!(
            node.policy.conclusion,
            Some(Conclusion::Recommended { .. } | Conclusion::Acted { .. })
        );
        (*score, !standing)
    });
    (pools, order)
}

/// Whether the node counts as out of its pool's service: not ready or cordoned as
/// the orchestrator shows it, fenced (powered off, or not yet back — without an
/// orchestrator nothing else shows it) or its work released, or recommended out
/// in observe.
fn counted_out(node: &Node, settings: &Settings) -> bool {
    node.status != Status::Ready
        || node.policy.fence.is_some()
        || node.policy.released
        // Shown in service, but the cluster keeps it out until the uncordon is done.
        || node.policy.has(&Action::Uncordon)
        || would_be_out(node, settings)
}

/// Whether the policy has anything to decide about a scored node: a steady healthy
/// fleet costs a glance per node, not an evaluation.
fn concerns(node: &Node, settings: &Settings, score: u8) -> bool {
    let p = &node.policy;
    u32::from(score) < settings.cordon_below.max(settings.drain_below)
        || p.scored_reports < 2
        || p.gated
        || p.conclusion.is_some()
        || !p.evicted.is_empty()
        || (!settings.evict_on_fault_classes.is_empty() && !node.conditions.is_empty())
        // A cordon still queued is decided again, whatever else ended.
        || (!p.pending.is_empty() && unperformed(node))
}

/// Each pool's occupancy, by name.
pub type Pools = BTreeMap<String, Pool>;

/// Pool occupancy: nodes and nodes out of service (cordoned by anyone, not ready).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pool {
    pub(in crate::core) size: u32,
    pub(in crate::core) out: u32,
    /// Terminations in the last hour, done or decided.
    pub(in crate::core) replaced: u32,
}

impl Pool {
    /// Whether one more node out of service stays within `max_percent`.
    fn admits(&self, max_percent: u32) -> bool {
        u64::from(self.out + 1) * 100 <= u64::from(max_percent) * u64::from(self.size)
    }

    /// Why `maxUnavailablePercent` halts one more node, with the numbers it was
    /// decided on.
    pub(super) fn full(&self, settings: &Settings) -> String {
        let allowed = u64::from(settings.max_unavailable_percent) * u64::from(self.size) / 100;
        format!(
            "it would take more than {}% of pool {} out of service: {} of its {} node(s) are out, and {}% allows {allowed}",
            settings.max_unavailable_percent,
            settings.name,
            self.out,
            self.size,
            settings.max_unavailable_percent
        )
    }
}

pub(super) struct Policy<'a, 'o> {
    pub cfg: &'a CoreSettings,
    pub now: Time,
    pub out: &'o mut Outcome,
}

impl Policy<'_, '_> {
    /// Evaluate every node, worst score first, so a guardrail that stops part of a
    /// pool stops the healthiest of the candidates.
    pub fn evaluate(&mut self, fleet: &mut Fleet) {
        let hour_ago = self.now - chrono::TimeDelta::from_std(HOUR).expect("an hour");
        let before = fleet.ledger.replacements.len();
        for spent in fleet.ledger.replacements.values_mut() {
            let kept = spent.len();
            spent.retain(|t| *t > hour_ago);
            self.out.ledger |= spent.len() != kept;
        }
        fleet
            .ledger
            .replacements
            .retain(|_, spent| !spent.is_empty());
        self.out.ledger |= fleet.ledger.replacements.len() != before;
        let before = fleet.ledger.replaced.len();
        fleet
            .ledger
            .replaced
            .retain(|_, at| within_hold(*at, self.now));
        self.out.ledger |= fleet.ledger.replaced.len() != before;
        let (mut pools, order) = count(
            self.cfg,
            self.now,
            &fleet.ledger,
            fleet.nodes.values_mut().map(Box::as_mut),
        );
        let sighted = fleet.trust.trusted_since_start();
        for (_, node) in order {
            let landing = fleet.under_way.contains_key(&node.id);
            self.decide(&mut pools, node, sighted, landing);
        }
        fleet.pools = Some(pools);
    }

    /// Evaluate only `ids` (a delivery's nodes, worst score first), against the pools
    /// as the last whole pass counted them — counting afresh when something else
    /// changed them since.
    pub fn evaluate_some(&mut self, fleet: &mut Fleet, ids: &BTreeSet<String>) {
        let Some(mut pools) = fleet.pools.take() else {
            return self.evaluate(fleet);
        };
        let mut order: Vec<(u8, String)> = ids
            .iter()
            .filter_map(|id| fleet.nodes.get(id))
            .filter_map(|n| {
                let score = n.score.as_ref()?.value;
                concerns(n, self.cfg.settings_for(&n.labels), score).then(|| (score, n.id.clone()))
            })
            .collect();
        order.sort();
        let sighted = fleet.trust.trusted_since_start();
        for (_, id) in order {
            let landing = fleet.under_way.contains_key(&id);
            if let Some(node) = fleet.nodes.get_mut(&id) {
                self.decide(&mut pools, node, sighted, landing);
            }
        }
        fleet.pools = Some(pools);
    }

    /// The policy for one node against the counted pools, which it keeps true.
    /// Nothing is decided before trusted input arrived since this process started
    /// (`sighted`): what a restart loaded may be hours old. `landing`: an action
    /// of the node's is being performed.
    fn decide(&mut self, pools: &mut Pools, node: &mut Node, sighted: bool, landing: bool) {
        if !sighted {
            return;
        }
        let settings = self.cfg.settings_for(&node.labels);
        let pool = match pools.get_mut(settings.name.as_str()) {
            Some(pool) => pool,
            None => pools.entry(settings.name.clone()).or_default(),
        };
        // The node is counted as it stands after its decision, whatever changed
        // it, so the counts stay true between whole passes.
        let others = pool
            .out
            .saturating_sub(u32::from(counted_out(node, settings)));
        pool.out = others;
        self.node(node, settings, pool, landing);
        pool.out = others + u32::from(counted_out(node, settings));
    }

    fn node(&mut self, node: &mut Node, settings: &Settings, pool: &mut Pool, landing: bool) {
        // The hold is over: the mark goes, so nothing later reads it.
        if node.policy.replaced_at.is_some() && !just_replaced(node, self.now) {
            node.policy.replaced_at = None;
            self.out.dirty.insert(node.id.clone());
        }
        if blind(node) || just_replaced(node, self.now) {
            return;
        }
        let Some(score) = node.score.as_ref().map(|s| s.value) else {
            return;
        };
        // Counted in memory, and saved with the node's next change (or a clean
        // stop): a whole fleet's second report is not a write of every node. A crash
        // loses at most a count, and the node then waits one report more.
        if node.policy.scored_reports < 2
            && node.last_report.is_some()
            && node.policy.counted_report != node.last_report
        {
            node.policy.counted_report = node.last_report;
            node.policy.scored_reports = node.policy.scored_reports.saturating_add(1).min(2);
            node.policy.count_unsaved = true;
        }
        let first = node.policy.scored_reports < 2;

        // The scheduling gate, in every mode; an unscored node never has it. It is
        // lifted once the recovery has held, so a score hovering at drainBelow does
        // not open and close it with every report.
        let below = u32::from(score) < settings.drain_below;
        let gate = if below {
            if node.policy.ungate_since.take().is_some() {
                self.out.dirty.insert(node.id.clone());
            }
            !first || node.policy.gated
        } else if node.policy.gated {
            let since = *node.policy.ungate_since.get_or_insert_with(|| {
                self.out.dirty.insert(node.id.clone());
                self.now
            });
            (self.now - since).to_std().unwrap_or_default() < RECOVERY_HOLD
        } else {
            false
        };
        if gate != node.policy.gated {
            node.policy.gated = gate;
            node.policy.gate_refused = false;
            node.policy.ungate_since = None;
            node.policy.push(Action::Gate { on: gate });
            self.out.dirty.insert(node.id.clone());
            let id = node.id.clone();
            self.event(
                &id,
                EventKind::PolicyActed {
                    action: Action::Gate { on: gate }.name().into(),
                    policy_mode: mode_name(settings.mode).into(),
                    scored_by: settings.name.clone(),
                    score: Some(score),
                    waiting_on: None,
                },
                format!(
                    "{} scheduling: score {score} is {} drainBelow {}",
                    if gate { "gated" } else { "reopened" },
                    if gate { "below" } else { "at or above" },
                    settings.drain_below
                ),
            );
        }
        if first {
            return;
        }

        let evicting = self.evict(node, settings, pool);

        let wanted = if u32::from(score) < settings.drain_below {
            Some(match settings.mode {
                Mode::Replace => Verdict::Replace,
                Mode::Cordon => Verdict::Cordon,
                Mode::Drain | Mode::Observe => Verdict::Drain,
            })
        } else if u32::from(score) < settings.cordon_below {
            Some(Verdict::Cordon)
        } else {
            None
        };
        let conclusion = match (evicting, wanted) {
            (Some(halted), _) => Some(halted),
            (None, Some(verdict)) if settings.mode == Mode::Observe => {
                Some(self.recommend(node, settings, pool, verdict))
            }
            (None, Some(verdict)) => Some(self.enforce(node, settings, pool, verdict)),
            (None, None) => None,
        };
        let Some(conclusion) = conclusion else {
            // Recovered before the cordon was done (the orchestrator did not
            // answer meanwhile): nothing happened in the cluster, and nothing will.
            if !landing && unperformed(node) && !eviction_stands(node) {
                let why = format!(
                    "the score recovered to {score} (cordonBelow {})",
                    settings.cordon_below
                );
                let withdrawn = withdraw(node, self.now, &why);
                self.out.events.push(withdrawn);
                node.policy.conclusion = None;
                node.policy.recovered_since = None;
                self.out.dirty.insert(node.id.clone());
                return;
            }
            // Recovered: once it holds, the next degradation is a new episode. The
            // node is never uncordoned by this.
            if node.policy.conclusion.is_some() {
                let fresh = node.policy.recovered_since.is_none();
                let since = *node.policy.recovered_since.get_or_insert(self.now);
                if (self.now - since).to_std().unwrap_or_default() >= RECOVERY_HOLD {
                    node.policy.conclusion = None;
                    node.policy.recovered_since = None;
                    self.out.dirty.insert(node.id.clone());
                } else if fresh {
                    self.out.dirty.insert(node.id.clone());
                }
            }
            return;
        };
        if node.policy.recovered_since.take().is_some() {
            self.out.dirty.insert(node.id.clone());
        }
        // Within an episode a conclusion never steps down: a score moving between
        // the thresholds keeps the drain it reached.
        let conclusion = match (&node.policy.conclusion, conclusion) {
            (Some(Conclusion::Recommended { action: was }), Conclusion::Recommended { action })
                if action < *was =>
            {
                Conclusion::Recommended { action: *was }
            }
            (
                Some(standing @ Conclusion::Acted { action: was, .. }),
                Conclusion::Acted { action, .. },
            ) if action < *was => standing.clone(),
            // Still halted: by what stops it now, for the most it was to do — but
            // a held fault eviction is said as itself, over a score's halt.
            (
                Some(Conclusion::Halted { action: was, .. }),
                Conclusion::Halted { action, guardrail },
            ) if action < *was && action != Verdict::Evict => Conclusion::Halted {
                action: *was,
                guardrail,
            },
            (_, conclusion) => conclusion,
        };
        self.conclude(node, settings, score, pool, conclusion);
    }

    /// Observe mode: what enforcing `verdict` would meet. The same guardrails stand,
    /// and the nodes this mode would already have taken out count as out, so what
    /// is recorded is what `cordon` mode would do with the same history.
    fn recommend(
        &mut self,
        node: &mut Node,
        settings: &Settings,
        pool: &mut Pool,
        verdict: Verdict,
    ) -> Conclusion {
        if node.policy.cordon.is_none()
            && !would_be_out(node, settings)
            && let Some(guardrail) = self.admit(node, settings, pool)
        {
            return Conclusion::Halted {
                action: verdict,
                guardrail,
            };
        }
        Conclusion::Recommended { action: verdict }
    }

    /// The guardrails on taking a node out of service: the guardrail that stops it,
    /// or `None` with the node counted out of its pool.
    fn admit(&self, node: &Node, settings: &Settings, pool: &mut Pool) -> Option<Guardrail> {
        if suppressed(node, settings, self.now) {
            return Some(Guardrail::Suppressed);
        }
        // A node not ready (or offline) is out already, but back by itself: taken out now, it
        // would stay out once ready, so it needs room as a ready one does (a
        // controller restart that shows a pool not ready must not let the worst
        // of it be cordoned past the limit).
        if matches!(
            node.status,
            Status::Ready | Status::NotReady | Status::Offline
        ) {
            if !pool.admits(settings.max_unavailable_percent) {
                return Some(Guardrail::MaxUnavailable);
            }
            pool.out += u32::from(node.status == Status::Ready);
        }
        None
    }

    /// Take the node out of service as `verdict` says, inside the guardrails.
    fn enforce(
        &mut self,
        node: &mut Node,
        settings: &Settings,
        pool: &mut Pool,
        verdict: Verdict,
    ) -> Conclusion {
        let halted = |guardrail| Conclusion::Halted {
            action: verdict,
            guardrail,
        };
        if node.policy.cordon.is_none() {
            // The orchestrator refused the last cordon: not asked again at once.
            if node.policy.retry_after.is_some_and(|t| self.now < t) {
                return halted(Guardrail::CordonRefused);
            }
            if let Some(guardrail) = self.admit(node, settings, pool) {
                return halted(guardrail);
            }
            let reason = format!("score below {}", threshold(settings, verdict));
            take_out(node, Actor::Hale, &reason, self.now);
            self.record_cordon(node, Actor::Hale, &reason);
        }
        let cordon = node.policy.cordon.as_mut().expect("cordoned above");
        // Someone else's cordon is theirs to drain or not: a drain of hale's
        // would only write its reason over theirs (Slurm's drain is the cordon).
        if verdict >= Verdict::Drain
            && cordon.by == Actor::Hale
            && !cordon.drained
            && !cordon.drain_refused
        {
            // Automated drains are passive: running work is left to finish.
            cordon.drain();
            let reason = format!("score below drainBelow {}", settings.drain_below);
            node.policy.push(Action::Drain {
                active: false,
                reason: reason.clone(),
            });
            let id = node.id.clone();
            self.event(
                &id,
                EventKind::NodeDrained {
                    by: Actor::Hale.as_str().into(),
                    active: false,
                    reason: reason.clone(),
                    moved: 0,
                    blocked: 0,
                    stopping: 0,
                    failed: 0,
                },
                format!("drained (passive) by hale: {reason}"),
            );
        }
        self.out.dirty.insert(node.id.clone());
        if verdict != Verdict::Replace {
            return Conclusion::Acted {
                action: verdict,
                waiting: false,
            };
        }
        let cordon = node.policy.cordon.as_ref().expect("cordoned above");
        if !node.policy.provisioned {
            return halted(Guardrail::NotProvisioned);
        }
        if cordon.by != Actor::Hale {
            return halted(Guardrail::NotOurs);
        }
        // A node hale only now took out has not had its work counted: it is
        // drained, not yet known to be empty.
        if !node.policy.work_counted {
            return Conclusion::Acted {
                action: Verdict::Drain,
                waiting: false,
            };
        }
        if node.policy.allocations > 0 {
            return Conclusion::Acted {
                action: verdict,
                waiting: true,
            };
        }
        // A reboot flow under way is the repair being tried: no termination
        // until it has succeeded or failed.
        if node
            .policy
            .flow
            .as_ref()
            .is_some_and(|f| f.step != FlowStep::Queued)
        {
            return Conclusion::Acted {
                action: Verdict::Drain,
                waiting: false,
            };
        }
        if node.policy.has(&Action::Terminate) {
            // A retry after a refusal stays halted until the termination is done.
            if let Some(Conclusion::Halted {
                guardrail: Guardrail::TerminationRejected,
                ..
            }) = node.policy.conclusion
            {
                return halted(Guardrail::TerminationRejected);
            }
            return Conclusion::Acted {
                action: verdict,
                waiting: false,
            };
        }
        if node.policy.retry_after.is_some_and(|t| self.now < t) {
            return halted(Guardrail::TerminationRejected);
        }
        if pool.replaced >= settings.max_replacements_per_hour {
            return halted(Guardrail::ReplacementBudget);
        }
        pool.replaced += 1;
        node.policy.push(Action::Terminate);
        if node.policy.retry_after.take().is_some() {
            return halted(Guardrail::TerminationRejected);
        }
        Conclusion::Acted {
            action: verdict,
            waiting: false,
        }
    }

    /// Fault-triggered eviction, in every mode: once per fault class and episode.
    /// Returns the guardrail's halt when one stops it (its cordon is held to the
    /// same guardrails as the policy's).
    fn evict(
        &mut self,
        node: &mut Node,
        settings: &Settings,
        pool: &mut Pool,
    ) -> Option<Conclusion> {
        // A fault evicted once stays evicted while it is raised, silenced or not, so
        // a silence that ends does not evict again; only a fault an unsilenced alert
        // feeds evicts (DESIGN §3: a suppressed condition triggers nothing).
        // A class matches in any case (the default one is the upper-cased type).
        let mut evicted = std::mem::take(&mut node.policy.evicted);
        let before = evicted.len();
        evicted
            .retain(|class| faults(node).any(|(_, c)| c.fault_class.eq_ignore_ascii_case(class)));
        if evicted.len() != before {
            self.out.dirty.insert(node.id.clone());
        }
        node.policy.evicted = evicted;
        for class in &settings.evict_on_fault_classes {
            if node
                .policy
                .evicted
                .iter()
                .any(|e| e.eq_ignore_ascii_case(class))
            {
                continue;
            }
            let Some(fault) = fault_name(node, class) else {
                continue;
            };
            if node.policy.cordon.is_none() {
                // The orchestrator refused the last cordon: not asked again at once.
                let guardrail = if node.policy.retry_after.is_some_and(|t| self.now < t) {
                    Some(Guardrail::CordonRefused)
                } else {
                    self.admit(node, settings, pool)
                };
                if let Some(guardrail) = guardrail {
                    return Some(Conclusion::Halted {
                        action: Verdict::Evict,
                        guardrail,
                    });
                }
                let reason = format!("{EVICTION_CORDON}{class}");
                take_out(node, Actor::Hale, &reason, self.now);
                if let Some(cordon) = node.policy.cordon.as_mut() {
                    cordon.drain();
                }
                self.record_cordon(node, Actor::Hale, &reason);
            }
            node.policy.evicted.insert(class.clone());
            node.policy.push(Action::Evict {
                fault_class: class.clone(),
                message: eviction_message(&node.id, &fault),
                max_restarts: settings.max_eviction_restarts,
            });
            self.out.dirty.insert(node.id.clone());
        }
        None
    }

    fn record_cordon(&mut self, node: &Node, by: Actor, reason: &str) {
        self.event(
            &node.id,
            EventKind::NodeCordoned {
                by: by.as_str().into(),
                reason: reason.into(),
            },
            format!("cordoned by {}: {reason}", by.as_str()),
        );
    }

    /// Record `conclusion` when it differs from the last one.
    fn conclude(
        &mut self,
        node: &mut Node,
        settings: &Settings,
        score: u8,
        pool: &Pool,
        conclusion: Conclusion,
    ) {
        if node.policy.conclusion.as_ref() == Some(&conclusion) {
            return;
        }
        let mode = mode_name(settings.mode).to_string();
        let scored_by = settings.name.clone();
        let (kind, message) = match &conclusion {
            Conclusion::Recommended { action } => (
                EventKind::PolicyRecommended {
                    action: action.as_str().into(),
                    policy_mode: mode,
                    scored_by,
                    score: Some(score),
                },
                match node.policy.cordon.as_ref() {
                    // Someone else's cordon already keeps the node out: enforced,
                    // the verdict would hold without hale doing anything.
                    Some(c)
                        if matches!(action, Verdict::Cordon | Verdict::Drain)
                            && c.by != Actor::Hale =>
                    {
                        format!(
                            "would {}: score {score}; cordoned by {} already, so nothing would be done (observe mode changes nothing)",
                            action.as_str(),
                            c.by.as_str()
                        )
                    }
                    _ => format!(
                        "would {}: score {score} (observe mode changes nothing)",
                        action.as_str()
                    ),
                },
            ),
            Conclusion::Acted { action, waiting } => {
                let waiting_on = waiting.then_some(node.policy.allocations);
                let message = match waiting_on {
                    Some(n) => format!(
                        "{}: drained, waiting on {n} allocation(s) before terminating",
                        action.as_str()
                    ),
                    None if *action == Verdict::Replace => {
                        "replace: drained and empty, terminating".to_string()
                    }
                    // Someone else's cordon already keeps the node out: the
                    // policy's verdict holds without hale doing anything.
                    None if matches!(action, Verdict::Cordon | Verdict::Drain)
                        && let Some(c) = node.policy.cordon.as_ref()
                        && c.by != Actor::Hale =>
                    {
                        format!(
                            "{}: score {score}; cordoned by {} already, so nothing done",
                            action.as_str(),
                            c.by.as_str()
                        )
                    }
                    None => format!("{}: score {score}", action.as_str()),
                };
                (
                    EventKind::PolicyActed {
                        action: action.as_str().into(),
                        policy_mode: mode,
                        scored_by,
                        score: Some(score),
                        waiting_on,
                    },
                    message,
                )
            }
            Conclusion::Halted { action, guardrail } => {
                let why = match guardrail {
                    Guardrail::ReplacementBudget => format!(
                        "{} node(s) of pool {} replaced in the last hour \
                         (maxReplacementsPerHour {})",
                        pool.replaced, settings.name, settings.max_replacements_per_hour
                    ),
                    Guardrail::MaxUnavailable => pool.full(settings),
                    Guardrail::Suppressed => format!(
                        "an operator uncordoned it less than {} minutes ago",
                        settings.cordon_suppression.as_secs() / 60
                    ),
                    Guardrail::NotProvisioned => {
                        "it is not a provisioned node: drained and left cordoned".into()
                    }
                    Guardrail::NotOurs => {
                        "an operator took it out of service: left as it is".into()
                    }
                    Guardrail::TerminationRejected => {
                        format!("the orchestrator refused to terminate it{}", refusal(node))
                    }
                    Guardrail::CordonRefused => cordon_refused(node),
                };
                // A fault eviction acts in every mode: its halt is one.
                let message = if settings.mode == Mode::Observe && *action != Verdict::Evict {
                    format!(
                        "{} would be halted: {why} (observe mode changes nothing)",
                        action.as_str()
                    )
                } else {
                    format!("{} halted: {why}", action.as_str())
                };
                (
                    EventKind::PolicyHalted {
                        action: action.as_str().into(),
                        guardrail: guardrail.as_str().into(),
                        policy_mode: mode,
                        scored_by,
                        score: Some(score),
                    },
                    message,
                )
            }
        };
        let id = node.id.clone();
        node.policy.conclusion = Some(conclusion);
        self.out.dirty.insert(id.clone());
        self.event(&id, kind, message);
    }

    fn event(&mut self, node: &str, kind: EventKind, message: String) {
        self.out.events.push(Event {
            node_id: node.to_string(),
            kind,
            occurred_at: self.now,
            message,
        });
    }
}

fn threshold(settings: &Settings, verdict: Verdict) -> String {
    match verdict {
        Verdict::Evict => "a fault class of evictOnFaultClasses".into(),
        Verdict::Cordon => format!("cordonBelow {}", settings.cordon_below),
        Verdict::Drain | Verdict::Replace => format!("drainBelow {}", settings.drain_below),
    }
}

pub fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Observe => "observe",
        Mode::Cordon => "cordon",
        Mode::Drain => "drain",
        Mode::Replace => "replace",
    }
}

/// The status as the CLI and errors spell it.
pub fn status_name(status: Status) -> &'static str {
    match status {
        Status::Ready => "READY",
        Status::NotReady => "NOT_READY",
        Status::Cordoned => "CORDONED",
        Status::Offline => "OFFLINE",
    }
}

/// Out of service by `by`: cordoned, and the orchestrator asked to cordon.
fn take_out(node: &mut Node, by: Actor, reason: &str, now: Time) {
    node.status = Status::Cordoned;
    node.policy.work_counted = false;
    // A refusal before is behind it: a later termination is not a retry of one.
    node.policy.retry_after = None;
    node.policy.refusal = None;
    node.policy.cordon = Some(Cordon {
        by,
        reason: reason.into(),
        at: now,
        drained: false,
        drain_refused: false,
        drain_reason: None,
    });
    node.policy.push(Action::Cordon {
        by,
        reason: reason.into(),
    });
}

/// Whether the node's cordon is the policy's — the score's, or a fault
/// eviction's — and not done yet: queued, not under way (the caller knows it is
/// not), so withdrawing it leaves the cluster as it is. A reboot flow's is not
/// the policy's to withdraw.
pub(super) fn unperformed(node: &Node) -> bool {
    let p = &node.policy;
    // A reboot flow under way stands on the node being out of service.
    let flowing = p.flow.as_ref().is_some_and(|f| f.step != FlowStep::Queued);
    !flowing
        && p.cordon
            .as_ref()
            .is_some_and(|c| c.by == Actor::Hale && !remediation::flows(&c.reason))
        && p.pending.iter().any(|a| {
            matches!(
                a.action,
                Action::Cordon {
                    by: Actor::Hale,
                    ..
                }
            )
        })
}

/// Whether a fault eviction queued on the node still has its fault: its cordon
/// stands whatever the score.
fn eviction_stands(node: &Node) -> bool {
    node.policy.pending.iter().any(|p| {
        matches!(&p.action, Action::Evict { fault_class, .. } if node.policy.evicted.contains(fault_class))
    })
}

/// How the reason of a cordon withdrawn before it was done begins.
pub(crate) const WITHDRAWN: &str = "withdrawn before it was done";

/// Withdraw the policy's cordon, not done yet, and what is queued behind it (its
/// passive drain, a termination, a fault eviction): the node stays in service,
/// and the
/// history says why (`NODE_UNCORDONED` by hale, the `NODE_CORDONED` before it
/// never having reached the cluster).
pub(super) fn withdraw(node: &mut Node, now: Time, why: &str) -> Event {
    // A fault eviction withdrawn is not done: its fault may evict again.
    for p in &node.policy.pending {
        if let Action::Evict { fault_class, .. } = &p.action {
            node.policy.evicted.remove(fault_class);
        }
    }
    node.policy.pending.retain(|p| {
        !matches!(
            p.action,
            Action::Cordon {
                by: Actor::Hale,
                ..
            } | Action::Drain { active: false, .. }
                | Action::Terminate
                | Action::Evict { .. }
        )
    });
    node.policy.cordon = None;
    node.status = queue::uncordoned_status(node);
    let reason = format!("{WITHDRAWN}: {why}");
    event(
        &node.id,
        now,
        EventKind::NodeUncordoned {
            by: Actor::Hale.as_str().into(),
            reason: reason.clone(),
        },
        with_reason("uncordoned by hale", &reason),
    )
}

/// hale's cordon taken over by an operator (through hale or outside it): theirs now,
/// for `reason`, and a termination decided but not yet performed is withdrawn — the
/// node is no longer hale's to replace.
fn taken_over(node: &mut Node, reason: &str) {
    if let Some(c) = node.policy.cordon.as_mut() {
        c.by = Actor::Operator;
        c.reason = reason.into();
    }
    node.policy
        .pending
        .retain(|p| p.action != Action::Terminate);
}

/// Why the orchestrator refused what the node waits to ask again, as ` (…)`.
/// Why a cordon of hale's stands refused ([`Guardrail::CordonRefused`]).
fn cordon_refused(node: &Node) -> String {
    format!(
        "the orchestrator refused to take it out of service{}; asked again in 10 minutes",
        refusal(node)
    )
}

fn refusal(node: &Node) -> String {
    node.policy
        .refusal
        .as_deref()
        .map(|why| format!(" ({why})"))
        .unwrap_or_default()
}

/// Back in service by an operator's uncordon, through hale or outside it: the
/// episode's conclusion over, automation suppressed from `now`, and what was queued
/// to take the node out (an eviction, a termination, a reboot flow) withdrawn. The
/// events say so. A fence goes on: it concerns the machine, not the node's service.
fn put_back(node: &mut Node, reason: &str, now: Time) -> Vec<Event> {
    node.policy.cordon = None;
    node.policy.conclusion = None;
    // What hale asked before and was refused is behind it: the operator's
    // uncordon holds automation back now (cordonSuppressionMinutes).
    node.policy.retry_after = None;
    node.policy.refusal = None;
    node.policy.uncordoned_at = Some(now);
    node.status = Status::Ready;
    keep_in_service(node);
    let mut events = vec![event(
        &node.id,
        now,
        EventKind::NodeUncordoned {
            by: Actor::Operator.as_str().into(),
            reason: reason.into(),
        },
        with_reason("uncordoned by operator", reason),
    )];
    if let Some(flow) = node.policy.flow.take() {
        events.push(event(
            &node.id,
            now,
            EventKind::RemediationFailed {
                action: REBOOT.into(),
                step: flow.step.as_str().into(),
                cancelled: true,
            },
            format!(
                "reboot flow cancelled at {}: an operator put the node back in service",
                flow.step.as_str()
            ),
        ));
    }
    events
}

/// What a node in service after all (an operator's uncordon, a cordon the
/// orchestrator refused) keeps of its queue: its scheduling gate, and a fence's
/// steps — a fence concerns the machine, not the node's service. What was queued
/// to take it out or move its work goes.
pub(super) fn keep_in_service(node: &mut Node) {
    let fencing = node.policy.fence.is_some();
    node.policy.pending.retain(|p| match p.action {
        Action::Gate { .. } => true,
        Action::Power {
            op: PowerOp::Off | PowerOp::On,
            ..
        }
        | Action::Release { .. } => fencing,
        _ => false,
    });
}

/// Whether the backtest leaves `event` out of both sides: the reboot flow's and
/// fencing's (they follow alerts asking for a reboot and the BMC, not the score),
/// and the halts an orchestrator's refusal made (the replay's orchestrator does
/// what it is asked).
pub(in crate::core) fn out_of_band(event: &Event) -> bool {
    match &event.kind {
        EventKind::PolicyHalted { guardrail, .. }
            if [
                "orchestrator",
                Guardrail::TerminationRejected.as_str(),
                Guardrail::CordonRefused.as_str(),
            ]
            .contains(&guardrail.as_str()) =>
        {
            true
        }
        EventKind::PolicyRecommended { action, .. } | EventKind::PolicyHalted { action, .. } => {
            action == remediation::REBOOT || action == fencing::FENCE
        }
        EventKind::NodeCordoned { reason, .. } | EventKind::NodeDrained { reason, .. } => {
            reason.starts_with(remediation::CORDON_REASON)
        }
        _ => false,
    }
}

/// A policy event about `action` on `node` (a reboot, a fence, a gate the
/// orchestrator refused), priced by its pool's `settings`: recommended (no
/// guardrail: observe), or halted by `guardrail`.
fn policy_verdict(
    node: &Node,
    settings: &Settings,
    now: Time,
    action: &str,
    guardrail: Option<&str>,
    message: String,
) -> Event {
    let (action, policy_mode) = (action.to_string(), mode_name(settings.mode).to_string());
    let (scored_by, score) = (settings.name.clone(), node.score.as_ref().map(|s| s.value));
    let kind = match guardrail {
        None => EventKind::PolicyRecommended {
            action,
            policy_mode,
            scored_by,
            score,
        },
        Some(g) => EventKind::PolicyHalted {
            action,
            guardrail: g.into(),
            policy_mode,
            scored_by,
            score,
        },
    };
    event(&node.id, now, kind, message)
}

fn event(id: &str, now: Time, kind: EventKind, message: String) -> Event {
    Event {
        node_id: id.into(),
        kind,
        occurred_at: now,
        message,
    }
}
