//! The public keys of a JWKS (RFC 7517), which signed OAUTHBEARER tokens are checked with, and
//! the check of one token's signature. The signature arithmetic is jsonwebtoken's (on aws-lc-rs,
//! as rustls); which key a token's header points at is decided here. A JWKS fetched from an
//! identity provider is replaced as it is fetched again; a token naming a key the set does not
//! hold marks the set as missing one, so that whoever fetches it does so sooner.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey};
use serde_json::Value;

/// The signing keys of a JWKS.
#[derive(Default)]
pub struct VerificationKeys {
    keys: RwLock<Vec<VerificationKey>>,
    /// A token named a key not held (or, without a `kid`, none fitted) since the last look.
    missed: AtomicBool,
}

struct VerificationKey {
    /// `kid`: the id a token's header names its key by.
    kid: Option<String>,
    /// `alg`: the one algorithm the key may be used with, when the JWKS says so.
    alg: Option<Algorithm>,
    key: DecodingKey,
}

impl VerificationKeys {
    /// The signing keys of a JWKS document (`{"keys":[...]}`). Keys meant for encryption
    /// (`"use":"enc"`), shared secrets and key types fjord cannot check with are left out, as a
    /// JWKS may hold them; a document with no signing key at all is refused.
    pub fn from_jwks(document: &[u8]) -> Result<Self, String> {
        let document: Value =
            serde_json::from_slice(document).map_err(|e| format!("not a JWKS: {e}"))?;
        let Some(Value::Array(entries)) = document.get("keys") else {
            return Err("not a JWKS: no \"keys\" array".to_string());
        };
        let mut keys = Vec::new();
        for entry in entries {
            let text = |name: &str| entry.get(name).and_then(Value::as_str);
            if text("use").is_some_and(|u| u != "sig") {
                continue;
            }
            let Ok(jwk) = serde_json::from_value::<Jwk>(entry.clone()) else {
                continue;
            };
            let Ok(key) = DecodingKey::from_jwk(&jwk) else {
                continue;
            };
            if key.family() == AlgorithmFamily::Hmac {
                continue;
            }
            let alg = match text("alg") {
                None => None,
                Some(alg) => match alg.parse::<Algorithm>() {
                    Ok(alg) if alg.family() == key.family() => Some(alg),
                    _ => continue,
                },
            };
            keys.push(VerificationKey {
                kid: text("kid").map(String::from),
                alg,
                key,
            });
        }
        if keys.is_empty() {
            return Err("the JWKS holds no public key to check signatures with".to_string());
        }
        Ok(VerificationKeys {
            keys: RwLock::new(keys),
            missed: AtomicBool::new(false),
        })
    }

    /// Takes the keys of `fetched`, the JWKS read again.
    pub fn replace(&self, fetched: VerificationKeys) {
        let keys = fetched.keys.into_inner().unwrap_or_else(|e| e.into_inner());
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = keys;
    }

    /// Whether a token named a key not held since the last call.
    pub fn take_missed(&self) -> bool {
        self.missed.swap(false, Ordering::Relaxed)
    }

    /// Whether the JWS `token` (`header.claims.signature`) carries a valid signature by one of
    /// the keys: the key its header's `kid` names or, without a `kid`, the one key that fits
    /// its `alg`. `alg` `none` and shared-secret algorithms are never accepted.
    pub fn verify(&self, token: &str, header: &serde_json::Map<String, Value>) -> bool {
        let Some(alg) = header
            .get("alg")
            .and_then(Value::as_str)
            .and_then(|a| a.parse::<Algorithm>().ok())
            .filter(|a| a.family() != AlgorithmFamily::Hmac)
        else {
            return false;
        };
        let Some((message, signature)) = token.rsplit_once('.') else {
            return false;
        };
        let fits =
            |k: &&VerificationKey| k.key.family() == alg.family() && k.alg.is_none_or(|a| a == alg);
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
        let key = match header.get("kid") {
            Some(Value::String(kid)) => keys
                .iter()
                .filter(fits)
                .find(|k| k.kid.as_deref() == Some(kid)),
            Some(_) => return false,
            None => {
                let mut fitting = keys.iter().filter(fits);
                fitting.next().filter(|_| fitting.next().is_none())
            }
        };
        let Some(key) = key else {
            self.missed.store(true, Ordering::Relaxed);
            return false;
        };
        jsonwebtoken::crypto::verify(signature, message.as_bytes(), &key.key, alg).unwrap_or(false)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use base64::Engine;
    use jsonwebtoken::{EncodingKey, Header};

    // A P-256 key pair made for these tests (PKCS#8 and its public point).
    const EC_PRIVATE_PKCS8: &str = "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgxneVBGxjWVCcxlhK9FzCz9TV1pIcBwRC5cW/wQCbr72hRANCAAQ+oGcRSXRqZlRGM/D5lZIyTG1VF9TX3la3CZeEVlkDRRbBZLTloKCyA4CRTlSrUB87lc7X3g04/+MBK9BzC8/P";
    const EC_X: &str = "PqBnEUl0amZURjPw-ZWSMkxtVRfU195WtwmXhFZZA0U";
    const EC_Y: &str = "FsFktOWgoLIDgJFOVKtQHzuVztfeDTj_4wEr0HMLz88";

    pub(crate) fn signing_key() -> EncodingKey {
        let der = base64::engine::general_purpose::STANDARD
            .decode(EC_PRIVATE_PKCS8)
            .unwrap();
        EncodingKey::from_ec_der(&der)
    }

    /// A JWKS with the test key under `kid`.
    pub(crate) fn jwks(kid: &str) -> String {
        format!(
            r#"{{"keys":[{{"kty":"EC","crv":"P-256","use":"sig","kid":"{kid}","x":"{EC_X}","y":"{EC_Y}"}}]}}"#
        )
    }

    /// `claims` signed with ES256 by the test key, its header naming `kid`.
    pub(crate) fn signed(claims: &str, kid: Option<&str>) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = kid.map(String::from);
        let claims: Value = serde_json::from_str(claims).unwrap();
        jsonwebtoken::encode(&header, &claims, &signing_key()).unwrap()
    }

