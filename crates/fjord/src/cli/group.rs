//! `fjord group`: list, describe, reset the offsets of and delete consumer groups, answering
//! as Kafka's `kafka-consumer-groups` tool does (same columns, same plan-then-execute reset).

use std::collections::{BTreeMap, BTreeSet};

use crate::cli::CliError;
use clap::{Args, Subcommand};
use fjord_client::{Client, GroupDescription, ListedOffset, OffsetAndMetadata, OffsetSpec};
use fjord_common::TopicPartition;

/// Printed where a value is unknown, as Kafka's tool does.
const MISSING: &str = "-";

#[derive(Args)]
pub struct GroupArgs {
    /// The broker(s) to bootstrap from: HOST:PORT[,HOST:PORT...].
    #[arg(
        long = "bootstrap-server",
        global = true,
        default_value = "127.0.0.1:9092"
    )]
    bootstrap_server: String,
    #[command(subcommand)]
    command: GroupCommand,
}

#[derive(Subcommand)]
enum GroupCommand {
    /// List consumer groups, one per line.
    List,
    /// Show each partition's committed offset, log end offset and lag, and who consumes it.
    Describe {
        /// The group id.
        group: String,
    },
    /// Show (and with --execute, commit) new offsets for a group that has no members.
    ResetOffsets(ResetArgs),
    /// Delete a group that has no members, with its committed offsets.
    Delete {
        /// The group id.
        group: String,
    },
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args([
    "to_earliest", "to_latest", "to_datetime", "to_offset", "shift_by"
])))]
struct ResetArgs {
    /// The group id.
    group: String,
    /// Reset to each partition's log start offset.
    #[arg(long)]
    to_earliest: bool,
    /// Reset to each partition's log end offset.
    #[arg(long)]
    to_latest: bool,
    /// Reset to the first offset at or after YYYY-MM-DDTHH:mm:SS.sss[Z|+hh:mm] (UTC if no zone).
    #[arg(long, value_name = "DATETIME")]
    to_datetime: Option<String>,
    /// Reset to this offset (clamped to the log's range).
    #[arg(long, value_name = "OFFSET")]
    to_offset: Option<i64>,
    /// Move each committed offset by N (negative to go back; clamped to the log's range).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    shift_by: Option<i64>,
    /// Only this topic, or TOPIC:P1,P2 for some of its partitions. May be repeated. Without it,
    /// every partition the group has committed offsets for.
    #[arg(long = "topic", value_name = "TOPIC[:PARTITIONS]")]
    topics: Vec<String>,
    /// Every partition the group has committed offsets for (the default without --topic).
    #[arg(long, conflicts_with = "topics")]
    all_topics: bool,
    /// Commit the new offsets. Without it only the plan is printed.
    #[arg(long, conflicts_with = "dry_run")]
    execute: bool,
    /// Print the plan without committing it (the default).
    #[arg(long)]
    dry_run: bool,
}

/// Runs a `fjord group` command; the error is the message for stderr.
pub fn run(args: GroupArgs) -> Result<(), CliError> {
    super::block_on(async move {
        let mut client = Client::connect(&args.bootstrap_server).await?;
        match args.command {
            GroupCommand::List => list(&mut client).await,
            GroupCommand::Describe { group } => describe(&mut client, &group).await,
            GroupCommand::ResetOffsets(reset) => reset_offsets(&mut client, reset).await,
            GroupCommand::Delete { group } => delete(&mut client, &group).await,
        }
    })
}

async fn list(client: &mut Client) -> Result<(), CliError> {
    for group in client.list_groups().await.map_err(CliError::from)? {
        println!("{}", group.group_id);
    }
    Ok(())
}

/// One line of `describe`.
struct Row {
    topic: Option<String>,
    partition: Option<i32>,
    offset: Option<i64>,
    log_end: Option<i64>,
    consumer_id: String,
    host: String,
    client_id: String,
}

