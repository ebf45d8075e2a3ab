//! The web console a broker serves on its HTTP listener: a small single-page app embedded in
//! the binary (`assets/`), and the JSON API under `/api/` it reads. The API holds no view of
//! the cluster of its own: every answer comes from Kafka requests made with `fjord-client` to
//! this broker's listener — as the user who logged in when the cluster has an authorizer — so
//! the console sees exactly what that principal's ACLs let it see, and never more.
//!
//! HTTP itself (sockets, parsing, limits) stays with the broker; this crate takes a parsed
//! [`Request`] and returns a [`Reply`].
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
#![cfg_attr(
    test,
    allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

mod api;
mod assets;
mod session;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fjord_client::{Client, ClientConfig, ClientError, Security};
use serde_json::{json, Value};

use session::{Actor, Sessions};

/// Where and how the console reaches the cluster, and what it lets users do.
#[derive(Debug, Clone)]
pub struct ConsoleSettings {
    /// `host:port` of this broker's listener the console's client connects to.
    pub bootstrap: String,
    /// The listener's TLS, and when nobody logs in the SASL login the console uses itself.
    pub security: Security,
    /// Some: users log in with one of these SASL mechanisms (PLAIN, SCRAM-SHA-256,
    /// SCRAM-SHA-512) and the console acts as them. None: nobody logs in.
    pub login_mechanisms: Option<Vec<String>>,
    /// Refuses every change (offset resets) when true.
    pub read_only: bool,
    /// This broker's node id, shown as the node serving the console.
    pub node_id: i32,
}

/// This broker's traffic counters since it started, for the throughput charts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub messages_in: u64,
}

/// Reads this broker's traffic counters.
pub type TrafficSource = Arc<dyn Fn() -> Traffic + Send + Sync>;

/// An HTTP request the broker parsed.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    /// The query string without its `?`.
    pub query: &'a str,
    /// The `Cookie` header.
    pub cookie: Option<&'a str>,
    /// Whether the request carries the `X-Fjord-Console` header the app sets on every change:
    /// a cross-site form cannot set it, so a change without it is refused.
    pub from_console: bool,
    /// Whether it came over TLS: the session cookie is then sent over TLS only.
    pub https: bool,
    pub body: Bytes,
}

/// What to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Bytes,
    /// A `Set-Cookie` header value.
    pub set_cookie: Option<String>,
}

impl Reply {
    fn json(status: u16, value: &Value) -> Reply {
        Reply {
            status,
            content_type: "application/json",
            body: Bytes::from(value.to_string()),
            set_cookie: None,
        }
    }

    fn error(status: u16, message: impl Into<String>) -> Reply {
        Reply::json(status, &json!({ "error": message.into() }))
    }
}

/// The largest request body the console reads (a login or an offset reset).
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// The console of one broker.
pub struct Console {
    settings: ConsoleSettings,
    traffic: TrafficSource,
    sessions: Sessions,
    /// The console's own client, used when nobody logs in.
    shared: Actor,
}

impl Console {
    pub fn new(settings: ConsoleSettings, traffic: TrafficSource) -> Console {
        let shared = Actor::new(String::new(), settings.security.sasl.clone());
        Console {
            settings,
            traffic,
            sessions: Sessions::default(),
            shared,
        }
    }

    /// Whether `path` is the console's to answer.
    pub fn serves(path: &str) -> bool {
        path == "/"
            || path == "/console"
            || path.starts_with("/console/")
            || path.starts_with("/api/")
    }

    /// Answers a request for one of the paths [`Console::serves`].
    pub async fn answer(&self, request: Request<'_>) -> Reply {
        if !request.path.starts_with("/api/") {
            return assets::answer(request.path);
        }
        let changes = request.method != "GET" && request.method != "HEAD";
        if changes && !request.from_console {
            return Reply::error(403, "changes are accepted from the console only");
        }
        match (request.method, request.path) {
            ("GET", "/api/session") => self.describe_session(&request),
            ("POST", "/api/login") => self.login(&request).await,
            ("POST", "/api/logout") => self.logout(&request),
            _ => self.act(&request).await,
        }
    }

    fn describe_session(&self, request: &Request<'_>) -> Reply {
        let user = self
            .session_of(request)
            .map(|actor| Value::String(actor.user.clone()))
            .unwrap_or(Value::Null);
        Reply::json(
            200,
            &json!({
                "login_required": self.settings.login_mechanisms.is_some(),
                "mechanisms": self.settings.login_mechanisms.clone().unwrap_or_default(),
                "user": user,
                "read_only": self.settings.read_only,
                "node_id": self.settings.node_id,
            }),
        )
    }

