//! Listeners and their security protocols, against the real binary: a listener configured as
//! secure never serves plaintext (what fjord cannot serve, or a keystore it cannot read, stops
//! the broker before it touches any data), and
//! each connection is answered with the advertised address of the listener it came in on.
mod common;

use std::net::SocketAddr;
use std::process::Command;

use common::{free_port, Client, TestBroker};
use fjord_protocol::messages::describe_cluster_request::DescribeClusterRequest;
use fjord_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use fjord_protocol::messages::metadata_request::MetadataRequest;
use fjord_protocol::{RequestBody, ResponseBody};

/// Runs `fjord server` with these overrides, expecting it to refuse to start; returns stderr.
fn refused(data: &std::path::Path, overrides: &[(&str, String)]) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fjord"));
    cmd.arg("server")
        .arg("--override")
        .arg(format!("log.dirs={}", data.join("logs").display()));
    for (key, value) in overrides {
        cmd.arg("--override").arg(format!("{key}={value}"));
    }
    let output = cmd.output().expect("run fjord");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "fjord started with {overrides:?}");
    assert!(
        !data.join("logs").exists(),
        "the refused broker touched its log dir"
    );
    stderr
}

#[test]
fn secure_listeners_stop_the_broker_before_it_touches_data() {
    let data = tempfile::tempdir().expect("tempdir");
    // A secured listener alone, without its key material or mechanisms: refused at start,
    // each naming what is missing.
    for (protocol, missing) in [
        ("SSL", "SSL listener SSL has no keystore"),
        ("SASL_SSL", "SSL listener SASL_SSL has no keystore"),
        ("SASL_PLAINTEXT", "GSSAPI"),
    ] {
        let port = free_port();
        let stderr = refused(
            data.path(),
            &[("listeners", format!("{protocol}://127.0.0.1:{port}"))],
        );
        assert!(stderr.contains(missing), "{protocol}: {stderr}");
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "{protocol}: something listens"
        );
    }
    // A listener name mapped to SSL beside a plaintext one: without a keystore, or with one
    // that cannot be read, nothing is served and no data is touched.
    let listeners = (
        "listeners",
        format!(
            "PLAINTEXT://127.0.0.1:{},CLIENT://127.0.0.1:{}",
            free_port(),
            free_port()
        ),
    );
    let map = (
        "listener.security.protocol.map",
        "PLAINTEXT:PLAINTEXT,CLIENT:SSL".to_string(),
    );
    let stderr = refused(data.path(), &[listeners.clone(), map.clone()]);
    assert!(
        stderr.contains("SSL listener CLIENT has no keystore"),
        "{stderr}"
    );
    let missing = data.path().join("missing.pem");
    let stderr = refused(
        data.path(),
        &[
            listeners,
            map,
            ("ssl.keystore.type", "PEM".to_string()),
            ("ssl.keystore.location", missing.display().to_string()),
        ],
    );
    assert!(
        stderr.contains("cannot set up TLS on listener CLIENT") && stderr.contains("missing.pem"),
        "{stderr}"
    );
    // A name the explicit map does not know.
    let stderr = refused(
        data.path(),
        &[
            ("listeners", format!("CLIENT://127.0.0.1:{}", free_port())),
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT".to_string(),
            ),
        ],
    );
    assert!(
        stderr.contains("no security protocol defined for listener CLIENT"),
        "{stderr}"
    );
}

fn endpoint_seen(addr: SocketAddr) -> Vec<(String, i32)> {
    let mut client = Client::connect(addr);
    let metadata = match client.request(12, RequestBody::Metadata(MetadataRequest::default())) {
        ResponseBody::Metadata(m) => m,
        other => panic!("{:?}", other.api_key()),
    };
    let cluster = match client.request(
        1,
        RequestBody::DescribeCluster(DescribeClusterRequest {
            endpoint_type: 1,
            ..Default::default()
        }),
    ) {
        ResponseBody::DescribeCluster(c) => c,
        other => panic!("{:?}", other.api_key()),
    };
    let coordinator = match client.request(
        3,
        RequestBody::FindCoordinator(FindCoordinatorRequest {
            key: "listeners-group".to_string(),
            key_type: 0,
            coordinator_keys: Vec::new(),
        }),
    ) {
        ResponseBody::FindCoordinator(c) => c,
        other => panic!("{:?}", other.api_key()),
    };
    assert_eq!(metadata.brokers.len(), 1);
    assert_eq!(cluster.brokers.len(), 1);
    vec![
        (metadata.brokers[0].host.clone(), metadata.brokers[0].port),
        (cluster.brokers[0].host.clone(), cluster.brokers[0].port),
        (coordinator.host.clone(), coordinator.port),
    ]
}

