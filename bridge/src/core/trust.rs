//! Whether hale can believe what Alertmanager tells it, and what an absence may end:
//! the stale state, holds after a restart of the pipeline, and the rules by which an
//! alert gone from Alertmanager ends its evidence ([`Keep`]).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use chrono::TimeDelta;

use super::conditions::stale_condition;
use super::ingest::PollAnswer;
use super::labels::{Alert, AlertState};
use super::settings;
use super::step::Step;
use super::{EventKind, Severity, Source, TELEMETRY_STALE, Time};

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
    pub(super) newer: &'f BTreeSet<String>,
    /// Alertmanager's clock at a poll's answer.
    pub(super) answered: Option<Time>,
    /// [`super::Trust::watchdog_refreshes`], when the watchdog's expiry is known.
    pub(super) refreshes: Option<u64>,
    /// The pipeline restarted lately: when the hold began ([`super::Trust::hold`]).
    /// No absence of an alert seen before then ends anything; only a resolution
    /// Prometheus itself sent does.
    pub(super) hold: Option<Time>,
    /// Polling is on: a poll says which alerts are silenced or inhibited, and a
    /// delivery (which never names a muted alert) does not unmute a source.
    pub(super) polled: bool,
}

/// `Date` headers count whole seconds.
pub(super) const CLOCK_GRAIN: TimeDelta = TimeDelta::seconds(1);

