//! [`QuorumController`]: runs the [`Controller`] on this node. Requests queue (bounded) and are
//! decided one at a time on the latest image, each committed before the next is decided, so no
//! two decisions are ever made on the same image (two creations of one topic cannot both pass).
//! Only the quorum's leader decides; on any other node every request is refused with
//! NOT_CONTROLLER, which tells the sender to go to the active controller.
//!
//! The decisions are `fjord-controller`'s, sans-IO; this is their shell: the queue, the timers
//! and the commits through the [`MetadataQuorum`].

use std::sync::Arc;
use std::time::Duration;

use fjord_common::{errors, TopicId, Uuid};
use fjord_config::BrokerConfig;
use fjord_controller::voters::{self, VoterChange};
use fjord_controller::{
    error_response, Controller, ControllerApi, ControllerError, ControllerRequest,
};
use fjord_metadata::QuorumNode;
use fjord_protocol::messages::ResponseBody;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::{MetadataError, MetadataQuorum};

/// Requests waiting for the controller beyond this many make their senders wait.
const QUEUE_DEPTH: usize = 256;

type Reply = oneshot::Sender<Result<ResponseBody, ControllerError>>;

/// The handle requests are sent through; the controller stops when every handle is dropped, or
/// at once on `stop`.
pub struct QuorumController {
    events: mpsc::Sender<(ControllerRequest, Reply)>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl QuorumController {
    /// Starts the controller's task. `commit_timeout` bounds how long one decision waits for its
    /// records to commit (a quorum without a majority never commits them).
    pub fn start(
        controller: Controller,
        quorum: Arc<MetadataQuorum>,
        commit_timeout: Duration,
    ) -> (QuorumController, JoinHandle<()>) {
        let (events, queue) = mpsc::channel::<(ControllerRequest, Reply)>(QUEUE_DEPTH);
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let shell = Shell::new(controller, quorum, commit_timeout);
            shell.run(queue, stopped).await;
        });
        (QuorumController { events, stop }, task)
    }

    /// Stops deciding: queued and later requests are answered as by a stopped controller, and
    /// a commit under way is no longer waited for (the node is shutting down).
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Decides `request` and commits what it decided; answers once committed.
    pub async fn call(&self, request: ControllerRequest) -> Result<ResponseBody, ControllerError> {
        let (reply, answer) = oneshot::channel();
        self.events
            .send((request, reply))
            .await
            .map_err(|_| ControllerError::Stopped)?;
        answer.await.map_err(|_| ControllerError::Stopped)?
    }
}

/// How often a controller that is not active looks again (sessions are not its concern).
const STANDBY_TICK: Duration = Duration::from_secs(1);

/// The controller task's state: the decisions, the quorum they commit through, and the term this
/// node was last seen leading in (its sessions were started for that term).
struct Shell {
    controller: Controller,
    quorum: Arc<MetadataQuorum>,
    commit_timeout: Duration,
    epoch: tokio::time::Instant,
    active_term: Option<u64>,
    /// `unclean.leader.election.interval.ms`, and when the next check is due.
    unclean_interval: Duration,
    next_unclean_check: tokio::time::Instant,
    /// `leader.imbalance.check.interval.seconds` when `auto.leader.rebalance.enable`.
    balance_interval: Option<Duration>,
    next_balance_check: Option<tokio::time::Instant>,
    /// `delegation.token.expiry.check.interval.ms` when delegation tokens are enabled.
    token_check_interval: Option<Duration>,
    next_token_check: Option<tokio::time::Instant>,
}

