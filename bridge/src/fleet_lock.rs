//! The fleet's lock, shared by the service and the scrape. std's mutex gives a
//! released lock to whichever thread asks first, and a loop that takes it slice
//! after slice — a poll of 100,000 nodes, a scrape — asks again at once: a
//! delivery or a read waiting on it could wait out every slice of the loop. So
//! waiters are counted, and such loops let them in between two slices.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::core::Fleet;

/// How long a loop waits at most, between two slices, for those waiting to have
/// had the lock: a steady stream of requests cannot stop a poll.
const MOST: Duration = Duration::from_millis(50);

pub struct FleetLock {
    fleet: Mutex<Fleet>,
    /// Every lock asked for, and every one given: their difference waits.
    asked: AtomicU64,
    given: AtomicU64,
}

impl FleetLock {
    pub fn new(fleet: Fleet) -> FleetLock {
        FleetLock {
            fleet: Mutex::new(fleet),
            asked: AtomicU64::new(0),
            given: AtomicU64::new(0),
        }
    }

    /// Take the lock. A panic under it poisons it, and every later lock panics
    /// too (hale is then unhealthy).
    pub fn lock(&self) -> MutexGuard<'_, Fleet> {
        self.asked.fetch_add(1, Ordering::AcqRel);
        let fleet = self.fleet.lock();
        self.given.fetch_add(1, Ordering::AcqRel);
        fleet.expect("fleet lock")
    }

    /// Between two slices of a loop, the lock released: let those already waiting
    /// have it first (not those who come meanwhile), for at most [`MOST`].
    pub fn let_waiters_in(&self) {
        let waiting = self.asked.load(Ordering::Acquire);
        let until = Instant::now() + MOST;
        while self.given.load(Ordering::Acquire) < waiting && Instant::now() < until {
            std::thread::yield_now();
        }
    }

    pub fn is_poisoned(&self) -> bool {
        self.fleet.is_poisoned()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    use super::*;

    /// A loop taking the lock slice after slice lets a waiting thread in between
    /// two slices, rather than taking it again first every time.
    #[test]
    fn a_slicing_loop_lets_a_waiter_in() {
        let lock = Arc::new(FleetLock::new(Fleet::new(chrono::Utc::now())));
        let got = Arc::new(AtomicBool::new(false));
        let held = lock.lock();
        let waiter = {
            let (lock, got) = (lock.clone(), got.clone());
            std::thread::spawn(move || {
                let _fleet = lock.lock();
                got.store(true, Ordering::Release);
            })
        };
        // The waiter is counted once it waits.
        while lock.asked.load(Ordering::Acquire) < 2 {
            std::thread::yield_now();
        }
        drop(held);
        let mut slices = 0;
        while !got.load(Ordering::Acquire) {
            lock.let_waiters_in();
            drop(lock.lock());
            slices += 1;
            assert!(slices < 1_000, "the waiter never had the lock");
        }
        waiter.join().unwrap();
        assert!(slices <= 1, "{slices} slices went before the waiter");
    }
}
