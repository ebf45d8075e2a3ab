//! The vocabulary every fjord crate shares, defined once here at the bottom of the crate graph:
//! Kafka's error codes, its 128-bit `Uuid` (topic ids), `TopicPartition`, broker ids and leader
//! epochs, the key/value records and placement both coordinators use, and how client-sent regular
//! expressions are compiled. Nothing here does I/O.

pub mod errors;
pub mod pattern;
pub mod scram;
mod uuid;

pub use uuid::{Uuid, UuidError};

/// `host:port` as a socket address is written, an IPv6 host in brackets.
pub fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Who a connection acts as, as Kafka names principals (`User:alice`): the user a SASL
/// listener authenticated, or `User:ANONYMOUS` on a listener that authenticates no one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KafkaPrincipal {
    pub principal_type: String,
    pub name: String,
}

impl KafkaPrincipal {
    pub fn user(name: impl Into<String>) -> KafkaPrincipal {
        KafkaPrincipal {
            principal_type: "User".to_string(),
            name: name.into(),
        }
    }
}

impl KafkaPrincipal {
    /// The principal of a connection nobody authenticated (PLAINTEXT, SSL without a client
    /// certificate), as Kafka names it.
    pub fn anonymous() -> KafkaPrincipal {
        KafkaPrincipal::user("ANONYMOUS")
    }
}

/// Who sent a request and from where: what the authorizer compares ACLs with. One per
/// connection, made when it is accepted or authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requester {
    pub principal: KafkaPrincipal,
    /// `principal` as `Type:name`, as ACLs name it.
    principal_text: String,
    pub peer: std::net::SocketAddr,
    /// The client's address as Java writes it (`127.0.0.1`, `0:0:0:0:0:0:0:1`), as ACLs name
    /// hosts.
    host: String,
    /// Until when the connection is muted for a quota.
    mute: Mute,
    /// The client software its ApiVersions named (KIP-511), once it has.
    software: Software,
    /// How `principal` was established.
    pub authentication: Authentication,
}

/// How a connection's principal was established. Kafka serves delegation-token requests only
/// to a principal that proved who it is, other than with a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Authentication {
    /// By the listener alone: ANONYMOUS, or on an SSL listener a client certificate's name.
    #[default]
    Listener,
    /// SASL, with the user's own credentials.
    Sasl,
    /// SASL SCRAM with a delegation token: the principal is the token's owner.
    DelegationToken,
}

/// Until when a connection serves nothing more because its client went over a quota (KIP-219),
/// in ms since the epoch (0: not muted). Connection state, not part of who asks: any two are
/// equal.
#[derive(Debug, Default)]
struct Mute(std::sync::atomic::AtomicI64);

impl Clone for Mute {
    fn clone(&self) -> Self {
        Mute(std::sync::atomic::AtomicI64::new(
            self.0.load(std::sync::atomic::Ordering::Relaxed),
        ))
    }
}

impl PartialEq for Mute {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Mute {}

/// The client software name and version a connection's ApiVersions named. Connection state,
/// not part of who asks: any two are equal.
#[derive(Debug, Default, Clone)]
struct Software(std::sync::OnceLock<(String, String)>);

impl PartialEq for Software {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Software {}

impl Requester {
    pub fn new(principal: KafkaPrincipal, peer: std::net::SocketAddr) -> Requester {
        Requester {
            principal_text: principal.to_string(),
            principal,
            host: java_host_address(peer.ip()),
            peer,
            mute: Mute::default(),
            software: Software::default(),
            authentication: Authentication::Listener,
        }
    }

    /// The same requester, its principal established by `authentication`.
    pub fn authenticated_by(mut self, authentication: Authentication) -> Requester {
        self.authentication = authentication;
        self
    }

    /// Whether it may create, renew, expire or describe delegation tokens: only a principal
    /// that authenticated (SASL, or a client certificate), and not with a token, as Kafka.
    pub fn may_use_token_apis(&self) -> bool {
        match self.authentication {
            Authentication::Sasl => true,
            Authentication::DelegationToken => false,
            Authentication::Listener => self.principal != KafkaPrincipal::anonymous(),
        }
    }

