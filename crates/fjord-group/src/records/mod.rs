//! The `__consumer_offsets` record format: which key and value schema each record type uses
//! and their byte layout. A key is an i16 version (the record type) followed by the key
//! struct; a value is an i16 version followed by the value struct; a missing value is a
//! tombstone. The structs themselves are generated (`generated/`) by
//! `tools/protocol-gen/gen.py --records` from Kafka's group-coordinator schemas.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

pub mod generated;

use bytes::{BufMut, Bytes, BytesMut};
use fjord_protocol::{Decodable, Decoder, Encodable};

pub use generated::*;

use crate::{CoordinatorRecord, GroupError};

/// Which record a `__consumer_offsets` key names. The key version is the record type.
#[derive(Debug, Clone, PartialEq)]
pub enum RecordKey {
    /// Types 0 and 1 (same layout); written as 1.
    OffsetCommit(OffsetCommitKey),
    /// Type 2.
    GroupMetadata(GroupMetadataKey),
    /// Type 3.
    ConsumerGroupMetadata(ConsumerGroupMetadataKey),
    /// Type 4.
    ConsumerGroupPartitionMetadata(ConsumerGroupPartitionMetadataKey),
    /// Type 5.
    ConsumerGroupMemberMetadata(ConsumerGroupMemberMetadataKey),
    /// Type 6.
    ConsumerGroupTargetAssignmentMetadata(ConsumerGroupTargetAssignmentMetadataKey),
    /// Type 7.
    ConsumerGroupTargetAssignmentMember(ConsumerGroupTargetAssignmentMemberKey),
    /// Type 8.
    ConsumerGroupCurrentMemberAssignment(ConsumerGroupCurrentMemberAssignmentKey),
    /// Type 10 (a share group's, KIP-932).
    ShareGroupMemberMetadata(ShareGroupMemberMetadataKey),
    /// Type 11 (a share group's, KIP-932).
    ShareGroupMetadata(ShareGroupMetadataKey),
    /// Type 12 (a share group's, KIP-932).
    ShareGroupTargetAssignmentMetadata(ShareGroupTargetAssignmentMetadataKey),
    /// Type 13 (a share group's, KIP-932).
    ShareGroupTargetAssignmentMember(ShareGroupTargetAssignmentMemberKey),
    /// Type 14 (a share group's, KIP-932).
    ShareGroupCurrentMemberAssignment(ShareGroupCurrentMemberAssignmentKey),
    /// Type 15 (a share group's, KIP-932).
    ShareGroupStatePartitionMetadata(ShareGroupStatePartitionMetadataKey),
}

/// The value of a `__consumer_offsets` record; its variant matches the key's.
#[derive(Debug, Clone, PartialEq)]
pub enum RecordValue {
    OffsetCommit(OffsetCommitValue),
    GroupMetadata(GroupMetadataValue),
    ConsumerGroupMetadata(ConsumerGroupMetadataValue),
    ConsumerGroupPartitionMetadata(ConsumerGroupPartitionMetadataValue),
    ConsumerGroupMemberMetadata(ConsumerGroupMemberMetadataValue),
    ConsumerGroupTargetAssignmentMetadata(ConsumerGroupTargetAssignmentMetadataValue),
    ConsumerGroupTargetAssignmentMember(ConsumerGroupTargetAssignmentMemberValue),
    ConsumerGroupCurrentMemberAssignment(ConsumerGroupCurrentMemberAssignmentValue),
    ShareGroupMemberMetadata(ShareGroupMemberMetadataValue),
    ShareGroupMetadata(ShareGroupMetadataValue),
    ShareGroupTargetAssignmentMetadata(ShareGroupTargetAssignmentMetadataValue),
    ShareGroupTargetAssignmentMember(ShareGroupTargetAssignmentMemberValue),
    ShareGroupCurrentMemberAssignment(ShareGroupCurrentMemberAssignmentValue),
    ShareGroupStatePartitionMetadata(ShareGroupStatePartitionMetadataValue),
}