impl Keep<'_> {
    /// Nothing kept: every end is final.
    pub(super) fn none() -> Keep<'static> {
        Keep {
            newer: &NONE_NEWER,
            answered: None,
            refreshes: None,
            hold: None,
            polled: false,
        }
    }

    /// Whether `alert` counts as silenced or inhibited for the source `old` held
    /// for it: as Alertmanager says, but a muted source stays muted while a live
    /// alert cannot be trusted to mean the mute ended — in a poll during a hold
    /// (after an Alertmanager restart the alerts that inhibit others come back in
    /// any order), in a delivery while polling (a peer's notification may be older
    /// than the silence; the next poll lists mutes as they are).
    pub(super) fn muted(&self, old: Option<&Source>, alert: &Alert<'_>, full: bool) -> bool {
        alert.state == AlertState::Suppressed
            || old.is_some_and(|s| {
                s.suppressed
                    && if full {
                        self.holds_back(s)
                    } else {
                        self.polled
                    }
            })
    }

    /// Whether `source`, whose alert the poll no longer lists, stays for now. While
    /// held, even an alert gone before its expiry stays: after an Alertmanager
    /// restart the expiry is the old process's word, and its absence says nothing.
    pub(super) fn holds(&self, fingerprint: &str, source: &mut Source) -> bool {
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

    /// Whether `source`'s alert, which the poll no longer lists, was resolved by
    /// Prometheus: gone before its expiry, outside a hold, with no delivery
    /// meanwhile — an end [`Keep::holds`] does not hold.
    pub(super) fn resolved(&self, fingerprint: &str, source: &Source) -> bool {
        !self.newer.contains(fingerprint)
            && !self.holds_back(source)
            && self
                .answered
                .is_some_and(|a| source.expires.is_some_and(|e| e >= a + CLOCK_GRAIN))
    }

    /// Whether `source`, whose alert a notification says `resolved` at `ended`, stays.
    /// An end before the alert's expiry is Prometheus's own resolution and ends it.
    pub(super) fn holds_resolved(&self, source: &mut Source, ended: Option<Time>) -> bool {
        match (source.expires, ended) {
            (Some(expires), Some(ended)) if ended < expires => false,
            _ if self.holds_back(source) => self.held(source),
            _ => self.until_refreshed(source),
        }
    }

    /// Whether the hold covers `source`: it was seen before the hold began.
    pub(super) fn holds_back(&self, source: &Source) -> bool {
        self.hold
            .is_some_and(|since| source.since.is_none_or(|seen| seen < since))
    }

    /// Hold `source` through the hold, remembering when it first went missing.
    pub(super) fn held(&self, source: &mut Source) -> bool {
        if source.vanished.is_none() {
            source.vanished = Some(self.refreshes.unwrap_or(0));
        }
        true
    }

    /// Hold `source` until the watchdog has moved twice after it first went missing.
    pub(super) fn until_refreshed(&self, source: &mut Source) -> bool {
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

pub(super) static NONE_NEWER: BTreeSet<String> = BTreeSet::new();

impl<'f> Step<'f> {
    /// Enter or leave the stale state: with no trusted input for `staleAfter`, every
    /// node carries `telemetry_stale` and nothing is cleared.
    pub(super) fn settle_trust(&mut self) {
        let trust = &self.fleet.trust;
        // A restart's grace lasts until the first poll is answered, or two fail. Without
        // polling there is none: the watchdog is due by webhook once per `staleAfter`
        // of the last one, across a restart as before it, so a hale restarted more
        // often than that still goes stale.
        let grace = self.cfg.source.polling && !trust.asked_since_start;
        let since = match trust.last_trusted {
            Some(t) if grace => t.max(trust.watching_from),
            Some(t) => t,
            None => trust.watching_from,
        };
        let since = trust.interval_shortened.map_or(since, |at| since.max(at));
        // At 500,000 alerts Alertmanager takes half a minute to answer: polls then
        // land that much further apart than the poll interval, and a pipeline that
        // answers every time is not one that stopped. Three answers' time is allowed
        // beyond `staleAfter`, as the three poll intervals of its default are.
        let slow = self
            .fleet
            .trust
            .answer_took
            .filter(|_| self.cfg.source.polling)
            .and_then(|t| t.to_std().ok())
            .unwrap_or_default();
        let stale_after = self.cfg.source.stale_after + 3 * slow;
        let past = |since: Time| (self.now - since).to_std().unwrap_or_default() >= stale_after;
        let mut stale = past(since);
        // An answer in hand is one the source gave: hale's own time to apply it
        // (behind deliveries, on a loaded machine) is not the pipeline's silence.
        if stale && !trust.stale && trust.answer_waiting.is_some_and(|at| !past(at)) {
            stale = false;
        }
        // The restart grace only delays becoming stale; leaving it takes trusted input
        // seen by this process, never just a restart.
        if trust.stale && !trust.trusted_since_start() {
            stale = true;
        }
        if stale == trust.stale {
            return;
        }
        self.fleet.trust.stale = stale;
        let ids: Vec<String> = self.fleet.nodes.keys().cloned().collect();
        if stale {
            self.fleet.trust.source_up = false;
            self.fleet.trust.run_ended = true;
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
                        suppressed: false,
                    },
                    format!(
                        "telemetry stale: no trusted alert data since {} ({why})",
                        crate::core::shown_time(since)
                    ),
                );
            }
        } else {
            // Trusted input is back after a gap: what left meanwhile may be an
            // expiry of a stopped pipeline, not a resolution.
            let hold =
                TimeDelta::from_std(self.cfg.source.hold_after_restart).unwrap_or(TimeDelta::MAX);
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
}

/// Whether hale can believe what Alertmanager tells it (DESIGN §4, "Trusted input").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trust {
    /// Last time trusted input arrived (a poll holding the watchdog, or with polling off
    /// a webhook carrying it).
    pub last_trusted: Option<Time>,
    /// When this process started watching. Polling, staleness is measured from the
    /// later of the two until the source first answers (or fails twice): a restart
    /// gives the first poll `staleAfter` to land.
    #[serde(skip, default = "super::epoch")]
    pub watching_since: Time,
    /// When this process last began to watch: its start, or its return from a
    /// time it did not run (stopped, its runtime starved; [`Trust::watch_again`]).
    /// What it did not watch is no evidence: staleness, and whether trusted input
    /// has arrived to judge heartbeats by, count from here. Memory only.
    #[serde(skip, default = "super::epoch")]
    pub watching_from: Time,
    /// The last trusted input whose alerts are all applied: a poll's once its last
    /// slice is, a delivery's (without polling) at once. What a heartbeat's absence
    /// is judged by — a poll judged trusted but not yet applied (or cut short: the
    /// store refused its first write, the lead was lost) shows no heartbeat yet.
    /// Memory only.
    #[serde(skip)]
    pub applied: Option<Time>,
    /// Whether a poll was answered since this process started, or failed twice in
    /// a row (one failure may be Alertmanager starting alongside).
    #[serde(skip)]
    pub asked_since_start: bool,
    /// Polls failed in a row since this process started, before any answer.
    #[serde(skip)]
    pub failed_since_start: u32,
    /// The last poll was answered and trusted.
    pub source_up: bool,
    /// Every node carries `telemetry_stale`.
    pub stale: bool,
    /// Why the source is not trusted, when it is not.
    pub last_error: Option<String>,
    /// The watchdog's expiry (`endsAt`) in the last trusted poll. Prometheus pushes it
    /// forward each time it re-sends the watchdog; a dead Prometheus does not.
    #[serde(default)]
    pub watchdog_expires: Option<Time>,
    /// How many trusted polls have seen the watchdog's expiry move forward: each one
    /// proves Prometheus sent alerts after the previous.
    #[serde(default)]
    pub watchdog_refreshes: u64,
    /// When the current run of trusted input began.
    #[serde(default)]
    pub trusted_since: Option<Time>,
    /// Alertmanager's clock when the watchdog's current expiry was first shown, and
    /// how far ahead of that clock the expiry lay (the validity Prometheus gives each
    /// send): an expiry shown unchanged for more than half of it means Prometheus
    /// stopped re-sending for a while.
    #[serde(default)]
    pub watchdog_shown_since: Option<Time>,
    #[serde(default, with = "super::opt_millis")]
    pub watchdog_validity: Option<chrono::TimeDelta>,
    /// When the Alertmanager that answered last started (its `/api/v2/status`
    /// uptime): a later one is a restart, which kept no alerts.
    #[serde(default)]
    pub alertmanager_started: Option<Time>,
    /// Until then an alert's absence ends nothing: the pipeline restarted and its
    /// alerts may not all be back yet ([`Trust::hold`]).
    #[serde(default)]
    pub hold_until: Option<Time>,
    /// Why absences are held.
    #[serde(default)]
    pub hold_reason: Option<String>,
    /// When the current hold began: only alerts seen before it are held — one the
    /// pipeline reported since was seen by the pipeline as it now is.
    #[serde(default)]
    pub hold_since: Option<Time>,
    /// Resolved notifications are held (webhook only): they end when the hold lapses.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held_resolutions: bool,
    /// How long the last trusted answer took to arrive: the next is due a poll
    /// interval plus about that long after it, so staleness is counted beyond it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::opt_millis"
    )]
    pub answer_took: Option<TimeDelta>,
    /// A reload shortened the poll interval then: until the next answer, staleness
    /// counts from then, not from an answer the old interval spaced out.
    #[serde(skip)]
    pub interval_shortened: Option<Time>,
    /// A poll's answer that arrived then and waits to be applied (behind
    /// deliveries holding the fleet): the source answered, so the fleet does not go
    /// stale for want of an answer hale holds — for `staleAfter` past its arrival
    /// at most. It proves nothing yet: it is judged when applied, and ends no
    /// staleness before. Set by whoever holds the answer, before each step.
    #[serde(skip)]
    pub answer_waiting: Option<Time>,
    /// When the hold running (or the last one) began — not moved by a hold that
    /// extends it (an unreadable status renews one at every poll): where heartbeat
    /// windows start at the earliest. Memory only: a restart starts them again.
    #[serde(skip)]
    pub hold_began: Option<Time>,
    /// The next trusted input starts a new run of trust ([`Trust::trusted`]).
    #[serde(skip)]
    pub run_ended: bool,
}

