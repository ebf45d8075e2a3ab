//! A change of one of this broker's listener keystores or truststores (`kafka-configs
//! --entity-type brokers --entity-name <id> --alter --add-config
//! listener.name.<l>.ssl.keystore.location=…`) is checked here, by the broker it is for, before
//! it goes to the controller, as Kafka's brokers check it: the listener's TLS must build from the
//! new settings, and the new certificate must name the same subject and keep every subject
//! alternative name of the one it replaces. A resource whose change fails is answered
//! INVALID_REQUEST, saying why; the rest of the request goes on. Once committed the change is
//! loaded (`server::listener_tls` follows the settings); after a change this broker received,
//! its TLS listeners also read their files again here, so setting the same location again loads
//! a renewed keystore, as Kafka's users do.

use std::collections::BTreeMap;

use fjord_common::errors;
use fjord_config::{is_listener_tls_key, DynamicBrokerConfig};
use fjord_controller::{error_response, ControllerApi};
use fjord_protocol::messages::alter_configs_request::AlterConfigsRequest;
use fjord_protocol::messages::incremental_alter_configs_request::IncrementalAlterConfigsRequest;
use fjord_protocol::messages::ResponseBody;

use crate::api::authz::merge;
use crate::api::Node;
use crate::net::tls::{leaf_certificate, same_identity, server_config};

/// Kafka's `ConfigResource.Type.BROKER`, and IncrementalAlterConfigs' SET and DELETE.
const BROKER: i8 = 4;
const SET: i8 = 0;
const DELETE: i8 = 1;

/// Whether a config resource is this node's and names a listener keystore or truststore key.
fn ours<'a>(
    node: &Node,
    resource_type: i8,
    resource_name: &str,
    mut names: impl Iterator<Item = &'a str>,
) -> bool {
    resource_type == BROKER
        && resource_name == node.config.node_id.to_string()
        && names.any(is_listener_tls_key)
}

/// Whether `api` changes a listener keystore or truststore of this node (not validate-only).
pub(crate) fn names_listener_tls(node: &Node, api: &ControllerApi) -> bool {
    match api {
        ControllerApi::IncrementalAlterConfigs(r) if r.validate_only => false,
        ControllerApi::AlterConfigs(r) if r.validate_only => false,
        ControllerApi::IncrementalAlterConfigs(r) => r.resources.iter().any(|c| {
            ours(
                node,
                c.resource_type,
                &c.resource_name,
                c.configs.iter().map(|c| c.name.as_str()),
            )
        }),
        ControllerApi::AlterConfigs(r) => r.resources.iter().any(|c| {
            ours(
                node,
                c.resource_type,
                &c.resource_name,
                c.configs.iter().map(|c| c.name.as_str()),
            )
        }),
        _ => false,
    }
}

/// Loads every TLS listener of this node again from its settings as the image has them,
/// reading their files again.
pub(crate) fn reload(node: &Node) {
    let (own, default) = node.image().broker_config_layers(node.config.node_id);
    let dynamic = DynamicBrokerConfig::new(own, default);
    for (name, tls) in node.listener_tls.iter() {
        let loaded = match node.config.listener_tls_with(name, &dynamic) {
            Ok(Some(settings)) => tls.load(&settings).map_err(|e| e.to_string()),
            Ok(None) => continue,
            Err(error) => Err(error.to_string()),
        };
        match loaded {
            Ok(()) => tracing::info!(listener = %name, "TLS keystore and truststore loaded again"),
            Err(error) => {
                tracing::warn!(listener = %name, %error, "cannot load TLS again; the listener keeps its TLS")
            }
        }
    }
}

