//! How this node's web console reaches the cluster: the listener of this broker its client
//! connects to, secured as that listener asks, and whether users log in. With an authorizer
//! the console connects as whoever logs in (PLAIN or SCRAM on a SASL listener), so ACLs apply
//! to it as to any client; without one it connects as itself.

use std::sync::Arc;

use fjord_config::{BrokerConfig, Listener, SaslMechanism, SecurityProtocol};
use fjord_console::{Console, ConsoleSettings, Traffic};

use crate::link::Links;
use crate::metrics::Metrics;

/// The console for this node, or None (with the reason logged) when it has none: turned off,
/// a node without the broker role, or no listener it can use.
pub(super) fn console(
    config: &BrokerConfig,
    links: &Links,
    metrics: &Arc<Metrics>,
) -> Option<Arc<Console>> {
    if !config.console_enabled() || config.http_listeners.addresses.is_empty() {
        return None;
    }
    if !config.cluster.broker {
        tracing::info!("no web console: this node is a controller only, with no broker role");
        return None;
    }
    let settings = match settings(config, links) {
        Ok(settings) => settings,
        Err(reason) => {
            tracing::warn!("no web console: {reason}");
            return None;
        }
    };
    tracing::info!(
        listener = %settings.bootstrap,
        login = settings.login_mechanisms.is_some(),
        read_only = settings.read_only,
        "web console served on the HTTP listeners at /console/"
    );
    let metrics = metrics.clone();
    let traffic = Arc::new(move || {
        let [bytes_in, messages_in, bytes_out] = metrics.topics.totals();
        Traffic {
            bytes_in,
            bytes_out,
            messages_in,
        }
    });
    Some(Arc::new(Console::new(settings, traffic)))
}

/// The SASL mechanisms a user can log in with from the console's form.
fn form_mechanisms(config: &BrokerConfig, listener: &Listener) -> Vec<String> {
    config
        .listener_sasl(&listener.name)
        .map(|sasl| {
            sasl.mechanisms
                .iter()
                .filter(|m| matches!(m, SaslMechanism::Plain | SaslMechanism::Scram(_)))
                .map(|m| m.name().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn settings(config: &BrokerConfig, links: &Links) -> Result<ConsoleSettings, String> {
    let clients: Vec<&Listener> = config
        .listeners
        .iter()
        .filter(|l| !config.cluster.is_controller_listener(&l.name))
        .collect();
    let (listener, login_mechanisms, mut security) = if config.authorizer.is_some() {
        let (listener, mechanisms) = clients
            .iter()
            .map(|l| (*l, form_mechanisms(config, l)))
            .find(|(_, mechanisms)| !mechanisms.is_empty())
            .ok_or("authorization is on and no listener offers PLAIN or SCRAM to log in with")?;
        (
            listener,
            Some(mechanisms),
            fjord_client::Security::default(),
        )
    } else if let Some(plain) = clients
        .iter()
        .find(|l| l.security_protocol == SecurityProtocol::Plaintext)
    {
        (*plain, None, fjord_client::Security::default())
    } else {
        // The inter-broker listener, as this node's links to it connect.
        let name = &config.cluster.inter_broker_listener_name;
        let listener = clients
            .iter()
            .find(|l| &l.name == name)
            .ok_or("no PLAINTEXT listener, and the inter-broker listener is not a client one")?;
        (*listener, None, links.inter_broker.clone())
    };
    if matches!(
        listener.security_protocol,
        SecurityProtocol::Ssl | SecurityProtocol::SaslSsl
    ) {
        security.tls = links.inter_broker.tls.clone();
        if security.tls.is_none() {
            return Err(format!(
                "listener {} needs TLS, and this node has no TLS client settings for it",
                listener.name
            ));
        }
    }
    // Clients reach the listener at its advertised address, which its certificate names.
    let advertised = config.advertised_listener(&listener.name);
    let host = match advertised.host.as_str() {
        "" | "0.0.0.0" => "127.0.0.1",
        "::" => "::1",
        host => host,
    };
    let bootstrap = if host.contains(':') {
        format!("[{host}]:{}", advertised.port)
    } else {
        format!("{host}:{}", advertised.port)
    };
    Ok(ConsoleSettings {
        bootstrap,
        security,
        login_mechanisms,
        read_only: config.console_read_only(),
        node_id: config.node_id,
    })
}
