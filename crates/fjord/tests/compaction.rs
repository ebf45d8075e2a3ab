//! The log cleaner in the running broker: a compacted topic keeps the latest value of every
//! key and loses its tombstones after delete.retention.ms; `__consumer_offsets` is compacted and
//! keeps every group's offsets across restarts; a key map smaller than the keys cleans over
//! several passes; kill -9 at many points of cleaning loses nothing.
#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Client, TestBroker};
use fjord_protocol::{RequestBody, ResponseBody};
use fjord_records::{BatchBuilder, Compression};

const NONE: i16 = 0;

/// A broker whose cleaner looks for work every 100 ms.
fn broker(extra: &[(&str, &str)]) -> TestBroker {
    let mut settings = vec![
        ("log.cleaner.backoff.ms", "100"),
        ("log.retention.check.interval.ms", "1000"),
    ];
    settings.extend_from_slice(extra);
    TestBroker::start_with(&settings)
}

fn create(client: &mut Client, name: &str, partitions: i32, configs: &[(&str, &str)]) {
    common::create_topic(client, name, partitions, configs);
}

/// One record per (key, value); `None` is a tombstone.
fn produce(client: &mut Client, topic: &str, records: &[(String, Option<String>)]) {
    let mut builder = BatchBuilder::new(Compression::Lz4);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for (key, value) in records {
        builder
            .append(
                now,
                Some(key.as_bytes()),
                value.as_deref().map(str::as_bytes),
                &[],
            )
            .unwrap();
    }
    let (error_code, _) = common::produce_batch(client, topic, builder.build().unwrap().freeze());
    assert_eq!(error_code, NONE);
}

type Record = (i64, String, Option<String>);

/// Every record of partition 0 from the start: (offset, key, value).
fn read_all(client: &mut Client, topic: &str) -> Vec<Record> {
    let text = |b: Option<Bytes>| b.map(|b| String::from_utf8_lossy(&b).into_owned());
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let (error_code, high_watermark, records) = common::fetch_once(client, topic, offset);
        assert_eq!(error_code, NONE);
        let Some(last) = records.last() else { break };
        offset = last.offset + 1;
        out.extend(
            records
                .into_iter()
                .map(|r| (r.offset, text(r.key).unwrap_or_default(), text(r.value))),
        );
        if offset >= high_watermark {
            break;
        }
    }
    out
}

