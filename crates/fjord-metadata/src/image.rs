//! The metadata image: an immutable, sans-IO view of cluster metadata as of one
//! offset of the metadata log, and the delta that derives the next image from it.
//!
//! Images are shared as `Arc<MetadataImage>`; nothing mutates an image once it is
//! published. Changes go through [`MetadataDelta`], which checks every record
//! against the invariants the rest of the broker relies on (one name per topic id,
//! dense partition ids, epochs that never go back) and refuses records that would
//! break them instead of applying them partially.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::acl::{AclBinding, Acls};
use crate::quota::{self, ClientQuotas};
use crate::record::{
    AccessControlEntryRecord, BrokerEndpoint, BrokerRegistrationChangeRecord, ClientQuotaRecord,
    ConfigRecord, DelegationTokenRecord, FeatureLevelRecord, MetadataRecord, PartitionChangeRecord,
    PartitionRecord, ProducerIdsRecord, RegisterBrokerRecord, RemoveTopicRecord, TopicRecord,
    UserScramCredentialRecord, Uuid, CONFIG_RESOURCE_BROKER, CONFIG_RESOURCE_CLIENT_METRICS,
    CONFIG_RESOURCE_GROUP, CONFIG_RESOURCE_TOPIC, NO_LEADER,
};
use fjord_common::scram::{ScramCredential, ScramMechanism};

/// Why a record could not be applied to an image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum ImageError {
    #[error("topic name must not be empty")]
    EmptyTopicName,
    #[error("the all-zero topic id is reserved")]
    ZeroTopicId,
    #[error("topic id {} already names topic {existing_name}", hex(.topic_id))]
    DuplicateTopicId {
        topic_id: Uuid,
        existing_name: String,
    },
    #[error("topic {name} already exists")]
    TopicAlreadyExists { name: String },
    #[error("unknown topic id {}", hex(.topic_id))]
    UnknownTopicId { topic_id: Uuid },
    #[error("unknown topic {name}")]
    UnknownTopicName { name: String },
    #[error("partition {partition_id} of topic {} is out of order: expected partition {expected}", hex(.topic_id))]
    PartitionOutOfOrder {
        topic_id: Uuid,
        partition_id: i32,
        expected: i32,
    },
    #[error("unknown partition {partition_id} of topic {}", hex(.topic_id))]
    UnknownPartition { topic_id: Uuid, partition_id: i32 },
    #[error("invalid assignment for partition {partition_id} of topic {}: {reason}", hex(.topic_id))]
    InvalidAssignment {
        topic_id: Uuid,
        partition_id: i32,
        reason: String,
    },
    #[error("leader epoch of partition {partition_id} of topic {} would overflow", hex(.topic_id))]
    EpochOverflow { topic_id: Uuid, partition_id: i32 },
    #[error("config resource type {resource_type} is not supported")]
    UnsupportedConfigResource { resource_type: i8 },
    #[error("config name must not be empty")]
    EmptyConfigName,
    #[error("next producer id {proposed} is not above the current {current}")]
    ProducerIdRegression { current: i64, proposed: i64 },
    #[error("broker id {broker_id} is negative")]
    InvalidBrokerId { broker_id: i32 },
    #[error(
        "broker {broker_id} re-registered with epoch {proposed}, not above the current {current}"
    )]
    BrokerEpochRegression {
        broker_id: i32,
        current: i64,
        proposed: i64,
    },
    #[error("broker {broker_id} is not registered")]
    UnknownBroker { broker_id: i32 },
    #[error("a change for broker {broker_id} at epoch {proposed}, but its registration has epoch {current}")]
    StaleBrokerEpoch {
        broker_id: i32,
        current: i64,
        proposed: i64,
    },
    #[error("feature name must not be empty")]
    EmptyFeatureName,
    #[error("SCRAM mechanism code {0} is not SCRAM-SHA-256 (1) or SCRAM-SHA-512 (2)")]
    UnknownScramMechanism(i8),
    #[error("a SCRAM credential's user name must not be empty")]
    EmptyScramUser,
    #[error("delegation token {0:?} has no id or an owner that is not a principal")]
    InvalidDelegationToken(String),
    #[error("an ACL record is invalid: {0}")]
    InvalidAcl(String),
    #[error("ACL id {0} is already taken")]
    DuplicateAclId(String),
    #[error("no ACL has id {0}")]
    UnknownAclId(String),
    #[error("a client quota record's entity is invalid: {0:?}")]
    InvalidQuotaEntity(crate::quota::QuotaEntity),
}

/// Formats a UUID as 32 lowercase hex digits (for messages only).
pub fn hex(id: &Uuid) -> String {
    id.0.iter().fold(String::with_capacity(32), |mut s, b| {
        use fmt::Write;
        // Writing to a String cannot fail.
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The current state of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionImage {
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// Broker id of the leader, or [`NO_LEADER`].
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    /// A reassignment in progress: the replicas it adds and those it will drop (both in
    /// `replicas`); the target is `replicas` without `removing_replicas`.
    pub adding_replicas: Vec<i32>,
    pub removing_replicas: Vec<i32>,
}

impl PartitionImage {
    pub fn is_reassigning(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
    }
}

/// The current state of one topic. `partitions[i]` is partition `i`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicImage {
    pub name: String,
    pub topic_id: Uuid,
    pub partitions: Vec<PartitionImage>,
}

/// A registered broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistration {
    pub broker_id: i32,
    pub incarnation_id: Uuid,
    pub broker_epoch: i64,
    pub endpoints: Vec<BrokerEndpoint>,
    pub rack: Option<String>,
    /// Fenced brokers lead nothing and host no new replicas (registered, session expired, or
    /// shut down).
    pub fenced: bool,
    /// Shutting down: leadership moves away and no new replica is placed on it.
    pub in_controlled_shutdown: bool,
    /// The metadata offset of this registration: a broker whose applied image reaches it has
    /// caught up enough to be unfenced.
    pub registered_at: u64,
}

impl BrokerRegistration {
    /// May lead partitions and take new replicas.
    pub fn is_active(&self) -> bool {
        !self.fenced && !self.in_controlled_shutdown
    }
}

/// Cluster metadata as of one offset (raft log index) of the metadata log.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataImage {
    offset: u64,
    topics_by_id: BTreeMap<Uuid, Arc<TopicImage>>,
    topic_ids_by_name: BTreeMap<String, Uuid>,
    topic_configs: BTreeMap<String, BTreeMap<String, String>>,
    broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Client-metrics subscriptions (KIP-714) by name: the keys each sets.
    client_metrics: BTreeMap<String, BTreeMap<String, String>>,
    /// Groups' own configs by group id: the keys each sets.
    group_configs: BTreeMap<String, BTreeMap<String, String>>,
    brokers: BTreeMap<i32, BrokerRegistration>,
    producer_ids: Option<ProducerIdsRecord>,
    features: BTreeMap<String, i16>,
    /// SCRAM credentials by user, then mechanism.
    scram_credentials: BTreeMap<String, BTreeMap<ScramMechanism, ScramCredential>>,
    /// Every ACL; shared between images until one changes them.
    acls: Arc<Acls>,
    /// Every client quota; shared between images until one changes them.
    client_quotas: Arc<ClientQuotas>,
    /// Delegation tokens by token id.
    delegation_tokens: BTreeMap<String, DelegationTokenRecord>,
}

