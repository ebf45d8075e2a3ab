//! The controller's decisions, sans-IO: given the current metadata image and a request, which
//! metadata records to propose, or which Kafka error to answer with. The caller proposes the
//! records through the metadata quorum; nothing here touches a socket, a file or the clock.

use std::collections::BTreeMap;

use fjord_metadata::{
    ConfigRecord, MetadataImage, MetadataRecord, PartitionRecord, RemoveTopicRecord, TopicRecord,
    CONFIG_RESOURCE_BROKER, CONFIG_RESOURCE_CLIENT_METRICS, CONFIG_RESOURCE_GROUP,
    CONFIG_RESOURCE_TOPIC,
};

use fjord_common::{errors, TopicId};

use crate::placement::{self, Placer, UsableBroker};
pub(crate) use crate::refusal::refuse;
pub use crate::refusal::Refusal;
use fjord_config::{
    broker_config_kind, check_broker_value, is_dynamic_broker_key, is_listener_tls_key, split_list,
    topic_config_def, validate_topic_config, ConfigType,
};

/// Longest legal topic name, as in Kafka.
pub const MAX_TOPIC_NAME_LEN: usize = 249;
/// Upper bound on partitions per topic: keeps one request from creating an unbounded number of
/// directories and files.
pub const MAX_PARTITIONS_PER_TOPIC: i32 = 100_000;

/// Kafka's topic name rules: 1..=249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), Refusal> {
    if name.is_empty() {
        return Err(refuse(
            errors::INVALID_TOPIC_EXCEPTION,
            "Topic name is illegal, it can't be empty",
        ));
    }
    if name == "." || name == ".." {
        return Err(refuse(
            errors::INVALID_TOPIC_EXCEPTION,
            "Topic name cannot be \".\" or \"..\"",
        ));
    }
    if name.len() > MAX_TOPIC_NAME_LEN {
        return Err(refuse(
            errors::INVALID_TOPIC_EXCEPTION,
            format!(
                "Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LEN} characters"
            ),
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '.' || *c == '_' || *c == '-'))
    {
        return Err(refuse(
            errors::INVALID_TOPIC_EXCEPTION,
            format!("Topic name {name:?} is illegal, it contains {bad:?}; legal characters are ASCII alphanumerics, '.', '_' and '-'"),
        ));
    }
    Ok(())
}

/// '.' and '_' collide in metric names, so Kafka refuses a topic whose name differs from an
/// existing one only by them.
fn colliding_topic<'a>(image: &'a MetadataImage, name: &str) -> Option<&'a str> {
    let normalized = name.replace('.', "_");
    image
        .topics()
        .map(|t| t.name.as_str())
        .find(|existing| *existing != name && existing.replace('.', "_") == normalized)
}

/// A topic creation as requested, after defaults are applied.
#[derive(Debug, Clone)]
pub struct CreateTopic {
    pub name: String,
    /// -1: the broker default.
    pub num_partitions: i32,
    /// -1: the broker default.
    pub replication_factor: i16,
    /// Explicit assignment: partition index → broker ids.
    pub assignments: BTreeMap<i32, Vec<i32>>,
    pub configs: BTreeMap<String, String>,
}

/// The plan for one topic: its id, partition count and replication factor, and the records.
#[derive(Debug, Clone)]
pub struct TopicPlan {
    pub topic_id: TopicId,
    pub num_partitions: i32,
    pub replication_factor: i16,
    pub records: Vec<MetadataRecord>,
}

