//! What the broker counts as it works, for Prometheus (`/metrics`, served by `server/http`).
//!
//! Counters and histograms here are moved on the paths they measure: `net` times every request
//! in Kafka's phases and counts connections, the produce and fetch handlers count each topic's
//! traffic, the flusher times its fsyncs. What is state rather than an event (partitions under
//! their ISR, the active controller, log sizes) is read when a scrape asks, by `server/`'s
//! collectors, and never kept twice.
//!
//! Cardinality is bounded: labels are API names (fixed), listener names (configured), phases
//! (fixed) and topics (those in the metadata image; a deleted topic's series go with it).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

/// Latency buckets, in seconds: 100 µs to 30 s.
const LATENCY_BUCKETS: [f64; 17] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// How many logs one group-commit round syncs: 1 to 4,096.
fn batch_histogram() -> Histogram {
    Histogram::new([
        1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0, 4096.0,
    ])
}

/// One label whose value comes from a fixed set (an API, an operation, a protocol).
type FixedLabel = [(&'static str, &'static str); 1];
type PhaseLabels = [(&'static str, &'static str); 2];
type ErrorLabels = [(&'static str, &'static str); 2];
type ListenerLabel = [(&'static str, String); 1];
type AuthLabels = [(&'static str, String); 2];

/// Everything the broker counts. One per node, shared as `Arc`.
#[derive(Debug, Default)]
pub struct Metrics {
    pub requests: RequestMetrics,
    pub connections: ConnectionMetrics,
    pub topics: TopicTraffic,
    pub storage: StorageMetrics,
    pub replication: ReplicationMetrics,
    pub delayed: DelayedOperations,
    pub coordinators: CoordinatorMetrics,
    pub heartbeats: HeartbeatMetrics,
}

impl Metrics {
    pub fn new() -> Arc<Metrics> {
        Arc::new(Metrics::default())
    }

    /// Registers every instrument in `registry` (its names prefixed `fjord_` by the caller's
    /// registry).
    pub fn register(&self, registry: &mut Registry) {
        let r = &self.requests;
        registry.register(
            "requests",
            "Requests answered, by API (Kafka: RequestMetrics RequestsPerSec)",
            r.count.clone(),
        );
        registry.register(
            "request_errors",
            "Error codes in answers, by API and error, NONE included; a request answered for many partitions counts each (Kafka: ErrorsPerSec)",
            r.errors.clone(),
        );
        registry.register_with_unit(
            "request_phase_duration",
            "Time a request spends in each phase, by API: queue (read, waiting for the connection's earlier requests and any quota mute), local (handled), remote (waiting for fsync, replicas, a long poll or the controller), response_queue (answered, waiting for earlier answers), send (Kafka: RequestQueueTimeMs, LocalTimeMs, RemoteTimeMs, ResponseQueueTimeMs, ResponseSendTimeMs)",
            Unit::Seconds,
            r.phases.clone(),
        );
        registry.register_with_unit(
            "request_duration",
            "Time from a request's last byte read to its answer's last byte written, by API (Kafka: TotalTimeMs)",
            Unit::Seconds,
            r.total.clone(),
        );
        registry.register_with_unit(
            "request_size",
            "Request frame bytes read, by API (Kafka: RequestBytes)",
            Unit::Bytes,
            r.bytes.clone(),
        );
        let c = &self.connections;
        registry.register(
            "connections",
            "Open client connections, by listener (Kafka: socket-server-metrics connection-count)",
            c.open.clone(),
        );
        registry.register(
            "connections_accepted",
            "Connections accepted, by listener (Kafka: connection-creation-total)",
            c.accepted.clone(),
        );
        registry.register(
            "authentications",
            "SASL and TLS authentications by listener and result (Kafka: successful-authentication-total, failed-authentication-total)",
            c.authentications.clone(),
        );
        let s = &self.storage;
        registry.register_with_unit(
            "log_flush_duration",
            "Time of each group-commit round's fsyncs (Kafka: LogFlushRateAndTimeMs)",
            Unit::Seconds,
            s.flush.clone(),
        );
        registry.register(
            "log_flush_batch_logs",
            "Logs synced by each group-commit round",
            s.flush_batch.clone(),
        );
        registry.register(
            "log_dir_fsyncs",
            "Logs the group commit synced, by log dir (Kafka: LogFlushRateAndTimeMs count)",
            s.fsyncs.clone(),
        );
        let rep = &self.replication;
        registry.register(
            "isr_shrinks",
            "Times a partition this broker leads lost a replica from its ISR (Kafka: IsrShrinksPerSec)",
            rep.isr_shrinks.clone(),
        );
        registry.register(
            "isr_expands",
            "Times a partition this broker leads took a replica back into its ISR (Kafka: IsrExpandsPerSec)",
            rep.isr_expands.clone(),
        );
        registry.register_with_unit(
            "replication_in",
            "Record bytes this broker appended as a follower (Kafka: ReplicationBytesInPerSec)",
            Unit::Bytes,
            rep.bytes_in.clone(),
        );
        registry.register_with_unit(
            "replication_out",
            "Record bytes this broker sent to followers (Kafka: ReplicationBytesOutPerSec)",
            Unit::Bytes,
            rep.bytes_out.clone(),
        );
        self.register_waits_and_coordinators(registry);
    }

    /// The requests waiting in purgatory and the coordinators' events, each fixed label there
    /// from the start.
    fn register_waits_and_coordinators(&self, registry: &mut Registry) {
        let d = &self.delayed;
        for operation in DelayedOperation::ALL {
            let _ = d.waiting.get_or_create(&[("operation", operation.name())]);
        }
        registry.register(
            "delayed_operations",
            "Requests waiting in purgatory: produce for fsync or acks=all replication, fetch (consumers' and followers') for data (Kafka: DelayedOperationPurgatory PurgatorySize)",
            d.waiting.clone(),
        );
        let co = &self.coordinators;
        for protocol in ["classic", "consumer", "share"] {
            let _ = co.rebalances.get_or_create(&[("protocol", protocol)]);
        }
        for result in ["commit", "abort"] {
            let _ = co.markers.get_or_create(&[("result", result)]);
        }
        registry.register(
            "group_rebalances",
            "Rebalances of the groups this broker coordinates: a classic group's new generation, a consumer group's new target assignment (Kafka: group-rebalance-count, consumer-group-rebalance-count)",
            co.rebalances.clone(),
        );
        registry.register(
            "txn_markers_written",
            "Transaction markers this broker appended as a partition leader, by result",
            co.markers.clone(),
        );
    }
}

/// The phases of a request's time, as Kafka's request metrics split it.
#[derive(Debug, Clone, Copy)]
pub struct RequestTiming {
    /// The request's API key and version.
    pub api_key: i16,
    pub api_version: i16,
    /// Its frame's size in bytes.
    pub size: usize,
    /// When its last byte was read.
    pub read: Instant,
    /// When the handler took it.
    pub dispatched: Instant,
    /// When the handler returned (answered, or handed a future over).
    pub handled: Instant,
}

/// The phases' names, in order.
pub const PHASES: [&str; 5] = ["queue", "local", "remote", "response_queue", "send"];

impl RequestTiming {
    /// Time in each of `PHASES`, given when the answer was `ready`, began `sending` and was
    /// `sent`.
    pub fn phases(&self, ready: Instant, sending: Instant, sent: Instant) -> [Duration; 5] {
        [
            self.dispatched.saturating_duration_since(self.read),
            self.handled.saturating_duration_since(self.dispatched),
            ready.saturating_duration_since(self.handled),
            sending.saturating_duration_since(ready),
            sent.saturating_duration_since(sending),
        ]
    }
}

/// Requests by API: counts, bytes, and time in each phase.
#[derive(Debug)]
pub struct RequestMetrics {
    count: Family<FixedLabel, Counter>,
    errors: Family<ErrorLabels, Counter>,
    bytes: Family<FixedLabel, Counter>,
    phases: Family<PhaseLabels, Histogram, fn() -> Histogram>,
    total: Family<FixedLabel, Histogram, fn() -> Histogram>,
}

impl Default for RequestMetrics {
    fn default() -> Self {
        RequestMetrics {
            count: Family::default(),
            errors: Family::default(),
            bytes: Family::default(),
            phases: Family::new_with_constructor(latency_histogram),
            total: Family::new_with_constructor(latency_histogram),
        }
    }
}

impl RequestMetrics {
    /// Counts the error codes an answer to `api` carries (`visit` calls back with each, nested
    /// ones included), NONE among them, as Kafka's `ErrorsPerSec` does.
    pub fn answered_with(
        &self,
        api: fjord_protocol::ApiKey,
        visit: impl FnOnce(&mut dyn FnMut(i16)),
    ) {
        // Most answers carry one code many times (every partition NONE): counted once each.
        let mut seen: Vec<(i16, u64)> = Vec::new();
        visit(
            &mut |code| match seen.iter_mut().find(|(c, _)| *c == code) {
                Some((_, n)) => *n += 1,
                None => seen.push((code, 1)),
            },
        );
        for (code, n) in seen {
            let error = fjord_common::errors::name(code);
            self.errors
                .get_or_create(&[("api", api.name()), ("error", error)])
                .inc_by(n);
        }
    }

    /// A request answered: `timing` up to its handler, `ready` when its answer was, and
    /// `sending` / `sent` around writing it. Unknown API keys are not counted (such a frame
    /// closes its connection).
    pub fn answered(
        &self,
        timing: &RequestTiming,
        ready: Instant,
        sending: Instant,
        sent: Instant,
    ) {
        let Some(api) = fjord_protocol::ApiKey::from_i16(timing.api_key) else {
            return;
        };
        let api = api.name();
        let label = [("api", api)];
        self.count.get_or_create(&label).inc();
        self.bytes.get_or_create(&label).inc_by(timing.size as u64);
        for (phase, took) in PHASES.into_iter().zip(timing.phases(ready, sending, sent)) {
            self.phases
                .get_or_create(&[("api", api), ("phase", phase)])
                .observe(took.as_secs_f64());
        }
        self.total
            .get_or_create(&label)
            .observe(sent.saturating_duration_since(timing.read).as_secs_f64());
    }
}

/// Connections by listener.
#[derive(Debug, Default)]
pub struct ConnectionMetrics {
    open: Family<ListenerLabel, Gauge>,
    accepted: Family<ListenerLabel, Counter>,
    authentications: Family<AuthLabels, Counter>,
}

impl ConnectionMetrics {
    /// A connection accepted on `listener`; it counts as open until the guard is dropped.
    pub fn opened(&self, listener: &str) -> OpenConnection {
        let label = [("listener", listener.to_string())];
        self.accepted.get_or_create(&label).inc();
        let gauge = self.open.get_or_create_owned(&label);
        gauge.inc();
        OpenConnection(gauge)
    }

    /// A SASL exchange or TLS client check on `listener` ended, `succeeded` or not.
    pub fn authenticated(&self, listener: &str, succeeded: bool) {
        let result = if succeeded { "success" } else { "failure" };
        self.authentications
            .get_or_create(&[
                ("listener", listener.to_string()),
                ("result", result.into()),
            ])
            .inc();
    }
}

/// An open connection, counted until dropped.
#[derive(Debug)]
pub struct OpenConnection(Gauge);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Each topic's traffic: what clients produced and consumers fetched.
#[derive(Debug, Default)]
pub struct TopicTraffic {
    topics: Mutex<HashMap<String, Arc<TopicCounters>>>,
}

#[derive(Debug, Default)]
struct TopicCounters {
    bytes_in: AtomicU64,
    messages_in: AtomicU64,
    bytes_out: AtomicU64,
    messages_out: AtomicU64,
}

impl TopicTraffic {
    /// A client's batch of `records` records in `bytes` bytes appended to `topic`.
    pub fn produced(&self, topic: &str, bytes: usize, records: i64) {
        let counters = self.counters(topic);
        counters.bytes_in.fetch_add(bytes as u64, Ordering::Relaxed);
        counters
            .messages_in
            .fetch_add(u64::try_from(records).unwrap_or(0), Ordering::Relaxed);
    }

    /// `bytes` of `topic`'s record batches, holding `records` records, sent to a consumer.
    pub fn fetched(&self, topic: &str, bytes: u64, records: u64) {
        if bytes > 0 {
            let counters = self.counters(topic);
            counters.bytes_out.fetch_add(bytes, Ordering::Relaxed);
            counters.messages_out.fetch_add(records, Ordering::Relaxed);
        }
    }

    fn counters(&self, topic: &str) -> Arc<TopicCounters> {
        let mut topics = fjord_common::lock(&self.topics);
        if let Some(counters) = topics.get(topic) {
            return counters.clone();
        }
        topics.entry(topic.to_string()).or_default().clone()
    }

    /// Bytes in, records in and bytes out summed over every topic.
    pub fn totals(&self) -> [u64; 3] {
        fjord_common::lock(&self.topics).values().fold(
            [0; 3],
            |[bytes_in, messages_in, bytes_out], c| {
                [
                    bytes_in + c.bytes_in.load(Ordering::Relaxed),
                    messages_in + c.messages_in.load(Ordering::Relaxed),
                    bytes_out + c.bytes_out.load(Ordering::Relaxed),
                ]
            },
        )
    }

    /// Forgets the topics `exists` says are gone, so a deleted topic's series end.
    pub fn retain(&self, exists: impl Fn(&str) -> bool) {
        fjord_common::lock(&self.topics).retain(|topic, _| exists(topic));
    }

    /// The per-topic counters, for a scrape.
    pub fn encode(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // Read out first: producers are not held up by the encoding.
        let mut rows: Vec<(String, [u64; 4])> = fjord_common::lock(&self.topics)
            .iter()
            .map(|(topic, c)| {
                let values = [&c.bytes_in, &c.messages_in, &c.bytes_out, &c.messages_out];
                (topic.clone(), values.map(|v| v.load(Ordering::Relaxed)))
            })
            .collect();
        rows.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let series = [
            (
                "topic_in",
                "Record bytes clients produced to each topic (Kafka: BytesInPerSec)",
                Some(Unit::Bytes),
            ),
            (
                "topic_messages_in",
                "Records clients produced to each topic (Kafka: MessagesInPerSec)",
                None,
            ),
            (
                "topic_out",
                "Record bytes consumers fetched from each topic (Kafka: BytesOutPerSec)",
                Some(Unit::Bytes),
            ),
            (
                "topic_messages_out",
                "Records consumers fetched from each topic, whole batches as sent (Kafka has no such meter)",
                None,
            ),
        ];
        for (index, (name, help, unit)) in series.into_iter().enumerate() {
            let mut family =
                encoder.encode_descriptor(name, help, unit.as_ref(), MetricType::Counter)?;
            for (topic, values) in &rows {
                let labels = [("topic", topic.as_str())];
                ConstCounter::new(values[index]).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// The flusher's fsyncs.
#[derive(Debug)]
pub struct StorageMetrics {
    flush: Histogram,
    flush_batch: Histogram,
    fsyncs: Family<DirLabel, Counter>,
}

type DirLabel = [(&'static str, String); 1];

impl Default for StorageMetrics {
    fn default() -> Self {
        StorageMetrics {
            flush: latency_histogram(),
            flush_batch: batch_histogram(),
            fsyncs: Family::default(),
        }
    }
}

impl StorageMetrics {
    /// A group-commit round synced `logs` logs in `took`.
    pub fn flushed(&self, logs: usize, took: Duration) {
        self.flush.observe(took.as_secs_f64());
        self.flush_batch.observe(logs as f64);
    }

    /// One log of the log dir `dir` synced.
    pub fn synced_in(&self, dir: &std::path::Path) {
        self.fsyncs.get_or_create(&[("dir", dir_label(dir))]).inc();
    }
}

/// A log dir as its series' `dir` label names it: the absolute path.
pub fn dir_label(dir: &std::path::Path) -> String {
    std::path::absolute(dir)
        .unwrap_or_else(|_| dir.to_path_buf())
        .display()
        .to_string()
}

/// What waits in purgatory, as Kafka names its delayed operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelayedOperation {
    Produce,
    Fetch,
}

impl DelayedOperation {
    const ALL: [DelayedOperation; 2] = [DelayedOperation::Produce, DelayedOperation::Fetch];

    fn name(self) -> &'static str {
        match self {
            DelayedOperation::Produce => "produce",
            DelayedOperation::Fetch => "fetch",
        }
    }
}

/// Requests waiting for what their answer needs.
#[derive(Debug, Default)]
pub struct DelayedOperations {
    waiting: Family<FixedLabel, Gauge>,
}

impl DelayedOperations {
    /// A request of `operation` starts waiting; it counts until the guard is dropped.
    pub fn delayed(&self, operation: DelayedOperation) -> Delayed {
        let gauge = self
            .waiting
            .get_or_create_owned(&[("operation", operation.name())]);
        gauge.inc();
        Delayed(gauge)
    }
}

/// A request in purgatory, counted until dropped.
#[derive(Debug)]
pub struct Delayed(Gauge);

impl Drop for Delayed {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The group and transaction coordinators' events.
#[derive(Debug, Default)]
pub struct CoordinatorMetrics {
    rebalances: Family<FixedLabel, Counter>,
    markers: Family<FixedLabel, Counter>,
}

impl CoordinatorMetrics {
    /// Rebalances the group coordinator ran: `classic` new generations, `consumer` and `share`
    /// new target assignments.
    pub fn rebalanced(&self, classic: u64, consumer: u64, share: u64) {
        for (protocol, n) in [
            ("classic", classic),
            ("consumer", consumer),
            ("share", share),
        ] {
            if n > 0 {
                self.rebalances
                    .get_or_create(&[("protocol", protocol)])
                    .inc_by(n);
            }
        }
    }

    /// A transaction marker appended as a partition leader.
    pub fn marker_written(&self, commit: bool) {
        let result = if commit { "commit" } else { "abort" };
        self.markers.get_or_create(&[("result", result)]).inc();
    }
}

/// The broker's heartbeats to the controller.
#[derive(Debug, Default)]
pub struct HeartbeatMetrics {
    /// When the last heartbeat the controller answered was sent, in ms since the Unix epoch; 0
    /// before the first.
    answered_ms: AtomicI64,
}

impl HeartbeatMetrics {
    /// The controller answered a heartbeat sent at `sent_ms`.
    pub fn answered(&self, sent_ms: i64) {
        self.answered_ms.fetch_max(sent_ms, Ordering::Relaxed);
    }

    /// How long ago the last heartbeat the controller answered was sent; None before the first
    /// answer.
    pub fn since_answered(&self, now_ms: i64) -> Option<Duration> {
        let answered = self.answered_ms.load(Ordering::Relaxed);
        (answered > 0).then(|| Duration::from_millis(now_ms.saturating_sub(answered).max(0) as u64))
    }
}

/// Replication's events.
#[derive(Debug, Default)]
pub struct ReplicationMetrics {
    pub isr_shrinks: Counter,
    pub isr_expands: Counter,
    pub bytes_in: Counter,
    pub bytes_out: Counter,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::collector::Collector;

    #[derive(Debug)]
    struct Topics(Arc<Metrics>);

    impl Collector for Topics {
        fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
            self.0.topics.encode(&mut encoder)
        }
    }

    fn exposition(metrics: &Arc<Metrics>) -> String {
        let mut registry = Registry::with_prefix("fjord");
        metrics.register(&mut registry);
        registry.register_collector(Box::new(Topics(metrics.clone())));
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn a_request_is_counted_once_with_each_phase_timed() {
        let metrics = Metrics::new();
        let read = Instant::now();
        let timing = RequestTiming {
            api_key: 0,
            api_version: 9,
            size: 100,
            read,
            dispatched: read + Duration::from_millis(1),
            handled: read + Duration::from_millis(2),
        };
        let ready = read + Duration::from_millis(12);
        metrics
            .requests
            .answered(&timing, ready, ready, ready + Duration::from_millis(1));
        metrics
            .requests
            .answered_with(fjord_protocol::ApiKey::Produce, |visit| {
                for code in [0, 0, 6, 0] {
                    visit(code);
                }
            });
        // An unknown API key is not a label.
        metrics.requests.answered(
            &RequestTiming {
                api_key: 9999,
                ..timing
            },
            ready,
            ready,
            ready,
        );
        let text = exposition(&metrics);
        assert!(
            text.contains("fjord_requests_total{api=\"Produce\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("fjord_request_size_bytes_total{api=\"Produce\"} 100\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "fjord_request_phase_duration_seconds_count{api=\"Produce\",phase=\"remote\"} 1\n"
            ),
            "{text}"
        );
        // 10 ms remote: within 25 ms, not within 5 ms.
        assert!(
            text.contains("fjord_request_phase_duration_seconds_bucket{api=\"Produce\",phase=\"remote\",le=\"0.025\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("fjord_request_phase_duration_seconds_bucket{api=\"Produce\",phase=\"remote\",le=\"0.005\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("fjord_request_duration_seconds_sum{api=\"Produce\"} 0.013"),
            "{text}"
        );
        assert_eq!(text.matches("fjord_requests_total{").count(), 1, "{text}");
        assert!(
            text.contains("fjord_request_errors_total{api=\"Produce\",error=\"NONE\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "fjord_request_errors_total{api=\"Produce\",error=\"NOT_LEADER_OR_FOLLOWER\"} 1\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn topics_count_their_traffic_and_a_removed_topic_leaves() {
        let metrics = Metrics::new();
        metrics.topics.produced("a", 1000, 10);
        metrics.topics.produced("a", 500, 5);
        metrics.topics.fetched("a", 700, 7);
        metrics.topics.produced("b", 1, 1);
        let text = exposition(&metrics);
        assert!(
            text.contains("fjord_topic_in_bytes_total{topic=\"a\"} 1500\n"),
            "{text}"
        );
        assert!(
            text.contains("fjord_topic_messages_in_total{topic=\"a\"} 15\n"),
            "{text}"
        );
        assert!(
            text.contains("fjord_topic_out_bytes_total{topic=\"a\"} 700\n"),
            "{text}"
        );
        assert!(
            text.contains("fjord_topic_out_bytes_total{topic=\"b\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("fjord_topic_messages_out_total{topic=\"a\"} 7\n"),
            "{text}"
        );
        metrics.topics.retain(|topic| topic == "a");
        let text = exposition(&metrics);
        assert!(!text.contains("topic=\"b\""), "{text}");
    }

    #[test]
    fn waits_rebalances_markers_and_fsyncs_are_counted() {
        let metrics = Metrics::new();
        let text = exposition(&metrics);
        // Every fixed label is there from the start, at 0.
        for series in [
            "fjord_delayed_operations{operation=\"produce\"} 0\n",
            "fjord_delayed_operations{operation=\"fetch\"} 0\n",
            "fjord_group_rebalances_total{protocol=\"consumer\"} 0\n",
            "fjord_group_rebalances_total{protocol=\"share\"} 0\n",
            "fjord_txn_markers_written_total{result=\"abort\"} 0\n",
        ] {
            assert!(text.contains(series), "{series} in {text}");
        }
        let first = metrics.delayed.delayed(DelayedOperation::Fetch);
        let second = metrics.delayed.delayed(DelayedOperation::Fetch);
        drop(first);
        metrics.coordinators.rebalanced(2, 0, 3);
        metrics.coordinators.marker_written(true);
        metrics.storage.synced_in(std::path::Path::new("/data/a"));
        metrics.storage.synced_in(std::path::Path::new("/data/a"));
        let text = exposition(&metrics);
        for series in [
            "fjord_delayed_operations{operation=\"fetch\"} 1\n",
            "fjord_group_rebalances_total{protocol=\"classic\"} 2\n",
            "fjord_group_rebalances_total{protocol=\"consumer\"} 0\n",
            "fjord_group_rebalances_total{protocol=\"share\"} 3\n",
            "fjord_txn_markers_written_total{result=\"commit\"} 1\n",
            "fjord_log_dir_fsyncs_total{dir=\"/data/a\"} 2\n",
        ] {
            assert!(text.contains(series), "{series} in {text}");
        }
        drop(second);
        assert!(exposition(&metrics).contains("fjord_delayed_operations{operation=\"fetch\"} 0\n"));
    }

    #[test]
    fn a_heartbeat_answer_is_dated() {
        let heartbeats = HeartbeatMetrics::default();
        assert_eq!(heartbeats.since_answered(5_000), None);
        heartbeats.answered(1_000);
        // An answer dated earlier (a late one) does not move the date back.
        heartbeats.answered(900);
        assert_eq!(
            heartbeats.since_answered(4_000),
            Some(Duration::from_millis(3_000))
        );
        assert_eq!(heartbeats.since_answered(500), Some(Duration::ZERO));
    }

    #[test]
    fn open_connections_fall_as_they_close() {
        let metrics = Metrics::new();
        let first = metrics.connections.opened("PLAINTEXT");
        let second = metrics.connections.opened("PLAINTEXT");
        drop(first);
        metrics.connections.authenticated("PLAINTEXT", false);
        let text = exposition(&metrics);
        assert!(
            text.contains("fjord_connections{listener=\"PLAINTEXT\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("fjord_connections_accepted_total{listener=\"PLAINTEXT\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "fjord_authentications_total{listener=\"PLAINTEXT\",result=\"failure\"} 1\n"
            ),
            "{text}"
        );
        drop(second);
        assert!(exposition(&metrics).contains("fjord_connections{listener=\"PLAINTEXT\"} 0\n"));
    }
}
