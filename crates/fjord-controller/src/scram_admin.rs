//! AlterUserScramCredentials (`kafka-configs --entity-type users --alter --add-config
//! 'SCRAM-SHA-256=[password=…]'`): the controller checks each user's alterations, derives the
//! stored and server keys from the salted password the client sent, and commits a credential
//! record (or its removal) per alteration. A user may be altered once per request (one
//! mechanism): a user altered twice, or with a bad alteration, has none applied.

use std::collections::{BTreeMap, BTreeSet};

use fjord_common::errors;
use fjord_common::scram::{ScramCredential, ScramMechanism, MAX_ITERATIONS, MIN_ITERATIONS};
use fjord_metadata::{
    MetadataImage, MetadataRecord, RemoveUserScramCredentialRecord, UserScramCredentialRecord,
};
use fjord_protocol::messages::alter_user_scram_credentials_request::{
    AlterUserScramCredentialsRequest, ScramCredentialDeletion, ScramCredentialUpsertion,
};
use fjord_protocol::messages::alter_user_scram_credentials_response::{
    AlterUserScramCredentialsResponse, AlterUserScramCredentialsResult,
};
use fjord_protocol::messages::ResponseBody;

use crate::decision::Decision;

/// Why a user's alterations are refused: Kafka's code and message.
type Refusal = (i16, String);

fn refuse(code: i16, message: &str) -> Refusal {
    (code, message.to_string())
}

/// The records for `request` and the answer, one result per user in request order.
pub(crate) fn alter_user_scram_credentials(
    image: &MetadataImage,
    request: &AlterUserScramCredentialsRequest,
) -> Decision {
    // user → how often altered, to refuse a user altered twice.
    let mut altered: BTreeMap<&str, usize> = BTreeMap::new();
    let deletions = request.deletions.iter().map(|d| d.name.as_str());
    let upsertions = request.upsertions.iter().map(|u| u.name.as_str());
    for user in deletions.chain(upsertions) {
        *altered.entry(user).or_default() += 1;
    }
    // Each alteration's record, or why its user is refused, in request order.
    let deletions = request
        .deletions
        .iter()
        .map(|d| (d.name.as_str(), deletion(image, d, &altered)));
    let upsertions = request
        .upsertions
        .iter()
        .map(|u| (u.name.as_str(), upsertion(u, &altered)));
    let mut users: Vec<&str> = Vec::new();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut refused: BTreeMap<&str, Refusal> = BTreeMap::new();
    let mut records: BTreeMap<&str, Vec<MetadataRecord>> = BTreeMap::new();
    for (user, outcome) in deletions.chain(upsertions) {
        if seen.insert(user) {
            users.push(user);
        }
        match outcome {
            Ok(record) => records.entry(user).or_default().push(record),
            Err(refusal) => {
                refused.entry(user).or_insert(refusal);
            }
        }
    }
    let mut committed = Vec::new();
    let mut results = Vec::new();
    for user in users {
        let (error_code, error_message) = match refused.remove(user) {
            Some((code, message)) => (code, Some(message).filter(|m| !m.is_empty())),
            None => {
                committed.extend(records.remove(user).unwrap_or_default());
                (errors::NONE, None)
            }
        };
        results.push(AlterUserScramCredentialsResult {
            user: user.to_string(),
            error_code,
            error_message,
        });
    }
    Decision {
        records: committed,
        response: ResponseBody::AlterUserScramCredentials(AlterUserScramCredentialsResponse {
            results,
            ..Default::default()
        }),
    }
}

/// The removal of an existing credential.
fn deletion(
    image: &MetadataImage,
    deletion: &ScramCredentialDeletion,
    altered: &BTreeMap<&str, usize>,
) -> Result<MetadataRecord, Refusal> {
    let user = deletion.name.as_str();
    let mechanism = check(user, deletion.mechanism, altered)?;
    if image.scram_credential(user, mechanism).is_none() {
        return Err(refuse(
            errors::RESOURCE_NOT_FOUND,
            "Attempt to delete a user credential that does not exist",
        ));
    }
    Ok(MetadataRecord::RemoveUserScramCredential(
        RemoveUserScramCredentialRecord {
            name: user.to_string(),
            mechanism: mechanism.code(),
        },
    ))
}

/// A credential derived from the salted password the client sent.
fn upsertion(
    upsertion: &ScramCredentialUpsertion,
    altered: &BTreeMap<&str, usize>,
) -> Result<MetadataRecord, Refusal> {
    let user = upsertion.name.as_str();
    let mechanism = check(user, upsertion.mechanism, altered)?;
    if upsertion.iterations < MIN_ITERATIONS {
        return Err(refuse(
            errors::UNACCEPTABLE_CREDENTIAL,
            "Too few iterations",
        ));
    }
    if upsertion.iterations > MAX_ITERATIONS {
        return Err(refuse(
            errors::UNACCEPTABLE_CREDENTIAL,
            "Too many iterations",
        ));
    }
    // No HMAC key: Kafka fails here without a message.
    if upsertion.salted_password.is_empty() {
        return Err((errors::UNKNOWN_SERVER_ERROR, String::new()));
    }
    let credential = ScramCredential::from_salted_password(
        mechanism,
        upsertion.salt.to_vec(),
        &upsertion.salted_password,
        upsertion.iterations,
    );
    Ok(MetadataRecord::UserScramCredential(
        UserScramCredentialRecord {
            name: user.to_string(),
            mechanism: mechanism.code(),
            salt: credential.salt,
            stored_key: credential.stored_key,
            server_key: credential.server_key,
            iterations: credential.iterations,
        },
    ))
}

