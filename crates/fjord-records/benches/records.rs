//! Record-batch validation on the produce path: CRC, record walk and timestamp checks of a
//! 16 KiB batch of 1 KiB records, uncompressed and lz4.

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use fjord_records::{validate_batch, AppendBatch, BatchBuilder, Compression, ValidationConfig};

const NOW: i64 = 1_700_000_000_000;

fn batch(codec: Compression) -> Bytes {
    let mut builder = BatchBuilder::new(codec);
    let value = vec![b'v'; 1024];
    for i in 0..16 {
        let key = format!("key-{i}");
        if let Err(error) = builder.append(NOW + i, Some(key.as_bytes()), Some(&value), &[]) {
            panic!("cannot build the benchmark batch: {error}");
        }
    }
    match builder.build() {
        Ok(batch) => batch.freeze(),
        Err(error) => panic!("cannot build the benchmark batch: {error}"),
    }
}

fn validation(c: &mut Criterion) {
    let config = ValidationConfig::new(NOW);
    for codec in [Compression::None, Compression::Lz4] {
        let batch = batch(codec);
        let mut group = c.benchmark_group("validate_batch");
        group.throughput(Throughput::Bytes(batch.len() as u64));
        group.bench_function(codec.name(), |b| {
            b.iter(|| validate_batch(&batch, &config).is_ok())
        });
        group.finish();
    }
}

fn header_rewrite(c: &mut Criterion) {
    let batch = batch(Compression::None);
    c.bench_function("append_batch/log_append_time", |b| {
        b.iter_batched(
            || AppendBatch::new(batch.clone()),
            |appended| {
                if let Ok(mut appended) = appended {
                    appended.assign_offsets(42, 1);
                    appended.set_log_append_time(NOW);
                }
            },
            BatchSize::SmallInput,
        )
    });
}

criterion_group!(benches, validation, header_rewrite);
criterion_main!(benches);
