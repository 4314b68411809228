//! Fencing (DESIGN §8): a node silent and not ready for `fencing.after` is
//! powered off through its BMC, confirmed off, its work released to run elsewhere
//! (Kubernetes: the `out-of-service` taint), powered on again, and let back once it
//! reports. Never while hale is stale, never more than `fencing.maxPercent` of a
//! pool at once — a rack gone silent is a partition until proven otherwise — and a
//! node fenced `perDay` times in a day is left for an operator.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Action, PowerOp, event, policy_verdict};
use crate::core::outcome::Outcome;
use crate::core::settings::{CoreSettings, Mode};
use crate::core::{EventKind, Fleet, HEARTBEAT_MISSED, Node, Status, Time};

pub(super) const FENCE: &str = "fence";
const DAY: Duration = Duration::from_secs(86_400);

/// A fence under way, persisted before each step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fence {
    pub step: FenceStep,
    pub since: Time,
    /// When its power-off was sent, recorded before it leaves: a process that
    /// finds it sent by one that stopped does not send it again, and only waits
    /// for the machine to go off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<Time>,
    /// Its work could not be released (an orchestrator that cannot): nothing to
    /// take back once it reports.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unreleased: bool,
    /// Its power-off found the machine off already (nothing sent): switched off
    /// outside hale, so it is left off — never powered on by the fence.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub found_off: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FenceStep {
    /// Powering off (forced), confirmed off.
    Off,
    /// Releasing its work.
    Release,
    /// Powering on again.
    On,
    /// Off and on again, its work released: waiting for it to report.
    Fenced,
    /// Its power-off was taken and the machine never seen off: perhaps off, its
    /// work not released. Counted toward `maxPercent`, never powered off again,
    /// until it reports (the fence then failed at off) or an operator looks at it.
    Unconfirmed,
    /// Reporting again: taking the release back.
    Restore,
}

impl FenceStep {
    pub fn as_str(self) -> &'static str {
        match self {
            FenceStep::Off => "off",
            FenceStep::Release => "release",
            FenceStep::On => "on",
            FenceStep::Fenced => "fenced",
            FenceStep::Unconfirmed => "unconfirmed",
            FenceStep::Restore => "restore",
        }
    }
}

/// What keeps an operator's power verb off `node`: a reboot flow under way, or a
/// fence — short of its end, or a verb that does not leave the machine on
/// (`powering_on`: on, cycle, reset): fenced, hale only waits for the node to
/// report, and an operator may power on a machine whose power-on failed. A fence
/// whose power-off went unconfirmed keeps none off: the machine is the operator's
/// to look at.
pub fn power_busy(node: &Node, powering_on: bool) -> Option<String> {
    if let Some(f) = &node.policy.flow
        && f.step != super::FlowStep::Queued
    {
        return Some(format!("a reboot flow is at step {}", f.step.as_str()));
    }
    node.policy
        .fence
        .as_ref()
        .filter(|f| match f.step {
            FenceStep::Unconfirmed => false,
            FenceStep::Fenced => !powering_on,
            _ => true,
        })
        .map(|f| format!("a fence is at step {}", f.step.as_str()))
}

/// Whether the node is a fencing candidate by its own state: silent for `after`
/// and, where the orchestrator has a readiness of its own, not ready. Silent since
/// its heartbeat was missed, or since an operator last powered it on if later.
fn silent_for(node: &Node, after: Duration, needs_not_ready: bool, now: Time) -> Option<Time> {
    let missed = node.conditions.get(HEARTBEAT_MISSED)?;
    let not_ready =
        node.policy.not_ready || matches!(node.status, Status::NotReady | Status::Offline);
    if needs_not_ready && !not_ready {
        return None;
    }
    let since = missed
        .first_seen
        .max(node.policy.powered_on_at.unwrap_or(missed.first_seen));
    ((now - since).to_std().unwrap_or_default() >= after).then_some(since)
}

/// `node`'s fence, back before its machine was seen off, ends at `off`:
/// `cancelled` (withdrawn before its power-off was done) or failed (a power-off
/// never confirmed).
fn off_ended(node: &mut Node, now: Time, cancelled: bool, message: &str, out: &mut Outcome) {
    node.policy.fence = None;
    out.dirty.insert(node.id.clone());
    out.events.push(event(
        &node.id,
        now,
        EventKind::RemediationFailed {
            action: FENCE.into(),
            step: FenceStep::Off.as_str().into(),
            cancelled,
        },
        message.into(),
    ));
}

