//! The metadata record types: the plain-data vocabulary of the metadata log.
//!
//! Names and fields follow KRaft's `__cluster_metadata` records so that the
//! meaning of each field matches what Kafka clients and tools expect, but the
//! encoding here is fjord's own (serde), not Kafka's record framing.

use serde::{Deserialize, Serialize};

pub use fjord_common::Uuid;

/// `ConfigRecord::resource_type` for a topic (Kafka's `ConfigResource.Type.TOPIC`).
pub const CONFIG_RESOURCE_TOPIC: i8 = 2;
/// `ConfigRecord::resource_type` for a broker (Kafka's `ConfigResource.Type.BROKER`).
pub const CONFIG_RESOURCE_BROKER: i8 = 4;
/// A client-metrics subscription (KIP-714), named by the operator.
pub const CONFIG_RESOURCE_CLIENT_METRICS: i8 = 16;
/// A group's own configs (Kafka's `ConfigResource.Type.GROUP`).
pub const CONFIG_RESOURCE_GROUP: i8 = 32;

/// The `leader` value meaning "no replica currently leads this partition".
pub const NO_LEADER: i32 = -1;

/// One change to cluster metadata. A proposal is a list of these, applied atomically.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetadataRecord {
    Topic(TopicRecord),
    Partition(PartitionRecord),
    PartitionChange(PartitionChangeRecord),
    Config(ConfigRecord),
    RemoveTopic(RemoveTopicRecord),
    ProducerIds(ProducerIdsRecord),
    RegisterBroker(RegisterBrokerRecord),
    BrokerRegistrationChange(BrokerRegistrationChangeRecord),
    FeatureLevel(FeatureLevelRecord),
    UserScramCredential(UserScramCredentialRecord),
    RemoveUserScramCredential(RemoveUserScramCredentialRecord),
    AccessControlEntry(AccessControlEntryRecord),
    RemoveAccessControlEntry(RemoveAccessControlEntryRecord),
    ClientQuota(ClientQuotaRecord),
    DelegationToken(DelegationTokenRecord),
    RemoveDelegationToken(RemoveDelegationTokenRecord),
}

/// Creates a topic: binds a name to a topic id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicRecord {
    pub name: String,
    pub topic_id: Uuid,
}

/// Creates one partition of an existing topic (or restores it from a snapshot).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRecord {
    pub partition_id: i32,
    pub topic_id: Uuid,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// Broker id of the leader, or [`NO_LEADER`].
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    /// Replicas a reassignment is adding (in `replicas`, not yet in sync).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adding_replicas: Vec<i32>,
    /// Replicas a reassignment will drop once the target replicas are all in sync.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removing_replicas: Vec<i32>,
}

/// Changes an existing partition. `None` fields are left as they are.
///
/// Kafka encodes "leader unchanged" as -2; an `Option` says the same thing.
/// Setting a leader (even the same one) bumps the leader epoch, and every
/// change bumps the partition epoch, as in KRaft.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionChangeRecord {
    pub partition_id: i32,
    pub topic_id: Uuid,
    pub isr: Option<Vec<i32>>,
    /// New leader broker id or [`NO_LEADER`]; `None` keeps the current leader.
    pub leader: Option<i32>,
    pub replicas: Option<Vec<i32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adding_replicas: Option<Vec<i32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removing_replicas: Option<Vec<i32>>,
}

/// Sets (`value: Some`) or deletes (`value: None`) one dynamic config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigRecord {
    /// [`CONFIG_RESOURCE_TOPIC`], [`CONFIG_RESOURCE_BROKER`] or
    /// [`CONFIG_RESOURCE_CLIENT_METRICS`] or [`CONFIG_RESOURCE_GROUP`].
    pub resource_type: i8,
    /// Topic name, broker id as a decimal string, "" for the cluster-wide broker default,
    /// subscription name or group id.
    pub resource_name: String,
    pub name: String,
    pub value: Option<String>,
}

/// Deletes a topic, its partitions and its configs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoveTopicRecord {
    pub topic_id: Uuid,
}

