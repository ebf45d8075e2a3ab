//! When the quorum's followers last answered the leader and last held its whole log:
//! DescribeQuorum's `LastFetchTimestamp` and `LastCaughtUpTimestamp`, which KRaft reports per
//! replica. openraft pushes entries instead of being fetched from, so an answer to the leader's
//! AppendEntries (a heartbeat too) stands for a Kafka follower's fetch.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Times in milliseconds since the Unix epoch, as Kafka's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Times {
    last_fetch_ms: Option<i64>,
    last_caught_up_ms: Option<i64>,
    /// Whether the follower held the leader's last entry when the leader's progress was last seen.
    caught_up: bool,
}

/// Shared between the raft network (which sees the answers) and the quorum (which sees the
/// leader's progress); clones share the same times.
#[derive(Debug, Clone, Default)]
pub(crate) struct FollowerTimes {
    inner: Arc<Mutex<BTreeMap<u64, Times>>>,
}

impl FollowerTimes {
    fn with<R>(&self, f: impl FnOnce(&mut BTreeMap<u64, Times>) -> R) -> R {
        f(&mut fjord_common::lock(&self.inner))
    }

    /// `follower` answered the leader at `now_ms`.
    pub(crate) fn answered(&self, follower: u64, now_ms: i64) {
        self.with(|map| {
            let times = map.entry(follower).or_default();
            times.last_fetch_ms = times.last_fetch_ms.max(Some(now_ms));
        });
    }

    /// The leader's progress changed: `followers` says, per follower, whether it holds the
    /// leader's last entry now. One that does, or that did until this change, was caught up at
    /// its last answer.
    pub(crate) fn progress(&self, followers: impl IntoIterator<Item = (u64, bool)>) {
        self.with(|map| {
            for (follower, caught_up) in followers {
                let times = map.entry(follower).or_default();
                if caught_up || times.caught_up {
                    times.last_caught_up_ms = times.last_caught_up_ms.max(times.last_fetch_ms);
                }
                times.caught_up = caught_up;
            }
        });
    }

    /// (last fetch, last caught up) of `follower`, which holds the leader's last entry now or
    /// not (`caught_up`): one caught up now was caught up at its last answer.
    pub(crate) fn get(&self, follower: u64, caught_up: bool) -> (Option<i64>, Option<i64>) {
        self.with(|map| {
            let times = map.get(&follower).copied().unwrap_or_default();
            let caught_up_ms = if caught_up {
                times.last_caught_up_ms.max(times.last_fetch_ms)
            } else {
                times.last_caught_up_ms
            };
            (times.last_fetch_ms, caught_up_ms)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caught_up_is_the_last_answer_while_caught_up() {
        let times = FollowerTimes::default();
        assert_eq!(times.get(2, false), (None, None), "never heard from");
        times.answered(2, 100);
        times.progress([(2, true)]);
        times.answered(2, 200); // a heartbeat while caught up
        assert_eq!(times.get(2, true), (Some(200), Some(200)));
        // The leader appends: the follower's last answer before that was a caught-up one.
        times.progress([(2, false)]);
        times.answered(2, 300); // behind still
        assert_eq!(times.get(2, false), (Some(300), Some(200)));
        times.progress([(2, false)]);
        assert_eq!(times.get(2, false), (Some(300), Some(200)));
        times.answered(2, 400);
        times.progress([(2, true)]);
        assert_eq!(times.get(2, true), (Some(400), Some(400)));
        // Times never go back (answers racing on the clock).
        times.answered(2, 350);
        assert_eq!(times.get(2, true), (Some(400), Some(400)));
    }
}
