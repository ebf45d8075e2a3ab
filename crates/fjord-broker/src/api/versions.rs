//! ApiVersions: the APIs and versions fjord serves and the cluster features it reports.

use fjord_common::errors;
use fjord_protocol::messages::api_versions_request::ApiVersionsRequest;
use fjord_protocol::messages::api_versions_response::*;
use fjord_protocol::ApiKey;

use fjord_sasl::{SASL_AUTHENTICATE_VERSIONS, SASL_HANDSHAKE_VERSIONS};

/// The API versions fjord implements and advertises: Kafka 4.x's minimums (KIP-896) up to the
/// newest version tested here.
pub const SUPPORTED_APIS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 13),
    (ApiKey::Fetch, 4, 18),
    (ApiKey::ListOffsets, 1, 11),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::ApiVersions, 0, 5),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::AlterReplicaLogDirs, 1, 2),
    (ApiKey::DescribeLogDirs, 1, 5),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::DescribeQuorum, 0, 2),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 2, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 10),
    (ApiKey::OffsetFetch, 1, 10),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::DeleteGroups, 0, 3),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::CreateDelegationToken, 1, 3),
    (ApiKey::RenewDelegationToken, 1, 2),
    (ApiKey::ExpireDelegationToken, 1, 2),
    (ApiKey::DescribeDelegationToken, 1, 3),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    (ApiKey::ShareGroupHeartbeat, 1, 1),
    (ApiKey::ShareGroupDescribe, 1, 1),
    (ApiKey::ShareFetch, 1, 2),
    (ApiKey::ShareAcknowledge, 1, 2),
    (ApiKey::InitializeShareGroupState, 0, 0),
    (ApiKey::ReadShareGroupState, 0, 0),
    (ApiKey::WriteShareGroupState, 0, 1),
    (ApiKey::DeleteShareGroupState, 0, 0),
    (ApiKey::ReadShareGroupStateSummary, 0, 1),
    (ApiKey::WriteTxnMarkers, 1, 2),
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::TxnOffsetCommit, 0, 6),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 2),
    (ApiKey::DescribeTopicPartitions, 0, 0),
    (ApiKey::GetTelemetrySubscriptions, 0, 0),
    (ApiKey::PushTelemetry, 0, 0),
    (ApiKey::ListConfigResources, 0, 1),
    (ApiKey::EndTxn, 0, 5),
    (
        ApiKey::SaslHandshake,
        SASL_HANDSHAKE_VERSIONS.0,
        SASL_HANDSHAKE_VERSIONS.1,
    ),
    (
        ApiKey::SaslAuthenticate,
        SASL_AUTHENTICATE_VERSIONS.0,
        SASL_AUTHENTICATE_VERSIONS.1,
    ),
];

pub fn supported_range(key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED_APIS
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|(_, min, max)| (*min, *max))
}

/// The cluster features fjord implements, as Kafka 4.x brokers report theirs in ApiVersions
/// (v3+): name, the lowest and highest level a node supports, and the level the cluster runs
/// at. Clients pick code paths by the finalized levels (a 4.x producer uses transaction version
/// 2 only when it is finalized). fjord has no UpdateFeatures: each level is fixed per build.
pub const FEATURES: &[(&str, i16, i16, i16)] = &[
    // 4.0-IV3: the metadata records and inter-broker APIs of Kafka 4.0.
    ("metadata.version", 25, 25, 25),
    // 0: a static voter set (`controller.quorum.voters`); 1: a dynamic quorum (KIP-853). The
    // level here is the static one; `api_versions_of` reports the node's own.
    ("kraft.version", 0, 1, 0),
    // 1: flexible `__transaction_state` records; 2: KIP-890 part 2 (the epoch bumps at every
    // commit and abort, leaders add partitions to transactions: Produce v12, TxnOffsetCommit v5,
    // EndTxn v5).
    ("transaction.version", 0, 2, 2),
    // KIP-848 consumer groups.
    ("group.version", 0, 1, 1),
    // 1: share groups (KIP-932); 2 (dead-letter queues) is not supported.
    ("share.version", 0, 1, 1),
];

/// The epoch of [`FEATURES`]' finalized levels. Clients take finalized features only from an
/// answer with an epoch above -1 (and keep the highest epoch's); the levels never change.
pub const FINALIZED_FEATURES_EPOCH: i64 = 0;

/// The finalized level of feature `name` (0: off or unknown).
pub fn finalized_level(name: &str) -> i16 {
    FEATURES
        .iter()
        .find(|(n, ..)| *n == name)
        .map_or(0, |(.., level)| *level)
}

/// What an ApiVersions request's own fields call for, as Kafka checks them: INVALID_REQUEST for
/// a client software name or version outside Kafka's pattern (v3+) or a cluster id without a
/// node id or the other way round (v5+); with `node` (this broker's cluster id and node id),
/// REBOOTSTRAP_REQUIRED when the client meant another cluster or node (v5+, KIP-1242: its
/// metadata is stale). Controllers do not check the last.
pub fn api_versions_error(
    request: &ApiVersionsRequest,
    version: i16,
    node: Option<(&str, i32)>,
) -> i16 {
    // `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?`
    let software = |s: &str| {
        let b = s.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'.')
    };
    if version >= 5 && request.cluster_id.is_some() != (request.node_id != -1) {
        return errors::INVALID_REQUEST;
    }
    if version >= 3
        && !(software(&request.client_software_name) && software(&request.client_software_version))
    {
        return errors::INVALID_REQUEST;
    }
    match (version >= 5, &request.cluster_id, node) {
        (true, Some(cluster_id), Some((ours, node_id)))
            if cluster_id != ours || request.node_id != node_id =>
        {
            errors::REBOOTSTRAP_REQUIRED
        }
        _ => errors::NONE,
    }
}

pub fn api_versions_response(error_code: i16, kraft_version: i16) -> ApiVersionsResponse {
    api_versions_of(SUPPORTED_APIS, error_code, kraft_version)
}

/// An ApiVersions answer advertising `apis` and [`FEATURES`], `kraft.version` at the level of
/// this node's quorum.
pub fn api_versions_of(
    apis: &[(ApiKey, i16, i16)],
    error_code: i16,
    kraft_version: i16,
) -> ApiVersionsResponse {
    let level = |name: &str, level: i16| {
        if name == "kraft.version" {
            kraft_version
        } else {
            level
        }
    };
    ApiVersionsResponse {
        error_code,
        api_keys: apis
            .iter()
            .map(|(key, min, max)| ApiVersion {
                api_key: *key as i16,
                min_version: *min,
                max_version: *max,
            })
            .collect(),
        supported_features: FEATURES
            .iter()
            .map(|(name, min, max, _)| SupportedFeatureKey {
                name: (*name).to_string(),
                min_version: *min,
                max_version: *max,
            })
            .collect(),
        finalized_features_epoch: FINALIZED_FEATURES_EPOCH,
        // As in Kafka, a feature at level 0 is not finalized: it is off.
        finalized_features: FEATURES
            .iter()
            .map(|(name, _, _, l)| (name, level(name, *l)))
            .filter(|(_, level)| *level > 0)
            .map(|(name, level)| FinalizedFeatureKey {
                name: (*name).to_string(),
                max_version_level: level,
                min_version_level: level,
            })
            .collect(),
        ..Default::default()
    }
}
