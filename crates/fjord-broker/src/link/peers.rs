//! Connections to the other brokers: one per request kind and peer, pooled (`LinkPool`), made
//! from the endpoints in their registrations (`connect_to_broker`); and the batching of
//! KIP-890 verification asks bound for another broker's transaction coordinators
//! (`AskQueues`, sans-IO).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use fjord_client::{ClientConfig, Connection};
use fjord_common::errors::{self, KafkaError};
use fjord_common::{BrokerId, TopicPartition};
use fjord_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTransaction;

/// A transaction coordinator's answers for the partitions of one request: NONE when the
/// partition is in the producer's transaction (or now added to it).
pub(crate) type Codes = HashMap<TopicPartition, i16>;

/// Connects to `broker` on `listener` at the endpoint its registration gives.
pub(crate) async fn connect_to_broker(
    image: &fjord_metadata::MetadataImage,
    listener: &str,
    broker: BrokerId,
    config: &ClientConfig,
) -> Result<Connection, KafkaError> {
    let endpoint = image
        .broker(broker)
        .and_then(|b| b.endpoints.iter().find(|e| e.name == listener))
        .ok_or_else(|| {
            KafkaError::new(
                errors::BROKER_NOT_AVAILABLE,
                format!("broker {broker} has no {listener} listener registered"),
            )
        })?;
    let addr = format!("{}:{}", endpoint.host, endpoint.port);
    Connection::connect(&addr, config).await.map_err(|e| {
        KafkaError::new(
            errors::NETWORK_EXCEPTION,
            format!("connect to broker {broker} at {addr}: {e}"),
        )
    })
}

/// At most this many transactions in one AddPartitionsToTxn to a coordinator.
const ASKS_PER_REQUEST: usize = 256;

/// At most this many asks wait for one coordinator broker; past it an ask is answered
/// COORDINATOR_NOT_AVAILABLE at once (its producer retries).
const ASKS_WAITING_PER_BROKER: usize = 4096;

/// One ask waiting for its coordinator broker's answer.
pub(crate) struct PendingAsk {
    pub(crate) transaction: AddPartitionsToTxnTransaction,
    pub(crate) answer: tokio::sync::oneshot::Sender<Codes>,
}

/// How many connections to one broker each kind of inter-broker request may use at once.
const LINKS_PER_BROKER: usize = 4;

/// One connection to another broker (connected by its first sender, again after a failure).
pub type Link = Arc<tokio::sync::Mutex<Option<fjord_client::Connection>>>;

/// Up to `LINKS_PER_BROKER` connections to one broker: a request takes one no other request
/// is using, so requests to a broker go side by side rather than one at a time; when all are
/// in use it waits for one, taken in turn.
pub struct LinkPool {
    links: Vec<Link>,
    next: std::sync::atomic::AtomicUsize,
}

impl Default for LinkPool {
    fn default() -> Self {
        LinkPool {
            links: (0..LINKS_PER_BROKER).map(|_| Link::default()).collect(),
            next: Default::default(),
        }
    }
}

impl LinkPool {
    /// A connection slot of this pool, held until the guard is dropped.
    pub async fn take(&self) -> tokio::sync::OwnedMutexGuard<Option<fjord_client::Connection>> {
        for link in &self.links {
            if let Ok(free) = link.clone().try_lock_owned() {
                return free;
            }
        }
        let turn = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % self.links.len();
        self.links[turn].clone().lock_owned().await
    }
}

/// The KIP-890 asks bound for each remote coordinator broker, sent as one AddPartitionsToTxn
/// per round trip, as Kafka's brokers batch them: while a request to a broker is out, new asks
/// gather, and all of them go in the next one when it returns. A transactional id goes at most
/// once in a request (a second ask for it waits for the next). Sans-IO: the caller sends.
#[derive(Default)]
pub(crate) struct AskQueues {
    brokers: HashMap<i32, AskQueue>,
}

#[derive(Default)]
struct AskQueue {
    /// A sender is running for this broker: it takes what waits once its request returns.
    sending: bool,
    waiting: VecDeque<PendingAsk>,
}

impl AskQueues {
    /// Queues `ask` for `broker`: Ok(true) when no sender runs for it, so the caller starts
    /// one; Err(ask) when too many wait already.
    pub(crate) fn push(&mut self, broker: i32, ask: PendingAsk) -> Result<bool, PendingAsk> {
        let queue = self.brokers.entry(broker).or_default();
        if queue.waiting.len() >= ASKS_WAITING_PER_BROKER {
            return Err(ask);
        }
        queue.waiting.push_back(ask);
        Ok(!std::mem::replace(&mut queue.sending, true))
    }

