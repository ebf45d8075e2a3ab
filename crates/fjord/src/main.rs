//! The `fjord` binary: the broker (`fjord server`) and the operator CLI (`fjord group`, as Kafka's
//! `kafka-consumer-groups`; `fjord topic`, as `kafka-topics`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fjord_config::{parse_properties, BrokerConfig};

mod cli;

use cli::CliError;

#[derive(Parser)]
#[command(
    name = "fjord",
    version,
    about = "A Kafka-compatible streaming platform"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a broker. With no FILE, a single node on 127.0.0.1:9092 storing data in ./fjord-data.
    Server {
        /// A Java properties file with Kafka's config names (server.properties).
        file: Option<PathBuf>,
        /// Set one config, after the file: KEY=VALUE. May be repeated.
        #[arg(long = "override", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
        /// A SCRAM user to add once the broker serves, unless it has a credential for the
        /// mechanism: 'SCRAM-SHA-256=[name=alice,password=alice-secret]' (kafka-storage format's
        /// form; iterations=N optional). May be repeated.
        #[arg(long = "add-scram", value_name = "CREDENTIAL")]
        add_scram: Vec<String>,
    },
    /// List, describe, reset the offsets of and delete consumer groups.
    Group(cli::group::GroupArgs),
    /// Create, list, describe and delete topics.
    Topic(cli::topic::TopicArgs),
    /// The cluster's brokers and controller, and whether every partition is in sync.
    Cluster(cli::cluster::ClusterArgs),
    /// Read and change the configs of a topic or a broker.
    Config(cli::config::ConfigArgs),
}

/// Log lines to stderr, filtered by `RUST_LOG`: text, or one JSON object a line (`log.format=json`).
fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,openraft=warn".into());
    let lines = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr);
    if json {
        lines.json().flatten_event(true).init();
    } else {
        lines
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The server logs as its config says, once read; the tools log text.
    if !matches!(cli.command, Command::Server { .. }) {
        init_logging(false);
    }
    match cli.command {
        Command::Server {
            file,
            overrides,
            add_scram,
        } => match server(file, overrides, add_scram) {
            Ok(()) => ExitCode::SUCCESS,
            Err(message) => {
                eprintln!("fjord: {message}");
                ExitCode::FAILURE
            }
        },
        Command::Group(args) => report(cli::group::run(args)),
        Command::Topic(args) => report(cli::topic::run(args)),
        Command::Cluster(args) => report(cli::cluster::run(args)),
        Command::Config(args) => report(cli::config::run(args)),
    }
}

/// A CLI command's exit: 0, or 1 after saying what failed and what to do.
fn report(result: Result<(), CliError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("Error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn server(
    file: Option<PathBuf>,
    overrides: Vec<String>,
    add_scram: Vec<String>,
) -> Result<(), CliError> {
    let mut props: BTreeMap<String, String> = match &file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                CliError::new(format!("cannot read config file {}: {e}", path.display()))
                    .hint("name a readable server.properties file, or none for one node's defaults")
            })?;
            parse_properties(&text)
        }
        None => BTreeMap::new(),
    };
    for item in overrides {
        let (key, value) = item.split_once('=').ok_or_else(|| {
            CliError::new(format!("--override {item:?} is not KEY=VALUE"))
                .hint("write it as --override log.dirs=/var/lib/fjord")
        })?;
        props.insert(key.trim().to_string(), value.trim().to_string());
    }
    // Every value is validated here, before any data directory is touched.
    let (mut config, warnings) = BrokerConfig::from_properties(&props).map_err(|e| {
        CliError::new(e.to_string())
            .hint("fix the key in the properties file (or --override); Kafka's key names and values apply")
    })?;
    init_logging(config.log_json());
    for credential in add_scram {
        let user = fjord_config::ScramUser::parse(&credential).map_err(|e| {
            CliError::new(format!("--add-scram: {e}"))
                .hint("write it as --add-scram 'SCRAM-SHA-256=[name=alice,password=alice-secret]'")
        })?;
        config.add_scram.push(user);
    }
    for key in warnings.unknown_keys {
        tracing::warn!(key, "unknown configuration key ignored");
    }
    for key in warnings.ignored_keys {
        tracing::warn!(
            key,
            "configuration key accepted but not acted upon by fjord yet"
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("fjord")
        .build()
        .map_err(|e| CliError::new(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(async move {
        let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutdown requested");
            let _ = shutdown_tx.send(true);
        });
        fjord_broker::run(config, shutdown_rx)
            .await
            .map_err(|e| CliError::new(e.to_string()))
    })
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
