//! Controller work received by this broker (CreateTopics, DeleteTopics, CreatePartitions,
//! config changes) or needed by it (producer-id blocks, its registration, internal topics) goes
//! to the active controller, as KRaft brokers forward it; the answer comes back as the
//! controller gave it. [`ControllerLink`] finds the active controller (the quorum's leader):
//! this node's own `QuorumController` when it leads, else the leader's controller listener.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fjord_client::{ClientConfig, Connection};
use fjord_controller::{is_not_controller, ControllerError, ControllerRequest};
use fjord_protocol::{RequestBody, ResponseBody};
use fjord_quorum::{MetadataQuorum, QuorumController};

/// How long a request keeps looking for the active controller (through elections, a quorum
/// without a majority) before it is answered REQUEST_TIMED_OUT.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between attempts while no controller is active.
const RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// Where controllers are found before the quorum's leader is known here.
#[derive(Debug, Clone, Default)]
pub struct ControllerAddresses {
    /// The controller listeners to try in turn: every voter's of `controller.quorum.voters`, or
    /// the `controller.quorum.bootstrap.servers` of a dynamic quorum.
    pub bootstrap: Vec<String>,
    /// This node's own controller listener, when it has the controller role: reached through
    /// its own controller, not the network.
    pub own: Option<String>,
}

/// The way to the active controller.
pub struct ControllerLink {
    node_id: i32,
    quorum: Arc<MetadataQuorum>,
    /// This node's controller, if it has the controller role.
    local: Option<Arc<QuorumController>>,
    addresses: ControllerAddresses,
    /// The connection to the last remote controller used, by its address.
    remote: tokio::sync::Mutex<Option<(String, Connection)>>,
    /// How long one call may take, retries included.
    timeout: Duration,
    /// How connections to the controllers are secured.
    security: fjord_client::Security,
}

impl ControllerLink {
    pub fn new(
        node_id: i32,
        quorum: Arc<MetadataQuorum>,
        local: Option<Arc<QuorumController>>,
        addresses: ControllerAddresses,
        security: fjord_client::Security,
    ) -> Self {
        ControllerLink {
            node_id,
            quorum,
            local,
            addresses,
            remote: tokio::sync::Mutex::new(None),
            timeout: FORWARD_TIMEOUT,
            security,
        }
    }

    /// The same link with calls bounded by `timeout` instead of [`FORWARD_TIMEOUT`].
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sends `request` to the active controller, following leadership as it moves, and
    /// answers what the controller answered. Fails after [`FORWARD_TIMEOUT`] without one.
    pub async fn call(&self, request: ControllerRequest) -> Result<ResponseBody, ControllerError> {
        // The request's own deadline, if sooner: past it, nothing is forwarded any more.
        let deadline = match request.deadline {
            Some(own) => (Instant::now() + self.timeout).min(own),
            None => Instant::now() + self.timeout,
        };
        let mut last_error = ControllerError::NotController { leader: None };
        // Controllers to try in turn while the leader is unknown here (a node not yet following
        // the log, or an election under way): a controller that does not lead answers
        // NOT_CONTROLLER.
        let mut guesses = self.addresses.bootstrap.iter().cycle();
        while Instant::now() < deadline {
            let leader = self.quorum.leader().and_then(|id| i32::try_from(id).ok());
            let target = match leader {
                Some(id) if id == self.node_id => None,
                Some(id) => self.leader_address(id),
                None => guesses
                    .next()
                    .filter(|addr| Some(*addr) != self.addresses.own.as_ref())
                    .cloned(),
            };
            let to_self = match leader {
                Some(id) => id == self.node_id,
                None => target.is_none(),
            };
            let attempt = match (to_self, &self.local, target) {
                (true, Some(local), _) => local.call(request.clone()).await,
                (false, _, Some(addr)) => self.call_remote(&addr, &request).await,
                _ => Err(ControllerError::NotController { leader: None }),
            };
            match attempt {
                Err(e @ (ControllerError::NotController { .. } | ControllerError::Quorum(_))) => {
                    last_error = e;
                    tokio::time::sleep(RETRY_BACKOFF).await;
                }
                other => return other,
            }
        }
        Err(match last_error {
            ControllerError::NotController { .. } => ControllerError::Timeout(self.timeout),
            other => other,
        })
    }

    /// The controller listener of voter `id`, as the quorum's membership records it.
    fn leader_address(&self, id: i32) -> Option<String> {
        self.quorum
            .members()
            .into_iter()
            .find(|m| m.node_id == id as u64 && m.voter)
            .map(|m| m.node.addr)
            .filter(|addr| !addr.is_empty())
    }

    /// One attempt at the controller listening at `addr`.
    async fn call_remote(
        &self,
        addr: &str,
        request: &ControllerRequest,
    ) -> Result<ResponseBody, ControllerError> {
        let unreachable = |e: String| ControllerError::Quorum(format!("controller at {addr}: {e}"));
        let mut remote = self.remote.lock().await;
        if !matches!(&*remote, Some((at, c)) if at == addr && c.is_usable()) {
            let config = ClientConfig {
                client_id: forwarding_client_id(self.node_id),
                connect_timeout: Duration::from_secs(2),
                request_timeout: self.timeout,
                security: self.security.clone(),
                ..ClientConfig::default()
            };
            let connection = Connection::connect(addr, &config)
                .await
                .map_err(|e| unreachable(e.to_string()))?;
            *remote = Some((addr.to_string(), connection));
        }
        let Some((_, connection)) = remote.as_mut() else {
            return Err(unreachable("no connection".into()));
        };
        let body = request.body_to_forward();
        let response = match &request.client {
            // Made for a client: the controller must hear who, so it goes in an Envelope.
            Some(client) => {
                let api = body.api_key();
                let envelope = super::envelope::wrap(
                    request.version,
                    &forwarding_client_id(self.node_id),
                    &body,
                    client,
                )
                .map_err(|e| unreachable(format!("cannot wrap {}: {e}", api.name())))?;
                let answer = connection
                    .send_at(ENVELOPE_VERSION, RequestBody::Envelope(envelope))
                    .await
                    .map_err(|e| unreachable(e.to_string()))?;
                let ResponseBody::Envelope(envelope) = answer else {
                    return Err(unreachable("not an Envelope response".into()));
                };
                // The controller refused the Envelope itself (this node's principal may not
                // forward, the request is not one it takes): an answer, not worth retrying.
                if envelope.error_code != fjord_common::errors::NONE {
                    return Ok(fjord_controller::error_response(
                        &request.api,
                        envelope.error_code,
                        "the controller refused the forwarded request",
                    ));
                }
                super::envelope::unwrap(api, request.version, envelope).map_err(unreachable)?
            }
            None => connection
                .send_at(request.version, body)
                .await
                .map_err(|e| unreachable(e.to_string()))?,
        };
        if is_not_controller(&response) {
            return Err(ControllerError::NotController { leader: None });
        }
        Ok(response)
    }
}

/// The client id a broker forwards under: the controller reads the requesting broker from it.
pub fn forwarding_client_id(node_id: i32) -> String {
    format!("{FORWARDING_CLIENT_PREFIX}{node_id}")
}

/// The Envelope version a client's requests travel in.
pub(crate) const ENVELOPE_VERSION: i16 = 0;

/// See [`forwarding_client_id`].
pub const FORWARDING_CLIENT_PREFIX: &str = "fjord-broker-";
