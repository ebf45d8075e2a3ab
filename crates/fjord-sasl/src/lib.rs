//! SASL authentication of a connection on a SASL_PLAINTEXT or SASL_SSL listener, as Kafka's
//! server authenticator does it. Before anything else a client may send one ApiVersions, then a
//! SaslHandshake naming its mechanism, then its tokens — inside SaslAuthenticate requests after a
//! v1 handshake, as bare size-prefixed frames after a v0 one — until the mechanism accepts or
//! refuses them. Any other request first closes the connection unanswered; a refusal is answered
//! after `connection.failed.authentication.delay.ms`, then the connection closes.
//!
//! A session may end (`connections.max.reauth.ms`, KIP-368, or its token's expiry): the client
//! learns its lifetime from SaslAuthenticate v1+ and authenticates again on the same connection
//! before then, with a SaslHandshake and SaslAuthenticate between its other requests, by the
//! same mechanism and as the same principal; a connection used after its session ended is
//! closed.
//!
//! Sans-IO: an [`Authenticator`] is fed each frame and says what to do; the broker's network
//! shell reads and writes. [`plain`] and [`scram`] are the mechanisms.

pub mod jwks;
pub mod oauthbearer;
pub mod plain;
pub mod scram;

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use fjord_common::{errors, KafkaPrincipal};
use fjord_config::{SaslMechanism, SaslSettings};

use self::jwks::VerificationKeys;
use self::oauthbearer::{OAuthBearerServer, OAuthStep};
use self::scram::{ScramCredentials, ScramServer, ScramStep};
use fjord_protocol::messages::sasl_authenticate_request::SaslAuthenticateRequest;
use fjord_protocol::messages::sasl_authenticate_response::SaslAuthenticateResponse;
use fjord_protocol::messages::sasl_handshake_request::SaslHandshakeRequest;
use fjord_protocol::messages::sasl_handshake_response::SaslHandshakeResponse;
use fjord_protocol::{
    decode_request_header, response_header_version, ApiKey, Decodable, Decoder, Encodable,
    ResponseHeader,
};

/// The SaslHandshake and SaslAuthenticate versions served.
pub const SASL_HANDSHAKE_VERSIONS: (i16, i16) = (0, 1);
pub const SASL_AUTHENTICATE_VERSIONS: (i16, i16) = (0, 2);

/// What a SASL listener authenticates with.
#[derive(Clone)]
pub struct SaslConfig {
    pub settings: SaslSettings,
    /// `sasl.server.max.receive.size`: the largest frame read before authentication.
    pub max_receive_size: usize,
    /// `connection.failed.authentication.delay.ms`: how long a refusal is held back.
    pub failed_delay: Duration,
    /// The newest ApiVersions version served: one above it is answered (by the dispatcher) but
    /// does not count as the connection's ApiVersions.
    pub api_versions_max: i16,
    /// The SCRAM credentials the cluster keeps.
    pub credentials: Arc<dyn ScramCredentials>,
    /// The keys signed OAUTHBEARER tokens are checked with (the listener's JWKS; none when it
    /// takes unsecured tokens).
    pub verification_keys: Arc<VerificationKeys>,
    /// A fresh server nonce for each SCRAM exchange.
    pub nonce: fn() -> String,
    /// The wall clock (ms since the epoch), which OAUTHBEARER tokens' times are judged by.
    pub now_ms: fn() -> i64,
}

/// A random SCRAM server nonce: 24 printable characters (no comma).
pub fn random_nonce() -> String {
    use rand::Rng;
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut rng = rand::rng();
    (0..24)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect()
}

/// A mechanism's verdict on one client token.
enum Verdict {
    /// Not done: send this token, the client answers it.
    Challenge(Bytes),
    /// Authenticated: the session, and the last token to send back.
    Done(Session, Bytes),
}

/// Why a mechanism refused a client: the message sent back with SASL_AUTHENTICATION_FAILED.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AuthenticationFailed(pub String);

