//! Client-metrics subscriptions (KIP-714): config resources of type CLIENT_METRICS, each naming
//! the metrics clients should push (`metrics`, name prefixes; `*` for all), how often
//! (`interval.ms`) and which clients (`match`: `selector=regex` pairs, all of which must match
//! the whole value). Set with `kafka-client-metrics` or `kafka-configs --entity-type
//! client-metrics`; checked on the controller as Kafka checks them.

use std::collections::BTreeMap;

use fjord_common::errors;
use regex::Regex;

use crate::ConfigType;

/// The keys of a subscription: name, type and default.
pub const CLIENT_METRICS_CONFIGS: [(&str, ConfigType, &str); 3] = [
    ("metrics", ConfigType::List, ""),
    ("interval.ms", ConfigType::Int, "300000"),
    ("match", ConfigType::List, ""),
];

/// The push interval a client gets when no subscription names it.
pub const DEFAULT_PUSH_INTERVAL_MS: i32 = 300_000;
const MIN_INTERVAL_MS: i32 = 100;
const MAX_INTERVAL_MS: i32 = 3_600_000;

/// What a `match` entry compares with a regex.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Selector {
    ClientInstanceId,
    ClientId,
    ClientSoftwareName,
    ClientSoftwareVersion,
    ClientSourceAddress,
    ClientSourcePort,
}

impl Selector {
    fn parse(name: &str) -> Option<Selector> {
        Some(match name {
            "client_instance_id" => Selector::ClientInstanceId,
            "client_id" => Selector::ClientId,
            "client_software_name" => Selector::ClientSoftwareName,
            "client_software_version" => Selector::ClientSoftwareVersion,
            "client_source_address" => Selector::ClientSourceAddress,
            "client_source_port" => Selector::ClientSourcePort,
            _ => return None,
        })
    }
}

/// A subscription, checked.
#[derive(Debug, Clone)]
pub struct Subscription {
    pub name: String,
    /// Metric name prefixes; `*` alone asks for all.
    pub metrics: Vec<String>,
    pub interval_ms: i32,
    /// Each selector with the regex its value must match whole; none: every client.
    pub matches: BTreeMap<Selector, Regex>,
}

impl Subscription {
    /// Whether a client whose selector values `value_of` gives is one this subscription names.
    pub fn matches(&self, value_of: impl Fn(Selector) -> Option<String>) -> bool {
        self.matches.iter().all(|(selector, regex)| {
            value_of(*selector).is_some_and(|value| regex.is_match(&value))
        })
    }
}

/// Why a subscription's configs are refused: Kafka's error code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionRefused {
    pub code: i16,
    pub message: String,
}

fn refused(code: i16, message: impl Into<String>) -> SubscriptionRefused {
    SubscriptionRefused {
        code,
        message: message.into(),
    }
}

/// A list value's elements: split on commas, trimmed; an empty value is an empty list.
fn list(value: &str, key: &str) -> Result<Vec<String>, SubscriptionRefused> {
    if value.trim().is_empty() {
        return Ok(Vec::new());
    }
    let items: Vec<String> = value.split(',').map(|s| s.trim().to_string()).collect();
    if items.iter().any(String::is_empty) {
        return Err(refused(
            errors::INVALID_CONFIG,
            format!("Configuration '{key}' values must not be empty."),
        ));
    }
    for (i, item) in items.iter().enumerate() {
        if items.get(..i).is_some_and(|before| before.contains(item)) {
            return Err(refused(
                errors::INVALID_CONFIG,
                format!("Configuration '{key}' values must not be duplicated."),
            ));
        }
    }
    Ok(items)
}

