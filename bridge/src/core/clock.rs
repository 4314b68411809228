//! The wall clock stepped (NTP stepping a clock that ran fast or slow, a VM
//! resumed, an operator's `date`), or hale restarted on a machine whose clock is
//! behind the one that wrote its store. Every span hale decides by — a heartbeat's
//! window, staleness, a hold, a reboot step's timeout, a suppression after an
//! operator's uncordon, an hour's budget — is measured from an instant it
//! recorded to now, so a step would lengthen or shorten each by its size: a node
//! not missed for an hour, a fleet marked stale at once, a flow failed in mid-step.
//!
//! The service tells a step from time passing by its monotonic clock, which
//! did not move with it: every instant recorded moves with the clock, forward
//! or back, so every span stays as long as it was. Where it cannot tell — a
//! restart on a store written by a clock that was ahead, a step back between
//! two steps of the core that the service did not see — the core finds
//! instants ahead of the clock and takes each as now: what it starts counts from
//! then, never longer than it would have.

use chrono::TimeDelta;

use super::settings::CoreSettings;
use super::{Fleet, Node, Outcome, Time, Trust};

/// How far the clock may stand before the last step's (or what the store holds
/// stand ahead of it) before that is taken as a step back: more than the
/// grain of a `Date` header or a clock adjusted by a slew.
const STEP: TimeDelta = TimeDelta::seconds(2);

impl Fleet {
    /// Take `now` as the clock, after the last step's (or, at the first step of
    /// this process, the store's). Returns how far it went back when it did (at
    /// the first step, how far ahead the furthest instant the store held was).
    pub(super) fn clock_at(
        &mut self,
        cfg: &CoreSettings,
        now: Time,
        out: &mut Outcome,
    ) -> Option<TimeDelta> {
        match self.clock_seen {
            Some(seen) if now + STEP < seen => {
                self.clock_seen = Some(now);
                self.pull_back(cfg, now, out);
                Some(seen - now)
            }
            Some(seen) => {
                self.clock_seen = Some(seen.max(now));
                None
            }
            // The first step of this process looks over what the store held.
            None => {
                self.clock_seen = Some(now);
                self.pull_back(cfg, now, out).filter(|ahead| *ahead > STEP)
            }
        }
    }

    /// The wall clock stepped `by` (forward, or back when negative) while no
    /// time passed: every instant recorded on hale's clock, deadlines included,
    /// moves with it. What to write.
    pub fn clock_stepped(&mut self, by: TimeDelta) -> Outcome {
        let mut out = Outcome::default();
        let mut shift = |t: &mut Time| {
            *t = t.checked_add_signed(by).unwrap_or(*t);
            true
        };
        for t in trust_instants(&mut self.trust) {
            shift(t);
        }
        if let Some(t) = self.trust.hold_until.as_mut() {
            shift(t);
        }
        out.ledger = self.each_instant(&mut out, &mut shift, true);
        for t in [
            self.clock_seen.as_mut(),
            self.swept_at.as_mut(),
            self.whole_pass_at.as_mut(),
        ]
        .into_iter()
        .flatten()
        {
            shift(t);
        }
        self.heartbeats_due = None;
        out
    }

    /// Every instant recorded as past that is ahead of `now` taken as `now`; a
    /// hold that ends further ahead than any hale makes ends that far ahead. How
    /// far ahead the furthest was, if one was.
    fn pull_back(&mut self, cfg: &CoreSettings, now: Time, out: &mut Outcome) -> Option<TimeDelta> {
        let mut furthest: Option<TimeDelta> = None;
        let mut clamp = |t: &mut Time| {
            let ahead = *t > now;
            if ahead {
                furthest = furthest.max(Some(*t - now));
                *t = now;
            }
            ahead
        };
        // The trust record is written with every step.
        for t in trust_instants(&mut self.trust) {
            clamp(t);
        }
        let trust = &mut self.trust;
        let longest = cfg.source.hold_after_restart.max(cfg.source.stale_after);
        if let (Some(until), Ok(longest)) = (trust.hold_until, TimeDelta::from_std(longest))
            && let Some(end) = now.checked_add_signed(longest)
            && until > end
        {
            trust.hold_until = Some(end);
        }
        // A deadline (a refused action's retry) is left as it is: how far ahead
        // it was set is not known, and it only delays an action.
        out.ledger |= self.each_instant(out, &mut clamp, false);
        self.heartbeats_due = None;
        self.whole_pass_at = None;
        self.swept_at = self.swept_at.map(|t| t.min(now));
        furthest
    }

