//! What the CLI tells a user when a command fails: what went wrong, and what to do about it.

use fjord_client::ClientError;

/// A command's failure: the message, and a hint at what to try.
#[derive(Debug, PartialEq, Eq)]
pub struct CliError {
    pub message: String,
    pub hint: Option<&'static str>,
}

impl CliError {
    pub fn new(message: impl Into<String>) -> Self {
        CliError {
            message: message.into(),
            hint: None,
        }
    }

    pub fn hint(mut self, hint: &'static str) -> Self {
        self.hint = Some(hint);
        self
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)?;
        if let Some(hint) = self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

impl From<ClientError> for CliError {
    fn from(error: ClientError) -> Self {
        let hint = match &error {
            ClientError::Connect { .. } => Some(
                "is a broker running there? Start one with `fjord server`, or name another \
                 (--bootstrap-server or -b HOST:PORT)",
            ),
            ClientError::Timeout { .. } => {
                Some("the broker did not answer in time: check that it is up (its log says why) and retry")
            }
            ClientError::Io { .. } | ClientError::Closed(_) => {
                Some("the connection to the broker dropped: retry; the broker's log may say why")
            }
            _ => None,
        };
        CliError {
            message: error.to_string(),
            hint,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_says_what_to_do() {
        let error = CliError::new("Consumer group 'g' does not exist.")
            .hint("list the groups with `fjord group list`");
        assert_eq!(
            error.to_string(),
            "Consumer group 'g' does not exist.\n  hint: list the groups with `fjord group list`"
        );
        let refused = ClientError::Connect {
            addr: "127.0.0.1:1".into(),
            source: std::io::ErrorKind::ConnectionRefused.into(),
        };
        let error = CliError::from(refused);
        assert!(error.message.contains("127.0.0.1:1"), "{error}");
        assert!(error.hint.is_some_and(|h| h.contains("fjord server")));
    }
}
