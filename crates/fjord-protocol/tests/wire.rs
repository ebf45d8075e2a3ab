//! Wire-level checks against hand-assembled frames: exact bytes for known encodings, tagged
//! fields, and hostile input (huge counts, bad lengths, bad UTF-8, arbitrary bytes).

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use fjord_protocol::messages::api_versions_request::ApiVersionsRequest;
use fjord_protocol::messages::api_versions_response::{ApiVersion, ApiVersionsResponse};
use fjord_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use fjord_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use fjord_protocol::messages::txn_offset_commit_request::TxnOffsetCommitRequest;
use fjord_protocol::*;
use proptest::prelude::*;

fn encode<T: Encodable>(value: &T, version: i16) -> Bytes {
    let mut out = BytesMut::new();
    value.encode(&mut out, version).unwrap();
    out.freeze()
}

fn decode<T: Decodable>(frame: &[u8], version: i16) -> Result<T, DecodeError> {
    T::decode(&mut Decoder::new(Bytes::copy_from_slice(frame)), version)
}

#[test]
fn request_header_v1_and_v2_bytes() {
    let header = RequestHeader {
        request_api_key: 18,
        request_api_version: 0,
        correlation_id: 7,
        client_id: Some("ab".into()),
    };
    let v1 = [0, 18, 0, 0, 0, 0, 0, 7, 0, 2, b'a', b'b'];
    assert_eq!(&encode(&header, 1)[..], &v1);
    // v2 keeps the classic nullable string for client_id and appends an empty tag section.
    let mut v2 = v1.to_vec();
    v2.push(0);
    assert_eq!(&encode(&header, 2)[..], &v2[..]);
    let null_client = RequestHeader {
        client_id: None,
        ..header.clone()
    };
    assert_eq!(&encode(&null_client, 1)[8..], &[0xff, 0xff]);
}

#[test]
fn decode_request_header_picks_the_version_from_the_api() {
    // ApiVersions v3 is flexible, so its header is v2 and carries a tag section.
    let frame = [0, 18, 0, 3, 0, 0, 0, 9, 0, 1, b'c', 0, 0xaa];
    let mut input = Decoder::new(Bytes::copy_from_slice(&frame));
    let header = decode_request_header(&mut input).unwrap();
    assert_eq!(header.correlation_id, 9);
    assert_eq!(header.client_id.as_deref(), Some("c"));
    assert_eq!(input.remaining(), 1);
    // Metadata v0 is not flexible: header v1 has no tag section.
    let frame = [0, 3, 0, 0, 0, 0, 0, 9, 0xff, 0xff];
    let mut input = Decoder::new(Bytes::copy_from_slice(&frame));
    assert_eq!(decode_request_header(&mut input).unwrap().client_id, None);
    assert_eq!(input.remaining(), 0);
    let frame = [0x7f, 0x00, 0, 0, 0, 0, 0, 0];
    let mut input = Decoder::new(Bytes::copy_from_slice(&frame));
    assert_eq!(
        decode_request_header(&mut input),
        Err(DecodeError::UnknownApiKey(0x7f00))
    );
}

#[test]
fn header_versions() {
    assert_eq!(request_header_version(ApiKey::Metadata, 8), 1);
    assert_eq!(request_header_version(ApiKey::Metadata, 9), 2);
    assert_eq!(response_header_version(ApiKey::Metadata, 8), 0);
    assert_eq!(response_header_version(ApiKey::Metadata, 9), 1);
    assert_eq!(response_header_version(ApiKey::ApiVersions, 3), 0);
    assert_eq!(request_header_version(ApiKey::ApiVersions, 3), 2);
    assert_eq!(request_header_version(ApiKey::SaslHandshake, 1), 1);
}

#[test]
fn api_versions_request_v3_compact_strings() {
    let request = ApiVersionsRequest {
        client_software_name: "k".into(),
        client_software_version: "1".into(),
        ..Default::default()
    };
    assert_eq!(&encode(&request, 3)[..], &[2, b'k', 2, b'1', 0]);
    // Version 0 has no fields at all; the ignorable strings are dropped.
    assert!(encode(&request, 0).is_empty());
}

