//! How inputs move the fleet: polls (the full picture), webhook deliveries (a partial
//! one), the passing of time, and operator actions. Every entry point ends in the same
//! `finish` step — trust, heartbeats, scores — so the rules hold whichever path fed them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::TimeDelta;

use super::labels::{Alert, AlertState, Signal};
use super::policy::Policy;
use super::{
    COLLECTOR_FAILED, Condition, Event, EventKind, FAILURE_DEDUCTION, Fleet, HEARTBEAT_MISSED,
    Heartbeat, Node, Origin, Severity, SmallMap, Source, TELEMETRY_STALE, Time,
};
use crate::config::{InventoryNode, Loaded, Settings};

/// What one step changed: events to record, nodes to persist, nodes removed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    pub events: Vec<Event>,
    /// Nodes whose evidence changed: persisted with the events, in one transaction.
    pub dirty: BTreeSet<String>,
    /// Nodes that only reported (report and heartbeat times, observation counts).
    pub touched: BTreeSet<String>,
    pub removed: Vec<String>,
    /// Alerts that named no node (and were not the watchdog).
    pub unmatched: u64,
    /// Whether this input was trusted (polls and webhooks).
    pub trusted: bool,
    /// Why absences began to be held in this step, when they did.
    pub held: Option<String>,
    /// New nodes refused by `nodeIdentity.maxNodes`, by id.
    pub refused: BTreeSet<String>,
    /// Whether the replacement budget changed (the ledger is written only then).
    pub ledger: bool,
    /// Workload owners whose restart count changed (written one row each).
    pub moved: BTreeSet<String>,
}

impl Outcome {
    /// Fold a later outcome into this one (used to retry a failed persist).
    pub fn absorb(&mut self, later: Outcome) {
        self.ledger |= later.ledger;
        self.moved.extend(later.moved);
        self.events.extend(later.events);
        self.dirty.extend(later.dirty);
        self.touched.extend(later.touched);
        for id in later.removed {
            self.dirty.remove(&id);
            self.touched.remove(&id);
            self.removed.push(id);
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CoreError {
    #[error("node {0} is not known")]
    UnknownNode(String),
    #[error("node {node} has no condition {condition}")]
    UnknownCondition { node: String, condition: String },
    #[error(
        "node {node} is {status} and cannot be drained: only a READY or already cordoned node can be taken out of service"
    )]
    NotDrainable { node: String, status: &'static str },
    #[error(
        "{condition} on node {node} is hale's own view of what it cannot see; it clears when the node is visible again"
    )]
    NotClearable { node: String, condition: String },
}

/// Which nodes `finish` rescores.
enum Scope {
    /// Every reported node (a poll, which may clear anything).
    All,
    /// Nodes this step touched, plus those whose failure deduction may have decayed.
    Touched,
}

/// Failure reasons a node tells apart; beyond them, [`OTHER_REASONS`].
const MAX_FAILURE_REASONS: usize = 64;
const OTHER_REASONS: &str = "other";
/// Unavailable signals a node keeps from deliveries (a poll replaces them whole).
const MAX_UNAVAILABLE: usize = 64;
/// Heartbeat intervals are capped here before multiplying by the threshold.
const MAX_INTERVAL: Duration = Duration::from_secs(24 * 3600);
/// No node is missed sooner than this after its last heartbeat.
const MIN_MISS_AFTER: Duration = Duration::from_secs(15);

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
    /// Fingerprints webhook deliveries named while the answer was fetched: newer than
    /// it, so it neither ends nor revives them.
    pub delivered: &'p BTreeSet<String>,
}

impl<'p, 'a> PollAnswer<'p, 'a> {
    /// An answer with nothing but its alerts, taken at `now`.
    pub fn of(alerts: &'p [Alert<'a>], now: Time) -> Self {
        PollAnswer {
            alerts,
            answered: now,
            started: None,
            delivered: &NONE_NEWER,
        }
    }
}

