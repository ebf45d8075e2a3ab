//! The API keys fjord understands and the version facts the broker advertises for them.

use crate::messages::*;
use crate::Request;

macro_rules! api_keys {
    ($($variant:ident = $key:literal => $request:ty,)*) => {
        /// A Kafka API key. The discriminant is the value on the wire.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(i16)]
        pub enum ApiKey {
            $($variant = $key,)*
        }

        impl ApiKey {
            /// Every supported key, in ascending key order.
            pub const ALL: &'static [ApiKey] = &[$(ApiKey::$variant,)*];

            /// The key for a wire value, or `None` if fjord does not support it.
            pub fn from_i16(key: i16) -> Option<ApiKey> {
                match key {
                    $($key => Some(ApiKey::$variant),)*
                    _ => None,
                }
            }

            /// Kafka's name for the API, e.g. `"Produce"`.
            pub fn name(self) -> &'static str {
                match self {
                    $(ApiKey::$variant => stringify!($variant),)*
                }
            }

            /// Oldest request version fjord can decode.
            pub fn min_version(self) -> i16 {
                match self {
                    $(ApiKey::$variant => <$request as Request>::MIN_VERSION,)*
                }
            }

            /// Newest request version fjord can decode.
            pub fn max_version(self) -> i16 {
                match self {
                    $(ApiKey::$variant => <$request as Request>::MAX_VERSION,)*
                }
            }

            /// Whether `version` of this API uses the flexible (compact, tagged) encoding.
            pub fn is_flexible(self, version: i16) -> bool {
                match self {
                    $(ApiKey::$variant => version >= <$request as Request>::FLEXIBLE_FROM,)*
                }
            }
        }
    };
}

