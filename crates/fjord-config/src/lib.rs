//! Broker and topic configuration under Kafka's own names, defaults and validation rules.
//!
//! Pure: takes key/value pairs (from a properties file, overrides, or a CreateTopics request) and
//! returns typed configs or an error naming the key and value. Reading files is the server
//! binary's job.

use std::collections::BTreeMap;
use std::path::PathBuf;

pub mod client_metrics;
mod connection_limits;
pub mod group_configs;
mod http;
mod links;
mod principal;
mod sasl;
mod tls;
pub use connection_limits::{ConnectionLimitsConfig, ListenerLimits};
pub use http::{HttpAddress, HttpListeners, HTTPS_TLS_LISTENER};
pub use links::{LinkLogin, LinkSettings};
pub use principal::PrincipalMapper;
pub use sasl::{
    HttpJwks, JwksEndpoint, JwksValidator, OAuthBearerSettings, SaslMechanism, SaslSettings,
    ScramUser, UnsecuredValidator, PLAIN_LOGIN_MODULE,
};
pub use tls::{ClientAuth, KeyStore, LinkTls, TlsSettings, TlsVersion, TrustStore};

/// Kafka's config value types, numbered as DescribeConfigs (v3+) reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    Boolean = 1,
    String = 2,
    Int = 3,
    Short = 4,
    Long = 5,
    Double = 6,
    List = 7,
    Class = 8,
    Password = 9,
}

/// Where a described config value came from, numbered as DescribeConfigs reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    DynamicTopic = 1,
    DynamicBroker = 2,
    DynamicDefaultBroker = 3,
    StaticBroker = 4,
    Default = 5,
    /// A client-metrics subscription's own value (KIP-714).
    ClientMetrics = 7,
    /// A group's own value (KIP-848, KIP-932).
    Group = 8,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value {value:?} for configuration {key}: {reason}")]
pub struct ConfigError {
    pub key: String,
    pub value: String,
    pub reason: String,
}

/// Why a value given outside the properties (a command-line flag) or a part of one cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unreadable(pub String);

fn invalid(key: &str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.to_string(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// A value check, applied after the type parse.
#[derive(Debug, Clone, Copy)]
enum Check {
    None,
    AtLeast(i64),
    Between(f64, f64),
    OneOf(&'static [&'static str]),
    /// A list whose every element is one of these.
    ListOf(&'static [&'static str]),
    /// `*` or a list of `partition:broker` (the replication throttles' replicas).
    ThrottledReplicas,
}

/// One topic-level config: its name, the broker config that supplies its default, type,
/// Kafka's default, and its check.
#[derive(Debug, Clone, Copy)]
pub struct TopicConfigDef {
    pub name: &'static str,
    pub broker_synonym: Option<&'static str>,
    pub kind: ConfigType,
    pub default: &'static str,
    check: Check,
}

/// Kafka's rack-aware replica selector (KIP-392), the one `replica.selector.class` fjord has.
pub const RACK_AWARE_REPLICA_SELECTOR: &str =
    "org.apache.kafka.common.replica.RackAwareReplicaSelector";

const COMPRESSION_TYPES: &[&str] = &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"];
const TIMESTAMP_TYPES: &[&str] = &["CreateTime", "LogAppendTime"];
const CLEANUP_POLICIES: &[&str] = &["compact", "delete"];

macro_rules! topic_config {
    ($name:expr, $syn:expr, $kind:ident, $default:expr, $check:expr) => {
        TopicConfigDef {
            name: $name,
            broker_synonym: $syn,
            kind: ConfigType::$kind,
            default: $default,
            check: $check,
        }
    };
}

/// Declares every topic config fjord knows, with Kafka 4.x defaults, once: the table
/// [`TOPIC_CONFIGS`] (names, broker synonyms, types, defaults, checks) and the typed
/// [`TopicSettings`] a topic's values are parsed into, a field per key.
macro_rules! topic_configs {
    ($($field:ident: $ty:ty = $name:literal, $syn:expr, $kind:ident, $default:literal, $check:expr;)*) => {
        /// Every topic config fjord knows, with Kafka 4.x defaults.
        pub const TOPIC_CONFIGS: &[TopicConfigDef] =
            &[$(topic_config!($name, $syn, $kind, $default, $check),)*];

        /// A topic's configs, typed: parsed once when its config is resolved, a field per key of
        /// [`TOPIC_CONFIGS`] (the key's name with `_` for `.`).
        #[derive(Debug, Clone, PartialEq)]
        pub struct TopicSettings {
            $(#[doc = concat!("`", $name, "`")] pub $field: $ty,)*
        }

        impl TopicSettings {
            /// Parses each key's value (`value_of`); a value that does not parse (it passed its
            /// check when set, so only a broker default fjord reads more strictly) is the key's
            /// default.
            fn parse<'a>(value_of: impl Fn(&'static str) -> &'a str) -> TopicSettings {
                TopicSettings {
                    $($field: FromConfig::from_config(value_of($name))
                        .or_else(|| FromConfig::from_config($default))
                        .expect(concat!("the default of ", $name, " parses")),)*
                }
            }
        }
    };
}

topic_configs! {
    cleanup_policy: CleanupPolicy = "cleanup.policy", Some("log.cleanup.policy"), List, "delete", Check::ListOf(CLEANUP_POLICIES);
    compression_type: TopicCompression = "compression.type", Some("compression.type"), String, "producer", Check::OneOf(COMPRESSION_TYPES);
    compression_gzip_level: i64 = "compression.gzip.level", Some("compression.gzip.level"), Int, "-1", Check::None;
    compression_lz4_level: i64 = "compression.lz4.level", Some("compression.lz4.level"), Int, "9", Check::AtLeast(1);
    compression_zstd_level: i64 = "compression.zstd.level", Some("compression.zstd.level"), Int, "3", Check::None;
    delete_retention_ms: i64 = "delete.retention.ms", Some("log.cleaner.delete.retention.ms"), Long, "86400000", Check::AtLeast(0);
    file_delete_delay_ms: i64 = "file.delete.delay.ms", Some("log.segment.delete.delay.ms"), Long, "60000", Check::AtLeast(0);
    flush_messages: i64 = "flush.messages", Some("log.flush.interval.messages"), Long, "9223372036854775807", Check::AtLeast(1);
    flush_ms: i64 = "flush.ms", Some("log.flush.interval.ms"), Long, "9223372036854775807", Check::AtLeast(0);
    follower_replication_throttled_replicas: ThrottledReplicas = "follower.replication.throttled.replicas", None, List, "", Check::ThrottledReplicas;
    index_interval_bytes: i64 = "index.interval.bytes", Some("log.index.interval.bytes"), Int, "4096", Check::AtLeast(0);
    leader_replication_throttled_replicas: ThrottledReplicas = "leader.replication.throttled.replicas", None, List, "", Check::ThrottledReplicas;
    max_compaction_lag_ms: i64 = "max.compaction.lag.ms", Some("log.cleaner.max.compaction.lag.ms"), Long, "9223372036854775807", Check::AtLeast(1);
    max_message_bytes: i64 = "max.message.bytes", Some("message.max.bytes"), Int, "1048588", Check::AtLeast(0);
    message_timestamp_after_max_ms: i64 = "message.timestamp.after.max.ms", Some("log.message.timestamp.after.max.ms"), Long, "3600000", Check::AtLeast(0);
    message_timestamp_before_max_ms: i64 = "message.timestamp.before.max.ms", Some("log.message.timestamp.before.max.ms"), Long, "9223372036854775807", Check::AtLeast(0);
    message_timestamp_type: TimestampType = "message.timestamp.type", Some("log.message.timestamp.type"), String, "CreateTime", Check::OneOf(TIMESTAMP_TYPES);
    min_cleanable_dirty_ratio: f64 = "min.cleanable.dirty.ratio", Some("log.cleaner.min.cleanable.ratio"), Double, "0.5", Check::Between(0.0, 1.0);
    min_compaction_lag_ms: i64 = "min.compaction.lag.ms", Some("log.cleaner.min.compaction.lag.ms"), Long, "0", Check::AtLeast(0);
    min_insync_replicas: i64 = "min.insync.replicas", Some("min.insync.replicas"), Int, "1", Check::AtLeast(1);
    preallocate: bool = "preallocate", Some("log.preallocate"), Boolean, "false", Check::None;
    retention_bytes: i64 = "retention.bytes", Some("log.retention.bytes"), Long, "-1", Check::None;
    retention_ms: i64 = "retention.ms", Some("log.retention.ms"), Long, "604800000", Check::AtLeast(-1);
    segment_bytes: i64 = "segment.bytes", Some("log.segment.bytes"), Int, "1073741824", Check::AtLeast(14);
    segment_index_bytes: i64 = "segment.index.bytes", Some("log.index.size.max.bytes"), Int, "10485760", Check::AtLeast(4);
    segment_jitter_ms: i64 = "segment.jitter.ms", Some("log.roll.jitter.ms"), Long, "0", Check::AtLeast(0);
    segment_ms: i64 = "segment.ms", Some("log.roll.ms"), Long, "604800000", Check::AtLeast(1);
    unclean_leader_election_enable: bool = "unclean.leader.election.enable", Some("unclean.leader.election.enable"), Boolean, "false", Check::None;
}

/// A config's value as its typed field ([`TopicSettings`], [`BrokerSettings`]) holds it.
trait FromConfig: Sized {
    fn from_config(value: &str) -> Option<Self>;

    /// The field of a key neither set nor defaulted: only an `Option` has one.
    fn unset() -> Option<Self> {
        None
    }
}

/// A key's value (None: neither set nor defaulted) as its typed field holds it.
fn typed<T: FromConfig>(value: Option<&str>) -> Option<T> {
    value.map_or_else(T::unset, T::from_config)
}

macro_rules! from_config_by_parse {
    ($($ty:ty),*) => {
        $(impl FromConfig for $ty {
            fn from_config(value: &str) -> Option<Self> {
                value.trim().parse().ok()
            }
        })*
    };
}

from_config_by_parse!(i16, i32, i64, f64);

impl FromConfig for String {
    fn from_config(value: &str) -> Option<Self> {
        Some(value.to_string())
    }
}

impl FromConfig for Vec<String> {
    fn from_config(value: &str) -> Option<Self> {
        Some(split_list(value).into_iter().map(str::to_string).collect())
    }
}

/// A key without a default: `None` until set.
impl<T: FromConfig> FromConfig for Option<T> {
    fn from_config(value: &str) -> Option<Self> {
        T::from_config(value).map(Some)
    }

    fn unset() -> Option<Self> {
        Some(None)
    }
}

impl FromConfig for bool {
    fn from_config(value: &str) -> Option<Self> {
        match value.trim() {
            v if v.eq_ignore_ascii_case("true") => Some(true),
            v if v.eq_ignore_ascii_case("false") => Some(false),
            _ => None,
        }
    }
}

impl FromConfig for ThrottledReplicas {
    fn from_config(value: &str) -> Option<Self> {
        throttled_replicas(value)
    }
}

/// `cleanup.policy`: `delete`, `compact`, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    pub compact: bool,
    /// Retention by time and size applies.
    pub delete: bool,
}

impl FromConfig for CleanupPolicy {
    fn from_config(value: &str) -> Option<Self> {
        let policies = split_list(value);
        if policies.iter().any(|p| !CLEANUP_POLICIES.contains(p)) {
            return None;
        }
        Some(CleanupPolicy {
            compact: policies.contains(&"compact"),
            delete: policies.contains(&"delete"),
        })
    }
}

/// `compression.type`: keep the producer's codec, or recompress to this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicCompression {
    Producer,
    Uncompressed,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl FromConfig for TopicCompression {
    fn from_config(value: &str) -> Option<Self> {
        Some(match value.trim() {
            "producer" => TopicCompression::Producer,
            "uncompressed" => TopicCompression::Uncompressed,
            "gzip" => TopicCompression::Gzip,
            "snappy" => TopicCompression::Snappy,
            "lz4" => TopicCompression::Lz4,
            "zstd" => TopicCompression::Zstd,
            _ => return None,
        })
    }
}

/// `message.timestamp.type`: the producer's timestamps, or the broker's at append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

impl FromConfig for TimestampType {
    fn from_config(value: &str) -> Option<Self> {
        match value.trim() {
            "CreateTime" => Some(TimestampType::CreateTime),
            "LogAppendTime" => Some(TimestampType::LogAppendTime),
            _ => None,
        }
    }
}

pub fn topic_config_def(name: &str) -> Option<&'static TopicConfigDef> {
    TOPIC_CONFIGS.iter().find(|def| def.name == name)
}

fn check_value(key: &str, value: &str, kind: ConfigType, check: Check) -> Result<(), ConfigError> {
    let as_long = || {
        value
            .trim()
            .parse::<i64>()
            .map_err(|_| invalid(key, value, "expected an integer"))
    };
    match kind {
        ConfigType::Boolean => {
            if !value.trim().eq_ignore_ascii_case("true")
                && !value.trim().eq_ignore_ascii_case("false")
            {
                return Err(invalid(key, value, "expected true or false"));
            }
        }
        ConfigType::Int => {
            let v = as_long()?;
            if v < i32::MIN as i64 || v > i32::MAX as i64 {
                return Err(invalid(key, value, "out of range for an int"));
            }
        }
        ConfigType::Short => {
            let v = as_long()?;
            if v < i16::MIN as i64 || v > i16::MAX as i64 {
                return Err(invalid(key, value, "out of range for a short"));
            }
        }
        ConfigType::Long => {
            as_long()?;
        }
        ConfigType::Double => {
            value
                .trim()
                .parse::<f64>()
                .map_err(|_| invalid(key, value, "expected a number"))?;
        }
        ConfigType::String | ConfigType::List | ConfigType::Class | ConfigType::Password => {}
    }
    match check {
        Check::None => Ok(()),
        Check::AtLeast(min) => {
            if as_long()? < min {
                Err(invalid(key, value, format!("value must be at least {min}")))
            } else {
                Ok(())
            }
        }
        Check::Between(lo, hi) => {
            let v: f64 = value
                .trim()
                .parse()
                .map_err(|_| invalid(key, value, "expected a number"))?;
            if v < lo || v > hi {
                Err(invalid(
                    key,
                    value,
                    format!("value must be between {lo} and {hi}"),
                ))
            } else {
                Ok(())
            }
        }
        Check::OneOf(allowed) => {
            if allowed.contains(&value.trim()) {
                Ok(())
            } else {
                Err(invalid(
                    key,
                    value,
                    format!("must be one of {}", allowed.join(", ")),
                ))
            }
        }
        Check::ThrottledReplicas => match throttled_replicas(value) {
            Some(_) => Ok(()),
            None => Err(invalid(
                key,
                value,
                "must be * or a list of replicas as partition:broker,partition:broker,...",
            )),
        },
        Check::ListOf(allowed) => {
            let items: Vec<&str> = split_list(value);
            if items.is_empty() {
                return Err(invalid(key, value, "must not be empty"));
            }
            match items.iter().find(|item| !allowed.contains(item)) {
                Some(bad) => Err(invalid(
                    key,
                    value,
                    format!("{bad:?} is not one of {}", allowed.join(", ")),
                )),
                None => Ok(()),
            }
        }
    }
}

pub fn split_list(value: &str) -> Vec<&str> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// Which replicas a replication throttle (`leader.replication.throttled.replicas`,
/// `follower.replication.throttled.replicas`) names: every one (`*`), or these (partition, broker)
/// pairs; None when the value is malformed.
pub fn throttled_replicas(value: &str) -> Option<ThrottledReplicas> {
    if value.trim() == "*" {
        return Some(ThrottledReplicas::All);
    }
    split_list(value)
        .into_iter()
        .map(|entry| {
            let (partition, broker) = entry.split_once(':')?;
            let number = |s: &str| {
                let s = s.trim();
                (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| s.parse::<i32>().ok())
                    .flatten()
            };
            Some((number(partition)?, number(broker)?))
        })
        .collect::<Option<Vec<_>>>()
        .map(ThrottledReplicas::These)
}

/// The replicas a replication throttle names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThrottledReplicas {
    All,
    /// (partition, broker) pairs.
    These(Vec<(i32, i32)>),
}

impl ThrottledReplicas {
    /// Whether partition `partition`'s replica on `broker` is throttled.
    pub fn names(&self, partition: i32, broker: i32) -> bool {
        match self {
            ThrottledReplicas::All => true,
            ThrottledReplicas::These(pairs) => pairs.contains(&(partition, broker)),
        }
    }
}

/// Validates one topic-level config override (CreateTopics, AlterConfigs).
pub fn validate_topic_config(name: &str, value: &str) -> Result<(), ConfigError> {
    let def = topic_config_def(name).ok_or_else(|| invalid(name, value, "unknown topic config"))?;
    check_value(name, value, def.kind, def.check)
}

/// Kafka's security protocols, numbered as broker registrations carry them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext = 0,
    Ssl = 1,
    SaslPlaintext = 2,
    SaslSsl = 3,
}

impl SecurityProtocol {
    pub fn parse(name: &str) -> Option<SecurityProtocol> {
        match name.trim().to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Some(SecurityProtocol::Plaintext),
            "SSL" => Some(SecurityProtocol::Ssl),
            "SASL_PLAINTEXT" => Some(SecurityProtocol::SaslPlaintext),
            "SASL_SSL" => Some(SecurityProtocol::SaslSsl),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }
}

/// `listener.security.protocol.map`: listener name → security protocol. As in Kafka, names
/// compare case-insensitively, and when the map is not set explicitly the controller listeners
/// (`controller.listener.names`, and `CONTROLLER`) that are not protocol names speak PLAINTEXT.
fn security_protocol_map(
    props: &BTreeMap<String, String>,
    value: &str,
) -> Result<BTreeMap<String, SecurityProtocol>, ConfigError> {
    const KEY: &str = "listener.security.protocol.map";
    let mut map = BTreeMap::new();
    for item in split_list(value) {
        let (name, protocol) = item
            .split_once(':')
            .ok_or_else(|| invalid(KEY, value, format!("{item:?} is not NAME:PROTOCOL")))?;
        let protocol = SecurityProtocol::parse(protocol).ok_or_else(|| {
            invalid(
                KEY,
                value,
                format!(
                    "{protocol:?} is not a security protocol \
                     (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)"
                ),
            )
        })?;
        if map
            .insert(name.trim().to_ascii_uppercase(), protocol)
            .is_some()
        {
            return Err(invalid(
                KEY,
                value,
                format!("listener {name} appears twice"),
            ));
        }
    }
    if !props.contains_key(KEY) {
        let controllers = props
            .get("controller.listener.names")
            .map(|v| split_list(v))
            .unwrap_or_default();
        for name in controllers.into_iter().chain(["CONTROLLER"]) {
            let name = name.to_ascii_uppercase();
            if SecurityProtocol::parse(&name).is_none() {
                map.entry(name).or_insert(SecurityProtocol::Plaintext);
            }
        }
    }
    Ok(map)
}

