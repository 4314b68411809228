//! The policy (DESIGN §6): after every report, what to do about each node's score and
//! faults — recommend, cordon, drain, replace, gate, evict — inside the guardrails.
//! Pure: it changes the fleet's bookkeeping, records one event per conclusion and
//! leaves the orchestrator's part as pending actions, which the service performs
//! and reports back ([`Fleet::action_done`], [`Fleet::action_failed`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::health::{CoreError, Outcome};
use super::{BLIND_CONDITIONS, Event, EventKind, Fleet, Node, Origin, Status, Time};
use crate::config::{Loaded, Mode, Settings};

/// A rejected termination is not tried again sooner than this.
const TERMINATE_RETRY: Duration = Duration::from_secs(600);
/// The replacement budget's window.
const HOUR: Duration = Duration::from_secs(3600);
/// A recovery must hold this long before a new degradation is a new episode, so a
/// flapping condition records one conclusion, not one per flap.
pub const RECOVERY_HOLD: Duration = Duration::from_secs(15 * 60);

/// What hale keeps about a node's service state and the policy's view of it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePolicy {
    /// The conclusion of the last policy event, so a report that reaches the same
    /// conclusion records nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conclusion: Option<Conclusion>,
    /// Reports that carried a score (counted to 2): a first score never acts.
    #[serde(default)]
    pub scored_reports: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted_report: Option<Time>,
    /// Who took the node out of service, why and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cordon: Option<Cordon>,
    /// The last uncordon by an operator: automation leaves the node alone for
    /// `cordonSuppressionMinutes` after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncordoned_at: Option<Time>,
    /// New work kept off (the scheduling gate).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gated: bool,
    /// The orchestrator provisioned it (it may be terminated in `replace` mode).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub provisioned: bool,
    /// Allocations running on the node, as the orchestrator last said.
    #[serde(default)]
    pub allocations: u32,
    /// The orchestrator has counted the node's allocations since it was taken out
    /// of service: only then may `allocations` say it is empty.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub work_counted: bool,
    /// Fault classes whose eviction ran during their current episode.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub evicted: BTreeSet<String>,
    /// Actions decided and not yet confirmed done: written with the decision, so a
    /// crash between deciding and acting neither loses nor repeats one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<Pending>,
    /// The id of the last action decided for this node.
    #[serde(default)]
    pub last_action: u64,
    /// Since when the score has been at or above `drainBelow` while gated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ungate_since: Option<Time>,
    /// Since when the score has been at or above `cordonBelow` while a conclusion
    /// stood.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered_since: Option<Time>,
    /// A rejected termination waits until then before it is tried again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<Time>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cordon {
    pub by: Actor,
    pub reason: String,
    pub at: Time,
    /// A drain followed the cordon (passive unless an operator asked otherwise).
    #[serde(default)]
    pub drained: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Actor {
    Hale,
    Operator,
}

fn hale_actor() -> Actor {
    Actor::Hale
}

impl Actor {
    pub fn as_str(self) -> &'static str {
        match self {
            Actor::Hale => "hale",
            Actor::Operator => "operator",
        }
    }
}

/// What the policy concluded about a node; a policy event marks each change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Conclusion {
    /// `observe`: what enforcement would do.
    Recommended { action: Verdict },
    /// Done (for `replace`: drained and waiting for the node to empty, or terminating).
    Acted { action: Verdict, waiting: bool },
    /// A guardrail stops the action.
    Halted {
        action: Verdict,
        guardrail: Guardrail,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Cordon,
    Drain,
    Replace,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Cordon => "cordon",
            Verdict::Drain => "drain",
            Verdict::Replace => "replace",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Guardrail {
    /// Acting would take more than `maxUnavailablePercent` of the pool out of service.
    MaxUnavailable,
    /// An operator uncordoned the node less than `cordonSuppressionMinutes` ago.
    Suppressed,
    /// `replace` terminates only provisioned nodes.
    NotProvisioned,
    /// `replace` terminates only nodes hale itself took out of service.
    NotOurs,
    /// `maxReplacementsPerHour` of the pool were replaced in the last hour.
    ReplacementBudget,
    /// The orchestrator refused to terminate the node.
    TerminationRejected,
}

impl Guardrail {
    pub fn as_str(self) -> &'static str {
        match self {
            Guardrail::MaxUnavailable => "maxUnavailablePercent",
            Guardrail::Suppressed => "cordonSuppressionMinutes",
            Guardrail::NotProvisioned => "notProvisioned",
            Guardrail::NotOurs => "notTakenOutByHale",
            Guardrail::ReplacementBudget => "maxReplacementsPerHour",
            Guardrail::TerminationRejected => "terminationRejected",
        }
    }
}

