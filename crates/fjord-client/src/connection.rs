//! One connection to one broker: TLS and a SASL login when its security asks for them,
//! ApiVersions negotiation on connect, correlation ids, request/response with a timeout, and a
//! bound on the size of any response read.

use std::collections::HashMap;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use fjord_protocol::messages::sasl_authenticate_request::SaslAuthenticateRequest;
use fjord_protocol::messages::sasl_handshake_request::SaslHandshakeRequest;
use fjord_protocol::messages::{ApiVersionsRequest, RequestHeader};
use fjord_protocol::{
    request_header_version, response_header_version, ApiKey, Decodable, Decoder, Encodable,
    RequestBody, ResponseBody, ResponseHeader,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use fjord_common::errors;

use crate::error::ClientError;
use crate::sasl::SaslClient;
use crate::security::{Security, Stream};

/// Settings shared by every connection a client opens.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Sent in every request header; brokers log it and DescribeGroups reports it.
    pub client_id: String,
    /// Bound on establishing a TCP connection.
    pub connect_timeout: Duration,
    /// Bound on one request's round trip.
    pub request_timeout: Duration,
    /// Largest response frame accepted; a larger size prefix closes the connection.
    pub max_response_bytes: usize,
    /// TLS and SASL, as the listener connected to asks.
    pub security: Security,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            client_id: "fjord-client".to_string(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_response_bytes: 100 * 1024 * 1024,
            security: Security::default(),
        }
    }
}

/// The newest ApiVersions version this client sends first; brokers that do not know it answer
/// with UNSUPPORTED_VERSION and their own range, as KIP-511 describes.
const API_VERSIONS_FIRST_TRY: i16 = 3;

/// The newest version of `api` this client fills in: the codecs decode newer ones (Kafka 4.4's
/// schemas), whose new fields (topic ids in place of names, among others) the client's requests
/// do not set.
fn client_max_version(api: ApiKey) -> i16 {
    let newest = match api {
        ApiKey::Produce => 12,
        ApiKey::Fetch => 17,
        ApiKey::ListOffsets => 10,
        ApiKey::Metadata => 12,
        ApiKey::OffsetCommit => 9,
        ApiKey::OffsetFetch => 9,
        ApiKey::ApiVersions => 4,
        ApiKey::InitProducerId => 5,
        ApiKey::TxnOffsetCommit => 5,
        ApiKey::WriteTxnMarkers => 2,
        ApiKey::DescribeGroups => 5,
        ApiKey::DeleteGroups => 2,
        ApiKey::DescribeLogDirs => 4,
        ApiKey::DescribeCluster => 1,
        ApiKey::ListTransactions => 1,
        ApiKey::AlterPartitionReassignments => 0,
        ApiKey::ConsumerGroupDescribe => 0,
        ApiKey::BrokerHeartbeat => 1,
        _ => i16::MAX,
    };
    newest.min(api.max_version())
}

/// A connection to one broker with the API versions both sides support.
pub struct Connection {
    stream: Stream,
    addr: String,
    config: ClientConfig,
    next_correlation_id: i32,
    versions: HashMap<ApiKey, i16>,
    /// Set after a failure that may leave a partial frame on the wire; the connection is then
    /// unusable because the next response could not be framed reliably.
    broken: bool,
}

impl Connection {
    /// Connects to `addr` (host:port), secures the connection as `config` says and negotiates
    /// API versions.
    pub async fn connect(addr: &str, config: &ClientConfig) -> Result<Connection, ClientError> {
        let mut conn = Connection::open(addr, config).await?;
        conn.negotiate().await?;
        Ok(conn)
    }

