//! OAUTHBEARER (RFC 7628) as Kafka's validators judge it. The client's first message
//! (`n,[a=<authzid>],^Aauth=Bearer <token>^A[<key>=<value>^A]*^A`) carries a JWS:
//! - by default (Kafka's unsecured validator) unsigned (header `{"alg":"none"}`, the claims, an
//!   empty signature); the token must name its principal (the `sub` claim, or the configured
//!   one), carry an expiry still ahead (`exp`, seconds), an issue time not ahead (`iat`,
//!   optional) and the required scope;
//! - with Kafka's OAuthBearerValidatorCallbackHandler, signed by a key of the configured JWKS,
//!   with `exp` (not past, give or take the clock skew) and `iat`, `nbf` not ahead, the
//!   expected `iss` and `aud` (none when no audience is expected), and a principal claim.
//!
//! A token refused is answered with a JSON challenge, `{"status":"invalid_token"}`; the
//! client's `^A` then ends the exchange with that refusal, as Kafka's server does.

use base64::alphabet::URL_SAFE;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use fjord_config::{JwksValidator, OAuthBearerSettings, UnsecuredValidator};
use serde_json::{Map, Value};

use crate::jwks::VerificationKeys;
use crate::AuthenticationFailed;

/// Base64url, padded or not.
const BASE64_URL: GeneralPurpose = GeneralPurpose::new(
    &URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// What one client message leads to.
#[derive(Debug, PartialEq, Eq)]
pub enum OAuthStep {
    /// The token is refused: send this JSON error; the client answers `^A`.
    Challenge(Vec<u8>),
    /// Authenticated as `principal` until `expires_ms` (the token's expiry).
    Authenticated { principal: String, expires_ms: i64 },
}

/// One OAUTHBEARER exchange.
#[derive(Debug, Default)]
pub struct OAuthBearerServer {
    /// The error sent back, awaiting the client's `^A`.
    refused: Option<String>,
}

impl OAuthBearerServer {
    /// The client's next message, judged at `now_ms`; a signed token is checked with `keys`.
    pub fn on_message(
        &mut self,
        message: &[u8],
        settings: &OAuthBearerSettings,
        keys: &VerificationKeys,
        now_ms: i64,
    ) -> Result<OAuthStep, AuthenticationFailed> {
        if let Some(refused) = self.refused.take() {
            return Err(AuthenticationFailed(if message == [1] {
                refused
            } else {
                "Invalid OAUTHBEARER client response after an error".to_string()
            }));
        }
        let (authzid, token) = client_first(message)?;
        let valid = match settings {
            OAuthBearerSettings::Unsecured(validator) => {
                validate_unsecured(token, validator, now_ms)
            }
            OAuthBearerSettings::Jwks(validator) => {
                validate_signed(token, validator, keys, now_ms).ok_or(None)
            }
        };
        match valid {
            Ok((principal, expires_ms)) => {
                if !authzid.is_empty() && authzid != principal {
                    return Err(AuthenticationFailed(format!(
                        "Authentication failed: Client requested an authorization id ({authzid}) \
                         that is different from the token's principal name ({principal})"
                    )));
                }
                Ok(OAuthStep::Authenticated {
                    principal,
                    expires_ms,
                })
            }
            Err(scope) => {
                let error = match scope {
                    Some(scope) => format!(r#"{{"status":"invalid_token", "scope":"{scope}"}}"#),
                    None => r#"{"status":"invalid_token"}"#.to_string(),
                };
                self.refused = Some(error.clone());
                Ok(OAuthStep::Challenge(error.into_bytes()))
            }
        }
    }
}

/// The authorization id and the bearer token of a client's first message.
fn client_first(message: &[u8]) -> Result<(&str, &str), AuthenticationFailed> {
    let invalid = || AuthenticationFailed("Invalid OAUTHBEARER client first message".to_string());
    let text = std::str::from_utf8(message).map_err(|_| invalid())?;
    let rest = text.strip_prefix("n,").ok_or_else(invalid)?;
    let (authzid, rest) = rest.split_once(',').ok_or_else(invalid)?;
    let authzid = match authzid {
        "" => "",
        a => a
            .strip_prefix("a=")
            .filter(|a| !a.is_empty())
            .ok_or_else(invalid)?,
    };
    // ^A key=value pairs ^A, closed by a second ^A.
    let pairs = rest
        .strip_prefix('\u{1}')
        .and_then(|r| r.strip_suffix("\u{1}\u{1}"))
        .ok_or_else(invalid)?;
    let mut auth = None;
    for pair in pairs.split('\u{1}') {
        let (key, value) = pair.split_once('=').ok_or_else(invalid)?;
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphabetic()) {
            return Err(invalid());
        }
        if key == "auth" {
            auth = Some(value);
        }
    }
    let auth = auth.ok_or_else(|| {
        AuthenticationFailed(
            "Invalid OAUTHBEARER client first message: 'auth' not specified".to_string(),
        )
    })?;
    let (scheme, token) = auth.split_once(' ').ok_or_else(|| {
        AuthenticationFailed(
            "Invalid OAUTHBEARER client first message: invalid 'auth' format".to_string(),
        )
    })?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthenticationFailed(format!(
            "Invalid scheme in OAUTHBEARER client first message: {scheme}"
        )));
    }
    Ok((authzid, token.trim_start_matches(' ')))
}

