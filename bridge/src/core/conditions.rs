//! Condition bookkeeping for one node: its alerts grouped by condition type, each
//! condition's sources set or merged, the condition raised, escalated, updated or
//! cleared; the charged reason and the message that explains it; heartbeats,
//! unavailable signals and job failures as its alerts report them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, TimeDelta};

use super::labels::{Alert, AlertState, Signal};
use super::settings::{CoreSettings, Settings};
use super::step::{Grouped, Keyed, Recorder, group_by_key};
use super::trust::Keep;
use super::{
    COLLECTOR_FAILED, Condition, EventKind, HEARTBEAT_MISSED, Heartbeat, Name, Node,
    REPORTS_SAVED_EVERY, Severity, SmallMap, Source, TELEMETRY_STALE, Time, failure_instance,
};

/// Failure reasons a node tells apart; beyond them, [`OTHER_REASONS`].
pub(super) const MAX_FAILURE_REASONS: usize = 64;
pub(super) const OTHER_REASONS: &str = "other";
/// Unavailable signals a node keeps from deliveries (a poll replaces them whole).
pub(super) const MAX_UNAVAILABLE: usize = 64;

/// Apply one node's alerts. `full`: they are all it has, so whatever is missing has
/// ended. `trusted`: they may clear evidence and count as a report.
pub(super) fn apply_alerts(
    node: &mut Node,
    rec: &mut Recorder<'_, '_>,
    cfg: &CoreSettings,
    alerts: &[&Alert<'_>],
    full: bool,
    trusted: bool,
    keep: Keep<'_>,
) {
    let now = rec.now;
    let settings = cfg.settings_for(&node.labels);
    let mut fresh: Vec<(Keyed<'_>, &Alert<'_>)> = Vec::new();
    let mut ended: Vec<(&str, &str, Option<Time>, Option<Time>)> = Vec::new();
    let mut heartbeat: Option<Option<Duration>> = None;
    let mut unavailable: BTreeMap<&str, &str> = BTreeMap::new();
    let mut failures: Vec<(String, &str, &str, Time, bool)> = Vec::new();
    let mut named = false;

    for alert in alerts {
        let signal = alert.signal();
        if alert.state == AlertState::Resolved {
            // Untrusted, a poll will say again whether it ended; without polling
            // nothing ever would, so the resolution is kept until trust returns.
            if trusted || !(full || cfg.source.polling) {
                let ctype = match signal {
                    Signal::CollectorFailed { .. } => COLLECTOR_FAILED,
                    _ => alert.condition_type(),
                };
                ended.push((
                    ctype,
                    alert.fingerprint.as_ref(),
                    alert.expires(),
                    alert.started(),
                ));
            }
            continue;
        }
        if full {
            // A poll lists what fires: an episode it lists is not over.
            if !node.ended.is_empty() && node.ended.remove(alert.fingerprint.as_ref()).is_some() {
                rec.dirty();
            }
        } else if episode_ended(node, alert, now) {
            continue;
        }
        named = true;
        match signal {
            Signal::Heartbeat { interval } => heartbeat = Some(interval),
            Signal::CollectorFailed { .. } => fresh.push((Keyed::new(COLLECTOR_FAILED), alert)),
            Signal::Unavailable { signal } => {
                unavailable.insert(alert.fingerprint.as_ref(), signal);
            }
            Signal::JobFailure { job } => {
                // The instance is the fingerprint and startsAt; only the time used
                // for decay is clamped to now (a source clock may run ahead).
                let at = alert.started().map_or(now, |t| t.min(now));
                let key =
                    failure_instance(&alert.fingerprint, alert.starts_at.as_deref().unwrap_or(""));
                // A silenced or inhibited one is the operator's word: not counted
                // (should the silence end while it fires, then it is), but one
                // counted already stays remembered as counted.
                let silenced = alert.state == AlertState::Suppressed;
                failures.push((key, job, alert.reason(), at, silenced));
            }
            Signal::Condition => fresh.push((Keyed::new(alert.condition_type()), alert)),
            Signal::Watchdog => {}
        }
    }

    let mut fresh = group_by_key(fresh);
    let crowded = crowd_out(node, &mut fresh, full, keep.hold.is_some());
    if !crowded.is_empty() {
        rec.crowded(crowded.len());
        evict(node, rec, &crowded);
    }

    if named {
        if trusted {
            // A node's first trusted report makes it scorable: its first score is due
            // though nothing else about it may have changed (a node first seen while
            // the source was stale).
            if node.last_report.is_none() {
                rec.rescore();
            }
            node.last_report = Some(now);
        }
        // A delivery's nodes are rescored and decided; a poll looks at every node,
        // and the times of one that merely reported are saved only now and then.
        let saved_lately = node
            .reports_saved
            .is_some_and(|t| (now - t).to_std().unwrap_or_default() < REPORTS_SAVED_EVERY);
        if !full || !saved_lately {
            node.reports_saved = Some(now);
            rec.touched();
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
        let previous = node.heartbeat.as_ref().map(|h| h.last);
        node.heartbeat = Some(Heartbeat {
            last: now,
            interval,
        });
        if let Some(missed) = node.conditions.remove(HEARTBEAT_MISSED) {
            rec.event(
                EventKind::HeartbeatResumed {
                    last_heartbeat: now,
                },
                {
                    // Missing since the last heartbeat, not since the miss was
                    // seen a threshold later.
                    let since = previous.unwrap_or(missed.first_seen);
                    format!(
                        "heartbeat resumed (missing since its last heartbeat at {}, {}s without one)",
                        super::shown_time(since),
                        (now - since).num_seconds().max(0)
                    )
                },
            );
        }
    }

    // Conditions: a full picture replaces each condition's sources; a partial one
    // adds to them and ends the ones it says resolved.
    if full {
        let existing: Vec<Name> = node
            .conditions
            .keys()
            .filter(|c| *c != HEARTBEAT_MISSED && *c != TELEMETRY_STALE && !fresh.has(c))
            .cloned()
            .collect();
        for ctype in existing {
            set_sources(node, rec, settings, &ctype, &[], true, keep, Left::NONE);
        }
    } else {
        for &(ctype, fingerprint, at, began) in &ended {
            let Some(cond) = node.conditions.get_mut(ctype) else {
                continue;
            };
            let Some(source) = cond.sources.get_mut(fingerprint) else {
                continue;
            };
            // An older episode's resolution, sent late (an HA peer's).
            if let (Some(was), Some(taken)) = (began, source.started)
                && was < taken - TimeDelta::milliseconds(1)
            {
                continue;
            }
            let vanished = source.vanished;
            // Held through the hold that trust's return starts (see `Step::sweep`):
            // a stopped Prometheus lets alerts expire, and expiries come as
            // resolutions too.
            if (!trusted && keep.held(source)) || keep.holds_resolved(source, at) {
                if source.vanished != vanished {
                    rec.dirty();
                }
                continue;
            }
            // Prometheus's own resolution (before the alert's expiry, not an
            // expiry said as one): its episode is over for good.
            if let (Some(expires), Some(at), Some(started)) =
                (source.expires, at, began.or(source.started))
                && at < expires
            {
                remember_ended(&mut node.ended, fingerprint, started, now);
            }
            let was_suppressed = cond.suppressed();
            if cond.sources.remove(fingerprint).is_some() {
                rec.dirty();
                compose_message(ctype, cond);
                let left = Left {
                    count: 1,
                    was_suppressed,
                };
                set_sources(node, rec, settings, ctype, &[], false, keep, left);
            }
        }
    }
    for (ctype, alerts) in fresh.iter() {
        set_sources(node, rec, settings, ctype, alerts, full, keep, Left::NONE);
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
        // An unavailable signal ends at its resolution even untrusted (`ended` then
        // holds only a delivery's without polling): thinking a signal readable costs
        // nothing, and nothing else would ever end it.
        for (_, fingerprint, _, _) in &ended {
            node.unavailable.remove(*fingerprint);
        }
        if node.unavailable.len() != before || !unavailable.is_empty() {
            rec.dirty();
        }
    }

    // Instances counted are remembered until they started `forgetAfter` ago, whether
    // or not the next answer names them (one may drop out of a poll and come back,
    // as after an Alertmanager restart); one that started before that is not counted
    // again, however long it goes on firing (the sweep has forgotten it).
    let forget = TimeDelta::from_std(cfg.identity.forget_after).unwrap_or(TimeDelta::MAX);
    let horizon = now
        .checked_sub_signed(forget)
        .unwrap_or(DateTime::UNIX_EPOCH);
    let mut changed = false;
    for (key, job, reason, at, silenced) in failures {
        let counted = node.failures.counted_alerts.contains(&key);
        if counted || silenced || at < horizon {
            continue;
        }
        count_failure(node, rec, job, reason, at);
        // Counted once, also when the same alert comes twice in one batch.
        node.failures.counted_alerts.insert(key);
        changed = true;
    }
    let counted = &mut node.failures.counted_alerts;
    while counted.len() > MAX_COUNTED {
        let oldest = counted
            .iter()
            .min_by_key(|k| instance_start(k))
            .cloned()
            .expect("not empty");
        counted.remove(&oldest);
    }
    if changed {
        rec.dirty();
    }
}

/// How long, and how many, ended episodes a node remembers: an HA peer's late
/// notification comes within minutes of the resolution.
const ENDED_KEPT: TimeDelta = TimeDelta::hours(1);
const MAX_ENDED: usize = 64;

/// Remember that Prometheus resolved `fingerprint`'s episode that began
/// `started` — not an expiry, after which a restarted Prometheus sends the same
/// episode again.
fn remember_ended(
    ended: &mut SmallMap<Name, super::Ended>,
    fingerprint: &str,
    started: Time,
    now: Time,
) {
    ended.retain(|_, e| now - e.at < ENDED_KEPT);
    ended.insert(fingerprint.into(), super::Ended { started, at: now });
    while ended.len() > MAX_ENDED {
        let oldest = ended
            .iter()
            .min_by_key(|(_, e)| e.at)
            .map(|(fp, _)| fp.clone())
            .expect("not empty");
        ended.remove(&oldest);
    }
}

/// Whether `alert` fires for an episode a resolution already ended: the same
/// fingerprint and `startsAt` (to Alertmanager's API's millisecond) — a new
/// episode starts anew.
fn episode_ended(node: &Node, alert: &Alert<'_>, now: Time) -> bool {
    if node.ended.is_empty() {
        return false;
    }
    let Some(ended) = node.ended.get(alert.fingerprint.as_ref()) else {
        return false;
    };
    now - ended.at < ENDED_KEPT
        && alert
            .started()
            .is_some_and(|s| (s - ended.started).abs() < TimeDelta::milliseconds(1))
}

/// Condition types a node holds raised from alerts, at most (hale's own —
/// missed heartbeat, stale telemetry, failed collector — aside): each keeps its
/// sources and texts, a metric series and a line in what the orchestrator is
/// told, and a rule that names its condition from a label of many values (a
/// path, a job id) would grow them without end.
pub const MAX_CONDITIONS: usize = 64;

/// Keep the condition types a node can hold: of those `fresh` brings and those
/// it holds whatever this step says (sticky ones; in a delivery, or a poll
/// during a hold, those it does not name), the most telling — sticky first (an
/// operator clears those), then the most severe, then those raised already (no
/// churn from one poll to the next), then the live before the silenced, then by
/// name. Returns the types left out: those `fresh` brought are taken out of it.
fn crowd_out(
    node: &Node,
    fresh: &mut Grouped<'_, &Alert<'_>>,
    full: bool,
    holding: bool,
) -> Vec<Name> {
    let own = |c: &str| matches!(c, HEARTBEAT_MISSED | TELEMETRY_STALE | COLLECTOR_FAILED);
    // Nearly every node, every poll: nothing to weigh.
    if fresh.len() + node.conditions.len() <= MAX_CONDITIONS {
        return Vec::new();
    }
    let staying: Vec<(&str, &Condition)> = node
        .conditions
        .iter()
        .filter(|(c, cond)| !own(c) && !fresh.has(c) && (cond.sticky || !full || holding))
        .map(|(c, cond)| (c.as_str(), cond))
        .collect();
    if fresh.len() + staying.len() <= MAX_CONDITIONS {
        return Vec::new();
    }
    let mut ranked: Vec<_> = fresh
        .iter()
        .filter(|(ctype, _)| !own(ctype))
        .map(|(ctype, alerts)| {
            let live = alerts.iter().any(|a| a.state != AlertState::Suppressed);
            let worst = alerts
                .iter()
                .map(|a| a.severity())
                .max()
                .unwrap_or_default();
            let raised = node.conditions.get(ctype);
            let sticky = raised.is_some_and(|c| c.sticky);
            (
                !sticky,
                std::cmp::Reverse(worst),
                raised.is_none(),
                !live,
                ctype,
            )
        })
        .chain(staying.iter().map(|&(c, cond)| {
            (
                !cond.sticky,
                std::cmp::Reverse(cond.severity),
                false,
                cond.suppressed(),
                c,
            )
        }))
        .collect();
    if ranked.len() <= MAX_CONDITIONS {
        return Vec::new();
    }
    ranked.sort_unstable();
    let out: BTreeSet<&str> = ranked[MAX_CONDITIONS..].iter().map(|r| r.4).collect();
    let out: Vec<Name> = out.into_iter().map(Name::from).collect();
    fresh.retain(|ctype, _| out.binary_search_by(|o| o.as_str().cmp(ctype)).is_err());
    out
}

/// Clear `ctypes`, raised but left out by [`crowd_out`]: more severe ones came
/// to a node that holds all it can. Their alerts may still fire; each is taken
/// again once there is room.
fn evict(node: &mut Node, rec: &mut Recorder<'_, '_>, ctypes: &[Name]) {
    for ctype in ctypes {
        let Some(cond) = node.conditions.remove(ctype.as_str()) else {
            continue;
        };
        node.saw(ctype, rec.now);
        rec.event(
            EventKind::ConditionCleared {
                condition: ctype.to_string(),
                severity: cond.severity,
                cleared_by: "crowded".into(),
            },
            format!(
                "{ctype} cleared, its alerts still firing: the node holds {MAX_CONDITIONS} condition types, and more severe ones came"
            ),
        );
    }
}

/// Job-failure instances a node remembers as counted, at most: past it, those that
/// started first go (a job alert flapping all week, a long `forgetAfter`), so its
/// record stays small.
pub(super) const MAX_COUNTED: usize = 256;

/// When a counted instance (`fingerprint@startsAt`) started; `None`, first to go
/// past [`MAX_COUNTED`], when its time cannot be read.
fn instance_start(key: &str) -> Option<DateTime<chrono::FixedOffset>> {
    DateTime::parse_from_rfc3339(key.rsplit_once('@')?.1).ok()
}

/// Sources of a condition taken away before [`set_sources`] (a resolved
/// notification, an expiry): how many, and whether the condition was suppressed
/// before they went.
#[derive(Clone, Copy)]
pub(super) struct Left {
    pub(super) count: usize,
    pub(super) was_suppressed: bool,
}

impl Left {
    pub(super) const NONE: Left = Left {
        count: 0,
        was_suppressed: false,
    };
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
    left: Left,
) {
    let every = alerts;
    let capped = capped(alerts);
    // The alerts beyond the kept: counted, said in the message and events (a poll's
    // are the count; a delivery's raise it, never lower it: it names only some).
    let beyond = (alerts.len() - capped.len()) as u32;
    let alerts: &[&Alert<'_>] = &capped;
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
                (Name::from(a.fingerprint.as_ref()), source)
            })
            .collect();
        if let Some(mut cond) = raise(ctype, sources, settings, now) {
            if beyond > 0 {
                cond.unkept = beyond;
                compose_message(ctype, &mut cond);
            }
            node.saw(ctype, now);
            let suppressed = cond.suppressed();
            let message = format!(
                "{ctype} raised [{}]: {}{}",
                cond.severity.as_str(),
                cond.message,
                if suppressed { SUPPRESSED } else { "" }
            );
            let kind = EventKind::ConditionRaised {
                condition: ctype.into(),
                reason: cond.reason.to_string(),
                severity: cond.severity,
                fault_class: Some(cond.fault_class.to_string()),
                suppressed,
            };
            node.conditions.insert(ctype.into(), cond);
            rec.event(kind, message);
        }
        return;
    };
    let was_suppressed = if left.count > 0 {
        left.was_suppressed
    } else {
        cond.suppressed()
    };
    let muted = |cond: &Condition| cond.sources.values().filter(|s| s.suppressed).count();
    let was_muted = muted(cond);
    let mut keys_changed = left.count > 0;
    let mut content_changed = false;
    if full && unchanged(cond, alerts, ctype, keep) {
        // The same alerts as before: only their expiries moved, and are kept.
    } else if full {
        let mut old = std::mem::replace(&mut cond.sources, SmallMap::with_capacity(alerts.len()));
        for a in alerts {
            let fp = a.fingerprint.as_ref();
            let (key, source) = match old.remove_entry(fp) {
                Some((key, mut s)) if s.matches(a, ctype, keep.muted(Some(&s), a, true)) => {
                    // Moves with every re-send; not a change worth a write.
                    s.expires = a.expires().or(s.expires);
                    (key, s)
                }
                Some((key, s)) => {
                    content_changed = true;
                    let mut source = source_of(a, ctype);
                    source.suppressed = keep.muted(Some(&s), a, true);
                    source.since = s.since;
                    (key, source)
                }
                None => {
                    keys_changed = true;
                    let mut source = source_of(a, ctype);
                    source.since = Some(now);
                    (fp.into(), source)
                }
            };
            cond.sources.insert(key, source);
        }
        for (key, mut source) in old {
            let vanished = source.vanished;
            let resolved = keep.resolved(&key, &source);
            if keep.holds(&key, &mut source) {
                if source.vanished != vanished {
                    rec.dirty();
                }
                cond.sources.insert(key, source);
            } else {
                keys_changed = true;
                // Gone from the answer, not left out of what the condition keeps.
                let gone = || !every.iter().any(|a| a.fingerprint == key.as_str());
                if let (true, Some(started)) = (resolved, source.started)
                    && gone()
                {
                    remember_ended(&mut node.ended, &key, started, now);
                }
            }
        }
    }
    if full {
        // The answer's alerts held by no source (a source held over from a delivery
        // may be one the cap left out of this answer's kept).
        let unkept = if beyond == 0 { 0 } else { unheld(cond, every) };
        if unkept != cond.unkept {
            cond.unkept = unkept;
            keys_changed = true;
        }
    } else {
        // Every alert of the delivery, most severe first: those a full condition
        // has no room for are counted, once each.
        let mut not_taken = 0;
        for a in ordered(every).iter() {
            let fp = a.fingerprint.as_ref();
            let room = cond.sources.len() < MAX_SOURCES;
            match cond.sources.get_mut(fp) {
                Some(s) if s.matches(a, ctype, keep.muted(Some(s), a, false)) => {
                    s.delivered = delivered;
                    // A new episode under the same fingerprint (a flap between
                    // two polls): a late resolution of the old one ends nothing.
                    s.started = a.started().or(s.started);
                }
                Some(s) => {
                    let (expires, since) = (s.expires, s.since);
                    let muted = keep.muted(Some(s), a, false);
                    *s = source_of(a, ctype);
                    s.suppressed = muted;
                    s.expires = s.expires.or(expires);
                    s.since = since;
                    s.delivered = delivered;
                    content_changed = true;
                }
                // Full, the condition takes no more from deliveries; a poll's whole
                // picture keeps the most severe.
                None if !room => not_taken += 1,
                None => {
                    let mut source = source_of(a, ctype);
                    source.delivered = delivered;
                    source.since = Some(now);
                    cond.sources.insert(fp.into(), source);
                    keys_changed = true;
                }
            }
        }
        if not_taken > cond.unkept {
            cond.unkept = not_taken;
            keys_changed = true;
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
            let still = if cond.suppressed() {
                ", suppressed as they were,"
            } else {
                ""
            };
            rec.event(
                kind,
                format!(
                    "{ctype}: its alerts ended; sticky, it stays raised{still} until an operator clears it ({})",
                    cond.message
                ),
            );
        }
        return;
    }
    if alerts.is_empty() && !keys_changed {
        return;
    }
    let latched = |cond: &Condition| {
        (
            cond.severity,
            cond.sticky,
            cond.priority,
            cond.remediation.is_some(),
        )
    };
    if content_changed {
        rec.rescore();
    }
    let previous = latched(cond);
    let recharged = refresh(ctype, cond, settings, now, keys_changed || content_changed);
    if latched(cond) != previous || recharged.is_some() {
        rec.dirty();
    }
    let suppressed = cond.suppressed();
    if cond.severity > previous.0 {
        let kind = EventKind::ConditionEscalated {
            condition: ctype.into(),
            reason: cond.reason.to_string(),
            severity: cond.severity,
            previous_severity: previous.0,
            suppressed,
        };
        let message = format!(
            "{ctype} escalated {} -> {}: {}{}",
            previous.0.as_str(),
            cond.severity.as_str(),
            cond.message,
            if suppressed { SUPPRESSED } else { "" }
        );
        rec.event(kind, message);
    } else if keys_changed || recharged.is_some() {
        let message = if let Some(was) = recharged {
            format!(
                "{ctype} now charged for {} instead of {was}: {}",
                cond.reason, cond.message
            )
        } else {
            // The charged reason's alert ended: its message still leads, as it
            // explains the points, and the count says why it is not among them.
            let ended = !cond.sources.values().any(|s| s.reason == cond.reason);
            format!(
                "{ctype} now fed by {} alert(s){}: {}",
                cond.sources.len() + cond.unkept as usize,
                if ended {
                    format!(", still charged for {} whose alert ended", cond.reason)
                } else {
                    String::new()
                },
                cond.message
            )
        };
        let kind = updated(ctype, cond);
        let now_suppressed = match (was_suppressed, suppressed) {
            (false, true) => " (now suppressed: every alert feeding it is silenced or inhibited)",
            (true, false) => " (no longer suppressed)",
            _ => "",
        };
        rec.event(kind, format!("{message}{now_suppressed}"));
    } else if suppressed != was_suppressed {
        // A silence or inhibition began or ended: the score moves, and this says why.
        let message = if was_suppressed {
            format!(
                "{ctype} no longer suppressed: an alert feeding it is neither silenced nor inhibited now, and it costs points again: {}",
                cond.message
            )
        } else {
            format!(
                "{ctype} suppressed: every alert feeding it is silenced or inhibited in Alertmanager, so it costs nothing and triggers nothing: {}",
                cond.message
            )
        };
        let kind = updated(ctype, cond);
        rec.event(kind, message);
    } else if muted(cond) != was_muted {
        // One of several alerts silenced or inhibited, or no longer: it counts for
        // nothing beside the live ones, or counts again.
        let message = format!(
            "{ctype}: {} of the {} alert(s) feeding it silenced or inhibited now (they count for nothing beside the others): {}",
            muted(cond),
            cond.sources.len(),
            cond.message
        );
        rec.event(updated(ctype, cond), message);
    }
}