impl RecordKey {
    /// The version written in front of the key, which is also the record type.
    pub fn record_type(&self) -> i16 {
        match self {
            RecordKey::OffsetCommit(_) => 1,
            RecordKey::GroupMetadata(_) => 2,
            RecordKey::ConsumerGroupMetadata(_) => 3,
            RecordKey::ConsumerGroupPartitionMetadata(_) => 4,
            RecordKey::ConsumerGroupMemberMetadata(_) => 5,
            RecordKey::ConsumerGroupTargetAssignmentMetadata(_) => 6,
            RecordKey::ConsumerGroupTargetAssignmentMember(_) => 7,
            RecordKey::ConsumerGroupCurrentMemberAssignment(_) => 8,
            RecordKey::ShareGroupMemberMetadata(_) => 10,
            RecordKey::ShareGroupMetadata(_) => 11,
            RecordKey::ShareGroupTargetAssignmentMetadata(_) => 12,
            RecordKey::ShareGroupTargetAssignmentMember(_) => 13,
            RecordKey::ShareGroupCurrentMemberAssignment(_) => 14,
            RecordKey::ShareGroupStatePartitionMetadata(_) => 15,
        }
    }

    /// The group the record belongs to.
    pub fn group_id(&self) -> &str {
        match self {
            RecordKey::OffsetCommit(k) => &k.group,
            RecordKey::GroupMetadata(k) => &k.group,
            RecordKey::ConsumerGroupMetadata(k) => &k.group_id,
            RecordKey::ConsumerGroupPartitionMetadata(k) => &k.group_id,
            RecordKey::ConsumerGroupMemberMetadata(k) => &k.group_id,
            RecordKey::ConsumerGroupTargetAssignmentMetadata(k) => &k.group_id,
            RecordKey::ConsumerGroupTargetAssignmentMember(k) => &k.group_id,
            RecordKey::ConsumerGroupCurrentMemberAssignment(k) => &k.group_id,
            RecordKey::ShareGroupMemberMetadata(k) => &k.group_id,
            RecordKey::ShareGroupMetadata(k) => &k.group_id,
            RecordKey::ShareGroupTargetAssignmentMetadata(k) => &k.group_id,
            RecordKey::ShareGroupTargetAssignmentMember(k) => &k.group_id,
            RecordKey::ShareGroupCurrentMemberAssignment(k) => &k.group_id,
            RecordKey::ShareGroupStatePartitionMetadata(k) => &k.group_id,
        }
    }

    fn encode_body(&self, out: &mut BytesMut) -> Result<(), GroupError> {
        let version = self.record_type();
        match self {
            RecordKey::OffsetCommit(k) => k.encode(out, version)?,
            RecordKey::GroupMetadata(k) => k.encode(out, version)?,
            RecordKey::ConsumerGroupMetadata(k) => k.encode(out, version)?,
            RecordKey::ConsumerGroupPartitionMetadata(k) => k.encode(out, version)?,
            RecordKey::ConsumerGroupMemberMetadata(k) => k.encode(out, version)?,
            RecordKey::ConsumerGroupTargetAssignmentMetadata(k) => k.encode(out, version)?,
            RecordKey::ConsumerGroupTargetAssignmentMember(k) => k.encode(out, version)?,
            RecordKey::ConsumerGroupCurrentMemberAssignment(k) => k.encode(out, version)?,
            // Kafka 4.4's share group keys are version 0 behind their record type.
            RecordKey::ShareGroupMemberMetadata(k) => k.encode(out, 0)?,
            RecordKey::ShareGroupMetadata(k) => k.encode(out, 0)?,
            RecordKey::ShareGroupTargetAssignmentMetadata(k) => k.encode(out, 0)?,
            RecordKey::ShareGroupTargetAssignmentMember(k) => k.encode(out, 0)?,
            RecordKey::ShareGroupCurrentMemberAssignment(k) => k.encode(out, 0)?,
            RecordKey::ShareGroupStatePartitionMetadata(k) => k.encode(out, 0)?,
        }
        Ok(())
    }

