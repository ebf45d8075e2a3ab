//! Client telemetry (KIP-714): which metrics each client should push and how often
//! (GetTelemetrySubscriptions, from the cluster's client-metrics subscriptions), the checks of
//! each push (PushTelemetry) with Kafka's rules and error codes, and — beyond Kafka, which hands
//! pushes to a plugin — the pushed gauges and sums kept for this node's `/metrics`, labelled
//! with the client id and principal. Sans-IO: the time is passed in; the caller brings the
//! subscriptions from the metadata image. The broker's `api` serves it on the wire and its
//! `server/observe` adds what clients pushed to the exposition.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
#![cfg_attr(
    test,
    allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod otlp;
mod received;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use fjord_common::{errors, Uuid};
use fjord_config::client_metrics::{self, Selector, Subscription, DEFAULT_PUSH_INTERVAL_MS};
use fjord_protocol::messages::get_telemetry_subscriptions_response::GetTelemetrySubscriptionsResponse;
use fjord_protocol::messages::push_telemetry_request::PushTelemetryRequest;
use fjord_records::Compression;
use prometheus_client::encoding::DescriptorEncoder;

use received::Received;

/// Client instances remembered at once; a new one beyond this evicts the least recently seen.
const MAX_INSTANCES: usize = 16_384;
/// An instance unheard of for this long (or three push intervals, if longer) is forgotten.
const MIN_EXPIRY_MS: i64 = 60_000;
/// Kafka's reserved id 1 (`Uuid.ONE_UUID`), never a client's.
const RESERVED_ONE: Uuid = Uuid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
/// The compression types a push may use, in the order clients should prefer them.
const ACCEPTED_COMPRESSION: [Compression; 4] = [
    Compression::Zstd,
    Compression::Lz4,
    Compression::Gzip,
    Compression::Snappy,
];

/// Who a client is, as subscriptions' `match` selectors and `/metrics` labels see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    pub client_id: String,
    pub software: Option<(String, String)>,
    pub address: String,
    pub port: u16,
    pub principal: String,
}

/// What one client instance was told, and when it last asked and pushed.
#[derive(Debug)]
struct Instance {
    identity: ClientIdentity,
    /// The subscriptions' version it was told about.
    version: u64,
    subscription_id: i32,
    metrics: Vec<String>,
    interval_ms: i32,
    last_get_ms: i64,
    last_push_ms: i64,
    last_error: i16,
    terminating: bool,
    last_seen_ms: i64,
}

impl Instance {
    fn expires_at(&self) -> i64 {
        self.last_seen_ms + MIN_EXPIRY_MS.max(3 * i64::from(self.interval_ms))
    }
}

#[derive(Debug, Default)]
struct State {
    /// The subscriptions as the image last had them, and checked.
    source: BTreeMap<String, BTreeMap<String, String>>,
    subscriptions: Vec<Subscription>,
    /// Bumped at every change of the subscriptions: instances told an older set are told again.
    version: u64,
    instances: HashMap<Uuid, Instance>,
    received: Received,
    /// When the instances are next swept for the expired: at most once a second, not at every
    /// request (a sweep reads every instance).
    next_sweep_ms: i64,
}

/// How often the expired instances are swept out.
const SWEEP_INTERVAL_MS: i64 = 1_000;

/// This broker's client telemetry.
#[derive(Debug)]
pub struct ClientTelemetry {
    state: Mutex<State>,
    /// `telemetry.max.bytes`: the largest push, compressed and decompressed.
    max_bytes: i32,
}

impl ClientTelemetry {
    pub fn new(max_bytes: i32) -> ClientTelemetry {
        ClientTelemetry {
            state: Mutex::new(State::default()),
            max_bytes,
        }
    }

    /// Follows the cluster's client-metrics subscriptions. One the controller accepted but that
    /// no longer checks (it cannot happen through the APIs) is left out, with a warning.
    pub fn follow(&self, subscriptions: &BTreeMap<String, BTreeMap<String, String>>) {
        let mut state = fjord_common::lock(&self.state);
        if &state.source == subscriptions {
            return;
        }
        state.source = subscriptions.clone();
        state.subscriptions = subscriptions
            .iter()
            .filter_map(
                |(name, configs)| match client_metrics::subscription(name, configs) {
                    Ok(subscription) => Some(subscription),
                    Err(refused) => {
                        tracing::warn!(
                            name,
                            reason = refused.message,
                            "client-metrics subscription left out"
                        );
                        None
                    }
                },
            )
            .collect();
        state.version += 1;
    }

