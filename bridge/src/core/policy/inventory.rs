//! The orchestrator's inventory taken in: labels, provisioning, running work and
//! status; cordons and uncordons made outside hale recorded as the operator's; queued
//! actions the cluster already shows done dropped; nodes gone from the cluster, or
//! whose name now belongs to a new machine, retired.

use std::collections::{BTreeMap, BTreeSet};

use super::{Action, Actor, Cordon, Pending, event, put_back};
use crate::core::outcome::Outcome;
use crate::core::settings::CoreSettings;
use crate::core::{EventKind, Fleet, Node, Origin, Status, Time};

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
    /// Not ready, whatever `status` shows (a cordoned node's readiness is hidden
    /// behind `Cordoned`): what fencing and the reboot flow's return look at.
    pub not_ready: bool,
    /// Its work released to run elsewhere (Kubernetes: the `out-of-service`
    /// taint), by whoever: a fence of this hale's, of a replica that led before it
    /// on a store of its own, or an operator's — a machine off, as far as the
    /// orchestrator is concerned.
    pub released: bool,
    /// The orchestrator's own judgement of the node's health, where it makes one
    /// (Fuzzball): shown beside hale's, never part of it.
    pub orchestrator_health: Option<OrchestratorHealth>,
    /// The orchestrator's version of this view (a Kubernetes resourceVersion),
    /// where it keeps one: what tells a state hale has not read from one it has.
    pub version: Option<u64>,
    /// The cordon a node left when it was uncordoned outside hale, where the
    /// orchestrator saw that hale may not have read it (a watch brings every
    /// change; an inventory only the last): taken first where this record missed
    /// it (see `takes_before`). A follower that read only the last of its leader's
    /// cordon and the operator's uncordon kept its own cordon queued, and sent it
    /// once it led — or, never having seen the cordon, decided it anew.
    pub before: Option<Box<Observed>>,
}

/// An orchestrator's own health state and reliability score of a node.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OrchestratorHealth {
    /// `healthy`, `degraded`, `unknown`, as the orchestrator says.
    pub state: String,
    /// `None`: not scored by it (not the same as 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<u8>,
}