/// What a raise fed only by silenced or inhibited alerts says of itself.
const SUPPRESSED: &str =
    " (suppressed: silenced or inhibited in Alertmanager, it costs nothing and triggers nothing)";

/// Whether `alerts` are exactly the condition's sources, each as it was but for
/// its expiry, which moves with every re-send and is kept here (as the rebuild
/// would): the common case of a poll, settled without rebuilding the sources.
fn unchanged(cond: &mut Condition, alerts: &[&Alert<'_>], ctype: &str, keep: Keep<'_>) -> bool {
    const FEW: usize = 8;
    alerts.len() == cond.sources.len()
        && alerts.len() <= FEW
        && alerts.iter().enumerate().all(|(i, a)| {
            let fp = a.fingerprint.as_ref();
            let Some(s) = cond.sources.get_mut(fp) else {
                return false;
            };
            let same = alerts[..i].iter().all(|b| b.fingerprint != fp)
                && s.matches(a, ctype, keep.muted(Some(s), a, true));
            if same {
                s.expires = a.expires().or(s.expires);
            }
            same
        })
}

/// A `CONDITION_UPDATED` event for `cond` as it now stands.
pub(super) fn updated(ctype: &str, cond: &Condition) -> EventKind {
    let mut reasons: Vec<String> = cond
        .sources
        .values()
        .map(|s| s.reason.to_string())
        .collect();
    reasons.sort_unstable();
    reasons.dedup();
    EventKind::ConditionUpdated {
        condition: ctype.into(),
        reason: cond.reason.to_string(),
        severity: cond.severity,
        reasons,
        alerts: cond.sources.len() as u32 + cond.unkept,
        suppressed: cond.suppressed(),
    }
}

pub(super) fn count_failure(
    node: &mut Node,
    rec: &mut Recorder<'_, '_>,
    job: &str,
    reason: &str,
    at: Time,
) {
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
            failed_at: Some(at),
        },
        format!("job {job} failure attributed ({reason}); {total} in total"),
    );
}

