//! Helpers shared by hale's fuzz targets: the input convention for `now`, the fixed
//! configurations, and the score invariants every step of the core must keep.
//!
//! # Input convention (targets `webhook`, `poll`, `http_query`)
//!
//! An input that starts with a NUL byte and is at least 17 bytes long carries its own
//! clock: bytes 1..9 (little-endian u64) pick `now` anywhere in years 1..=9999 at
//! millisecond resolution, bytes 9..17 pick a `later` instant after it (from a few
//! milliseconds to the end of year 9999), and the body starts at byte 17. Any other
//! input is the body itself (a plain JSON file or query string is a valid seed), with
//! `now` fixed at [`FIXED_NOW`] and `later` five minutes after it.

use std::sync::LazyLock;

use chrono::{DateTime, TimeDelta};
use hale::config::{Config, InventoryNode};
use hale::core::settings::CoreSettings;
use hale::core::{EventKind, Fleet, Listed, Outcome, Time};

/// The fixed clock of plain inputs.
pub const FIXED_NOW: &str = "2026-08-05T12:00:00Z";
/// `0001-01-01T00:00:00Z`, the earliest `now` a derived clock picks.
pub const MIN_SECS: i64 = -62_135_596_800;
/// `9999-12-31T23:59:59Z`, the latest.
pub const MAX_SECS: i64 = 253_402_300_799;
/// Bytes of the clock header: the NUL marker, `now`, `later`.
pub const HEADER: usize = 17;

pub fn fixed_now() -> Time {
    DateTime::parse_from_rfc3339(FIXED_NOW)
        .expect("FIXED_NOW is RFC 3339")
        .to_utc()
}

pub fn min_time() -> Time {
    DateTime::from_timestamp(MIN_SECS, 0).expect("year 1 is in chrono's range")
}

pub fn max_time() -> Time {
    DateTime::from_timestamp(MAX_SECS, 999_000_000).expect("year 9999 is in chrono's range")
}

/// A time in years 1..=9999, uniformly by millisecond.
pub fn time_from(seed: u64) -> Time {
    let span_ms = ((MAX_SECS - MIN_SECS + 1) * 1000) as u64;
    let ms = MIN_SECS * 1000 + (seed % span_ms) as i64;
    DateTime::from_timestamp_millis(ms).expect("in range by construction")
}

/// An instant at or after `now`: 56 bits of milliseconds shifted right by 0..=56, so
/// small steps (seconds, minutes) are as likely as huge ones; clamped to year 9999.
pub fn later_from(now: Time, seed: u64) -> Time {
    let shift = ((seed >> 56) % 57) as u32;
    let ms = ((seed & ((1 << 56) - 1)) >> shift) as i64;
    now.checked_add_signed(TimeDelta::milliseconds(ms))
        .filter(|t| *t <= max_time())
        .unwrap_or_else(max_time)
}

/// One input, split as the module documentation says.
pub struct Input<'a> {
    pub now: Time,
    pub later: Time,
    pub body: &'a [u8],
    /// The clock came from the input (not [`FIXED_NOW`]).
    pub derived: bool,
}

pub fn split(data: &[u8]) -> Input<'_> {
    if data.len() >= HEADER && data[0] == 0 {
        let word = |at: usize| u64::from_le_bytes(data[at..at + 8].try_into().unwrap());
        let now = time_from(word(1));
        Input {
            now,
            later: later_from(now, word(9)),
            body: &data[HEADER..],
            derived: true,
        }
    } else {
        let now = fixed_now();
        Input {
            now,
            later: now + TimeDelta::minutes(5),
            body: data,
            derived: false,
        }
    }
}

/// The header that makes `now` = `now` and `later` = `now + later_ms` (for seeds).
pub fn header(now: Time, later_ms: u64) -> [u8; HEADER] {
    let span_ms = ((MAX_SECS - MIN_SECS + 1) * 1000) as u64;
    let seed = (now.timestamp_millis() - MIN_SECS * 1000) as u64 % span_ms;
    let mut h = [0u8; HEADER];
    h[1..9].copy_from_slice(&seed.to_le_bytes());
    h[9..17].copy_from_slice(&(later_ms & ((1 << 56) - 1)).to_le_bytes());
    h
}

/// Polling every 30 s, the watchdog required, a pool with its own mode, two inventory
/// nodes (one in the pool), a non-default failure tally and a custom penalty.
pub const POLLING_YAML: &str = "\
cluster: fuzz
alertmanager:
  pollInterval: 30s
nodeHealth:
  failureTallyPenalty: 7
  failureTallyHalfLifeHours: 24
  penalties:
    SmartFailing: 40
    FuzzReason: 60