/// Decides a CreateTopics entry. `brokers` are the brokers that can host replicas (registered,
/// not shutting down); `new_topic_id` is a fresh random id supplied by the caller, which also
/// seeds the placement.
pub fn plan_create_topic(
    image: &MetadataImage,
    request: &CreateTopic,
    default_partitions: i32,
    default_replication_factor: i16,
    brokers: &[UsableBroker],
    new_topic_id: TopicId,
) -> Result<TopicPlan, Refusal> {
    may_create(image, request)?;
    let replicas_by_partition = if request.assignments.is_empty() {
        let num_partitions = or_default(request.num_partitions, default_partitions);
        let replication_factor = or_default(request.replication_factor, default_replication_factor);
        placed_replicas(num_partitions, replication_factor, brokers, &new_topic_id)?
    } else {
        assigned_replicas(request, brokers)?
    };
    same_replication_factor(&replicas_by_partition)?;
    let replication_factor = replicas_by_partition.first().map(|r| r.len()).unwrap_or(0) as i16;
    let mut records = vec![MetadataRecord::Topic(TopicRecord {
        name: request.name.clone(),
        topic_id: new_topic_id,
    })];
    for (key, value) in &request.configs {
        records.push(MetadataRecord::Config(ConfigRecord {
            resource_type: CONFIG_RESOURCE_TOPIC,
            resource_name: request.name.clone(),
            name: key.clone(),
            value: Some(value.clone()),
        }));
    }
    for (index, replicas) in replicas_by_partition.iter().enumerate() {
        records.push(partition_record(
            new_topic_id,
            index as i32,
            replicas,
            brokers,
        )?);
    }
    Ok(TopicPlan {
        topic_id: new_topic_id,
        num_partitions: replicas_by_partition.len() as i32,
        replication_factor,
        records,
    })
}

/// Whether the topic may be created at all: a legal name that neither exists nor collides with
/// an existing one, and valid configs.
fn may_create(image: &MetadataImage, request: &CreateTopic) -> Result<(), Refusal> {
    validate_topic_name(&request.name)?;
    if image.topic(&request.name).is_some() {
        return Err(refuse(
            errors::TOPIC_ALREADY_EXISTS,
            format!("Topic '{}' already exists.", request.name),
        ));
    }
    if let Some(existing) = colliding_topic(image, &request.name) {
        return Err(refuse(
            errors::INVALID_TOPIC_EXCEPTION,
            format!(
                "Topic '{}' collides with existing topic: {existing}",
                request.name
            ),
        ));
    }
    for (key, value) in &request.configs {
        validate_topic_config(key, value)
            .map_err(|e| refuse(errors::INVALID_CONFIG, e.to_string()))?;
    }
    Ok(())
}

/// A requested count, or the broker's default where the request says -1.
fn or_default<T: PartialEq + From<i8>>(requested: T, default: T) -> T {
    if requested == T::from(-1) {
        default
    } else {
        requested
    }
}

/// Replicas placed by this controller: `num_partitions` partitions of `replication_factor`
/// replicas each, the placement seeded by the topic's id.
fn placed_replicas(
    num_partitions: i32,
    replication_factor: i16,
    brokers: &[UsableBroker],
    topic_id: &TopicId,
) -> Result<Vec<Vec<i32>>, Refusal> {
    if num_partitions <= 0 || num_partitions > MAX_PARTITIONS_PER_TOPIC {
        return Err(refuse(
            errors::INVALID_PARTITIONS,
            format!("Number of partitions must be between 1 and {MAX_PARTITIONS_PER_TOPIC}; got {num_partitions}."),
        ));
    }
    if replication_factor <= 0 {
        return Err(refuse(
            errors::INVALID_REPLICATION_FACTOR,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        ));
    }
    let mut placer = Placer::new(brokers, placement::seed(topic_id, 0));
    (0..num_partitions)
        .map(|_| placer.place(replication_factor as usize))
        .collect()
}

/// Replicas as the request assigns them: partitions 0, 1, … in order, each a valid replica list,
/// and no partition count or replication factor besides.
fn assigned_replicas(
    request: &CreateTopic,
    brokers: &[UsableBroker],
) -> Result<Vec<Vec<i32>>, Refusal> {
    if request.num_partitions != -1 || request.replication_factor != -1 {
        return Err(refuse(
            errors::INVALID_REQUEST,
            "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.",
        ));
    }
    let mut out = Vec::new();
    for (expected, (index, assigned)) in request.assignments.iter().enumerate() {
        if *index != expected as i32 {
            return Err(refuse(
                errors::INVALID_REPLICA_ASSIGNMENT,
                "Partitions should be a consecutive 0-based integer sequence",
            ));
        }
        check_assignment(assigned, brokers)?;
        out.push(assigned.clone());
    }
    Ok(out)
}

