//! The broker's membership, as Kafka's `BrokerLifecycleManager`: it registers this broker with
//! the active controller, then heartbeats every `broker.heartbeat.interval.ms` on a link of its
//! own (forwarded client requests never hold a heartbeat up), learns from each answer whether it
//! is fenced, and asks to shut down when the process stops (controlled shutdown).

use std::sync::Arc;
use std::time::Duration;

use fjord_common::errors;
use fjord_config::BrokerConfig;
use fjord_controller::{ControllerApi, ControllerRequest};
use fjord_protocol::messages::broker_heartbeat_request::BrokerHeartbeatRequest;
use fjord_protocol::messages::broker_registration_request::{
    BrokerRegistrationRequest, Listener as RegistrationListener,
};
use fjord_protocol::messages::ResponseBody;
use fjord_quorum::MetadataQuorum;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::link::controller::ControllerLink;
use crate::metrics::Metrics;

/// While fenced or shutting down, heartbeats go this often: being unfenced (or let go) should not
/// wait a whole interval.
const EAGER_HEARTBEAT: Duration = Duration::from_millis(50);

/// How long a stopping broker waits for the controller to move its leadership away.
const CONTROLLED_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// The broker's membership as the controller last answered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Membership {
    /// Registered, not (yet, or any more) allowed to lead.
    Fenced,
    Unfenced,
    /// The controller let it go: it leads nothing; the process may exit.
    ShutDown,
    /// A newer process registered this node id: this one must stop serving.
    Replaced,
}

/// Why registration failed for good.
#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    #[error("node.id {node_id} is already registered by a live broker (another process with this node.id is running; each broker needs its own)")]
    Duplicate { node_id: i32 },
    #[error("the controller refused the registration: {0}")]
    Refused(&'static str),
}