async fn describe(client: &mut Client, group_id: &str) -> Result<(), CliError> {
    let description = client
        .describe_group(group_id)
        .await
        .map_err(CliError::from)?;
    match description.state.as_str() {
        "Dead" => {
            return Err(
                CliError::new(format!("Consumer group '{group_id}' does not exist."))
                    .hint("list the groups with `fjord group list`"),
            )
        }
        "Empty" => eprintln!("\nConsumer group '{group_id}' has no active members."),
        "Stable" => {}
        _ => eprintln!("\nWarning: Consumer group '{group_id}' is rebalancing."),
    }
    let committed = client
        .fetch_offsets(group_id)
        .await
        .map_err(CliError::from)?;
    let rows = describe_rows(client, &description, &committed).await?;
    if rows.is_empty() {
        return Ok(());
    }
    print!("{}", format_describe(group_id, &rows));
    Ok(())
}

async fn describe_rows(
    client: &mut Client,
    description: &GroupDescription,
    committed: &BTreeMap<TopicPartition, OffsetAndMetadata>,
) -> Result<Vec<Row>, CliError> {
    // Members holding the most partitions first; members holding none get no row.
    let mut members: Vec<_> = description
        .members
        .iter()
        .filter(|m| !m.assignment.is_empty())
        .collect();
    members.sort_by_key(|m| std::cmp::Reverse(m.assignment.len()));
    let assigned: BTreeSet<TopicPartition> = members
        .iter()
        .flat_map(|m| m.assignment.iter().cloned())
        .collect();
    let mut partitions = assigned.clone();
    partitions.extend(committed.keys().cloned());
    let log_ends = client
        .list_offsets(&partitions, OffsetSpec::Latest)
        .await
        .map_err(CliError::from)?;
    let row = |tp: &TopicPartition, consumer_id: &str, host: &str, client_id: &str| Row {
        topic: Some(tp.topic.clone()),
        partition: Some(tp.partition),
        offset: committed.get(tp).map(|o| o.offset),
        log_end: log_ends.get(tp).map(|l| l.offset),
        consumer_id: consumer_id.to_string(),
        host: host.to_string(),
        client_id: client_id.to_string(),
    };
    let mut rows = Vec::new();
    for m in members {
        for tp in &m.assignment {
            rows.push(row(tp, &m.member_id, &m.client_host, &m.client_id));
        }
    }
    for tp in committed.keys().filter(|tp| !assigned.contains(*tp)) {
        rows.push(row(tp, MISSING, MISSING, MISSING));
    }
    Ok(rows)
}

/// Left-justifies `value` in `width` columns, like Java's `%-Ns`.
fn pad(value: &str, width: usize) -> String {
    format!("{value:<width$}")
}

fn format_describe(group_id: &str, rows: &[Row]) -> String {
    let width = |f: &dyn Fn(&Row) -> usize, base: usize| rows.iter().map(f).fold(base, usize::max);
    let group_w = group_id.len().max(15);
    let topic_w = width(&|r| r.topic.as_deref().unwrap_or(MISSING).len(), 15);
    let consumer_w = width(&|r| r.consumer_id.len(), 15);
    let host_w = width(&|r| r.host.len(), 15);
    let line = |cols: [&str; 9]| {
        format!(
            "\n{} {} {} {} {} {} {} {} {}",
            pad(cols[0], group_w),
            pad(cols[1], topic_w),
            pad(cols[2], 10),
            pad(cols[3], 15),
            pad(cols[4], 15),
            pad(cols[5], 15),
            pad(cols[6], consumer_w),
            pad(cols[7], host_w),
            cols[8]
        )
    };
    let mut out = line([
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]);
    let show = |v: Option<i64>| v.map_or_else(|| MISSING.to_string(), |v| v.to_string());
    for r in rows {
        // No lag without a committed offset to measure from.
        let lag = r.offset.zip(r.log_end).map(|(o, e)| e - o);
        out.push_str(&line([
            group_id,
            r.topic.as_deref().unwrap_or(MISSING),
            &r.partition
                .map_or_else(|| MISSING.to_string(), |p| p.to_string()),
            &show(r.offset),
            &show(r.log_end),
            &show(lag),
            &r.consumer_id,
            &r.host,
            &r.client_id,
        ]));
    }
    out.push('\n');
    out
}

