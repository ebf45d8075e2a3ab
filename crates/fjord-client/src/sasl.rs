//! The client's half of a SASL exchange, sans-IO: the tokens a client sends in SaslAuthenticate
//! for PLAIN (RFC 4616), SCRAM-SHA-256/512 (RFC 5802, RFC 7677) and OAUTHBEARER (RFC 7628), and
//! its checks of the broker's answers (a SCRAM server must prove it knows the credential too).

use std::time::Duration;

use base64::engine::general_purpose::{STANDARD as BASE64, URL_SAFE_NO_PAD as BASE64URL};
use base64::Engine;
use fjord_common::scram::ScramMechanism;

/// How a connection authenticates, and as whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SaslLogin {
    /// PLAIN: the user name and password in one token.
    Plain { username: String, password: String },
    /// SCRAM-SHA-256 or SCRAM-SHA-512: a proof of the password, and the broker's proof back.
    Scram {
        mechanism: ScramMechanism,
        username: String,
        password: String,
    },
    /// OAUTHBEARER with a token of this client's making.
    OAuthBearer(OAuthToken),
}

/// The bearer token an OAUTHBEARER login sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OAuthToken {
    /// A token obtained elsewhere, sent as it is.
    Given(String),
    /// An unsigned JWS (`alg` `none`) naming `principal` in its `sub` claim and valid for
    /// `lifetime` from each connection's login: what Kafka's unsecured login callback makes for
    /// development clusters, which brokers check with their unsecured validator.
    Unsecured {
        principal: String,
        lifetime: Duration,
    },
}

impl SaslLogin {
    /// The mechanism's name, as SaslHandshake carries it.
    pub fn mechanism_name(&self) -> &'static str {
        match self {
            SaslLogin::Plain { .. } => "PLAIN",
            SaslLogin::Scram { mechanism, .. } => mechanism.name(),
            SaslLogin::OAuthBearer(_) => "OAUTHBEARER",
        }
    }
}

/// Where an exchange stands.
pub(crate) struct SaslClient {
    login: SaslLogin,
    state: State,
}

enum State {
    Start,
    /// PLAIN or OAUTHBEARER sent their one token; the broker's answer ends the exchange.
    Sent,
    /// SCRAM sent its first message; the server's first message comes next.
    ScramFirstSent {
        nonce: String,
        first_bare: String,
    },
    /// SCRAM sent its proof; the server's signature comes next, to be checked against this.
    ScramFinalSent {
        server_signature: Vec<u8>,
    },
    Done,
}

impl SaslClient {
    pub(crate) fn new(login: SaslLogin) -> SaslClient {
        SaslClient {
            login,
            state: State::Start,
        }
    }

    /// The first token, sent unprompted.
    pub(crate) fn first(&mut self, now_ms: i64) -> Vec<u8> {
        let (token, state) = match &self.login {
            SaslLogin::Plain { username, password } => (
                format!("\0{username}\0{password}").into_bytes(),
                State::Sent,
            ),
            SaslLogin::Scram { username, .. } => {
                let nonce = client_nonce();
                let first_bare = format!("n={},r={nonce}", escape_name(username));
                (
                    format!("n,,{first_bare}").into_bytes(),
                    State::ScramFirstSent { nonce, first_bare },
                )
            }
            SaslLogin::OAuthBearer(token) => {
                let token = match token {
                    OAuthToken::Given(token) => token.clone(),
                    OAuthToken::Unsecured {
                        principal,
                        lifetime,
                    } => unsecured_jws(principal, *lifetime, now_ms),
                };
                (
                    format!("n,,\x01auth=Bearer {token}\x01\x01").into_bytes(),
                    State::Sent,
                )
            }
        };
        self.state = state;
        token
    }

