//! Whether hale is alive, not merely answering: every loop (poll, tick, act, publish,
//! inventory, retention, each webhook endpoint's delivery) beats as it goes round,
//! and `/healthz` fails once one has not beaten within its allowance or died in a
//! panic. A hale whose fleet lock was poisoned, or one of whose loops is stuck, is
//! then restarted by its supervisor instead of serving a frozen picture.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// The loops being watched.
#[derive(Default)]
pub struct Liveness {
    loops: Mutex<BTreeMap<u64, Loop>>,
    next: AtomicU64,
}

struct Loop {
    name: String,
    last: Instant,
    allowed: Duration,
    /// Ended in a panic: dead for good.
    panicked: bool,
}

/// One loop's pulse: beat it each time round. Dropped when the loop ends normally
/// (it is no longer watched); dropped while its thread panics, it marks the loop
/// dead.
pub struct Beat {
    id: u64,
    liveness: Arc<Liveness>,
}

impl Liveness {
    /// Watch a loop that must beat at least every `allowed`.
    pub fn watch(self: &Arc<Self>, name: impl Into<String>, allowed: Duration) -> Beat {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(
            id,
            Loop {
                name: name.into(),
                last: Instant::now(),
                allowed,
                panicked: false,
            },
        );
        Beat {
            id,
            liveness: self.clone(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Loop>> {
        // Only this module writes here, never while panicking with the lock held.
        self.loops.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `Ok` while every loop beats within its allowance; else what is wrong, one
    /// loop per clause.
    pub fn check(&self, now: Instant) -> Result<(), String> {
        let problems: Vec<String> = self
            .lock()
            .values()
            .filter_map(|l| {
                if l.panicked {
                    return Some(format!("the {} loop died in a panic", l.name));
                }
                let quiet = now.saturating_duration_since(l.last);
                (quiet > l.allowed).then(|| {
                    format!(
                        "the {} loop has made no progress for {}s (allowed {}s)",
                        l.name,
                        quiet.as_secs(),
                        l.allowed.as_secs()
                    )
                })
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

impl Beat {
    /// The loop went round.
    pub fn beat(&self) {
        if let Some(l) = self.liveness.lock().get_mut(&self.id) {
            l.last = Instant::now();
        }
    }

    /// The loop went round, and must go round again within `allowed` (which follows
    /// the configuration, e.g. the poll interval).
    pub fn beat_within(&self, allowed: Duration) {
        if let Some(l) = self.liveness.lock().get_mut(&self.id) {
            l.last = Instant::now();
            l.allowed = allowed;
        }
    }
}

impl Drop for Beat {
    fn drop(&mut self) {
        let mut loops = self.liveness.lock();
        if std::thread::panicking() {
            if let Some(l) = loops.get_mut(&self.id) {
                l.panicked = true;
            }
        } else {
            loops.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_loop_that_stops_beating_or_panics_fails_the_check() {
        let live = Arc::new(Liveness::default());
        let tick = live.watch("tick", Duration::from_secs(60));
        let poll = live.watch("poll", Duration::from_secs(120));
        assert_eq!(live.check(Instant::now()), Ok(()));
        tokio::time::advance(Duration::from_secs(61)).await;
        poll.beat();
        let e = live.check(Instant::now()).unwrap_err();
        assert!(e.contains("tick loop has made no progress for 61s"), "{e}");
        assert!(!e.contains("poll"), "{e}");
        tick.beat();
        assert_eq!(live.check(Instant::now()), Ok(()));
        // A loop that ends normally is no longer watched; one that panics is dead.
        drop(tick);
        let dying = live.clone();
        let task = tokio::spawn(async move {
            let _beat = dying.watch("act", Duration::from_secs(60));
            panic!("under the fleet lock");
        });
        assert!(task.await.is_err());
        let e = live.check(Instant::now()).unwrap_err();
        assert_eq!(e, "the act loop died in a panic");
        poll.beat_within(Duration::from_secs(5));
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(live.check(Instant::now()).unwrap_err().contains("poll"));
    }
}