/// The principal and expiry (ms) of a valid unsecured token; Err with the scope to report (if
/// a scope is missing) when it is not valid.
fn validate_unsecured(
    token: &str,
    settings: &UnsecuredValidator,
    now_ms: i64,
) -> Result<(String, i64), Option<String>> {
    let parts: Vec<&str> = token.split('.').collect();
    let [header, claims, signature] = parts[..] else {
        return Err(None);
    };
    let header = json_object(header).ok_or(None)?;
    if header.get("alg").and_then(Value::as_str) != Some("none") || !signature.is_empty() {
        return Err(None);
    }
    let claims = json_object(claims).ok_or(None)?;
    let principal = claims
        .get(&settings.principal_claim)
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .ok_or(None)?;
    let seconds = |name: &str| -> Result<Option<f64>, Option<String>> {
        match claims.get(name) {
            None => Ok(None),
            Some(value) => value.as_f64().map(Some).ok_or(None),
        }
    };
    let skew = settings.allowable_clock_skew_ms as f64;
    let expires = seconds("exp")?.ok_or(None)?;
    if now_ms as f64 - skew >= 1000.0 * expires {
        return Err(None);
    }
    if let Some(issued) = seconds("iat")? {
        if 1000.0 * issued > now_ms as f64 + skew || expires <= issued {
            return Err(None);
        }
    }
    let scope: Vec<&str> = match claims.get(&settings.scope_claim) {
        None => Vec::new(),
        Some(Value::String(s)) => s.split_whitespace().collect(),
        Some(Value::Array(values)) => values.iter().filter_map(Value::as_str).collect(),
        Some(_) => return Err(None),
    };
    if settings
        .required_scope
        .iter()
        .any(|r| !scope.contains(&r.as_str()))
    {
        return Err(Some(format!("{:?}", settings.required_scope)));
    }
    Ok((principal.to_string(), (1000.0 * expires) as i64))
}

/// The principal and expiry (ms) of a valid signed token, judged as Kafka's
/// OAuthBearerValidatorCallbackHandler judges it.
fn validate_signed(
    token: &str,
    settings: &JwksValidator,
    keys: &VerificationKeys,
    now_ms: i64,
) -> Option<(String, i64)> {
    let parts: Vec<&str> = token.split('.').collect();
    let [header, claims, _] = parts[..] else {
        return None;
    };
    if !keys.verify(token, &json_object(header)?) {
        return None;
    }
    let claims = json_object(claims)?;
    let skew_ms = settings.clock_skew_seconds.saturating_mul(1000);
    let millis = |name: &str| -> Option<Option<i64>> {
        match claims.get(name) {
            None => Some(None),
            Some(v) => v
                .as_f64()
                .filter(|s| *s >= 0.0)
                .map(|s| Some((s * 1000.0) as i64)),
        }
    };
    let expires_ms = millis("exp")??;
    if now_ms >= expires_ms.saturating_add(skew_ms) {
        return None;
    }
    millis("iat")??;
    if let Some(not_before_ms) = millis("nbf")? {
        if now_ms.saturating_add(skew_ms) < not_before_ms {
            return None;
        }
    }
    if let Some(issuer) = &settings.expected_issuer {
        if claims.get("iss").and_then(Value::as_str) != Some(issuer) {
            return None;
        }
    }
    let audience: Vec<&str> = match claims.get("aud") {
        None => Vec::new(),
        Some(Value::String(aud)) => vec![aud],
        Some(Value::Array(auds)) => auds.iter().map(Value::as_str).collect::<Option<_>>()?,
        Some(_) => return None,
    };
    // A token meant for some audience is only taken where that audience is expected.
    let audience_ok = match (
        claims.contains_key("aud"),
        settings.expected_audience.is_empty(),
    ) {
        (false, true) => true,
        (true, false) => audience
            .iter()
            .any(|a| settings.expected_audience.iter().any(|e| e == a)),
        _ => false,
    };
    if !audience_ok {
        return None;
    }
    let principal = claims
        .get(&settings.sub_claim)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|p| !p.is_empty())?;
    // The scope is not checked against anything, but must be well formed.
    match claims.get(&settings.scope_claim) {
        None => {}
        Some(Value::String(scope)) if !scope.trim().is_empty() => {}
        Some(Value::Array(scopes)) => {
            let mut seen = Vec::new();
            for scope in scopes {
                let scope = scope.as_str().map(str::trim).filter(|s| !s.is_empty())?;
                if seen.contains(&scope) {
                    return None;
                }
                seen.push(scope);
            }
        }
        Some(Value::String(_)) => return None,
        Some(_) => {}
    }
    Some((principal.to_string(), expires_ms))
}

