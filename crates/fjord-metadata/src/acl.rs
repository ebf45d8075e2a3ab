//! Access control lists with the semantics of Kafka's `StandardAuthorizer`: the ACL types and
//! their wire codes, the filters of DescribeAcls and DeleteAcls, the image's index of ACLs by
//! resource, and the decision itself ([`Authorizer::authorize`]).
//!
//! The decision for a principal doing an operation on a resource from a host: a super user may
//! do anything; otherwise every ACL on the resource counts — LITERAL ones naming it, the LITERAL
//! wildcard `*`, and PREFIXED ones whose name starts it — and among those naming the principal
//! (or `User:*`) and the host (or `*`): a DENY for the operation (or ALL) refuses, else an ALLOW
//! for it (or ALL, or one that implies it: READ, WRITE, DELETE and ALTER imply DESCRIBE;
//! ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows, else the answer is refusal — unless the
//! resource has no ACL at all, when `allow.everyone.if.no.acl.found` decides.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use fjord_common::{KafkaPrincipal, Requester, Uuid};

/// The resource name of the cluster, the only one a CLUSTER ACL may name.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// The resource name (LITERAL) and host matching any.
pub const WILDCARD: &str = "*";
/// The principal matching any user.
pub const WILDCARD_PRINCIPAL: &str = "User:*";

/// Declares a Kafka enum with its wire codes and names, and `ANY` (1) for filters.
macro_rules! kafka_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $code:literal, $text:literal;)+ }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($variant,)+
        }

        impl $name {
            /// The value a wire code names; `None` for UNKNOWN (0), ANY (1) and codes Kafka
            /// does not define.
            pub fn from_code(code: i8) -> Option<Self> {
                match code {
                    $($code => Some($name::$variant),)+
                    _ => None,
                }
            }

            pub fn code(self) -> i8 {
                match self {
                    $($name::$variant => $code,)+
                }
            }

            pub fn all() -> &'static [$name] {
                &[$($name::$variant,)+]
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(match self {
                    $($name::$variant => $text,)+
                })
            }
        }
    };
}

/// The wire code meaning "any value" in a filter.
pub const ANY_CODE: i8 = 1;
/// The pattern-type filter code MATCH: every pattern that matches a name.
pub const MATCH_CODE: i8 = 2;

kafka_enum!(
    /// What an ACL is about.
    ResourceType {
        Topic = 2, "TOPIC";
        Group = 3, "GROUP";
        Cluster = 4, "CLUSTER";
        TransactionalId = 5, "TRANSACTIONAL_ID";
        DelegationToken = 6, "DELEGATION_TOKEN";
        User = 7, "USER";
    }
);

kafka_enum!(
    /// How an ACL's resource name matches: the name itself, or every name it starts.
    PatternType {
        Literal = 3, "LITERAL";
        Prefixed = 4, "PREFIXED";
    }
);

kafka_enum!(
    /// What an ACL allows or denies.
    AclOperation {
        All = 2, "ALL";
        Read = 3, "READ";
        Write = 4, "WRITE";
        Create = 5, "CREATE";
        Delete = 6, "DELETE";
        Alter = 7, "ALTER";
        Describe = 8, "DESCRIBE";
        ClusterAction = 9, "CLUSTER_ACTION";
        DescribeConfigs = 10, "DESCRIBE_CONFIGS";
        AlterConfigs = 11, "ALTER_CONFIGS";
        IdempotentWrite = 12, "IDEMPOTENT_WRITE";
        CreateTokens = 13, "CREATE_TOKENS";
        DescribeTokens = 14, "DESCRIBE_TOKENS";
        TwoPhaseCommit = 15, "TWO_PHASE_COMMIT";
    }
);

kafka_enum!(
    /// Whether an ACL allows or denies.
    AclPermission {
        Deny = 2, "DENY";
        Allow = 3, "ALLOW";
    }
);

impl AclOperation {
    /// Whether an ALLOW for `self` also allows `wanted`.
    fn allows(self, wanted: AclOperation) -> bool {
        use AclOperation::*;
        self == All
            || self == wanted
            || (wanted == Describe && matches!(self, Read | Write | Delete | Alter))
            || (wanted == DescribeConfigs && self == AlterConfigs)
    }

    /// Whether a DENY for `self` denies `wanted`.
    fn denies(self, wanted: AclOperation) -> bool {
        self == AclOperation::All || self == wanted
    }
}