/// What to do with one frame read before the connection is authenticated.
#[derive(Debug)]
pub enum Step {
    /// An ApiVersions request: the dispatcher answers it, as on any listener.
    ApiVersions(Bytes),
    /// Send this response; the exchange goes on.
    Send(Bytes),
    /// Authenticated: send this response, then serve the connection's requests in `session`.
    Done { response: Bytes, session: Session },
    /// Authentication failed: after the failed-authentication delay, send the response (if
    /// any) and close.
    Fail {
        response: Option<Bytes>,
        reason: String,
    },
    /// Not a request allowed here: close at once, unanswered.
    Close(String),
}

/// Who a connection authenticated as, how, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub principal: KafkaPrincipal,
    pub mechanism: SaslMechanism,
    /// How long the session lasts; None: as long as the connection.
    pub lifetime: Option<Duration>,
    /// Authenticated with a delegation token (SCRAM's `tokenauth`): `principal` is its owner.
    pub delegation_token: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// An ApiVersions or a SaslHandshake may come.
    HandshakeOrVersions,
    /// ApiVersions was answered: only a SaslHandshake may come.
    Handshake,
    /// The mechanism's tokens come: in SaslAuthenticate requests, or bare (`raw`) after a v0
    /// handshake.
    Authenticate { mechanism: SaslMechanism, raw: bool },
}

/// One connection's SASL exchange.
pub struct Authenticator<'a> {
    config: &'a SaslConfig,
    state: State,
    /// Re-authenticating: the session being renewed.
    renewing: Option<&'a Session>,
    /// A SCRAM exchange under way.
    scram: Option<ScramServer>,
    /// An OAUTHBEARER exchange under way.
    oauthbearer: OAuthBearerServer,
}

impl<'a> Authenticator<'a> {
    pub fn new(config: &'a SaslConfig) -> Self {
        Authenticator {
            config,
            state: State::HandshakeOrVersions,
            renewing: None,
            scram: None,
            oauthbearer: OAuthBearerServer::default(),
        }
    }

    /// Re-authentication of `session` (KIP-368): a SaslHandshake v1 first, the same mechanism and
    /// the same principal.
    pub fn renew(config: &'a SaslConfig, session: &'a Session) -> Self {
        Authenticator {
            config,
            state: State::Handshake,
            renewing: Some(session),
            scram: None,
            oauthbearer: OAuthBearerServer::default(),
        }
    }

    /// The next frame the client sent.
    pub fn on_frame(&mut self, frame: Bytes) -> Step {
        if let State::Authenticate {
            mechanism,
            raw: true,
        } = self.state
        {
            // After a v0 handshake the token is the whole frame, and so is the answer; a
            // refusal is a closed connection.
            return match self.evaluate(mechanism, &frame) {
                Ok(Verdict::Challenge(token)) => Step::Send(token),
                Ok(Verdict::Done(session, token)) => Step::Done {
                    response: token,
                    session,
                },
                Err(refused) => Step::Fail {
                    response: None,
                    reason: refused.0,
                },
            };
        }
        let mut input = Decoder::new(frame.clone());
        let header = match decode_request_header(&mut input) {
            Ok(header) => header,
            Err(error) => {
                return Step::Close(format!(
                    "unreadable request during SASL authentication (a client without SASL, or \
                     not a Kafka client?): {error}"
                ))
            }
        };
        let api = ApiKey::from_i16(header.request_api_key);
        let version = header.request_api_version;
        let correlation_id = header.correlation_id;
        match (self.state, api) {
            (State::HandshakeOrVersions, Some(ApiKey::ApiVersions)) => {
                // One the client must retry at a lower version does not count.
                if version <= self.config.api_versions_max {
                    self.state = State::Handshake;
                }
                Step::ApiVersions(frame)
            }
            (State::HandshakeOrVersions | State::Handshake, Some(ApiKey::SaslHandshake)) => {
                self.handshake(&mut input, version, correlation_id)
            }
            (State::Authenticate { mechanism, .. }, Some(ApiKey::SaslAuthenticate)) => {
                self.authenticate(&mut input, mechanism, version, correlation_id)
            }
            (_, api) => Step::Close(format!(
                "unexpected {} request during SASL authentication",
                api.map(ApiKey::name).unwrap_or("unknown")
            )),
        }
    }

