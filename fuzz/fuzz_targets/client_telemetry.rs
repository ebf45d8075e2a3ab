//! Arbitrary client-metrics pushes (KIP-714) at a broker's telemetry: the first byte picks the
//! compression type the push names, the second whether the rest of the input is compressed with
//! that codec first (so the fuzzer reaches the OTLP decoder behind decompression) or sent as it
//! is. Every push is answered with an error code and what was kept encodes for Prometheus; never
//! a panic, and never more kept than the bounds allow.
#![no_main]

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use fjord_common::Uuid;
use fjord_protocol::messages::push_telemetry_request::PushTelemetryRequest;
use fjord_records::Compression;
use fjord_telemetry::{ClientIdentity, ClientTelemetry};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [codec, mode, payload @ ..] = data else {
        return;
    };
    let telemetry = Arc::new(ClientTelemetry::new(64 * 1024));
    let subscription = BTreeMap::from([(
        "all".to_string(),
        BTreeMap::from([
            ("metrics".to_string(), "*".to_string()),
            ("interval.ms".to_string(), "100".to_string()),
        ]),
    )]);
    telemetry.follow(&subscription);
    let identity = ClientIdentity {
        client_id: "fuzz".into(),
        software: None,
        address: "127.0.0.1".into(),
        port: 1,
        principal: "User:ANONYMOUS".into(),
    };
    let told = telemetry.subscriptions(Uuid::ZERO, identity.clone(), 1_000);
    let compression_type = (*codec % 6) as i8;
    let metrics = match Compression::from_id(i16::from(compression_type)) {
        Ok(codec) if mode % 2 == 0 => match fjord_records::compress(codec, payload, None) {
            Ok(compressed) => Bytes::from(compressed),
            Err(_) => return,
        },
        _ => Bytes::copy_from_slice(payload),
    };
    let request = PushTelemetryRequest {
        client_instance_id: told.client_instance_id,
        subscription_id: told.subscription_id,
        terminating: mode & 2 != 0,
        compression_type,
        metrics,
    };
    let _ = telemetry.push(&request, identity, 1_100);
    let _ = telemetry.exposition(1_200);
});
