//! `fjord config`: read and change the configs of a topic or a broker, as `kafka-configs`
//! `--describe --all`, `--alter --add-config` and `--alter --delete-config` do.

use crate::cli::CliError;
use clap::{Args, Subcommand, ValueEnum};
use fjord_client::{config_source_name, Client, ConfigChange, ConfigEntry, ConfigResource};

#[derive(Args)]
pub struct ConfigArgs {
    #[command(flatten)]
    brokers: super::Brokers,
    #[command(subcommand)]
    command: ConfigCommand,
}

#[derive(Clone, Copy, ValueEnum)]
enum Kind {
    Topic,
    Broker,
}

#[derive(Args)]
struct Target {
    /// What the configs belong to.
    kind: Kind,
    /// The topic's name, or the broker's id.
    name: String,
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print KEY=VALUE and where it comes from (Kafka's source names), for every key or those named.
    Get {
        #[command(flatten)]
        target: Target,
        /// Only these keys.
        keys: Vec<String>,
    },
    /// Set keys: KEY=VALUE, all or none.
    Set {
        #[command(flatten)]
        target: Target,
        #[arg(required = true, value_name = "KEY=VALUE")]
        settings: Vec<String>,
    },
    /// Remove keys set on the topic or broker, back to what it inherits.
    Delete {
        #[command(flatten)]
        target: Target,
        #[arg(required = true)]
        keys: Vec<String>,
    },
}

fn resource(target: &Target) -> Result<ConfigResource, CliError> {
    match target.kind {
        Kind::Topic => Ok(ConfigResource::Topic(target.name.clone())),
        Kind::Broker => target
            .name
            .parse()
            .map(ConfigResource::Broker)
            .map_err(|_| {
                CliError::new(format!("broker {:?} is not a broker id", target.name))
                    .hint("name a broker by its node.id, e.g. `fjord config get broker 1`")
            }),
    }
}

pub fn run(args: ConfigArgs) -> Result<(), CliError> {
    super::block_on(async move {
        let mut client = Client::connect(&args.brokers.brokers).await?;
        match args.command {
            ConfigCommand::Get { target, keys } => {
                let entries = client.describe_configs(&resource(&target)?).await?;
                for entry in entries
                    .iter()
                    .filter(|e| keys.is_empty() || keys.contains(&e.name))
                {
                    println!("{}", line(entry));
                }
                Ok(())
            }
            ConfigCommand::Set { target, settings } => {
                let changes = settings
                    .iter()
                    .map(|s| {
                        let (key, value) = s.split_once('=').ok_or_else(|| {
                            CliError::new(format!("{s:?} is not KEY=VALUE"))
                                .hint("write it as retention.ms=86400000")
                        })?;
                        Ok((key.to_string(), ConfigChange::Set(value.to_string())))
                    })
                    .collect::<Result<Vec<_>, CliError>>()?;
                client.alter_configs(&resource(&target)?, &changes).await?;
                println!("Completed updating config for {}.", target.name);
                Ok(())
            }
            ConfigCommand::Delete { target, keys } => {
                let changes: Vec<_> = keys
                    .into_iter()
                    .map(|k| (k, ConfigChange::Delete))
                    .collect();
                client.alter_configs(&resource(&target)?, &changes).await?;
                println!("Completed updating config for {}.", target.name);
                Ok(())
            }
        }
    })
}

/// `KEY=VALUE<TAB>SOURCE`; a sensitive value is not shown, as Kafka's tools hide it.
fn line(entry: &ConfigEntry) -> String {
    let value = match (&entry.value, entry.is_sensitive) {
        (_, true) => "(sensitive)",
        (Some(value), false) => value.as_str(),
        (None, false) => "",
    };
    format!(
        "{}={value}\t{}",
        entry.name,
        config_source_name(entry.source)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_line_names_its_source_and_hides_secrets() {
        let entry = |value: Option<&str>, source, is_sensitive| ConfigEntry {
            name: "k".into(),
            value: value.map(str::to_string),
            source,
            is_sensitive,
            read_only: false,
        };
        assert_eq!(
            line(&entry(Some("1"), 1, false)),
            "k=1\tDYNAMIC_TOPIC_CONFIG"
        );
        assert_eq!(
            line(&entry(None, 4, true)),
            "k=(sensitive)\tSTATIC_BROKER_CONFIG"
        );
        assert_eq!(line(&entry(None, 5, false)), "k=\tDEFAULT_CONFIG");
    }
}