    /// The asks of the next request to `broker`, oldest first, each transactional id once; the
    /// sender stops (and the next push starts one) when none wait.
    pub(crate) fn next_request(&mut self, broker: i32) -> Vec<PendingAsk> {
        let Some(queue) = self.brokers.get_mut(&broker) else {
            return Vec::new();
        };
        let mut ids = HashSet::new();
        let mut batch = Vec::new();
        let mut later = VecDeque::new();
        while let Some(ask) = queue.waiting.pop_front() {
            if batch.len() < ASKS_PER_REQUEST
                && ids.insert(ask.transaction.transactional_id.clone())
            {
                batch.push(ask);
            } else {
                later.push_back(ask);
            }
        }
        queue.waiting = later;
        if batch.is_empty() {
            self.brokers.remove(&broker);
        }
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ask(id: &str) -> (PendingAsk, tokio::sync::oneshot::Receiver<Codes>) {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let transaction = AddPartitionsToTxnTransaction {
            transactional_id: id.into(),
            ..Default::default()
        };
        (
            PendingAsk {
                transaction,
                answer,
            },
            answered,
        )
    }

    fn ids(batch: &[PendingAsk]) -> Vec<&str> {
        batch
            .iter()
            .map(|a| a.transaction.transactional_id.as_str())
            .collect()
    }

    #[test]
    fn asks_to_a_broker_gather_while_its_request_is_out_and_go_in_the_next_one() {
        let mut queues = AskQueues::default();
        // The first ask starts the sender; the others only wait, for the same broker.
        assert!(matches!(queues.push(2, ask("a").0), Ok(true)));
        assert!(matches!(queues.push(2, ask("b").0), Ok(false)));
        assert!(
            matches!(queues.push(3, ask("c").0), Ok(true)),
            "another broker"
        );
        let first = queues.next_request(2);
        assert_eq!(ids(&first), ["a", "b"]);
        // Asked meanwhile: in the next request; an id twice goes in two requests, in order.
        assert!(matches!(queues.push(2, ask("d").0), Ok(false)));
        assert!(matches!(queues.push(2, ask("e").0), Ok(false)));
        assert!(matches!(queues.push(2, ask("d").0), Ok(false)));
        assert_eq!(ids(&queues.next_request(2)), ["d", "e"]);
        assert_eq!(ids(&queues.next_request(2)), ["d"]);
        // Nothing left: the sender stops, and the next ask starts one again.
        assert!(queues.next_request(2).is_empty());
        assert!(matches!(queues.push(2, ask("f").0), Ok(true)));
        assert_eq!(ids(&queues.next_request(3)), ["c"]);
    }

    #[test]
    fn asks_are_bounded_per_request_and_per_broker() {
        let mut queues = AskQueues::default();
        let mut kept = Vec::new();
        for i in 0..ASKS_WAITING_PER_BROKER {
            let (pending, answered) = ask(&format!("t{i}"));
            assert!(queues.push(1, pending).is_ok());
            kept.push(answered);
        }
        assert!(queues.push(1, ask("one-too-many").0).is_err());
        assert_eq!(queues.next_request(1).len(), ASKS_PER_REQUEST);
        // Room again once a request took some.
        assert!(queues.push(1, ask("next").0).is_ok());
    }

    #[test]
    fn an_ask_dropped_unanswered_tells_its_asker() {
        let mut queues = AskQueues::default();
        let (pending, mut answered) = ask("a");
        queues.push(1, pending).ok();
        drop(queues.next_request(1));
        // The asker sees the sender gone and answers COORDINATOR_NOT_AVAILABLE itself.
        assert!(answered.try_recv().is_err());
    }

    #[tokio::test]
    async fn requests_to_one_broker_take_free_connections_then_wait_in_turn() {
        let pool = LinkPool::default();
        let mut held = Vec::new();
        for _ in 0..LINKS_PER_BROKER {
            held.push(pool.take().await);
        }
        // Every slot in use: the next request waits until one is given back.
        let waiting = tokio::time::timeout(Duration::from_millis(50), pool.take()).await;
        assert!(waiting.is_err(), "a fifth request took a slot in use");
        held.pop();
        let freed = tokio::time::timeout(Duration::from_secs(5), pool.take()).await;
        assert!(freed.is_ok(), "a freed slot was not taken");
    }
}
