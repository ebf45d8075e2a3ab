//! Who the console acts as: the logged-in users' sessions, each with its own client connected
//! with the user's SASL credentials, kept in memory, bounded in number and ended when idle.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fjord_client::{Client, ClientError, SaslLogin};
use fjord_common::scram::ScramMechanism;
use rand::Rng;
use tokio::sync::{Mutex as AsyncMutex, MutexGuard};

use crate::Target;

/// Sessions kept at once; opening one more ends the least recently used.
const MAX_SESSIONS: usize = 256;
/// A session unused this long is ended.
pub(crate) const IDLE_EXPIRY: Duration = Duration::from_secs(30 * 60);
const COOKIE: &str = "fjord_console";

/// A principal the console acts as, with its client (connected on first use, one call at a
/// time).
pub(crate) struct Actor {
    /// The user name given at log-in; empty for the console's own actor.
    pub(crate) user: String,
    pub(crate) login: Option<SaslLogin>,
    client: AsyncMutex<Option<Client>>,
    last_used: Mutex<Instant>,
}

impl Actor {
    pub(crate) fn new(user: String, login: Option<SaslLogin>) -> Actor {
        Actor {
            user,
            login,
            client: AsyncMutex::new(None),
            last_used: Mutex::new(Instant::now()),
        }
    }

    /// Connects now, failing as the broker refuses the login.
    pub(crate) async fn connect(&self, target: Target) -> Result<(), ClientError> {
        let client = target.connect().await?;
        *self.client.lock().await = Some(client);
        Ok(())
    }

    /// The actor's client, connected if it was not; the guard keeps other calls waiting.
    pub(crate) async fn client(
        &self,
        target: Target,
    ) -> Result<MutexGuard<'_, Option<Client>>, ClientError> {
        let mut client = self.client.lock().await;
        if client.is_none() {
            *client = Some(target.connect().await?);
        }
        Ok(client)
    }

    fn idle_since(&self) -> Instant {
        *fjord_common::lock(&self.last_used)
    }

    fn touch(&self, now: Instant) {
        *fjord_common::lock(&self.last_used) = now;
    }
}

/// The SASL login for `mechanism` with a user name and password.
pub(crate) fn sasl_login(mechanism: &str, username: &str, password: &str) -> Option<SaslLogin> {
    let (username, password) = (username.to_string(), password.to_string());
    match mechanism {
        "PLAIN" => Some(SaslLogin::Plain { username, password }),
        _ => ScramMechanism::from_name(mechanism).map(|mechanism| SaslLogin::Scram {
            mechanism,
            username,
            password,
        }),
    }
}

/// The logged-in sessions by their cookie's token.
#[derive(Default)]
pub(crate) struct Sessions {
    by_token: Mutex<HashMap<String, Arc<Actor>>>,
}

impl Sessions {
    /// Keeps `actor` under a new random token, which it returns.
    pub(crate) fn open(&self, actor: Actor) -> String {
        let token: [u8; 24] = rand::rng().random();
        let token: String = token.iter().map(|b| format!("{b:02x}")).collect();
        let now = Instant::now();
        let mut sessions = fjord_common::lock(&self.by_token);
        sessions.retain(|_, actor| now.duration_since(actor.idle_since()) < IDLE_EXPIRY);
        if sessions.len() >= MAX_SESSIONS {
            let oldest = sessions
                .iter()
                .min_by_key(|(_, actor)| actor.idle_since())
                .map(|(token, _)| token.clone());
            if let Some(oldest) = oldest {
                sessions.remove(&oldest);
            }
        }
        sessions.insert(token.clone(), Arc::new(actor));
        token
    }

    /// The session under `token` if it has not expired, marked used.
    pub(crate) fn get(&self, token: &str) -> Option<Arc<Actor>> {
        let now = Instant::now();
        let mut sessions = fjord_common::lock(&self.by_token);
        let actor = sessions.get(token)?.clone();
        if now.duration_since(actor.idle_since()) >= IDLE_EXPIRY {
            sessions.remove(token);
            return None;
        }
        actor.touch(now);
        Some(actor)
    }

    pub(crate) fn close(&self, token: &str) {
        fjord_common::lock(&self.by_token).remove(token);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        fjord_common::lock(&self.by_token).len()
    }
}

/// The session token in a `Cookie` header.
pub(crate) fn token_of(cookie: Option<&str>) -> Option<&str> {
    cookie?
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
        .filter(|value| !value.is_empty())
}

/// A `Set-Cookie` value holding `token` for `max_age` (zero: remove it). Not readable by
/// scripts, never sent with another site's requests, and, given over TLS, never sent without it.
pub(crate) fn cookie(token: &str, max_age: Duration, secure: bool) -> String {
    format!(
        "{COOKIE}={token}; Path=/; Max-Age={}; HttpOnly; SameSite=Strict{}",
        max_age.as_secs(),
        if secure { "; Secure" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_read_from_among_other_cookies() {
        assert_eq!(token_of(Some("a=1; fjord_console=abc; b=2")), Some("abc"));
        assert_eq!(token_of(Some("fjord_console=")), None);
        assert_eq!(token_of(Some("other=abc")), None);
        assert_eq!(token_of(None), None);
    }

    #[test]
    fn sessions_are_bounded_and_a_closed_one_is_gone() {
        let sessions = Sessions::default();
        let first = sessions.open(Actor::new("u0".into(), None));
        for i in 1..MAX_SESSIONS + 10 {
            sessions.open(Actor::new(format!("u{i}"), None));
        }
        assert_eq!(sessions.len(), MAX_SESSIONS);
        // The least recently used went first.
        assert!(sessions.get(&first).is_none());
        let token = sessions.open(Actor::new("last".into(), None));
        assert_eq!(
            sessions.get(&token).map(|a| a.user.clone()),
            Some("last".into())
        );
        sessions.close(&token);
        assert!(sessions.get(&token).is_none());
    }

    #[test]
    fn logins_are_made_for_the_mechanisms_the_console_speaks() {
        assert!(matches!(
            sasl_login("PLAIN", "alice", "pw"),
            Some(SaslLogin::Plain { .. })
        ));
        assert!(matches!(
            sasl_login("SCRAM-SHA-512", "alice", "pw"),
            Some(SaslLogin::Scram { .. })
        ));
        assert!(sasl_login("GSSAPI", "alice", "pw").is_none());
    }
}
