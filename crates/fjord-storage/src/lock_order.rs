//! Storage's lock order, the one rule for the locks of `LogManager` and the logs it holds: a
//! partition's log comes first (its current log, then its future log), then the log manager's
//! maps (`offline_dirs`, then `logs`, then `futures`); no log is locked while a map lock is held.
//!
//! Logs come first because a partition's log is locked by whoever drives the partition (the
//! broker's `Partition`), which then calls into the log manager to move or swap it. Debug builds
//! check the rule: [`lock_map`] counts this thread's map guards and [`lock_log`] asserts there
//! are none.

use std::sync::{Mutex, MutexGuard};

use fjord_common::lock;

use crate::log::Log;

#[cfg(debug_assertions)]
thread_local! {
    static MAPS_HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// One of the log manager's maps, locked; in debug builds counted in `MAPS_HELD`.
pub(crate) struct MapGuard<'a, T> {
    guard: MutexGuard<'a, T>,
}

impl<T> std::ops::Deref for MapGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> std::ops::DerefMut for MapGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

impl<T> Drop for MapGuard<'_, T> {
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        MAPS_HELD.with(|held| held.set(held.get() - 1));
    }
}

/// Locks one of the log manager's maps.
pub(crate) fn lock_map<T>(map: &Mutex<T>) -> MapGuard<'_, T> {
    #[cfg(debug_assertions)]
    MAPS_HELD.with(|held| held.set(held.get() + 1));
    MapGuard { guard: lock(map) }
}

/// Checks, in debug builds, that this thread may lock a log now: it holds no map lock.
pub fn check_log_lock() {
    #[cfg(debug_assertions)]
    MAPS_HELD.with(|held| {
        assert_eq!(
            held.get(),
            0,
            "a log is locked before the log manager's maps, never under them"
        )
    });
}

/// Locks a log (see the order above).
pub fn lock_log(log: &Mutex<Log>) -> MutexGuard<'_, Log> {
    check_log_lock();
    lock(log)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "never under them")]
    fn a_log_locked_under_a_map_lock_is_caught() {
        let map = Mutex::new(());
        let _held = lock_map(&map);
        check_log_lock();
    }

    #[test]
    fn a_map_lock_released_lets_a_log_be_locked() {
        let map = Mutex::new(());
        drop(lock_map(&map));
        check_log_lock();
    }
}
