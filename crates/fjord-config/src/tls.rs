//! A listener's TLS settings from Kafka's `ssl.*` keys, each overridable per listener as
//! `listener.name.<listener name in lower case>.ssl.*` (the override wins), as Kafka reads them.
//! Pure: the settings name files and carry PEM text; the broker reads and checks the key
//! material when it starts the listener.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::{broker_default, invalid, split_list, ConfigError};

/// Where a listener's private key and certificate chain come from (`ssl.keystore.type` PEM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyStore {
    /// `ssl.keystore.location`: one PEM file holding the key and the chain.
    PemFile(PathBuf),
    /// `ssl.keystore.key` and `ssl.keystore.certificate.chain`: the PEM text itself.
    PemInline { key: String, chain: String },
}

impl KeyStore {
    /// Where the key and where the chain come from, named by the keys that set them (for errors).
    pub fn origins(&self) -> (String, String) {
        match self {
            KeyStore::PemFile(path) => {
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

/// The certificates a listener trusts client certificates to (`ssl.truststore.type` PEM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrustStore {
    /// `ssl.truststore.location`: a PEM file of certificates.
    PemFile(PathBuf),
    /// `ssl.truststore.certificates`: the PEM text itself.
    PemInline(String),
}

impl TrustStore {
    /// Where the certificates come from, named by the key that sets them (for errors).
    pub fn origin(&self) -> String {
        match self {
            TrustStore::PemFile(path) => format!("ssl.truststore.location {}", path.display()),
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
}

/// The value of `key` for `listener` and the key it was found under: its `listener.name.`
/// override, else the key itself, else Kafka's default. Empty counts as unset, as Kafka treats
/// an empty location or password.
fn listener_value(
    props: &BTreeMap<String, String>,
    listener: &str,
    key: &'static str,
) -> (String, Option<String>) {
    let prefixed = format!("listener.name.{}.{key}", listener.to_ascii_lowercase());
    let (found_as, value) = match props.get(&prefixed) {
        Some(value) => (prefixed, Some(value.clone())),
        None => (
            key.to_string(),
            props
                .get(key)
                .cloned()
                .or_else(|| broker_default(key).map(str::to_string)),
        ),
    };
    (found_as, value.filter(|v| !v.trim().is_empty()))
}

/// The TLS settings of listener `listener`, checked: a keystore fjord can read must be given.
pub(crate) fn listener_tls(
    props: &BTreeMap<String, String>,
    listener: &str,
) -> Result<TlsSettings, ConfigError> {
    let get = |key: &'static str| listener_value(props, listener, key);
    let keystore = keystore(listener, &get)?;
    let (password_key, key_password) = get("ssl.key.password");
    if key_password.is_some() {
        return Err(invalid(
            &password_key,
            "[hidden]",
            "encrypted private keys are not read by fjord yet; decrypt the key with \
             `openssl pkcs8 -topk8 -nocrypt -in <key> -out <key.pem>` and unset it",
        ));
    }
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
    let (_, suites) = get("ssl.cipher.suites");
    Ok(TlsSettings {
        keystore,
        truststore,
        client_auth,
        protocols: versions,
        cipher_suites: suites
            .map(|s| split_list(&s).into_iter().map(String::from).collect())
            .unwrap_or_default(),
    })
}

/// What `ssl.keystore.type` says fjord cannot read, and what to do instead.
fn unreadable_store(kind: &str) -> Option<&'static str> {
    match kind {
        "PEM" => None,
        "JKS" => Some(
            "JKS keystores are not read by fjord; convert one with `keytool -importkeystore \
             -srckeystore <jks> -destkeystore store.p12 -deststoretype PKCS12` and then \
             `openssl pkcs12 -in store.p12 -nodes -out store.pem`, and set the type to PEM",
        ),
        "PKCS12" => Some(
            "PKCS12 stores are not read by fjord yet; convert one with `openssl pkcs12 -in \
             <store.p12> -nodes -out store.pem` and set the type to PEM",
        ),
        _ => Some("the store types are PEM, PKCS12 and JKS; fjord reads PEM"),
    }
}

fn keystore(
    listener: &str,
    get: &dyn Fn(&'static str) -> (String, Option<String>),
) -> Result<KeyStore, ConfigError> {
    let (_, location) = get("ssl.keystore.location");
    let (key_key, key) = get("ssl.keystore.key");
    let (chain_key, chain) = get("ssl.keystore.certificate.chain");
    let (type_key, kind) = get("ssl.keystore.type");
    let kind = kind.unwrap_or_default().trim().to_ascii_uppercase();
    // Kafka takes inline PEM text whatever the type's default; a location needs the type.
    match (location, key, chain) {
        (None, Some(key), Some(chain)) => Ok(KeyStore::PemInline { key, chain }),
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
        (Some(location), None, None) => match unreadable_store(&kind) {
            None => Ok(KeyStore::PemFile(PathBuf::from(location))),
            Some(why) => Err(invalid(&type_key, &kind, why)),
        },
        (Some(_), _, _) => Err(invalid(
            &key_key,
            "",
            "ssl.keystore.location and an inline key exclude each other",
        )),
        (None, None, None) => Err(invalid(
            "listeners",
            listener,
            format!(
                "SSL listener {listener} has no keystore: set ssl.keystore.type=PEM and \
                 ssl.keystore.location, or ssl.keystore.key and ssl.keystore.certificate.chain \
                 (for this listener alone: listener.name.{}.ssl.*)",
                listener.to_ascii_lowercase()
            ),
        )),
    }
}

fn truststore(
    get: &dyn Fn(&'static str) -> (String, Option<String>),
) -> Result<Option<TrustStore>, ConfigError> {
    let (location_key, location) = get("ssl.truststore.location");
    let (_, certificates) = get("ssl.truststore.certificates");
    let (type_key, kind) = get("ssl.truststore.type");
    let kind = kind.unwrap_or_default().trim().to_ascii_uppercase();
    match (location, certificates) {
        (None, None) => Ok(None),
        (None, Some(certificates)) => Ok(Some(TrustStore::PemInline(certificates))),
        (Some(location), None) => match unreadable_store(&kind) {
            None => Ok(Some(TrustStore::PemFile(PathBuf::from(location)))),
            Some(why) => Err(invalid(&type_key, &kind, why)),
        },
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
        assert_eq!(secure.keystore, KeyStore::PemFile("/secure.pem".into()));
        assert_eq!(secure.client_auth, ClientAuth::Required);
        assert_eq!(
            secure.truststore,
            Some(TrustStore::PemFile("/ca.pem".into()))
        );
        assert_eq!(secure.protocols, [TlsVersion::Tls12, TlsVersion::Tls13]);
        let other = listener_tls(&p, "OTHER").unwrap();
        assert_eq!(other.keystore, KeyStore::PemFile("/all.pem".into()));
        assert_eq!(other.client_auth, ClientAuth::None);
    }

    #[test]
    fn inline_pem_needs_no_type() {
        let p = props(&[
            ("ssl.keystore.key", "KEY"),
            ("ssl.keystore.certificate.chain", "CHAIN"),
            ("ssl.truststore.certificates", "CA"),
            ("ssl.enabled.protocols", "TLSv1.3"),
        ]);
        let tls = listener_tls(&p, "SSL").unwrap();
        assert_eq!(
            tls.keystore,
            KeyStore::PemInline {
                key: "KEY".into(),
                chain: "CHAIN".into()
            }
        );
        assert_eq!(tls.truststore, Some(TrustStore::PemInline("CA".into())));
        assert_eq!(tls.protocols, [TlsVersion::Tls13]);
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
            "openssl pkcs12",
        );
        refused(
            &[("ssl.keystore.key", "KEY")],
            "without the certificate chain",
        );
        refused(
            &[
                ("ssl.keystore.key", "KEY"),
                ("ssl.keystore.certificate.chain", "CHAIN"),
                ("ssl.key.password", "secret"),
            ],
            "openssl pkcs8",
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
