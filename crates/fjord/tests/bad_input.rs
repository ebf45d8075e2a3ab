//! Hostile and malformed input against the real binary: broken framing, unknown APIs and
//! versions, garbage, lengths and counts that lie, bad record batches, invalid admin requests,
//! connection floods and idempotent-producer sequence abuse. Each case asserts what a Kafka broker
//! does with the same bytes, then checks the broker is still up and a fresh connection still gets
//! a correct ApiVersions answer.
mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use common::{Client, TestBroker};
use fjord_protocol::messages::create_topics_request::*;
use fjord_protocol::messages::fetch_request::*;
use fjord_protocol::messages::fetch_response::PartitionData;
use fjord_protocol::messages::init_producer_id_request::InitProducerIdRequest;
use fjord_protocol::messages::metadata_request::*;
use fjord_protocol::messages::produce_request::*;
use fjord_protocol::messages::produce_response::PartitionProduceResponse;
use fjord_protocol::{ApiKey, Decodable, Decoder, RequestBody, ResponseBody, ResponseHeader, Uuid};
use fjord_records::header::{compute_crc, OFFSET_CRC, OFFSET_MAGIC};
use fjord_records::{BatchBuilder, Compression, BATCH_HEADER_LEN};

// Kafka error codes asserted below.
const NONE: i16 = 0;
const OFFSET_OUT_OF_RANGE: i16 = 1;
const CORRUPT_MESSAGE: i16 = 2;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const MESSAGE_TOO_LARGE: i16 = 10;
const INVALID_TOPIC_EXCEPTION: i16 = 17;
const INVALID_REQUIRED_ACKS: i16 = 21;
const UNSUPPORTED_VERSION: i16 = 35;
const INVALID_PARTITIONS: i16 = 37;
const INVALID_REPLICATION_FACTOR: i16 = 38;
const INVALID_CONFIG: i16 = 40;
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_RECORD: i16 = 87;
const UNKNOWN_TOPIC_ID: i16 = 100;

const PRODUCE_VERSION: i16 = 9;
const FETCH_VERSION: i16 = 12;

// ---- helpers ------------------------------------------------------------------------------

/// The broker process is running and a brand-new connection gets a full ApiVersions answer, so
/// whatever the previous case did stayed confined to its own connection.
fn assert_healthy(broker: &mut TestBroker) {
    assert!(broker.alive(), "broker died; log:\n{}", broker.log());
    let mut client = broker.connect();
    let ResponseBody::ApiVersions(response) =
        client.request(3, RequestBody::ApiVersions(common::api_versions_request()))
    else {
        panic!("wrong response type")
    };
    assert_eq!(response.error_code, NONE);
    assert!(response
        .api_keys
        .iter()
        .any(|k| k.api_key == ApiKey::ApiVersions as i16 && k.max_version >= 3));
}

/// Waits up to five seconds for the broker to close `stream`. A read timeout means the
/// connection is still open, which fails the case (unlike `Client::is_closed`, which cannot tell
/// a timeout from a close).
fn assert_closed(stream: &mut TcpStream) {
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut buf = [0u8; 64];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => panic!("expected the connection to close, got {n} bytes of response"),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                panic!("connection still open after 5 s")
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // A reset also means closed.
            Err(_) => return,
        }
    }
}

fn raw_connect(broker: &TestBroker) -> TcpStream {
    TcpStream::connect(broker.addr).expect("connect")
}

/// A request header v1 (non-flexible) or v2 (flexible) with a null client id.
fn header(api: ApiKey, version: i16, correlation_id: i32, flexible: bool) -> BytesMut {
    let mut out = BytesMut::new();
    out.put_i16(api as i16);
    out.put_i16(version);
    out.put_i32(correlation_id);
    out.put_i16(-1);
    if flexible {
        out.put_u8(0); // no tagged fields
    }
    out
}

/// Sends one size-prefixed frame; the broker may already have closed, so errors are ignored.
fn send_frame(stream: &mut TcpStream, frame: &[u8]) {
    let mut out = (frame.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(frame);
    let _ = stream.write_all(&out);
}

/// Resident set size of the broker process in KiB.
fn rss_kib(broker: &TestBroker) -> u64 {
    let pid = broker.child.as_ref().expect("running").id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

fn create_topic(
    client: &mut Client,
    name: &str,
    num_partitions: i32,
    replication_factor: i16,
    configs: &[(&str, &str)],
) -> i16 {
    let request = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: name.to_string(),
            num_partitions,
            replication_factor,
            assignments: Vec::new(),
            configs: configs
                .iter()
                .map(|(k, v)| CreatableTopicConfig {
                    name: k.to_string(),
                    value: Some(v.to_string()),
                })
                .collect(),
        }],
        timeout_ms: 10_000,
        validate_only: false,
    };
    let ResponseBody::CreateTopics(response) =
        client.request(7, RequestBody::CreateTopics(request))
    else {
        panic!("wrong response type")
    };
    assert_eq!(response.topics.len(), 1);
    assert_eq!(response.topics[0].name, name);
    response.topics[0].error_code
}