    fn decode_body(record_type: i16, input: &mut Decoder) -> Result<Self, GroupError> {
        let v = record_type;
        Ok(match record_type {
            0 | 1 => RecordKey::OffsetCommit(OffsetCommitKey::decode(input, v)?),
            2 => RecordKey::GroupMetadata(GroupMetadataKey::decode(input, v)?),
            3 => RecordKey::ConsumerGroupMetadata(ConsumerGroupMetadataKey::decode(input, v)?),
            4 => RecordKey::ConsumerGroupPartitionMetadata(
                ConsumerGroupPartitionMetadataKey::decode(input, v)?,
            ),
            5 => RecordKey::ConsumerGroupMemberMetadata(ConsumerGroupMemberMetadataKey::decode(
                input, v,
            )?),
            6 => RecordKey::ConsumerGroupTargetAssignmentMetadata(
                ConsumerGroupTargetAssignmentMetadataKey::decode(input, v)?,
            ),
            7 => RecordKey::ConsumerGroupTargetAssignmentMember(
                ConsumerGroupTargetAssignmentMemberKey::decode(input, v)?,
            ),
            8 => RecordKey::ConsumerGroupCurrentMemberAssignment(
                ConsumerGroupCurrentMemberAssignmentKey::decode(input, v)?,
            ),
            10 => {
                RecordKey::ShareGroupMemberMetadata(ShareGroupMemberMetadataKey::decode(input, 0)?)
            }
            11 => RecordKey::ShareGroupMetadata(ShareGroupMetadataKey::decode(input, 0)?),
            12 => RecordKey::ShareGroupTargetAssignmentMetadata(
                ShareGroupTargetAssignmentMetadataKey::decode(input, 0)?,
            ),
            13 => RecordKey::ShareGroupTargetAssignmentMember(
                ShareGroupTargetAssignmentMemberKey::decode(input, 0)?,
            ),
            14 => RecordKey::ShareGroupCurrentMemberAssignment(
                ShareGroupCurrentMemberAssignmentKey::decode(input, 0)?,
            ),
            15 => RecordKey::ShareGroupStatePartitionMetadata(
                ShareGroupStatePartitionMetadataKey::decode(input, 0)?,
            ),
            other => return Err(GroupError::UnknownRecordType(other)),
        })
    }
}

impl RecordValue {
    /// The value version this coordinator writes, as Kafka 4.x does: OffsetCommit v3 (v1 only
    /// when an expire timestamp must be kept), GroupMetadata v3 (the newest non-flexible
    /// version), the KIP-848 records v0.
    pub fn write_version(&self) -> i16 {
        match self {
            RecordValue::OffsetCommit(v) if v.expire_timestamp != -1 => 1,
            RecordValue::OffsetCommit(_) => 3,
            RecordValue::GroupMetadata(_) => 3,
            _ => 0,
        }
    }

    fn record_type(&self) -> i16 {
        match self {
            RecordValue::OffsetCommit(_) => 1,
            RecordValue::GroupMetadata(_) => 2,
            RecordValue::ConsumerGroupMetadata(_) => 3,
            RecordValue::ConsumerGroupPartitionMetadata(_) => 4,
            RecordValue::ConsumerGroupMemberMetadata(_) => 5,
            RecordValue::ConsumerGroupTargetAssignmentMetadata(_) => 6,
            RecordValue::ConsumerGroupTargetAssignmentMember(_) => 7,
            RecordValue::ConsumerGroupCurrentMemberAssignment(_) => 8,
            RecordValue::ShareGroupMemberMetadata(_) => 10,
            RecordValue::ShareGroupMetadata(_) => 11,
            RecordValue::ShareGroupTargetAssignmentMetadata(_) => 12,
            RecordValue::ShareGroupTargetAssignmentMember(_) => 13,
            RecordValue::ShareGroupCurrentMemberAssignment(_) => 14,
            RecordValue::ShareGroupStatePartitionMetadata(_) => 15,
        }
    }

