//! The HTTP listener (`http.listeners`): `/metrics` for Prometheus and `/health/live`,
//! `/health/ready` for load balancers and Kubernetes probes. HTTP/1.1 on hyper; requests carry
//! no body, and connections are bounded in number and in how long a request may take to arrive.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fjord_config::{BrokerConfig, HttpListeners};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ACCEPT, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;

use super::observe::{Format, Observer};
use super::{startup, BrokerError};
use crate::metrics::Metrics;

/// HTTP connections served at once per listener; more wait in the kernel's backlog.
const MAX_CONNECTIONS: usize = 64;
/// How long a client may take to send a request's head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The HTTP listeners being served.
pub(super) struct HttpServers {
    stop: watch::Sender<bool>,
    servers: Vec<JoinHandle<()>>,
}

impl HttpServers {
    /// Stops serving; returns once the listeners are closed.
    pub(super) async fn stop(self) {
        self.stop.send_replace(true);
        for server in self.servers {
            let _ = server.await;
        }
    }
}

/// Starts observing this node (`metrics`, and the node as its parts start) and serves it on
/// every HTTP listener of `config` until stopped; ready turns false once `shutdown` does.
pub(super) async fn start(
    config: &Arc<BrokerConfig>,
    metrics: &Arc<Metrics>,
    shutdown: &watch::Receiver<bool>,
) -> Result<(Arc<Observer>, HttpServers), BrokerError> {
    let observer = Arc::new(Observer::new(
        config.clone(),
        metrics.clone(),
        shutdown.clone(),
    ));
    let (stop, stopping) = watch::channel(false);
    let servers = bind(&config.http_listeners, &observer, &stopping).await?;
    Ok((observer, HttpServers { stop, servers }))
}

/// Binds every HTTP listener and serves it until `stop` turns true. A default address another
/// process holds is passed over with a warning (several nodes on one machine); one the operator
/// set must bind.
async fn bind(
    listeners: &HttpListeners,
    observer: &Arc<Observer>,
    stop: &watch::Receiver<bool>,
) -> Result<Vec<JoinHandle<()>>, BrokerError> {
    let mut servers = Vec::new();
    for address in &listeners.addresses {
        let socket = match TcpListener::bind(address).await {
            Ok(socket) => socket,
            Err(error) if !listeners.explicit => {
                tracing::warn!(%address, %error, "HTTP listener not started: its default address is taken (set http.listeners)");
                continue;
            }
            Err(error) => {
                return Err(startup(format!(
                    "cannot listen on http.listeners address {address}: {error}"
                )))
            }
        };
        let bound = socket.local_addr().unwrap_or(*address);
        tracing::info!(address = %bound, "HTTP listening");
        servers.push(tokio::spawn(serve(socket, observer.clone(), stop.clone())));
    }
    Ok(servers)
}

async fn serve(socket: TcpListener, observer: Arc<Observer>, mut stop: watch::Receiver<bool>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = tokio::select! {
            accepted = socket.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "HTTP accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped(&mut stop) => return,
        };
        let observer = observer.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let observer = observer.clone();
                async move { Ok::<_, Infallible>(answer(&observer, request, peer).await) }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT);
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                served = connection.as_mut() => {
                    if let Err(error) = served {
                        tracing::debug!(%peer, %error, "HTTP connection ended");
                    }
                }
                _ = stopped(&mut stop) => {}
            }
            drop(slot);
        });
    }
}

/// Returns once `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

type Answer = Response<Full<Bytes>>;

fn text(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Answer {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response.headers_mut().insert(CONTENT_TYPE, value);
    }
    response
}

async fn answer(observer: &Arc<Observer>, request: Request<Incoming>, peer: SocketAddr) -> Answer {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "only GET is served\n",
        );
    }
    match request.uri().path() {
        "/metrics" => {
            let format = asked_format(&request);
            let observer = observer.clone();
            match tokio::task::spawn_blocking(move || observer.exposition(format)).await {
                Ok(Ok(body)) => text(StatusCode::OK, format.content_type(), body),
                failed => {
                    tracing::warn!(%peer, ?failed, "metrics exposition failed");
                    text(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "text/plain",
                        "exposition failed\n",
                    )
                }
            }
        }
        "/health/live" => text(
            StatusCode::OK,
            "application/json",
            "{\"status\":\"live\"}\n",
        ),
        "/health/ready" => match observer.readiness() {
            Ok(()) => text(
                StatusCode::OK,
                "application/json",
                "{\"status\":\"ready\"}\n",
            ),
            Err(reason) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "application/json",
                format!(
                    "{{\"status\":\"not ready\",\"reason\":{}}}\n",
                    json_string(&reason)
                ),
            ),
        },
        _ => text(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
    }
}

/// OpenMetrics when the scraper's `Accept` names it (Prometheus does, ranked first), else
/// Prometheus' text format.
fn asked_format(request: &Request<Incoming>) -> Format {
    let accepts_openmetrics = request
        .headers()
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    if accepts_openmetrics {
        Format::OpenMetrics
    } else {
        Format::Text
    }
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
