//! The group coordinator's configuration, by Kafka's config names and defaults, and the
//! placement of a group on a `__consumer_offsets` partition.

/// Settings the coordinator reads; field docs name the Kafka config each one mirrors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    /// group.min.session.timeout.ms
    pub group_min_session_timeout_ms: i32,
    /// group.max.session.timeout.ms
    pub group_max_session_timeout_ms: i32,
    /// group.initial.rebalance.delay.ms
    pub group_initial_rebalance_delay_ms: i32,
    /// group.max.size
    pub group_max_size: i32,
    /// offsets.retention.minutes
    pub offsets_retention_minutes: i32,
    /// offsets.retention.check.interval.ms
    pub offsets_retention_check_interval_ms: i64,
    /// offset.metadata.max.bytes
    pub offset_metadata_max_bytes: i32,
    /// offsets.commit.timeout.ms: how long a group coordinator write waits for its in-sync
    /// replicas before its requests are answered COORDINATOR_NOT_AVAILABLE
    pub offsets_commit_timeout_ms: i32,
    /// group.consumer.session.timeout.ms
    pub group_consumer_session_timeout_ms: i32,
    /// group.consumer.min.session.timeout.ms
    pub group_consumer_min_session_timeout_ms: i32,
    /// group.consumer.max.session.timeout.ms
    pub group_consumer_max_session_timeout_ms: i32,
    /// group.consumer.heartbeat.interval.ms
    pub group_consumer_heartbeat_interval_ms: i32,
    /// group.consumer.min.heartbeat.interval.ms
    pub group_consumer_min_heartbeat_interval_ms: i32,
    /// group.consumer.max.heartbeat.interval.ms
    pub group_consumer_max_heartbeat_interval_ms: i32,
    /// group.consumer.max.size
    pub group_consumer_max_size: i32,
    /// group.consumer.assignors (names; the first is the default)
    pub group_consumer_assignors: Vec<String>,
    /// group.share.max.size
    pub group_share_max_size: i32,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            group_min_session_timeout_ms: 6_000,
            group_max_session_timeout_ms: 1_800_000,
            group_initial_rebalance_delay_ms: 3_000,
            group_max_size: i32::MAX,
            offsets_retention_minutes: 10_080,
            offsets_retention_check_interval_ms: 600_000,
            offset_metadata_max_bytes: 4_096,
            offsets_commit_timeout_ms: 5_000,
            group_consumer_session_timeout_ms: 45_000,
            group_consumer_min_session_timeout_ms: 45_000,
            group_consumer_max_session_timeout_ms: 60_000,
            group_consumer_heartbeat_interval_ms: 5_000,
            group_consumer_min_heartbeat_interval_ms: 5_000,
            group_consumer_max_heartbeat_interval_ms: 15_000,
            group_consumer_max_size: i32::MAX,
            group_consumer_assignors: vec!["uniform".to_string(), "range".to_string()],
            group_share_max_size: 200,
        }
    }
}

impl GroupConfig {
    /// offsets.retention.minutes in milliseconds.
    pub fn offsets_retention_ms(&self) -> i64 {
        i64::from(self.offsets_retention_minutes).saturating_mul(60_000)
    }
}

/// The `__consumer_offsets` partition that owns `group_id`, as Kafka places groups.
pub fn partition_for(group_id: &str, num_partitions: i32) -> i32 {
    fjord_common::coordinator_partition(group_id, num_partitions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_for_matches_java_hash_code() {
        // "".hashCode() == 0; "a".hashCode() == 97; "ab" == 97 * 31 + 98 == 3105.
        assert_eq!(partition_for("", 50), 0);
        assert_eq!(partition_for("a", 50), 97 % 50);
        assert_eq!(partition_for("ab", 50), 3105 % 50);
        assert_eq!(partition_for("test-group", 50), 627_841_412 % 50);
        // "abcdefghij".hashCode() == -634317659 (negative: abs first).
        assert_eq!(partition_for("abcdefghij", 50), 634_317_659 % 50);
        // "polygenelubricants".hashCode() == i32::MIN, which Kafka's abs maps to 0.
        assert_eq!(partition_for("polygenelubricants", 50), 0);
        // A character outside the BMP is two UTF-16 units: "😀" == 0xD83D * 31 + 0xDE00.
        assert_eq!(
            partition_for("\u{1F600}", 1000),
            (0xD83D * 31 + 0xDE00) % 1000
        );
        assert_eq!(partition_for("g", 0), 0);
    }

    #[test]
    fn defaults_are_kafkas() {
        let c = GroupConfig::default();
        assert_eq!(c.group_min_session_timeout_ms, 6000);
        assert_eq!(c.group_max_session_timeout_ms, 1_800_000);
        assert_eq!(c.group_initial_rebalance_delay_ms, 3000);
        assert_eq!(c.offsets_retention_ms(), 7 * 24 * 3600 * 1000);
        assert_eq!(c.offset_metadata_max_bytes, 4096);
    }
}