#[test]
fn tagged_fields_are_written_only_when_not_default() {
    let mut response = ApiVersionsResponse {
        api_keys: vec![ApiVersion {
            api_key: 18,
            min_version: 0,
            max_version: 4,
        }],
        ..Default::default()
    };
    let plain = encode(&response, 3);
    // error_code, compact array of one, the element (+ its empty tags), throttle, empty tags.
    assert_eq!(&plain[..], &[0, 0, 2, 0, 18, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0]);
    response.finalized_features_epoch = 5;
    let tagged = encode(&response, 3);
    let mut expected = plain[..plain.len() - 1].to_vec();
    expected.extend_from_slice(&[1, 1, 8, 0, 0, 0, 0, 0, 0, 0, 5]);
    assert_eq!(&tagged[..], &expected[..]);
    assert_eq!(decode::<ApiVersionsResponse>(&tagged, 3).unwrap(), response);
}

#[test]
fn unknown_tagged_fields_are_skipped() {
    let request = ApiVersionsRequest {
        client_software_name: "k".into(),
        client_software_version: "1".into(),
        ..Default::default()
    };
    // Same body with two unknown tags (7 and 200) carrying 3 and 0 bytes.
    let frame = [2, b'k', 2, b'1', 2, 7, 3, 0xde, 0xad, 0xbe, 0xc8, 0x01, 0];
    assert_eq!(decode::<ApiVersionsRequest>(&frame, 3).unwrap(), request);
    // A tagged field whose size runs past the end of the frame is an error.
    let frame = [2, b'k', 2, b'1', 1, 7, 9, 0xde];
    assert!(decode::<ApiVersionsRequest>(&frame, 3).is_err());
    // Known tags mixed with unknown ones: only the known one lands in the struct.
    let frame = [
        0, 0, 1, 0, 0, 0, 0, 2, 9, 1, 0xff, 1, 8, 0, 0, 0, 0, 0, 0, 0, 6,
    ];
    let decoded = decode::<ApiVersionsResponse>(&frame, 3).unwrap();
    assert_eq!(decoded.finalized_features_epoch, 6);
    assert!(decoded.api_keys.is_empty());
}

