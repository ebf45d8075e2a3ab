//! A listener's TLS settings from Kafka's `ssl.*` keys, each overridable per listener as
//! `listener.name.<listener name in lower case>.ssl.*` (the override wins), as Kafka reads them.
//! Pure: the settings name files and carry PEM text; the broker reads and checks the key
//! material when it starts the listener.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::{invalid, listener_value, split_list, ConfigError, PrincipalMapper};

/// Where a listener's private key and certificate chain come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyStore {
    /// `ssl.keystore.type` PEM, `ssl.keystore.location`: one file holding the key and the chain;
    /// the key (PKCS#8) encrypted with `key_password` (`ssl.key.password`) when that is set.
    PemFile {
        path: PathBuf,
        key_password: Option<String>,
    },
    /// `ssl.keystore.key` and `ssl.keystore.certificate.chain`: the PEM text itself.
    PemInline {
        key: String,
        chain: String,
        key_password: Option<String>,
    },
    /// `ssl.keystore.type` PKCS12: the store at `ssl.keystore.location`, opened with
    /// `ssl.keystore.password`.
    Pkcs12 { path: PathBuf, password: String },
}

impl KeyStore {
    /// Where the key and where the chain come from, named by the keys that set them (for errors).
    pub fn origins(&self) -> (String, String) {
        match self {
            KeyStore::PemFile { path, .. } | KeyStore::Pkcs12 { path, .. } => {
                let file = format!("ssl.keystore.location {}", path.display());
                (file.clone(), file)
            }
            KeyStore::PemInline { .. } => (
                "ssl.keystore.key".to_string(),
                "ssl.keystore.certificate.chain".to_string(),
            ),
        }
    }
}

/// The certificates a listener trusts client certificates to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrustStore {
    /// `ssl.truststore.type` PEM, `ssl.truststore.location`: a file of certificates.
    PemFile(PathBuf),
    /// `ssl.truststore.certificates`: the PEM text itself.
    PemInline(String),
    /// `ssl.truststore.type` PKCS12: its certificate entries, the store opened with
    /// `ssl.truststore.password` (none: empty).
    Pkcs12 {
        path: PathBuf,
        password: Option<String>,
    },
}

impl TrustStore {
    /// Where the certificates come from, named by the key that sets them (for errors).
    pub fn origin(&self) -> String {
        match self {
            TrustStore::PemFile(path) | TrustStore::Pkcs12 { path, .. } => {
                format!("ssl.truststore.location {}", path.display())
            }
            TrustStore::PemInline(_) => "ssl.truststore.certificates".to_string(),
        }
    }
}

/// `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// No certificate is asked for.
    None,
    /// A certificate is asked for; a client without one is still served.
    Requested,
    /// A client without a trusted certificate fails the handshake.
    Required,
}

/// A TLS version `ssl.enabled.protocols` may name (the older ones are refused, as rustls has
/// none of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

/// What an SSL (or SASL_SSL) listener serves TLS with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub keystore: KeyStore,
    pub truststore: Option<TrustStore>,
    pub client_auth: ClientAuth,
    /// `ssl.enabled.protocols`, in the order given.
    pub protocols: Vec<TlsVersion>,
    /// `ssl.cipher.suites`, IANA names; empty: every suite of the enabled versions.
    pub cipher_suites: Vec<String>,
    /// `ssl.principal.mapping.rules`: a client certificate's name to its principal's.
    pub principal_mapper: PrincipalMapper,
}

