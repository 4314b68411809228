//! A failure that repeats — polls Alertmanager does not answer, writes the store
//! refuses — said in the log as an on-call reads it: the first at once, one of
//! another kind at once, the rest once a minute with how many there were, and
//! the first success after them with how long it lasted. A log on the disk that
//! filled is not filled faster by it.

use std::time::{Duration, Instant};

/// How often a failure that keeps repeating is said again.
pub const SAY_EVERY: Duration = Duration::from_secs(60);

/// One run of failures, from the first to the success that ends it.
#[derive(Debug, Default)]
pub struct Streak {
    began: Option<Instant>,
    failures: u64,
    said_at: Option<Instant>,
    said_kind: String,
}

/// What a line about the failure just met says besides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Said {
    /// The failures of the run so far, this one included.
    pub failures: u64,
    /// How long the run has lasted, in whole seconds.
    pub for_s: u64,
}

/// A run that ended: how many failures, how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    pub failures: u64,
    pub for_s: u64,
}

impl Streak {
    /// A failure of `kind`: `Some` when it is to be said now — the run's first,
    /// one of another kind than the last said, the first `SAY_EVERY` after the
    /// last said.
    pub fn failed(&mut self, kind: &str, now: Instant) -> Option<Said> {
        let began = *self.began.get_or_insert(now);
        self.failures += 1;
        let due = self.said_kind != kind
            || self
                .said_at
                .is_none_or(|at| now.duration_since(at) >= SAY_EVERY);
        if !due {
            return None;
        }
        self.said_at = Some(now);
        kind.clone_into(&mut self.said_kind);
        Some(Said {
            failures: self.failures,
            for_s: now.duration_since(began).as_secs(),
        })
    }

    /// A success: the run it ends, if one was under way.
    pub fn succeeded(&mut self, now: Instant) -> Option<Ended> {
        let began = self.began.take()?;
        let ended = Ended {
            failures: self.failures,
            for_s: now.duration_since(began).as_secs(),
        };
        *self = Streak::default();
        Some(ended)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_said_at_its_start_each_minute_on_a_new_kind_and_at_its_end() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut streak = Streak::default();
        assert_eq!(streak.succeeded(at(0)), None, "no run, nothing ended");
        let said = |streak: &mut Streak, kind: &str, s: u64| streak.failed(kind, at(s));
        assert_eq!(
            said(&mut streak, "unreachable", 0),
            Some(Said {
                failures: 1,
                for_s: 0
            })
        );
        // A poll every 5 s for a minute: quiet until the minute is up.
        for s in (5..60).step_by(5) {
            assert_eq!(said(&mut streak, "unreachable", s), None, "{s}");
        }
        assert_eq!(
            said(&mut streak, "unreachable", 60),
            Some(Said {
                failures: 13,
                for_s: 60
            })
        );
        // Another kind of failure is said at once, and again when it changes back.
        assert_eq!(
            said(&mut streak, "status", 65),
            Some(Said {
                failures: 14,
                for_s: 65
            })
        );
        assert_eq!(
            said(&mut streak, "unreachable", 70),
            Some(Said {
                failures: 15,
                for_s: 70
            })
        );
        assert_eq!(said(&mut streak, "unreachable", 75), None);
        assert_eq!(
            streak.succeeded(at(80)),
            Some(Ended {
                failures: 16,
                for_s: 80
            })
        );
        assert_eq!(streak.succeeded(at(85)), None, "said once");
        // The next run starts afresh.
        assert_eq!(
            said(&mut streak, "unreachable", 90),
            Some(Said {
                failures: 1,
                for_s: 0
            })
        );
    }
}