/// A listener, `NAME://host:port`, with the security protocol its name maps to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub host: String,
    pub port: u16,
    pub security_protocol: SecurityProtocol,
}

impl Listener {
    /// Parses a listener list; every name must have a security protocol in `protocols`.
    pub fn parse_list(
        key: &str,
        value: &str,
        protocols: &BTreeMap<String, SecurityProtocol>,
    ) -> Result<Vec<Listener>, ConfigError> {
        let mut listeners = Vec::new();
        for item in split_list(value) {
            let (name, rest) = item
                .split_once("://")
                .ok_or_else(|| invalid(key, value, format!("{item:?} is not NAME://host:port")))?;
            let (host, port) = rest
                .rsplit_once(':')
                .ok_or_else(|| invalid(key, value, format!("{item:?} has no port")))?;
            let port: u16 = port
                .parse()
                .map_err(|_| invalid(key, value, format!("{item:?} has an invalid port")))?;
            let host = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            if name.is_empty() {
                return Err(invalid(key, value, "listener name must not be empty"));
            }
            if listeners.iter().any(|l: &Listener| l.name == name) {
                return Err(invalid(
                    key,
                    value,
                    format!("listener name {name} appears twice"),
                ));
            }
            let security_protocol =
                *protocols.get(&name.to_ascii_uppercase()).ok_or_else(|| {
                    invalid(
                        key,
                        value,
                        format!(
                            "no security protocol defined for listener {name} \
                         (listener.security.protocol.map)"
                        ),
                    )
                })?;
            listeners.push(Listener {
                name: name.to_string(),
                host,
                port,
                security_protocol,
            });
        }
        if listeners.is_empty() {
            return Err(invalid(key, value, "no listener given"));
        }
        Ok(listeners)
    }
}

/// The consumer group protocol's timeouts against their bounds, as Kafka's group coordinator
/// checks them at start: each bound pair ordered, the default heartbeat interval and session
/// timeout within their bounds, and the interval below the timeout.
fn check_consumer_group_bounds(s: &BrokerSettings) -> Result<(), ConfigError> {
    const SESSION: &str = "group.consumer.session.timeout.ms";
    const MIN_SESSION: &str = "group.consumer.min.session.timeout.ms";
    const MAX_SESSION: &str = "group.consumer.max.session.timeout.ms";
    const HEARTBEAT: &str = "group.consumer.heartbeat.interval.ms";
    const MIN_HEARTBEAT: &str = "group.consumer.min.heartbeat.interval.ms";
    const MAX_HEARTBEAT: &str = "group.consumer.max.heartbeat.interval.ms";
    let (heartbeat, session) = (
        s.group_consumer_heartbeat_interval_ms,
        s.group_consumer_session_timeout_ms,
    );
    // (key, its value, holds, what it must be)
    let rules = [
        (
            MAX_HEARTBEAT,
            s.group_consumer_max_heartbeat_interval_ms,
            s.group_consumer_max_heartbeat_interval_ms
                >= s.group_consumer_min_heartbeat_interval_ms,
            format!("at least {MIN_HEARTBEAT}"),
        ),
        (
            HEARTBEAT,
            heartbeat,
            heartbeat >= s.group_consumer_min_heartbeat_interval_ms,
            format!("at least {MIN_HEARTBEAT}"),
        ),
        (
            HEARTBEAT,
            heartbeat,
            heartbeat <= s.group_consumer_max_heartbeat_interval_ms,
            format!("at most {MAX_HEARTBEAT}"),
        ),
        (
            MAX_SESSION,
            s.group_consumer_max_session_timeout_ms,
            s.group_consumer_max_session_timeout_ms >= s.group_consumer_min_session_timeout_ms,
            format!("at least {MIN_SESSION}"),
        ),
        (
            SESSION,
            session,
            session >= s.group_consumer_min_session_timeout_ms,
            format!("at least {MIN_SESSION}"),
        ),
        (
            SESSION,
            session,
            session <= s.group_consumer_max_session_timeout_ms,
            format!("at most {MAX_SESSION}"),
        ),
        (
            HEARTBEAT,
            heartbeat,
            heartbeat < session,
            format!("below {SESSION}"),
        ),
    ];
    match rules.into_iter().find(|(_, _, holds, _)| !holds) {
        Some((key, value, _, bound)) => {
            Err(invalid(key, &value.to_string(), format!("must be {bound}")))
        }
        None => Ok(()),
    }
}

/// The value of `key` for `listener` and the key it was found under: its `listener.name.`
/// override, else the key itself, else Kafka's default. Empty counts as unset, as Kafka treats
/// an empty location or password.
pub(crate) fn listener_value(
    props: &BTreeMap<String, String>,
    listener: &str,
    key: &'static str,
) -> (String, Option<String>) {
    let prefixed = format!("listener.name.{}.{key}", listener.to_ascii_lowercase());
    let (found_as, value) = match props.get(&prefixed) {
        Some(value) => (prefixed, Some(value.clone())),
        None => (
            key.to_string(),
            props
                .get(key)
                .cloned()
                .or_else(|| broker_default(key).map(str::to_string)),
        ),
    };
    (found_as, value.filter(|v| !v.trim().is_empty()))
}

/// The key a per-listener override (`listener.name.<listener>.<key>`) sets, if `key` is one
/// fjord reads per listener.
fn listener_override_of(key: &str) -> Option<&str> {
    let rest = key.strip_prefix("listener.name.")?;
    let (_, key) = rest.split_once('.')?;
    if key.starts_with("ssl.")
        || key.starts_with("sasl.oauthbearer.")
        || [
            "sasl.enabled.mechanisms",
            "max.connections",
            "max.connection.creation.rate",
        ]
        .contains(&key)
    {
        return Some(key);
    }
    // `<mechanism>.sasl.jaas.config`, `<mechanism>.connections.max.reauth.ms`,
    // `oauthbearer.sasl.oauthbearer.*`
    let (_, key) = key.split_once('.')?;
    ([
        "sasl.jaas.config",
        "connections.max.reauth.ms",
        "sasl.server.callback.handler.class",
    ]
    .contains(&key)
        || key.starts_with("sasl.oauthbearer."))
    .then_some(key)
}

/// What each secured listener serves: TLS for SSL and SASL_SSL, SASL for SASL_PLAINTEXT and
/// SASL_SSL.
fn secure_listeners(
    props: &BTreeMap<String, String>,
    listeners: &[Listener],
) -> Result<SecuredListeners, ConfigError> {
    let mut secured = SecuredListeners::default();
    for listener in listeners {
        let protocol = listener.security_protocol;
        if matches!(protocol, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl) {
            secured.tls.insert(
                listener.name.clone(),
                tls::listener_tls(props, &listener.name)?,
            );
        }
        if matches!(
            protocol,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        ) {
            secured.sasl.insert(
                listener.name.clone(),
                sasl::listener_sasl(props, &listener.name)?,
            );
        }
    }
    Ok(secured)
}

/// How a node of a cluster connects to the other nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLinks {
    /// To the other brokers (and, from the metadata quorum's leader, to its learners).
    pub inter_broker: LinkSettings,
    /// To the controllers.
    pub controller: LinkSettings,
}

/// The links of a node of a cluster (None for a cluster of one: a lone node is not asked for a
/// truststore or a login it would never use).
fn node_links(
    props: &BTreeMap<String, String>,
    get: &dyn Fn(&str) -> String,
    cluster: &ClusterConfig,
    secured: &SecuredListeners,
) -> Result<Option<NodeLinks>, ConfigError> {
    if cluster.voters.is_empty() && cluster.bootstrap_servers.is_empty() {
        return Ok(None);
    }
    let protocols = security_protocol_map(props, &get("listener.security.protocol.map"))?;
    let link = |listener: &str, link| {
        links::link_settings(
            props,
            &protocols,
            listener,
            link,
            secured.sasl.get(listener),
        )
    };
    let inter_broker = link(
        &cluster.inter_broker_listener_name,
        links::Link::InterBroker,
    )?;
    let controller = match cluster.controller_listener_names.first() {
        Some(name) => link(name, links::Link::Controller)?,
        None => LinkSettings::plaintext("CONTROLLER"),
    };
    Ok(Some(NodeLinks {
        inter_broker,
        controller,
    }))
}

/// The settings of the listeners that are not PLAINTEXT, by listener name.
#[derive(Debug, Default)]
struct SecuredListeners {
    tls: BTreeMap<String, TlsSettings>,
    sasl: BTreeMap<String, SaslSettings>,
}

/// A broker config key fjord knows: type, Kafka's default (fjord's where it differs, said why),
/// and its check. Keys not here but known to Kafka are accepted with a warning that fjord
/// ignores them; unknown keys are warned about.
struct BrokerConfigDef {
    name: &'static str,
    kind: ConfigType,
    default: Option<&'static str>,
    check: Check,
}

/// Declares every broker config fjord knows once: the table `BROKER_CONFIGS` (names, types,
/// defaults, checks) and the typed [`BrokerSettings`] the broker's values are parsed into, a field
/// per key. A key without a default is an `Option` field: unset, it is `None`.
macro_rules! broker_configs {
    ($($field:ident: $ty:ty = $name:literal, $kind:ident, $default:expr, $check:expr;)*) => {
        const BROKER_CONFIGS: &[BrokerConfigDef] = &[$(BrokerConfigDef {
            name: $name,
            kind: ConfigType::$kind,
            default: $default,
            check: $check,
        },)*];

        /// A broker's configs, typed: a field per key of Kafka's broker configs that fjord knows
        /// (the key's name with `_` for `.`), each the value set, else the key's default. Parsed
        /// once, from the properties at start ([`BrokerConfig::settings`]) or from the static keys
        /// merged with the dynamic ones ([`BrokerSettings::from_values`] of
        /// [`BrokerConfig::merged`]) when those change, so that no reader parses a string.
        #[derive(Debug, Clone, PartialEq)]
        pub struct BrokerSettings {
            $(#[doc = concat!("`", $name, "`")] pub $field: $ty,)*
        }

        impl BrokerSettings {
            /// Parses each key's value (`value_of`, None when unset): set, else the key's
            /// default. A value that does not parse (it passed its check when set, so none
            /// should) is the key's default.
            fn parse<'a>(value_of: impl Fn(&'static str) -> Option<&'a str>) -> BrokerSettings {
                BrokerSettings {
                    $($field: typed(value_of($name).or($default))
                        .or_else(|| typed($default))
                        .expect(concat!("the default of ", $name, " parses")),)*
                }
            }
        }
    };
}

