//! A SASL listener over loopback: what reaches the dispatcher, and when.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use fjord_common::{errors, Requester};
use fjord_config::{SaslMechanism, SaslSettings};
use fjord_protocol::messages::sasl_authenticate_request::SaslAuthenticateRequest;
use fjord_protocol::messages::sasl_authenticate_response::SaslAuthenticateResponse;
use fjord_protocol::messages::sasl_handshake_request::SaslHandshakeRequest;
use fjord_protocol::messages::RequestHeader;
use fjord_protocol::{
    request_header_version, response_header_version, ApiKey, Decodable, Decoder, Encodable,
    ResponseHeader,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use fjord_sasl::scram::ScramCredentials;
use fjord_sasl::{random_nonce, SaslConfig};

use crate::net::{serve, Dispatch, ListenerSecurity, NetworkConfig, Reply, Response, Sequencing};

const DELAY: Duration = Duration::from_millis(300);

/// A request frame (header and body) as a client sends it.
fn request<T: Encodable>(api: ApiKey, version: i16, body: &T) -> Bytes {
    let mut out = BytesMut::new();
    RequestHeader {
        request_api_key: api as i16,
        request_api_version: version,
        correlation_id: 7,
        client_id: Some("test".into()),
    }
    .encode(&mut out, request_header_version(api, version))
    .unwrap();
    body.encode(&mut out, version).unwrap();
    out.freeze()
}

/// No SCRAM users: these listeners enable PLAIN only.
struct NoCredentials;

impl ScramCredentials for NoCredentials {
    fn credential(
        &self,
        _user: &str,
        _mechanism: fjord_common::scram::ScramMechanism,
    ) -> Option<fjord_common::scram::ScramCredential> {
        None
    }

    fn delegation_token(
        &self,
        _token_id: &str,
    ) -> Option<fjord_sasl::scram::DelegationTokenCredential> {
        None
    }
}

/// Records the API key of every request it is given and answers it with an empty frame.
#[derive(Default)]
struct Recorder {
    dispatched: Mutex<Vec<i16>>,
}

impl Dispatch for Recorder {
    fn sequencing(&self, _frame: &Bytes) -> Sequencing {
        Sequencing::AfterAll
    }

    fn dispatch(&self, frame: Bytes, _requester: &Arc<Requester>) -> Reply {
        let key = i16::from_be_bytes([frame[0], frame[1]]);
        self.dispatched.lock().unwrap().push(key);
        Reply::Now(Response::Send(Bytes::new()))
    }
}

async fn listen(recorder: Arc<Recorder>) -> (SocketAddr, watch::Sender<bool>) {
    listen_with_sessions_of(recorder, 0).await
}

/// A SASL listener whose sessions last `reauth_ms` (`connections.max.reauth.ms`).
async fn listen_with_sessions_of(
    recorder: Arc<Recorder>,
    reauth_ms: i64,
) -> (SocketAddr, watch::Sender<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, shutdown) = watch::channel(false);
    let config = NetworkConfig {
        socket_request_max_bytes: 1 << 20,
        connections_max_idle_ms: 10_000,
        listener: "SASL".into(),
        metrics: crate::metrics::Metrics::new(),
        slow_request: None,
    };
    let sasl = SaslConfig {
        settings: SaslSettings {
            mechanisms: vec![SaslMechanism::Plain],
            plain_users: BTreeMap::from([("alice".to_string(), "pw".to_string())]),
            max_reauth_ms: BTreeMap::from([(SaslMechanism::Plain, reauth_ms)]),
            oauthbearer: Default::default(),
        },
        max_receive_size: 4096,
        failed_delay: DELAY,
        api_versions_max: 4,
        credentials: Arc::new(NoCredentials),
        verification_keys: Default::default(),
        nonce: random_nonce,
        now_ms: fjord_common::now_ms,
    };
    let security = ListenerSecurity {
        limits: None,
        tls: None,
        sasl: Some(Arc::new(sasl)),
        certificate_principals: None,
    };
    tokio::spawn(serve(listener, recorder, config, security, shutdown));
    (address, stop)
}