    /// GetTelemetrySubscriptions: the metrics `instance_id` (a new id for the zero id) should
    /// push and how often, or THROTTLING_QUOTA_EXCEEDED for one asking again within its push
    /// interval (unless its last push was refused for a stale subscription or compression).
    pub fn subscriptions(
        &self,
        instance_id: Uuid,
        identity: ClientIdentity,
        now_ms: i64,
    ) -> GetTelemetrySubscriptionsResponse {
        let mut state = fjord_common::lock(&self.state);
        state.expire(now_ms);
        let id = if instance_id == Uuid::ZERO {
            new_instance_id(&state)
        } else {
            instance_id
        };
        let instance = state.instance(id, identity, now_ms);
        let since = now_ms - instance.last_get_ms.max(instance.last_push_ms);
        // A new instance (or one told a changed set) has not asked yet.
        let may_ask_early = (instance.last_get_ms, instance.last_push_ms) == (0, 0)
            || matches!(
                instance.last_error,
                errors::UNKNOWN_SUBSCRIPTION_ID | errors::UNSUPPORTED_COMPRESSION_TYPE
            );
        if since < i64::from(instance.interval_ms) && !may_ask_early {
            return GetTelemetrySubscriptionsResponse {
                error_code: errors::THROTTLING_QUOTA_EXCEEDED,
                ..Default::default()
            };
        }
        instance.last_get_ms = now_ms;
        instance.last_error = errors::NONE;
        GetTelemetrySubscriptionsResponse {
            throttle_time_ms: 0,
            error_code: errors::NONE,
            client_instance_id: id,
            subscription_id: instance.subscription_id,
            accepted_compression_types: ACCEPTED_COMPRESSION.iter().map(|c| c.id() as i8).collect(),
            push_interval_ms: instance.interval_ms,
            telemetry_max_bytes: self.max_bytes,
            delta_temporality: true,
            requested_metrics: instance.metrics.clone(),
        }
    }

    /// PushTelemetry: checked in Kafka's order (instance id, a push after termination, the
    /// push interval, the subscription, the compression, the size), then decompressed and
    /// read; its gauges and sums are kept for `/metrics`. Answers the error code.
    pub fn push(
        &self,
        request: &PushTelemetryRequest,
        identity: ClientIdentity,
        now_ms: i64,
    ) -> i16 {
        let id = request.client_instance_id;
        if id == Uuid::ZERO || id == RESERVED_ONE {
            return errors::INVALID_REQUEST;
        }
        let mut state = fjord_common::lock(&self.state);
        state.expire(now_ms);
        let instance = state.instance(id, identity, now_ms);
        let code = check_push(instance, request, self.max_bytes, now_ms);
        instance.terminating |= request.terminating;
        instance.last_error = code;
        if code != errors::NONE || request.metrics.is_empty() {
            return code;
        }
        let identity = instance.identity.clone();
        match self.read(&request.metrics, request.compression_type) {
            Ok(samples) => {
                state.received.record(id, &identity, samples);
                errors::NONE
            }
            Err(reason) => {
                tracing::debug!(client_id = identity.client_id, %reason, "client metrics push refused");
                if let Some(instance) = state.instances.get_mut(&id) {
                    instance.last_error = errors::INVALID_RECORD;
                }
                errors::INVALID_RECORD
            }
        }
    }

    fn read(&self, payload: &Bytes, compression: i8) -> Result<Vec<otlp::Sample>, String> {
        let codec = Compression::from_id(i16::from(compression)).map_err(|e| e.to_string())?;
        let max = usize::try_from(self.max_bytes).unwrap_or(0);
        let data = fjord_records::decompress(codec, payload, max).map_err(|e| e.to_string())?;
        otlp::samples(&data).map_err(|e| e.to_string())
    }

    /// The pushed metrics, as Prometheus families.
    pub fn encode(&self, encoder: &mut DescriptorEncoder, now_ms: i64) -> std::fmt::Result {
        let mut state = fjord_common::lock(&self.state);
        state.expire(now_ms);
        state.received.encode(encoder)
    }

    /// The pushed metrics alone in Prometheus' text format (the broker adds them to its own
    /// exposition with [`ClientTelemetry::encode`]).
    pub fn exposition(self: &Arc<Self>, now_ms: i64) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(Exposed(self.clone(), now_ms)));
        prometheus_client::encoding::text::encode(&mut text, &registry)?;
        Ok(text)
    }

    #[cfg(test)]
    fn instances(&self) -> usize {
        fjord_common::lock(&self.state).instances.len()
    }
}

/// The pushed metrics as a collector of their own registry.
#[derive(Debug)]
struct Exposed(Arc<ClientTelemetry>, i64);

impl prometheus_client::collector::Collector for Exposed {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        self.0.encode(&mut encoder, self.1)
    }
}

/// Kafka's checks of a push, after its instance id; updates the push time when the push is
/// in time.
fn check_push(
    instance: &mut Instance,
    request: &PushTelemetryRequest,
    max_bytes: i32,
    now_ms: i64,
) -> i16 {
    if instance.terminating {
        return errors::INVALID_REQUEST;
    }
    // The first push after a GetTelemetrySubscriptions may come at once (clients start with a
    // jittered wait); later ones a push interval apart, unless the client is closing.
    let in_time = instance.last_get_ms > instance.last_push_ms
        || now_ms - instance.last_push_ms >= i64::from(instance.interval_ms);
    if in_time {
        instance.last_push_ms = now_ms;
    } else if !request.terminating {
        return errors::THROTTLING_QUOTA_EXCEEDED;
    }
    if request.subscription_id != instance.subscription_id {
        return errors::UNKNOWN_SUBSCRIPTION_ID;
    }
    if Compression::from_id(i16::from(request.compression_type)).is_err() {
        return errors::UNSUPPORTED_COMPRESSION_TYPE;
    }
    if request.metrics.len() > usize::try_from(max_bytes).unwrap_or(0) {
        return errors::TELEMETRY_TOO_LARGE;
    }
    errors::NONE
}

