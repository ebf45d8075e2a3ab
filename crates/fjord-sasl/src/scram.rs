//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) on the broker side, as Kafka serves
//! them: the client's first message names the user and its nonce; the server answers with the
//! combined nonce, the user's salt and iteration count; the client's final message proves it
//! knows the password; the server checks the proof against the stored key and signs its answer
//! with the server key. Channel binding is not offered (`n,,` or `y,,` only).
//!
//! Every refusal but one tells the client the same thing (Kafka's generic message), so an
//! unknown user cannot be told from a wrong password.
//!
//! A client holding a delegation token authenticates the same way with the `tokenauth=true`
//! extension: the token id as the user name and the token's HMAC (base64) as the password; it
//! becomes the token's owner.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use fjord_common::scram::{ScramCredential, ScramMechanism, MIN_ITERATIONS};
use subtle::ConstantTimeEq;

use super::AuthenticationFailed;

/// Where the broker finds a user's SCRAM credential and the delegation tokens (the metadata
/// image).
pub trait ScramCredentials: Send + Sync {
    fn credential(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential>;
    /// The delegation token `token_id`; None when there is none or tokens are disabled.
    fn delegation_token(&self, token_id: &str) -> Option<DelegationTokenCredential>;
}

/// What a delegation token authenticates with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegationTokenCredential {
    /// The owner's name: the principal the client becomes.
    pub owner: String,
    /// The token's HMAC, whose base64 text is the password.
    pub hmac: Vec<u8>,
    /// When the token expires (ms since the epoch).
    pub expiry_ms: i64,
}

/// What the server holds between the client's first and final messages.
struct Pending {
    user: String,
    /// Authenticating with this delegation token's expiry: `user` is its owner.
    token_expiry_ms: Option<i64>,
    credential: ScramCredential,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

/// One SCRAM exchange.
pub struct ScramServer {
    mechanism: ScramMechanism,
    pending: Option<Pending>,
}

/// What a SCRAM message led to.
#[derive(Debug, PartialEq, Eq)]
pub enum ScramStep {
    /// The server's first message: the client answers it.
    Challenge(Vec<u8>),
    /// The client proved it is `user`: the server's final message goes back. With a delegation
    /// token, `user` is its owner and `token_expiry_ms` its expiry.
    Authenticated {
        user: String,
        server_final: Vec<u8>,
        token_expiry_ms: Option<i64>,
    },
}

impl ScramServer {
    pub fn new(mechanism: ScramMechanism) -> ScramServer {
        ScramServer {
            mechanism,
            pending: None,
        }
    }

    /// The next client message; `server_nonce` is fresh randomness for the first one.
    pub fn on_message(
        &mut self,
        message: &[u8],
        credentials: &dyn ScramCredentials,
        server_nonce: &str,
    ) -> Result<ScramStep, AuthenticationFailed> {
        let text = std::str::from_utf8(message).map_err(|_| self.generic())?;
        match self.pending.take() {
            None => self.client_first(text, credentials, server_nonce),
            Some(pending) => self.client_final(text, pending),
        }
    }

    /// Kafka's answer to any failed SCRAM exchange.
    fn generic(&self) -> AuthenticationFailed {
        AuthenticationFailed(format!(
            "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
            self.mechanism.name()
        ))
    }

    fn client_first(
        &mut self,
        text: &str,
        credentials: &dyn ScramCredentials,
        server_nonce: &str,
    ) -> Result<ScramStep, AuthenticationFailed> {
        // gs2-header: no channel binding ("n" or "y"), then an optional authzid.
        let mut parts = text.splitn(3, ',');
        let (Some(binding), Some(authzid), Some(bare)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(self.generic());
        };
        if binding != "n" && binding != "y" {
            return Err(self.generic());
        }
        let mut user = None;
        let mut client_nonce = None;
        let mut token = false;
        for attribute in bare.split(',') {
            match attribute.split_once('=') {
                Some(("n", name)) => user = Some(sasl_name(name).ok_or_else(|| self.generic())?),
                Some(("r", nonce)) => client_nonce = Some(nonce),
                // Kafka's one extension: the user is a delegation token's id.
                Some(("tokenauth", value)) => token = value.eq_ignore_ascii_case("true"),
                Some((key, _)) if key.len() == 1 && key != "m" => return Err(self.generic()),
                _ => {}
            }
        }
        let (Some(user), Some(client_nonce)) = (user, client_nonce) else {
            return Err(self.generic());
        };
        if client_nonce.is_empty() || user.is_empty() {
            return Err(self.generic());
        }
        if let Some(authzid) = authzid.strip_prefix("a=") {
            if sasl_name(authzid).as_deref() != Some(user.as_str()) {
                return Err(AuthenticationFailed(
                    "Authentication failed: Client requested an authorization id that is different from username"
                        .into(),
                ));
            }
        }
        let (user, credential, token_expiry_ms) = if token {
            // The token's password is its HMAC in base64; salted afresh for each exchange.
            let token = credentials
                .delegation_token(&user)
                .ok_or_else(|| self.generic())?;
            let password = BASE64.encode(&token.hmac);
            let salt = server_nonce.as_bytes().to_vec();
            let credential =
                ScramCredential::from_password(self.mechanism, &password, salt, MIN_ITERATIONS);
            (token.owner, credential, Some(token.expiry_ms))
        } else {
            let credential = credentials
                .credential(&user, self.mechanism)
                .ok_or_else(|| self.generic())?;
            (user, credential, None)
        };
        if credential.iterations < MIN_ITERATIONS {
            return Err(self.generic());
        }
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!(
            "r={nonce},s={},i={}",
            BASE64.encode(&credential.salt),
            credential.iterations
        );
        let challenge = server_first.clone().into_bytes();
        self.pending = Some(Pending {
            user,
            token_expiry_ms,
            credential,
            client_first_bare: bare.to_string(),
            server_first,
            nonce,
        });
        Ok(ScramStep::Challenge(challenge))
    }