/// The TLS settings of listener `listener`, checked: a keystore fjord can read must be given.
pub(crate) fn listener_tls(
    props: &BTreeMap<String, String>,
    listener: &str,
) -> Result<TlsSettings, ConfigError> {
    let get = |key: &'static str| listener_value(props, listener, key);
    let keystore = keystore(&get)?.ok_or_else(|| {
        invalid(
            "listeners",
            listener,
            format!(
                "SSL listener {listener} has no keystore: set ssl.keystore.type (PEM or PKCS12) and \
                 ssl.keystore.location, or ssl.keystore.key and ssl.keystore.certificate.chain \
                 (for this listener alone: listener.name.{}.ssl.*)",
                listener.to_ascii_lowercase()
            ),
        )
    })?;
    let truststore = truststore(&get)?;
    let (auth_key, auth) = get("ssl.client.auth");
    let client_auth = match auth.as_deref().map(str::trim) {
        None | Some("none") => ClientAuth::None,
        Some("requested") => ClientAuth::Requested,
        Some("required") => ClientAuth::Required,
        Some(other) => {
            return Err(invalid(
                &auth_key,
                other,
                "must be one of required, requested, none",
            ))
        }
    };
    if client_auth != ClientAuth::None && truststore.is_none() {
        return Err(invalid(
            &auth_key,
            auth.as_deref().unwrap_or_default(),
            format!(
                "listener {listener} asks for client certificates but has no truststore \
                 (ssl.truststore.location or ssl.truststore.certificates) to check them against"
            ),
        ));
    }
    let protocols = enabled_protocols(&get)?;
    let (rules_key, rules) = get("ssl.principal.mapping.rules");
    let rules = rules.unwrap_or_default();
    let principal_mapper =
        PrincipalMapper::parse(&rules).map_err(|reason| invalid(&rules_key, &rules, reason.0))?;
    Ok(TlsSettings {
        principal_mapper,
        keystore,
        truststore,
        client_auth,
        protocols,
        cipher_suites: cipher_suites(&get),
    })
}

/// What one of this node's own links to other nodes (inter-broker, controller) does for TLS,
/// from the same keys (`listener.name.<listener>.ssl.*` over `ssl.*`) the listener it connects
/// to is served with, as Kafka's client side of those links reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkTls {
    /// This node's certificate, shown when the other node asks for one.
    pub keystore: Option<KeyStore>,
    /// The certificates the other node's must chain to.
    pub truststore: TrustStore,
    pub protocols: Vec<TlsVersion>,
    pub cipher_suites: Vec<String>,
    /// `ssl.endpoint.identification.algorithm` `https` (the default): the other node's
    /// certificate must name the host it is reached at; empty: any trusted certificate will do.
    pub verify_hostname: bool,
}

/// The TLS of a link to listener `listener`.
pub(crate) fn link_tls(
    props: &BTreeMap<String, String>,
    listener: &str,
    link: &str,
) -> Result<LinkTls, ConfigError> {
    let get = |key: &'static str| listener_value(props, listener, key);
    let truststore = truststore(&get)?.ok_or_else(|| {
        invalid(
            "listeners",
            listener,
            format!(
                "the {link} link connects over TLS to listener {listener}, and has no truststore \
                 to check the other node's certificate with: set ssl.truststore.location or \
                 ssl.truststore.certificates (for this listener alone: listener.name.{}.ssl.*)",
                listener.to_ascii_lowercase()
            ),
        )
    })?;
    // Read raw: an empty value is how it is turned off.
    let algorithm_key = ["listener.name.", &listener.to_ascii_lowercase(), "."].concat()
        + "ssl.endpoint.identification.algorithm";
    let (algorithm_key, algorithm) = match props.get(&algorithm_key) {
        Some(value) => (algorithm_key, Some(value)),
        None => (
            "ssl.endpoint.identification.algorithm".to_string(),
            props.get("ssl.endpoint.identification.algorithm"),
        ),
    };
    let verify_hostname = verify_hostname(&algorithm_key, algorithm.map(String::as_str))?;
    client_tls(&get, truststore, verify_hostname)
}

/// `ssl.endpoint.identification.algorithm` (`key`): whether the other side's certificate must
/// name the host reached (`https`, the default) or not (empty).
fn verify_hostname(key: &str, algorithm: Option<&str>) -> Result<bool, ConfigError> {
    match algorithm.map(str::trim) {
        None => Ok(true),
        Some(a) if a.eq_ignore_ascii_case("https") => Ok(true),
        Some("") => Ok(false),
        Some(other) => Err(invalid(
            key,
            other,
            "ssl.endpoint.identification.algorithm must be https (check the other side's host \
             name) or empty (do not)",
        )),
    }
}

