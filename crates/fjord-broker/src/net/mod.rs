//! The async shell around the request handler: accepts connections, frames requests, and writes
//! responses back in request order.
//!
//! Per connection a reader loop reads size-prefixed frames and hands each to the dispatcher
//! synchronously, in arrival order — that is what keeps appends from pipelined produce requests in
//! order. The dispatcher's reply either is ready now or is a future (waiting for fsync, a
//! long-poll fetch, a metadata commit); futures run concurrently as tasks, and a writer loop sends
//! the replies in request order. At most `MAX_IN_FLIGHT_PER_CONNECTION` requests are outstanding per
//! connection; past that the reader stops reading, which pushes back on the client.
//!
//! Ordering: every request observes the effects of every earlier request of its connection, as
//! in Kafka, which handles one request per connection at a time. A request is dispatched only
//! once the earlier ones whose futures are still running have finished, unless the dispatcher
//! puts both in one [`Sequencing::Lane`]: requests that apply their effects at dispatch, in
//! arrival order, and whose futures only wait (produce appends waiting for group commit). Those
//! overlap, which is what keeps pipelined produce requests sharing fsyncs. A request read while
//! earlier ones run is dropped, never applied, if the client closed the connection meanwhile: it
//! may have sent it again elsewhere, and applied late it would land after newer requests.
//!
//! A TLS listener (`tls`) handshakes each connection first; its responses' segment-file ranges
//! are read and encrypted instead of going out with `sendfile`. A SASL listener (`sasl`) then
//! authenticates the connection before any other request is read.

pub mod limits;
#[cfg(test)]
mod sasl_tests;
pub mod tls;

use std::collections::VecDeque;
use std::future::Future;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use fjord_common::{Authentication, KafkaPrincipal, Requester};
use fjord_config::PrincipalMapper;
use fjord_storage::FileSlice;
use tokio::io::{
    AsyncBufRead, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader, Interest, ReadHalf, WriteHalf,
};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_rustls::server::TlsStream;

use crate::metrics::{Metrics, RequestTiming, PHASES};
use fjord_sasl::{Authenticator, SaslConfig, Session, Step};
use limits::{Admission, ConnectionLimits};

/// Requests a connection may have outstanding before the broker stops reading from it.
pub const MAX_IN_FLIGHT_PER_CONNECTION: usize = 64;

pub type ReplyFuture = Pin<Box<dyn Future<Output = Response> + Send + 'static>>;

/// What goes back for one request.
#[derive(Debug)]
pub enum Response {
    /// Response header + body, sent size-prefixed.
    Send(Bytes),
    /// Response header + body as parts sent in order, size-prefixed by their total: encoded
    /// bytes with vectored writes, a fetch response's record batches straight from their
    /// segment files with `sendfile`.
    SendParts(Vec<OutPart>),
    /// No response: a produce with acks=0.
    Nothing,
    /// Close the connection instead of answering (an acks=0 produce failed, or the response could
    /// not be encoded): the client learns the request failed rather than waiting.
    Close(String),
}

/// One piece of a response sent with [`Response::SendParts`].
#[derive(Debug)]
pub enum OutPart {
    Bytes(Bytes),
    /// A range of a segment file, sent by the kernel from the page cache.
    File(FileSlice),
}

impl OutPart {
    fn len(&self) -> usize {
        match self {
            OutPart::Bytes(bytes) => bytes.len(),
            OutPart::File(slice) => slice.len() as usize,
        }
    }
}

/// What the dispatcher makes of one request frame.
pub enum Reply {
    /// The response is ready.
    Now(Response),
    /// The response is produced later.
    Later(ReplyFuture),
    /// The frame cannot be answered (unparseable header, unknown API): close the connection, as
    /// Kafka does.
    Close(String),
}

/// How a request may overlap the earlier requests of its connection whose replies are still
/// futures (waiting for an fsync, a long poll, a metadata commit, a rebalance).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sequencing {
    /// Dispatched only once every earlier request of the connection has finished: it sees all
    /// their effects, as a request does in Kafka, where a connection is muted until its request
    /// is answered.
    AfterAll,
    /// Requests of one lane apply their effects at dispatch, in arrival order, and their futures
    /// only wait: a request of the lane may be dispatched while earlier requests of the same lane
    /// are still waiting (their effects are already in place), but not while any other is.
    Lane(u8),
}

/// The request handler the network shell drives.
pub trait Dispatch: Send + Sync + 'static {
    /// How the request in `frame` may overlap earlier requests of its connection; asked before
    /// `dispatch`, from the frame alone.
    fn sequencing(&self, frame: &Bytes) -> Sequencing;
    /// Serves one request of `requester`'s connection.
    fn dispatch(&self, frame: Bytes, requester: &Arc<Requester>) -> Reply;
    /// `requester`'s connection closed: what lived as long as it (share sessions) ends.
    fn closed(&self, _requester: &Arc<Requester>) {}
}

#[derive(Debug, Clone)]
pub struct NetworkConfig {
    pub socket_request_max_bytes: usize,
    pub connections_max_idle_ms: i64,
    /// The listener's name, as its metrics are labelled.
    pub listener: Arc<str>,
    /// Where its connections and requests are counted.
    pub metrics: Arc<Metrics>,
    /// Requests slower than this are logged (`log.slow.request.ms`); None: none is.
    pub slow_request: Option<Duration>,
}

/// What a listener guards its connections with: the broker's connection limits, TLS (SSL,
/// SASL_SSL), then SASL authentication (SASL_PLAINTEXT, SASL_SSL).
#[derive(Clone, Default)]
pub struct ListenerSecurity {
    /// The listener's name and the connection limits it counts in (none: not counted).
    pub limits: Option<(String, Arc<ConnectionLimits>)>,
    pub tls: Option<Arc<tls::ListenerTls>>,
    pub sasl: Option<Arc<SaslConfig>>,
    /// An SSL listener's `ssl.principal.mapping.rules`: a client certificate names the
    /// connection's principal (without one, or on a SASL listener, it is not used).
    pub certificate_principals: Option<Arc<PrincipalMapper>>,
}

