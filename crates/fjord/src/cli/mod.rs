//! The operator CLI's subcommands, one module each.

pub mod group;
