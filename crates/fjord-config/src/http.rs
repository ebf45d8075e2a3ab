//! `http.listeners`: where a node serves HTTP (metrics, health, the console). Not a Kafka key:
//! Kafka has JMX instead; the default port is Redpanda's admin port.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use crate::{invalid, ConfigError};

/// The node's HTTP listeners as `http.listeners` gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpListeners {
    /// The addresses to bind; empty turns HTTP off.
    pub addresses: Vec<SocketAddr>,
    /// Whether the operator set the key. A default address another process holds (several nodes
    /// on one machine) is passed over with a warning; one the operator chose must bind.
    pub explicit: bool,
}

/// Parses `http.listeners` (its value `value`, the key set or not): a comma-separated list of
/// `http://HOST:PORT`, HOST an IP address (IPv6 in brackets) or `localhost`.
pub(crate) fn parse(value: &[String], explicit: bool) -> Result<HttpListeners, ConfigError> {
    let key = "http.listeners";
    let whole = value.join(",");
    let mut addresses = Vec::new();
    for entry in value.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
        let Some(rest) = entry.strip_prefix("http://") else {
            let reason = if entry.starts_with("https://") {
                "https is not served yet: give http:// and put TLS in front of it".to_string()
            } else {
                format!("`{entry}` is not of the form http://HOST:PORT")
            };
            return Err(invalid(key, &whole, reason));
        };
        let address = socket_address(rest.trim_end_matches('/')).ok_or_else(|| {
            invalid(
                key,
                &whole,
                format!("`{entry}`: HOST:PORT with HOST an IP address or localhost, PORT 0-65535"),
            )
        })?;
        if addresses.contains(&address) {
            return Err(invalid(key, &whole, format!("{address} is given twice")));
        }
        addresses.push(address);
    }
    Ok(HttpListeners {
        addresses,
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

    #[test]
    fn listeners_parse_and_refuse_what_is_not_http_host_port() {
        let parsed = parse(&list("http://127.0.0.1:9644,http://[::1]:9645/"), true).unwrap();
        assert_eq!(
            parsed.addresses,
            vec![
                "127.0.0.1:9644".parse().unwrap(),
                "[::1]:9645".parse().unwrap()
            ]
        );
        assert!(parsed.explicit);
        let local = parse(&list("http://localhost:1"), false).unwrap();
        assert_eq!(local.addresses, vec!["127.0.0.1:1".parse().unwrap()]);
        assert_eq!(parse(&[], true).unwrap().addresses, vec![]);
        assert_eq!(parse(&list(""), true).unwrap().addresses, vec![]);
        for bad in [
            "127.0.0.1:9644",
            "https://127.0.0.1:9644",
            "http://example.com:80",
            "http://127.0.0.1",
            "http://127.0.0.1:70000",
            "http://127.0.0.1:1,http://127.0.0.1:1",
        ] {
            let error = parse(&list(bad), true).unwrap_err();
            assert_eq!(error.key, "http.listeners", "{bad}");
        }
    }
}
