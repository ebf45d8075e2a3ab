//! Client quotas as the metadata log keeps them (Kafka's `ClientQuotaRecord`): for each entity —
//! a user, a client id, a user and a client id, or an IP address, any of them possibly the
//! default of its type — quota keys and their values. And the lookup a broker enforces them by,
//! with Kafka's precedence (KIP-55): the most specific entity that sets the key wins.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// Entity types.
pub const USER: &str = "user";
pub const CLIENT_ID: &str = "client-id";
pub const IP: &str = "ip";

/// Quota keys of users and client ids: bytes per second, a percentage of request-handling time,
/// and partition mutations per second.
pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
pub const REQUEST_PERCENTAGE: &str = "request_percentage";
pub const CONTROLLER_MUTATION_RATE: &str = "controller_mutation_rate";
/// The quota key of IP addresses: new connections per second.
pub const CONNECTION_CREATION_RATE: &str = "connection_creation_rate";

/// A quota value. Compared bit for bit, so that images and records stay `Eq`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(transparent)]
pub struct QuotaValue(pub f64);

impl PartialEq for QuotaValue {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for QuotaValue {}

/// A quota entity: entity type → name, `None` naming the type's default entity (Kafka's
/// `<default>`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct QuotaEntity(pub BTreeMap<String, Option<String>>);

impl QuotaEntity {
    /// The entity of a user and/or a client id; each `Some(None)` is that type's default.
    fn of(user: Option<Option<&str>>, client_id: Option<Option<&str>>) -> QuotaEntity {
        let mut parts = BTreeMap::new();
        if let Some(user) = user {
            parts.insert(USER.to_string(), user.map(str::to_string));
        }
        if let Some(client_id) = client_id {
            parts.insert(CLIENT_ID.to_string(), client_id.map(str::to_string));
        }
        QuotaEntity(parts)
    }
}

/// Which sensor a quota is measured on (Kafka's quota metric tags): the user, the client id, or
/// both; an empty name stands for "any". Every connection of a user whose quota is set for the
/// user alone shares one sensor, for instance.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QuotaScope {
    pub user: String,
    pub client_id: String,
}

/// Every client quota of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientQuotas {
    entities: BTreeMap<QuotaEntity, BTreeMap<String, QuotaValue>>,
    /// How many entities set each key.
    key_counts: BTreeMap<String, usize>,
}

impl ClientQuotas {
    pub fn is_empty(&self) -> bool {
        self.entities.is_empty()
    }

    /// Every entity with its quotas.
    pub fn iter(&self) -> impl Iterator<Item = (&QuotaEntity, &BTreeMap<String, QuotaValue>)> {
        self.entities.iter()
    }

    pub fn get(&self, entity: &QuotaEntity) -> Option<&BTreeMap<String, QuotaValue>> {
        self.entities.get(entity)
    }

    /// Sets `key` of `entity`, or removes it (`None`); an entity left without keys goes.
    pub fn set(&mut self, entity: QuotaEntity, key: &str, value: Option<f64>) {
        let (added, removed) = match value {
            Some(value) => {
                let quotas = self.entities.entry(entity).or_default();
                (
                    quotas.insert(key.to_string(), QuotaValue(value)).is_none(),
                    false,
                )
            }
            None => match self.entities.get_mut(&entity) {
                Some(quotas) => {
                    let removed = quotas.remove(key).is_some();
                    if quotas.is_empty() {
                        self.entities.remove(&entity);
                    }
                    (false, removed)
                }
                None => (false, false),
            },
        };
        if added {
            *self.key_counts.entry(key.to_string()).or_default() += 1;
        }
        if removed {
            if let Some(count) = self.key_counts.get_mut(key) {
                *count -= 1;
                if *count == 0 {
                    self.key_counts.remove(key);
                }
            }
        }
    }

    /// Whether any entity sets `key`: without one, nothing is measured for it.
    pub fn any_sets(&self, key: &str) -> bool {
        self.key_counts.contains_key(key)
    }

    fn value(&self, entity: &QuotaEntity, key: &str) -> Option<f64> {
        self.entities
            .get(entity)
            .and_then(|quotas| quotas.get(key))
            .map(|v| v.0)
    }

    /// The quota `key` for `user`'s connections as `client_id`, and the sensor it is measured
    /// on; None when no entity sets it. Kafka's order, most specific first: the user and client
    /// id; the user and the default client id; the user; the default user and the client id; the
    /// default user and default client id; the default user; the client id; the default client id.
    pub fn quota_for(&self, key: &str, user: &str, client_id: &str) -> Option<(f64, QuotaScope)> {
        let (limit, scope) = self.sensor_for(key, user, client_id);
        limit.map(|limit| (limit, scope))
    }