/// One ACL: a resource pattern and an entry saying who may (or may not) do what from where.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub resource_name: String,
    pub pattern_type: PatternType,
    /// `Type:name`, as the client sent it (`User:alice`, `User:*`).
    pub principal: String,
    /// A client address as Java writes it, or `*`.
    pub host: String,
    pub operation: AclOperation,
    pub permission: AclPermission,
}

/// Why an ACL or a filter is refused (Kafka answers INVALID_REQUEST with the message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidAcl(pub String);

impl AclBinding {
    /// An ACL from its wire codes, checked as Kafka checks an ACL it is asked to create.
    #[allow(clippy::too_many_arguments)]
    pub fn from_wire(
        resource_type: i8,
        resource_name: &str,
        pattern_type: i8,
        principal: &str,
        host: &str,
        operation: i8,
        permission: i8,
    ) -> Result<AclBinding, InvalidAcl> {
        let invalid = |what: &str, code: i8| InvalidAcl(format!("Invalid {what} {code}"));
        let resource_type =
            ResourceType::from_code(resource_type).ok_or(invalid("resourceType", resource_type))?;
        let pattern_type =
            PatternType::from_code(pattern_type).ok_or(invalid("patternType", pattern_type))?;
        let operation =
            AclOperation::from_code(operation).ok_or(invalid("operation", operation))?;
        let permission =
            AclPermission::from_code(permission).ok_or(invalid("permissionType", permission))?;
        if resource_name.is_empty() {
            return Err(InvalidAcl("Resource name should not be empty".into()));
        }
        parse_principal(principal)?;
        Ok(AclBinding {
            resource_type,
            resource_name: resource_name.to_string(),
            pattern_type,
            principal: principal.to_string(),
            host: host.to_string(),
            operation,
            permission,
        })
    }
}

/// Splits `Type:name`, as Kafka parses an ACL's principal.
pub fn parse_principal(principal: &str) -> Result<KafkaPrincipal, InvalidAcl> {
    match principal.split_once(':') {
        Some((principal_type, name)) if !principal_type.is_empty() => Ok(KafkaPrincipal {
            principal_type: principal_type.to_string(),
            name: name.to_string(),
        }),
        _ => Err(InvalidAcl(format!(
            "expected a string in format principalType:principalName but got {principal}"
        ))),
    }
}

/// A DescribeAcls or DeleteAcls filter: each `None` matches anything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AclFilter {
    pub resource_type: Option<ResourceType>,
    pub resource_name: Option<String>,
    pub pattern: PatternFilter,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Option<AclOperation>,
    pub permission: Option<AclPermission>,
}

/// Which patterns a filter matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PatternFilter {
    /// Any pattern type; a name must equal the pattern's.
    #[default]
    Any,
    /// Every pattern that would match the name (LITERAL equal or `*`, PREFIXED starting it).
    Match,
    /// This pattern type only.
    Exactly(PatternType),
}

impl AclFilter {
    /// A filter from its wire codes; UNKNOWN (or an undefined code) is refused, as Kafka does.
    #[allow(clippy::too_many_arguments)]
    pub fn from_wire(
        resource_type: i8,
        resource_name: Option<&str>,
        pattern_type: i8,
        principal: Option<&str>,
        host: Option<&str>,
        operation: i8,
        permission: i8,
    ) -> Result<AclFilter, InvalidAcl> {
        fn any_or<T>(
            code: i8,
            parse: fn(i8) -> Option<T>,
            what: &str,
        ) -> Result<Option<T>, InvalidAcl> {
            if code == ANY_CODE {
                return Ok(None);
            }
            parse(code)
                .map(Some)
                .ok_or_else(|| InvalidAcl(format!("Unknown {what} {code} in the filter")))
        }
        let pattern =
            match pattern_type {
                ANY_CODE => PatternFilter::Any,
                MATCH_CODE => PatternFilter::Match,
                code => PatternFilter::Exactly(PatternType::from_code(code).ok_or_else(|| {
                    InvalidAcl(format!("Unknown patternType {code} in the filter"))
                })?),
            };
        Ok(AclFilter {
            resource_type: any_or(resource_type, ResourceType::from_code, "resourceType")?,
            resource_name: resource_name.map(str::to_string),
            pattern,
            principal: principal.map(str::to_string),
            host: host.map(str::to_string),
            operation: any_or(operation, AclOperation::from_code, "operation")?,
            permission: any_or(permission, AclPermission::from_code, "permissionType")?,
        })
    }