fn create_ok(client: &mut Client, name: &str, configs: &[(&str, &str)]) {
    assert_eq!(
        create_topic(client, name, 1, 1, configs),
        NONE,
        "create {name}"
    );
}

fn produce_with_acks(
    client: &mut Client,
    topic: &str,
    partition: i32,
    records: Bytes,
    acks: i16,
) -> PartitionProduceResponse {
    let request = ProduceRequest {
        transactional_id: None,
        acks,
        timeout_ms: 10_000,
        topic_data: vec![TopicProduceData {
            name: topic.to_string(),
            partition_data: vec![PartitionProduceData {
                index: partition,
                records: Some(records),
            }],
            ..Default::default()
        }],
    };
    let ResponseBody::Produce(response) =
        client.request(PRODUCE_VERSION, RequestBody::Produce(request))
    else {
        panic!("wrong response type")
    };
    assert_eq!(response.responses.len(), 1);
    assert_eq!(response.responses[0].partition_responses.len(), 1);
    response.responses[0].partition_responses[0].clone()
}

fn produce(
    client: &mut Client,
    topic: &str,
    partition: i32,
    records: Bytes,
) -> PartitionProduceResponse {
    produce_with_acks(client, topic, partition, records, -1)
}

/// A CreateTime batch of `count` keyed records.
fn batch(count: usize) -> Bytes {
    let mut builder = BatchBuilder::new(Compression::None);
    for i in 0..count {
        builder
            .append(
                1_700_000_000_000,
                Some(b"k"),
                Some(format!("v{i}").as_bytes()),
                &[],
            )
            .expect("append");
    }
    builder.build().expect("build").freeze()
}

