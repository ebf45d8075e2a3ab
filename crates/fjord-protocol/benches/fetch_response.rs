//! Encoding a FetchResponse of 8 partitions with 64 KiB of records each: copied into the message
//! (`encode`) and left as parts (`encode_deferring_records`; the broker's fetch path goes one step
//! further and leaves them in their segment files, `encode_with_external_records`).

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fjord_protocol::messages::fetch_response::{
    FetchResponse, FetchableTopicResponse, PartitionData,
};
use fjord_protocol::{encode_deferring_records, Encodable, Uuid};

fn response() -> FetchResponse {
    let records = Bytes::from(vec![7u8; 64 * 1024]);
    FetchResponse {
        responses: vec![FetchableTopicResponse {
            topic_id: Uuid([1; 16]),
            partitions: (0..8)
                .map(|index| PartitionData {
                    partition_index: index,
                    high_watermark: 1_000_000,
                    records: Some(records.clone()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn encoding(c: &mut Criterion) {
    let response = response();
    let mut group = c.benchmark_group("fetch_response_v16_8x64KiB");
    group.throughput(Throughput::Bytes(8 * 64 * 1024));
    group.bench_function("encode_copying", |b| {
        b.iter(|| {
            let mut out = BytesMut::with_capacity(256);
            response.encode(&mut out, 16).is_ok()
        })
    });
    group.bench_function("encode_deferring_records", |b| {
        b.iter(|| {
            encode_deferring_records(BytesMut::with_capacity(256), |out| response.encode(out, 16))
                .is_ok()
        })
    });
    group.finish();
}

criterion_group!(benches, encoding);
criterion_main!(benches);
