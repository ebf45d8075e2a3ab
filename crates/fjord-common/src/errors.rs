//! Kafka's error codes by the names Kafka gives them (`org.apache.kafka.common.protocol.Errors`),
//! the one list every crate answers and reads with. The wire carries them as `i16`.

macro_rules! error_codes {
    ($($name:ident = $code:literal,)*) => {
        $(pub const $name: i16 = $code;)*

        /// Kafka's name for an error code, as its clients and tools print it.
        pub fn name(code: i16) -> &'static str {
            match code {
                $($code => stringify!($name),)*
                _ => "UNKNOWN_ERROR_CODE",
            }
        }
    };
}

error_codes! {
    UNKNOWN_SERVER_ERROR = -1,
    NONE = 0,
    OFFSET_OUT_OF_RANGE = 1,
    CORRUPT_MESSAGE = 2,
    UNKNOWN_TOPIC_OR_PARTITION = 3,
    INVALID_FETCH_SIZE = 4,
    LEADER_NOT_AVAILABLE = 5,
    NOT_LEADER_OR_FOLLOWER = 6,
    REQUEST_TIMED_OUT = 7,
    BROKER_NOT_AVAILABLE = 8,
    REPLICA_NOT_AVAILABLE = 9,
    MESSAGE_TOO_LARGE = 10,
    OFFSET_METADATA_TOO_LARGE = 12,
    NETWORK_EXCEPTION = 13,
    COORDINATOR_LOAD_IN_PROGRESS = 14,
    COORDINATOR_NOT_AVAILABLE = 15,
    NOT_COORDINATOR = 16,
    INVALID_TOPIC_EXCEPTION = 17,
    RECORD_LIST_TOO_LARGE = 18,
    INVALID_REQUIRED_ACKS = 21,
    ILLEGAL_GENERATION = 22,
    INCONSISTENT_GROUP_PROTOCOL = 23,
    INVALID_GROUP_ID = 24,
    UNKNOWN_MEMBER_ID = 25,
    INVALID_SESSION_TIMEOUT = 26,
    REBALANCE_IN_PROGRESS = 27,
    INVALID_COMMIT_OFFSET_SIZE = 28,
    TOPIC_AUTHORIZATION_FAILED = 29,
    GROUP_AUTHORIZATION_FAILED = 30,
    CLUSTER_AUTHORIZATION_FAILED = 31,
    INVALID_TIMESTAMP = 32,
    UNSUPPORTED_VERSION = 35,
    TOPIC_ALREADY_EXISTS = 36,
    INVALID_PARTITIONS = 37,
    INVALID_REPLICATION_FACTOR = 38,
    INVALID_REPLICA_ASSIGNMENT = 39,
    INVALID_CONFIG = 40,
    INVALID_REQUEST = 42,
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43,
    POLICY_VIOLATION = 44,
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45,
    INVALID_PRODUCER_EPOCH = 47,
    KAFKA_STORAGE_ERROR = 56,
    LOG_DIR_NOT_FOUND = 57,
    NON_EMPTY_GROUP = 68,
    GROUP_ID_NOT_FOUND = 69,
    FETCH_SESSION_ID_NOT_FOUND = 70,
    INVALID_FETCH_SESSION_EPOCH = 71,
    TOPIC_DELETION_DISABLED = 73,
    FENCED_LEADER_EPOCH = 74,
    UNKNOWN_LEADER_EPOCH = 75,
    UNSUPPORTED_COMPRESSION_TYPE = 76,
    OFFSET_NOT_AVAILABLE = 78,
    MEMBER_ID_REQUIRED = 79,
    GROUP_MAX_SIZE_REACHED = 81,
    FENCED_INSTANCE_ID = 82,
    GROUP_SUBSCRIBED_TO_TOPIC = 86,
    INVALID_RECORD = 87,
    UNSTABLE_OFFSET_COMMIT = 88,
    UNKNOWN_TOPIC_ID = 100,
    INCONSISTENT_TOPIC_ID = 103,
    FENCED_MEMBER_EPOCH = 110,
    UNRELEASED_INSTANCE_ID = 111,
    UNSUPPORTED_ASSIGNOR = 112,
    STALE_MEMBER_EPOCH = 113,
    MISMATCHED_ENDPOINT_TYPE = 114,
    UNSUPPORTED_ENDPOINT_TYPE = 115,
    INVALID_REGULAR_EXPRESSION = 128,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kafkas() {
        assert_eq!(name(NONE), "NONE");
        assert_eq!(name(NOT_COORDINATOR), "NOT_COORDINATOR");
        assert_eq!(name(UNKNOWN_SERVER_ERROR), "UNKNOWN_SERVER_ERROR");
        assert_eq!(name(LOG_DIR_NOT_FOUND), "LOG_DIR_NOT_FOUND");
        assert_eq!(name(9999), "UNKNOWN_ERROR_CODE");
    }
}
