//! How inputs enter the fleet: polls (the full picture), webhook deliveries (a
//! partial one), the passing of time, the inventory, and an operator's clear, failure
//! report or decommission. Each is one [`Step`] ending in `finish`.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Bound, Range};

use super::conditions::{apply_alerts, count_failure};
use super::labels::{Alert, AlertState, Signal};
use super::outcome::{CoreError, Outcome};
use super::settings::{CoreSettings, Identity};
use super::step::{Keyed, Recorder, Scope, Step, group_by_key};
use super::trust::{Judged, Keep, NONE_NEWER};
use super::{
    Event, EventKind, Fleet, HEARTBEAT_MISSED, Node, Origin, TELEMETRY_STALE, Time, spread,
};

/// A node an inventory lists before it reports (bare metal: the configuration's
/// `inventory`).
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    pub id: String,
    pub hostname: Option<String>,
    /// What pool selectors match.
    pub labels: BTreeMap<String, String>,
}

/// One answer of Alertmanager's v2 API, as the core reads it.
pub struct PollAnswer<'p, 'a> {
    /// The receiver's active and suppressed alerts.
    pub alerts: &'p [Alert<'a>],
    /// Alertmanager's clock when it answered (its `Date` header): an alert gone
    /// before its expiry was resolved.
    pub answered: Time,
    /// When the Alertmanager that answered started (`/api/v2/status` uptime), when
    /// it said.
    pub started: Option<Time>,
    /// Its status was asked for and could not be read: whether it restarted since
    /// the last answer (and lost its alerts) cannot be told.
    pub status_unread: bool,
    /// How long the answer took to arrive, from the request to its last byte.
    pub took: std::time::Duration,
    /// Fingerprints webhook deliveries named while the answer was fetched: newer than
    /// it, so it neither ends nor revives them.
    pub delivered: &'p BTreeSet<String>,
}

/// A poll's answer applied a slice of nodes at a time, so that deliveries are not
/// held up behind a whole fleet's poll: [`Fleet::poll_begin`], then
/// [`Fleet::poll_slice`] (with the same alerts) until [`PollSlices::done`], then
/// [`Fleet::poll_end`]. A delivery applied between slices is newer than the answer:
/// pass its fingerprints to the slices after it. [`Fleet::poll_answer`] is the same
/// in one go.
pub struct PollSlices {
    /// The answer's alerts that name a node (their indices), by node in the order of
    /// the nodes' ids: each group a range of `items`.
    groups: Vec<std::ops::Range<usize>>,
    items: Vec<u32>,
    /// How many groups were applied.
    next: usize,
    /// A trusted answer only: how many of the gaps around the groups (before the
    /// first, between two, after the last) were looked into for known nodes the
    /// answer does not name, and those found in the last, still to apply (last
    /// first). Each gap is a range of the fleet's ids, read as the slices reach
    /// it: no slice walks the whole fleet.
    gaps: usize,
    silent: Vec<String>,
    answered: Time,
    /// When the answer was judged: what its heartbeats show, once applied.
    begun: Time,
    refreshes: Option<u64>,
    trusted: bool,
    /// The labels that named the nodes, kept for the slices: a reload between two
    /// slices must not rename what the first grouped.
    identity: Identity,
}

/// An answer's alerts grouped by the node each names, the watchdogs and the
/// alerts that name no node set apart: the part of a poll that needs no fleet,
/// worked out before the fleet is locked, so that deliveries do not wait for a
/// pass over every alert of the answer.
pub struct NodeGroups {
    /// Each node's alerts (their indices), by node in the order of the nodes' ids:
    /// each group a range of `items`.
    groups: Vec<std::ops::Range<usize>>,
    items: Vec<u32>,
    watchdogs: Vec<u32>,
    unmatched: Vec<u32>,
    /// The labels that named the nodes.
    identity: Identity,
}