    fn header_of(token: &str) -> serde_json::Map<String, Value> {
        let header = token.split('.').next().unwrap();
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(header)
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn a_token_signed_by_the_named_key_verifies_and_nothing_else_does() {
        let keys = VerificationKeys::from_jwks(jwks("k1").as_bytes()).unwrap();
        let token = signed(r#"{"sub":"alice"}"#, Some("k1"));
        assert!(keys.verify(&token, &header_of(&token)));
        // Without a kid, the one key that fits the algorithm.
        let token = signed(r#"{"sub":"alice"}"#, None);
        assert!(keys.verify(&token, &header_of(&token)));
        // Another kid, a changed payload, a changed signature, alg none.
        let other = signed(r#"{"sub":"alice"}"#, Some("k2"));
        assert!(!keys.verify(&other, &header_of(&other)));
        let token = signed(r#"{"sub":"alice"}"#, Some("k1"));
        let mut parts: Vec<String> = token.split('.').map(String::from).collect();
        let forged = signed(r#"{"sub":"admin"}"#, Some("k1"));
        parts[1] = forged.split('.').nth(1).unwrap().to_string();
        let tampered = parts.join(".");
        assert!(!keys.verify(&tampered, &header_of(&tampered)));
        let truncated = &token[..token.len() - 4];
        assert!(!keys.verify(truncated, &header_of(truncated)));
        let mut none = header_of(&token);
        none.insert("alg".into(), Value::String("none".into()));
        assert!(!keys.verify(&token, &none));
        let mut hs = header_of(&token);
        hs.insert("alg".into(), Value::String("HS256".into()));
        assert!(!keys.verify(&token, &hs));
    }

    #[test]
    fn a_token_naming_a_key_not_held_is_noticed_and_a_set_fetched_again_has_it() {
        let keys = VerificationKeys::from_jwks(jwks("k1").as_bytes()).unwrap();
        let token = signed(r#"{"sub":"alice"}"#, Some("k2"));
        assert!(!keys.take_missed());
        assert!(!keys.verify(&token, &header_of(&token)));
        assert!(keys.take_missed() && !keys.take_missed());
        keys.replace(VerificationKeys::from_jwks(jwks("k2").as_bytes()).unwrap());
        assert!(keys.verify(&token, &header_of(&token)));
        assert!(!keys.take_missed());
    }

    #[test]
    fn a_jwks_keeps_only_its_signing_keys() {
        let mixed = format!(
            r#"{{"keys":[{{"kty":"oct","k":"c2VjcmV0","kid":"s"}},
                {{"kty":"EC","crv":"P-256","use":"enc","kid":"e","x":"{EC_X}","y":"{EC_Y}"}},
                {{"kty":"XYZ","kid":"x"}},
                {{"kty":"EC","crv":"P-256","kid":"k","alg":"ES256","x":"{EC_X}","y":"{EC_Y}"}}]}}"#
        );
        let keys = VerificationKeys::from_jwks(mixed.as_bytes()).unwrap();
        assert_eq!(keys.keys.read().unwrap().len(), 1);
        let token = signed(r#"{"sub":"alice"}"#, Some("e"));
        assert!(!keys.verify(&token, &header_of(&token)));
        for bad in [
            "",
            "[]",
            r#"{"keys":{}}"#,
            r#"{"keys":[]}"#,
            r#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#,
        ] {
            assert!(
                VerificationKeys::from_jwks(bad.as_bytes()).is_err(),
                "{bad}"
            );
        }
    }
}