/// What a fence whose machine was off before it says instead of powering on.
fn left_off(id: &str) -> String {
    format!(
        "left off, as it was found (switched off outside hale): power it on when it should return (hale node power {id} on)"
    )
}

fn step_event(id: &str, now: Time, step: FenceStep, message: String) -> crate::core::Event {
    event(
        id,
        now,
        EventKind::RemediationStep {
            action: FENCE.into(),
            step: step.as_str().into(),
            diagnostics: None,
        },
        message,
    )
}

impl Fleet {
    /// Record that the power-off of `id`'s fence is about to be sent (dirty:
    /// recorded). One this process recorded before and never sent (the write did
    /// not land) is recorded again; one an earlier process sent is not.
    pub fn fence_off_sending(&mut self, now: Time, id: &str) -> Outcome {
        let mut out = Outcome::default();
        let started = self.trust.watching_since;
        if let Some(fence) = self.nodes.get_mut(id).and_then(|n| n.policy.fence.as_mut())
            && fence.step == FenceStep::Off
            && fence.sent.is_none_or(|t| t >= started)
        {
            fence.sent = Some(now);
            out.dirty.insert(id.into());
        }
        out
    }

    /// Take back the release of fenced nodes that report again; fence the silent
    /// ones the guards allow, recording each refusal once per silence.
    pub(super) fn fence(
        &mut self,
        cfg: &CoreSettings,
        now: Time,
        facts: &super::Facts,
        out: &mut Outcome,
    ) {
        let Some(f) = &cfg.fencing else {
            return;
        };
        let mut ended = false;
        for node in self.nodes.values_mut() {
            // The power-off of a withdrawn fence that no task of this process is
            // performing: an earlier process sent it and stopped before it heard
            // back, so it may have landed. Powered on (no change to a machine that
            // is on), given `fencing.after` to boot before a silence counts.
            if let Some(off) = node.policy.fence_withdrawn
                && self.under_way.get(&node.id).is_none_or(|p| p.id != off)
            {
                node.policy.powered_on_at = Some(now);
                super::queue::power_on_after_withdrawn(
                    node,
                    now,
                    "may have landed before hale restarted",
                    out,
                );
            }
            // Back: with an orchestrator, Ready again (the heartbeat's exporter may
            // itself be held off by the out-of-service taint); without, reporting.
            let ready = !node.policy.not_ready
                && !matches!(node.status, Status::NotReady | Status::Offline);
            let back = if f.needs_not_ready {
                ready
            } else {
                ready && !node.conditions.contains_key(HEARTBEAT_MISSED)
            };
            if back && node.policy.fence_held {
                node.policy.fence_held = false;
                out.dirty.insert(node.id.clone());
            }
            // Back before its power-off was done: the fence is withdrawn, as a
            // node that reports is no node to switch off.
            let power_off = |p: &&super::Pending| {
                matches!(
                    p.action,
                    Action::Power {
                        op: PowerOp::Off,
                        ..
                    }
                )
            };
            if back
                && node
                    .policy
                    .fence
                    .as_ref()
                    .is_some_and(|f| f.step == FenceStep::Off)
                && let Some(off) = node.policy.pending.iter().find(power_off).map(|p| p.id)
            {
                node.policy.pending.retain(|p| p.id != off);
                // Sent, or being sent: it may land all the same (one never sent
                // needs no power-on after it).
                let sent = self.under_way.get(&node.id).is_some_and(|p| p.id == off)
                    || node.policy.fence.as_ref().is_some_and(|f| f.sent.is_some());
                if sent {
                    node.policy.fence_withdrawn = Some(off);
                }
                ended = true;
                off_ended(
                    node,
                    now,
                    true,
                    "fence withdrawn: the node reports again before it was powered off",
                    out,
                );
            }
            // Back after a power-off never confirmed: it never went off, or was
            // started again. The fence failed at off, and its place is free.
            if back
                && node
                    .policy
                    .fence
                    .as_ref()
                    .is_some_and(|f| f.step == FenceStep::Unconfirmed)
            {
                node.policy.fence_failed_at = Some(now);
                ended = true;
                off_ended(
                    node,
                    now,
                    false,
                    "fence failed at off: its power-off was never confirmed, and the node reports again",
                    out,
                );
            }
            if back
                && node
                    .policy
                    .fence
                    .as_ref()
                    .is_some_and(|f| f.step == FenceStep::Fenced)
                // Nothing released holds its exporter off: back is reporting too.
                && (node.policy.fence.as_ref().is_some_and(|f| !f.unreleased)
                    || !node.conditions.contains_key(HEARTBEAT_MISSED))
            {
                let message = if node.policy.fence.as_ref().is_some_and(|f| f.unreleased) {
                    // Its release failed (recorded then): nothing to take back.
                    node.policy.fence = None;
                    ended = true;
                    "reporting again: its work was never released, so nothing is taken back; the fence is over"
                } else {
                    let fence = node.policy.fence.as_mut().expect("fenced");
                    fence.step = FenceStep::Restore;
                    fence.since = now;
                    node.policy.push(Action::Release { on: false });
                    "reporting again: taking the release of its work back"
                };
                out.dirty.insert(node.id.clone());
                out.events.push(step_event(
                    &node.id,
                    now,
                    FenceStep::Restore,
                    message.into(),
                ));
            }
        }
        if ended {
            self.pools = None;
        }
        if self.trust.stale || !self.trust.source_up {
            return;
        }
        let day_ago = now - chrono::TimeDelta::from_std(DAY).expect("a day");
        let retry = chrono::TimeDelta::from_std(f.after).expect("bounded");
        let mut candidates: Vec<(Time, String)> = self
            .nodes
            .values()
            // A node whose work the orchestrator shows released already: fenced by
            // a replica that led before this one on a store of its own, or by an
            // operator (its taint is theirs to take back).
            .filter(|n| n.policy.fence.is_none() && !n.policy.released)
            .filter(|n| {
                n.policy
                    .flow
                    .as_ref()
                    .is_none_or(|fl| fl.step == super::FlowStep::Queued)
            })
            .filter(|n| n.policy.fence_failed_at.is_none_or(|t| now - t >= retry))
            // Switched off by an operator on purpose, or without a BMC to reach; or
            // a name hale just replaced, its machine gone on purpose.
            .filter(|n| !n.policy.powered_off && facts.missing_bmc(&n.id).is_none())
            // Taken out of service by an operator: in their hands (a firmware
            // update, a repair) — silence is theirs to judge, and a power-off
            // could cut their work short.
            .filter(|n| {
                n.policy
                    .cordon
                    .as_ref()
                    .is_none_or(|c| c.by != super::Actor::Operator)
            })
            .filter(|n| !super::just_replaced(n, now))
            .filter_map(|n| {
                Some((
                    silent_for(n, f.after, f.needs_not_ready, now)?,
                    n.id.clone(),
                ))
            })
            .collect();
        if candidates.is_empty() {
            return;
        }
        candidates.sort();
        // Each pool's size and the nodes of it fenced and not reporting yet, or
        // whose work is released.
        let mut pools: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
        for node in self.nodes.values() {
            let p = pools
                .entry(cfg.settings_for(&node.labels).name.as_str())
                .or_default();
            p.0 += 1;
            p.1 += u32::from(node.policy.fence.is_some() || node.policy.released);
        }
        let mut pools: BTreeMap<String, (u32, u32)> =
            pools.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let mut started = false;
        for (_, id) in candidates {
            let node = self.nodes.get_mut(&id).expect("listed above");
            let settings = cfg.settings_for(&node.labels);
            node.policy.fences.retain(|t| *t > day_ago);
            let (size, fenced) = pools.get_mut(&settings.name).expect("counted above");
            let allowed = (*size * f.max_percent / 100).max(1);
            let observe = settings.mode == Mode::Observe;
            let refusal = if node.policy.fences.len() as u32 >= f.per_day {
                Some((
                    Some("fencing.perDay"),
                    format!(
                        "not fenced: fenced {} times in the last day; left off for an operator",
                        node.policy.fences.len()
                    ),
                ))
            } else if *fenced + 1 > allowed {
                let already = if observe {
                    "would be fenced already"
                } else {
                    "already fenced"
                };
                Some((
                    Some("fencing.maxPercent"),
                    format!(
                        "not fenced: {fenced} of {size} node(s) of pool {} {already} (fencing.maxPercent {} allows {allowed}); many silent at once is a partition until proven otherwise",
                        settings.name, f.max_percent
                    ),
                ))
            } else if observe {
                // Counted as fenced: observe says what would really happen, the
                // limit on the nodes after this one included.
                *fenced += 1;
                Some((
                    None,
                    format!(
                        "would fence: silent{} (observe mode changes nothing)",
                        if f.needs_not_ready {
                            " and not ready"
                        } else {
                            ""
                        }
                    ),
                ))
            } else {
                None
            };
            if let Some((guardrail, message)) = refusal {
                let recommended = guardrail.is_none();
                if !node.policy.fence_held || node.policy.fence_recommended != recommended {
                    node.policy.fence_held = true;
                    node.policy.fence_recommended = recommended;
                    out.events.push(policy_verdict(
                        node, settings, now, FENCE, guardrail, message,
                    ));
                    out.dirty.insert(id.clone());
                }
                continue;
            }
            *fenced += 1;
            started = true;
            node.policy.fence = Some(Fence {
                sent: None,
                unreleased: false,
                found_off: false,
                step: FenceStep::Off,
                since: now,
            });
            node.policy.fence_withdrawn = None;
            node.policy.push(Action::Power {
                op: PowerOp::Off,
                force: true,
            });
            out.dirty.insert(id.clone());
            out.events.push(event(
                &id,
                now,
                EventKind::RemediationStarted {
                    action: FENCE.into(),
                    trigger: HEARTBEAT_MISSED.into(),
                    by: "hale".into(),
                    priority: 0,
                },
                format!(
                    "fencing: silent{} for {}s or more",
                    if f.needs_not_ready {
                        " and not ready"
                    } else {
                        ""
                    },
                    f.after.as_secs()
                ),
            ));
            out.events.push(step_event(
                &id,
                now,
                FenceStep::Off,
                "powering off through the BMC".into(),
            ));
        }
        // A fenced node is out of its pool's service: counted afresh.
        if started {
            self.pools = None;
        }
    }

