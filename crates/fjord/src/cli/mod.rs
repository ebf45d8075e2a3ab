//! The operator CLI's subcommands, one module each.

pub mod cluster;
pub mod config;
mod error;
pub mod group;
pub mod topic;

pub use error::CliError;

/// The brokers a client command bootstraps from, `-b` or `FJORD_BROKERS`.
#[derive(clap::Args)]
pub struct Brokers {
    /// The broker(s) to bootstrap from: HOST:PORT[,HOST:PORT...].
    #[arg(
        short = 'b',
        long = "brokers",
        global = true,
        env = "FJORD_BROKERS",
        default_value = "127.0.0.1:9092"
    )]
    brokers: String,
}

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

#[cfg(test)]
pub mod tests {
    use fjord_client::PartitionMetadata;

    /// A partition of three replicas, as metadata describes it.
    pub fn partition(partition: i32, leader_id: i32, isr: Vec<i32>) -> PartitionMetadata {
        PartitionMetadata {
            partition,
            leader_id,
            error_code: 0,
            replicas: vec![1, 2, 3],
            isr,
            offline: Vec::new(),
        }
    }
}