/// Kafka's rule for explicit assignments: every partition of a topic has as many replicas.
fn same_replication_factor(replicas_by_partition: &[Vec<i32>]) -> Result<(), Refusal> {
    match replicas_by_partition.split_first() {
        Some((first, rest)) if rest.iter().any(|r| r.len() != first.len()) => Err(refuse(
            errors::INVALID_REPLICA_ASSIGNMENT,
            "All partitions should have the same number of replicas",
        )),
        _ => Ok(()),
    }
}

/// A new partition: in sync are its replicas on unfenced brokers, and the first of them leads.
fn partition_record(
    topic_id: TopicId,
    partition_id: i32,
    replicas: &[i32],
    brokers: &[UsableBroker],
) -> Result<MetadataRecord, Refusal> {
    let isr: Vec<i32> = replicas
        .iter()
        .copied()
        .filter(|id| brokers.iter().any(|b| b.id == *id && !b.fenced))
        .collect();
    let Some(&leader) = isr.first() else {
        return Err(refuse(
            errors::INVALID_REPLICA_ASSIGNMENT,
            format!("All brokers specified in the manual partition assignment for partition {partition_id} are fenced or in controlled shutdown."),
        ));
    };
    Ok(MetadataRecord::Partition(PartitionRecord {
        partition_id,
        topic_id,
        replicas: replicas.to_vec(),
        isr,
        leader,
        leader_epoch: 0,
        partition_epoch: 0,
        adding_replicas: Vec::new(),
        removing_replicas: Vec::new(),
    }))
}

/// An explicit replica list: not empty, each broker once and registered. Linear in the list,
/// which comes from the network and may be long.
pub(crate) fn check_assignment(assigned: &[i32], brokers: &[UsableBroker]) -> Result<(), Refusal> {
    if assigned.is_empty() {
        return Err(refuse(
            errors::INVALID_REPLICA_ASSIGNMENT,
            "Replica assignment must not be empty",
        ));
    }
    let registered: std::collections::HashSet<i32> = brokers.iter().map(|b| b.id).collect();
    let mut seen =
        std::collections::HashSet::with_capacity(assigned.len().min(registered.len() + 1));
    for broker in assigned {
        if !seen.insert(*broker) {
            return Err(refuse(
                errors::INVALID_REPLICA_ASSIGNMENT,
                format!("Duplicate broker {broker} in replica assignment"),
            ));
        }
        if !registered.contains(broker) {
            return Err(refuse(
                errors::INVALID_REPLICA_ASSIGNMENT,
                format!("The manual partition assignment includes broker {broker}, but no such broker is registered."),
            ));
        }
    }
    Ok(())
}

/// Decides a DeleteTopics entry.
pub fn plan_delete_topic(
    image: &MetadataImage,
    name: &str,
) -> Result<Vec<MetadataRecord>, Refusal> {
    let topic = image.topic(name).ok_or_else(|| {
        refuse(
            errors::UNKNOWN_TOPIC_OR_PARTITION,
            "This server does not host this topic.",
        )
    })?;
    Ok(vec![MetadataRecord::RemoveTopic(RemoveTopicRecord {
        topic_id: topic.topic_id,
    })])
}

