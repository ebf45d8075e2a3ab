//! The controller's shell on a real (one-voter) metadata quorum.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fjord_common::{errors, Uuid};
use fjord_config::BrokerConfig;
use fjord_controller::{Controller, ControllerApi, ControllerRequest};
use fjord_protocol::messages::broker_heartbeat_request::BrokerHeartbeatRequest;
use fjord_protocol::messages::broker_registration_request::BrokerRegistrationRequest;
use fjord_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use fjord_protocol::ResponseBody;
use fjord_quorum::{MetadataQuorum, QuorumController};

async fn start(
    dir: &std::path::Path,
    settings: &[(&str, &str)],
) -> (Arc<MetadataQuorum>, Arc<QuorumController>) {
    let quorum = Arc::new(MetadataQuorum::start(dir, 1, "cluster").await.unwrap());
    let props: BTreeMap<String, String> = settings
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let (config, _) = BrokerConfig::from_properties(&props).unwrap();
    let (controller, _task) = QuorumController::start(
        Controller::new(Arc::new(config), "cluster".into()),
        quorum.clone(),
        Duration::from_secs(10),
    );
    let registration = BrokerRegistrationRequest {
        broker_id: 1,
        cluster_id: "cluster".into(),
        incarnation_id: Uuid([1; 16]),
        previous_broker_epoch: -1,
        ..Default::default()
    };
    let ResponseBody::BrokerRegistration(registered) = controller
        .call(request(ControllerApi::BrokerRegistration(registration)))
        .await
        .unwrap()
    else {
        panic!("not a BrokerRegistration answer")
    };
    // Registered fenced; the first heartbeat from a broker that has caught up unfences it.
    assert!(quorum.image().broker(1).unwrap().fenced);
    let response = heartbeat(&controller, &quorum, registered.broker_epoch, false).await;
    assert!(!response.is_fenced && response.is_caught_up);
    assert!(quorum.image().broker(1).unwrap().is_active());
    (quorum, Arc::new(controller))
}

fn request(api: ControllerApi) -> ControllerRequest {
    ControllerRequest::new(0, api, 1)
}

async fn heartbeat(
    controller: &QuorumController,
    quorum: &MetadataQuorum,
    broker_epoch: i64,
    want_shut_down: bool,
) -> fjord_protocol::messages::broker_heartbeat_response::BrokerHeartbeatResponse {
    let api = ControllerApi::BrokerHeartbeat(BrokerHeartbeatRequest {
        broker_id: 1,
        broker_epoch,
        current_metadata_offset: quorum.image().offset() as i64,
        want_shut_down,
        ..Default::default()
    });
    match controller.call(request(api)).await.unwrap() {
        ResponseBody::BrokerHeartbeat(r) => {
            assert_eq!(r.error_code, errors::NONE);
            r
        }
        other => panic!("not a BrokerHeartbeat answer: {other:?}"),
    }
}

fn create(name: &str) -> ControllerRequest {
    ControllerRequest::new(
        7,
        ControllerApi::CreateTopics(CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: name.into(),
                num_partitions: 3,
                replication_factor: 1,
                ..Default::default()
            }],
            timeout_ms: 10_000,
            validate_only: false,
        }),
        1,
    )
}

fn error_code(response: ResponseBody) -> i16 {
    match response {
        ResponseBody::CreateTopics(r) => r.topics[0].error_code,
        other => panic!("not a CreateTopics answer: {other:?}"),
    }
}

/// Decisions are made one at a time, each on the image its predecessor committed: of many
/// concurrent creations of one topic exactly one succeeds, and every answer comes after commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_decisions_are_serialized_and_committed_before_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (quorum, controller) = start(dir.path(), &[]).await;
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let controller = controller.clone();
            let quorum = quorum.clone();
            tokio::spawn(async move {
                let code = error_code(controller.call(create("t")).await.unwrap());
                // Answered only once committed and applied.
                assert!(quorum.image().topic("t").is_some());
                code
            })
        })
        .collect();
    let mut codes = Vec::new();
    for call in calls {
        codes.push(call.await.unwrap());
    }
    assert_eq!(codes.iter().filter(|&&c| c == errors::NONE).count(), 1);
    assert_eq!(
        codes
            .iter()
            .filter(|&&c| c == errors::TOPIC_ALREADY_EXISTS)
            .count(),
        15
    );
    assert_eq!(quorum.image().topic("t").unwrap().partitions.len(), 3);
}