/// An idempotent batch of `count` records.
fn idempotent_batch(producer_id: i64, epoch: i16, base_sequence: i32, count: usize) -> Bytes {
    let mut builder =
        BatchBuilder::new(Compression::None).producer(producer_id, epoch, base_sequence);
    for i in 0..count {
        builder
            .append(now_ms(), Some(b"k"), Some(format!("v{i}").as_bytes()), &[])
            .expect("append");
    }
    builder.build().expect("build").freeze()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A v2 batch header around an arbitrary records section, with attributes `attrs` and a correct
/// CRC.
fn raw_batch(attrs: i16, record_count: i32, section: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(BATCH_HEADER_LEN + section.len());
    out.put_i64(0);
    out.put_i32((BATCH_HEADER_LEN - 12 + section.len()) as i32);
    out.put_i32(-1);
    out.put_i8(2);
    out.put_u32(0);
    out.put_i16(attrs);
    out.put_i32(record_count - 1);
    out.put_i64(now_ms());
    out.put_i64(now_ms());
    out.put_i64(-1);
    out.put_i16(-1);
    out.put_i32(-1);
    out.put_i32(record_count);
    out.put_slice(section);
    let crc = compute_crc(&out);
    out[OFFSET_CRC..OFFSET_CRC + 4].copy_from_slice(&crc.to_be_bytes());
    out.freeze()
}

fn fetch_partition(
    client: &mut Client,
    version: i16,
    topic: &str,
    topic_id: Uuid,
    partition: i32,
    fetch_offset: i64,
) -> PartitionData {
    let request = FetchRequest {
        replica_id: -1,
        max_wait_ms: 0,
        min_bytes: 0,
        max_bytes: 1024 * 1024,
        isolation_level: 0,
        session_id: 0,
        session_epoch: -1,
        topics: vec![FetchTopic {
            topic: topic.to_string(),
            topic_id,
            partitions: vec![FetchPartition {
                partition,
                current_leader_epoch: -1,
                fetch_offset,
                last_fetched_epoch: -1,
                log_start_offset: -1,
                partition_max_bytes: 1024 * 1024,
                ..Default::default()
            }],
        }],
        ..Default::default()
    };
    let ResponseBody::Fetch(response) = client.request(version, RequestBody::Fetch(request)) else {
        panic!("wrong response type")
    };
    assert_eq!(response.error_code, NONE);
    assert_eq!(response.responses.len(), 1);
    assert_eq!(response.responses[0].partitions.len(), 1);
    response.responses[0].partitions[0].clone()
}

fn init_producer_id(client: &mut Client, producer_id: i64, producer_epoch: i16) -> (i64, i16) {
    let request = InitProducerIdRequest {
        transactional_id: None,
        transaction_timeout_ms: 60_000,
        producer_id,
        producer_epoch,
        ..Default::default()
    };
    let ResponseBody::InitProducerId(response) =
        client.request(4, RequestBody::InitProducerId(request))
    else {
        panic!("wrong response type")
    };
    assert_eq!(response.error_code, NONE);
    (response.producer_id, response.producer_epoch)
}

// ---- framing ------------------------------------------------------------------------------

#[test]
fn truncated_frame_then_close() {
    let mut broker = TestBroker::start();
    let mut stream = raw_connect(&broker);
    stream.write_all(&100i32.to_be_bytes()).expect("size");
    stream.write_all(&[0u8; 10]).expect("partial body");
    stream.shutdown(Shutdown::Write).expect("half close");
    assert_closed(&mut stream);
    assert_healthy(&mut broker);
}

#[test]
fn frame_over_socket_request_max_bytes_closes() {
    let mut broker = TestBroker::start_with(&[("socket.request.max.bytes", "1024")]);
    // Kafka refuses on the size prefix alone, before reading (or allocating for) the body.
    let mut stream = raw_connect(&broker);
    stream.write_all(&1025i32.to_be_bytes()).expect("size");
    assert_closed(&mut stream);
    // A frame right at the limit is still read and answered (here: a valid ApiVersions).
    let mut client = broker.connect();
    let mut frame = client
        .encode_request(
            ApiKey::ApiVersions,
            3,
            &RequestBody::ApiVersions(common::api_versions_request()),
        )
        .to_vec();
    assert!(frame.len() < 1024);
    frame.resize(1024, 0); // trailing bytes after a flexible body are ignored by Kafka too
    client.send_raw(&frame).expect("send");
    assert!(
        client.read_frame().is_ok(),
        "a 1024-byte request is allowed"
    );
    assert_healthy(&mut broker);
}

#[test]
fn negative_frame_size_closes() {
    let mut broker = TestBroker::start();
    for size in [-1i32, i32::MIN] {
        let mut stream = raw_connect(&broker);
        stream.write_all(&size.to_be_bytes()).expect("size");
        assert_closed(&mut stream);
    }
    assert_healthy(&mut broker);
}

#[test]
fn zero_size_frame_closes() {
    let mut broker = TestBroker::start();
    let mut stream = raw_connect(&broker);
    // An empty frame has no request header to parse.
    stream.write_all(&0i32.to_be_bytes()).expect("size");
    assert_closed(&mut stream);
    assert_healthy(&mut broker);
}

// ---- API keys and versions ----------------------------------------------------------------

#[test]
fn unknown_api_key_closes() {
    let mut broker = TestBroker::start();
    for key in [1000i16, -1, i16::MAX] {
        let mut stream = raw_connect(&broker);
        let mut frame = BytesMut::new();
        frame.put_i16(key);
        frame.put_i16(0);
        frame.put_i32(7);
        frame.put_i16(-1);
        send_frame(&mut stream, &frame);
        assert_closed(&mut stream);
    }
    assert_healthy(&mut broker);
}

#[test]
fn unsupported_version_of_known_api_closes() {
    let mut broker = TestBroker::start();
    // Produce v2 was removed in Kafka 4 (KIP-896); Metadata v99 does not exist.
    for (api, version) in [
        (ApiKey::Produce, 2i16),
        (ApiKey::Metadata, 99),
        (ApiKey::Fetch, -1),
    ] {
        let mut stream = raw_connect(&broker);
        let mut frame = header(api, version, 1, false);
        frame.put_slice(&[0u8; 16]);
        send_frame(&mut stream, &frame);
        assert_closed(&mut stream);
    }
    assert_healthy(&mut broker);
}

#[test]
fn api_versions_too_new_gets_v0_unsupported_version() {
    let mut broker = TestBroker::start();
    let mut client = broker.connect();
    // A client newer than the broker: header v2 and a body the broker cannot know.
    let mut frame = header(ApiKey::ApiVersions, 127, 4242, true);
    frame.put_slice(b"\x05hello\x03v9\x00future fields");
    client.send_raw(&frame).expect("send");
    let body = client.read_frame().expect("an answer, not a close");
    let mut decoder = Decoder::new(body);
    // ApiVersions responses always use response header v0, and the body is v0.
    let header = ResponseHeader::decode(&mut decoder, 0).expect("header");
    assert_eq!(header.correlation_id, 4242);
    let ResponseBody::ApiVersions(response) =
        ResponseBody::decode(ApiKey::ApiVersions, &mut decoder, 0).expect("v0 body")
    else {
        panic!("wrong response type")
    };
    assert_eq!(response.error_code, UNSUPPORTED_VERSION);
    // KIP-511: the entry for ApiVersions itself tells the client which version to retry with.
    let entry = response
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::ApiVersions as i16)
        .expect("ApiVersions entry");
    assert_eq!((entry.min_version, entry.max_version), (0, 5));
    // The connection stays usable: the retry at a supported version is answered.
    let ResponseBody::ApiVersions(retry) =
        client.request(3, RequestBody::ApiVersions(common::api_versions_request()))
    else {
        panic!("wrong response type")
    };
    assert_eq!(retry.error_code, NONE);
    assert_healthy(&mut broker);
}

// ---- garbage ------------------------------------------------------------------------------