    /// Mutes the connection for `throttle_ms` from `now_ms`: a client over a quota is served
    /// nothing more until its throttle has passed.
    pub fn mute_for(&self, throttle_ms: i32, now_ms: i64) {
        if throttle_ms > 0 {
            let until = now_ms.saturating_add(i64::from(throttle_ms));
            self.mute
                .0
                .fetch_max(until, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// How much longer, from `now_ms`, the connection is muted; None when it is not.
    pub fn muted_for(&self, now_ms: i64) -> Option<std::time::Duration> {
        let until = self.mute.0.load(std::sync::atomic::Ordering::Relaxed);
        (until > now_ms).then(|| std::time::Duration::from_millis((until - now_ms) as u64))
    }

    pub fn principal_text(&self) -> &str {
        &self.principal_text
    }

    /// Keeps the client software name and version the connection's ApiVersions named (the
    /// first it named: a client names itself once).
    pub fn named_software(&self, name: &str, version: &str) {
        if !name.is_empty() {
            let _ = self.software.0.set((name.to_string(), version.to_string()));
        }
    }

    /// The client software name and version, when the connection named them.
    pub fn software(&self) -> Option<(&str, &str)> {
        self.software
            .0
            .get()
            .map(|(name, version)| (name.as_str(), version.as_str()))
    }

    pub fn host(&self) -> &str {
        &self.host
    }
}

/// An address as Java's `InetAddress.getHostAddress` writes it: IPv6 without `::` shortening.
pub fn java_host_address(address: std::net::IpAddr) -> String {
    match address {
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => v6
                .segments()
                .iter()
                .map(|s| format!("{s:x}"))
                .collect::<Vec<_>>()
                .join(":"),
        },
    }
}

impl std::fmt::Display for KafkaPrincipal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.principal_type, self.name)
    }
}

/// A topic's id: Kafka's `Uuid`, all zero meaning none.
pub type TopicId = Uuid;

/// A broker's (or controller's) `node.id`.
pub type BrokerId = i32;

/// A partition's leader epoch: bumped by each leader election, stamped on every batch the leader
/// appends. Never goes back.
pub type LeaderEpoch = i32;

/// Locks `mutex`, carrying on if a thread panicked while holding it: every state guarded this
/// way is consistent at each step a lock is released, so a panic elsewhere is no reason to stop.
pub fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The wall clock in milliseconds since the Unix epoch, as Kafka's timestamps: read by the async
/// shells only, which pass it to the sans-IO cores.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Java's `String.hashCode` (over UTF-16 code units, wrapping), which Kafka uses to place
/// groups on `__consumer_offsets` partitions and partitions on replica fetchers.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// One record of a coordinator's topic (`__consumer_offsets`, `__transaction_state`) in Kafka's
/// key/value format; `value: None` is a tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinatorRecord {
    pub key: bytes::Bytes,
    pub value: Option<bytes::Bytes>,
}

/// The partition of a coordinator's topic that owns `key` (a group id, a transactional id):
/// Java's `String.hashCode`, made non-negative as Kafka's `Utils.abs` does, modulo the partition
/// count. A non-positive count gives partition 0.
pub fn coordinator_partition(key: &str, num_partitions: i32) -> i32 {
    if num_partitions <= 0 {
        0
    } else {
        kafka_abs(java_string_hash(key)) % num_partitions
    }
}

/// Kafka's `Utils.abs`: the absolute value, with `i32::MIN` (which has none) mapped to 0.
pub fn kafka_abs(n: i32) -> i32 {
    if n == i32::MIN {
        0
    } else {
        n.abs()
    }
}

/// One partition of one topic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }

    /// `<topic>-<partition>`, as Kafka prints a partition and names its log directory.
    pub fn dir_name(&self) -> String {
        self.to_string()
    }

    /// Parses `<topic>-<partition>`; the partition is the part after the last `-`.
    pub fn from_dir_name(name: &str) -> Option<TopicPartition> {
        let (topic, partition) = name.rsplit_once('-')?;
        if topic.is_empty()
            || partition.is_empty()
            || !partition.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        Some(TopicPartition::new(topic, partition.parse().ok()?))
    }
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_names_round_trip() {
        let tp = TopicPartition::new("my-topic.v2", 17);
        assert_eq!(tp.dir_name(), "my-topic.v2-17");
        assert_eq!(TopicPartition::from_dir_name(&tp.dir_name()), Some(tp));
        assert_eq!(TopicPartition::from_dir_name("nodash"), None);
        assert_eq!(TopicPartition::from_dir_name("t-"), None);
        assert_eq!(TopicPartition::from_dir_name("-3"), None);
        assert_eq!(TopicPartition::from_dir_name("t-x1"), None);
    }
}
