//! Missed heartbeats: a node whose heartbeat was seen and has gone quiet for its
//! window is recorded as no longer reporting — only while the source is trusted,
//! and once trusted input that came after the window showed it still quiet.

use std::time::Duration;

use chrono::DateTime;

use super::settings::CoreSettings;
use super::step::Step;
use super::{Condition, EventKind, HEARTBEAT_MISSED, Node, Severity, SmallMap, Time};

/// Heartbeat intervals are capped here before multiplying by the threshold.
const MAX_INTERVAL: Duration = Duration::from_secs(24 * 3600);
/// No node is missed sooner than this after its last heartbeat.
const MIN_MISS_AFTER: Duration = Duration::from_secs(15);

impl super::Settings {
    /// How long a node whose heartbeats come every `interval` stays quiet before it
    /// is missed: `max(15 s, heartbeatMissThreshold × min(interval, 24 h))`.
    pub fn miss_after(&self, interval: Duration) -> Duration {
        (interval.min(MAX_INTERVAL) * self.heartbeat_miss_threshold).max(MIN_MISS_AFTER)
    }
}

/// The earliest time a node not yet missed can be late: none is before it. A look
/// over every node sets it; a step lowers it for each node it changed, so a tick
/// between two polls looks over the fleet only once someone may be late. Memory
/// only: `None` after a load, new settings, or labels changed outside a step (the
/// orchestrator's inventory).
#[derive(Debug, Clone, PartialEq)]
pub struct HeartbeatsDue {
    pub at: Time,
    /// The windows' start it was found with ([`super::trust::Trust::heartbeats_since`]):
    /// a later one moves every window's start.
    pub since: Option<Time>,
}

/// When the node's heartbeat is late, and the window that makes it so; `None`
/// without a heartbeat.
pub(super) fn deadline(
    cfg: &CoreSettings,
    windows_since: Option<Time>,
    node: &Node,
) -> Option<(Time, Duration)> {
    let hb = node.heartbeat.as_ref()?;
    let after = cfg.settings_for(&node.labels).miss_after(hb.interval);
    // Heartbeats that left with the pipeline get a full window to return.
    let since = windows_since.map_or(hb.last, |t| t.max(hb.last));
    let at = chrono::TimeDelta::from_std(after)
        .ok()
        .and_then(|d| since.checked_add_signed(d))
        .unwrap_or(DateTime::<chrono::Utc>::MAX_UTC);
    Some((at, after))
}

impl<'f> Step<'f> {
    /// What this step changed can be late sooner than the last look found: those
    /// nodes' deadlines lower the kept one.
    pub(super) fn lower_heartbeats_due(&mut self) {
        let Some(due) = self.fleet.heartbeats_due.as_mut() else {
            return;
        };
        let since = self.fleet.trust.heartbeats_since();
        for id in self.out.dirty.iter().chain(&self.out.touched) {
            // One missed already is looked at again only when its heartbeat is back.
            if let Some((at, _)) = self
                .fleet
                .nodes
                .get(id)
                .filter(|n| !n.conditions.contains_key(HEARTBEAT_MISSED))
                .and_then(|n| deadline(self.cfg, since, n))
            {
                due.at = due.at.min(at);
            }
        }
    }

    /// A node whose heartbeat was seen and has gone quiet for `max(15 s, threshold ×
    /// min(interval, 24 h))` is no longer reporting. Never evaluated while stale: then
    /// hale, not the node, is the one who cannot see.
    ///
    /// Nor before the first trusted input since this process started watching: after a
    /// restart every stored heartbeat is old, and the first poll decides who is alive.
    pub(super) fn check_heartbeats(&mut self) {
        let trust = &self.fleet.trust;
        // A heartbeat gone along with the watchdog says the pipeline stopped, not the
        // node: only while the source is trusted is its absence the node's.
        if trust.stale || !trust.source_up || !trust.trusted_since_start() {
            return;
        }
        // And only as far as trusted input has shown it: a node is late once input
        // that proved the pipeline alive, applied whole, arrived after its deadline
        // without its heartbeat. The watchdog and the heartbeats stopping together
        // leave every node as last seen until the source goes stale, however long
        // that is.
        let Some(seen) = trust.applied.map(|t| t.min(self.now)) else {
            return;
        };
        // Nobody can be late before the earliest deadline the last look found, as
        // long as no step since made one earlier (see `HeartbeatsDue`).
        if let Some(due) = &self.fleet.heartbeats_due
            && due.since == trust.heartbeats_since()
            && seen < due.at
        {
            return;
        }
        let mut missed = Vec::new();
        let mut next: Option<Time> = None;
        let mut ahead = self.fleet.nodes.values().skip(8);
        for (id, node) in &self.fleet.nodes {
            if let Some(n) = ahead.next() {
                n.prefetch();
            }
            let Some((deadline, after)) = deadline(self.cfg, trust.heartbeats_since(), node) else {
                continue;
            };
            if seen < deadline {
                next = Some(next.map_or(deadline, |n| n.min(deadline)));
            } else if !node.conditions.contains_key(HEARTBEAT_MISSED) {
                // The time first: a node's conditions are looked at only once it is late.
                let last = node.heartbeat.as_ref().expect("has a deadline").last;
                missed.push((id.clone(), last, after));
            }
        }
        self.fleet.heartbeats_due = Some(HeartbeatsDue {
            at: next.unwrap_or(DateTime::<chrono::Utc>::MAX_UTC),
            since: trust.heartbeats_since(),
        });
        for (id, last, after) in missed {
            let now = self.now;
            let node = self.node(&id);
            node.conditions.insert(
                HEARTBEAT_MISSED.into(),
                Condition {
                    reason: HEARTBEAT_MISSED.into(),
                    severity: Severity::Warning,
                    message: format!("no heartbeat since {}", crate::core::shown_time(last)),
                    charged_message: String::new(),
                    first_seen: now,
                    last_seen: now,
                    observations: 1,
                    sticky: false,
                    fault_class: HEARTBEAT_MISSED.to_ascii_uppercase().into(),
                    priority: None,
                    remediation: None,
                    sources: SmallMap::new(),
                    silenced: false,
                    silenced_only: false,
                    unkept: 0,
                },
            );
            self.event(
                &id,
                EventKind::HeartbeatMissed {
                    last_heartbeat: last,
                },
                format!(
                    "node {id} stopped reporting: last heartbeat {} ({}s ago; missed after {}s without one)",
                    crate::core::shown_time(last),
                    (now - last).num_seconds().max(0),
                    after.as_secs()
                ),
            );
        }
    }
}