    fn handshake(&mut self, input: &mut Decoder, version: i16, correlation_id: i32) -> Step {
        let (min, max) = SASL_HANDSHAKE_VERSIONS;
        if !(min..=max).contains(&version) {
            return Step::Close(format!("SaslHandshake version {version} is not served"));
        }
        let request = match SaslHandshakeRequest::decode(input, version) {
            Ok(request) => request,
            Err(error) => return Step::Close(format!("malformed SaslHandshake: {error}")),
        };
        let settings = &self.config.settings;
        let mechanisms = settings
            .mechanisms
            .iter()
            .map(|m| m.name().to_string())
            .collect();
        // Refused: UNSUPPORTED_SASL_MECHANISM, naming those that may be used.
        let refuse = |mechanisms: Vec<String>, reason: String| {
            let response = SaslHandshakeResponse {
                error_code: errors::UNSUPPORTED_SASL_MECHANISM,
                mechanisms,
            };
            Step::Fail {
                response: Some(encode(
                    ApiKey::SaslHandshake,
                    version,
                    correlation_id,
                    &response,
                )),
                reason,
            }
        };
        if let Some(renewing) = self.renewing {
            if version == 0 {
                return Step::Close("re-authentication needs SaslHandshake v1".into());
            }
            let name = renewing.mechanism.name();
            if request.mechanism != name {
                return refuse(
                    vec![name.to_string()],
                    format!(
                        "re-authentication by {:?}, not by the session's mechanism {name}",
                        request.mechanism
                    ),
                );
            }
        }
        let Some(mechanism) = settings.mechanism(&request.mechanism) else {
            return refuse(
                mechanisms,
                format!(
                    "the client asked for SASL mechanism {:?}, which this listener does not enable",
                    request.mechanism
                ),
            );
        };
        self.state = State::Authenticate {
            mechanism,
            raw: version == 0,
        };
        let response = SaslHandshakeResponse {
            error_code: errors::NONE,
            mechanisms,
        };
        Step::Send(encode(
            ApiKey::SaslHandshake,
            version,
            correlation_id,
            &response,
        ))
    }

    fn authenticate(
        &mut self,
        input: &mut Decoder,
        mechanism: SaslMechanism,
        version: i16,
        correlation_id: i32,
    ) -> Step {
        let (min, max) = SASL_AUTHENTICATE_VERSIONS;
        if !(min..=max).contains(&version) {
            return Step::Close(format!("SaslAuthenticate version {version} is not served"));
        }
        let request = match SaslAuthenticateRequest::decode(input, version) {
            Ok(request) => request,
            Err(error) => return Step::Close(format!("malformed SaslAuthenticate: {error}")),
        };
        let answer = |error_code, error_message, auth_bytes, lifetime: Option<Duration>| {
            let response = SaslAuthenticateResponse {
                error_code,
                error_message,
                auth_bytes,
                // 0: the session lasts as long as the connection.
                session_lifetime_ms: lifetime.map_or(0, |l| l.as_millis() as i64),
            };
            encode(ApiKey::SaslAuthenticate, version, correlation_id, &response)
        };
        match self.evaluate(mechanism, &request.auth_bytes) {
            Ok(Verdict::Challenge(token)) => Step::Send(answer(errors::NONE, None, token, None)),
            Ok(Verdict::Done(session, token)) => Step::Done {
                response: answer(errors::NONE, None, token, session.lifetime),
                session,
            },
            Err(refused) => Step::Fail {
                response: Some(answer(
                    errors::SASL_AUTHENTICATION_FAILED,
                    Some(refused.0.clone()),
                    Bytes::new(),
                    None,
                )),
                reason: refused.0,
            },
        }
    }