impl MetadataImage {
    /// The image of an empty metadata log.
    pub fn empty() -> Self {
        Self::default()
    }

    /// Rebuilds an image by replaying `records` on an empty image (snapshot load).
    pub fn from_records(offset: u64, records: &[MetadataRecord]) -> Result<Self, ImageError> {
        let mut delta = MetadataDelta::new(&Self::empty());
        for record in records {
            delta.apply(record)?;
        }
        Ok(delta.finish(offset))
    }

    /// The raft log index of the last entry this image reflects (0 before any).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    pub fn topic(&self, name: &str) -> Option<&Arc<TopicImage>> {
        self.topic_ids_by_name
            .get(name)
            .and_then(|id| self.topics_by_id.get(id))
    }

    pub fn topic_by_id(&self, topic_id: &Uuid) -> Option<&Arc<TopicImage>> {
        self.topics_by_id.get(topic_id)
    }

    /// All topics, in name order.
    pub fn topics(&self) -> impl Iterator<Item = &Arc<TopicImage>> {
        self.topic_ids_by_name
            .values()
            .filter_map(|id| self.topics_by_id.get(id))
    }

    /// Dynamic configs set on a topic (absent when none are set).
    pub fn topic_config(&self, topic: &str) -> Option<&BTreeMap<String, String>> {
        self.topic_configs.get(topic)
    }

    /// Dynamic configs of a broker resource: a broker id as a string, or "" for
    /// the cluster-wide default (absent when none are set).
    pub fn broker_config(&self, resource_name: &str) -> Option<&BTreeMap<String, String>> {
        self.broker_configs.get(resource_name)
    }

    /// The client-metrics subscriptions (KIP-714): each one's name and the keys it sets. A
    /// subscription whose every key was deleted is gone.
    pub fn client_metrics(&self) -> &BTreeMap<String, BTreeMap<String, String>> {
        &self.client_metrics
    }

    /// Groups' own configs by group id.
    pub fn group_configs(&self) -> &BTreeMap<String, BTreeMap<String, String>> {
        &self.group_configs
    }

    /// Node `node_id`'s dynamic broker configs and the cluster-wide default, each empty when none
    /// are set: the two layers of `fjord_config::DynamicBrokerConfig::new`.
    pub fn broker_config_layers(
        &self,
        node_id: i32,
    ) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
        let get = |name: &str| self.broker_config(name).cloned().unwrap_or_default();
        (get(&node_id.to_string()), get(""))
    }

    pub fn broker(&self, broker_id: i32) -> Option<&BrokerRegistration> {
        self.brokers.get(&broker_id)
    }

    /// All registered brokers, in id order.
    pub fn brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values()
    }

    /// The first producer id not yet handed out (0 when no block was ever allocated).
    pub fn next_producer_id(&self) -> i64 {
        self.producer_ids.as_ref().map_or(0, |p| p.next_producer_id)
    }

    /// The most recent producer id block allocation.
    pub fn producer_ids(&self) -> Option<&ProducerIdsRecord> {
        self.producer_ids.as_ref()
    }

    pub fn feature_level(&self, name: &str) -> Option<i16> {
        self.features.get(name).copied()
    }

    /// `user`'s SCRAM credential for `mechanism`.
    pub fn scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Option<&ScramCredential> {
        self.scram_credentials_of(user)?.get(&mechanism)
    }

    /// `user`'s SCRAM credentials, by mechanism.
    pub fn scram_credentials_of(
        &self,
        user: &str,
    ) -> Option<&BTreeMap<ScramMechanism, ScramCredential>> {
        self.scram_credentials.get(user)
    }

    /// Every user with a SCRAM credential, and theirs, by mechanism.
    pub fn scram_users(
        &self,
    ) -> impl Iterator<Item = (&String, &BTreeMap<ScramMechanism, ScramCredential>)> {
        self.scram_credentials.iter()
    }

    /// The delegation token `token_id`.
    pub fn delegation_token(&self, token_id: &str) -> Option<&DelegationTokenRecord> {
        self.delegation_tokens.get(token_id)
    }

    /// Every delegation token, by token id.
    pub fn delegation_tokens(&self) -> impl Iterator<Item = &DelegationTokenRecord> {
        self.delegation_tokens.values()
    }

    /// Every ACL of the cluster, indexed for the authorizer.
    pub fn acls(&self) -> &Arc<Acls> {
        &self.acls
    }

    /// Every client quota of the cluster.
    pub fn client_quotas(&self) -> &Arc<ClientQuotas> {
        &self.client_quotas
    }

    /// The records that rebuild this image from an empty one, in an order that
    /// satisfies the delta's checks (topics before their configs and partitions).
    pub fn to_records(&self) -> Vec<MetadataRecord> {
        let mut out = Vec::new();
        for (name, level) in &self.features {
            out.push(MetadataRecord::FeatureLevel(FeatureLevelRecord {
                name: name.clone(),
                level: *level,
            }));
        }
        for b in self.brokers.values() {
            out.push(MetadataRecord::RegisterBroker(RegisterBrokerRecord {
                broker_id: b.broker_id,
                incarnation_id: b.incarnation_id,
                broker_epoch: b.broker_epoch,
                endpoints: b.endpoints.clone(),
                rack: b.rack.clone(),
                fenced: b.fenced,
                in_controlled_shutdown: b.in_controlled_shutdown,
            }));
        }
        if let Some(p) = &self.producer_ids {
            out.push(MetadataRecord::ProducerIds(p.clone()));
        }
        for (name, credentials) in &self.scram_credentials {
            for c in credentials.values() {
                out.push(MetadataRecord::UserScramCredential(
                    UserScramCredentialRecord {
                        name: name.clone(),
                        mechanism: c.mechanism.code(),
                        salt: c.salt.clone(),
                        stored_key: c.stored_key.clone(),
                        server_key: c.server_key.clone(),
                        iterations: c.iterations,
                    },
                ));
            }
        }
        for token in self.delegation_tokens.values() {
            out.push(MetadataRecord::DelegationToken(token.clone()));
        }
        for (id, acl) in self.acls.iter() {
            out.push(MetadataRecord::AccessControlEntry(
                AccessControlEntryRecord::new(*id, acl),
            ));
        }
        for (entity, quotas) in self.client_quotas.iter() {
            for (key, value) in quotas {
                out.push(MetadataRecord::ClientQuota(ClientQuotaRecord {
                    entity: entity.clone(),
                    key: key.clone(),
                    value: *value,
                    remove: false,
                }));
            }
        }
        push_configs(&mut out, CONFIG_RESOURCE_BROKER, &self.broker_configs);
        push_configs(
            &mut out,
            CONFIG_RESOURCE_CLIENT_METRICS,
            &self.client_metrics,
        );
        push_configs(&mut out, CONFIG_RESOURCE_GROUP, &self.group_configs);
        for topic in self.topics() {
            out.push(MetadataRecord::Topic(TopicRecord {
                name: topic.name.clone(),
                topic_id: topic.topic_id,
            }));
            if let Some(configs) = self.topic_configs.get(&topic.name) {
                for (name, value) in configs {
                    out.push(MetadataRecord::Config(ConfigRecord {
                        resource_type: CONFIG_RESOURCE_TOPIC,
                        resource_name: topic.name.clone(),
                        name: name.clone(),
                        value: Some(value.clone()),
                    }));
                }
            }
            for (partition_id, p) in (0i32..).zip(&topic.partitions) {
                out.push(MetadataRecord::Partition(PartitionRecord {
                    partition_id,
                    topic_id: topic.topic_id,
                    replicas: p.replicas.clone(),
                    isr: p.isr.clone(),
                    leader: p.leader,
                    leader_epoch: p.leader_epoch,
                    partition_epoch: p.partition_epoch,
                    adding_replicas: p.adding_replicas.clone(),
                    removing_replicas: p.removing_replicas.clone(),
                }));
            }
        }
        out
    }
}