api_keys! {
    Produce = 0 => ProduceRequest,
    Fetch = 1 => FetchRequest,
    ListOffsets = 2 => ListOffsetsRequest,
    Metadata = 3 => MetadataRequest,
    OffsetCommit = 8 => OffsetCommitRequest,
    OffsetFetch = 9 => OffsetFetchRequest,
    FindCoordinator = 10 => FindCoordinatorRequest,
    JoinGroup = 11 => JoinGroupRequest,
    Heartbeat = 12 => HeartbeatRequest,
    LeaveGroup = 13 => LeaveGroupRequest,
    SyncGroup = 14 => SyncGroupRequest,
    DescribeGroups = 15 => DescribeGroupsRequest,
    ListGroups = 16 => ListGroupsRequest,
    SaslHandshake = 17 => SaslHandshakeRequest,
    ApiVersions = 18 => ApiVersionsRequest,
    CreateTopics = 19 => CreateTopicsRequest,
    DeleteTopics = 20 => DeleteTopicsRequest,
    DeleteRecords = 21 => DeleteRecordsRequest,
    InitProducerId = 22 => InitProducerIdRequest,
    OffsetForLeaderEpoch = 23 => OffsetForLeaderEpochRequest,
    AddPartitionsToTxn = 24 => AddPartitionsToTxnRequest,
    AddOffsetsToTxn = 25 => AddOffsetsToTxnRequest,
    EndTxn = 26 => EndTxnRequest,
    WriteTxnMarkers = 27 => WriteTxnMarkersRequest,
    TxnOffsetCommit = 28 => TxnOffsetCommitRequest,
    DescribeAcls = 29 => DescribeAclsRequest,
    CreateAcls = 30 => CreateAclsRequest,
    DeleteAcls = 31 => DeleteAclsRequest,
    DescribeConfigs = 32 => DescribeConfigsRequest,
    AlterConfigs = 33 => AlterConfigsRequest,
    AlterReplicaLogDirs = 34 => AlterReplicaLogDirsRequest,
    DescribeLogDirs = 35 => DescribeLogDirsRequest,
    SaslAuthenticate = 36 => SaslAuthenticateRequest,
    CreatePartitions = 37 => CreatePartitionsRequest,
    CreateDelegationToken = 38 => CreateDelegationTokenRequest,
    RenewDelegationToken = 39 => RenewDelegationTokenRequest,
    ExpireDelegationToken = 40 => ExpireDelegationTokenRequest,
    DescribeDelegationToken = 41 => DescribeDelegationTokenRequest,
    DeleteGroups = 42 => DeleteGroupsRequest,
    ElectLeaders = 43 => ElectLeadersRequest,
    IncrementalAlterConfigs = 44 => IncrementalAlterConfigsRequest,
    AlterPartitionReassignments = 45 => AlterPartitionReassignmentsRequest,
    ListPartitionReassignments = 46 => ListPartitionReassignmentsRequest,
    OffsetDelete = 47 => OffsetDeleteRequest,
    DescribeClientQuotas = 48 => DescribeClientQuotasRequest,
    AlterClientQuotas = 49 => AlterClientQuotasRequest,
    DescribeUserScramCredentials = 50 => DescribeUserScramCredentialsRequest,
    AlterUserScramCredentials = 51 => AlterUserScramCredentialsRequest,
    DescribeQuorum = 55 => DescribeQuorumRequest,
    AlterPartition = 56 => AlterPartitionRequest,
    Envelope = 58 => EnvelopeRequest,
    DescribeCluster = 60 => DescribeClusterRequest,
    DescribeProducers = 61 => DescribeProducersRequest,
    BrokerRegistration = 62 => BrokerRegistrationRequest,
    BrokerHeartbeat = 63 => BrokerHeartbeatRequest,
    DescribeTransactions = 65 => DescribeTransactionsRequest,
    ListTransactions = 66 => ListTransactionsRequest,
    AllocateProducerIds = 67 => AllocateProducerIdsRequest,
    ConsumerGroupHeartbeat = 68 => ConsumerGroupHeartbeatRequest,
    ConsumerGroupDescribe = 69 => ConsumerGroupDescribeRequest,
    ControllerRegistration = 70 => ControllerRegistrationRequest,
    GetTelemetrySubscriptions = 71 => GetTelemetrySubscriptionsRequest,
    PushTelemetry = 72 => PushTelemetryRequest,
    ListConfigResources = 74 => ListConfigResourcesRequest,
    DescribeTopicPartitions = 75 => DescribeTopicPartitionsRequest,
    ShareGroupHeartbeat = 76 => ShareGroupHeartbeatRequest,
    ShareGroupDescribe = 77 => ShareGroupDescribeRequest,
    ShareFetch = 78 => ShareFetchRequest,
    ShareAcknowledge = 79 => ShareAcknowledgeRequest,
    AddRaftVoter = 80 => AddRaftVoterRequest,
    RemoveRaftVoter = 81 => RemoveRaftVoterRequest,
    InitializeShareGroupState = 83 => InitializeShareGroupStateRequest,
    ReadShareGroupState = 84 => ReadShareGroupStateRequest,
    WriteShareGroupState = 85 => WriteShareGroupStateRequest,
    DeleteShareGroupState = 86 => DeleteShareGroupStateRequest,
    ReadShareGroupStateSummary = 87 => ReadShareGroupStateSummaryRequest,
    DescribeShareGroupOffsets = 90 => DescribeShareGroupOffsetsRequest,
    AlterShareGroupOffsets = 91 => AlterShareGroupOffsetsRequest,
    DeleteShareGroupOffsets = 92 => DeleteShareGroupOffsetsRequest,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_wire_values() {
        for &key in ApiKey::ALL {
            assert_eq!(ApiKey::from_i16(key as i16), Some(key));
        }
        assert_eq!(ApiKey::from_i16(4), None);
        assert_eq!(ApiKey::from_i16(-1), None);
        assert_eq!(ApiKey::ApiVersions.name(), "ApiVersions");
        assert_eq!(ApiKey::Produce as i16, 0);
        assert_eq!(ApiKey::ConsumerGroupDescribe as i16, 69);
    }

    #[test]
    fn version_facts_match_the_schemas() {
        // Kafka 4.0 removed Fetch v0-3.
        assert_eq!(ApiKey::Fetch.min_version(), 4);
        assert!(ApiKey::Fetch.max_version() >= 12);
        assert!(ApiKey::Fetch.is_flexible(12));
        assert!(!ApiKey::Fetch.is_flexible(11));
        assert!(!ApiKey::SaslHandshake.is_flexible(1));
        assert!(ApiKey::DescribeCluster.is_flexible(0));
    }
}
