//! The storage hot paths: offset-index lookups and `Log::append_as_leader` of a 16 KiB batch
//! (page cache, no fsync).

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fjord_common::TopicPartition;
use fjord_records::{BatchBuilder, Compression};
use fjord_storage::{Log, LogConfig, OffsetIndex};

fn batch() -> Bytes {
    let mut builder = BatchBuilder::new(Compression::None);
    let value = vec![b'v'; 1024];
    for i in 0..16 {
        if let Err(error) = builder.append(1_700_000_000_000 + i, None, Some(&value), &[]) {
            panic!("cannot build the benchmark batch: {error}");
        }
    }
    match builder.build() {
        Ok(batch) => batch.freeze(),
        Err(error) => panic!("cannot build the benchmark batch: {error}"),
    }
}

fn index_lookup(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let mut index = OffsetIndex::create(&dir.path().join("0.index"), 0, 10 * 1024 * 1024)
        .unwrap_or_else(|e| panic!("index: {e}"));
    // A full 1 GiB segment's worth of entries at the default index.interval.bytes (4 KiB).
    let entries = 262_144i64;
    for i in 0..entries {
        index
            .append(i * 16, (i * 4096) as u32)
            .unwrap_or_else(|e| panic!("index append: {e}"));
    }
    let mut target = 0i64;
    c.bench_function("offset_index/lookup_262144_entries", |b| {
        b.iter(|| {
            target = (target + 7_919) % (entries * 16);
            index.lookup(target)
        })
    });
}

fn append(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let config = LogConfig {
        segment_bytes: 256 * 1024 * 1024,
        ..LogConfig::default()
    };
    let (mut log, _) = Log::open(
        dir.path(),
        TopicPartition::new("bench", 0),
        None,
        config,
        0,
        0,
        true,
        0,
    )
    .unwrap_or_else(|e| panic!("open: {e}"));
    let batch = batch();
    let mut group = c.benchmark_group("log");
    group.throughput(Throughput::Bytes(batch.len() as u64));
    group.bench_function("append_as_leader_16KiB", |b| {
        b.iter(|| {
            if let Err(error) = log.append_as_leader(vec![batch.clone()], 0, 0) {
                panic!("append: {error}");
            }
        })
    });
    group.finish();
}

criterion_group!(benches, index_lookup, append);
criterion_main!(benches);
