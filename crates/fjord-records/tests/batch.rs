//! Batch-level behaviour: builder → validate → iterate, every validation check, truncation and
//! corruption, batch splitting and the broker's append-time rewrites.

use bytes::{Bytes, BytesMut};
use fjord_records::header::{self, compute_crc, OFFSET_CRC};
use fjord_records::record::encode_record;
use fjord_records::{
    assign_offsets, recompress, records, set_log_append_time, set_max_timestamp, split_batches,
    validate_batch, AppendBatch, AppendOrigin, BatchBuilder, BatchHeader, Compression, Header,
    Record, RecordErrorKind, RecordsError, TimestampType, ValidationConfig,
};
use proptest::prelude::*;

const NOW: i64 = 1_700_000_000_000;

fn cfg() -> ValidationConfig {
    ValidationConfig::new(NOW)
}

fn simple_batch(codec: Compression, n: i32) -> BytesMut {
    let mut b = BatchBuilder::new(codec);
    for i in 0..n {
        let key = format!("key-{i}");
        b.append(NOW + i as i64, Some(key.as_bytes()), Some(b"value"), &[])
            .unwrap();
    }
    b.build().unwrap()
}

fn fix_crc(batch: &mut [u8]) {
    let crc = compute_crc(batch);
    batch[OFFSET_CRC..OFFSET_CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

fn put_i32(batch: &mut [u8], at: usize, v: i32) {
    batch[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// A batch whose records section is exactly `section` (uncompressed) with the given counts.
fn raw_batch(section: &[u8], record_count: i32, last_offset_delta: i32) -> BytesMut {
    let mut batch = simple_batch(Compression::None, 1);
    batch.truncate(header::BATCH_HEADER_LEN);
    batch.extend_from_slice(section);
    let len = (batch.len() - header::LOG_OVERHEAD) as i32;
    put_i32(&mut batch, header::OFFSET_BATCH_LENGTH, len);
    put_i32(&mut batch, header::OFFSET_RECORD_COUNT, record_count);
    put_i32(
        &mut batch,
        header::OFFSET_LAST_OFFSET_DELTA,
        last_offset_delta,
    );
    fix_crc(&mut batch);
    batch
}

fn record_bytes(offset_delta: i32, key: Option<&[u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_record(&mut out, 0, 0, offset_delta, key, Some(b"v"), &[]).unwrap();
    out
}

#[test]
fn valid_batches_pass_for_every_codec() {
    for codec in Compression::ALL {
        let batch = simple_batch(codec, 10);
        let v = validate_batch(&batch, &cfg()).unwrap();
        assert_eq!(v.record_count, 10);
        assert_eq!(v.compression, codec);
        assert_eq!(v.max_timestamp, NOW + 9);
        assert_eq!(v.offset_delta_of_max_timestamp, 9);
        assert_eq!(v.size_in_bytes, batch.len());
        assert_eq!(v.header, BatchHeader::parse(&batch).unwrap());
    }
}

#[test]
fn old_magic_is_reported_distinctly() {
    for magic in [0u8, 1] {
        let mut batch = simple_batch(Compression::None, 1);
        batch[header::OFFSET_MAGIC] = magic;
        assert_eq!(
            validate_batch(&batch, &cfg()),
            Err(RecordsError::UnsupportedMagic(magic as i8))
        );
        // A v0 message can be shorter than a v2 header; magic still wins.
        assert_eq!(
            validate_batch(&batch[..30], &cfg()),
            Err(RecordsError::UnsupportedMagic(magic as i8))
        );
        assert_eq!(
            split_batches(&Bytes::from(batch.to_vec())),
            Err(RecordsError::UnsupportedMagic(magic as i8))
        );
    }
    assert_eq!(RecordsError::UnsupportedMagic(1).kafka_error_code(), 87);
}

#[test]
fn length_must_match_the_buffer() {
    let batch = simple_batch(Compression::None, 3);
    let mut longer = batch.clone();
    longer.extend_from_slice(&[0]);
    assert!(matches!(
        validate_batch(&longer, &cfg()),
        Err(RecordsError::Corrupt(_))
    ));
    assert_eq!(
        validate_batch(&batch[..batch.len() - 1], &cfg()),
        Err(RecordsError::Truncated)
    );
    let mut tiny = batch.clone();
    put_i32(&mut tiny, header::OFFSET_BATCH_LENGTH, 10);
    assert_eq!(
        validate_batch(&tiny, &cfg()),
        Err(RecordsError::InvalidBatchLength(10))
    );
}

#[test]
fn oversized_batch_is_message_too_large() {
    let batch = simple_batch(Compression::None, 3);
    let mut c = cfg();
    c.max_batch_bytes = batch.len() - 1;
    let err = validate_batch(&batch, &c).unwrap_err();
    assert_eq!(
        err,
        RecordsError::MessageTooLarge {
            size: batch.len(),
            max: batch.len() - 1
        }
    );
    assert_eq!(err.kafka_error_code(), 10);
    c.max_batch_bytes = batch.len();
    assert!(validate_batch(&batch, &c).is_ok());
}

#[test]
fn crc_mismatch_is_corrupt_message() {
    let mut batch = simple_batch(Compression::None, 2);
    let last = batch.len() - 1;
    batch[last] ^= 0x40;
    let err = validate_batch(&batch, &cfg()).unwrap_err();
    assert!(matches!(err, RecordsError::CrcMismatch { .. }));
    assert_eq!(err.kafka_error_code(), 2);
}

#[test]
fn unknown_codec_is_refused() {
    for id in 5..=7 {
        let mut batch = simple_batch(Compression::None, 1);
        batch[header::OFFSET_ATTRIBUTES + 1] = id;
        fix_crc(&mut batch);
        let err = validate_batch(&batch, &cfg()).unwrap_err();
        assert_eq!(err, RecordsError::UnsupportedCompression(id as i16));
        assert_eq!(err.kafka_error_code(), 76);
    }
}

#[test]
fn client_header_rules() {
    let mut batch = simple_batch(Compression::None, 1);
    header::set_base_offset(&mut batch, 5);
    assert!(matches!(
        validate_batch(&batch, &cfg()),
        Err(RecordsError::InvalidRecord(_))
    ));
    let mut replica = cfg();
    replica.origin = AppendOrigin::Replication;
    assert!(validate_batch(&batch, &replica).is_ok());

    let mut b = BatchBuilder::new(Compression::None).control(true);
    b.append(NOW, Some(b"\0\0\0\0"), Some(b"\0\0\0\0\0\0"), &[])
        .unwrap();
    let control = b.build().unwrap();
    assert!(matches!(
        validate_batch(&control, &cfg()),
        Err(RecordsError::InvalidRecord(_))
    ));
    let mut coordinator = cfg();
    coordinator.origin = AppendOrigin::Coordinator;
    assert!(validate_batch(&control, &coordinator).is_ok());

    let mut b = BatchBuilder::new(Compression::None).producer(7, 0, -1);
    b.append(NOW, None, None, &[]).unwrap();
    let err = validate_batch(&b.build().unwrap(), &cfg()).unwrap_err();
    assert_eq!(err.kafka_error_code(), 87);
    let mut b = BatchBuilder::new(Compression::None).producer(7, 0, 0);
    b.append(NOW, None, None, &[]).unwrap();
    assert!(validate_batch(&b.build().unwrap(), &cfg()).is_ok());
}

#[test]
fn record_count_and_offset_range_must_agree() {
    let mut two = record_bytes(0, None);
    two.extend(record_bytes(1, None));
    assert!(validate_batch(&raw_batch(&two, 2, 1), &cfg()).is_ok());
    // header says 3 records, 2 present
    assert!(matches!(
        validate_batch(&raw_batch(&two, 3, 2), &cfg()),
        Err(RecordsError::InvalidRecord(_))
    ));
    // header says 1 record, a second one trails
    assert!(matches!(
        validate_batch(&raw_batch(&two, 1, 0), &cfg()),
        Err(RecordsError::InvalidRecord(_))
    ));
    // lastOffsetDelta disagrees with the count
    assert!(matches!(
        validate_batch(&raw_batch(&two, 2, 2), &cfg()),
        Err(RecordsError::InvalidRecord(_))
    ));
    // zero and negative counts
    assert!(matches!(
        validate_batch(&raw_batch(&[], 0, -1), &cfg()),
        Err(RecordsError::InvalidRecord(_))
    ));
    assert!(matches!(
        validate_batch(&raw_batch(&two, -1, 1), &cfg()),
        Err(RecordsError::InvalidRecord(_))
    ));
    // trailing garbage after the last record
    let mut trailing = two.clone();
    trailing.push(0);
    assert!(matches!(
        validate_batch(&raw_batch(&trailing, 2, 1), &cfg()),
        Err(RecordsError::InvalidRecord(_))
    ));
}

#[test]
fn offset_deltas_must_be_in_order() {
    let mut swapped = record_bytes(1, None);
    swapped.extend(record_bytes(0, None));
    assert!(matches!(
        validate_batch(&raw_batch(&swapped, 2, 1), &cfg()),
        Err(RecordsError::InvalidRecord(_))
    ));
    let mut gap = record_bytes(0, None);
    gap.extend(record_bytes(2, None));
    assert!(matches!(
        validate_batch(&raw_batch(&gap, 2, 1), &cfg()),
        Err(RecordsError::InvalidRecord(_))
    ));
}

#[test]
fn record_length_must_be_exact() {
    let mut rec = record_bytes(0, Some(b"k"));
    // Bump the declared body length by one and pad: fields end before the body does.
    rec[0] += 2;
    rec.push(0);
    assert!(matches!(
        validate_batch(&raw_batch(&rec, 1, 0), &cfg()),
        Err(RecordsError::InvalidRecord(_))
    ));
}

#[test]
fn compacted_topics_need_keys() {
    let mut b = BatchBuilder::new(Compression::Lz4);
    b.append(NOW, Some(b"a"), Some(b"1"), &[]).unwrap();
    b.append(NOW, None, Some(b"2"), &[]).unwrap();
    b.append(NOW, None, Some(b"3"), &[]).unwrap();
    let batch = b.build().unwrap();
    assert!(validate_batch(&batch, &cfg()).is_ok());
    let mut compacted = cfg();
    compacted.require_keys = true;
    let err = validate_batch(&batch, &compacted).unwrap_err();
    assert_eq!(err.kafka_error_code(), 87);
    let RecordsError::RecordErrors(errors) = err else {
        panic!("{err:?}")
    };
    let indexes: Vec<i32> = errors.iter().map(|e| e.batch_index).collect();
    assert_eq!(indexes, vec![1, 2]);
    assert!(errors.iter().all(|e| e.kind == RecordErrorKind::MissingKey));
}

#[test]
fn timestamps_outside_the_window_are_invalid() {
    let build = |ts: &[i64]| {
        let mut b = BatchBuilder::new(Compression::None);
        for t in ts {
            b.append(*t, Some(b"k"), None, &[]).unwrap();
        }
        b.build().unwrap()
    };
    // Default: anything in the past, at most one hour ahead.
    assert!(validate_batch(&build(&[0, NOW, NOW + 3_600_000]), &cfg()).is_ok());
    let err = validate_batch(&build(&[NOW, NOW + 3_600_001]), &cfg()).unwrap_err();
    assert_eq!(err.kafka_error_code(), 32);
    let RecordsError::RecordErrors(errors) = err else {
        panic!()
    };
    assert_eq!(errors[0].batch_index, 1);
    assert_eq!(
        errors[0].kind,
        RecordErrorKind::TimestampOutOfRange {
            timestamp: NOW + 3_600_001
        }
    );

    let mut c = cfg();
    c.timestamp_before_max_ms = 1000;
    assert!(validate_batch(&build(&[NOW - 1000]), &c).is_ok());
    assert_eq!(
        validate_batch(&build(&[NOW - 1001]), &c)
            .unwrap_err()
            .kafka_error_code(),
        32
    );
    // NO_TIMESTAMP is never range checked.
    assert!(validate_batch(&build(&[-1]), &c).is_ok());
    // With LogAppendTime topics, producer timestamps are not checked.
    c.timestamp_type = TimestampType::LogAppendTime;
    assert!(validate_batch(&build(&[NOW - 5000]), &c).is_ok());
}

#[test]
fn producer_may_not_send_log_append_time() {
    let mut b = BatchBuilder::new(Compression::None).log_append_time(NOW);
    b.append(-1, Some(b"k"), None, &[]).unwrap();
    let batch = b.build().unwrap();
    let mut c = cfg();
    c.timestamp_type = TimestampType::LogAppendTime;
    let err = validate_batch(&batch, &c).unwrap_err();
    assert_eq!(err.kafka_error_code(), 32);
    let RecordsError::RecordErrors(errors) = err else {
        panic!()
    };
    assert_eq!(errors[0].kind, RecordErrorKind::LogAppendTimeFromProducer);
}

#[test]
fn mixed_key_and_timestamp_errors_answer_invalid_timestamp() {
    let mut b = BatchBuilder::new(Compression::None);
    b.append(NOW, None, None, &[]).unwrap();
    b.append(NOW + 10_000_000, Some(b"k"), None, &[]).unwrap();
    let mut c = cfg();
    c.require_keys = true;
    let err = validate_batch(&b.build().unwrap(), &c).unwrap_err();
    assert_eq!(err.kafka_error_code(), 32);
}

#[test]
fn decompressed_size_is_bounded() {
    let mut b = BatchBuilder::new(Compression::Zstd);
    b.append(NOW, Some(b"k"), Some(&vec![0u8; 1 << 20]), &[])
        .unwrap();
    let batch = b.build().unwrap();
    let mut c = cfg();
    assert!(validate_batch(&batch, &c).is_ok());
    c.max_decompressed_bytes = 1 << 19;
    let err = validate_batch(&batch, &c).unwrap_err();
    assert_eq!(err, RecordsError::DecompressedTooLarge { max: 1 << 19 });
    assert_eq!(err.kafka_error_code(), 10);
}

#[test]
fn corrupt_compressed_payload_is_refused() {
    for codec in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let mut batch = simple_batch(codec, 5);
        // Damage the codec's container (magic / stream header): caught by every codec, whereas
        // a flipped literal byte inside a snappy or lz4 block would decode to other bytes.
        batch[header::BATCH_HEADER_LEN] ^= 0xff;
        fix_crc(&mut batch);
        assert!(validate_batch(&batch, &cfg()).is_err(), "{codec}");
    }
}

#[test]
fn every_truncation_is_an_error() {
    for codec in Compression::ALL {
        let batch = simple_batch(codec, 4);
        for cut in 0..batch.len() {
            assert!(
                validate_batch(&batch[..cut], &cfg()).is_err(),
                "{codec} cut {cut}"
            );
            let bytes = Bytes::copy_from_slice(&batch[..cut]);
            // An empty records field holds no batches rather than a truncated one.
            assert_eq!(split_batches(&bytes).is_err(), cut > 0, "{codec} cut {cut}");
            if let Ok(it) = records(&bytes, 1 << 20) {
                panic!("records() accepted a truncated batch: {:?}", it.count());
            }
        }
    }
}

#[test]
fn every_flipped_byte_after_the_crc_field_is_caught() {
    for codec in Compression::ALL {
        let batch = simple_batch(codec, 4);
        for at in header::OFFSET_CRC..batch.len() {
            for bit in [0x01u8, 0x80] {
                let mut bad = batch.clone();
                bad[at] ^= bit;
                let err = validate_batch(&bad, &cfg()).unwrap_err();
                assert!(
                    matches!(err, RecordsError::CrcMismatch { .. }),
                    "{codec} byte {at}: {err:?}"
                );
            }
        }
    }
}

#[test]
fn split_batches_is_zero_copy_and_strict() {
    let mut all = BytesMut::new();
    let parts: Vec<BytesMut> = Compression::ALL
        .iter()
        .map(|c| simple_batch(*c, 3))
        .collect();
    for p in &parts {
        all.extend_from_slice(p);
    }
    let all = all.freeze();
    let split = split_batches(&all).unwrap();
    assert_eq!(split.len(), parts.len());
    let mut offset = 0;
    for (s, p) in split.iter().zip(&parts) {
        assert_eq!(&s[..], &p[..]);
        assert_eq!(s.as_ptr(), all[offset..].as_ptr());
        offset += p.len();
    }
    assert_eq!(split_batches(&Bytes::new()).unwrap(), Vec::<Bytes>::new());
    let partial = all.slice(..all.len() - 1);
    assert_eq!(split_batches(&partial), Err(RecordsError::Truncated));
}

#[test]
fn assign_offsets_keeps_the_crc() {
    let mut batch = simple_batch(Compression::Snappy, 3);
    assign_offsets(&mut batch, 1234, 9).unwrap();
    let h = BatchHeader::parse(&batch).unwrap();
    assert_eq!(
        (h.base_offset, h.partition_leader_epoch, h.last_offset()),
        (1234, 9, 1236)
    );
    assert_eq!(compute_crc(&batch), h.crc);
    assert_eq!(
        assign_offsets(&mut [0u8; 20], 1, 1),
        Err(RecordsError::Truncated)
    );
}

#[test]
fn log_append_time_rewrites_timestamp_fields_and_crc() {
    let mut batch = simple_batch(Compression::Gzip, 3);
    let before = BatchHeader::parse(&batch).unwrap();
    set_log_append_time(&mut batch, NOW + 5).unwrap();
    let h = BatchHeader::parse(&batch).unwrap();
    assert!(h.is_log_append_time());
    assert_eq!(h.max_timestamp, NOW + 5);
    assert_eq!(h.base_timestamp, before.base_timestamp);
    assert_eq!(h.compression(), before.compression());
    assert_eq!(compute_crc(&batch), h.crc);
    let mut replica = cfg();
    replica.origin = AppendOrigin::Replication;
    let v = validate_batch(&batch, &replica).unwrap();
    // Every record of a LogAppendTime batch reads as the append time.
    assert_eq!(v.max_timestamp, NOW + 5);
    assert_eq!(v.offset_delta_of_max_timestamp, 0);
}

#[test]
fn set_max_timestamp_is_a_no_op_when_unchanged() {
    let mut batch = simple_batch(Compression::None, 2);
    let copy = batch.clone();
    let h = BatchHeader::parse(&batch).unwrap();
    set_max_timestamp(&mut batch, TimestampType::CreateTime, h.max_timestamp).unwrap();
    assert_eq!(batch, copy);
    set_max_timestamp(&mut batch, TimestampType::CreateTime, h.max_timestamp + 1).unwrap();
    let h2 = BatchHeader::parse(&batch).unwrap();
    assert_eq!(h2.max_timestamp, h.max_timestamp + 1);
    assert_eq!(compute_crc(&batch), h2.crc);
}

/// The batch an `AppendBatch` writes: its header followed by its records.
fn joined(batch: &AppendBatch) -> Vec<u8> {
    let mut out = batch.header_bytes().to_vec();
    out.extend_from_slice(batch.records());
    out
}

proptest! {
    /// The copy-free rewrites give byte-for-byte what the in-place ones give.
    #[test]
    fn append_batch_rewrites_match_in_place_rewrites(
        codec in 0usize..5,
        n in 1i32..20,
        base_offset in 0i64..i64::MAX / 4,
        epoch in 0i32..1000,
        log_append in any::<bool>(),
        max_ts_shift in -5i64..5,
    ) {
        let mut expected = simple_batch(Compression::ALL[codec], n);
        let mut batch = AppendBatch::new(expected.clone().freeze()).unwrap();
        let original_max = BatchHeader::parse(&expected).unwrap().max_timestamp;
        assign_offsets(&mut expected, base_offset, epoch).unwrap();
        batch.assign_offsets(base_offset, epoch);
        if log_append {
            set_log_append_time(&mut expected, NOW + max_ts_shift).unwrap();
            batch.set_log_append_time(NOW + max_ts_shift);
        } else {
            let ts = original_max + max_ts_shift;
            set_max_timestamp(&mut expected, TimestampType::CreateTime, ts).unwrap();
            batch.set_max_timestamp(TimestampType::CreateTime, ts);
        }
        prop_assert_eq!(joined(&batch), expected.to_vec());
        prop_assert_eq!(*batch.header(), BatchHeader::parse(&expected).unwrap());
        prop_assert_eq!(batch.len(), expected.len());
        let mut replica = cfg();
        replica.origin = AppendOrigin::Replication;
        prop_assert!(validate_batch(&Bytes::from(joined(&batch)), &replica).is_ok());
    }
}

#[test]
fn append_batch_refuses_what_is_not_one_batch() {
    let batch = simple_batch(Compression::None, 2).freeze();
    let mut two = BytesMut::from(&batch[..]);
    two.extend_from_slice(&batch);
    assert!(AppendBatch::new(two.freeze()).is_err());
    assert_eq!(
        AppendBatch::new(batch.slice(..40)).unwrap_err(),
        RecordsError::Truncated
    );
    assert!(AppendBatch::new(batch.slice(..batch.len() - 1)).is_err());
    // The records are shared with the input, not copied.
    let appended = AppendBatch::new(batch.clone()).unwrap();
    assert_eq!(appended.records().as_ptr(), batch[61..].as_ptr());
}

#[test]
fn recompress_keeps_everything_but_the_codec() {
    for from in Compression::ALL {
        let mut b = BatchBuilder::new(from)
            .producer(42, 3, 100)
            .transactional(true)
            .partition_leader_epoch(6);
        for i in 0..20 {
            b.append(NOW + i, Some(b"k"), Some(&[i as u8; 300]), &[])
                .unwrap();
        }
        let batch = b.build().unwrap();
        let original: Vec<Record> = records(&batch.clone().freeze(), 1 << 20)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let h = BatchHeader::parse(&batch).unwrap();
        for to in Compression::ALL {
            let out = recompress(&batch, to, None, 1 << 20).unwrap();
            let h2 = BatchHeader::parse(&out).unwrap();
            assert_eq!(h2.compression(), to.id());
            assert_eq!(h2.total_len(), out.len());
            assert_eq!(
                (
                    h2.producer_id,
                    h2.producer_epoch,
                    h2.base_sequence,
                    h2.is_transactional()
                ),
                (
                    h.producer_id,
                    h.producer_epoch,
                    h.base_sequence,
                    h.is_transactional()
                )
            );
            assert_eq!(
                (h2.base_timestamp, h2.max_timestamp),
                (h.base_timestamp, h.max_timestamp)
            );
            assert_eq!(
                (h2.record_count, h2.last_offset_delta),
                (h.record_count, h.last_offset_delta)
            );
            assert_eq!(h2.partition_leader_epoch, h.partition_leader_epoch);
            assert!(validate_batch(&out, &cfg()).is_ok(), "{from} -> {to}");
            let again: Vec<Record> = records(&out.freeze(), 1 << 20)
                .unwrap()
                .map(Result::unwrap)
                .collect();
            assert_eq!(again, original, "{from} -> {to}");
        }
    }
}

#[test]
fn uncompressed_records_share_the_batch_buffer() {
    let batch = simple_batch(Compression::None, 2).freeze();
    let range = batch.as_ptr_range();
    for r in records(&batch, 0).unwrap() {
        let key = r.unwrap().key.unwrap();
        assert!(range.contains(&key.as_ptr()));
    }
}

#[derive(Debug, Clone)]
struct Input {
    timestamp: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

fn input() -> impl Strategy<Value = Input> {
    let bytes = || proptest::collection::vec(any::<u8>(), 0..64);
    (
        NOW - 1_000_000..NOW + 1_000_000,
        proptest::option::of(bytes()),
        proptest::option::of(bytes()),
        proptest::collection::vec((bytes(), proptest::option::of(bytes())), 0..3),
    )
        .prop_map(|(timestamp, key, value, headers)| Input {
            timestamp,
            key,
            value,
            headers,
        })
}

fn codec() -> impl Strategy<Value = Compression> {
    proptest::sample::select(Compression::ALL.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn builder_validate_iterate_round_trip(codec in codec(), inputs in proptest::collection::vec(input(), 1..20)) {
        let mut b = BatchBuilder::new(codec);
        for i in &inputs {
            let headers: Vec<Header> = i.headers.iter().map(|(k, v)| Header {
                key: Bytes::from(k.clone()),
                value: v.clone().map(Bytes::from),
            }).collect();
            b.append(i.timestamp, i.key.as_deref(), i.value.as_deref(), &headers).unwrap();
        }
        let batch = b.build().unwrap().freeze();
        let v = validate_batch(&batch, &cfg()).unwrap();
        prop_assert_eq!(v.record_count as usize, inputs.len());
        prop_assert_eq!(v.max_timestamp, inputs.iter().map(|i| i.timestamp).max().unwrap());
        let base = inputs[0].timestamp;
        let got: Vec<Record> = records(&batch, 1 << 20).unwrap().collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(got.len(), inputs.len());
        for (n, (r, i)) in got.iter().zip(&inputs).enumerate() {
            prop_assert_eq!(r.offset_delta, n as i32);
            prop_assert_eq!(v.header.base_timestamp + r.timestamp_delta, i.timestamp);
            prop_assert_eq!(r.timestamp_delta, i.timestamp - base);
            prop_assert_eq!(r.key.as_deref(), i.key.as_deref());
            prop_assert_eq!(r.value.as_deref(), i.value.as_deref());
            let hs: Vec<(Vec<u8>, Option<Vec<u8>>)> = r.headers.iter()
                .map(|h| (h.key.to_vec(), h.value.as_ref().map(|v| v.to_vec()))).collect();
            prop_assert_eq!(&hs, &i.headers);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = validate_batch(&data, &cfg());
        let bytes = Bytes::from(data);
        let _ = split_batches(&bytes);
        if let Ok(it) = records(&bytes, 4096) {
            for r in it.take(1000) {
                let _ = r;
            }
        }
    }

    #[test]
    fn mutated_records_section_never_panics(codec in codec(), at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        // Corrupt the section, then fix the CRC so the record parser sees the damage.
        let mut batch = simple_batch(codec, 5);
        let section = batch.len() - header::BATCH_HEADER_LEN;
        let i = header::BATCH_HEADER_LEN + at.index(section);
        batch[i] = byte;
        fix_crc(&mut batch);
        let _ = validate_batch(&batch, &cfg());
        if let Ok(it) = records(&batch.freeze(), 1 << 16) {
            for r in it.take(100) {
                let _ = r;
            }
        }
    }
}
