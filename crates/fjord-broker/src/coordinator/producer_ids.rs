//! Producer ids for idempotent and transactional producers. They come from blocks the active
//! controller reserves in the metadata log (AllocateProducerIds), so an id is never handed out
//! twice, across restarts and brokers alike.

use std::sync::Arc;

use fjord_common::errors;
use fjord_controller::{ControllerApi, ControllerRequest};
use fjord_protocol::messages::allocate_producer_ids_request::AllocateProducerIdsRequest;
use fjord_protocol::ResponseBody;

use crate::link::controller::ControllerLink;
use fjord_common::errors::KafkaError;

/// No producer id can be handed out now: the producer retries (Kafka's answer while its
/// coordinator has no block).
fn unavailable(message: String) -> KafkaError {
    KafkaError::new(errors::COORDINATOR_NOT_AVAILABLE, message)
}

/// The ids of the block this broker holds: `next` up to `end` (exclusive).
struct Block {
    next: i64,
    end: i64,
}

/// This broker's producer-id source: the block it holds, refilled from the controller.
pub struct ProducerIds {
    block: tokio::sync::Mutex<Block>,
    controller: Arc<ControllerLink>,
    node_id: i32,
    broker_epoch: i64,
}

impl ProducerIds {
    pub fn new(controller: Arc<ControllerLink>, node_id: i32, broker_epoch: i64) -> Self {
        ProducerIds {
            block: tokio::sync::Mutex::new(Block { next: 0, end: 0 }),
            controller,
            node_id,
            broker_epoch,
        }
    }

    /// The next producer id, refilling the block first when it is used up.
    pub async fn next(&self) -> Result<i64, KafkaError> {
        let mut block = self.block.lock().await;
        if block.next >= block.end {
            self.refill(&mut block).await?;
        }
        let id = block.next;
        block.next += 1;
        Ok(id)
    }

    /// Makes sure a producer id can be taken without waiting: a coordinator needs one while it
    /// holds a shard's lock.
    pub async fn reserve(&self) -> Result<(), KafkaError> {
        let mut block = self.block.lock().await;
        if block.next >= block.end {
            self.refill(&mut block).await?;
        }
        Ok(())
    }

    /// A producer id from the block, if one is left and no refill is under way.
    pub fn take(&self) -> Option<i64> {
        let mut block = self.block.try_lock().ok()?;
        (block.next < block.end).then(|| {
            block.next += 1;
            block.next - 1
        })
    }

    async fn refill(&self, block: &mut Block) -> Result<(), KafkaError> {
        let request = ControllerRequest::new(
            0,
            ControllerApi::AllocateProducerIds(AllocateProducerIdsRequest {
                broker_id: self.node_id,
                broker_epoch: self.broker_epoch,
            }),
            self.node_id,
        );
        let answer = match self.controller.call(request.clone()).await {
            Ok(answer) => answer,
            Err(error) => error.response_to(&request),
        };
        match answer {
            // Blocks only move forward: one below the block held would hand out ids again.
            ResponseBody::AllocateProducerIds(r)
                if r.error_code == errors::NONE && r.producer_id_start < block.end =>
            {
                Err(unavailable(format!(
                    "the controller gave producer ids from {}, below the block held (ending {})",
                    r.producer_id_start, block.end
                )))
            }
            ResponseBody::AllocateProducerIds(r) if r.error_code == errors::NONE => {
                block.next = r.producer_id_start;
                block.end = r.producer_id_start + r.producer_id_len as i64;
                Ok(())
            }
            ResponseBody::AllocateProducerIds(r) => Err(unavailable(format!(
                "the controller refused a block of producer ids: {}",
                errors::name(r.error_code)
            ))),
            other => Err(unavailable(format!(
                "the controller answered {} to AllocateProducerIds",
                other.api_key().name()
            ))),
        }
    }
}