    /// A fence's action finished: its next step.
    pub(super) fn fence_step_done(
        &mut self,
        now: Time,
        id: &str,
        action: &Action,
        done: &super::Done,
        out: &mut Outcome,
    ) {
        let Some(node) = self.nodes.get_mut(id) else {
            return;
        };
        let Some(step) = node.policy.fence.as_ref().map(|f| f.step) else {
            return;
        };
        let next = match (step, action) {
            (
                FenceStep::Off,
                Action::Power {
                    op: PowerOp::Off, ..
                },
            ) => {
                // Counted once it is off: an attempt that never got there is not one.
                node.policy.fences.push(now);
                node.policy.push(Action::Release { on: true });
                if done.found_off
                    && let Some(fence) = node.policy.fence.as_mut()
                {
                    fence.found_off = true;
                }
                Some((
                    FenceStep::Release,
                    if done.found_off {
                        "off already (switched off outside hale, nothing sent): releasing its work; it is left off"
                    } else {
                        "off, confirmed: releasing its work"
                    }
                    .to_string(),
                ))
            }
            (FenceStep::Release, Action::Release { on: true }) => {
                out.events.push(event(
                    id,
                    now,
                    EventKind::NodeFenced {
                        phase: "fenced".into(),
                    },
                    "fenced: powered off (confirmed) and its work released to run elsewhere".into(),
                ));
                if node.policy.fence.as_ref().is_some_and(|f| f.found_off) {
                    Some((FenceStep::Fenced, left_off(id)))
                } else {
                    node.policy.push(Action::Power {
                        op: PowerOp::On,
                        force: false,
                    });
                    Some((FenceStep::On, "powering on again".to_string()))
                }
            }
            (
                FenceStep::On,
                Action::Power {
                    op: PowerOp::On, ..
                },
            ) => Some((
                FenceStep::Fenced,
                if node.policy.fence.as_ref().is_some_and(|f| f.unreleased) {
                    "on again: waiting for it to report (its work was not released)"
                } else {
                    "on again: its work stays released until it reports"
                }
                .to_string(),
            )),
            (FenceStep::Restore, Action::Release { on: false }) => {
                node.policy.fence = None;
                out.dirty.insert(id.into());
                out.events.push(event(
                    id,
                    now,
                    EventKind::NodeFenced {
                        phase: "restored".into(),
                    },
                    "restored: reporting again, its work no longer released".into(),
                ));
                out.events.push(event(
                    id,
                    now,
                    EventKind::RemediationSucceeded {
                        action: FENCE.into(),
                    },
                    "fence complete: the node reports again".into(),
                ));
                None
            }
            _ => None,
        };
        if let Some((step, message)) = next
            && let Some(fence) = node.policy.fence.as_mut()
        {
            fence.step = step;
            fence.since = now;
            out.dirty.insert(id.into());
            out.events.push(step_event(id, now, step, message));
        }
    }

