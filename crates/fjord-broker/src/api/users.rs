//! DescribeUserScramCredentials (an admin client's `describeUserScramCredentials`): answered from
//! this broker's image, as Kafka's brokers answer it, as are the credentials SCRAM clients are
//! checked against. (AlterUserScramCredentials goes to the controller.)

use std::collections::{BTreeMap, BTreeSet};

use fjord_common::errors;
use fjord_metadata::MetadataImage;
use fjord_protocol::messages::describe_user_scram_credentials_request::DescribeUserScramCredentialsRequest;
use fjord_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResponse, DescribeUserScramCredentialsResult,
};

use crate::api::{Broker, ClusterApi};
use fjord_common::scram::{ScramCredential, ScramMechanism};

impl Broker {
    /// `user`'s SCRAM credential for `mechanism`, as this broker's image has it.
    pub fn scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Option<ScramCredential> {
        self.node.image().scram_credential(user, mechanism).cloned()
    }
}

impl ClusterApi {
    pub(crate) fn describe_user_scram_credentials(
        &self,
        request: &DescribeUserScramCredentialsRequest,
    ) -> DescribeUserScramCredentialsResponse {
        describe(&self.node.image(), request)
    }
}

/// Each user asked for (every user with a credential when none is named), with the mechanisms
/// and iteration counts of their credentials, never the keys.
fn describe(
    image: &MetadataImage,
    request: &DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let asked: Vec<&str> = match &request.users {
        Some(users) if !users.is_empty() => users.iter().map(|u| u.name.as_str()).collect(),
        _ => image.scram_users().map(|(user, _)| user.as_str()).collect(),
    };
    let mut times: BTreeMap<&str, usize> = BTreeMap::new();
    for user in &asked {
        *times.entry(user).or_default() += 1;
    }
    let mut results = Vec::new();
    let mut answered = BTreeSet::new();
    for (user, count) in asked.iter().map(|u| (*u, times[u])) {
        if !answered.insert(user) {
            continue;
        }
        let found: Vec<CredentialInfo> = image
            .scram_credentials_of(user)
            .map(|credentials| {
                credentials
                    .values()
                    .map(|c| CredentialInfo {
                        mechanism: c.mechanism.code(),
                        iterations: c.iterations,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let (error_code, error_message) = if count > 1 {
            (
                errors::DUPLICATE_RESOURCE,
                Some(format!(
                    "Cannot describe SCRAM credentials for the same user twice in a single request: {user}"
                )),
            )
        } else if found.is_empty() {
            (
                errors::RESOURCE_NOT_FOUND,
                Some(format!(
                    "Attempt to describe a user credential that does not exist: {user}"
                )),
            )
        } else {
            (errors::NONE, None)
        };
        let credential_infos = if error_code == errors::NONE {
            found
        } else {
            Vec::new()
        };
        results.push(DescribeUserScramCredentialsResult {
            user: user.to_string(),
            error_code,
            error_message,
            credential_infos,
        });
    }
    DescribeUserScramCredentialsResponse {
        results,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjord_common::scram::{ScramCredential, ScramMechanism};
    use fjord_metadata::{MetadataRecord, UserScramCredentialRecord};
    use fjord_protocol::messages::describe_user_scram_credentials_request::UserName;

    fn image() -> MetadataImage {
        let record = |user: &str, mechanism: ScramMechanism, iterations| {
            let c = ScramCredential::from_password(mechanism, "pw", vec![1; 16], iterations);
            MetadataRecord::UserScramCredential(UserScramCredentialRecord {
                name: user.into(),
                mechanism: mechanism.code(),
                salt: c.salt,
                stored_key: c.stored_key,
                server_key: c.server_key,
                iterations,
            })
        };
        MetadataImage::from_records(
            1,
            &[
                record("alice", ScramMechanism::Sha256, 4096),
                record("alice", ScramMechanism::Sha512, 8192),
                record("bob", ScramMechanism::Sha512, 4096),
            ],
        )
        .unwrap()
    }

    fn ask(users: Option<&[&str]>) -> DescribeUserScramCredentialsResponse {
        let request = DescribeUserScramCredentialsRequest {
            users: users.map(|u| {
                u.iter()
                    .map(|name| UserName {
                        name: name.to_string(),
                    })
                    .collect()
            }),
        };
        describe(&image(), &request)
    }

    #[test]
    fn every_user_or_those_named_with_mechanisms_and_iterations() {
        let all = ask(None);
        let users: Vec<&str> = all.results.iter().map(|r| r.user.as_str()).collect();
        assert_eq!(users, ["alice", "bob"]);
        let alice = &all.results[0].credential_infos;
        assert_eq!(
            alice
                .iter()
                .map(|c| (c.mechanism, c.iterations))
                .collect::<Vec<_>>(),
            [(1, 4096), (2, 8192)]
        );
        assert_eq!(ask(Some(&[])).results.len(), 2);
        let bob = ask(Some(&["bob"]));
        assert_eq!(bob.results.len(), 1);
        assert_eq!(bob.results[0].error_code, errors::NONE);
    }

    #[test]
    fn unknown_and_repeated_users_are_refused_each() {
        let answer = ask(Some(&["carol", "bob", "bob"]));
        let codes: Vec<(&str, i16)> = answer
            .results
            .iter()
            .map(|r| (r.user.as_str(), r.error_code))
            .collect();
        assert_eq!(
            codes,
            [
                ("carol", errors::RESOURCE_NOT_FOUND),
                ("bob", errors::DUPLICATE_RESOURCE)
            ]
        );
        assert!(answer.results[1].credential_infos.is_empty());
    }
}