broker_configs! {
    node_id: i32 = "node.id", Int, Some("1"), Check::AtLeast(0);
    broker_id: Option<i32> = "broker.id", Int, None, Check::AtLeast(0);
    process_roles: Vec<String> = "process.roles", List, Some("broker,controller"), Check::ListOf(&["broker", "controller"]);
    // fjord binds loopback by default so a bare `fjord server` is safe on any machine.
    listeners: Vec<String> = "listeners", List, Some("PLAINTEXT://127.0.0.1:9092"), Check::None;
    advertised_listeners: Option<Vec<String>> = "advertised.listeners", List, None, Check::None;
    listener_security_protocol_map: Vec<String> = "listener.security.protocol.map", List, Some("SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"), Check::None;
    controller_listener_names: Option<Vec<String>> = "controller.listener.names", List, None, Check::None;
    controller_quorum_voters: Option<Vec<String>> = "controller.quorum.voters", List, None, Check::None;
    controller_quorum_bootstrap_servers: Option<Vec<String>> = "controller.quorum.bootstrap.servers", List, None, Check::None;
    controller_quorum_auto_join_enable: bool = "controller.quorum.auto.join.enable", Boolean, Some("false"), Check::None;
    inter_broker_listener_name: Option<String> = "inter.broker.listener.name", String, None, Check::None;
    log_dir: String = "log.dir", String, Some("./fjord-data"), Check::None;
    log_dirs: Option<Vec<String>> = "log.dirs", List, None, Check::None;
    metadata_log_dir: Option<String> = "metadata.log.dir", String, None, Check::None;
    metadata_log_max_record_bytes_between_snapshots: i64 = "metadata.log.max.record.bytes.between.snapshots", Long, Some("20971520"), Check::AtLeast(1);
    metadata_log_max_snapshot_interval_ms: i64 = "metadata.log.max.snapshot.interval.ms", Long, Some("3600000"), Check::AtLeast(0);
    metadata_max_retention_bytes: i64 = "metadata.max.retention.bytes", Long, Some("104857600"), Check::None;
    num_partitions: i32 = "num.partitions", Int, Some("1"), Check::AtLeast(1);
    default_replication_factor: i32 = "default.replication.factor", Int, Some("1"), Check::AtLeast(1);
    auto_create_topics_enable: bool = "auto.create.topics.enable", Boolean, Some("true"), Check::None;
    delete_topic_enable: bool = "delete.topic.enable", Boolean, Some("true"), Check::None;
    message_max_bytes: i32 = "message.max.bytes", Int, Some("1048588"), Check::AtLeast(0);
    log_segment_bytes: i32 = "log.segment.bytes", Int, Some("1073741824"), Check::AtLeast(14);
    log_roll_ms: Option<i64> = "log.roll.ms", Long, None, Check::AtLeast(1);
    log_roll_hours: i32 = "log.roll.hours", Int, Some("168"), Check::AtLeast(1);
    log_roll_jitter_ms: Option<i64> = "log.roll.jitter.ms", Long, None, Check::AtLeast(0);
    log_roll_jitter_hours: i32 = "log.roll.jitter.hours", Int, Some("0"), Check::AtLeast(0);
    log_retention_ms: Option<i64> = "log.retention.ms", Long, None, Check::AtLeast(-1);
    log_retention_minutes: Option<i32> = "log.retention.minutes", Int, None, Check::AtLeast(-1);
    log_retention_hours: i32 = "log.retention.hours", Int, Some("168"), Check::AtLeast(-1);
    log_retention_bytes: i64 = "log.retention.bytes", Long, Some("-1"), Check::None;
    log_retention_check_interval_ms: i64 = "log.retention.check.interval.ms", Long, Some("300000"), Check::AtLeast(1);
    log_cleanup_policy: CleanupPolicy = "log.cleanup.policy", List, Some("delete"), Check::ListOf(CLEANUP_POLICIES);
    log_index_size_max_bytes: i32 = "log.index.size.max.bytes", Int, Some("10485760"), Check::AtLeast(4);
    log_index_interval_bytes: i32 = "log.index.interval.bytes", Int, Some("4096"), Check::AtLeast(0);
    log_flush_interval_messages: Option<i64> = "log.flush.interval.messages", Long, None, Check::AtLeast(1);
    log_flush_interval_ms: Option<i64> = "log.flush.interval.ms", Long, None, Check::AtLeast(0);
    log_flush_scheduler_interval_ms: i64 = "log.flush.scheduler.interval.ms", Long, Some("9223372036854775807"), Check::None;
    log_flush_offset_checkpoint_interval_ms: i32 = "log.flush.offset.checkpoint.interval.ms", Int, Some("60000"), Check::AtLeast(0);
    log_segment_delete_delay_ms: i64 = "log.segment.delete.delay.ms", Long, Some("60000"), Check::AtLeast(0);
    log_preallocate: bool = "log.preallocate", Boolean, Some("false"), Check::None;
    log_message_timestamp_type: TimestampType = "log.message.timestamp.type", String, Some("CreateTime"), Check::OneOf(TIMESTAMP_TYPES);
    log_message_timestamp_before_max_ms: i64 = "log.message.timestamp.before.max.ms", Long, Some("9223372036854775807"), Check::AtLeast(0);
    log_message_timestamp_after_max_ms: i64 = "log.message.timestamp.after.max.ms", Long, Some("3600000"), Check::AtLeast(0);
    log_cleaner_delete_retention_ms: i64 = "log.cleaner.delete.retention.ms", Long, Some("86400000"), Check::AtLeast(0);
    log_cleaner_min_compaction_lag_ms: i64 = "log.cleaner.min.compaction.lag.ms", Long, Some("0"), Check::AtLeast(0);
    log_cleaner_max_compaction_lag_ms: i64 = "log.cleaner.max.compaction.lag.ms", Long, Some("9223372036854775807"), Check::AtLeast(1);
    log_cleaner_min_cleanable_ratio: f64 = "log.cleaner.min.cleanable.ratio", Double, Some("0.5"), Check::Between(0.0, 1.0);
    log_cleaner_enable: bool = "log.cleaner.enable", Boolean, Some("true"), Check::None;
    log_cleaner_threads: i32 = "log.cleaner.threads", Int, Some("1"), Check::AtLeast(0);
    log_cleaner_dedupe_buffer_size: i64 = "log.cleaner.dedupe.buffer.size", Long, Some("134217728"), Check::AtLeast(0);
    log_cleaner_io_buffer_size: i32 = "log.cleaner.io.buffer.size", Int, Some("524288"), Check::AtLeast(0);
    log_cleaner_io_buffer_load_factor: f64 = "log.cleaner.io.buffer.load.factor", Double, Some("0.9"), Check::Between(0.01, 1.0);
    log_cleaner_io_max_bytes_per_second: f64 = "log.cleaner.io.max.bytes.per.second", Double, Some("1.7976931348623157E308"), Check::Between(1.0, f64::MAX);
    log_cleaner_backoff_ms: i64 = "log.cleaner.backoff.ms", Long, Some("15000"), Check::AtLeast(0);
    replica_alter_log_dirs_io_max_bytes_per_second: i64 = "replica.alter.log.dirs.io.max.bytes.per.second", Long, Some("9223372036854775807"), Check::AtLeast(0);
    // Replication throttles (dynamic; kafka-reassign-partitions --throttle sets them): bytes per
    // second over the replicas the topics' throttled-replicas configs name, out of sync ones only.
    leader_replication_throttled_rate: i64 = "leader.replication.throttled.rate", Long, Some("9223372036854775807"), Check::AtLeast(0);
    follower_replication_throttled_rate: i64 = "follower.replication.throttled.rate", Long, Some("9223372036854775807"), Check::AtLeast(0);
    replication_quota_window_num: i32 = "replication.quota.window.num", Int, Some("11"), Check::AtLeast(1);
    replication_quota_window_size_seconds: i32 = "replication.quota.window.size.seconds", Int, Some("1"), Check::AtLeast(1);
    // Client quotas (set per user and client id with kafka-configs) are measured over this many
    // samples of this many seconds.
    quota_window_num: i32 = "quota.window.num", Int, Some("11"), Check::AtLeast(1);
    quota_window_size_seconds: i32 = "quota.window.size.seconds", Int, Some("1"), Check::AtLeast(1);
    controller_quota_window_num: i32 = "controller.quota.window.num", Int, Some("11"), Check::AtLeast(1);
    controller_quota_window_size_seconds: i32 = "controller.quota.window.size.seconds", Int, Some("1"), Check::AtLeast(1);
    compression_type: TopicCompression = "compression.type", String, Some("producer"), Check::OneOf(COMPRESSION_TYPES);
    compression_gzip_level: i32 = "compression.gzip.level", Int, Some("-1"), Check::None;
    compression_lz4_level: i32 = "compression.lz4.level", Int, Some("9"), Check::AtLeast(1);
    compression_zstd_level: i32 = "compression.zstd.level", Int, Some("3"), Check::None;
    num_replica_fetchers: i32 = "num.replica.fetchers", Int, Some("1"), Check::AtLeast(1);
    replica_fetch_max_bytes: i32 = "replica.fetch.max.bytes", Int, Some("1048576"), Check::AtLeast(0);
    replica_fetch_response_max_bytes: i32 = "replica.fetch.response.max.bytes", Int, Some("10485760"), Check::AtLeast(0);
    replica_fetch_min_bytes: i32 = "replica.fetch.min.bytes", Int, Some("1"), Check::AtLeast(1);
    replica_fetch_wait_max_ms: i32 = "replica.fetch.wait.max.ms", Int, Some("500"), Check::AtLeast(0);
    replica_fetch_backoff_ms: i32 = "replica.fetch.backoff.ms", Int, Some("1000"), Check::AtLeast(0);
    replica_socket_timeout_ms: i32 = "replica.socket.timeout.ms", Int, Some("30000"), Check::AtLeast(1);
    replica_lag_time_max_ms: i64 = "replica.lag.time.max.ms", Long, Some("30000"), Check::AtLeast(0);
    auto_leader_rebalance_enable: bool = "auto.leader.rebalance.enable", Boolean, Some("true"), Check::None;
    leader_imbalance_check_interval_seconds: i64 = "leader.imbalance.check.interval.seconds", Long, Some("300"), Check::AtLeast(1);
    leader_imbalance_per_broker_percentage: i32 = "leader.imbalance.per.broker.percentage", Int, Some("10"), Check::AtLeast(0);
    unclean_leader_election_interval_ms: i64 = "unclean.leader.election.interval.ms", Long, Some("300000"), Check::AtLeast(1);
    min_insync_replicas: i32 = "min.insync.replicas", Int, Some("1"), Check::AtLeast(1);
    unclean_leader_election_enable: bool = "unclean.leader.election.enable", Boolean, Some("false"), Check::None;
    socket_request_max_bytes: i32 = "socket.request.max.bytes", Int, Some("104857600"), Check::AtLeast(1);
    socket_send_buffer_bytes: i32 = "socket.send.buffer.bytes", Int, Some("102400"), Check::None;
    socket_receive_buffer_bytes: i32 = "socket.receive.buffer.bytes", Int, Some("102400"), Check::None;
    connections_max_idle_ms: i64 = "connections.max.idle.ms", Long, Some("600000"), Check::None;
    // Connection limits (`connection_limits`); Integer.MAX_VALUE is none.
    max_connections: i32 = "max.connections", Int, Some("2147483647"), Check::AtLeast(0);
    max_connection_creation_rate: i32 = "max.connection.creation.rate", Int, Some("2147483647"), Check::AtLeast(0);
    max_connections_per_ip: i32 = "max.connections.per.ip", Int, Some("2147483647"), Check::AtLeast(0);
    max_connections_per_ip_overrides: String = "max.connections.per.ip.overrides", String, Some(""), Check::None;
    num_network_threads: i32 = "num.network.threads", Int, Some("3"), Check::AtLeast(1);
    num_io_threads: i32 = "num.io.threads", Int, Some("8"), Check::AtLeast(1);
    num_recovery_threads_per_data_dir: i32 = "num.recovery.threads.per.data.dir", Int, Some("2"), Check::AtLeast(1);
    queued_max_requests: i32 = "queued.max.requests", Int, Some("500"), Check::AtLeast(1);
    producer_id_expiration_ms: i32 = "producer.id.expiration.ms", Int, Some("86400000"), Check::AtLeast(1);
    producer_id_expiration_check_interval_ms: i32 = "producer.id.expiration.check.interval.ms", Int, Some("600000"), Check::AtLeast(1);
    offsets_topic_num_partitions: i32 = "offsets.topic.num.partitions", Int, Some("50"), Check::AtLeast(1);
    offsets_topic_replication_factor: i16 = "offsets.topic.replication.factor", Short, Some("3"), Check::AtLeast(1);
    transaction_state_log_replication_factor: i16 = "transaction.state.log.replication.factor", Short, Some("3"), Check::AtLeast(1);
    transaction_state_log_min_isr: i32 = "transaction.state.log.min.isr", Int, Some("2"), Check::AtLeast(1);
    share_coordinator_state_topic_num_partitions: i32 = "share.coordinator.state.topic.num.partitions", Int, Some("50"), Check::AtLeast(1);
    share_coordinator_state_topic_replication_factor: i16 = "share.coordinator.state.topic.replication.factor", Short, Some("3"), Check::AtLeast(1);
    share_coordinator_state_topic_min_isr: i16 = "share.coordinator.state.topic.min.isr", Short, Some("2"), Check::AtLeast(1);
    share_coordinator_state_topic_segment_bytes: i32 = "share.coordinator.state.topic.segment.bytes", Int, Some("104857600"), Check::AtLeast(1);
    share_coordinator_snapshot_update_records_per_snapshot: i32 = "share.coordinator.snapshot.update.records.per.snapshot", Int, Some("500"), Check::Between(0.0, 500.0);
    add_partitions_to_txn_retry_backoff_ms: i32 = "add.partitions.to.txn.retry.backoff.ms", Int, Some("20"), Check::AtLeast(1);
    add_partitions_to_txn_retry_backoff_max_ms: i32 = "add.partitions.to.txn.retry.backoff.max.ms", Int, Some("100"), Check::AtLeast(0);
    group_initial_rebalance_delay_ms: i32 = "group.initial.rebalance.delay.ms", Int, Some("3000"), Check::None;
    group_min_session_timeout_ms: i32 = "group.min.session.timeout.ms", Int, Some("6000"), Check::AtLeast(0);
    group_max_session_timeout_ms: i32 = "group.max.session.timeout.ms", Int, Some("1800000"), Check::AtLeast(0);
    group_max_size: i32 = "group.max.size", Int, Some("2147483647"), Check::AtLeast(1);
    group_coordinator_rebalance_protocols: Vec<String> = "group.coordinator.rebalance.protocols", List, Some("classic,consumer"), Check::ListOf(&["classic", "consumer", "share", "streams"]);
    group_consumer_session_timeout_ms: i32 = "group.consumer.session.timeout.ms", Int, Some("45000"), Check::AtLeast(1);
    group_consumer_min_session_timeout_ms: i32 = "group.consumer.min.session.timeout.ms", Int, Some("45000"), Check::AtLeast(1);
    group_consumer_max_session_timeout_ms: i32 = "group.consumer.max.session.timeout.ms", Int, Some("60000"), Check::AtLeast(1);
    group_consumer_heartbeat_interval_ms: i32 = "group.consumer.heartbeat.interval.ms", Int, Some("5000"), Check::AtLeast(1);
    group_consumer_min_heartbeat_interval_ms: i32 = "group.consumer.min.heartbeat.interval.ms", Int, Some("5000"), Check::AtLeast(1);
    group_consumer_max_heartbeat_interval_ms: i32 = "group.consumer.max.heartbeat.interval.ms", Int, Some("15000"), Check::AtLeast(1);
    group_consumer_max_size: i32 = "group.consumer.max.size", Int, Some("2147483647"), Check::AtLeast(1);
    group_consumer_assignors: Vec<String> = "group.consumer.assignors", List, Some("uniform,range"), Check::ListOf(&["uniform", "range"]);
    group_share_session_timeout_ms: i32 = "group.share.session.timeout.ms", Int, Some("45000"), Check::AtLeast(1);
    group_share_min_session_timeout_ms: i32 = "group.share.min.session.timeout.ms", Int, Some("45000"), Check::AtLeast(1);
    group_share_max_session_timeout_ms: i32 = "group.share.max.session.timeout.ms", Int, Some("60000"), Check::AtLeast(1);
    group_share_heartbeat_interval_ms: i32 = "group.share.heartbeat.interval.ms", Int, Some("5000"), Check::AtLeast(1);
    group_share_min_heartbeat_interval_ms: i32 = "group.share.min.heartbeat.interval.ms", Int, Some("5000"), Check::AtLeast(1);
    group_share_max_heartbeat_interval_ms: i32 = "group.share.max.heartbeat.interval.ms", Int, Some("15000"), Check::AtLeast(1);
    group_share_max_size: i32 = "group.share.max.size", Int, Some("200"), Check::Between(1.0, 1000.0);
    group_share_delivery_count_limit: i32 = "group.share.delivery.count.limit", Int, Some("5"), Check::Between(2.0, 10.0);
    group_share_min_delivery_count_limit: i32 = "group.share.min.delivery.count.limit", Int, Some("2"), Check::Between(2.0, 5.0);
    group_share_max_delivery_count_limit: i32 = "group.share.max.delivery.count.limit", Int, Some("10"), Check::Between(5.0, 25.0);
    group_share_record_lock_duration_ms: i32 = "group.share.record.lock.duration.ms", Int, Some("30000"), Check::Between(1000.0, 3600000.0);
    group_share_min_record_lock_duration_ms: i32 = "group.share.min.record.lock.duration.ms", Int, Some("15000"), Check::Between(1000.0, 30000.0);
    group_share_max_record_lock_duration_ms: i32 = "group.share.max.record.lock.duration.ms", Int, Some("60000"), Check::Between(30000.0, 3600000.0);
    group_share_partition_max_record_locks: i32 = "group.share.partition.max.record.locks", Int, Some("2000"), Check::Between(100.0, 10000.0);
    group_share_min_partition_max_record_locks: i32 = "group.share.min.partition.max.record.locks", Int, Some("100"), Check::Between(100.0, 2000.0);
    group_share_max_partition_max_record_locks: i32 = "group.share.max.partition.max.record.locks", Int, Some("4000"), Check::Between(2000.0, 10000.0);
    group_share_max_share_sessions: i32 = "group.share.max.share.sessions", Int, Some("2000"), Check::AtLeast(1);
    offsets_retention_minutes: i32 = "offsets.retention.minutes", Int, Some("10080"), Check::AtLeast(1);
    offsets_retention_check_interval_ms: i64 = "offsets.retention.check.interval.ms", Long, Some("600000"), Check::AtLeast(1);
    offsets_commit_timeout_ms: i32 = "offsets.commit.timeout.ms", Int, Some("5000"), Check::AtLeast(1);
    offset_metadata_max_bytes: i32 = "offset.metadata.max.bytes", Int, Some("4096"), Check::AtLeast(0);
    offsets_topic_segment_bytes: i32 = "offsets.topic.segment.bytes", Int, Some("104857600"), Check::AtLeast(1);
    transaction_state_log_num_partitions: i32 = "transaction.state.log.num.partitions", Int, Some("50"), Check::AtLeast(1);
    transaction_state_log_segment_bytes: i32 = "transaction.state.log.segment.bytes", Int, Some("104857600"), Check::AtLeast(1);
    transaction_max_timeout_ms: i32 = "transaction.max.timeout.ms", Int, Some("900000"), Check::AtLeast(1);
    transactional_id_expiration_ms: i32 = "transactional.id.expiration.ms", Int, Some("604800000"), Check::AtLeast(1);
    max_request_partition_size_limit: i32 = "max.request.partition.size.limit", Int, Some("2000"), Check::AtLeast(1);
    cluster_id: Option<String> = "cluster.id", String, None, Check::None;
    broker_rack: Option<String> = "broker.rack", String, None, Check::None;
    replica_selector_class: Option<String> = "replica.selector.class", Class, None, Check::OneOf(&[RACK_AWARE_REPLICA_SELECTOR]);
    broker_session_timeout_ms: i32 = "broker.session.timeout.ms", Int, Some("9000"), Check::AtLeast(1);
    broker_heartbeat_interval_ms: i32 = "broker.heartbeat.interval.ms", Int, Some("2000"), Check::AtLeast(1);
    controlled_shutdown_enable: bool = "controlled.shutdown.enable", Boolean, Some("true"), Check::None;
    // TLS (see `tls`): each may also be set for one listener as `listener.name.<name>.<key>`.
    ssl_keystore_type: String = "ssl.keystore.type", String, Some("JKS"), Check::None;
    ssl_keystore_location: Option<String> = "ssl.keystore.location", String, None, Check::None;
    ssl_keystore_password: Option<String> = "ssl.keystore.password", Password, None, Check::None;
    ssl_keystore_key: Option<String> = "ssl.keystore.key", Password, None, Check::None;
    ssl_keystore_certificate_chain: Option<String> = "ssl.keystore.certificate.chain", Password, None, Check::None;
    ssl_key_password: Option<String> = "ssl.key.password", Password, None, Check::None;
    ssl_truststore_type: String = "ssl.truststore.type", String, Some("JKS"), Check::None;
    ssl_truststore_location: Option<String> = "ssl.truststore.location", String, None, Check::None;
    ssl_truststore_password: Option<String> = "ssl.truststore.password", Password, None, Check::None;
    ssl_truststore_certificates: Option<String> = "ssl.truststore.certificates", Password, None, Check::None;
    ssl_client_auth: String = "ssl.client.auth", String, Some("none"), Check::OneOf(&["required", "requested", "none"]);
    ssl_enabled_protocols: Vec<String> = "ssl.enabled.protocols", List, Some("TLSv1.2,TLSv1.3"), Check::None;
    ssl_cipher_suites: Option<Vec<String>> = "ssl.cipher.suites", List, None, Check::None;
    // How a client certificate's name becomes its principal's (`principal`).
    ssl_principal_mapping_rules: String = "ssl.principal.mapping.rules", String, Some("DEFAULT"), Check::None;
    // Whether this node's own links check the other node's host name against its certificate.
    ssl_endpoint_identification_algorithm: String = "ssl.endpoint.identification.algorithm", String, Some("https"), Check::None;
    // SASL (see `sasl`): the mechanisms and JAAS text may also be set per listener.
    sasl_enabled_mechanisms: Vec<String> = "sasl.enabled.mechanisms", List, Some("GSSAPI"), Check::None;
    // Read only as `listener.name.<listener>.<mechanism>.sasl.jaas.config`, as Kafka's brokers do.
    sasl_jaas_config: Option<String> = "sasl.jaas.config", Password, None, Check::None;
    sasl_mechanism_inter_broker_protocol: String = "sasl.mechanism.inter.broker.protocol", String, Some("GSSAPI"), Check::None;
    sasl_mechanism_controller_protocol: String = "sasl.mechanism.controller.protocol", String, Some("GSSAPI"), Check::None;
    sasl_server_max_receive_size: i32 = "sasl.server.max.receive.size", Int, Some("524288"), Check::AtLeast(1);
    connection_failed_authentication_delay_ms: i32 = "connection.failed.authentication.delay.ms", Int, Some("100"), Check::AtLeast(0);
    // 0: sessions last as long as their connections. Also set per listener and mechanism as
    // `listener.name.<listener>.<mechanism>.connections.max.reauth.ms`.
    connections_max_reauth_ms: i64 = "connections.max.reauth.ms", Long, Some("0"), Check::None;
    // Read only as `listener.name.<listener>.oauthbearer.sasl.server.callback.handler.class`:
    // which of Kafka's validators OAUTHBEARER tokens are checked as (see `sasl`).
    sasl_server_callback_handler_class: Option<String> = "sasl.server.callback.handler.class", Class, None, Check::None;
    // OAUTHBEARER's signed-JWT validation (see `sasl::JwksValidator`); each may also be set per
    // listener and per listener and mechanism.
    sasl_oauthbearer_jwks_endpoint_url: Option<String> = "sasl.oauthbearer.jwks.endpoint.url", String, None, Check::None;
    sasl_oauthbearer_expected_audience: Option<Vec<String>> = "sasl.oauthbearer.expected.audience", List, None, Check::None;
    sasl_oauthbearer_expected_issuer: Option<String> = "sasl.oauthbearer.expected.issuer", String, None, Check::None;
    sasl_oauthbearer_sub_claim_name: String = "sasl.oauthbearer.sub.claim.name", String, Some("sub"), Check::None;
    sasl_oauthbearer_scope_claim_name: String = "sasl.oauthbearer.scope.claim.name", String, Some("scope"), Check::None;
    sasl_oauthbearer_clock_skew_seconds: i32 = "sasl.oauthbearer.clock.skew.seconds", Int, Some("30"), Check::AtLeast(0);
    sasl_oauthbearer_jwks_endpoint_refresh_ms: i64 = "sasl.oauthbearer.jwks.endpoint.refresh.ms", Long, Some("3600000"), Check::AtLeast(0);
    sasl_oauthbearer_jwks_endpoint_retry_backoff_ms: i64 = "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", Long, Some("100"), Check::AtLeast(0);
    sasl_oauthbearer_jwks_endpoint_retry_backoff_max_ms: i64 = "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", Long, Some("10000"), Check::AtLeast(0);
    // Authorization (see `AuthorizerConfig`): off unless Kafka's StandardAuthorizer is named.
    authorizer_class_name: String = "authorizer.class.name", String, Some(""), Check::None;
    super_users: Option<String> = "super.users", String, None, Check::None;
    allow_everyone_if_no_acl_found: bool = "allow.everyone.if.no.acl.found", Boolean, Some("false"), Check::None;
    // Delegation tokens (see `BrokerConfig::delegation_tokens`): off unless the secret key is set,
    // which must be the same on every broker and controller.
    delegation_token_secret_key: Option<String> = "delegation.token.secret.key", Password, None, Check::None;
    delegation_token_max_lifetime_ms: i64 = "delegation.token.max.lifetime.ms", Long, Some("604800000"), Check::AtLeast(1);
    delegation_token_expiry_time_ms: i64 = "delegation.token.expiry.time.ms", Long, Some("86400000"), Check::AtLeast(1);
    delegation_token_expiry_check_interval_ms: i64 = "delegation.token.expiry.check.interval.ms", Long, Some("3600000"), Check::AtLeast(1);
    // KIP-714: the largest client-metrics push a broker accepts (compressed, and decompressed).
    telemetry_max_bytes: i32 = "telemetry.max.bytes", Int, Some("1048576"), Check::AtLeast(1);
    // fjord's own: its HTTP listener (metrics, health, console), on loopback unless told.
    http_listeners: Vec<String> = "http.listeners", List, Some("http://127.0.0.1:9644"), Check::None;
    // fjord's own: per-partition series on /metrics (log size, segments, offsets); off for
    // clusters with partitions enough to swamp a Prometheus.
    metrics_per_partition_enable: bool = "metrics.per.partition.enable", Boolean, Some("true"), Check::None;
    // fjord's own: the format of the log lines, and the time past which a request is logged.
    log_format: String = "log.format", String, Some("text"), Check::OneOf(&["text", "json"]);
    log_slow_request_ms: i64 = "log.slow.request.ms", Long, Some("1000"), Check::AtLeast(0);
    // fjord's own: the web console on the HTTP listener, and whether it may change anything.
    console_enable: bool = "console.enable", Boolean, Some("true"), Check::None;
    console_read_only: bool = "console.read.only", Boolean, Some("true"), Check::None;
}