/// The collector a `collector_failed` alert names.
pub(super) fn collector<'s>(alert: &'s Alert<'_>) -> &'s str {
    match alert.signal() {
        Signal::CollectorFailed { collector } => collector,
        _ => alert.alertname(),
    }
}

pub(super) fn source_of(alert: &Alert<'_>, ctype: &str) -> Source {
    let failed_collector = ctype == COLLECTOR_FAILED;
    Source {
        reason: if failed_collector {
            COLLECTOR_FAILED.into()
        } else {
            alert.reason().into()
        },
        severity: alert.severity(),
        message: if failed_collector {
            collector(alert).to_string()
        } else {
            alert.message()
        },
        suppressed: alert.state == AlertState::Suppressed,
        sticky: alert.sticky(),
        // hale's own condition, not the alert's: its class is its type's.
        fault_class: if failed_collector {
            COLLECTOR_FAILED.to_ascii_uppercase().into()
        } else {
            alert.fault_class()
        },
        priority: alert.priority(),
        remediation: alert.remediation().map(str::to_string),
        expires: alert.expires(),
        vanished: None,
        since: None,
        delivered: None,
        started: alert.started(),
        notice: alert.notice(),
    }
}

impl Source {
    /// Whether `alert` would produce exactly this source (checked without
    /// allocating), taken as silenced or inhibited as `muted` says.
    pub(super) fn matches(&self, alert: &Alert<'_>, ctype: &str, muted: bool) -> bool {
        let described = if ctype == COLLECTOR_FAILED {
            // A class stored before it was its type's is rewritten.
            self.reason == COLLECTOR_FAILED
                && self.message == collector(alert)
                && self.fault_class.eq_ignore_ascii_case(COLLECTOR_FAILED)
        } else {
            self.reason == alert.reason()
                && alert.message_is(&self.message)
                && alert.fault_class_is(&self.fault_class)
        };
        described
            && self.vanished.is_none()
            && self.severity == alert.severity()
            && self.suppressed == muted
            && self.sticky == alert.sticky()
            && self.priority == alert.priority()
            && self.remediation.as_deref() == alert.remediation()
            && alert.notice_is(self.notice.as_ref())
    }
}

