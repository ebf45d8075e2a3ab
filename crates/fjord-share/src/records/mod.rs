//! The `__share_group_state` record format. A key is an i16 record type — 0 for a
//! ShareSnapshot (the whole state of one share partition), 1 for a ShareUpdate (what one write
//! changed) — followed by the group id, topic id and partition; a value is an i16 version (0)
//! followed by the record. A ShareSnapshot key without a value is a tombstone: the state was
//! deleted. The structs are generated (`generated/`) by `tools/protocol-gen/gen.py --records
//! share` from Kafka's share-coordinator schemas.

#![deny(clippy::expect_used, clippy::indexing_slicing)]

pub mod generated;

use bytes::{BufMut, Bytes, BytesMut};
use fjord_common::{CoordinatorRecord, Uuid};
use fjord_protocol::{Decodable, Decoder, Encodable};

pub use generated::*;

const SNAPSHOT: i16 = 0;
const UPDATE: i16 = 1;
const VALUE_VERSION: i16 = 0;

/// One `__share_group_state` record, decoded.
#[derive(Debug, Clone, PartialEq)]
pub enum StateRecord {
    Snapshot(ShareSnapshotValue),
    Update(ShareUpdateValue),
    /// The state was deleted.
    Tombstone,
}

/// Why bytes are not a `__share_group_state` record.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("unknown share state record type {0}")]
    UnknownType(i16),
    #[error("unsupported share state value version {0}")]
    UnsupportedVersion(i16),
    #[error("{0} trailing bytes after a share state record")]
    TrailingBytes(usize),
    #[error(transparent)]
    Decode(#[from] fjord_protocol::DecodeError),
    #[error(transparent)]
    Encode(#[from] fjord_protocol::EncodeError),
}

/// Whose state a record is: one share group's on one partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StateKey {
    pub group_id: String,
    pub topic_id: Uuid,
    pub partition: i32,
}

impl StateKey {
    /// The key FindCoordinator and the partition placement use: "group:topicId:partition".
    pub fn coordinator_key(&self) -> String {
        format!("{}:{}:{}", self.group_id, self.topic_id, self.partition)
    }
}

/// Writes `record` under `key`.
pub fn encode(key: &StateKey, record: &StateRecord) -> Result<CoordinatorRecord, RecordError> {
    let record_type = match record {
        StateRecord::Update(_) => UPDATE,
        StateRecord::Snapshot(_) | StateRecord::Tombstone => SNAPSHOT,
    };
    let mut out = BytesMut::new();
    out.put_i16(record_type);
    // Both key schemas hold the same three fields.
    ShareSnapshotKey {
        group_id: key.group_id.clone(),
        topic_id: key.topic_id,
        partition: key.partition,
    }
    .encode(&mut out, 0)?;
    let value = match record {
        StateRecord::Tombstone => None,
        StateRecord::Snapshot(value) => Some(encode_value(value)?),
        StateRecord::Update(value) => Some(encode_value(value)?),
    };
    Ok(CoordinatorRecord {
        key: out.freeze(),
        value,
    })
}

fn encode_value(value: &impl Encodable) -> Result<Bytes, RecordError> {
    let mut out = BytesMut::new();
    out.put_i16(VALUE_VERSION);
    value.encode(&mut out, VALUE_VERSION)?;
    Ok(out.freeze())
}

/// Reads a record written by Kafka or by [`encode`]. Every byte must belong to the key or the
/// value.
pub fn decode(record: &CoordinatorRecord) -> Result<(StateKey, StateRecord), RecordError> {
    let mut input = Decoder::new(record.key.clone());
    let record_type = input.read_i16()?;
    if record_type != SNAPSHOT && record_type != UPDATE {
        return Err(RecordError::UnknownType(record_type));
    }
    let key = ShareSnapshotKey::decode(&mut input, 0)?;
    expect_end(&input)?;
    let key = StateKey {
        group_id: key.group_id,
        topic_id: key.topic_id,
        partition: key.partition,
    };
    let Some(bytes) = &record.value else {
        return Ok((key, StateRecord::Tombstone));
    };
    let mut input = Decoder::new(bytes.clone());
    let version = input.read_i16()?;
    if version != VALUE_VERSION {
        return Err(RecordError::UnsupportedVersion(version));
    }
    let value = if record_type == SNAPSHOT {
        StateRecord::Snapshot(ShareSnapshotValue::decode(&mut input, version)?)
    } else {
        StateRecord::Update(ShareUpdateValue::decode(&mut input, version)?)
    };
    expect_end(&input)?;
    Ok((key, value))
}

fn expect_end(input: &Decoder) -> Result<(), RecordError> {
    match input.remaining() {
        0 => Ok(()),
        n => Err(RecordError::TrailingBytes(n)),
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn key() -> StateKey {
        StateKey {
            group_id: "g".into(),
            topic_id: Uuid([7; 16]),
            partition: 3,
        }
    }

    #[test]
    fn records_round_trip() {
        let update = StateRecord::Update(ShareUpdateValue {
            snapshot_epoch: 2,
            leader_epoch: 5,
            start_offset: -1,
            delivery_complete_count: 4,
            state_batches: vec![share_update_value::StateBatch {
                first_offset: 10,
                last_offset: 12,
                delivery_state: 2,
                delivery_count: 1,
            }],
        });
        for record in [
            update,
            StateRecord::Snapshot(ShareSnapshotValue::default()),
            StateRecord::Tombstone,
        ] {
            let encoded = encode(&key(), &record).unwrap();
            assert_eq!(decode(&encoded).unwrap(), (key(), record));
        }
        assert_eq!(key().coordinator_key(), format!("g:{}:3", Uuid([7; 16])));
    }

    #[test]
    fn foreign_bytes_are_refused() {
        let mut record = encode(&key(), &StateRecord::Tombstone).unwrap();
        let mut bad = BytesMut::from(&record.key[..]);
        bad[1] = 9;
        record.key = bad.freeze();
        assert!(matches!(decode(&record), Err(RecordError::UnknownType(9))));
        let mut record = encode(&key(), &StateRecord::Tombstone).unwrap();
        let mut long = BytesMut::from(&record.key[..]);
        long.put_u8(0);
        record.key = long.freeze();
        assert!(matches!(
            decode(&record),
            Err(RecordError::TrailingBytes(1))
        ));
        for cut in 0..record.key.len() - 1 {
            let short = CoordinatorRecord {
                key: record.key.slice(..cut),
                value: None,
            };
            assert!(decode(&short).is_err());
        }
    }
}