    pub fn matches(&self, acl: &AclBinding) -> bool {
        self.matches_pattern(acl)
            && self.principal.as_ref().is_none_or(|p| *p == acl.principal)
            && self.host.as_ref().is_none_or(|h| *h == acl.host)
            && self.operation.is_none_or(|o| o == acl.operation)
            && self.permission.is_none_or(|p| p == acl.permission)
    }

    fn matches_pattern(&self, acl: &AclBinding) -> bool {
        if self.resource_type.is_some_and(|t| t != acl.resource_type) {
            return false;
        }
        let Some(name) = &self.resource_name else {
            return match self.pattern {
                PatternFilter::Exactly(p) => p == acl.pattern_type,
                _ => true,
            };
        };
        match self.pattern {
            PatternFilter::Any => *name == acl.resource_name,
            PatternFilter::Exactly(p) => p == acl.pattern_type && *name == acl.resource_name,
            PatternFilter::Match => match acl.pattern_type {
                PatternType::Literal => *name == acl.resource_name || acl.resource_name == WILDCARD,
                PatternType::Prefixed => name.starts_with(&acl.resource_name),
            },
        }
    }
}

/// One ACL's entry as the index keeps it under its resource pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
struct IndexedEntry {
    id: Uuid,
    principal: String,
    host: String,
    operation: AclOperation,
    permission: AclPermission,
}

/// Every ACL of the cluster, by id and indexed by resource for the authorizer. Part of the
/// metadata image.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Acls {
    by_id: BTreeMap<Uuid, AclBinding>,
    /// (resource type, pattern type) → resource name → entries.
    index: HashMap<(ResourceType, PatternType), HashMap<String, Vec<IndexedEntry>>>,
}

impl Acls {
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Every ACL with its id, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (&Uuid, &AclBinding)> {
        self.by_id.iter()
    }

    pub fn get(&self, id: &Uuid) -> Option<&AclBinding> {
        self.by_id.get(id)
    }

    pub fn contains(&self, acl: &AclBinding) -> bool {
        self.entries(acl.resource_type, acl.pattern_type, &acl.resource_name)
            .iter()
            .any(|e| {
                e.principal == acl.principal
                    && e.host == acl.host
                    && e.operation == acl.operation
                    && e.permission == acl.permission
            })
    }

    /// Adds `acl` under `id`; false (and nothing changed) if the id is taken.
    pub fn insert(&mut self, id: Uuid, acl: AclBinding) -> bool {
        if self.by_id.contains_key(&id) {
            return false;
        }
        self.index
            .entry((acl.resource_type, acl.pattern_type))
            .or_default()
            .entry(acl.resource_name.clone())
            .or_default()
            .push(IndexedEntry {
                id,
                principal: acl.principal.clone(),
                host: acl.host.clone(),
                operation: acl.operation,
                permission: acl.permission,
            });
        self.by_id.insert(id, acl);
        true
    }

    /// Removes the ACL with `id`, returning it.
    pub fn remove(&mut self, id: &Uuid) -> Option<AclBinding> {
        let acl = self.by_id.remove(id)?;
        let key = (acl.resource_type, acl.pattern_type);
        if let Some(names) = self.index.get_mut(&key) {
            if let Some(entries) = names.get_mut(&acl.resource_name) {
                entries.retain(|e| e.id != *id);
                if entries.is_empty() {
                    names.remove(&acl.resource_name);
                }
            }
            if names.is_empty() {
                self.index.remove(&key);
            }
        }
        Some(acl)
    }

    fn entries(
        &self,
        resource_type: ResourceType,
        pattern: PatternType,
        name: &str,
    ) -> &[IndexedEntry] {
        self.index
            .get(&(resource_type, pattern))
            .and_then(|names| names.get(name))
            .map_or(&[], Vec::as_slice)
    }

