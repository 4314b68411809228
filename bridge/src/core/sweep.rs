//! What hale stops keeping, looked over once a minute: nodes known only from alerts
//! that no alert has named for `forgetAfter` (retired, their history kept), condition
//! types long cleared, job-failure instances long counted, and — without polling,
//! where no full picture ever reconciles — alerts no delivery has confirmed for
//! `forgetAfter`, and the resolutions a hold kept once it lapses.

use std::time::Duration;

use chrono::{DateTime, TimeDelta};

use super::conditions::{Left, set_sources};
use super::step::{Recorder, Step};
use super::trust::Keep;
use super::{EventKind, Name, Node, Origin, Source, Time};

/// How often the sweep looks over the fleet.
pub const SWEEP_EVERY: Duration = Duration::from_secs(60);

impl Step<'_> {
    /// Retire, prune and end what the module doc says, at most every [`SWEEP_EVERY`].
    pub(super) fn sweep(&mut self) {
        let now = self.now;
        let polling = self.cfg.source.polling;
        let trust = &self.fleet.trust;
        // Resolutions a hold or staleness kept (webhook only) end the moment the
        // input is trusted and no hold runs.
        let lapsed = !polling && trust.held_resolutions && !trust.stale && !trust.holding(now);
        let due = self
            .fleet
            .swept_at
            .is_none_or(|t| (now - t).to_std().unwrap_or_default() >= SWEEP_EVERY);
        if !due && !lapsed {
            return;
        }
        // Absence means something only while the input is trusted and complete.
        let sure =
            !trust.stale && trust.source_up && !trust.holding(now) && trust.trusted_since_start();
        if lapsed {
            self.fleet.trust.held_resolutions = false;
            self.end_sources(|s| s.vanished.is_some());
        }
        if !due {
            return;
        }
        self.fleet.swept_at = Some(now);
        let forget = TimeDelta::from_std(self.cfg.identity.forget_after).unwrap_or(TimeDelta::MAX);
        let before = now
            .checked_sub_signed(forget)
            .unwrap_or(DateTime::UNIX_EPOCH);
        if !polling && sure {
            self.end_sources(|s| s.delivered.is_some_and(|t| t < before));
        }
        let forgotten: Vec<String> = self
            .fleet
            .ledger
            .moves
            .iter()
            .filter(|(_, m)| m.last.is_some_and(|t| t < before))
            .map(|(owner, _)| owner.clone())
            .collect();
        for owner in forgotten {
            self.fleet.ledger.moves.remove(&owner);
            self.out.moved.insert(owner);
        }
        let mut retire = Vec::new();
        for (id, node) in self.fleet.nodes.iter_mut() {
            let mut changed = node.forget_types(before);
            changed |= forget_counted(node, before);
            if changed {
                self.out.dirty.insert(id.clone());
            }
            if sure && retirable(node, before) {
                retire.push(id.clone());
            }
        }
        for id in retire {
            self.fleet.pools = None;
            let node = self.fleet.nodes.remove(&id).expect("listed above");
            let since = node.last_report.or(node.known_since).unwrap_or(now);
            self.out.dirty.remove(&id);
            self.out.touched.remove(&id);
            self.out.removed.push(id.clone());
            Recorder {
                out: &mut self.out,
                now,
                id: &id,
            }
            .event(
                EventKind::NodeDecommissioned {
                    by: "retired".into(),
                },
                format!(
                    "retired: known only from alerts, and none has named it since {} (nodeIdentity.forgetAfter)",
                    crate::core::shown_time(since)
                ),
            );
        }
    }

    /// End every source `gone` picks, as if its resolution had arrived.
    pub(super) fn end_sources(&mut self, gone: impl Fn(&Source) -> bool) {
        let now = self.now;
        let cfg = self.cfg;
        for (id, node) in self.fleet.nodes.iter_mut() {
            let ended: Vec<(Name, Left)> = node
                .conditions
                .iter_mut()
                .filter_map(|(ctype, cond)| {
                    let before = cond.sources.len();
                    let was_suppressed = cond.suppressed();
                    cond.sources.retain(|_, s| !gone(s));
                    let count = before - cond.sources.len();
                    (count > 0).then(|| {
                        (
                            ctype.clone(),
                            Left {
                                count,
                                was_suppressed,
                            },
                        )
                    })
                })
                .collect();
            if ended.is_empty() {
                continue;
            }
            let settings = cfg.settings_for(&node.labels);
            let mut rec = Recorder {
                out: &mut self.out,
                now,
                id,
            };
            for (ctype, left) in ended {
                set_sources(
                    node,
                    &mut rec,
                    settings,
                    &ctype,
                    &[],
                    false,
                    Keep::none(),
                    left,
                );
            }
        }
    }
}

/// Whether `node` has outlived its evidence: known from alerts alone, named by none
/// since `before`, and holding nothing an operator must see to — no sticky
/// condition, no cordon or action of the policy's, no fence (a machine hale
/// switched off, counted toward `fencing.maxPercent` until it reports) and no
/// reboot flow under way. Its gate does not keep it: no orchestrator lists the
/// node, so the gate marks nothing outside hale, and a node gone silent is blind,
/// so its gate would never lift.
pub(super) fn retirable(node: &Node, before: Time) -> bool {
    node.known_from == Origin::Alerts
        && node
            .last_report
            .or(node.known_since)
            .is_some_and(|t| t < before)
        && !node.conditions.values().any(|c| c.sticky)
        && node.policy.cordon.is_none()
        && node.policy.pending.is_empty()
        && node.policy.fence.is_none()
        && node
            .policy
            .flow
            .as_ref()
            .is_none_or(|f| f.step == super::policy::FlowStep::Queued)
}

/// Forget job-failure instances that started before `before` (their key is
/// `fingerprint@startsAt`); the failures they counted stay counted.
pub(super) fn forget_counted(node: &mut Node, before: Time) -> bool {
    let counted = &mut node.failures.counted_alerts;
    let n = counted.len();
    counted.retain(|key| {
        key.rsplit_once('@')
            .and_then(|(_, at)| DateTime::parse_from_rfc3339(at).ok())
            .is_none_or(|at| at >= before)
    });
    counted.len() != n
}
