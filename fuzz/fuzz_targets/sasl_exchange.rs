//! Arbitrary frames as a client's SASL exchange, before and during authentication: each one
//! answered, refused or ending the exchange, never a panic. The input is cut into frames (a byte
//! of length, then that many bytes); the first byte picks the mechanism the exchange starts with,
//! and each frame's first byte whether it goes raw or wrapped in a well-formed SaslAuthenticate,
//! so the fuzzer reaches PLAIN's, SCRAM's and OAUTHBEARER's parsers as well as the frame decoder;
//! another bit has OAUTHBEARER check signed tokens against a JWKS, and another reads the rest of
//! the input as a JWKS document instead.
#![no_main]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use fjord_common::scram::{ScramCredential, ScramMechanism};
use fjord_config::{JwksValidator, OAuthBearerSettings, SaslMechanism, SaslSettings};
use fjord_protocol::messages::sasl_authenticate_request::SaslAuthenticateRequest;
use fjord_protocol::messages::sasl_handshake_request::SaslHandshakeRequest;
use fjord_protocol::messages::RequestHeader;
use fjord_protocol::{request_header_version, ApiKey, Encodable};
use fjord_sasl::jwks::VerificationKeys;
use fjord_sasl::scram::{DelegationTokenCredential, ScramCredentials};
use fjord_sasl::{Authenticator, SaslConfig, Step};
use libfuzzer_sys::fuzz_target;

/// alice has a SCRAM credential for both mechanisms, and a delegation token "tok".
struct Credentials;

impl ScramCredentials for Credentials {
    fn credential(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
        (user == "alice")
            .then(|| ScramCredential::from_password(mechanism, "pw", vec![7; 16], 4096))
    }

    fn delegation_token(&self, token_id: &str) -> Option<DelegationTokenCredential> {
        (token_id == "tok").then(|| DelegationTokenCredential {
            owner: "alice".into(),
            hmac: b"mac".to_vec(),
            expiry_ms: i64::MAX,
        })
    }
}

/// A JWKS with one P-256 key.
const JWKS: &str = r#"{"keys":[{"kty":"EC","crv":"P-256","kid":"k","x":"PqBnEUl0amZURjPw-ZWSMkxtVRfU195WtwmXhFZZA0U","y":"FsFktOWgoLIDgJFOVKtQHzuVztfeDTj_4wEr0HMLz88"}]}"#;

fn config(signed: bool) -> SaslConfig {
    let (oauthbearer, keys) = if signed {
        let validator = JwksValidator {
            jwks: fjord_config::JwksEndpoint::File("/unused".into()),
            expected_audience: vec!["kafka".into()],
            expected_issuer: None,
            sub_claim: "sub".into(),
            scope_claim: "scope".into(),
            clock_skew_seconds: 30,
        };
        let keys = VerificationKeys::from_jwks(JWKS.as_bytes()).expect("the JWKS is valid");
        (OAuthBearerSettings::Jwks(validator), keys)
    } else {
        (OAuthBearerSettings::default(), VerificationKeys::default())
    };
    SaslConfig {
        settings: SaslSettings {
            mechanisms: vec![
                SaslMechanism::Plain,
                SaslMechanism::Scram(ScramMechanism::Sha256),
                SaslMechanism::Scram(ScramMechanism::Sha512),
                SaslMechanism::OAuthBearer,
            ],
            plain_users: BTreeMap::from([("alice".to_string(), "pw".to_string())]),
            max_reauth_ms: BTreeMap::new(),
            oauthbearer,
        },
        max_receive_size: 1 << 16,
        failed_delay: Duration::ZERO,
        api_versions_max: 4,
        credentials: Arc::new(Credentials),
        verification_keys: Arc::new(keys),
        nonce: || "servernonce".to_string(),
        now_ms: || 1_700_000_000_000,
    }
}

fn request<T: Encodable>(api: ApiKey, version: i16, body: &T) -> Bytes {
    let mut out = BytesMut::new();
    let header = RequestHeader {
        request_api_key: api as i16,
        request_api_version: version,
        correlation_id: 1,
        client_id: Some("fuzz".into()),
    };
    if header
        .encode(&mut out, request_header_version(api, version))
        .is_err()
        || body.encode(&mut out, version).is_err()
    {
        out.clear();
        out.put_i16(api as i16);
    }
    out.freeze()
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, mut rest)) = data.split_first() else {
        return;
    };
    if first & 16 != 0 {
        let _ = VerificationKeys::from_jwks(rest);
        return;
    }
    let config = config(first & 8 != 0);
    let mut auth = Authenticator::new(&config);
    let mechanism =
        ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"][usize::from(first % 4)];
    if first & 4 != 0 {
        let handshake = SaslHandshakeRequest {
            mechanism: mechanism.into(),
        };
        if !matches!(
            auth.on_frame(request(ApiKey::SaslHandshake, 1, &handshake)),
            Step::Send(_)
        ) {
            return;
        }
    }
    while let Some((&len, tail)) = rest.split_first() {
        let take = usize::from(len).min(tail.len());
        let (frame, next) = tail.split_at(take);
        rest = next;
        let frame = if len & 1 == 0 {
            let body = SaslAuthenticateRequest {
                auth_bytes: Bytes::copy_from_slice(frame),
            };
            request(ApiKey::SaslAuthenticate, i16::from(len % 3), &body)
        } else {
            Bytes::copy_from_slice(frame)
        };
        match auth.on_frame(frame) {
            Step::Send(_) | Step::ApiVersions(_) => {}
            Step::Done { .. } | Step::Fail { .. } | Step::Close(_) => return,
        }
    }
});
