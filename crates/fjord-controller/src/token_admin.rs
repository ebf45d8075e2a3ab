//! Delegation tokens (`kafka-delegation-tokens --create / --renew / --expire`): the controller
//! issues a token as a record (its id, owner, requester, renewers and times), renews or expires it
//! for its owner or a renewer, and removes tokens past their expiry. The HMAC that authenticates a
//! token is never stored: it is HMAC-SHA512 of the token id keyed with
//! `delegation.token.secret.key`, made again by every node that needs it.
//!
//! The broker has already checked what depends on the connection (a token request on an
//! unauthenticated or token-authenticated connection, CREATE_TOKENS to name another owner);
//! the controller decides with the requesting principal and the wall clock passed in.

use bytes::Bytes;
use fjord_common::errors;
use fjord_common::scram::{delegation_token_hmac, is_delegation_token_hmac};
use fjord_common::KafkaPrincipal;
use fjord_config::DelegationTokenConfig;
use fjord_metadata::{
    DelegationTokenRecord, MetadataImage, MetadataRecord, RemoveDelegationTokenRecord,
};
use fjord_protocol::messages::create_delegation_token_request::CreateDelegationTokenRequest;
use fjord_protocol::messages::create_delegation_token_response::CreateDelegationTokenResponse;
use fjord_protocol::messages::expire_delegation_token_request::ExpireDelegationTokenRequest;
use fjord_protocol::messages::expire_delegation_token_response::ExpireDelegationTokenResponse;
use fjord_protocol::messages::renew_delegation_token_request::RenewDelegationTokenRequest;
use fjord_protocol::messages::renew_delegation_token_response::RenewDelegationTokenResponse;
use fjord_protocol::messages::ResponseBody;

use crate::decision::Decision;

/// What Kafka's error answers carry for the timestamps.
const NO_TIMESTAMP: i64 = -1;

/// `Type:name` back into a principal; None when it is not one.
pub fn parse_principal(text: &str) -> Option<KafkaPrincipal> {
    let (principal_type, name) = text.split_once(':')?;
    Some(KafkaPrincipal {
        principal_type: principal_type.to_string(),
        name: name.to_string(),
    })
}

/// The first CreateDelegationToken and DescribeDelegationToken versions that name the requester.
pub const REQUESTER_FROM_VERSION: i16 = 3;

/// A CreateDelegationToken answer: the owner always, the requester (from v3), the token when
/// `token` is some.
fn created(
    error_code: i16,
    owner: &KafkaPrincipal,
    (requester, version): (&KafkaPrincipal, i16),
    token: Option<(&DelegationTokenRecord, Vec<u8>)>,
) -> ResponseBody {
    let named = version >= REQUESTER_FROM_VERSION;
    let mut response = CreateDelegationTokenResponse {
        error_code,
        principal_type: owner.principal_type.clone(),
        principal_name: owner.name.clone(),
        token_requester_principal_type: if named {
            requester.principal_type.clone()
        } else {
            String::new()
        },
        token_requester_principal_name: if named {
            requester.name.clone()
        } else {
            String::new()
        },
        issue_timestamp_ms: NO_TIMESTAMP,
        expiry_timestamp_ms: NO_TIMESTAMP,
        max_timestamp_ms: NO_TIMESTAMP,
        ..Default::default()
    };
    if let Some((token, hmac)) = token {
        response.issue_timestamp_ms = token.issue_timestamp;
        response.expiry_timestamp_ms = token.expiration_timestamp;
        response.max_timestamp_ms = token.max_timestamp;
        response.token_id = token.token_id.clone();
        response.hmac = Bytes::from(hmac);
    }
    ResponseBody::CreateDelegationToken(response)
}

/// The owner a CreateDelegationToken names (v3), or the requester.
pub fn token_owner(
    request: &CreateDelegationTokenRequest,
    requester: &KafkaPrincipal,
) -> KafkaPrincipal {
    match (&request.owner_principal_type, &request.owner_principal_name) {
        (Some(principal_type), Some(name)) if !name.is_empty() => KafkaPrincipal {
            principal_type: principal_type.clone(),
            name: name.clone(),
        },
        _ => requester.clone(),
    }
}

