//! Control batches: the commit and abort markers that end a transaction on a partition.
//!
//! A marker is a transactional control batch of the producer's id and epoch holding one record,
//! never compressed: its key is `version: i16 (0) | type: i16` (0 abort, 1 commit) and its value
//! `version: i16 (0) | coordinator_epoch: i32`, as Kafka writes them.

use bytes::BytesMut;

use crate::builder::BatchBuilder;
use crate::compression::Compression;
use crate::header::{BatchHeader, BATCH_HEADER_LEN};
use crate::record::RecordRefIter;
use crate::RecordsError;

const ABORT: i16 = 0;
const COMMIT: i16 = 1;
const CONTROL_VERSION: i16 = 0;

/// What an end-of-transaction marker says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndTxnMarker {
    pub commit: bool,
    /// The epoch of the transaction coordinator that wrote it; older coordinators are fenced.
    pub coordinator_epoch: i32,
}

/// A marker batch for `producer_id` at `producer_epoch`, timestamped `timestamp`; offsets and
/// leader epoch are assigned when it is appended.
pub fn build_marker(
    producer_id: i64,
    producer_epoch: i16,
    marker: EndTxnMarker,
    timestamp: i64,
) -> Result<BytesMut, RecordsError> {
    let mut key = Vec::with_capacity(4);
    key.extend_from_slice(&CONTROL_VERSION.to_be_bytes());
    key.extend_from_slice(&(if marker.commit { COMMIT } else { ABORT }).to_be_bytes());
    let mut value = Vec::with_capacity(6);
    value.extend_from_slice(&CONTROL_VERSION.to_be_bytes());
    value.extend_from_slice(&marker.coordinator_epoch.to_be_bytes());
    let mut builder = BatchBuilder::new(Compression::None)
        .producer(producer_id, producer_epoch, -1)
        .transactional(true)
        .control(true);
    builder.append(timestamp, Some(&key), Some(&value), &[])?;
    builder.build()
}

/// The marker a control batch holds: `batch` is the whole batch (header included). None for a
/// control batch of another kind (KRaft's leader-change and snapshot records) or a batch whose
/// first record cannot be read.
pub fn read_marker(batch: &[u8]) -> Option<EndTxnMarker> {
    let header = BatchHeader::parse(batch.get(..BATCH_HEADER_LEN)?).ok()?;
    if !header.is_control() || header.compression() != 0 {
        return None;
    }
    let records = batch.get(BATCH_HEADER_LEN..header.total_len().min(batch.len()))?;
    let record = RecordRefIter::new(records, 1).next()?.ok()?;
    let key = record.key?;
    let kind = i16::from_be_bytes(key.get(2..4)?.try_into().ok()?);
    let value = record.value?;
    let coordinator_epoch = i32::from_be_bytes(value.get(2..6)?.try_into().ok()?);
    let commit = match kind {
        COMMIT => true,
        ABORT => false,
        _ => return None,
    };
    Some(EndTxnMarker {
        commit,
        coordinator_epoch,
    })
}

/// Bytes of a stored marker batch: enough to [`read_marker`] it without reading more of a batch
/// claiming to be larger.
pub const MARKER_READ_LEN: usize = BATCH_HEADER_LEN + 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_round_trip_and_carry_the_producer() {
        for commit in [true, false] {
            let marker = EndTxnMarker {
                commit,
                coordinator_epoch: 7,
            };
            let batch = build_marker(42, 3, marker, 1_000).unwrap();
            assert!(batch.len() <= MARKER_READ_LEN);
            let header = BatchHeader::parse(&batch[..BATCH_HEADER_LEN]).unwrap();
            assert!(header.is_control() && header.is_transactional());
            assert_eq!((header.producer_id, header.producer_epoch), (42, 3));
            assert_eq!(read_marker(&batch), Some(marker));
        }
    }

    #[test]
    fn other_batches_are_not_markers() {
        let mut data = BatchBuilder::new(Compression::None);
        data.append(1, Some(b"\0\0\0\x01"), Some(b"\0\0\0\0\0\x07"), &[])
            .unwrap();
        assert_eq!(
            read_marker(&data.build().unwrap()),
            None,
            "not a control batch"
        );
        let batch = build_marker(
            1,
            0,
            EndTxnMarker {
                commit: true,
                coordinator_epoch: 0,
            },
            1,
        )
        .unwrap();
        for cut in 0..batch.len() {
            assert_eq!(read_marker(&batch[..cut]), None);
        }
    }
}
