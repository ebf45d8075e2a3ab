//! `fjord server --add-scram`: SCRAM users this node makes sure exist once its broker serves, in
//! place of Kafka's `kafka-storage format --add-scram` (fjord has no format step). A user who
//! already has a credential for the mechanism is left alone, so restarts change nothing.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fjord_common::errors::{self, KafkaError};
use fjord_config::ScramUser;
use fjord_controller::ControllerApi;
use fjord_protocol::messages::alter_user_scram_credentials_request::{
    AlterUserScramCredentialsRequest, ScramCredentialUpsertion,
};
use fjord_protocol::ResponseBody;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::api::Broker;

/// How often a user is tried while no controller can take it (an election under way).
const ATTEMPTS: u32 = 30;

/// Adds the `users` the broker's image lacks, through the controller, in the background, once
/// the broker (`ready`) serves.
pub(super) fn add_missing(
    ready: Option<&watch::Sender<Option<Arc<Broker>>>>,
    users: &[ScramUser],
) -> Option<JoinHandle<()>> {
    let broker = ready?.borrow().clone()?;
    if users.is_empty() {
        return None;
    }
    let users = users.to_vec();
    Some(tokio::spawn(async move {
        for user in users {
            for attempt in 1..=ATTEMPTS {
                let image = broker.node.image();
                if image.scram_credential(&user.name, user.mechanism).is_some() {
                    break;
                }
                match add(&broker, &user).await {
                    Ok(()) => {
                        tracing::info!(user = %user.name, mechanism = user.mechanism.name(), "SCRAM user added");
                        break;
                    }
                    Err(error) if attempt == ATTEMPTS => {
                        tracing::error!(user = %user.name, %error, "cannot add the SCRAM user");
                    }
                    Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
                }
            }
        }
    }))
}

/// One user's credential, salted here as a client's AlterUserScramCredentials is.
async fn add(broker: &Broker, user: &ScramUser) -> Result<(), KafkaError> {
    let salt: Vec<u8> = [uuid::Uuid::new_v4(), uuid::Uuid::new_v4()]
        .iter()
        .flat_map(|u| *u.as_bytes())
        .collect();
    let salted = user.mechanism.salted_password(
        user.password.as_bytes(),
        &salt,
        user.iterations.unsigned_abs(),
    );
    let request = AlterUserScramCredentialsRequest {
        deletions: Vec::new(),
        upsertions: vec![ScramCredentialUpsertion {
            name: user.name.clone(),
            mechanism: user.mechanism.code(),
            iterations: user.iterations,
            salt: Bytes::from(salt),
            salted_password: Bytes::from(salted),
        }],
    };
    let api = ControllerApi::AlterUserScramCredentials(request);
    match broker.forwarder.forward(0, api).await {
        ResponseBody::AlterUserScramCredentials(r) => match r.results.first() {
            Some(result) if result.error_code == errors::NONE => Ok(()),
            Some(result) => Err(KafkaError::new(
                result.error_code,
                result.error_message.clone().unwrap_or_default(),
            )),
            None => Err(KafkaError::new(errors::UNKNOWN_SERVER_ERROR, "no result")),
        },
        other => Err(KafkaError::new(
            errors::UNKNOWN_SERVER_ERROR,
            format!("unexpected answer {:?}", other.api_key()),
        )),
    }
}