impl State {
    /// Instance `id`, made or told the current subscriptions afresh as needed, marked seen.
    fn instance(&mut self, id: Uuid, identity: ClientIdentity, now_ms: i64) -> &mut Instance {
        let mut identity = identity;
        if self
            .instances
            .get(&id)
            .is_some_and(|instance| instance.version != self.version)
        {
            // A client told an older set keeps who it first said it was.
            if let Some(old) = self.instances.remove(&id) {
                identity = old.identity;
            }
        }
        if !self.instances.contains_key(&id) && self.instances.len() >= MAX_INSTANCES {
            self.evict_least_recently_seen();
        }
        let (subscriptions, version) = (&self.subscriptions, self.version);
        let instance = self
            .instances
            .entry(id)
            .or_insert_with(|| make_instance(subscriptions, version, id, identity));
        instance.last_seen_ms = now_ms;
        instance
    }

    fn evict_least_recently_seen(&mut self) {
        let oldest = self
            .instances
            .iter()
            .min_by_key(|(_, instance)| instance.last_seen_ms)
            .map(|(id, _)| *id);
        if let Some(id) = oldest {
            self.instances.remove(&id);
            self.received.forget(id);
        }
    }

    /// Forgets the instances unheard of past their expiry, with their pushed metrics.
    fn expire(&mut self, now_ms: i64) {
        if now_ms < self.next_sweep_ms {
            return;
        }
        self.next_sweep_ms = now_ms.saturating_add(SWEEP_INTERVAL_MS);
        let expired: Vec<Uuid> = self
            .instances
            .iter()
            .filter(|(_, instance)| instance.expires_at() <= now_ms)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            self.instances.remove(&id);
            self.received.forget(id);
        }
    }
}

/// An instance told the subscriptions that match it: every metric any of them asks for (`*`
/// alone when one asks for all), at the shortest of their intervals.
fn make_instance(
    subscriptions: &[Subscription],
    version: u64,
    id: Uuid,
    identity: ClientIdentity,
) -> Instance {
    let value_of = |selector: Selector| -> Option<String> {
        Some(match selector {
            Selector::ClientInstanceId => id.to_string(),
            Selector::ClientId => identity.client_id.clone(),
            Selector::ClientSoftwareName => identity.software.as_ref()?.0.clone(),
            Selector::ClientSoftwareVersion => identity.software.as_ref()?.1.clone(),
            Selector::ClientSourceAddress => identity.address.clone(),
            Selector::ClientSourcePort => identity.port.to_string(),
        })
    };
    let mut interval_ms = DEFAULT_PUSH_INTERVAL_MS;
    let mut metrics: Vec<String> = Vec::new();
    for subscription in subscriptions.iter().filter(|s| s.matches(value_of)) {
        interval_ms = interval_ms.min(subscription.interval_ms);
        for metric in &subscription.metrics {
            if !metrics.contains(metric) {
                metrics.push(metric.clone());
            }
        }
    }
    if metrics.iter().any(|m| m == "*") {
        metrics = vec!["*".to_string()];
    }
    metrics.sort();
    Instance {
        subscription_id: subscription_id(&metrics, interval_ms, id),
        identity,
        version,
        metrics,
        interval_ms,
        last_get_ms: 0,
        last_push_ms: 0,
        last_error: errors::NONE,
        terminating: false,
        last_seen_ms: 0,
    }
}

/// A new instance id, none of the remembered ones nor a reserved one.
fn new_instance_id(state: &State) -> Uuid {
    loop {
        let id = Uuid(*uuid::Uuid::new_v4().as_bytes());
        if id != Uuid::ZERO && id != RESERVED_ONE && !state.instances.contains_key(&id) {
            return id;
        }
    }
}

/// The same for every broker given the same subscriptions and instance: a client may push to
/// any of them.
fn subscription_id(metrics: &[String], interval_ms: i32, id: Uuid) -> i32 {
    let text = format!("{}{interval_ms}", metrics.join(","));
    let crc = crc32c::crc32c(text.as_bytes()) as i32;
    let bytes = id.0;
    let half = |range: std::ops::Range<usize>| {
        bytes
            .get(range)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map_or(0, u64::from_be_bytes)
    };
    let folded = half(0..8) ^ half(8..16);
    crc ^ ((folded >> 32) as i32 ^ folded as i32)
}

#[cfg(test)]
mod tests;
