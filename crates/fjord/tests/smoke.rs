//! The broker starts, answers ApiVersions, and stops cleanly on SIGTERM.
mod common;

use common::TestBroker;
use fjord_protocol::messages::ApiVersionsRequest;
use fjord_protocol::{RequestBody, ResponseBody};

#[test]
fn api_versions_and_clean_shutdown() {
    let mut broker = TestBroker::start();
    let mut client = broker.connect();
    let ResponseBody::ApiVersions(response) =
        client.request(3, RequestBody::ApiVersions(ApiVersionsRequest::default()))
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