impl Shell {
    /// The task's state as it starts: no term led yet, and the unclean elections and (with
    /// `auto.leader.rebalance.enable`) the leader balance first due one interval from now.
    fn new(controller: Controller, quorum: Arc<MetadataQuorum>, commit_timeout: Duration) -> Self {
        let elections = controller.config().leader_elections();
        let unclean_interval = Duration::from_millis(elections.unclean_interval_ms.unsigned_abs());
        // `auto.leader.rebalance.enable`: the balance runs every check interval; off, never.
        let balance_interval = elections
            .balance_interval_s
            .map(|s| Duration::from_secs(s.unsigned_abs()));
        let token_check_interval = controller
            .config()
            .delegation_tokens()
            .map(|t| Duration::from_millis(t.expiry_check_interval_ms.unsigned_abs()));
        let now = tokio::time::Instant::now();
        Shell {
            controller,
            quorum,
            commit_timeout,
            epoch: tokio::time::Instant::now(),
            active_term: None,
            unclean_interval,
            next_unclean_check: now + unclean_interval,
            balance_interval,
            next_balance_check: balance_interval.map(|i| now + i),
            token_check_interval,
            next_token_check: token_check_interval.map(|i| now + i),
        }
    }

    /// Answers requests one at a time until every handle is dropped or `stop` is called. Between
    /// requests, and whenever one is due, stale brokers are fenced, unclean leaders elected and
    /// leadership balanced.
    async fn run(
        mut self,
        mut queue: mpsc::Receiver<(ControllerRequest, Reply)>,
        mut stopped: tokio::sync::watch::Receiver<bool>,
    ) {
        loop {
            let wait = self.next_wake_in();
            tokio::select! {
                event = queue.recv() => {
                    let Some((request, reply)) = event else { break };
                    if voters::is_voter_change(&request.api) {
                        self.spawn_voter_change(request, reply);
                        continue;
                    }
                    // A commit that cannot land (no quorum) is not waited out on shutdown:
                    // its caller hears the controller stopped.
                    let result = tokio::select! {
                        result = self.process(&request) => result,
                        _ = until_stopped(&mut stopped) => Err(ControllerError::Stopped),
                    };
                    let _ = reply.send(result);
                }
                _ = tokio::time::sleep(wait) => {}
                _ = until_stopped(&mut stopped) => break,
            }
            if *stopped.borrow() {
                break;
            }
            // A steady stream of requests must hold off neither fencing nor elections.
            tokio::select! {
                _ = async {
                    self.fence_stale_brokers().await;
                    self.elect_unclean_leaders_if_due().await;
                    self.balance_leaders_if_due().await;
                    self.remove_expired_tokens_if_due().await;
                } => {}
                _ = until_stopped(&mut stopped) => break,
            }
        }
    }

    /// Sessions expire on the clock, not on requests: how long until the next could, or until
    /// unclean elections or the leader balance are next due.
    fn next_wake_in(&self) -> Duration {
        let now = tokio::time::Instant::now();
        [
            Some(self.next_unclean_check),
            self.next_balance_check,
            self.next_token_check,
        ]
        .into_iter()
        .flatten()
        .map(|at| at.saturating_duration_since(now))
        .fold(self.next_expiry_in(), Duration::min)
    }

    /// Carries out a change of the quorum's members beside the queue, answering `reply` when
    /// done: a new voter catching up must not hold up heartbeats.
    fn spawn_voter_change(&self, request: ControllerRequest, reply: Reply) {
        let (quorum, config, cluster_id) = (
            self.quorum.clone(),
            self.controller.config().clone(),
            self.controller.cluster_id().to_string(),
        );
        let timeout = request
            .api
            .timeout_ms()
            .map_or(self.commit_timeout, |ms| Duration::from_millis(ms as u64));
        tokio::spawn(async move {
            let result = change_voters(&quorum, &config, &cluster_id, &request.api, timeout).await;
            let _ = reply.send(result);
        });
    }

    fn now_ms(&self) -> i64 {
        self.epoch.elapsed().as_millis().min(i64::MAX as u128) as i64
    }

    /// Whether this node is the active controller; on the first call of a new leadership, every
    /// unfenced broker gets a fresh session.
    fn activate_if_leader(&mut self) -> bool {
        let term = self.quorum.leader_term();
        if term.is_some() && term != self.active_term {
            let now = self.now_ms();
            self.controller.activate(&self.quorum.image(), now);
        }
        self.active_term = term;
        term.is_some()
    }