    /// Logs in by opening a connection with the user's SASL credentials: the broker decides.
    async fn login(&self, request: &Request<'_>) -> Reply {
        let Some(mechanisms) = &self.settings.login_mechanisms else {
            return Reply::error(400, "this console has no log-in: authorization is off");
        };
        let Ok(form) = serde_json::from_slice::<Value>(&request.body) else {
            return Reply::error(400, "the log-in is not JSON");
        };
        let field = |name: &str| form.get(name).and_then(Value::as_str).unwrap_or("");
        let (mechanism, username, password) =
            (field("mechanism"), field("username"), field("password"));
        if username.is_empty() || !mechanisms.iter().any(|m| m == mechanism) {
            return Reply::error(400, "give a user name and one of the offered mechanisms");
        }
        let Some(login) = session::sasl_login(mechanism, username, password) else {
            return Reply::error(
                400,
                format!("mechanism {mechanism} is not one the console speaks"),
            );
        };
        let actor = Actor::new(username.to_string(), Some(login));
        if let Err(error) = actor.connect(self.target(&actor)).await {
            tracing::info!(user = username, %error, "console log-in refused");
            return Reply::error(401, format!("log-in failed: {error}"));
        }
        let token = self.sessions.open(actor);
        let mut reply = Reply::json(200, &json!({ "user": username }));
        reply.set_cookie = Some(session::cookie(&token, session::IDLE_EXPIRY, request.https));
        reply
    }

    fn logout(&self, request: &Request<'_>) -> Reply {
        if let Some(token) = session::token_of(request.cookie) {
            self.sessions.close(token);
        }
        let mut reply = Reply::json(200, &json!({}));
        reply.set_cookie = Some(session::cookie("", Duration::ZERO, request.https));
        reply
    }

    fn session_of(&self, request: &Request<'_>) -> Option<Arc<Actor>> {
        session::token_of(request.cookie).and_then(|token| self.sessions.get(token))
    }

    /// Serves an API call as the request's principal: the logged-in user, or the console
    /// itself when nobody logs in.
    async fn act(&self, request: &Request<'_>) -> Reply {
        if request.method != "GET" && self.settings.read_only {
            return Reply::error(403, "the console is read-only (console.read.only=true)");
        }
        let session;
        let actor = if self.settings.login_mechanisms.is_some() {
            match self.session_of(request) {
                Some(found) => {
                    session = found;
                    &*session
                }
                None => return Reply::error(401, "log in first"),
            }
        } else {
            &self.shared
        };
        let params = api::Params::parse(request.query);
        let mut client = match actor.client(self.target(actor)).await {
            Ok(client) => client,
            Err(error) => return Reply::error(502, format!("cannot reach the cluster: {error}")),
        };
        let Some(connected) = client.as_mut() else {
            return Reply::error(502, "cannot reach the cluster");
        };
        let call = api::Call {
            method: request.method,
            path: request.path,
            params: &params,
            body: &request.body,
            traffic: &self.traffic,
        };
        match api::route(connected, call).await {
            Ok(value) => Reply::json(200, &value),
            Err(error) => {
                if error.connection_lost {
                    // Opened afresh by the next call.
                    *client = None;
                }
                Reply::error(error.status, error.message)
            }
        }
    }

    fn target(&self, actor: &Actor) -> Target {
        Target {
            bootstrap: self.settings.bootstrap.clone(),
            config: ClientConfig {
                client_id: format!("fjord-console-{}", self.settings.node_id),
                connect_timeout: Duration::from_secs(5),
                request_timeout: Duration::from_secs(15),
                max_response_bytes: 64 * 1024 * 1024,
                security: Security {
                    tls: self.settings.security.tls.clone(),
                    sasl: actor.login.clone(),
                },
            },
        }
    }
}

/// Where an actor's client connects, and how.
struct Target {
    bootstrap: String,
    config: ClientConfig,
}

impl Target {
    async fn connect(self) -> Result<Client, ClientError> {
        Client::connect_with(&self.bootstrap, self.config).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn console(read_only: bool, login: bool) -> Console {
        let settings = ConsoleSettings {
            // Nothing listens here: a call that reached the cluster would fail with 502.
            bootstrap: "127.0.0.1:1".to_string(),
            security: Security::default(),
            login_mechanisms: login.then(|| vec!["PLAIN".to_string()]),
            read_only,
            node_id: 1,
        };
        Console::new(settings, Arc::new(Traffic::default))
    }

    fn request<'a>(method: &'a str, path: &'a str, from_console: bool) -> Request<'a> {
        Request {
            method,
            path,
            query: "id=g",
            cookie: None,
            from_console,
            https: false,
            body: Bytes::from_static(b"{\"to\":\"earliest\"}"),
        }
    }

    #[tokio::test]
    async fn a_read_only_console_refuses_changes_before_reaching_the_cluster() {
        let reply = console(true, false)
            .answer(request("POST", "/api/group/reset", true))
            .await;
        assert_eq!(reply.status, 403, "{:?}", reply.body);
        let reply = console(false, false)
            .answer(request("POST", "/api/group/reset", true))
            .await;
        assert_eq!(
            reply.status, 502,
            "a writable console goes on to the cluster"
        );
    }

    #[tokio::test]
    async fn changes_without_the_console_header_are_refused() {
        let reply = console(false, false)
            .answer(request("POST", "/api/group/reset", false))
            .await;
        assert_eq!(reply.status, 403);
    }

    #[tokio::test]
    async fn with_log_in_nothing_is_served_without_a_session() {
        let console = console(true, true);
        let reply = console.answer(request("GET", "/api/topics", false)).await;
        assert_eq!(reply.status, 401);
        let reply = console.answer(request("GET", "/api/session", false)).await;
        let session: Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(session["login_required"], true);
        assert_eq!(session["user"], Value::Null);
        assert_eq!(session["mechanisms"], json!(["PLAIN"]));
    }
}
