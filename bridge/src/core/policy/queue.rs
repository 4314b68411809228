//! The action queue: what the orchestrator is asked to do, decided and persisted
//! before it is performed, performed in order, and recorded done or refused.

use serde::{Deserialize, Serialize};

use super::{Actor, Conclusion, Guardrail, Moves, Policy, TERMINATE_RETRY, Verdict, blind, event};
use crate::core::events::with_reason;
use crate::core::outcome::Outcome;
use crate::core::settings::{CoreSettings, Mode};
use crate::core::{EventKind, Fleet, Node, Status, Time};

/// An action decided and not yet confirmed done; `id` tells two equal ones apart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub id: u64,
    #[serde(flatten)]
    pub action: Action,
}

/// What the orchestrator is asked to do. Each is idempotent: doing it twice leaves
/// the node as doing it once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "action")]
pub enum Action {
    Cordon {
        /// Recorded on the node (`hale` or `operator`).
        #[serde(default = "super::state::hale_actor")]
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
    /// Through the node's BMC (the reboot flow, fencing); without one, a reboot is
    /// the orchestrator's own where it has one.
    Power {
        op: PowerOp,
        force: bool,
    },
    /// Let the orchestrator release the work of a node that is off (`on`: the
    /// Kubernetes `out-of-service` taint), or stop releasing it.
    Release {
        on: bool,
    },
}

/// What a [`Action::Power`] asks of the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PowerOp {
    /// Off (graceful unless forced, forced after the BMC's graceful timeout),
    /// confirmed, then on, confirmed. Sent at most once per flow.
    Reboot,
    Off,
    On,
}

impl Action {
    /// Every value [`Action::name`] returns.
    pub const NAMES: [&'static str; 12] = [
        "cordon",
        "uncordon",
        "drain",
        "gate",
        "ungate",
        "evict",
        "terminate",
        "reboot",
        "power_off",
        "power_on",
        "release",
        "unrelease",
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
            Action::Power {
                op: PowerOp::Reboot,
                ..
            } => "reboot",
            Action::Power {
                op: PowerOp::Off, ..
            } => "power_off",
            Action::Power {
                op: PowerOp::On, ..
            } => "power_on",
            Action::Release { on: true } => "release",
            Action::Release { on: false } => "unrelease",
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
    /// Allocations told to stop that were still stopping (their grace period
    /// running) when the orchestrator stopped waiting for them.
    pub stopping: u32,
    /// Allocations left on the node afterwards, when the orchestrator counted them.
    pub remaining: Option<u32>,
    /// A power action done through the node's BMC (else the orchestrator's own
    /// reboot): what the flow's history says did it.
    pub by_bmc: bool,
    /// A power-on the BMC confirmed on a machine it read off: the machine was off
    /// and is on again (a reboot a stopped process sent, taken up).
    pub from_off: bool,
    /// A power-off the BMC found done already (the machine read Off, nothing
    /// sent): someone else switched it off.
    pub found_off: bool,
}

impl Fleet {
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
        // A reboot sent by a process that stopped before it heard back is never
        // sent again (one this process recorded is its own: performed once, or
        // asked again when the store did not take the record and it was not sent).
        let started = self.trust.watching_since;
        if matches!(
            next.action,
            Action::Power {
                op: PowerOp::Reboot,
                ..
            }
        ) && node
            .policy
            .flow
            .as_ref()
            .and_then(|f| f.sent)
            .is_some_and(|t| t < started)
        {
            return None;
        }
        Some(next.clone())
    }

    /// [`Fleet::next_action`], taken to be performed now: under way until
    /// [`Fleet::end_action`] (or its outcome recorded).
    pub fn take_action(&mut self, id: &str) -> Option<Pending> {
        let next = self.next_action(id)?;
        self.under_way.insert(id.into(), next.clone());
        Some(next)
    }

    /// The try of action `action_id` on node `id` is over, whatever came of it.
    pub fn end_action(&mut self, id: &str, action_id: u64) {
        if self.under_way.get(id).is_some_and(|p| p.id == action_id) {
            self.under_way.remove(id);
        }
    }