/// What the dispatcher makes of one request frame, and the request served (none for the
/// answers of a SASL exchange, which are not requests served).
enum Outgoing {
    Ready(Response, Option<Served>),
    /// A future's task, which gives the response and when it was ready.
    Pending(JoinHandle<(Response, Instant)>, Served),
}

/// A request as its answer goes out: its timing, and for the slow-request log its header and
/// who sent it.
struct Served {
    timing: RequestTiming,
    /// The request's frame (shared, not a copy), decoded again only for a slow request's line.
    frame: Bytes,
    requester: Arc<Requester>,
}

/// Serves one bound listener — with TLS and SASL as `security` says — until `shutdown` turns
/// true. Returns when the accept loop has stopped and every connection has finished its
/// in-flight requests.
pub async fn serve<D: Dispatch + ?Sized>(
    listener: TcpListener,
    dispatcher: Arc<D>,
    config: NetworkConfig,
    security: ListenerSecurity,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections: Vec<JoinHandle<()>> = Vec::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let (stream, slot) = match &security.limits {
                        Some((name, limits)) => {
                            let admitted = tokio::select! {
                                admitted = admit(limits, name, stream, peer) => admitted,
                                _ = shutdown.changed() => break,
                            };
                            match admitted {
                                Some((stream, slot)) => (stream, Some(slot)),
                                None => continue,
                            }
                        }
                        None => (stream, None),
                    };
                    let _ = stream.set_nodelay(true);
                    let dispatcher = dispatcher.clone();
                    let config = config.clone();
                    let shutdown = shutdown.clone();
                    let tls = security
                        .tls
                        .as_ref()
                        .map(|tls| tokio_rustls::TlsAcceptor::from(tls.current()));
                    let sasl = security.sasl.clone();
                    let mapper = security.certificate_principals.clone();
                    connections.retain(|c| !c.is_finished());
                    connections.push(tokio::spawn(async move {
                        let _open = config.metrics.connections.opened(&config.listener);
                        let handshakes = tls.is_some();
                        let Some(stream) = open(stream, tls, &config).await else {
                            if handshakes {
                                config.metrics.connections.authenticated(&config.listener, false);
                            }
                            return;
                        };
                        let principal = match stream.principal(mapper.as_deref()) {
                            Ok(principal) => principal,
                            Err(reason) => {
                                config.metrics.connections.authenticated(&config.listener, false);
                                tracing::info!(%peer, %reason, "connection closed");
                                return;
                            }
                        };
                        let requester = Arc::new(Requester::new(principal, peer));
                        let connection = Connection { requester, dispatcher, config, sasl };
                        if let Err(reason) = connection.serve(stream, shutdown).await {
                            tracing::debug!(%peer, %reason, "connection closed");
                        }
                        // Given back once the connection is gone.
                        drop(slot);
                    }));
                }
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    for connection in connections {
        let _ = connection.await;
    }
}

/// Takes a connection accepted on `name` past the broker's connection limits, as Kafka's
/// acceptor does: it first waits out the creation rates and for a free slot (holding back the
/// connections after it), then the address's quota and count decide. None when the connection
/// is closed instead — at once, or after a throttle, on a task of its own.
async fn admit(
    limits: &Arc<ConnectionLimits>,
    name: &str,
    stream: TcpStream,
    peer: SocketAddr,
) -> Option<(TcpStream, limits::Slot)> {
    let delay = limits.accept_delay(name, fjord_common::now_ms());
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    limits.wait_for_slot(name).await;
    match limits.admit(name, peer.ip(), fjord_common::now_ms()) {
        Admission::Admitted(slot) => Some((stream, slot)),
        Admission::TooMany { max } => {
            tracing::info!(%peer, max, "connection refused: its address has max.connections.per.ip connections already");
            None
        }
        Admission::Throttled(delay) => {
            tracing::debug!(%peer, ?delay, "connection over its address's connection_creation_rate: closed after the throttle");
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                drop(stream);
            });
            None
        }
    }
}

/// A connection's byte stream: plain TCP, or TLS over it.
enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    /// The principal a connection is known as before any SASL: `User:<name>` of its client
    /// certificate's distinguished name as `mapper` maps it, else anonymous; Err when no rule
    /// maps the name (Kafka fails such a client's authentication).
    fn principal(&self, mapper: Option<&PrincipalMapper>) -> Result<KafkaPrincipal, Closed> {
        let (Stream::Tls(tls), Some(mapper)) = (self, mapper) else {
            return Ok(KafkaPrincipal::anonymous());
        };
        let Some(certificate) = tls.get_ref().1.peer_certificates().and_then(|c| c.first()) else {
            return Ok(KafkaPrincipal::anonymous());
        };
        let name = tls::distinguished_name(certificate).ok_or_else(|| {
            Closed::Certificate("the client certificate's subject cannot be read".into())
        })?;
        mapper.map(&name).map(KafkaPrincipal::user).ok_or_else(|| {
            Closed::Certificate(format!(
                "no ssl.principal.mapping.rules rule applies to {name}"
            ))
        })
    }
}

