//! A log dir whose filesystem fills up goes offline as Kafka takes it: its partitions answer
//! KAFKA_STORAGE_ERROR and acknowledge nothing more, the other log dir keeps serving, the broker
//! says so loudly, and after a restart with space again every acknowledged record is there.
//!
//! The full filesystem is a 2 MiB tmpfs in a mount namespace of its own (`unshare -m`), held
//! open by a sleeping process; the broker runs inside that namespace through `nsenter`.
#[macro_use]
mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use bytes::Bytes;
use common::{Client, TestBroker};
use fjord_protocol::messages::describe_log_dirs_request::*;
use fjord_protocol::{RequestBody, ResponseBody};
use fjord_records::{BatchBuilder, Compression};

const NONE: i16 = 0;
const KAFKA_STORAGE_ERROR: i16 = 56;

/// A process holding a mount namespace with a small tmpfs at `mount_point`, filled but for
/// about `free_kb`.
struct SmallFilesystem {
    holder: Child,
}

impl SmallFilesystem {
    fn mount(mount_point: &Path, free_kb: u32) -> SmallFilesystem {
        let script = format!(
            "mount -t tmpfs -o size=2m fjord-test {dir} && \
             dd if=/dev/zero of={dir}/ballast bs=1k count={ballast} 2>/dev/null && \
             echo ready && exec sleep 600",
            dir = mount_point.display(),
            ballast = 2048 - free_kb
        );
        let mut holder = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .spawn()
            .expect("unshare (util-linux) runs");
        let mut line = String::new();
        BufReader::new(holder.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("holder output");
        assert_eq!(
            line.trim(),
            "ready",
            "could not mount a tmpfs in a mount namespace"
        );
        SmallFilesystem { holder }
    }

    /// The command prefix that runs a program inside the namespace.
    fn enter(&self) -> Vec<String> {
        ["nsenter", "-t", &self.holder.id().to_string(), "-m", "--"]
            .map(str::to_string)
            .to_vec()
    }

    fn run(&self, command: &str) {
        let status = Command::new("nsenter")
            .args([
                "-t",
                &self.holder.id().to_string(),
                "-m",
                "--",
                "sh",
                "-c",
                command,
            ])
            .status()
            .expect("nsenter");
        assert!(status.success(), "{command}");
    }
}

impl Drop for SmallFilesystem {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

fn create(client: &mut Client, name: &str) {
    common::create_topic(client, name, 1, &[("segment.bytes", "65536")]);
}

/// Produces one 1000-byte record; the partition's error code and base offset.
fn produce(client: &mut Client, topic: &str, value: &str) -> (i16, i64) {
    let mut builder = BatchBuilder::new(Compression::None);
    builder
        .append(0, None, Some(format!("{value:<1000}").as_bytes()), &[])
        .unwrap();
    common::produce_batch(client, topic, builder.build().unwrap().freeze())
}

/// One fetch from `offset`: the error code and the (offset, value) of each record.
fn fetch(client: &mut Client, topic: &str, offset: i64) -> (i16, Vec<(i64, String)>) {
    let (error_code, _, records) = common::fetch_once(client, topic, offset);
    let values = records
        .into_iter()
        .map(|r| {
            let value = r.value.unwrap_or_else(Bytes::new);
            (
                r.offset,
                String::from_utf8_lossy(&value).trim_end().to_string(),
            )
        })
        .collect();
    (error_code, values)
}

fn read_all(client: &mut Client, topic: &str) -> Vec<(i64, String)> {
    let mut all = Vec::new();
    loop {
        let next = all.last().map_or(0, |(o, _)| o + 1);
        let (code, records) = fetch(client, topic, next);
        assert_eq!(code, NONE);
        if records.is_empty() {
            return all;
        }
        all.extend(records);
    }
}

/// (log dir, error code, topics) as DescribeLogDirs reports them.
fn log_dirs(client: &mut Client) -> Vec<(String, i16, Vec<String>)> {
    let response = expect!(
        client.request(
            4,
            RequestBody::DescribeLogDirs(DescribeLogDirsRequest { topics: None }),
        ),
        DescribeLogDirs
    );
    response
        .results
        .iter()
        .map(|r| {
            (
                r.log_dir.clone(),
                r.error_code,
                r.topics.iter().map(|t| t.name.clone()).collect(),
            )
        })
        .collect()
}

#[test]
fn a_full_log_dir_goes_offline_and_loses_nothing_acknowledged() {
    let roomy = tempfile::tempdir().unwrap();
    let small = tempfile::tempdir().unwrap();
    let fs = SmallFilesystem::mount(small.path(), 600);
    let dirs = format!("{},{}", roomy.path().display(), small.path().display());
    let mut broker = TestBroker::start_wrapped(&fs.enter(), &[("log.dirs", &dirs)]);
    let mut client = broker.connect();
    // New partitions go to the dir holding the fewest: "safe" to the first, "doomed" to the
    // small one.
    create(&mut client, "safe");
    create(&mut client, "doomed");
    let placed = log_dirs(&mut client);
    assert_eq!(placed[1].2, vec!["doomed".to_string()], "{placed:?}");

    let mut acknowledged = Vec::new();
    let mut failure = None;
    for i in 0..2000 {
        let value = format!("record-{i}");
        match produce(&mut client, "doomed", &value) {
            (NONE, offset) => acknowledged.push((offset, value)),
            (code, _) => {
                failure = Some(code);
                break;
            }
        }
    }
    assert_eq!(
        failure,
        Some(KAFKA_STORAGE_ERROR),
        "the full filesystem was never noticed"
    );
    assert!(
        acknowledged.len() > 100,
        "{} records before the disk filled",
        acknowledged.len()
    );
    // Offline: nothing more acknowledged, nothing served.
    assert_eq!(
        produce(&mut client, "doomed", "late").0,
        KAFKA_STORAGE_ERROR
    );
    assert_eq!(fetch(&mut client, "doomed", 0).0, KAFKA_STORAGE_ERROR);
    let dirs_now = log_dirs(&mut client);
    assert_eq!(
        (dirs_now[0].1, dirs_now[1].1),
        (NONE, KAFKA_STORAGE_ERROR),
        "{dirs_now:?}"
    );
    // The other dir carries on.
    assert_eq!(produce(&mut client, "safe", "fine").0, NONE);
    assert_eq!(read_all(&mut client, "safe"), vec![(0, "fine".to_string())]);
    assert!(broker.log().contains("LOG DIR OFFLINE"), "{}", broker.log());

    // With space again, a restart brings back every acknowledged record.
    broker.kill9();
    fs.run(&format!("rm {}/ballast", small.path().display()));
    broker.restart();
    let mut client = broker.connect();
    assert_eq!(read_all(&mut client, "doomed"), acknowledged);
    assert_eq!(produce(&mut client, "doomed", "after").0, NONE);
}
