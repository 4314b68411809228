//! What operators ask of a node — cordon, uncordon, drain, drain every node — each
//! recorded as an event and queued for the orchestrator like the policy's own.

use super::{Action, Actor, event, put_back, status_name, take_out};
use crate::core::events::with_reason;
use crate::core::outcome::{CoreError, Outcome};
use crate::core::{Event, EventKind, Fleet, Node, Status, Time};

/// The result of a manual drain of every node.
#[derive(Debug, Default)]
pub struct DrainAll {
    pub outcome: Outcome,
    /// Nodes this drain took out of service (ready ones only).
    pub drained: Vec<String>,
}

impl Fleet {
    /// The node an operator's verb changes; the pools are counted afresh after.
    fn operated(&mut self, id: &str) -> Result<&mut Node, CoreError> {
        self.pools = None;
        self.nodes
            .get_mut(id)
            .map(Box::as_mut)
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
                Some(_) => {
                    super::taken_over(node, reason);
                    node.policy.push(Action::Cordon {
                        by: Actor::Operator,
                        reason: reason.into(),
                    });
                }
                None => take_out(node, Actor::Operator, reason, now),
            }
            out.events.push(cordoned_by_operator(id, now, reason));
            out.dirty.insert(id.into());
        } else if new_reason(node, reason) {
            out.events.push(cordoned_by_operator(id, now, reason));
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
            out.events.extend(put_back(node, reason, now));
            node.policy.push(Action::Uncordon);
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
        if !active && drained_already(node, reason) {
            return Ok(out);
        }
        // hale's own cordon (the policy's or a reboot flow's) is the operator's
        // now, as with `hale node cordon`: a drain is a cordon and more — the node
        // is never replaced behind the operator's back, and a flow under way leaves
        // it cordoned at its end.
        let hales = node
            .policy
            .cordon
            .as_ref()
            .is_some_and(|c| c.by == Actor::Hale);
        if node.policy.cordon.is_none() {
            take_out(node, Actor::Operator, reason, now);
            out.events.push(cordoned_by_operator(id, now, reason));
        } else if hales {
            super::taken_over(node, reason);
            node.policy.push(Action::Cordon {
                by: Actor::Operator,
                reason: reason.into(),
            });
            out.events.push(cordoned_by_operator(id, now, reason));
        }
        let cordon = node.policy.cordon.as_mut().expect("taken out above");
        cordon.drain();
        // The cordon keeps its own reason; the drain's, where another, is kept
        // beside it, so the same drain asked again records nothing.
        if !reason.is_empty() {
            cordon.drain_reason = (reason != cordon.reason).then(|| reason.into());
        }
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
                    stopping: 0,
                    failed: 0,
                },
                with_reason("drained (passive) by operator", reason),
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
}

/// A power operation through a node's BMC, for `NODE_POWER`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PowerDone {
    /// `status`, `on`, `off`, `cycle`, `reset` or `reboot`.
    pub action: String,
    /// `done`, `unchanged` or `failed`.
    pub result: String,
    pub by: Actor,
    pub force: bool,
    pub message: String,
}

impl Fleet {
    /// An operator's power-off of `id` is about to be sent: held off from now (no
    /// fence or flow powers it on), so that a stop before its answer does not lose
    /// the operator's intent. `off: false` takes that back (the BMC refused it).
    /// Returns whether the node was held off before.
    pub fn hold_powered_off(&mut self, id: &str, off: bool) -> (Outcome, bool) {
        let mut out = Outcome::default();
        let Some(node) = self.nodes.get_mut(id) else {
            return (out, false);
        };
        let before = std::mem::replace(&mut node.policy.powered_off, off);
        if before != off {
            out.dirty.insert(id.into());
        }
        (out, before)
    }

    /// Record a power operation on node `id` (`NODE_POWER`); a node no longer
    /// known records nothing.
    pub fn record_power(&mut self, now: Time, id: &str, power: PowerDone) -> Outcome {
        let mut out = Outcome::default();
        if let Some(node) = self.nodes.get_mut(id) {
            // An operator's off holds the machine off: no fence or flow powers it on
            // until an operator's on, cycle or reset.
            if power.by == Actor::Operator && power.result != "failed" {
                let off = match power.action.as_str() {
                    "off" => Some(true),
                    "on" | "cycle" | "reset" => Some(false),
                    _ => None,
                };
                if let Some(off) = off
                    && node.policy.powered_off != off
                {
                    node.policy.powered_off = off;
                    out.dirty.insert(id.into());
                }
                if off == Some(false) {
                    node.policy.powered_on_at = Some(now);
                    out.dirty.insert(id.into());
                }
            }
            out.events.push(event(
                id,
                now,
                EventKind::NodePower {
                    action: power.action,
                    result: power.result,
                    by: power.by.as_str().into(),
                    force: power.force,
                },
                power.message,
            ));
        }
        out
    }
}

/// The event of an operator's cordon (its own, or the one a drain begins with).
/// An operator's cordon given a reason again by a second cordon: a new one
/// replaces the old, on the node too; the same one, or none, changes nothing.
/// Whether it changed.
/// Whether a passive drain would change nothing: an operator drained the node
/// already, for this reason — their cordon's or their drain's — or none given,
/// and it is not refused or queued.
fn drained_already(node: &Node, reason: &str) -> bool {
    node.policy.cordon.as_ref().is_some_and(|c| {
        c.by == Actor::Operator
            && c.drained
            && !c.drain_refused
            && (reason.is_empty()
                || c.reason == reason
                || c.drain_reason.as_deref() == Some(reason))
    }) && !node
        .policy
        .pending
        .iter()
        .any(|p| matches!(p.action, Action::Drain { .. } | Action::Cordon { .. }))
}

fn new_reason(node: &mut Node, reason: &str) -> bool {
    let Some(cordon) = node
        .policy
        .cordon
        .as_mut()
        .filter(|c| c.by == Actor::Operator && !reason.is_empty() && c.reason != reason)
    else {
        return false;
    };
    cordon.reason = reason.into();
    node.policy.push(Action::Cordon {
        by: Actor::Operator,
        reason: reason.into(),
    });
    true
}

fn cordoned_by_operator(id: &str, now: Time, reason: &str) -> Event {
    event(
        id,
        now,
        EventKind::NodeCordoned {
            by: Actor::Operator.as_str().into(),
            reason: reason.into(),
        },
        with_reason("cordoned by operator", reason),
    )
}