/// A base64url-encoded JSON object.
fn json_object(part: &str) -> Option<Map<String, Value>> {
    let bytes = BASE64_URL.decode(part).ok()?;
    match serde_json::from_slice(&bytes).ok()? {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(claims: &str) -> String {
        let enc = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        format!("{}.{}.", enc(r#"{"alg":"none"}"#), enc(claims))
    }

    fn first(token: &str) -> Vec<u8> {
        format!("n,,\u{1}auth=Bearer {token}\u{1}\u{1}").into_bytes()
    }

    const NOW: i64 = 1_700_000_000_000;

    #[test]
    fn a_valid_unsecured_token_names_its_principal_until_it_expires() {
        let settings = OAuthBearerSettings::default();
        let none = &VerificationKeys::default();
        let mut server = OAuthBearerServer::default();
        let token = token(r#"{"sub":"admin","exp":1700003600,"iat":1699999000}"#);
        assert_eq!(
            server.on_message(&first(&token), &settings, none, NOW),
            Ok(OAuthStep::Authenticated {
                principal: "admin".into(),
                expires_ms: 1_700_003_600_000
            })
        );
        let with_authzid = format!("n,a=admin,\u{1}auth=Bearer {token}\u{1}\u{1}");
        let step =
            OAuthBearerServer::default().on_message(with_authzid.as_bytes(), &settings, none, NOW);
        assert!(matches!(step, Ok(OAuthStep::Authenticated { .. })));
        let other = format!("n,a=root,\u{1}auth=Bearer {token}\u{1}\u{1}");
        assert!(OAuthBearerServer::default()
            .on_message(other.as_bytes(), &settings, none, NOW)
            .is_err());
    }

    #[test]
    fn an_expired_token_is_challenged_then_refused_with_invalid_token() {
        let settings = OAuthBearerSettings::default();
        let none = &VerificationKeys::default();
        let mut server = OAuthBearerServer::default();
        let expired = token(r#"{"sub":"admin","exp":1699999000}"#);
        let Ok(OAuthStep::Challenge(error)) =
            server.on_message(&first(&expired), &settings, none, NOW)
        else {
            panic!("not challenged")
        };
        assert_eq!(error, br#"{"status":"invalid_token"}"#);
        let refused = server.on_message(&[1], &settings, none, NOW).unwrap_err();
        assert!(refused.0.contains("invalid_token"), "{refused}");
    }

    #[test]
    fn tokens_kafka_refuses_are_refused() {
        let settings = OAuthBearerSettings::Unsecured(UnsecuredValidator {
            required_scope: vec!["write".into()],
            ..Default::default()
        });
        let none = &VerificationKeys::default();
        let refused = |t: &str| {
            matches!(
                OAuthBearerServer::default().on_message(&first(t), &settings, none, NOW),
                Ok(OAuthStep::Challenge(_))
            )
        };
        assert!(refused(&token(r#"{"exp":1700003600,"scope":"write"}"#)));
        assert!(refused(&token(r#"{"sub":"a","scope":"write"}"#)));
        assert!(refused(&token(
            r#"{"sub":"a","exp":1700003600,"scope":"read"}"#
        )));
        assert!(refused(&token(
            r#"{"sub":"a","exp":1700003600,"iat":1700001000,"scope":"write"}"#
        )));
        assert!(refused("not-a-token"));
        let signed = token(r#"{"sub":"a","exp":1700003600,"scope":"write"}"#) + "c2ln";
        assert!(refused(&signed));
        assert!(!refused(&token(
            r#"{"sub":"a","exp":1700003600,"scope":["write"]}"#
        )));
        for bad in [
            &b"n,,auth=Bearer x"[..],
            b"y,,\x01auth=Bearer x\x01\x01",
            b"n,,\x01\x01",
            b"\xff",
        ] {
            assert!(OAuthBearerServer::default()
                .on_message(bad, &settings, none, NOW)
                .is_err());
        }
    }

    #[test]
    fn signed_tokens_are_judged_as_kafkas_validator_judges_them() {
        use crate::jwks::tests::{jwks, signed};
        let keys = VerificationKeys::from_jwks(jwks("k1").as_bytes()).unwrap();
        let validator = JwksValidator {
            jwks: fjord_config::JwksEndpoint::File("/unused".into()),
            expected_audience: Vec::new(),
            expected_issuer: None,
            sub_claim: "sub".into(),
            scope_claim: "scope".into(),
            clock_skew_seconds: 30,
        };
        let judge = |validator: &JwksValidator, claims: &str, kid: &str| {
            let token = signed(claims, Some(kid));
            let settings = OAuthBearerSettings::Jwks(validator.clone());
            OAuthBearerServer::default().on_message(&first(&token), &settings, &keys, NOW)
        };
        let valid = |v: &JwksValidator, claims: &str| {
            matches!(judge(v, claims, "k1"), Ok(OAuthStep::Authenticated { .. }))
        };
        assert_eq!(
            judge(
                &validator,
                r#"{"sub":" alice ","exp":1700003600,"iat":1699999000}"#,
                "k1"
            ),
            Ok(OAuthStep::Authenticated {
                principal: "alice".into(),
                expires_ms: 1_700_003_600_000
            })
        );
        // The key must be the JWKS's; the unsecured form is refused.
        assert!(matches!(
            judge(&validator, r#"{"sub":"a","exp":1700003600,"iat":1}"#, "k2"),
            Ok(OAuthStep::Challenge(_))
        ));
        let unsigned = token(r#"{"sub":"a","exp":1700003600,"iat":1}"#);
        let settings = OAuthBearerSettings::Jwks(validator.clone());
        assert!(matches!(
            OAuthBearerServer::default().on_message(&first(&unsigned), &settings, &keys, NOW),
            Ok(OAuthStep::Challenge(_))
        ));
        // exp and iat are required; exp past by more than the skew, nbf ahead by more, refused.
        assert!(!valid(&validator, r#"{"sub":"a","iat":1}"#));
        assert!(!valid(&validator, r#"{"sub":"a","exp":1700003600}"#));
        assert!(valid(&validator, r#"{"sub":"a","exp":1699999980,"iat":1}"#));
        assert!(!valid(
            &validator,
            r#"{"sub":"a","exp":1699999970,"iat":1}"#
        ));
        assert!(valid(
            &validator,
            r#"{"sub":"a","exp":1700003600,"iat":1,"nbf":1700000020}"#
        ));
        assert!(!valid(
            &validator,
            r#"{"sub":"a","exp":1700003600,"iat":1,"nbf":1700000031}"#
        ));
        // No audience expected: a token for one is refused.
        assert!(!valid(
            &validator,
            r#"{"sub":"a","exp":1700003600,"iat":1,"aud":"x"}"#
        ));
        let audience = JwksValidator {
            expected_audience: vec!["kafka".into()],
            expected_issuer: Some("https://idp".into()),
            sub_claim: "client_id".into(),
            ..validator.clone()
        };
        let good = r#"{"client_id":"svc","exp":1700003600,"iat":1,"aud":["web","kafka"],"iss":"https://idp"}"#;
        assert!(valid(&audience, good));
        assert!(!valid(&audience, &good.replace("kafka", "other")));
        assert!(!valid(
            &audience,
            &good.replace("https://idp", "https://evil")
        ));
        assert!(!valid(&audience, &good.replace("client_id", "sub")));
        assert!(!valid(
            &audience,
            r#"{"client_id":"svc","exp":1700003600,"iat":1,"iss":"https://idp"}"#
        ));
        // A malformed scope is refused; any well-formed one is taken.
        assert!(valid(
            &validator,
            r#"{"sub":"a","exp":1700003600,"iat":1,"scope":["r","w"]}"#
        ));
        assert!(!valid(
            &validator,
            r#"{"sub":"a","exp":1700003600,"iat":1,"scope":["r","r"]}"#
        ));
        assert!(!valid(
            &validator,
            r#"{"sub":"a","exp":1700003600,"iat":1,"scope":""}"#
        ));
    }
}
