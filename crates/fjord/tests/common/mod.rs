//! Shared harness for tests that run the real `fjord` binary on loopback.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use fjord_protocol::messages::RequestHeader;
use fjord_protocol::{
    request_header_version, response_header_version, ApiKey, Decodable, Decoder, Encodable,
    RequestBody, ResponseBody, ResponseHeader,
};

/// Unwraps the expected response variant (`ResponseBody` must be in scope).
#[allow(unused_macros)]
macro_rules! expect {
    ($body:expr, $variant:ident) => {
        match $body {
            ResponseBody::$variant(r) => r,
            other => panic!(
                "expected {} response, got {:?}",
                stringify!($variant),
                other.api_key()
            ),
        }
    };
}

/// A broker process with its own data dir on a free loopback port. Killed on drop.
pub struct TestBroker {
    pub child: Option<Child>,
    pub addr: SocketAddr,
    pub data: tempfile::TempDir,
    pub extra: Vec<(String, String)>,
    /// A command the broker runs under (e.g. `nsenter` into a mount namespace); empty: none.
    pub wrapper: Vec<String>,
}

/// An ApiVersions request as a client sends it: named, since from v3 the broker refuses a
/// client software name or version outside Kafka's pattern (an empty one too).
pub fn api_versions_request() -> fjord_protocol::messages::api_versions_request::ApiVersionsRequest
{
    fjord_protocol::messages::api_versions_request::ApiVersionsRequest {
        client_software_name: "fjord-test".into(),
        client_software_version: "1".into(),
        ..Default::default()
    }
}

pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

impl TestBroker {
    pub fn start() -> TestBroker {
        Self::start_with(&[])
    }

    /// Starts with extra `--override KEY=VALUE` settings.
    pub fn start_with(extra: &[(&str, &str)]) -> TestBroker {
        Self::start_at(SocketAddr::from(([127, 0, 0, 1], free_port())), extra)
    }

    /// Starts listening on `addr` (and on any further listeners `extra` sets).
    pub fn start_at(addr: SocketAddr, extra: &[(&str, &str)]) -> TestBroker {
        Self::launch(addr, extra, &[])
    }

    /// Like `start_with`, under `wrapper` (the broker's command line follows it).
    pub fn start_wrapped(wrapper: &[String], extra: &[(&str, &str)]) -> TestBroker {
        Self::launch(
            SocketAddr::from(([127, 0, 0, 1], free_port())),
            extra,
            wrapper,
        )
    }

    fn launch(addr: SocketAddr, extra: &[(&str, &str)], wrapper: &[String]) -> TestBroker {
        let data = tempfile::tempdir().expect("tempdir");
        let mut broker = TestBroker {
            child: None,
            addr,
            data,
            extra: extra
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            wrapper: wrapper.to_vec(),
        };
        broker.spawn();
        broker
    }

    pub fn log_dir(&self) -> PathBuf {
        self.data.path().join("logs")
    }

    fn spawn(&mut self) {
        let mut cmd = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(env!("CARGO_BIN_EXE_fjord"));
                cmd
            }
            None => Command::new(env!("CARGO_BIN_EXE_fjord")),
        };
        cmd.arg("server")
            .arg("--override")
            .arg(format!("listeners=PLAINTEXT://{}", self.addr))
            .arg("--override")
            .arg(format!("log.dirs={}", self.log_dir().display()))
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.data.path().join("broker.log"))
                    .expect("log file"),
            ));
        for (k, v) in &self.extra {
            cmd.arg("--override").arg(format!("{k}={v}"));
        }
        // Listeners accept before the broker serves (their first requests wait for it); the log
        // says when it has started.
        let starts = |log: &str| log.matches(" started elapsed_ms").count();
        let before = starts(&self.log());
        self.child = Some(cmd.spawn().expect("spawn fjord"));
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if starts(&self.log()) > before && TcpStream::connect(self.addr).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("broker did not start; log:\n{}", self.log());
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.data.path().join("broker.log")).unwrap_or_default()
    }

    /// SIGTERM and wait: a clean shutdown.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            unsafe_sigterm(child.id());
            let _ = child.wait();
        }
    }

    /// SIGKILL: a crash.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// True while the process is running.
    pub fn alive(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => c.try_wait().ok().flatten().is_none(),
            None => false,
        }
    }

    pub fn connect(&self) -> Client {
        Client::connect(self.addr)
    }

    pub fn data_path(&self) -> &Path {
        self.data.path()
    }
}

