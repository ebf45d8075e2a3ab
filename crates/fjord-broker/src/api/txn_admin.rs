//! The transaction APIs of Kafka's admin tools (`kafka-transactions`): DescribeTransactions and
//! ListTransactions, answered from the transaction coordinator shards this broker hosts, and
//! DescribeProducers, answered from the producer state of the partitions it leads.

use std::collections::BTreeSet;

use fjord_common::{errors, lock};
use fjord_protocol::messages::describe_producers_request::DescribeProducersRequest;
use fjord_protocol::messages::describe_producers_response::{
    DescribeProducersResponse, PartitionResponse, ProducerState, TopicResponse,
};
use fjord_protocol::messages::describe_transactions_request::DescribeTransactionsRequest;
use fjord_protocol::messages::describe_transactions_response::{
    DescribeTransactionsResponse, TransactionState as DescribedTransaction,
};
use fjord_protocol::messages::list_transactions_request::ListTransactionsRequest;
use fjord_protocol::messages::list_transactions_response::ListTransactionsResponse;
use fjord_txn::TxnState;

use crate::api::{Access, TxnApi};
use crate::coordinator::txn::TXN_TOPIC;
use fjord_metadata::acl::AclOperation;

impl TxnApi {
    /// DescribeTransactions: each id from the shard of its `__transaction_state` partition;
    /// NOT_COORDINATOR where this broker does not lead it (COORDINATOR_LOAD_IN_PROGRESS while
    /// it loads).
    /// An id the principal may not describe is refused TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    /// and a transaction's topics it may not describe are left out.
    pub(crate) fn describe_transactions(
        &self,
        request: &DescribeTransactionsRequest,
        access: &Access,
    ) -> DescribeTransactionsResponse {
        let transaction_states = request
            .transactional_ids
            .iter()
            .map(|id| {
                let partition = self.txns.partition_of(id);
                match self.txns.shards.shard(partition) {
                    _ if !access.allows_txn_id(AclOperation::Describe, id) => {
                        DescribedTransaction {
                            error_code: errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                            transactional_id: id.clone(),
                            ..Default::default()
                        }
                    }
                    Some(shard) => {
                        let mut described = lock(&shard).core.describe(id);
                        described
                            .topics
                            .retain(|t| access.allows_topic(AclOperation::Describe, &t.topic));
                        described
                    }
                    None => DescribedTransaction {
                        error_code: self.txn_partition_unloaded(partition),
                        transactional_id: id.clone(),
                        ..Default::default()
                    },
                }
            })
            .collect();
        DescribeTransactionsResponse {
            transaction_states,
            ..Default::default()
        }
    }

    /// ListTransactions: the transactions of every coordinator shard this broker hosts that
    /// match the filters (states by Kafka's names — unknown ones are named back and match
    /// nothing —, producer ids, a minimum running time from v1, and from v2 a regular expression
    /// the whole transactional id matches, KIP-1152: INVALID_REGULAR_EXPRESSION when it is not
    /// one).
    /// Only the ids the principal may describe are listed.
    pub(crate) fn list_transactions(
        &self,
        request: &ListTransactionsRequest,
        now_ms: i64,
        access: &Access,
    ) -> ListTransactionsResponse {
        let mut response = ListTransactionsResponse::default();
        let pattern = match request.transactional_id_pattern.as_deref() {
            None | Some("") => None,
            Some(pattern) => match fjord_common::pattern::whole_match(pattern) {
                Ok(regex) => Some(regex),
                Err(error) => {
                    response.error_code = errors::INVALID_REGULAR_EXPRESSION;
                    tracing::debug!(
                        pattern,
                        %error,
                        "ListTransactions: not a valid regular expression"
                    );
                    return response;
                }
            },
        };
        let mut states = BTreeSet::new();
        for name in &request.state_filters {
            match TxnState::from_name(name) {
                Some(state) => {
                    states.insert(state);
                }
                None => response.unknown_state_filters.push(name.clone()),
            }
        }
        if !request.state_filters.is_empty() && states.is_empty() {
            // Only unknown states asked for: nothing can match.
            return response;
        }
        let loading = (0..self.txns.shards.num_partitions()).any(|p| {
            self.txns.shards.shard(p).is_none() && self.replicas.get(TXN_TOPIC, p).is_some()
        });
        if loading {
            response.error_code = errors::COORDINATOR_LOAD_IN_PROGRESS;
            return response;
        }
        let producer_ids: BTreeSet<i64> = request.producer_id_filters.iter().copied().collect();
        for (_, shard) in self.txns.shards.all_shards() {
            let listed =
                lock(&shard)
                    .core
                    .list(now_ms, &states, &producer_ids, request.duration_filter);
            response
                .transaction_states
                .extend(listed.into_iter().filter(|t| {
                    pattern
                        .as_ref()
                        .is_none_or(|p| p.is_match(&t.transactional_id))
                        && access.allows_txn_id(AclOperation::Describe, &t.transactional_id)
                }));
        }
        response
            .transaction_states
            .sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        response
    }

    /// DescribeProducers: the producers each partition this broker leads keeps state for,
    /// with the first offset of each one's open transaction (-1 without one).
    /// A topic the principal may not read is refused TOPIC_AUTHORIZATION_FAILED.
    pub(crate) fn describe_producers(
        &self,
        request: &DescribeProducersRequest,
        access: &Access,
    ) -> DescribeProducersResponse {
        let topics = request
            .topics
            .iter()
            .map(|topic| {
                let allowed = access.allows_topic(AclOperation::Read, &topic.name);
                TopicResponse {
                    name: topic.name.clone(),
                    partitions: topic
                        .partition_indexes
                        .iter()
                        .map(|&index| match allowed {
                            true => self.partition_producers(&topic.name, index),
                            false => PartitionResponse {
                                partition_index: index,
                                error_code: errors::TOPIC_AUTHORIZATION_FAILED,
                                ..Default::default()
                            },
                        })
                        .collect(),
                }
            })
            .collect();
        DescribeProducersResponse {
            topics,
            ..Default::default()
        }
    }

    fn partition_producers(&self, topic: &str, index: i32) -> PartitionResponse {
        let refused = |error_code: i16| PartitionResponse {
            partition_index: index,
            error_code,
            ..Default::default()
        };
        let Some(partition) = self.replicas.get(topic, index) else {
            return refused(self.node.not_hosted(topic, index));
        };
        let Ok(log) = partition.try_lock() else {
            return refused(errors::UNKNOWN_SERVER_ERROR);
        };
        let active_producers = log
            .active_producers()
            .into_iter()
            .map(|p| ProducerState {
                producer_id: p.producer_id,
                producer_epoch: i32::from(p.producer_epoch),
                last_sequence: p.last_seq(),
                last_timestamp: p.last_timestamp,
                coordinator_epoch: p.coordinator_epoch,
                current_txn_start_offset: p.current_txn_first_offset.unwrap_or(-1),
            })
            .collect();
        PartitionResponse {
            partition_index: index,
            active_producers,
            ..Default::default()
        }
    }

    /// Why a `__transaction_state` partition has no shard here: it is loading, or another
    /// broker (or none) leads it.
    fn txn_partition_unloaded(&self, partition: i32) -> i16 {
        if self.replicas.get(TXN_TOPIC, partition).is_some() {
            errors::COORDINATOR_LOAD_IN_PROGRESS
        } else {
            errors::NOT_COORDINATOR
        }
    }
}
