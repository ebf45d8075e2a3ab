//! Why the controller refuses a request: Kafka's error code and a message for the client.

/// A refusal: the Kafka error code a response carries, and its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub error_code: i16,
    pub message: String,
}

pub(crate) fn refuse(error_code: i16, message: impl Into<String>) -> Refusal {
    Refusal {
        error_code,
        message: message.into(),
    }
}
