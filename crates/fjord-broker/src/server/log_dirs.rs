//! The log dirs' `meta.properties`: which cluster and node they belong to, checked at start and
//! written into new dirs; the id a new cluster takes.

use std::path::PathBuf;

use fjord_config::BrokerConfig;
use fjord_storage::meta_properties::{MetaProperties, MetaPropertiesVersion};

use crate::server::{startup, BrokerError};

/// The cluster id this node already has: `cluster.id` if set, else the one in any of its log
/// dirs' `meta.properties`.
pub(super) fn known_cluster_id(config: &BrokerConfig) -> Result<Option<String>, BrokerError> {
    if let Some(id) = config.explicit_cluster_id() {
        return Ok(Some(id.clone()));
    }
    for dir in config.log_dirs.iter().chain([&config.metadata_log_dir]) {
        if let Some(props) = MetaProperties::read(dir).map_err(startup)? {
            return Ok(Some(props.cluster_id));
        }
    }
    Ok(None)
}

/// Reads or creates `meta.properties` in every log dir, refusing a dir that belongs to another
/// node or cluster. A new cluster takes `found` (a dynamic quorum's id, learned from its
/// controllers) or a new id. Returns the cluster id and the metadata log dir's directory id.
pub(super) fn check_log_dirs(
    config: &BrokerConfig,
    found: Option<String>,
) -> Result<(String, Option<String>), BrokerError> {
    let mut dirs: Vec<PathBuf> = config.log_dirs.clone();
    if !dirs.contains(&config.metadata_log_dir) {
        dirs.push(config.metadata_log_dir.clone());
    }
    let mut cluster_id: Option<String> = config.explicit_cluster_id().cloned();
    let mut missing = Vec::new();
    for dir in &dirs {
        std::fs::create_dir_all(dir)
            .map_err(|e| startup(format!("cannot create log dir {}: {e}", dir.display())))?;
        match MetaProperties::read(dir).map_err(startup)? {
            Some(props) => {
                props
                    .check(cluster_id.as_deref(), config.node_id)
                    .map_err(|e| startup(format!("{}: {e}", dir.display())))?;
                cluster_id = Some(props.cluster_id);
            }
            None => missing.push(dir.clone()),
        }
    }
    let cluster_id = cluster_id
        .or(found)
        .unwrap_or_else(|| new_cluster_id(config));
    for dir in missing {
        let props = MetaProperties {
            version: MetaPropertiesVersion::V1,
            cluster_id: cluster_id.clone(),
            node_id: config.node_id,
            directory_id: Some(random_uuid_text()),
        };
        MetaProperties::write(&dir, &props).map_err(|e| {
            startup(format!(
                "cannot write meta.properties in {}: {e}",
                dir.display()
            ))
        })?;
    }
    let metadata_dir_id = MetaProperties::read(&config.metadata_log_dir)
        .map_err(startup)?
        .and_then(|props| props.directory_id);
    Ok((cluster_id, metadata_dir_id))
}

/// The id of a cluster started without `cluster.id` and without a `kafka-storage format`: a node
/// of a quorum derives it from the voters, so every node of that quorum agrees on it without
/// asking; a node alone takes a random one.
fn new_cluster_id(config: &BrokerConfig) -> String {
    if config.cluster.voters.is_empty() {
        return random_uuid_text();
    }
    let mut voters: Vec<String> = config
        .cluster
        .voters
        .iter()
        .map(|v| format!("{}@{}:{}", v.id, v.host, v.port))
        .collect();
    voters.sort();
    let name = format!("fjord-cluster:{}", voters.join(","));
    let id = uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_URL, name.as_bytes());
    fjord_common::Uuid(*id.as_bytes()).to_string()
}

/// A random (version 4) UUID: topic ids, incarnation ids, directory ids.
pub(super) fn random_uuid() -> fjord_common::Uuid {
    fjord_common::Uuid(*uuid::Uuid::new_v4().as_bytes())
}

/// A random UUID in Kafka's text form.
fn random_uuid_text() -> String {
    random_uuid().to_string()
}
