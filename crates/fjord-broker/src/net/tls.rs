//! TLS on a listener, on rustls: the server side built once, before the broker touches its
//! data, from the listener's settings (`fjord_config::TlsSettings`: key material from PEM, an
//! encrypted PKCS#8 key or a PKCS12 store; client certificates none / requested / required
//! against the truststore; the enabled versions and cipher suites); and the client side of this
//! node's links to the others (`client_config`), from the same kind of settings.

use std::sync::Arc;

use fjord_config::{ClientAuth, KeyStore, LinkTls, TlsSettings, TlsVersion, TrustStore};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    CertificateError, DigitallySignedStruct, RootCertStore, ServerConfig, SupportedCipherSuite,
};

/// Why a listener's TLS cannot be set up; each names the file or setting at fault.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsSetupError(String);

fn fail(message: impl Into<String>) -> TlsSetupError {
    TlsSetupError(message.into())
}

/// Each TLS listener's replaceable server side, by listener name.
pub type ListenersTls = std::collections::BTreeMap<String, Arc<ListenerTls>>;

/// A listener's server-side TLS, replaceable while the listener serves (a keystore changed with
/// `kafka-configs`): each connection handshakes with the config current when it was accepted.
/// Beside it, the certificate it presents, which a replacement must match.
pub struct ListenerTls(std::sync::RwLock<(Arc<ServerConfig>, Option<CertificateDer<'static>>)>);

impl ListenerTls {
    pub fn new(
        config: Arc<ServerConfig>,
        certificate: Option<CertificateDer<'static>>,
    ) -> Arc<ListenerTls> {
        Arc::new(ListenerTls(std::sync::RwLock::new((config, certificate))))
    }

    fn read(
        &self,
    ) -> std::sync::RwLockReadGuard<'_, (Arc<ServerConfig>, Option<CertificateDer<'static>>)> {
        self.0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn current(&self) -> Arc<ServerConfig> {
        self.read().0.clone()
    }

    /// The certificate the listener presents.
    pub fn certificate(&self) -> Option<CertificateDer<'static>> {
        self.read().1.clone()
    }

    /// Builds the listener's TLS again from `settings` (reading its files again): new
    /// connections use it from now on, those open keep theirs. On error the listener keeps what
    /// it has.
    pub fn load(&self, settings: &TlsSettings) -> Result<(), TlsSetupError> {
        let config = server_config(settings)?;
        let certificate = leaf_certificate(&settings.keystore)?;
        *self
            .0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = (config, Some(certificate));
        Ok(())
    }
}

/// The certificate a keystore presents (the first of its chain).
pub fn leaf_certificate(keystore: &KeyStore) -> Result<CertificateDer<'static>, TlsSetupError> {
    let (chain, _) = key_and_chain(keystore)?;
    chain
        .into_iter()
        .next()
        .ok_or_else(|| fail("keystore: no certificate"))
}

/// Whether a listener's new certificate may replace its old one, as Kafka allows by default
/// (`ssl.allow.dn.changes` and `ssl.allow.san.changes` false): the same subject, and every
/// subject alternative name of the old one kept.
pub fn same_identity(old: &[u8], new: &[u8]) -> Result<(), String> {
    let (old_name, new_name) = (distinguished_name(old), distinguished_name(new));
    if old_name != new_name {
        return Err(format!(
            "the new keystore's certificate is for {}, not {}",
            new_name.unwrap_or_else(|| "an unreadable subject".into()),
            old_name.unwrap_or_else(|| "an unreadable subject".into())
        ));
    }
    let (old_names, new_names) = (alternative_names(old), alternative_names(new));
    let dropped: Vec<&String> = old_names
        .iter()
        .filter(|n| !new_names.contains(n))
        .collect();
    if !dropped.is_empty() {
        return Err(format!(
            "the new keystore's certificate no longer names {dropped:?}"
        ));
    }
    Ok(())
}