fn latest(records: &[Record]) -> BTreeMap<String, Option<String>> {
    records
        .iter()
        .map(|(_, k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Offsets strictly increase, and below `cleaned_below` (the part the cleaner has been
/// through) no key appears twice.
fn assert_compacted(records: &[Record], cleaned_below: i64) {
    for pair in records.windows(2) {
        assert!(pair[0].0 < pair[1].0, "offsets strictly increase: {pair:?}");
    }
    let mut keys = std::collections::HashSet::new();
    for (_, key, _) in records.iter().filter(|r| r.0 < cleaned_below) {
        assert!(keys.insert(key), "{key} appears twice in the cleaned part");
    }
}

fn wait_for<T>(
    broker: &TestBroker,
    what: &str,
    timeout: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; broker log:\n{}",
            broker.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Passes the broker logged for a partition.
fn passes(broker: &TestBroker, tp: &str) -> usize {
    broker
        .log()
        .lines()
        .filter(|l| l.contains("log cleaned") && l.contains(&format!("tp={tp}")))
        .count()
}

/// Rounds of updates to `keys` keys, the last round deleting every fourth key.
fn updates(keys: usize, rounds: usize, pad: usize) -> Vec<Vec<(String, Option<String>)>> {
    (0..rounds)
        .map(|round| {
            (0..keys)
                .map(|key| {
                    let value = (round + 1 < rounds || key % 4 != 0)
                        .then(|| format!("r{round}-{}", "x".repeat(pad)));
                    (format!("key-{key:05}"), value)
                })
                .collect()
        })
        .collect()
}

#[test]
fn a_compacted_topic_keeps_the_latest_value_of_every_key() {
    let mut broker = broker(&[]);
    let mut client = broker.connect();
    create(
        &mut client,
        "table",
        1,
        &[
            ("cleanup.policy", "compact"),
            ("segment.bytes", "4096"),
            ("min.cleanable.dirty.ratio", "0.01"),
            ("delete.retention.ms", "1500"),
            // The reproduction: retention settings must not delete a compacted log.
            ("retention.ms", "1000"),
        ],
    );
    let rounds = updates(50, 20, 20);
    let mut expected = BTreeMap::new();
    for round in &rounds {
        for chunk in round.chunks(10) {
            produce(&mut client, "table", chunk);
        }
        expected.extend(round.iter().cloned());
    }
    let written = rounds.len() * 50;
    let cleaned = wait_for(&broker, "a cleaning pass", Duration::from_secs(30), || {
        let records = read_all(&mut client, "table");
        (passes(&broker, "table-0") > 0 && records.len() < written / 2).then_some(records)
    });
    // The active segment (a few hundred records at most) is never cleaned.
    assert_compacted(&cleaned, written as i64 - 400);
    assert_eq!(latest(&cleaned), expected, "the latest value of every key");
    assert!(
        cleaned.iter().any(|(_, _, v)| v.is_none()),
        "tombstones stay for delete.retention.ms"
    );

    let live: BTreeMap<_, _> = expected
        .iter()
        .filter(|(_, v)| v.is_some())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let deleted: Vec<String> = expected
        .iter()
        .filter(|(_, v)| v.is_none())
        .map(|(k, _)| k.clone())
        .collect();
    // Tombstones are stamped with their horizon by the first pass that keeps them (once
    // their segment is sealed) and dropped by a pass after it: rewriting the live keys keeps
    // the log dirty, so passes keep coming.
    let filler: Vec<(String, Option<String>)> =
        live.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let final_records = wait_for(&broker, "tombstones to go", Duration::from_secs(40), || {
        for chunk in filler.chunks(10) {
            produce(&mut client, "table", chunk);
        }
        let records = read_all(&mut client, "table");
        let tombstones = records
            .iter()
            .filter(|(_, k, v)| v.is_none() && deleted.contains(k))
            .count();
        (tombstones == 0).then_some(records)
    });
    assert_eq!(latest(&final_records), live);

    // A crash and a restart lose nothing. The filler left the log dirty, so a cleaning pass
    // may still run after the last read (before the kill or after the restart): the log may
    // lose superseded records, but every record kept is one that was there, at its offset,
    // the tail is intact and every key keeps its latest value.
    broker.kill9();
    broker.restart();
    let mut client = broker.connect();
    let restarted = read_all(&mut client, "table");
    let before: std::collections::BTreeSet<_> = final_records.iter().collect();
    assert!(
        restarted.iter().all(|r| before.contains(r)),
        "only records that were there before the crash"
    );
    assert_eq!(restarted.last(), final_records.last(), "the tail survives");
    assert_eq!(latest(&restarted), live);
}

/// A standalone commit (no member) of `offset` for partitions 0..10, retried while the
/// coordinator loads.
fn commit(client: &mut Client, group: &str, topic: &str, offset: i64) {
    use fjord_protocol::messages::offset_commit_request::*;
    for _ in 0..200 {
        let response = expect!(
            client.request(
                8,
                RequestBody::OffsetCommit(OffsetCommitRequest {
                    group_id: group.to_string(),
                    generation_id_or_member_epoch: -1,
                    member_id: String::new(),
                    group_instance_id: None,
                    retention_time_ms: -1,
                    topics: vec![OffsetCommitRequestTopic {
                        name: topic.to_string(),
                        partitions: (0..10)
                            .map(|partition| OffsetCommitRequestPartition {
                                partition_index: partition,
                                committed_offset: offset + i64::from(partition),
                                committed_leader_epoch: -1,
                                committed_metadata: Some(String::new()),
                            })
                            .collect(),
                        ..Default::default()
                    }],
                })
            ),
            OffsetCommit
        );
        match response.topics[0]
            .partitions
            .iter()
            .map(|p| p.error_code)
            .find(|c| *c != NONE)
            .unwrap_or(NONE)
        {
            NONE => return,
            // COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
            14..=16 => std::thread::sleep(Duration::from_millis(50)),
            other => panic!("commit failed with error {other}"),
        }
    }
    panic!("the coordinator never became available");
}

/// The committed offsets of partitions 0..10.
fn committed(client: &mut Client, group: &str, topic: &str) -> Vec<i64> {
    use fjord_protocol::messages::offset_fetch_request::*;
    for _ in 0..200 {
        let response = expect!(
            client.request(
                7,
                RequestBody::OffsetFetch(OffsetFetchRequest {
                    group_id: group.to_string(),
                    topics: Some(vec![OffsetFetchRequestTopic {
                        name: topic.to_string(),
                        partition_indexes: (0..10).collect(),
                    }]),
                    ..Default::default()
                })
            ),
            OffsetFetch
        );
        if (14..=16).contains(&response.error_code) {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        assert_eq!(response.error_code, NONE, "{response:?}");
        return response.topics[0]
            .partitions
            .iter()
            .map(|p| p.committed_offset)
            .collect();
    }
    panic!("the coordinator never became available");
}

#[test]
fn consumer_offsets_are_compacted_and_every_group_keeps_its_offsets() {
    let mut broker = broker(&[
        ("offsets.topic.num.partitions", "1"),
        ("offsets.topic.segment.bytes", "4096"),
    ]);
    let mut client = broker.connect();
    create(&mut client, "orders", 10, &[]);
    let groups: Vec<String> = (0..5).map(|g| format!("group-{g}")).collect();
    // 5 groups × 20 commits × 10 partitions: 1000 offset records.
    for offset in 1..=20 {
        for group in &groups {
            commit(&mut client, group, "orders", offset);
        }
    }
    wait_for(
        &broker,
        "__consumer_offsets to be cleaned",
        Duration::from_secs(30),
        || (passes(&broker, "__consumer_offsets-0") > 0).then_some(()),
    );
    let records = read_all(&mut client, "__consumer_offsets");
    assert!(
        records.len() < 1000 / 2,
        "{} commit records left of 1000",
        records.len()
    );
    for restart in ["kill -9", "SIGTERM"] {
        if restart == "kill -9" {
            broker.kill9();
            broker.restart();
        } else {
            broker.restart();
        }
        let mut client = broker.connect();
        for group in &groups {
            let expected: Vec<i64> = (20..30).collect();
            assert_eq!(
                committed(&mut client, group, "orders"),
                expected,
                "{group} after {restart}"
            );
        }
    }
}

/// Values that do not compress away: hex digits of a simple generator.
fn noise(seed: u64, len: usize) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = String::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push_str(&format!("{x:016x}"));
    }
    out.truncate(len);
    out
}

/// Rounds `rounds` over `keys` keys (each round its own values), 100 records a batch; returns
/// the latest value of each key.
fn write_rounds(
    client: &mut Client,
    topic: &str,
    keys: usize,
    rounds: std::ops::Range<usize>,
    value_len: usize,
) -> BTreeMap<String, Option<String>> {
    let mut expected = BTreeMap::new();
    for round in rounds {
        let writes: Vec<(String, Option<String>)> = (0..keys)
            .map(|key| {
                let seed = (round * keys + key) as u64;
                (format!("key-{key:05}"), Some(noise(seed, value_len)))
            })
            .collect();
        for chunk in writes.chunks(100) {
            produce(client, topic, chunk);
        }
        expected.extend(writes);
    }
    expected
}

/// `field=value` of every "log cleaned" line for `tp`.
fn pass_field(broker: &TestBroker, tp: &str, field: &str) -> Vec<u64> {
    broker
        .log()
        .lines()
        .filter(|l| l.contains("log cleaned") && l.contains(&format!("tp={tp} ")))
        .filter_map(|l| {
            let at = l.find(&format!(" {field}="))? + field.len() + 2;
            l[at..].split(' ').next()?.parse().ok()
        })
        .collect()
}

#[test]
fn more_keys_than_the_dedupe_buffer_holds_are_cleaned_over_several_passes() {
    // 24,000 bytes: 1,000 slots of 24 bytes, filled to 90%.
    let broker = broker(&[("log.cleaner.dedupe.buffer.size", "24000")]);
    let mut client = broker.connect();
    create(
        &mut client,
        "wide",
        1,
        &[
            ("cleanup.policy", "compact"),
            ("segment.bytes", "16384"),
            ("min.cleanable.dirty.ratio", "0.01"),
        ],
    );
    let expected = write_rounds(&mut client, "wide", 3000, 0..2, 20);
    // Roll the last data into a sealed segment so all of it is cleanable.
    let filler: Vec<(String, Option<String>)> = (0..200)
        .map(|i| (format!("filler-{i}"), Some(noise(i, 100))))
        .collect();
    for chunk in filler.chunks(100) {
        produce(&mut client, "wide", chunk);
    }
    let records = wait_for(
        &broker,
        "the whole log to be cleaned",
        Duration::from_secs(60),
        || {
            let records = read_all(&mut client, "wide");
            let data: Vec<Record> = records
                .iter()
                .filter(|r| r.1.starts_with("key-"))
                .cloned()
                .collect();
            (data.len() == 3000).then_some(data)
        },
    );
    assert_compacted(&records, i64::MAX);
    let mut wanted = expected;
    wanted.retain(|k, _| k.starts_with("key-"));
    assert_eq!(latest(&records), wanted);
    let mapped = pass_field(&broker, "wide-0", "keys_mapped");
    assert!(
        mapped.len() >= 6,
        "6,000 records over 900-key maps: {mapped:?}"
    );
    assert!(mapped.iter().all(|n| *n <= 900), "{mapped:?}");
    let memory = pass_field(&broker, "wide-0", "map_memory_bytes");
    assert!(memory.iter().all(|m| *m <= 24_000), "{memory:?}");
}

#[test]
fn kill_9_at_many_points_of_cleaning_loses_nothing() {
    // Written with the cleaner off, so that the whole log is dirty; then, throttled to 200 kB/s
    // (read and write together), a pass over it takes seconds: about two mapping keys, then
    // more writing `.cleaned` files and swapping them in. Each restart starts the pass over.
    let mut broker = broker(&[("log.cleaner.enable", "false")]);
    let mut client = broker.connect();
    create(
        &mut client,
        "crashy",
        1,
        &[
            ("cleanup.policy", "compact"),
            ("segment.bytes", "16384"),
            ("min.cleanable.dirty.ratio", "0.01"),
        ],
    );
    let mut expected = write_rounds(&mut client, "crashy", 1000, 0..6, 120);
    broker.stop();
    broker.extra.retain(|(k, _)| k != "log.cleaner.enable");
    broker.extra.push((
        "log.cleaner.io.max.bytes.per.second".into(),
        "400000".into(),
    ));
    broker.restart();
    let partition_dir = broker.log_dir().join("crashy-0");
    // The cleaned segments a pass is writing or swapping now.
    let in_flight = || -> Vec<String> {
        std::fs::read_dir(&partition_dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".log.cleaned") || name.ends_with(".log.swap"))
            .collect()
    };
    // Kill points: while mapping keys (a delay after the start), and after the 1st, 5th and
    // 12th cleaned segment of a pass appeared (of about 38), so early and late swaps are cut.
    let mut mid_swap_kills = 0;
    // FJORD_CLEANER_KILL_ROUNDS repeats the points (the long mode; see the README).
    let rounds: usize = std::env::var("FJORD_CLEANER_KILL_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let points = [(300, 0), (0, 1), (0, 5), (1000, 0), (0, 12)].repeat(rounds);
    for (round, (delay_ms, nth_segment)) in (6..).zip(points) {
        // A fresh round of every key: the pass this kill cuts always has work.
        let mut client = broker.connect();
        expected.extend(write_rounds(
            &mut client,
            "crashy",
            1000,
            round..round + 1,
            120,
        ));
        if nth_segment > 0 {
            let mut seen = std::collections::HashSet::new();
            let deadline = Instant::now() + Duration::from_secs(30);
            while seen.len() < nth_segment {
                seen.extend(in_flight());
                assert!(
                    Instant::now() < deadline,
                    "only {} cleaned segments appeared; broker log:\n{}",
                    seen.len(),
                    broker.log()
                );
                std::thread::sleep(Duration::from_millis(2));
            }
        } else {
            std::thread::sleep(Duration::from_millis(delay_ms));
        }
        broker.kill9();
        mid_swap_kills += usize::from(!in_flight().is_empty());
        broker.restart();
        let mut client = broker.connect();
        let records = read_all(&mut client, "crashy");
        for pair in records.windows(2) {
            assert!(
                pair[0].0 < pair[1].0,
                "offsets go back after a kill: {pair:?}"
            );
        }
        let point = format!("{delay_ms} ms / cleaned segment {nth_segment}");
        assert_eq!(latest(&records), expected, "after a kill at {point}");
    }
    assert!(
        mid_swap_kills >= 2,
        "only {mid_swap_kills} kills left a cleaned segment behind"
    );
    // Unthrottled, the cleaner finishes the job.
    broker.stop();
    broker
        .extra
        .retain(|(k, _)| k != "log.cleaner.io.max.bytes.per.second");
    broker.restart();
    let mut client = broker.connect();
    let filler: Vec<(String, Option<String>)> = (0..300)
        .map(|i| (format!("filler-{i}"), Some(noise(i, 100))))
        .collect();
    for chunk in filler.chunks(100) {
        produce(&mut client, "crashy", chunk);
    }
    let records = wait_for(
        &broker,
        "the log to be cleaned",
        Duration::from_secs(60),
        || {
            let records: Vec<Record> = read_all(&mut client, "crashy")
                .into_iter()
                .filter(|r| r.1.starts_with("key-"))
                .collect();
            (records.len() == 1000).then_some(records)
        },
    );
    assert_compacted(&records, i64::MAX);
    assert_eq!(latest(&records), expected);
}