/// An action decided and not yet confirmed done; `id` tells two equal ones apart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub id: u64,
    #[serde(flatten)]
    pub action: Action,
}

impl NodePolicy {
    /// Queue `action` for the orchestrator.
    pub fn push(&mut self, action: Action) {
        self.last_action += 1;
        self.pending.push(Pending {
            id: self.last_action,
            action,
        });
    }

    fn has(&self, action: &Action) -> bool {
        self.pending.iter().any(|p| p.action == *action)
    }
}

/// What the orchestrator is asked to do. Each is idempotent: doing it twice leaves
/// the node as doing it once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "action")]
pub enum Action {
    Cordon {
        /// Recorded on the node (`hale` or `operator`).
        #[serde(default = "hale_actor")]
        by: Actor,
        reason: String,
    },
    Uncordon,
    Drain {
        active: bool,
        reason: String,
    },
    Gate {
        on: bool,
    },
    /// Move the work that declared `on-node-fault`, fail the rest with `message`.
    Evict {
        fault_class: String,
        message: String,
        max_restarts: u32,
    },
    Terminate,
}

impl Action {
    /// Every value [`Action::name`] returns.
    pub const NAMES: [&'static str; 7] = [
        "cordon",
        "uncordon",
        "drain",
        "gate",
        "ungate",
        "evict",
        "terminate",
    ];

    pub fn name(&self) -> &'static str {
        match self {
            Action::Cordon { .. } => "cordon",
            Action::Uncordon => "uncordon",
            Action::Drain { .. } => "drain",
            Action::Gate { on: true } => "gate",
            Action::Gate { on: false } => "ungate",
            Action::Evict { .. } => "evict",
            Action::Terminate => "terminate",
        }
    }
}

/// What an orchestrator reports back about a finished action.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Done {
    /// Allocations stopped and run again elsewhere (active drain, eviction).
    pub moved: u32,
    /// Allocations failed (eviction of work that did not declare `on-node-fault`).
    pub failed: u32,
    /// The owners of the moved allocations (their restarts are counted).
    pub moved_owners: Vec<String>,
    /// Allocations a disruption budget kept on the node past the timeout.
    pub blocked: u32,
    /// Allocations left on the node afterwards, when the orchestrator counted them.
    pub remaining: Option<u32>,
}

/// What the guardrails count across nodes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ledger {
    /// Terminations per pool in the last hour (`maxReplacementsPerHour`).
    #[serde(default)]
    pub replacements: BTreeMap<String, Vec<Time>>,
    /// How often each workload owner was moved by a fault eviction
    /// (`maxEvictionRestarts`). Stored one row per owner, written when it changes,
    /// and forgotten `forgetAfter` after the owner's last move.
    #[serde(default, skip_serializing, deserialize_with = "legacy_moves")]
    pub moves: BTreeMap<String, Moves>,
}

/// The fault evictions that moved one workload owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Moves {
    pub count: u32,
    /// When it was last moved (unknown for counts an older store kept).
    pub last: Option<Time>,
}

/// Older stores kept the counts inside the ledger, without times.
fn legacy_moves<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, Moves>, D::Error> {
    let counts = BTreeMap::<String, u32>::deserialize(d)?;
    Ok(counts
        .into_iter()
        .map(|(owner, count)| (owner, Moves { count, last: None }))
        .collect())
}

impl Ledger {
    /// How often each owner was moved, as [`crate::orchestrator::plan_eviction`]
    /// reads it.
    pub fn move_counts(&self) -> BTreeMap<String, u32> {
        self.moves
            .iter()
            .map(|(o, m)| (o.clone(), m.count))
            .collect()
    }
}

/// Whether a node's view is incomplete: no policy acts on it, and none speaks of it.
pub fn blind(node: &Node) -> bool {
    BLIND_CONDITIONS
        .iter()
        .any(|c| node.conditions.contains_key(*c))
}