    /// The orchestrator did the pending action `done_action` on node `id`. Work
    /// moved off the node is recorded even when the action was withdrawn while it
    /// ran (an uncordon meanwhile): it happened.
    pub fn action_done(
        &mut self,
        cfg: &CoreSettings,
        now: Time,
        id: &str,
        done_action: &Pending,
        done: &Done,
    ) -> Outcome {
        self.end_action(id, done_action.id);
        let mut out = Outcome::default();
        // The occupancy kept between whole passes is counted afresh after what
        // can change it; a gate (new work kept off) leaves every node where it
        // was — and a fleet gated at once must not make each delivery meanwhile
        // a pass over every node.
        if !matches!(done_action.action, Action::Gate { .. }) {
            self.pools = None;
        }
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
            // Withdrawn while under way and landed all the same: what it did is
            // recorded (a termination's machine is gone, and counted).
            None if matches!(
                done_action.action,
                Action::Evict { .. } | Action::Drain { active: true, .. } | Action::Terminate
            ) =>
            {
                done_action.action.clone()
            }
            // A cordon under way when an operator put the node back (it withdrew the
            // cordon, and the node then showed in service, which took the uncordon
            // queued after it for done): landed now, it is undone.
            None if matches!(
                done_action.action,
                Action::Cordon { .. } | Action::Drain { active: false, .. }
            ) && node.policy.cordon.is_none()
                && !node.policy.pending.iter().any(|p| {
                    matches!(
                        p.action,
                        Action::Cordon { .. } | Action::Uncordon | Action::Drain { .. }
                    )
                }) =>
            {
                node.policy.push(Action::Uncordon);
                out.dirty.insert(id.into());
                return out;
            }
            // The power-off of a fence withdrawn while it was under way (the node
            // had reported again): landed now, the machine is powered on again.
            None if node.policy.fence_withdrawn == Some(done_action.id) => {
                power_on_after_withdrawn(node, now, "landed", &mut out);
                return out;
            }
            None => return out,
        };
        out.dirty.insert(id.into());
        // Drained: one refused before it is behind it.
        if let (Action::Drain { .. }, Some(c)) = (&action, node.policy.cordon.as_mut()) {
            c.drain();
        }
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
            } => {
                // An active drain is an operator's, or a reboot flow's (its reason
                // says so: an operator's drain during a flow is the operator's).
                let by = if super::remediation::flows(reason) {
                    Actor::Hale
                } else {
                    Actor::Operator
                };
                out.events.push(event(
                    id,
                    now,
                    EventKind::NodeDrained {
                        by: by.as_str().into(),
                        active: true,
                        reason: reason.clone(),
                        moved: done.moved,
                        blocked: done.blocked,
                        stopping: done.stopping,
                        failed: done.failed,
                    },
                    format!(
                        "{}; {} allocation(s) requeued{}{}{}",
                        with_reason(&format!("drained (active) by {}", by.as_str()), reason),
                        done.moved,
                        ended(done.failed),
                        held(done.blocked),
                        still_stopping(done.stopping)
                    ),
                ))
            }
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
                self.ledger.replaced.insert(id.into(), now);
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
        self.flow_step_done(cfg, now, id, &action, done, &mut out);
        out
    }

    /// The pending action `action_id` was taken and never seen done: a fence's
    /// power-off stays counted as one that may have happened
    /// (`fence_step_unconfirmed`); any other action fails as refused.
    pub fn action_unconfirmed(
        &mut self,
        cfg: &CoreSettings,
        now: Time,
        id: &str,
        action_id: u64,
        why: &str,
    ) -> Outcome {
        self.end_action(id, action_id);
        let mut out = Outcome::default();
        if self.fence_step_unconfirmed(now, id, action_id, why, &mut out) {
            return out;
        }
        // The power-off of a fence withdrawn while it was under way: it may have
        // landed, so the machine is powered on (a machine on stays on).
        if let Some(node) = self.nodes.get_mut(id)
            && node.policy.fence_withdrawn == Some(action_id)
        {
            power_on_after_withdrawn(node, now, "may have landed", &mut out);
            return out;
        }
        self.action_failed(cfg, now, id, action_id, why)
    }

    /// Pools in `observe` (a reload set it, a process started or took over with
    /// it, or the inventory's labels moved a node into one): what the score policy
    /// queued for their nodes and has not done —
    /// its cordon and the passive drain or termination behind it — is withdrawn,
    /// as observe changes nothing from the moment it is set. What runs in every
    /// mode goes on: fault evictions and their cordon, the gate, an operator's
    /// actions, and reboot flows and fences. A cordon withdrawn before it was done
    /// leaves the node in service; one done stays (automation never uncordons).
    /// Each node says so (`POLICY_HALTED`, guardrail `observe`), and observe's own
    /// recommendation follows.
    pub fn observe_withdraws(&mut self, cfg: &CoreSettings, now: Time) -> Outcome {
        let mut out = Outcome::default();
        let flows = super::remediation::flows;
        let automated = |a: &Action| match a {
            Action::Cordon {
                by: Actor::Hale,
                reason,
            }
            | Action::Drain {
                active: false,
                reason,
            } => !flows(reason),
            Action::Terminate => true,
            _ => false,
        };
        for node in self.nodes.values_mut() {
            // Looked at first: nearly every node has nothing queued.
            if !node.policy.pending.iter().any(|p| automated(&p.action)) {
                continue;
            }
            let settings = cfg.settings_for(&node.labels);
            // The score policy's own cordon: not a flow's, nor one a fault
            // eviction made or stands behind (evictions run in every mode).
            let policys = node
                .policy
                .cordon
                .as_ref()
                .is_some_and(|c| c.by == Actor::Hale && !flows(&c.reason))
                && node.policy.evicted.is_empty()
                && !node
                    .policy
                    .pending
                    .iter()
                    .any(|p| matches!(p.action, Action::Evict { .. }));
            let flowing = node
                .policy
                .flow
                .as_ref()
                .is_some_and(|f| f.step != super::FlowStep::Queued);
            if settings.mode != Mode::Observe || !policys || flowing {
                continue;
            }
            let undone = node
                .policy
                .pending
                .iter()
                .any(|p| matches!(p.action, Action::Cordon { .. }));
            let mut what: Vec<&'static str> = Vec::new();
            for p in node.policy.pending.iter().filter(|p| automated(&p.action)) {
                if !what.contains(&p.action.name()) {
                    what.push(p.action.name());
                }
            }
            node.policy.pending.retain(|p| !automated(&p.action));
            node.policy.conclusion = None;
            if undone {
                node.policy.cordon = None;
                node.status = uncordoned_status(node);
            }
            out.dirty.insert(node.id.clone());
            out.events.push(super::policy_verdict(
                node,
                settings,
                now,
                what[0],
                Some("observe"),
                format!(
                    "withdrawn before it was done ({}): pool {} is in observe now, which changes nothing; the node {}",
                    what.join(", "),
                    settings.name,
                    if undone {
                        "stays in service"
                    } else {
                        "stays cordoned (automation never uncordons)"
                    }
                ),
            ));
        }
        if !out.dirty.is_empty() {
            self.pools = None;
        }
        out
    }

    /// Pools past `maxUnavailablePercent` with cordons of the score policy's still
    /// queued (an operator's cordons or nodes gone not ready since they were
    /// decided, a lower limit reloaded, an orchestrator that did not answer
    /// meanwhile): those are withdrawn, the healthiest first, until what is out
    /// — queued cordons counted — is within the limit again; none under way (it
    /// may land). Called wherever the counts can grow: after the inventory is
    /// taken in, a reload, and every whole pass — not at a start or take-over,
    /// before an inventory has said which of them the last process performed.
    pub fn limit_withdraws(&mut self, cfg: &CoreSettings, now: Time) -> Outcome {
        let mut out = Outcome::default();
        let queued = |n: &Node| !n.policy.pending.is_empty() && super::unperformed(n);
        if !self.nodes.values().any(|n| queued(n)) {
            return out;
        }
        let nodes = self.nodes.values().map(Box::as_ref);
        let (mut pools, _) = super::count(cfg, now, &self.ledger, nodes);
        let mut candidates: Vec<(u8, String)> = self
            .nodes
            .values()
            .filter(|n| queued(n) && !self.under_way.contains_key(&n.id))
            .map(|n| (n.score.as_ref().map_or(100, |s| s.value), n.id.clone()))
            .collect();
        // Healthiest first, the last in id order first where scores tie: the
        // worst keep their place, as the pass that decided them took them first.
        candidates.sort_by(|a, b| b.cmp(a));
        for (_, id) in candidates {
            let node = self.nodes.get_mut(&id).expect("listed above");
            let settings = cfg.settings_for(&node.labels);
            let Some(pool) = pools.get_mut(settings.name.as_str()) else {
                continue;
            };
            let max = u64::from(settings.max_unavailable_percent);
            if u64::from(pool.out) * 100 <= max * u64::from(pool.size) {
                continue;
            }
            let why = format!(
                "pool {} has {} of its {} node(s) out of service with it (maxUnavailablePercent {})",
                settings.name, pool.out, pool.size, settings.max_unavailable_percent
            );
            out.events.push(super::withdraw(node, now, &why));
            // Not ready, fenced or released, it is out all the same.
            if !super::counted_out(node, settings) {
                pool.out -= 1;
            }
            let action = match node.policy.conclusion {
                Some(Conclusion::Acted { action, .. }) => action,
                _ => super::Verdict::Cordon,
            };
            node.policy.conclusion = Some(Conclusion::Halted {
                action,
                guardrail: Guardrail::MaxUnavailable,
            });
            out.events.push(super::policy_verdict(
                node,
                settings,
                now,
                action.as_str(),
                Some(Guardrail::MaxUnavailable.as_str()),
                format!("{} halted: {}", action.as_str(), pool.full(settings)),
            ));
            out.dirty.insert(id);
        }
        if !out.dirty.is_empty() {
            self.pools = None;
        }
        out
    }

    /// The orchestrator refused the pending action `action_id` for good (transient
    /// failures are retried by the service). It is dropped; a refused termination is
    /// not counted against the budget and is tried again after `TERMINATE_RETRY`.
    pub fn action_failed(
        &mut self,
        cfg: &CoreSettings,
        now: Time,
        id: &str,
        action_id: u64,
        why: &str,
    ) -> Outcome {
        self.end_action(id, action_id);
        let mut out = Outcome::default();
        let Some(node) = self.nodes.get_mut(id) else {
            return out;
        };
        let Some(at) = node.policy.pending.iter().position(|p| p.id == action_id) else {
            return out;
        };
        // What the refusal undoes (a cordon, a fence) changes the occupancy.
        self.pools = None;
        let node = self.nodes.get_mut(id).expect("found above");
        let action = node.policy.pending.remove(at).action;
        out.dirty.insert(id.into());
        if self.flow_step_failed(cfg, now, id, &action, why, &mut out) {
            return out;
        }
        let Some(node) = self.nodes.get_mut(id) else {
            return out;
        };
        if let Action::Cordon { by, .. } = action {
            // Not out of service after all: the books say what the cluster says,
            // and the next report decides again (a refusal is not an uncordon) —
            // hale's own cordon not before `TERMINATE_RETRY`: a refusal is not
            // something to ask again every second.
            node.policy.cordon = None;
            let concluded = node.policy.conclusion.take();
            if by == Actor::Hale {
                node.policy.retry_after =
                    Some(now + chrono::TimeDelta::from_std(TERMINATE_RETRY).expect("minutes"));
                node.policy.refusal = Some(crate::core::labels::clip(why).to_string());
                // Said now, answering the NODE_CORDONED the policy recorded: the next
                // decision, which would say it, may find the node taken out by
                // someone else meanwhile (the reason of the refusal) and conclude
                // otherwise. Kept as the conclusion, so that decision does not say
                // it twice.
                let action = match concluded {
                    Some(Conclusion::Acted { action, .. }) => action,
                    _ => Verdict::Cordon,
                };
                let settings = cfg.settings_for(&node.labels);
                out.events.push(super::policy_verdict(
                    node,
                    settings,
                    now,
                    action.as_str(),
                    Some(Guardrail::CordonRefused.as_str()),
                    format!(
                        "{} halted: {}",
                        action.as_str(),
                        super::cordon_refused(node)
                    ),
                ));
                node.policy.conclusion = Some(Conclusion::Halted {
                    action,
                    guardrail: Guardrail::CordonRefused,
                });
            } else {
                // Hale's own is said by the halt its next decision records; an
                // operator's, whose NODE_CORDONED stands in the history, here.
                let settings = cfg.settings_for(&node.labels);
                out.events.push(super::policy_verdict(
                    node,
                    settings,
                    now,
                    "cordon",
                    Some("orchestrator"),
                    format!(
                        "the operator's cordon was refused: {}; the node stays as the orchestrator shows it",
                        crate::core::labels::clip(why)
                    ),
                ));
            }
            node.status = uncordoned_status(node);
            // A fault eviction queued behind the cordon goes with it, and its
            // class is evicted again once the cordon may be asked again.
            for p in &node.policy.pending {
                if let Action::Evict { fault_class, .. } = &p.action {
                    node.policy.evicted.remove(fault_class);
                }
            }
            super::keep_in_service(node);
            return out;
        }
        if action != Action::Terminate {
            if action == (Action::Gate { on: true }) {
                node.policy.gate_refused = true;
            }
            // An eviction drained only the cordon it made itself: one it found
            // (drained by an earlier drain, or not) keeps what it says.
            let evictions_own = node
                .policy
                .cordon
                .as_ref()
                .is_some_and(|c| c.reason.starts_with(super::EVICTION_CORDON));
            if matches!(action, Action::Drain { .. })
                || (matches!(action, Action::Evict { .. }) && evictions_own)
            {
                refuse_drain(node);
            }
            // Its event was recorded when it was queued (a drain, an eviction): the
            // refusal is said next to it, as a halt, with why. Not asked again.
            let what = match &action {
                Action::Gate { on: true } => "the scheduling gate".to_string(),
                Action::Gate { on: false } => "reopening scheduling".to_string(),
                Action::Evict { fault_class, .. } => format!("the eviction for {fault_class}"),
                Action::Drain { .. } => "the drain".to_string(),
                other => format!("the {}", other.name()),
            };
            let settings = cfg.settings_for(&node.labels);
            out.events.push(super::policy_verdict(
                node,
                settings,
                now,
                action.name(),
                Some("orchestrator"),
                format!("{what} was refused: {}", crate::core::labels::clip(why)),
            ));
            return out;
        }
        node.policy.retry_after =
            Some(now + chrono::TimeDelta::from_std(TERMINATE_RETRY).expect("minutes"));
        node.policy.refusal = Some(crate::core::labels::clip(why).to_string());
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
            // A refused termination's halt names no pool figure.
            &super::Pool::default(),
            Conclusion::Halted {
                action: Verdict::Replace,
                guardrail: Guardrail::TerminationRejected,
            },
        );
        out
    }
}

