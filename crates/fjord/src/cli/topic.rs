//! `fjord topic`: create, list, describe, grow and delete topics, answering as Kafka's `kafka-topics`
//! tool does (its messages and its describe lines).

use crate::cli::CliError;
use clap::{Args, Subcommand};
use fjord_client::{Client, ConfigEntry, ConfigResource, NewTopic, TopicMetadata};
use fjord_common::errors;

/// DescribeConfigs' source of a value nobody set.
const DEFAULT_CONFIG: i8 = 5;

#[derive(Args)]
pub struct TopicArgs {
    #[command(flatten)]
    brokers: super::Brokers,
    #[command(subcommand)]
    command: TopicCommand,
}

#[derive(Subcommand)]
enum TopicCommand {
    /// Create a topic.
    Create {
        /// The topic's name.
        name: String,
        /// Its partition count (default: the cluster's num.partitions).
        #[arg(short = 'p', long, default_value_t = -1, allow_negative_numbers = true)]
        partitions: i32,
        /// Its replication factor (default: the cluster's default.replication.factor).
        #[arg(short = 'r', long = "replicas", default_value_t = -1, allow_negative_numbers = true)]
        replication_factor: i16,
        /// A topic config, KEY=VALUE (Kafka's names). May be repeated.
        #[arg(short = 'c', long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
        /// Succeed when the topic exists already.
        #[arg(long)]
        if_not_exists: bool,
    },
    /// List the topics, one name per line.
    List {
        /// Leave out the internal topics (__consumer_offsets, __transaction_state).
        #[arg(long)]
        exclude_internal: bool,
    },
    /// Show each partition's leader, replicas and in-sync replicas.
    Describe {
        /// The topics (every topic when none is named).
        names: Vec<String>,
    },
    /// Grow a topic to more partitions (records already written stay where they are).
    AddPartitions {
        /// The topic.
        name: String,
        /// Its new partition count.
        #[arg(short = 'p', long)]
        partitions: i32,
    },
    /// Delete topics with their records.
    Delete {
        /// The topics.
        #[arg(required = true)]
        names: Vec<String>,
        /// Succeed for a topic that does not exist.
        #[arg(long)]
        if_exists: bool,
    },
}

pub fn run(args: TopicArgs) -> Result<(), CliError> {
    super::block_on(async move {
        let mut client = Client::connect(&args.brokers.brokers).await?;
        match args.command {
            TopicCommand::Create {
                name,
                partitions,
                replication_factor,
                configs,
                if_not_exists,
            } => {
                let topic = NewTopic {
                    name,
                    partitions,
                    replication_factor,
                    configs: configs
                        .iter()
                        .map(|c| key_value(c))
                        .collect::<Result<_, _>>()?,
                };
                create(&mut client, topic, if_not_exists).await
            }
            TopicCommand::List { exclude_internal } => list(&mut client, exclude_internal).await,
            TopicCommand::Describe { names } => describe(&mut client, &names).await,
            TopicCommand::AddPartitions { name, partitions } => {
                client.create_partitions(&name, partitions).await?;
                println!("Topic {name} has {partitions} partitions.");
                Ok(())
            }
            TopicCommand::Delete { names, if_exists } => {
                delete(&mut client, &names, if_exists).await
            }
        }
    })
}

fn key_value(item: &str) -> Result<(String, String), CliError> {
    let (key, value) = item.split_once('=').ok_or_else(|| {
        CliError::new(format!("--config {item:?} is not KEY=VALUE"))
            .hint("write it as -c retention.ms=86400000")
    })?;
    Ok((key.trim().to_string(), value.trim().to_string()))
}

async fn create(client: &mut Client, topic: NewTopic, if_not_exists: bool) -> Result<(), CliError> {
    let name = topic.name.clone();
    for (_, outcome) in client.create_topics(&[topic], false).await? {
        match outcome {
            Ok(()) => println!("Created topic {name}."),
            Err(e) if if_not_exists && e.kafka_code() == Some(errors::TOPIC_ALREADY_EXISTS) => {}
            Err(e) if e.kafka_code() == Some(errors::TOPIC_ALREADY_EXISTS) => {
                return Err(
                    CliError::from(e).hint("pass --if-not-exists to accept an existing topic")
                )
            }
            Err(e) => return Err(CliError::from(e)),
        }
    }
    Ok(())
}

async fn list(client: &mut Client, exclude_internal: bool) -> Result<(), CliError> {
    let metadata = client.metadata(None).await?;
    let mut names: Vec<&str> = metadata
        .topics
        .iter()
        .filter(|t| !(exclude_internal && t.is_internal))
        .map(|t| t.name.as_str())
        .collect();
    names.sort_unstable();
    for name in names {
        println!("{name}");
    }
    Ok(())
}