/// Delegation tokens' settings (Kafka's `delegation.token.*` keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegationTokenConfig {
    /// `delegation.token.secret.key`: what every token's HMAC is made with.
    pub secret_key: String,
    /// `delegation.token.max.lifetime.ms`: no renewal takes a token past this from its issue.
    pub max_lifetime_ms: i64,
    /// `delegation.token.expiry.time.ms`: how long a token lives before it must be renewed.
    pub expiry_time_ms: i64,
    /// `delegation.token.expiry.check.interval.ms`: how often expired tokens are removed.
    pub expiry_check_interval_ms: i64,
}

/// The one authorizer fjord serves, by the class name Kafka's KRaft brokers give it.
pub const STANDARD_AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";

/// The authorizer's settings, when `authorizer.class.name` turns it on: ACLs from the metadata
/// log decide every request, with Kafka's StandardAuthorizer semantics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizerConfig {
    /// `super.users`: principals (`User:admin`) allowed everything, whatever the ACLs say.
    pub super_users: Vec<String>,
    /// `allow.everyone.if.no.acl.found`: a resource without any ACL is open to all.
    pub allow_everyone_if_no_acl_found: bool,
}

/// `authorizer.class.name` and its settings: None when it is empty, as Kafka runs without
/// one; any class but the StandardAuthorizer stops the broker, naming it.
fn authorizer_config(settings: &BrokerSettings) -> Result<Option<AuthorizerConfig>, ConfigError> {
    let class = settings.authorizer_class_name.trim();
    if class.is_empty() {
        return Ok(None);
    }
    if class != STANDARD_AUTHORIZER {
        return Err(invalid(
            "authorizer.class.name",
            class,
            format!(
                "fjord's authorizer is Kafka's {STANDARD_AUTHORIZER}; no other class can be loaded"
            ),
        ));
    }
    let super_users = settings
        .super_users
        .as_deref()
        .unwrap_or_default()
        .split(';')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(|u| match u.split_once(':') {
            Some((kind, _)) if !kind.is_empty() => Ok(u.to_string()),
            _ => Err(invalid(
                "super.users",
                u,
                "each principal is written Type:name (User:admin), separated by ';'",
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(AuthorizerConfig {
        super_users,
        allow_everyone_if_no_acl_found: settings.allow_everyone_if_no_acl_found,
    }))
}

/// Broker keys fjord accepts, so that Kafka's own config files start it, but does not act upon
/// yet; each one set is named in a warning at start. (The cluster keys come with clustering.)
const NOT_ACTED_UPON: &[&str] = &[
    "log.roll.jitter.ms",
    "log.roll.jitter.hours",
    "log.flush.scheduler.interval.ms",
    "log.flush.offset.checkpoint.interval.ms",
    "log.preallocate",
    "compression.gzip.level",
    "compression.lz4.level",
    "compression.zstd.level",
    "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes",
    "num.network.threads",
    "num.io.threads",
    "num.recovery.threads.per.data.dir",
    "queued.max.requests",
    "group.coordinator.rebalance.protocols",
];

/// One voter of the controller quorum, as `controller.quorum.voters` names it (`id@host:port`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voter {
    pub id: i32,
    pub host: String,
    pub port: u16,
}

/// How this broker's followers fetch from their leaders (Kafka's `replica.*` keys), values
/// already checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicationConfig {
    /// Fetcher connections per source broker; a partition always uses the same one.
    pub num_replica_fetchers: usize,
    /// Bytes asked of each partition per fetch (at least one batch comes regardless).
    pub fetch_max_bytes: i32,
    /// Bytes asked of a whole fetch response.
    pub fetch_response_max_bytes: i32,
    pub fetch_min_bytes: i32,
    /// How long the leader may hold a fetch that has less than `fetch_min_bytes`.
    pub fetch_wait_max_ms: i32,
    /// Pause after a failed fetch before the next.
    pub fetch_backoff_ms: u64,
    pub socket_timeout_ms: u64,
    /// A follower not caught up for this long leaves the ISR.
    pub lag_time_max_ms: i64,
    /// The replication throttles measure their rate over this many samples of this many ms.
    pub quota_window_num: usize,
    pub quota_window_ms: i64,
}

/// The log cleaner's `log.cleaner.*` settings, values already checked. The broker hands them to
/// `fjord_storage::LogCleaner` as its `CleanerConfig` (the config crate does not depend on
/// storage).
#[derive(Debug, Clone, PartialEq)]
pub struct CleanerConfig {
    /// log.cleaner.enable
    pub enable: bool,
    /// log.cleaner.threads
    pub threads: usize,
    /// log.cleaner.dedupe.buffer.size: the key maps of all threads together.
    pub dedupe_buffer_size: u64,
    /// log.cleaner.io.buffer.load.factor
    pub dedupe_buffer_load_factor: f64,
    /// log.cleaner.io.buffer.size: read and write buffers of all threads together.
    pub io_buffer_size: usize,
    /// log.cleaner.io.max.bytes.per.second
    pub io_max_bytes_per_second: f64,
    /// log.cleaner.backoff.ms: the sleep when no log needs cleaning.
    pub backoff_ms: u64,
}

/// Bytes one key takes in the cleaner's key map (a 128-bit hash and an offset), by which
/// `log.cleaner.dedupe.buffer.size` is checked. The same as
/// `fjord_storage::cleaner::offset_map::BYTES_PER_ENTRY`; the broker's tests check that.
pub const CLEANER_BYTES_PER_KEY: u64 = 24;

impl BrokerSettings {
    /// The settings of broker values `values` (a key's value there, else its default): the
    /// static keys merged with the dynamic ones ([`BrokerConfig::merged`]), parsed once per
    /// change.
    pub fn from_values(values: &BTreeMap<String, String>) -> BrokerSettings {
        BrokerSettings::parse(|key| values.get(key).map(String::as_str))
    }

    /// The log cleaner's `log.cleaner.*` settings, refused as at start when the key map would
    /// not hold a single key (a cleaner that never makes progress, as Kafka refuses it).
    pub fn cleaner_config(&self) -> Result<CleanerConfig, ConfigError> {
        let cleaner = CleanerConfig {
            enable: self.log_cleaner_enable,
            threads: self.log_cleaner_threads.max(0) as usize,
            dedupe_buffer_size: self.log_cleaner_dedupe_buffer_size.max(0) as u64,
            dedupe_buffer_load_factor: self.log_cleaner_io_buffer_load_factor,
            io_buffer_size: self.log_cleaner_io_buffer_size.max(0) as usize,
            io_max_bytes_per_second: self.log_cleaner_io_max_bytes_per_second,
            backoff_ms: self.log_cleaner_backoff_ms.max(0) as u64,
        };
        let per_thread_keys = cleaner.dedupe_buffer_size as f64
            / cleaner.threads.max(1) as f64
            / CLEANER_BYTES_PER_KEY as f64
            * cleaner.dedupe_buffer_load_factor;
        if cleaner.enable && cleaner.threads > 0 && per_thread_keys <= 1.0 {
            return Err(invalid(
                "log.cleaner.dedupe.buffer.size",
                &self.log_cleaner_dedupe_buffer_size.to_string(),
                "the cleaner's key map would not hold even one key: raise it or lower \
                 log.cleaner.threads",
            ));
        }
        Ok(cleaner)
    }

    /// `replica.alter.log.dirs.io.max.bytes.per.second`: the log dir mover's read rate.
    pub fn log_dir_move_rate(&self) -> f64 {
        self.replica_alter_log_dirs_io_max_bytes_per_second as f64
    }

    /// The replication throttles' rates, `leader.replication.throttled.rate` and
    /// `follower.replication.throttled.rate`, in bytes per second.
    pub fn replication_throttled_rates(&self) -> (f64, f64) {
        (
            self.leader_replication_throttled_rate as f64,
            self.follower_replication_throttled_rate as f64,
        )
    }
}

/// This node's part in the cluster, from Kafka's KRaft keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// `process.roles` has `broker`: this node hosts partitions and serves clients.
    pub broker: bool,
    /// `process.roles` has `controller`: this node is a voter of the metadata quorum.
    pub controller: bool,
    /// `controller.quorum.voters`, by id. Empty: no quorum configured — this node is a cluster of
    /// one, its own lone voter (a bare `fjord server`).
    pub voters: Vec<Voter>,
    /// `controller.quorum.bootstrap.servers` (`host:port` each) when no voters are named: a
    /// dynamic quorum (KIP-853) whose voters are its own membership, found through these.
    pub bootstrap_servers: Vec<String>,
    /// `controller.quorum.auto.join.enable`: a controller of a dynamic quorum that is not a voter
    /// asks to become one.
    pub quorum_auto_join: bool,
    /// `controller.listener.names`: the listeners controllers are reached on.
    pub controller_listener_names: Vec<String>,
    /// The listener other nodes reach this broker on: `inter.broker.listener.name`, else the
    /// first listener that is not a controller listener.
    pub inter_broker_listener_name: String,
    /// `broker.rack`, sent with the registration.
    pub rack: Option<String>,
    /// `replica.selector.class` is Kafka's rack-aware selector: a leader sends consumers that
    /// name a rack (`client.rack`) to an in-sync replica in it (KIP-392).
    pub rack_aware_reads: bool,
    /// `broker.session.timeout.ms`: a broker not heard from for this long is fenced.
    pub broker_session_timeout_ms: i64,
    /// `broker.heartbeat.interval.ms`: how often a broker tells the controller it is alive.
    pub broker_heartbeat_interval_ms: i64,
    /// `controlled.shutdown.enable`: a stopping broker first has its leadership moved away.
    pub controlled_shutdown_enable: bool,
    /// `metadata.log.max.record.bytes.between.snapshots`: this node snapshots its metadata image
    /// once records of this size were applied since the last snapshot.
    pub metadata_max_bytes_between_snapshots: u64,
    /// `metadata.log.max.snapshot.interval.ms`: and once the last snapshot is this old, if
    /// anything was applied since (0: never for age alone).
    pub metadata_max_snapshot_interval_ms: i64,
    /// `metadata.max.retention.bytes`: a metadata log larger than this drops every entry its
    /// snapshot covers (-1: no limit).
    pub metadata_max_retention_bytes: i64,
}

/// A node's roles and id, as the quorum checks read them.
struct Roles {
    broker: bool,
    controller: bool,
    node_id: i32,
}