/// A certificate's subject alternative names, as text.
fn alternative_names(certificate: &[u8]) -> Vec<String> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let Ok((_, parsed)) = X509Certificate::from_der(certificate) else {
        return Vec::new();
    };
    match parsed.subject_alternative_name() {
        Ok(Some(names)) => names
            .value
            .general_names
            .iter()
            .map(|n| n.to_string())
            .collect(),
        _ => Vec::new(),
    }
}

/// The server side of TLS for a listener with `settings`.
pub fn server_config(settings: &TlsSettings) -> Result<Arc<ServerConfig>, TlsSetupError> {
    let provider = Arc::new(provider(&settings.cipher_suites)?);
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions(&settings.protocols))
        .map_err(|e| fail(format!("ssl.enabled.protocols with ssl.cipher.suites: {e}")))?;
    let builder = match settings.client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        auth => {
            let trusted = settings.truststore.as_ref().ok_or_else(|| {
                fail("client certificates are asked for, but no truststore is configured")
            })?;
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots(trusted)?), provider);
            let verifier = match auth {
                ClientAuth::Requested => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            builder.with_client_cert_verifier(
                verifier
                    .build()
                    .map_err(|e| fail(format!("truststore: {e}")))?,
            )
        }
    };
    let (chain, key) = key_and_chain(&settings.keystore)?;
    let config = builder.with_single_cert(chain, key).map_err(|e| {
        fail(format!(
            "keystore: the key does not fit the certificate: {e}"
        ))
    })?;
    Ok(Arc::new(config))
}

/// The client side of TLS for one of this node's links: the other node's certificate must chain
/// to the truststore (and name the host reached, unless the link says not to check); this node's
/// own certificate is shown when the other node asks for one.
pub fn client_config(link: &LinkTls) -> Result<Arc<rustls::ClientConfig>, TlsSetupError> {
    let provider = Arc::new(provider(&link.cipher_suites)?);
    let webpki = WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots(&link.truststore)?),
        provider.clone(),
    )
    .build()
    .map_err(|e| fail(format!("truststore: {e}")))?;
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions(&link.protocols))
        .map_err(|e| fail(format!("ssl.enabled.protocols with ssl.cipher.suites: {e}")))?;
    let builder = if link.verify_hostname {
        builder.with_webpki_verifier(webpki)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyHostName(webpki)))
    };
    let config = match &link.keystore {
        None => builder.with_no_client_auth(),
        Some(keystore) => {
            let (chain, key) = key_and_chain(keystore)?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                fail(format!(
                    "keystore: the key does not fit the certificate: {e}"
                ))
            })?
        }
    };
    Ok(Arc::new(config))
}

/// `ssl.endpoint.identification.algorithm` empty: the other node's certificate must chain to the
/// truststore, whatever host it names.
#[derive(Debug)]
struct AnyHostName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // The chain and validity are checked before the name; only the name's verdict is waived.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            verdict => verdict,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

fn versions(protocols: &[TlsVersion]) -> Vec<&'static rustls::SupportedProtocolVersion> {
    protocols
        .iter()
        .map(|v| match v {
            TlsVersion::Tls12 => &rustls::version::TLS12,
            TlsVersion::Tls13 => &rustls::version::TLS13,
        })
        .collect()
}

