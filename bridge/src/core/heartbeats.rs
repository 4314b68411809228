//! Missed heartbeats: a node whose heartbeat was seen and has gone quiet for its
//! window is recorded as no longer reporting — only while the source is trusted.

use std::time::Duration;

use super::step::Step;
use super::{Condition, EventKind, HEARTBEAT_MISSED, Severity, SmallMap};

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

impl<'f> Step<'f> {
    /// A node whose heartbeat was seen and has gone quiet for `max(15 s, threshold ×
    /// min(interval, 24 h))` is no longer reporting. Never evaluated while stale: then
    /// hale, not the node, is the one who cannot see.
    ///
    /// Nor before the first trusted input since this process started watching: after a
    /// restart every stored heartbeat is old, and the first poll decides who is alive.
    pub(super) fn check_heartbeats(&mut self) {
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
            let after = self.cfg.settings_for(&node.labels).miss_after(hb.interval);
            // Heartbeats that left with the pipeline get a full window to return.
            let since = trust.trusted_since.map_or(hb.last, |t| t.max(hb.last));
            // The time first: a node's conditions are looked at only once it is late.
            if (self.now - since).to_std().unwrap_or_default() >= after
                && !node.conditions.contains_key(HEARTBEAT_MISSED)
            {
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
                    fault_class: HEARTBEAT_MISSED.to_ascii_uppercase().into(),
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
}