/// `controller.quorum.voters`: `id@host:port` entries, each id once.
fn parse_voters(value: &str) -> Result<Vec<Voter>, ConfigError> {
    let mut voters: Vec<Voter> = Vec::new();
    for item in split_list(value) {
        let bad = |why: &str| {
            invalid(
                "controller.quorum.voters",
                value,
                format!("{item:?} {why}; expected id@host:port"),
            )
        };
        let (id, address) = item.split_once('@').ok_or_else(|| bad("has no '@'"))?;
        let id: i32 = id.trim().parse().map_err(|_| bad("has no valid node id"))?;
        let (host, port) = address.rsplit_once(':').ok_or_else(|| bad("has no port"))?;
        let port: u16 = port.parse().map_err(|_| bad("has an invalid port"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        if id < 0 || host.is_empty() {
            return Err(bad("is incomplete"));
        }
        if voters.iter().any(|v| v.id == id) {
            return Err(invalid(
                "controller.quorum.voters",
                value,
                format!("node id {id} appears twice"),
            ));
        }
        voters.push(Voter { id, host, port });
    }
    Ok(voters)
}

/// `controller.quorum.bootstrap.servers`: `host:port` entries.
fn parse_bootstrap_servers(value: &str) -> Result<Vec<String>, ConfigError> {
    let mut servers = Vec::new();
    for item in split_list(value) {
        let bad = |why: &str| {
            invalid(
                "controller.quorum.bootstrap.servers",
                value,
                format!("{item:?} {why}; expected host:port"),
            )
        };
        let (host, port) = item.rsplit_once(':').ok_or_else(|| bad("has no port"))?;
        let port: u16 = port.parse().map_err(|_| bad("has an invalid port"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() || port == 0 {
            return Err(bad("is incomplete"));
        }
        servers.push(fjord_common::host_port(host, port));
    }
    Ok(servers)
}

/// The quorum's keys against the node's roles, as Kafka checks them at start: a quorum named
/// needs controller listeners; a controller is a voter of a static quorum and listens on a
/// controller listener; a node without the role is neither; a node with one role needs a
/// quorum named.
fn check_quorum_roles(
    roles: &Roles,
    voters: &[Voter],
    bootstrap_servers: &[String],
    listeners: &[Listener],
    controller_listener_names: &[String],
    get: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    let Roles {
        broker,
        controller,
        node_id,
    } = *roles;
    let names_value = get("controller.listener.names");
    let is_controller_listener = |l: &Listener| controller_listener_names.contains(&l.name);
    if voters.is_empty() && bootstrap_servers.is_empty() {
        if !(broker && controller) {
            return Err(invalid(
                "controller.quorum.voters",
                &get("controller.quorum.voters"),
                "a node with only one role needs the controller quorum named (controller.quorum.voters or controller.quorum.bootstrap.servers)",
            ));
        }
        return Ok(());
    }
    if controller_listener_names.is_empty() {
        return Err(invalid(
            "controller.listener.names",
            &names_value,
            "must be set when controller.quorum.voters or controller.quorum.bootstrap.servers is",
        ));
    }
    if controller && !voters.is_empty() && !voters.iter().any(|v| v.id == node_id) {
        return Err(invalid(
            "controller.quorum.voters",
            &get("controller.quorum.voters"),
            format!("this node has the controller role, so its node.id {node_id} must be one of the voters"),
        ));
    }
    if !controller && voters.iter().any(|v| v.id == node_id) {
        return Err(invalid(
            "process.roles",
            &get("process.roles"),
            format!("node {node_id} is a voter in controller.quorum.voters, so it must have the controller role"),
        ));
    }
    if controller && !listeners.iter().any(is_controller_listener) {
        return Err(invalid(
            "listeners",
            &get("listeners"),
            format!("a controller must listen on one of controller.listener.names ({names_value})"),
        ));
    }
    if !controller && listeners.iter().any(is_controller_listener) {
        return Err(invalid(
            "listeners",
            &get("listeners"),
            format!("controller.listener.names ({names_value}) must not appear in listeners on a node without the controller role"),
        ));
    }
    Ok(())
}

/// `inter.broker.listener.name`: a broker's must name a listener other than the controller
/// listeners (unset: the first such). A controller without the broker role still names the
/// listener brokers are reached on (it tells each learner's address from it): as set, else
/// Kafka's PLAINTEXT.
fn inter_broker_listener(
    broker: bool,
    listeners: &[Listener],
    is_controller_listener: &dyn Fn(&Listener) -> bool,
    get: &dyn Fn(&str) -> String,
) -> Result<String, ConfigError> {
    let inter_value = get("inter.broker.listener.name");
    if !broker {
        return Ok(if inter_value.is_empty() {
            "PLAINTEXT".to_string()
        } else {
            inter_value
        });
    }
    let name = if inter_value.is_empty() {
        listeners
            .iter()
            .find(|l| !is_controller_listener(l))
            .map(|l| l.name.clone())
    } else {
        Some(inter_value.clone())
    };
    match name {
        Some(n)
            if listeners
                .iter()
                .any(|l| l.name == n && !is_controller_listener(l)) =>
        {
            Ok(n)
        }
        _ => Err(invalid(
            "inter.broker.listener.name",
            &inter_value,
            "a broker needs a listener other than the controller listeners, and this must name one",
        )),
    }
}

impl ClusterConfig {
    /// Checks the KRaft keys together, as Kafka does at start. `get` gives a key's raw value,
    /// which the structured keys are parsed from and errors name.
    fn from_properties(
        node_id: i32,
        listeners: &[Listener],
        settings: &BrokerSettings,
        get: &dyn Fn(&str) -> String,
    ) -> Result<ClusterConfig, ConfigError> {
        let roles = &settings.process_roles;
        if roles.is_empty() {
            return Err(invalid(
                "process.roles",
                &get("process.roles"),
                "must name broker, controller or both",
            ));
        }
        let has_role = |role: &str| roles.iter().any(|r| r == role);
        let (broker, controller) = (has_role("broker"), has_role("controller"));
        let voters = parse_voters(&get("controller.quorum.voters"))?;
        // A static quorum wins over a dynamic one when both are named, as in Kafka.
        let bootstrap_servers = if voters.is_empty() {
            parse_bootstrap_servers(&get("controller.quorum.bootstrap.servers"))?
        } else {
            Vec::new()
        };
        let quorum_auto_join = settings.controller_quorum_auto_join_enable;
        if quorum_auto_join && !controller {
            return Err(invalid(
                "controller.quorum.auto.join.enable",
                &get("controller.quorum.auto.join.enable"),
                "is only supported when process.roles contains the controller role",
            ));
        }
        let controller_listener_names = settings
            .controller_listener_names
            .clone()
            .unwrap_or_default();
        let roles = Roles {
            broker,
            controller,
            node_id,
        };
        check_quorum_roles(
            &roles,
            &voters,
            &bootstrap_servers,
            listeners,
            &controller_listener_names,
            get,
        )?;
        let is_controller_listener = |l: &Listener| controller_listener_names.contains(&l.name);
        let inter_broker_listener_name =
            inter_broker_listener(broker, listeners, &is_controller_listener, get)?;
        let rack = settings.broker_rack.as_deref().map(str::trim);
        Ok(ClusterConfig {
            broker,
            controller,
            voters,
            bootstrap_servers,
            quorum_auto_join,
            controller_listener_names,
            inter_broker_listener_name,
            rack: rack.filter(|r| !r.is_empty()).map(str::to_string),
            rack_aware_reads: settings.replica_selector_class.as_deref().map(str::trim)
                == Some(RACK_AWARE_REPLICA_SELECTOR),
            broker_session_timeout_ms: settings.broker_session_timeout_ms.into(),
            broker_heartbeat_interval_ms: settings.broker_heartbeat_interval_ms.into(),
            controlled_shutdown_enable: settings.controlled_shutdown_enable,
            metadata_max_bytes_between_snapshots: settings
                .metadata_log_max_record_bytes_between_snapshots
                .max(1) as u64,
            metadata_max_snapshot_interval_ms: settings.metadata_log_max_snapshot_interval_ms,
            metadata_max_retention_bytes: settings.metadata_max_retention_bytes,
        })
    }

    /// The `kraft.version` this node's quorum runs at, as Kafka reports it: 1 for a dynamic
    /// quorum (KIP-853, its voters changed through the log), 0 for voters fixed by
    /// `controller.quorum.voters` (or a node alone).
    pub fn kraft_version(&self) -> i16 {
        if self.bootstrap_servers.is_empty() {
            0
        } else {
            1
        }
    }

    /// Whether `name` is one of the controller listeners.
    pub fn is_controller_listener(&self, name: &str) -> bool {
        self.controller_listener_names.iter().any(|n| n == name)
    }
}

/// The typed broker configuration, built once at start-up and immutable after.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub node_id: i32,
    pub listeners: Vec<Listener>,
    /// One per listener, in the same order: its `advertised.listeners` entry, or the listener
    /// itself when it has none.
    pub advertised_listeners: Vec<Listener>,
    pub log_dirs: Vec<PathBuf>,
    pub metadata_log_dir: PathBuf,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub auto_create_topics_enable: bool,
    pub delete_topic_enable: bool,
    pub socket_request_max_bytes: usize,
    pub connections_max_idle_ms: i64,
    pub log_retention_check_interval_ms: i64,
    /// How long a deleted partition's dir (renamed `-delete`) stays before it is removed.
    pub log_segment_delete_delay_ms: i64,
    pub producer_id_expiration_ms: i64,
    pub producer_id_expiration_check_interval_ms: i64,
    /// The log cleaner's `log.cleaner.*` settings.
    pub cleaner: CleanerConfig,
    /// This node's roles and the controller quorum it belongs to.
    pub cluster: ClusterConfig,
    /// Each SSL and SASL_SSL listener's TLS settings, by listener name.
    listener_tls: BTreeMap<String, TlsSettings>,
    /// Each SASL_PLAINTEXT and SASL_SSL listener's SASL settings, by listener name.
    listener_sasl: BTreeMap<String, SaslSettings>,
    /// How this node connects to the others; None for a cluster of one, which has no others.
    pub links: Option<NodeLinks>,
    /// The authorizer, when `authorizer.class.name` names one.
    pub authorizer: Option<AuthorizerConfig>,
    /// `max.connections` and the other connection limits.
    connection_limits: ConnectionLimitsConfig,
    /// `http.listeners`: where metrics, health and the console are served.
    pub http_listeners: HttpListeners,
    /// SCRAM users to add at start when missing (`fjord server --add-scram`, not a properties
    /// key: fjord has no format step).
    pub add_scram: Vec<ScramUser>,
    /// Every key the operator set, after validation; topic defaults come from here.
    pub explicit: BTreeMap<String, String>,
    /// `explicit` over the defaults, typed once.
    settings: BrokerSettings,
}

impl BrokerConfig {
    /// The TLS settings of listener `name`: Some for an SSL or SASL_SSL listener.
    pub fn listener_tls(&self, name: &str) -> Option<&TlsSettings> {
        self.listener_tls.get(name)
    }

    /// The SASL settings of listener `name`: Some for a SASL_PLAINTEXT or SASL_SSL listener.
    pub fn listener_sasl(&self, name: &str) -> Option<&SaslSettings> {
        self.listener_sasl.get(name)
    }

    /// Delegation tokens' settings: None (tokens disabled, as in Kafka) unless
    /// `delegation.token.secret.key` is set and not empty.
    pub fn delegation_tokens(&self) -> Option<DelegationTokenConfig> {
        let s = &self.settings;
        let secret_key = s
            .delegation_token_secret_key
            .clone()
            .filter(|k| !k.is_empty())?;
        Some(DelegationTokenConfig {
            secret_key,
            max_lifetime_ms: s.delegation_token_max_lifetime_ms,
            expiry_time_ms: s.delegation_token_expiry_time_ms,
            expiry_check_interval_ms: s.delegation_token_expiry_check_interval_ms,
        })
    }

    /// The advertised endpoint of the listener named `name` (the first listener's for a name
    /// this broker does not listen on).
    pub fn advertised_listener(&self, name: &str) -> &Listener {
        self.advertised_listeners
            .iter()
            .find(|l| l.name == name)
            .unwrap_or(&self.advertised_listeners[0])
    }

    /// The effective value of a broker key as a string (DescribeConfigs, the dynamic layers):
    /// explicit, else the default. Code that acts on a value reads [`Self::settings`].
    pub fn get(&self, key: &str) -> Option<String> {
        self.explicit
            .get(key)
            .cloned()
            .or_else(|| broker_default(key).map(str::to_string))
    }

    /// The static configs (the properties over the defaults), typed.
    pub fn settings(&self) -> &BrokerSettings {
        &self.settings
    }

    /// The static keys overlaid with the dynamic ones, as Kafka merges them before reading a
    /// value: cluster-wide default over the properties file, this broker's over both.
    pub fn merged(&self, dynamic: &DynamicBrokerConfig) -> BTreeMap<String, String> {
        let mut merged = self.explicit.clone();
        merged.extend(dynamic.default.iter().map(|(k, v)| (k.clone(), v.clone())));
        merged.extend(dynamic.node.iter().map(|(k, v)| (k.clone(), v.clone())));
        merged
    }

    /// The settings with the dynamic layers applied: parsed once per change of them.
    pub fn merged_settings(&self, dynamic: &DynamicBrokerConfig) -> BrokerSettings {
        BrokerSettings::from_values(&self.merged(dynamic))
    }

    /// Each layer's keys, highest first.
    fn layers<'a>(
        &'a self,
        dynamic: &'a DynamicBrokerConfig,
    ) -> [(ConfigSource, &'a BTreeMap<String, String>); 3] {
        [
            (ConfigSource::DynamicBroker, &dynamic.node),
            (ConfigSource::DynamicDefaultBroker, &dynamic.default),
            (ConfigSource::StaticBroker, &self.explicit),
        ]
    }

    /// Kafka's synonym list for `names` (a broker key and the keys that also set it, most precise
    /// first): every layer in turn, each name in turn, then the built-in defaults.
    pub fn synonyms(
        &self,
        dynamic: &DynamicBrokerConfig,
        names: &[&str],
    ) -> Vec<(String, String, ConfigSource)> {
        let mut out = Vec::new();
        for (source, layer) in self.layers(dynamic) {
            for name in names {
                if let Some(value) = layer.get(*name) {
                    out.push((name.to_string(), value.clone(), source));
                }
            }
        }
        for name in names {
            if let Some(default) = broker_default(name) {
                out.push((name.to_string(), default.to_string(), ConfigSource::Default));
            }
        }
        out
    }

    /// The broker-level default for a topic config and where it came from, from `merged` (see
    /// [`Self::merged`]). Time configs have several broker spellings (ms / minutes / hours); the
    /// most precise one set wins, as in Kafka; the source is that of the first synonym.
    fn topic_default(
        &self,
        dynamic: &DynamicBrokerConfig,
        merged: &BTreeMap<String, String>,
        def: &TopicConfigDef,
    ) -> (String, ConfigSource) {
        let names = topic_broker_synonyms(def);
        let derived = names.iter().find_map(|name| {
            let value = merged.get(*name)?;
            Some(match unit_ms(name) {
                1 => value.clone(),
                factor => scale(value, factor),
            })
        });
        match derived {
            Some(value) => {
                let source = self
                    .layers(dynamic)
                    .iter()
                    .find(|(_, layer)| names.iter().any(|n| layer.contains_key(*n)))
                    .map_or(ConfigSource::StaticBroker, |(source, _)| *source);
                (value, source)
            }
            None => (def.default.to_string(), ConfigSource::Default),
        }
    }

    /// The window client quotas are measured over: `quota.window.num` samples of
    /// `quota.window.size.seconds` each, as (samples, sample length in ms).
    pub fn client_quota_window(&self) -> (usize, i64) {
        self.connection_limits.window
    }

    /// The window of `controller_mutation_rate` quotas: `controller.quota.window.num` samples of
    /// `controller.quota.window.size.seconds`, as (samples, sample length in ms).
    pub fn controller_quota_window(&self) -> (usize, i64) {
        let s = &self.settings;
        (
            s.controller_quota_window_num.max(1) as usize,
            i64::from(s.controller_quota_window_size_seconds.max(1)) * 1000,
        )
    }

    /// `max.connections`, `max.connections.per.ip` and the other connection limits.
    pub fn connection_limits(&self) -> &ConnectionLimitsConfig {
        &self.connection_limits
    }

    /// The TLS settings of listener `name` with the dynamic layers applied (a keystore or
    /// truststore changed with `kafka-configs`), checked as at start; None for a listener
    /// without TLS.
    pub fn listener_tls_with(
        &self,
        name: &str,
        dynamic: &DynamicBrokerConfig,
    ) -> Result<Option<TlsSettings>, ConfigError> {
        if self.listener_tls(name).is_none() {
            return Ok(None);
        }
        tls::listener_tls(&self.merged(dynamic), name).map(Some)
    }

    /// The connection limits with the dynamic layers applied, checked as at start.
    pub fn connection_limits_with(
        &self,
        dynamic: &DynamicBrokerConfig,
    ) -> Result<ConnectionLimitsConfig, ConfigError> {
        let merged = self.merged(dynamic);
        let settings = BrokerSettings::from_values(&merged);
        connection_limits::connection_limits(
            &merged,
            &settings,
            &self.listeners,
            self.connection_limits.window,
        )
    }

    /// The follower side of ISR replication: `num.replica.fetchers` and `replica.fetch.*`.
    pub fn replication(&self) -> ReplicationConfig {
        let s = &self.settings;
        ReplicationConfig {
            num_replica_fetchers: s.num_replica_fetchers.max(1) as usize,
            fetch_max_bytes: s.replica_fetch_max_bytes,
            fetch_response_max_bytes: s.replica_fetch_response_max_bytes,
            fetch_min_bytes: s.replica_fetch_min_bytes,
            fetch_wait_max_ms: s.replica_fetch_wait_max_ms,
            fetch_backoff_ms: s.replica_fetch_backoff_ms.max(0) as u64,
            socket_timeout_ms: s.replica_socket_timeout_ms.max(1) as u64,
            lag_time_max_ms: s.replica_lag_time_max_ms,
            quota_window_num: s.replication_quota_window_num.max(1) as usize,
            quota_window_ms: i64::from(s.replication_quota_window_size_seconds.max(1)) * 1000,
        }
    }

    /// `add.partitions.to.txn.retry.backoff.ms` and `.max.ms`: how long a leader waits before
    /// asking a transaction coordinator that answered CONCURRENT_TRANSACTIONS again, and for how
    /// long in all before the producer hears it.
    pub fn add_partitions_to_txn_retry_ms(&self) -> (u64, u64) {
        let s = &self.settings;
        (
            s.add_partitions_to_txn_retry_backoff_ms.max(1) as u64,
            s.add_partitions_to_txn_retry_backoff_max_ms.max(0) as u64,
        )
    }

    /// Whether `/metrics` has a series per hosted partition (`metrics.per.partition.enable`).
    pub fn metrics_per_partition(&self) -> bool {
        self.settings.metrics_per_partition_enable
    }

    /// The largest client-metrics push accepted, compressed or not (`telemetry.max.bytes`).
    pub fn telemetry_max_bytes(&self) -> i32 {
        self.settings.telemetry_max_bytes
    }

    /// Whether the HTTP listener serves the web console (`console.enable`).
    pub fn console_enabled(&self) -> bool {
        self.settings.console_enable
    }

    /// Whether the console refuses changes such as offset resets (`console.read.only`).
    pub fn console_read_only(&self) -> bool {
        self.settings.console_read_only
    }

    /// Whether log lines are JSON objects (`log.format=json`) rather than text.
    pub fn log_json(&self) -> bool {
        self.settings.log_format == "json"
    }

    /// Requests slower than this are logged (`log.slow.request.ms`; 0: none is).
    pub fn slow_request_log(&self) -> Option<std::time::Duration> {
        u64::try_from(self.settings.log_slow_request_ms)
            .ok()
            .filter(|ms| *ms > 0)
            .map(std::time::Duration::from_millis)
    }

    /// `cluster.id`, when the properties set it.
    pub fn explicit_cluster_id(&self) -> Option<&String> {
        self.settings.cluster_id.as_ref()
    }

    /// True when the operator asked for Kafka's page-cache durability (flush by interval) rather
    /// than fjord's default of fsync before acknowledging. Neither key has a default, so a value
    /// is one set.
    pub fn page_cache_flush(&self) -> bool {
        self.settings.log_flush_interval_messages.is_some()
            || self.settings.log_flush_interval_ms.is_some()
    }
}

impl BrokerConfig {
    /// The group coordinator's settings: Kafka's `group.*`, `offsets.*` and
    /// `offset.metadata.max.bytes` keys.
    pub fn group_coordinator(&self) -> GroupCoordinatorSettings {
        let s = &self.settings;
        GroupCoordinatorSettings {
            min_session_timeout_ms: s.group_min_session_timeout_ms,
            max_session_timeout_ms: s.group_max_session_timeout_ms,
            initial_rebalance_delay_ms: s.group_initial_rebalance_delay_ms,
            max_size: s.group_max_size,
            offsets_retention_minutes: s.offsets_retention_minutes,
            offsets_retention_check_interval_ms: s.offsets_retention_check_interval_ms,
            offset_metadata_max_bytes: s.offset_metadata_max_bytes,
            offsets_commit_timeout_ms: s.offsets_commit_timeout_ms,
            consumer_session_timeout_ms: s.group_consumer_session_timeout_ms,
            consumer_min_session_timeout_ms: s.group_consumer_min_session_timeout_ms,
            consumer_max_session_timeout_ms: s.group_consumer_max_session_timeout_ms,
            consumer_heartbeat_interval_ms: s.group_consumer_heartbeat_interval_ms,
            consumer_min_heartbeat_interval_ms: s.group_consumer_min_heartbeat_interval_ms,
            consumer_max_heartbeat_interval_ms: s.group_consumer_max_heartbeat_interval_ms,
            consumer_max_size: s.group_consumer_max_size,
            consumer_assignors: s.group_consumer_assignors.clone(),
        }
    }

    /// The active controller's periodic elections: unclean ones every
    /// `unclean.leader.election.interval.ms`, preferred-leader balancing every
    /// `leader.imbalance.check.interval.seconds` when `auto.leader.rebalance.enable`.
    pub fn leader_elections(&self) -> LeaderElectionSettings {
        let s = &self.settings;
        LeaderElectionSettings {
            unclean_interval_ms: s.unclean_leader_election_interval_ms.max(1),
            balance_interval_s: s
                .auto_leader_rebalance_enable
                .then(|| s.leader_imbalance_check_interval_seconds.max(1)),
            imbalance_per_broker_percentage: s.leader_imbalance_per_broker_percentage.max(0),
        }
    }

    /// The transaction coordinator's settings.
    pub fn txn_coordinator(&self) -> TxnCoordinatorSettings {
        TxnCoordinatorSettings {
            max_timeout_ms: self.settings.transaction_max_timeout_ms,
            transactional_id_expiration_ms: self.settings.transactional_id_expiration_ms,
        }
    }

    /// `__consumer_offsets` as the broker creates it: compacted, the producer's compression.
    pub fn offsets_topic(&self) -> InternalTopicSettings {
        let s = &self.settings;
        InternalTopicSettings {
            num_partitions: s.offsets_topic_num_partitions,
            replication_factor: s.offsets_topic_replication_factor.into(),
            configs: [
                ("cleanup.policy", "compact".to_string()),
                ("compression.type", "producer".to_string()),
                ("segment.bytes", s.offsets_topic_segment_bytes.to_string()),
            ]
            .map(|(k, v)| (k.to_string(), v))
            .into(),
        }
    }

    /// `__transaction_state` as the broker creates it: compacted, uncompressed, never led by
    /// an out-of-sync replica, with its own `min.insync.replicas`.
    pub fn transaction_state_topic(&self) -> InternalTopicSettings {
        let s = &self.settings;
        InternalTopicSettings {
            num_partitions: s.transaction_state_log_num_partitions,
            replication_factor: s.transaction_state_log_replication_factor.into(),
            configs: [
                ("cleanup.policy", "compact".to_string()),
                ("compression.type", "uncompressed".to_string()),
                (
                    "segment.bytes",
                    s.transaction_state_log_segment_bytes.to_string(),
                ),
                (
                    "min.insync.replicas",
                    s.transaction_state_log_min_isr.to_string(),
                ),
                ("unclean.leader.election.enable", "false".to_string()),
            ]
            .map(|(k, v)| (k.to_string(), v))
            .into(),
        }
    }

    /// `__share_group_state` as the broker creates it (KIP-932): kept forever and not compacted —
    /// the share coordinator's snapshots make older records redundant — with its own
    /// `min.insync.replicas`.
    pub fn share_state_topic(&self) -> InternalTopicSettings {
        let s = &self.settings;
        InternalTopicSettings {
            num_partitions: s.share_coordinator_state_topic_num_partitions,
            replication_factor: s.share_coordinator_state_topic_replication_factor.into(),
            configs: [
                ("cleanup.policy", "delete".to_string()),
                ("retention.ms", "-1".to_string()),
                ("compression.type", "producer".to_string()),
                (
                    "segment.bytes",
                    s.share_coordinator_state_topic_segment_bytes.to_string(),
                ),
                (
                    "min.insync.replicas",
                    s.share_coordinator_state_topic_min_isr.to_string(),
                ),
            ]
            .map(|(k, v)| (k.to_string(), v))
            .into(),
        }
    }

    /// How many ShareUpdate records the share coordinator writes for a share partition between
    /// two ShareSnapshots.
    pub fn share_updates_per_snapshot(&self) -> u32 {
        u32::try_from(
            self.settings
                .share_coordinator_snapshot_update_records_per_snapshot,
        )
        .unwrap_or(0)
    }

    /// The broker's share group settings: each `group.share.*` default with the bounds a
    /// group's own value is held to.
    pub fn share_groups(&self) -> group_configs::ShareGroupDefaults {
        let s = &self.settings;
        let bounded = |value: i32, min: i32, max: i32| group_configs::Bounded { value, min, max };
        group_configs::ShareGroupDefaults {
            session_timeout_ms: bounded(
                s.group_share_session_timeout_ms,
                s.group_share_min_session_timeout_ms,
                s.group_share_max_session_timeout_ms,
            ),
            heartbeat_interval_ms: bounded(
                s.group_share_heartbeat_interval_ms,
                s.group_share_min_heartbeat_interval_ms,
                s.group_share_max_heartbeat_interval_ms,
            ),
            record_lock_duration_ms: bounded(
                s.group_share_record_lock_duration_ms,
                s.group_share_min_record_lock_duration_ms,
                s.group_share_max_record_lock_duration_ms,
            ),
            delivery_count_limit: bounded(
                s.group_share_delivery_count_limit,
                s.group_share_min_delivery_count_limit,
                s.group_share_max_delivery_count_limit,
            ),
            partition_max_record_locks: bounded(
                s.group_share_partition_max_record_locks,
                s.group_share_min_partition_max_record_locks,
                s.group_share_max_partition_max_record_locks,
            ),
            max_size: s.group_share_max_size,
            max_share_sessions: s.group_share_max_share_sessions,
        }
    }

    /// `max.request.partition.size.limit`: the most partitions one DescribeTopicPartitions
    /// answer holds.
    pub fn max_request_partition_size_limit(&self) -> i32 {
        self.settings.max_request_partition_size_limit
    }
}

/// The group coordinator's settings, Kafka's keys typed (see [`BrokerConfig::group_coordinator`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupCoordinatorSettings {
    pub min_session_timeout_ms: i32,
    pub max_session_timeout_ms: i32,
    pub initial_rebalance_delay_ms: i32,
    pub max_size: i32,
    pub offsets_retention_minutes: i32,
    pub offsets_retention_check_interval_ms: i64,
    pub offset_metadata_max_bytes: i32,
    pub offsets_commit_timeout_ms: i32,
    pub consumer_session_timeout_ms: i32,
    pub consumer_min_session_timeout_ms: i32,
    pub consumer_max_session_timeout_ms: i32,
    pub consumer_heartbeat_interval_ms: i32,
    pub consumer_min_heartbeat_interval_ms: i32,
    pub consumer_max_heartbeat_interval_ms: i32,
    pub consumer_max_size: i32,
    pub consumer_assignors: Vec<String>,
}

/// The controller's periodic elections (see [`BrokerConfig::leader_elections`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElectionSettings {
    pub unclean_interval_ms: i64,
    /// None: `auto.leader.rebalance.enable` is off.
    pub balance_interval_s: Option<i64>,
    pub imbalance_per_broker_percentage: i32,
}

/// The transaction coordinator's settings (see [`BrokerConfig::txn_coordinator`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnCoordinatorSettings {
    pub max_timeout_ms: i32,
    pub transactional_id_expiration_ms: i32,
}