/// A new token for `requester` (or the owner it names), lasting `delegation.token.expiry.time.ms`
/// before it must be renewed and at most `max.lifetime.ms` (or the shorter lifetime asked for).
pub(crate) fn create(
    config: Option<&DelegationTokenConfig>,
    request: &CreateDelegationTokenRequest,
    (requester, version): (&KafkaPrincipal, i16),
    now_ms: i64,
    token_id: String,
) -> Decision {
    let owner = token_owner(request, requester);
    let requester = (requester, version);
    let Some(config) = config else {
        return Decision::answer(created(
            errors::DELEGATION_TOKEN_AUTH_DISABLED,
            &owner,
            requester,
            None,
        ));
    };
    if request.renewers.iter().any(|r| r.principal_type != "User") {
        return Decision::answer(created(
            errors::INVALID_PRINCIPAL_TYPE,
            &owner,
            requester,
            None,
        ));
    }
    let max_lifetime = match request.max_lifetime_ms {
        asked if asked > 0 => asked.min(config.max_lifetime_ms),
        _ => config.max_lifetime_ms,
    };
    let max_timestamp = now_ms.saturating_add(max_lifetime);
    let token = DelegationTokenRecord {
        token_id,
        owner: owner.to_string(),
        requester: requester.0.to_string(),
        renewers: request
            .renewers
            .iter()
            .map(|r| format!("{}:{}", r.principal_type, r.principal_name))
            .collect(),
        issue_timestamp: now_ms,
        max_timestamp,
        expiration_timestamp: max_timestamp.min(now_ms.saturating_add(config.expiry_time_ms)),
    };
    debug_assert!(token.expiration_timestamp <= token.max_timestamp);
    let hmac = delegation_token_hmac(&config.secret_key, &token.token_id);
    let response = created(errors::NONE, &owner, requester, Some((&token, hmac)));
    Decision {
        records: vec![MetadataRecord::DelegationToken(token)],
        response,
    }
}

/// The token whose HMAC is `hmac`.
fn token_of<'a>(
    image: &'a MetadataImage,
    config: &DelegationTokenConfig,
    hmac: &[u8],
) -> Option<&'a DelegationTokenRecord> {
    image
        .delegation_tokens()
        .find(|t| is_delegation_token_hmac(&config.secret_key, &t.token_id, hmac))
}

/// Whether `principal` may renew or expire `token`: its owner or one of its renewers.
fn may_renew(token: &DelegationTokenRecord, principal: &KafkaPrincipal) -> bool {
    let principal = principal.to_string();
    token.owner == principal || token.renewers.contains(&principal)
}

fn is_expired(token: &DelegationTokenRecord, now_ms: i64) -> bool {
    token.max_timestamp < now_ms || token.expiration_timestamp < now_ms
}

/// The token whose HMAC is `hmac`, with the settings; else the error code.
fn found<'a>(
    image: &'a MetadataImage,
    config: Option<&'a DelegationTokenConfig>,
    hmac: &[u8],
) -> Result<(&'a DelegationTokenRecord, &'a DelegationTokenConfig), i16> {
    let config = config.ok_or(errors::DELEGATION_TOKEN_AUTH_DISABLED)?;
    let token = token_of(image, config, hmac).ok_or(errors::DELEGATION_TOKEN_NOT_FOUND)?;
    Ok((token, config))
}

/// The same token expiring at `expiry`.
fn expiring_at(token: &DelegationTokenRecord, expiry: i64) -> MetadataRecord {
    MetadataRecord::DelegationToken(DelegationTokenRecord {
        expiration_timestamp: expiry,
        ..token.clone()
    })
}

fn renewed(error_code: i16, expiry_timestamp_ms: i64) -> ResponseBody {
    ResponseBody::RenewDelegationToken(RenewDelegationTokenResponse {
        error_code,
        expiry_timestamp_ms,
        ..Default::default()
    })
}

fn expired(error_code: i16, expiry_timestamp_ms: i64) -> ResponseBody {
    ResponseBody::ExpireDelegationToken(ExpireDelegationTokenResponse {
        error_code,
        expiry_timestamp_ms,
        ..Default::default()
    })
}