    fn next_expiry_in(&self) -> Duration {
        if self.active_term.is_none() {
            return STANDBY_TICK;
        }
        let ms = self
            .controller
            .next_session_expiry_in(&self.quorum.image(), self.now_ms());
        // A little past the deadline, so the session has expired when we look.
        Duration::from_millis(ms.max(0) as u64 + 10)
    }

    /// Fences every broker whose session expired, one commit each.
    async fn fence_stale_brokers(&mut self) {
        while self.activate_if_leader() {
            let now = self.now_ms();
            let image = self.quorum.image();
            let Some((broker_id, records)) = self.controller.fence_stale_broker(&image, now) else {
                return;
            };
            tracing::info!(broker_id, "fencing a broker whose session timed out");
            if let Err(error) = self.commit(records).await {
                tracing::warn!(broker_id, %error, "could not fence a broker; trying again");
                return;
            }
        }
    }

    /// Every `unclean.leader.election.interval.ms`: leaderless partitions whose topic allows it
    /// get an unclean leader, in one commit.
    async fn elect_unclean_leaders_if_due(&mut self) {
        let now = tokio::time::Instant::now();
        if now < self.next_unclean_check {
            return;
        }
        self.next_unclean_check = now + self.unclean_interval;
        if !self.activate_if_leader() {
            return;
        }
        let records = self.controller.elect_unclean_leaders(&self.quorum.image());
        if records.is_empty() {
            return;
        }
        if let Err(error) = self.commit(records).await {
            tracing::warn!(%error, "could not commit unclean leader elections; trying again later");
        }
    }

    /// Every `leader.imbalance.check.interval.seconds`: preferred replicas lead again where
    /// `leader.imbalance.per.broker.percentage` says a broker leads too few of its own.
    async fn balance_leaders_if_due(&mut self) {
        let (Some(interval), Some(due)) = (self.balance_interval, self.next_balance_check) else {
            return;
        };
        let now = tokio::time::Instant::now();
        if now < due {
            return;
        }
        self.next_balance_check = Some(now + interval);
        if !self.activate_if_leader() {
            return;
        }
        let records = self.controller.balance_leaders(&self.quorum.image());
        if records.is_empty() {
            return;
        }
        tracing::info!(elections = records.len(), "preferred replicas lead again");
        if let Err(error) = self.commit(records).await {
            tracing::warn!(%error, "could not commit the leader balance; trying again later");
        }
    }

    /// Every `delegation.token.expiry.check.interval.ms`: tokens past their expiry are removed,
    /// in one commit.
    async fn remove_expired_tokens_if_due(&mut self) {
        let (Some(interval), Some(due)) = (self.token_check_interval, self.next_token_check) else {
            return;
        };
        let now = tokio::time::Instant::now();
        if now < due {
            return;
        }
        self.next_token_check = Some(now + interval);
        if !self.activate_if_leader() {
            return;
        }
        let records = self
            .controller
            .remove_expired_tokens(&self.quorum.image(), fjord_common::now_ms());
        if records.is_empty() {
            return;
        }
        tracing::info!(tokens = records.len(), "removing expired delegation tokens");
        if let Err(error) = self.commit(records).await {
            tracing::warn!(%error, "could not remove expired delegation tokens; trying again later");
        }
    }