impl NodeGroups {
    pub fn of(alerts: &[Alert<'_>], identity: &Identity) -> NodeGroups {
        // Each core reads its part of the answer and sorts what it found; the sort
        // of their parts together then merges the sorted runs.
        let parts = spread::ranges(alerts.len(), |range| {
            let mut part = Part::default();
            for i in range {
                if let Some(ahead) = alerts.get(i + 16) {
                    ahead.prefetch_labels();
                }
                if let Some(ahead) = alerts.get(i + 8) {
                    ahead.prefetch_text();
                }
                let alert = &alerts[i];
                let i = i as u32;
                let signal = alert.signal();
                if signal == Signal::Watchdog {
                    part.watchdogs.push(i);
                    continue;
                }
                match alert.node(identity) {
                    Some(node) if !alert.claims_own_condition(&signal) => {
                        part.named.push((Keyed::new(node), i));
                    }
                    _ => part.unmatched.push(i),
                }
            }
            part.named.sort_by(|a, b| a.0.order(&b.0));
            part
        });
        let mut whole = Part::default();
        for mut part in parts {
            whole.named.append(&mut part.named);
            whole.watchdogs.append(&mut part.watchdogs);
            whole.unmatched.append(&mut part.unmatched);
        }
        let (groups, items) = group_by_key(whole.named).into_ranges();
        NodeGroups {
            groups,
            items,
            watchdogs: whole.watchdogs,
            unmatched: whole.unmatched,
            identity: identity.clone(),
        }
    }
}

/// What one core found in its part of an answer, by [`NodeGroups::of`].
#[derive(Default)]
struct Part<'a> {
    named: Vec<(Keyed<'a>, u32)>,
    watchdogs: Vec<u32>,
    unmatched: Vec<u32>,
}

impl PollSlices {
    /// Whether every node was applied: [`Fleet::poll_end`] is next.
    pub fn done(&self) -> bool {
        self.next == self.groups.len()
            && (!self.trusted || (self.gaps > self.groups.len() && self.silent.is_empty()))
    }
}

impl<'p, 'a> PollAnswer<'p, 'a> {
    /// An answer with nothing but its alerts, taken at `now`.
    pub fn of(alerts: &'p [Alert<'a>], now: Time) -> Self {
        PollAnswer {
            alerts,
            answered: now,
            started: None,
            status_unread: false,
            took: std::time::Duration::ZERO,
            delivered: &NONE_NEWER,
        }
    }
}

