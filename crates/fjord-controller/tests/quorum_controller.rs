//! The controller's shell on a real (one-voter) metadata quorum.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fjord_common::{errors, Uuid};
use fjord_config::BrokerConfig;
use fjord_controller::{Controller, ControllerApi, ControllerRequest, QuorumController};
use fjord_metadata::MetadataQuorum;
use fjord_protocol::messages::broker_registration_request::BrokerRegistrationRequest;
use fjord_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use fjord_protocol::ResponseBody;

async fn start(dir: &std::path::Path) -> (Arc<MetadataQuorum>, Arc<QuorumController>) {
    let quorum = Arc::new(MetadataQuorum::start(dir, 1, "cluster").await.unwrap());
    let (config, _) = BrokerConfig::from_properties(&BTreeMap::new()).unwrap();
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
    controller
        .call(ControllerRequest {
            version: 0,
            api: ControllerApi::BrokerRegistration(registration),
            requester: 1,
        })
        .await
        .unwrap();
    (quorum, Arc::new(controller))
}

fn create(name: &str) -> ControllerRequest {
    ControllerRequest {
        version: 7,
        api: ControllerApi::CreateTopics(CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: name.into(),
                num_partitions: 3,
                replication_factor: 1,
                ..Default::default()
            }],
            timeout_ms: 1000,
            validate_only: false,
        }),
        requester: 1,
    }
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
    let (quorum, controller) = start(dir.path()).await;
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