/// A broker that stops heartbeating is fenced once its session times out, and the partitions it
/// led go offline (no other replica); heartbeating again unfences it and it leads them again,
/// each change under a new leader epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_broker_is_fenced_after_its_session_and_leads_again_when_back() {
    let dir = tempfile::tempdir().unwrap();
    let (quorum, controller) = start(dir.path(), &[("broker.session.timeout.ms", "300")]).await;
    assert_eq!(
        error_code(controller.call(create("t")).await.unwrap()),
        errors::NONE
    );
    let epoch = quorum.image().broker(1).unwrap().broker_epoch;
    let leaders = |quorum: &MetadataQuorum| -> Vec<(i32, i32)> {
        quorum
            .image()
            .topic("t")
            .unwrap()
            .partitions
            .iter()
            .map(|p| (p.leader, p.leader_epoch))
            .collect()
    };
    assert_eq!(leaders(&quorum), vec![(1, 0); 3]);

    // Heartbeats keep the session; silence ends it.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        heartbeat(&controller, &quorum, epoch, false).await;
        assert!(
            !quorum.image().broker(1).unwrap().fenced,
            "fenced while heartbeating"
        );
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !quorum.image().broker(1).unwrap().fenced {
        assert!(tokio::time::Instant::now() < deadline, "never fenced");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        leaders(&quorum),
        vec![(-1, 1); 3],
        "offline, a new leader epoch"
    );
    let isr = quorum.image().topic("t").unwrap().partitions[0].isr.clone();
    assert_eq!(isr, vec![1], "the last in-sync replica stays in the ISR");

    let back = heartbeat(&controller, &quorum, epoch, false).await;
    assert!(!back.is_fenced);
    assert_eq!(leaders(&quorum), vec![(1, 2); 3]);

    // Controlled shutdown: leadership moves first (offline here: no other replica), then the
    // broker is told to go and is fenced.
    let first = heartbeat(&controller, &quorum, epoch, true).await;
    assert!(!first.should_shut_down, "still led partitions");
    assert_eq!(leaders(&quorum), vec![(-1, 3); 3]);
    assert!(quorum.image().broker(1).unwrap().in_controlled_shutdown);
    let second = heartbeat(&controller, &quorum, epoch, true).await;
    assert!(second.should_shut_down && second.is_fenced);
    assert!(quorum.image().broker(1).unwrap().fenced);
}

/// A heartbeat of an earlier incarnation, or of a broker never registered, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_from_stale_or_unknown_brokers_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (quorum, controller) = start(dir.path(), &[]).await;
    let epoch = quorum.image().broker(1).unwrap().broker_epoch;
    for (broker_id, broker_epoch, expected) in [
        (1, epoch - 1, errors::STALE_BROKER_EPOCH),
        (7, 0, errors::BROKER_ID_NOT_REGISTERED),
    ] {
        let api = ControllerApi::BrokerHeartbeat(BrokerHeartbeatRequest {
            broker_id,
            broker_epoch,
            ..Default::default()
        });
        let ResponseBody::BrokerHeartbeat(r) = controller.call(request(api)).await.unwrap() else {
            panic!("not a BrokerHeartbeat answer")
        };
        assert_eq!(r.error_code, expected);
    }
}

/// A request whose own timeout has passed is refused, not decided: the client gave up on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_its_timeout_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (quorum, controller) = start(dir.path(), &[]).await;
    let mut late = create("late");
    late.deadline = Some(std::time::Instant::now() - Duration::from_millis(1));
    assert_eq!(
        error_code(
            controller
                .call(late)
                .await
                .unwrap_err()
                .response_to(&create("late"))
        ),
        errors::REQUEST_TIMED_OUT
    );
    assert!(quorum.image().topic("late").is_none());
}
