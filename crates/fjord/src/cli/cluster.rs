//! `fjord cluster`: the brokers and the controller as the cluster describes itself (`info`), and
//! whether every partition has a leader and its full set of in-sync replicas (`health`, whose
//! exit code scripts can rely on).

use crate::cli::CliError;
use clap::{Args, Subcommand};
use fjord_client::{Client, ClusterMetadata};

#[derive(Args)]
pub struct ClusterArgs {
    #[command(flatten)]
    brokers: super::Brokers,
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(Subcommand)]
enum ClusterCommand {
    /// The cluster id, the controller and every live broker.
    Info,
    /// Partitions without a leader or with replicas out of sync; exits 1 unless there are none.
    Health,
}

pub fn run(args: ClusterArgs) -> Result<(), CliError> {
    super::block_on(async move {
        let mut client = Client::connect(&args.brokers.brokers).await?;
        let metadata = client.metadata(None).await?;
        match args.command {
            ClusterCommand::Info => {
                for line in info_lines(&metadata) {
                    println!("{line}");
                }
                Ok(())
            }
            ClusterCommand::Health => {
                let health = Health::of(&metadata);
                for line in health.lines() {
                    println!("{line}");
                }
                if health.healthy() {
                    Ok(())
                } else {
                    Err(CliError::new("the cluster is unhealthy").hint(
                        "`fjord topic describe` shows each partition's leader and ISR; a broker \
                         that is down or falling behind is usually why",
                    ))
                }
            }
        }
    })
}

fn info_lines(metadata: &ClusterMetadata) -> Vec<String> {
    let mut lines = vec![
        format!("Cluster: {}", metadata.cluster_id.as_deref().unwrap_or("-")),
        format!("Controller: {}", metadata.controller_id),
    ];
    let mut brokers = metadata.brokers.clone();
    brokers.sort_by_key(|b| b.node_id);
    for b in brokers {
        lines.push(format!("Broker: {}\t{}", b.node_id, b.addr()));
    }
    lines
}

/// The partitions `health` reports: leaderless ones, and those whose ISR is smaller than their
/// replica set, as `TOPIC-PARTITION`.
struct Health {
    brokers: usize,
    partitions: usize,
    leaderless: Vec<String>,
    under_replicated: Vec<String>,
}

impl Health {
    fn of(metadata: &ClusterMetadata) -> Health {
        let mut health = Health {
            brokers: metadata.brokers.len(),
            partitions: 0,
            leaderless: Vec::new(),
            under_replicated: Vec::new(),
        };
        let mut topics: Vec<_> = metadata.topics.iter().collect();
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        for topic in topics {
            let mut partitions: Vec<_> = topic.partitions.iter().collect();
            partitions.sort_by_key(|p| p.partition);
            for p in partitions {
                health.partitions += 1;
                let name = format!("{}-{}", topic.name, p.partition);
                if p.leader_id < 0 {
                    health.leaderless.push(name);
                } else if p.isr.len() < p.replicas.len() {
                    health.under_replicated.push(name);
                }
            }
        }
        health
    }

    fn healthy(&self) -> bool {
        self.leaderless.is_empty() && self.under_replicated.is_empty()
    }

    fn lines(&self) -> Vec<String> {
        let listed = |names: &[String]| {
            if names.is_empty() {
                "0".to_string()
            } else {
                format!("{} ({})", names.len(), names.join(", "))
            }
        };
        vec![
            format!("Healthy: {}", self.healthy()),
            format!("Brokers: {}", self.brokers),
            format!("Partitions: {}", self.partitions),
            format!("Leaderless partitions: {}", listed(&self.leaderless)),
            format!(
                "Under-replicated partitions: {}",
                listed(&self.under_replicated)
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::tests::partition;
    use fjord_client::{Broker, PartitionMetadata, TopicMetadata};

    fn metadata(partitions: Vec<PartitionMetadata>) -> ClusterMetadata {
        ClusterMetadata {
            cluster_id: Some("c".into()),
            controller_id: 2,
            brokers: [3, 1]
                .map(|node_id| Broker {
                    node_id,
                    host: "127.0.0.1".into(),
                    port: 9090 + node_id,
                })
                .to_vec(),
            topics: vec![TopicMetadata {
                name: "t".into(),
                topic_id: fjord_common::Uuid([1; 16]),
                error_code: 0,
                is_internal: false,
                partitions,
            }],
        }
    }

    #[test]
    fn a_partition_without_a_leader_or_a_full_isr_is_unhealthy() {
        let all_in_sync = metadata(vec![partition(0, 1, vec![1, 2, 3])]);
        assert!(Health::of(&all_in_sync).healthy());
        let broken = metadata(vec![
            partition(2, -1, vec![]),
            partition(0, 1, vec![1, 2, 3]),
            partition(1, 1, vec![1, 3]),
        ]);
        let health = Health::of(&broken);
        assert!(!health.healthy());
        assert_eq!(
            health.lines(),
            [
                "Healthy: false",
                "Brokers: 2",
                "Partitions: 3",
                "Leaderless partitions: 1 (t-2)",
                "Under-replicated partitions: 1 (t-1)",
            ]
        );
        assert_eq!(
            info_lines(&broken),
            [
                "Cluster: c",
                "Controller: 2",
                "Broker: 1\t127.0.0.1:9091",
                "Broker: 3\t127.0.0.1:9093",
            ]
        );
    }
}
