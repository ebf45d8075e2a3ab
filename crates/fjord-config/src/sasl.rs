//! A SASL listener's settings from Kafka's keys: `sasl.enabled.mechanisms` (overridable per
//! listener as `listener.name.<listener>.sasl.enabled.mechanisms`) and, per mechanism, the JAAS
//! text the broker reads its users from, `listener.name.<listener>.<mechanism>.sasl.jaas.config`
//! (Kafka's brokers read no unprefixed `sasl.jaas.config`; fjord has no JAAS file either). Pure:
//! parsed and checked here, used by the broker's authenticator.

use std::collections::BTreeMap;
use std::path::PathBuf;

use fjord_common::scram::ScramMechanism;

use crate::tls::LinkTls;
use crate::{invalid, listener_value, split_list, ConfigError, Unreadable};

/// The login module a PLAIN listener's JAAS text must name.
pub const PLAIN_LOGIN_MODULE: &str = "org.apache.kafka.common.security.plain.PlainLoginModule";
/// The login module a SCRAM listener's JAAS text names, when it gives one.
pub const SCRAM_LOGIN_MODULE: &str = "org.apache.kafka.common.security.scram.ScramLoginModule";
/// The login module an OAUTHBEARER listener's JAAS text must name.
pub const OAUTHBEARER_LOGIN_MODULE: &str =
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule";

/// A SASL mechanism fjord serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SaslMechanism {
    /// RFC 4616: the user name and password in one message, checked against the JAAS users.
    Plain,
    /// RFC 5802/7677: a proof of the password, checked against the credentials the cluster
    /// keeps in its metadata log (AlterUserScramCredentials).
    Scram(ScramMechanism),
    /// RFC 7628: a bearer token, validated as Kafka's default unsecured validator does.
    OAuthBearer,
}

impl SaslMechanism {
    /// The mechanism's name on the wire (SaslHandshake) and in `sasl.enabled.mechanisms`.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::Scram(scram) => scram.name(),
            SaslMechanism::OAuthBearer => "OAUTHBEARER",
        }
    }
}

/// A SCRAM user the node makes sure exists when it starts (`fjord server --add-scram`, in the form
/// `kafka-storage format --add-scram` takes: `SCRAM-SHA-256=[name=alice,password=alice-secret]`,
/// optionally with `iterations=8192`), so that a cluster can be reached over SCRAM alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramUser {
    pub mechanism: ScramMechanism,
    pub name: String,
    pub password: String,
    pub iterations: i32,
}

impl ScramUser {
    /// `<MECHANISM>=[name=<user>,password=<password>(,iterations=<n>)]`, or why it is not.
    pub fn parse(text: &str) -> Result<ScramUser, Unreadable> {
        let form = || {
            Unreadable(
                "expected SCRAM-SHA-256=[name=<user>,password=<password>] (or SCRAM-SHA-512)"
                    .to_string(),
            )
        };
        let (mechanism, rest) = text.trim().split_once('=').ok_or_else(form)?;
        let mechanism = ScramMechanism::from_name(mechanism.trim()).ok_or_else(|| {
            Unreadable(format!("unknown SCRAM mechanism {mechanism:?}; {}", form()))
        })?;
        let fields = rest
            .trim()
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .ok_or_else(form)?;
        let (mut name, mut password, mut iterations) = (None, None, 4096);
        for field in fields.split(',') {
            let (key, value) = field.split_once('=').ok_or_else(form)?;
            let value = value.trim().trim_matches('"');
            match key.trim() {
                "name" => name = Some(value.to_string()),
                "password" => password = Some(value.to_string()),
                "iterations" => {
                    iterations = value
                        .parse()
                        .ok()
                        .filter(|i| (4096..=16384).contains(i))
                        .ok_or_else(|| {
                            Unreadable("iterations must be between 4096 and 16384".to_string())
                        })?
                }
                other => return Err(Unreadable(format!("unknown field {other:?}; {}", form()))),
            }
        }
        match (
            name.filter(|n| !n.is_empty()),
            password.filter(|p| !p.is_empty()),
        ) {
            (Some(name), Some(password)) => Ok(ScramUser {
                mechanism,
                name,
                password,
                iterations,
            }),
            _ => Err(form()),
        }
    }
}

/// How OAUTHBEARER tokens are validated, chosen as Kafka chooses it by the listener's
/// `oauthbearer.sasl.server.callback.handler.class`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OAuthBearerSettings {
    /// Kafka's default: unsigned JWS (`alg` `none`), for development.
    Unsecured(UnsecuredValidator),
    /// `OAuthBearerValidatorCallbackHandler`: JWTs signed by a key of a JWKS.
    Jwks(JwksValidator),
}

impl Default for OAuthBearerSettings {
    fn default() -> Self {
        OAuthBearerSettings::Unsecured(UnsecuredValidator::default())
    }
}