impl Trust {
    pub fn new(watching_since: Time) -> Trust {
        Trust {
            last_trusted: None,
            watching_since,
            watching_from: watching_since,
            applied: None,
            asked_since_start: false,
            failed_since_start: 0,
            source_up: false,
            stale: false,
            last_error: None,
            watchdog_expires: None,
            watchdog_refreshes: 0,
            trusted_since: None,
            watchdog_shown_since: None,
            watchdog_validity: None,
            alertmanager_started: None,
            hold_until: None,
            hold_reason: None,
            hold_since: None,
            held_resolutions: false,
            answer_took: None,
            interval_shortened: None,
            answer_waiting: None,
            hold_began: None,
            run_ended: true,
        }
    }

    /// The trust record a store kept, read by a process watching from `now`: the
    /// source as the writer last saw it, which a follower shows as the leader's view.
    /// A last trusted input recorded at or ahead of `now` (the clock stepped back
    /// since, or the replica that wrote it ran ahead) reads as just before: no
    /// evidence of trust since this start, and staleness counted from now.
    pub fn resumed(self, now: Time) -> Trust {
        let before = now - TimeDelta::milliseconds(1);
        Trust {
            watching_since: now,
            watching_from: now,
            applied: None,
            last_trusted: self.last_trusted.map(|t| t.min(before)),
            ..self
        }
    }