    /// Every ACL pattern that applies to the resource `name`: LITERAL equal, LITERAL `*`, and
    /// PREFIXED ones it starts with.
    fn applicable<'a>(
        &'a self,
        resource_type: ResourceType,
        name: &'a str,
    ) -> impl Iterator<Item = &'a IndexedEntry> {
        let literal = self.entries(resource_type, PatternType::Literal, name);
        let wildcard = if name == WILDCARD {
            &[][..]
        } else {
            self.entries(resource_type, PatternType::Literal, WILDCARD)
        };
        let prefixed = self.index.get(&(resource_type, PatternType::Prefixed));
        let prefixes = prefixed.into_iter().flat_map(move |names| {
            name.char_indices()
                .map(|(i, c)| &name[..i + c.len_utf8()])
                .filter_map(|prefix| names.get(prefix))
                .flatten()
        });
        literal.iter().chain(wildcard).chain(prefixes)
    }
}

/// Whether an ACL naming `principal` names `requester`'s principal.
fn names(requester: &Requester, principal: &str) -> bool {
    principal == requester.principal_text() || principal == WILDCARD_PRINCIPAL
}

/// Whether an ACL for `host` covers `requester`'s address.
fn covers(requester: &Requester, host: &str) -> bool {
    host == WILDCARD || host == requester.host()
}

/// The authorizer's settings: `super.users` and `allow.everyone.if.no.acl.found`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Authorizer {
    super_users: HashSet<String>,
    allow_if_no_acl: bool,
}

impl Authorizer {
    pub fn new(super_users: impl IntoIterator<Item = String>, allow_if_no_acl: bool) -> Authorizer {
        Authorizer {
            super_users: super_users.into_iter().collect(),
            allow_if_no_acl,
        }
    }

    pub fn is_super_user(&self, requester: &Requester) -> bool {
        self.super_users.contains(requester.principal_text())
    }

    /// Whether `requester` may do `operation` on the resource `name` of `resource_type`.
    pub fn authorize(
        &self,
        acls: &Acls,
        requester: &Requester,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        if self.is_super_user(requester) {
            return true;
        }
        let mut any_acl = false;
        let mut allowed = false;
        for entry in acls.applicable(resource_type, name) {
            any_acl = true;
            if !names(requester, &entry.principal) || !covers(requester, &entry.host) {
                continue;
            }
            match entry.permission {
                AclPermission::Deny if entry.operation.denies(operation) => return false,
                AclPermission::Allow if entry.operation.allows(operation) => allowed = true,
                _ => {}
            }
        }
        allowed || (!any_acl && self.allow_if_no_acl)
    }