/// The failure message of work a fault eviction could not move (the first seed's);
/// the orchestrator adds how its work declares it may be moved instead
/// ([`crate::orchestrator::Orchestrator::restart_hint`]).
pub fn eviction_message(node: &str, fault: &str) -> String {
    format!("node {node}: {fault}; job failed and the node cordoned.")
}

/// The fault named to the work on a node: the description of its worst raised
/// condition in that class (never a blind condition, which names no fault).
fn fault_name(node: &Node, class: &str) -> Option<String> {
    node.conditions
        .iter()
        .filter(|(ctype, c)| c.fault_class == class && !BLIND_CONDITIONS.contains(&ctype.as_str()))
        .max_by_key(|(_, c)| c.severity)
        .map(|(ctype, _)| describe_fault(ctype))
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
}

/// Pool occupancy: nodes and nodes out of service (cordoned by anyone, not ready).
#[derive(Default)]
struct Pool {
    size: u32,
    out: u32,
    /// Terminations in the last hour, done or decided.
    replaced: u32,
}

impl Pool {
    /// Whether one more node out of service stays within `max_percent`.
    fn admits(&self, max_percent: u32) -> bool {
        u64::from(self.out + 1) * 100 <= u64::from(max_percent) * u64::from(self.size)
    }
}

pub(super) struct Policy<'a, 'o> {
    pub cfg: &'a Loaded,
    pub now: Time,
    pub out: &'o mut Outcome,
}

impl Policy<'_, '_> {
    /// Evaluate every node, worst score first, so a guardrail that stops part of a
    /// pool stops the healthiest of the candidates.
    pub fn evaluate(&mut self, fleet: &mut Fleet) {
        let mut pools: BTreeMap<&str, Pool> = BTreeMap::new();
        let mut order: Vec<(u8, String)> = Vec::new();
        for node in fleet.nodes.values() {
            let settings = self.cfg.settings_for(&node.labels);
            let pool = pools.entry(&settings.name).or_default();
            pool.size += 1;
            if node.status != Status::Ready || would_be_out(node, settings) {
                pool.out += 1;
            }
            if node.policy.has(&Action::Terminate) {
                pool.replaced += 1;
            }
            if let Some(score) = node.score.as_ref().map(|s| s.value)
                && concerns(node, settings, score)
            {
                order.push((score, node.id.clone()));
            }
        }
        // Owned keys: the nodes are changed below.
        let mut pools: BTreeMap<String, Pool> =
            pools.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        order.sort();
        let hour_ago = self.now - chrono::TimeDelta::from_std(HOUR).expect("an hour");
        for (name, spent) in fleet.ledger.replacements.iter_mut() {
            let before = spent.len();
            spent.retain(|t| *t > hour_ago);
            self.out.ledger |= spent.len() != before;
            if let Some(pool) = pools.get_mut(name) {
                pool.replaced += spent.len() as u32;
            }
        }
        let before = fleet.ledger.replacements.len();
        fleet
            .ledger
            .replacements
            .retain(|_, spent| !spent.is_empty());
        self.out.ledger |= fleet.ledger.replacements.len() != before;
        for (_, id) in order {
            let node = fleet.nodes.get_mut(&id).expect("listed above");
            let settings = self.cfg.settings_for(&node.labels);
            let pool = pools.get_mut(&settings.name).expect("counted above");
            self.node(node, settings, pool);
        }
    }

