//! The part of OpenTelemetry's metrics protobuf (`opentelemetry.proto.metrics.v1.MetricsData`,
//! OTLP) that clients push in PushTelemetry and fjord reads: each metric's name, and the
//! number data points of its gauges and sums with their attributes. Histograms and summaries
//! are skipped. Declared here for prost's decoder (the crate that generates these types brings
//! an OpenTelemetry SDK along); field numbers are OTLP's.

use prost::Message;

#[derive(Clone, PartialEq, Message)]
pub struct MetricsData {
    #[prost(message, repeated, tag = "1")]
    pub resource_metrics: Vec<ResourceMetrics>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ResourceMetrics {
    #[prost(message, repeated, tag = "2")]
    pub scope_metrics: Vec<ScopeMetrics>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ScopeMetrics {
    #[prost(message, repeated, tag = "2")]
    pub metrics: Vec<Metric>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Metric {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub description: String,
    #[prost(oneof = "Data", tags = "5, 7")]
    pub data: Option<Data>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Data {
    #[prost(message, tag = "5")]
    Gauge(Gauge),
    #[prost(message, tag = "7")]
    Sum(Sum),
}

#[derive(Clone, PartialEq, Message)]
pub struct Gauge {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<NumberDataPoint>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Sum {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<NumberDataPoint>,
    /// 1: delta, 2: cumulative.
    #[prost(int32, tag = "2")]
    pub aggregation_temporality: i32,
    #[prost(bool, tag = "3")]
    pub is_monotonic: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct NumberDataPoint {
    #[prost(message, repeated, tag = "7")]
    pub attributes: Vec<KeyValue>,
    #[prost(oneof = "Value", tags = "4, 6")]
    pub value: Option<Value>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Value {
    #[prost(double, tag = "4")]
    AsDouble(f64),
    #[prost(sfixed64, tag = "6")]
    AsInt(i64),
}

#[derive(Clone, PartialEq, Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct AnyValue {
    #[prost(oneof = "Any", tags = "1, 2, 3, 4")]
    pub value: Option<Any>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Any {
    #[prost(string, tag = "1")]
    String(String),
    #[prost(bool, tag = "2")]
    Bool(bool),
    #[prost(int64, tag = "3")]
    Int(i64),
    #[prost(double, tag = "4")]
    Double(f64),
}

/// How a pushed value adds up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    /// A monotonic sum: a counter.
    Counter {
        delta: bool,
    },
    /// A sum that may go down.
    UpDown {
        delta: bool,
    },
}

/// One data point of a pushed metric.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub kind: Kind,
    /// The point's attributes, sorted by key.
    pub attributes: Vec<(String, String)>,
    pub value: f64,
}

/// The gauge and sum data points of an OTLP `MetricsData` message.
pub fn samples(payload: &[u8]) -> Result<Vec<Sample>, prost::DecodeError> {
    let data = MetricsData::decode(payload)?;
    let mut out = Vec::new();
    let metrics = data
        .resource_metrics
        .into_iter()
        .flat_map(|r| r.scope_metrics)
        .flat_map(|s| s.metrics);
    for metric in metrics {
        let (kind, points) = match metric.data {
            Some(Data::Gauge(gauge)) => (Kind::Gauge, gauge.data_points),
            Some(Data::Sum(sum)) => {
                let delta = sum.aggregation_temporality == 1;
                let kind = if sum.is_monotonic {
                    Kind::Counter { delta }
                } else {
                    Kind::UpDown { delta }
                };
                (kind, sum.data_points)
            }
            None => continue,
        };
        for point in points {
            let value = match point.value {
                Some(Value::AsDouble(v)) => v,
                Some(Value::AsInt(v)) => v as f64,
                None => continue,
            };
            let mut attributes: Vec<(String, String)> = point
                .attributes
                .into_iter()
                .map(|kv| {
                    let value = match kv.value.and_then(|v| v.value) {
                        Some(Any::String(s)) => s,
                        Some(Any::Bool(b)) => b.to_string(),
                        Some(Any::Int(i)) => i.to_string(),
                        Some(Any::Double(d)) => d.to_string(),
                        None => String::new(),
                    };
                    (kv.key, value)
                })
                .collect();
            attributes.sort();
            out.push(Sample {
                name: metric.name.clone(),
                kind,
                attributes,
                value,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(value: Value, attributes: &[(&str, &str)]) -> NumberDataPoint {
        NumberDataPoint {
            attributes: attributes
                .iter()
                .map(|(k, v)| KeyValue {
                    key: k.to_string(),
                    value: Some(AnyValue {
                        value: Some(Any::String(v.to_string())),
                    }),
                })
                .collect(),
            value: Some(value),
        }
    }

    #[test]
    fn gauges_and_sums_are_read_with_their_attributes() {
        let data = MetricsData {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![
                        Metric {
                            name: "org.apache.kafka.producer.record.send.rate".into(),
                            description: String::new(),
                            data: Some(Data::Gauge(Gauge {
                                data_points: vec![point(Value::AsDouble(2.5), &[])],
                            })),
                        },
                        Metric {
                            name: "org.apache.kafka.producer.connection.creation.total".into(),
                            description: String::new(),
                            data: Some(Data::Sum(Sum {
                                data_points: vec![point(
                                    Value::AsInt(3),
                                    &[("node_id", "1"), ("b", "x")],
                                )],
                                aggregation_temporality: 1,
                                is_monotonic: true,
                            })),
                        },
                    ],
                }],
            }],
        };
        let samples = samples(&data.encode_to_vec()).unwrap();
        assert_eq!(samples.len(), 2);
        assert_eq!(samples[0].kind, Kind::Gauge);
        assert_eq!(samples[0].value, 2.5);
        assert_eq!(samples[1].kind, Kind::Counter { delta: true });
        assert_eq!(
            samples[1].attributes,
            vec![("b".into(), "x".into()), ("node_id".into(), "1".into())]
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(samples(&[0xff, 0xff, 0xff, 0xff, 0x0f]).is_err());
        assert_eq!(samples(&[]).unwrap(), Vec::new());
    }
}