#[test]
fn each_connection_is_told_its_own_listener() {
    let external_port = free_port();
    let internal = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let listeners = format!("PLAINTEXT://{internal},EXTERNAL://127.0.0.2:{external_port}");
    let advertised = format!("PLAINTEXT://{internal},EXTERNAL://localhost:{external_port}");
    let _broker = TestBroker::start_at(
        internal,
        &[
            ("listeners", listeners.as_str()),
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
            ),
            ("advertised.listeners", advertised.as_str()),
        ],
    );
    let internal_port = i32::from(internal.port());
    for seen in endpoint_seen(internal) {
        assert_eq!(seen, ("127.0.0.1".to_string(), internal_port));
    }
    let external: SocketAddr = format!("127.0.0.2:{external_port}").parse().expect("addr");
    for seen in endpoint_seen(external) {
        assert_eq!(seen, ("localhost".to_string(), i32::from(external_port)));
    }
}

#[test]
fn keys_fjord_does_not_act_upon_are_named_at_start() {
    let broker = TestBroker::start_with(&[
        ("num.io.threads", "4"),
        ("log.preallocate", "true"),
        // Acted upon since the log cleaner: not warned about.
        ("log.cleaner.min.compaction.lag.ms", "1000"),
    ]);
    // The warnings come before the listener binds, which start_with waited for.
    let log = broker.log();
    assert!(!log.contains("log.cleaner.min.compaction.lag.ms"), "{log}");
    for key in ["num.io.threads", "log.preallocate"] {
        assert!(
            log.lines()
                .any(|l| l.contains("not acted upon") && l.contains(key)),
            "{key}:\n{log}"
        );
    }
    assert!(!log.contains("key=log.dirs"), "{log}");
}

/// With the authorizer on, the controller listener judges its requests as the broker listeners
/// do: its anonymous PLAINTEXT clients need CLUSTER_ACTION or DESCRIBE on the cluster, as in
/// Kafka, where the brokers' own principal on that link is made a super user.
#[test]
fn the_controller_listener_authorizes_its_requests_too() {
    use fjord_protocol::messages::describe_quorum_request::{
        DescribeQuorumRequest, PartitionData, TopicData,
    };
    let describe_quorum = || {
        RequestBody::DescribeQuorum(DescribeQuorumRequest {
            topics: vec![TopicData {
                topic_name: "__cluster_metadata".into(),
                partitions: vec![PartitionData { partition_index: 0 }],
            }],
        })
    };
    for (super_users, expected) in [("User:admin", 31), ("User:admin;User:ANONYMOUS", 0)] {
        let (port, controller_port) = (free_port(), free_port());
        let broker = TestBroker::start_at(
            SocketAddr::from(([127, 0, 0, 1], port)),
            &[
                (
                    "listeners",
                    &format!(
                        "PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}"
                    ),
                ),
                ("controller.listener.names", "CONTROLLER"),
                (
                    "controller.quorum.voters",
                    &format!("1@127.0.0.1:{controller_port}"),
                ),
                (
                    "authorizer.class.name",
                    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                ),
                ("super.users", super_users),
            ],
        );
        let mut controller = Client::connect(SocketAddr::from(([127, 0, 0, 1], controller_port)));
        let ResponseBody::DescribeQuorum(r) = controller.request(2, describe_quorum()) else {
            panic!("not a DescribeQuorum answer")
        };
        assert_eq!(r.error_code, expected, "super.users={super_users}");
        // The broker listener judges the same principal alike.
        let mut client = broker.connect();
        let every_acl = fjord_protocol::messages::describe_acls_request::DescribeAclsRequest {
            resource_type_filter: 1,
            resource_name_filter: None,
            pattern_type_filter: 1,
            principal_filter: None,
            host_filter: None,
            operation: 1,
            permission_type: 1,
        };
        let ResponseBody::DescribeAcls(r) = client.request(3, RequestBody::DescribeAcls(every_acl))
        else {
            panic!("not a DescribeAcls answer")
        };
        assert_eq!(r.error_code, expected, "super.users={super_users}");
    }
}