    fn node(&mut self, node: &mut Node, settings: &Settings, pool: &mut Pool) {
        if blind(node) {
            return;
        }
        let Some(score) = node.score.as_ref().map(|s| s.value) else {
            return;
        };
        if node.policy.scored_reports < 2
            && node.last_report.is_some()
            && node.policy.counted_report != node.last_report
        {
            node.policy.counted_report = node.last_report;
            node.policy.scored_reports = node.policy.scored_reports.saturating_add(1).min(2);
            self.out.dirty.insert(node.id.clone());
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
                    score,
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
            (_, conclusion) => conclusion,
        };
        let replaced = pool.replaced;
        self.conclude(node, settings, score, replaced, conclusion);
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
        if node.status == Status::Ready {
            if !pool.admits(settings.max_unavailable_percent) {
                return Some(Guardrail::MaxUnavailable);
            }
            pool.out += 1;
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
            if let Some(guardrail) = self.admit(node, settings, pool) {
                return halted(guardrail);
            }
            let reason = format!("score below {}", threshold(settings, verdict));
            take_out(node, Actor::Hale, &reason, self.now);
            self.record_cordon(node, Actor::Hale, &reason);
        }
        let cordon = node.policy.cordon.as_mut().expect("cordoned above");
        if verdict >= Verdict::Drain && !cordon.drained {
            // Automated drains are passive: running work is left to finish.
            cordon.drained = true;
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
        if node.policy.has(&Action::Terminate) {
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
        // A retry after a refusal stays halted until the termination is done.
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
        let raised: BTreeSet<String> = node
            .conditions
            .iter()
            .filter(|(ctype, _)| !BLIND_CONDITIONS.contains(&ctype.as_str()))
            .map(|(_, c)| c.fault_class.clone())
            .collect();
        let before = node.policy.evicted.len();
        node.policy.evicted.retain(|class| raised.contains(class));
        if node.policy.evicted.len() != before {
            self.out.dirty.insert(node.id.clone());
        }
        for class in &settings.evict_on_fault_classes {
            if !raised.contains(class) || node.policy.evicted.contains(class) {
                continue;
            }
            let Some(fault) = fault_name(node, class) else {
                continue;
            };
            if node.policy.cordon.is_none() {
                if let Some(guardrail) = self.admit(node, settings, pool) {
                    return Some(Conclusion::Halted {
                        action: Verdict::Drain,
                        guardrail,
                    });
                }
                let reason = format!("fault eviction: {class}");
                take_out(node, Actor::Hale, &reason, self.now);
                if let Some(cordon) = node.policy.cordon.as_mut() {
                    cordon.drained = true;
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
        spent: u32,
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
                    score,
                },
                format!(
                    "would {}: score {score} (observe mode changes nothing)",
                    action.as_str()
                ),
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
                    None => format!("{}: score {score}", action.as_str()),
                };
                (
                    EventKind::PolicyActed {
                        action: action.as_str().into(),
                        policy_mode: mode,
                        scored_by,
                        score,
                        waiting_on,
                    },
                    message,
                )
            }
            Conclusion::Halted { action, guardrail } => {
                let why = match guardrail {
                    Guardrail::ReplacementBudget => format!(
                        "{spent} node(s) of pool {} replaced in the last hour \
                         (maxReplacementsPerHour {})",
                        settings.name, settings.max_replacements_per_hour
                    ),
                    Guardrail::MaxUnavailable => format!(
                        "it would take more than {}% of pool {} out of service",
                        settings.max_unavailable_percent, settings.name
                    ),
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
                        "the orchestrator refused to terminate it".into()
                    }
                };
                let message = if settings.mode == Mode::Observe {
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
                        score,
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

/// A node as the orchestrator sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    pub id: String,
    /// The orchestrator's id of the machine (a Kubernetes Node's uid), where it has
    /// one: a new one under a known name is a new machine.
    pub uid: Option<String>,
    pub hostname: Option<String>,
    pub status: Status,
    pub labels: BTreeMap<String, String>,
    /// Owned by a provisioner (a Cluster API Machine, a Karpenter NodeClaim): it may
    /// be terminated and replaced.
    pub provisioned: bool,
    /// Allocations running on it, where the orchestrator counted them (Kubernetes
    /// counts only on cordoned nodes, what a replacement waits for).
    pub allocations: Option<u32>,
    /// Who cordoned it and why, where the orchestrator keeps hale's record of that
    /// on the node (a restarted or newly elected hale reads it back); `None`: a
    /// cordon made outside hale.
    pub cordoned_by: Option<(Actor, String)>,
    /// Whether the scheduling gate is on, where the orchestrator shows it.
    pub gated: Option<bool>,
    /// The fault class of the eviction the orchestrator shows done on the node in
    /// its current time out of service.
    pub evicted: Option<String>,
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

/// The result of a manual drain of every node.
#[derive(Debug, Default)]
pub struct DrainAll {
    pub outcome: Outcome,
    /// Nodes this drain took out of service (ready ones only).
    pub drained: Vec<String>,
}

impl Fleet {
    fn operated(&mut self, id: &str) -> Result<&mut Node, CoreError> {
        self.nodes
            .get_mut(id)
            .ok_or_else(|| CoreError::UnknownNode(id.into()))
    }

    /// `hale node cordon`: no new work; running work is left alone.
    pub fn cordon(&mut self, now: Time, id: &str, reason: &str) -> Result<Outcome, CoreError> {
        let node = self.operated(id)?;
        let mut out = Outcome::default();
        let owner = node.policy.cordon.as_ref().map(|c| c.by);
        if owner != Some(Actor::Operator) {
            match &mut node.policy.cordon {
                // Taken over from hale: an operator's node is never replaced, and
                // the node itself says so (hale's record on it would not).
                Some(c) => {
                    c.by = Actor::Operator;
                    c.reason = reason.into();
                    node.policy.push(Action::Cordon {
                        by: Actor::Operator,
                        reason: reason.into(),
                    });
                }
                None => take_out(node, Actor::Operator, reason, now),
            }
            out.events.push(event(
                id,
                now,
                EventKind::NodeCordoned {
                    by: Actor::Operator.as_str().into(),
                    reason: reason.into(),
                },
                format!("cordoned by operator: {reason}"),
            ));
            out.dirty.insert(id.into());
        }
        Ok(out)
    }

    /// `hale node uncordon`: back in service. Automation then leaves the node alone
    /// for `cordonSuppressionMinutes`: the operator overruled it.
    pub fn uncordon(&mut self, now: Time, id: &str, reason: &str) -> Result<Outcome, CoreError> {
        let node = self.operated(id)?;
        let mut out = Outcome::default();
        if node.policy.cordon.is_some() || node.status == Status::Cordoned {
            node.policy.cordon = None;
            node.policy.conclusion = None;
            node.policy.uncordoned_at = Some(now);
            node.status = Status::Ready;
            // What was queued to take the node out is withdrawn with it.
            node.policy
                .pending
                .retain(|p| matches!(p.action, Action::Gate { .. }));
            node.policy.push(Action::Uncordon);
            out.events.push(event(
                id,
                now,
                EventKind::NodeUncordoned {
                    by: Actor::Operator.as_str().into(),
                    reason: reason.into(),
                },
                format!("uncordoned by operator: {reason}"),
            ));
            out.dirty.insert(id.into());
        }
        Ok(out)
    }

    /// `hale node drain`: cordon, then leave running work to finish (passive) or
    /// move it (active). Only a ready or cordoned node can be drained.
    pub fn drain(
        &mut self,
        now: Time,
        id: &str,
        active: bool,
        reason: &str,
    ) -> Result<Outcome, CoreError> {
        let node = self.operated(id)?;
        if !matches!(node.status, Status::Ready | Status::Cordoned) {
            return Err(CoreError::NotDrainable {
                node: id.into(),
                status: status_name(node.status),
            });
        }
        let mut out = Outcome::default();
        if node.policy.cordon.is_none() {
            take_out(node, Actor::Operator, reason, now);
            out.events.push(event(
                id,
                now,
                EventKind::NodeCordoned {
                    by: Actor::Operator.as_str().into(),
                    reason: reason.into(),
                },
                format!("cordoned by operator: {reason}"),
            ));
        }
        let cordon = node.policy.cordon.as_mut().expect("taken out above");
        cordon.drained = true;
        node.policy.push(Action::Drain {
            active,
            reason: reason.into(),
        });
        if !active {
            out.events.push(event(
                id,
                now,
                EventKind::NodeDrained {
                    by: Actor::Operator.as_str().into(),
                    active: false,
                    reason: reason.into(),
                    moved: 0,
                    blocked: 0,
                },
                format!("drained (passive) by operator: {reason}"),
            ));
        }
        out.dirty.insert(id.into());
        Ok(out)
    }

    /// `hale node drain --all`: every ready node; the rest are skipped, so the count
    /// is what this took out of service.
    pub fn drain_all(&mut self, now: Time, active: bool, reason: &str) -> DrainAll {
        let ready: Vec<String> = self
            .nodes
            .values()
            .filter(|n| n.status == Status::Ready)
            .map(|n| n.id.clone())
            .collect();
        let mut all = DrainAll::default();
        for id in ready {
            let out = self
                .drain(now, &id, active, reason)
                .expect("ready nodes drain");
            all.outcome.absorb(out);
            all.drained.push(id);
        }
        all
    }

    /// The orchestrator's inventory: labels, provisioning, running work and status.
    /// A cordon or uncordon made outside hale (kubectl) is recorded as the
    /// operator's, and an uncordon starts the suppression window.
    ///
    /// The inventory is the whole fleet the orchestrator runs: a node it no longer
    /// lists has left the cluster, and a name it lists with a new uid is a new
    /// machine. Either way the old record is retired (its history stays) and its
    /// queued actions go with it.
    pub fn observe(&mut self, now: Time, observed: &[Observed]) -> Outcome {
        let mut out = Outcome::default();
        let listed: BTreeSet<&str> = observed.iter().map(|o| o.id.as_str()).collect();
        let gone: Vec<String> = self
            .nodes
            .values()
            // A node hale is replacing leaves the inventory first; its termination
            // is recorded as such when done.
            .filter(|n| {
                n.known_from == Origin::Orchestrator
                    && !listed.contains(n.id.as_str())
                    && !n.policy.has(&Action::Terminate)
            })
            .map(|n| n.id.clone())
            .collect();
        for id in gone {
            self.retire(&mut out, now, &id, "it is no longer in the cluster".into());
        }
        for o in observed {
            let renewed = self
                .nodes
                .get(&o.id)
                .and_then(|n| n.uid.as_deref())
                .zip(o.uid.as_deref())
                .filter(|(was, is)| was != is)
                .map(|(was, is)| {
                    format!("its name now belongs to a new machine (uid {is}, was {was})")
                });
            if let Some(why) = renewed {
                self.retire(&mut out, now, &o.id, why);
            }
            let node = self.nodes.entry(o.id.clone()).or_insert_with(|| {
                let mut n = Node::new(&o.id);
                n.known_since = Some(now);
                n
            });
            if node.known_from != Origin::Orchestrator || node.uid != o.uid {
                node.known_from = Origin::Orchestrator;
                node.uid = o.uid.clone();
                out.dirty.insert(o.id.clone());
            }
            let before = (
                node.labels.clone(),
                node.hostname.clone(),
                node.policy.provisioned,
                node.policy.allocations,
                node.status,
                node.policy.pending.len(),
            );
            node.labels = o.labels.clone();
            node.hostname = o.hostname.clone();
            node.policy.provisioned = o.provisioned;
            if let Some(n) = o.allocations {
                node.policy.allocations = n;
                if o.status == Status::Cordoned && node.policy.cordon.is_some() {
                    node.policy.work_counted = true;
                }
            }
            confirm_done(&mut node.policy.pending, o);
            let queued = |node: &Node, f: fn(&Action) -> bool| {
                node.policy.pending.iter().any(|p| f(&p.action))
            };
            match o.status {
                Status::Cordoned
                    if node.policy.cordon.is_none()
                        && !queued(node, |a| matches!(a, Action::Uncordon)) =>
                {
                    let (by, reason) = o
                        .cordoned_by
                        .clone()
                        .unwrap_or((Actor::Operator, "cordoned outside hale".into()));
                    node.status = Status::Cordoned;
                    node.policy.cordon = Some(Cordon {
                        by,
                        reason: reason.clone(),
                        at: now,
                        drained: false,
                    });
                    out.events.push(event(
                        &o.id,
                        now,
                        EventKind::NodeCordoned {
                            by: by.as_str().into(),
                            reason: reason.clone(),
                        },
                        format!("cordoned by {}: {reason}", by.as_str()),
                    ));
                }
                Status::Ready
                    if node.policy.cordon.is_some()
                        && !queued(node, |a| {
                            matches!(a, Action::Cordon { .. } | Action::Drain { .. })
                        }) =>
                {
                    let reason = "uncordoned outside hale";
                    node.policy.cordon = None;
                    node.policy.conclusion = None;
                    node.policy.uncordoned_at = Some(now);
                    node.status = Status::Ready;
                    // As with hale's own uncordon: what was queued to take the node
                    // out (an eviction, a termination) is withdrawn with it.
                    node.policy
                        .pending
                        .retain(|p| matches!(p.action, Action::Gate { .. }));
                    out.events.push(event(
                        &o.id,
                        now,
                        EventKind::NodeUncordoned {
                            by: Actor::Operator.as_str().into(),
                            reason: reason.into(),
                        },
                        format!("uncordoned by operator: {reason}"),
                    ));
                }
                Status::NotReady | Status::Offline => node.status = o.status,
                Status::Ready if node.status != Status::Cordoned => node.status = Status::Ready,
                _ => {}
            }
            let after = (
                node.labels.clone(),
                node.hostname.clone(),
                node.policy.provisioned,
                node.policy.allocations,
                node.status,
                node.policy.pending.len(),
            );
            if before != after || !out.events.is_empty() {
                out.dirty.insert(o.id.clone());
            }
        }
        out
    }

    /// Forget node `id` for the orchestrator's reason `why`; its events stay.
    fn retire(&mut self, out: &mut Outcome, now: Time, id: &str, why: String) {
        if self.nodes.remove(id).is_none() {
            return;
        }
        out.dirty.remove(id);
        out.touched.remove(id);
        out.removed.push(id.into());
        out.events.push(event(
            id,
            now,
            EventKind::NodeDecommissioned {
                by: "orchestrator".into(),
            },
            format!("decommissioned: {why}"),
        ));
    }

    /// Actions decided and not yet confirmed, by node, oldest first.
    pub fn pending(&self) -> Vec<(String, Pending)> {
        self.nodes
            .values()
            .flat_map(|n| n.policy.pending.iter().map(|p| (n.id.clone(), p.clone())))
            .collect()
    }

    /// The next action to perform on node `id`, if any is still wanted. A
    /// termination is not performed on a node gone blind meanwhile.
    pub fn next_action(&self, id: &str) -> Option<Pending> {
        let node = self.nodes.get(id)?;
        let next = node.policy.pending.first()?;
        if next.action == Action::Terminate && blind(node) {
            return None;
        }
        Some(next.clone())
    }

    /// The orchestrator did the pending action `done_action` on node `id`. Work
    /// moved off the node is recorded even when the action was withdrawn while it
    /// ran (an uncordon meanwhile): it happened.
    pub fn action_done(
        &mut self,
        cfg: &Loaded,
        now: Time,
        id: &str,
        done_action: &Pending,
        done: &Done,
    ) -> Outcome {
        let mut out = Outcome::default();
        let Some(node) = self.nodes.get_mut(id) else {
            return out;
        };
        let action = match node
            .policy
            .pending
            .iter()
            .position(|p| p.id == done_action.id)
        {
            Some(at) => node.policy.pending.remove(at).action,
            None if matches!(
                done_action.action,
                Action::Evict { .. } | Action::Drain { active: true, .. }
            ) =>
            {
                done_action.action.clone()
            }
            None => return out,
        };
        out.dirty.insert(id.into());
        if let Some(n) = done.remaining
            && matches!(action, Action::Cordon { .. } | Action::Drain { .. })
            && node.policy.cordon.is_some()
        {
            node.policy.allocations = n;
            node.policy.work_counted = true;
        }
        match &action {
            Action::Drain {
                active: true,
                reason,
            } => out.events.push(event(
                id,
                now,
                EventKind::NodeDrained {
                    by: Actor::Operator.as_str().into(),
                    active: true,
                    reason: reason.clone(),
                    moved: done.moved,
                    blocked: done.blocked,
                },
                format!(
                    "drained (active) by operator: {reason}; {} allocation(s) requeued{}",
                    done.moved,
                    held(done.blocked)
                ),
            )),
            Action::Evict { fault_class, .. } => {
                for owner in &done.moved_owners {
                    let moves = self.ledger.moves.entry(owner.clone()).or_insert(Moves {
                        count: 0,
                        last: None,
                    });
                    moves.count += 1;
                    moves.last = Some(now);
                    out.moved.insert(owner.clone());
                }
                out.events.push(event(
                    id,
                    now,
                    EventKind::NodeEvicted {
                        fault_class: fault_class.clone(),
                        moved: done.moved,
                        failed: done.failed,
                        blocked: done.blocked,
                    },
                    format!(
                        "evicted on {fault_class}: {} allocation(s) moved, {} failed{}",
                        done.moved,
                        done.failed,
                        held(done.blocked)
                    ),
                ));
            }
            Action::Terminate => {
                let pool = cfg.settings_for(&node.labels).name.clone();
                self.ledger.replacements.entry(pool).or_default().push(now);
                out.ledger = true;
                self.nodes.remove(id);
                out.dirty.remove(id);
                out.events.push(event(
                    id,
                    now,
                    EventKind::NodeReplaced {},
                    "terminated: the pool provisions a replacement when work needs it".into(),
                ));
                out.removed.push(id.into());
            }
            _ => {}
        }
        out
    }

    /// The orchestrator refused the pending action `action_id` for good (transient
    /// failures are retried by the service). It is dropped; a refused termination is
    /// not counted against the budget and is tried again after `TERMINATE_RETRY`.
    pub fn action_failed(&mut self, cfg: &Loaded, now: Time, id: &str, action_id: u64) -> Outcome {
        let mut out = Outcome::default();
        let Some(node) = self.nodes.get_mut(id) else {
            return out;
        };
        let Some(at) = node.policy.pending.iter().position(|p| p.id == action_id) else {
            return out;
        };
        let action = node.policy.pending.remove(at).action;
        out.dirty.insert(id.into());
        if matches!(action, Action::Cordon { .. }) {
            // Not out of service after all: the books say what the cluster says,
            // and the next report decides again (a refusal is not an uncordon).
            node.policy.cordon = None;
            node.policy.conclusion = None;
            node.status = Status::Ready;
            node.policy
                .pending
                .retain(|p| matches!(p.action, Action::Gate { .. }));
            return out;
        }
        if action != Action::Terminate {
            return out;
        }
        node.policy.retry_after =
            Some(now + chrono::TimeDelta::from_std(TERMINATE_RETRY).expect("minutes"));
        if blind(node) {
            return out;
        }
        let settings = cfg.settings_for(&node.labels);
        let score = node.score.as_ref().map_or(100, |s| s.value);
        Policy {
            cfg,
            now,
            out: &mut out,
        }
        .conclude(
            node,
            settings,
            score,
            0,
            Conclusion::Halted {
                action: Verdict::Replace,
                guardrail: Guardrail::TerminationRejected,
            },
        );
        out
    }
}

/// Drop the pending actions the orchestrator shows done: another replica did them
/// (this one was following), or they were done before a crash was recorded. Each
/// family (cordon/uncordon/passive drain; the gate) is judged by its last queued
/// entry — the state the node must end in — and by the last cordon or uncordon in
/// it, so a cordon by someone else does not stand for hale's record of who and why.
fn confirm_done(pending: &mut Vec<Pending>, o: &Observed) {
    let cordoned = o.status == Status::Cordoned;
    let shown = |a: &Action| match a {
        Action::Cordon { by, reason } => {
            cordoned
                && o.cordoned_by
                    .as_ref()
                    .is_some_and(|(b, r)| b == by && r == reason)
        }
        Action::Drain { active: false, .. } => cordoned,
        Action::Uncordon => !cordoned,
        Action::Gate { on } => o.gated == Some(*on),
        Action::Evict { fault_class, .. } => o.evicted.as_deref() == Some(fault_class.as_str()),
        _ => false,
    };
    let cordoning = |a: &Action| {
        matches!(
            a,
            Action::Cordon { .. } | Action::Uncordon | Action::Drain { active: false, .. }
        )
    };
    let families: [fn(&Action) -> bool; 3] = [
        cordoning,
        |a| matches!(a, Action::Gate { .. }),
        |a| matches!(a, Action::Evict { .. }),
    ];
    for family in families {
        let last = pending.iter().rev().find(|p| family(&p.action));
        let last_cordon = pending.iter().rev().find(|p| {
            matches!(p.action, Action::Cordon { .. } | Action::Uncordon) && family(&p.action)
        });
        if last.is_some_and(|p| shown(&p.action)) && last_cordon.is_none_or(|p| shown(&p.action)) {
            pending.retain(|p| !family(&p.action));
        }
    }
}

/// The part of a drain's or eviction's message about what stayed behind.
fn held(blocked: u32) -> String {
    if blocked == 0 {
        return String::new();
    }
    format!("; {blocked} held on the node by a disruption budget past the timeout")
}

/// Out of service by `by`: cordoned, and the orchestrator asked to cordon.
fn take_out(node: &mut Node, by: Actor, reason: &str, now: Time) {
    node.status = Status::Cordoned;
    node.policy.work_counted = false;
    node.policy.cordon = Some(Cordon {
        by,
        reason: reason.into(),
        at: now,
        drained: false,
    });
    node.policy.push(Action::Cordon {
        by,
        reason: reason.into(),
    });
}

fn event(id: &str, now: Time, kind: EventKind, message: String) -> Event {
    Event {
        node_id: id.into(),
        kind,
        occurred_at: now,
        message,
    }
}