#[test]
fn huge_array_count_is_rejected_without_allocating() {
    // Metadata v1: a topics array claiming i32::MAX elements, followed by 16 bytes.
    let mut frame = vec![0x7f, 0xff, 0xff, 0xff];
    frame.extend_from_slice(&[0; 16]);
    assert_eq!(frame.len(), 20);
    let start = Instant::now();
    assert!(matches!(
        decode::<MetadataRequest>(&frame, 1),
        Err(DecodeError::ArrayTooLong {
            count: 0x7fff_ffff,
            ..
        })
    ));
    // Compact form (v9): unsigned varint 2^32-1 means 2^32-2 elements.
    let mut frame = vec![0xff, 0xff, 0xff, 0xff, 0x0f];
    frame.extend_from_slice(&[0; 15]);
    assert!(matches!(
        decode::<MetadataRequest>(&frame, 9),
        Err(DecodeError::ArrayTooLong { .. })
    ));
    // A count that fits the bytes as a count but not as elements of their minimum size:
    // each Metadata v1 topic needs at least 2 bytes (its name length).
    let frame = [0, 0, 0, 9, 0, 1, b'a', 0, 1, b'b', 0, 0, 0, 0, 0, 0];
    assert!(matches!(
        decode::<MetadataRequest>(&frame, 1),
        Err(DecodeError::ArrayTooLong {
            count: 9,
            min_element_size: 2,
            ..
        })
    ));
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[test]
fn huge_string_and_bytes_lengths_are_rejected() {
    // SaslAuthenticate v0: auth_bytes claiming 2^31-1 bytes.
    let frame = [0x7f, 0xff, 0xff, 0xff, 1, 2, 3];
    assert!(matches!(
        decode::<messages::SaslAuthenticateRequest>(&frame, 0),
        Err(DecodeError::Truncated { .. })
    ));
    // SaslHandshake v0: mechanism string claiming 32767 bytes.
    let frame = [0x7f, 0xff, b'P'];
    assert!(matches!(
        decode::<messages::SaslHandshakeRequest>(&frame, 0),
        Err(DecodeError::Truncated { .. })
    ));
}

#[test]
fn negative_lengths_and_nulls_are_rejected() {
    // Length -2 is never valid.
    assert_eq!(
        decode::<messages::SaslHandshakeRequest>(&[0xff, 0xfe], 0),
        Err(DecodeError::InvalidLength(-2))
    );
    // -1 (null) for a string that is not nullable.
    assert_eq!(
        decode::<messages::SaslHandshakeRequest>(&[0xff, 0xff], 0),
        Err(DecodeError::UnexpectedNull)
    );
    // A null topic list is only allowed from Metadata v1 on.
    assert_eq!(
        decode::<MetadataRequest>(&[0xff, 0xff, 0xff, 0xff], 0),
        Err(DecodeError::UnexpectedNull)
    );
    assert_eq!(
        decode::<MetadataRequest>(&[0xff, 0xff, 0xff, 0xff], 1)
            .unwrap()
            .topics,
        None
    );
    assert_eq!(
        decode::<MetadataRequest>(&[0xfe, 0xff, 0xff, 0xff], 1),
        Err(DecodeError::InvalidLength(-16_777_217))
    );
}

#[test]
fn invalid_utf8_is_rejected() {
    assert_eq!(
        decode::<messages::SaslHandshakeRequest>(&[0, 2, 0xc3, 0x28], 0),
        Err(DecodeError::InvalidUtf8)
    );
}

#[test]
fn unsupported_versions_are_errors() {
    assert!(matches!(
        decode::<MetadataRequest>(&[], 99),
        Err(DecodeError::UnsupportedVersion { version: 99, .. })
    ));
    let mut out = BytesMut::new();
    assert!(matches!(
        MetadataRequest::default().encode(&mut out, -1),
        Err(EncodeError::UnsupportedVersion { version: -1, .. })
    ));
}

#[test]
fn encode_refuses_what_the_version_cannot_express() {
    let mut out = BytesMut::new();
    let all_topics = MetadataRequest {
        topics: None,
        ..Default::default()
    };
    assert!(matches!(
        all_topics.encode(&mut out, 0),
        Err(EncodeError::NullValue { version: 0, .. })
    ));
    // The generation exists from TxnOffsetCommit v3 on and is not ignorable.
    let request = TxnOffsetCommitRequest {
        generation_id_or_member_epoch: 5,
        ..Default::default()
    };
    assert!(request.encode(&mut BytesMut::new(), 3).is_ok());
    assert!(matches!(
        request.encode(&mut BytesMut::new(), 2),
        Err(EncodeError::FieldNotSupported { version: 2, .. })
    ));
}

#[test]
fn records_are_zero_copy_slices_of_the_frame() {
    let request = ProduceRequest {
        acks: -1,
        timeout_ms: 1000,
        topic_data: vec![TopicProduceData {
            name: "t".into(),
            partition_data: vec![PartitionProduceData {
                index: 0,
                records: Some(Bytes::from_static(b"batch-bytes")),
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    for version in [3, 9] {
        let frame = encode(&request, version);
        let decoded = ProduceRequest::decode(&mut Decoder::new(frame.clone()), version).unwrap();
        let records = decoded.topic_data[0].partition_data[0]
            .records
            .clone()
            .unwrap();
        assert_eq!(&records[..], b"batch-bytes");
        let frame_range = frame.as_ptr() as usize..frame.as_ptr() as usize + frame.len();
        assert!(frame_range.contains(&(records.as_ptr() as usize)));
    }
}

#[test]
fn request_body_dispatches_on_api_key() {
    let request = MetadataRequest {
        topics: Some(vec![MetadataRequestTopic {
            name: Some("t".into()),
            ..Default::default()
        }]),
        ..Default::default()
    };
    let frame = encode(&request, 12);
    let body = RequestBody::decode(ApiKey::Metadata, &mut Decoder::new(frame), 12).unwrap();
    assert_eq!(body.api_key(), ApiKey::Metadata);
    assert_eq!(body, RequestBody::Metadata(request));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Arbitrary bytes decode to a value or an error for every API and version, never a panic,
    /// and never a value claiming more elements than the input could hold.
    #[test]
    fn arbitrary_request_bodies_never_panic(
        key_index in 0usize..ApiKey::ALL.len(),
        version in -1i16..20,
        body in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let api_key = ApiKey::ALL[key_index];
        let frame = Bytes::from(body);
        let _ = RequestBody::decode(api_key, &mut Decoder::new(frame.clone()), version);
        let _ = ResponseBody::decode(api_key, &mut Decoder::new(frame), version);
    }

    #[test]
    fn arbitrary_headers_never_panic(body in proptest::collection::vec(any::<u8>(), 0..32)) {
        let mut input = Decoder::new(Bytes::from(body));
        if let Ok(header) = decode_request_header(&mut input) {
            prop_assert!(ApiKey::from_i16(header.request_api_key).is_some());
        }
    }
}