fn push_configs(
    out: &mut Vec<MetadataRecord>,
    resource_type: i8,
    configs: &BTreeMap<String, BTreeMap<String, String>>,
) {
    for (resource_name, entries) in configs {
        for (name, value) in entries {
            out.push(MetadataRecord::Config(ConfigRecord {
                resource_type,
                resource_name: resource_name.clone(),
                name: name.clone(),
                value: Some(value.clone()),
            }));
        }
    }
}

/// What differs between two images, for followers of the log that act only on what changed
/// (brokers applying a metadata delta instead of the whole image).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageChanges {
    /// Topics, by name, that are new or whose partitions or config overrides changed.
    pub changed_topics: Vec<String>,
    /// Topics gone (deleted, or replaced by a new topic of the same name): name and old id.
    pub removed_topics: Vec<(String, Uuid)>,
    /// Broker-level dynamic configs changed: every topic's effective settings may have.
    pub broker_configs_changed: bool,
}

impl ImageChanges {
    pub fn is_empty(&self) -> bool {
        self.changed_topics.is_empty()
            && self.removed_topics.is_empty()
            && !self.broker_configs_changed
    }
}

impl MetadataImage {
    /// What changed from `older` to this image. Costs a pointer comparison per topic: a delta
    /// shares every topic it did not touch with its base.
    pub fn changes_since(&self, older: &MetadataImage) -> ImageChanges {
        let mut changes = ImageChanges {
            broker_configs_changed: self.broker_configs != older.broker_configs,
            ..Default::default()
        };
        for (id, topic) in &self.topics_by_id {
            let same = older.topics_by_id.get(id).is_some_and(|old| {
                (Arc::ptr_eq(old, topic) || old == topic)
                    && older.topic_configs.get(&topic.name) == self.topic_configs.get(&topic.name)
            });
            if !same {
                changes.changed_topics.push(topic.name.clone());
            }
        }
        for (id, topic) in &older.topics_by_id {
            if !self.topics_by_id.contains_key(id) {
                changes.removed_topics.push((topic.name.clone(), *id));
            }
        }
        changes
    }
}

/// Accumulates records on top of a base image and produces the next image.
///
/// Each `apply` either applies one record completely or leaves the delta
/// unchanged and returns why; the caller decides whether a failed record voids
/// the whole batch (the quorum does: a proposal applies atomically or not at all).
#[derive(Debug, Clone)]
pub struct MetadataDelta {
    next: MetadataImage,
    /// Brokers registered by this delta: their `registered_at` is the offset it finishes at.
    registered: Vec<i32>,
}

impl MetadataDelta {
    /// Starts a delta from `base`. Cheap: topics are shared until modified.
    pub fn new(base: &MetadataImage) -> Self {
        Self {
            next: base.clone(),
            registered: Vec::new(),
        }
    }

    /// Applies one record, or returns why it violates an image invariant.
    pub fn apply(&mut self, record: &MetadataRecord) -> Result<(), ImageError> {
        match record {
            MetadataRecord::Topic(r) => self.apply_topic(r),
            MetadataRecord::Partition(r) => self.apply_partition(r),
            MetadataRecord::PartitionChange(r) => self.apply_partition_change(r),
            MetadataRecord::Config(r) => self.apply_config(r),
            MetadataRecord::RemoveTopic(r) => self.apply_remove_topic(r),
            MetadataRecord::ProducerIds(r) => self.apply_producer_ids(r),
            MetadataRecord::RegisterBroker(r) => self.apply_register_broker(r),
            MetadataRecord::BrokerRegistrationChange(r) => self.apply_broker_change(r),
            MetadataRecord::FeatureLevel(r) => self.apply_feature_level(r),
            MetadataRecord::UserScramCredential(r) => self.apply_scram_credential(r),
            MetadataRecord::RemoveUserScramCredential(r) => {
                let mechanism = ScramMechanism::from_code(r.mechanism)
                    .ok_or(ImageError::UnknownScramMechanism(r.mechanism))?;
                let credentials = self.next.scram_credentials.get_mut(&r.name);
                if let Some(credentials) = credentials {
                    credentials.remove(&mechanism);
                    if credentials.is_empty() {
                        self.next.scram_credentials.remove(&r.name);
                    }
                }
                Ok(())
            }
            MetadataRecord::AccessControlEntry(r) => {
                let acl = AclBinding::from_wire(
                    r.resource_type,
                    &r.resource_name,
                    r.pattern_type,
                    &r.principal,
                    &r.host,
                    r.operation,
                    r.permission_type,
                )
                .map_err(|e| ImageError::InvalidAcl(e.0))?;
                if self.next.acls.get(&r.id).is_some() {
                    return Err(ImageError::DuplicateAclId(hex(&r.id)));
                }
                Arc::make_mut(&mut self.next.acls).insert(r.id, acl);
                Ok(())
            }
            MetadataRecord::DelegationToken(r) => {
                if r.token_id.is_empty() || r.owner.split_once(':').is_none() {
                    return Err(ImageError::InvalidDelegationToken(r.token_id.clone()));
                }
                self.next
                    .delegation_tokens
                    .insert(r.token_id.clone(), r.clone());
                Ok(())
            }
            MetadataRecord::RemoveDelegationToken(r) => {
                self.next.delegation_tokens.remove(&r.token_id);
                Ok(())
            }
            MetadataRecord::RemoveAccessControlEntry(r) => {
                if self.next.acls.get(&r.id).is_none() {
                    return Err(ImageError::UnknownAclId(hex(&r.id)));
                }
                Arc::make_mut(&mut self.next.acls).remove(&r.id);
                Ok(())
            }
            MetadataRecord::ClientQuota(r) => {
                let types = r.entity.0.keys();
                let known = types
                    .clone()
                    .all(|t| [quota::USER, quota::CLIENT_ID, quota::IP].contains(&t.as_str()));
                if r.entity.0.is_empty() || !known {
                    return Err(ImageError::InvalidQuotaEntity(r.entity.clone()));
                }
                let value = (!r.remove).then_some(r.value.0);
                Arc::make_mut(&mut self.next.client_quotas).set(r.entity.clone(), &r.key, value);
                Ok(())
            }
        }
    }

    /// The image with every applied record, reflecting log index `offset`.
    pub fn finish(self, offset: u64) -> MetadataImage {
        let mut image = self.next;
        image.offset = offset;
        for id in self.registered {
            if let Some(broker) = image.brokers.get_mut(&id) {
                broker.registered_at = offset;
            }
        }
        image
    }