    fn encode_body(&self, out: &mut BytesMut, version: i16) -> Result<(), GroupError> {
        match self {
            RecordValue::OffsetCommit(v) => v.encode(out, version)?,
            RecordValue::GroupMetadata(v) => v.encode(out, version)?,
            RecordValue::ConsumerGroupMetadata(v) => v.encode(out, version)?,
            RecordValue::ConsumerGroupPartitionMetadata(v) => v.encode(out, version)?,
            RecordValue::ConsumerGroupMemberMetadata(v) => v.encode(out, version)?,
            RecordValue::ConsumerGroupTargetAssignmentMetadata(v) => v.encode(out, version)?,
            RecordValue::ConsumerGroupTargetAssignmentMember(v) => v.encode(out, version)?,
            RecordValue::ConsumerGroupCurrentMemberAssignment(v) => v.encode(out, version)?,
            RecordValue::ShareGroupMemberMetadata(v) => v.encode(out, version)?,
            RecordValue::ShareGroupMetadata(v) => v.encode(out, version)?,
            RecordValue::ShareGroupTargetAssignmentMetadata(v) => v.encode(out, version)?,
            RecordValue::ShareGroupTargetAssignmentMember(v) => v.encode(out, version)?,
            RecordValue::ShareGroupCurrentMemberAssignment(v) => v.encode(out, version)?,
            RecordValue::ShareGroupStatePartitionMetadata(v) => v.encode(out, version)?,
        }
        Ok(())
    }

    fn decode_body(key: &RecordKey, version: i16, input: &mut Decoder) -> Result<Self, GroupError> {
        let v = version;
        let valid = match key {
            RecordKey::OffsetCommit(_) | RecordKey::GroupMetadata(_) => (0..=4).contains(&v),
            _ => v == 0,
        };
        if !valid {
            return Err(GroupError::UnsupportedValueVersion {
                record_type: key.record_type(),
                version: v,
            });
        }
        Ok(match key {
            RecordKey::OffsetCommit(_) => {
                RecordValue::OffsetCommit(OffsetCommitValue::decode(input, v)?)
            }
            RecordKey::GroupMetadata(_) => {
                RecordValue::GroupMetadata(GroupMetadataValue::decode(input, v)?)
            }
            RecordKey::ConsumerGroupMetadata(_) => {
                RecordValue::ConsumerGroupMetadata(ConsumerGroupMetadataValue::decode(input, v)?)
            }
            RecordKey::ConsumerGroupPartitionMetadata(_) => {
                RecordValue::ConsumerGroupPartitionMetadata(
                    ConsumerGroupPartitionMetadataValue::decode(input, v)?,
                )
            }
            RecordKey::ConsumerGroupMemberMetadata(_) => RecordValue::ConsumerGroupMemberMetadata(
                ConsumerGroupMemberMetadataValue::decode(input, v)?,
            ),
            RecordKey::ConsumerGroupTargetAssignmentMetadata(_) => {
                RecordValue::ConsumerGroupTargetAssignmentMetadata(
                    ConsumerGroupTargetAssignmentMetadataValue::decode(input, v)?,
                )
            }
            RecordKey::ConsumerGroupTargetAssignmentMember(_) => {
                RecordValue::ConsumerGroupTargetAssignmentMember(
                    ConsumerGroupTargetAssignmentMemberValue::decode(input, v)?,
                )
            }
            RecordKey::ConsumerGroupCurrentMemberAssignment(_) => {
                RecordValue::ConsumerGroupCurrentMemberAssignment(
                    ConsumerGroupCurrentMemberAssignmentValue::decode(input, v)?,
                )
            }
            RecordKey::ShareGroupMemberMetadata(_) => RecordValue::ShareGroupMemberMetadata(
                ShareGroupMemberMetadataValue::decode(input, v)?,
            ),
            RecordKey::ShareGroupMetadata(_) => {
                RecordValue::ShareGroupMetadata(ShareGroupMetadataValue::decode(input, v)?)
            }
            RecordKey::ShareGroupTargetAssignmentMetadata(_) => {
                RecordValue::ShareGroupTargetAssignmentMetadata(
                    ShareGroupTargetAssignmentMetadataValue::decode(input, v)?,
                )
            }
            RecordKey::ShareGroupTargetAssignmentMember(_) => {
                RecordValue::ShareGroupTargetAssignmentMember(
                    ShareGroupTargetAssignmentMemberValue::decode(input, v)?,
                )
            }
            RecordKey::ShareGroupCurrentMemberAssignment(_) => {
                RecordValue::ShareGroupCurrentMemberAssignment(
                    ShareGroupCurrentMemberAssignmentValue::decode(input, v)?,
                )
            }
            RecordKey::ShareGroupStatePartitionMetadata(_) => {
                RecordValue::ShareGroupStatePartitionMetadata(
                    ShareGroupStatePartitionMetadataValue::decode(input, v)?,
                )
            }
        })
    }
}