/// The unsecured validator, set by the `unsecuredValidator*` options of the listener's JAAS text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsecuredValidator {
    /// `unsecuredValidatorPrincipalClaimName` (default `sub`): the claim naming the principal.
    pub principal_claim: String,
    /// `unsecuredValidatorScopeClaimName` (default `scope`).
    pub scope_claim: String,
    /// `unsecuredValidatorRequiredScope`: scope values every token must have (space-separated).
    pub required_scope: Vec<String>,
    /// `unsecuredValidatorAllowableClockSkewMs` (default 0).
    pub allowable_clock_skew_ms: i64,
}

impl Default for UnsecuredValidator {
    fn default() -> Self {
        UnsecuredValidator {
            principal_claim: "sub".into(),
            scope_claim: "scope".into(),
            required_scope: Vec::new(),
            allowable_clock_skew_ms: 0,
        }
    }
}

/// Signed JWTs checked against the keys of a JWKS, from Kafka's `sasl.oauthbearer.*` keys (each
/// also as `listener.name.<l>.oauthbearer.<key>` or `listener.name.<l>.<key>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwksValidator {
    /// `sasl.oauthbearer.jwks.endpoint.url`: where the JWKS is.
    pub jwks: JwksEndpoint,
    /// `sasl.oauthbearer.expected.audience`: a token's `aud` must name one of them; when
    /// empty, a token must carry no `aud`.
    pub expected_audience: Vec<String>,
    /// `sasl.oauthbearer.expected.issuer`: the `iss` a token must carry, when set.
    pub expected_issuer: Option<String>,
    /// `sasl.oauthbearer.sub.claim.name` (default `sub`): the claim naming the principal.
    pub sub_claim: String,
    /// `sasl.oauthbearer.scope.claim.name` (default `scope`).
    pub scope_claim: String,
    /// `sasl.oauthbearer.clock.skew.seconds` (default 30): leeway on `exp` and `nbf`.
    pub clock_skew_seconds: i64,
}

/// Where a JWKS is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksEndpoint {
    /// A `file:` URL: read once, at start.
    File(PathBuf),
    /// An `https:` (or `http:`) URL: fetched at start and every `refresh_ms`, and sooner when a
    /// token names a key the JWKS does not hold, as Kafka's refreshing resolver does.
    Http(Box<HttpJwks>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpJwks {
    pub url: String,
    /// `sasl.oauthbearer.jwks.endpoint.refresh.ms` (default one hour).
    pub refresh_ms: i64,
    /// `sasl.oauthbearer.jwks.endpoint.retry.backoff.ms` (100) and `.retry.backoff.max.ms`
    /// (10000): how soon a failed fetch, or a token's unknown key, fetches again, doubling.
    pub retry_backoff_ms: i64,
    pub retry_backoff_max_ms: i64,
    /// For `https:`, the TLS the `ssl.*` options of the listener's OAUTHBEARER JAAS text ask
    /// for, as Kafka reads them there.
    pub tls: Option<LinkTls>,
}

/// The server callback handlers fjord can stand in for: Kafka's signed-JWT validator (its 4.x
/// name and the 3.x one) and its unsecured one.
const JWKS_VALIDATOR_HANDLERS: &[&str] = &[
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler",
];
const UNSECURED_VALIDATOR_HANDLER: &str =
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler";

/// What a SASL_PLAINTEXT or SASL_SSL listener authenticates with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslSettings {
    /// `sasl.enabled.mechanisms`, in the order given.
    pub mechanisms: Vec<SaslMechanism>,
    /// PLAIN's users and their passwords: the `user_<name>="<password>"` options of the
    /// listener's PLAIN JAAS text.
    pub plain_users: BTreeMap<String, String>,
    /// `connections.max.reauth.ms` of each enabled mechanism (KIP-368): how long a session lasts
    /// before the client must authenticate again on its connection; 0, absent: for ever.
    pub max_reauth_ms: BTreeMap<SaslMechanism, i64>,
    /// OAUTHBEARER's validation, when the listener enables it.
    pub oauthbearer: OAuthBearerSettings,
}

impl SaslSettings {
    /// Whether `name` (as a client sends it in SaslHandshake) is enabled on the listener.
    pub fn mechanism(&self, name: &str) -> Option<SaslMechanism> {
        self.mechanisms.iter().copied().find(|m| m.name() == name)
    }

    /// How long a session authenticated with `mechanism` lasts, if it ends.
    pub fn session_lifetime_ms(&self, mechanism: SaslMechanism) -> Option<i64> {
        self.max_reauth_ms
            .get(&mechanism)
            .copied()
            .filter(|ms| *ms > 0)
    }
}

