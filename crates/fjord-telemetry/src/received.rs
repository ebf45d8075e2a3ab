//! The gauges and sums clients pushed, kept per client instance for this node's `/metrics`:
//! `fjord_client_<name>` (the client's metric name less `org.apache.kafka.`, in Prometheus'
//! form) labelled with the client id, principal and instance id and the data point's own
//! attributes. Delta sums are added up into totals. Bounded: a client adds at most
//! [`MAX_SERIES_PER_CLIENT`] series, all clients at most [`MAX_SERIES`]; past that new series
//! are dropped (and counted).

use std::collections::{BTreeMap, HashMap};

use fjord_common::Uuid;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::otlp::{Kind, Sample};
use super::ClientIdentity;

/// Series one client instance may add.
pub const MAX_SERIES_PER_CLIENT: usize = 2_000;
/// Series all clients together may add.
pub const MAX_SERIES: usize = 50_000;

type SeriesKey = (String, Vec<(String, String)>);
/// One family's rows for an exposition: each series' labels and value.
type Rows<'a> = Vec<(Vec<(&'a str, &'a str)>, f64)>;

#[derive(Debug)]
struct ClientSeries {
    labels: Vec<(String, String)>,
    series: BTreeMap<SeriesKey, (Kind, f64)>,
}

#[derive(Debug, Default)]
pub(super) struct Received {
    clients: HashMap<Uuid, ClientSeries>,
    total: usize,
    /// Series refused for the bounds.
    dropped: u64,
    /// Pushes read, by instance.
    pushes: u64,
}

impl Received {
    pub(super) fn record(&mut self, id: Uuid, identity: &ClientIdentity, samples: Vec<Sample>) {
        self.pushes += 1;
        let client = self.clients.entry(id).or_insert_with(|| ClientSeries {
            labels: vec![
                ("client_id".to_string(), identity.client_id.clone()),
                ("principal".to_string(), identity.principal.clone()),
                ("client_instance_id".to_string(), id.to_string()),
            ],
            series: BTreeMap::new(),
        });
        for sample in samples {
            let key = (
                series_name(&sample.name, sample.kind),
                labels(sample.attributes),
            );
            let full = client.series.len() >= MAX_SERIES_PER_CLIENT || self.total >= MAX_SERIES;
            match client.series.get_mut(&key) {
                Some((kind, value)) => {
                    *kind = sample.kind;
                    *value = added(sample.kind, *value, sample.value);
                }
                None if full => self.dropped += 1,
                None => {
                    client.series.insert(key, (sample.kind, sample.value));
                    self.total += 1;
                }
            }
        }
    }

    pub(super) fn forget(&mut self, id: Uuid) {
        if let Some(client) = self.clients.remove(&id) {
            self.total -= client.series.len();
        }
    }