    fn apply_topic(&mut self, r: &TopicRecord) -> Result<(), ImageError> {
        if r.name.is_empty() {
            return Err(ImageError::EmptyTopicName);
        }
        if r.topic_id == Uuid::ZERO {
            return Err(ImageError::ZeroTopicId);
        }
        if let Some(existing) = self.next.topics_by_id.get(&r.topic_id) {
            return Err(ImageError::DuplicateTopicId {
                topic_id: r.topic_id,
                existing_name: existing.name.clone(),
            });
        }
        if self.next.topic_ids_by_name.contains_key(&r.name) {
            return Err(ImageError::TopicAlreadyExists {
                name: r.name.clone(),
            });
        }
        self.next
            .topic_ids_by_name
            .insert(r.name.clone(), r.topic_id);
        self.next.topics_by_id.insert(
            r.topic_id,
            Arc::new(TopicImage {
                name: r.name.clone(),
                topic_id: r.topic_id,
                partitions: Vec::new(),
            }),
        );
        Ok(())
    }

    fn topic_mut(&mut self, topic_id: &Uuid) -> Result<&mut TopicImage, ImageError> {
        self.next
            .topics_by_id
            .get_mut(topic_id)
            .map(Arc::make_mut)
            .ok_or(ImageError::UnknownTopicId {
                topic_id: *topic_id,
            })
    }

    fn apply_partition(&mut self, r: &PartitionRecord) -> Result<(), ImageError> {
        let topic = self.topic_mut(&r.topic_id)?;
        let expected = i32::try_from(topic.partitions.len()).unwrap_or(i32::MAX);
        if r.partition_id != expected {
            return Err(ImageError::PartitionOutOfOrder {
                topic_id: r.topic_id,
                partition_id: r.partition_id,
                expected,
            });
        }
        let invalid = |reason: &str| ImageError::InvalidAssignment {
            topic_id: r.topic_id,
            partition_id: r.partition_id,
            reason: reason.to_owned(),
        };
        if r.leader_epoch < 0 || r.partition_epoch < 0 {
            return Err(invalid("epochs must not be negative"));
        }
        check_assignment(&r.replicas, &r.isr, r.leader).map_err(invalid)?;
        check_reassignment(&r.replicas, &r.adding_replicas, &r.removing_replicas)
            .map_err(invalid)?;
        topic.partitions.push(PartitionImage {
            replicas: r.replicas.clone(),
            isr: r.isr.clone(),
            leader: r.leader,
            leader_epoch: r.leader_epoch,
            partition_epoch: r.partition_epoch,
            adding_replicas: r.adding_replicas.clone(),
            removing_replicas: r.removing_replicas.clone(),
        });
        Ok(())
    }

    fn apply_partition_change(&mut self, r: &PartitionChangeRecord) -> Result<(), ImageError> {
        let topic = self.topic_mut(&r.topic_id)?;
        let unknown = ImageError::UnknownPartition {
            topic_id: r.topic_id,
            partition_id: r.partition_id,
        };
        let index = usize::try_from(r.partition_id).map_err(|_| unknown.clone())?;
        let partition = topic.partitions.get_mut(index).ok_or(unknown)?;
        let replicas = r.replicas.as_ref().unwrap_or(&partition.replicas);
        let isr = r.isr.as_ref().unwrap_or(&partition.isr);
        let leader = r.leader.unwrap_or(partition.leader);
        let adding = r
            .adding_replicas
            .as_ref()
            .unwrap_or(&partition.adding_replicas);
        let removing = r
            .removing_replicas
            .as_ref()
            .unwrap_or(&partition.removing_replicas);
        let invalid = |reason: &str| ImageError::InvalidAssignment {
            topic_id: r.topic_id,
            partition_id: r.partition_id,
            reason: reason.to_owned(),
        };
        check_assignment(replicas, isr, leader).map_err(invalid)?;
        check_reassignment(replicas, adding, removing).map_err(invalid)?;
        let overflow = ImageError::EpochOverflow {
            topic_id: r.topic_id,
            partition_id: r.partition_id,
        };
        // Naming a leader always starts a new leader epoch, even for the same broker,
        // so that followers truncate to the new leader's log.
        let leader_epoch = match r.leader {
            Some(_) => partition
                .leader_epoch
                .checked_add(1)
                .ok_or(overflow.clone())?,
            None => partition.leader_epoch,
        };
        let partition_epoch = partition.partition_epoch.checked_add(1).ok_or(overflow)?;
        *partition = PartitionImage {
            replicas: replicas.clone(),
            isr: isr.clone(),
            leader,
            leader_epoch,
            partition_epoch,
            adding_replicas: adding.clone(),
            removing_replicas: removing.clone(),
        };
        Ok(())
    }

    fn apply_config(&mut self, r: &ConfigRecord) -> Result<(), ImageError> {
        if r.name.is_empty() {
            return Err(ImageError::EmptyConfigName);
        }
        let configs = match r.resource_type {
            CONFIG_RESOURCE_TOPIC => {
                // Configs of a topic live and die with it; a config for a topic that
                // does not exist would silently attach to a future topic of that name.
                if !self.next.topic_ids_by_name.contains_key(&r.resource_name) {
                    return Err(ImageError::UnknownTopicName {
                        name: r.resource_name.clone(),
                    });
                }
                &mut self.next.topic_configs
            }
            CONFIG_RESOURCE_BROKER => &mut self.next.broker_configs,
            CONFIG_RESOURCE_CLIENT_METRICS => &mut self.next.client_metrics,
            CONFIG_RESOURCE_GROUP => &mut self.next.group_configs,
            other => {
                return Err(ImageError::UnsupportedConfigResource {
                    resource_type: other,
                })
            }
        };
        match &r.value {
            Some(value) => {
                configs
                    .entry(r.resource_name.clone())
                    .or_default()
                    .insert(r.name.clone(), value.clone());
            }
            None => {
                if let Some(entries) = configs.get_mut(&r.resource_name) {
                    entries.remove(&r.name);
                    if entries.is_empty() {
                        configs.remove(&r.resource_name);
                    }
                }
            }
        }
        Ok(())
    }

    fn apply_remove_topic(&mut self, r: &RemoveTopicRecord) -> Result<(), ImageError> {
        let topic =
            self.next
                .topics_by_id
                .remove(&r.topic_id)
                .ok_or(ImageError::UnknownTopicId {
                    topic_id: r.topic_id,
                })?;
        self.next.topic_ids_by_name.remove(&topic.name);
        self.next.topic_configs.remove(&topic.name);
        Ok(())
    }

    fn apply_producer_ids(&mut self, r: &ProducerIdsRecord) -> Result<(), ImageError> {
        let current = self.next.next_producer_id();
        // Handing out an id twice would let two producers share one identity.
        if r.next_producer_id <= current {
            return Err(ImageError::ProducerIdRegression {
                current,
                proposed: r.next_producer_id,
            });
        }
        self.next.producer_ids = Some(r.clone());
        Ok(())
    }

