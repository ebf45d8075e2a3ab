//! WriteTxnMarkers: a transaction coordinator asks this broker, as the leader of partitions in
//! a transaction, to end the transaction there with a commit or abort marker. Each marker is
//! appended through the partition like a produce and answered once it is durable and in the
//! high watermark (Kafka writes markers with acks=all); a stale producer or coordinator epoch is
//! refused by the partition's producer state.

use std::sync::Arc;
use std::time::Duration;

use fjord_common::errors;
use fjord_protocol::messages::write_txn_markers_request::WriteTxnMarkersRequest;
use fjord_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
    WriteTxnMarkersResponse,
};
use fjord_records::control::EndTxnMarker;

use crate::api::MarkerWriter;
use crate::coordinator::group::OFFSETS_TOPIC;
use crate::replication::flusher::Durable;
use crate::replication::{Partition, PartitionError};
use fjord_common::LeaderEpoch;
use fjord_storage::log::AppendInfo;

/// How long a marker waits to be replicated before it is answered REQUEST_TIMED_OUT (Kafka's
/// default `request.timeout.ms`); the coordinator then sends it again.
const MARKER_TIMEOUT: Duration = Duration::from_secs(30);

impl MarkerWriter {
    /// Appends one marker through its partition; on a `__consumer_offsets` partition through
    /// the group coordinator too, which commits or drops the transaction's offsets with it.
    fn append_marker(
        &self,
        partition: &Arc<Partition>,
        producer_id: i64,
        producer_epoch: i16,
        marker: EndTxnMarker,
        epoch_bumps: bool,
        now_ms: i64,
    ) -> Result<(AppendInfo, LeaderEpoch), PartitionError> {
        let append = || {
            self.replicas.append_marker(
                partition,
                producer_id,
                producer_epoch,
                marker,
                epoch_bumps,
                now_ms,
            )
        };
        if partition.tp.topic == OFFSETS_TOPIC {
            self.groups
                .append_marker(partition.tp.partition, producer_id, marker.commit, append)
        } else {
            append()
        }
    }

    pub(crate) async fn write_txn_markers(
        self: Arc<Self>,
        request: WriteTxnMarkersRequest,
        now_ms: i64,
    ) -> WriteTxnMarkersResponse {
        let mut markers = Vec::with_capacity(request.markers.len());
        // (marker, topic, partition) of each appended marker and what it waits for.
        let mut waits = Vec::new();
        for (m, marker) in request.markers.iter().enumerate() {
            let end = EndTxnMarker {
                commit: marker.transaction_result,
                coordinator_epoch: marker.coordinator_epoch,
            };
            let mut topics = Vec::with_capacity(marker.topics.len());
            for (t, topic) in marker.topics.iter().enumerate() {
                let mut partitions = Vec::with_capacity(topic.partition_indexes.len());
                for (p, &index) in topic.partition_indexes.iter().enumerate() {
                    let error_code = match self.replicas.get(&topic.name, index) {
                        None => self.node.not_hosted(&topic.name, index),
                        Some(partition) => match self.append_marker(
                            &partition,
                            marker.producer_id,
                            marker.producer_epoch,
                            end,
                            // WriteTxnMarkers v2 says (KIP-1228); earlier versions carry 0.
                            marker.transaction_version >= 2,
                            now_ms,
                        ) {
                            Ok((info, leader_epoch)) => {
                                (self.replicas.metrics().coordinators).marker_written(end.commit);
                                let offset = info.last_offset + 1;
                                let wait = partition.delay_produce(offset, leader_epoch);
                                let durable = partition.durable();
                                waits.push(((m, t, p), partition, offset, durable, wait));
                                errors::NONE
                            }
                            Err(error) => error.code,
                        },
                    };
                    partitions.push(WritableTxnMarkerPartitionResult {
                        partition_index: index,
                        error_code,
                    });
                }
                topics.push(WritableTxnMarkerTopicResult {
                    name: topic.name.clone(),
                    partitions,
                });
            }
            markers.push(WritableTxnMarkerResult {
                producer_id: marker.producer_id,
                topics,
            });
        }
        let targets = waits
            .iter()
            .filter(|(_, _, _, durable, _)| *durable)
            .map(|(_, partition, offset, _, _)| (partition.clone() as Arc<dyn Durable>, *offset))
            .collect();
        let flushed = self.flusher.flush_all(targets).await;
        let deadline = tokio::time::Instant::now() + MARKER_TIMEOUT;
        let mut flushed = flushed.into_iter();
        for ((m, t, p), _, _, durable, wait) in waits {
            let code = if durable && flushed.next().is_some_and(|r| r.is_err()) {
                errors::KAFKA_STORAGE_ERROR
            } else {
                match tokio::time::timeout_at(deadline, wait).await {
                    Ok(Ok(())) => errors::NONE,
                    Ok(Err(_)) => errors::NOT_LEADER_OR_FOLLOWER,
                    Err(_) => errors::REQUEST_TIMED_OUT,
                }
            };
            markers[m].topics[t].partitions[p].error_code = code;
        }
        WriteTxnMarkersResponse { markers }
    }
}