/// Decides a CreatePartitions entry: grow `name` to `new_count` partitions.
pub fn plan_create_partitions(
    image: &MetadataImage,
    name: &str,
    new_count: i32,
    assignments: Option<&[Vec<i32>]>,
    brokers: &[UsableBroker],
) -> Result<Vec<MetadataRecord>, Refusal> {
    let topic = image.topic(name).ok_or_else(|| {
        refuse(
            errors::UNKNOWN_TOPIC_OR_PARTITION,
            "This server does not host this topic.",
        )
    })?;
    let current = topic.partitions.len() as i32;
    if new_count < current {
        return Err(refuse(
            errors::INVALID_PARTITIONS,
            format!("The topic {name} currently has {current} partition(s); {new_count} would not be an increase."),
        ));
    }
    if new_count == current {
        return Err(refuse(
            errors::INVALID_PARTITIONS,
            format!("Topic already has {current} partition(s)."),
        ));
    }
    if new_count > MAX_PARTITIONS_PER_TOPIC {
        return Err(refuse(
            errors::INVALID_PARTITIONS,
            format!("At most {MAX_PARTITIONS_PER_TOPIC} partitions per topic."),
        ));
    }
    let replication_factor = topic
        .partitions
        .first()
        .map(|p| p.replicas.len())
        .unwrap_or(1) as i16;
    let added = (new_count - current) as usize;
    let replicas: Vec<Vec<i32>> = match assignments {
        Some(given) => {
            if given.len() != added {
                return Err(refuse(
                    errors::INVALID_REPLICA_ASSIGNMENT,
                    format!("Increasing the number of partitions by {added} but {} assignments provided.", given.len()),
                ));
            }
            for assigned in given {
                check_assignment(assigned, brokers)?;
            }
            given.to_vec()
        }
        None => {
            let mut placer = Placer::new(brokers, placement::seed(&topic.topic_id, current));
            (0..added)
                .map(|_| placer.place(replication_factor as usize))
                .collect::<Result<_, _>>()?
        }
    };
    if let Some(existing) = topic.partitions.first() {
        if replicas.iter().any(|r| r.len() != existing.replicas.len()) {
            return Err(refuse(
                errors::INVALID_REPLICA_ASSIGNMENT,
                format!(
                    "Inconsistent replication factor between partitions, partition 0 has {} while partitions [{current}] has replication factors [{}], respectively.",
                    existing.replicas.len(),
                    replicas.first().map_or(0, Vec::len)
                ),
            ));
        }
    }
    replicas
        .iter()
        .enumerate()
        .map(|(i, r)| partition_record(topic.topic_id, current + i as i32, r, brokers))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one() -> Vec<UsableBroker> {
        vec![UsableBroker::live(1)]
    }

    fn request(name: &str, partitions: i32, rf: i16) -> CreateTopic {
        CreateTopic {
            name: name.to_string(),
            num_partitions: partitions,
            replication_factor: rf,
            assignments: BTreeMap::new(),
            configs: BTreeMap::new(),
        }
    }

    #[test]
    fn topic_names() {
        assert!(validate_topic_name("orders.v1_x-2").is_ok());
        for bad in ["", ".", "..", "a b", "ü", &"x".repeat(250)] {
            assert_eq!(
                validate_topic_name(bad).unwrap_err().error_code,
                errors::INVALID_TOPIC_EXCEPTION,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn create_uses_defaults_and_checks_replication_factor() {
        let image = MetadataImage::empty();
        let plan = plan_create_topic(
            &image,
            &request("t", -1, -1),
            3,
            1,
            &one(),
            fjord_common::Uuid([7; 16]),
        )
        .unwrap();
        assert_eq!(plan.num_partitions, 3);
        assert_eq!(plan.records.len(), 4);
        let err = plan_create_topic(
            &image,
            &request("t", 1, 2),
            3,
            1,
            &one(),
            fjord_common::Uuid([7; 16]),
        )
        .unwrap_err();
        assert_eq!(err.error_code, errors::INVALID_REPLICATION_FACTOR);
        let err = plan_create_topic(
            &image,
            &request("t", 0, 1),
            3,
            1,
            &one(),
            fjord_common::Uuid([7; 16]),
        )
        .unwrap_err();
        assert_eq!(err.error_code, errors::INVALID_PARTITIONS);
    }

    #[test]
    fn create_refuses_existing_and_colliding_names() {
        let plan = plan_create_topic(
            &MetadataImage::empty(),
            &request("a.b", 1, 1),
            1,
            1,
            &one(),
            fjord_common::Uuid([1; 16]),
        )
        .unwrap();
        let image = MetadataImage::from_records(1, &plan.records).unwrap();
        assert_eq!(
            plan_create_topic(
                &image,
                &request("a.b", 1, 1),
                1,
                1,
                &one(),
                fjord_common::Uuid([2; 16])
            )
            .unwrap_err()
            .error_code,
            errors::TOPIC_ALREADY_EXISTS
        );
        assert_eq!(
            plan_create_topic(
                &image,
                &request("a_b", 1, 1),
                1,
                1,
                &one(),
                fjord_common::Uuid([2; 16])
            )
            .unwrap_err()
            .error_code,
            errors::INVALID_TOPIC_EXCEPTION
        );
    }

    #[test]
    fn replicas_go_to_distinct_brokers_and_explicit_ones_must_agree() {
        let image = MetadataImage::empty();
        let brokers: Vec<UsableBroker> = (1..=3).map(UsableBroker::live).collect();
        let plan = plan_create_topic(
            &image,
            &request("t", 6, 3),
            1,
            1,
            &brokers,
            fjord_common::Uuid([7; 16]),
        )
        .unwrap();
        assert_eq!(plan.replication_factor, 3);
        for record in &plan.records {
            if let MetadataRecord::Partition(p) = record {
                let mut distinct = p.replicas.clone();
                distinct.sort_unstable();
                distinct.dedup();
                assert_eq!(distinct, vec![1, 2, 3]);
                assert_eq!(p.isr, p.replicas, "all live: all in sync");
                assert_eq!(p.leader, p.replicas[0]);
            }
        }
        let mut explicit = request("t", -1, -1);
        explicit.assignments.insert(0, vec![1, 2]);
        explicit.assignments.insert(1, vec![3]);
        let err = plan_create_topic(
            &image,
            &explicit,
            1,
            1,
            &brokers,
            fjord_common::Uuid([7; 16]),
        )
        .unwrap_err();
        assert_eq!(err.error_code, errors::INVALID_REPLICA_ASSIGNMENT);
        // One replica each, spread over the brokers.
        let plan = plan_create_topic(
            &image,
            &request("t", 3, 1),
            1,
            1,
            &brokers,
            fjord_common::Uuid([7; 16]),
        )
        .unwrap();
        let leaders: Vec<i32> = plan
            .records
            .iter()
            .filter_map(|r| match r {
                MetadataRecord::Partition(p) => Some(p.leader),
                _ => None,
            })
            .collect();
        let mut sorted = leaders.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![1, 2, 3], "{leaders:?}");
    }

    #[test]
    fn create_refuses_bad_configs() {
        let mut r = request("t", 1, 1);
        r.configs.insert("retention.ms".into(), "soon".into());
        assert_eq!(
            plan_create_topic(
                &MetadataImage::empty(),
                &r,
                1,
                1,
                &one(),
                fjord_common::Uuid([1; 16])
            )
            .unwrap_err()
            .error_code,
            errors::INVALID_CONFIG
        );
    }

    #[test]
    fn partitions_only_grow() {
        let plan = plan_create_topic(
            &MetadataImage::empty(),
            &request("t", 2, 1),
            1,
            1,
            &one(),
            fjord_common::Uuid([1; 16]),
        )
        .unwrap();
        let image = MetadataImage::from_records(1, &plan.records).unwrap();
        assert_eq!(
            plan_create_partitions(&image, "t", 2, None, &one())
                .unwrap_err()
                .error_code,
            errors::INVALID_PARTITIONS
        );
        assert_eq!(
            plan_create_partitions(&image, "t", 1, None, &one())
                .unwrap_err()
                .error_code,
            errors::INVALID_PARTITIONS
        );
        assert_eq!(
            plan_create_partitions(&image, "t", 5, None, &one())
                .unwrap()
                .len(),
            3
        );
        assert_eq!(
            plan_create_partitions(&image, "nope", 5, None, &one())
                .unwrap_err()
                .error_code,
            errors::UNKNOWN_TOPIC_OR_PARTITION
        );
    }
}

/// One change to a dynamic config, as IncrementalAlterConfigs names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigChange {
    Set(String),
    Delete,
    /// Adds values to a list config (those not in it yet).
    Append(String),
    /// Removes values from a list config.
    Subtract(String),
}

/// Decides changes to one topic's dynamic configs: the records that make them, or Kafka's
/// refusal. With `replace` (AlterConfigs), every dynamic config the changes do not name is
/// deleted. APPEND and SUBTRACT start from the topic's dynamic value, else Kafka's default.
pub fn plan_alter_topic_configs(
    image: &MetadataImage,
    topic: &str,
    changes: &[(String, ConfigChange)],
    replace: bool,
) -> Result<Vec<MetadataRecord>, Refusal> {
    if image.topic(topic).is_none() {
        return Err(refuse(
            errors::UNKNOWN_TOPIC_OR_PARTITION,
            format!("Topic {topic} does not exist"),
        ));
    }
    let current = image.topic_config(topic).cloned().unwrap_or_default();
    let wanted = planned_values(
        &current,
        changes,
        replace,
        |name| {
            let def = topic_config_def(name).ok_or_else(|| {
                refuse(
                    errors::INVALID_CONFIG,
                    format!("Unknown topic config name: {name}"),
                )
            })?;
            Ok(Some((def.kind, def.default)))
        },
        |name, value| {
            validate_topic_config(name, value)
                .map_err(|e| refuse(errors::INVALID_CONFIG, e.to_string()))
        },
    )?;
    Ok(config_records(
        CONFIG_RESOURCE_TOPIC,
        topic,
        &current,
        wanted,
    ))
}

/// Decides changes to a broker resource's dynamic configs: `resource_name` is this broker's id
/// (`--entity-name`) or empty for the cluster-wide default (`--entity-default`). As in Kafka,
/// keys that cannot change on a running broker and invalid values are refused with
/// INVALID_REQUEST, and unknown keys are stored. `check_result` checks the resource's dynamic
/// configs as they would be after the change (the broker's whole config must still hold
/// together, e.g. the cleaner's key map must fit one key).
pub fn plan_alter_broker_configs(
    image: &MetadataImage,
    node_id: i32,
    resource_name: &str,
    changes: &[(String, ConfigChange)],
    replace: bool,
    check_result: impl Fn(&BTreeMap<String, String>) -> Result<(), String>,
) -> Result<Vec<MetadataRecord>, Refusal> {
    if !resource_name.is_empty() && resource_name != node_id.to_string() {
        return Err(refuse(
            errors::INVALID_REQUEST,
            format!("Unexpected broker id, expected {node_id}, but received {resource_name}"),
        ));
    }
    let read_only: Vec<&str> = changes
        .iter()
        .map(|(name, _)| name.as_str())
        .filter(|name| broker_config_kind(name).is_some() && !is_dynamic_broker_key(name))
        .collect();
    if !read_only.is_empty() {
        return Err(refuse(
            errors::INVALID_REQUEST,
            format!(
                "Cannot update these configs dynamically: [{}]",
                read_only.join(", ")
            ),
        ));
    }
    // A listener's keystore and truststore are one broker's, as in Kafka.
    let per_broker: Vec<&str> = changes
        .iter()
        .map(|(name, _)| name.as_str())
        .filter(|name| resource_name.is_empty() && is_listener_tls_key(name))
        .collect();
    if !per_broker.is_empty() {
        return Err(refuse(
            errors::INVALID_REQUEST,
            format!(
                "Cannot update these configs at default cluster level, broker id must be specified: [{}]",
                per_broker.join(", ")
            ),
        ));
    }
    let current = image
        .broker_config(resource_name)
        .cloned()
        .unwrap_or_default();
    let wanted = planned_values(
        &current,
        changes,
        replace,
        |name| Ok(broker_config_kind(name).map(|kind| (kind, ""))),
        |name, value| {
            check_broker_value(name, value).map_err(|e| {
                refuse(
                    errors::INVALID_REQUEST,
                    format!(
                        "Invalid value {value} for configuration {name}: {}",
                        e.reason
                    ),
                )
            })
        },
    )?;
    let mut after = current.clone();
    for (name, value) in &wanted {
        match value {
            Some(v) => after.insert(name.clone(), v.clone()),
            None => after.remove(name),
        };
    }
    check_result(&after).map_err(|message| refuse(errors::INVALID_REQUEST, message))?;
    Ok(config_records(
        CONFIG_RESOURCE_BROKER,
        resource_name,
        &current,
        wanted,
    ))
}

/// Decides changes to client-metrics subscription `name` (KIP-714): the subscription as it
/// would be after them is checked whole, as Kafka checks it; APPEND and SUBTRACT are refused
/// with INVALID_CONFIG, as on Kafka's controller.
pub fn plan_alter_client_metrics(
    image: &MetadataImage,
    name: &str,
    changes: &[(String, ConfigChange)],
    replace: bool,
) -> Result<Vec<MetadataRecord>, Refusal> {
    if name.is_empty() {
        return Err(refuse(
            errors::INVALID_REQUEST,
            "Subscription name can't be empty",
        ));
    }
    let current = image
        .client_metrics()
        .get(name)
        .cloned()
        .unwrap_or_default();
    // Unknown keys are refused by the whole check below; here they read as non-lists.
    let wanted = planned_values(&current, changes, replace, |_| Ok(None), |_, _| Ok(()))?;
    let after = after_change(&current, &wanted);
    fjord_config::client_metrics::subscription(name, &after)
        .map_err(|refused| refuse(refused.code, refused.message))?;
    Ok(config_records(
        CONFIG_RESOURCE_CLIENT_METRICS,
        name,
        &current,
        wanted,
    ))
}

/// A group's own configs changed: checked as they would be after the change, against the
/// broker's bounds (`defaults`). A group need not exist to have configs, as in Kafka.
pub fn plan_alter_group_configs(
    image: &MetadataImage,
    group_id: &str,
    changes: &[(String, ConfigChange)],
    replace: bool,
    defaults: &fjord_config::group_configs::ShareGroupDefaults,
) -> Result<Vec<MetadataRecord>, Refusal> {
    if group_id.is_empty() {
        return Err(refuse(errors::INVALID_REQUEST, "Group name can't be empty"));
    }
    let current = image
        .group_configs()
        .get(group_id)
        .cloned()
        .unwrap_or_default();
    let wanted = planned_values(&current, changes, replace, |_| Ok(None), |_, _| Ok(()))?;
    let after = after_change(&current, &wanted);
    fjord_config::group_configs::check(&after, defaults)
        .map_err(|refused| refuse(refused.code, refused.message))?;
    Ok(config_records(
        CONFIG_RESOURCE_GROUP,
        group_id,
        &current,
        wanted,
    ))
}

/// A resource's keys once `wanted` (None: deleted) is applied to `current`.
fn after_change(
    current: &BTreeMap<String, String>,
    wanted: &BTreeMap<String, Option<String>>,
) -> BTreeMap<String, String> {
    let mut after = current.clone();
    for (key, value) in wanted {
        match value {
            Some(v) => after.insert(key.clone(), v.clone()),
            None => after.remove(key),
        };
    }
    after
}

/// The values `changes` leave for the keys they name (None: deleted), starting from `current`;
/// with `replace`, every other key of `current` is deleted. `lookup` gives a key's type and
/// default (None: unknown but allowed), or refuses the key; `validate` checks a new value.
fn planned_values(
    current: &BTreeMap<String, String>,
    changes: &[(String, ConfigChange)],
    replace: bool,
    lookup: impl Fn(&str) -> Result<Option<(ConfigType, &'static str)>, Refusal>,
    validate: impl Fn(&str, &str) -> Result<(), Refusal>,
) -> Result<BTreeMap<String, Option<String>>, Refusal> {
    let mut seen = std::collections::BTreeSet::new();
    let mut wanted: BTreeMap<String, Option<String>> = BTreeMap::new();
    for (name, change) in changes {
        if !seen.insert(name.as_str()) {
            return Err(refuse(
                errors::INVALID_REQUEST,
                format!("Error due to duplicate config keys: {name}"),
            ));
        }
        let known = lookup(name)?;
        let list_op = |verb: &str| match known {
            Some((ConfigType::List, default)) => {
                Ok(current.get(name).map(String::as_str).unwrap_or(default))
            }
            _ => Err(refuse(
                errors::INVALID_CONFIG,
                format!("Config value {verb} is not allowed for config key: {name}"),
            )),
        };
        let value = match change {
            ConfigChange::Set(value) => Some(value.clone()),
            ConfigChange::Delete => None,
            ConfigChange::Append(more) => {
                let mut items: Vec<&str> = split_list(list_op("append")?);
                for item in split_list(more) {
                    if !items.contains(&item) {
                        items.push(item);
                    }
                }
                Some(items.join(","))
            }
            ConfigChange::Subtract(less) => {
                let less = split_list(less);
                let items: Vec<&str> = split_list(list_op("subtract")?)
                    .into_iter()
                    .filter(|item| !less.contains(item))
                    .collect();
                Some(items.join(","))
            }
        };
        if let Some(value) = &value {
            validate(name, value)?;
        }
        wanted.insert(name.clone(), value);
    }
    if replace {
        for name in current.keys() {
            wanted.entry(name.clone()).or_insert(None);
        }
    }
    Ok(wanted)
}

/// Config records for the values that differ from `current`.
fn config_records(
    resource_type: i8,
    resource_name: &str,
    current: &BTreeMap<String, String>,
    wanted: BTreeMap<String, Option<String>>,
) -> Vec<MetadataRecord> {
    wanted
        .into_iter()
        .filter(|(name, value)| current.get(name) != value.as_ref())
        .map(|(name, value)| {
            MetadataRecord::Config(ConfigRecord {
                resource_type,
                resource_name: resource_name.to_string(),
                name,
                value,
            })
        })
        .collect()
}

#[cfg(test)]
mod group_config_tests {
    use super::*;

    #[test]
    fn group_configs_are_checked_and_recorded() {
        let (config, _) =
            fjord_config::BrokerConfig::from_properties(&BTreeMap::new()).expect("defaults");
        let defaults = config.share_groups();
        let set = |k: &str, v: &str| vec![(k.to_string(), ConfigChange::Set(v.to_string()))];
        let image = MetadataImage::default();
        let records = plan_alter_group_configs(
            &image,
            "g",
            &set("share.auto.offset.reset", "earliest"),
            false,
            &defaults,
        )
        .expect("planned");
        assert_eq!(records.len(), 1);
        let refused = plan_alter_group_configs(
            &image,
            "g",
            &set("share.record.lock.duration.ms", "1"),
            false,
            &defaults,
        );
        assert_eq!(
            refused.map_err(|r| r.error_code),
            Err(errors::INVALID_CONFIG)
        );
        let refused = plan_alter_group_configs(
            &image,
            "",
            &set("share.auto.offset.reset", "earliest"),
            false,
            &defaults,
        );
        assert_eq!(
            refused.map_err(|r| r.error_code),
            Err(errors::INVALID_REQUEST)
        );
    }
}

#[cfg(test)]
mod client_metrics_tests {
    use super::*;

    fn set(pairs: &[(&str, &str)]) -> Vec<(String, ConfigChange)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), ConfigChange::Set(v.to_string())))
            .collect()
    }

    #[test]
    fn a_subscription_is_set_checked_whole_and_deleted_key_by_key() {
        let records = plan_alter_client_metrics(
            &MetadataImage::empty(),
            "sub",
            &set(&[
                ("metrics", "org.apache.kafka.producer."),
                ("interval.ms", "1000"),
            ]),
            false,
        )
        .unwrap();
        assert_eq!(records.len(), 2);
        let image = MetadataImage::from_records(1, &records).unwrap();
        assert_eq!(image.client_metrics()["sub"]["interval.ms"], "1000");
        // The interval alone is out of range: refused as Kafka refuses it.
        let refused =
            plan_alter_client_metrics(&image, "sub", &set(&[("interval.ms", "50")]), false)
                .unwrap_err();
        assert_eq!(refused.error_code, errors::INVALID_REQUEST);
        let refused =
            plan_alter_client_metrics(&image, "sub", &set(&[("match", "client_id=(")]), false)
                .unwrap_err();
        assert_eq!(refused.error_code, errors::INVALID_CONFIG);
        let append = [(
            "metrics".to_string(),
            ConfigChange::Append("org.apache.kafka.consumer.".to_string()),
        )];
        assert_eq!(
            plan_alter_client_metrics(&image, "sub", &append, false)
                .unwrap_err()
                .error_code,
            errors::INVALID_CONFIG
        );
        let delete: Vec<(String, ConfigChange)> = ["metrics", "interval.ms", "match"]
            .iter()
            .map(|k| (k.to_string(), ConfigChange::Delete))
            .collect();
        let records = plan_alter_client_metrics(&image, "sub", &delete, false).unwrap();
        // Only the keys that were set are deleted.
        assert_eq!(records.len(), 2);
        let mut all = image.to_records();
        all.extend(records);
        let gone = MetadataImage::from_records(2, &all).unwrap();
        assert!(gone.client_metrics().is_empty());
    }
}