/// The connection, handshaken on a TLS listener; None when the handshake fails or does not
/// finish within the idle timeout (`connections.max.idle.ms`), as Kafka closes it.
async fn open(
    stream: TcpStream,
    tls: Option<tokio_rustls::TlsAcceptor>,
    config: &NetworkConfig,
) -> Option<Stream> {
    let Some(acceptor) = tls else {
        return Some(Stream::Plain(stream));
    };
    let peer = stream.peer_addr().ok();
    match tokio::time::timeout(idle_timeout(config), acceptor.accept(stream)).await {
        Ok(Ok(stream)) => Some(Stream::Tls(Box::new(stream))),
        Ok(Err(error)) => {
            tracing::info!(?peer, %error, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::info!(
                ?peer,
                "TLS handshake not finished within connections.max.idle.ms"
            );
            None
        }
    }
}

/// The read side of a connection. TLS reads are buffered, so that whether the client closed
/// can be seen without taking a byte of its next request.
enum Reader {
    Plain(OwnedReadHalf),
    Tls(BufReader<ReadHalf<TlsStream<TcpStream>>>),
}

impl AsyncRead for Reader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Reader::Plain(r) => Pin::new(r).poll_read(cx, buf),
            Reader::Tls(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

/// The write side of a connection.
enum Writer {
    Plain(OwnedWriteHalf),
    Tls(WriteHalf<TlsStream<TcpStream>>),
}

impl Stream {
    fn split(self) -> (Reader, Writer) {
        match self {
            Stream::Plain(stream) => {
                let (r, w) = stream.into_split();
                (Reader::Plain(r), Writer::Plain(w))
            }
            Stream::Tls(stream) => {
                let (r, w) = tokio::io::split(*stream);
                (Reader::Tls(BufReader::new(r)), Writer::Tls(w))
            }
        }
    }
}

impl Writer {
    async fn write_vectored(&mut self, slices: &[IoSlice<'_>]) -> std::io::Result<usize> {
        match self {
            Writer::Plain(w) => w.write_vectored(slices).await,
            Writer::Tls(w) => w.write_vectored(slices).await,
        }
    }

    /// A segment-file range: `sendfile` on plain TCP; read and encrypted on TLS.
    async fn send_file(&mut self, slice: &FileSlice) -> Result<(), Closed> {
        match self {
            Writer::Plain(w) => send_file_slice(w, slice).await,
            Writer::Tls(w) => {
                let bytes = slice.read_to_bytes().map_err(|e| match e.kind() {
                    std::io::ErrorKind::UnexpectedEof => Closed::SegmentShorter,
                    _ => Closed::Write(e),
                })?;
                w.write_all(&bytes).await.map_err(Closed::Write)
            }
        }
    }

    /// Pushes out what TLS holds back (a record not yet written); nothing to do on plain TCP.
    async fn flush(&mut self) -> Result<(), Closed> {
        match self {
            Writer::Plain(_) => Ok(()),
            Writer::Tls(w) => w.flush().await.map_err(Closed::Write),
        }
    }

    async fn shutdown(&mut self) {
        let _ = match self {
            Writer::Plain(w) => w.shutdown().await,
            Writer::Tls(w) => w.shutdown().await,
        };
    }
}

fn idle_timeout(config: &NetworkConfig) -> Duration {
    if config.connections_max_idle_ms > 0 {
        Duration::from_millis(config.connections_max_idle_ms as u64)
    } else {
        Duration::from_secs(u64::MAX / 4)
    }
}

/// Why the broker closed a connection (a client closing it is no error). Kafka answers none of
/// these: the client sees its connection go and reconnects.
#[derive(Debug, thiserror::Error)]
pub enum Closed {
    #[error("idle timeout (connections.max.idle.ms)")]
    Idle,
    #[error(
        "request size {size} is negative or larger than socket.request.max.bytes ({max_bytes})"
    )]
    RequestSize { size: i32, max_bytes: usize },
    #[error("truncated frame: {0}")]
    Truncated(std::io::Error),
    #[error("read: {0}")]
    Read(std::io::Error),
    #[error("write: {0}")]
    Write(std::io::Error),
    #[error("response of {0} bytes too large for a frame")]
    ResponseTooLarge(usize),
    #[error("sendfile: segment file shorter than the fetched range")]
    SegmentShorter,
    /// The dispatcher refused the request (unreadable, unsupported) or its reply failed.
    #[error("{0}")]
    Refused(String),
    #[error("writer stopped")]
    WriterStopped,
    #[error("request task failed: {0}")]
    Task(tokio::task::JoinError),
    /// Shutdown's grace ended with requests parked (a JoinGroup waiting for its rebalance).
    #[error("shutdown: parked requests left unanswered")]
    ShutdownWithParkedRequests,
    #[error("SASL authentication failed: {0}")]
    Authentication(String),
    /// A TLS client certificate that names no principal (no `ssl.principal.mapping.rules` rule).
    #[error("TLS client refused: {0}")]
    Certificate(String),
    /// The client went on using the connection after its SASL session ended, without
    /// re-authenticating (`connections.max.reauth.ms`).
    #[error("SASL session expired")]
    SessionExpired,
}

/// First allocation for a frame body; later growth follows the bytes that arrive.
const INITIAL_FRAME_CAPACITY: usize = 64 * 1024;

/// Reads a frame body of `size` bytes (at most socket.request.max.bytes, checked by the
/// caller). The buffer grows with the bytes actually received, at most doubling, so a size
/// prefix alone cannot make the broker reserve memory for a body that never comes.
async fn read_frame_body<R: AsyncRead + Unpin>(
    reader: &mut R,
    size: usize,
) -> std::io::Result<BytesMut> {
    let mut frame = BytesMut::with_capacity(size.min(INITIAL_FRAME_CAPACITY));
    while frame.len() < size {
        let missing = size - frame.len();
        if frame.len() == frame.capacity() {
            frame.reserve(missing.min(frame.len().max(INITIAL_FRAME_CAPACITY)));
        }
        let read = (&mut *reader)
            .take(missing as u64)
            .read_buf(&mut frame)
            .await?;
        if read == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(frame)
}

/// Most buffers handed to one vectored write; the kernel takes at most IOV_MAX (1024) anyway.
const MAX_WRITE_PARTS: usize = 64;

/// Writes one response frame: the 4-byte size, then `parts` in order — runs of bytes with
/// vectored writes that send them from their own buffers, file ranges with `sendfile` — resuming
/// after partial writes.
async fn write_frame(writer: &mut Writer, parts: Vec<OutPart>) -> Result<(), Closed> {
    let total: usize = parts.iter().map(OutPart::len).sum();
    let size = u32::try_from(total).map_err(|_| Closed::ResponseTooLarge(total))?;
    let mut queue: VecDeque<OutPart> = VecDeque::with_capacity(parts.len() + 1);
    queue.push_back(OutPart::Bytes(Bytes::copy_from_slice(&size.to_be_bytes())));
    queue.extend(parts.into_iter().filter(|p| p.len() > 0));
    while let Some(front) = queue.front() {
        if let OutPart::File(slice) = front {
            writer.send_file(slice).await?;
            queue.pop_front();
            continue;
        }
        let slices: Vec<IoSlice<'_>> = queue
            .iter()
            .take(MAX_WRITE_PARTS)
            .map_while(|p| match p {
                OutPart::Bytes(bytes) => Some(IoSlice::new(bytes)),
                OutPart::File(_) => None,
            })
            .collect();
        let mut written = writer
            .write_vectored(&slices)
            .await
            .map_err(Closed::Write)?;
        drop(slices);
        if written == 0 {
            return Err(Closed::Write(std::io::ErrorKind::WriteZero.into()));
        }
        while written > 0 {
            let Some(OutPart::Bytes(front)) = queue.front_mut() else {
                break;
            };
            if written >= front.len() {
                written -= front.len();
                queue.pop_front();
            } else {
                front.advance(written);
                written = 0;
            }
        }
    }
    writer.flush().await
}

/// Sends a whole segment-file range to the socket with `sendfile`, waiting for room as needed.
async fn send_file_slice(writer: &mut OwnedWriteHalf, slice: &FileSlice) -> Result<(), Closed> {
    let stream: &TcpStream = writer.as_ref();
    let mut done: u32 = 0;
    while done < slice.len() {
        stream.writable().await.map_err(Closed::Write)?;
        match stream.try_io(Interest::WRITABLE, || slice.send_to(stream.as_fd(), done)) {
            // The size prefix promised these bytes; the client cannot be answered any more.
            Ok(0) => return Err(Closed::SegmentShorter),
            Ok(sent) => done = done.saturating_add(u32::try_from(sent).unwrap_or(u32::MAX)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(Closed::Write(e)),
        }
    }
    Ok(())
}

/// One accepted connection and what serves it.
struct Connection<D: ?Sized> {
    /// Anonymous until the connection authenticates.
    requester: Arc<Requester>,
    dispatcher: Arc<D>,
    config: NetworkConfig,
    sasl: Option<Arc<SaslConfig>>,
}

impl<D: Dispatch + ?Sized> Connection<D> {
    async fn serve(
        self,
        stream: Stream,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<(), Closed> {
        let Connection {
            mut requester,
            dispatcher,
            config,
            sasl,
        } = self;
        let (mut reader, mut writer) = stream.split();
        let idle = idle_timeout(&config);
        let mut session = None;
        let exchange = sasl.as_deref().map(|sasl| Exchange {
            sasl,
            dispatcher: &*dispatcher,
            unauthenticated: requester.clone(),
            idle,
        });
        let connections = &config.metrics.connections;
        if let Some(exchange) = &exchange {
            let first = exchange
                .first(&mut reader, &mut writer, &mut shutdown)
                .await;
            if let Err(Closed::Authentication(_)) = &first {
                connections.authenticated(&config.listener, false);
            }
            let Some(authenticated) = first? else {
                return Ok(());
            };
            requester = authenticated_as(&authenticated, &requester);
            session = Some(LiveSession::start(authenticated));
        }
        connections.authenticated(&config.listener, true);
        let (out_tx, out_rx) = mpsc::channel::<Outgoing>(MAX_IN_FLIGHT_PER_CONNECTION);
        let writer_task = tokio::spawn(write_responses(
            writer,
            out_rx,
            (config.metrics.clone(), config.slow_request),
        ));
        let mut sequencer = Sequencer::default();
        let result = loop {
            let frame = match tokio::select! {
                frame = read_request(&mut reader, idle, config.socket_request_max_bytes) => frame,
                _ = shutdown.changed() => break Ok(()),
            } {
                Ok(Some(frame)) => frame,
                Ok(None) => break Ok(()),
                Err(error) => break Err(error),
            };
            let read = Instant::now();
            if let (Some(exchange), Some(current)) = (&exchange, &session) {
                if current.expires.is_some() && is_sasl_handshake(&frame) {
                    // Re-authentication, between the connection's other requests: those before
                    // it are answered first; like every read, bounded by the broker's shutdown.
                    tokio::select! {
                        _ = sequencer.idle() => {}
                        _ = shutdown.changed() => break Ok(()),
                    }
                    let renew = Authenticator::renew(exchange.sasl, &current.session);
                    let renewed = tokio::select! {
                        renewed = exchange.run(&mut reader, Some(frame), renew, Sink::Queue(&out_tx)) => renewed,
                        _ = shutdown.changed() => break Ok(()),
                    };
                    match renewed {
                        Ok(Some(renewed)) => session = Some(LiveSession::start(renewed)),
                        Ok(None) => break Ok(()),
                        Err(error) => break Err(error),
                    }
                    continue;
                }
                if current.expires.is_some_and(|at| Instant::now() >= at) {
                    break Err(Closed::SessionExpired);
                }
            }
            let sequencing = dispatcher.sequencing(&frame);
            if sequencer.must_wait(sequencing) {
                tokio::select! {
                    _ = sequencer.idle() => {}
                    _ = shutdown.changed() => break Ok(()),
                }
                // An earlier request closed the connection meanwhile: nothing after it may run.
                if out_tx.is_closed() {
                    break Err(Closed::WriterStopped);
                }
                // The client gave up on the connection while this request waited (it canceled the
                // request, or its link died): the request is dropped unapplied. Kafka never reads a
                // request before the previous one is answered; applied now, it could land after
                // what the client sent since on another connection — an older offset commit over a
                // newer one, moving the group's position back.
                if peer_closed(&mut reader) {
                    break Ok(());
                }
            }
            tokio::select! {
                _ = unmuted(&requester) => {}
                _ = shutdown.changed() => break Ok(()),
            }
            let outgoing = match dispatch_timed(&*dispatcher, frame, &requester, read) {
                (Reply::Now(response), served) => Outgoing::Ready(response, Some(served)),
                (Reply::Later(future), served) => {
                    Outgoing::Pending(sequencer.start(sequencing, future), served)
                }
                (Reply::Close(reason), _) => break Err(Closed::Refused(reason)),
            };
            if out_tx.send(outgoing).await.is_err() {
                break Err(Closed::WriterStopped);
            }
        };
        drop(out_tx);
        dispatcher.closed(&requester);
        let at_shutdown = *shutdown.borrow();
        result.and(finish_writes(writer_task, at_shutdown).await)
    }
}

/// Dispatches a request read at `read`, timed up to its handler's return.
fn dispatch_timed<D: Dispatch + ?Sized>(
    dispatcher: &D,
    frame: Bytes,
    requester: &Arc<Requester>,
    read: Instant,
) -> (Reply, Served) {
    let (api_key, api_version, size) = (be_i16(&frame, 0), be_i16(&frame, 2), frame.len());
    let dispatched = Instant::now();
    let reply = dispatcher.dispatch(frame.clone(), requester);
    let timing = RequestTiming {
        api_key,
        api_version,
        size,
        read,
        dispatched,
        handled: Instant::now(),
    };
    let served = Served {
        timing,
        frame,
        requester: requester.clone(),
    };
    (reply, served)
}

/// The big-endian i16 at `at` of `bytes`, -1 when they are too short.
fn be_i16(bytes: &[u8], at: usize) -> i16 {
    bytes
        .get(at..at + 2)
        .map_or(-1, |b| i16::from_be_bytes([b[0], b[1]]))
}

/// Client ids longer than this are cut in the slow-request log.
const MAX_LOGGED_CLIENT_ID: usize = 256;

/// How much of a frame is its request header up to the client id (API key, version,
/// correlation id, client id), at most `MAX_LOGGED_CLIENT_ID` bytes of the id.
fn header_length(frame: &[u8]) -> usize {
    let id_length = usize::try_from(be_i16(frame, 8)).unwrap_or(0);
    (10 + id_length.min(MAX_LOGGED_CLIENT_ID)).min(frame.len())
}

/// The client id a request frame's header carries, at most `MAX_LOGGED_CLIENT_ID` bytes of it.
fn client_id_of(frame: &[u8]) -> String {
    let header = frame.get(..header_length(frame)).unwrap_or_default();
    String::from_utf8_lossy(header.get(10..).unwrap_or_default()).into_owned()
}

/// How many partitions a request names, for the APIs that name them; None for the others and
/// for a frame that does not decode.
fn partitions_in(frame: &Bytes) -> Option<usize> {
    use fjord_protocol::RequestBody as R;
    let mut input = fjord_protocol::Decoder::new(frame.clone());
    let header = fjord_protocol::decode_request_header(&mut input).ok()?;
    let api = fjord_protocol::ApiKey::from_i16(header.request_api_key)?;
    let body = R::decode(api, &mut input, header.request_api_version).ok()?;
    fn sum<T>(items: &[T], count: impl Fn(&T) -> usize) -> usize {
        items.iter().map(count).sum()
    }
    Some(match &body {
        R::Produce(r) => sum(&r.topic_data, |t| t.partition_data.len()),
        R::Fetch(r) => sum(&r.topics, |t| t.partitions.len()),
        R::ListOffsets(r) => sum(&r.topics, |t| t.partitions.len()),
        R::OffsetCommit(r) => sum(&r.topics, |t| t.partitions.len()),
        R::TxnOffsetCommit(r) => sum(&r.topics, |t| t.partitions.len()),
        R::OffsetFetch(r) => {
            let old = r.topics.as_deref().unwrap_or_default();
            sum(old, |t| t.partition_indexes.len())
                + sum(&r.groups, |g| {
                    sum(g.topics.as_deref().unwrap_or_default(), |t| {
                        t.partition_indexes.len()
                    })
                })
        }
        R::DeleteRecords(r) => sum(&r.topics, |t| t.partitions.len()),
        R::OffsetForLeaderEpoch(r) => sum(&r.topics, |t| t.partitions.len()),
        R::WriteTxnMarkers(r) => sum(&r.markers, |m| {
            sum(&m.topics, |t| t.partition_indexes.len())
        }),
        R::AddPartitionsToTxn(r) => {
            sum(&r.v3_and_below_topics, |t| t.partitions.len())
                + sum(&r.transactions, |x| sum(&x.topics, |t| t.partitions.len()))
        }
        _ => return None,
    })
}

/// Long polls wait in their remote phase by design (a fetch for data, a join for its rebalance):
/// that wait does not make them slow.
fn waits_by_design(api_key: i16) -> bool {
    use fjord_protocol::ApiKey;
    [ApiKey::Fetch, ApiKey::JoinGroup, ApiKey::SyncGroup]
        .iter()
        .any(|api| *api as i16 == api_key)
}

/// Logs `served` once if it took longer than `threshold` (less a long poll's wait).
fn log_if_slow(served: &Served, threshold: Duration, phases: [Duration; 5]) {
    let total: Duration = phases.iter().sum();
    let counted = if waits_by_design(served.timing.api_key) {
        total.saturating_sub(phases[2])
    } else {
        total
    };
    if counted <= threshold {
        return;
    }
    let api = fjord_protocol::ApiKey::from_i16(served.timing.api_key).map_or("?", |a| a.name());
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let split = PHASES
        .iter()
        .zip(phases)
        .map(|(phase, took)| format!("{phase}={:.1}", ms(took)))
        .collect::<Vec<_>>()
        .join(" ");
    tracing::warn!(
        api,
        version = served.timing.api_version,
        client_id = %client_id_of(&served.frame),
        partitions = partitions_in(&served.frame),
        principal = %served.requester.principal,
        peer = %served.requester.peer,
        bytes = served.timing.size,
        total_ms = format!("{:.1}", ms(total)),
        phases_ms = %split,
        "slow request"
    );
}

/// Returns once a quota's mute of the connection (KIP-219) has passed: a client over its quota
/// is served nothing more meanwhile, as Kafka mutes its channel.
async fn unmuted(requester: &Requester) {
    if let Some(delay) = requester.muted_for(fjord_common::now_ms()) {
        tokio::time::sleep(delay).await;
    }
}

/// Waits for a closing connection's writer: in-flight requests finish and their responses are
/// flushed before the socket goes away. At shutdown the wait is bounded: a request parked in the
/// group coordinator (a JoinGroup waiting for its rebalance) only completes on a timer, and the
/// timers stop with the broker.
async fn finish_writes(
    mut writer_task: JoinHandle<Result<(), Closed>>,
    at_shutdown: bool,
) -> Result<(), Closed> {
    if !at_shutdown {
        return writer_task.await.map_err(Closed::Task)?;
    }
    match tokio::time::timeout(SHUTDOWN_GRACE, &mut writer_task).await {
        Ok(joined) => joined.map_err(Closed::Task)?,
        Err(_) => {
            writer_task.abort();
            Err(Closed::ShutdownWithParkedRequests)
        }
    }
}

/// The connection's writer: sends each reply in request order, waiting for those still being
/// worked on; a reply that closes the connection ends it. Each request answered is timed, and
/// logged when slower than `slow`.
async fn write_responses(
    mut writer: Writer,
    mut out_rx: mpsc::Receiver<Outgoing>,
    (metrics, slow): (Arc<Metrics>, Option<Duration>),
) -> Result<(), Closed> {
    while let Some(outgoing) = out_rx.recv().await {
        let (response, served, ready) = match outgoing {
            Outgoing::Ready(response, served) => {
                let ready = served.as_ref().map(|s| s.timing.handled);
                (response, served, ready)
            }
            Outgoing::Pending(handle, served) => match handle.await {
                Ok((response, ready)) => (response, Some(served), Some(ready)),
                Err(error) => return Err(Closed::Task(error)),
            },
        };
        let sending = Instant::now();
        send(&mut writer, response).await?;
        if let (Some(served), Some(ready)) = (served, ready) {
            let sent = Instant::now();
            metrics
                .requests
                .answered(&served.timing, ready, sending, sent);
            if let Some(threshold) = slow {
                log_if_slow(
                    &served,
                    threshold,
                    served.timing.phases(ready, sending, sent),
                );
            }
        }
    }
    writer.shutdown().await;
    Ok(())
}

/// Writes one response; a reply that closes the connection is an error.
async fn send(writer: &mut Writer, response: Response) -> Result<(), Closed> {
    match response {
        Response::Send(body) => write_frame(writer, vec![OutPart::Bytes(body)]).await,
        Response::SendParts(parts) => write_frame(writer, parts).await,
        Response::Nothing => Ok(()),
        Response::Close(reason) => Err(Closed::Refused(reason)),
    }
}

/// A connection's SASL session and when it ends.
struct LiveSession {
    session: Session,
    expires: Option<Instant>,
}

impl LiveSession {
    fn start(session: Session) -> LiveSession {
        let expires = session.lifetime.map(|lifetime| Instant::now() + lifetime);
        LiveSession { session, expires }
    }
}

/// The requester a connection's session makes it, keeping the client software the connection
/// named before it authenticated.
fn authenticated_as(session: &Session, before: &Requester) -> Arc<Requester> {
    let peer = before.peer;
    tracing::debug!(%peer, principal = %session.principal, "authenticated");
    let authentication = if session.delegation_token {
        Authentication::DelegationToken
    } else {
        Authentication::Sasl
    };
    let requester =
        Requester::new(session.principal.clone(), peer).authenticated_by(authentication);
    if let Some((name, version)) = before.software() {
        requester.named_software(name, version);
    }
    Arc::new(requester)
}

fn is_sasl_handshake(frame: &Bytes) -> bool {
    frame.get(0..2) == Some(&(fjord_protocol::ApiKey::SaslHandshake as i16).to_be_bytes()[..])
}

/// Where a SASL exchange's answers go: straight to the socket before the connection is served;
/// through the connection's writer, in request order, when a session is renewed.
enum Sink<'a> {
    Socket(&'a mut Writer),
    Queue(&'a mpsc::Sender<Outgoing>),
}

impl Sink<'_> {
    async fn send(&mut self, response: Response) -> Result<(), Closed> {
        match self {
            Sink::Socket(writer) => send(writer, response).await,
            Sink::Queue(queue) => queue
                .send(Outgoing::Ready(response, None))
                .await
                .map_err(|_| Closed::WriterStopped),
        }
    }
}

/// What a SASL exchange (see `sasl`) needs of its connection.
struct Exchange<'a, D: ?Sized> {
    sasl: &'a SaslConfig,
    dispatcher: &'a D,
    /// Who sends the requests of an exchange: nobody yet (a session being renewed keeps its
    /// principal, but its ApiVersions needs none).
    unauthenticated: Arc<Requester>,
    idle: Duration,
}

impl<D: Dispatch + ?Sized> Exchange<'_, D> {
    /// The connection's first authentication, before anything else of it is read; None when
    /// the client closes first or the broker stops.
    async fn first(
        &self,
        reader: &mut Reader,
        writer: &mut Writer,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Option<Session>, Closed> {
        let first = Authenticator::new(self.sasl);
        tokio::select! {
            authenticated = self.run(reader, None, first, Sink::Socket(writer)) => authenticated,
            _ = shutdown.changed() => Ok(None),
        }
    }

    /// Reads and answers frames (`first`, when given, before any read) until the client is
    /// authenticated (its session) or has closed (None). Frames are bounded by
    /// `sasl.server.max.receive.size` meanwhile; a refusal closes the connection.
    async fn run(
        &self,
        reader: &mut Reader,
        mut first: Option<Bytes>,
        mut authenticator: Authenticator<'_>,
        mut sink: Sink<'_>,
    ) -> Result<Option<Session>, Closed> {
        let sasl = self.sasl;
        loop {
            let frame = match first.take() {
                Some(frame) => frame,
                None => match read_request(reader, self.idle, sasl.max_receive_size).await {
                    Ok(Some(frame)) => frame,
                    Ok(None) => return Ok(None),
                    Err(Closed::RequestSize { size, .. }) => {
                        tokio::time::sleep(sasl.failed_delay).await;
                        return Err(Closed::Authentication(format!(
                            "a frame of {size} bytes during authentication \
                             (sasl.server.max.receive.size is {})",
                            sasl.max_receive_size
                        )));
                    }
                    Err(error) => return Err(error),
                },
            };
            let response = match authenticator.on_frame(frame) {
                Step::ApiVersions(frame) => {
                    match self.dispatcher.dispatch(frame, &self.unauthenticated) {
                        Reply::Now(response) => response,
                        Reply::Later(future) => future.await,
                        Reply::Close(reason) => return Err(Closed::Refused(reason)),
                    }
                }
                Step::Send(response) => Response::Send(response),
                Step::Done { response, session } => {
                    sink.send(Response::Send(response)).await?;
                    return Ok(Some(session));
                }
                Step::Fail { response, reason } => {
                    // Held back, so that guessing passwords is slow.
                    tokio::time::sleep(sasl.failed_delay).await;
                    if let Some(response) = response {
                        sink.send(Response::Send(response)).await?;
                    }
                    if let Sink::Socket(writer) = sink {
                        writer.shutdown().await;
                    }
                    return Err(Closed::Authentication(reason));
                }
                Step::Close(reason) => return Err(Closed::Refused(reason)),
            };
            sink.send(response).await?;
        }
    }
}

/// The next request frame: None when the client closed the connection; an error for an idle
/// connection (`connections.max.idle.ms`), a size out of bounds (`socket.request.max.bytes`)
/// or a truncated frame.
async fn read_request(
    reader: &mut Reader,
    idle: Duration,
    max_bytes: usize,
) -> Result<Option<Bytes>, Closed> {
    let mut size_buf = [0u8; 4];
    match tokio::time::timeout(idle, reader.read_exact(&mut size_buf)).await {
        Err(_) => return Err(Closed::Idle),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Ok(Err(e)) => return Err(Closed::Read(e)),
        Ok(Ok(_)) => {}
    }
    let size = i32::from_be_bytes(size_buf);
    if size < 0 || size as usize > max_bytes {
        return Err(Closed::RequestSize { size, max_bytes });
    }
    let frame = read_frame_body(reader, size as usize)
        .await
        .map_err(Closed::Truncated)?;
    Ok(Some(frame.freeze()))
}

/// Whether the client has closed (or reset) the connection, as far as the socket tells without
/// waiting: the end of the stream is next, or an error. Bytes still unread (requests it sent
/// before closing) hide a close behind them.
fn peer_closed(reader: &mut Reader) -> bool {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match reader {
        Reader::Plain(r) => {
            let mut byte = [0u8; 1];
            let mut buf = tokio::io::ReadBuf::new(&mut byte);
            matches!(
                r.poll_peek(&mut cx, &mut buf),
                std::task::Poll::Ready(Ok(0) | Err(_))
            )
        }
        // The TLS layer's close_notify, or the socket's end, reads as an empty buffer.
        Reader::Tls(r) => match Pin::new(r).poll_fill_buf(&mut cx) {
            std::task::Poll::Ready(Ok(bytes)) => bytes.is_empty(),
            std::task::Poll::Ready(Err(_)) => true,
            std::task::Poll::Pending => false,
        },
    }
}

/// A connection's requests dispatched whose futures have not finished, and the lane they share
/// (all of them do: a request outside their lane waits for them first).
#[derive(Default)]
struct Sequencer {
    running: Arc<watch::Sender<usize>>,
    lane: Option<Sequencing>,
}

impl Sequencer {
    /// Whether a request sequenced so must wait for the running ones: unless it shares their
    /// lane, while any runs.
    fn must_wait(&self, sequencing: Sequencing) -> bool {
        let overlaps = matches!(sequencing, Sequencing::Lane(_)) && self.lane == Some(sequencing);
        !overlaps && *self.running.borrow() > 0
    }

    /// Returns once no dispatched request is running.
    async fn idle(&self) {
        let mut finished = self.running.subscribe();
        let _ = finished.wait_for(|n| *n == 0).await;
    }

    /// Runs a dispatched request's future as a task, counted as running until it finishes;
    /// the task gives the response and when it was ready.
    fn start(
        &mut self,
        sequencing: Sequencing,
        future: ReplyFuture,
    ) -> JoinHandle<(Response, Instant)> {
        self.lane = Some(sequencing);
        let guard = Running::enter(self.running.clone());
        tokio::spawn(async move {
            let response = future.await;
            drop(guard);
            (response, Instant::now())
        })
    }
}

/// Counts one running request future of a connection, until dropped (also when its task is
/// aborted or panics, so the connection's later requests never wait for a future that is gone).
struct Running(Arc<watch::Sender<usize>>);

impl Running {
    fn enter(count: Arc<watch::Sender<usize>>) -> Running {
        count.send_modify(|n| *n += 1);
        Running(count)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// How long a connection may take to answer its in-flight requests once shutdown begins.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

#[cfg(test)]
pub mod tests {
    use super::*;

    fn waiting_future() -> (tokio::sync::oneshot::Sender<()>, ReplyFuture) {
        let (done, wait) = tokio::sync::oneshot::channel::<()>();
        let future: ReplyFuture = Box::pin(async move {
            let _ = wait.await;
            Response::Nothing
        });
        (done, future)
    }

    #[test]
    fn a_request_header_names_its_client_as_far_as_it_goes() {
        let mut frame = vec![0, 1, 0, 12, 0, 0, 0, 7, 0, 3];
        frame.extend_from_slice(b"abcrest-of-the-request");
        assert_eq!((be_i16(&frame, 0), be_i16(&frame, 2)), (1, 12));
        assert_eq!(client_id_of(&frame), "abc");
        // A null client id (-1), a truncated one, a frame too short for a header.
        let null = [0, 1, 0, 12, 0, 0, 0, 7, 0xff, 0xff, 9, 9];
        assert_eq!(client_id_of(&null), "");
        let cut = [0, 1, 0, 12, 0, 0, 0, 7, 0, 50, b'x'];
        assert_eq!(client_id_of(&cut), "x");
        assert_eq!(header_length(&[0, 1]), 2);
        assert_eq!(be_i16(&[0, 1], 2), -1);
        // A long client id is cut for the log.
        let mut long = vec![0, 1, 0, 12, 0, 0, 0, 7, 0x10, 0];
        long.extend(std::iter::repeat_n(b'a', 4096));
        assert_eq!(header_length(&long), 10 + MAX_LOGGED_CLIENT_ID);
        let fetch = fjord_protocol::ApiKey::Fetch as i16;
        assert!(waits_by_design(fetch) && !waits_by_design(0));
    }

    #[test]
    fn a_slow_request_line_counts_the_partitions_the_request_names() {
        use fjord_protocol::messages::metadata_request::MetadataRequest;
        use fjord_protocol::messages::produce_request::{
            PartitionProduceData, ProduceRequest, TopicProduceData,
        };
        use fjord_protocol::{ApiKey, Encodable, RequestBody, RequestHeader};
        let frame = |body: RequestBody, version: i16| {
            let api = body.api_key();
            let mut out = bytes::BytesMut::new();
            let header = RequestHeader {
                request_api_key: api as i16,
                request_api_version: version,
                correlation_id: 1,
                client_id: Some("c".into()),
            };
            let header_version = fjord_protocol::request_header_version(api, version);
            header.encode(&mut out, header_version).unwrap();
            body.encode(&mut out, version).unwrap();
            out.freeze()
        };
        let topic = |name: &str, partitions: usize| TopicProduceData {
            name: name.into(),
            partition_data: vec![PartitionProduceData::default(); partitions],
            ..Default::default()
        };
        let produce = RequestBody::Produce(ProduceRequest {
            topic_data: vec![topic("a", 2), topic("b", 1)],
            ..Default::default()
        });
        assert_eq!(partitions_in(&frame(produce, 9)), Some(3));
        let metadata = RequestBody::Metadata(MetadataRequest::default());
        assert_eq!(partitions_in(&frame(metadata, 12)), None);
        let mut cut = frame(
            RequestBody::Produce(ProduceRequest {
                topic_data: vec![topic("a", 2)],
                ..Default::default()
            }),
            9,
        );
        cut.truncate(cut.len() - 3);
        assert_eq!(partitions_in(&cut), None);
        assert_eq!(ApiKey::from_i16(be_i16(&cut, 0)), Some(ApiKey::Produce));
    }

    #[tokio::test]
    async fn requests_of_one_lane_overlap_and_others_wait_for_them() {
        let mut sequencer = Sequencer::default();
        let produce = Sequencing::Lane(1);
        // Nothing runs: nobody waits, whatever its sequencing.
        assert!(!sequencer.must_wait(Sequencing::AfterAll));
        assert!(!sequencer.must_wait(produce));
        let (first_done, first) = waiting_future();
        let first = sequencer.start(produce, first);
        // A second request of the lane overlaps the first; another lane and AfterAll wait.
        assert!(!sequencer.must_wait(produce));
        assert!(sequencer.must_wait(Sequencing::Lane(2)));
        assert!(sequencer.must_wait(Sequencing::AfterAll));
        let (second_done, second) = waiting_future();
        let second = sequencer.start(produce, second);
        let quick = Duration::from_millis(50);
        assert!(tokio::time::timeout(quick, sequencer.idle()).await.is_err());
        first_done.send(()).unwrap();
        first.await.unwrap();
        assert!(
            sequencer.must_wait(Sequencing::AfterAll),
            "one of the lane still runs"
        );
        second_done.send(()).unwrap();
        second.await.unwrap();
        assert!(tokio::time::timeout(quick, sequencer.idle()).await.is_ok());
        assert!(!sequencer.must_wait(Sequencing::AfterAll));
    }

    #[tokio::test]
    async fn an_after_all_request_holds_back_everything_after_it() {
        let mut sequencer = Sequencer::default();
        let (done, future) = waiting_future();
        let running = sequencer.start(Sequencing::AfterAll, future);
        assert!(sequencer.must_wait(Sequencing::AfterAll));
        assert!(sequencer.must_wait(Sequencing::Lane(1)));
        // A request whose task is gone (aborted) no longer holds anyone back.
        running.abort();
        let _ = running.await;
        drop(done);
        assert!(!sequencer.must_wait(Sequencing::Lane(1)));
    }

    /// Records each request's body; the first request's reply waits until `release` fires.
    struct Recorder {
        dispatched: std::sync::Mutex<Vec<Bytes>>,
        first: std::sync::Mutex<Option<ReplyFuture>>,
    }

    impl Dispatch for Recorder {
        fn sequencing(&self, _frame: &Bytes) -> Sequencing {
            Sequencing::AfterAll
        }

        fn dispatch(&self, frame: Bytes, _requester: &Arc<Requester>) -> Reply {
            self.dispatched.lock().unwrap().push(frame);
            match self.first.lock().unwrap().take() {
                Some(future) => Reply::Later(future),
                None => Reply::Now(Response::Nothing),
            }
        }
    }

    /// A client sends two requests, the second read while the first still waits, then closes
    /// the connection (a canceled request it will send again elsewhere); what the listener
    /// (with `tls`) dispatched. `connect` opens the client's stream.
    pub(crate) async fn requests_dispatched_for_a_client_that_closed<S, F, C>(
        tls: Option<Arc<rustls::ServerConfig>>,
        connect: C,
    ) -> Vec<Bytes>
    where
        S: tokio::io::AsyncWrite + Unpin,
        F: Future<Output = S>,
        C: FnOnce(SocketAddr) -> F,
    {
        let (release, first) = waiting_future();
        let recorder = Arc::new(Recorder {
            dispatched: std::sync::Mutex::new(Vec::new()),
            first: std::sync::Mutex::new(Some(first)),
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (_stop, shutdown) = watch::channel(false);
        let config = NetworkConfig {
            socket_request_max_bytes: 1024,
            connections_max_idle_ms: 60_000,
            listener: "PLAINTEXT".into(),
            metrics: Metrics::new(),
            slow_request: None,
        };
        let security = ListenerSecurity {
            limits: None,
            tls: tls.map(|config| tls::ListenerTls::new(config, None)),
            sasl: None,
            certificate_principals: None,
        };
        tokio::spawn(serve(
            listener,
            recorder.clone(),
            config,
            security,
            shutdown,
        ));
        let mut client = connect(address).await;
        for body in [&b"first"[..], b"second"] {
            client
                .write_all(&(body.len() as i32).to_be_bytes())
                .await
                .unwrap();
            client.write_all(body).await.unwrap();
        }
        client.shutdown().await.unwrap();
        drop(client);
        let dispatched = || recorder.dispatched.lock().unwrap().clone();
        while dispatched().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Let the reader take the second request and wait behind the first.
        tokio::time::sleep(Duration::from_millis(50)).await;
        release.send(()).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        dispatched()
    }

    #[tokio::test]
    async fn a_request_left_waiting_by_a_client_that_closed_is_never_applied() {
        let connect = |address| async move { TcpStream::connect(address).await.unwrap() };
        let dispatched = requests_dispatched_for_a_client_that_closed(None, connect).await;
        assert_eq!(dispatched, vec![Bytes::from_static(b"first")]);
    }
}