    /// The mechanism's verdict on the client's token, or why it was refused.
    fn evaluate(
        &mut self,
        mechanism: SaslMechanism,
        token: &[u8],
    ) -> Result<Verdict, AuthenticationFailed> {
        // A token's expiry (ms from now), which ends the session.
        let mut expires_ms = None;
        let mut delegation_token = false;
        let (user, token) = match mechanism {
            SaslMechanism::Plain => (
                plain::authenticate(&self.config.settings.plain_users, token)?,
                Bytes::new(),
            ),
            SaslMechanism::Scram(scram) => {
                let server = self.scram.get_or_insert_with(|| ScramServer::new(scram));
                let nonce = (self.config.nonce)();
                match server.on_message(token, &*self.config.credentials, &nonce)? {
                    ScramStep::Challenge(challenge) => {
                        return Ok(Verdict::Challenge(challenge.into()))
                    }
                    ScramStep::Authenticated {
                        user,
                        server_final,
                        token_expiry_ms,
                    } => {
                        self.scram = None;
                        if let Some(at) = token_expiry_ms {
                            // Kafka removes expired tokens only every
                            // `delegation.token.expiry.check.interval.ms`; one is refused here
                            // from the moment it expires.
                            let left = at.saturating_sub((self.config.now_ms)());
                            if left < 0 {
                                return Err(AuthenticationFailed(
                                    "Authentication failed: the delegation token has expired"
                                        .into(),
                                ));
                            }
                            expires_ms = Some(left);
                            delegation_token = true;
                        }
                        (user, Bytes::from(server_final))
                    }
                }
            }
            SaslMechanism::OAuthBearer => {
                let settings = &self.config.settings.oauthbearer;
                let now = (self.config.now_ms)();
                let keys = &self.config.verification_keys;
                match self.oauthbearer.on_message(token, settings, keys, now)? {
                    OAuthStep::Challenge(error) => return Ok(Verdict::Challenge(error.into())),
                    OAuthStep::Authenticated {
                        principal,
                        expires_ms: at,
                    } => {
                        expires_ms = Some(at.saturating_sub(now).max(0));
                        (principal, Bytes::new())
                    }
                }
            }
        };
        let principal = KafkaPrincipal::user(user);
        if let Some(renewing) = self.renewing {
            if renewing.principal != principal {
                return Err(AuthenticationFailed(format!(
                    "Cannot change principals during re-authentication from {}: {principal}",
                    renewing.principal
                )));
            }
        }
        // A session ends by the listener's limit (KIP-368) or its token's expiry, whichever
        // comes first: a token's expiry ends it even without a limit, as in Kafka. With
        // neither, it lasts as long as the connection.
        let limit = self.config.settings.session_lifetime_ms(mechanism);
        let lifetime = match (limit, expires_ms) {
            (Some(limit), Some(left)) => Some(limit.min(left)),
            (limit, left) => limit.or(left),
        }
        .map(|ms| Duration::from_millis(ms.max(0).unsigned_abs()));
        let session = Session {
            principal,
            mechanism,
            lifetime,
            delegation_token,
        };
        Ok(Verdict::Done(session, token))
    }
}