/// Renews a live token for its owner or a renewer: it now expires after the period asked for
/// (at most `delegation.token.expiry.time.ms`), never past its maximum.
pub(crate) fn renew(
    image: &MetadataImage,
    config: Option<&DelegationTokenConfig>,
    request: &RenewDelegationTokenRequest,
    principal: &KafkaPrincipal,
    now_ms: i64,
) -> Decision {
    let (token, config) = match found(image, config, &request.hmac) {
        Ok(found) => found,
        Err(code) => return Decision::answer(renewed(code, NO_TIMESTAMP)),
    };
    // Kafka's order: an expired token is refused as such, whoever asks.
    if is_expired(token, now_ms) {
        return Decision::answer(renewed(errors::DELEGATION_TOKEN_EXPIRED, NO_TIMESTAMP));
    }
    if !may_renew(token, principal) {
        let code = errors::DELEGATION_TOKEN_OWNER_MISMATCH;
        return Decision::answer(renewed(code, NO_TIMESTAMP));
    }
    let period = match request.renew_period_ms {
        asked if asked > 0 => asked.min(config.expiry_time_ms),
        _ => config.expiry_time_ms,
    };
    let expiry = token.max_timestamp.min(now_ms.saturating_add(period));
    debug_assert!(expiry <= token.max_timestamp);
    Decision {
        records: vec![expiring_at(token, expiry)],
        response: renewed(errors::NONE, expiry),
    }
}

/// Expires a token for its owner or a renewer: at once (a negative period: removed), or after
/// the period asked for, never past its maximum.
pub(crate) fn expire(
    image: &MetadataImage,
    config: Option<&DelegationTokenConfig>,
    request: &ExpireDelegationTokenRequest,
    principal: &KafkaPrincipal,
    now_ms: i64,
) -> Decision {
    let (token, _) = match found(image, config, &request.hmac) {
        Ok(found) => found,
        Err(code) => return Decision::answer(expired(code, NO_TIMESTAMP)),
    };
    if !may_renew(token, principal) {
        let code = errors::DELEGATION_TOKEN_OWNER_MISMATCH;
        return Decision::answer(expired(code, NO_TIMESTAMP));
    }
    if request.expiry_time_period_ms < 0 {
        return Decision {
            records: vec![MetadataRecord::RemoveDelegationToken(
                RemoveDelegationTokenRecord {
                    token_id: token.token_id.clone(),
                },
            )],
            response: expired(errors::NONE, now_ms),
        };
    }
    if is_expired(token, now_ms) {
        return Decision::answer(expired(errors::DELEGATION_TOKEN_EXPIRED, NO_TIMESTAMP));
    }
    let expiry = token
        .max_timestamp
        .min(now_ms.saturating_add(request.expiry_time_period_ms));
    Decision {
        records: vec![expiring_at(token, expiry)],
        response: expired(errors::NONE, expiry),
    }
}

/// The removal of every token expired by `now_ms`.
pub(crate) fn remove_expired(image: &MetadataImage, now_ms: i64) -> Vec<MetadataRecord> {
    image
        .delegation_tokens()
        .filter(|t| is_expired(t, now_ms))
        .map(|t| {
            MetadataRecord::RemoveDelegationToken(RemoveDelegationTokenRecord {
                token_id: t.token_id.clone(),
            })
        })
        .collect()
}

/// The answers to token requests that could not be decided or committed: the owner as the
/// request names it (the requester is not known here).
pub(crate) fn create_refused(
    request: &CreateDelegationTokenRequest,
    error_code: i16,
) -> ResponseBody {
    let nobody = KafkaPrincipal {
        principal_type: String::new(),
        name: String::new(),
    };
    created(
        error_code,
        &token_owner(request, &nobody),
        (&nobody, 0),
        None,
    )
}

pub(crate) fn renew_refused(error_code: i16) -> ResponseBody {
    renewed(error_code, NO_TIMESTAMP)
}