async fn send(client: &mut TcpStream, frame: &[u8]) {
    client
        .write_all(&(frame.len() as i32).to_be_bytes())
        .await
        .unwrap();
    client.write_all(frame).await.unwrap();
}

/// The next frame, or None once the broker has closed the connection.
async fn receive(client: &mut TcpStream) -> Option<Bytes> {
    let mut size = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut size))
        .await
        .expect("the broker neither answered nor closed")
        .ok()?;
    let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
    client.read_exact(&mut frame).await.ok()?;
    Some(frame.into())
}

async fn handshake(client: &mut TcpStream) {
    let body = SaslHandshakeRequest {
        mechanism: "PLAIN".into(),
    };
    send(client, &request(ApiKey::SaslHandshake, 1, &body)).await;
    receive(client).await.expect("handshake answered");
}

/// Sends a PLAIN token; the SaslAuthenticate answer.
async fn plain(client: &mut TcpStream, token: &'static [u8]) -> Option<SaslAuthenticateResponse> {
    let body = SaslAuthenticateRequest {
        auth_bytes: Bytes::from_static(token),
    };
    send(client, &request(ApiKey::SaslAuthenticate, 2, &body)).await;
    let frame = receive(client).await?;
    let mut input = Decoder::new(frame);
    ResponseHeader::decode(
        &mut input,
        response_header_version(ApiKey::SaslAuthenticate, 2),
    )
    .unwrap();
    Some(SaslAuthenticateResponse::decode(&mut input, 2).unwrap())
}