/// A replica list as `kafka-topics` prints it: comma-separated ids.
fn ids(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

/// The lines `kafka-topics --describe` prints for one topic: a summary with the configs not at
/// their defaults (`configs`), then a line per partition.
fn describe_lines(topic: &TopicMetadata, configs: &[ConfigEntry]) -> Vec<String> {
    let replication_factor = topic.partitions.first().map_or(0, |p| p.replicas.len());
    let overridden: Vec<String> = configs
        .iter()
        .filter(|c| c.source != DEFAULT_CONFIG)
        .map(|c| format!("{}={}", c.name, c.value.as_deref().unwrap_or("null")))
        .collect();
    let mut lines = vec![format!(
        "Topic: {}\tTopicId: {}\tPartitionCount: {}\tReplicationFactor: {}\tConfigs: {}",
        topic.name,
        topic.topic_id,
        topic.partitions.len(),
        replication_factor,
        overridden.join(",")
    )];
    let mut partitions: Vec<_> = topic.partitions.iter().collect();
    partitions.sort_by_key(|p| p.partition);
    for p in partitions {
        let leader = if p.leader_id < 0 {
            "none".to_string()
        } else {
            p.leader_id.to_string()
        };
        let mut line = format!(
            "\tTopic: {}\tPartition: {}\tLeader: {leader}\tReplicas: {}\tIsr: {}",
            topic.name,
            p.partition,
            ids(&p.replicas),
            ids(&p.isr)
        );
        if !p.offline.is_empty() {
            line.push_str(&format!("\tOffline: {}", ids(&p.offline)));
        }
        lines.push(line);
    }
    lines
}

async fn describe(client: &mut Client, names: &[String]) -> Result<(), CliError> {
    let asked = (!names.is_empty()).then_some(names);
    let metadata = client.metadata(asked).await?;
    let mut topics: Vec<&TopicMetadata> = metadata.topics.iter().collect();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    for topic in topics {
        if topic.error_code == errors::UNKNOWN_TOPIC_OR_PARTITION {
            return Err(CliError::new(format!(
                "Topic '{}' does not exist as expected",
                topic.name
            ))
            .hint("list the topics with `fjord topic list`"));
        }
        let configs = client
            .describe_configs(&ConfigResource::Topic(topic.name.clone()))
            .await?;
        for line in describe_lines(topic, &configs) {
            println!("{line}");
        }
    }
    Ok(())
}

async fn delete(client: &mut Client, names: &[String], if_exists: bool) -> Result<(), CliError> {
    for (name, outcome) in client.delete_topics(names).await? {
        match outcome {
            Ok(()) => println!("Deleted topic {name}."),
            Err(e) if if_exists && e.kafka_code() == Some(errors::UNKNOWN_TOPIC_OR_PARTITION) => {}
            Err(e) if e.kafka_code() == Some(errors::UNKNOWN_TOPIC_OR_PARTITION) => {
                return Err(CliError::from(e)
                    .hint("list the topics with `fjord topic list`, or pass --if-exists"))
            }
            Err(e) => return Err(CliError::from(e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::tests::partition;

    #[test]
    fn describe_prints_what_kafka_topics_prints() {
        let topic = TopicMetadata {
            name: "t".into(),
            topic_id: fjord_common::Uuid([0; 16]),
            error_code: 0,
            is_internal: false,
            partitions: vec![partition(1, -1, vec![]), partition(0, 2, vec![2, 3])],
        };
        let config = |name: &str, value: &str, source| ConfigEntry {
            name: name.into(),
            value: Some(value.into()),
            source,
            is_sensitive: false,
            read_only: false,
        };
        let configs = [
            config("cleanup.policy", "compact", 1),
            config("retention.ms", "604800000", DEFAULT_CONFIG),
            config("segment.bytes", "1024", 4),
        ];
        assert_eq!(
            describe_lines(&topic, &configs),
            [
                "Topic: t\tTopicId: AAAAAAAAAAAAAAAAAAAAAA\tPartitionCount: 2\tReplicationFactor: 3\tConfigs: cleanup.policy=compact,segment.bytes=1024",
                "\tTopic: t\tPartition: 0\tLeader: 2\tReplicas: 1,2,3\tIsr: 2,3",
                "\tTopic: t\tPartition: 1\tLeader: none\tReplicas: 1,2,3\tIsr: ",
            ]
        );
        assert_eq!(
            key_value("retention.ms=5").unwrap(),
            ("retention.ms".into(), "5".into())
        );
        assert!(key_value("retention.ms").is_err());
    }
}
