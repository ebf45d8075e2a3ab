//! OAUTHBEARER (RFC 7628) with Kafka's default, unsecured validation: the client's first message
//! (`n,[a=<authzid>],^Aauth=Bearer <token>^A[<key>=<value>^A]*^A`) carries an unsigned JWS
//! (header `{"alg":"none"}`, the claims, an empty signature). The token must name its principal
//! (the `sub` claim, or the configured one), carry an expiry still ahead (`exp`, seconds), an
//! issue time not ahead (`iat`, optional) and the required scope. A token refused is answered
//! with a JSON challenge, `{"status":"invalid_token"}`; the client's `^A` then ends the exchange
//! with that refusal, as Kafka's server does.

use base64::alphabet::URL_SAFE;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use fjord_config::OAuthBearerSettings;
use serde_json::{Map, Value};

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
    /// The client's next message, judged at `now_ms`.
    pub fn on_message(
        &mut self,
        message: &[u8],
        settings: &OAuthBearerSettings,
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
        match validate(token, settings, now_ms) {
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
fn validate(
    token: &str,
    settings: &OAuthBearerSettings,
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
        let mut server = OAuthBearerServer::default();
        let token = token(r#"{"sub":"admin","exp":1700003600,"iat":1699999000}"#);
        assert_eq!(
            server.on_message(&first(&token), &settings, NOW),
            Ok(OAuthStep::Authenticated {
                principal: "admin".into(),
                expires_ms: 1_700_003_600_000
            })
        );
        let with_authzid = format!("n,a=admin,\u{1}auth=Bearer {token}\u{1}\u{1}");
        let step = OAuthBearerServer::default().on_message(with_authzid.as_bytes(), &settings, NOW);
        assert!(matches!(step, Ok(OAuthStep::Authenticated { .. })));
        let other = format!("n,a=root,\u{1}auth=Bearer {token}\u{1}\u{1}");
        assert!(OAuthBearerServer::default()
            .on_message(other.as_bytes(), &settings, NOW)
            .is_err());
    }

    #[test]
    fn an_expired_token_is_challenged_then_refused_with_invalid_token() {
        let settings = OAuthBearerSettings::default();
        let mut server = OAuthBearerServer::default();
        let expired = token(r#"{"sub":"admin","exp":1699999000}"#);
        let Ok(OAuthStep::Challenge(error)) = server.on_message(&first(&expired), &settings, NOW)
        else {
            panic!("not challenged")
        };
        assert_eq!(error, br#"{"status":"invalid_token"}"#);
        let refused = server.on_message(&[1], &settings, NOW).unwrap_err();
        assert!(refused.0.contains("invalid_token"), "{refused}");
    }

    #[test]
    fn tokens_kafka_refuses_are_refused() {
        let settings = OAuthBearerSettings {
            required_scope: vec!["write".into()],
            ..Default::default()
        };
        let refused = |t: &str| {
            matches!(
                OAuthBearerServer::default().on_message(&first(t), &settings, NOW),
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
                .on_message(bad, &settings, NOW)
                .is_err());
        }
    }
}