impl Fleet {
    /// The orchestrator's inventory: labels, provisioning, running work and status.
    /// A cordon or uncordon made outside hale (kubectl) is recorded as the
    /// operator's, and an uncordon starts the suppression window.
    ///
    /// The inventory is the whole fleet the orchestrator runs: a node it no longer
    /// lists has left the cluster, and a name it lists with a new uid is a new
    /// machine. Either way the old record is retired (its history stays) and its
    /// queued actions go with it.
    ///
    /// New labels can move a node into a pool that observes: what automation queued
    /// for it there and has not done is withdrawn, as on a reload that switches its
    /// pool ([`Fleet::observe_withdraws`]).
    pub fn observe(&mut self, cfg: &CoreSettings, now: Time, observed: &[Observed]) -> Outcome {
        self.pools = None;
        // New labels may put a node in a pool with another miss window, and this is
        // no step that would lower the kept deadline for it: the next tick looks.
        self.heartbeats_due = None;
        let mut out = Outcome::default();
        // A cluster that lists no node at all while hale knows some of it is an
        // orchestrator answering badly (Slurm's controller away answers so), not
        // a cluster emptied in one step: nothing is retired on it.
        if observed.is_empty()
            && self
                .nodes
                .values()
                .any(|n| n.known_from == Origin::Orchestrator)
        {
            return out;
        }
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
            let taken = self.versions.get(&o.id).copied();
            if let Some(before) = o
                .before
                .as_deref()
                .filter(|b| takes_before(self.nodes.get(&o.id).map(|n| &**n), taken, o, b))
            {
                self.take(&mut out, now, before);
            }
            self.take(&mut out, now, o);
            match o.version {
                Some(v) => self.versions.insert(o.id.clone(), v),
                None => self.versions.remove(&o.id),
            };
        }
        out.absorb(self.observe_withdraws(cfg, now));
        out.absorb(self.limit_withdraws(cfg, now));
        out
    }

    /// Take in one view of a node.
    fn take(&mut self, out: &mut Outcome, now: Time, o: &Observed) {
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
            self.retire(out, now, &o.id, why);
        }
        let replaced = &mut self.ledger.replaced;
        let node = self.nodes.entry(o.id.clone()).or_insert_with(|| {
            let mut n = Node::new(&o.id);
            n.known_since = Some(now);
            n.policy.replaced_at = super::take_replaced(replaced, &o.id, now, &mut out.ledger);
            Box::new(n)
        });
        if node.known_from != Origin::Orchestrator || node.uid != o.uid {
            node.known_from = Origin::Orchestrator;
            node.uid = o.uid.clone();
            out.dirty.insert(o.id.clone());
        }
        // What of the node the inventory can change, to tell whether it did.
        let seen = |node: &Node| {
            (
                node.labels.clone(),
                node.hostname.clone(),
                node.policy.provisioned,
                node.policy.allocations,
                node.policy.work_counted,
                node.status,
                node.policy.pending.len(),
                node.policy.not_ready,
                node.policy.released,
                node.policy.orchestrator_health.clone(),
            )
        };
        let before = seen(node);
        let recorded = out.events.len();
        // What the configuration's inventory says of the node goes on top.
        let listed = self.listed.get(&o.id);
        node.labels = o.labels.clone();
        if let Some(l) = listed {
            node.labels
                .extend(l.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        node.policy.not_ready = o.not_ready;
        node.policy.released = o.released;
        node.policy.orchestrator_health = o.orchestrator_health.clone();
        node.hostname = listed
            .and_then(|l| l.hostname.clone())
            .or_else(|| o.hostname.clone());
        node.policy.provisioned = o.provisioned;
        if let Some(n) = o.allocations {
            node.policy.allocations = n;
            if o.status == Status::Cordoned && node.policy.cordon.is_some() {
                node.policy.work_counted = true;
            }
        }
        // A cordon an uncordon withdrew while under way may land yet: the node
        // shown in service does not stand for the uncordon queued behind it.
        let landing = self.under_way.get(&o.id).is_some_and(|p| {
            matches!(
                p.action,
                Action::Cordon { .. } | Action::Drain { active: false, .. }
            ) && !node.policy.pending.iter().any(|q| q.id == p.id)
        });
        confirm_done(&mut node.policy.pending, o, landing);
        let queued =
            |node: &Node, f: fn(&Action) -> bool| node.policy.pending.iter().any(|p| f(&p.action));
        // The gate hale holds is gone from the node (Slurm puts back the
        // configured weights on a restart or `scontrol reconfigure`): set again,
        // or new work lands on a node hale shows gated.
        if node.policy.gated
            && o.gated == Some(false)
            && !queued(node, |a| matches!(a, Action::Gate { .. }))
        {
            node.policy.push(Action::Gate { on: true });
        }
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
                    drain_refused: false,
                    drain_reason: None,
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
            // hale's cordon made again by someone else (`scontrol` with a reason
            // of their own): the operator's now, never undone by hale (the reboot
            // flow's uncordon included) nor replaced.
            Status::Cordoned
                if node
                    .policy
                    .cordon
                    .as_ref()
                    .is_some_and(|c| c.by == Actor::Hale)
                    && matches!(o.cordoned_by, Some((Actor::Operator, _)))
                    && !queued(node, |a| {
                        matches!(
                            a,
                            Action::Cordon { .. } | Action::Uncordon | Action::Drain { .. }
                        )
                    }) =>
            {
                let reason = o
                    .cordoned_by
                    .as_ref()
                    .map(|(_, r)| r.clone())
                    .unwrap_or_default();
                super::taken_over(node, &reason);
                out.events.push(event(
                    &o.id,
                    now,
                    EventKind::NodeCordoned {
                        by: Actor::Operator.as_str().into(),
                        reason: reason.clone(),
                    },
                    format!("cordoned by operator outside hale: {reason} (hale's cordon is the operator's now)"),
                ));
            }
            Status::Ready
                if node.policy.cordon.is_some()
                    && !queued(node, |a| {
                        matches!(a, Action::Cordon { .. } | Action::Drain { .. })
                    }) =>
            {
                out.events
                    .extend(put_back(node, "uncordoned outside hale", now));
            }
            // Its own cordon shown: what the node is now, whatever hale last
            // read of it (not ready while its controller restarted, say).
            Status::Cordoned if node.policy.cordon.is_some() => {
                node.status = Status::Cordoned;
            }
            Status::NotReady | Status::Offline => node.status = o.status,
            Status::Ready if node.status != Status::Cordoned => node.status = Status::Ready,
            _ => {}
        }
        if before != seen(node) || out.events.len() != recorded {
            out.dirty.insert(o.id.clone());
        }
    }

    /// Forget node `id` for the orchestrator's reason `why`; its events stay.
    fn retire(&mut self, out: &mut Outcome, now: Time, id: &str, why: String) {
        self.versions.remove(id);
        let Some(node) = self.nodes.remove(id) else {
            return;
        };
        out.dirty.remove(id);
        out.touched.remove(id);
        out.removed.push(id.into());
        // Within the hold the name's history ends with its replacement, not with a
        // departure; and a new machine under the name (a new uid) takes the hold.
        if let Some(at) = node
            .policy
            .replaced_at
            .filter(|_| super::just_replaced(&node, now))
        {
            self.ledger.replaced.insert(id.into(), at);
            out.ledger = true;
            return;
        }
        out.events.push(event(
            id,
            now,
            EventKind::NodeDecommissioned {
                by: "orchestrator".into(),
            },
            format!("decommissioned: {why}"),
        ));
    }
}