    /// A fence's power-off was taken and the machine never seen off: it may be
    /// off, so the fence stays, counted toward `maxPercent` and toward the day's
    /// fences, and nothing more is sent (a second power-off, or a release of work
    /// that may still run). Returns whether `action_id` was that power-off.
    pub(super) fn fence_step_unconfirmed(
        &mut self,
        now: Time,
        id: &str,
        action_id: u64,
        why: &str,
        out: &mut Outcome,
    ) -> bool {
        let Some(node) = self.nodes.get_mut(id) else {
            return false;
        };
        let Some(at) = node.policy.pending.iter().position(|p| {
            p.id == action_id
                && matches!(
                    p.action,
                    Action::Power {
                        op: PowerOp::Off,
                        ..
                    }
                )
        }) else {
            return false;
        };
        let Some(fence) = node
            .policy
            .fence
            .as_mut()
            .filter(|f| f.step == FenceStep::Off)
        else {
            return false;
        };
        node.policy.pending.remove(at);
        fence.step = FenceStep::Unconfirmed;
        fence.since = now;
        node.policy.fences.push(now);
        out.dirty.insert(id.into());
        out.events.push(step_event(
            id,
            now,
            FenceStep::Unconfirmed,
            format!(
                "power-off taken, the machine never seen off: {why}; it may be off, so it counts as fenced, its work not released, until it reports again: look at it (hale node power {id} status)",
            ),
        ));
        true
    }

