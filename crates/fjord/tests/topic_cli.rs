//! `fjord topic` against the real binary: create (with configs, an existing topic, a bad
//! value), list, describe as `kafka-topics` prints it, add partitions, delete, and the brokers taken from
//! `FJORD_BROKERS`.
#[macro_use]
mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::TestBroker;

/// Runs `fjord topic ARGS` (with `-b` unless `env_brokers`); returns (exit code, stdout, stderr).
fn fjord(broker: &TestBroker, args: &[&str], env_brokers: bool) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_fjord"));
    command.arg("topic");
    if env_brokers {
        command.env("FJORD_BROKERS", broker.addr.to_string());
    } else {
        command.env_remove("FJORD_BROKERS");
        command.args(["-b", &broker.addr.to_string()]);
    }
    let out = command.args(args).output().expect("run fjord topic");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn fjord_ok(broker: &TestBroker, args: &[&str]) -> String {
    let (code, stdout, stderr) = fjord(broker, args, false);
    assert_eq!(
        code, 0,
        "fjord topic {args:?}: stdout {stdout} stderr {stderr}"
    );
    stdout
}

fn fjord_fails(broker: &TestBroker, args: &[&str]) -> String {
    let (code, stdout, stderr) = fjord(broker, args, false);
    assert_eq!(
        code, 1,
        "fjord topic {args:?} must fail: stdout {stdout} stderr {stderr}"
    );
    stderr
}

/// Waits until `fjord topic list` does or does not show `name`.
fn listed_eventually(broker: &TestBroker, name: &str, present: bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = fjord_ok(broker, &["list"]).lines().any(|l| l == name);
        if listed == present {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} listed: {listed}, wanted {present}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn topics_are_created_listed_described_and_deleted() {
    let broker = TestBroker::start();
    let created = fjord_ok(
        &broker,
        &[
            "create",
            "orders",
            "-p",
            "3",
            "-r",
            "1",
            "-c",
            "retention.ms=60000",
        ],
    );
    assert_eq!(created, "Created topic orders.\n");
    // Already there: Kafka's error, and what to do; accepted with --if-not-exists.
    let stderr = fjord_fails(&broker, &["create", "orders", "-p", "3"]);
    assert!(
        stderr.contains("TOPIC_ALREADY_EXISTS") && stderr.contains("--if-not-exists"),
        "{stderr}"
    );
    assert_eq!(
        fjord_ok(&broker, &["create", "orders", "--if-not-exists"]),
        ""
    );
    let stderr = fjord_fails(&broker, &["create", "bad", "-c", "retention.ms=soon"]);
    assert!(stderr.contains("INVALID_CONFIG"), "{stderr}");
    let stderr = fjord_fails(&broker, &["create", "bad", "-c", "retention.ms"]);
    assert!(stderr.contains("KEY=VALUE"), "{stderr}");

    listed_eventually(&broker, "orders", true);
    // The brokers from the environment, as with -b.
    let (code, stdout, _) = fjord(&broker, &["list"], true);
    assert_eq!(code, 0);
    assert!(stdout.lines().any(|l| l == "orders"), "{stdout}");

    let described = fjord_ok(&broker, &["describe", "orders"]);
    let lines: Vec<&str> = described.lines().collect();
    assert_eq!(lines.len(), 4, "{described}");
    assert!(
        lines[0].starts_with("Topic: orders\tTopicId: "),
        "{described}"
    );
    assert!(
        lines[0]
            .ends_with("\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: retention.ms=60000"),
        "{described}"
    );
    for (i, line) in lines[1..].iter().enumerate() {
        assert_eq!(
            *line,
            format!("\tTopic: orders\tPartition: {i}\tLeader: 1\tReplicas: 1\tIsr: 1")
        );
    }
    assert_eq!(
        fjord_ok(&broker, &["add-partitions", "orders", "-p", "4"]),
        "Topic orders has 4 partitions.\n"
    );
    let grown = fjord_ok(&broker, &["describe", "orders"]);
    assert!(grown.contains("\tPartitionCount: 4\t"), "{grown}");
    let stderr = fjord_fails(&broker, &["add-partitions", "orders", "-p", "2"]);
    assert!(stderr.contains("INVALID_PARTITIONS"), "{stderr}");
    let stderr = fjord_fails(&broker, &["describe", "missing"]);
    assert!(stderr.contains("does not exist"), "{stderr}");

    assert_eq!(
        fjord_ok(&broker, &["delete", "orders"]),
        "Deleted topic orders.\n"
    );
    listed_eventually(&broker, "orders", false);
    let stderr = fjord_fails(&broker, &["delete", "orders"]);
    assert!(stderr.contains("UNKNOWN_TOPIC_OR_PARTITION"), "{stderr}");
    assert_eq!(fjord_ok(&broker, &["delete", "orders", "--if-exists"]), "");
}

#[test]
fn cluster_info_and_health_of_one_node() {
    let broker = TestBroker::start();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_fjord"))
            .arg("cluster")
            .args(["-b", &broker.addr.to_string()])
            .args(args)
            .output()
            .expect("run fjord cluster");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, info) = run(&["info"]);
    assert_eq!(code, Some(0), "{info}");
    let lines: Vec<&str> = info.lines().collect();
    assert!(lines[0].starts_with("Cluster: ") && lines[0].len() > "Cluster: ".len());
    assert_eq!(
        lines[1..],
        [
            "Controller: 1".to_string(),
            format!("Broker: 1\t{}", broker.addr)
        ]
    );
    fjord_ok(&broker, &["create", "healthy", "-p", "2"]);
    let (code, health) = run(&["health"]);
    assert_eq!(code, Some(0), "{health}");
    assert!(
        health.starts_with("Healthy: true\nBrokers: 1\n"),
        "{health}"
    );
    assert!(
        health.contains("Leaderless partitions: 0\nUnder-replicated partitions: 0"),
        "{health}"
    );
}