/// The SASL settings of listener `listener`, checked: every enabled mechanism is one fjord
/// serves, and each has the JAAS text it needs.
pub(crate) fn listener_sasl(
    props: &BTreeMap<String, String>,
    listener: &str,
) -> Result<SaslSettings, ConfigError> {
    let mechanisms = enabled_mechanisms(props, listener)?;
    let mut plain_users = BTreeMap::new();
    let mut max_reauth_ms = BTreeMap::new();
    let mut oauthbearer = OAuthBearerSettings::default();
    for &mechanism in &mechanisms {
        // The keys of one mechanism on the listener: `listener.name.<l>.<mechanism>.<key>`.
        let scoped = format!(
            "listener.name.{}.{}.",
            listener.to_ascii_lowercase(),
            mechanism.name().to_ascii_lowercase()
        );
        match (mechanism, mechanism_jaas(props, &scoped, mechanism)?) {
            (SaslMechanism::Plain, Some(entry)) => {
                for (option, password) in entry.options {
                    if let Some(user) = option.strip_prefix("user_") {
                        plain_users.insert(user.to_string(), password);
                    }
                }
            }
            (SaslMechanism::Plain, None) => {
                return Err(invalid(
                    &format!("{scoped}sasl.jaas.config"),
                    "",
                    format!(
                        "listener {listener} enables PLAIN but gives no JAAS text with its users \
                         ({PLAIN_LOGIN_MODULE} required user_<name>=\"<password>\";)"
                    ),
                ))
            }
            // SCRAM's users are the cluster's; a JAAS text, if given, only names the module.
            (SaslMechanism::Scram(_), _) => {}
            (SaslMechanism::OAuthBearer, Some(entry)) => {
                let handler_key = format!("{scoped}sasl.server.callback.handler.class");
                oauthbearer = match props.get(&handler_key).map(|c| c.trim()) {
                    None | Some(UNSECURED_VALIDATOR_HANDLER) => {
                        OAuthBearerSettings::Unsecured(unsecured_validator(&scoped, &entry)?)
                    }
                    Some(class) if JWKS_VALIDATOR_HANDLERS.contains(&class) => {
                        OAuthBearerSettings::Jwks(jwks_validator(props, listener, &scoped, &entry)?)
                    }
                    Some(class) => {
                        return Err(invalid(
                            &handler_key,
                            class,
                            "fjord validates OAUTHBEARER tokens as Kafka's unsecured validator or \
                             its OAuthBearerValidatorCallbackHandler (signed JWTs, a JWKS) do; no \
                             other callback handler can be loaded",
                        ))
                    }
                };
            }
            (SaslMechanism::OAuthBearer, None) => {
                return Err(invalid(
                    &format!("{scoped}sasl.jaas.config"),
                    "",
                    format!(
                        "listener {listener} enables OAUTHBEARER but gives no JAAS text \
                         ({OAUTHBEARER_LOGIN_MODULE} required;)"
                    ),
                ))
            }
        }
        max_reauth_ms.insert(mechanism, reauth_ms(props, &scoped)?);
    }
    Ok(SaslSettings {
        mechanisms,
        plain_users,
        max_reauth_ms,
        oauthbearer,
    })
}

/// The unsecured validator's options of an OAUTHBEARER JAAS text.
fn unsecured_validator(scoped: &str, entry: &JaasEntry) -> Result<UnsecuredValidator, ConfigError> {
    let option = |name: &str| {
        entry
            .options
            .get(name)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    };
    let mut settings = UnsecuredValidator::default();
    if let Some(claim) = option("unsecuredValidatorPrincipalClaimName") {
        settings.principal_claim = claim.to_string();
    }
    if let Some(claim) = option("unsecuredValidatorScopeClaimName") {
        settings.scope_claim = claim.to_string();
    }
    if let Some(scope) = option("unsecuredValidatorRequiredScope") {
        settings.required_scope = scope.split_whitespace().map(String::from).collect();
    }
    if let Some(skew) = option("unsecuredValidatorAllowableClockSkewMs") {
        settings.allowable_clock_skew_ms = skew.parse().ok().filter(|ms| *ms >= 0).ok_or_else(|| {
            invalid(
                &format!("{scoped}sasl.jaas.config"),
                "[hidden]",
                format!("unsecuredValidatorAllowableClockSkewMs must be a non-negative number, not {skew}"),
            )
        })?;
    }
    Ok(settings)
}