/// An internal topic's shape as the broker creates it on first use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InternalTopicSettings {
    pub num_partitions: i32,
    pub replication_factor: i32,
    /// Its topic configs, as CreateTopics carries them.
    pub configs: BTreeMap<String, String>,
}

/// Dynamic broker configs from the metadata log: this broker's (`kafka-configs --entity-name
/// <id>`) and the cluster-wide default (`--entity-default`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DynamicBrokerConfig {
    pub node: BTreeMap<String, String>,
    pub default: BTreeMap<String, String>,
}

impl DynamicBrokerConfig {
    /// The two layers: this node's dynamic configs and the cluster default, as the metadata image
    /// holds them (`MetadataImage::broker_config_layers`).
    pub fn new(node: BTreeMap<String, String>, default: BTreeMap<String, String>) -> Self {
        DynamicBrokerConfig { node, default }
    }
}

/// Broker keys that can change on a running broker (Kafka's dynamic broker configs that fjord
/// knows), beside the broker synonyms of topic configs.
const DYNAMIC_BROKER_KEYS: &[&str] = &[
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "log.cleaner.threads",
    "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.buffer.size",
    "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.backoff.ms",
    "replica.alter.log.dirs.io.max.bytes.per.second",
    "log.retention.minutes",
    "log.retention.hours",
    "log.roll.hours",
    "log.roll.jitter.hours",
    "num.io.threads",
    "num.network.threads",
    "num.recovery.threads.per.data.dir",
    "max.connections",
    "max.connections.per.ip",
    "max.connections.per.ip.overrides",
    "max.connection.creation.rate",
];

/// Per-listener keys (`listener.name.<l>.<key>`) that can change on a running broker.
const DYNAMIC_LISTENER_KEYS: &[&str] = &[
    "max.connections",
    "max.connection.creation.rate",
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
];

/// The key of `listener.name.<l>.<key>`, and the listener's name as the key writes it.
fn listener_key(key: &str) -> Option<(&str, &str)> {
    key.strip_prefix("listener.name.")
        .and_then(|rest| rest.split_once('.'))
}

/// Whether `key` is a listener's keystore or truststore key (`listener.name.<l>.ssl.*`): one
/// broker's alone, as Kafka keeps them (never the cluster-wide default).
pub fn is_listener_tls_key(key: &str) -> bool {
    listener_key(key)
        .is_some_and(|(_, key)| key.starts_with("ssl.") && DYNAMIC_LISTENER_KEYS.contains(&key))
}

/// Whether `key` may be changed with IncrementalAlterConfigs on a broker resource.
pub fn is_dynamic_broker_key(key: &str) -> bool {
    DYNAMIC_BROKER_KEYS.contains(&key)
        || listener_key(key).is_some_and(|(_, key)| DYNAMIC_LISTENER_KEYS.contains(&key))
        || TOPIC_CONFIGS
            .iter()
            .any(|def| def.broker_synonym == Some(key))
}

fn broker_config_def(key: &str) -> Option<&'static BrokerConfigDef> {
    BROKER_CONFIGS.iter().find(|def| def.name == key)
}

/// Every broker key fjord knows, with its type.
pub fn broker_config_keys() -> impl Iterator<Item = (&'static str, ConfigType)> {
    BROKER_CONFIGS.iter().map(|def| (def.name, def.kind))
}

/// The type of a known broker key.
pub fn broker_config_kind(key: &str) -> Option<ConfigType> {
    broker_config_def(key).map(|def| def.kind)
}

/// Checks a value for broker key `key` as at start; unknown keys pass (Kafka stores them).
pub fn check_broker_value(key: &str, value: &str) -> Result<(), ConfigError> {
    match broker_config_def(key) {
        Some(def) => check_value(key, value, def.kind, def.check),
        None => Ok(()),
    }
}

/// Whether fjord accepts `key` without acting on it yet (warned about when set).
pub fn not_acted_upon(key: &str) -> bool {
    NOT_ACTED_UPON.contains(&key)
}

/// Topic configs fjord accepts (so that Kafka's tools and clients set them freely) but does not
/// act upon yet; a topic that sets one gets a warning naming it.
const TOPIC_NOT_ACTED_UPON: &[&str] = &[
    "compression.gzip.level",
    "compression.zstd.level",
    "preallocate",
    "segment.jitter.ms",
];

impl TopicConfig {
    /// The topic's own settings (not inherited) that fjord does not act upon yet.
    pub fn ignored_overrides(&self) -> Vec<(&'static str, &str)> {
        self.entries()
            .filter(|(name, _, source)| {
                *source == ConfigSource::DynamicTopic && TOPIC_NOT_ACTED_UPON.contains(name)
            })
            .map(|(name, value, _)| (name, value))
            .collect()
    }
}

pub(crate) fn broker_default(key: &str) -> Option<&'static str> {
    broker_config_def(key).and_then(|def| def.default)
}

/// The broker keys that set `key` too, most precise first, as Kafka lists them among its
/// synonyms (retention in ms, minutes or hours; rolling in ms or hours).
pub fn broker_key_synonyms(key: &str) -> Vec<&'static str> {
    const GROUPS: [&[&str]; 3] = [
        &[
            "log.retention.ms",
            "log.retention.minutes",
            "log.retention.hours",
        ],
        &["log.roll.ms", "log.roll.hours"],
        &["log.roll.jitter.ms", "log.roll.jitter.hours"],
    ];
    if let Some(group) = GROUPS.iter().find(|g| g.contains(&key)) {
        return group.to_vec();
    }
    broker_config_def(key)
        .map(|def| vec![def.name])
        .unwrap_or_default()
}

/// The broker keys behind a topic config's default, most precise first.
fn topic_broker_synonyms(def: &TopicConfigDef) -> Vec<&'static str> {
    def.broker_synonym
        .map(broker_key_synonyms)
        .unwrap_or_default()
}

/// Milliseconds per unit of a time key, by its name.
fn unit_ms(name: &str) -> i64 {
    if name.ends_with(".minutes") {
        60_000
    } else if name.ends_with(".hours") {
        3_600_000
    } else {
        1
    }
}

fn scale(value: &str, factor: i64) -> String {
    match value.trim().parse::<i64>() {
        Ok(v) if v < 0 => "-1".to_string(),
        Ok(v) => v.saturating_mul(factor).to_string(),
        Err(_) => value.to_string(),
    }
}

/// What `from_properties` noticed but did not reject.
#[derive(Debug, Default)]
pub struct ConfigWarnings {
    pub unknown_keys: Vec<String>,
    /// Known keys that were set but that fjord does not act upon yet.
    pub ignored_keys: Vec<String>,
}

impl BrokerConfig {
    /// Builds the broker config from key/value pairs. Every value is checked before anything is
    /// touched; the first invalid one is returned.
    pub fn from_properties(
        props: &BTreeMap<String, String>,
    ) -> Result<(BrokerConfig, ConfigWarnings), ConfigError> {
        let mut warnings = ConfigWarnings::default();
        for (key, value) in props {
            match BROKER_CONFIGS
                .iter()
                .find(|def| def.name == key || listener_override_of(key) == Some(def.name))
            {
                Some(def) => check_value(key, value, def.kind, def.check)?,
                None => warnings.unknown_keys.push(key.clone()),
            }
            if NOT_ACTED_UPON.contains(&key.as_str()) {
                warnings.ignored_keys.push(key.clone());
            }
        }
        let settings = BrokerSettings::from_values(props);
        // The raw values, which the structured keys (listeners, the quorum) are parsed from and
        // errors name.
        let get = |key: &str| -> String {
            props
                .get(key)
                .map(String::as_str)
                .or_else(|| broker_default(key))
                .unwrap_or_default()
                .to_string()
        };
        let node_id = node_id(props, &settings)?;
        let (listeners, advertised_listeners) = parse_listeners(props, &get)?;
        let log_dirs: Vec<PathBuf> = match &settings.log_dirs {
            Some(dirs) => dirs.iter().map(PathBuf::from).collect(),
            None => vec![PathBuf::from(&settings.log_dir)],
        };
        if log_dirs.is_empty() {
            return Err(invalid("log.dirs", &get("log.dirs"), "no directory given"));
        }
        let metadata_log_dir = settings
            .metadata_log_dir
            .as_ref()
            .map_or_else(|| log_dirs[0].clone(), PathBuf::from);
        let cleaner = settings.cleaner_config()?;
        let cluster = ClusterConfig::from_properties(node_id, &listeners, &settings, &get)?;
        let secured = secure_listeners(props, &listeners)?;
        let links = node_links(props, &get, &cluster, &secured)?;
        check_consumer_group_bounds(&settings)?;
        let authorizer = authorizer_config(&settings)?;
        let window = (
            settings.quota_window_num.max(1) as usize,
            i64::from(settings.quota_window_size_seconds.max(1)) * 1000,
        );
        let connection_limits =
            connection_limits::connection_limits(props, &settings, &listeners, window)?;
        let http_listeners = http::parse(
            &settings.http_listeners,
            props.contains_key("http.listeners"),
            props,
        )?;
        let config = BrokerConfig {
            node_id,
            listeners,
            advertised_listeners,
            log_dirs,
            metadata_log_dir,
            num_partitions: settings.num_partitions,
            default_replication_factor: i16::try_from(settings.default_replication_factor)
                .unwrap_or(i16::MAX),
            auto_create_topics_enable: settings.auto_create_topics_enable,
            delete_topic_enable: settings.delete_topic_enable,
            socket_request_max_bytes: settings.socket_request_max_bytes.max(0) as usize,
            connections_max_idle_ms: settings.connections_max_idle_ms,
            log_retention_check_interval_ms: settings.log_retention_check_interval_ms,
            log_segment_delete_delay_ms: settings.log_segment_delete_delay_ms,
            producer_id_expiration_ms: settings.producer_id_expiration_ms.into(),
            producer_id_expiration_check_interval_ms: settings
                .producer_id_expiration_check_interval_ms
                .into(),
            cleaner,
            cluster,
            listener_tls: secured.tls,
            listener_sasl: secured.sasl,
            links,
            authorizer,
            connection_limits,
            http_listeners,
            add_scram: Vec::new(),
            explicit: props.clone(),
            settings,
        };
        Ok((config, warnings))
    }
}

/// `node.id`, or the older `broker.id` (equal to it when both are set).
fn node_id(
    props: &BTreeMap<String, String>,
    settings: &BrokerSettings,
) -> Result<i32, ConfigError> {
    if let (Some(b), Some(n)) = (props.get("broker.id"), props.get("node.id")) {
        if b.trim() != n.trim() {
            return Err(invalid(
                "broker.id",
                b,
                format!("must equal node.id ({n}) when both are set"),
            ));
        }
    }
    // `node.id` has a default, so `broker.id` alone can only be seen in the properties.
    Ok(match settings.broker_id {
        Some(broker_id) if !props.contains_key("node.id") => broker_id,
        _ => settings.node_id,
    })
}

/// `listeners` and what each advertises (`advertised.listeners`, else itself). An advertised
/// listener must be one of the listeners, at a host clients can connect to.
fn parse_listeners(
    props: &BTreeMap<String, String>,
    get: &dyn Fn(&str) -> String,
) -> Result<(Vec<Listener>, Vec<Listener>), ConfigError> {
    let protocols = security_protocol_map(props, &get("listener.security.protocol.map"))?;
    let listeners = Listener::parse_list("listeners", &get("listeners"), &protocols)?;
    let advertised = match props.get("advertised.listeners") {
        Some(v) => Listener::parse_list("advertised.listeners", v, &protocols)?,
        None => Vec::new(),
    };
    if let Some(stray) = advertised
        .iter()
        .find(|a| !listeners.iter().any(|l| l.name == a.name))
    {
        return Err(invalid(
            "advertised.listeners",
            &get("advertised.listeners"),
            format!("listener {} is not in listeners", stray.name),
        ));
    }
    let advertised_listeners: Vec<Listener> = listeners
        .iter()
        .map(|l| {
            advertised
                .iter()
                .find(|a| a.name == l.name)
                .unwrap_or(l)
                .clone()
        })
        .collect();
    for l in &advertised_listeners {
        if l.host.is_empty() || l.host == "0.0.0.0" || l.host == "::" {
            return Err(invalid(
                "advertised.listeners",
                &get("advertised.listeners"),
                format!(
                    "listener {} advertises the wildcard host {:?}; clients cannot connect to it",
                    l.name, l.host
                ),
            ));
        }
    }
    Ok((listeners, advertised_listeners))
}

/// Parses Java properties text: `key=value` or `key: value` or `key value`, `#`/`!` comments,
/// backslash line continuations and escapes.
pub fn parse_properties(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut logical = String::new();
    for raw in text.lines() {
        let line = raw.trim_start();
        if logical.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with('!'))
        {
            continue;
        }
        let trailing_backslashes = line.chars().rev().take_while(|c| *c == '\\').count();
        if trailing_backslashes % 2 == 1 {
            logical.push_str(&line[..line.len() - 1]);
            continue;
        }
        logical.push_str(line);
        let (key, value) = split_property(&logical);
        out.insert(key, value);
        logical.clear();
    }
    if !logical.is_empty() {
        let (key, value) = split_property(&logical);
        out.insert(key, value);
    }
    out
}

fn split_property(line: &str) -> (String, String) {
    let mut key = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    key.push(unescape(next));
                }
            }
            '=' | ':' => break,
            c if c.is_whitespace() => {
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
                if chars.peek().is_some_and(|c| *c == '=' || *c == ':') {
                    chars.next();
                }
                break;
            }
            c => key.push(c),
        }
    }
    while chars.peek().is_some_and(|c| c.is_whitespace()) {
        chars.next();
    }
    let mut value = String::new();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                value.push(unescape(next));
            }
        } else {
            value.push(c);
        }
    }
    (key, value)
}

fn unescape(c: char) -> char {
    match c {
        't' => '\t',
        'n' => '\n',
        'r' => '\r',
        'f' => '\u{c}',
        other => other,
    }
}

/// The effective configs of one topic: its overrides over the broker's defaults, each value
/// with its source (as DescribeConfigs lists them), and the same values typed.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicConfig {
    values: BTreeMap<&'static str, (String, ConfigSource)>,
    settings: TopicSettings,
}

impl TopicConfig {
    /// A topic's effective configs: its overrides, else the broker's layered defaults.
    pub fn resolve(
        broker: &BrokerConfig,
        dynamic: &DynamicBrokerConfig,
        overrides: &BTreeMap<String, String>,
    ) -> TopicConfig {
        let merged = broker.merged(dynamic);
        let values = TOPIC_CONFIGS
            .iter()
            .map(|def| {
                let entry = match overrides.get(def.name) {
                    Some(v) => (v.clone(), ConfigSource::DynamicTopic),
                    None => broker.topic_default(dynamic, &merged, def),
                };
                (def.name, entry)
            })
            .collect::<BTreeMap<_, _>>();
        let settings =
            TopicSettings::parse(|name| values.get(name).map_or("", |(v, _)| v.as_str()));
        TopicConfig { values, settings }
    }

