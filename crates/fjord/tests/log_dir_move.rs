//! AlterReplicaLogDirs on a live broker killed with SIGKILL right after each move starts: the
//! restart resumes (or finishes) the move, the partition ends up in the dir asked for, and every
//! acknowledged record is there, in order, once.
#[macro_use]
mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Client, TestBroker};
use fjord_protocol::messages::alter_replica_log_dirs_request::*;
use fjord_protocol::messages::describe_log_dirs_request::*;
use fjord_protocol::{RequestBody, ResponseBody};
use fjord_records::{BatchBuilder, Compression};

const NONE: i16 = 0;
const TOPIC: &str = "moving";
/// 40 batches of 40 records of 1 KiB: 1.6 MiB per round, each segment 1 MiB.
const BATCHES: usize = 40;
const RECORDS_PER_BATCH: usize = 40;

fn produce(client: &mut Client, round: usize, batch: usize) -> i64 {
    let mut builder = BatchBuilder::new(Compression::None);
    for r in 0..RECORDS_PER_BATCH {
        let value = format!("{round}-{batch}-{r:<1016}");
        builder
            .append(0, None, Some(value.as_bytes()), &[])
            .unwrap();
    }
    let (code, offset) = common::produce_batch(client, TOPIC, builder.build().unwrap().freeze());
    assert_eq!(code, NONE);
    offset
}

fn alter(client: &mut Client, dir: &Path) -> i16 {
    let response = expect!(
        client.request(
            2,
            RequestBody::AlterReplicaLogDirs(AlterReplicaLogDirsRequest {
                dirs: vec![AlterReplicaLogDir {
                    path: dir.display().to_string(),
                    topics: vec![AlterReplicaLogDirTopic {
                        name: TOPIC.to_string(),
                        partitions: vec![0],
                    }],
                }],
            }),
        ),
        AlterReplicaLogDirs
    );
    response.results[0].partitions[0].error_code
}

/// Where the partition is: (dir of the current log, dir of a future log if one is moving).
fn placement(client: &mut Client) -> (Option<String>, Option<String>) {
    let response = expect!(
        client.request(
            4,
            RequestBody::DescribeLogDirs(DescribeLogDirsRequest { topics: None }),
        ),
        DescribeLogDirs
    );
    let (mut current, mut future) = (None, None);
    for dir in &response.results {
        for topic in dir.topics.iter().filter(|t| t.name == TOPIC) {
            for p in &topic.partitions {
                let slot = if p.is_future_key {
                    &mut future
                } else {
                    &mut current
                };
                *slot = Some(dir.log_dir.clone());
            }
        }
    }
    (current, future)
}

fn read_all(client: &mut Client) -> Vec<(i64, Bytes)> {
    let mut all = Vec::new();
    loop {
        let next = all.last().map_or(0, |(o, _)| o + 1);
        let (code, _, records) = common::fetch_once(client, TOPIC, next);
        assert_eq!(code, NONE);
        if records.is_empty() {
            return all;
        }
        all.extend(records.into_iter().map(|r| (r.offset, r.value.unwrap())));
    }
}