    /// The sensor `user`'s connections as `client_id` are measured on for `key`, and its quota
    /// (None: unbounded). Kafka measures every client once any entity sets the key, so that a
    /// quota set later applies to the rate measured so far.
    pub fn sensor_for(&self, key: &str, user: &str, client_id: &str) -> (Option<f64>, QuotaScope) {
        let sets = |user: Option<Option<&str>>, client: Option<Option<&str>>| {
            self.value(&QuotaEntity::of(user, client), key)
        };
        let (u, c) = (Some(Some(user)), Some(Some(client_id)));
        let (default_user, default_client) = (Some(None), Some(None));
        // The sensor, as Kafka tags it: the first level in the order above that sets the key.
        let both = QuotaScope {
            user: user.to_string(),
            client_id: client_id.to_string(),
        };
        let user_only = QuotaScope {
            user: user.to_string(),
            client_id: String::new(),
        };
        let client_only = QuotaScope {
            user: String::new(),
            client_id: client_id.to_string(),
        };
        let levels = [
            (u, c, &both),
            (u, default_client, &both),
            (u, None, &user_only),
            (default_user, c, &both),
            (default_user, default_client, &both),
            (default_user, None, &user_only),
        ];
        let scope = levels
            .iter()
            .find(|(u, c, _)| sets(*u, *c).is_some())
            .map_or(client_only, |(_, _, scope)| (*scope).clone());
        // The quota for that sensor, looked up as Kafka's `quotaLimit` does from its tags.
        let limit = match (scope.user.is_empty(), scope.client_id.is_empty()) {
            (false, false) => sets(u, c)
                .or_else(|| sets(u, default_client))
                .or_else(|| sets(default_user, c))
                .or_else(|| sets(default_user, default_client)),
            (false, true) => sets(u, None).or_else(|| sets(default_user, None)),
            (true, false) => sets(None, c).or_else(|| sets(None, default_client)),
            (true, true) => None,
        };
        (limit, scope)
    }

    /// The connection creation rate allowed from `ip`: its own, else the default IP's.
    /// Addresses are compared, not their spellings (`::1` is `0:0:0:0:0:0:0:1`).
    pub fn connection_rate_for(&self, ip: IpAddr) -> Option<f64> {
        let rate_of = |wanted: Option<IpAddr>| {
            self.entities.iter().find_map(|(entity, quotas)| {
                let name = match entity.0.get(IP) {
                    Some(name) if entity.0.len() == 1 => name,
                    _ => return None,
                };
                let address = match name {
                    Some(name) => Some(name.parse::<IpAddr>().ok()?),
                    None => None,
                };
                (address == wanted).then(|| quotas.get(CONNECTION_CREATION_RATE).map(|v| v.0))?
            })
        };
        rate_of(Some(ip)).or_else(|| rate_of(None))
    }
}

/// DescribeClientQuotas' match types.
pub const MATCH_EXACT: i8 = 0;
pub const MATCH_DEFAULT: i8 = 1;
pub const MATCH_SPECIFIED: i8 = 2;

/// Why a filter is refused: INVALID_REQUEST, or UNSUPPORTED_VERSION for an unknown entity type,
/// as Kafka answers; with its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidFilter {
    pub unsupported: bool,
    pub message: String,
}

/// Which entities a DescribeClientQuotas request asks for: per entity type a name (or the
/// default) it must have, or just that it has the type; `strict` admits no other types.
#[derive(Debug, Clone, Default)]
pub struct QuotaFilter {
    exact: BTreeMap<String, Option<String>>,
    specified: Vec<String>,
    strict: bool,
}

