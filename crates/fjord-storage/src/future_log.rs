//! Moving a partition's log to another log dir on a live broker (AlterReplicaLogDirs), as
//! Kafka does it: a *future* log `<topic>-<partition>.<32 hex digits>-future` in the
//! destination dir copies the *current* log batch by batch, as a follower copies its leader,
//! while appends go on; once it has caught up, under the current log's lock, it takes its place.
//!
//! This module holds the copying: [`catch_up_round`] (one round, the current log locked only to
//! pick what to read) and [`catch_up_locked`] (the final rounds, under the lock). The directory
//! renames and the bookkeeping live in `LogManager`; the partition that owns the current log
//! drives the move and holds its lock (see `lock_order`).

use std::ops::Deref;
use std::sync::Mutex;

use bytes::Bytes;

use crate::error::{IoResultExt, StorageError};
use fjord_common::TopicPartition;

use crate::lock_order::lock_log;
use crate::log::Log;

/// Suffix of a future log's directory.
pub const FUTURE_DIR_SUFFIX: &str = "-future";

/// The partition a future log's directory name (`<topic>-<partition>.<id>-future`) belongs to.
pub fn parse_future_dir_name(name: &str) -> Option<TopicPartition> {
    let stem = name.strip_suffix(FUTURE_DIR_SUFFIX)?;
    let (partition_dir, id) = stem.rsplit_once('.')?;
    if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    TopicPartition::from_dir_name(partition_dir)
}

/// What the current log looked like when a round read from it.
struct SourceView {
    log_start_offset: i64,
    log_end_offset: i64,
    high_watermark: i64,
    /// The end of the future log's latest epoch in the current log: the future truncates to it.
    divergence: Option<i64>,
}

impl SourceView {
    fn of(current: &Log, future: &Log) -> SourceView {
        let divergence = future.latest_epoch().map(|epoch| {
            let (found, end) = current.end_offset_for_epoch(epoch);
            if found < 0 {
                -1
            } else {
                end
            }
        });
        SourceView {
            log_start_offset: current.log_start_offset(),
            log_end_offset: current.log_end_offset(),
            high_watermark: current.high_watermark(),
            divergence,
        }
    }
}

/// One round of copying, the current log locked by the caller (`current`) only to look and to
/// pick the batches: it is released before they are read and appended. Returns whether the
/// future log has caught up with what the current one held, and the bytes copied.
pub fn catch_up_round<G: Deref<Target = Log>>(
    current: G,
    future: &Mutex<Log>,
    max_bytes: usize,
    now_ms: i64,
) -> Result<(bool, u64), StorageError> {
    let mut future = lock_log(future);
    let view = SourceView::of(&current, &future);
    let from = align(&view, &mut future, now_ms)?;
    let slice = current.read(from, max_bytes, i64::MAX, true)?.records;
    let source_dir = current.dir().to_path_buf();
    drop(current);
    let records = match slice {
        Some(slice) => slice.read_to_bytes().at(&source_dir)?,
        None if future.log_end_offset() < view.log_end_offset => {
            return Err(nothing_to_read(&future, view.log_end_offset))
        }
        None => Bytes::new(),
    };
    apply(&view, &mut future, &records, now_ms)?;
    Ok((
        future.log_end_offset() >= view.log_end_offset,
        records.len() as u64,
    ))
}

/// Copies everything the current log holds beyond the future log; the caller holds the
/// current log's lock, so nothing is appended meanwhile.
pub fn catch_up_locked(
    current: &Log,
    future: &mut Log,
    max_bytes: usize,
    now_ms: i64,
) -> Result<(), StorageError> {
    loop {
        let view = SourceView::of(current, future);
        let from = align(&view, future, now_ms)?;
        if from >= view.log_end_offset {
            future.raise_high_watermark(view.high_watermark);
            return Ok(());
        }
        let read = current.read(from, max_bytes, i64::MAX, true)?;
        let Some(slice) = read.records else {
            return Err(nothing_to_read(future, view.log_end_offset));
        };
        let records = slice.read_to_bytes().at(current.dir())?;
        let before = future.log_end_offset();
        apply(&view, future, &records, now_ms)?;
        if future.log_end_offset() == before {
            return Err(StorageError::corrupt(
                future.dir(),
                format!("copying from offset {before} made no progress"),
            ));
        }
    }
}

/// The current log ends past the future log but has no batch there: the future log cannot
/// take its place without offsets going back.
fn nothing_to_read(future: &Log, log_end_offset: i64) -> StorageError {
    StorageError::corrupt(
        future.dir(),
        format!(
            "no batch to copy between offset {} and the current log end {log_end_offset}",
            future.log_end_offset()
        ),
    )
}

/// Truncates the future log where it diverged from the current one (a truncation there) or
/// fell below its log start (retention, DeleteRecords), and returns the offset to read from.
fn align(view: &SourceView, future: &mut Log, now_ms: i64) -> Result<i64, StorageError> {
    if let Some(end) = view.divergence {
        if end < 0 {
            future.truncate_fully_and_start_at(view.log_start_offset, now_ms)?;
        } else if end < future.log_end_offset() {
            future.truncate_to(end)?;
        }
    }
    if view.log_start_offset > future.log_end_offset() {
        future.truncate_fully_and_start_at(view.log_start_offset, now_ms)?;
    }
    Ok(future.log_end_offset())
}

/// Appends what was read and brings the future log's high watermark and log start along.
fn apply(
    view: &SourceView,
    future: &mut Log,
    records: &Bytes,
    now_ms: i64,
) -> Result<(), StorageError> {
    let first_base = fjord_records::BatchHeader::parse(records)
        .ok()
        .map(|h| h.base_offset);
    if let Some(base) = first_base.filter(|&base| base < future.log_end_offset()) {
        // The log start lies inside the first batch (DeleteRecords mid-batch): start the empty
        // future log at the batch, as a follower does.
        if future.size_in_bytes() > 0 {
            return Err(StorageError::corrupt(
                future.dir(),
                format!(
                    "batch at {base} read below the future log's end {}",
                    future.log_end_offset()
                ),
            ));
        }
        future.truncate_fully_and_start_at(base, now_ms)?;
    }
    if !records.is_empty() {
        future.append_as_follower(records, now_ms)?;
    }
    future.raise_high_watermark(view.high_watermark);
    if view.log_start_offset > future.log_start_offset() {
        future.increment_log_start_offset(view.log_start_offset, now_ms)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn future_dir_names_parse_back_to_their_partition() {
        let name = format!("my.topic-3.{}{FUTURE_DIR_SUFFIX}", "ab".repeat(16));
        assert_eq!(
            parse_future_dir_name(&name),
            Some(TopicPartition::new("my.topic", 3))
        );
        assert_eq!(parse_future_dir_name("my.topic-3"), None);
        assert_eq!(parse_future_dir_name("my.topic-3.abc-future"), None);
        assert_eq!(
            parse_future_dir_name(&format!("t-0.{}-delete", "00".repeat(16))),
            None
        );
    }
}