/// The checks every alteration shares, in Kafka's order: the user altered once, a user name, a
/// mechanism fjord knows.
fn check(
    user: &str,
    mechanism: i8,
    altered: &BTreeMap<&str, usize>,
) -> Result<ScramMechanism, Refusal> {
    if altered.get(user).copied().unwrap_or(0) > 1 {
        return Err(refuse(
            errors::DUPLICATE_RESOURCE,
            "A user credential cannot be altered twice in the same request",
        ));
    }
    if user.is_empty() {
        return Err(refuse(
            errors::UNACCEPTABLE_CREDENTIAL,
            "Username must not be empty",
        ));
    }
    ScramMechanism::from_code(mechanism).ok_or_else(|| {
        refuse(
            errors::UNSUPPORTED_SASL_MECHANISM,
            "Unknown SCRAM mechanism",
        )
    })
}

/// The answer to a request refused as a whole: every user refused with `error_code`.
pub(crate) fn alter_user_scram_credentials_refused(
    request: &AlterUserScramCredentialsRequest,
    error_code: i16,
    message: Option<String>,
) -> ResponseBody {
    let users: BTreeSet<&str> = request
        .deletions
        .iter()
        .map(|d| d.name.as_str())
        .chain(request.upsertions.iter().map(|u| u.name.as_str()))
        .collect();
    ResponseBody::AlterUserScramCredentials(AlterUserScramCredentialsResponse {
        results: users
            .into_iter()
            .map(|user| AlterUserScramCredentialsResult {
                user: user.to_string(),
                error_code,
                error_message: message.clone(),
            })
            .collect(),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn upsert(name: &str, mechanism: i8, iterations: i32) -> ScramCredentialUpsertion {
        ScramCredentialUpsertion {
            name: name.into(),
            mechanism,
            iterations,
            salt: Bytes::from_static(b"salt"),
            salted_password: Bytes::from_static(b"salted"),
        }
    }

    fn delete(name: &str, mechanism: i8) -> ScramCredentialDeletion {
        ScramCredentialDeletion {
            name: name.into(),
            mechanism,
        }
    }

    fn decide(
        image: &MetadataImage,
        deletions: Vec<ScramCredentialDeletion>,
        upsertions: Vec<ScramCredentialUpsertion>,
    ) -> (MetadataImage, Vec<(String, i16)>) {
        let request = AlterUserScramCredentialsRequest {
            deletions,
            upsertions,
        };
        let decision = alter_user_scram_credentials(image, &request);
        let ResponseBody::AlterUserScramCredentials(response) = decision.response else {
            panic!("not an AlterUserScramCredentials answer")
        };
        let next = MetadataImage::from_records(
            1,
            &image
                .to_records()
                .into_iter()
                .chain(decision.records)
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let results = response
            .results
            .into_iter()
            .map(|r| (r.user, r.error_code))
            .collect();
        (next, results)
    }

    #[test]
    fn credentials_are_derived_stored_and_removed() {
        let (image, results) = decide(
            &MetadataImage::empty(),
            vec![],
            vec![upsert("alice", 1, 4096), upsert("bob", 2, 8192)],
        );
        assert_eq!(results, [("alice".into(), 0), ("bob".into(), 0)]);
        let alice = image
            .scram_credential("alice", ScramMechanism::Sha256)
            .unwrap();
        let expected = ScramCredential::from_salted_password(
            ScramMechanism::Sha256,
            b"salt".to_vec(),
            b"salted",
            4096,
        );
        assert_eq!(*alice, expected);
        let (image, results) = decide(&image, vec![delete("alice", 1)], vec![]);
        assert_eq!(results, [("alice".into(), 0)]);
        assert!(image
            .scram_credential("alice", ScramMechanism::Sha256)
            .is_none());
        assert!(image
            .scram_credential("bob", ScramMechanism::Sha512)
            .is_some());
    }

    #[test]
    fn each_refusal_has_kafkas_code_and_spares_the_other_users() {
        let (image, results) = decide(
            &MetadataImage::empty(),
            vec![delete("gone", 1), delete("twice", 1)],
            vec![
                upsert("", 1, 4096),
                upsert("odd", 3, 4096),
                upsert("few", 1, 4095),
                upsert("many", 2, 16385),
                upsert("twice", 2, 4096),
                upsert("fine", 1, 4096),
            ],
        );
        assert_eq!(
            results,
            [
                ("gone".into(), errors::RESOURCE_NOT_FOUND),
                ("twice".into(), errors::DUPLICATE_RESOURCE),
                ("".into(), errors::UNACCEPTABLE_CREDENTIAL),
                ("odd".into(), errors::UNSUPPORTED_SASL_MECHANISM),
                ("few".into(), errors::UNACCEPTABLE_CREDENTIAL),
                ("many".into(), errors::UNACCEPTABLE_CREDENTIAL),
                ("fine".into(), errors::NONE),
            ]
        );
        assert_eq!(image.scram_users().count(), 1);
    }
}