#[tokio::test]
async fn no_request_reaches_the_dispatcher_before_authentication() {
    let recorder = Arc::new(Recorder::default());
    let (address, _stop) = listen(recorder.clone()).await;
    for &api in ApiKey::ALL {
        if matches!(api, ApiKey::ApiVersions | ApiKey::SaslHandshake) {
            continue;
        }
        // A header of each API key, at its oldest version, and a body of zeros: before the
        // handshake, and between the handshake and the token.
        let mut frame = BytesMut::new();
        RequestHeader {
            request_api_key: api as i16,
            request_api_version: api.min_version(),
            correlation_id: 1,
            client_id: None,
        }
        .encode(&mut frame, request_header_version(api, api.min_version()))
        .unwrap();
        frame.extend_from_slice(&[0u8; 64]);
        for handshake_first in [false, true] {
            if handshake_first && api == ApiKey::SaslAuthenticate {
                // The token itself: answered, refused (`a_wrong_password_…`).
                continue;
            }
            let mut client = TcpStream::connect(address).await.unwrap();
            if handshake_first {
                handshake(&mut client).await;
            }
            send(&mut client, &frame).await;
            assert!(
                receive(&mut client).await.is_none(),
                "{} was answered before authentication",
                api.name()
            );
        }
    }
    assert!(recorder.dispatched.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_wrong_password_is_answered_late_and_the_connection_closed() {
    let recorder = Arc::new(Recorder::default());
    let (address, _stop) = listen(recorder.clone()).await;
    let mut client = TcpStream::connect(address).await.unwrap();
    handshake(&mut client).await;
    let started = Instant::now();
    let answer = plain(&mut client, b"\0alice\0wrong")
        .await
        .expect("answered");
    assert!(
        started.elapsed() >= DELAY,
        "answered after {:?}",
        started.elapsed()
    );
    assert_eq!(answer.error_code, errors::SASL_AUTHENTICATION_FAILED);
    assert!(receive(&mut client).await.is_none(), "not closed");
    assert!(recorder.dispatched.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_authenticated_connection_is_served() {
    let recorder = Arc::new(Recorder::default());
    let (address, _stop) = listen(recorder.clone()).await;
    let mut client = TcpStream::connect(address).await.unwrap();
    let versions = request(
        ApiKey::ApiVersions,
        3,
        &fjord_protocol::messages::api_versions_request::ApiVersionsRequest::default(),
    );
    send(&mut client, &versions).await;
    receive(&mut client).await.expect("ApiVersions answered");
    handshake(&mut client).await;
    let answer = plain(&mut client, b"\0alice\0pw").await.expect("answered");
    assert_eq!(answer.error_code, errors::NONE);
    let metadata = request(
        ApiKey::Metadata,
        12,
        &fjord_protocol::messages::metadata_request::MetadataRequest::default(),
    );
    send(&mut client, &metadata).await;
    receive(&mut client).await.expect("Metadata answered");
    assert_eq!(
        *recorder.dispatched.lock().unwrap(),
        vec![ApiKey::ApiVersions as i16, ApiKey::Metadata as i16]
    );
}

#[tokio::test]
async fn a_frame_over_the_pre_authentication_bound_closes_the_connection() {
    let recorder = Arc::new(Recorder::default());
    let (address, _stop) = listen(recorder.clone()).await;
    let mut client = TcpStream::connect(address).await.unwrap();
    // Only the size: the broker must not wait for (or allocate) the body.
    client.write_all(&(1i32 << 20).to_be_bytes()).await.unwrap();
    assert!(receive(&mut client).await.is_none());
}

fn metadata() -> Bytes {
    request(
        ApiKey::Metadata,
        12,
        &fjord_protocol::messages::metadata_request::MetadataRequest::default(),
    )
}

/// Connects and authenticates as alice; the session lifetime the broker gave.
async fn authenticated(address: SocketAddr) -> (TcpStream, i64) {
    let mut client = TcpStream::connect(address).await.unwrap();
    handshake(&mut client).await;
    let answer = plain(&mut client, b"\0alice\0pw").await.expect("answered");
    assert_eq!(answer.error_code, errors::NONE);
    (client, answer.session_lifetime_ms)
}

#[tokio::test]
async fn a_connection_used_after_its_session_ended_is_closed() {
    let recorder = Arc::new(Recorder::default());
    let (address, _stop) = listen_with_sessions_of(recorder.clone(), 600).await;
    let (mut client, lifetime) = authenticated(address).await;
    assert_eq!(lifetime, 600);
    send(&mut client, &metadata()).await;
    receive(&mut client)
        .await
        .expect("served within the session");
    tokio::time::sleep(Duration::from_millis(700)).await;
    send(&mut client, &metadata()).await;
    assert!(
        receive(&mut client).await.is_none(),
        "served after the session ended"
    );
    assert_eq!(recorder.dispatched.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_session_renewed_on_its_connection_goes_on() {
    let recorder = Arc::new(Recorder::default());
    let (address, _stop) = listen_with_sessions_of(recorder.clone(), 600).await;
    let (mut client, _) = authenticated(address).await;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        send(&mut client, &metadata()).await;
        receive(&mut client).await.expect("served");
        // Renewed before the session ends, between other requests.
        handshake(&mut client).await;
        let answer = plain(&mut client, b"\0alice\0pw").await.expect("answered");
        assert_eq!((answer.error_code, answer.session_lifetime_ms), (0, 600));
    }
    assert_eq!(recorder.dispatched.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn without_a_session_lifetime_a_handshake_goes_to_the_dispatcher() {
    // (Which answers it ILLEGAL_SASL_STATE, as Kafka does.)
    let recorder = Arc::new(Recorder::default());
    let (address, _stop) = listen(recorder.clone()).await;
    let (mut client, lifetime) = authenticated(address).await;
    assert_eq!(lifetime, 0);
    handshake(&mut client).await;
    assert_eq!(
        *recorder.dispatched.lock().unwrap(),
        vec![ApiKey::SaslHandshake as i16]
    );
}