/// Hands a block of producer ids to a broker; `next_producer_id` is the first id
/// not yet handed out to anyone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerIdsRecord {
    pub broker_id: i32,
    pub broker_epoch: i64,
    pub next_producer_id: i64,
}

/// One listener a broker accepts connections on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerEndpoint {
    /// Listener name, e.g. `PLAINTEXT`.
    pub name: String,
    pub host: String,
    pub port: u16,
    /// Kafka's `SecurityProtocol` id (0 PLAINTEXT, 1 SSL, 2 SASL_PLAINTEXT, 3 SASL_SSL).
    pub security_protocol: i16,
}

/// Registers (or re-registers, with a higher epoch) a broker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterBrokerRecord {
    pub broker_id: i32,
    pub incarnation_id: Uuid,
    pub broker_epoch: i64,
    pub endpoints: Vec<BrokerEndpoint>,
    pub rack: Option<String>,
    /// A broker registers fenced, as in KRaft: it leads nothing until its heartbeats show it
    /// has caught up with the metadata log. Absent in logs written before fencing existed.
    #[serde(default)]
    pub fenced: bool,
    #[serde(default)]
    pub in_controlled_shutdown: bool,
}

/// Fences or unfences a registered broker, or marks it in controlled shutdown (KRaft's
/// `BrokerRegistrationChangeRecord`). `None` fields are left as they are; the epoch must be the
/// registration's, so a change meant for an earlier incarnation cannot touch a later one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistrationChangeRecord {
    pub broker_id: i32,
    pub broker_epoch: i64,
    pub fenced: Option<bool>,
    pub in_controlled_shutdown: Option<bool>,
}

/// Creates or replaces a user's SCRAM credential for one mechanism (Kafka's
/// `UserScramCredentialRecord`): what a broker checks a SCRAM client's proof against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserScramCredentialRecord {
    pub name: String,
    /// `ScramMechanism::code`: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512.
    pub mechanism: i8,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

/// Removes a user's SCRAM credential for one mechanism.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoveUserScramCredentialRecord {
    pub name: String,
    pub mechanism: i8,
}

/// Adds an ACL under a fresh id (Kafka's `AccessControlEntryRecord`); the codes are those of
/// `crate::acl`'s types.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessControlEntryRecord {
    pub id: Uuid,
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission_type: i8,
}

impl AccessControlEntryRecord {
    pub fn new(id: Uuid, acl: &crate::acl::AclBinding) -> Self {
        AccessControlEntryRecord {
            id,
            resource_type: acl.resource_type.code(),
            resource_name: acl.resource_name.clone(),
            pattern_type: acl.pattern_type.code(),
            principal: acl.principal.clone(),
            host: acl.host.clone(),
            operation: acl.operation.code(),
            permission_type: acl.permission.code(),
        }
    }
}

/// Removes the ACL with `id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoveAccessControlEntryRecord {
    pub id: Uuid,
}

/// Sets one quota key of a client quota entity, or removes it (Kafka's `ClientQuotaRecord`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientQuotaRecord {
    pub entity: crate::quota::QuotaEntity,
    pub key: String,
    /// Ignored when the key is removed.
    pub value: crate::quota::QuotaValue,
    pub remove: bool,
}

/// Creates a delegation token or sets its expiry (Kafka's `DelegationTokenRecord`). The token's
/// HMAC is not kept: every node makes it from the token id with `delegation.token.secret.key`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelegationTokenRecord {
    pub token_id: String,
    /// Principals as `Type:name`.
    pub owner: String,
    pub requester: String,
    pub renewers: Vec<String>,
    /// Milliseconds since the epoch.
    pub issue_timestamp: i64,
    /// No renewal takes the token past this.
    pub max_timestamp: i64,
    /// When the token expires unless renewed.
    pub expiration_timestamp: i64,
}

/// Removes a delegation token (expired, or expired at once by its owner).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoveDelegationTokenRecord {
    pub token_id: String,
}

/// Sets a cluster-wide feature level; level 0 removes the feature, as in KRaft.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeatureLevelRecord {
    pub name: String,
    pub level: i16,
}
