//! Fans per-partition disk work (loading logs at start-up, recording leader epochs, the fsyncs of
//! a group commit) out over a few threads. That work mostly waits on the disk — an fsync, a cold
//! read — so with several partitions a handful of threads in flight cuts it by about their
//! number, even on two cores.

/// Threads used for per-partition disk work.
pub const DISK_THREADS: usize = 8;

/// Applies `f` to every item on up to `threads` threads (the calling one and scoped ones) and
/// returns the results in the items' order. One item, or one thread, runs on the calling thread.
pub fn map<T: Send, R: Send>(items: Vec<T>, threads: usize, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let threads = threads.clamp(1, items.len().max(1));
    if threads == 1 {
        return items.into_iter().map(f).collect();
    }
    let chunk = items.len().div_ceil(threads);
    let mut chunks: Vec<Vec<T>> = Vec::with_capacity(threads);
    let mut items = items.into_iter();
    loop {
        let next: Vec<T> = items.by_ref().take(chunk).collect();
        if next.is_empty() {
            break;
        }
        chunks.push(next);
    }
    let f = &f;
    let mut chunks = chunks.into_iter();
    let first = chunks.next().unwrap_or_default();
    std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .map(|chunk| scope.spawn(move || chunk.into_iter().map(f).collect::<Vec<R>>()))
            .collect();
        let mut results: Vec<R> = first.into_iter().map(f).collect();
        for handle in handles {
            match handle.join() {
                Ok(more) => results.extend(more),
                // A panic in `f` is a bug; carry it to the caller as std's scope would.
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        results
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_for_any_size_and_thread_count() {
        for n in [0usize, 1, 5, 16, 17, 100, 1001] {
            for threads in [0usize, 1, 3, 8] {
                let items: Vec<usize> = (0..n).collect();
                let out = map(items, threads, |i| i * 2);
                assert_eq!(
                    out,
                    (0..n).map(|i| i * 2).collect::<Vec<_>>(),
                    "n={n} threads={threads}"
                );
            }
        }
    }

    #[test]
    fn runs_on_several_threads_when_the_input_is_large() {
        let ids = map((0..64).collect::<Vec<u32>>(), 4, |_| {
            std::thread::current().id()
        });
        let distinct: std::collections::HashSet<_> = ids.into_iter().collect();
        assert_eq!(distinct.len(), 4);
    }

    #[test]
    fn a_few_slow_items_each_get_a_thread() {
        // A group commit's handful of fsyncs: one each, the first on the calling thread.
        let caller = std::thread::current().id();
        let ids = map(vec![(); 3], DISK_THREADS, |_| std::thread::current().id());
        assert_eq!(ids[0], caller);
        let distinct: std::collections::HashSet<_> = ids.into_iter().collect();
        assert_eq!(distinct.len(), 3);
    }
}