async fn reset_offsets(client: &mut Client, args: ResetArgs) -> Result<(), CliError> {
    let group_id = args.group.clone();
    let description = client
        .describe_group(&group_id)
        .await
        .map_err(CliError::from)?;
    // Offsets of a group with members would be overwritten by its next commit (and the
    // coordinator refuses admin commits then), so only inactive groups are reset.
    if !matches!(description.state.as_str(), "Empty" | "Dead") {
        return Err(CliError::new(format!(
            "Assignments can only be reset if the group '{group_id}' is inactive, but the current state is {}.",
            description.state
        ))
        .hint("stop the group's consumers first, then reset"));
    }
    let committed = client
        .fetch_offsets(&group_id)
        .await
        .map_err(CliError::from)?;
    let partitions = partitions_to_reset(client, &args.topics, &committed).await?;
    let plan = plan_reset(client, &args, &partitions, &committed).await?;
    if args.execute {
        client
            .commit_offsets(&group_id, &plan)
            .await
            .map_err(CliError::from)?;
    }
    print!("{}", format_plan(&group_id, &plan));
    Ok(())
}

/// The partitions named by `--topic` (TOPIC or TOPIC:P1,P2), or every committed one.
async fn partitions_to_reset(
    client: &mut Client,
    topics: &[String],
    committed: &BTreeMap<TopicPartition, OffsetAndMetadata>,
) -> Result<BTreeSet<TopicPartition>, CliError> {
    if topics.is_empty() {
        return Ok(committed.keys().cloned().collect());
    }
    let mut out = BTreeSet::new();
    let mut whole_topics = Vec::new();
    for arg in topics {
        match arg.split_once(':') {
            Some((topic, parts)) => {
                for p in parts.split(',') {
                    let partition = p.trim().parse::<i32>().map_err(|_| {
                        CliError::new(format!(
                            "Invalid partition '{p}' specified in topic arg '{arg}'"
                        ))
                        .hint("name partitions as TOPIC:0,1,2")
                    })?;
                    out.insert(TopicPartition::new(topic, partition));
                }
            }
            None => whole_topics.push(arg.clone()),
        }
    }
    if !whole_topics.is_empty() {
        let metadata = client
            .metadata(Some(&whole_topics))
            .await
            .map_err(CliError::from)?;
        for topic in metadata.topics {
            if topic.error_code != 0 {
                return Err(CliError::new(format!(
                    "topic '{}': {} ({})",
                    topic.name,
                    fjord_common::errors::name(topic.error_code),
                    topic.error_code
                )));
            }
            for p in topic.partitions {
                out.insert(TopicPartition::new(topic.name.clone(), p.partition));
            }
        }
    }
    Ok(out)
}

async fn offsets(
    client: &mut Client,
    partitions: &BTreeSet<TopicPartition>,
    spec: OffsetSpec,
) -> Result<BTreeMap<TopicPartition, ListedOffset>, CliError> {
    client
        .list_offsets(partitions, spec)
        .await
        .map_err(CliError::from)
}

