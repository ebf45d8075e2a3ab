//! [`QuorumController`]: runs the [`Controller`] on this node. Requests queue (bounded) and are
//! decided one at a time on the latest image, each committed before the next is decided, so no
//! two decisions are ever made on the same image (two creations of one topic cannot both pass).
//! Only the quorum's leader decides; on any other node every request is refused with
//! NOT_CONTROLLER, which tells the sender to go to the active controller.

use std::sync::Arc;
use std::time::Duration;

use fjord_common::{errors, TopicId, Uuid};
use fjord_metadata::{MetadataError, MetadataQuorum};
use fjord_protocol::messages::ResponseBody;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::apis::{error_response, Controller, ControllerApi, ControllerRequest};

/// Requests waiting for the controller beyond this many make their senders wait.
const QUEUE_DEPTH: usize = 256;

/// Why the controller did not answer a request itself.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ControllerError {
    #[error("this node is not the active controller (the quorum's leader is {leader:?})")]
    NotController { leader: Option<u64> },
    #[error("the metadata change was not committed within {0:?}")]
    Timeout(Duration),
    #[error("the metadata quorum failed: {0}")]
    Quorum(String),
    #[error("the controller has stopped")]
    Stopped,
}

impl ControllerError {
    /// The Kafka error a client is answered with; every one is retriable (the client retries and
    /// finds the new controller, or the quorum back).
    pub fn error_code(&self) -> i16 {
        match self {
            ControllerError::NotController { .. } | ControllerError::Stopped => {
                errors::NOT_CONTROLLER
            }
            ControllerError::Timeout(_) => errors::REQUEST_TIMED_OUT,
            ControllerError::Quorum(_) => errors::UNKNOWN_SERVER_ERROR,
        }
    }

    /// The whole request answered with this error.
    pub fn response_to(&self, request: &ControllerRequest) -> ResponseBody {
        error_response(&request.api, self.error_code(), &self.to_string())
    }
}

type Reply = oneshot::Sender<Result<ResponseBody, ControllerError>>;

/// The handle requests are sent through; the controller stops when every handle is dropped.
pub struct QuorumController {
    events: mpsc::Sender<(ControllerRequest, Reply)>,
}

impl QuorumController {
    /// Starts the controller's task. `commit_timeout` bounds how long one decision waits for its
    /// records to commit (a quorum without a majority never commits them).
    pub fn start(
        controller: Controller,
        quorum: Arc<MetadataQuorum>,
        commit_timeout: Duration,
    ) -> (QuorumController, JoinHandle<()>) {
        let (events, mut queue) = mpsc::channel::<(ControllerRequest, Reply)>(QUEUE_DEPTH);
        let task = tokio::spawn(async move {
            while let Some((request, reply)) = queue.recv().await {
                let result = process(&controller, &quorum, &request, commit_timeout).await;
                let _ = reply.send(result);
            }
        });
        (QuorumController { events }, task)
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

async fn process(
    controller: &Controller,
    quorum: &MetadataQuorum,
    request: &ControllerRequest,
    commit_timeout: Duration,
) -> Result<ResponseBody, ControllerError> {
    if !quorum.is_leader() {
        return Err(ControllerError::NotController {
            leader: quorum.leader(),
        });
    }
    if let ControllerApi::DescribeQuorum(describe) = &request.api {
        return Ok(controller.describe_quorum(&quorum.status(), describe));
    }
    let image = quorum.image();
    let decision = controller.decide(&image, request, &mut random_topic_id);
    if decision.records.is_empty() {
        return Ok(decision.response);
    }
    if let ControllerApi::BrokerRegistration(registration) = &request.api {
        // A broker that is not a voter follows the metadata log as a learner, reached on its
        // inter-broker listener.
        if let Some(addr) = controller.learner_address(registration) {
            quorum
                .add_learner(registration.broker_id as u64, &addr)
                .await
                .map_err(|e| match e {
                    MetadataError::NotLeader { leader } => {
                        ControllerError::NotController { leader }
                    }
                    other => ControllerError::Quorum(other.to_string()),
                })?;
        }
    }
    match tokio::time::timeout(commit_timeout, quorum.propose(decision.records)).await {
        Ok(Ok(_offset)) => Ok(decision.response),
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
        Err(_) => Err(ControllerError::Timeout(commit_timeout)),
    }
}

fn random_topic_id() -> TopicId {
    Uuid(*uuid::Uuid::new_v4().as_bytes())
}