/// Takes out of `api` the broker resources of this node whose listener TLS change cannot be
/// used; their answer, to merge into the controller's.
pub(crate) fn refuse_unusable(node: &Node, api: &mut ControllerApi) -> Option<ResponseBody> {
    let (own, default) = node.image().broker_config_layers(node.config.node_id);
    let mut refused: Vec<ResponseBody> = Vec::new();
    // Keeps a resource whose change is usable; answers one whose change is not.
    let mut keep =
        |after: &BTreeMap<String, String>,
         names: &mut dyn Iterator<Item = &str>,
         part: &dyn Fn() -> ControllerApi| match usable(node, after, &default, names) {
            Ok(()) => true,
            Err(reason) => {
                refused.push(error_response(&part(), errors::INVALID_REQUEST, &reason));
                false
            }
        };
    match api {
        ControllerApi::IncrementalAlterConfigs(request) => request.resources.retain(|resource| {
            let names = resource.configs.iter().map(|c| c.name.as_str());
            if !ours(node, resource.resource_type, &resource.resource_name, names) {
                return true;
            }
            let mut after = own.clone();
            for config in &resource.configs {
                match (config.config_operation, &config.value) {
                    (SET, Some(value)) => {
                        after.insert(config.name.clone(), value.clone());
                    }
                    (DELETE, _) => {
                        after.remove(&config.name);
                    }
                    _ => {}
                }
            }
            let mut names = resource.configs.iter().map(|c| c.name.as_str());
            keep(&after, &mut names, &|| {
                ControllerApi::IncrementalAlterConfigs(IncrementalAlterConfigsRequest {
                    resources: vec![resource.clone()],
                    validate_only: false,
                })
            })
        }),
        ControllerApi::AlterConfigs(request) => request.resources.retain(|resource| {
            let names = resource.configs.iter().map(|c| c.name.as_str());
            if !ours(node, resource.resource_type, &resource.resource_name, names) {
                return true;
            }
            // The legacy request replaces the resource's configs whole.
            let after = resource
                .configs
                .iter()
                .filter_map(|c| Some((c.name.clone(), c.value.clone()?)))
                .collect();
            let mut names = resource.configs.iter().map(|c| c.name.as_str());
            keep(&after, &mut names, &|| {
                ControllerApi::AlterConfigs(AlterConfigsRequest {
                    resources: vec![resource.clone()],
                    validate_only: false,
                })
            })
        }),
        _ => return None,
    }
    let mut parts = refused.into_iter();
    let mut answer = parts.next()?;
    for part in parts {
        merge(&mut answer, part);
    }
    Some(answer)
}

/// Whether each TLS listener of this node whose keys the change names can take its settings
/// with this node's dynamic configs changed to `after`; why not. Checked even when a listener's
/// settings stay the same: the file they name may be a new one (a renewed keystore).
fn usable<'a>(
    node: &Node,
    after: &BTreeMap<String, String>,
    default: &BTreeMap<String, String>,
    named: impl Iterator<Item = &'a str>,
) -> Result<(), String> {
    let config = &node.config;
    let new = DynamicBrokerConfig::new(after.clone(), default.clone());
    // The listeners whose keys the change names (`listener.name.<l>.ssl.*`, `<l>` in lower case).
    let named: Vec<&str> = named
        .filter(|key| is_listener_tls_key(key))
        .filter_map(|key| key.strip_prefix("listener.name.")?.split_once('.'))
        .map(|(listener, _)| listener)
        .collect();
    for listener in &config.listeners {
        if !named.contains(&listener.name.to_ascii_lowercase().as_str()) {
            continue;
        }
        let failed = |e: String| format!("listener {}: {e}", listener.name);
        let wanted = config
            .listener_tls_with(&listener.name, &new)
            .map_err(|e| failed(e.to_string()))?;
        let Some(wanted) = wanted else {
            continue;
        };
        server_config(&wanted).map_err(|e| failed(e.to_string()))?;
        // Compared with the certificate the listener presents now.
        let presented = node
            .listener_tls
            .get(&listener.name)
            .and_then(|tls| tls.certificate());
        let new_certificate =
            leaf_certificate(&wanted.keystore).map_err(|e| failed(e.to_string()))?;
        if let Some(presented) = presented {
            same_identity(&presented, &new_certificate).map_err(failed)?;
        }
    }
    Ok(())
}