/// Whether `b`, the state `o` left with its last change, is taken before `o`: an
/// uncordon made outside hale (see [`Observed::before`]) after a cordon this record
/// has not read — one it queued itself (a follower's, its leader's done) or never
/// saw at all. Only a state newer than the last view taken and older than `o`, of
/// the same machine, is; and never one that would stand for anything else queued
/// (an uncordon the operator asked of hale is sent, not taken for done).
fn takes_before(node: Option<&Node>, taken: Option<u64>, o: &Observed, b: &Observed) -> bool {
    let unread = matches!(
        (taken, b.version, o.version),
        (Some(taken), Some(was), Some(is)) if taken < was && was < is
    );
    let Some(node) = node.filter(|_| {
        unread && b.status == Status::Cordoned && o.status != Status::Cordoned && b.uid == o.uid
    }) else {
        return false;
    };
    let pending = &node.policy.pending;
    let last = pending
        .iter()
        .rev()
        .find(|p| matches!(p.action, Action::Cordon { .. } | Action::Uncordon));
    match last {
        Some(p) if matches!(p.action, Action::Cordon { .. }) => {
            let mut left = pending.clone();
            confirm_done(&mut left, b, false);
            left.len() < pending.len()
        }
        Some(_) => false,
        None => node.policy.cordon.is_none(),
    }
}

/// Drop the pending actions the orchestrator shows done: another replica did them
/// (this one was following), or they were done before a crash was recorded. Each
/// family (cordon/uncordon/passive drain; the gate) is judged by its last queued
/// entry — the state the node must end in — and by the last cordon or uncordon in
/// it, so a cordon by someone else does not stand for hale's record of who and why.
/// The score policy's cordon is done whatever score the reason the node shows
/// names: a follower decides the same cordon as its leader a poll apart, with the
/// score of its own poll, and kept queued it hid an operator's uncordon and was
/// sent once the follower led. A reboot flow's reason is not one of those words:
/// a flow's cordon handed to the policy (the reboot did not cure the node) is
/// written with the policy's reason. With a withdrawn cordon still `landing`, an
/// uncordon is not shown done by a node in service: it is sent after it.
fn confirm_done(pending: &mut Vec<Pending>, o: &Observed, landing: bool) {
    let cordoned = o.status == Status::Cordoned;
    let flows = super::remediation::flows;
    let shown = |a: &Action| match a {
        Action::Cordon { by, reason } => {
            cordoned
                && o.cordoned_by.as_ref().is_some_and(|(b, r)| {
                    b == by && (r == reason || (*by == Actor::Hale && !flows(r) && !flows(reason)))
                })
        }
        Action::Drain { active: false, .. } => cordoned,
        Action::Uncordon => !cordoned && !landing,
        Action::Gate { on } => o.gated == Some(*on),
        Action::Evict { fault_class, .. } => o
            .evicted
            .as_deref()
            .is_some_and(|e| e.eq_ignore_ascii_case(fault_class)),
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