pub(super) fn stale_condition(now: Time) -> Condition {
    Condition {
        reason: TELEMETRY_STALE.into(),
        severity: Severity::Warning,
        message: "hale has no trusted alert data".into(),
        charged_message: String::new(),
        first_seen: now,
        last_seen: now,
        observations: 1,
        sticky: false,
        fault_class: TELEMETRY_STALE.to_ascii_uppercase().into(),
        priority: None,
        remediation: None,
        sources: SmallMap::new(),
        silenced: false,
        silenced_only: false,
        unkept: 0,
    }
}

/// How much a source's reason weighs in choosing the charged reason: its severity,
/// then its points, then (for a fixed order) the earlier name.
pub(super) fn weight<'s>(
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
pub(super) fn raise(
    ctype: &str,
    sources: SmallMap<Name, Source>,
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
        silenced: false,
        silenced_only: false,
        unkept: 0,
    };
    refresh(ctype, &mut cond, settings, now, true);
    Some(cond)
}

/// Fold the current sources into the episode: the charged reason moves up to a worse
/// source (a worse severity, or the same severity and more points) and never down
/// — a worse severity with fewer points raises the severity, not the charge —,
/// stickiness and remediation latch, the message keeps the charged reason's latest
/// and each other source's (recomposed only when the sources changed).
///
/// Silenced or inhibited sources are the operator's word: beside a live one they
/// count for nothing (no severity, charge, stickiness, priority or remediation); a
/// condition fed by them alone is suppressed, and shows what they say until a live
/// source has fed it ([`Condition::silenced_only`]). A new condition, and one raised
/// by them alone that a live source first feeds, takes its latches from the
/// sources that count then.
/// Returns the reason charged before when the charged reason changed.
pub(super) fn refresh(
    ctype: &str,
    cond: &mut Condition,
    settings: &Settings,
    now: Time,
    changed: bool,
) -> Option<Name> {
    let first = cond.observations == 0;
    // Kept for when its alerts end (see `Condition::silenced`).
    let was_silenced = std::mem::replace(
        &mut cond.silenced,
        cond.sources.values().all(|s| s.suppressed),
    );
    let silenced = cond.silenced;
    let unheard = if first { silenced } else { cond.silenced_only };
    let counts = |s: &Source| !s.suppressed || (silenced && unheard);
    let mut recharged = None;
    if first || (was_silenced && !silenced && unheard) {
        if let Some(worst) = cond
            .sources
            .values()
            .filter(|s| counts(s))
            .max_by_key(|s| weight(settings, &s.reason, s.severity))
        {
            cond.severity = worst.severity;
            if worst.reason != cond.reason {
                let was = std::mem::replace(&mut cond.reason, worst.reason.clone());
                recharged = (!first).then_some(was);
            }
            cond.fault_class = worst.fault_class.clone();
        }
        cond.sticky = false;
        cond.priority = None;
        cond.remediation = None;
    }
    cond.silenced_only = unheard && silenced;
    // The worst source, when it outweighs what is charged now: (severity, points).
    // A source of the charged reason and severity weighs the same, so the common
    // case — the same alerts again — looks no penalty up.
    let mut charged = None;
    let mut outweighs = |s: &Source| match s.severity.cmp(&cond.severity) {
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Equal => {
            s.reason != cond.reason
                && settings.penalty(&s.reason, s.severity)
                    > *charged.get_or_insert_with(|| settings.penalty(&cond.reason, cond.severity))
        }
    };
    if let Some(worst) = cond
        .sources
        .values()
        .filter(|s| counts(s) && outweighs(s))
        .max_by_key(|s| weight(settings, &s.reason, s.severity))
    {
        // The charge as it would stand at the new severity: a reason priced by
        // severity alone costs more there.
        let kept = settings.penalty(&cond.reason, worst.severity);
        cond.severity = worst.severity;
        // The class of the worst evidence, whichever reason is charged.
        cond.fault_class = worst.fault_class.clone();
        if worst.reason != cond.reason && settings.penalty(&worst.reason, worst.severity) >= kept {
            recharged = Some(std::mem::replace(&mut cond.reason, worst.reason.clone()));
        }
    }
    // The charged reason's message leads the condition's: composed again when the
    // charge moved (a reload that prices reasons anew, too).
    let mut compose = changed || recharged.is_some();
    if let Some(s) = cond
        .sources
        .values()
        .find(|s| counts(s) && s.reason == cond.reason)
        && s.message != cond.charged_message
    {
        cond.charged_message = s.message.clone();
        compose = true;
    }
    for s in cond.sources.values().filter(|s| counts(s)) {
        cond.sticky |= s.sticky;
        cond.priority = match (cond.priority, s.priority) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if cond.remediation.is_none() {
            cond.remediation = s.remediation.clone();
        }
    }
    if compose {
        compose_message(ctype, cond);
    }
    cond.last_seen = now;
    cond.observations += 1;
    recharged
}