    async fn process(
        &mut self,
        request: &ControllerRequest,
    ) -> Result<ResponseBody, ControllerError> {
        if !self.activate_if_leader() {
            return Err(ControllerError::NotController {
                leader: self.quorum.leader(),
            });
        }
        if request
            .deadline
            .is_some_and(|d| std::time::Instant::now() >= d)
        {
            // The client has given up: deciding now would make a change nobody waits for.
            return Err(ControllerError::Expired);
        }
        if let ControllerApi::DescribeQuorum(describe) = &request.api {
            return Ok(self
                .controller
                .describe_quorum(&self.quorum.status(), describe));
        }
        let image = self.quorum.image();
        let now = self.now_ms();
        let decision = match self.controller.decide_token(
            &image,
            request,
            fjord_common::now_ms(),
            &mut random_topic_id,
        ) {
            Some(decision) => decision,
            None => self
                .controller
                .decide(&image, request, now, &mut random_topic_id),
        };
        if decision.records.is_empty() {
            return Ok(decision.response);
        }
        if let ControllerApi::BrokerRegistration(registration) = &request.api {
            // A broker that is not a voter follows the metadata log as a learner, reached on its
            // inter-broker listener.
            if let Some(addr) = self.controller.learner_address(registration) {
                self.quorum
                    .add_learner(registration.broker_id as u64, QuorumNode::broker(addr))
                    .await
                    .map_err(|e| match e {
                        MetadataError::NotLeader { leader } => {
                            ControllerError::NotController { leader }
                        }
                        other => ControllerError::Quorum(other.to_string()),
                    })?;
            }
        }
        self.commit(decision.records).await?;
        Ok(decision.response)
    }

    async fn commit(
        &self,
        records: Vec<fjord_metadata::MetadataRecord>,
    ) -> Result<(), ControllerError> {
        match tokio::time::timeout(self.commit_timeout, self.quorum.propose(records)).await {
            Ok(Ok(_offset)) => Ok(()),
            Ok(Err(MetadataError::NotLeader { leader })) => {
                Err(ControllerError::NotController { leader })
            }
            Ok(Err(MetadataError::Rejected { offset, source })) => {
                // Decisions are made on the image the records apply to; a refusal is a bug here.
                tracing::error!(offset, error = %source, "the controller's own records were rejected");
                Err(ControllerError::Quorum(format!(
                    "metadata records rejected at offset {offset}: {source}"
                )))
            }
            Ok(Err(e)) => Err(ControllerError::Quorum(e.to_string())),
            Err(_) => Err(ControllerError::Timeout(self.commit_timeout)),
        }
    }
}

/// Checks `api` and carries it out on `quorum` (this node must lead it); answers the request.
/// `timeout` bounds an addition or removal (a new voter that cannot catch up).
async fn change_voters(
    quorum: &MetadataQuorum,
    config: &BrokerConfig,
    cluster_id: &str,
    api: &ControllerApi,
    timeout: Duration,
) -> Result<ResponseBody, ControllerError> {
    if quorum.leader_term().is_none() {
        return Err(ControllerError::NotController {
            leader: quorum.leader(),
        });
    }
    let change = match voters::voter_change(config, cluster_id, api, &quorum.members()) {
        Ok(change) => change,
        Err((code, message)) => return Ok(error_response(api, code, &message)),
    };
    let outcome = match change {
        VoterChange::Add { id, node } => {
            tracing::info!(voter = id, addr = %node.addr, "adding a voter to the metadata quorum");
            quorum.add_voter(id, node, timeout).await
        }
        VoterChange::Remove { id } => {
            tracing::info!(voter = id, "removing a voter from the metadata quorum");
            quorum.remove_voter(id, timeout).await
        }
        VoterChange::Learner { id, node } => quorum.add_learner(id, node).await,
        VoterChange::Nothing => Ok(()),
    };
    match outcome {
        Ok(()) => Ok(voters::voter_change_answer(api, errors::NONE, None)),
        Err(MetadataError::NotLeader { leader }) => Err(ControllerError::NotController { leader }),
        Err(e @ (MetadataError::MembershipChange(_) | MetadataError::Timeout { .. })) => Ok(
            error_response(api, errors::REQUEST_TIMED_OUT, &e.to_string()),
        ),
        Err(e) => Ok(error_response(
            api,
            errors::UNKNOWN_SERVER_ERROR,
            &e.to_string(),
        )),
    }
}

/// Resolves once `stop` was called.
async fn until_stopped(stopped: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
}

fn random_topic_id() -> TopicId {
    Uuid(*uuid::Uuid::new_v4().as_bytes())
}
