//! The broker starts, answers ApiVersions, and stops cleanly on SIGTERM.
mod common;

use common::TestBroker;
use fjord_protocol::{RequestBody, ResponseBody};

#[test]
fn api_versions_and_clean_shutdown() {
    let mut broker = TestBroker::start();
    let mut client = broker.connect();
    let ResponseBody::ApiVersions(response) =
        client.request(3, RequestBody::ApiVersions(common::api_versions_request()))
    else {
        panic!("wrong response type")
    };
    assert_eq!(response.error_code, 0);
    assert!(response
        .api_keys
        .iter()
        .any(|k| k.api_key == 0 && k.min_version == 3));
    broker.stop();
    assert!(
        broker.log_dir().join(".kafka_cleanshutdown").exists(),
        "clean shutdown marker; log:\n{}",
        broker.log()
    );
}

fn run_server(args: &[String]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_fjord"))
        .arg("server")
        .args(args)
        .output()
        .expect("run fjord")
}

#[test]
fn invalid_config_fails_fast_naming_key_and_value() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("never-created");
    let output = run_server(&[
        "--override".into(),
        format!("log.dirs={}", data.display()),
        "--override".into(),
        "num.partitions=zero".into(),
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("num.partitions") && stderr.contains("zero"),
        "{stderr}"
    );
    assert!(
        !data.exists(),
        "no data directory may be touched before the config is valid"
    );

    let config = dir.path().join("server.properties");
    std::fs::write(&config, "listeners=PLAINTEXT://127.0.0.1:notaport\n").unwrap();
    let output = run_server(&[config.display().to_string()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("listeners") && stderr.contains("notaport"),
        "{stderr}"
    );
}

#[test]
fn a_node_refuses_another_nodes_data() {
    let mut broker = TestBroker::start();
    broker.stop();
    let output = run_server(&[
        "--override".into(),
        format!("log.dirs={}", broker.log_dir().display()),
        "--override".into(),
        "node.id=7".into(),
        "--override".into(),
        "listeners=PLAINTEXT://127.0.0.1:0".into(),
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("node 1") && stderr.contains("node 7"),
        "{stderr}"
    );
}

/// The "logs loaded" line of the broker's latest start.
fn last_load_line(log: &str) -> String {
    log.lines()
        .rev()
        .find(|l| l.contains("logs loaded"))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn clean_shutdown_skips_recovery_and_kill9_does_not() {
    let mut broker = TestBroker::start();
    broker.restart();
    let line = last_load_line(&broker.log());
    assert!(line.contains("clean_shutdown_dirs=1"), "{line}");
    broker.kill9();
    broker.restart();
    let line = last_load_line(&broker.log());
    assert!(line.contains("clean_shutdown_dirs=0"), "{line}");
    broker.stop();
}
