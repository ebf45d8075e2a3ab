//! Delegation tokens on the broker (`kafka-delegation-tokens`): what depends on the connection
//! is checked here before CreateDelegationToken, RenewDelegationToken and ExpireDelegationToken
//! go to the controller on the client's behalf; DescribeDelegationToken is answered from the
//! image, each token's HMAC made again with this broker's `delegation.token.secret.key`.

use bytes::Bytes;
use fjord_common::errors;
use fjord_common::scram::delegation_token_hmac;
use fjord_common::KafkaPrincipal;
use fjord_config::DelegationTokenConfig;
use fjord_controller::{
    error_response, parse_principal, token_owner, ControllerApi, REQUESTER_FROM_VERSION,
};
use fjord_metadata::acl::{AclOperation, ResourceType};
use fjord_metadata::DelegationTokenRecord;
use fjord_protocol::messages::describe_delegation_token_request::DescribeDelegationTokenRequest;
use fjord_protocol::messages::describe_delegation_token_response::{
    DescribeDelegationTokenResponse, DescribedDelegationToken, DescribedDelegationTokenRenewer,
};
use fjord_protocol::messages::ResponseBody;
use fjord_sasl::scram::DelegationTokenCredential;

use crate::api::authz::Access;
use crate::api::Broker;

impl Broker {
    /// The delegation token `token_id` as a SCRAM client authenticates with it (`tokenauth`):
    /// its owner's name, its HMAC and expiry. None when tokens are disabled on this broker.
    pub fn delegation_token(&self, token_id: &str) -> Option<DelegationTokenCredential> {
        let config = self.node.config.delegation_tokens()?;
        let image = self.node.image();
        let token = image.delegation_token(token_id)?;
        Some(DelegationTokenCredential {
            owner: parse_principal(&token.owner)?.name,
            hmac: delegation_token_hmac(&config.secret_key, token_id),
            expiry_ms: token.expiration_timestamp.min(token.max_timestamp),
        })
    }
}

/// The answer to a token request (at `version`) the connection may not make, as Kafka's request
/// handler refuses it before the controller sees it; None when it goes on to the controller.
pub(crate) fn refusal(access: &Access, api: &ControllerApi, version: i16) -> Option<ResponseBody> {
    let requester = access.requester();
    let code = match api {
        ControllerApi::CreateDelegationToken(_)
        | ControllerApi::RenewDelegationToken(_)
        | ControllerApi::ExpireDelegationToken(_)
            if !requester.may_use_token_apis() =>
        {
            errors::DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
        }
        ControllerApi::CreateDelegationToken(request) => {
            let owner = token_owner(request, &requester.principal);
            if owner != requester.principal
                && !access.allows(
                    AclOperation::CreateTokens,
                    ResourceType::User,
                    &owner.to_string(),
                )
            {
                errors::DELEGATION_TOKEN_AUTHORIZATION_FAILED
            } else if request.renewers.iter().any(|r| r.principal_type != "User") {
                errors::INVALID_PRINCIPAL_TYPE
            } else {
                return None;
            }
        }
        _ => return None,
    };
    let mut response = error_response(api, code, "");
    if let ResponseBody::CreateDelegationToken(created) = &mut response {
        // The requester is known here, unlike on the controller.
        if version >= REQUESTER_FROM_VERSION {
            created.token_requester_principal_type = requester.principal.principal_type.clone();
            created.token_requester_principal_name = requester.principal.name.clone();
        }
        if let ControllerApi::CreateDelegationToken(request) = api {
            let owner = token_owner(request, &requester.principal);
            created.principal_type = owner.principal_type;
            created.principal_name = owner.name;
        }
    }
    Some(response)
}

/// DescribeDelegationToken: the tokens of the owners asked for (all when null, none when
/// empty) that the principal may see — its own, those it may renew or requested, those it has
/// DESCRIBE on, and those of owners it has DESCRIBE_TOKENS on.
pub(crate) fn describe(
    access: &Access,
    config: Option<&DelegationTokenConfig>,
    request: &DescribeDelegationTokenRequest,
    version: i16,
) -> DescribeDelegationTokenResponse {
    let refused = |error_code| DescribeDelegationTokenResponse {
        error_code,
        ..Default::default()
    };
    if !access.requester().may_use_token_apis() {
        return refused(errors::DELEGATION_TOKEN_REQUEST_NOT_ALLOWED);
    }
    let Some(config) = config else {
        return refused(errors::DELEGATION_TOKEN_AUTH_DISABLED);
    };
    let owners: Option<Vec<KafkaPrincipal>> = request.owners.as_ref().map(|owners| {
        owners
            .iter()
            .map(|o| KafkaPrincipal {
                principal_type: o.principal_type.clone(),
                name: o.principal_name.clone(),
            })
            .collect()
    });
    let principal = access.requester().principal.to_string();
    let tokens = access
        .image()
        .delegation_tokens()
        .filter(|token| {
            let asked = owners.as_ref().is_none_or(|owners| {
                owners
                    .iter()
                    .any(|owner| owner_or_renewer(token, &owner.to_string()))
            });
            asked
                && (owner_or_renewer(token, &principal)
                    || access.allows(
                        AclOperation::Describe,
                        ResourceType::DelegationToken,
                        &token.token_id,
                    )
                    || access.allows(
                        AclOperation::DescribeTokens,
                        ResourceType::User,
                        &token.owner,
                    ))
        })
        .map(|token| described(token, &config.secret_key, version))
        .collect();
    DescribeDelegationTokenResponse {
        error_code: errors::NONE,
        tokens,
        throttle_time_ms: 0,
    }
}

/// Kafka's `ownerOrRenewer`: the owner, the requester or a renewer.
fn owner_or_renewer(token: &DelegationTokenRecord, principal: &str) -> bool {
    token.owner == principal
        || token.requester == principal
        || token.renewers.iter().any(|r| r == principal)
}

fn described(
    token: &DelegationTokenRecord,
    secret_key: &str,
    version: i16,
) -> DescribedDelegationToken {
    let principal = |text: &str| {
        parse_principal(text).unwrap_or_else(|| KafkaPrincipal::user(text.to_string()))
    };
    let owner = principal(&token.owner);
    let requester = if version >= REQUESTER_FROM_VERSION {
        principal(&token.requester)
    } else {
        KafkaPrincipal {
            principal_type: String::new(),
            name: String::new(),
        }
    };
    DescribedDelegationToken {
        principal_type: owner.principal_type,
        principal_name: owner.name,
        token_requester_principal_type: requester.principal_type,
        token_requester_principal_name: requester.name,
        issue_timestamp: token.issue_timestamp,
        expiry_timestamp: token.expiration_timestamp,
        max_timestamp: token.max_timestamp,
        token_id: token.token_id.clone(),
        hmac: Bytes::from(delegation_token_hmac(secret_key, &token.token_id)),
        renewers: token
            .renewers
            .iter()
            .map(|r| {
                let renewer = principal(r);
                DescribedDelegationTokenRenewer {
                    principal_type: renewer.principal_type,
                    principal_name: renewer.name,
                }
            })
            .collect(),
    }
}