#[test]
fn a_move_interrupted_by_sigkill_resumes_and_loses_nothing() {
    let root = tempfile::tempdir().unwrap();
    let dirs = [root.path().join("a"), root.path().join("b")];
    let log_dirs = format!("{},{}", dirs[0].display(), dirs[1].display());
    let mut broker = TestBroker::start_with(&[
        ("log.dirs", &log_dirs),
        ("log.segment.delete.delay.ms", "0"),
    ]);
    let mut client = broker.connect();
    common::create_topic(&mut client, TOPIC, 1, &[("segment.bytes", "1048576")]);
    let (start, _) = placement(&mut client);
    let mut at = dirs
        .iter()
        .position(|d| Some(d.display().to_string()) == start)
        .expect("placed in one of the dirs");

    let mut expected = Vec::new();
    let mut interrupted = 0;
    // FJORD_MOVE_KILL_ROUNDS=N is the long mode: N moves, each killed at once.
    let rounds: usize = std::env::var("FJORD_MOVE_KILL_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    for round in 0..rounds {
        for batch in 0..BATCHES {
            let offset = produce(&mut client, round, batch);
            for r in 0..RECORDS_PER_BATCH {
                expected.push((offset + r as i64, format!("{round}-{batch}-{r:<1016}")));
            }
        }
        let dest = 1 - at;
        assert_eq!(alter(&mut client, &dirs[dest]), NONE);
        broker.kill9();
        let log_before = broker.log().len();
        broker.restart();
        let started = broker.log()[log_before..].to_string();
        if started.contains("log_dir_moves_resumed=1")
            || started.contains("log_dir_moves_completed=1")
        {
            interrupted += 1;
        }
        client = broker.connect();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (current, future) = placement(&mut client);
            if current == Some(dirs[dest].display().to_string()) && future.is_none() {
                break;
            }
            // A kill before the request's effect reached the disk leaves nothing to resume: ask again.
            if future.is_none() && current == Some(dirs[at].display().to_string()) {
                assert_eq!(alter(&mut client, &dirs[dest]), NONE);
            }
            assert!(
                Instant::now() < deadline,
                "the move did not finish:\n{}",
                broker.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        at = dest;
        let got: Vec<(i64, String)> = read_all(&mut client)
            .into_iter()
            .map(|(o, v)| (o, String::from_utf8(v.to_vec()).unwrap()))
            .collect();
        assert_eq!(got.len(), expected.len(), "round {round}");
        assert!(got == expected, "round {round}: the moved log differs");
        // The old dir goes once log.segment.delete.delay.ms (0 here) has passed.
        let leftovers = || -> Vec<String> {
            std::fs::read_dir(&dirs[1 - at])
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(TOPIC))
                .collect()
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        while !leftovers().is_empty() {
            assert!(Instant::now() < deadline, "{:?}", leftovers());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    assert!(
        interrupted > 0,
        "every move finished before the kill; nothing was tested"
    );
    broker.stop();
}

#[test]
fn replica_alter_log_dirs_io_max_bytes_per_second_paces_a_move() {
    let root = tempfile::tempdir().unwrap();
    let dirs = [root.path().join("a"), root.path().join("b")];
    let log_dirs = format!("{},{}", dirs[0].display(), dirs[1].display());
    let mut broker = TestBroker::start_with(&[
        ("log.dirs", &log_dirs),
        ("replica.alter.log.dirs.io.max.bytes.per.second", "1000000"),
    ]);
    let mut client = broker.connect();
    common::create_topic(&mut client, TOPIC, 1, &[("segment.bytes", "1048576")]);
    // 3 rounds of 1.6 MiB: about 5 MB to copy at 1 MB/s.
    for round in 0..3 {
        for batch in 0..BATCHES {
            produce(&mut client, round, batch);
        }
    }
    let (start, _) = placement(&mut client);
    let dest = dirs
        .iter()
        .find(|d| Some(d.display().to_string()) != start)
        .unwrap();
    let started = Instant::now();
    assert_eq!(alter(&mut client, dest), NONE);
    let mut saw_future = false;
    loop {
        let (current, future) = placement(&mut client);
        saw_future |= future.is_some();
        if current == Some(dest.display().to_string()) && future.is_none() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the move did not finish"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = started.elapsed();
    assert!(
        saw_future,
        "DescribeLogDirs never showed the future replica"
    );
    // Unthrottled the copy takes a fraction of a second here.
    assert!(
        took >= Duration::from_secs(3),
        "5 MB moved in {took:?} at 1 MB/s"
    );
    assert_eq!(read_all(&mut client).len(), 3 * BATCHES * RECORDS_PER_BATCH);
    broker.stop();
}