impl Fleet {
    /// A successful answer from Alertmanager: the receiver's active and suppressed
    /// alerts. Trusted when it holds the watchdog (or the watchdog is not required);
    /// a trusted poll reconciles everything, an untrusted one only adds evidence.
    pub fn poll(&mut self, cfg: &Loaded, now: Time, alerts: &[Alert<'_>]) -> Outcome {
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
    pub fn poll_answer(&mut self, cfg: &Loaded, now: Time, answer: &PollAnswer<'_, '_>) -> Outcome {
        let am = &cfg.config.alertmanager;
        let hold = TimeDelta::from_std(am.hold_after_restart).unwrap_or(TimeDelta::MAX);
        let require = am.require_watchdog;
        let watchdog = answer
            .alerts
            .iter()
            .filter(|a| a.signal() == Signal::Watchdog);
        let trusted = !require || watchdog.clone().next().is_some();
        let mut held = None;
        let trust = &mut self.trust;
        if let Some(started) = answer.started {
            if trust
                .alertmanager_started
                .is_some_and(|seen| started > seen + CLOCK_GRAIN)
            {
                let until = started.checked_add_signed(hold).unwrap_or(started);
                if trust.hold(
                    now,
                    until,
                    format!(
                        "Alertmanager restarted at {} and keeps no alerts across a restart",
                        started.to_rfc3339()
                    ),
                ) {
                    held = trust.hold_reason.clone();
                }
            }
            trust.alertmanager_started = trust.alertmanager_started.max(Some(started));
        }
        let mut refreshes = None;
        if trusted {
            trust.trusted(now);
            if require && let Some(expires) = watchdog.filter_map(Alert::expires).max() {
                if trust.watchdog_expires.is_none_or(|seen| expires > seen) {
                    if trust.watchdog_expires.is_some() {
                        trust.watchdog_refreshes += 1;
                    }
                    trust.watchdog_shown_since = Some(answer.answered);
                    trust.watchdog_validity = Some(expires - answer.answered);
                }
                trust.watchdog_expires = trust.watchdog_expires.max(Some(expires));
                refreshes = Some(trust.watchdog_refreshes);
                // Prometheus re-sends the watchdog every quarter of the validity it
                // gives it: the same expiry shown for more than half of it means
                // Prometheus stopped sending (measured on Alertmanager's clock, so
                // hale's own downtime does not count).
                if let (Some(since), Some(valid)) =
                    (trust.watchdog_shown_since, trust.watchdog_validity)
                    && answer.answered - since > valid / 2
                    && trust.hold(
                        now,
                        now.checked_add_signed(hold).unwrap_or(now),
                        format!(
                            "the watchdog has not been re-sent for {}s: Prometheus stopped sending alerts",
                            (answer.answered - since).num_seconds()
                        ),
                    )
                {
                    held = trust.hold_reason.clone();
                }
            }
        } else {
            trust.source_up = false;
            trust.last_error = Some("the watchdog alert is missing from the answer".into());
            if trust.hold(
                now,
                now.checked_add_signed(hold).unwrap_or(now),
                "the watchdog is missing from Alertmanager's answer".into(),
            ) {
                held = trust.hold_reason.clone();
            }
        }
        let mut step = Step::new(self, cfg, now);
        step.out.trusted = trusted;
        step.out.held = held;
        step.settle_trust();
        step.keep = Keep {
            newer: answer.delivered,
            answered: Some(answer.answered),
            refreshes,
            hold: step.fleet.trust.held_since(now),
        };
        step.ingest(answer.alerts, trusted, trusted);
        step.finish(Scope::All)
    }

    /// Alertmanager could not be asked or answered garbage: nothing is cleared.
    pub fn poll_failed(&mut self, cfg: &Loaded, now: Time, error: String) -> Outcome {
        self.trust.source_up = false;
        self.trust.last_error = Some(error);
        Step::new(self, cfg, now).finish(Scope::Touched)
    }

    /// One webhook delivery: firing alerts add evidence, resolved ones end theirs. With
    /// polling off, a firing watchdog here is what keeps the input trusted.
    pub fn webhook(&mut self, cfg: &Loaded, now: Time, alerts: &[Alert<'_>]) -> Outcome {
        let am = &cfg.config.alertmanager;
        let polling = !am.poll_interval.is_zero();
        // Without polling the deliveries are the source: one carrying the watchdog
        // proves the pipeline alive, and so does any one at all when the watchdog
        // is not required.
        let watchdog = alerts
            .iter()
            .any(|a| a.state != AlertState::Resolved && a.signal() == Signal::Watchdog);
        if !polling && (watchdog || !am.require_watchdog) {
            self.trust.trusted(now);
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
        let trusted = !step.fleet.trust.stale;
        step.out.trusted = trusted;
        // Without polling, what a hold keeps is ended by the step after it lapses.
        if step.keep.hold.is_some()
            && !polling
            && alerts.iter().any(|a| a.state == AlertState::Resolved)
        {
            step.fleet.trust.held_resolutions = true;
        }
        step.ingest(alerts, false, trusted);
        step.finish(Scope::Touched)
    }

    /// A backtest step ([`super::replay`]): the recorded evidence is already back on
    /// the nodes in `reported`, which count as reporting now through a trusted source.
    pub fn replayed(&mut self, cfg: &Loaded, now: Time, reported: &BTreeSet<String>) -> Outcome {
        self.trust.trusted(now);
        let mut step = Step::new(self, cfg, now);
        for id in reported {
            if let Some(node) = step.fleet.nodes.get_mut(id) {
                node.last_report = Some(now);
                step.out.dirty.insert(id.clone());
            }
        }
        step.finish(Scope::Touched)
    }

    /// Time passed: staleness, missed heartbeats, decaying failure deductions.
    pub fn tick(&mut self, cfg: &Loaded, now: Time) -> Outcome {
        Step::new(self, cfg, now).finish(Scope::Touched)
    }

    /// Register nodes known before they report; refresh their labels and hostname.
    pub fn register(&mut self, cfg: &Loaded, now: Time, inventory: &[InventoryNode]) -> Outcome {
        let mut step = Step::new(self, cfg, now);
        for known in inventory {
            let node = step.node(&known.id);
            let hostname = known.hostname.clone();
            let origin = node.known_from.max_known(Origin::Inventory);
            if node.labels != known.labels || node.hostname != hostname || node.known_from != origin
            {
                node.labels = known.labels.clone();
                node.hostname = hostname;
                node.known_from = origin;
                step.out.dirty.insert(known.id.clone());
            }
        }
        step.finish(Scope::Touched)
    }

    /// `hale node clear`: end a condition by operator decision (sticky ones only end so).
    pub fn clear_condition(
        &mut self,
        cfg: &Loaded,
        now: Time,
        node_id: &str,
        condition: &str,
        reason: &str,
    ) -> Result<Outcome, CoreError> {
        let node = self
            .nodes
            .get_mut(node_id)
            .ok_or_else(|| CoreError::UnknownNode(node_id.into()))?;
        if condition == HEARTBEAT_MISSED || condition == TELEMETRY_STALE {
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
        cfg: &Loaded,
        now: Time,
        node_id: &str,
        job: &str,
        reason: Option<&str>,
        occurred_at: Option<Time>,
    ) -> Result<Outcome, CoreError> {
        if !self.nodes.contains_key(node_id) {
            return Err(CoreError::UnknownNode(node_id.into()));
        }
        let mut step = Step::new(self, cfg, now);
        let at = occurred_at.map_or(now, |t| t.min(now));
        step.count_failure(node_id, job, reason.unwrap_or("unspecified"), at);
        Ok(step.finish(Scope::Touched))
    }

    /// Forget a node (its history stays with the events). Alerts that still name it
    /// bring it back as a new, unscored node.
    pub fn decommission(
        &mut self,
        cfg: &Loaded,
        now: Time,
        node_id: &str,
    ) -> Result<Outcome, CoreError> {
        if self.nodes.remove(node_id).is_none() {
            return Err(CoreError::UnknownNode(node_id.into()));
        }
        let mut step = Step::new(self, cfg, now);
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

/// One application of inputs to the fleet, collecting its outcome.
pub(super) struct Step<'f> {
    pub(super) fleet: &'f mut Fleet,
    pub(super) cfg: &'f Loaded,
    pub(super) now: Time,
    pub(super) out: Outcome,
    /// What this input may not end yet.
    keep: Keep<'f>,
}

/// What an input may not end: sources whose latest word came after it was taken, and
/// sources whose alert may only have expired.
///
/// Alertmanager drops an alert both when Prometheus resolves it and when it expires
/// because Prometheus stopped sending it — and a stopped Prometheus lets every alert
/// expire within one evaluation of the watchdog. An alert gone before its expiry
/// (`endsAt`) was resolved and ends its source at once; any other ends it only after
/// the watchdog's expiry has moved forward twice more, proof that Prometheus kept
/// sending alerts after this one left.
#[derive(Clone, Copy)]
pub(super) struct Keep<'f> {
    /// Fingerprints named by webhook deliveries applied while this poll was fetched.
    newer: &'f BTreeSet<String>,
    /// Alertmanager's clock at a poll's answer.
    answered: Option<Time>,
    /// [`super::Trust::watchdog_refreshes`], when the watchdog's expiry is known.
    refreshes: Option<u64>,
    /// The pipeline restarted lately: when the hold began ([`super::Trust::hold`]).
    /// No absence of an alert seen before then ends anything; only a resolution
    /// Prometheus itself sent does.
    hold: Option<Time>,
}

/// `Date` headers count whole seconds.
const CLOCK_GRAIN: TimeDelta = TimeDelta::seconds(1);

impl Keep<'_> {
    /// Nothing kept: every end is final.
    pub(super) fn none() -> Keep<'static> {
        Keep {
            newer: &NONE_NEWER,
            answered: None,
            refreshes: None,
            hold: None,
        }
    }

    /// Whether `source`, whose alert the poll no longer lists, stays for now. While
    /// held, even an alert gone before its expiry stays: after an Alertmanager
    /// restart the expiry is the old process's word, and its absence says nothing.
    fn holds(&self, fingerprint: &str, source: &mut Source) -> bool {
        if self.newer.contains(fingerprint) {
            return true;
        }
        if self.holds_back(source) {
            return self.held(source);
        }
        let unexpired =
            |answered: Time| source.expires.is_some_and(|e| e >= answered + CLOCK_GRAIN);
        if self.answered.is_some_and(unexpired) {
            return false;
        }
        self.until_refreshed(source)
    }

    /// Whether `source`, whose alert a notification says `resolved` at `ended`, stays.
    /// An end before the alert's expiry is Prometheus's own resolution and ends it.
    fn holds_resolved(&self, source: &mut Source, ended: Option<Time>) -> bool {
        match (source.expires, ended) {
            (Some(expires), Some(ended)) if ended < expires => false,
            _ if self.holds_back(source) => self.held(source),
            _ => self.until_refreshed(source),
        }
    }

    /// Whether the hold covers `source`: it was seen before the hold began.
    fn holds_back(&self, source: &Source) -> bool {
        self.hold
            .is_some_and(|since| source.since.is_none_or(|seen| seen < since))
    }

    /// Hold `source` through the hold, remembering when it first went missing.
    fn held(&self, source: &mut Source) -> bool {
        if source.vanished.is_none() {
            source.vanished = Some(self.refreshes.unwrap_or(0));
        }
        true
    }

    /// Hold `source` until the watchdog has moved twice after it first went missing.
    fn until_refreshed(&self, source: &mut Source) -> bool {
        let Some(refreshes) = self.refreshes else {
            return false;
        };
        match source.vanished {
            None => {
                source.vanished = Some(refreshes);
                true
            }
            Some(at) => refreshes < at + 2,
        }
    }
}

static NONE_NEWER: BTreeSet<String> = BTreeSet::new();

impl<'f> Step<'f> {
    fn new(fleet: &'f mut Fleet, cfg: &'f Loaded, now: Time) -> Self {
        Step {
            fleet,
            cfg,
            now,
            out: Outcome::default(),
            keep: Keep::none(),
        }
    }

    fn event(&mut self, node_id: &str, kind: EventKind, message: String) {
        Recorder {
            out: &mut self.out,
            now: self.now,
            id: node_id,
        }
        .event(kind, message);
    }

    /// The node, created unscored if new (stale from birth while the source is stale).
    fn node(&mut self, id: &str) -> &mut Node {
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

    /// Apply a batch of alerts. `full`: the batch is the whole picture, so whatever it
    /// lacks has ended. `trusted`: it may clear evidence and counts as a report.
    fn ingest(&mut self, alerts: &[Alert<'_>], full: bool, trusted: bool) {
        let identity = &self.cfg.config.node_identity;
        let mut named: Vec<(&str, &Alert<'_>)> = Vec::with_capacity(alerts.len());
        for alert in alerts {
            if alert.signal() == Signal::Watchdog
                || self.keep.newer.contains(alert.fingerprint.as_ref())
            {
                continue;
            }
            match alert.node(identity) {
                Some(node) => named.push((node, alert)),
                None => self.out.unmatched += 1,
            }
        }
        let mut groups = group_by_key(named);
        let mut room =
            (self.cfg.config.node_identity.max_nodes).saturating_sub(self.fleet.nodes.len());
        groups.retain(|(id, alerts)| {
            self.fleet.nodes.contains_key(*id) || self.admits(id, alerts, &mut room)
        });
        // The whole picture: known nodes it does not name see their alerts end.
        let silent: Vec<String> = if full {
            self.fleet
                .nodes
                .keys()
                .filter(|id| {
                    groups
                        .binary_search_by(|(g, _)| (*g).cmp(id.as_str()))
                        .is_err()
                })
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        for (id, alerts) in &groups {
            self.apply_node(id, alerts, full, trusted);
        }
        for id in silent {
            self.apply_node(&id, &[], true, trusted);
        }
    }

    /// Whether alerts naming `id`, a node hale does not know, bring it in. Resolved
    /// alerts never do; with an orchestrator (unless `createFromAlerts`) its nodes
    /// are the fleet and the alerts are unmatched; beyond `maxNodes` they are
    /// refused.
    /// `room`: how many more nodes `maxNodes` allows.
    fn admits(&mut self, id: &str, alerts: &[&Alert<'_>], room: &mut usize) -> bool {
        if alerts.iter().all(|a| a.state == AlertState::Resolved) {
            return false;
        }
        if !self.cfg.alerts_create_nodes() {
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

    fn apply_node(&mut self, id: &str, alerts: &[&Alert<'_>], full: bool, trusted: bool) {
        self.node(id);
        let cfg = self.cfg;
        let node = self.fleet.nodes.get_mut(id).expect("created above");
        let mut rec = Recorder {
            out: &mut self.out,
            now: self.now,
            id,
        };
        apply_alerts(node, &mut rec, cfg, alerts, full, trusted, self.keep);
    }

    fn count_failure(&mut self, id: &str, job: &str, reason: &str, at: Time) {
        self.node(id);
        let node = self.fleet.nodes.get_mut(id).expect("created above");
        let mut rec = Recorder {
            out: &mut self.out,
            now: self.now,
            id,
        };
        count_failure(node, &mut rec, job, reason, at);
    }

    /// Enter or leave the stale state: with no trusted input for `staleAfter`, every
    /// node carries `telemetry_stale` and nothing is cleared.
    fn settle_trust(&mut self) {
        let trust = &self.fleet.trust;
        let since = trust
            .last_trusted
            .map_or(trust.watching_since, |t| t.max(trust.watching_since));
        let stale_after = self.cfg.config.alertmanager.stale_after();
        let mut stale = (self.now - since).to_std().unwrap_or_default() >= stale_after;
        // The restart grace only delays becoming stale; leaving it takes trusted input
        // seen by this process, never just a restart.
        let trusted_since_start = trust
            .last_trusted
            .is_some_and(|t| t >= trust.watching_since);
        if trust.stale && !trusted_since_start {
            stale = true;
        }
        if stale == trust.stale {
            return;
        }
        self.fleet.trust.stale = stale;
        let ids: Vec<String> = self.fleet.nodes.keys().cloned().collect();
        if stale {
            self.fleet.trust.source_up = false;
            let why = self
                .fleet
                .trust
                .last_error
                .clone()
                .unwrap_or_else(|| "no trusted input".into());
            for id in ids {
                let node = self.fleet.nodes.get_mut(&id).expect("listed above");
                node.conditions
                    .insert(TELEMETRY_STALE.into(), stale_condition(self.now));
                self.event(
                    &id,
                    EventKind::ConditionRaised {
                        condition: TELEMETRY_STALE.into(),
                        reason: TELEMETRY_STALE.into(),
                        severity: Severity::Warning,
                        fault_class: None,
                    },
                    format!(
                        "telemetry stale: no trusted alert data since {} ({why})",
                        since.to_rfc3339()
                    ),
                );
            }
        } else {
            // Trusted input is back after a gap: what left meanwhile may be an
            // expiry of a stopped pipeline, not a resolution.
            let hold = TimeDelta::from_std(self.cfg.config.alertmanager.hold_after_restart)
                .unwrap_or(TimeDelta::MAX);
            let until = self.now.checked_add_signed(hold).unwrap_or(self.now);
            if self.fleet.trust.hold(
                self.now,
                until,
                "trusted input returned after a time without it".into(),
            ) {
                self.out.held = self.fleet.trust.hold_reason.clone();
            }
            for id in ids {
                let node = self.fleet.nodes.get_mut(&id).expect("listed above");
                if node.conditions.remove(TELEMETRY_STALE).is_some() {
                    self.event(
                        &id,
                        EventKind::ConditionCleared {
                            condition: TELEMETRY_STALE.into(),
                            severity: Severity::Warning,
                            cleared_by: "resolved".into(),
                        },
                        "telemetry_stale cleared: trusted alert data again".into(),
                    );
                }
            }
        }
    }

    /// A node whose heartbeat was seen and has gone quiet for `max(15 s, threshold ×
    /// min(interval, 24 h))` is no longer reporting. Never evaluated while stale: then
    /// hale, not the node, is the one who cannot see.
    ///
    /// Nor before the first trusted input since this process started watching: after a
    /// restart every stored heartbeat is old, and the first poll decides who is alive.
    fn check_heartbeats(&mut self) {
        let trust = &self.fleet.trust;
        let seen_since_start = trust
            .last_trusted
            .is_some_and(|t| t >= trust.watching_since);
        // A heartbeat gone along with the watchdog says the pipeline stopped, not the
        // node: only while the source is trusted is its absence the node's.
        if trust.stale || !trust.source_up || !seen_since_start {
            return;
        }
        let mut missed = Vec::new();
        for (id, node) in &self.fleet.nodes {
            let Some(hb) = &node.heartbeat else { continue };
            if node.conditions.contains_key(HEARTBEAT_MISSED) {
                continue;
            }
            let threshold = self.cfg.settings_for(&node.labels).heartbeat_miss_threshold;
            let after = (hb.interval.min(MAX_INTERVAL) * threshold).max(MIN_MISS_AFTER);
            // Heartbeats that left with the pipeline get a full window to return.
            let since = trust.trusted_since.map_or(hb.last, |t| t.max(hb.last));
            if (self.now - since).to_std().unwrap_or_default() >= after {
                missed.push((id.clone(), hb.last, after));
            }
        }
        for (id, last, after) in missed {
            let now = self.now;
            let node = self.node(&id);
            node.conditions.insert(
                HEARTBEAT_MISSED.into(),
                Condition {
                    reason: HEARTBEAT_MISSED.into(),
                    severity: Severity::Warning,
                    message: format!("no heartbeat since {}", last.to_rfc3339()),
                    charged_message: String::new(),
                    first_seen: now,
                    last_seen: now,
                    observations: 1,
                    sticky: false,
                    fault_class: HEARTBEAT_MISSED.to_uppercase(),
                    priority: None,
                    remediation: None,
                    sources: SmallMap::new(),
                },
            );
            self.event(
                &id,
                EventKind::HeartbeatMissed {
                    last_heartbeat: last,
                },
                format!(
                    "node {id} stopped reporting: last heartbeat {} ({}s without one)",
                    last.to_rfc3339(),
                    after.as_secs()
                ),
            );
        }
    }

    fn finish(mut self, scope: Scope) -> Outcome {
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
fn decaying(node: &Node) -> bool {
    node.score
        .as_ref()
        .is_some_and(|s| s.breakdown.iter().any(|d| d.reason == FAILURE_DEDUCTION))
}

/// Recompute a reported node's score; record a change (a first score counts as a
/// change from 100).
fn rescore(node: &mut Node, rec: &mut Recorder<'_, '_>, cfg: &Loaded) {
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
fn group_by_key<'k, T>(mut pairs: Vec<(&'k str, T)>) -> Vec<(&'k str, Vec<T>)> {
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

    fn dirty(&mut self) {
        if !self.out.dirty.contains(self.id) {
            self.out.dirty.insert(self.id.to_string());
        }
    }

    fn touched(&mut self) {
        if !self.out.touched.contains(self.id) {
            self.out.touched.insert(self.id.to_string());
        }
    }
}

/// Apply one node's alerts. `full`: they are all it has, so whatever is missing has
/// ended. `trusted`: they may clear evidence and count as a report.
fn apply_alerts(
    node: &mut Node,
    rec: &mut Recorder<'_, '_>,
    cfg: &Loaded,
    alerts: &[&Alert<'_>],
    full: bool,
    trusted: bool,
    keep: Keep<'_>,
) {
    let now = rec.now;
    let settings = cfg.settings_for(&node.labels);
    let mut fresh: Vec<(&str, &Alert<'_>)> = Vec::new();
    let mut ended: Vec<(&str, &str, Option<Time>)> = Vec::new();
    let mut heartbeat: Option<Option<Duration>> = None;
    let mut unavailable: BTreeMap<&str, &str> = BTreeMap::new();
    let mut failures: Vec<(String, &str, &str, Time)> = Vec::new();
    let mut named = false;

    for alert in alerts {
        let signal = alert.signal();
        if alert.state == AlertState::Resolved {
            if trusted {
                let ctype = match signal {
                    Signal::CollectorFailed { .. } => COLLECTOR_FAILED,
                    _ => alert.condition_type(),
                };
                ended.push((ctype, alert.fingerprint.as_ref(), alert.expires()));
            }
            continue;
        }
        named = true;
        match signal {
            Signal::Heartbeat { interval } => heartbeat = Some(interval),
            Signal::CollectorFailed { .. } => fresh.push((COLLECTOR_FAILED, alert)),
            Signal::Unavailable { signal } => {
                unavailable.insert(alert.fingerprint.as_ref(), signal);
            }
            Signal::JobFailure { job } => {
                // The instance is the fingerprint and startsAt as sent; only the time
                // used for decay is clamped to now (a source clock may run ahead).
                let at = alert.started().map_or(now, |t| t.min(now));
                let key = format!(
                    "{}@{}",
                    alert.fingerprint,
                    alert.starts_at.as_deref().unwrap_or("")
                );
                failures.push((key, job, alert.reason(), at));
            }
            Signal::Condition => fresh.push((alert.condition_type(), alert)),
            Signal::Watchdog => {}
        }
    }

    let fresh = group_by_key(fresh);

    if named {
        rec.touched();
        if trusted {
            node.last_report = Some(now);
        }
    }

    // Only trusted input says a node is alive: a heartbeat from an answer without the
    // watchdog, or while stale, neither arms nor clears missed-heartbeat detection.
    if trusted && let Some(interval) = heartbeat {
        let interval = interval.unwrap_or(settings.report_interval);
        if node
            .heartbeat
            .as_ref()
            .is_none_or(|h| h.interval != interval)
        {
            rec.dirty();
        }
        node.heartbeat = Some(Heartbeat {
            last: now,
            interval,
        });
        if let Some(missed) = node.conditions.remove(HEARTBEAT_MISSED) {
            rec.event(
                EventKind::HeartbeatResumed {
                    last_heartbeat: now,
                },
                format!(
                    "heartbeat resumed (missing since {})",
                    missed.first_seen.to_rfc3339()
                ),
            );
        }
    }

    // Conditions: a full picture replaces each condition's sources; a partial one
    // adds to them and ends the ones it says resolved.
    if full {
        let existing: Vec<String> = node
            .conditions
            .keys()
            .filter(|c| {
                *c != HEARTBEAT_MISSED
                    && *c != TELEMETRY_STALE
                    && fresh
                        .binary_search_by(|(t, _)| (*t).cmp(c.as_str()))
                        .is_err()
            })
            .cloned()
            .collect();
        for ctype in existing {
            set_sources(node, rec, settings, &ctype, &[], true, keep, 0);
        }
    } else {
        for &(ctype, fingerprint, at) in &ended {
            let Some(cond) = node.conditions.get_mut(ctype) else {
                continue;
            };
            let Some(source) = cond.sources.get_mut(fingerprint) else {
                continue;
            };
            let vanished = source.vanished;
            if keep.holds_resolved(source, at) {
                if source.vanished != vanished {
                    rec.dirty();
                }
                continue;
            }
            if cond.sources.remove(fingerprint).is_some() {
                rec.dirty();
                compose_message(ctype, cond);
                set_sources(node, rec, settings, ctype, &[], false, keep, 1);
            }
        }
    }
    for (ctype, alerts) in &fresh {
        set_sources(node, rec, settings, ctype, alerts, full, keep, 0);
    }

    let same = |old: &SmallMap<String, String>| {
        old.len() == unavailable.len()
            && old
                .iter()
                .zip(&unavailable)
                .all(|((f, s), (nf, ns))| f == nf && s == ns)
    };
    if full {
        if !same(&node.unavailable) {
            node.unavailable = unavailable
                .iter()
                .map(|(f, s)| (f.to_string(), s.to_string()))
                .collect();
            rec.dirty();
        }
    } else {
        let before = node.unavailable.len();
        for (f, s) in &unavailable {
            if node.unavailable.len() < MAX_UNAVAILABLE || node.unavailable.contains_key(*f) {
                node.unavailable.insert(f.to_string(), s.to_string());
            }
        }
        if trusted {
            for (_, fingerprint, _) in &ended {
                node.unavailable.remove(*fingerprint);
            }
        }
        if node.unavailable.len() != before || !unavailable.is_empty() {
            rec.dirty();
        }
    }

    let mut current = BTreeSet::new();
    for (key, job, reason, at) in failures {
        if !node.failures.counted_alerts.contains(&key) {
            count_failure(node, rec, job, reason, at);
        }
        current.insert(key);
    }
    let counted = &mut node.failures.counted_alerts;
    let changed = if full {
        let changed = *counted != current;
        *counted = current;
        changed
    } else {
        let before = counted.len();
        counted.extend(current);
        counted.len() != before
    };
    if changed {
        rec.dirty();
    }
}

/// Set (full) or merge (partial) a condition's sources from `alerts`, raising,
/// escalating, updating or clearing it as the result demands. `left`: sources a
/// resolved notification already took away. Sources that did not change are kept as
/// they are, so a steady fleet costs no allocation here.
#[allow(clippy::too_many_arguments)]
pub(super) fn set_sources(
    node: &mut Node,
    rec: &mut Recorder<'_, '_>,
    settings: &Settings,
    ctype: &str,
    alerts: &[&Alert<'_>],
    full: bool,
    keep: Keep<'_>,
    left: usize,
) {
    let now = rec.now;
    // Webhook-only: when a delivery last confirmed each alert (see `Source::delivered`).
    let delivered = (!full).then_some(now);
    let Some(cond) = node.conditions.get_mut(ctype) else {
        let sources = alerts
            .iter()
            .map(|a| {
                let mut source = source_of(a, ctype);
                source.delivered = delivered;
                source.since = Some(now);
                (a.fingerprint.to_string(), source)
            })
            .collect();
        if let Some(cond) = raise(ctype, sources, settings, now) {
            node.saw(ctype, now);
            let message = format!(
                "{ctype} raised [{}]: {}",
                cond.severity.as_str(),
                cond.message
            );
            let kind = EventKind::ConditionRaised {
                condition: ctype.into(),
                reason: cond.reason.clone(),
                severity: cond.severity,
                fault_class: Some(cond.fault_class.clone()),
            };
            node.conditions.insert(ctype.to_string(), cond);
            rec.event(kind, message);
        }
        return;
    };
    let mut keys_changed = left > 0;
    let mut content_changed = false;
    if full {
        let mut old = std::mem::replace(&mut cond.sources, SmallMap::with_capacity(alerts.len()));
        for a in alerts {
            let fp = a.fingerprint.as_ref();
            let (key, source) = match old.remove_entry(fp) {
                Some((key, mut s)) if s.matches(a, ctype) => {
                    // Moves with every re-send; not a change worth a write.
                    s.expires = a.expires().or(s.expires);
                    (key, s)
                }
                Some((key, s)) => {
                    content_changed = true;
                    let mut source = source_of(a, ctype);
                    source.since = s.since;
                    (key, source)
                }
                None => {
                    keys_changed = true;
                    let mut source = source_of(a, ctype);
                    source.since = Some(now);
                    (fp.to_string(), source)
                }
            };
            cond.sources.insert(key, source);
        }
        for (key, mut source) in old {
            let vanished = source.vanished;
            if keep.holds(&key, &mut source) {
                if source.vanished != vanished {
                    rec.dirty();
                }
                cond.sources.insert(key, source);
            } else {
                keys_changed = true;
            }
        }
    } else {
        for a in alerts {
            let fp = a.fingerprint.as_ref();
            match cond.sources.get_mut(fp) {
                Some(s) if s.matches(a, ctype) => s.delivered = delivered,
                Some(s) => {
                    let (expires, since) = (s.expires, s.since);
                    *s = source_of(a, ctype);
                    s.expires = s.expires.or(expires);
                    s.since = since;
                    s.delivered = delivered;
                    content_changed = true;
                }
                None => {
                    let mut source = source_of(a, ctype);
                    source.delivered = delivered;
                    source.since = Some(now);
                    cond.sources.insert(fp.to_string(), source);
                    keys_changed = true;
                }
            }
        }
    }
    if keys_changed {
        rec.dirty();
    }
    if cond.sources.is_empty() {
        if !cond.sticky {
            let severity = cond.severity;
            node.conditions.remove(ctype);
            node.saw(ctype, now);
            rec.event(
                EventKind::ConditionCleared {
                    condition: ctype.into(),
                    severity,
                    cleared_by: "resolved".into(),
                },
                format!("{ctype} cleared: its alerts ended"),
            );
        } else if keys_changed {
            let kind = updated(ctype, cond);
            rec.event(
                kind,
                format!(
                    "{ctype}: its alerts ended; sticky, it stays raised until an operator clears it ({})",
                    cond.message
                ),
            );
        }
        return;
    }
    if alerts.is_empty() && !keys_changed {
        return;
    }
    let previous = (
        cond.severity,
        cond.sticky,
        cond.priority,
        cond.remediation.is_some(),
        cond.reason.clone(),
    );
    refresh(ctype, cond, settings, now, keys_changed || content_changed);
    let latched = (
        cond.severity,
        cond.sticky,
        cond.priority,
        cond.remediation.is_some(),
    );
    if latched != (previous.0, previous.1, previous.2, previous.3) || cond.reason != previous.4 {
        rec.dirty();
    }
    if cond.severity > previous.0 {
        let kind = EventKind::ConditionEscalated {
            condition: ctype.into(),
            reason: cond.reason.clone(),
            severity: cond.severity,
            previous_severity: previous.0,
        };
        let message = format!(
            "{ctype} escalated {} -> {}: {}",
            previous.0.as_str(),
            cond.severity.as_str(),
            cond.message
        );
        rec.event(kind, message);
    } else if keys_changed || cond.reason != previous.4 {
        let message = if cond.reason != previous.4 {
            format!(
                "{ctype} now charged for {} instead of {}: {}",
                cond.reason, previous.4, cond.message
            )
        } else {
            format!(
                "{ctype} now fed by {} alert(s): {}",
                cond.sources.len(),
                cond.message
            )
        };
        let kind = updated(ctype, cond);
        rec.event(kind, message);
    }
}

/// A `CONDITION_UPDATED` event for `cond` as it now stands.
fn updated(ctype: &str, cond: &Condition) -> EventKind {
    let mut reasons: Vec<String> = cond.sources.values().map(|s| s.reason.clone()).collect();
    reasons.sort_unstable();
    reasons.dedup();
    EventKind::ConditionUpdated {
        condition: ctype.into(),
        reason: cond.reason.clone(),
        severity: cond.severity,
        reasons,
        alerts: cond.sources.len() as u32,
    }
}

fn count_failure(node: &mut Node, rec: &mut Recorder<'_, '_>, job: &str, reason: &str, at: Time) {
    let f = &mut node.failures;
    f.total += 1;
    f.last = Some(f.last.map_or(at, |l| l.max(at)));
    // Reasons come from reports anyone with the token may send: a bounded few are
    // told apart, the rest counted together.
    let kept = if f.by_reason.len() < MAX_FAILURE_REASONS || f.by_reason.contains_key(reason) {
        reason
    } else {
        OTHER_REASONS
    };
    match f.by_reason.get_mut(kept) {
        Some(n) => *n += 1,
        None => {
            f.by_reason.insert(kept.to_string(), 1);
        }
    }
    let total = f.total;
    rec.event(
        EventKind::JobFailureAttributed {
            job: job.into(),
            reason: reason.into(),
            total,
        },
        format!("job {job} failure attributed ({reason}); {total} in total"),
    );
}

/// The collector a `collector_failed` alert names.
fn collector<'s>(alert: &'s Alert<'_>) -> &'s str {
    match alert.signal() {
        Signal::CollectorFailed { collector } => collector,
        _ => alert.alertname(),
    }
}

fn source_of(alert: &Alert<'_>, ctype: &str) -> Source {
    let failed_collector = ctype == COLLECTOR_FAILED;
    Source {
        reason: if failed_collector {
            COLLECTOR_FAILED.into()
        } else {
            alert.reason().to_string()
        },
        severity: alert.severity(),
        message: if failed_collector {
            collector(alert).to_string()
        } else {
            alert.message()
        },
        suppressed: alert.state == AlertState::Suppressed,
        sticky: alert.sticky(),
        fault_class: alert.fault_class(),
        priority: alert.priority(),
        remediation: alert.remediation().map(str::to_string),
        expires: alert.expires(),
        vanished: None,
        since: None,
        delivered: None,
        notice: alert.notice(),
    }
}

impl Source {
    /// Whether `alert` would produce exactly this source (checked without allocating).
    fn matches(&self, alert: &Alert<'_>, ctype: &str) -> bool {
        let described = if ctype == COLLECTOR_FAILED {
            self.reason == COLLECTOR_FAILED && self.message == collector(alert)
        } else {
            self.reason == alert.reason() && alert.message_is(&self.message)
        };
        described
            && self.vanished.is_none()
            && self.severity == alert.severity()
            && self.suppressed == (alert.state == AlertState::Suppressed)
            && self.sticky == alert.sticky()
            && self.priority == alert.priority()
            && self.remediation.as_deref() == alert.remediation()
            && alert.fault_class_is(&self.fault_class)
            && alert.notice_is(self.notice.as_ref())
    }
}

fn stale_condition(now: Time) -> Condition {
    Condition {
        reason: TELEMETRY_STALE.into(),
        severity: Severity::Warning,
        message: "hale has no trusted alert data".into(),
        charged_message: String::new(),
        first_seen: now,
        last_seen: now,
        observations: 1,
        sticky: false,
        fault_class: TELEMETRY_STALE.to_uppercase(),
        priority: None,
        remediation: None,
        sources: SmallMap::new(),
    }
}

/// How much a source's reason weighs in choosing the charged reason: its severity,
/// then its points, then (for a fixed order) the earlier name.
fn weight<'s>(
    settings: &Settings,
    reason: &'s str,
    severity: Severity,
) -> (Severity, u32, std::cmp::Reverse<&'s str>) {
    (
        severity,
        settings.penalty(reason, severity),
        std::cmp::Reverse(reason),
    )
}

/// A new episode from its first sources; `None` when there are none.
fn raise(
    ctype: &str,
    sources: SmallMap<String, Source>,
    settings: &Settings,
    now: Time,
) -> Option<Condition> {
    let worst = sources
        .values()
        .max_by_key(|s| weight(settings, &s.reason, s.severity))?
        .clone();
    let mut cond = Condition {
        reason: worst.reason,
        severity: worst.severity,
        message: String::new(),
        charged_message: worst.message,
        first_seen: now,
        last_seen: now,
        observations: 0,
        sticky: false,
        fault_class: worst.fault_class,
        priority: None,
        remediation: None,
        sources,
    };
    refresh(ctype, &mut cond, settings, now, true);
    Some(cond)
}

/// Fold the current sources into the episode: the charged reason moves up to a worse
/// source (a worse severity, or the same severity and more points) and never down,
/// stickiness and remediation latch, the message keeps the charged reason's latest
/// and each other source's (recomposed only when the sources changed).
fn refresh(ctype: &str, cond: &mut Condition, settings: &Settings, now: Time, changed: bool) {
    let charged = (cond.severity, settings.penalty(&cond.reason, cond.severity));
    if let Some(worst) = cond
        .sources
        .values()
        .max_by_key(|s| weight(settings, &s.reason, s.severity))
        && (
            worst.severity,
            settings.penalty(&worst.reason, worst.severity),
        ) > charged
    {
        cond.severity = worst.severity;
        cond.reason = worst.reason.clone();
        cond.fault_class = worst.fault_class.clone();
    }
    if let Some(s) = cond.sources.values().find(|s| s.reason == cond.reason)
        && s.message != cond.charged_message
    {
        cond.charged_message = s.message.clone();
    }
    for s in cond.sources.values() {
        cond.sticky |= s.sticky;
        cond.priority = match (cond.priority, s.priority) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if cond.remediation.is_none() {
            cond.remediation = s.remediation.clone();
        }
    }
    if changed {
        compose_message(ctype, cond);
    }
    cond.last_seen = now;
    cond.observations += 1;
}

/// The message of a condition: the charged reason's latest message, then each other
/// source's latest, once. A condition whose sources all ended keeps the message it
/// had.
fn compose_message(ctype: &str, cond: &mut Condition) {
    if cond.sources.is_empty() {
        return;
    }
    let mut messages: Vec<&str> = cond.sources.values().map(|s| s.message.as_str()).collect();
    messages.sort_unstable();
    messages.dedup();
    let charged = cond.charged_message.as_str();
    if !charged.is_empty() {
        messages.retain(|m| *m != charged);
        messages.insert(0, charged);
    }
    cond.message = if ctype == COLLECTOR_FAILED {
        format!("collectors failed: {}", messages.join(", "))
    } else {
        messages.join("; ")
    };
}