fn unsafe_sigterm(pid: u32) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A blocking client speaking raw Kafka frames.
pub struct Client {
    pub stream: TcpStream,
    correlation_id: i32,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        Client {
            stream,
            correlation_id: 0,
        }
    }

    /// Sends `frame` (without the size prefix) as is.
    pub fn send_raw(&mut self, frame: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(&(frame.len() as i32).to_be_bytes())?;
        self.stream.write_all(frame)
    }

    /// Reads one response frame body (after the size prefix); Err when the broker closed.
    pub fn read_frame(&mut self) -> std::io::Result<Bytes> {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size)?;
        let size = i32::from_be_bytes(size);
        assert!(
            (0..=256 * 1024 * 1024).contains(&size),
            "response size {size}"
        );
        let mut body = vec![0u8; size as usize];
        self.stream.read_exact(&mut body)?;
        Ok(Bytes::from(body))
    }

    /// True if the broker closed the connection (EOF or reset) within the read timeout.
    pub fn is_closed(&mut self) -> bool {
        let mut buf = [0u8; 1];
        matches!(self.stream.read(&mut buf), Ok(0) | Err(_))
    }

    pub fn encode_request(&mut self, api: ApiKey, version: i16, body: &RequestBody) -> BytesMut {
        self.correlation_id += 1;
        let header = RequestHeader {
            request_api_key: api as i16,
            request_api_version: version,
            correlation_id: self.correlation_id,
            client_id: Some("fjord-test".to_string()),
        };
        let mut out = BytesMut::new();
        header
            .encode(&mut out, request_header_version(api, version))
            .expect("encode header");
        body.encode(&mut out, version).expect("encode body");
        out
    }

    /// Sends a request and decodes its response.
    pub fn request(&mut self, version: i16, body: RequestBody) -> ResponseBody {
        let api = body.api_key();
        let frame = self.encode_request(api, version, &body);
        self.send_raw(&frame).expect("send");
        let response = self.read_frame().expect("response");
        let mut decoder = Decoder::new(response);
        let header = ResponseHeader::decode(&mut decoder, response_header_version(api, version))
            .expect("response header");
        assert_eq!(header.correlation_id, self.correlation_id, "correlation id");
        ResponseBody::decode(api, &mut decoder, version).expect("response body")
    }
}

/// A CreateTopics entry with replication factor 1 and `configs`.
pub fn creatable_topic(
    name: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> fjord_protocol::messages::create_topics_request::CreatableTopic {
    use fjord_protocol::messages::create_topics_request::*;
    CreatableTopic {
        name: name.to_string(),
        num_partitions: partitions,
        replication_factor: 1,
        assignments: Vec::new(),
        configs: configs
            .iter()
            .map(|(k, v)| CreatableTopicConfig {
                name: k.to_string(),
                value: Some(v.to_string()),
            })
            .collect(),
    }
}

/// Creates one topic (CreateTopics v5) and asserts it was created.
pub fn create_topic(client: &mut Client, name: &str, partitions: i32, configs: &[(&str, &str)]) {
    use fjord_protocol::messages::create_topics_request::*;
    let response = client.request(
        5,
        RequestBody::CreateTopics(CreateTopicsRequest {
            topics: vec![creatable_topic(name, partitions, configs)],
            timeout_ms: 10_000,
            validate_only: false,
        }),
    );
    let ResponseBody::CreateTopics(response) = response else {
        panic!("expected a CreateTopics response");
    };
    assert_eq!(response.topics[0].error_code, 0, "{response:?}");
}

/// One record as a fetch returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedRecord {
    pub offset: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
}

/// One Fetch (v12, no session) of partition 0 of `topic` from `offset`: the partition's error
/// code, its high watermark and every record returned.
pub fn fetch_once(client: &mut Client, topic: &str, offset: i64) -> (i16, i64, Vec<FetchedRecord>) {
    use fjord_protocol::messages::fetch_request::*;
    let response = client.request(
        12,
        RequestBody::Fetch(FetchRequest {
            max_wait_ms: 0,
            min_bytes: 0,
            max_bytes: 64 << 20,
            topics: vec![FetchTopic {
                topic: topic.to_string(),
                partitions: vec![FetchPartition {
                    partition: 0,
                    fetch_offset: offset,
                    partition_max_bytes: 64 << 20,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }),
    );
    let ResponseBody::Fetch(response) = response else {
        panic!("expected a Fetch response");
    };
    let data = &response.responses[0].partitions[0];
    let mut out = Vec::new();
    if let Some(records) = &data.records {
        for batch in fjord_records::split_batches(records).expect("whole batches") {
            let header = fjord_records::BatchHeader::parse(&batch).expect("header");
            for record in fjord_records::records(&batch, 1 << 24).expect("records") {
                let record = record.expect("record");
                out.push(FetchedRecord {
                    offset: header.base_offset + i64::from(record.offset_delta),
                    key: record.key,
                    value: record.value,
                });
            }
        }
    }
    (data.error_code, data.high_watermark, out)
}

/// Produces one batch (Produce v9, acks=all) to partition 0 of `topic`: the partition's error
/// code and base offset.
pub fn produce_batch(client: &mut Client, topic: &str, records: Bytes) -> (i16, i64) {
    use fjord_protocol::messages::produce_request::*;
    let response = client.request(
        9,
        RequestBody::Produce(ProduceRequest {
            transactional_id: None,
            acks: -1,
            timeout_ms: 10_000,
            topic_data: vec![TopicProduceData {
                name: topic.to_string(),
                partition_data: vec![PartitionProduceData {
                    index: 0,
                    records: Some(records),
                }],
                ..Default::default()
            }],
        }),
    );
    let ResponseBody::Produce(response) = response else {
        panic!("expected a Produce response");
    };
    let p = &response.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}
