//! The operator CLI's subcommands, one module each.

mod error;
pub mod group;

pub use error::CliError;