impl QuotaFilter {
    /// A filter of `(entity type, match type, match)` components, checked as Kafka checks them.
    pub fn new<'a>(
        components: impl IntoIterator<Item = (&'a str, i8, Option<&'a str>)>,
        strict: bool,
    ) -> Result<QuotaFilter, InvalidFilter> {
        let invalid = |message: String| InvalidFilter {
            unsupported: false,
            message,
        };
        let mut filter = QuotaFilter {
            strict,
            ..Default::default()
        };
        for (entity_type, match_type, name) in components {
            if entity_type.is_empty() {
                return Err(invalid("Invalid empty entity type.".into()));
            }
            if filter.has(entity_type) {
                return Err(invalid(format!(
                    "Entity type {entity_type} cannot appear more than once in the filter."
                )));
            }
            if ![IP, USER, CLIENT_ID].contains(&entity_type) {
                return Err(InvalidFilter {
                    unsupported: true,
                    message: format!("Unsupported entity type {entity_type}"),
                });
            }
            match (match_type, name) {
                (MATCH_EXACT, Some(name)) => {
                    filter.exact.insert(entity_type.into(), Some(name.into()));
                }
                (MATCH_EXACT, None) => {
                    return Err(invalid(
                        "Request specified MATCH_TYPE_EXACT, but set match string to null.".into(),
                    ))
                }
                (MATCH_DEFAULT, None) => {
                    filter.exact.insert(entity_type.into(), None);
                }
                (MATCH_DEFAULT, Some(_)) => {
                    return Err(invalid(
                        "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                            .into(),
                    ))
                }
                (MATCH_SPECIFIED, None) => filter.specified.push(entity_type.into()),
                (MATCH_SPECIFIED, Some(_)) => {
                    return Err(invalid(
                        "Request specified MATCH_TYPE_SPECIFIED, but also specified a match \
                         string."
                            .into(),
                    ))
                }
                (other, _) => return Err(invalid(format!("Unknown match type {other}"))),
            }
        }
        if filter.has(IP) && (filter.has(USER) || filter.has(CLIENT_ID)) {
            return Err(invalid(
                "Invalid entity filter component combination. IP filter component should not be \
                 used with user or clientId filter component."
                    .into(),
            ));
        }
        Ok(filter)
    }

    fn has(&self, entity_type: &str) -> bool {
        self.exact.contains_key(entity_type) || self.specified.iter().any(|t| t == entity_type)
    }

    pub fn matches(&self, entity: &QuotaEntity) -> bool {
        if self.strict && entity.0.len() != self.exact.len() + self.specified.len() {
            return false;
        }
        self.exact
            .iter()
            .all(|(entity_type, name)| entity.0.get(entity_type) == Some(name))
            && self.specified.iter().all(|t| entity.0.contains_key(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(parts: &[(&str, Option<&str>)]) -> QuotaEntity {
        QuotaEntity(
            parts
                .iter()
                .map(|(t, n)| (t.to_string(), n.map(str::to_string)))
                .collect(),
        )
    }

    fn scope(user: &str, client_id: &str) -> QuotaScope {
        QuotaScope {
            user: user.into(),
            client_id: client_id.into(),
        }
    }

    #[test]
    fn the_most_specific_entity_that_sets_the_key_wins() {
        let mut quotas = ClientQuotas::default();
        let key = PRODUCER_BYTE_RATE;
        assert_eq!(quotas.quota_for(key, "alice", "app"), None);
        quotas.set(entity(&[(CLIENT_ID, None)]), key, Some(8.0));
        assert_eq!(
            quotas.quota_for(key, "alice", "app"),
            Some((8.0, scope("", "app")))
        );
        quotas.set(entity(&[(CLIENT_ID, Some("app"))]), key, Some(7.0));
        assert_eq!(
            quotas.quota_for(key, "alice", "app"),
            Some((7.0, scope("", "app")))
        );
        quotas.set(entity(&[(USER, None)]), key, Some(6.0));
        assert_eq!(
            quotas.quota_for(key, "alice", "app"),
            Some((6.0, scope("alice", "")))
        );
        quotas.set(entity(&[(USER, None), (CLIENT_ID, None)]), key, Some(5.0));
        assert_eq!(
            quotas.quota_for(key, "alice", "app"),
            Some((5.0, scope("alice", "app")))
        );
        quotas.set(
            entity(&[(USER, None), (CLIENT_ID, Some("app"))]),
            key,
            Some(4.0),
        );
        assert_eq!(
            quotas.quota_for(key, "alice", "app"),
            Some((4.0, scope("alice", "app")))
        );
        quotas.set(entity(&[(USER, Some("alice"))]), key, Some(3.0));
        assert_eq!(
            quotas.quota_for(key, "alice", "app"),
            Some((3.0, scope("alice", "")))
        );
        quotas.set(
            entity(&[(USER, Some("alice")), (CLIENT_ID, None)]),
            key,
            Some(2.0),
        );
        assert_eq!(
            quotas.quota_for(key, "alice", "app"),
            Some((2.0, scope("alice", "app")))
        );
        quotas.set(
            entity(&[(USER, Some("alice")), (CLIENT_ID, Some("app"))]),
            key,
            Some(1.0),
        );
        assert_eq!(
            quotas.quota_for(key, "alice", "app"),
            Some((1.0, scope("alice", "app")))
        );
        // Another user falls back to the defaults; another key is unset.
        assert_eq!(
            quotas.quota_for(key, "bob", "app"),
            Some((4.0, scope("bob", "app")))
        );
        assert_eq!(quotas.quota_for(CONSUMER_BYTE_RATE, "alice", "app"), None);
    }

    #[test]
    fn a_user_level_sensor_takes_the_users_quota_not_a_client_ids() {
        let mut quotas = ClientQuotas::default();
        quotas.set(
            entity(&[(USER, Some("alice"))]),
            CONSUMER_BYTE_RATE,
            Some(100.0),
        );
        quotas.set(
            entity(&[(CLIENT_ID, Some("app"))]),
            CONSUMER_BYTE_RATE,
            Some(5.0),
        );
        assert_eq!(
            quotas.quota_for(CONSUMER_BYTE_RATE, "alice", "app"),
            Some((100.0, scope("alice", "")))
        );
        assert_eq!(
            quotas.quota_for(CONSUMER_BYTE_RATE, "bob", "app"),
            Some((5.0, scope("", "app")))
        );
    }

    #[test]
    fn a_filter_matches_names_defaults_and_types_strictly_or_not() {
        let alice = entity(&[(USER, Some("alice"))]);
        let alice_app = entity(&[(USER, Some("alice")), (CLIENT_ID, Some("app"))]);
        let default_user = entity(&[(USER, None)]);
        let filter = |components: &[(&str, i8, Option<&str>)], strict| {
            QuotaFilter::new(components.iter().copied(), strict).unwrap()
        };
        let exact = filter(&[(USER, MATCH_EXACT, Some("alice"))], false);
        assert!(
            exact.matches(&alice) && exact.matches(&alice_app) && !exact.matches(&default_user)
        );
        let strict = filter(&[(USER, MATCH_EXACT, Some("alice"))], true);
        assert!(strict.matches(&alice) && !strict.matches(&alice_app));
        let default = filter(&[(USER, MATCH_DEFAULT, None)], false);
        assert!(default.matches(&default_user) && !default.matches(&alice));
        let any_user = filter(&[(USER, MATCH_SPECIFIED, None)], false);
        assert!(any_user.matches(&alice) && any_user.matches(&default_user));
        assert!(filter(&[], false).matches(&alice));
        assert!(!filter(&[], true).matches(&alice));
        let refused = |components: &[(&str, i8, Option<&str>)]| {
            QuotaFilter::new(components.iter().copied(), false).unwrap_err()
        };
        assert!(refused(&[("group", MATCH_SPECIFIED, None)]).unsupported);
        assert!(!refused(&[(USER, MATCH_EXACT, None)]).unsupported);
        assert!(
            !refused(&[(USER, MATCH_SPECIFIED, None), (USER, MATCH_DEFAULT, None)]).unsupported
        );
        assert!(!refused(&[(IP, MATCH_SPECIFIED, None), (USER, MATCH_DEFAULT, None)]).unsupported);
        assert!(!refused(&[(USER, 7, None)]).unsupported);
    }

    #[test]
    fn removing_the_last_key_removes_the_entity() {
        let mut quotas = ClientQuotas::default();
        let alice = entity(&[(USER, Some("alice"))]);
        quotas.set(alice.clone(), PRODUCER_BYTE_RATE, Some(1.0));
        quotas.set(alice.clone(), CONSUMER_BYTE_RATE, Some(2.0));
        quotas.set(alice.clone(), PRODUCER_BYTE_RATE, None);
        assert_eq!(quotas.get(&alice).map(BTreeMap::len), Some(1));
        quotas.set(alice.clone(), CONSUMER_BYTE_RATE, None);
        assert!(quotas.is_empty());
        assert!(!quotas.any_sets(CONSUMER_BYTE_RATE));
    }

    #[test]
    fn an_ip_has_its_own_connection_rate_or_the_default() {
        let mut quotas = ClientQuotas::default();
        let ip: IpAddr = "127.0.0.2".parse().unwrap();
        assert_eq!(quotas.connection_rate_for(ip), None);
        quotas.set(entity(&[(IP, None)]), CONNECTION_CREATION_RATE, Some(10.0));
        assert_eq!(quotas.connection_rate_for(ip), Some(10.0));
        quotas.set(
            entity(&[(IP, Some("127.0.0.2"))]),
            CONNECTION_CREATION_RATE,
            Some(3.0),
        );
        assert_eq!(quotas.connection_rate_for(ip), Some(3.0));
        quotas.set(
            entity(&[(IP, Some("0:0:0:0:0:0:0:1"))]),
            CONNECTION_CREATION_RATE,
            Some(2.0),
        );
        assert_eq!(
            quotas.connection_rate_for("::1".parse().unwrap()),
            Some(2.0)
        );
    }
}