    /// The next token for the broker's `answer`, `None` once the exchange is complete, or why the
    /// broker's answer is not acceptable.
    pub(crate) fn on_answer(&mut self, answer: &[u8]) -> Result<Option<Vec<u8>>, String> {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Sent if answer.is_empty() => Ok(None),
            // An OAUTHBEARER broker that refuses a token says why in a JSON challenge.
            State::Sent => Err(format!(
                "the broker refused the token: {}",
                String::from_utf8_lossy(answer)
            )),
            State::ScramFirstSent { nonce, first_bare } => {
                let SaslLogin::Scram {
                    mechanism,
                    password,
                    ..
                } = &self.login
                else {
                    return Err("SCRAM state without a SCRAM login".into());
                };
                let (token, server_signature) =
                    scram_final(*mechanism, password, &nonce, &first_bare, answer)?;
                self.state = State::ScramFinalSent { server_signature };
                Ok(Some(token))
            }
            State::ScramFinalSent { server_signature } => {
                let text = std::str::from_utf8(answer)
                    .map_err(|_| "the server's final SCRAM message is not UTF-8".to_string())?;
                if let Some(error) = text.strip_prefix("e=") {
                    return Err(format!("the server refused the SCRAM proof: {error}"));
                }
                let signature = text
                    .strip_prefix("v=")
                    .and_then(|v| BASE64.decode(v).ok())
                    .ok_or_else(|| format!("unreadable final SCRAM message {text:?}"))?;
                if signature != server_signature {
                    return Err(
                        "the server's SCRAM signature is wrong: it does not know the \
                                credential"
                            .into(),
                    );
                }
                Ok(None)
            }
            State::Start | State::Done => Err("no SASL token was expected".into()),
        }
    }
}

/// The client's final SCRAM message for `server_first`, and the signature the server must send
/// back.
fn scram_final(
    mechanism: ScramMechanism,
    password: &str,
    nonce: &str,
    first_bare: &str,
    server_first: &[u8],
) -> Result<(Vec<u8>, Vec<u8>), String> {
    let server_first = std::str::from_utf8(server_first)
        .map_err(|_| "the server's first SCRAM message is not UTF-8".to_string())?;
    let (mut combined, mut salt, mut iterations) = (None, None, None);
    for attribute in server_first.split(',') {
        match attribute.split_once('=') {
            Some(("r", value)) => combined = Some(value),
            Some(("s", value)) => salt = BASE64.decode(value).ok(),
            Some(("i", value)) => iterations = value.parse::<u32>().ok(),
            _ => {}
        }
    }
    let unreadable = || format!("unreadable first SCRAM message {server_first:?}");
    let combined = combined.ok_or_else(unreadable)?;
    let salt = salt.ok_or_else(unreadable)?;
    // Kafka's bounds on iterations; more would let a broker make the client spin.
    let iterations = iterations
        .filter(|i| (4096..=16384).contains(i))
        .ok_or_else(unreadable)?;
    if !combined.starts_with(nonce) || combined.len() == nonce.len() {
        return Err("the server's SCRAM nonce does not extend the client's".into());
    }
    let without_proof = format!("c=biws,r={combined}");
    let auth_message = format!("{first_bare},{server_first},{without_proof}");
    let salted = mechanism.salted_password(password.as_bytes(), &salt, iterations);
    let client_key = mechanism.hmac(&salted, b"Client Key");
    let client_signature = mechanism.hmac(&mechanism.hash(&client_key), auth_message.as_bytes());
    let proof: Vec<u8> = client_key
        .iter()
        .zip(&client_signature)
        .map(|(k, s)| k ^ s)
        .collect();
    let server_key = mechanism.hmac(&salted, b"Server Key");
    let server_signature = mechanism.hmac(&server_key, auth_message.as_bytes());
    let token = format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes();
    Ok((token, server_signature))
}