#[test]
fn pure_garbage_closes() {
    let mut broker = TestBroker::start();
    // A deterministic pseudo-random stream: no valid API key survives as a header.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut garbage = vec![0u8; 4096];
    for byte in garbage.iter_mut() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        *byte = state as u8;
    }
    // As a frame of its own...
    let mut stream = raw_connect(&broker);
    garbage[0] = 0x7f; // api key 0x7fxx: unknown
    send_frame(&mut stream, &garbage);
    assert_closed(&mut stream);
    // ...and raw, so the first four bytes are a nonsense size.
    let mut stream = raw_connect(&broker);
    let _ = stream.write_all(&garbage);
    assert_closed(&mut stream);
    // HTTP spoken to the Kafka port: "GET " is a size of about 1.2 GB, over the limit.
    let mut stream = raw_connect(&broker);
    let _ = stream.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assert_closed(&mut stream);
    assert_healthy(&mut broker);
}

#[test]
fn valid_header_garbage_body_closes() {
    let mut broker = TestBroker::start();
    // Metadata v12: a compact array count that is a run of continuation bytes (a varint that
    // never ends).
    let mut stream = raw_connect(&broker);
    let mut frame = header(ApiKey::Metadata, 12, 1, true);
    frame.put_slice(&[0xff; 12]);
    send_frame(&mut stream, &frame);
    assert_closed(&mut stream);
    // CreateTopics v7 with a topic name that is not UTF-8.
    let mut stream = raw_connect(&broker);
    let mut frame = header(ApiKey::CreateTopics, 7, 2, true);
    frame.put_u8(2); // one topic
    frame.put_u8(3); // name of two bytes
    frame.put_slice(&[0xc3, 0x28]);
    frame.put_slice(&[0u8; 8]);
    send_frame(&mut stream, &frame);
    assert_closed(&mut stream);
    // Produce v3 cut off in the middle of its body.
    let mut stream = raw_connect(&broker);
    let mut frame = header(ApiKey::Produce, 3, 3, false);
    frame.put_i16(-1); // transactional id
    frame.put_i16(1); // acks
    send_frame(&mut stream, &frame);
    assert_closed(&mut stream);
    assert_healthy(&mut broker);
}

// ---- lying lengths and counts -------------------------------------------------------------

/// Sends `frame`, expects a close within a second or two, and the broker's RSS not to grow by
/// more than 200 MiB.
fn assert_cheap_rejection(broker: &mut TestBroker, frame: &[u8]) {
    let before = rss_kib(broker);
    let started = Instant::now();
    let mut stream = raw_connect(broker);
    send_frame(&mut stream, frame);
    assert_closed(&mut stream);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "rejection took {:?}",
        started.elapsed()
    );
    let after = rss_kib(broker);
    assert!(
        after < before + 200 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
    assert_healthy(broker);
}

#[test]
fn metadata_with_huge_topic_count_in_tiny_frame() {
    let mut broker = TestBroker::start();
    // Metadata v4 (classic array): count 2^31-1 followed by a few bytes.
    let mut frame = header(ApiKey::Metadata, 4, 1, false);
    frame.put_i32(i32::MAX);
    frame.put_slice(&[0, 1, b'a', 1]);
    assert_cheap_rejection(&mut broker, &frame);
    // Metadata v12 (compact array): unsigned varint count 2^31-1.
    let mut frame = header(ApiKey::Metadata, 12, 2, true);
    frame.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x07]);
    frame.put_slice(&[0u8; 17]);
    assert_cheap_rejection(&mut broker, &frame);
}

#[test]
fn strings_claiming_huge_lengths() {
    let mut broker = TestBroker::start();
    // A client id of 32767 bytes in a 10-byte header.
    let mut frame = BytesMut::new();
    frame.put_i16(ApiKey::Metadata as i16);
    frame.put_i16(4);
    frame.put_i32(1);
    frame.put_i16(i16::MAX);
    frame.put_slice(b"ab");
    assert_cheap_rejection(&mut broker, &frame);
    // CreateTopics v7: a compact string claiming 2^31-2 bytes.
    let mut frame = header(ApiKey::CreateTopics, 7, 2, true);
    frame.put_u8(2);
    frame.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x07]);
    frame.put_slice(b"abc");
    assert_cheap_rejection(&mut broker, &frame);
}

#[test]
fn produce_records_claiming_one_gib() {
    let mut broker = TestBroker::start();
    create_ok(&mut broker.connect(), "t", &[]);
    // Produce v3 (classic bytes): records length 1 GiB, 16 bytes present.
    let mut frame = header(ApiKey::Produce, 3, 1, false);
    frame.put_i16(-1); // transactional id
    frame.put_i16(1); // acks
    frame.put_i32(1000); // timeout
    frame.put_i32(1); // one topic
    frame.put_i16(1);
    frame.put_slice(b"t");
    frame.put_i32(1); // one partition
    frame.put_i32(0);
    frame.put_i32(1 << 30);
    frame.put_slice(&[0u8; 16]);
    assert_cheap_rejection(&mut broker, &frame);
    // Produce v9 (compact bytes): length varint 1 GiB + 1.
    let mut frame = header(ApiKey::Produce, 9, 2, true);
    frame.put_u8(0); // null transactional id
    frame.put_i16(1);
    frame.put_i32(1000);
    frame.put_u8(2); // one topic
    frame.put_u8(2);
    frame.put_slice(b"t");
    frame.put_u8(2); // one partition
    frame.put_i32(0);
    frame.put_slice(&[0x81, 0x80, 0x80, 0x80, 0x04]);
    frame.put_slice(&[0u8; 16]);
    assert_cheap_rejection(&mut broker, &frame);
}