/// The signed-JWT validator's settings for `listener`, whose OAUTHBEARER keys start `scoped`.
fn jwks_validator(
    props: &BTreeMap<String, String>,
    listener: &str,
    scoped: &str,
    jaas: &JaasEntry,
) -> Result<JwksValidator, ConfigError> {
    // As Kafka reads them: the mechanism's override, then the listener's, the broker's, the default.
    let value = |key: &'static str| -> (String, Option<String>) {
        let scoped_key = format!("{scoped}{key}");
        let (found_as, value) = match props.get(&scoped_key) {
            Some(v) => (scoped_key, Some(v.clone())),
            None => listener_value(props, listener, key),
        };
        let value = value
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty());
        (found_as, value)
    };
    let (url_key, url) = value("sasl.oauthbearer.jwks.endpoint.url");
    let url = url.ok_or_else(|| {
        invalid(
            &url_key,
            "",
            format!(
                "listener {listener} validates OAUTHBEARER tokens with OAuthBearerValidatorCallbackHandler, \
                 which needs the JWKS that signs them"
            ),
        )
    })?;
    let number = |key: &'static str| -> Result<i64, ConfigError> {
        let (key, value) = value(key);
        let value = value.unwrap_or_default();
        value
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| {
                invalid(
                    &key,
                    &value,
                    "expected a non-negative number of milliseconds",
                )
            })
    };
    let jwks = if let Some(path) = file_url_path(&url) {
        JwksEndpoint::File(path)
    } else if let Some(secure) = http_url(&url) {
        let jaas_key = format!("{scoped}sasl.jaas.config");
        JwksEndpoint::Http(Box::new(HttpJwks {
            url: url.clone(),
            refresh_ms: number("sasl.oauthbearer.jwks.endpoint.refresh.ms")?,
            retry_backoff_ms: number("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms")?,
            retry_backoff_max_ms: number("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms")?,
            tls: match secure {
                true => Some(crate::tls::jaas_client_tls(&jaas.options, &jaas_key)?),
                false => None,
            },
        }))
    } else {
        return Err(invalid(
            &url_key,
            &url,
            "the JWKS is read from a file: URL (file:///path/jwks.json) or fetched from an \
             https: (or http:) one",
        ));
    };
    let (skew_key, skew) = value("sasl.oauthbearer.clock.skew.seconds");
    let skew = skew.unwrap_or_default();
    let clock_skew_seconds = skew
        .parse::<i64>()
        .ok()
        .filter(|s| *s >= 0)
        .ok_or_else(|| {
            invalid(
                &skew_key,
                &skew,
                "expected a non-negative number of seconds",
            )
        })?;
    let claim = |key: &'static str| {
        let (key, name) = value(key);
        name.ok_or_else(|| invalid(&key, "", "a claim name cannot be empty"))
    };
    Ok(JwksValidator {
        jwks,
        expected_audience: value("sasl.oauthbearer.expected.audience")
            .1
            .map(|v| split_list(&v).into_iter().map(String::from).collect())
            .unwrap_or_default(),
        expected_issuer: value("sasl.oauthbearer.expected.issuer").1,
        sub_claim: claim("sasl.oauthbearer.sub.claim.name")?,
        scope_claim: claim("sasl.oauthbearer.scope.claim.name")?,
        clock_skew_seconds,
    })
}