    fn apply_register_broker(&mut self, r: &RegisterBrokerRecord) -> Result<(), ImageError> {
        if r.broker_id < 0 {
            return Err(ImageError::InvalidBrokerId {
                broker_id: r.broker_id,
            });
        }
        if let Some(existing) = self.next.brokers.get(&r.broker_id) {
            if r.broker_epoch <= existing.broker_epoch {
                return Err(ImageError::BrokerEpochRegression {
                    broker_id: r.broker_id,
                    current: existing.broker_epoch,
                    proposed: r.broker_epoch,
                });
            }
        }
        self.next.brokers.insert(
            r.broker_id,
            BrokerRegistration {
                broker_id: r.broker_id,
                incarnation_id: r.incarnation_id,
                broker_epoch: r.broker_epoch,
                endpoints: r.endpoints.clone(),
                rack: r.rack.clone(),
                fenced: r.fenced,
                in_controlled_shutdown: r.in_controlled_shutdown,
                registered_at: 0,
            },
        );
        self.registered.push(r.broker_id);
        Ok(())
    }

    fn apply_broker_change(
        &mut self,
        r: &BrokerRegistrationChangeRecord,
    ) -> Result<(), ImageError> {
        let broker = self
            .next
            .brokers
            .get_mut(&r.broker_id)
            .ok_or(ImageError::UnknownBroker {
                broker_id: r.broker_id,
            })?;
        if broker.broker_epoch != r.broker_epoch {
            return Err(ImageError::StaleBrokerEpoch {
                broker_id: r.broker_id,
                current: broker.broker_epoch,
                proposed: r.broker_epoch,
            });
        }
        if let Some(fenced) = r.fenced {
            broker.fenced = fenced;
        }
        if let Some(shutting_down) = r.in_controlled_shutdown {
            broker.in_controlled_shutdown = shutting_down;
        }
        Ok(())
    }

    fn apply_scram_credential(&mut self, r: &UserScramCredentialRecord) -> Result<(), ImageError> {
        let mechanism = ScramMechanism::from_code(r.mechanism)
            .ok_or(ImageError::UnknownScramMechanism(r.mechanism))?;
        if r.name.is_empty() {
            return Err(ImageError::EmptyScramUser);
        }
        let credential = ScramCredential {
            mechanism,
            salt: r.salt.clone(),
            stored_key: r.stored_key.clone(),
            server_key: r.server_key.clone(),
            iterations: r.iterations,
        };
        self.next
            .scram_credentials
            .entry(r.name.clone())
            .or_default()
            .insert(mechanism, credential);
        Ok(())
    }

    fn apply_feature_level(&mut self, r: &FeatureLevelRecord) -> Result<(), ImageError> {
        if r.name.is_empty() {
            return Err(ImageError::EmptyFeatureName);
        }
        if r.level == 0 {
            self.next.features.remove(&r.name);
        } else {
            self.next.features.insert(r.name.clone(), r.level);
        }
        Ok(())
    }
}

/// Checks a replica assignment: non-empty distinct replicas, an ISR drawn from
/// them, and a leader that is either absent or in the ISR.
fn check_assignment(replicas: &[i32], isr: &[i32], leader: i32) -> Result<(), &'static str> {
    if replicas.is_empty() {
        return Err("replicas must not be empty");
    }
    if replicas.iter().any(|&r| r < 0) {
        return Err("replica ids must not be negative");
    }
    if has_duplicates(replicas) {
        return Err("replicas must be distinct");
    }
    if has_duplicates(isr) {
        return Err("isr must be distinct");
    }
    if !isr.iter().all(|r| replicas.contains(r)) {
        return Err("isr must be a subset of replicas");
    }
    if leader != NO_LEADER && !isr.contains(&leader) {
        return Err("leader must be in the isr");
    }
    Ok(())
}

/// A reassignment's adding and removing replicas are distinct replicas, and some replica stays.
fn check_reassignment(
    replicas: &[i32],
    adding: &[i32],
    removing: &[i32],
) -> Result<(), &'static str> {
    if has_duplicates(adding) || has_duplicates(removing) {
        return Err("adding and removing replicas must be distinct");
    }
    if !adding.iter().chain(removing).all(|r| replicas.contains(r)) {
        return Err("adding and removing replicas must be replicas");
    }
    if adding.iter().any(|r| removing.contains(r)) {
        return Err("a replica cannot be both added and removed");
    }
    if removing.len() >= replicas.len() {
        return Err("a reassignment must keep some replica");
    }
    Ok(())
}

fn has_duplicates(ids: &[i32]) -> bool {
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    sorted.windows(2).any(|w| w.first() == w.last())
}

#[cfg(test)]
mod tests {
    use super::*;

    const T1: Uuid = Uuid([1; 16]);
    const T2: Uuid = Uuid([2; 16]);

    fn topic(name: &str, id: Uuid) -> MetadataRecord {
        MetadataRecord::Topic(TopicRecord {
            name: name.into(),
            topic_id: id,
        })
    }

    fn partition(id: Uuid, partition_id: i32, replicas: &[i32], leader: i32) -> MetadataRecord {
        MetadataRecord::Partition(PartitionRecord {
            partition_id,
            topic_id: id,
            replicas: replicas.to_vec(),
            isr: replicas.to_vec(),
            leader,
            leader_epoch: 0,
            partition_epoch: 0,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        })
    }

    fn config(
        resource_type: i8,
        resource: &str,
        name: &str,
        value: Option<&str>,
    ) -> MetadataRecord {
        MetadataRecord::Config(ConfigRecord {
            resource_type,
            resource_name: resource.into(),
            name: name.into(),
            value: value.map(str::to_owned),
        })
    }

    fn build(records: &[MetadataRecord]) -> Result<MetadataImage, ImageError> {
        MetadataImage::from_records(records.len() as u64, records)
    }

    fn next(image: &MetadataImage, records: &[MetadataRecord]) -> MetadataImage {
        let mut delta = MetadataDelta::new(image);
        for record in records {
            delta.apply(record).unwrap();
        }
        delta.finish(image.offset() + 1)
    }

    #[test]
    fn changes_name_only_what_a_delta_touched() {
        let base = build(&[
            topic("a", T1),
            partition(T1, 0, &[1], 1),
            topic("b", T2),
            partition(T2, 0, &[1], 1),
        ])
        .unwrap();
        assert!(base.changes_since(&base).is_empty());
        let grown = next(&base, &[partition(T2, 1, &[1], 1)]);
        assert_eq!(
            grown.changes_since(&base).changed_topics,
            vec!["b".to_string()]
        );
        let configured = next(
            &grown,
            &[config(
                CONFIG_RESOURCE_TOPIC,
                "a",
                "retention.ms",
                Some("1"),
            )],
        );
        let changes = configured.changes_since(&grown);
        assert_eq!(changes.changed_topics, vec!["a".to_string()]);
        assert!(!changes.broker_configs_changed);
        let dynamic = next(
            &configured,
            &[config(
                CONFIG_RESOURCE_BROKER,
                "",
                "log.retention.ms",
                Some("5"),
            )],
        );
        let changes = dynamic.changes_since(&configured);
        assert!(changes.broker_configs_changed && changes.changed_topics.is_empty());
        let t3 = Uuid([3; 16]);
        let replaced = next(
            &dynamic,
            &[
                MetadataRecord::RemoveTopic(RemoveTopicRecord { topic_id: T1 }),
                topic("a", t3),
                partition(t3, 0, &[1], 1),
            ],
        );
        let changes = replaced.changes_since(&dynamic);
        assert_eq!(changes.changed_topics, vec!["a".to_string()]);
        assert_eq!(changes.removed_topics, vec![("a".to_string(), T1)]);
    }