// ---- record batches -----------------------------------------------------------------------

#[test]
fn batch_with_bad_crc_is_corrupt_message() {
    let mut broker = TestBroker::start();
    let mut client = broker.connect();
    create_ok(&mut client, "crc", &[]);
    let mut records = BytesMut::from(&batch(3)[..]);
    let last = records.len() - 1;
    records[last] ^= 0x55; // inside the CRC-covered records
    let response = produce(&mut client, "crc", 0, records.freeze());
    assert_eq!(response.error_code, CORRUPT_MESSAGE);
    assert_eq!(response.base_offset, -1);
    // Nothing was written: the next good batch lands at offset 0.
    assert_eq!(produce(&mut client, "crc", 0, batch(1)).base_offset, 0);
    assert_healthy(&mut broker);
}

#[test]
fn legacy_magic_batches_are_invalid_record() {
    let mut broker = TestBroker::start();
    let mut client = broker.connect();
    create_ok(&mut client, "legacy", &[]);
    // Magic v0 and v1 message sets; Produce v3+ accepts only magic 2.
    for magic in [0u8, 1] {
        let mut message = BytesMut::new();
        message.put_i64(0); // offset
        let key_value_len = 4 + 4 + 1;
        let body_len = 1 + 1 + if magic == 1 { 8 } else { 0 } + key_value_len;
        message.put_i32(4 + body_len); // size
        let crc_at = message.len();
        message.put_u32(0);
        message.put_u8(magic);
        message.put_u8(0); // attributes
        if magic == 1 {
            message.put_i64(now_ms());
        }
        message.put_i32(-1); // null key
        message.put_i32(1);
        message.put_u8(b'v');
        let crc = crc32_ieee(&message[crc_at + 4..]);
        message[crc_at..crc_at + 4].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(message[OFFSET_MAGIC], magic);
        let response = produce(&mut client, "legacy", 0, message.freeze());
        assert_eq!(response.error_code, INVALID_RECORD, "magic {magic}");
    }
    assert_healthy(&mut broker);
}