    /// Whether `requester` may do `operation` on some resource of `resource_type` (Kafka's
    /// `authorizeByResourceType`, used for an idempotent producer's WRITE on any topic): an
    /// ALLOW not overruled by a DENY of the same LITERAL name, a PREFIXED DENY covering it, or
    /// a DENY of every name.
    pub fn authorize_any(
        &self,
        acls: &Acls,
        requester: &Requester,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        // A name no ACL names: allowed for super users and, with no ACL found, by the setting.
        if self.authorize(acls, requester, operation, resource_type, "hardcode") {
            return true;
        }
        let mut denied: HashMap<PatternType, HashSet<&str>> = HashMap::new();
        let mut allowed: Vec<(PatternType, &str)> = Vec::new();
        for acl in acls.by_id.values() {
            if acl.resource_type != resource_type
                || !covers(requester, &acl.host)
                || !names(requester, &acl.principal)
                || !acl.operation.denies(operation)
            {
                continue;
            }
            match acl.permission {
                AclPermission::Deny => {
                    if acl.pattern_type == PatternType::Literal && acl.resource_name == WILDCARD {
                        return false;
                    }
                    denied
                        .entry(acl.pattern_type)
                        .or_default()
                        .insert(&acl.resource_name);
                }
                AclPermission::Allow => {
                    if acl.pattern_type == PatternType::Literal && acl.resource_name == WILDCARD {
                        return true;
                    }
                    allowed.push((acl.pattern_type, &acl.resource_name));
                }
            }
        }
        let literal_denied = denied.get(&PatternType::Literal);
        let prefix_denied = denied.get(&PatternType::Prefixed);
        allowed.into_iter().any(|(pattern, name)| {
            let denied_literally =
                pattern == PatternType::Literal && literal_denied.is_some_and(|d| d.contains(name));
            let denied_by_prefix = prefix_denied.is_some_and(|d| {
                name.char_indices()
                    .any(|(i, c)| d.contains(&name[..i + c.len_utf8()]))
            });
            !denied_literally && !denied_by_prefix
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(
        resource_type: ResourceType,
        name: &str,
        pattern: PatternType,
        principal: &str,
        host: &str,
        operation: AclOperation,
        permission: AclPermission,
    ) -> AclBinding {
        AclBinding {
            resource_type,
            resource_name: name.into(),
            pattern_type: pattern,
            principal: principal.into(),
            host: host.into(),
            operation,
            permission,
        }
    }

    fn topic_acl(
        name: &str,
        pattern: PatternType,
        principal: &str,
        op: AclOperation,
        permission: AclPermission,
    ) -> AclBinding {
        acl(
            ResourceType::Topic,
            name,
            pattern,
            principal,
            "*",
            op,
            permission,
        )
    }

    fn acls(list: Vec<AclBinding>) -> Acls {
        let mut acls = Acls::default();
        for (i, a) in list.into_iter().enumerate() {
            let mut id = [0u8; 16];
            id[15] = i as u8 + 1;
            assert!(acls.insert(Uuid(id), a));
        }
        acls
    }

    fn alice() -> Requester {
        Requester::new(
            KafkaPrincipal::user("alice"),
            "10.0.0.1:5000".parse().unwrap(),
        )
    }

    use AclOperation::*;
    use AclPermission::*;
    use PatternType::*;

    #[test]
    fn an_allow_for_the_principal_allows_and_implies_describe() {
        let acls = acls(vec![topic_acl(
            "orders",
            Literal,
            "User:alice",
            Write,
            Allow,
        )]);
        let authz = Authorizer::default();
        assert!(authz.authorize(&acls, &alice(), Write, ResourceType::Topic, "orders"));
        assert!(authz.authorize(&acls, &alice(), Describe, ResourceType::Topic, "orders"));
        assert!(!authz.authorize(&acls, &alice(), Read, ResourceType::Topic, "orders"));
        assert!(!authz.authorize(&acls, &alice(), Write, ResourceType::Topic, "order"));
        let bob = Requester::new(
            KafkaPrincipal::user("bob"),
            "10.0.0.1:5000".parse().unwrap(),
        );
        assert!(!authz.authorize(&acls, &bob, Write, ResourceType::Topic, "orders"));
    }

    #[test]
    fn a_deny_wins_over_any_allow_and_all_covers_every_operation() {
        let acls = acls(vec![
            topic_acl("*", Literal, "User:*", All, Allow),
            topic_acl("secret-", Prefixed, "User:alice", Read, Deny),
        ]);
        let authz = Authorizer::default();
        assert!(authz.authorize(&acls, &alice(), Read, ResourceType::Topic, "public"));
        assert!(!authz.authorize(&acls, &alice(), Read, ResourceType::Topic, "secret-plans"));
        assert!(authz.authorize(&acls, &alice(), Write, ResourceType::Topic, "secret-plans"));
        // A DENY of READ does not deny DESCRIBE, which ALL still allows.
        assert!(authz.authorize(
            &acls,
            &alice(),
            Describe,
            ResourceType::Topic,
            "secret-plans"
        ));
    }

    #[test]
    fn no_acl_on_a_resource_is_decided_by_the_setting_and_super_users_pass_everything() {
        let acls = acls(vec![topic_acl("orders", Literal, "User:bob", Read, Allow)]);
        let strict = Authorizer::new(["User:admin".to_string()], false);
        let open = Authorizer::new(Vec::new(), true);
        assert!(!strict.authorize(&acls, &alice(), Read, ResourceType::Topic, "other"));
        assert!(open.authorize(&acls, &alice(), Read, ResourceType::Topic, "other"));
        // An ACL exists on "orders", though for another principal: refused either way.
        assert!(!open.authorize(&acls, &alice(), Read, ResourceType::Topic, "orders"));
        let admin = Requester::new(
            KafkaPrincipal::user("admin"),
            "10.0.0.9:5000".parse().unwrap(),
        );
        assert!(strict.authorize(&acls, &admin, Delete, ResourceType::Cluster, CLUSTER_NAME));
    }

    #[test]
    fn hosts_and_describe_configs_are_matched_as_kafka_does() {
        let acls = acls(vec![
            acl(
                ResourceType::Topic,
                "t",
                Literal,
                "User:alice",
                "10.0.0.2",
                Read,
                Allow,
            ),
            acl(
                ResourceType::Cluster,
                CLUSTER_NAME,
                Literal,
                "User:alice",
                "10.0.0.1",
                AlterConfigs,
                Allow,
            ),
        ]);
        let authz = Authorizer::default();
        assert!(!authz.authorize(&acls, &alice(), Read, ResourceType::Topic, "t"));
        assert!(authz.authorize(
            &acls,
            &alice(),
            DescribeConfigs,
            ResourceType::Cluster,
            CLUSTER_NAME
        ));
        assert!(!authz.authorize(
            &acls,
            &alice(),
            Describe,
            ResourceType::Cluster,
            CLUSTER_NAME
        ));
    }

    #[test]
    fn authorizing_any_resource_of_a_type_honours_denials_that_dominate() {
        let authz = Authorizer::default();
        let denied_by_prefix = acls(vec![
            topic_acl("app-orders", Literal, "User:alice", Write, Allow),
            topic_acl("app-", Prefixed, "User:alice", Write, Deny),
        ]);
        assert!(!authz.authorize_any(&denied_by_prefix, &alice(), Write, ResourceType::Topic));
        let allowed = acls(vec![
            topic_acl("app-orders", Literal, "User:alice", Write, Allow),
            topic_acl("other", Literal, "User:alice", Write, Deny),
        ]);
        assert!(authz.authorize_any(&allowed, &alice(), Write, ResourceType::Topic));
        assert!(!authz.authorize_any(&allowed, &alice(), Write, ResourceType::Group));
    }

    #[test]
    fn filters_match_as_describe_and_delete_acls_do() {
        let literal = topic_acl("orders", Literal, "User:alice", Read, Allow);
        let wildcard = topic_acl("*", Literal, "User:bob", Write, Allow);
        let prefixed = topic_acl("ord", Prefixed, "User:alice", Read, Deny);
        let filter = |name: Option<&str>, pattern: i8| {
            AclFilter::from_wire(
                ResourceType::Topic.code(),
                name,
                pattern,
                None,
                None,
                ANY_CODE,
                ANY_CODE,
            )
            .unwrap()
        };
        let matching = filter(Some("orders"), MATCH_CODE);
        assert!(
            matching.matches(&literal)
                && matching.matches(&wildcard)
                && matching.matches(&prefixed)
        );
        let any = filter(Some("orders"), ANY_CODE);
        assert!(any.matches(&literal) && !any.matches(&wildcard) && !any.matches(&prefixed));
        let prefixed_only = filter(None, Prefixed.code());
        assert!(!prefixed_only.matches(&literal) && prefixed_only.matches(&prefixed));
        assert!(AclFilter::from_wire(0, None, ANY_CODE, None, None, ANY_CODE, ANY_CODE).is_err());
    }

    #[test]
    fn removing_an_acl_takes_it_out_of_the_index() {
        let mut acls = acls(vec![topic_acl(
            "orders",
            Literal,
            "User:alice",
            Read,
            Allow,
        )]);
        let id = *acls.iter().next().unwrap().0;
        assert!(acls.contains(&topic_acl("orders", Literal, "User:alice", Read, Allow)));
        assert!(acls.remove(&id).is_some());
        assert!(acls.is_empty() && acls.index.is_empty());
        assert!(!Authorizer::default().authorize(
            &acls,
            &alice(),
            Read,
            ResourceType::Topic,
            "orders"
        ));
    }

    #[test]
    fn invalid_acls_are_refused_with_kafkas_messages() {
        let ok = AclBinding::from_wire(2, "t", 3, "User:a", "*", 3, 3);
        assert!(ok.is_ok());
        assert!(AclBinding::from_wire(1, "t", 3, "User:a", "*", 3, 3).is_err());
        assert!(AclBinding::from_wire(2, "t", 2, "User:a", "*", 3, 3).is_err());
        assert!(AclBinding::from_wire(2, "", 3, "User:a", "*", 3, 3).is_err());
        assert!(AclBinding::from_wire(2, "t", 3, "alice", "*", 3, 3).is_err());
        assert!(AclBinding::from_wire(2, "t", 3, "User:a", "*", 1, 3).is_err());
        let v6 = Requester::new(KafkaPrincipal::anonymous(), "[::1]:9".parse().unwrap());
        assert_eq!(v6.host(), "0:0:0:0:0:0:0:1");
    }
}