/// A response frame: header and body.
fn encode<T: Encodable>(api: ApiKey, version: i16, correlation_id: i32, body: &T) -> Bytes {
    let mut out = BytesMut::with_capacity(64);
    // Both encode into a growing buffer; they fail only on a version out of range, which the
    // callers checked.
    let encoded = ResponseHeader { correlation_id }
        .encode(&mut out, response_header_version(api, version))
        .and_then(|()| body.encode(&mut out, version));
    debug_assert!(encoded.is_ok(), "{encoded:?}");
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use fjord_common::scram::{ScramCredential, ScramMechanism};
    use fjord_protocol::messages::RequestHeader;

    /// alice's SCRAM-SHA-256 credential, password "pw".
    struct TestCredentials;

    const SALT: &[u8] = b"0123456789abcdef";

    impl ScramCredentials for TestCredentials {
        fn credential(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
            (user == "alice" && mechanism == ScramMechanism::Sha256)
                .then(|| ScramCredential::from_password(mechanism, "pw", SALT.to_vec(), 4096))
        }

        /// carol's tokens: "live" expires a minute after the tests' clock, "expired" before it.
        fn delegation_token(&self, token_id: &str) -> Option<scram::DelegationTokenCredential> {
            let expiry_ms = match token_id {
                "live" => 1_700_000_060_000,
                "expired" => 1_699_999_999_999,
                _ => return None,
            };
            Some(scram::DelegationTokenCredential {
                owner: "carol".into(),
                hmac: b"mac".to_vec(),
                expiry_ms,
            })
        }
    }

    /// A SCRAM-SHA-256 client's final message for `server_first`, knowing `password`.
    fn scram_client_final(server_first: &[u8], password: &str) -> Vec<u8> {
        scram_final_as("n=alice,r=cnonce", server_first, password, SALT)
    }

    /// A SCRAM-SHA-256 client's final message after `client_first_bare`.
    fn scram_final_as(
        client_first_bare: &str,
        server_first: &[u8],
        password: &str,
        salt: &[u8],
    ) -> Vec<u8> {
        use base64::Engine;
        let m = ScramMechanism::Sha256;
        let server_first = std::str::from_utf8(server_first).unwrap();
        let nonce = server_first
            .split(',')
            .next()
            .unwrap()
            .strip_prefix("r=")
            .unwrap();
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        let salted = m.salted_password(password.as_bytes(), salt, 4096);
        let client_key = m.hmac(&salted, b"Client Key");
        let signature = m.hmac(&m.hash(&client_key), auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let proof = base64::engine::general_purpose::STANDARD.encode(proof);
        format!("{without_proof},p={proof}").into_bytes()
    }

    fn scram_config() -> SaslConfig {
        let mut config = config();
        config.settings.mechanisms = vec![SaslMechanism::Scram(ScramMechanism::Sha256)];
        config
    }

    #[test]
    fn scram_takes_two_tokens_and_signs_the_last_answer() {
        let config = scram_config();
        let mut auth = Authenticator::new(&config);
        assert!(matches!(
            auth.on_frame(handshake(1, "SCRAM-SHA-256")),
            Step::Send(_)
        ));
        let Step::Send(sent) = auth.on_frame(authenticate(2, b"n,,n=alice,r=cnonce")) else {
            panic!("no challenge")
        };
        let challenge: SaslAuthenticateResponse = response(ApiKey::SaslAuthenticate, 2, &sent);
        assert_eq!(challenge.error_code, 0);
        assert!(challenge.auth_bytes.starts_with(b"r=cnonceservernonce,s="));
        let last = scram_client_final(&challenge.auth_bytes, "pw");
        let Step::Done {
            response: sent,
            session,
        } = auth.on_frame(authenticate(2, &last))
        else {
            panic!("not authenticated")
        };
        assert_eq!(session.principal.to_string(), "User:alice");
        let answer: SaslAuthenticateResponse = response(ApiKey::SaslAuthenticate, 2, &sent);
        assert!(answer.auth_bytes.starts_with(b"v="));
        // The same exchange with the wrong password.
        let mut auth = Authenticator::new(&config);
        auth.on_frame(handshake(1, "SCRAM-SHA-256"));
        let Step::Send(sent) = auth.on_frame(authenticate(2, b"n,,n=alice,r=cnonce")) else {
            panic!("no challenge")
        };
        let challenge: SaslAuthenticateResponse = response(ApiKey::SaslAuthenticate, 2, &sent);
        let last = scram_client_final(&challenge.auth_bytes, "guess");
        assert!(matches!(
            auth.on_frame(authenticate(2, &last)),
            Step::Fail { .. }
        ));
    }

    #[test]
    fn a_delegation_token_authenticates_as_its_owner_until_it_expires() {
        let config = scram_config();
        // The token's password is its HMAC in base64 ("mac").
        let exchange = |token: &str, extension: &str| {
            let mut auth = Authenticator::new(&config);
            auth.on_frame(handshake(1, "SCRAM-SHA-256"));
            let bare = format!("n={token},r=cnonce{extension}");
            let Step::Send(sent) = auth.on_frame(authenticate(2, format!("n,,{bare}").as_bytes()))
            else {
                return None;
            };
            let challenge: SaslAuthenticateResponse = response(ApiKey::SaslAuthenticate, 2, &sent);
            let last = scram_final_as(&bare, &challenge.auth_bytes, "bWFj", b"servernonce");
            Some(auth.on_frame(authenticate(2, &last)))
        };
        let Some(Step::Done { session, .. }) = exchange("live", ",tokenauth=true") else {
            panic!("a live token is refused")
        };
        assert_eq!(session.principal.to_string(), "User:carol");
        assert!(session.delegation_token);
        // Without a re-authentication limit the session still ends when the token does.
        assert_eq!(session.lifetime, Some(Duration::from_secs(60)));
        assert!(matches!(
            exchange("expired", ",tokenauth=true"),
            Some(Step::Fail { .. })
        ));
        // Without the extension the token id is no user.
        assert!(matches!(
            exchange("live", ""),
            None | Some(Step::Fail { .. })
        ));
    }

    proptest::proptest! {
        /// Any bytes, as any frame of an exchange: an answer or a refusal, never a panic.
        #[test]
        fn any_frames_are_answered_or_refused(
            mechanism in proptest::sample::select(vec!["PLAIN", "SCRAM-SHA-256"]),
            frames in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..200), 1..5),
            raw in proptest::bool::ANY,
        ) {
            let mut config = config();
            config.settings.mechanisms = vec![
                SaslMechanism::Plain,
                SaslMechanism::Scram(ScramMechanism::Sha256),
            ];
            let mut auth = Authenticator::new(&config);
            auth.on_frame(handshake(if raw { 0 } else { 1 }, mechanism));
            for frame in frames {
                let frame = if raw { Bytes::from(frame) } else { authenticate(2, &frame) };
                if !matches!(auth.on_frame(frame), Step::Send(_)) {
                    break;
                }
            }
        }

        /// Any bytes after a valid SCRAM first message: refused, never a panic.
        #[test]
        fn any_scram_final_message_is_refused(last in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let config = scram_config();
            let mut auth = Authenticator::new(&config);
            auth.on_frame(handshake(1, "SCRAM-SHA-256"));
            auth.on_frame(authenticate(2, b"n,,n=alice,r=cnonce"));
            let refused = matches!(auth.on_frame(authenticate(2, &last)), Step::Fail { .. });
            proptest::prop_assert!(refused);
        }
    }

    fn config() -> SaslConfig {
        SaslConfig {
            settings: SaslSettings {
                mechanisms: vec![SaslMechanism::Plain],
                plain_users: BTreeMap::from([
                    ("alice".to_string(), "pw".to_string()),
                    ("bob".to_string(), "pw".to_string()),
                ]),
                max_reauth_ms: BTreeMap::from([(SaslMechanism::Plain, 60_000)]),
                oauthbearer: Default::default(),
            },
            max_receive_size: 1024,
            failed_delay: Duration::ZERO,
            api_versions_max: 4,
            credentials: Arc::new(TestCredentials),
            verification_keys: Default::default(),
            nonce: || "servernonce".to_string(),
            now_ms: || 1_700_000_000_000,
        }
    }

    /// A request frame: header (correlation id 7) and body.
    fn request<T: Encodable>(api: ApiKey, version: i16, body: &T) -> Bytes {
        let mut out = BytesMut::new();
        RequestHeader {
            request_api_key: api as i16,
            request_api_version: version,
            correlation_id: 7,
            client_id: Some("test".into()),
        }
        .encode(
            &mut out,
            fjord_protocol::request_header_version(api, version),
        )
        .unwrap();
        body.encode(&mut out, version).unwrap();
        out.freeze()
    }

    fn handshake(version: i16, mechanism: &str) -> Bytes {
        let body = SaslHandshakeRequest {
            mechanism: mechanism.into(),
        };
        request(ApiKey::SaslHandshake, version, &body)
    }

    fn authenticate(version: i16, token: &[u8]) -> Bytes {
        let body = SaslAuthenticateRequest {
            auth_bytes: Bytes::copy_from_slice(token),
        };
        request(ApiKey::SaslAuthenticate, version, &body)
    }

    fn response<T: Decodable>(api: ApiKey, version: i16, frame: &Bytes) -> T {
        let mut input = Decoder::new(frame.clone());
        let header =
            ResponseHeader::decode(&mut input, response_header_version(api, version)).unwrap();
        assert_eq!(header.correlation_id, 7);
        T::decode(&mut input, version).unwrap()
    }

    #[test]
    fn api_versions_then_a_v1_handshake_then_plain() {
        let config = config();
        let mut auth = Authenticator::new(&config);
        let versions = request(
            ApiKey::ApiVersions,
            3,
            &fjord_protocol::messages::api_versions_request::ApiVersionsRequest::default(),
        );
        assert!(matches!(
            auth.on_frame(versions.clone()),
            Step::ApiVersions(_)
        ));
        let Step::Send(sent) = auth.on_frame(handshake(1, "PLAIN")) else {
            panic!("handshake refused")
        };
        let answer: SaslHandshakeResponse = response(ApiKey::SaslHandshake, 1, &sent);
        assert_eq!(answer.error_code, 0);
        assert_eq!(answer.mechanisms, vec!["PLAIN".to_string()]);
        let Step::Done {
            response: sent,
            session,
        } = auth.on_frame(authenticate(2, b"\0alice\0pw"))
        else {
            panic!("not authenticated")
        };
        assert_eq!(session.principal.to_string(), "User:alice");
        let answer: SaslAuthenticateResponse = response(ApiKey::SaslAuthenticate, 2, &sent);
        assert_eq!(answer.error_code, 0);
        assert_eq!(answer.session_lifetime_ms, 60_000);
    }

    #[test]
    fn a_session_is_renewed_by_its_mechanism_as_its_principal_only() {
        let config = config();
        let session = Session {
            principal: KafkaPrincipal::user("alice"),
            mechanism: SaslMechanism::Plain,
            lifetime: Some(Duration::from_secs(60)),
            delegation_token: false,
        };
        let mut renew = Authenticator::renew(&config, &session);
        assert!(matches!(
            renew.on_frame(handshake(1, "PLAIN")),
            Step::Send(_)
        ));
        let step = renew.on_frame(authenticate(2, b"\0alice\0pw"));
        assert!(matches!(step, Step::Done { session: ref s, .. } if *s == session));
        // Another user's password: refused, though it is right.
        let mut renew = Authenticator::renew(&config, &session);
        renew.on_frame(handshake(1, "PLAIN"));
        let Step::Fail { reason, .. } = renew.on_frame(authenticate(2, b"\0bob\0pw")) else {
            panic!("bob took over alice's session")
        };
        assert!(reason.contains("Cannot change principals"), "{reason}");
        // Only a handshake starts it, a v1 one.
        let mut renew = Authenticator::renew(&config, &session);
        assert!(matches!(
            renew.on_frame(handshake(0, "PLAIN")),
            Step::Close(_)
        ));
        let mut renew = Authenticator::renew(&config, &session);
        assert!(matches!(
            renew.on_frame(authenticate(2, b"\0alice\0pw")),
            Step::Close(_)
        ));
    }

    #[test]
    fn a_v0_handshake_is_followed_by_bare_tokens() {
        let config = config();
        let mut auth = Authenticator::new(&config);
        assert!(matches!(
            auth.on_frame(handshake(0, "PLAIN")),
            Step::Send(_)
        ));
        let step = auth.on_frame(Bytes::from_static(b"\0alice\0pw"));
        assert!(matches!(step, Step::Done { response, .. } if response.is_empty()));
        let mut auth = Authenticator::new(&config);
        auth.on_frame(handshake(0, "PLAIN"));
        let step = auth.on_frame(Bytes::from_static(b"\0alice\0wrong"));
        assert!(matches!(step, Step::Fail { response: None, .. }));
    }

    #[test]
    fn a_wrong_password_is_refused_with_kafkas_error() {
        let config = config();
        let mut auth = Authenticator::new(&config);
        auth.on_frame(handshake(1, "PLAIN"));
        let Step::Fail {
            response: Some(sent),
            ..
        } = auth.on_frame(authenticate(1, b"\0alice\0nope"))
        else {
            panic!("not refused")
        };
        let answer: SaslAuthenticateResponse = response(ApiKey::SaslAuthenticate, 1, &sent);
        assert_eq!(answer.error_code, errors::SASL_AUTHENTICATION_FAILED);
        assert_eq!(
            answer.error_message.as_deref(),
            Some("Authentication failed: Invalid username or password")
        );
    }

    #[test]
    fn a_mechanism_not_enabled_is_refused_with_the_enabled_ones() {
        let config = config();
        let mut auth = Authenticator::new(&config);
        let Step::Fail {
            response: Some(sent),
            ..
        } = auth.on_frame(handshake(1, "SCRAM-SHA-512"))
        else {
            panic!("not refused")
        };
        let answer: SaslHandshakeResponse = response(ApiKey::SaslHandshake, 1, &sent);
        assert_eq!(answer.error_code, errors::UNSUPPORTED_SASL_MECHANISM);
        assert_eq!(answer.mechanisms, vec!["PLAIN".to_string()]);
    }

    #[test]
    fn nothing_else_is_served_before_authentication() {
        let config = config();
        let metadata = request(
            ApiKey::Metadata,
            12,
            &fjord_protocol::messages::metadata_request::MetadataRequest::default(),
        );
        // Before the handshake, between it and the token, and garbage.
        let mut auth = Authenticator::new(&config);
        assert!(matches!(auth.on_frame(metadata.clone()), Step::Close(_)));
        let mut auth = Authenticator::new(&config);
        auth.on_frame(handshake(1, "PLAIN"));
        assert!(matches!(auth.on_frame(metadata), Step::Close(_)));
        let mut auth = Authenticator::new(&config);
        assert!(matches!(
            auth.on_frame(Bytes::from_static(b"\x16\x03\x01garbage")),
            Step::Close(_)
        ));
        // A second ApiVersions, and a token before any handshake.
        let versions = request(
            ApiKey::ApiVersions,
            3,
            &fjord_protocol::messages::api_versions_request::ApiVersionsRequest::default(),
        );
        let mut auth = Authenticator::new(&config);
        auth.on_frame(versions.clone());
        assert!(matches!(auth.on_frame(versions), Step::Close(_)));
        let mut auth = Authenticator::new(&config);
        assert!(matches!(
            auth.on_frame(authenticate(2, b"\0alice\0pw")),
            Step::Close(_)
        ));
    }

    #[test]
    fn an_api_versions_the_client_must_retry_lower_does_not_count() {
        let config = config();
        let mut auth = Authenticator::new(&config);
        let too_new = request(
            ApiKey::ApiVersions,
            3,
            &fjord_protocol::messages::api_versions_request::ApiVersionsRequest::default(),
        );
        let mut frame = BytesMut::from(&too_new[..]);
        frame[2..4].copy_from_slice(&99i16.to_be_bytes());
        assert!(matches!(
            auth.on_frame(frame.freeze()),
            Step::ApiVersions(_)
        ));
        assert!(matches!(auth.on_frame(too_new), Step::ApiVersions(_)));
        assert!(matches!(
            auth.on_frame(handshake(1, "PLAIN")),
            Step::Send(_)
        ));
    }
}
