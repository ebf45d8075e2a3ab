//! How this node connects to the others: over the inter-broker listener (replication,
//! transaction markers and verification, the metadata quorum's leader reaching a learner) and
//! over the controller listener (registration and heartbeats, forwarded requests, the quorum's
//! voters), each secured as the listener it connects to is, from the keys Kafka's client side of
//! those links reads: the listener's protocol in `listener.security.protocol.map`, its
//! `listener.name.<l>.ssl.*` over `ssl.*`, `sasl.mechanism.inter.broker.protocol` or
//! `sasl.mechanism.controller.protocol`, and the login in the listener's JAAS text for that
//! mechanism (`username` and `password`; `unsecuredLoginStringClaim_sub` for OAUTHBEARER).

use std::collections::BTreeMap;

use fjord_common::scram::ScramMechanism;

use crate::sasl::{self, mechanism_jaas, MechanismRefused};
use crate::tls::{self, LinkTls};
use crate::{invalid, ConfigError, SaslMechanism, SaslSettings, SecurityProtocol};

/// How one of this node's links connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkSettings {
    /// The listener, on the other nodes, the link connects to.
    pub listener: String,
    /// For SSL and SASL_SSL.
    pub tls: Option<LinkTls>,
    /// For SASL_PLAINTEXT and SASL_SSL.
    pub login: Option<LinkLogin>,
}

impl LinkSettings {
    /// A link that connects in plaintext.
    pub fn plaintext(listener: &str) -> LinkSettings {
        LinkSettings {
            listener: listener.to_string(),
            tls: None,
            login: None,
        }
    }
}

/// How a link logs in over SASL, and as whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkLogin {
    Plain {
        username: String,
        password: String,
    },
    Scram {
        mechanism: ScramMechanism,
        username: String,
        password: String,
    },
    /// An unsecured token (Kafka's unsecured login callback): valid only where the other node
    /// validates tokens the unsecured way too.
    OAuthBearer {
        principal: String,
        lifetime_s: i64,
    },
}

/// The two kinds of link, by the key naming their SASL mechanism.
#[derive(Clone, Copy)]
pub(crate) enum Link {
    InterBroker,
    Controller,
}

impl Link {
    fn mechanism_key(self) -> &'static str {
        match self {
            Link::InterBroker => "sasl.mechanism.inter.broker.protocol",
            Link::Controller => "sasl.mechanism.controller.protocol",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Link::InterBroker => "inter-broker",
            Link::Controller => "controller",
        }
    }
}

/// The settings of `link` to `listener`. `local` are the SASL settings of that listener on this
/// node, when this node serves it: the link's mechanism must be one it enables (as Kafka checks).
pub(crate) fn link_settings(
    props: &BTreeMap<String, String>,
    protocols: &BTreeMap<String, SecurityProtocol>,
    listener: &str,
    link: Link,
    local: Option<&SaslSettings>,
) -> Result<LinkSettings, ConfigError> {
    let protocol = protocols
        .get(&listener.to_ascii_uppercase())
        .copied()
        .or_else(|| SecurityProtocol::parse(listener))
        .ok_or_else(|| {
            invalid(
                "listener.security.protocol.map",
                "",
                format!(
                    "the {} link connects to listener {listener}, which the map gives no \
                     security protocol",
                    link.name()
                ),
            )
        })?;
    let tls = match protocol {
        SecurityProtocol::Ssl | SecurityProtocol::SaslSsl => {
            Some(tls::link_tls(props, listener, link.name())?)
        }
        _ => None,
    };
    let login = match protocol {
        SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl => {
            Some(link_login(props, listener, link, local)?)
        }
        _ => None,
    };
    Ok(LinkSettings {
        listener: listener.to_string(),
        tls,
        login,
    })
}

fn link_login(
    props: &BTreeMap<String, String>,
    listener: &str,
    link: Link,
    local: Option<&SaslSettings>,
) -> Result<LinkLogin, ConfigError> {
    let key = link.mechanism_key();
    let name = props
        .get(key)
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| "GSSAPI".to_string());
    let mechanism = sasl::parse_mechanism(&name).map_err(|why| {
        let why = match why {
            MechanismRefused::Gssapi => format!(
                "the {} link to SASL listener {listener} would log in with GSSAPI (Kerberos{}), \
                 which fjord does not serve; set {key} to PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 \
                 or OAUTHBEARER",
                link.name(),
                if props.contains_key(key) {
                    ""
                } else {
                    ", Kafka's default"
                }
            ),
            MechanismRefused::Unknown => format!("unknown SASL mechanism {name:?}"),
        };
        invalid(key, &name, why)
    })?;
    if let Some(local) = local.filter(|l| !l.mechanisms.contains(&mechanism)) {
        let enabled: Vec<&str> = local.mechanisms.iter().map(|m| m.name()).collect();
        return Err(invalid(
            key,
            &name,
            format!(
                "listener {listener} does not enable {name} (it enables {}): the {} link could \
                 not log in to it",
                enabled.join(", "),
                link.name()
            ),
        ));
    }
    let scoped = format!(
        "listener.name.{}.{}.",
        listener.to_ascii_lowercase(),
        mechanism.name().to_ascii_lowercase()
    );
    let jaas_key = format!("{scoped}sasl.jaas.config");
    let missing = |what: &str| {
        invalid(
            &jaas_key,
            "[hidden]",
            format!(
                "the {} link logs in to listener {listener} with {name}, and the listener's JAAS \
                 text gives no {what} for it",
                link.name()
            ),
        )
    };
    let entry = mechanism_jaas(props, &scoped, mechanism)?.ok_or_else(|| missing("login"))?;
    let option = |name: &str| entry.options.get(name).filter(|v| !v.is_empty()).cloned();
    let credentials = || -> Result<(String, String), ConfigError> {
        Ok((
            option("username").ok_or_else(|| missing("username"))?,
            option("password").ok_or_else(|| missing("password"))?,
        ))
    };
    Ok(match mechanism {
        SaslMechanism::Plain => {
            let (username, password) = credentials()?;
            LinkLogin::Plain { username, password }
        }
        SaslMechanism::Scram(mechanism) => {
            let (username, password) = credentials()?;
            LinkLogin::Scram {
                mechanism,
                username,
                password,
            }
        }
        SaslMechanism::OAuthBearer => LinkLogin::OAuthBearer {
            principal: option("unsecuredLoginStringClaim_sub")
                .ok_or_else(|| missing("unsecuredLoginStringClaim_sub"))?,
            lifetime_s: match option("unsecuredLoginLifetimeSeconds") {
                None => 3600,
                Some(s) => s
                    .parse()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| missing("valid unsecuredLoginLifetimeSeconds"))?,
            },
        },
    })
}