/// Writes a record as Kafka does; `value: None` makes a tombstone. Fails only when a field
/// cannot be represented (e.g. a string longer than an i16 length allows) or the value's
/// variant does not match the key's.
pub fn encode(
    key: &RecordKey,
    value: Option<&RecordValue>,
) -> Result<CoordinatorRecord, GroupError> {
    let mut key_bytes = BytesMut::new();
    key_bytes.put_i16(key.record_type());
    key.encode_body(&mut key_bytes)?;
    let value = match value {
        None => None,
        Some(value) => {
            if value.record_type() != key.record_type() {
                return Err(GroupError::UnsupportedValueVersion {
                    record_type: key.record_type(),
                    version: value.write_version(),
                });
            }
            let version = value.write_version();
            let mut out = BytesMut::new();
            out.put_i16(version);
            value.encode_body(&mut out, version)?;
            Some(out.freeze())
        }
    };
    Ok(CoordinatorRecord {
        key: key_bytes.freeze(),
        value,
    })
}

/// Reads a record written by Kafka or by [`encode`]. Every byte must belong to the key or
/// value. A record type this coordinator does not know gives `GroupError::UnknownRecordType`.
pub fn decode(record: &CoordinatorRecord) -> Result<(RecordKey, Option<RecordValue>), GroupError> {
    let mut input = Decoder::new(record.key.clone());
    let record_type = input.read_i16()?;
    let key = RecordKey::decode_body(record_type, &mut input)?;
    expect_end(&input)?;
    let value = match &record.value {
        None => None,
        Some(bytes) => Some(decode_value(&key, bytes.clone())?),
    };
    Ok((key, value))
}

fn decode_value(key: &RecordKey, bytes: Bytes) -> Result<RecordValue, GroupError> {
    let mut input = Decoder::new(bytes);
    let version = input.read_i16()?;
    let value = RecordValue::decode_body(key, version, &mut input)?;
    expect_end(&input)?;
    Ok(value)
}