    /// This process did not run from a while before `now` (stopped, a virtual
    /// machine paused with its monotonic clock running, a runtime starved): it did
    /// not ask the source meanwhile, so the time is no evidence of the
    /// pipeline's or any node's silence. As after a restart, staleness counts from
    /// `now` until a poll is answered (or two fail), and no heartbeat is missed
    /// before trusted input arrives.
    pub fn watch_again(&mut self, now: Time) {
        self.watching_from = now;
        self.asked_since_start = false;
        self.failed_since_start = 0;
    }

    /// Taken up by a process that asks the source itself (a start, a replica just
    /// elected): whether the source is up is its own to find out, and its first
    /// trusted answer starts a new run of trust.
    pub fn take_up(&mut self) {
        self.source_up = false;
        self.run_ended = true;
    }

    /// Hold every absence until `until` (a later hold extends an earlier one, and
    /// its reason is then the hold's). Returns whether this starts a hold or gives it
    /// a new reason — what is worth a log line.
    pub fn hold(&mut self, now: Time, until: Time, reason: String) -> bool {
        if until <= now || self.hold_until.is_some_and(|t| t >= until) {
            return false;
        }
        if !self.holding(now) {
            self.hold_began = Some(now);
        }
        let news = !self.holding(now) || self.hold_reason.as_ref() != Some(&reason);
        // Held from now: a restart during a hold may have dropped what first fired
        // since the hold began, too.
        self.hold_since = Some(now);
        self.hold_until = Some(until);
        self.hold_reason = Some(reason);
        news
    }

    /// Whether absences are held at `now`.
    pub fn holding(&self, now: Time) -> bool {
        self.hold_until.is_some_and(|t| now < t)
    }

    /// When the hold running at `now` began, if one is.
    pub fn held_since(&self, now: Time) -> Option<Time> {
        self.hold_since.filter(|_| self.holding(now))
    }

    /// Where heartbeat windows start at the earliest: the run of trust, or the last
    /// hold of absences (an Alertmanager restarted, the watchdog lost), whichever
    /// began later — heartbeats that left with the pipeline get a full window to
    /// come back, once: a hold renewed at every poll gives no more.
    pub fn heartbeats_since(&self) -> Option<Time> {
        self.trusted_since.max(self.hold_began)
    }

    /// Whether trusted input arrived since this process started watching: until
    /// then what the store kept is the only evidence, hours old after a long stop.
    pub fn trusted_since_start(&self) -> bool {
        self.last_trusted.is_some_and(|t| t >= self.watching_from)
    }

    /// Trusted input arrived now. It starts a new run of trust (heartbeat windows
    /// counted from it) after the source went stale or answered without the
    /// watchdog, or once this process took the source up: a poll that failed now and then, the source never stale, is no gap
    /// a heartbeat could fall into (Alertmanager kept its alerts), and a window
    /// started again at each would keep a dead node from ever being missed.
    pub fn trusted(&mut self, now: Time) {
        if self.run_ended || self.trusted_since.is_none() {
            self.trusted_since = Some(now);
            self.run_ended = false;
        }
        self.last_trusted = Some(now);
        self.source_up = true;
        self.last_error = None;
    }
}

/// What a poll's answer says of the source.
pub(super) struct Judged {
    pub(super) trusted: bool,
    /// [`Trust::watchdog_refreshes`], when the watchdog's expiry is known.
    pub(super) refreshes: Option<u64>,
    /// Why absences began to be held, when this answer started a hold.
    pub(super) held: Option<String>,
}