    #[test]
    fn topic_and_partitions() {
        let image = build(&[
            topic("a", T1),
            partition(T1, 0, &[1, 2], 1),
            partition(T1, 1, &[2, 1], 2),
        ])
        .unwrap();
        assert_eq!(image.offset(), 3);
        let t = image.topic("a").unwrap();
        assert_eq!(t.topic_id, T1);
        assert_eq!(t.partitions.len(), 2);
        assert_eq!(t.partitions[1].leader, 2);
        assert_eq!(image.topic_by_id(&T1).unwrap().name, "a");
        assert!(image.topic("b").is_none());
    }

    #[test]
    fn topic_id_maps_to_one_name() {
        let err = build(&[topic("a", T1), topic("b", T1)]).unwrap_err();
        assert!(matches!(err, ImageError::DuplicateTopicId { .. }), "{err}");
        let err = build(&[topic("a", T1), topic("a", T2)]).unwrap_err();
        assert_eq!(err, ImageError::TopicAlreadyExists { name: "a".into() });
        assert_eq!(
            build(&[topic("", T1)]).unwrap_err(),
            ImageError::EmptyTopicName
        );
        assert_eq!(
            build(&[topic("a", Uuid([0; 16]))]).unwrap_err(),
            ImageError::ZeroTopicId
        );
    }

    #[test]
    fn partition_ids_are_dense() {
        let err = build(&[topic("a", T1), partition(T1, 1, &[1], 1)]).unwrap_err();
        assert!(matches!(
            err,
            ImageError::PartitionOutOfOrder { expected: 0, .. }
        ));
        let err = build(&[
            topic("a", T1),
            partition(T1, 0, &[1], 1),
            partition(T1, 0, &[1], 1),
        ])
        .unwrap_err();
        assert!(matches!(
            err,
            ImageError::PartitionOutOfOrder { expected: 1, .. }
        ));
        let err = build(&[partition(T2, 0, &[1], 1)]).unwrap_err();
        assert_eq!(err, ImageError::UnknownTopicId { topic_id: T2 });
    }

    #[test]
    fn assignments_are_checked() {
        for (replicas, isr, leader) in [
            (vec![], vec![], -1),
            (vec![1, 1], vec![1], 1),
            (vec![1, 2], vec![3], -1),
            (vec![1, 2], vec![1], 2),
            (vec![-4], vec![], -1),
        ] {
            let record = MetadataRecord::Partition(PartitionRecord {
                partition_id: 0,
                topic_id: T1,
                replicas,
                isr,
                leader,
                leader_epoch: 0,
                partition_epoch: 0,
                adding_replicas: Vec::new(),
                removing_replicas: Vec::new(),
            });
            let err = build(&[topic("a", T1), record]).unwrap_err();
            assert!(matches!(err, ImageError::InvalidAssignment { .. }), "{err}");
        }
    }

    #[test]
    fn partition_change_bumps_epochs() {
        let base = build(&[topic("a", T1), partition(T1, 0, &[1, 2, 3], 1)]).unwrap();
        let mut delta = MetadataDelta::new(&base);
        // ISR shrink alone: only the partition epoch moves.
        delta
            .apply(&MetadataRecord::PartitionChange(PartitionChangeRecord {
                partition_id: 0,
                topic_id: T1,
                isr: Some(vec![1, 2]),
                leader: None,
                replicas: None,
                adding_replicas: None,
                removing_replicas: None,
            }))
            .unwrap();
        // New leader: both epochs move.
        delta
            .apply(&MetadataRecord::PartitionChange(PartitionChangeRecord {
                partition_id: 0,
                topic_id: T1,
                isr: None,
                leader: Some(2),
                replicas: None,
                adding_replicas: None,
                removing_replicas: None,
            }))
            .unwrap();
        let next = delta.finish(9);
        let p = &next.topic("a").unwrap().partitions[0];
        assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (2, 1, 2));
        assert_eq!(p.isr, vec![1, 2]);
        // The base image is untouched.
        assert_eq!(base.topic("a").unwrap().partitions[0].leader_epoch, 0);