    /// Connects to `addr` and secures the connection (TLS, then the SASL login), sending nothing
    /// else: for links that speak to one known peer at fixed versions.
    pub async fn open(addr: &str, config: &ClientConfig) -> Result<Connection, ClientError> {
        let connect_failed = |source| ClientError::Connect {
            addr: addr.to_string(),
            source,
        };
        let tcp = tokio::time::timeout(config.connect_timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| {
                connect_failed(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connect timed out",
                ))
            })?
            .map_err(connect_failed)?;
        // Requests are small and answered one at a time; batching writes only adds latency.
        let _ = tcp.set_nodelay(true);
        let stream = match &config.security.tls {
            None => Stream::Plain(tcp),
            Some(tls) => {
                let handshake = Stream::tls(tcp, tls.clone(), host_of(addr));
                tokio::time::timeout(config.connect_timeout, handshake)
                    .await
                    .map_err(|_| {
                        connect_failed(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "TLS handshake timed out",
                        ))
                    })?
                    .map_err(connect_failed)?
            }
        };
        let mut conn = Connection {
            stream,
            addr: addr.to_string(),
            config: config.clone(),
            next_correlation_id: 0,
            versions: HashMap::new(),
            broken: false,
        };
        if let Some(login) = config.security.sasl.clone() {
            conn.authenticate(SaslClient::new(login)).await?;
        }
        Ok(conn)
    }

    /// The secured stream, for a link that frames its own requests from here on.
    pub fn into_stream(self) -> Stream {
        self.stream
    }

    /// SaslHandshake, then SaslAuthenticate until the mechanism is done. The versions are the
    /// ones every broker since Kafka 2.2 serves (v1 handshake: tokens framed in
    /// SaslAuthenticate; v1 authenticate: the session lifetime is answered).
    async fn authenticate(&mut self, mut client: SaslClient) -> Result<(), ClientError> {
        let mechanism = self
            .config
            .security
            .sasl
            .as_ref()
            .map_or("", |l| l.mechanism_name());
        let handshake = SaslHandshakeRequest {
            mechanism: mechanism.to_string(),
        };
        let ResponseBody::SaslHandshake(answer) = self
            .send_at(1, RequestBody::SaslHandshake(handshake))
            .await?
        else {
            return Err(ClientError::unexpected(ApiKey::SaslHandshake));
        };
        if answer.error_code != errors::NONE {
            return Err(ClientError::kafka(
                format!("SASL handshake with {}", self.addr),
                answer.error_code,
                Some(format!(
                    "{mechanism} is not enabled; the listener serves {}",
                    answer.mechanisms.join(", ")
                )),
            ));
        }
        let mut token = client.first(fjord_common::now_ms());
        loop {
            let request = SaslAuthenticateRequest {
                auth_bytes: Bytes::from(token),
            };
            let ResponseBody::SaslAuthenticate(answer) = self
                .send_at(1, RequestBody::SaslAuthenticate(request))
                .await?
            else {
                return Err(ClientError::unexpected(ApiKey::SaslAuthenticate));
            };
            if answer.error_code != errors::NONE {
                self.broken = true;
                return Err(ClientError::kafka(
                    format!("SASL {mechanism} login at {}", self.addr),
                    answer.error_code,
                    answer.error_message,
                ));
            }
            match client.on_answer(&answer.auth_bytes) {
                Ok(Some(next)) => token = next,
                Ok(None) => return Ok(()),
                Err(reason) => {
                    self.broken = true;
                    return Err(ClientError::Authentication {
                        addr: self.addr.clone(),
                        reason,
                    });
                }
            }
        }
    }

    /// The broker address this connection was opened to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// False once a failure has left the connection in an unknown state.
    pub fn is_usable(&self) -> bool {
        !self.broken
    }

    /// The version used for `api`: the highest supported by both sides, or `None` if none is.
    pub fn version(&self, api: ApiKey) -> Option<i16> {
        self.versions.get(&api).copied()
    }

    async fn negotiate(&mut self) -> Result<(), ClientError> {
        let request = RequestBody::ApiVersions(ApiVersionsRequest {
            client_software_name: "fjord-client".to_string(),
            client_software_version: env!("CARGO_PKG_VERSION").to_string(),
            ..Default::default()
        });
        let mut version = API_VERSIONS_FIRST_TRY;
        let response = loop {
            let ResponseBody::ApiVersions(response) =
                self.send_at(version, request.clone()).await?
            else {
                return Err(ClientError::unexpected(ApiKey::ApiVersions));
            };
            if response.error_code == errors::UNSUPPORTED_VERSION && version > 0 {
                // The broker lists its own ApiVersions range; retry once within it.
                let theirs = response
                    .api_keys
                    .iter()
                    .find(|k| k.api_key == ApiKey::ApiVersions as i16)
                    .map(|k| k.max_version)
                    .unwrap_or(0);
                version = theirs.clamp(0, version - 1);
                continue;
            }
            if response.error_code != errors::NONE {
                return Err(ClientError::kafka(
                    format!("ApiVersions from {}", self.addr),
                    response.error_code,
                    None,
                ));
            }
            break response;
        };
        for entry in &response.api_keys {
            let Some(api) = ApiKey::from_i16(entry.api_key) else {
                continue;
            };
            let high = entry.max_version.min(client_max_version(api));
            let low = entry.min_version.max(api.min_version());
            if low <= high {
                self.versions.insert(api, high);
            }
        }
        Ok(())
    }

    /// Sends `body` at the negotiated version and returns the broker's answer.
    pub async fn send(&mut self, body: RequestBody) -> Result<ResponseBody, ClientError> {
        let api = body.api_key();
        let version = self
            .version(api)
            .ok_or_else(|| ClientError::UnsupportedApi {
                api: api.name(),
                addr: self.addr.clone(),
            })?;
        self.send_at(version, body).await
    }

    /// Sends `body` at `version`, which the caller has checked the broker supports.
    pub async fn send_at(
        &mut self,
        version: i16,
        body: RequestBody,
    ) -> Result<ResponseBody, ClientError> {
        if self.broken {
            return Err(ClientError::Closed(self.addr.clone()));
        }
        let api = body.api_key();
        let timeout = self.config.request_timeout;
        match tokio::time::timeout(timeout, self.round_trip(api, version, &body)).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => {
                self.broken = true;
                Err(e)
            }
            Err(_) => {
                self.broken = true;
                Err(ClientError::Timeout {
                    api: api.name(),
                    addr: self.addr.clone(),
                    timeout_ms: timeout.as_millis(),
                })
            }
        }
    }

    async fn round_trip(
        &mut self,
        api: ApiKey,
        version: i16,
        body: &RequestBody,
    ) -> Result<ResponseBody, ClientError> {
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let correlation_id = self.next_correlation_id;
        let header = RequestHeader {
            request_api_key: api as i16,
            request_api_version: version,
            correlation_id,
            client_id: Some(self.config.client_id.clone()),
        };
        let mut frame = BytesMut::new();
        frame.extend_from_slice(&[0; 4]);
        header.encode(&mut frame, request_header_version(api, version))?;
        body.encode(&mut frame, version)?;
        let size = i32::try_from(frame.len() - 4)
            .map_err(|_| ClientError::Encode(fjord_protocol::EncodeError::TooLong(frame.len())))?;
        if let Some(prefix) = frame.get_mut(..4) {
            prefix.copy_from_slice(&size.to_be_bytes());
        }
        self.stream
            .write_all(&frame)
            .await
            .map_err(|source| self.io(source))?;

        let payload = self.read_frame().await?;
        let mut decoder = Decoder::new(payload);
        let header = ResponseHeader::decode(&mut decoder, response_header_version(api, version))
            .map_err(|source| ClientError::Decode {
                what: "response header",
                source,
            })?;
        if header.correlation_id != correlation_id {
            return Err(ClientError::CorrelationMismatch {
                addr: self.addr.clone(),
                expected: correlation_id,
                got: header.correlation_id,
            });
        }
        let mut attempt = decoder.clone();
        match ResponseBody::decode(api, &mut attempt, version) {
            Ok(response) => Ok(response),
            // A broker that rejects an ApiVersions version answers in v0 (KIP-511).
            Err(_) if api == ApiKey::ApiVersions && version > 0 => {
                ResponseBody::decode(api, &mut decoder, 0).map_err(|source| ClientError::Decode {
                    what: "ApiVersions response",
                    source,
                })
            }
            Err(source) => Err(ClientError::Decode {
                what: api.name(),
                source,
            }),
        }
    }

    async fn read_frame(&mut self) -> Result<Bytes, ClientError> {
        let size = self
            .stream
            .read_i32()
            .await
            .map_err(|source| self.io(source))?;
        let limit = self.config.max_response_bytes;
        let len = usize::try_from(size)
            .ok()
            .filter(|&len| len <= limit)
            .ok_or_else(|| ClientError::ResponseTooLarge {
                addr: self.addr.clone(),
                size: i64::from(size),
                limit,
            })?;
        // Grow with the bytes that actually arrive rather than trusting the prefix up front.
        let mut payload = Vec::with_capacity(len.min(64 * 1024));
        let read = (&mut self.stream)
            .take(len as u64)
            .read_to_end(&mut payload)
            .await
            .map_err(|source| self.io(source))?;
        if read != len {
            return Err(self.io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("connection closed after {read} of {len} response bytes"),
            )));
        }
        Ok(Bytes::from(payload))
    }

    fn io(&self, source: std::io::Error) -> ClientError {
        ClientError::Io {
            addr: self.addr.clone(),
            source,
        }
    }
}

/// The host of `addr` (`host:port`, `[v6]:port`), as TLS checks the broker's name against it.
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}