    /// `f` on every instant the ledger and the nodes record (with `deadlines`,
    /// their retry deadlines too); each node it changed marked to be written.
    /// Whether it changed the ledger.
    fn each_instant(
        &mut self,
        out: &mut Outcome,
        f: &mut dyn FnMut(&mut Time) -> bool,
        deadlines: bool,
    ) -> bool {
        let ledger = &mut self.ledger;
        let mut ledger_moved = false;
        let times = ledger
            .flow_failures
            .iter_mut()
            .chain(ledger.replacements.values_mut().flatten())
            .chain(ledger.replaced.values_mut())
            .chain(ledger.moves.values_mut().filter_map(|m| m.last.as_mut()));
        for t in times {
            ledger_moved |= f(t);
        }
        for (id, node) in self.nodes.iter_mut() {
            if node_instants(node, f, deadlines) {
                out.dirty.insert(id.clone());
            }
        }
        ledger_moved
    }
}

/// The instants the trust record keeps of hale's clock, its hold's end aside
/// (the clock of Alertmanager's answers, which it also keeps, is not hale's).
fn trust_instants(trust: &mut Trust) -> impl Iterator<Item = &mut Time> {
    [
        &mut trust.last_trusted,
        &mut trust.trusted_since,
        &mut trust.hold_began,
        &mut trust.hold_since,
        &mut trust.interval_shortened,
        &mut trust.applied,
    ]
    .into_iter()
    .flatten()
    .chain([&mut trust.watching_since, &mut trust.watching_from])
}

/// `f` on a node's instants; whether it changed any.
fn node_instants(node: &mut Node, f: &mut dyn FnMut(&mut Time) -> bool, deadlines: bool) -> bool {
    let mut moved = false;
    let p = &mut node.policy;
    let single = [
        node.heartbeat.as_mut().map(|hb| &mut hb.last),
        node.last_report.as_mut(),
        node.known_since.as_mut(),
        node.failures.last.as_mut(),
        p.counted_report.as_mut(),
        p.uncordoned_at.as_mut(),
        p.replaced_at.as_mut(),
        p.ungate_since.as_mut(),
        p.recovered_since.as_mut(),
        p.flow_failed_at.as_mut(),
        p.fence_failed_at.as_mut(),
        p.powered_on_at.as_mut(),
        p.retry_after.as_mut().filter(|_| deadlines),
        p.cordon.as_mut().map(|c| &mut c.at),
        node.reports_saved.as_mut(),
    ];
    for t in single.into_iter().flatten() {
        moved |= f(t);
    }
    // A condition's episode (fencing counts a node's silence from its missed
    // heartbeat's first sight) and its sources' sight and delivery on hale's
    // clock; an alert's expiry is Alertmanager's, compared with its own clock.
    for (_, c) in node.conditions.iter_mut() {
        moved |= f(&mut c.first_seen);
        moved |= f(&mut c.last_seen);
        for (_, source) in c.sources.iter_mut() {
            for t in [source.since.as_mut(), source.delivered.as_mut()]
                .into_iter()
                .flatten()
            {
                moved |= f(t);
            }
        }
    }
    for t in node.seen_types.values_mut() {
        moved |= f(t);
    }
    for (_, e) in node.ended.iter_mut() {
        moved |= f(&mut e.at);
    }
    for t in p.fences.iter_mut().chain(p.reboots.iter_mut()) {
        moved |= f(t);
    }
    if let Some(flow) = p.flow.as_mut() {
        moved |= f(&mut flow.requested);
        moved |= f(&mut flow.since);
        for t in [flow.sent.as_mut(), flow.started.as_mut()]
            .into_iter()
            .flatten()
        {
            moved |= f(t);
        }
    }
    if let Some(fence) = p.fence.as_mut() {
        moved |= f(&mut fence.since);
        if let Some(t) = fence.sent.as_mut() {
            moved |= f(t);
        }
    }
    moved
}