/// The message of a condition: the charged reason's latest message, then each other
/// source's latest, once. A condition whose sources all ended keeps the message it
/// had.
pub(super) fn compose_message(ctype: &str, cond: &mut Condition) {
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
    let (head, separator) = if ctype == COLLECTOR_FAILED {
        ("collectors failed: ", ", ")
    } else {
        ("", "; ")
    };
    // Each text is clipped already; many alerts' texts together are cut too, and
    // the alerts past the kept sources are counted with those left out.
    let mut message = String::from(head);
    let mut shown = messages.len();
    for (i, m) in messages.iter().enumerate() {
        if i > 0 && message.len() + m.len() > MAX_MESSAGE {
            shown = i;
            break;
        }
        if i > 0 {
            message.push_str(separator);
        }
        message.push_str(m);
    }
    let more = messages.len() - shown + cond.unkept as usize;
    if more > 0 {
        message.push_str(&format!("{separator}… and {more} more"));
    }
    cond.message = message;
}

/// The most alerts one condition keeps a source for: each keeps its texts, and the
/// node's record is written whole (a NATS message holds 1 MiB by default).
pub const MAX_SOURCES: usize = 64;

/// `alerts`, or [`MAX_SOURCES`] of them: the live before the silenced, the most
/// severe first (then by fingerprint).
fn capped<'x, 'a>(alerts: &'x [&'x Alert<'a>]) -> std::borrow::Cow<'x, [&'x Alert<'a>]> {
    let mut kept = ordered(alerts);
    if let std::borrow::Cow::Owned(kept) = &mut kept {
        kept.truncate(MAX_SOURCES);
    }
    kept
}

/// `alerts` in the order a condition keeps them by, when they are more than it
/// keeps: live before silenced or inhibited (which count for nothing beside a live
/// one), then the most severe (then by fingerprint).
fn ordered<'x, 'a>(alerts: &'x [&'x Alert<'a>]) -> std::borrow::Cow<'x, [&'x Alert<'a>]> {
    if alerts.len() <= MAX_SOURCES {
        return std::borrow::Cow::Borrowed(alerts);
    }
    let mut all = alerts.to_vec();
    let silenced = |a: &Alert<'_>| a.state == AlertState::Suppressed;
    all.sort_by(|a, b| {
        silenced(a)
            .cmp(&silenced(b))
            .then_with(|| b.severity().cmp(&a.severity()))
            .then_with(|| a.fingerprint.cmp(&b.fingerprint))
    });
    std::borrow::Cow::Owned(all)
}

/// How many of `alerts` no source of `cond` holds.
fn unheld(cond: &Condition, alerts: &[&Alert<'_>]) -> u32 {
    alerts
        .iter()
        .filter(|a| !cond.sources.contains_key(a.fingerprint.as_ref()))
        .count() as u32
}

/// The most a condition's message joins of its alerts' texts, in bytes.
const MAX_MESSAGE: usize = 4 * super::labels::MAX_TEXT;

impl Node {
    /// A copy of this record that `size` measures at `limit` or less, for a store
    /// that cannot hold a larger one (a NATS message holds 1 MiB by default); `None`
    /// when keeping one source per condition is still too large. The conditions
    /// keep their most telling sources: each its worst, then the most telling of the
    /// rest (live before suppressed, then by severity; at equal rank each
    /// condition's second before any one's third), their messages joined again from
    /// what is kept. Severity, reason and points stay as they were; the next poll
    /// brings back what was left out.
    pub fn fitted(&self, limit: usize, size: impl Fn(&Node) -> usize) -> Option<Node> {
        let mut node = self.clone();
        let mut len = size(&node);
        while len > limit {
            let total: usize = node.conditions.values().map(|c| c.sources.len()).sum();
            let floor = node
                .conditions
                .values()
                .filter(|c| !c.sources.is_empty())
                .count();
            if total <= floor {
                return None;
            }
            // In proportion to the excess, and at least one fewer each round.
            let target = (total * limit / len).clamp(floor, total - 1);
            node.keep_most_telling(target);
            len = size(&node);
        }
        Some(node)
    }

    /// Keep `target` sources in all (at least one per condition that has any).
    fn keep_most_telling(&mut self, target: usize) {
        let rank = |s: &Source| (s.suppressed, std::cmp::Reverse(s.severity));
        let mut firsts = Vec::new();
        let mut rest = Vec::new();
        for (ctype, cond) in self.conditions.iter() {
            let mut ranked: Vec<(&Name, &Source)> = cond.sources.iter().collect();
            ranked.sort_by(|a, b| rank(a.1).cmp(&rank(b.1)).then_with(|| a.0.cmp(b.0)));
            for (i, (fp, s)) in ranked.into_iter().enumerate() {
                // At equal rank, each condition's second before any one's third.
                let entry = (rank(s), i, ctype.clone(), fp.clone());
                if i == 0 {
                    firsts.push(entry)
                } else {
                    rest.push(entry)
                }
            }
        }
        rest.sort();
        rest.truncate(target.saturating_sub(firsts.len()));
        let kept: BTreeSet<(Name, Name)> = firsts
            .into_iter()
            .chain(rest)
            .map(|(_, _, ctype, fp)| (ctype, fp))
            .collect();
        for (ctype, cond) in self.conditions.iter_mut() {
            let before = cond.sources.len();
            cond.sources
                .retain(|fp, _| kept.contains(&(ctype.clone(), fp.clone())));
            if cond.sources.len() != before {
                compose_message(ctype, cond);
            }
        }
    }
}