    fn client_final(
        &mut self,
        text: &str,
        pending: Pending,
    ) -> Result<ScramStep, AuthenticationFailed> {
        // "c=<binding>,r=<nonce>[,extensions],p=<proof>": the proof comes last.
        let (without_proof, proof) = text.rsplit_once(",p=").ok_or_else(|| self.generic())?;
        let mut binding = None;
        let mut nonce = None;
        for attribute in without_proof.split(',') {
            match attribute.split_once('=') {
                Some(("c", value)) => binding = Some(value),
                Some(("r", value)) => nonce = Some(value),
                _ => {}
            }
        }
        // Without channel binding the client sends its gs2-header back: "n,," or "y,,".
        let binding = binding
            .and_then(|b| BASE64.decode(b).ok())
            .ok_or_else(|| self.generic())?;
        if !(binding.starts_with(b"n,") || binding.starts_with(b"y,")) {
            return Err(self.generic());
        }
        if nonce != Some(pending.nonce.as_str()) {
            return Err(self.generic());
        }
        let proof = BASE64.decode(proof).map_err(|_| self.generic())?;
        let auth_message = format!(
            "{},{},{}",
            pending.client_first_bare, pending.server_first, without_proof
        );
        let m = self.mechanism;
        let credential = &pending.credential;
        let client_signature = m.hmac(&credential.stored_key, auth_message.as_bytes());
        if proof.len() != client_signature.len() {
            return Err(self.generic());
        }
        let client_key: Vec<u8> = proof
            .iter()
            .zip(&client_signature)
            .map(|(p, s)| p ^ s)
            .collect();
        let proven: bool = m.hash(&client_key).ct_eq(&credential.stored_key).into();
        if !proven {
            return Err(self.generic());
        }
        let server_signature = m.hmac(&credential.server_key, auth_message.as_bytes());
        Ok(ScramStep::Authenticated {
            user: pending.user,
            server_final: format!("v={}", BASE64.encode(server_signature)).into_bytes(),
            token_expiry_ms: pending.token_expiry_ms,
        })
    }
}

/// A `saslname` decoded: `=2C` is a comma, `=3D` an equals sign, any other `=` is malformed.
fn sasl_name(name: &str) -> Option<String> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 3)?;
        out.push(match code {
            "2C" => ',',
            "3D" => '=',
            _ => return None,
        });
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's user "user" with password "pencil".
    struct Rfc;

    impl ScramCredentials for Rfc {
        fn credential(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
            let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
            (user == "user")
                .then(|| ScramCredential::from_password(mechanism, "pencil", salt, 4096))
        }

        fn delegation_token(&self, _token_id: &str) -> Option<DelegationTokenCredential> {
            None
        }
    }

    const SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";

    #[test]
    fn the_rfc_7677_exchange_is_served() {
        let mut server = ScramServer::new(ScramMechanism::Sha256);
        let first = server
            .on_message(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO", &Rfc, SERVER_NONCE)
            .unwrap();
        assert_eq!(
            first,
            ScramStep::Challenge(
                b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
                    .to_vec()
            )
        );
        let last = server
            .on_message(
                b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
                &Rfc,
                "unused",
            )
            .unwrap();
        assert_eq!(
            last,
            ScramStep::Authenticated {
                user: "user".into(),
                server_final: b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=".to_vec(),
                token_expiry_ms: None,
            }
        );
    }

    #[test]
    fn a_wrong_proof_an_unknown_user_and_a_changed_nonce_are_refused_alike() {
        let first = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
        let generic = "invalid credentials with SASL mechanism SCRAM-SHA-256";
        for final_message in [
            // A proof made with another password.
            &b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAAZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="[..],
            // The server's part of the nonce changed.
            b"c=biws,r=rOprNGfwEbeRWgbNEkqO,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
            // No proof.
            b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        ] {
            let mut server = ScramServer::new(ScramMechanism::Sha256);
            server.on_message(first, &Rfc, SERVER_NONCE).unwrap();
            let refused = server.on_message(final_message, &Rfc, "").unwrap_err();
            assert!(refused.0.contains(generic), "{refused}");
        }
        let mut server = ScramServer::new(ScramMechanism::Sha256);
        let refused = server
            .on_message(b"n,,n=nobody,r=abc", &Rfc, SERVER_NONCE)
            .unwrap_err();
        assert!(refused.0.contains(generic), "{refused}");
        // The other mechanism's credential does not exist for it either way, and garbage.
        for garbage in [
            &b"p=tls-unique,,n=user,r=abc"[..],
            b"n,,r=abc",
            b"\xff",
            b"n,,n=us=ZZer,r=a",
        ] {
            let mut server = ScramServer::new(ScramMechanism::Sha512);
            assert!(server.on_message(garbage, &Rfc, "x").is_err());
        }
        let mut server = ScramServer::new(ScramMechanism::Sha256);
        let refused = server
            .on_message(b"n,a=admin,n=user,r=abc", &Rfc, "x")
            .unwrap_err();
        assert!(refused.0.contains("authorization id"), "{refused}");
    }

    #[test]
    fn sasl_names_decode_their_escapes() {
        assert_eq!(sasl_name("a=2Cb=3Dc").as_deref(), Some("a,b=c"));
        assert_eq!(sasl_name("plain").as_deref(), Some("plain"));
        assert_eq!(sasl_name("bad=2").as_deref(), None);
        assert_eq!(sasl_name("bad=41").as_deref(), None);
    }
}