#[test]
fn configs_are_read_set_and_deleted() {
    let broker = TestBroker::start();
    fjord_ok(&broker, &["create", "settings", "-p", "1"]);
    let config = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_fjord"))
            .arg("config")
            .args(["-b", &broker.addr.to_string()])
            .args(args)
            .output()
            .expect("run fjord config");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), stdout, stderr)
    };
    let get = |key: &str| config(&["get", "topic", "settings", key]).1;
    assert_eq!(
        get("retention.ms"),
        "retention.ms=604800000\tDEFAULT_CONFIG\n"
    );
    let (code, stdout, _) = config(&["set", "topic", "settings", "retention.ms=1000"]);
    assert_eq!(
        (code, stdout.as_str()),
        (Some(0), "Completed updating config for settings.\n")
    );
    assert_eq!(
        get("retention.ms"),
        "retention.ms=1000\tDYNAMIC_TOPIC_CONFIG\n"
    );
    let (code, _, stderr) = config(&["set", "topic", "settings", "retention.ms=soon"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("INVALID_CONFIG") || stderr.contains("INVALID_REQUEST"),
        "{stderr}"
    );
    let (code, _, _) = config(&["delete", "topic", "settings", "retention.ms"]);
    assert_eq!(code, Some(0));
    assert_eq!(
        get("retention.ms"),
        "retention.ms=604800000\tDEFAULT_CONFIG\n"
    );
    // A broker's own configs, asked of that broker.
    let (code, stdout, _) = config(&["get", "broker", "1", "num.partitions"]);
    assert_eq!(
        (code, stdout.as_str()),
        (Some(0), "num.partitions=1\tDEFAULT_CONFIG\n")
    );
    let (code, _, stderr) = config(&["get", "broker", "one"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("not a broker id"), "{stderr}");
}