/// The IANA name of a suite (rustls calls the TLS 1.3 ones `TLS13_…`), as `ssl.cipher.suites`
/// names them.
/// A certificate's subject as Java's `X500Principal.getName()` writes it (RFC 2253), the name
/// Kafka maps to a TLS client's principal: the last RDN first, each `TYPE=value` with RFC 2253's
/// keywords and escapes, an attribute without a keyword as its OID and `#` with its DER in hex.
pub fn distinguished_name(certificate: &[u8]) -> Option<String> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, parsed) = X509Certificate::from_der(certificate).ok()?;
    let rdns: Vec<String> = parsed
        .subject()
        .iter_rdn()
        .map(|rdn| {
            rdn.iter()
                .map(|attribute| {
                    let oid = attribute.attr_type().to_id_string();
                    let keyword = match oid.as_str() {
                        "2.5.4.3" => Some("CN"),
                        "2.5.4.6" => Some("C"),
                        "2.5.4.7" => Some("L"),
                        "2.5.4.8" => Some("ST"),
                        "2.5.4.9" => Some("STREET"),
                        "2.5.4.10" => Some("O"),
                        "2.5.4.11" => Some("OU"),
                        "0.9.2342.19200300.100.1.25" => Some("DC"),
                        "0.9.2342.19200300.100.1.1" => Some("UID"),
                        _ => None,
                    };
                    match (keyword, attribute.as_str()) {
                        (Some(keyword), Ok(value)) => format!("{keyword}={}", escape(value)),
                        _ => {
                            let value = attribute.attr_value();
                            let mut der = vec![value.tag().0 as u8];
                            let len = value.data.len();
                            if len < 0x80 {
                                der.push(len as u8);
                            } else {
                                let bytes: Vec<u8> = len
                                    .to_be_bytes()
                                    .into_iter()
                                    .skip_while(|b| *b == 0)
                                    .collect();
                                der.push(0x80 | bytes.len() as u8);
                                der.extend(bytes);
                            }
                            der.extend_from_slice(value.data);
                            let hex: String = der.iter().map(|b| format!("{b:02x}")).collect();
                            format!("{}=#{hex}", keyword.unwrap_or(&oid))
                        }
                    }
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    Some(rdns.into_iter().rev().collect::<Vec<_>>().join(","))
}

/// An attribute value with RFC 2253's escapes.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn iana_name(suite: &SupportedCipherSuite) -> String {
    let name = format!("{:?}", suite.suite());
    match name.strip_prefix("TLS13_") {
        Some(rest) => format!("TLS_{rest}"),
        None => name,
    }
}

/// aws-lc-rs's provider, with only the suites `ssl.cipher.suites` names when it names any. Names of
/// suites rustls does not implement (CBC, RSA key exchange) are skipped with a warning, as a
/// Java broker skips those its JVM lacks; none left is an error.
fn provider(names: &[String]) -> Result<CryptoProvider, TlsSetupError> {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    if names.is_empty() {
        return Ok(provider);
    }
    let served: Vec<String> = provider.cipher_suites.iter().map(iana_name).collect();
    for name in names.iter().filter(|n| !served.contains(n)) {
        tracing::warn!(suite = %name, "ssl.cipher.suites names a suite fjord does not serve; skipped");
    }
    provider
        .cipher_suites
        .retain(|s| names.contains(&iana_name(s)));
    if provider.cipher_suites.is_empty() {
        return Err(fail(format!(
            "ssl.cipher.suites names no suite fjord serves (it serves {})",
            served.join(", ")
        )));
    }
    Ok(provider)
}

fn key_and_chain(
    keystore: &KeyStore,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsSetupError> {
    let (key_origin, chain_origin) = keystore.origins();
    let (chain, key) = match keystore {
        KeyStore::PemFile { path, key_password } => {
            let pem = read(path, &key_origin)?;
            (
                certificates(&pem, &chain_origin)?,
                private_key(&pem, key_password.as_deref(), &key_origin)?,
            )
        }
        KeyStore::PemInline {
            key,
            chain,
            key_password,
        } => (
            certificates(chain.as_bytes(), &chain_origin)?,
            private_key(key.as_bytes(), key_password.as_deref(), &key_origin)?,
        ),
        KeyStore::Pkcs12 { path, password } => pkcs12_key_and_chain(path, password, &key_origin)?,
    };
    if chain.is_empty() {
        return Err(fail(format!("{chain_origin}: no certificate found")));
    }
    Ok((chain, key))
}

fn read(path: &std::path::Path, origin: &str) -> Result<Vec<u8>, TlsSetupError> {
    std::fs::read(path).map_err(|e| fail(format!("{origin}: {e}")))
}

/// The PKCS12 store at `path`. Strict for a keystore (a key and its chain); relaxed for a
/// truststore, whose certificates may come without Java's trusted-certificate mark (an
/// `openssl pkcs12 -nokeys` store).
fn pkcs12(
    path: &std::path::Path,
    password: &str,
    policy: p12_keystore::Pkcs12ImportPolicy,
    origin: &str,
) -> Result<p12_keystore::KeyStore, TlsSetupError> {
    let der = read(path, origin)?;
    p12_keystore::KeyStore::from_pkcs12(&der, password, policy).map_err(|e| {
        fail(format!(
            "{origin}: not a PKCS12 store this password opens: {e}"
        ))
    })
}

/// The store's private key entry: its key (PKCS#8) and certificate chain.
fn pkcs12_key_and_chain(
    path: &std::path::Path,
    password: &str,
    origin: &str,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsSetupError> {
    let store = pkcs12(
        path,
        password,
        p12_keystore::Pkcs12ImportPolicy::Strict,
        origin,
    )?;
    let (_, entry) = store
        .private_key_chain()
        .ok_or_else(|| fail(format!("{origin}: no private key entry")))?;
    let chain = entry
        .certs()
        .iter()
        .map(|c| CertificateDer::from(c.as_der().to_vec()))
        .collect();
    let key = PrivateKeyDer::Pkcs8(entry.key().as_der().to_vec().into());
    Ok((chain, key))
}

fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(format!("{what}: unreadable certificate: {e}")))
}

const ENCRYPTED_BEGIN: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----";
const ENCRYPTED_END: &str = "-----END ENCRYPTED PRIVATE KEY-----";

/// The private key in `pem`: an encrypted PKCS#8 one decrypted with `password` (Kafka reads
/// only that kind encrypted), else an unencrypted PKCS#8, PKCS#1 or SEC1 one.
fn private_key(
    pem: &[u8],
    password: Option<&str>,
    what: &str,
) -> Result<PrivateKeyDer<'static>, TlsSetupError> {
    let text = String::from_utf8_lossy(pem);
    let encrypted = text.find(ENCRYPTED_BEGIN).and_then(|start| {
        let end = text[start..].find(ENCRYPTED_END)? + start + ENCRYPTED_END.len();
        Some(&text[start..end])
    });
    match (encrypted, password) {
        (Some(block), Some(password)) => decrypt(block, password, what),
        (Some(_), None) => Err(fail(format!(
            "{what}: the private key is encrypted; ssl.key.password must give its password"
        ))),
        (None, _) => PrivateKeyDer::from_pem_slice(pem)
            .map_err(|e| fail(format!("{what}: no readable private key: {e}"))),
    }
}

fn decrypt(
    block: &str,
    password: &str,
    what: &str,
) -> Result<PrivateKeyDer<'static>, TlsSetupError> {
    let (_, der) = pkcs8::der::pem::decode_vec(block.as_bytes())
        .map_err(|e| fail(format!("{what}: unreadable encrypted key: {e}")))?;
    let info = pkcs8::EncryptedPrivateKeyInfoRef::try_from(der.as_slice())
        .map_err(|e| fail(format!("{what}: unreadable encrypted key: {e}")))?;
    let key = info.decrypt(password).map_err(|e| {
        fail(format!(
            "{what}: cannot decrypt the private key with ssl.key.password: {e}"
        ))
    })?;
    Ok(PrivateKeyDer::Pkcs8(key.as_bytes().to_vec().into()))
}