    /// The topic's configs, typed.
    pub fn settings(&self) -> &TopicSettings {
        &self.settings
    }

    pub fn entries(&self) -> impl Iterator<Item = (&'static str, &str, ConfigSource)> + '_ {
        self.values.iter().map(|(k, (v, s))| (*k, v.as_str(), *s))
    }

    fn is_set(&self, name: &str) -> bool {
        self.values
            .get(name)
            .is_some_and(|(_, s)| *s != ConfigSource::Default)
    }

    /// Flushed by interval (`flush.messages` or `flush.ms` set, for the topic or the broker):
    /// Kafka's page-cache mode, rather than fjord's fsync before every acknowledgement.
    pub fn flushed_by_interval(&self) -> bool {
        self.is_set("flush.messages") || self.is_set("flush.ms")
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    pub(crate) fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn cluster(pairs: &[(&str, &str)]) -> Result<ClusterConfig, ConfigError> {
        BrokerConfig::from_properties(&props(pairs)).map(|(c, _)| c.cluster)
    }

    const VOTERS: &str = "1@127.0.0.1:9093,2@127.0.0.1:9193,3@127.0.0.1:9293";

    #[test]
    fn throttled_replicas_are_all_or_partition_broker_pairs() {
        assert_eq!(throttled_replicas(" * "), Some(ThrottledReplicas::All));
        assert_eq!(
            throttled_replicas(""),
            Some(ThrottledReplicas::These(vec![]))
        );
        let named = throttled_replicas("0:1, 1:2,0:3").unwrap();
        assert_eq!(
            named,
            ThrottledReplicas::These(vec![(0, 1), (1, 2), (0, 3)])
        );
        assert!(named.names(0, 3) && !named.names(1, 1));
        for bad in [
            "0",
            "0:",
            ":1",
            "a:1",
            "0:1:2",
            "-1:1",
            "*,0:1",
            "0:99999999999",
        ] {
            assert_eq!(throttled_replicas(bad), None, "{bad}");
            assert!(validate_topic_config("leader.replication.throttled.replicas", bad).is_err());
        }
        assert!(
            validate_topic_config("follower.replication.throttled.replicas", "0:1,1:2").is_ok()
        );
    }

    #[test]
    fn kraft_keys_describe_the_nodes_part_in_the_cluster() {
        let alone = cluster(&[]).unwrap();
        assert!(alone.broker && alone.controller && alone.voters.is_empty());
        assert_eq!(alone.inter_broker_listener_name, "PLAINTEXT");

        let combined = cluster(&[
            ("node.id", "2"),
            ("controller.quorum.voters", VOTERS),
            ("controller.listener.names", "CONTROLLER"),
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9192,CONTROLLER://127.0.0.1:9193",
            ),
        ])
        .unwrap();
        assert_eq!(combined.voters.len(), 3);
        assert_eq!(
            combined.voters[1],
            Voter {
                id: 2,
                host: "127.0.0.1".into(),
                port: 9193
            }
        );
        assert!(combined.is_controller_listener("CONTROLLER"));
        assert_eq!(combined.inter_broker_listener_name, "PLAINTEXT");

        let broker = cluster(&[
            ("node.id", "4"),
            ("process.roles", "broker"),
            ("controller.quorum.voters", VOTERS),
            ("controller.listener.names", "CONTROLLER"),
            ("listeners", "PLAINTEXT://127.0.0.1:9392"),
        ])
        .unwrap();
        assert!(broker.broker && !broker.controller);
    }

    #[test]
    fn a_dynamic_quorum_is_found_through_its_bootstrap_servers() {
        let controller = cluster(&[
            ("node.id", "4"),
            ("process.roles", "controller"),
            (
                "controller.quorum.bootstrap.servers",
                "127.0.0.1:9093, [::1]:9193",
            ),
            ("controller.quorum.auto.join.enable", "true"),
            ("controller.listener.names", "CONTROLLER"),
            ("listeners", "CONTROLLER://127.0.0.1:9493"),
        ])
        .unwrap();
        assert!(controller.voters.is_empty() && controller.quorum_auto_join);
        assert_eq!(
            controller.bootstrap_servers,
            ["127.0.0.1:9093", "[::1]:9193"]
        );
        // Named voters make the quorum static; the bootstrap servers are then unused.
        let stat = cluster(&[
            ("controller.quorum.voters", VOTERS),
            ("controller.quorum.bootstrap.servers", "127.0.0.1:9093"),
            ("controller.listener.names", "CONTROLLER"),
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
            ),
        ])
        .unwrap();
        assert!(stat.bootstrap_servers.is_empty() && !stat.quorum_auto_join);
        // As in Kafka, only a controller can join the quorum by itself.
        assert_eq!(
            cluster(&[
                ("process.roles", "broker"),
                ("controller.quorum.bootstrap.servers", "127.0.0.1:9093"),
                ("controller.quorum.auto.join.enable", "true"),
                ("controller.listener.names", "CONTROLLER"),
            ])
            .unwrap_err()
            .key,
            "controller.quorum.auto.join.enable"
        );
    }

    #[test]
    fn inconsistent_kraft_keys_are_refused_naming_the_key() {
        let base = [
            ("controller.quorum.voters", VOTERS),
            ("controller.listener.names", "CONTROLLER"),
        ];
        let refused = |extra: &[(&str, &str)]| {
            let mut pairs = base.to_vec();
            pairs.extend_from_slice(extra);
            cluster(&pairs).unwrap_err().key
        };
        // A controller that is not a voter; a voter without the controller role.
        assert_eq!(
            refused(&[
                ("node.id", "7"),
                ("process.roles", "controller"),
                ("listeners", "CONTROLLER://127.0.0.1:9793")
            ]),
            "controller.quorum.voters"
        );
        assert_eq!(
            refused(&[("node.id", "1"), ("process.roles", "broker")]),
            "process.roles"
        );
        // A controller without its listener; a broker listening on a controller listener.
        assert_eq!(refused(&[("node.id", "1")]), "listeners");
        assert_eq!(
            refused(&[
                ("node.id", "5"),
                ("process.roles", "broker"),
                (
                    "listeners",
                    "PLAINTEXT://127.0.0.1:1,CONTROLLER://127.0.0.1:2"
                )
            ]),
            "listeners"
        );
        assert_eq!(
            refused(&[("controller.quorum.voters", "1@nowhere")]),
            "controller.quorum.voters"
        );
        assert_eq!(
            cluster(&[("process.roles", "broker")]).unwrap_err().key,
            "controller.quorum.voters"
        );
        assert_eq!(
            cluster(&[("controller.quorum.bootstrap.servers", "127.0.0.1:9093")])
                .unwrap_err()
                .key,
            "controller.listener.names"
        );
        assert_eq!(
            cluster(&[
                ("controller.quorum.bootstrap.servers", "127.0.0.1"),
                ("controller.listener.names", "CONTROLLER"),
            ])
            .unwrap_err()
            .key,
            "controller.quorum.bootstrap.servers"
        );
    }

    #[test]
    fn defaults_are_a_single_loopback_node() {
        let (config, warnings) = BrokerConfig::from_properties(&BTreeMap::new()).unwrap();
        assert_eq!(config.node_id, 1);
        assert_eq!(config.listeners[0].host, "127.0.0.1");
        assert_eq!(config.listeners[0].port, 9092);
        assert_eq!(config.log_dirs, vec![PathBuf::from("./fjord-data")]);
        assert!(warnings.unknown_keys.is_empty());
        assert!(!config.page_cache_flush());
    }

    #[test]
    fn the_leaders_add_partitions_retry_is_kafkas_broker_config() {
        let (config, warnings) = BrokerConfig::from_properties(&props(&[
            ("transaction.state.log.replication.factor", "1"),
            ("transaction.state.log.min.isr", "1"),
        ]))
        .unwrap();
        assert_eq!(config.add_partitions_to_txn_retry_ms(), (20, 100));
        assert!(
            warnings.ignored_keys.is_empty(),
            "the transaction log's settings are used: {:?}",
            warnings.ignored_keys
        );
        let (config, _) = BrokerConfig::from_properties(&props(&[
            ("add.partitions.to.txn.retry.backoff.ms", "5"),
            ("add.partitions.to.txn.retry.backoff.max.ms", "0"),
        ]))
        .unwrap();
        assert_eq!(config.add_partitions_to_txn_retry_ms(), (5, 0));
        let err = BrokerConfig::from_properties(&props(&[(
            "add.partitions.to.txn.retry.backoff.ms",
            "0",
        )]))
        .unwrap_err();
        assert_eq!(err.key, "add.partitions.to.txn.retry.backoff.ms");
    }

    #[test]
    fn the_standard_authorizer_is_turned_on_by_its_kafka_class_name_only() {
        let (config, _) = BrokerConfig::from_properties(&props(&[])).unwrap();
        assert_eq!(config.authorizer, None);
        let (config, _) = BrokerConfig::from_properties(&props(&[
            ("authorizer.class.name", STANDARD_AUTHORIZER),
            ("super.users", "User:admin; User:CN=broker,OU=ops"),
        ]))
        .unwrap();
        let authorizer = config.authorizer.unwrap();
        assert_eq!(
            authorizer.super_users,
            ["User:admin", "User:CN=broker,OU=ops"]
        );
        assert!(!authorizer.allow_everyone_if_no_acl_found);
        let err = BrokerConfig::from_properties(&props(&[(
            "authorizer.class.name",
            "kafka.security.authorizer.AclAuthorizer",
        )]))
        .unwrap_err();
        assert!(err.reason.contains(STANDARD_AUTHORIZER), "{err}");
        let err = BrokerConfig::from_properties(&props(&[
            ("authorizer.class.name", STANDARD_AUTHORIZER),
            ("super.users", "admin"),
        ]))
        .unwrap_err();
        assert_eq!(err.key, "super.users");
    }

    #[test]
    fn invalid_values_name_key_and_value() {
        let err = BrokerConfig::from_properties(&props(&[("num.partitions", "zero")])).unwrap_err();
        assert_eq!(err.key, "num.partitions");
        assert_eq!(err.value, "zero");
        let err = BrokerConfig::from_properties(&props(&[("num.partitions", "0")])).unwrap_err();
        assert!(err.reason.contains("at least 1"), "{err}");
        let err =
            BrokerConfig::from_properties(&props(&[("listeners", "127.0.0.1:9092")])).unwrap_err();
        assert_eq!(err.key, "listeners");
        let err = BrokerConfig::from_properties(&props(&[("log.cleanup.policy", "delete,shred")]))
            .unwrap_err();
        assert!(err.reason.contains("shred"));
    }

