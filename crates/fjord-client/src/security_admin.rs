//! The calls that describe a cluster's security: its ACLs (DescribeAcls) and its SCRAM users
//! (DescribeUserScramCredentials). Both need DESCRIBE on the cluster.

use fjord_common::errors;
use fjord_protocol::messages::describe_acls_request::DescribeAclsRequest;
use fjord_protocol::messages::describe_user_scram_credentials_request::DescribeUserScramCredentialsRequest;
use fjord_protocol::{ApiKey, RequestBody, ResponseBody};

use crate::client::Client;
use crate::error::ClientError;

/// The wire code of ANY in an ACL filter's enums.
const ANY: i8 = 1;

/// One ACL binding, with Kafka's wire codes for its enums.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclBinding {
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission_type: i8,
}

/// A SCRAM user and the mechanisms (wire codes: 1 SHA-256, 2 SHA-512) with iteration counts it
/// has credentials for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramUser {
    pub name: String,
    pub credentials: Vec<(i8, i32)>,
}

impl Client {
    /// Every ACL of the cluster.
    pub async fn describe_acls(&mut self) -> Result<Vec<AclBinding>, ClientError> {
        let request = DescribeAclsRequest {
            resource_type_filter: ANY,
            resource_name_filter: None,
            pattern_type_filter: ANY,
            principal_filter: None,
            host_filter: None,
            operation: ANY,
            permission_type: ANY,
        };
        let conn = self.any_conn().await?;
        let ResponseBody::DescribeAcls(response) =
            conn.send(RequestBody::DescribeAcls(request)).await?
        else {
            return Err(ClientError::unexpected(ApiKey::DescribeAcls));
        };
        if response.error_code != errors::NONE {
            return Err(ClientError::kafka(
                "DescribeAcls",
                response.error_code,
                response.error_message,
            ));
        }
        Ok(response
            .resources
            .into_iter()
            .flat_map(|r| {
                r.acls.into_iter().map(move |acl| AclBinding {
                    resource_type: r.resource_type,
                    resource_name: r.resource_name.clone(),
                    pattern_type: r.pattern_type,
                    principal: acl.principal,
                    host: acl.host,
                    operation: acl.operation,
                    permission_type: acl.permission_type,
                })
            })
            .collect())
    }

    /// Every SCRAM user of the cluster.
    pub async fn describe_scram_users(&mut self) -> Result<Vec<ScramUser>, ClientError> {
        let conn = self.any_conn().await?;
        let ResponseBody::DescribeUserScramCredentials(response) = conn
            .send(RequestBody::DescribeUserScramCredentials(
                DescribeUserScramCredentialsRequest { users: None },
            ))
            .await?
        else {
            return Err(ClientError::unexpected(
                ApiKey::DescribeUserScramCredentials,
            ));
        };
        if response.error_code != errors::NONE {
            return Err(ClientError::kafka(
                "DescribeUserScramCredentials",
                response.error_code,
                response.error_message,
            ));
        }
        Ok(response
            .results
            .into_iter()
            .filter(|r| r.error_code == errors::NONE)
            .map(|r| ScramUser {
                name: r.user,
                credentials: r
                    .credential_infos
                    .iter()
                    .map(|c| (c.mechanism, c.iterations))
                    .collect(),
            })
            .collect())
    }
}