pub(crate) fn expire_refused(error_code: i16) -> ResponseBody {
    expired(error_code, NO_TIMESTAMP)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjord_metadata::MetadataDelta;
    use fjord_protocol::messages::create_delegation_token_request::CreatableRenewers;

    const DAY: i64 = 86_400_000;

    fn config() -> DelegationTokenConfig {
        DelegationTokenConfig {
            secret_key: "secret".into(),
            max_lifetime_ms: 7 * DAY,
            expiry_time_ms: DAY,
            expiry_check_interval_ms: 3_600_000,
        }
    }

    fn applied(image: &MetadataImage, records: &[MetadataRecord]) -> MetadataImage {
        let mut delta = MetadataDelta::new(image);
        for r in records {
            delta.apply(r).unwrap();
        }
        delta.finish(image.offset() + 1)
    }

    fn created_by(
        image: &MetadataImage,
        requester: &str,
        request: CreateDelegationTokenRequest,
        now: i64,
    ) -> (MetadataImage, CreateDelegationTokenResponse) {
        let alice = KafkaPrincipal::user(requester);
        let decision = create(
            Some(&config()),
            &request,
            (&alice, 3),
            now,
            format!("id-{now}"),
        );
        let ResponseBody::CreateDelegationToken(response) = decision.response else {
            panic!("{:?}", decision.response)
        };
        (applied(image, &decision.records), response)
    }

    fn renewers(names: &[&str]) -> Vec<CreatableRenewers> {
        names
            .iter()
            .map(|n| CreatableRenewers {
                principal_type: "User".into(),
                principal_name: n.to_string(),
            })
            .collect()
    }

    #[test]
    fn a_token_is_issued_for_a_day_at_most_a_week_with_the_hmac_of_its_id() {
        let request = CreateDelegationTokenRequest {
            renewers: renewers(&["bob"]),
            max_lifetime_ms: -1,
            ..Default::default()
        };
        let (image, response) = created_by(&MetadataImage::empty(), "alice", request, 1000);
        assert_eq!(response.error_code, errors::NONE);
        assert_eq!(response.principal_name, "alice");
        assert_eq!(response.token_requester_principal_name, "alice");
        assert_eq!(response.issue_timestamp_ms, 1000);
        assert_eq!(response.expiry_timestamp_ms, 1000 + DAY);
        assert_eq!(response.max_timestamp_ms, 1000 + 7 * DAY);
        assert_eq!(
            response.hmac.to_vec(),
            delegation_token_hmac("secret", "id-1000")
        );
        let token = image.delegation_token("id-1000").unwrap();
        assert_eq!(token.owner, "User:alice");
        assert_eq!(token.renewers, vec!["User:bob".to_string()]);
        // A shorter lifetime asked for caps the expiry too; a token for another owner.
        let request = CreateDelegationTokenRequest {
            owner_principal_type: Some("User".into()),
            owner_principal_name: Some("carol".into()),
            max_lifetime_ms: 5000,
            ..Default::default()
        };
        let (image, response) = created_by(&image, "admin", request, 2000);
        assert_eq!(
            (response.expiry_timestamp_ms, response.max_timestamp_ms),
            (7000, 7000)
        );
        let token = image.delegation_token("id-2000").unwrap();
        assert_eq!(
            (token.owner.as_str(), token.requester.as_str()),
            ("User:carol", "User:admin")
        );
        // Disabled, and a renewer that is not a user.
        let refused = create(
            None,
            &CreateDelegationTokenRequest::default(),
            (&KafkaPrincipal::user("alice"), 3),
            0,
            "x".into(),
        );
        assert!(refused.records.is_empty());
        let ResponseBody::CreateDelegationToken(r) = refused.response else {
            panic!()
        };
        assert_eq!(r.error_code, errors::DELEGATION_TOKEN_AUTH_DISABLED);
        let group_renewer = CreateDelegationTokenRequest {
            renewers: vec![CreatableRenewers {
                principal_type: "Group".into(),
                principal_name: "g".into(),
            }],
            ..Default::default()
        };
        let (_, r) = created_by(&image, "alice", group_renewer, 3000);
        assert_eq!(r.error_code, errors::INVALID_PRINCIPAL_TYPE);
        // Before v3 the answer names no requester, and encodes.
        let old = create(
            Some(&config()),
            &CreateDelegationTokenRequest::default(),
            (&KafkaPrincipal::user("alice"), 1),
            0,
            "v1".into(),
        );
        let ResponseBody::CreateDelegationToken(r) = old.response else {
            panic!()
        };
        assert_eq!(r.token_requester_principal_name, "");
        let mut out = bytes::BytesMut::new();
        fjord_protocol::Encodable::encode(&r, &mut out, 1).unwrap();
    }

    #[test]
    fn owners_and_renewers_renew_and_expire_others_may_not() {
        let request = CreateDelegationTokenRequest {
            renewers: renewers(&["bob"]),
            max_lifetime_ms: 3 * DAY,
            ..Default::default()
        };
        let (image, created) = created_by(&MetadataImage::empty(), "alice", request, 0);
        let renew_as = |image: &MetadataImage, who: &str, period: i64, now: i64| {
            let request = RenewDelegationTokenRequest {
                hmac: created.hmac.clone(),
                renew_period_ms: period,
            };
            let decision = renew(
                image,
                Some(&config()),
                &request,
                &KafkaPrincipal::user(who),
                now,
            );
            let ResponseBody::RenewDelegationToken(r) = &decision.response else {
                panic!()
            };
            (
                r.error_code,
                r.expiry_timestamp_ms,
                applied(image, &decision.records),
            )
        };
        // bob renews for an hour; a longer period than the renew interval is cut to it.
        let (code, expiry, image) = renew_as(&image, "bob", 3_600_000, 10);
        assert_eq!((code, expiry), (errors::NONE, 3_600_010));
        assert_eq!(
            image
                .delegation_token(&created.token_id)
                .unwrap()
                .expiration_timestamp,
            expiry
        );
        let (_, expiry, later) = renew_as(&image, "alice", 10 * DAY, 20);
        assert_eq!(expiry, 20 + DAY);
        // Never past its maximum.
        let (_, expiry, later) = renew_as(&later, "alice", -1, DAY + 10);
        assert_eq!(expiry, 2 * DAY + 10);
        let (_, expiry, _) = renew_as(&later, "alice", -1, 2 * DAY + 5);
        assert_eq!(expiry, 3 * DAY);
        let (code, _, _) = renew_as(&image, "mallory", -1, 30);
        assert_eq!(code, errors::DELEGATION_TOKEN_OWNER_MISMATCH);
        let (code, _, _) = renew_as(&image, "alice", -1, 3_600_011);
        assert_eq!(code, errors::DELEGATION_TOKEN_EXPIRED);
        let unknown = RenewDelegationTokenRequest {
            hmac: Bytes::from_static(b"nope"),
            renew_period_ms: -1,
        };
        let r = renew(
            &image,
            Some(&config()),
            &unknown,
            &KafkaPrincipal::user("alice"),
            0,
        );
        let ResponseBody::RenewDelegationToken(r) = r.response else {
            panic!()
        };
        assert_eq!(r.error_code, errors::DELEGATION_TOKEN_NOT_FOUND);

        let expire_as = |image: &MetadataImage, who: &str, period: i64| {
            let request = ExpireDelegationTokenRequest {
                hmac: created.hmac.clone(),
                expiry_time_period_ms: period,
            };
            let decision = expire(
                image,
                Some(&config()),
                &request,
                &KafkaPrincipal::user(who),
                100,
            );
            let ResponseBody::ExpireDelegationToken(r) = &decision.response else {
                panic!()
            };
            (
                r.error_code,
                r.expiry_timestamp_ms,
                applied(image, &decision.records),
            )
        };
        let (code, _, _) = expire_as(&image, "mallory", -1);
        assert_eq!(code, errors::DELEGATION_TOKEN_OWNER_MISMATCH);
        let (code, expiry, later) = expire_as(&image, "bob", 50);
        assert_eq!((code, expiry), (errors::NONE, 150));
        assert!(later.delegation_token(&created.token_id).is_some());
        assert_eq!(remove_expired(&later, 150), Vec::new());
        let removal = remove_expired(&later, 151);
        assert_eq!(removal.len(), 1);
        assert!(applied(&later, &removal)
            .delegation_token(&created.token_id)
            .is_none());
        // A negative period removes it at once.
        let (code, expiry, gone) = expire_as(&image, "alice", -1);
        assert_eq!((code, expiry), (errors::NONE, 100));
        assert!(gone.delegation_token(&created.token_id).is_none());
    }
}