/// CRC-32 (IEEE), as legacy messages carry it.
fn crc32_ieee(data: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for byte in data {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A zstd frame of `total` zero bytes built from RLE blocks: a few bytes per 128 KiB of output.
fn zstd_bomb(total: usize) -> Vec<u8> {
    const BLOCK: usize = 128 * 1024;
    let mut out = vec![0x28, 0xb5, 0x2f, 0xfd];
    out.push(0x00); // no content size, no checksum, no dictionary, not single-segment
    out.push(0x38); // window descriptor: 2^17 bytes
    let mut left = total;
    while left > 0 {
        let size = left.min(BLOCK);
        left -= size;
        let last = u32::from(left == 0);
        let block_header = last | (1 << 1) | ((size as u32) << 3); // RLE block
        out.extend_from_slice(&block_header.to_le_bytes()[..3]);
        out.push(0); // the repeated byte
    }
    out
}

#[test]
fn decompression_bombs_are_refused() {
    let mut broker = TestBroker::start();
    let mut client = broker.connect();
    // zstd only: inflating past the broker's 256 MiB bound takes a debug-built broker about
    // 2 s for zstd RLE blocks but about a minute for deflate (0.3 s in a release build).
    create_ok(&mut client, "bomb", &[]);
    let section = zstd_bomb(300 * 1024 * 1024);
    assert!(section.len() < 16 * 1024, "{} bytes", section.len());
    let started = Instant::now();
    let response = produce(
        &mut client,
        "bomb",
        0,
        raw_batch(Compression::Zstd.id(), 1, &section),
    );
    assert_eq!(
        response.error_code, MESSAGE_TOO_LARGE,
        "{:?}",
        response.error_message
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_healthy(&mut broker);
    // The partition is untouched.
    assert_eq!(produce(&mut client, "bomb", 0, batch(1)).base_offset, 0);
}

#[test]
fn batch_over_max_message_bytes_is_message_too_large() {
    let mut broker = TestBroker::start();
    let mut client = broker.connect();
    create_ok(&mut client, "small", &[("max.message.bytes", "1000")]);
    let mut builder = BatchBuilder::new(Compression::None);
    builder
        .append(now_ms(), Some(b"k"), Some(&[7u8; 2000]), &[])
        .expect("append");
    let response = produce(
        &mut client,
        "small",
        0,
        builder.build().expect("build").freeze(),
    );
    assert_eq!(response.error_code, MESSAGE_TOO_LARGE);
    // A batch under the limit is fine.
    assert_eq!(produce(&mut client, "small", 0, batch(2)).error_code, NONE);
    assert_healthy(&mut broker);
}

#[test]
fn null_key_on_compacted_topic_is_invalid_record() {
    let mut broker = TestBroker::start();
    let mut client = broker.connect();
    create_ok(&mut client, "compacted", &[("cleanup.policy", "compact")]);
    let mut builder = BatchBuilder::new(Compression::None);
    builder
        .append(now_ms(), Some(b"k"), Some(b"keyed"), &[])
        .expect("append");
    builder
        .append(now_ms(), None, Some(b"unkeyed"), &[])
        .expect("append");
    let response = produce(
        &mut client,
        "compacted",
        0,
        builder.build().expect("build").freeze(),
    );
    assert_eq!(response.error_code, INVALID_RECORD);
    // Kafka names the offending record by its index in the batch.
    assert_eq!(response.record_errors.len(), 1);
    assert_eq!(response.record_errors[0].batch_index, 1);
    assert_healthy(&mut broker);
}

#[test]
fn two_batches_in_one_partition_are_invalid_record() {
    let mut broker = TestBroker::start();
    let mut client = broker.connect();
    create_ok(&mut client, "two", &[]);
    // Produce v3+ carries exactly one batch per partition.
    let mut records = BytesMut::from(&batch(1)[..]);
    records.extend_from_slice(&batch(1));
    let response = produce(&mut client, "two", 0, records.freeze());
    assert_eq!(response.error_code, INVALID_RECORD);
    assert_eq!(produce(&mut client, "two", 0, batch(1)).base_offset, 0);
    assert_healthy(&mut broker);
}

// ---- admin and data-plane errors ----------------------------------------------------------

#[test]
fn create_topics_with_invalid_names() {
    let mut broker = TestBroker::start();
    let mut client = broker.connect();
    let long = "x".repeat(250);
    for name in [
        "",
        ".",
        "..",
        long.as_str(),
        "bad/name",
        "has space",
        "ünïcode",
    ] {
        assert_eq!(
            create_topic(&mut client, name, 1, 1, &[]),
            INVALID_TOPIC_EXCEPTION,
            "{name:?}"
        );
    }
    // 249 characters is the longest legal name.
    assert_eq!(create_topic(&mut client, &"y".repeat(249), 1, 1, &[]), NONE);
    assert_healthy(&mut broker);
}

#[test]
fn metadata_for_invalid_topic_name() {
    let mut broker = TestBroker::start();
    let mut client = broker.connect();
    for allow_auto_topic_creation in [true, false] {
        let request = MetadataRequest {
            topics: Some(vec![
                MetadataRequestTopic {
                    topic_id: Uuid::ZERO,
                    name: Some("bad/name".to_string()),
                },
                MetadataRequestTopic {
                    topic_id: Uuid::ZERO,
                    name: Some("..".to_string()),
                },
            ]),
            allow_auto_topic_creation,
            ..Default::default()
        };
        let ResponseBody::Metadata(response) = client.request(12, RequestBody::Metadata(request))
        else {
            panic!("wrong response type")
        };
        assert_eq!(response.topics.len(), 2);
        for topic in &response.topics {
            assert_eq!(
                topic.error_code, INVALID_TOPIC_EXCEPTION,
                "{:?}",
                topic.name
            );
            assert!(topic.partitions.is_empty());
        }
    }
    assert_healthy(&mut broker);
}

#[test]
fn produce_to_unknown_topic_or_partition() {
    let mut broker = TestBroker::start();
    let mut client = broker.connect();
    create_ok(&mut client, "known", &[]);
    // Produce never auto-creates.
    let response = produce(&mut client, "unknown", 0, batch(1));
    assert_eq!(response.error_code, UNKNOWN_TOPIC_OR_PARTITION);
    for partition in [1, -1, i32::MAX] {
        let response = produce(&mut client, "known", partition, batch(1));
        assert_eq!(
            response.error_code, UNKNOWN_TOPIC_OR_PARTITION,
            "{partition}"
        );
    }
    assert_healthy(&mut broker);
}

#[test]
fn fetch_from_unknown_topic_or_partition() {
    let mut broker = TestBroker::start();
    let mut client = broker.connect();
    create_ok(&mut client, "known", &[]);
    let data = fetch_partition(&mut client, FETCH_VERSION, "unknown", Uuid::ZERO, 0, 0);
    assert_eq!(data.error_code, UNKNOWN_TOPIC_OR_PARTITION);
    let data = fetch_partition(&mut client, FETCH_VERSION, "known", Uuid::ZERO, 3, 0);
    assert_eq!(data.error_code, UNKNOWN_TOPIC_OR_PARTITION);
    // From v13 topics go by id; an id nobody has is UNKNOWN_TOPIC_ID.
    let data = fetch_partition(&mut client, 13, "", Uuid([9; 16]), 0, 0);
    assert_eq!(data.error_code, UNKNOWN_TOPIC_ID);
    assert_healthy(&mut broker);
}

#[test]
fn fetch_outside_the_log_is_offset_out_of_range() {
    let mut broker = TestBroker::start();
    let mut client = broker.connect();
    create_ok(&mut client, "ranged", &[]);
    assert_eq!(produce(&mut client, "ranged", 0, batch(3)).error_code, NONE);
    // The log end offset itself is a valid (empty) fetch position.
    let at_end = fetch_partition(&mut client, FETCH_VERSION, "ranged", Uuid::ZERO, 0, 3);
    assert_eq!(at_end.error_code, NONE);
    assert_eq!(at_end.high_watermark, 3);
    for offset in [4, 1000, i64::MAX, -1, -2, i64::MIN] {
        let data = fetch_partition(&mut client, FETCH_VERSION, "ranged", Uuid::ZERO, 0, offset);
        assert_eq!(data.error_code, OFFSET_OUT_OF_RANGE, "offset {offset}");
        assert!(data.records.as_ref().is_none_or(|r| r.is_empty()));
    }
    assert_healthy(&mut broker);
}

#[test]
fn create_topics_with_invalid_settings() {
    let mut broker = TestBroker::start();
    let mut client = broker.connect();
    assert_eq!(
        create_topic(&mut client, "rf3", 1, 3, &[]),
        INVALID_REPLICATION_FACTOR
    );
    assert_eq!(
        create_topic(&mut client, "rf0", 1, 0, &[]),
        INVALID_REPLICATION_FACTOR
    );
    assert_eq!(
        create_topic(&mut client, "p0", 0, 1, &[]),
        INVALID_PARTITIONS
    );
    assert_eq!(
        create_topic(&mut client, "pneg", -5, 1, &[]),
        INVALID_PARTITIONS
    );
    for (key, value) in [
        ("retention.ms", "forever"),
        ("cleanup.policy", "shred"),
        ("compression.type", "brotli"),
        ("min.insync.replicas", "0"),
        ("no.such.config", "1"),
    ] {
        assert_eq!(
            create_topic(&mut client, "cfg", 1, 1, &[(key, value)]),
            INVALID_CONFIG,
            "{key}={value}"
        );
    }
    // None of the refused topics exist.
    let request = MetadataRequest {
        topics: None,
        ..Default::default()
    };
    let ResponseBody::Metadata(response) = client.request(12, RequestBody::Metadata(request))
    else {
        panic!("wrong response type")
    };
    assert!(response.topics.is_empty(), "{:?}", response.topics);
    assert_healthy(&mut broker);
}

#[test]
fn produce_with_invalid_acks() {
    let mut broker = TestBroker::start();
    let mut client = broker.connect();
    create_ok(&mut client, "acks", &[]);
    for acks in [2i16, -2, 100] {
        let response = produce_with_acks(&mut client, "acks", 0, batch(1), acks);
        assert_eq!(response.error_code, INVALID_REQUIRED_ACKS, "acks={acks}");
    }
    // Nothing was appended.
    assert_eq!(produce(&mut client, "acks", 0, batch(1)).base_offset, 0);
    assert_healthy(&mut broker);
}

// ---- connections --------------------------------------------------------------------------

#[test]
fn many_connections_with_partial_frames() {
    let mut broker = TestBroker::start();
    let mut streams: Vec<TcpStream> = (0..200).map(|_| raw_connect(&broker)).collect();
    for (i, stream) in streams.iter_mut().enumerate() {
        // Alternately cut inside the size prefix and inside the body.
        if i % 2 == 0 {
            let _ = stream.write_all(&[0, 0]);
        } else {
            let _ = stream.write_all(&64i32.to_be_bytes());
            let _ = stream.write_all(&[0, 3, 0, 12]);
        }
    }
    // While they hang, other clients are served.
    assert_healthy(&mut broker);
    drop(streams);
    assert_healthy(&mut broker);
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let mut broker = TestBroker::start();
    let mut client = broker.connect();
    create_ok(&mut client, "pipe", &[]);
    // Quick answers (ApiVersions) interleaved with ones that wait (Metadata, acks=-1 produce).
    let mut sent = Vec::new();
    let mut wire = Vec::new();
    for i in 0..30 {
        let (version, body) = match i % 3 {
            0 => (3, RequestBody::ApiVersions(common::api_versions_request())),
            1 => (
                12,
                RequestBody::Metadata(MetadataRequest {
                    topics: None,
                    ..Default::default()
                }),
            ),
            _ => (
                PRODUCE_VERSION,
                RequestBody::Produce(ProduceRequest {
                    acks: -1,
                    timeout_ms: 10_000,
                    topic_data: vec![TopicProduceData {
                        name: "pipe".to_string(),
                        partition_data: vec![PartitionProduceData {
                            index: 0,
                            records: Some(batch(1)),
                        }],
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            ),
        };
        let api = body.api_key();
        let frame = client.encode_request(api, version, &body);
        let correlation_id = i32::from_be_bytes(frame[4..8].try_into().expect("4 bytes"));
        wire.extend_from_slice(&(frame.len() as i32).to_be_bytes());
        wire.extend_from_slice(&frame);
        sent.push((api, version, correlation_id));
    }
    client.stream.write_all(&wire).expect("send all at once");
    let mut next_offset = 0;
    for (api, version, correlation_id) in sent {
        let frame = client.read_frame().expect("response");
        let mut decoder = Decoder::new(frame);
        let header = ResponseHeader::decode(
            &mut decoder,
            fjord_protocol::response_header_version(api, version),
        )
        .expect("header");
        assert_eq!(header.correlation_id, correlation_id);
        let body = ResponseBody::decode(api, &mut decoder, version).expect("body");
        if let ResponseBody::Produce(response) = body {
            // Appends happen in request order too.
            let p = &response.responses[0].partition_responses[0];
            assert_eq!((p.error_code, p.base_offset), (NONE, next_offset));
            next_offset += 1;
        }
    }
    assert_healthy(&mut broker);
}

// ---- idempotent producer ------------------------------------------------------------------

#[test]
fn init_producer_id_without_transactional_id_always_allocates() {
    let mut broker = TestBroker::start();
    let mut client = broker.connect();
    let (first, epoch) = init_producer_id(&mut client, -1, -1);
    assert!(first >= 0);
    assert_eq!(epoch, 0);
    // Kafka ignores the id and epoch an idempotent producer passes and hands out a new id; a
    // non-transactional producer bumps its epoch locally instead.
    let (second, epoch) = init_producer_id(&mut client, first, 0);
    assert_ne!(second, first);
    assert_eq!(epoch, 0);
    assert_healthy(&mut broker);
}

#[test]
fn idempotent_duplicates_gaps_and_fenced_epochs() {
    let mut broker = TestBroker::start();
    let mut client = broker.connect();
    create_ok(&mut client, "idem", &[]);
    let (pid, epoch) = init_producer_id(&mut client, -1, -1);

    let first = idempotent_batch(pid, epoch, 0, 3);
    let response = produce(&mut client, "idem", 0, first.clone());
    assert_eq!((response.error_code, response.base_offset), (NONE, 0));
    let response = produce(&mut client, "idem", 0, idempotent_batch(pid, epoch, 3, 2));
    assert_eq!((response.error_code, response.base_offset), (NONE, 3));

    // A retry of the first batch (its response was lost): acknowledged with its original offset.
    let response = produce(&mut client, "idem", 0, first);
    assert_eq!((response.error_code, response.base_offset), (NONE, 0));
    let data = fetch_partition(&mut client, FETCH_VERSION, "idem", Uuid::ZERO, 0, 0);
    assert_eq!(
        data.high_watermark, 5,
        "the duplicate was not written again"
    );

    // A gap: sequence 5 is next, 7 skips two.
    let response = produce(&mut client, "idem", 0, idempotent_batch(pid, epoch, 7, 1));
    assert_eq!(response.error_code, OUT_OF_ORDER_SEQUENCE_NUMBER);
    assert_eq!(response.base_offset, -1);

    // The producer bumps its epoch (as a Java idempotent producer does locally after a sequence
    // error) and restarts at sequence 0.
    let response = produce(
        &mut client,
        "idem",
        0,
        idempotent_batch(pid, epoch + 1, 0, 1),
    );
    assert_eq!((response.error_code, response.base_offset), (NONE, 5));
    // A zombie still on the old epoch is fenced.
    let response = produce(&mut client, "idem", 0, idempotent_batch(pid, epoch, 5, 1));
    assert_eq!(response.error_code, INVALID_PRODUCER_EPOCH);

    let data = fetch_partition(&mut client, FETCH_VERSION, "idem", Uuid::ZERO, 0, 0);
    assert_eq!(data.high_watermark, 6);
    assert_healthy(&mut broker);
}

/// Heap and other private mappings of the broker in KiB: counts memory reserved but never
/// touched, which VmRSS does not.
fn vm_data_kib(broker: &TestBroker) -> u64 {
    let pid = broker.child.as_ref().expect("running").id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmData:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmData")
}

#[test]
fn size_prefixes_alone_reserve_no_memory() {
    let mut broker = TestBroker::start();
    let before = vm_data_kib(&broker);
    // 100 connections each announce a frame just under socket.request.max.bytes (100 MiB by
    // default) and send a few bytes of it: 10 GiB promised, under 2 KiB delivered.
    let streams: Vec<TcpStream> = (0..100)
        .map(|_| {
            let mut stream = raw_connect(&broker);
            stream
                .write_all(&(100 * 1024 * 1024 - 1i32).to_be_bytes())
                .expect("size");
            stream.write_all(&[0, 3, 0, 12]).expect("a little body");
            stream
        })
        .collect();
    // Give every connection's reader time to act on its size prefix.
    std::thread::sleep(Duration::from_millis(300));
    assert_healthy(&mut broker);
    let after = vm_data_kib(&broker);
    assert!(
        after < before + 1024 * 1024,
        "VmData grew from {before} KiB to {after} KiB"
    );
    drop(streams);
    assert_healthy(&mut broker);
}
