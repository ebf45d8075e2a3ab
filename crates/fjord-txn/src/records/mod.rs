//! The `__transaction_state` record format: a key is an i16 version (0) followed by the
//! transactional id; a value is an i16 version (0, or 1 with tagged fields, by the cluster's
//! `transaction.version`) followed by the transaction's state; a missing value is a tombstone (an
//! expired transactional id). The structs are generated (`generated/`) by
//! `tools/protocol-gen/gen.py --records txn` from Kafka's transaction-coordinator schemas.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

pub mod generated;

use bytes::{BufMut, Bytes, BytesMut};
use fjord_common::CoordinatorRecord;
use fjord_protocol::{Decodable, Decoder, Encodable};

pub use generated::*;

use crate::TxnError;

const KEY_VERSION: i16 = 0;

/// Writes the record of `transactional_id`: its state, or a tombstone. `value_version` is 0 or 1.
pub fn encode(
    transactional_id: &str,
    value: Option<&TransactionLogValue>,
    value_version: i16,
) -> Result<CoordinatorRecord, TxnError> {
    let mut key = BytesMut::new();
    key.put_i16(KEY_VERSION);
    TransactionLogKey {
        transactional_id: transactional_id.to_owned(),
    }
    .encode(&mut key, KEY_VERSION)?;
    let value = match value {
        None => None,
        Some(value) => {
            let mut out = BytesMut::new();
            out.put_i16(value_version);
            value.encode(&mut out, value_version)?;
            Some(out.freeze())
        }
    };
    Ok(CoordinatorRecord {
        key: key.freeze(),
        value,
    })
}

/// Reads a record written by Kafka or by [`encode`]: the transactional id and its state (None:
/// a tombstone). Every byte must belong to the key or the value.
pub fn decode(
    record: &CoordinatorRecord,
) -> Result<(String, Option<TransactionLogValue>), TxnError> {
    let mut input = Decoder::new(record.key.clone());
    let version = input.read_i16()?;
    if version != KEY_VERSION {
        return Err(TxnError::UnknownKeyVersion(version));
    }
    let key = TransactionLogKey::decode(&mut input, version)?;
    expect_end(&input)?;
    let value = match &record.value {
        None => None,
        Some(bytes) => Some(decode_value(bytes.clone())?),
    };
    Ok((key.transactional_id, value))
}

fn decode_value(bytes: Bytes) -> Result<TransactionLogValue, TxnError> {
    let mut input = Decoder::new(bytes);
    let version = input.read_i16()?;
    if !(0..=1).contains(&version) {
        return Err(TxnError::UnsupportedValueVersion(version));
    }
    let value = TransactionLogValue::decode(&mut input, version)?;
    expect_end(&input)?;
    Ok(value)
}

fn expect_end(input: &Decoder) -> Result<(), TxnError> {
    match input.remaining() {
        0 => Ok(()),
        n => Err(TxnError::TrailingBytes(n)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::transaction_log_value::PartitionsSchema;
    use super::*;

    fn sample() -> TransactionLogValue {
        TransactionLogValue {
            producer_id: 7,
            producer_epoch: 3,
            transaction_timeout_ms: 60_000,
            transaction_status: 1,
            transaction_partitions: Some(vec![PartitionsSchema {
                topic: "t".into(),
                partition_ids: vec![0, 2],
            }]),
            transaction_last_update_timestamp_ms: 1_000,
            transaction_start_timestamp_ms: 900,
            ..Default::default()
        }
    }

    #[test]
    fn round_trip_in_both_value_versions_and_tombstones() {
        for version in 0..=1 {
            let record = encode("txn-1", Some(&sample()), version).unwrap();
            assert_eq!(&record.key[..2], &[0, 0]);
            assert_eq!(&record.value.as_ref().unwrap()[..2], &[0, version as u8]);
            let (id, value) = decode(&record).unwrap();
            assert_eq!(id, "txn-1");
            assert_eq!(value.unwrap(), sample());
        }
        let tombstone = encode("txn-1", None, 1).unwrap();
        assert_eq!(decode(&tombstone).unwrap(), ("txn-1".to_owned(), None));
    }

    #[test]
    fn version_one_keeps_the_tagged_fields() {
        let value = TransactionLogValue {
            previous_producer_id: 5,
            next_producer_id: 9,
            client_transaction_version: 2,
            ..sample()
        };
        let (_, decoded) = decode(&encode("x", Some(&value), 1).unwrap()).unwrap();
        assert_eq!(decoded.unwrap(), value);
        // Version 0 has no room for them.
        assert!(encode("x", Some(&value), 0).is_err());
    }

    #[test]
    fn bad_records_are_errors() {
        let good = encode("x", Some(&sample()), 1).unwrap();
        let mut key = BytesMut::from(&good.key[..]);
        key[1] = 9;
        let bad_key = CoordinatorRecord {
            key: key.freeze(),
            value: good.value.clone(),
        };
        assert_eq!(decode(&bad_key), Err(TxnError::UnknownKeyVersion(9)));
        let mut value = BytesMut::from(&good.value.as_ref().unwrap()[..]);
        value.put_u8(0);
        let trailing = CoordinatorRecord {
            key: good.key.clone(),
            value: Some(value.freeze()),
        };
        assert_eq!(decode(&trailing), Err(TxnError::TrailingBytes(1)));
        let value = good.value.unwrap();
        for cut in 0..value.len() {
            let cut = CoordinatorRecord {
                key: good.key.clone(),
                value: Some(value.slice(..cut)),
            };
            assert!(decode(&cut).is_err());
        }
    }
}