/// Registers this broker: its advertised endpoints, rack and a new incarnation id. A
/// DUPLICATE_BROKER_REGISTRATION is retried for a session timeout and a little more: an earlier
/// process with this id that was killed keeps its session until then; one still alive past it
/// is a real duplicate. Other failures (no controller yet) are retried until `shutdown`.
pub async fn register(
    link: &ControllerLink,
    config: &BrokerConfig,
    cluster_id: &str,
    shutdown: &watch::Receiver<bool>,
) -> Result<Option<i64>, RegistrationError> {
    let request = BrokerRegistrationRequest {
        broker_id: config.node_id,
        cluster_id: cluster_id.to_string(),
        incarnation_id: crate::server::log_dirs::random_uuid(),
        listeners: config
            .advertised_listeners
            .iter()
            .filter(|l| !config.cluster.is_controller_listener(&l.name))
            .map(|l| RegistrationListener {
                name: l.name.clone(),
                host: l.host.clone(),
                port: l.port,
                security_protocol: l.security_protocol as i16,
            })
            .collect(),
        features: Vec::new(),
        rack: config.cluster.rack.clone(),
        is_migrating_zk_broker: false,
        log_dirs: Vec::new(),
        previous_broker_epoch: -1,
    };
    let session = Duration::from_millis(config.cluster.broker_session_timeout_ms as u64);
    let heartbeat = Duration::from_millis(config.cluster.broker_heartbeat_interval_ms as u64);
    let mut duplicate_since: Option<Instant> = None;
    loop {
        if *shutdown.borrow() {
            return Ok(None);
        }
        let call = ControllerRequest::new(
            0,
            ControllerApi::BrokerRegistration(request.clone()),
            config.node_id,
        );
        match link.call(call).await {
            Ok(ResponseBody::BrokerRegistration(r)) if r.error_code == errors::NONE => {
                return Ok(Some(r.broker_epoch))
            }
            Ok(ResponseBody::BrokerRegistration(r))
                if r.error_code == errors::DUPLICATE_BROKER_REGISTRATION =>
            {
                let since = *duplicate_since.get_or_insert_with(Instant::now);
                if since.elapsed() > session + 2 * heartbeat {
                    return Err(RegistrationError::Duplicate {
                        node_id: config.node_id,
                    });
                }
                tracing::info!(
                    "node.id {} is registered by a live broker; waiting for its session to expire",
                    config.node_id
                );
            }
            Ok(ResponseBody::BrokerRegistration(r))
                if r.error_code == errors::INCONSISTENT_CLUSTER_ID
                    || r.error_code == errors::INVALID_REQUEST =>
            {
                return Err(RegistrationError::Refused(errors::name(r.error_code)));
            }
            Ok(other) => {
                tracing::warn!(answer = ?other.api_key(), "registration not accepted; retrying")
            }
            Err(error) => tracing::warn!(%error, "registration failed; retrying"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Heartbeats until the controller lets this broker go. Publishes each answer in `membership`.
/// Once `stopping` is set, each heartbeat asks to shut down (a controlled shutdown when
/// `controlled.shutdown.enable`, else at once), and the task ends when the controller says so,
/// or after [`CONTROLLED_SHUTDOWN_TIMEOUT`].
pub async fn heartbeat(
    link: Arc<ControllerLink>,
    quorum: Arc<MetadataQuorum>,
    config: Arc<BrokerConfig>,
    broker_epoch: i64,
    membership: watch::Sender<Membership>,
    mut stopping: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
) {
    let interval = Duration::from_millis(config.cluster.broker_heartbeat_interval_ms as u64);
    let mut stop_deadline: Option<Instant> = None;
    loop {
        let want_shut_down = *stopping.borrow();
        if want_shut_down {
            let deadline =
                *stop_deadline.get_or_insert_with(|| Instant::now() + CONTROLLED_SHUTDOWN_TIMEOUT);
            if Instant::now() >= deadline {
                tracing::warn!("the controller did not finish the controlled shutdown in time; stopping anyway");
                return;
            }
        }
        let request = ControllerRequest::new(
            1,
            ControllerApi::BrokerHeartbeat(BrokerHeartbeatRequest {
                broker_id: config.node_id,
                broker_epoch,
                current_metadata_offset: quorum.image().offset() as i64,
                // Everything a broker loads before it may lead is loaded before heartbeats start.
                want_fence: want_shut_down && !config.cluster.controlled_shutdown_enable,
                want_shut_down,
                offline_log_dirs: Vec::new(),
                cordoned_log_dirs: None,
            }),
            config.node_id,
        );
        let sent = Instant::now();
        let sent_ms = fjord_common::now_ms();
        let next = match link.call(request).await {
            Ok(ResponseBody::BrokerHeartbeat(r)) if r.error_code == errors::NONE => {
                // Dated when sent: the controller heard from this broker then (an answer read
                // late, after a pause, is no news of now).
                metrics.heartbeats.answered(sent_ms);
                let state = if r.should_shut_down {
                    Membership::ShutDown
                } else if r.is_fenced {
                    Membership::Fenced
                } else {
                    Membership::Unfenced
                };
                if *membership.borrow() != state {
                    tracing::info!(?state, "membership changed");
                }
                membership.send_replace(state);
                if state == Membership::ShutDown {
                    return;
                }
                state
            }
            // Replaced only if the log this broker follows says so: a controller just elected
            // may answer from an image that lags (its own check guards that too).
            Ok(ResponseBody::BrokerHeartbeat(r))
                if (r.error_code == errors::STALE_BROKER_EPOCH
                    || r.error_code == errors::BROKER_ID_NOT_REGISTERED)
                    && quorum
                        .image()
                        .broker(config.node_id)
                        .is_some_and(|b| b.broker_epoch > broker_epoch) =>
            {
                tracing::error!(
                    error = errors::name(r.error_code),
                    "this broker's registration was replaced by another process with node.id {}",
                    config.node_id
                );
                membership.send_replace(Membership::Replaced);
                return;
            }
            Ok(other) => {
                tracing::warn!(answer = ?other.api_key(), "heartbeat not accepted");
                *membership.borrow()
            }
            Err(error) => {
                tracing::warn!(%error, "heartbeat failed");
                *membership.borrow()
            }
        };
        let wait = if next == Membership::Fenced || want_shut_down {
            EAGER_HEARTBEAT
        } else {
            interval.saturating_sub(sent.elapsed())
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            // Asked to stop: say so at once.
            _ = stopping.changed(), if !want_shut_down => {}
        }
    }
}