async fn plan_reset(
    client: &mut Client,
    args: &ResetArgs,
    partitions: &BTreeSet<TopicPartition>,
    committed: &BTreeMap<TopicPartition, OffsetAndMetadata>,
) -> Result<BTreeMap<TopicPartition, i64>, CliError> {
    let plain = |listed: BTreeMap<TopicPartition, ListedOffset>| {
        listed
            .into_iter()
            .map(|(tp, l)| (tp, l.offset))
            .collect::<BTreeMap<_, _>>()
    };
    if args.to_earliest {
        return Ok(plain(
            offsets(client, partitions, OffsetSpec::Earliest).await?,
        ));
    }
    if args.to_latest {
        return Ok(plain(
            offsets(client, partitions, OffsetSpec::Latest).await?,
        ));
    }
    if let Some(datetime) = &args.to_datetime {
        let timestamp = parse_datetime(datetime)?;
        let found = offsets(client, partitions, OffsetSpec::Timestamp(timestamp)).await?;
        let mut plan = BTreeMap::new();
        let mut empty = BTreeSet::new();
        for (tp, listed) in found {
            if listed.offset >= 0 {
                plan.insert(tp, listed.offset);
            } else {
                eprintln!(
                    "\nWarn: Partition {} from topic {} is empty. Falling back to latest known offset.",
                    tp.partition, tp.topic
                );
                empty.insert(tp);
            }
        }
        plan.extend(plain(offsets(client, &empty, OffsetSpec::Latest).await?));
        return Ok(plan);
    }
    let requested: BTreeMap<TopicPartition, i64> = if let Some(offset) = args.to_offset {
        partitions.iter().map(|tp| (tp.clone(), offset)).collect()
    } else if let Some(shift) = args.shift_by {
        let mut requested = BTreeMap::new();
        for tp in partitions {
            let current = committed.get(tp).ok_or_else(|| {
                CliError::new(format!(
                    "Cannot shift offset for partition {tp} since there is no current committed offset"
                ))
                .hint("reset it to an absolute position first (--to-earliest, --to-offset N)")
            })?;
            requested.insert(tp.clone(), current.offset.saturating_add(shift));
        }
        requested
    } else {
        return Err(CliError::new(
            "one of --to-earliest, --to-latest, --to-datetime, --to-offset, --shift-by is required",
        ));
    };
    clamp_to_log(client, requested).await
}

/// Moves requested offsets outside [log start, log end] to the nearer end, with a warning.
async fn clamp_to_log(
    client: &mut Client,
    requested: BTreeMap<TopicPartition, i64>,
) -> Result<BTreeMap<TopicPartition, i64>, CliError> {
    let keys: BTreeSet<TopicPartition> = requested.keys().cloned().collect();
    let starts = offsets(client, &keys, OffsetSpec::Earliest).await?;
    let ends = offsets(client, &keys, OffsetSpec::Latest).await?;
    let mut plan = BTreeMap::new();
    for (tp, offset) in requested {
        let start = starts.get(&tp).map(|l| l.offset);
        let end = ends.get(&tp).map(|l| l.offset);
        let value = match (start, end) {
            (_, Some(end)) if offset > end => {
                eprintln!("New offset ({offset}) is higher than latest offset for topic partition {tp}. Value will be set to {end}");
                end
            }
            (Some(start), _) if offset < start => {
                eprintln!("New offset ({offset}) is lower than earliest offset for topic partition {tp}. Value will be set to {start}");
                start
            }
            _ => offset,
        };
        plan.insert(tp, value);
    }
    Ok(plan)
}

fn format_plan(group_id: &str, plan: &BTreeMap<TopicPartition, i64>) -> String {
    let line = |a: &str, b: &str, c: &str, d: &str| {
        format!(
            "\n{} {} {} {}",
            pad(a, 30),
            pad(b, 30),
            pad(c, 10),
            pad(d, 15)
        )
    };
    let mut out = String::new();
    if !plan.is_empty() {
        out.push_str(&line("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"));
    }
    for (tp, offset) in plan {
        out.push_str(&line(
            group_id,
            &tp.topic,
            &tp.partition.to_string(),
            &offset.to_string(),
        ));
    }
    out.push('\n');
    out
}

async fn delete(client: &mut Client, group_id: &str) -> Result<(), CliError> {
    client.delete_group(group_id).await.map_err(|e| {
        CliError::new(format!("Deletion of some consumer groups failed:\n* Group '{group_id}' could not be deleted due to: {e}"))
            .hint("a group with active members cannot be deleted: stop its consumers first")
    })?;
    println!("Deletion of requested consumer groups ('{group_id}') was successful.");
    Ok(())
}

