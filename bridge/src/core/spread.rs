//! Work spread over the machine's cores: the nodes of a poll's slice, the records
//! of a large write. The result is the same as one thread's, in the same order.

use std::sync::OnceLock;

/// Fewer items than this per thread stay on the calling thread: a thread costs
/// tens of microseconds; a node's share of a poll, or its record, a few.
pub const PER_THREAD: usize = 512;

/// The cores this process may use (its CPU quota, where one is set).
pub fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get))
}

/// The threads a spread may use here.
fn allowed() -> usize {
    #[cfg(test)]
    if ONE_THREAD.with(std::cell::Cell::get) {
        return 1;
    }
    cores()
}

#[cfg(test)]
thread_local! {
    static ONE_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `f` with every spread it makes kept to this thread: what a spread is
/// compared with.
#[cfg(test)]
pub fn on_one_thread<R>(f: impl FnOnce() -> R) -> R {
    ONE_THREAD.with(|one| one.set(true));
    let r = f();
    ONE_THREAD.with(|one| one.set(false));
    r
}

/// `f` over consecutive chunks of `items`, one chunk per thread when there are
/// enough items to pay for the threads (else one chunk, on this thread); the
/// chunks' results in order.
pub fn chunks<T: Send, R: Send>(items: &mut [T], f: impl Fn(&mut [T]) -> R + Sync) -> Vec<R> {
    let threads = allowed().min(items.len() / PER_THREAD).max(1);
    if threads == 1 {
        return vec![f(items)];
    }
    let share = items.len().div_ceil(threads);
    let f = &f;
    std::thread::scope(|s| {
        let mut parts = items.chunks_mut(share);
        let first = parts.next().expect("more than one chunk");
        let rest: Vec<_> = parts.map(|chunk| s.spawn(move || f(chunk))).collect();
        let mut out = Vec::with_capacity(threads);
        out.push(f(first));
        for part in rest {
            match part.join() {
                Ok(r) => out.push(r),
                Err(panic) => std::panic::resume_unwind(panic),
            }
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
    use super::{PER_THREAD, chunks, map};

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
            let items: Vec<usize> = (0..n).collect();
            let out = map(&items, |i| format!("record {i}"));
            let want: Vec<String> = items.iter().map(|i| format!("record {i}")).collect();
            assert_eq!(out, want, "{n} items");

            let mut owned = items.clone();
            let parts = chunks(&mut owned, |chunk| {
                chunk.iter_mut().for_each(|i| *i += 1);
                chunk.len()
            });
            assert_eq!(parts.iter().sum::<usize>(), n, "{n} items");
            assert!(owned.iter().zip(&items).all(|(a, b)| *a == b + 1));
        }
    }
}