/// Whether `url` is an `https:` URL (true) or an `http:` one (false), with a host.
fn http_url(url: &str) -> Option<bool> {
    let (secure, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else {
        (false, url.strip_prefix("http://")?)
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    (!host.is_empty()).then_some(secure)
}

/// The path of a `file:` URL (`file:///p`, `file:/p`), if it is one.
fn file_url_path(url: &str) -> Option<PathBuf> {
    let rest = url.strip_prefix("file:")?;
    let path = rest.strip_prefix("//").unwrap_or(rest);
    // `file://localhost/p` names the same file as `file:///p`.
    let path = path.strip_prefix("localhost").unwrap_or(path);
    path.starts_with('/').then(|| PathBuf::from(path))
}

/// Why a mechanism name is not one fjord serves.
pub(crate) enum MechanismRefused {
    /// Kerberos: Kafka's default mechanism, which fjord does not serve.
    Gssapi,
    Unknown,
}

/// The mechanism `name` stands for.
pub(crate) fn parse_mechanism(name: &str) -> Result<SaslMechanism, MechanismRefused> {
    match name.trim() {
        "PLAIN" => Ok(SaslMechanism::Plain),
        "SCRAM-SHA-256" => Ok(SaslMechanism::Scram(ScramMechanism::Sha256)),
        "SCRAM-SHA-512" => Ok(SaslMechanism::Scram(ScramMechanism::Sha512)),
        "OAUTHBEARER" => Ok(SaslMechanism::OAuthBearer),
        "GSSAPI" => Err(MechanismRefused::Gssapi),
        _ => Err(MechanismRefused::Unknown),
    }
}

/// `sasl.enabled.mechanisms` of `listener`: each one fjord serves, at least one.
fn enabled_mechanisms(
    props: &BTreeMap<String, String>,
    listener: &str,
) -> Result<Vec<SaslMechanism>, ConfigError> {
    let (key, value) = listener_value(props, listener, "sasl.enabled.mechanisms");
    let value = value.unwrap_or_default();
    let key = key.as_str();
    let value = value.as_str();
    let mut mechanisms = Vec::new();
    for name in split_list(value) {
        let mechanism = parse_mechanism(name).map_err(|why| {
            let why = match why {
                MechanismRefused::Gssapi => format!(
                    "listener {listener} enables GSSAPI (Kerberos{}), which fjord does not \
                     serve; enable PLAIN or SCRAM-SHA-256/512 instead",
                    if props.contains_key(key) {
                        ""
                    } else {
                        ", Kafka's default when sasl.enabled.mechanisms is not set"
                    }
                ),
                MechanismRefused::Unknown => format!("unknown SASL mechanism {name:?}"),
            };
            invalid(key, value, why)
        })?;
        if !mechanisms.contains(&mechanism) {
            mechanisms.push(mechanism);
        }
    }
    if mechanisms.is_empty() {
        return Err(invalid(
            key,
            value,
            format!("listener {listener} is a SASL listener with no mechanism enabled"),
        ));
    }
    Ok(mechanisms)
}

/// The JAAS text of one mechanism on a listener (`<scoped>sasl.jaas.config`), if given: it must
/// name the mechanism's own login module.
pub(crate) fn mechanism_jaas(
    props: &BTreeMap<String, String>,
    scoped: &str,
    mechanism: SaslMechanism,
) -> Result<Option<JaasEntry>, ConfigError> {
    let key = format!("{scoped}sasl.jaas.config");
    let Some(text) = props.get(&key) else {
        return Ok(None);
    };
    let entry = parse_jaas(&key, text)?;
    let expected = match mechanism {
        SaslMechanism::Plain => PLAIN_LOGIN_MODULE,
        SaslMechanism::Scram(_) => SCRAM_LOGIN_MODULE,
        SaslMechanism::OAuthBearer => OAUTHBEARER_LOGIN_MODULE,
    };
    if entry.login_module != expected {
        return Err(invalid(
            &key,
            "[hidden]",
            format!(
                "login module {} is not {}'s; use {expected}",
                entry.login_module,
                mechanism.name()
            ),
        ));
    }
    Ok(Some(entry))
}

/// `<scoped>connections.max.reauth.ms`, else the broker's `connections.max.reauth.ms`.
fn reauth_ms(props: &BTreeMap<String, String>, scoped: &str) -> Result<i64, ConfigError> {
    let prefixed = format!("{scoped}connections.max.reauth.ms");
    let (key, value) = match props.get(&prefixed) {
        Some(value) => (prefixed.as_str(), value.as_str()),
        None => (
            "connections.max.reauth.ms",
            props
                .get("connections.max.reauth.ms")
                .map_or("0", String::as_str),
        ),
    };
    value
        .trim()
        .parse::<i64>()
        .map_err(|_| invalid(key, value, "expected a number of milliseconds"))
}

/// One login module entry of a JAAS text: `<class> <flag> <key>=<value> ... ;`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JaasEntry {
    pub(crate) login_module: String,
    pub(crate) options: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A word or a quoted string.
    Word(String),
    Equals,
    Semicolon,
}

/// The tokens of a JAAS text as Kafka's parser reads it: words, `"`- or `'`-quoted strings
/// (with backslash escapes), `=` and `;`; whitespace, `//` and `/* */` comments between them.
fn jaas_tokens(text: &str) -> Result<Vec<Token>, &'static str> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '=' | ';' => {
                chars.next();
                tokens.push(if c == '=' {
                    Token::Equals
                } else {
                    Token::Semicolon
                });
            }
            '"' | '\'' => {
                chars.next();
                let mut value = String::new();
                loop {
                    match chars.next() {
                        None => return Err("a quoted value is not closed"),
                        Some(q) if q == c => break,
                        Some('\\') => match chars.next() {
                            None => return Err("a quoted value is not closed"),
                            Some('n') => value.push('\n'),
                            Some('t') => value.push('\t'),
                            Some(other) => value.push(other),
                        },
                        Some(other) => value.push(other),
                    }
                }
                tokens.push(Token::Word(value));
            }
            '/' => {
                chars.next();
                match chars.next() {
                    Some('/') => {
                        for c in chars.by_ref() {
                            if c == '\n' {
                                break;
                            }
                        }
                    }
                    Some('*') => {
                        let mut last = ' ';
                        loop {
                            match chars.next() {
                                None => return Err("a /* comment is not closed"),
                                Some('/') if last == '*' => break,
                                Some(c) => last = c,
                            }
                        }
                    }
                    _ => return Err("a stray '/'"),
                }
            }
            _ => {
                let mut word = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || matches!(c, '=' | ';' | '"' | '\'' | '/') {
                        break;
                    }
                    word.push(c);
                    chars.next();
                }
                tokens.push(Token::Word(word));
            }
        }
    }
    Ok(tokens)
}