fn expect_end(input: &Decoder) -> Result<(), GroupError> {
    match input.remaining() {
        0 => Ok(()),
        n => Err(GroupError::TrailingBytes(n)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn offset_commit(group: &str, topic: &str, partition: i32) -> RecordKey {
        RecordKey::OffsetCommit(OffsetCommitKey {
            group: group.into(),
            topic: topic.into(),
            partition,
        })
    }

    #[test]
    fn offset_commit_bytes_match_kafka_layout() {
        let key = offset_commit("g", "t", 3);
        let value = RecordValue::OffsetCommit(OffsetCommitValue {
            offset: 42,
            leader_epoch: 7,
            metadata: "m".into(),
            commit_timestamp: 1000,
            expire_timestamp: -1,
        });
        let record = encode(&key, Some(&value)).unwrap();
        // key v1: int16 version, string group, string topic, int32 partition.
        assert_eq!(
            &record.key[..],
            &[0, 1, 0, 1, b'g', 0, 1, b't', 0, 0, 0, 3][..]
        );
        // value v3: int16 version, int64 offset, int32 leader epoch, string metadata,
        // int64 commit timestamp.
        assert_eq!(
            &record.value.as_ref().unwrap()[..],
            &[0, 3, 0, 0, 0, 0, 0, 0, 0, 42, 0, 0, 0, 7, 0, 1, b'm', 0, 0, 0, 0, 0, 0, 3, 0xe8][..]
        );
        assert_eq!(decode(&record).unwrap(), (key, Some(value)));
    }

    #[test]
    fn offset_commit_with_expiry_is_written_as_v1() {
        let value = RecordValue::OffsetCommit(OffsetCommitValue {
            offset: 1,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp: 5,
            expire_timestamp: 9,
        });
        let record = encode(&offset_commit("g", "t", 0), Some(&value)).unwrap();
        let bytes = record.value.clone().unwrap();
        assert_eq!(&bytes[..2], &[0, 1]);
        // v1 has no leader epoch: offset, metadata, commit and expire timestamps.
        assert_eq!(bytes.len(), 2 + 8 + 2 + 8 + 8);
        assert_eq!(decode(&record).unwrap().1, Some(value));
    }

    #[test]
    fn every_record_type_round_trips_and_tombstones_have_no_value() {
        let keys = vec![
            offset_commit("g", "t", 0),
            RecordKey::GroupMetadata(GroupMetadataKey { group: "g".into() }),
            RecordKey::ConsumerGroupMetadata(ConsumerGroupMetadataKey {
                group_id: "g".into(),
            }),
            RecordKey::ConsumerGroupPartitionMetadata(ConsumerGroupPartitionMetadataKey {
                group_id: "g".into(),
            }),
            RecordKey::ConsumerGroupMemberMetadata(ConsumerGroupMemberMetadataKey {
                group_id: "g".into(),
                member_id: "m".into(),
            }),
            RecordKey::ConsumerGroupTargetAssignmentMetadata(
                ConsumerGroupTargetAssignmentMetadataKey {
                    group_id: "g".into(),
                },
            ),
            RecordKey::ConsumerGroupTargetAssignmentMember(
                ConsumerGroupTargetAssignmentMemberKey {
                    group_id: "g".into(),
                    member_id: "m".into(),
                },
            ),
            RecordKey::ConsumerGroupCurrentMemberAssignment(
                ConsumerGroupCurrentMemberAssignmentKey {
                    group_id: "g".into(),
                    member_id: "m".into(),
                },
            ),
        ];
        let values = vec![
            RecordValue::OffsetCommit(OffsetCommitValue::sample(3)),
            RecordValue::GroupMetadata(GroupMetadataValue::sample(3)),
            RecordValue::ConsumerGroupMetadata(ConsumerGroupMetadataValue::sample(0)),
            RecordValue::ConsumerGroupPartitionMetadata(
                ConsumerGroupPartitionMetadataValue::sample(0),
            ),
            RecordValue::ConsumerGroupMemberMetadata(ConsumerGroupMemberMetadataValue::sample(0)),
            RecordValue::ConsumerGroupTargetAssignmentMetadata(
                ConsumerGroupTargetAssignmentMetadataValue::sample(0),
            ),
            RecordValue::ConsumerGroupTargetAssignmentMember(
                ConsumerGroupTargetAssignmentMemberValue::sample(0),
            ),
            RecordValue::ConsumerGroupCurrentMemberAssignment(
                ConsumerGroupCurrentMemberAssignmentValue::sample(0),
            ),
        ];
        for (i, (key, value)) in keys.into_iter().zip(values).enumerate() {
            assert_eq!(key.record_type(), i16::try_from(i).unwrap() + 1);
            assert_eq!(key.group_id(), "g");
            let record = encode(&key, Some(&value)).unwrap();
            assert_eq!(&record.key[..2], &key.record_type().to_be_bytes());
            assert_eq!(decode(&record).unwrap(), (key.clone(), Some(value)));
            let tombstone = encode(&key, None).unwrap();
            assert_eq!(tombstone.value, None);
            assert_eq!(decode(&tombstone).unwrap(), (key, None));
        }
    }

    #[test]
    fn old_versions_written_by_kafka_are_read() {
        // OffsetCommit key v0 and GroupMetadata value v0 (no timestamps, no instance ids).
        let mut key = BytesMut::new();
        key.put_i16(0);
        key.extend_from_slice(&[0, 1, b'g', 0, 1, b't', 0, 0, 0, 1]);
        let mut value = BytesMut::new();
        value.put_i16(0);
        value.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5]);
        let record = CoordinatorRecord {
            key: key.freeze(),
            value: Some(value.freeze()),
        };
        let (key, value) = decode(&record).unwrap();
        assert_eq!(key, offset_commit("g", "t", 1));
        let RecordValue::OffsetCommit(value) = value.unwrap() else {
            panic!("not an offset commit value");
        };
        assert_eq!(
            (value.offset, value.leader_epoch, value.commit_timestamp),
            (9, -1, 5)
        );
        for version in 0..=4 {
            let sample = GroupMetadataValue::sample(version);
            let mut out = BytesMut::new();
            out.put_i16(version);
            sample.encode(&mut out, version).unwrap();
            let record = CoordinatorRecord {
                key: encode(
                    &RecordKey::GroupMetadata(GroupMetadataKey { group: "g".into() }),
                    None,
                )
                .unwrap()
                .key,
                value: Some(out.freeze()),
            };
            assert_eq!(
                decode(&record).unwrap().1,
                Some(RecordValue::GroupMetadata(sample))
            );
        }
    }

    #[test]
    fn bad_records_are_errors() {
        let good = encode(
            &offset_commit("g", "t", 0),
            Some(&RecordValue::OffsetCommit(OffsetCommitValue::default())),
        )
        .unwrap();
        let mut unknown = BytesMut::new();
        unknown.put_i16(9);
        unknown.extend_from_slice(&[0, 1, b'g']);
        let cases = vec![
            CoordinatorRecord {
                key: unknown.freeze(),
                value: None,
            },
            CoordinatorRecord {
                key: Bytes::from_static(&[0]),
                value: None,
            },
            CoordinatorRecord {
                key: Bytes::from_static(&[0, 2, 0, 9, b'g']),
                value: None,
            },
            CoordinatorRecord {
                key: Bytes::from_static(&[0, 2, 0, 1, b'g', 0]),
                value: None,
            },
            CoordinatorRecord {
                key: good.key.clone(),
                value: Some(Bytes::from_static(&[0, 5])),
            },
            CoordinatorRecord {
                key: good.key.clone(),
                value: Some(Bytes::from_static(&[0, 3, 0])),
            },
            CoordinatorRecord {
                key: good.key.clone(),
                value: Some(Bytes::new()),
            },
        ];
        for case in cases {
            assert!(decode(&case).is_err(), "{case:?} decoded");
        }
        assert_eq!(
            decode(&CoordinatorRecord {
                key: Bytes::from_static(&[0, 9]),
                value: None
            }),
            Err(GroupError::UnknownRecordType(9))
        );
        let mismatched = encode(
            &RecordKey::GroupMetadata(GroupMetadataKey { group: "g".into() }),
            Some(&RecordValue::OffsetCommit(OffsetCommitValue::default())),
        );
        assert!(mismatched.is_err());
    }
}