    /// A fence's action was refused: the fence fails at its step. A node that never
    /// went off is not fenced (tried again after `fencing.after`); one that did stays
    /// counted until it reports.
    pub(super) fn fence_step_failed(
        &mut self,
        now: Time,
        id: &str,
        action: &Action,
        why: &str,
        out: &mut Outcome,
    ) -> bool {
        let Some(node) = self.nodes.get_mut(id) else {
            return false;
        };
        let Some(fence) = node.policy.fence.as_mut() else {
            return false;
        };
        let step = fence.step;
        let found_off = fence.found_off;
        let ours = matches!(
            (step, action),
            (
                FenceStep::Off,
                Action::Power {
                    op: PowerOp::Off,
                    ..
                }
            ) | (FenceStep::Release, Action::Release { on: true })
                | (
                    FenceStep::On,
                    Action::Power {
                        op: PowerOp::On,
                        ..
                    }
                )
                | (FenceStep::Restore, Action::Release { on: false })
        );
        if !ours {
            return false;
        }
        match step {
            FenceStep::Off => {
                // Never off: tried again after `fencing.after`, within the day's
                // three.
                node.policy.fence = None;
                node.policy.fence_failed_at = Some(now);
            }
            FenceStep::On => {
                // Left off, its work released: fenced all the same — counted
                // toward `fencing.maxPercent` and its release taken back when it
                // reports again, powered on by an operator.
                fence.step = FenceStep::Fenced;
                fence.since = now;
            }
            FenceStep::Release if fence.found_off => {
                // Off before hale came, its work not released: left as found,
                // waiting for it to report.
                fence.step = FenceStep::Fenced;
                fence.since = now;
                fence.unreleased = true;
            }
            FenceStep::Release => {
                // Off, but its work not released: on again all the same, so the
                // machine is not left off for want of a taint.
                fence.step = FenceStep::On;
                fence.since = now;
                fence.unreleased = true;
                node.policy.push(Action::Power {
                    op: PowerOp::On,
                    force: false,
                });
            }
            FenceStep::Restore => node.policy.fence = None,
            FenceStep::Fenced | FenceStep::Unconfirmed => {}
        }
        out.dirty.insert(id.into());
        out.events.push(event(
            id,
            now,
            EventKind::RemediationFailed {
                action: FENCE.into(),
                step: step.as_str().into(),
                cancelled: false,
            },
            match step {
                FenceStep::On => format!(
                    "fence failed at on: {why}; left off and fenced until it reports: power it on (hale node power {id} on)"
                ),
                FenceStep::Release if found_off => {
                    format!("fence failed at release: {why}; {}", left_off(id))
                }
                _ => format!("fence failed at {}: {why}", step.as_str()),
            },
        ));
        true
    }
}