/// The rest of a client side's TLS, read with `get`.
fn client_tls(
    get: &dyn Fn(&'static str) -> (String, Option<String>),
    truststore: TrustStore,
    verify_hostname: bool,
) -> Result<LinkTls, ConfigError> {
    Ok(LinkTls {
        keystore: keystore(get)?,
        truststore,
        protocols: enabled_protocols(get)?,
        cipher_suites: cipher_suites(get),
        verify_hostname,
    })
}

/// The TLS of a client connection configured by the `ssl.*` options of a JAAS text (`jaas_key`),
/// as Kafka's OAUTHBEARER validator reads them for its JWKS endpoint: a truststore is required
/// (fjord has no system roots), a keystore shown if the server asks, host names checked unless
/// `ssl.endpoint.identification.algorithm` is empty.
pub(crate) fn jaas_client_tls(
    options: &BTreeMap<String, String>,
    jaas_key: &str,
) -> Result<LinkTls, ConfigError> {
    let get = |key: &'static str| -> (String, Option<String>) {
        let value = options
            .get(key)
            .cloned()
            .or_else(|| crate::broker_default(key).map(String::from))
            .filter(|v| !v.trim().is_empty());
        (format!("{jaas_key} ({key})"), value)
    };
    let truststore = truststore(&get)?.ok_or_else(|| {
        invalid(
            jaas_key,
            "[hidden]",
            "an https JWKS endpoint needs a truststore in the JAAS text: ssl.truststore.location \
             (with ssl.truststore.type PEM or PKCS12) or ssl.truststore.certificates",
        )
    })?;
    let algorithm = options.get("ssl.endpoint.identification.algorithm");
    let verify_hostname = verify_hostname(jaas_key, algorithm.map(String::as_str))?;
    client_tls(&get, truststore, verify_hostname)
}

