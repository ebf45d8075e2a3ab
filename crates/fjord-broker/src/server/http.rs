//! The HTTP listener (`http.listeners`): `/metrics` for Prometheus, `/health/live` and
//! `/health/ready` for load balancers and Kubernetes probes, and the web console (`/console/`,
//! its API under `/api/`). HTTP/1.1 on hyper, over TLS (rustls) on `https://` addresses;
//! connections are bounded in number and in how long a handshake or a request may take to
//! arrive, and only the console's changes carry a body, of bounded size.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fjord_config::{BrokerConfig, HttpAddress, HttpListeners};
use fjord_console::Console;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ACCEPT, CACHE_CONTROL, CONTENT_TYPE, COOKIE, SET_COOKIE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use super::observe::{Format, Observer};
use super::{startup, BrokerError};
use crate::metrics::Metrics;
use crate::net::tls::server_config;

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
    console: Option<Arc<Console>>,
    shutdown: &watch::Receiver<bool>,
) -> Result<(Arc<Observer>, HttpServers), BrokerError> {
    let observer = Arc::new(Observer::new(
        config.clone(),
        metrics.clone(),
        shutdown.clone(),
    ));
    let (stop, stopping) = watch::channel(false);
    let served = Served {
        observer: observer.clone(),
        console,
    };
    let servers = bind(&config.http_listeners, &Arc::new(served), &stopping).await?;
    Ok((observer, HttpServers { stop, servers }))
}

/// What the HTTP listeners serve.
struct Served {
    observer: Arc<Observer>,
    console: Option<Arc<Console>>,
}

/// Binds every HTTP listener and serves it until `stop` turns true. A default address another
/// process holds is passed over with a warning (several nodes on one machine); one the operator
/// set must bind.
async fn bind(
    listeners: &HttpListeners,
    served: &Arc<Served>,
    stop: &watch::Receiver<bool>,
) -> Result<Vec<JoinHandle<()>>, BrokerError> {
    let tls = match &listeners.tls {
        Some(settings) => Some(TlsAcceptor::from(server_config(settings).map_err(|e| {
            startup(format!(
                "cannot set up TLS for the https:// http.listeners: {e}"
            ))
        })?)),
        None => None,
    };
    let mut servers = Vec::new();
    for &HttpAddress { address, https } in &listeners.addresses {
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
        let bound = socket.local_addr().unwrap_or(address);
        tracing::info!(address = %bound, https, "HTTP listening");
        let tls = if https { tls.clone() } else { None };
        servers.push(tokio::spawn(serve(
            socket,
            tls,
            served.clone(),
            stop.clone(),
        )));
    }
    Ok(servers)
}

async fn serve(
    socket: TcpListener,
    tls: Option<TlsAcceptor>,
    served: Arc<Served>,
    mut stop: watch::Receiver<bool>,
) {
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
        let served = served.clone();
        let stop = stop.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => serve_connection(stream, false, peer, served, stop).await,
                // The handshake is bounded as a request's head is.
                Some(tls) => match tokio::time::timeout(HEADER_TIMEOUT, tls.accept(stream)).await {
                    Ok(Ok(stream)) => serve_connection(stream, true, peer, served, stop).await,
                    Ok(Err(error)) => tracing::debug!(%peer, %error, "HTTPS handshake failed"),
                    Err(_) => tracing::debug!(%peer, "HTTPS handshake timed out"),
                },
            }
            drop(slot);
        });
    }
}

/// Serves one connection's requests until it ends or `stop` turns true.
async fn serve_connection<S>(
    stream: S,
    https: bool,
    peer: SocketAddr,
    served: Arc<Served>,
    mut stop: watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request| {
        let served = served.clone();
        async move { Ok::<_, Infallible>(answer(&served, request, peer, https).await) }
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

async fn answer(
    served: &Served,
    request: Request<Incoming>,
    peer: SocketAddr,
    https: bool,
) -> Answer {
    if let Some(console) = &served.console {
        if Console::serves(request.uri().path()) {
            return console_answer(console, request, https).await;
        }
    }
    let observer = &served.observer;
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
            observer.refresh_group_lag().await;
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

/// Hands a request to the console, reading its body (bounded) for a change.
async fn console_answer(console: &Console, request: Request<Incoming>, https: bool) -> Answer {
    let (parts, body) = request.into_parts();
    let body = match Limited::new(body, fjord_console::MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(_) => {
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                "text/plain",
                "request body too large\n",
            )
        }
    };
    let header = |name| {
        parts
            .headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    let reply = console
        .answer(fjord_console::Request {
            method: parts.method.as_str(),
            path: parts.uri.path(),
            query: parts.uri.query().unwrap_or(""),
            cookie: header(COOKIE.as_str()),
            from_console: parts.headers.contains_key("x-fjord-console"),
            https,
            body,
        })
        .await;
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = text(status, reply.content_type, reply.body);
    let headers = response.headers_mut();
    if let Some(cookie) = reply
        .set_cookie
        .and_then(|c| HeaderValue::from_str(&c).ok())
    {
        headers.insert(SET_COOKIE, cookie);
    }
    // Its own files only, never in another site's frame, and answers never cached.
    for (name, value) in [
        (
            "content-security-policy",
            "default-src 'self'; frame-ancestors 'none'",
        ),
        ("x-content-type-options", "nosniff"),
        ("x-frame-options", "DENY"),
        ("referrer-policy", "no-referrer"),
        (CACHE_CONTROL.as_str(), "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
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
