//! Connection limits, as Kafka reads them: `max.connections` and `max.connection.creation.rate`
//! for the broker (and per listener, `listener.name.<l>.max.connections` /
//! `.max.connection.creation.rate`), `max.connections.per.ip` and its
//! `max.connections.per.ip.overrides` (`host:count,…`). Kafka's default, `Integer.MAX_VALUE`,
//! means no limit.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::{invalid, BrokerSettings, ConfigError, Listener};

/// One listener's own limits, beside the broker's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListenerLimits {
    pub max_connections: Option<usize>,
    /// New connections per second.
    pub max_creation_rate: Option<f64>,
}

/// The broker's connection limits, values checked. None: unlimited.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConnectionLimitsConfig {
    /// Connections at once, all listeners but the inter-broker one together.
    pub max_connections: Option<usize>,
    /// New connections per second, likewise.
    pub max_creation_rate: Option<f64>,
    /// Connections at once from one address, unless `per_ip_overrides` names it.
    pub max_per_ip: Option<usize>,
    pub per_ip_overrides: BTreeMap<IpAddr, usize>,
    /// Listeners with limits of their own, by name.
    pub listeners: BTreeMap<String, ListenerLimits>,
    /// Rates are measured over this many samples of this many ms (the client quotas' window).
    pub window: (usize, i64),
}

impl ConnectionLimitsConfig {
    /// Whether nothing is limited (the broker then counts nothing).
    pub fn is_unlimited(&self) -> bool {
        self.max_connections.is_none()
            && self.max_creation_rate.is_none()
            && self.max_per_ip.is_none()
            && self.per_ip_overrides.is_empty()
            && self.listeners.is_empty()
    }
}

fn limit(value: i32) -> Option<usize> {
    (value < i32::MAX).then(|| value.max(0) as usize)
}

/// A listener's own value of `key` (`listener.name.<l>.<key>`), checked like the broker's.
fn listener_count(props: &BTreeMap<String, String>, listener: &str, key: &str) -> Option<usize> {
    let value = props.get(&format!(
        "listener.name.{}.{key}",
        listener.to_ascii_lowercase()
    ))?;
    limit(value.trim().parse().ok()?)
}

/// `max.connections.per.ip.overrides`: `address:count` pairs, comma separated.
fn overrides(value: &str) -> Result<BTreeMap<IpAddr, usize>, ConfigError> {
    let key = "max.connections.per.ip.overrides";
    let mut out = BTreeMap::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let bad = |reason: &str| invalid(key, value, format!("{entry}: {reason}"));
        let (host, n) = entry
            .rsplit_once(':')
            .ok_or_else(|| bad("an entry is host:count"))?;
        let host = host.trim().trim_start_matches('[').trim_end_matches(']');
        // Kafka would also resolve a host name here; fjord takes addresses only.
        let address: IpAddr = host
            .parse()
            .map_err(|_| bad("the host must be an IP address"))?;
        let n: usize = n
            .trim()
            .parse()
            .map_err(|_| bad("the count must be a number"))?;
        out.insert(address, n);
    }
    Ok(out)
}

pub(crate) fn connection_limits(
    props: &BTreeMap<String, String>,
    settings: &BrokerSettings,
    listeners: &[Listener],
    window: (usize, i64),
) -> Result<ConnectionLimitsConfig, ConfigError> {
    let per_ip_overrides = overrides(&settings.max_connections_per_ip_overrides)?;
    if settings.max_connections_per_ip == 0 && per_ip_overrides.is_empty() {
        return Err(invalid(
            "max.connections.per.ip",
            "0",
            "may be 0 only if max.connections.per.ip.overrides is set",
        ));
    }
    let mut by_listener = BTreeMap::new();
    for listener in listeners {
        let own = ListenerLimits {
            max_connections: listener_count(props, &listener.name, "max.connections"),
            max_creation_rate: listener_count(
                props,
                &listener.name,
                "max.connection.creation.rate",
            )
            .map(|n| n as f64),
        };
        if own != ListenerLimits::default() {
            by_listener.insert(listener.name.clone(), own);
        }
    }
    Ok(ConnectionLimitsConfig {
        max_connections: limit(settings.max_connections),
        max_creation_rate: limit(settings.max_connection_creation_rate).map(|n| n as f64),
        max_per_ip: limit(settings.max_connections_per_ip),
        per_ip_overrides,
        listeners: by_listener,
        window,
    })
}

#[cfg(test)]
mod tests {
    use crate::BrokerConfig;

    fn limits(pairs: &[(&str, &str)]) -> Result<super::ConnectionLimitsConfig, crate::ConfigError> {
        let props = crate::tests::props(pairs);
        BrokerConfig::from_properties(&props).map(|(c, _)| c.connection_limits().clone())
    }

    #[test]
    fn kafkas_defaults_limit_nothing() {
        assert!(limits(&[]).unwrap().is_unlimited());
    }

    #[test]
    fn limits_are_read_for_the_broker_each_address_and_each_listener() {
        let l = limits(&[
            ("max.connections", "100"),
            ("max.connection.creation.rate", "20"),
            ("max.connections.per.ip", "10"),
            ("max.connections.per.ip.overrides", "127.0.0.2:3, [::1]:7"),
            ("listener.name.plaintext.max.connections", "5"),
        ])
        .unwrap();
        assert_eq!(l.max_connections, Some(100));
        assert_eq!(l.max_creation_rate, Some(20.0));
        assert_eq!(l.max_per_ip, Some(10));
        assert_eq!(
            l.per_ip_overrides.get(&"127.0.0.2".parse().unwrap()),
            Some(&3)
        );
        assert_eq!(l.per_ip_overrides.get(&"::1".parse().unwrap()), Some(&7));
        assert_eq!(l.listeners["PLAINTEXT"].max_connections, Some(5));
        assert_eq!(l.listeners["PLAINTEXT"].max_creation_rate, None);
    }

    #[test]
    fn bad_limits_are_refused_naming_the_key() {
        for (pairs, key) in [
            (vec![("max.connections", "-1")], "max.connections"),
            (
                vec![("max.connections.per.ip", "0")],
                "max.connections.per.ip",
            ),
            (
                vec![("max.connections.per.ip.overrides", "host.example:3")],
                "max.connections.per.ip.overrides",
            ),
            (
                vec![("max.connections.per.ip.overrides", "127.0.0.1")],
                "max.connections.per.ip.overrides",
            ),
            (
                vec![("listener.name.plaintext.max.connections", "many")],
                "listener.name.plaintext.max.connections",
            ),
        ] {
            assert_eq!(limits(&pairs).unwrap_err().key, key, "{pairs:?}");
        }
    }
}