    pub(super) fn encode(&self, encoder: &mut DescriptorEncoder) -> std::fmt::Result {
        // Families by name, each series with its client's labels before its own.
        let mut families: BTreeMap<&str, (Kind, Rows<'_>)> = BTreeMap::new();
        for client in self.clients.values() {
            for ((name, attributes), (kind, value)) in &client.series {
                let (family_kind, rows) = families
                    .entry(name.as_str())
                    .or_insert_with(|| (*kind, Vec::new()));
                if metric_type(*family_kind) != metric_type(*kind) {
                    continue;
                }
                let labels = client
                    .labels
                    .iter()
                    .chain(attributes.iter())
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                rows.push((labels, *value));
            }
        }
        for (name, (kind, rows)) in families {
            let help = "A metric clients pushed (KIP-714), as they named it";
            let mut family = encoder.encode_descriptor(name, help, None, metric_type(kind))?;
            for (labels, value) in rows {
                let metric = family.encode_family(&labels)?;
                match metric_type(kind) {
                    MetricType::Counter => ConstCounter::new(value).encode(metric)?,
                    _ => ConstGauge::new(value).encode(metric)?,
                }
            }
        }
        let pushes = encoder.encode_descriptor(
            "client_telemetry_pushes",
            "Client metrics pushes read (KIP-714)",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(self.pushes).encode(pushes)?;
        let dropped = encoder.encode_descriptor(
            "client_telemetry_series_dropped",
            "Pushed series not kept: a client or all clients reached the bound on series",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(self.dropped).encode(dropped)
    }
}

fn metric_type(kind: Kind) -> MetricType {
    match kind {
        Kind::Counter { .. } => MetricType::Counter,
        _ => MetricType::Gauge,
    }
}

/// A delta sum adds to what it had; a gauge or cumulative sum replaces it.
fn added(kind: Kind, before: f64, pushed: f64) -> f64 {
    match kind {
        Kind::Counter { delta: true } | Kind::UpDown { delta: true } => before + pushed,
        _ => pushed,
    }
}

/// `client_` and the client's metric name less Kafka's prefix, as a Prometheus name (a
/// counter's `_total` is the encoder's to add).
fn series_name(name: &str, kind: Kind) -> String {
    let short = name.strip_prefix("org.apache.kafka.").unwrap_or(name);
    let mut out = String::with_capacity(short.len() + 7);
    out.push_str("client_");
    out.extend(
        short
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }),
    );
    if matches!(kind, Kind::Counter { .. }) {
        if let Some(stripped) = out.strip_suffix("_total") {
            out.truncate(stripped.len());
        }
    }
    out
}

/// A data point's attributes as labels: Prometheus' form of their keys, and none that would
/// hide the client's own labels.
fn labels(attributes: Vec<(String, String)>) -> Vec<(String, String)> {
    attributes
        .into_iter()
        .map(|(key, value)| {
            let mut key: String = key
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            if key.is_empty() || key.starts_with(|c: char| c.is_ascii_digit()) {
                key.insert(0, '_');
            }
            (key, value)
        })
        .filter(|(key, _)| {
            !matches!(
                key.as_str(),
                "client_id" | "principal" | "client_instance_id"
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> ClientIdentity {
        ClientIdentity {
            client_id: "app".into(),
            software: None,
            address: "127.0.0.1".into(),
            port: 1,
            principal: "User:ANONYMOUS".into(),
        }
    }

    fn sample(name: &str, kind: Kind, value: f64) -> Sample {
        Sample {
            name: name.into(),
            kind,
            attributes: vec![("node.id".into(), "1".into())],
            value,
        }
    }

    #[test]
    fn names_are_prometheus_names() {
        let counter = Kind::Counter { delta: true };
        assert_eq!(
            series_name(
                "org.apache.kafka.producer.connection.creation.total",
                counter
            ),
            "client_producer_connection_creation"
        );
        assert_eq!(
            series_name("org.apache.kafka.producer.record-send.rate", Kind::Gauge),
            "client_producer_record_send_rate"
        );
        assert_eq!(
            labels(vec![("9x".into(), "v".into())]),
            vec![("_9x".into(), "v".into())]
        );
    }

    #[test]
    fn deltas_add_up_and_gauges_replace() {
        let mut received = Received::default();
        let id = Uuid([7; 16]);
        let delta = Kind::Counter { delta: true };
        received.record(
            id,
            &identity(),
            vec![sample("a.total", delta, 2.0), sample("g", Kind::Gauge, 5.0)],
        );
        received.record(
            id,
            &identity(),
            vec![sample("a.total", delta, 3.0), sample("g", Kind::Gauge, 1.0)],
        );
        let client = &received.clients[&id];
        let value = |name: &str| {
            client
                .series
                .iter()
                .find(|((n, _), _)| n == name)
                .map(|(_, (_, v))| *v)
        };
        assert_eq!(value("client_a"), Some(5.0));
        assert_eq!(value("client_g"), Some(1.0));
        received.forget(id);
        assert_eq!(received.total, 0);
    }

    #[test]
    fn a_client_cannot_add_series_without_bound() {
        let mut received = Received::default();
        let id = Uuid([1; 16]);
        let samples: Vec<Sample> = (0..MAX_SERIES_PER_CLIENT + 5)
            .map(|i| sample(&format!("m{i}"), Kind::Gauge, 1.0))
            .collect();
        received.record(id, &identity(), samples);
        assert_eq!(received.total, MAX_SERIES_PER_CLIENT);
        assert_eq!(received.dropped, 5);
    }
}