pools:
  - name: gpu
    selector: { pool: gpu }
    nodeHealth:
      mode: cordon
      drainBelow: 50
      degradedAtOrBelow: 90
inventory:
  - id: gpu-14
    labels: { pool: gpu }
  - id: bm-01
    labels: { pool: cpu }
";

/// Polling with the watchdog not required: every answer is trusted.
pub const POLLING_NO_WATCHDOG_YAML: &str = "\
cluster: fuzz
alertmanager: { pollInterval: 30s, requireWatchdog: false }
";

/// Webhook-only mode: polling off.
pub const WEBHOOK_ONLY_YAML: &str = "alertmanager: { pollInterval: 0 }\n";

/// What a target steps the core with: the settings a configuration resolves to, and
/// its inventory. Derefs to the settings, so `fleet.poll(cfg, ..)` reads as hale's.
pub struct Setup {
    pub core: CoreSettings,
    pub inventory: Vec<Listed>,
}

impl std::ops::Deref for Setup {
    type Target = CoreSettings;

    fn deref(&self) -> &CoreSettings {
        &self.core
    }
}

pub fn load(yaml: &str) -> Setup {
    let loaded = Config::parse("f", yaml)
        .unwrap()
        .resolve("f", yaml)
        .unwrap();
    let inventory = loaded
        .config
        .inventory
        .iter()
        .map(InventoryNode::listed)
        .collect();
    Setup {
        core: loaded.core,
        inventory,
    }
}

pub static POLLING: LazyLock<Setup> = LazyLock::new(|| load(POLLING_YAML));
pub static POLLING_NO_WATCHDOG: LazyLock<Setup> = LazyLock::new(|| load(POLLING_NO_WATCHDOG_YAML));
pub static WEBHOOK_ONLY: LazyLock<Setup> = LazyLock::new(|| load(WEBHOOK_ONLY_YAML));

/// A fresh fleet at `now`, with the configuration's inventory registered.
pub fn fresh_fleet(cfg: &Setup, now: Time) -> Fleet {
    let mut fleet = Fleet::new(now);
    if !cfg.inventory.is_empty() {
        let out = fleet.register(cfg, now, &cfg.inventory);
        check(cfg, &fleet, &out, "register");
    }
    fleet
}

/// The invariants of every step: no node is blank; each node's score, when it has one, is in 0..=100
/// and equals 100 minus the sum of its breakdown (saturating at 0); every
/// SCORE_CHANGED event carries scores in 0..=100. Health is computed too (it must
/// not panic).
pub fn check(cfg: &Setup, fleet: &Fleet, out: &Outcome, step: &str) {
    for (id, node) in &fleet.nodes {
        assert!(
            !id.trim().is_empty(),
            "{step}: a node has the blank id {id:?}"
        );
        if let Some(score) = &node.score {
            assert!(
                score.value <= 100,
                "{step}: node {id:?} scored {} (> 100)",
                score.value
            );
            let total: u64 = score.breakdown.iter().map(|d| u64::from(d.points)).sum();
            assert_eq!(
                u64::from(score.value),
                100u64.saturating_sub(total),
                "{step}: node {id:?} scored {} but its breakdown {:?} sums to {total}",
                score.value,
                score.breakdown
            );
        }
        let _ = node.health(cfg.settings_for(&node.labels));
    }
    for e in &out.events {
        if let EventKind::ScoreChanged {
            score,
            previous_score,
            ..
        } = &e.kind
        {
            assert!(
                *score <= 100 && *previous_score <= 100,
                "{step}: {e:?} is out of 0..=100"
            );
        }
    }
}

/// The nodes a step's SCORE_CHANGED events name.
pub fn score_changes(out: &Outcome) -> Vec<&hale::core::Event> {
    out.events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::ScoreChanged { .. }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_header_round_trips() {
        for t in [
            fixed_now(),
            min_time(),
            max_time() - TimeDelta::milliseconds(999),
        ] {
            let mut data = header(t, 5_000).to_vec();
            data.extend_from_slice(b"{}");
            let i = split(&data);
            assert!(i.derived);
            assert_eq!(i.now, t);
            assert_eq!(i.later, (t + TimeDelta::seconds(5)).min(max_time()));
            assert_eq!(i.body, b"{}");
        }
        let i = split(b"{\"version\":\"4\"}");
        assert!(!i.derived);
        assert_eq!(i.now, fixed_now());
    }

    #[test]
    fn configs_load() {
        let _ = (&*POLLING, &*POLLING_NO_WATCHDOG, &*WEBHOOK_ONLY);
    }
}
