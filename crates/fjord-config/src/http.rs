//! `http.listeners`: where a node serves HTTP (metrics, health, the console), in the clear or
//! over TLS. Not a Kafka key: Kafka has JMX instead; the default port is Redpanda's admin port.
//! An `https://` listener is served with the TLS settings of a listener named HTTP:
//! `listener.name.http.ssl.*` over `ssl.*`, as for a Kafka listener.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use crate::tls::{self, TlsSettings};
use crate::{invalid, ConfigError};

/// The name whose `listener.name.<name>.ssl.*` keys secure the `https://` listeners.
pub const HTTPS_TLS_LISTENER: &str = "HTTP";

/// The node's HTTP listeners as `http.listeners` gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpListeners {
    /// The addresses to bind, each with whether it serves TLS; empty turns HTTP off.
    pub addresses: Vec<HttpAddress>,
    /// The TLS of the `https://` addresses; Some when there is one.
    pub tls: Option<TlsSettings>,
    /// Whether the operator set the key. A default address another process holds (several nodes
    /// on one machine) is passed over with a warning; one the operator chose must bind.
    pub explicit: bool,
}

/// One address of `http.listeners`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpAddress {
    pub address: SocketAddr,
    /// `https://`: served over TLS.
    pub https: bool,
}

/// Parses `http.listeners` (its value `value`, the key set or not): a comma-separated list of
/// `http://HOST:PORT` or `https://HOST:PORT`, HOST an IP address (IPv6 in brackets) or
/// `localhost`; an `https://` one takes its TLS settings from `props`.
pub(crate) fn parse(
    value: &[String],
    explicit: bool,
    props: &BTreeMap<String, String>,
) -> Result<HttpListeners, ConfigError> {
    let key = "http.listeners";
    let whole = value.join(",");
    let mut addresses: Vec<HttpAddress> = Vec::new();
    for entry in value.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
        let (rest, https) = match (
            entry.strip_prefix("http://"),
            entry.strip_prefix("https://"),
        ) {
            (Some(rest), _) => (rest, false),
            (_, Some(rest)) => (rest, true),
            _ => {
                return Err(invalid(
                    key,
                    &whole,
                    format!("`{entry}` is not of the form http://HOST:PORT or https://HOST:PORT"),
                ))
            }
        };
        let address = socket_address(rest.trim_end_matches('/')).ok_or_else(|| {
            invalid(
                key,
                &whole,
                format!("`{entry}`: HOST:PORT with HOST an IP address or localhost, PORT 0-65535"),
            )
        })?;
        if addresses.iter().any(|a| a.address == address) {
            return Err(invalid(key, &whole, format!("{address} is given twice")));
        }
        addresses.push(HttpAddress { address, https });
    }
    let tls = if addresses.iter().any(|a| a.https) {
        Some(tls::listener_tls(props, HTTPS_TLS_LISTENER)?)
    } else {
        None
    };
    Ok(HttpListeners {
        addresses,
        tls,
        explicit,
    })
}

fn socket_address(host_port: &str) -> Option<SocketAddr> {
    if let Ok(address) = host_port.parse::<SocketAddr>() {
        return Some(address);
    }
    let (host, port) = host_port.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let ip = match host {
        "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
        "" => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        _ => host.parse().ok()?,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(s: &str) -> Vec<String> {
        s.split(',').map(str::to_string).collect()
    }

    fn parse(value: &[String], explicit: bool) -> Result<HttpListeners, ConfigError> {
        super::parse(value, explicit, &BTreeMap::new())
    }

    fn addresses(listeners: &HttpListeners) -> Vec<SocketAddr> {
        listeners.addresses.iter().map(|a| a.address).collect()
    }

    #[test]
    fn listeners_parse_and_refuse_what_is_not_http_host_port() {
        let parsed = parse(&list("http://127.0.0.1:9644,http://[::1]:9645/"), true).unwrap();
        assert_eq!(
            addresses(&parsed),
            vec![
                "127.0.0.1:9644".parse().unwrap(),
                "[::1]:9645".parse().unwrap()
            ]
        );
        assert!(parsed.explicit);
        let local = parse(&list("http://localhost:1"), false).unwrap();
        assert_eq!(addresses(&local), vec!["127.0.0.1:1".parse().unwrap()]);
        assert_eq!(parse(&[], true).unwrap().addresses, vec![]);
        assert_eq!(parse(&list(""), true).unwrap().addresses, vec![]);
        for bad in [
            "127.0.0.1:9644",
            "ftp://127.0.0.1:9644",
            "http://example.com:80",
            "http://127.0.0.1",
            "http://127.0.0.1:70000",
            "http://127.0.0.1:1,http://127.0.0.1:1",
        ] {
            let error = parse(&list(bad), true).unwrap_err();
            assert_eq!(error.key, "http.listeners", "{bad}");
        }
    }

    #[test]
    fn an_https_listener_needs_a_keystore_and_takes_the_http_listeners_tls_keys() {
        let error = parse(&list("https://127.0.0.1:9644"), true).unwrap_err();
        assert!(
            error.to_string().contains("listener.name.http.ssl"),
            "{error}"
        );
        let props = BTreeMap::from([
            ("ssl.keystore.type".to_string(), "PEM".to_string()),
            ("ssl.keystore.location".to_string(), "/all.pem".to_string()),
            (
                "listener.name.http.ssl.keystore.location".to_string(),
                "/http.pem".to_string(),
            ),
        ]);
        let parsed = super::parse(
            &list("http://127.0.0.1:9644,https://127.0.0.1:9645"),
            true,
            &props,
        )
        .unwrap();
        assert_eq!(
            parsed.addresses.iter().map(|a| a.https).collect::<Vec<_>>(),
            vec![false, true]
        );
        assert_eq!(
            parsed.tls.map(|tls| tls.keystore),
            Some(crate::tls::KeyStore::PemFile {
                path: "/http.pem".into(),
                key_password: None
            })
        );
        // Plain HTTP alone reads no TLS keys.
        assert!(super::parse(&list("http://127.0.0.1:9644"), true, &props)
            .unwrap()
            .tls
            .is_none());
    }
}