impl Trust {
    /// Judge a poll's answer: trusted when it holds the watchdog (or the watchdog is
    /// not required). A restart of the pipeline seen here holds every absence for
    /// `holdAfterRestart` ([`Trust::hold`]): an Alertmanager that started later than
    /// the one seen before (it kept no alerts) or whose status cannot be read (so
    /// that is not known), a watchdog missing from an answer, or
    /// a watchdog whose expiry was not pushed forward within half the validity
    /// Prometheus gives it (Prometheus stopped sending for a while: a restarted
    /// Prometheus sends a `for:` alert again only once its `for` has elapsed).
    /// `watchdogs`: the answer's watchdog alerts.
    pub(super) fn judge(
        &mut self,
        source: &settings::Source,
        now: Time,
        answer: &PollAnswer<'_, '_>,
        watchdogs: &[&Alert<'_>],
    ) -> Judged {
        let am = source;
        let hold = TimeDelta::from_std(am.hold_after_restart).unwrap_or(TimeDelta::MAX);
        let require = am.require_watchdog;
        let watchdog = watchdogs.iter().copied();
        let trusted = !require || !watchdogs.is_empty();
        let mut held = None;
        let trust = self;
        trust.asked_since_start = true;
        trust.interval_shortened = None;
        // Why this answer lacks alerts, when it says: a restart just seen.
        let mut restarted = None;
        if let Some(started) = answer.started {
            if trust
                .alertmanager_started
                .is_some_and(|seen| started > seen + CLOCK_GRAIN)
            {
                let until = started.checked_add_signed(hold).unwrap_or(started);
                // Its watchdog is the one Prometheus sends it now: moves count from
                // what that shows, not from an expiry the lost one had (a watchdog
                // once posted by hand for a day, a validity Prometheus shortened
                // since), which none of its sends might pass for as long.
                trust.watchdog_expires = None;
                let why = format!(
                    "Alertmanager restarted at {} and keeps no alerts across a restart",
                    crate::core::shown_time(started)
                );
                if trust.hold(now, until, why.clone()) {
                    held = trust.hold_reason.clone();
                }
                restarted = Some(why);
            }
            trust.alertmanager_started = trust.alertmanager_started.max(Some(started));
        }
        // A restart that emptied it is told only by its status: unread, what is
        // missing from the answer may have been lost, not ended. Held while it
        // stays unread (to `staleAfter` past each such poll, so the hold runs on
        // from poll to poll): once it reads again, a restart meanwhile shows as a
        // later start, and holds then.
        let unread_for = TimeDelta::from_std(am.stale_after).unwrap_or(TimeDelta::MAX);
        if answer.status_unread
            && trust.hold(
                now,
                now.checked_add_signed(unread_for).unwrap_or(now),
                "Alertmanager's status (/api/v2/status) cannot be read, so a restart, which leaves it no alerts, cannot be ruled out".into(),
            )
        {
            held = trust.hold_reason.clone();
        }
        let mut refreshes = None;
        if trusted {
            trust.trusted(now);
            trust.answer_took = TimeDelta::from_std(answer.took).ok();
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
                        // The same words while it lasts: the hold is said once.
                        format!(
                            "the watchdog has not been re-sent since {}: Prometheus stopped sending alerts",
                            since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                        ),
                    )
                {
                    held = trust.hold_reason.clone();
                }
            }
        } else {
            // The pipeline itself broke (Prometheus stopped sending): heartbeats went
            // with the watchdog, and get a new window once it is back.
            trust.source_up = false;
            trust.run_ended = true;
            trust.last_error = Some("the watchdog alert is missing from the answer".into());
            // Missing from an Alertmanager that has just restarted, it is the restart
            // the hold is said to be for.
            if trust.hold(
                now,
                now.checked_add_signed(hold).unwrap_or(now),
                restarted
                    .unwrap_or_else(|| "the watchdog is missing from Alertmanager's answer".into()),
            ) {
                held = trust.hold_reason.clone();
            }
        }
        Judged {
            trusted,
            refreshes,
            held,
        }
    }
}
