//! [`ControllerError`]: why the controller did not answer a request itself, and the Kafka error
//! its sender is answered with.

use std::time::Duration;

use fjord_common::errors;
use fjord_protocol::messages::ResponseBody;

use crate::apis::{error_response, ControllerRequest};

/// Why the controller did not answer a request itself.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ControllerError {
    #[error("this node is not the active controller (the quorum's leader is {leader:?})")]
    NotController { leader: Option<u64> },
    #[error("the metadata change was not committed within {0:?}")]
    Timeout(Duration),
    #[error("the metadata quorum failed: {0}")]
    Quorum(String),
    #[error("the controller has stopped")]
    Stopped,
    #[error("the request's timeout passed before the controller could decide it")]
    Expired,
}

impl ControllerError {
    /// The Kafka error a client is answered with; every one is retriable (the client retries and
    /// finds the new controller, or the quorum back).
    pub fn error_code(&self) -> i16 {
        match self {
            ControllerError::NotController { .. } | ControllerError::Stopped => {
                errors::NOT_CONTROLLER
            }
            ControllerError::Timeout(_) | ControllerError::Expired => errors::REQUEST_TIMED_OUT,
            ControllerError::Quorum(_) => errors::UNKNOWN_SERVER_ERROR,
        }
    }

    /// The whole request answered with this error.
    pub fn response_to(&self, request: &ControllerRequest) -> ResponseBody {
        error_response(&request.api, self.error_code(), &self.to_string())
    }
}
