//! SASL/PLAIN (RFC 4616) on the broker side: the client's one message is
//! `[authzid] NUL authcid NUL passwd`, checked against the listener's JAAS users. Refusals carry
//! the messages Kafka's clients print.

use std::collections::BTreeMap;

use subtle::ConstantTimeEq;

use super::AuthenticationFailed;

/// The user `token` authenticates, or why it does not.
pub fn authenticate(
    users: &BTreeMap<String, String>,
    token: &[u8],
) -> Result<String, AuthenticationFailed> {
    let refuse = |message: &str| AuthenticationFailed(message.to_string());
    let text =
        std::str::from_utf8(token).map_err(|_| refuse("Invalid SASL/PLAIN response: not UTF-8"))?;
    let parts: Vec<&str> = text.splitn(4, '\0').collect();
    let [authzid, username, password] = parts[..] else {
        return Err(AuthenticationFailed(format!(
            "Invalid SASL/PLAIN response: expected 3 tokens, got {}",
            parts.len()
        )));
    };
    if username.is_empty() {
        return Err(refuse("Authentication failed: username not specified"));
    }
    if password.is_empty() {
        return Err(refuse("Authentication failed: password not specified"));
    }
    // Compared in constant time, so that the time taken tells nothing of how much matched; an
    // unknown user is compared against its own password, taking as long.
    let (expected, known) = match users.get(username) {
        Some(expected) => (expected.as_bytes(), true),
        None => (password.as_bytes(), false),
    };
    let matches: bool = expected.ct_eq(password.as_bytes()).into();
    if !(known && matches) {
        return Err(refuse(
            "Authentication failed: Invalid username or password",
        ));
    }
    if !authzid.is_empty() && authzid != username {
        return Err(refuse(
            "Authentication failed: Client requested an authorization id that is different from username",
        ));
    }
    Ok(username.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users() -> BTreeMap<String, String> {
        [("alice", "alice-pw"), ("bob", "bob-pw")]
            .into_iter()
            .map(|(u, p)| (u.to_string(), p.to_string()))
            .collect()
    }

    #[test]
    fn a_known_user_with_its_password_is_authenticated() {
        assert_eq!(
            authenticate(&users(), b"\0alice\0alice-pw").as_deref(),
            Ok("alice")
        );
        assert_eq!(
            authenticate(&users(), b"bob\0bob\0bob-pw").as_deref(),
            Ok("bob")
        );
    }

    #[test]
    fn each_refusal_says_why_as_kafka_does() {
        for (token, message) in [
            (&b"alice\0alice-pw"[..], "expected 3 tokens, got 2"),
            (b"\0alice\0alice-pw\0x", "expected 3 tokens, got 4"),
            (b"\0\0alice-pw", "username not specified"),
            (b"\0alice\0", "password not specified"),
            (b"\0alice\0bob-pw", "Invalid username or password"),
            (b"\0carol\0carol", "Invalid username or password"),
            (
                b"bob\0alice\0alice-pw",
                "authorization id that is different",
            ),
            (b"\0\xff\0x", "not UTF-8"),
        ] {
            let error = authenticate(&users(), token).unwrap_err();
            assert!(error.0.contains(message), "{token:?}: {error}");
        }
    }
}
