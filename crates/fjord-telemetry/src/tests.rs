//! The client telemetry manager against Kafka's rules: subscriptions told, pushes checked in
//! order, pushed sums added up for `/metrics`, silent clients forgotten.

use super::*;

fn identity(client_id: &str) -> ClientIdentity {
    ClientIdentity {
        client_id: client_id.into(),
        software: Some(("apache-kafka-java".into(), "4.4.0".into())),
        address: "127.0.0.1".into(),
        port: 5000,
        principal: "User:alice".into(),
    }
}

fn subscription(pairs: &[(&str, &str)]) -> BTreeMap<String, BTreeMap<String, String>> {
    BTreeMap::from([(
        "sub".to_string(),
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )])
}

fn push(id: Uuid, subscription_id: i32, metrics: Bytes) -> PushTelemetryRequest {
    PushTelemetryRequest {
        client_instance_id: id,
        subscription_id,
        terminating: false,
        compression_type: 0,
        metrics,
    }
}

fn payload() -> Bytes {
    use prost::Message;
    let data = otlp::MetricsData {
        resource_metrics: vec![otlp::ResourceMetrics {
            scope_metrics: vec![otlp::ScopeMetrics {
                metrics: vec![otlp::Metric {
                    name: "org.apache.kafka.producer.record.send.total".into(),
                    description: String::new(),
                    data: Some(otlp::Data::Sum(otlp::Sum {
                        data_points: vec![otlp::NumberDataPoint {
                            attributes: Vec::new(),
                            value: Some(otlp::Value::AsDouble(10.0)),
                        }],
                        aggregation_temporality: 1,
                        is_monotonic: true,
                    })),
                }],
            }],
        }],
    };
    Bytes::from(data.encode_to_vec())
}

#[test]
fn a_client_is_told_what_the_matching_subscriptions_ask_at_their_shortest_interval() {
    let telemetry = ClientTelemetry::new(1024 * 1024);
    let mut subs = subscription(&[
        ("metrics", "org.apache.kafka.producer."),
        ("interval.ms", "5000"),
        ("match", "client_id=app-.*"),
    ]);
    subs.insert(
        "all".into(),
        BTreeMap::from([
            ("interval.ms".to_string(), "2000".to_string()),
            (
                "match".to_string(),
                "client_software_name=apache-kafka-java".to_string(),
            ),
        ]),
    );
    telemetry.follow(&subs);
    let told = telemetry.subscriptions(Uuid::ZERO, identity("app-1"), 1_000);
    assert_eq!(told.error_code, errors::NONE);
    assert_ne!(told.client_instance_id, Uuid::ZERO);
    assert_eq!(told.requested_metrics, vec!["org.apache.kafka.producer."]);
    assert_eq!(told.push_interval_ms, 2000);
    assert_eq!(told.accepted_compression_types, vec![4, 3, 1, 2]);
    assert!(told.delta_temporality);
    // Another client matches only the second, which asks for nothing.
    let other = telemetry.subscriptions(Uuid::ZERO, identity("batch"), 1_000);
    assert!(other.requested_metrics.is_empty());
    assert_ne!(other.subscription_id, told.subscription_id);
}

#[test]
fn asking_again_within_the_interval_is_throttled() {
    let telemetry = ClientTelemetry::new(1024);
    telemetry.follow(&subscription(&[("metrics", "*"), ("interval.ms", "1000")]));
    let told = telemetry.subscriptions(Uuid::ZERO, identity("a"), 10_000);
    assert_eq!(told.requested_metrics, vec!["*"]);
    let id = told.client_instance_id;
    let again = telemetry.subscriptions(id, identity("a"), 10_500);
    assert_eq!(again.error_code, errors::THROTTLING_QUOTA_EXCEEDED);
    assert_eq!(
        telemetry
            .subscriptions(id, identity("a"), 11_000)
            .error_code,
        errors::NONE
    );
}