    #[test]
    fn sasl_listeners_serve_plain() {
        let jaas = (
            "listener.name.client.plain.sasl.jaas.config",
            "org.apache.kafka.common.security.plain.PlainLoginModule required user_a=\"pw\";",
        );
        let base = [
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9092,CLIENT://127.0.0.1:9093",
            ),
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,CLIENT:SASL_PLAINTEXT",
            ),
            ("sasl.enabled.mechanisms", "PLAIN"),
            jaas,
        ];
        let (config, warnings) = BrokerConfig::from_properties(&props(&base)).unwrap();
        assert!(warnings.unknown_keys.is_empty(), "{warnings:?}");
        assert!(config.listener_tls("CLIENT").is_none());
        let sasl = config.listener_sasl("CLIENT").expect("SASL settings");
        assert_eq!(sasl.plain_users["a"], "pw");
        assert!(config.listener_sasl("PLAINTEXT").is_none());

        // Kafka's default mechanism, GSSAPI, is named when it stops the broker.
        let err = BrokerConfig::from_properties(&props(&[base[0], base[1], jaas])).unwrap_err();
        assert!(err.reason.contains("GSSAPI"), "{err}");

        // A lone node has no links to log in with.
        let mut lone = base.to_vec();
        lone.push(("inter.broker.listener.name", "CLIENT"));
        let (config, _) = BrokerConfig::from_properties(&props(&lone)).unwrap();
        assert_eq!(config.links, None);

        // Per listener and mechanism, a known key.
        let mut reauth = base.to_vec();
        reauth.push((
            "listener.name.client.plain.connections.max.reauth.ms",
            "3600000",
        ));
        let (_, warnings) = BrokerConfig::from_properties(&props(&reauth)).unwrap();
        assert!(warnings.unknown_keys.is_empty(), "{warnings:?}");
    }

    /// A combined node of a three-voter cluster whose every listener is `protocol`, with
    /// `extra` keys.
    fn secured_cluster(
        protocol: &str,
        extra: &[(&str, &str)],
    ) -> Result<BrokerConfig, ConfigError> {
        let map = format!("CONTROLLER:{protocol},BROKER:{protocol}");
        let mut pairs = vec![
            ("process.roles", "broker,controller"),
            ("controller.quorum.voters", VOTERS),
            ("controller.listener.names", "CONTROLLER"),
            ("inter.broker.listener.name", "BROKER"),
            (
                "listeners",
                "BROKER://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
            ),
            ("listener.security.protocol.map", map.as_str()),
        ];
        pairs.extend(extra);
        BrokerConfig::from_properties(&props(&pairs)).map(|(config, _)| config)
    }

    #[test]
    fn the_links_between_nodes_log_in_as_their_listeners_jaas_text_says() {
        let broker_jaas = (
            "listener.name.broker.plain.sasl.jaas.config",
            "org.apache.kafka.common.security.plain.PlainLoginModule required \
             username=\"node\" password=\"node-pw\" user_node=\"node-pw\";",
        );
        let controller_jaas = (
            "listener.name.controller.scram-sha-512.sasl.jaas.config",
            "org.apache.kafka.common.security.scram.ScramLoginModule required \
             username=\"ctl\" password=\"ctl-pw\";",
        );
        let mechanisms = [
            ("listener.name.broker.sasl.enabled.mechanisms", "PLAIN"),
            (
                "listener.name.controller.sasl.enabled.mechanisms",
                "SCRAM-SHA-512",
            ),
        ];
        let mut pairs = vec![broker_jaas, controller_jaas];
        pairs.extend(mechanisms);
        // Kafka's default mechanism for both links, GSSAPI, is named when it stops the node.
        let err = secured_cluster("SASL_PLAINTEXT", &pairs).unwrap_err();
        assert_eq!(err.key, "sasl.mechanism.inter.broker.protocol", "{err}");
        assert!(err.reason.contains("GSSAPI"), "{err}");
        pairs.push(("sasl.mechanism.inter.broker.protocol", "PLAIN"));
        let err = secured_cluster("SASL_PLAINTEXT", &pairs).unwrap_err();
        assert_eq!(err.key, "sasl.mechanism.controller.protocol", "{err}");
        // A mechanism the listener does not enable could never log in.
        pairs.push(("sasl.mechanism.controller.protocol", "PLAIN"));
        let err = secured_cluster("SASL_PLAINTEXT", &pairs).unwrap_err();
        assert!(err.reason.contains("does not enable PLAIN"), "{err}");
        pairs.pop();
        pairs.push(("sasl.mechanism.controller.protocol", "SCRAM-SHA-512"));
        let links = secured_cluster("SASL_PLAINTEXT", &pairs)
            .unwrap()
            .links
            .unwrap();
        assert_eq!(
            links.inter_broker.login,
            Some(LinkLogin::Plain {
                username: "node".into(),
                password: "node-pw".into()
            })
        );
        assert_eq!(
            links.controller.login,
            Some(LinkLogin::Scram {
                mechanism: fjord_common::scram::ScramMechanism::Sha512,
                username: "ctl".into(),
                password: "ctl-pw".into()
            })
        );
        assert_eq!(links.controller.tls, None);
        // A JAAS text with users only has no login for the node's own side.
        pairs[0].1 = "org.apache.kafka.common.security.plain.PlainLoginModule required \
                      user_node=\"node-pw\";";
        let err = secured_cluster("SASL_PLAINTEXT", &pairs).unwrap_err();
        assert_eq!(
            err.key, "listener.name.broker.plain.sasl.jaas.config",
            "{err}"
        );
        assert!(err.reason.contains("username"), "{err}");
    }

    #[test]
    fn the_links_between_nodes_trust_the_truststore_and_check_host_names_unless_told_not_to() {
        let keystore = [
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", "/node.pem"),
        ];
        let err = secured_cluster("SSL", &keystore).unwrap_err();
        assert!(err.reason.contains("no truststore"), "{err}");
        let mut pairs = keystore.to_vec();
        pairs.push(("ssl.truststore.certificates", "CA"));
        let links = secured_cluster("SSL", &pairs).unwrap().links.unwrap();
        let tls = links.inter_broker.tls.unwrap();
        assert_eq!(tls.truststore, TrustStore::PemInline("CA".into()));
        assert!(tls.keystore.is_some() && tls.verify_hostname);
        assert_eq!(links.controller.login, None);
        // Kafka turns the host name check off with an empty algorithm.
        pairs.push((
            "listener.name.controller.ssl.endpoint.identification.algorithm",
            "",
        ));
        let links = secured_cluster("SSL", &pairs).unwrap().links.unwrap();
        assert!(!links.controller.tls.unwrap().verify_hostname);
        assert!(links.inter_broker.tls.unwrap().verify_hostname);
        pairs.push(("ssl.endpoint.identification.algorithm", "ldap"));
        assert!(secured_cluster("SSL", &pairs).is_err());
    }

    #[test]
    fn consumer_group_timeouts_must_fit_their_bounds() {
        let refused = |pairs: &[(&str, &str)], key: &str| {
            let err = BrokerConfig::from_properties(&props(pairs)).unwrap_err();
            assert_eq!(err.key, key, "{err}");
        };
        // Kafka refuses a heartbeat interval below its minimum at start.
        refused(
            &[("group.consumer.heartbeat.interval.ms", "2000")],
            "group.consumer.heartbeat.interval.ms",
        );
        refused(
            &[("group.consumer.min.heartbeat.interval.ms", "20000")],
            "group.consumer.max.heartbeat.interval.ms",
        );
        refused(
            &[("group.consumer.session.timeout.ms", "90000")],
            "group.consumer.session.timeout.ms",
        );
        refused(
            &[
                ("group.consumer.heartbeat.interval.ms", "9000"),
                ("group.consumer.session.timeout.ms", "9000"),
                ("group.consumer.min.session.timeout.ms", "9000"),
            ],
            "group.consumer.heartbeat.interval.ms",
        );
        let ok = [
            ("group.consumer.heartbeat.interval.ms", "2000"),
            ("group.consumer.min.heartbeat.interval.ms", "1000"),
        ];
        assert!(BrokerConfig::from_properties(&props(&ok)).is_ok());
    }

    #[test]
    fn ssl_serves_clients() {
        let pem = [
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", "/broker.pem"),
            ("listener.name.ssl.ssl.client.auth", "requested"),
            ("listener.name.ssl.ssl.truststore.certificates", "CA"),
        ];
        // Alone, the SSL listener is the inter-broker listener, which a lone node never uses.
        let mut pairs = vec![("listeners", "SSL://127.0.0.1:9093")];
        pairs.extend(pem);
        assert!(BrokerConfig::from_properties(&props(&pairs)).is_ok());
        pairs[0] = (
            "listeners",
            "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093",
        );
        let (config, warnings) = BrokerConfig::from_properties(&props(&pairs)).unwrap();
        assert!(warnings.unknown_keys.is_empty(), "{warnings:?}");
        assert!(config.listener_tls("PLAINTEXT").is_none());
        let tls = config.listener_tls("SSL").expect("TLS settings");
        assert_eq!(
            tls.keystore,
            KeyStore::PemFile {
                path: "/broker.pem".into(),
                key_password: None
            }
        );
        assert_eq!(tls.client_auth, ClientAuth::Requested);
        // A keystore set dynamically for the listener wins; a listener without TLS has none.
        let dynamic = DynamicBrokerConfig::new(
            props(&[("listener.name.ssl.ssl.keystore.location", "/renewed.pem")]),
            BTreeMap::new(),
        );
        let renewed = config.listener_tls_with("SSL", &dynamic).unwrap().unwrap();
        assert_eq!(
            renewed.keystore,
            KeyStore::PemFile {
                path: "/renewed.pem".into(),
                key_password: None
            }
        );
        assert_eq!(
            config.listener_tls_with("PLAINTEXT", &dynamic).unwrap(),
            None
        );
        assert!(is_listener_tls_key(
            "listener.name.ssl.ssl.keystore.location"
        ));
        assert!(is_dynamic_broker_key(
            "listener.name.ssl.ssl.truststore.certificates"
        ));
        assert!(!is_listener_tls_key("ssl.keystore.location"));
        assert!(!is_listener_tls_key("listener.name.ssl.max.connections"));
        assert!(!is_dynamic_broker_key("listener.name.ssl.ssl.client.auth"));
        // A per-listener key is checked like the key itself.
        pairs.push(("listener.name.ssl.ssl.client.auth", "sometimes"));
        let err = BrokerConfig::from_properties(&props(&pairs)).unwrap_err();
        assert_eq!(err.key, "listener.name.ssl.ssl.client.auth", "{err}");
    }

    #[test]
    fn listener_names_map_to_protocols() {
        // A name mapped to PLAINTEXT is served; names compare case-insensitively.
        let (config, _) = BrokerConfig::from_properties(&props(&[
            (
                "listeners",
                "client://127.0.0.1:9092,REPLICATION://127.0.0.1:9093",
            ),
            (
                "listener.security.protocol.map",
                "CLIENT:PLAINTEXT,replication:plaintext",
            ),
        ]))
        .unwrap();
        assert!(config
            .listeners
            .iter()
            .all(|l| l.security_protocol == SecurityProtocol::Plaintext));
        // A name missing from an explicit map has no protocol: refused, as Kafka refuses it.
        let err = BrokerConfig::from_properties(&props(&[
            ("listeners", "CLIENT://127.0.0.1:9092"),
            ("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT"),
        ]))
        .unwrap_err();
        assert!(err
            .reason
            .contains("no security protocol defined for listener CLIENT"));
        // Without an explicit map, controller listeners speak PLAINTEXT.
        let (config, _) = BrokerConfig::from_properties(&props(&[
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9092,CTL://127.0.0.1:9093",
            ),
            ("controller.listener.names", "CTL"),
        ]))
        .unwrap();
        assert_eq!(
            config.listeners[1].security_protocol,
            SecurityProtocol::Plaintext
        );
        let err = BrokerConfig::from_properties(&props(&[(
            "listener.security.protocol.map",
            "PLAINTEXT:TLS",
        )]))
        .unwrap_err();
        assert_eq!(err.key, "listener.security.protocol.map");
    }

    #[test]
    fn each_listener_has_its_advertised_endpoint() {
        let (config, _) = BrokerConfig::from_properties(&props(&[
            (
                "listeners",
                "INSIDE://127.0.0.1:9092,OUTSIDE://0.0.0.0:9093",
            ),
            (
                "listener.security.protocol.map",
                "INSIDE:PLAINTEXT,OUTSIDE:PLAINTEXT",
            ),
            ("advertised.listeners", "OUTSIDE://broker.example:19093"),
        ]))
        .unwrap();
        let inside = config.advertised_listener("INSIDE");
        assert_eq!((inside.host.as_str(), inside.port), ("127.0.0.1", 9092));
        let outside = config.advertised_listener("OUTSIDE");
        assert_eq!(
            (outside.host.as_str(), outside.port),
            ("broker.example", 19093)
        );
        // An advertised name that is not a listener, or a wildcard left unadvertised, is refused.
        for advertised in ["OTHER://h:1", "INSIDE://127.0.0.1:9092"] {
            let err = BrokerConfig::from_properties(&props(&[
                (
                    "listeners",
                    "INSIDE://127.0.0.1:9092,OUTSIDE://0.0.0.0:9093",
                ),
                (
                    "listener.security.protocol.map",
                    "INSIDE:PLAINTEXT,OUTSIDE:PLAINTEXT,OTHER:PLAINTEXT",
                ),
                ("advertised.listeners", advertised),
            ]))
            .unwrap_err();
            assert_eq!(err.key, "advertised.listeners", "{err}");
        }
    }

    #[test]
    fn cleaner_settings_are_checked() {
        let (config, _) = BrokerConfig::from_properties(&props(&[
            ("log.cleaner.threads", "2"),
            ("log.cleaner.dedupe.buffer.size", "1048576"),
            ("log.cleaner.io.max.bytes.per.second", "1e6"),
        ]))
        .unwrap();
        assert_eq!(config.cleaner.threads, 2);
        assert_eq!(config.cleaner.dedupe_buffer_size, 1_048_576);
        assert_eq!(config.cleaner.io_max_bytes_per_second, 1e6);
        let (defaults, _) = BrokerConfig::from_properties(&props(&[])).unwrap();
        assert_eq!(
            defaults.cleaner,
            CleanerConfig {
                enable: true,
                threads: 1,
                dedupe_buffer_size: 128 * 1024 * 1024,
                dedupe_buffer_load_factor: 0.9,
                io_buffer_size: 512 * 1024,
                io_max_bytes_per_second: f64::MAX,
                backoff_ms: 15_000,
            }
        );
        // A key map that cannot hold one key never makes progress: refused, as Kafka does.
        let err =
            BrokerConfig::from_properties(&props(&[("log.cleaner.dedupe.buffer.size", "24")]))
                .unwrap_err();
        assert!(
            err.to_string().contains("log.cleaner.dedupe.buffer.size"),
            "{err}"
        );
        assert!(BrokerConfig::from_properties(&props(&[("log.cleaner.threads", "-1")])).is_err());
    }

    #[test]
    fn unknown_keys_warn() {
        let (_, warnings) = BrokerConfig::from_properties(&props(&[("no.such.key", "1")])).unwrap();
        assert_eq!(warnings.unknown_keys, vec!["no.such.key".to_string()]);
    }

    #[test]
    fn keys_not_acted_upon_warn() {
        let (_, warnings) = BrokerConfig::from_properties(&props(&[
            ("num.io.threads", "4"),
            ("log.preallocate", "true"),
            ("log.cleaner.min.compaction.lag.ms", "1000"),
            ("log.retention.ms", "1000"),
        ]))
        .unwrap();
        assert_eq!(
            warnings.ignored_keys,
            vec!["log.preallocate", "num.io.threads"]
        );
        assert!(warnings.unknown_keys.is_empty());
        // Every such key is a known one (validated like the rest).
        for key in NOT_ACTED_UPON {
            assert!(BROKER_CONFIGS.iter().any(|d| d.name == *key), "{key}");
        }
    }

    #[test]
    fn topic_defaults_follow_broker_synonyms() {
        let (config, _) = BrokerConfig::from_properties(&props(&[
            ("log.retention.hours", "2"),
            ("log.segment.bytes", "1048576"),
        ]))
        .unwrap();
        let topic = TopicConfig::resolve(
            &config,
            &DynamicBrokerConfig::default(),
            &props(&[("cleanup.policy", "compact")]),
        );
        let values: BTreeMap<_, _> = topic.entries().map(|(k, v, _)| (k, v)).collect();
        assert_eq!(values["retention.ms"], "7200000");
        assert_eq!(values["segment.bytes"], "1048576");
        assert_eq!(topic.settings().retention_ms, 7_200_000);
        assert_eq!(topic.settings().segment_bytes, 1_048_576);
        assert!(topic.settings().cleanup_policy.compact);
        assert!(!topic.settings().cleanup_policy.delete);
        let sources: BTreeMap<_, _> = topic.entries().map(|(k, _, s)| (k, s)).collect();
        assert_eq!(sources["retention.ms"], ConfigSource::StaticBroker);
        assert_eq!(sources["cleanup.policy"], ConfigSource::DynamicTopic);
        assert_eq!(sources["max.message.bytes"], ConfigSource::Default);
    }

    #[test]
    fn every_typed_broker_setting_reads_a_key_the_table_knows() {
        // Each typed accessor reads its keys' BrokerSettings fields: each is read once on a
        // default config, and an override is taken.
        let (config, _) = BrokerConfig::from_properties(&BTreeMap::new()).unwrap();
        assert_eq!(config.group_coordinator().offsets_commit_timeout_ms, 5_000);
        assert_eq!(config.txn_coordinator().max_timeout_ms, 900_000);
        assert_eq!(config.offsets_topic().num_partitions, 50);
        assert_eq!(
            config.transaction_state_topic().configs["min.insync.replicas"],
            "2"
        );
        assert_eq!(config.max_request_partition_size_limit(), 2000);
        assert_eq!(
            config.leader_elections(),
            LeaderElectionSettings {
                unclean_interval_ms: 300_000,
                balance_interval_s: Some(300),
                imbalance_per_broker_percentage: 10,
            }
        );
        let (config, _) = BrokerConfig::from_properties(&props(&[
            ("transaction.max.timeout.ms", "1000"),
            ("auto.leader.rebalance.enable", "false"),
            ("unclean.leader.election.interval.ms", "50"),
        ]))
        .unwrap();
        assert_eq!(config.txn_coordinator().max_timeout_ms, 1_000);
        assert_eq!(config.leader_elections().balance_interval_s, None);
        assert_eq!(config.leader_elections().unclean_interval_ms, 50);
    }

    #[test]
    fn every_broker_default_parses_into_its_typed_field() {
        // BrokerSettings::parse falls back to each key's table default: each must parse (it
        // panics naming the key otherwise), and a key without one is None.
        let settings = BrokerSettings::from_values(&BTreeMap::new());
        assert_eq!(settings.node_id, 1);
        assert_eq!(settings.broker_id, None);
        assert_eq!(settings.listeners, ["PLAINTEXT://127.0.0.1:9092"]);
        assert_eq!(settings.process_roles, ["broker", "controller"]);
        assert_eq!(settings.log_dirs, None);
        assert_eq!(settings.log_dir, "./fjord-data");
        assert_eq!(settings.log_flush_interval_ms, None);
        assert_eq!(settings.log_retention_hours, 168);
        assert_eq!(settings.log_flush_scheduler_interval_ms, i64::MAX);
        assert_eq!(settings.log_cleaner_io_max_bytes_per_second, f64::MAX);
        assert_eq!(settings.log_cleaner_io_buffer_load_factor, 0.9);
        assert_eq!(settings.offsets_topic_replication_factor, 3);
        assert_eq!(settings.group_consumer_assignors, ["uniform", "range"]);
        assert_eq!(settings.compression_type, TopicCompression::Producer);
        assert_eq!(
            settings.log_message_timestamp_type,
            TimestampType::CreateTime
        );
        assert!(settings.log_cleanup_policy.delete && !settings.log_cleanup_policy.compact);
        assert!(settings.auto_leader_rebalance_enable && !settings.log_preallocate);
        assert_eq!(settings.replica_selector_class, None);
        // A config built from no properties holds the same settings.
        let (config, _) = BrokerConfig::from_properties(&BTreeMap::new()).unwrap();
        assert_eq!(config.settings(), &settings);
    }

    #[test]
    fn a_broker_override_is_read_into_its_field() {
        let (config, _) = BrokerConfig::from_properties(&props(&[
            ("log.cleaner.threads", "4"),
            ("log.cleaner.io.buffer.load.factor", "0.5"),
            ("log.flush.interval.ms", "1000"),
            ("offsets.topic.replication.factor", "1"),
            ("broker.rack", "rack-a"),
            ("group.consumer.assignors", "range"),
            ("compression.type", "zstd"),
            ("log.cleanup.policy", "compact,delete"),
            ("auto.leader.rebalance.enable", "FALSE"),
        ]))
        .unwrap();
        let settings = config.settings();
        assert_eq!(settings.log_cleaner_threads, 4);
        assert_eq!(settings.log_cleaner_io_buffer_load_factor, 0.5);
        assert_eq!(settings.log_flush_interval_ms, Some(1000));
        assert_eq!(settings.offsets_topic_replication_factor, 1);
        assert_eq!(settings.broker_rack.as_deref(), Some("rack-a"));
        assert_eq!(settings.group_consumer_assignors, ["range"]);
        assert_eq!(settings.compression_type, TopicCompression::Zstd);
        assert!(settings.log_cleanup_policy.compact && settings.log_cleanup_policy.delete);
        assert!(!settings.auto_leader_rebalance_enable);
        // Keys not overridden keep their defaults.
        assert_eq!(settings.log_cleaner_backoff_ms, 15_000);
        assert_eq!(config.cleaner.threads, 4);
        assert!(config.page_cache_flush());
    }

    #[test]
    fn a_broker_value_that_does_not_parse_is_the_default() {
        // Checked values always parse; a value no check passed is the key's default, not 0. Every
        // key whose field is not free text is tried.
        let defaults = BrokerSettings::from_values(&BTreeMap::new());
        let free_text = [
            ConfigType::String,
            ConfigType::List,
            ConfigType::Class,
            ConfigType::Password,
        ];
        let enums = [
            "compression.type",
            "log.message.timestamp.type",
            "log.cleanup.policy",
        ];
        let garbage: BTreeMap<String, String> = BROKER_CONFIGS
            .iter()
            .filter(|def| !free_text.contains(&def.kind) || enums.contains(&def.name))
            .map(|def| (def.name.to_string(), "soon".to_string()))
            .collect();
        assert!(garbage.contains_key("num.partitions") && garbage.contains_key("log.roll.ms"));
        assert_eq!(BrokerSettings::from_values(&garbage), defaults);
        let settings = BrokerSettings::from_values(&props(&[("num.partitions", "many")]));
        assert_eq!(settings.num_partitions, 1);
    }

    #[test]
    fn dynamic_broker_configs_change_the_merged_settings() {
        let (config, _) = BrokerConfig::from_properties(&props(&[
            ("leader.replication.throttled.rate", "1000"),
            ("log.cleaner.threads", "2"),
        ]))
        .unwrap();
        let dynamic = DynamicBrokerConfig::new(
            props(&[("leader.replication.throttled.rate", "500")]),
            props(&[
                ("log.cleaner.threads", "3"),
                ("replica.alter.log.dirs.io.max.bytes.per.second", "2048"),
            ]),
        );
        let merged = config.merged(&dynamic);
        let settings = BrokerSettings::from_values(&merged);
        assert_eq!(settings.leader_replication_throttled_rate, 500);
        assert_eq!(settings.log_cleaner_threads, 3);
        assert_eq!(
            settings.replication_throttled_rates(),
            (500.0, i64::MAX as f64)
        );
        assert_eq!(settings.log_dir_move_rate(), 2048.0);
        assert_eq!(settings.cleaner_config().unwrap().threads, 3);
        // The static settings are the properties' alone.
        assert_eq!(config.settings().leader_replication_throttled_rate, 1000);
        assert_eq!(config.settings().log_cleaner_threads, 2);
        assert_eq!(
            config
                .merged_settings(&DynamicBrokerConfig::default())
                .log_dir_move_rate(),
            i64::MAX as f64
        );
    }

    #[test]
    fn every_topic_default_parses_into_its_typed_field() {
        // TopicSettings::parse falls back to each key's table default: each must parse.
        let settings = TopicSettings::parse(|name| {
            TOPIC_CONFIGS
                .iter()
                .find(|d| d.name == name)
                .map_or("", |d| d.default)
        });
        assert_eq!(settings.max_message_bytes, 1_048_588);
        assert_eq!(settings.compression_type, TopicCompression::Producer);
        assert_eq!(settings.message_timestamp_type, TimestampType::CreateTime);
        assert_eq!(
            settings.follower_replication_throttled_replicas,
            ThrottledReplicas::These(Vec::new())
        );
        assert!(settings.cleanup_policy.delete && !settings.cleanup_policy.compact);
        // A value that does not parse (never accepted by the checks) is the default, not 0.
        let broken = TopicSettings::parse(|name| {
            if name == "retention.ms" {
                "soon"
            } else {
                TOPIC_CONFIGS
                    .iter()
                    .find(|d| d.name == name)
                    .map_or("", |d| d.default)
            }
        });
        assert_eq!(broken.retention_ms, 604_800_000);
    }

    #[test]
    fn topic_config_validation() {
        assert!(validate_topic_config("retention.ms", "-1").is_ok());
        assert!(validate_topic_config("retention.ms", "-2").is_err());
        assert!(validate_topic_config("compression.type", "brotli").is_err());
        assert!(validate_topic_config("min.cleanable.dirty.ratio", "1.5").is_err());
        assert!(validate_topic_config("no.such.config", "1").is_err());
    }

    #[test]
    fn properties_syntax() {
        let parsed = parse_properties(
            "# comment\n! also\na=1\nb : 2\nc 3\nd=multi\\\n   line\ne=x\\=y\n  \n",
        );
        assert_eq!(parsed["a"], "1");
        assert_eq!(parsed["b"], "2");
        assert_eq!(parsed["c"], "3");
        assert_eq!(parsed["d"], "multiline");
        assert_eq!(parsed["e"], "x=y");
        assert_eq!(parsed.len(), 5);
    }
}
