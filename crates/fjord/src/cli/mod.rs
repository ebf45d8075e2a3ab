//! The operator CLI's subcommands, one module each.

mod error;
pub mod group;
pub mod topic;

pub use error::CliError;

/// Runs a command's async body on a runtime of its own (one thread: a command is one client).
fn block_on<F>(command: F) -> Result<(), CliError>
where
    F: std::future::Future<Output = Result<(), CliError>>,
{
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::new(format!("cannot start the runtime: {e}")))?
        .block_on(command)
}