/// Parses `YYYY-MM-DDTHH:mm:SS[.sss][Z|±hh|±hhmm|±hh:mm]` (UTC without a zone) to ms since
/// the epoch, the format Kafka's tool takes.
fn parse_datetime(text: &str) -> Result<i64, CliError> {
    let bad = || {
        CliError::new(format!("cannot parse datetime '{text}'")).hint(
            "write it as YYYY-MM-DDTHH:mm:SS.sss with an optional zone (Z, +hh:mm), as Kafka's tool takes it",
        )
    };
    let (date, rest) = text.split_once('T').ok_or_else(bad)?;
    let mut date_parts = date.split('-');
    let next_num = |n: Option<&str>, len: usize| -> Result<i64, CliError> {
        let s = n.ok_or_else(bad)?;
        if s.len() != len || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse::<i64>().map_err(|_| bad())
    };
    let year = next_num(date_parts.next(), 4)?;
    let month = next_num(date_parts.next(), 2)?;
    let day = next_num(date_parts.next(), 2)?;
    if date_parts.next().is_some() {
        return Err(bad());
    }
    let zone_at = rest.find(['Z', '+', '-']).unwrap_or(rest.len());
    let (time, zone) = rest.split_at(zone_at);
    let (hms, millis) = match time.split_once('.') {
        Some((hms, ms)) => (hms, next_num(Some(ms), 3)?),
        None => (time, 0),
    };
    let mut hms_parts = hms.split(':');
    let hour = next_num(hms_parts.next(), 2)?;
    let minute = next_num(hms_parts.next(), 2)?;
    let second = next_num(hms_parts.next(), 2)?;
    if hms_parts.next().is_some() {
        return Err(bad());
    }
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => return Err(bad()),
    };
    if day < 1 || day > days_in_month || hour > 23 || minute > 59 || second > 59 {
        return Err(bad());
    }
    let offset_minutes = match zone {
        "" | "Z" => 0,
        _ => {
            let (sign, digits) = zone.split_at(1);
            let digits = digits.replace(':', "");
            let (h, m) = match digits.len() {
                2 => (next_num(Some(&digits), 2)?, 0),
                4 => (next_num(digits.get(..2), 2)?, next_num(digits.get(2..), 2)?),
                _ => return Err(bad()),
            };
            if h > 18 || m > 59 {
                return Err(bad());
            }
            if sign == "-" {
                -(h * 60 + m)
            } else {
                h * 60 + m
            }
        }
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_minutes * 60;
    Ok(seconds * 1000 + millis)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetimes_parse_as_kafka_reads_them() {
        assert_eq!(parse_datetime("1970-01-01T00:00:00.000"), Ok(0));
        assert_eq!(parse_datetime("1970-01-01T00:00:01.500Z"), Ok(1500));
        assert_eq!(
            parse_datetime("2024-10-01T12:30:00.000"),
            Ok(1_727_785_800_000)
        );
        assert_eq!(
            parse_datetime("2024-10-01T14:30:00.000+02:00"),
            Ok(1_727_785_800_000)
        );
        assert_eq!(
            parse_datetime("2024-10-01T10:30:00.000-0200"),
            Ok(1_727_785_800_000)
        );
        assert_eq!(parse_datetime("2024-02-29T00:00:00"), Ok(1_709_164_800_000));
        for bad in [
            "",
            "2024-10-01",
            "2024-13-01T00:00:00.000",
            "2023-02-29T00:00:00.000",
            "2024-10-01T24:00:00.000",
            "2024-10-01T00:00:00.0",
            "2024-10-01T00:00:00.000+2",
            "24-10-01T00:00:00.000",
            "2024-10-01T00:00.000",
        ] {
            assert!(parse_datetime(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn describe_columns_follow_kafka_widths() {
        let rows = [Row {
            topic: Some("t".into()),
            partition: Some(0),
            offset: Some(3),
            log_end: Some(10),
            consumer_id: MISSING.into(),
            host: MISSING.into(),
            client_id: MISSING.into(),
        }];
        let out = format_describe("g", &rows);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "");
        assert_eq!(
            lines[1],
            "GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID     HOST            CLIENT-ID"
        );
        assert_eq!(
            lines[2],
            "g               t               0          3               10              7               -               -               -"
        );
    }
}