/// A drain or fault eviction the orchestrator refused: the node its cordon said
/// drained is cordoned, not drained — unless another drain or eviction is still
/// to be done.
pub(super) fn refuse_drain(node: &mut Node) {
    let another = node
        .policy
        .pending
        .iter()
        .any(|p| matches!(p.action, Action::Drain { .. } | Action::Evict { .. }));
    if let Some(c) = node
        .policy
        .cordon
        .as_mut()
        .filter(|c| c.drained && !another)
    {
        c.drained = false;
        c.drain_refused = true;
    }
}

/// The status of a node whose cordon never happened, as its orchestrator last
/// showed it under the cordon hale recorded: not ready where it said so (the
/// refusal Fuzzball gives such a node), else ready. The next inventory says it
/// again.
pub(super) fn uncordoned_status(node: &Node) -> Status {
    if node.policy.not_ready {
        Status::NotReady
    } else {
        Status::Ready
    }
}

/// The part of a drain's message about the work it ended rather than moved.
fn ended(failed: u32) -> String {
    if failed == 0 {
        return String::new();
    }
    format!(", {failed} failed (not to be run again elsewhere)")
}

/// The part of a drain's message about what had not finished stopping.
fn still_stopping(stopping: u32) -> String {
    if stopping == 0 {
        return String::new();
    }
    format!("; {stopping} still stopping when the wait for them ended")
}

/// The part of a drain's or eviction's message about what stayed behind.
fn held(blocked: u32) -> String {
    if blocked == 0 {
        return String::new();
    }
    format!("; {blocked} held on the node by a disruption budget past the timeout")
}

/// The power-off of a fence withdrawn while it was under way `landed` (or may
/// have): the machine, back in service, is powered on again.
pub(super) fn power_on_after_withdrawn(
    node: &mut crate::core::Node,
    now: Time,
    landed: &str,
    out: &mut Outcome,
) {
    node.policy.fence_withdrawn = None;
    node.policy.push(Action::Power {
        op: PowerOp::On,
        force: false,
    });
    out.dirty.insert(node.id.clone());
    out.events.push(super::event(
        &node.id,
        now,
        EventKind::RemediationStep {
            action: super::fencing::FENCE.into(),
            step: "on".into(),
            diagnostics: None,
        },
        format!("the withdrawn fence's power-off was under way and {landed}: powering on again"),
    ));
}