/// Parses the JAAS text set as `key`: exactly one login module entry, as Kafka requires of a
/// `sasl.jaas.config`. Errors never quote the text (it holds passwords).
pub(crate) fn parse_jaas(key: &str, text: &str) -> Result<JaasEntry, ConfigError> {
    let fail = |reason: String| invalid(key, "[hidden]", format!("JAAS text: {reason}"));
    let tokens = jaas_tokens(text).map_err(|reason| fail(reason.to_string()))?;
    let mut entries = Vec::new();
    let mut rest = tokens.as_slice();
    while !rest.is_empty() {
        let [Token::Word(login_module), Token::Word(flag), after @ ..] = rest else {
            return Err(fail(
                "expected a login module class and its control flag".into(),
            ));
        };
        if !["required", "requisite", "sufficient", "optional"]
            .contains(&flag.to_ascii_lowercase().as_str())
        {
            return Err(fail(format!(
                "control flag {flag:?} is not one of required, requisite, sufficient, optional"
            )));
        }
        let mut options = BTreeMap::new();
        rest = after;
        loop {
            match rest {
                [Token::Semicolon, after @ ..] => {
                    rest = after;
                    break;
                }
                [Token::Word(option), Token::Equals, Token::Word(value), after @ ..] => {
                    options.insert(option.clone(), value.clone());
                    rest = after;
                }
                [] => return Err(fail("the entry does not end with ';'".into())),
                _ => {
                    return Err(fail(format!(
                        "options of {login_module} must be <name>=<value>"
                    )))
                }
            }
        }
        entries.push(JaasEntry {
            login_module: login_module.clone(),
            options,
        });
    }
    match entries.len() {
        1 => Ok(entries.remove(0)),
        n => Err(fail(format!(
            "{n} login modules given; exactly one is needed"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    proptest::proptest! {
        /// Any text, any JAAS-like tokens: parsed or refused, never a panic, never quoted back.
        #[test]
        fn any_jaas_text_is_parsed_or_refused(
            text in "[a-z_=;\"'/* \\\n]{0,80}|[\\PC]{0,80}",
        ) {
            if let Err(err) = parse_jaas("k", &text) {
                proptest::prop_assert_eq!(err.value, "[hidden]");
            }
        }
    }

    #[test]
    fn jaas_text_as_kafka_writes_it() {
        let entry = parse_jaas(
            "k",
            "org.apache.kafka.common.security.plain.PlainLoginModule required\n  \
             username=\"admin\" password=\"admin-secret\" // the broker's own\n  \
             user_admin=\"admin-secret\" /* two users */ user_alice=\"a \\\"quoted\\\" pw\" user_bob=plain user_carol='single';",
        )
        .unwrap();
        assert_eq!(entry.login_module, PLAIN_LOGIN_MODULE);
        assert_eq!(entry.options["user_alice"], "a \"quoted\" pw");
        assert_eq!(entry.options["user_bob"], "plain");
        assert_eq!(entry.options["user_carol"], "single");
        assert_eq!(entry.options.len(), 6);
    }

    #[test]
    fn bad_jaas_text_is_refused_without_quoting_it() {
        for (text, reason) in [
            ("", "0 login modules"),
            ("a required x=\"1\";b required;", "2 login modules"),
            ("a required x=\"secret", "not closed"),
            ("a required x=\"secret\"", "does not end"),
            ("a always;", "control flag"),
            ("a required x;", "<name>=<value>"),
            ("a required /* x=\"secret\";", "not closed"),
        ] {
            let err = parse_jaas("k", text).unwrap_err();
            assert!(err.reason.contains(reason), "{text}: {err}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
    }

    #[test]
    fn plain_users_come_from_the_listeners_jaas_text() {
        let settings = listener_sasl(
            &props(&[
                ("sasl.enabled.mechanisms", "PLAIN"),
                (
                    "listener.name.client.plain.sasl.jaas.config",
                    "org.apache.kafka.common.security.plain.PlainLoginModule required \
                     user_alice=\"alice-pw\" user_bob=\"bob-pw\";",
                ),
            ]),
            "CLIENT",
        )
        .unwrap();
        assert_eq!(settings.mechanisms, vec![SaslMechanism::Plain]);
        assert_eq!(settings.mechanism("PLAIN"), Some(SaslMechanism::Plain));
        assert_eq!(settings.mechanism("plain"), None);
        assert_eq!(settings.plain_users["alice"], "alice-pw");
        assert_eq!(settings.plain_users.len(), 2);
        assert_eq!(settings.session_lifetime_ms(SaslMechanism::Plain), None);
        let scram = listener_sasl(
            &props(&[("sasl.enabled.mechanisms", "SCRAM-SHA-512,SCRAM-SHA-256")]),
            "CLIENT",
        )
        .unwrap();
        assert_eq!(
            scram.mechanism("SCRAM-SHA-256"),
            Some(SaslMechanism::Scram(ScramMechanism::Sha256))
        );
        assert_eq!(scram.mechanisms.len(), 2);
    }

    #[test]
    fn scram_users_are_read_as_kafka_storage_format_reads_them() {
        let user =
            ScramUser::parse("SCRAM-SHA-512=[name=alice,password=\"a-secret\",iterations=8192]")
                .unwrap();
        assert_eq!(user.mechanism, ScramMechanism::Sha512);
        assert_eq!(
            (user.name.as_str(), user.password.as_str()),
            ("alice", "a-secret")
        );
        assert_eq!(user.iterations, 8192);
        assert_eq!(
            ScramUser::parse("SCRAM-SHA-256=[name=a,password=b]")
                .unwrap()
                .iterations,
            4096
        );
        for bad in [
            "SCRAM-SHA-1=[name=a,password=b]",
            "SCRAM-SHA-256=name=a,password=b",
            "SCRAM-SHA-256=[name=a]",
            "SCRAM-SHA-256=[name=a,password=b,iterations=10]",
            "SCRAM-SHA-256=[name=a,password=b,salt=c]",
        ] {
            assert!(ScramUser::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn oauthbearer_takes_the_unsecured_validators_options() {
        let settings = listener_sasl(
            &props(&[
                ("sasl.enabled.mechanisms", "OAUTHBEARER"),
                (
                    "listener.name.client.oauthbearer.sasl.jaas.config",
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required \
                     unsecuredLoginStringClaim_sub=\"admin\" unsecuredValidatorRequiredScope=\"read write\" \
                     unsecuredValidatorAllowableClockSkewMs=\"500\";",
                ),
            ]),
            "CLIENT",
        )
        .unwrap();
        assert_eq!(settings.mechanisms, [SaslMechanism::OAuthBearer]);
        let OAuthBearerSettings::Unsecured(validator) = settings.oauthbearer else {
            panic!("{:?}", settings.oauthbearer)
        };
        assert_eq!(validator.principal_claim, "sub");
        assert_eq!(validator.required_scope, ["read", "write"]);
        assert_eq!(validator.allowable_clock_skew_ms, 500);
    }

    #[test]
    fn oauthbearer_validator_callback_handler_takes_the_jwks_and_its_checks() {
        let jaas = (
            "listener.name.client.oauthbearer.sasl.jaas.config",
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        );
        let handler = (
            "listener.name.client.oauthbearer.sasl.server.callback.handler.class",
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
        );
        let settings = listener_sasl(
            &props(&[
                ("sasl.enabled.mechanisms", "OAUTHBEARER"),
                jaas,
                handler,
                (
                    "sasl.oauthbearer.jwks.endpoint.url",
                    "file:///etc/broad.json",
                ),
                (
                    "listener.name.client.oauthbearer.sasl.oauthbearer.jwks.endpoint.url",
                    "file:///etc/jwks.json",
                ),
                ("sasl.oauthbearer.expected.audience", "kafka, fjord"),
                (
                    "listener.name.client.sasl.oauthbearer.expected.issuer",
                    "https://idp",
                ),
                ("sasl.oauthbearer.sub.claim.name", "client_id"),
                ("sasl.oauthbearer.clock.skew.seconds", "5"),
            ]),
            "CLIENT",
        )
        .unwrap();
        assert_eq!(
            settings.oauthbearer,
            OAuthBearerSettings::Jwks(JwksValidator {
                jwks: JwksEndpoint::File(PathBuf::from("/etc/jwks.json")),
                expected_audience: vec!["kafka".into(), "fjord".into()],
                expected_issuer: Some("https://idp".into()),
                sub_claim: "client_id".into(),
                scope_claim: "scope".into(),
                clock_skew_seconds: 5,
            })
        );
        for (extra, key, why) in [
            (
                vec![],
                "sasl.oauthbearer.jwks.endpoint.url",
                "needs the JWKS",
            ),
            (
                vec![("sasl.oauthbearer.jwks.endpoint.url", "ftp://idp/keys")],
                "sasl.oauthbearer.jwks.endpoint.url",
                "file: URL",
            ),
            (
                vec![("sasl.oauthbearer.jwks.endpoint.url", "https://idp/keys")],
                "sasl.jaas.config",
                "needs a truststore",
            ),
            (
                vec![
                    ("sasl.oauthbearer.jwks.endpoint.url", "file:/k.json"),
                    ("sasl.oauthbearer.clock.skew.seconds", "-1"),
                ],
                "sasl.oauthbearer.clock.skew.seconds",
                "non-negative",
            ),
        ] {
            let mut pairs = vec![("sasl.enabled.mechanisms", "OAUTHBEARER"), jaas, handler];
            pairs.extend(extra);
            let error = listener_sasl(&props(&pairs), "CLIENT")
                .unwrap_err()
                .to_string();
            assert!(error.contains(key) && error.contains(why), "{error}");
        }
    }

    #[test]
    fn an_https_jwks_is_fetched_with_the_jaas_texts_tls_and_the_refresh_keys() {
        let settings = listener_sasl(
            &props(&[
                ("sasl.enabled.mechanisms", "OAUTHBEARER"),
                (
                    "listener.name.client.oauthbearer.sasl.jaas.config",
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required \
                     ssl.truststore.type=\"PEM\" ssl.truststore.location=\"/etc/ca.pem\";",
                ),
                (
                    "listener.name.client.oauthbearer.sasl.server.callback.handler.class",
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
                ),
                ("sasl.oauthbearer.jwks.endpoint.url", "https://idp:8443/keys"),
                ("sasl.oauthbearer.jwks.endpoint.refresh.ms", "60000"),
            ]),
            "CLIENT",
        )
        .unwrap();
        let OAuthBearerSettings::Jwks(JwksValidator {
            jwks: JwksEndpoint::Http(http),
            ..
        }) = settings.oauthbearer
        else {
            panic!("{:?}", settings.oauthbearer)
        };
        assert_eq!(http.url, "https://idp:8443/keys");
        assert_eq!(
            (
                http.refresh_ms,
                http.retry_backoff_ms,
                http.retry_backoff_max_ms
            ),
            (60_000, 100, 10_000)
        );
        let tls = http.tls.unwrap();
        assert_eq!(
            tls.truststore,
            crate::TrustStore::PemFile("/etc/ca.pem".into())
        );
        assert!(tls.verify_hostname && tls.keystore.is_none());
    }

    #[test]
    fn sessions_last_as_connections_max_reauth_ms_says_per_listener_and_mechanism() {
        let jaas = (
            "listener.name.client.plain.sasl.jaas.config",
            "org.apache.kafka.common.security.plain.PlainLoginModule required user_a=\"b\";",
        );
        let lifetime = |pairs: &[(&str, &str)]| {
            let mut pairs = pairs.to_vec();
            pairs.extend([("sasl.enabled.mechanisms", "PLAIN"), jaas]);
            listener_sasl(&props(&pairs), "CLIENT")
                .map(|s| s.session_lifetime_ms(SaslMechanism::Plain))
        };
        assert_eq!(
            lifetime(&[("connections.max.reauth.ms", "60000")]),
            Ok(Some(60000))
        );
        assert_eq!(
            lifetime(&[
                ("connections.max.reauth.ms", "60000"),
                (
                    "listener.name.client.plain.connections.max.reauth.ms",
                    "5000"
                ),
            ]),
            Ok(Some(5000))
        );
        assert_eq!(lifetime(&[("connections.max.reauth.ms", "0")]), Ok(None));
        let err = lifetime(&[(
            "listener.name.client.plain.connections.max.reauth.ms",
            "soon",
        )])
        .unwrap_err();
        assert_eq!(
            err.key,
            "listener.name.client.plain.connections.max.reauth.ms"
        );
    }

    #[test]
    fn mechanisms_fjord_does_not_serve_are_refused_by_name() {
        let jaas = (
            "listener.name.sasl_ssl.plain.sasl.jaas.config",
            "org.apache.kafka.common.security.plain.PlainLoginModule required user_a=\"b\";",
        );
        for (pairs, key, reason) in [
            (vec![jaas], "sasl.enabled.mechanisms", "GSSAPI"),
            (
                vec![jaas, ("sasl.enabled.mechanisms", "PLAIN,GSSAPI")],
                "sasl.enabled.mechanisms",
                "GSSAPI",
            ),
            (
                vec![
                    jaas,
                    (
                        "listener.name.sasl_ssl.sasl.enabled.mechanisms",
                        "OAUTHBEARER",
                    ),
                ],
                "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config",
                "enables OAUTHBEARER but gives no JAAS text",
            ),
            (
                vec![
                    ("sasl.enabled.mechanisms", "OAUTHBEARER"),
                    (
                        "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config",
                        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
                    ),
                    (
                        "listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class",
                        "com.example.MyValidator",
                    ),
                ],
                "listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class",
                "no other callback handler",
            ),
            (
                vec![
                    ("sasl.enabled.mechanisms", "SCRAM-SHA-512"),
                    (
                        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config",
                        "org.apache.kafka.common.security.plain.PlainLoginModule required;",
                    ),
                ],
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config",
                "not SCRAM-SHA-512's",
            ),
            (
                vec![("sasl.enabled.mechanisms", "PLAIN")],
                "listener.name.sasl_ssl.plain.sasl.jaas.config",
                "no JAAS text",
            ),
            (
                vec![
                    ("sasl.enabled.mechanisms", "PLAIN"),
                    (
                        "listener.name.sasl_ssl.plain.sasl.jaas.config",
                        "com.example.Other required user_a=\"b\";",
                    ),
                ],
                "listener.name.sasl_ssl.plain.sasl.jaas.config",
                "com.example.Other",
            ),
            (
                vec![("sasl.enabled.mechanisms", " ")],
                "sasl.enabled.mechanisms",
                "no mechanism",
            ),
        ] {
            let err = listener_sasl(&props(&pairs), "SASL_SSL").unwrap_err();
            assert_eq!(err.key, key, "{err}");
            assert!(err.reason.contains(reason), "{err}");
        }
    }
}