/// Checks subscription `name` with the keys `configs` sets (the others take their defaults).
pub fn subscription(
    name: &str,
    configs: &BTreeMap<String, String>,
) -> Result<Subscription, SubscriptionRefused> {
    if name.is_empty() {
        return Err(refused(
            errors::INVALID_REQUEST,
            "Subscription name can't be empty",
        ));
    }
    if let Some(unknown) = configs
        .keys()
        .find(|k| !CLIENT_METRICS_CONFIGS.iter().any(|(key, _, _)| key == k))
    {
        return Err(refused(
            errors::INVALID_REQUEST,
            format!("Unknown client metrics configuration: {unknown}"),
        ));
    }
    let get = |key: &str| configs.get(key).map(String::as_str);
    let interval_ms = match get("interval.ms") {
        None => DEFAULT_PUSH_INTERVAL_MS,
        Some(value) => value.trim().parse::<i32>().map_err(|_| {
            refused(
                errors::INVALID_CONFIG,
                format!(
                    "Invalid value {value} for configuration interval.ms: Not a number of type INT"
                ),
            )
        })?,
    };
    if !(MIN_INTERVAL_MS..=MAX_INTERVAL_MS).contains(&interval_ms) {
        return Err(refused(
            errors::INVALID_REQUEST,
            format!(
                "Invalid value for interval.ms, interval must be between {MIN_INTERVAL_MS} and {MAX_INTERVAL_MS}"
            ),
        ));
    }
    let metrics = list(get("metrics").unwrap_or(""), "metrics")?;
    let mut matches = BTreeMap::new();
    for entry in list(get("match").unwrap_or(""), "match")? {
        let illegal = || {
            refused(
                errors::INVALID_CONFIG,
                format!("Illegal client matching pattern: {entry}"),
            )
        };
        let parts: Vec<&str> = entry.split('=').collect();
        let [selector, pattern] = parts.as_slice() else {
            return Err(illegal());
        };
        let selector = Selector::parse(selector.trim()).ok_or_else(illegal)?;
        // The whole value must match, as Java's `Matcher.matches`.
        let regex = Regex::new(&format!("^(?:{})$", pattern.trim())).map_err(|_| illegal())?;
        matches.insert(selector, regex);
    }
    Ok(Subscription {
        name: name.to_string(),
        metrics,
        interval_ms,
        matches,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_fill_what_is_not_set() {
        let s = subscription("s", &configs(&[])).unwrap();
        assert!(s.metrics.is_empty() && s.matches.is_empty());
        assert_eq!(s.interval_ms, DEFAULT_PUSH_INTERVAL_MS);
        assert!(s.matches(|_| None), "no match entry: every client");
    }

    #[test]
    fn matching_needs_every_selector_to_match_the_whole_value() {
        let s = subscription(
            "s",
            &configs(&[
                (
                    "metrics",
                    "org.apache.kafka.producer., org.apache.kafka.consumer.",
                ),
                (
                    "match",
                    "client_id=app-.*, client_software_name=apache-kafka-java",
                ),
            ]),
        )
        .unwrap();
        assert_eq!(s.metrics.len(), 2);
        let client = |id: &'static str, software: &'static str| {
            move |selector| match selector {
                Selector::ClientId => Some(id.to_string()),
                Selector::ClientSoftwareName => Some(software.to_string()),
                _ => None,
            }
        };
        assert!(s.matches(client("app-1", "apache-kafka-java")));
        assert!(!s.matches(client("xapp-1", "apache-kafka-java")));
        assert!(!s.matches(client("app-1", "apache-kafka-java-x")));
        let port = subscription("p", &configs(&[("match", "client_source_port=90")])).unwrap();
        assert!(
            !port.matches(|_| None),
            "a value the client lacks does not match"
        );
    }

    #[test]
    fn what_kafka_refuses_is_refused_with_its_code() {
        let code = |name: &str, pairs: &[(&str, &str)]| {
            subscription(name, &configs(pairs)).unwrap_err().code
        };
        assert_eq!(code("", &[]), errors::INVALID_REQUEST);
        assert_eq!(code("s", &[("colour", "red")]), errors::INVALID_REQUEST);
        assert_eq!(code("s", &[("interval.ms", "99")]), errors::INVALID_REQUEST);
        assert_eq!(
            code("s", &[("interval.ms", "3600001")]),
            errors::INVALID_REQUEST
        );
        assert_eq!(
            code("s", &[("interval.ms", "often")]),
            errors::INVALID_CONFIG
        );
        assert_eq!(
            code("s", &[("match", "client_colour=x")]),
            errors::INVALID_CONFIG
        );
        assert_eq!(code("s", &[("match", "client_id")]), errors::INVALID_CONFIG);
        assert_eq!(
            code("s", &[("match", "client_id=a=b")]),
            errors::INVALID_CONFIG
        );
        assert_eq!(
            code("s", &[("match", "client_id=(")]),
            errors::INVALID_CONFIG
        );
        assert_eq!(code("s", &[("metrics", "a,,b")]), errors::INVALID_CONFIG);
        assert_eq!(code("s", &[("metrics", "a,a")]), errors::INVALID_CONFIG);
        assert!(subscription("s", &configs(&[("interval.ms", "100")])).is_ok());
    }
}