impl Fleet {
    /// A successful answer from Alertmanager: the receiver's active and suppressed
    /// alerts. Trusted when it holds the watchdog (or the watchdog is not required);
    /// a trusted poll reconciles everything, an untrusted one only adds evidence.
    pub fn poll(&mut self, cfg: &CoreSettings, now: Time, alerts: &[Alert<'_>]) -> Outcome {
        self.poll_answer(cfg, now, &PollAnswer::of(alerts, now))
    }

    /// [`Fleet::poll`] with what else the answer says: its time, the answering
    /// Alertmanager's start, and the deliveries applied while it was fetched.
    ///
    /// A restart of the pipeline is detected here and holds every absence for
    /// `holdAfterRestart` ([`Trust::hold`]): an Alertmanager that started later than
    /// the one seen before (it kept no alerts), a watchdog missing from an answer,
    /// or a watchdog whose expiry was not pushed forward within half the validity
    /// Prometheus gives it (Prometheus stopped sending for a while: a restarted
    /// Prometheus sends a `for:` alert again only once its `for` has elapsed).
    pub fn poll_answer(
        &mut self,
        cfg: &CoreSettings,
        now: Time,
        answer: &PollAnswer<'_, '_>,
    ) -> Outcome {
        let groups = NodeGroups::of(answer.alerts, &cfg.identity);
        let (mut slices, mut out) = self.poll_begin(cfg, now, answer, groups);
        while !slices.done() {
            out.absorb(self.poll_slice(
                cfg,
                now,
                &mut slices,
                answer.alerts,
                answer.delivered,
                usize::MAX,
            ));
        }
        out.absorb(self.poll_end(cfg, now, &slices));
        out
    }

    /// The first step of a poll applied in slices ([`PollSlices`]): the answer,
    /// its alerts grouped by node beforehand (`groups`, [`NodeGroups::of`] on its
    /// alerts), is judged (trust, holds); no node changes yet. The alerts that
    /// deliveries named meanwhile are left out as each slice meets them.
    pub fn poll_begin(
        &mut self,
        cfg: &CoreSettings,
        now: Time,
        answer: &PollAnswer<'_, '_>,
        groups: NodeGroups,
    ) -> (PollSlices, Outcome) {
        let at = |i: &u32| &answer.alerts[*i as usize];
        let watchdogs: Vec<&Alert<'_>> = groups.watchdogs.iter().map(at).collect();
        let Judged {
            trusted,
            refreshes,
            held,
        } = self.trust.judge(&cfg.source, now, answer, &watchdogs);
        let mut step = Step::new(self, cfg, now);
        step.out.trusted = trusted;
        step.out.held = held;
        step.settle_trust();
        step.out.unmatched = groups
            .unmatched
            .iter()
            .filter(|&i| !answer.delivered.contains(at(i).fingerprint.as_ref()))
            .count() as u64;
        let slices = PollSlices {
            groups: groups.groups,
            items: groups.items,
            next: 0,
            gaps: 0,
            silent: Vec::new(),
            answered: answer.answered,
            begun: now,
            refreshes,
            trusted,
            identity: groups.identity,
        };
        (slices, step.out)
    }

    /// Apply the next `nodes` nodes of a poll begun by [`Fleet::poll_begin`] on
    /// `alerts` (the answer's), in the order of their ids: each node's alerts but
    /// those `newer` names (deliveries applied since the answer was fetched), and —
    /// a trusted answer being the whole picture — the known nodes it does not name.
    /// The nodes are rescored; the policy waits for [`Fleet::poll_end`].
    pub fn poll_slice(
        &mut self,
        cfg: &CoreSettings,
        now: Time,
        slices: &mut PollSlices,
        alerts: &[Alert<'_>],
        newer: &BTreeSet<String>,
        nodes: usize,
    ) -> Outcome {
        let trusted = slices.trusted;
        let node_of = |range: &std::ops::Range<usize>| {
            alerts[slices.items[range.start] as usize]
                .node(&slices.identity)
                .expect("grouped by it")
        };
        let mut step = Step::new(self, cfg, now);
        step.out.trusted = trusted;
        step.keep = Keep {
            newer,
            answered: Some(slices.answered),
            refreshes: slices.refreshes,
            hold: step.fleet.trust.held_since(now),
            polled: cfg.source.polling,
        };
        let mut room = cfg
            .identity
            .max_nodes
            .saturating_sub(step.fleet.nodes.len());
        let mut budget = nodes;
        // The walk decides which nodes this slice applies and creates the new ones;
        // what each node's alerts do to it is then worked out on the machine's cores.
        let mut shares: Vec<Share<'_>> = Vec::new();
        let mut fresh: Vec<&Alert<'_>> = Vec::new();
        while budget > 0 {
            if let Some(id) = slices.silent.pop() {
                budget -= 1;
                // Retired or decommissioned between two slices: gone, not revived.
                if step.fleet.nodes.contains_key(&id) {
                    shares.push(Share {
                        id: Cow::Owned(id),
                        alerts: fresh.len()..fresh.len(),
                        full: true,
                        born: Vec::new(),
                    });
                }
                continue;
            }
            // The known nodes between the last group applied and the next.
            if trusted && slices.gaps == slices.next && slices.gaps <= slices.groups.len() {
                let after = slices
                    .gaps
                    .checked_sub(1)
                    .map(|g| node_of(&slices.groups[g]));
                let before = slices.groups.get(slices.gaps).map(node_of);
                slices.gaps += 1;
                if after.zip(before).is_some_and(|(a, b)| a >= b) {
                    continue;
                }
                let bounds = (
                    after.map_or(Bound::Unbounded, Bound::Excluded),
                    before.map_or(Bound::Unbounded, Bound::Excluded),
                );
                slices.silent = step
                    .fleet
                    .nodes
                    .range::<str, _>(bounds)
                    .rev()
                    .map(|(id, _)| id.clone())
                    .collect();
                continue;
            }
            let Some(range) = slices.groups.get(slices.next) else {
                break;
            };
            slices.next += 1;
            budget -= 1;
            let ahead = |by: usize| {
                slices
                    .groups
                    .get(slices.next + by)
                    .into_iter()
                    .flat_map(|r| slices.items[r.clone()].iter().map(|&i| &alerts[i as usize]))
            };
            // The text of a node's first alert only, whose node name the walk reads:
            // the cores applying the slice hint the rest for themselves, and text
            // hinted here would only crowd this core's caches.
            ahead(8).for_each(Alert::prefetch);
            ahead(4).for_each(Alert::prefetch_labels);
            ahead(2).take(1).for_each(Alert::prefetch_text);
            let id = node_of(range);
            let start = fresh.len();
            fresh.extend(
                slices.items[range.clone()]
                    .iter()
                    .map(|&i| &alerts[i as usize])
                    .filter(|a| !newer.contains(a.fingerprint.as_ref())),
            );
            let mine = start..fresh.len();
            // Every alert of the node came newer by delivery: what the whole picture
            // says of a node it does not name, or, untrusted, nothing.
            let applies = (!mine.is_empty() || trusted)
                && (step.fleet.nodes.contains_key(id)
                    || step.admits(id, &fresh[mine.clone()], &mut room));
            if !applies {
                fresh.truncate(start);
                continue;
            }
            let recorded = step.out.events.len();
            step.ensure(id);
            shares.push(Share {
                id: Cow::Borrowed(id),
                alerts: mine,
                full: trusted,
                born: step.out.events.split_off(recorded),
            });
        }
        step.apply_shares(shares, &fresh, trusted);
        step.finish(Scope::Slice)
    }

    /// The last step of a poll applied in slices: time's work (missed heartbeats, the
    /// sweep), every node rescored where it has to be, and the whole policy.
    pub fn poll_end(&mut self, cfg: &CoreSettings, now: Time, slices: &PollSlices) -> Outcome {
        if slices.trusted {
            self.trust.applied = Some(slices.begun.min(now));
        }
        let mut step = Step::new(self, cfg, now);
        step.out.trusted = slices.trusted;
        step.finish(Scope::All)
    }

    /// Alertmanager could not be asked or answered garbage: nothing is cleared.
    pub fn poll_failed(&mut self, cfg: &CoreSettings, now: Time, error: String) -> Outcome {
        self.trust.source_up = false;
        self.trust.failed_since_start += 1;
        self.trust.asked_since_start |= self.trust.failed_since_start >= 2;
        self.trust.last_error = Some(error);
        Step::new(self, cfg, now).finish(Scope::Time)
    }

    /// One webhook delivery: firing alerts add evidence, resolved ones end theirs. With
    /// polling off, a firing watchdog here is what keeps the input trusted.
    pub fn webhook(&mut self, cfg: &CoreSettings, now: Time, alerts: &[Alert<'_>]) -> Outcome {
        let am = &cfg.source;
        let polling = am.polling;
        // Without polling the deliveries are the source: one carrying the watchdog
        // proves the pipeline alive, and so does any one at all when the watchdog
        // is not required.
        let watchdog = alerts
            .iter()
            .any(|a| a.state != AlertState::Resolved && a.signal() == Signal::Watchdog);
        if !polling && (watchdog || !am.require_watchdog) {
            self.trust.trusted(now);
            self.trust.applied = Some(now);
        }
        // With polling on, a delivery's resolutions wait for the polls to show the
        // watchdog moving (see `Keep`); without it nothing can tell them from expiries.
        let refreshes = (polling && am.require_watchdog)
            .then_some(&self.trust)
            .filter(|t| t.watchdog_expires.is_some())
            .map(|t| t.watchdog_refreshes);
        let mut step = Step::new(self, cfg, now);
        step.settle_trust();
        step.keep.refreshes = refreshes;
        step.keep.hold = step.fleet.trust.held_since(now);
        step.keep.polled = polling;
        let trusted = !step.fleet.trust.stale;
        step.out.trusted = trusted;
        // Without polling, what a hold keeps is ended by the step after it lapses,
        // and what arrives while stale by the one after the hold trust's return
        // starts.
        if (step.keep.hold.is_some() || !trusted)
            && !polling
            && alerts.iter().any(|a| a.state == AlertState::Resolved)
        {
            step.fleet.trust.held_resolutions = true;
        }
        step.ingest(alerts, trusted);
        step.finish(Scope::Touched)
    }

    /// A backtest step ([`super::replay`]): the recorded evidence is already back on
    /// the nodes in `reported`, which count as reporting now through a trusted source.
    pub fn replayed(
        &mut self,
        cfg: &CoreSettings,
        now: Time,
        reported: &BTreeSet<String>,
    ) -> Outcome {
        self.trust.trusted(now);
        self.trust.applied = Some(now);
        let mut step = Step::new(self, cfg, now);
        for id in reported {
            if let Some(node) = step.fleet.nodes.get_mut(id) {
                node.last_report = Some(now);
                step.out.dirty.insert(id.clone());
            }
        }
        step.finish(Scope::Time)
    }

    /// Time passed: staleness, missed heartbeats, decaying failure deductions.
    pub fn tick(&mut self, cfg: &CoreSettings, now: Time) -> Outcome {
        Step::new(self, cfg, now).finish(Scope::Tick)
    }

    /// A clean stop: a last tick, and what reports held in memory written out.
    /// Between saves a report that changes nothing else is kept in memory
    /// ([`super::REPORTS_SAVED_EVERY`]): its conditions' observation counts and
    /// last-seen times, its report and heartbeat times, the policy's count of its
    /// scored reports. A crash loses those; a stop does not: a node that reported
    /// in this process is written whole where it has conditions or a count not yet
    /// written, and its report times alone otherwise.
    pub fn stop(&mut self, cfg: &CoreSettings, now: Time) -> Outcome {
        let mut out = self.tick(cfg, now);
        for node in self.nodes.values().filter(|n| n.reports_saved.is_some()) {
            if !node.conditions.is_empty() || node.policy.count_unsaved {
                out.dirty.insert(node.id.clone());
            } else {
                out.touched.insert(node.id.clone());
            }
        }
        out
    }

    /// Register nodes known before they report; refresh their labels and hostname.
    /// `inventory` is the whole list: a node it no longer holds is from now on known
    /// from alerts alone, and retired as such nodes are (its history kept).
    pub fn register(&mut self, cfg: &CoreSettings, now: Time, inventory: &[Listed]) -> Outcome {
        self.pools = None;
        let listed: BTreeSet<&str> = inventory.iter().map(|k| k.id.as_str()).collect();
        let mut step = Step::new(self, cfg, now);
        for node in step.fleet.nodes.values_mut() {
            if node.known_from == Origin::Inventory && !listed.contains(node.id.as_str()) {
                node.known_from = Origin::Alerts;
                step.out.dirty.insert(node.id.clone());
            }
        }
        for known in inventory {
            let node = step.node(&known.id);
            // A node the orchestrator lists keeps what it said of it until its next
            // inventory, the configuration's labels on top: dropped meanwhile, the
            // node would be priced and acted on under another pool's settings.
            let from_orchestrator = node.known_from == Origin::Orchestrator;
            let mut labels = if from_orchestrator {
                node.labels.clone()
            } else {
                BTreeMap::new()
            };
            labels.extend(known.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
            let hostname = match &known.hostname {
                Some(h) => Some(h.clone()),
                None if from_orchestrator => node.hostname.clone(),
                None => None,
            };
            let origin = node.known_from.max_known(Origin::Inventory);
            if node.labels != labels || node.hostname != hostname || node.known_from != origin {
                node.labels = labels;
                node.hostname = hostname;
                node.known_from = origin;
                step.out.dirty.insert(known.id.clone());
            }
        }
        step.fleet.listed = inventory
            .iter()
            .map(|k| (k.id.clone(), k.clone()))
            .collect();
        step.finish(Scope::Touched)
    }

    /// `hale node clear`: end a condition by operator decision (sticky ones only end so).
    pub fn clear_condition(
        &mut self,
        cfg: &CoreSettings,
        now: Time,
        node_id: &str,
        condition: &str,
        reason: &str,
    ) -> Result<Outcome, CoreError> {
        let node = self
            .nodes
            .get_mut(node_id)
            .ok_or_else(|| CoreError::UnknownNode(node_id.into()))?;
        // hale's own, in whatever case it is named: never an alert's (one an
        // earlier version let an alert raise in another case, kept as named, clears).
        let own = [HEARTBEAT_MISSED, TELEMETRY_STALE]
            .iter()
            .any(|own| own.eq_ignore_ascii_case(condition.trim()));
        let held = !matches!(condition, HEARTBEAT_MISSED | TELEMETRY_STALE)
            && node.conditions.contains_key(condition);
        if own && !held {
            return Err(CoreError::NotClearable {
                node: node_id.into(),
                condition: condition.into(),
            });
        }
        let removed =
            node.conditions
                .remove(condition)
                .ok_or_else(|| CoreError::UnknownCondition {
                    node: node_id.into(),
                    condition: condition.into(),
                })?;
        let mut step = Step::new(self, cfg, now);
        let reason = if reason.trim().is_empty() {
            "no reason given"
        } else {
            reason.trim()
        };
        step.event(
            node_id,
            EventKind::ConditionCleared {
                condition: condition.into(),
                severity: removed.severity,
                cleared_by: "operator".into(),
            },
            format!("{condition} cleared by operator: {reason}"),
        );
        Ok(step.finish(Scope::Touched))
    }

    /// Attribute one job failure to a node (`POST /api/v1/nodes/{id}/failures`).
    pub fn attribute_failure(
        &mut self,
        cfg: &CoreSettings,
        now: Time,
        node_id: &str,
        job: &str,
        reason: Option<&str>,
        occurred_at: Option<Time>,
    ) -> Result<Outcome, CoreError> {
        if !self.nodes.contains_key(node_id) {
            return Err(CoreError::UnknownNode(node_id.into()));
        }
        let forget = cfg.identity.forget_after;
        if let Some(at) = occurred_at
            && chrono::TimeDelta::from_std(forget)
                .ok()
                .and_then(|f| now.checked_sub_signed(f))
                .is_some_and(|horizon| at < horizon)
        {
            return Err(CoreError::Forgotten {
                at: at.to_rfc3339(),
                after: spelled(forget),
            });
        }
        let mut step = Step::new(self, cfg, now);
        let at = occurred_at.map_or(now, |t| t.min(now));
        step.count_failure(node_id, job, reason.unwrap_or("unspecified"), at);
        // A failure is evidence beyond a scored node's first report: the score it
        // leaves is a second score, which the policy acts on without waiting for
        // the node's next alert (hours away where Alertmanager repeats rarely).
        if let Some(node) = step.fleet.nodes.get_mut(node_id)
            && node.score.is_some()
            && node.policy.scored_reports < 2
            && cfg.settings_for(&node.labels).failure_tally_penalty > 0.0
        {
            node.policy.scored_reports = 2;
            step.out.dirty.insert(node_id.to_string());
        }
        Ok(step.finish(Scope::Touched))
    }

    /// Forget a node (its history stays with the events). Alerts that still name it
    /// bring it back as a new, unscored node.
    pub fn decommission(
        &mut self,
        cfg: &CoreSettings,
        now: Time,
        node_id: &str,
    ) -> Result<Outcome, CoreError> {
        match self.nodes.get(node_id) {
            None => return Err(CoreError::UnknownNode(node_id.into())),
            // Alerts naming it again would bring it back without the inventory's
            // hostname and labels (its pool), until a restart registered it again;
            // the orchestrator's next listing, with a history saying it had gone.
            Some(node) if node.known_from == Origin::Inventory => {
                return Err(CoreError::Listed {
                    node: node_id.into(),
                    by: "in the configuration's inventory",
                    leave: "remove it there and reload first",
                });
            }
            Some(node) if node.known_from == Origin::Orchestrator => {
                return Err(CoreError::Listed {
                    node: node_id.into(),
                    by: "by the orchestrator",
                    leave: "it leaves hale when it leaves the cluster",
                });
            }
            Some(_) => self.nodes.remove(node_id),
        };
        self.pools = None;
        // Gone on purpose, as a replaced machine is: alerts that still name it
        // for a while bring back a record that nothing acts on (no fence powers
        // on a machine an operator switched off and retired).
        self.ledger.replaced.insert(node_id.into(), now);
        let mut step = Step::new(self, cfg, now);
        step.out.ledger = true;
        step.event(
            node_id,
            EventKind::NodeDecommissioned {
                by: "operator".into(),
            },
            "node decommissioned".into(),
        );
        step.out.removed.push(node_id.into());
        Ok(step.finish(Scope::Touched))
    }
}

impl<'f> Step<'f> {
    /// Apply a batch of alerts. `full`: the batch is the whole picture, so whatever it
    /// lacks has ended. `trusted`: it may clear evidence and counts as a report.
    /// A delivery's alerts: each node they name gets them as partial news.
    pub(super) fn ingest(&mut self, alerts: &[Alert<'_>], trusted: bool) {
        let identity = &self.cfg.identity;
        let mut named: Vec<(Keyed<'_>, &Alert<'_>)> = Vec::with_capacity(alerts.len());
        for alert in alerts {
            let signal = alert.signal();
            if signal == Signal::Watchdog {
                continue;
            }
            match alert.node(identity) {
                Some(node) if !alert.claims_own_condition(&signal) => {
                    named.push((Keyed::new(node), alert));
                }
                _ => self.out.unmatched += 1,
            }
        }
        let mut groups = group_by_key(named);
        let mut room = (self.cfg.identity.max_nodes).saturating_sub(self.fleet.nodes.len());
        groups.retain(|id, alerts| {
            self.fleet.nodes.contains_key(id) || self.admits(id, alerts, &mut room)
        });
        for (id, alerts) in groups.iter() {
            self.apply_node(id, alerts, false, trusted);
        }
    }

    /// Whether alerts naming `id`, a node hale does not know, bring it in. Resolved
    /// alerts never do; with an orchestrator (unless `createFromAlerts`) its nodes
    /// are the fleet and the alerts are unmatched; beyond `maxNodes` they are
    /// refused.
    /// `room`: how many more nodes `maxNodes` allows.
    pub(super) fn admits(&mut self, id: &str, alerts: &[&Alert<'_>], room: &mut usize) -> bool {
        if alerts.iter().all(|a| a.state == AlertState::Resolved) {
            return false;
        }
        if !self.cfg.identity.create_from_alerts {
            self.out.unmatched += alerts.len() as u64;
            return false;
        }
        if *room == 0 {
            self.out.refused.insert(id.to_string());
            return false;
        }
        *room -= 1;
        true
    }

    pub(super) fn apply_node(
        &mut self,
        id: &str,
        alerts: &[&Alert<'_>],
        full: bool,
        trusted: bool,
    ) {
        self.ensure(id);
        let cfg = self.cfg;
        let node = self.fleet.nodes.get_mut(id).expect("created above");
        let mut rec = Recorder {
            out: &mut self.out,
            now: self.now,
            id,
        };
        apply_alerts(node, &mut rec, cfg, alerts, full, trusted, self.keep);
    }

    /// Apply each share's alerts to its node, spread over the machine's cores,
    /// then record what they did in the order the walk met the nodes: the same
    /// outcome, event for event, as applying them one by one.
    fn apply_shares(&mut self, shares: Vec<Share<'_>>, alerts: &[&Alert<'_>], trusted: bool) {
        let (cfg, now, keep) = (self.cfg, self.now, self.keep);
        let apply = |share: &Share<'_>, node: &mut Node, out: &mut Outcome| {
            let mut rec = Recorder {
                out,
                now,
                id: &share.id,
            };
            let theirs = &alerts[share.alerts.clone()];
            apply_alerts(node, &mut rec, cfg, theirs, share.full, trusted, keep);
        };
        let Some(nodes) = in_order(&mut self.fleet.nodes, &shares) else {
            // Not in the map's order (never, as the walk goes): one by one.
            for mut share in shares {
                self.out.events.append(&mut share.born);
                let node = self.fleet.nodes.get_mut(&*share.id).expect("ensured");
                apply(&share, node, &mut self.out);
            }
            return;
        };
        let mut work: Vec<(&Share<'_>, &mut Node)> = shares.iter().zip(nodes).collect();
        // Each chunk's outcome, and where each of its nodes' events end.
        let parts = spread::chunks(&mut work, |chunk| {
            let mut out = Outcome::default();
            let mut ends = Vec::with_capacity(chunk.len());
            // Each core hints its own nodes' labels and text some way ahead: what
            // the walk brought near for the whole slice has left the walk's core's
            // caches by the time a node is applied here.
            for at in 0..chunk.len() {
                let ahead = |by: usize| {
                    chunk
                        .get(at + by)
                        .into_iter()
                        .flat_map(|(share, _)| &alerts[share.alerts.clone()])
                };
                ahead(4).for_each(|a| a.prefetch_labels());
                ahead(2).for_each(|a| a.prefetch_text());
                let (share, node) = &mut chunk[at];
                apply(share, node, &mut out);
                ends.push(out.events.len());
            }
            (out, ends)
        });
        drop(work);
        let mut shares = shares.into_iter();
        for (mut out, ends) in parts {
            let mut events = std::mem::take(&mut out.events).into_iter();
            let mut from = 0;
            for end in ends {
                let share = shares.next().expect("a share per end");
                self.out.events.extend(share.born);
                self.out.events.extend(events.by_ref().take(end - from));
                from = end;
            }
            self.out.absorb(out);
        }
    }

    pub(super) fn count_failure(&mut self, id: &str, job: &str, reason: &str, at: Time) {
        self.ensure(id);
        let node = self.fleet.nodes.get_mut(id).expect("created above");
        let mut rec = Recorder {
            out: &mut self.out,
            now: self.now,
            id,
        };
        count_failure(node, &mut rec, job, reason, at);
    }
}

/// One node a poll's slice applies: its id, its alerts (a range of the slice's
/// list), whether they are all of its alerts, and the events its creation recorded.
struct Share<'a> {
    id: Cow<'a, str>,
    alerts: Range<usize>,
    full: bool,
    born: Vec<Event>,
}

/// The nodes of `shares`, each once, borrowed together: `None` unless the shares
/// name nodes of `nodes` in its (ascending) order, each once.
fn in_order<'n>(
    nodes: &'n mut BTreeMap<String, Box<Node>>,
    shares: &[Share<'_>],
) -> Option<Vec<&'n mut Node>> {
    let (Some(first), Some(last)) = (shares.first(), shares.last()) else {
        return Some(Vec::new());
    };
    if first.id > last.id {
        return None;
    }
    let mut wanted = shares.iter().map(|s| &*s.id).peekable();
    let mut found = Vec::with_capacity(shares.len());
    let bounds = (Bound::Included(&*first.id), Bound::Included(&*last.id));
    for (id, node) in nodes.range_mut::<str, _>(bounds) {
        if wanted.peek() == Some(&id.as_str()) {
            wanted.next();
            found.push(&mut **node);
        }
    }
    (found.len() == shares.len()).then_some(found)
}

/// A duration as the configuration writes one: `7d`, `1h30m`, `45s`.
fn spelled(d: std::time::Duration) -> String {
    let mut left = d.as_secs();
    let mut out = String::new();
    for (unit, secs) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if left >= secs {
            out.push_str(&format!("{}{unit}", left / secs));
            left %= secs;
        }
    }
    if out.is_empty() {
        format!("{}ms", d.as_millis())
    } else {
        out
    }
}