/// A `saslname`: `,` and `=` escaped as RFC 5802 says.
fn escape_name(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

/// A fresh client nonce: 24 letters and digits.
fn client_nonce() -> String {
    use rand::Rng;
    rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(24)
        .map(char::from)
        .collect()
}

/// An unsigned JWS for `principal`, issued at `now_ms` and expiring `lifetime` later.
fn unsecured_jws(principal: &str, lifetime: Duration, now_ms: i64) -> String {
    let header = BASE64URL.encode(br#"{"alg":"none"}"#);
    let issued = now_ms as f64 / 1000.0;
    let expires = issued + lifetime.as_secs_f64();
    let claims = serde_json::json!({ "sub": principal, "iat": issued, "exp": expires });
    format!("{header}.{}.", BASE64URL.encode(claims.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_sends_one_token_and_ends_on_an_empty_answer() {
        let mut client = SaslClient::new(SaslLogin::Plain {
            username: "alice".into(),
            password: "pw".into(),
        });
        assert_eq!(client.first(0), b"\0alice\0pw");
        assert_eq!(client.on_answer(b""), Ok(None));
        assert!(client.on_answer(b"").is_err(), "nothing after the end");
    }

    /// The exchange checked against the server side's arithmetic, computed here independently
    /// from the stored credential.
    #[test]
    fn scram_proves_the_password_and_checks_the_server_signature() {
        let m = ScramMechanism::Sha512;
        let credential = fjord_common::scram::ScramCredential::from_password(
            m,
            "pw",
            b"salt-salt".to_vec(),
            4096,
        );
        let mut client = SaslClient::new(SaslLogin::Scram {
            mechanism: m,
            username: "al,ice".into(),
            password: "pw".into(),
        });
        let first = String::from_utf8(client.first(0)).unwrap();
        let bare = first.strip_prefix("n,,").unwrap().to_string();
        assert!(bare.starts_with("n=al=2Cice,r="), "{bare}");
        let nonce = bare.split_once(",r=").unwrap().1;
        let server_first = format!("r={nonce}SERVER,s={},i=4096", BASE64.encode(b"salt-salt"));
        let last = client.on_answer(server_first.as_bytes()).unwrap().unwrap();
        let last = String::from_utf8(last).unwrap();
        let (without_proof, proof) = last.rsplit_once(",p=").unwrap();
        assert_eq!(without_proof, format!("c=biws,r={nonce}SERVER"));
        let auth = format!("{bare},{server_first},{without_proof}");
        let signature = m.hmac(&credential.stored_key, auth.as_bytes());
        let client_key: Vec<u8> = BASE64
            .decode(proof)
            .unwrap()
            .iter()
            .zip(&signature)
            .map(|(p, s)| p ^ s)
            .collect();
        assert_eq!(m.hash(&client_key), credential.stored_key, "proof holds");
        let server_final = format!(
            "v={}",
            BASE64.encode(m.hmac(&credential.server_key, auth.as_bytes()))
        );
        let mut forged = client_clone_at_final(&client);
        assert_eq!(client.on_answer(server_final.as_bytes()), Ok(None));
        assert!(forged
            .on_answer(format!("v={}", BASE64.encode([0u8; 64])).as_bytes())
            .unwrap_err()
            .contains("does not know the credential"));
    }

    fn client_clone_at_final(client: &SaslClient) -> SaslClient {
        let State::ScramFinalSent { server_signature } = &client.state else {
            panic!("not at the final step")
        };
        SaslClient {
            login: client.login.clone(),
            state: State::ScramFinalSent {
                server_signature: server_signature.clone(),
            },
        }
    }

    #[test]
    fn scram_refuses_a_server_that_does_not_extend_the_nonce_or_asks_too_many_iterations() {
        for server_first in [
            "r=OTHER,s=c2FsdA==,i=4096".to_string(),
            "r={nonce},s=c2FsdA==,i=4096".to_string(),
            "r={nonce}X,s=c2FsdA==,i=100000000".to_string(),
            "r={nonce}X,i=4096".to_string(),
        ] {
            let mut client = SaslClient::new(SaslLogin::Scram {
                mechanism: ScramMechanism::Sha256,
                username: "alice".into(),
                password: "pw".into(),
            });
            let first = String::from_utf8(client.first(0)).unwrap();
            let nonce = first.split_once(",r=").unwrap().1.to_string();
            let answer = server_first.replace("{nonce}", &nonce);
            assert!(client.on_answer(answer.as_bytes()).is_err(), "{answer}");
        }
    }

    #[test]
    fn an_unsecured_oauthbearer_token_names_the_principal_and_expires() {
        let mut client = SaslClient::new(SaslLogin::OAuthBearer(OAuthToken::Unsecured {
            principal: "broker".into(),
            lifetime: Duration::from_secs(60),
        }));
        let first = String::from_utf8(client.first(1_000_000)).unwrap();
        let token = first
            .strip_prefix("n,,\x01auth=Bearer ")
            .and_then(|t| t.strip_suffix("\x01\x01"))
            .unwrap();
        let claims = token.split('.').nth(1).unwrap();
        let claims: serde_json::Value =
            serde_json::from_slice(&BASE64URL.decode(claims).unwrap()).unwrap();
        assert_eq!(claims["sub"], "broker");
        assert_eq!(claims["exp"].as_f64(), Some(1060.0));
        assert!(client.on_answer(br#"{"status":"invalid_token"}"#).is_err());
    }
}