fn roots(trusted: &TrustStore) -> Result<RootCertStore, TlsSetupError> {
    let origin = trusted.origin();
    let certs = match trusted {
        TrustStore::PemFile(path) => certificates(&read(path, &origin)?, &origin)?,
        TrustStore::PemInline(pem) => certificates(pem.as_bytes(), &origin)?,
        TrustStore::Pkcs12 { path, password } => {
            let password = password.as_deref().unwrap_or_default();
            let relaxed = p12_keystore::Pkcs12ImportPolicy::Relaxed;
            let store = pkcs12(path, password, relaxed, &origin)?;
            store
                .entries()
                .flat_map(|(_, entry)| match entry {
                    p12_keystore::KeyStoreEntry::Certificate(cert) => vec![cert.clone()],
                    p12_keystore::KeyStoreEntry::PrivateKeyChain(chain) => chain.certs().to_vec(),
                    p12_keystore::KeyStoreEntry::Secret(_) => Vec::new(),
                })
                .map(|c| CertificateDer::from(c.as_der().to_vec()))
                .collect()
        }
    };
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots
            .add(cert)
            .map_err(|e| fail(format!("{origin}: {e}")))?;
    }
    if roots.is_empty() {
        return Err(fail(format!("{origin}: no certificate found")));
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjord_common::Requester;
    use std::net::SocketAddr;
    use std::time::Duration;

    use bytes::Bytes;
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::watch;
    use tokio_rustls::TlsConnector;

    use crate::net::{
        serve, Dispatch, ListenerSecurity, NetworkConfig, Reply, Response, Sequencing,
    };

    /// Answers every request with its own body.
    struct Echo;

    impl Dispatch for Echo {
        fn sequencing(&self, _frame: &Bytes) -> Sequencing {
            Sequencing::AfterAll
        }

        fn dispatch(&self, frame: Bytes, _requester: &Arc<Requester>) -> Reply {
            Reply::Now(Response::Send(frame))
        }
    }

    /// A test CA, and a certificate with its key (PEM) signed by it for `name`.
    struct Pki {
        ca: CertifiedIssuer<'static, KeyPair>,
    }

    impl Pki {
        fn new() -> Pki {
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
            Pki { ca }
        }

        fn issue(&self, name: &str) -> (String, String) {
            let key = KeyPair::generate().unwrap();
            let params = CertificateParams::new(vec![name.to_string()]).unwrap();
            let cert = params.signed_by(&key, &self.ca).unwrap();
            (cert.pem(), key.serialize_pem())
        }
    }

    #[test]
    fn a_new_certificate_must_keep_the_subject_and_the_names_of_the_old() {
        let pki = Pki::new();
        let leaf = |names: &[&str], common_name: &str| {
            let key = KeyPair::generate().unwrap();
            let mut params =
                CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                    .unwrap();
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, common_name);
            params.signed_by(&key, &pki.ca).unwrap().der().to_vec()
        };
        let old = leaf(&["localhost"], "broker");
        assert_eq!(
            same_identity(&old, &leaf(&["localhost", "b.example"], "broker")),
            Ok(())
        );
        let renamed = same_identity(&old, &leaf(&["localhost"], "impostor")).unwrap_err();
        assert!(renamed.contains("CN=impostor"), "{renamed}");
        let dropped = same_identity(&old, &leaf(&["b.example"], "broker")).unwrap_err();
        assert!(dropped.contains("localhost"), "{dropped}");
    }

    #[test]
    fn a_listener_loads_new_settings_and_keeps_its_own_when_they_fail() {
        let pki = Pki::new();
        let first = settings(&pki, ClientAuth::None);
        let tls = ListenerTls::new(server_config(&first).unwrap(), None);
        assert!(tls.certificate().is_none());
        let second = settings(&pki, ClientAuth::None);
        tls.load(&second).unwrap();
        let loaded = tls.certificate().unwrap();
        assert_eq!(loaded, leaf_certificate(&second.keystore).unwrap());
        let broken = TlsSettings {
            keystore: KeyStore::PemInline {
                key: "not a key".into(),
                chain: "not a chain".into(),
                key_password: None,
            },
            ..second
        };
        assert!(tls.load(&broken).is_err());
        assert_eq!(tls.certificate(), Some(loaded));
    }

    fn settings(pki: &Pki, client_auth: ClientAuth) -> TlsSettings {
        let (chain, key) = pki.issue("localhost");
        TlsSettings {
            keystore: KeyStore::PemInline {
                key,
                chain,
                key_password: None,
            },
            truststore: Some(TrustStore::PemInline(pki.ca.pem())),
            client_auth,
            protocols: vec![TlsVersion::Tls12, TlsVersion::Tls13],
            cipher_suites: Vec::new(),
            principal_mapper: Default::default(),
        }
    }

    async fn listen(settings: &TlsSettings) -> (SocketAddr, watch::Sender<bool>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, shutdown) = watch::channel(false);
        let config = NetworkConfig {
            socket_request_max_bytes: 1024,
            connections_max_idle_ms: 5_000,
            listener: "SSL".into(),
            metrics: crate::metrics::Metrics::new(),
            slow_request: None,
        };
        let security = ListenerSecurity {
            limits: None,
            tls: Some(ListenerTls::new(server_config(settings).unwrap(), None)),
            sasl: None,
            certificate_principals: None,
        };
        tokio::spawn(serve(listener, Arc::new(Echo), config, security, shutdown));
        (address, stop)
    }

    /// A client trusting `pki`'s CA, with a certificate of its own when `identity` is given.
    fn connector(pki: &Pki, identity: Option<(String, String)>) -> TlsConnector {
        let mut roots = RootCertStore::empty();
        roots.add(pki.ca.der().clone()).unwrap();
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
        let config = match identity {
            None => builder.with_no_client_auth(),
            Some((chain, key)) => builder
                .with_client_auth_cert(
                    certificates(chain.as_bytes(), "chain").unwrap(),
                    private_key(key.as_bytes(), None, "key").unwrap(),
                )
                .unwrap(),
        };
        TlsConnector::from(Arc::new(config))
    }

    /// Sends one frame and reads the answer; an error when the broker closed the connection.
    async fn echo(
        connector: &TlsConnector,
        address: SocketAddr,
        body: &[u8],
    ) -> std::io::Result<Vec<u8>> {
        let tcp = TcpStream::connect(address).await?;
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut tls = connector.connect(name, tcp).await?;
        tls.write_all(&(body.len() as i32).to_be_bytes()).await?;
        tls.write_all(body).await?;
        let mut size = [0u8; 4];
        tls.read_exact(&mut size).await?;
        let mut answer = vec![0u8; i32::from_be_bytes(size) as usize];
        tls.read_exact(&mut answer).await?;
        Ok(answer)
    }

    #[tokio::test]
    async fn required_client_auth_serves_trusted_certificates_only() {
        let pki = Pki::new();
        let (address, _stop) = listen(&settings(&pki, ClientAuth::Required)).await;
        let trusted = connector(&pki, Some(pki.issue("client")));
        assert_eq!(echo(&trusted, address, b"hello").await.unwrap(), b"hello");
        // TLS 1.3: the client learns of the refusal when it reads.
        let anonymous = connector(&pki, None);
        assert!(echo(&anonymous, address, b"hello").await.is_err());
        let stranger = Pki::new();
        let untrusted = connector(&pki, Some(stranger.issue("client")));
        assert!(echo(&untrusted, address, b"hello").await.is_err());
    }

    /// A link's TLS trusting `pki`'s CA, with its own certificate when `identity` is given.
    fn link(pki: &Pki, identity: Option<(String, String)>, verify_hostname: bool) -> LinkTls {
        LinkTls {
            keystore: identity.map(|(chain, key)| KeyStore::PemInline {
                key,
                chain,
                key_password: None,
            }),
            truststore: TrustStore::PemInline(pki.ca.pem()),
            protocols: vec![TlsVersion::Tls13],
            cipher_suites: Vec::new(),
            verify_hostname,
        }
    }

    /// One echo over a link's TLS to `host` at `address`.
    async fn link_echo(
        link: &LinkTls,
        address: SocketAddr,
        host: &str,
    ) -> std::io::Result<Vec<u8>> {
        let connector = TlsConnector::from(client_config(link).unwrap());
        let tcp = TcpStream::connect(address).await?;
        let name = rustls::pki_types::ServerName::try_from(host.to_string()).unwrap();
        let mut tls = connector.connect(name, tcp).await?;
        tls.write_all(&2i32.to_be_bytes()).await?;
        tls.write_all(b"ok").await?;
        let mut answer = [0u8; 6];
        tls.read_exact(&mut answer).await?;
        Ok(answer[4..].to_vec())
    }

    #[tokio::test]
    async fn a_links_tls_checks_the_chain_always_and_the_host_name_unless_told_not_to() {
        let pki = Pki::new();
        // The node's certificate names localhost only.
        let (address, _stop) = listen(&settings(&pki, ClientAuth::Required)).await;
        let me = || Some(pki.issue("node"));
        assert_eq!(
            link_echo(&link(&pki, me(), true), address, "localhost")
                .await
                .unwrap(),
            b"ok"
        );
        assert!(link_echo(&link(&pki, me(), true), address, "127.0.0.1")
            .await
            .is_err());
        assert_eq!(
            link_echo(&link(&pki, me(), false), address, "127.0.0.1")
                .await
                .unwrap(),
            b"ok"
        );
        // A listener that asks for a certificate refuses a link without one.
        assert!(link_echo(&link(&pki, None, true), address, "localhost")
            .await
            .is_err());
        // Another CA's truststore: the chain fails, however lax the name check.
        let stranger = Pki::new();
        let mut foreign = link(&pki, me(), false);
        foreign.truststore = TrustStore::PemInline(stranger.ca.pem());
        assert!(link_echo(&foreign, address, "localhost").await.is_err());
    }

    #[tokio::test]
    async fn requested_client_auth_serves_clients_without_a_certificate() {
        let pki = Pki::new();
        let (address, _stop) = listen(&settings(&pki, ClientAuth::Requested)).await;
        let anonymous = connector(&pki, None);
        assert_eq!(echo(&anonymous, address, b"hi").await.unwrap(), b"hi");
    }

    #[tokio::test]
    async fn a_plaintext_client_on_a_tls_listener_is_closed_at_once() {
        let pki = Pki::new();
        let (address, _stop) = listen(&settings(&pki, ClientAuth::None)).await;
        let mut plain = TcpStream::connect(address).await.unwrap();
        plain.write_all(&5i32.to_be_bytes()).await.unwrap();
        plain.write_all(b"hello").await.unwrap();
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut rest)).await;
        // Closed (perhaps after a TLS alert), never answered in plaintext.
        assert!(read.is_ok(), "the broker must not wait for more");
        assert!(!rest.windows(5).any(|w| w == b"hello"));
    }

    #[test]
    fn cipher_suites_are_named_as_kafka_names_them() {
        let pki = Pki::new();
        let mut only = settings(&pki, ClientAuth::None);
        only.cipher_suites = vec![
            "TLS_AES_256_GCM_SHA384".into(),
            "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384".into(),
        ];
        let provider = provider(&only.cipher_suites).unwrap();
        let kept: Vec<String> = provider.cipher_suites.iter().map(iana_name).collect();
        assert_eq!(kept, ["TLS_AES_256_GCM_SHA384"]);
        only.cipher_suites = vec!["TLS_RSA_WITH_RC4_128_MD5".into()];
        assert!(server_config(&only).is_err());
    }

    #[tokio::test]
    async fn a_request_left_waiting_by_a_tls_client_that_closed_is_never_applied() {
        use crate::net::tests::requests_dispatched_for_a_client_that_closed;
        let pki = Pki::new();
        let tls = Some(server_config(&settings(&pki, ClientAuth::None)).unwrap());
        let client = connector(&pki, None);
        let connect = |address| async move {
            let tcp = TcpStream::connect(address).await.unwrap();
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            // Its shutdown sends close_notify, then ends the socket.
            client.connect(name, tcp).await.unwrap()
        };
        let dispatched = requests_dispatched_for_a_client_that_closed(tls, connect).await;
        assert_eq!(dispatched, vec![Bytes::from_static(b"first")]);
    }

    #[test]
    fn an_encrypted_pkcs8_key_is_read_with_its_password() {
        use pkcs8::der::Decode;
        let pki = Pki::new();
        let (chain, key) = pki.issue("localhost");
        let der = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
        let info = pkcs8::PrivateKeyInfoRef::from_der(der.secret_der()).unwrap();
        let params = pkcs8::pkcs5::pbes2::Parameters::generate_pbkdf2_sha256_aes256cbc(
            2048, &[7; 16], [9; 16],
        )
        .unwrap();
        let encrypted = info.encrypt_with_params(params, "secret").unwrap();
        let pem = pkcs8::der::pem::encode_string(
            "ENCRYPTED PRIVATE KEY",
            pkcs8::LineEnding::LF,
            encrypted.as_bytes(),
        )
        .unwrap();
        let decrypted = private_key(pem.as_bytes(), Some("secret"), "key").unwrap();
        assert_eq!(decrypted.secret_der(), der.secret_der());
        let error = private_key(pem.as_bytes(), Some("wrong"), "key").unwrap_err();
        assert!(error.to_string().contains("cannot decrypt"), "{error}");
        let error = private_key(pem.as_bytes(), None, "key").unwrap_err();
        assert!(error.to_string().contains("ssl.key.password"), "{error}");
        // A keystore whose key needs it serves TLS.
        let mut with_password = settings(&pki, ClientAuth::None);
        with_password.keystore = KeyStore::PemInline {
            key: pem,
            chain,
            key_password: Some("secret".into()),
        };
        assert!(server_config(&with_password).is_ok());
    }

    #[test]
    fn a_certificate_is_named_as_java_names_it() {
        use rcgen::{DistinguishedName, DnType, DnValue};
        let mut name = DistinguishedName::new();
        name.push(DnType::CountryName, "NO");
        name.push(DnType::OrganizationName, "Example, Inc");
        name.push(DnType::OrganizationalUnitName, "eng");
        name.push(DnType::CommonName, DnValue::Utf8String("alice".into()));
        // emailAddress has no RFC 2253 keyword: its OID and DER.
        name.push(
            DnType::CustomDnType(vec![1, 2, 840, 113549, 1, 9, 1]),
            DnValue::Ia5String("a@x".try_into().unwrap()),
        );
        let mut params = CertificateParams::new(vec!["client".to_string()]).unwrap();
        params.distinguished_name = name;
        let key = KeyPair::generate().unwrap();
        let certificate = params.self_signed(&key).unwrap();
        assert_eq!(
            distinguished_name(certificate.der()).as_deref(),
            Some("1.2.840.113549.1.9.1=#1603614078,CN=alice,OU=eng,O=Example\\, Inc,C=NO")
        );
        assert_eq!(distinguished_name(b"not a certificate"), None);
    }

    #[test]
    fn a_pkcs12_keystore_and_truststore_serve_tls() {
        let pki = Pki::new();
        let (chain, key) = pki.issue("localhost");
        let dir = tempfile::tempdir().unwrap();
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
        let certs = certificates(chain.as_bytes(), "chain").unwrap();
        let mut store = p12_keystore::KeyStore::new();
        let entry = p12_keystore::PrivateKeyChain::new(
            b"1".to_vec(),
            p12_keystore::PrivateKey::from_der(key.secret_der()).unwrap(),
            certs
                .iter()
                .map(|c| p12_keystore::Certificate::from_der(c).unwrap()),
        );
        store.add_entry(
            "broker",
            p12_keystore::KeyStoreEntry::PrivateKeyChain(entry),
        );
        let keystore = dir.path().join("broker.p12");
        std::fs::write(&keystore, store.writer("store-pw").write().unwrap()).unwrap();
        let mut trusted = p12_keystore::KeyStore::new();
        let ca = p12_keystore::Certificate::from_der(pki.ca.der()).unwrap();
        trusted.add_entry("ca", p12_keystore::KeyStoreEntry::Certificate(ca));
        let truststore = dir.path().join("trust.p12");
        std::fs::write(&truststore, trusted.writer("trust-pw").write().unwrap()).unwrap();
        let mut settings = settings(&pki, ClientAuth::Required);
        settings.keystore = KeyStore::Pkcs12 {
            path: keystore.clone(),
            password: "store-pw".into(),
        };
        settings.truststore = Some(TrustStore::Pkcs12 {
            path: truststore,
            password: Some("trust-pw".into()),
        });
        assert!(server_config(&settings).is_ok());
        settings.keystore = KeyStore::Pkcs12 {
            path: keystore,
            password: "wrong".into(),
        };
        let error = server_config(&settings).unwrap_err().to_string();
        assert!(error.contains("password"), "{error}");
    }
}
