//! Keystores and truststores changed with `kafka-configs` (Kafka's dynamic listener configs,
//! `listener.name.<l>.ssl.keystore.*` and `.ssl.truststore.*` on one broker): a task follows this
//! node's dynamic broker configs and builds a TLS listener's server side again when its settings
//! change (at start too, for those kept in the metadata log). New connections use it; open ones
//! keep theirs. A change that cannot be used is logged and the listener keeps what it has (the
//! broker that received the change checked it before it was committed, `api::tls_configs`, which
//! also loads the files again when the same settings are set again).

use std::collections::BTreeMap;
use std::sync::Arc;

use fjord_config::{BrokerConfig, DynamicBrokerConfig, TlsSettings};
use fjord_metadata::MetadataImage;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::net::tls::ListenersTls;

/// Follows the dynamic configs in `images` for `listeners` until `stopping`.
pub(crate) fn follow(
    config: Arc<BrokerConfig>,
    mut images: watch::Receiver<Arc<MetadataImage>>,
    listeners: Arc<ListenersTls>,
    mut stopping: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        // The settings each listener's TLS was last built from.
        let mut built: BTreeMap<String, TlsSettings> = listeners
            .keys()
            .filter_map(|name| Some((name.clone(), config.listener_tls(name)?.clone())))
            .collect();
        // The image at start may already hold dynamic settings (a restart).
        let mut first = true;
        loop {
            if !first {
                tokio::select! {
                    changed = images.changed() => if changed.is_err() { return },
                    _ = stopping.wait_for(|stop| *stop) => return,
                }
            }
            first = false;
            let (own, default) = images
                .borrow_and_update()
                .broker_config_layers(config.node_id);
            let dynamic = DynamicBrokerConfig::new(own, default);
            for (name, tls) in listeners.iter() {
                let settings = match config.listener_tls_with(name, &dynamic) {
                    Ok(Some(settings)) => settings,
                    Ok(None) => continue,
                    Err(error) => {
                        tracing::warn!(listener = %name, %error, "dynamic TLS settings ignored");
                        continue;
                    }
                };
                if built.get(name) == Some(&settings) {
                    continue;
                }
                match tls.load(&settings) {
                    Ok(()) => {
                        tracing::info!(listener = %name, "TLS keystore and truststore loaded")
                    }
                    Err(error) => tracing::warn!(listener = %name, %error,
                        "new TLS settings cannot be used; the listener keeps its TLS"),
                }
                built.insert(name.clone(), settings);
            }
        }
    })
}