        let mut delta = MetadataDelta::new(&next);
        let bad_leader = MetadataRecord::PartitionChange(PartitionChangeRecord {
            partition_id: 0,
            topic_id: T1,
            isr: None,
            leader: Some(3),
            replicas: None,
            adding_replicas: None,
            removing_replicas: None,
        });
        assert!(matches!(
            delta.apply(&bad_leader),
            Err(ImageError::InvalidAssignment { .. })
        ));
        let unknown = MetadataRecord::PartitionChange(PartitionChangeRecord {
            partition_id: 5,
            topic_id: T1,
            isr: None,
            leader: None,
            replicas: None,
            adding_replicas: None,
            removing_replicas: None,
        });
        assert!(matches!(
            delta.apply(&unknown),
            Err(ImageError::UnknownPartition { .. })
        ));
        assert_eq!(delta.finish(10).topic("a"), next.topic("a"));
    }

    #[test]
    fn leader_epoch_never_overflows() {
        let record = MetadataRecord::Partition(PartitionRecord {
            partition_id: 0,
            topic_id: T1,
            replicas: vec![1],
            isr: vec![1],
            leader: 1,
            leader_epoch: i32::MAX,
            partition_epoch: 0,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        });
        let base = build(&[topic("a", T1), record]).unwrap();
        let mut delta = MetadataDelta::new(&base);
        let err = delta
            .apply(&MetadataRecord::PartitionChange(PartitionChangeRecord {
                partition_id: 0,
                topic_id: T1,
                isr: None,
                leader: Some(1),
                replicas: None,
                adding_replicas: None,
                removing_replicas: None,
            }))
            .unwrap_err();
        assert!(matches!(err, ImageError::EpochOverflow { .. }));
    }

    #[test]
    fn remove_topic_drops_partitions_and_configs() {
        let image = build(&[
            topic("a", T1),
            config(CONFIG_RESOURCE_TOPIC, "a", "retention.ms", Some("1000")),
            partition(T1, 0, &[1], 1),
            topic("b", T2),
            MetadataRecord::RemoveTopic(RemoveTopicRecord { topic_id: T1 }),
        ])
        .unwrap();
        assert!(image.topic("a").is_none());
        assert!(image.topic_by_id(&T1).is_none());
        assert!(image.topic_config("a").is_none());
        assert_eq!(image.topics().count(), 1);
        // The name is free again, and the new topic starts without the old configs.
        let mut delta = MetadataDelta::new(&image);
        delta.apply(&topic("a", Uuid([3; 16]))).unwrap();
        let image = delta.finish(7);
        assert_eq!(image.topic("a").unwrap().topic_id, Uuid([3; 16]));
        assert!(image.topic_config("a").is_none());
        let err = build(&[MetadataRecord::RemoveTopic(RemoveTopicRecord {
            topic_id: T1,
        })]);
        assert_eq!(
            err.unwrap_err(),
            ImageError::UnknownTopicId { topic_id: T1 }
        );
    }

    #[test]
    fn configs_set_and_delete() {
        let image = build(&[
            topic("a", T1),
            config(
                CONFIG_RESOURCE_TOPIC,
                "a",
                "cleanup.policy",
                Some("compact"),
            ),
            config(CONFIG_RESOURCE_TOPIC, "a", "retention.ms", Some("1")),
            config(CONFIG_RESOURCE_TOPIC, "a", "retention.ms", Some("2")),
            config(CONFIG_RESOURCE_TOPIC, "a", "cleanup.policy", None),
            config(CONFIG_RESOURCE_BROKER, "", "log.retention.ms", Some("5")),
            config(CONFIG_RESOURCE_BROKER, "1", "x", Some("y")),
            config(CONFIG_RESOURCE_BROKER, "1", "x", None),
        ])
        .unwrap();
        let a = image.topic_config("a").unwrap();
        assert_eq!(a.len(), 1);
        assert_eq!(a.get("retention.ms").map(String::as_str), Some("2"));
        assert_eq!(
            image
                .broker_config("")
                .unwrap()
                .get("log.retention.ms")
                .map(String::as_str),
            Some("5")
        );
        assert!(image.broker_config("1").is_none());
        // The two layers of a node's dynamic broker config: its own (none left) and the default.
        let (node, default) = image.broker_config_layers(1);
        assert!(node.is_empty());
        assert_eq!(
            default,
            BTreeMap::from([("log.retention.ms".into(), "5".into())])
        );

        let err = build(&[config(CONFIG_RESOURCE_TOPIC, "nope", "x", Some("1"))]).unwrap_err();
        assert_eq!(
            err,
            ImageError::UnknownTopicName {
                name: "nope".into()
            }
        );
        let err = build(&[config(8, "x", "y", Some("1"))]).unwrap_err();
        assert_eq!(
            err,
            ImageError::UnsupportedConfigResource { resource_type: 8 }
        );
        let err = build(&[config(CONFIG_RESOURCE_BROKER, "", "", Some("1"))]).unwrap_err();
        assert_eq!(err, ImageError::EmptyConfigName);
    }

    #[test]
    fn producer_ids_only_move_forward() {
        let block = |next| {
            MetadataRecord::ProducerIds(ProducerIdsRecord {
                broker_id: 1,
                broker_epoch: 3,
                next_producer_id: next,
            })
        };
        let image = build(&[block(1000), block(2000)]).unwrap();
        assert_eq!(image.next_producer_id(), 2000);
        assert_eq!(image.producer_ids().unwrap().broker_id, 1);
        assert_eq!(MetadataImage::empty().next_producer_id(), 0);
        let err = build(&[block(1000), block(1000)]).unwrap_err();
        assert_eq!(
            err,
            ImageError::ProducerIdRegression {
                current: 1000,
                proposed: 1000
            }
        );
    }

    fn register(broker_id: i32, broker_epoch: i64) -> MetadataRecord {
        MetadataRecord::RegisterBroker(RegisterBrokerRecord {
            broker_id,
            incarnation_id: Uuid([7; 16]),
            broker_epoch,
            endpoints: vec![BrokerEndpoint {
                name: "PLAINTEXT".into(),
                host: "localhost".into(),
                port: 9092,
                security_protocol: 0,
            }],
            rack: Some("r1".into()),
            fenced: true,
            in_controlled_shutdown: false,
        })
    }

    fn change(broker_id: i32, broker_epoch: i64, fenced: Option<bool>) -> MetadataRecord {
        MetadataRecord::BrokerRegistrationChange(BrokerRegistrationChangeRecord {
            broker_id,
            broker_epoch,
            fenced,
            in_controlled_shutdown: None,
        })
    }

    #[test]
    fn a_broker_registers_fenced_and_changes_only_at_its_own_epoch() {
        let image = MetadataImage::from_records(7, &[register(1, 3)]).unwrap();
        let broker = image.broker(1).unwrap();
        assert!(broker.fenced && !broker.is_active());
        assert_eq!(broker.registered_at, 7, "the offset of the registration");

        let mut delta = MetadataDelta::new(&image);
        assert_eq!(
            delta.apply(&change(1, 2, Some(false))),
            Err(ImageError::StaleBrokerEpoch {
                broker_id: 1,
                current: 3,
                proposed: 2
            })
        );
        assert_eq!(
            delta.apply(&change(2, 3, Some(false))),
            Err(ImageError::UnknownBroker { broker_id: 2 })
        );
        delta.apply(&change(1, 3, Some(false))).unwrap();
        let unfenced = delta.finish(9);
        let broker = unfenced.broker(1).unwrap();
        assert!(broker.is_active());
        assert_eq!(broker.registered_at, 7, "a change is not a registration");
        // Fencing survives a snapshot.
        let restored = MetadataImage::from_records(9, &unfenced.to_records()).unwrap();
        assert!(!restored.broker(1).unwrap().fenced);
    }

    #[test]
    fn brokers_register_with_rising_epochs() {
        let image = build(&[register(1, 10), register(2, 11), register(1, 12)]).unwrap();
        assert_eq!(image.brokers().count(), 2);
        let b1 = image.broker(1).unwrap();
        assert_eq!(b1.broker_epoch, 12);
        assert_eq!(b1.endpoints[0].port, 9092);
        assert_eq!(b1.rack.as_deref(), Some("r1"));
        let err = build(&[register(1, 10), register(1, 10)]).unwrap_err();
        assert!(matches!(err, ImageError::BrokerEpochRegression { .. }));
        let err = build(&[register(-1, 10)]).unwrap_err();
        assert_eq!(err, ImageError::InvalidBrokerId { broker_id: -1 });
    }

    #[test]
    fn feature_levels() {
        let level = |name: &str, level| {
            MetadataRecord::FeatureLevel(FeatureLevelRecord {
                name: name.into(),
                level,
            })
        };
        let image = build(&[level("metadata.version", 20), level("kraft.version", 1)]).unwrap();
        assert_eq!(image.feature_level("metadata.version"), Some(20));
        let image = build(&[level("kraft.version", 1), level("kraft.version", 0)]).unwrap();
        assert_eq!(image.feature_level("kraft.version"), None);
        assert_eq!(
            build(&[level("", 1)]).unwrap_err(),
            ImageError::EmptyFeatureName
        );
    }

    #[test]
    fn records_round_trip_the_image() {
        let image = build(&[
            MetadataRecord::FeatureLevel(FeatureLevelRecord {
                name: "metadata.version".into(),
                level: 20,
            }),
            register(1, 5),
            MetadataRecord::ProducerIds(ProducerIdsRecord {
                broker_id: 1,
                broker_epoch: 5,
                next_producer_id: 1000,
            }),
            config(CONFIG_RESOURCE_BROKER, "", "a", Some("b")),
            topic("z", T1),
            topic("a", T2),
            config(CONFIG_RESOURCE_TOPIC, "z", "retention.ms", Some("1")),
            partition(T1, 0, &[1], 1),
            partition(T1, 1, &[1], 1),
            partition(T2, 0, &[1], -1),
            MetadataRecord::PartitionChange(PartitionChangeRecord {
                partition_id: 1,
                topic_id: T1,
                isr: None,
                leader: Some(1),
                replicas: None,
                adding_replicas: None,
                removing_replicas: None,
            }),
        ])
        .unwrap();
        let rebuilt = MetadataImage::from_records(image.offset(), &image.to_records()).unwrap();
        assert_eq!(rebuilt, image);
        let names: Vec<_> = image.topics().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "z"]);
    }

    #[test]
    fn hex_formats_ids() {
        assert_eq!(hex(&T1), "01".repeat(16));
    }

    #[test]
    fn scram_credentials_are_kept_per_user_and_mechanism_and_snapshotted() {
        use crate::record::RemoveUserScramCredentialRecord;
        let credential = |user: &str, mechanism: ScramMechanism| {
            let c = ScramCredential::from_password(mechanism, "pw", vec![7; 16], 4096);
            MetadataRecord::UserScramCredential(UserScramCredentialRecord {
                name: user.into(),
                mechanism: mechanism.code(),
                salt: c.salt,
                stored_key: c.stored_key,
                server_key: c.server_key,
                iterations: c.iterations,
            })
        };
        let image = MetadataImage::from_records(
            3,
            &[
                credential("alice", ScramMechanism::Sha256),
                credential("alice", ScramMechanism::Sha512),
                credential("bob", ScramMechanism::Sha256),
            ],
        )
        .unwrap();
        assert!(image
            .scram_credential("alice", ScramMechanism::Sha512)
            .is_some());
        let rebuilt = MetadataImage::from_records(3, &image.to_records()).unwrap();
        assert_eq!(rebuilt, image);
        let mut delta = MetadataDelta::new(&image);
        for mechanism in [ScramMechanism::Sha256, ScramMechanism::Sha512] {
            delta
                .apply(&MetadataRecord::RemoveUserScramCredential(
                    RemoveUserScramCredentialRecord {
                        name: "alice".into(),
                        mechanism: mechanism.code(),
                    },
                ))
                .unwrap();
        }
        let image = delta.finish(4);
        assert_eq!(image.scram_users().count(), 1);
        let mut delta = MetadataDelta::new(&image);
        let bad = MetadataRecord::RemoveUserScramCredential(RemoveUserScramCredentialRecord {
            name: "bob".into(),
            mechanism: 9,
        });
        assert_eq!(delta.apply(&bad), Err(ImageError::UnknownScramMechanism(9)));
    }

    #[test]
    fn delegation_tokens_are_kept_renewed_removed_and_snapshotted() {
        use crate::record::RemoveDelegationTokenRecord;
        let token = |id: &str, expiry: i64| {
            MetadataRecord::DelegationToken(DelegationTokenRecord {
                token_id: id.into(),
                owner: "User:alice".into(),
                requester: "User:admin".into(),
                renewers: vec!["User:bob".into()],
                issue_timestamp: 1,
                max_timestamp: 100,
                expiration_timestamp: expiry,
            })
        };
        let image =
            MetadataImage::from_records(2, &[token("a", 10), token("b", 20), token("a", 30)])
                .unwrap();
        assert_eq!(
            image.delegation_token("a").unwrap().expiration_timestamp,
            30
        );
        assert_eq!(image.delegation_tokens().count(), 2);
        let rebuilt = MetadataImage::from_records(2, &image.to_records()).unwrap();
        assert_eq!(rebuilt, image);
        let mut delta = MetadataDelta::new(&image);
        let remove = |id: &str| {
            MetadataRecord::RemoveDelegationToken(RemoveDelegationTokenRecord {
                token_id: id.into(),
            })
        };
        delta.apply(&remove("b")).unwrap();
        delta.apply(&remove("never")).unwrap();
        let nameless = MetadataRecord::DelegationToken(DelegationTokenRecord {
            owner: "no principal".into(),
            ..match token("c", 1) {
                MetadataRecord::DelegationToken(t) => t,
                _ => unreachable!(),
            }
        });
        assert!(delta.apply(&nameless).is_err());
        let image = delta.finish(3);
        assert!(image.delegation_token("b").is_none());
        assert!(image.delegation_token("a").is_some());
    }

    #[test]
    fn client_quotas_are_set_removed_snapshotted_and_checked() {
        use crate::quota::{QuotaEntity, QuotaValue, PRODUCER_BYTE_RATE};
        let alice = QuotaEntity([(quota::USER.to_string(), Some("alice".to_string()))].into());
        let record = |entity: &QuotaEntity, value: f64, remove: bool| {
            MetadataRecord::ClientQuota(ClientQuotaRecord {
                entity: entity.clone(),
                key: PRODUCER_BYTE_RATE.into(),
                value: QuotaValue(value),
                remove,
            })
        };
        let image = MetadataImage::from_records(2, &[record(&alice, 1024.0, false)]).unwrap();
        assert_eq!(
            image
                .client_quotas()
                .quota_for(PRODUCER_BYTE_RATE, "alice", "x")
                .map(|q| q.0),
            Some(1024.0)
        );
        let rebuilt = MetadataImage::from_records(2, &image.to_records()).unwrap();
        assert_eq!(rebuilt, image);
        let mut delta = MetadataDelta::new(&image);
        delta.apply(&record(&alice, 0.0, true)).unwrap();
        assert!(delta.finish(3).client_quotas().is_empty());
        let mut delta = MetadataDelta::new(&image);
        for bad in [
            QuotaEntity::default(),
            QuotaEntity([("group".to_string(), None)].into()),
        ] {
            assert_eq!(
                delta.apply(&record(&bad, 1.0, false)),
                Err(ImageError::InvalidQuotaEntity(bad))
            );
        }
    }

    #[test]
    fn acls_are_added_removed_snapshotted_and_checked() {
        use crate::acl::{AclBinding, AclOperation, AclPermission, PatternType, ResourceType};
        use crate::record::RemoveAccessControlEntryRecord;
        let acl = AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: "orders".into(),
            pattern_type: PatternType::Prefixed,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: AclOperation::Read,
            permission: AclPermission::Allow,
        };
        let id = Uuid([5; 16]);
        let add = MetadataRecord::AccessControlEntry(AccessControlEntryRecord::new(id, &acl));
        let image = MetadataImage::from_records(1, std::slice::from_ref(&add)).unwrap();
        assert_eq!(image.acls().get(&id), Some(&acl));
        let again = MetadataImage::from_records(1, &image.to_records()).unwrap();
        assert_eq!(again.acls(), image.acls());
        let mut delta = MetadataDelta::new(&image);
        assert!(matches!(
            delta.apply(&add),
            Err(ImageError::DuplicateAclId(_))
        ));
        let mut bad = AccessControlEntryRecord::new(Uuid([6; 16]), &acl);
        bad.operation = 1;
        let bad = MetadataRecord::AccessControlEntry(bad);
        assert!(matches!(delta.apply(&bad), Err(ImageError::InvalidAcl(_))));
        let remove =
            MetadataRecord::RemoveAccessControlEntry(RemoveAccessControlEntryRecord { id });
        delta.apply(&remove).unwrap();
        assert!(matches!(
            delta.apply(&remove),
            Err(ImageError::UnknownAclId(_))
        ));
        let image = delta.finish(2);
        assert!(image.acls().is_empty());
    }
}
