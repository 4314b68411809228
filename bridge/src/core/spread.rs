//! Work spread over the machine's cores: an answer's alerts grouped by node, the
//! nodes of a poll's slice, the records of a large write. The result is the same as
//! one thread's, in the same order.

use std::sync::{Mutex, OnceLock, PoisonError};

/// Fewer items than this per thread stay on the calling thread: a thread costs
/// tens of microseconds; a node's share of a poll, or its record, a few. A poll
/// slice of 1,024 nodes is spread over four cores at the most.
pub const PER_THREAD: usize = 256;

/// The cores this process may use (its CPU quota, where one is set).
pub fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get))
}

/// The threads a spread may use here.
fn allowed() -> usize {
    #[cfg(test)]
    if let Some(n) = THREADS.with(std::cell::Cell::get) {
        return n;
    }
    cores()
}

#[cfg(test)]
thread_local! {
    static THREADS: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
    static SPAWNED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    static REFUSED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `f` as on a system that gives no more threads.
#[cfg(test)]
pub fn refusing_threads<R>(f: impl FnOnce() -> R) -> R {
    REFUSED.with(|r| r.set(true));
    let r = f();
    REFUSED.with(|r| r.set(false));
    r
}

/// `f` with the spreads it makes allowed `threads` threads, whatever the machine
/// has; and how many threads they started.
#[cfg(test)]
pub fn with_threads<R>(threads: usize, f: impl FnOnce() -> R) -> (R, usize) {
    THREADS.with(|t| t.set(Some(threads)));
    SPAWNED.with(|s| s.set(0));
    let r = f();
    THREADS.with(|t| t.set(None));
    (r, SPAWNED.with(std::cell::Cell::get))
}

/// A scoped thread running `f`, if the system gives one (a container's process
/// limit may not): the caller then runs `f` itself.
pub fn spawn<'scope, R: Send + 'scope>(
    s: &'scope std::thread::Scope<'scope, '_>,
    f: impl FnOnce() -> R + Send + 'scope,
) -> Option<std::thread::ScopedJoinHandle<'scope, R>> {
    #[cfg(test)]
    if REFUSED.with(std::cell::Cell::get) {
        return None;
    }
    let handle = std::thread::Builder::new().spawn_scoped(s, f).ok();
    #[cfg(test)]
    if handle.is_some() {
        SPAWNED.with(|n| n.set(n.get() + 1));
    }
    handle
}

/// What a scoped thread returned, its panic raised again here.
pub fn joined<R>(handle: std::thread::ScopedJoinHandle<'_, R>) -> R {
    handle
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// `f` over consecutive chunks of `items`, one chunk per thread when there are
/// enough items to pay for the threads (else one chunk, on this thread); the
/// chunks' results in order. A chunk whose thread could not be started is run
/// here.
pub fn chunks<T: Send, R: Send>(items: &mut [T], f: impl Fn(&mut [T]) -> R + Sync) -> Vec<R> {
    let threads = threads_for(items.len());
    if threads == 1 {
        return vec![f(items)];
    }
    let share = items.len().div_ceil(threads);
    each(items.chunks_mut(share).collect(), f)
}

/// `f` over consecutive ranges of `0..len`, spread as [`chunks`]: for work that
/// reads a list it shares rather than changing one of its own.
pub fn ranges<R: Send>(len: usize, f: impl Fn(std::ops::Range<usize>) -> R + Sync) -> Vec<R> {
    let threads = threads_for(len);
    if threads == 1 {
        return vec![f(0..len)];
    }
    let share = len.div_ceil(threads);
    each(
        (0..len)
            .step_by(share)
            .map(|s| s..len.min(s + share))
            .collect(),
        f,
    )
}

/// How many threads `items` items pay for.
fn threads_for(items: usize) -> usize {
    allowed().min(items / PER_THREAD).max(1)
}

/// `f` over each of `parts`, the first on this thread and each other on one of its
/// own; the results in order.
fn each<P: Send, R: Send>(parts: Vec<P>, f: impl Fn(P) -> R + Sync) -> Vec<R> {
    // Each part is taken from its slot by whichever thread runs it.
    let slots: Vec<Mutex<Option<P>>> = parts.into_iter().map(|p| Mutex::new(Some(p))).collect();
    let run = |slot: &Mutex<Option<P>>| {
        let part = slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .expect("each part runs once");
        f(part)
    };
    let run = &run;
    std::thread::scope(|s| {
        let rest: Vec<_> = slots[1..]
            .iter()
            .map(|slot| (slot, spawn(s, move || run(slot))))
            .collect();
        let mut out = Vec::with_capacity(slots.len());
        out.push(run(&slots[0]));
        for (slot, handle) in rest {
            out.push(handle.map_or_else(|| run(slot), joined));
        }
        out
    })
}

/// `f` over `items`, spread as [`chunks`]; the results in `items`' order.
pub fn map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let mut refs: Vec<&T> = items.iter().collect();
    chunks(&mut refs, |chunk| {
        chunk.iter().map(|t| f(t)).collect::<Vec<R>>()
    })
    .into_iter()
    .flatten()
    .collect()
}

#[cfg(test)]
mod tests {
    use super::{PER_THREAD, chunks, map, ranges, refusing_threads, with_threads};

    /// Spread over threads or not, every result comes back, in order, each from
    /// its own item; the chunks cover the items once.
    #[test]
    fn every_item_once_in_order() {
        for n in [
            0,
            1,
            PER_THREAD - 1,
            PER_THREAD,
            2 * PER_THREAD - 1,
            2 * PER_THREAD,
            2 * PER_THREAD + 1,
            9 * PER_THREAD + 7,
        ] {
            // Up to four threads, whatever this machine has.
            let threads = 4.min(n / PER_THREAD).max(1);
            let items: Vec<usize> = (0..n).collect();
            let (out, spawned) = with_threads(4, || map(&items, |i| format!("record {i}")));
            let want: Vec<String> = items.iter().map(|i| format!("record {i}")).collect();
            assert_eq!(out, want, "{n} items");
            assert_eq!(spawned, threads - 1, "{n} items");

            let mut owned = items.clone();
            let (parts, _) = with_threads(4, || {
                chunks(&mut owned, |chunk| {
                    chunk.iter_mut().for_each(|i| *i += 1);
                    chunk.len()
                })
            });
            assert_eq!(parts.len(), threads, "{n} items");
            assert_eq!(parts.iter().sum::<usize>(), n, "{n} items");
            assert!(owned.iter().zip(&items).all(|(a, b)| *a == b + 1));

            let (parts, spawned) = with_threads(4, || ranges(n, |range| range));
            assert_eq!((parts.len(), spawned), (threads, threads - 1), "{n} items");
            assert_eq!(parts.into_iter().flatten().collect::<Vec<_>>(), items);

            // No thread to be had: every chunk runs here, the same result.
            let (refused, spawned) = with_threads(4, || {
                refusing_threads(|| map(&items, |i| format!("record {i}")))
            });
            assert_eq!((refused, spawned), (want, 0), "{n} items");
        }
    }
}