/// `ssl.enabled.protocols`: the TLS versions, each once, at least one.
fn enabled_protocols(
    get: &dyn Fn(&'static str) -> (String, Option<String>),
) -> Result<Vec<TlsVersion>, ConfigError> {
    let (protocols_key, protocols) = get("ssl.enabled.protocols");
    let protocols_value = protocols.unwrap_or_default();
    let mut versions = Vec::new();
    for name in split_list(&protocols_value) {
        let version = match name {
            "TLSv1.2" => TlsVersion::Tls12,
            "TLSv1.3" => TlsVersion::Tls13,
            other => {
                return Err(invalid(
                    &protocols_key,
                    &protocols_value,
                    format!("{other} is not served; fjord serves TLSv1.2 and TLSv1.3"),
                ))
            }
        };
        if !versions.contains(&version) {
            versions.push(version);
        }
    }
    if versions.is_empty() {
        return Err(invalid(
            &protocols_key,
            &protocols_value,
            "names no TLS version",
        ));
    }
    Ok(versions)
}

/// `ssl.cipher.suites`, IANA names; empty: every suite of the enabled versions.
fn cipher_suites(get: &dyn Fn(&'static str) -> (String, Option<String>)) -> Vec<String> {
    get("ssl.cipher.suites")
        .1
        .map(|s| split_list(&s).into_iter().map(String::from).collect())
        .unwrap_or_default()
}

/// A store type, as `ssl.keystore.type` / `ssl.truststore.type` name it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum StoreType {
    Pem,
    Pkcs12,
}

/// The store type `kind` names (any case), or why fjord cannot read it and what to do instead.
fn store_type(type_key: &str, kind: Option<String>) -> Result<StoreType, ConfigError> {
    let kind = kind.unwrap_or_default().trim().to_ascii_uppercase();
    match kind.as_str() {
        "PEM" => Ok(StoreType::Pem),
        "PKCS12" => Ok(StoreType::Pkcs12),
        "JKS" => Err(invalid(
            type_key,
            &kind,
            "JKS stores are not read by fjord; convert one with `keytool -importkeystore \
             -srckeystore <store.jks> -destkeystore store.p12 -deststoretype PKCS12` and set the \
             type to PKCS12",
        )),
        _ => Err(invalid(
            type_key,
            &kind,
            "the store types are PEM, PKCS12 and JKS; fjord reads PEM and PKCS12",
        )),
    }
}

/// The keystore the keys name, if any.
fn keystore(
    get: &dyn Fn(&'static str) -> (String, Option<String>),
) -> Result<Option<KeyStore>, ConfigError> {
    let (_, location) = get("ssl.keystore.location");
    let (key_key, key) = get("ssl.keystore.key");
    let (chain_key, chain) = get("ssl.keystore.certificate.chain");
    let (password_key, password) = get("ssl.keystore.password");
    let (_, key_password) = get("ssl.key.password");
    let (type_key, kind) = get("ssl.keystore.type");
    // Kafka takes inline PEM text whatever the type's default; a location needs the type.
    match (location, key, chain) {
        (None, Some(key), Some(chain)) => Ok(Some(KeyStore::PemInline {
            key,
            chain,
            key_password,
        })),
        (None, Some(_), None) => Err(invalid(
            &chain_key,
            "",
            format!("{key_key} is set without the certificate chain"),
        )),
        (None, None, Some(_)) => Err(invalid(
            &key_key,
            "",
            format!("{chain_key} is set without the private key"),
        )),
        (Some(location), None, None) => match (store_type(&type_key, kind)?, password) {
            // As Kafka: a PEM store has no password of its own, only its key may.
            (StoreType::Pem, Some(_)) => Err(invalid(
                &password_key,
                "[hidden]",
                "a PEM keystore takes no store password; an encrypted key's goes in \
                 ssl.key.password",
            )),
            (StoreType::Pem, None) => Ok(Some(KeyStore::PemFile {
                path: PathBuf::from(location),
                key_password,
            })),
            (StoreType::Pkcs12, None) => Err(invalid(
                &password_key,
                "",
                "a PKCS12 keystore needs its password",
            )),
            (StoreType::Pkcs12, Some(password)) => Ok(Some(KeyStore::Pkcs12 {
                path: PathBuf::from(location),
                password,
            })),
        },
        (Some(_), _, _) => Err(invalid(
            &key_key,
            "",
            "ssl.keystore.location and an inline key exclude each other",
        )),
        (None, None, None) => Ok(None),
    }
}

fn truststore(
    get: &dyn Fn(&'static str) -> (String, Option<String>),
) -> Result<Option<TrustStore>, ConfigError> {
    let (location_key, location) = get("ssl.truststore.location");
    let (_, certificates) = get("ssl.truststore.certificates");
    let (_, password) = get("ssl.truststore.password");
    let (type_key, kind) = get("ssl.truststore.type");
    match (location, certificates) {
        (None, None) => Ok(None),
        (None, Some(certificates)) => Ok(Some(TrustStore::PemInline(certificates))),
        (Some(location), None) => Ok(Some(match store_type(&type_key, kind)? {
            StoreType::Pem => TrustStore::PemFile(PathBuf::from(location)),
            StoreType::Pkcs12 => TrustStore::Pkcs12 {
                path: PathBuf::from(location),
                password,
            },
        })),
        (Some(location), Some(_)) => Err(invalid(
            &location_key,
            &location,
            "ssl.truststore.location and ssl.truststore.certificates exclude each other",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::props;

    #[test]
    fn a_pem_keystore_file_and_the_listener_override_that_wins() {
        let p = props(&[
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", "/all.pem"),
            ("listener.name.secure.ssl.keystore.location", "/secure.pem"),
            ("listener.name.secure.ssl.client.auth", "required"),
            ("ssl.truststore.type", "PEM"),
            ("ssl.truststore.location", "/ca.pem"),
        ]);
        let secure = listener_tls(&p, "SECURE").unwrap();
        let pem_file = |path: &str| KeyStore::PemFile {
            path: path.into(),
            key_password: None,
        };
        assert_eq!(secure.keystore, pem_file("/secure.pem"));
        assert_eq!(secure.client_auth, ClientAuth::Required);
        assert_eq!(
            secure.truststore,
            Some(TrustStore::PemFile("/ca.pem".into()))
        );
        assert_eq!(secure.protocols, [TlsVersion::Tls12, TlsVersion::Tls13]);
        let other = listener_tls(&p, "OTHER").unwrap();
        assert_eq!(other.keystore, pem_file("/all.pem"));
        assert_eq!(other.client_auth, ClientAuth::None);
    }

    #[test]
    fn inline_pem_needs_no_type() {
        let p = props(&[
            ("ssl.keystore.key", "KEY"),
            ("ssl.keystore.certificate.chain", "CHAIN"),
            ("ssl.key.password", "secret"),
            ("ssl.truststore.certificates", "CA"),
            ("ssl.enabled.protocols", "TLSv1.3"),
        ]);
        let tls = listener_tls(&p, "SSL").unwrap();
        assert_eq!(
            tls.keystore,
            KeyStore::PemInline {
                key: "KEY".into(),
                chain: "CHAIN".into(),
                key_password: Some("secret".into()),
            }
        );
        assert_eq!(tls.truststore, Some(TrustStore::PemInline("CA".into())));
        assert_eq!(tls.protocols, [TlsVersion::Tls13]);
    }

    #[test]
    fn pkcs12_stores_are_opened_with_their_passwords() {
        let p = props(&[
            ("ssl.keystore.type", "pkcs12"),
            ("ssl.keystore.location", "/k.p12"),
            ("ssl.keystore.password", "store"),
            ("ssl.truststore.type", "PKCS12"),
            ("ssl.truststore.location", "/t.p12"),
        ]);
        let tls = listener_tls(&p, "SSL").unwrap();
        assert_eq!(
            tls.keystore,
            KeyStore::Pkcs12 {
                path: "/k.p12".into(),
                password: "store".into()
            }
        );
        assert_eq!(
            tls.truststore,
            Some(TrustStore::Pkcs12 {
                path: "/t.p12".into(),
                password: None
            })
        );
    }

    #[test]
    fn what_cannot_be_served_is_refused_with_what_to_do() {
        let refused = |pairs: &[(&str, &str)], says: &str| {
            let error = listener_tls(&props(pairs), "SSL").unwrap_err().to_string();
            assert!(error.contains(says), "{error:?} should say {says:?}");
        };
        refused(&[], "has no keystore");
        // Kafka's default keystore type is JKS.
        refused(
            &[("ssl.keystore.location", "/k.jks")],
            "keytool -importkeystore",
        );
        refused(
            &[
                ("ssl.keystore.type", "PKCS12"),
                ("ssl.keystore.location", "/k.p12"),
            ],
            "needs its password",
        );
        refused(
            &[
                ("ssl.keystore.type", "PEM"),
                ("ssl.keystore.location", "/k.pem"),
                ("ssl.keystore.password", "store"),
            ],
            "takes no store password",
        );
        refused(
            &[("ssl.keystore.key", "KEY")],
            "without the certificate chain",
        );
        let pem = [
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", "/k.pem"),
        ];
        refused(
            &[pem[0], pem[1], ("ssl.client.auth", "required")],
            "no truststore",
        );
        refused(
            &[pem[0], pem[1], ("ssl.client.auth", "always")],
            "required, requested, none",
        );
        refused(
            &[pem[0], pem[1], ("ssl.enabled.protocols", "TLSv1.1")],
            "TLSv1.1 is not served",
        );
    }
}