#[test]
fn pushes_are_checked_in_kafkas_order_and_kept_for_metrics() {
    let telemetry = ClientTelemetry::new(1024);
    telemetry.follow(&subscription(&[("metrics", "*"), ("interval.ms", "1000")]));
    let told = telemetry.subscriptions(Uuid::ZERO, identity("a"), 10_000);
    let (id, sub) = (told.client_instance_id, told.subscription_id);
    assert_eq!(
        telemetry.push(&push(Uuid::ZERO, sub, payload()), identity("a"), 10_100),
        errors::INVALID_REQUEST
    );
    // The first push after the subscription may come at once; the next waits an interval.
    assert_eq!(
        telemetry.push(&push(id, sub, payload()), identity("a"), 10_100),
        errors::NONE
    );
    assert_eq!(
        telemetry.push(&push(id, sub, payload()), identity("a"), 10_600),
        errors::THROTTLING_QUOTA_EXCEEDED
    );
    assert_eq!(
        telemetry.push(&push(id, sub + 1, payload()), identity("a"), 11_100),
        errors::UNKNOWN_SUBSCRIPTION_ID
    );
    let mut bad = push(id, sub, payload());
    bad.compression_type = 9;
    assert_eq!(
        telemetry.push(&bad, identity("a"), 12_200),
        errors::UNSUPPORTED_COMPRESSION_TYPE
    );
    let big = push(id, sub, Bytes::from(vec![0u8; 2048]));
    assert_eq!(
        telemetry.push(&big, identity("a"), 13_300),
        errors::TELEMETRY_TOO_LARGE
    );
    let garbage = push(id, sub, Bytes::from_static(&[0xff, 0xff, 0xff]));
    assert_eq!(
        telemetry.push(&garbage, identity("a"), 14_400),
        errors::INVALID_RECORD
    );
    // Terminating skips the interval; after it the instance may push no more.
    let mut last = push(id, sub, payload());
    last.terminating = true;
    assert_eq!(telemetry.push(&last, identity("a"), 14_500), errors::NONE);
    assert_eq!(
        telemetry.push(&push(id, sub, payload()), identity("a"), 20_000),
        errors::INVALID_REQUEST
    );
    let text = std::sync::Arc::new(telemetry).exposition(15_000).unwrap();
    // Two deltas of 10 were kept.
    assert!(
        text.contains("client_producer_record_send_total{client_id=\"a\",principal=\"User:alice\""),
        "{text}"
    );
    assert!(text.contains("} 20"), "{text}");
}

#[test]
fn a_changed_subscription_makes_the_old_id_unknown_and_the_client_may_ask_at_once() {
    let telemetry = ClientTelemetry::new(1024);
    telemetry.follow(&subscription(&[("metrics", "a."), ("interval.ms", "1000")]));
    let told = telemetry.subscriptions(Uuid::ZERO, identity("a"), 10_000);
    let id = told.client_instance_id;
    telemetry.follow(&subscription(&[("metrics", "b."), ("interval.ms", "1000")]));
    assert_eq!(
        telemetry.push(
            &push(id, told.subscription_id, payload()),
            identity("a"),
            10_100
        ),
        errors::UNKNOWN_SUBSCRIPTION_ID
    );
    let again = telemetry.subscriptions(id, identity("a"), 10_200);
    assert_eq!(again.error_code, errors::NONE);
    assert_eq!(again.requested_metrics, vec!["b."]);
}

#[test]
fn silent_instances_are_forgotten() {
    let telemetry = ClientTelemetry::new(1024);
    telemetry.follow(&subscription(&[("interval.ms", "1000")]));
    telemetry.subscriptions(Uuid::ZERO, identity("a"), 0);
    assert_eq!(telemetry.instances(), 1);
    telemetry.subscriptions(Uuid::ZERO, identity("b"), MIN_EXPIRY_MS + 1);
    assert_eq!(telemetry.instances(), 1);
}
