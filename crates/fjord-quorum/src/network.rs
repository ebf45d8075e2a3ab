//! The metadata quorum's raft network: openraft's RPCs between nodes over TCP, framed as Kafka
//! requests under a private API key ([`RAFT_API_KEY`]) so that they share the controller
//! listener with Kafka's own controller APIs (and reach a learner on its inter-broker listener).
//!
//! A request frame is Kafka's: size, request header v1 (API key, version 0, correlation id,
//! client id), then the RPC as JSON. The answer is size, correlation id, then the reply as JSON.
//! One connection per peer carries one RPC at a time; any failure drops the connection and
//! reports the peer unreachable, and openraft retries with backoff. A connection is secured (TLS,
//! a SASL login) as the listener it goes to asks, before its first RPC.

use std::time::Duration;

use fjord_client::{ClientConfig, Connection, Stream};
use fjord_metadata::QuorumNode;
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::follower_times::FollowerTimes;
use crate::quorum::QuorumLinks;
use crate::types::TypeConfig;

/// The API key raft RPCs travel under: outside the range Kafka assigns, so no Kafka client or
/// tool ever sends it by accident.
pub const RAFT_API_KEY: i16 = 10_000;

/// Largest raft frame accepted in either direction. Entries are small; snapshots of the image
/// travel whole in one InstallSnapshot chunk of at most openraft's `snapshot_max_chunk_size`.
pub const MAX_RAFT_FRAME: usize = 64 * 1024 * 1024;

/// How long to wait for a connection to a peer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// One RPC, as sent.
#[derive(Serialize, Deserialize)]
pub(crate) enum RaftRequest {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<u64>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
}

/// One RPC's answer, as the receiving node's raft gave it.
#[derive(Serialize, Deserialize)]
pub(crate) enum RaftReply {
    AppendEntries(Result<AppendEntriesResponse<u64>, RaftError<u64>>),
    Vote(Result<VoteResponse<u64>, RaftError<u64>>),
    InstallSnapshot(Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>>),
    /// The frame could not be read as an RPC.
    Malformed(String),
}

/// Encodes a request frame (size prefix included).
fn request_frame(correlation_id: i32, client_id: &str, payload: &[u8]) -> Vec<u8> {
    let client_id = client_id.as_bytes();
    let body_len = 2 + 2 + 4 + 2 + client_id.len() + payload.len();
    let mut frame = Vec::with_capacity(4 + body_len);
    frame.extend_from_slice(&(body_len as i32).to_be_bytes());
    frame.extend_from_slice(&RAFT_API_KEY.to_be_bytes());
    frame.extend_from_slice(&0i16.to_be_bytes());
    frame.extend_from_slice(&correlation_id.to_be_bytes());
    frame.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
    frame.extend_from_slice(client_id);
    frame.extend_from_slice(payload);
    frame
}

/// Splits a request frame's body (after the size prefix) into its correlation id and payload.
pub(crate) fn parse_request(frame: &[u8]) -> Option<(i32, &[u8])> {
    let api_key = i16::from_be_bytes(frame.get(0..2)?.try_into().ok()?);
    if api_key != RAFT_API_KEY {
        return None;
    }
    let correlation_id = i32::from_be_bytes(frame.get(4..8)?.try_into().ok()?);
    let client_id_len = i16::from_be_bytes(frame.get(8..10)?.try_into().ok()?);
    let payload_at = 10 + usize::try_from(client_id_len.max(0)).ok()?;
    Some((correlation_id, frame.get(payload_at..)?))
}

/// Encodes a response frame's body (the network shell adds the size prefix).
pub(crate) fn response_body(correlation_id: i32, payload: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(4 + payload.len());
    body.extend_from_slice(&correlation_id.to_be_bytes());
    body.extend_from_slice(payload);
    body
}

/// Reads a raft request frame's body (after its size prefix): its correlation id and the RPC,
/// or why the RPC is unreadable. None if the frame is not a raft RPC at all.
pub(crate) fn decode_request(frame: &[u8]) -> Option<(i32, Result<RaftRequest, String>)> {
    let (correlation_id, payload) = parse_request(frame)?;
    Some((
        correlation_id,
        serde_json::from_slice(payload).map_err(|e| e.to_string()),
    ))
}

/// Checks a raft request frame as a peer's would be read, without a quorum to answer it: for
/// fuzzing the decoder that network bytes reach.
pub fn check_raft_frame(frame: &[u8]) -> Result<(), String> {
    match decode_request(frame) {
        Some((_, rpc)) => rpc.map(drop),
        None => Err("not a raft frame".into()),
    }
}

/// Whether a request frame's body (after its size prefix) is a raft RPC.
pub fn is_raft_frame(frame: &[u8]) -> bool {
    frame.get(0..2) == Some(&RAFT_API_KEY.to_be_bytes()[..])
}

/// Why an RPC did not get an answer.
#[derive(Debug, thiserror::Error)]
#[error("raft RPC to node {target} at {addr}: {reason}")]
pub(crate) struct RpcFailure {
    target: u64,
    addr: String,
    reason: String,
}

type RpcError<E = openraft::error::Infallible> = RPCError<u64, QuorumNode, RaftError<u64, E>>;

/// Opens a client per peer, addressed by its node's `addr` (`host:port`).
pub(crate) struct TcpNetwork {
    /// This node's id, sent as the client id.
    pub(crate) node_id: u64,
    /// Where answers to AppendEntries are noted, for DescribeQuorum.
    pub(crate) follower_times: FollowerTimes,
    pub(crate) links: QuorumLinks,
}

impl RaftNetworkFactory<TypeConfig> for TcpNetwork {
    type Network = TcpPeer;

    async fn new_client(&mut self, target: u64, node: &QuorumNode) -> Self::Network {
        TcpPeer {
            target,
            addr: node.addr.clone(),
            client_id: format!("fjord-raft-{}", self.node_id),
            security: if node.broker {
                self.links.learners.clone()
            } else {
                self.links.voters.clone()
            },
            stream: None,
            next_correlation_id: 0,
            follower_times: self.follower_times.clone(),
        }
    }
}

/// The connection to one peer.
pub(crate) struct TcpPeer {
    target: u64,
    addr: String,
    client_id: String,
    security: fjord_client::Security,
    stream: Option<Stream>,
    next_correlation_id: i32,
    follower_times: FollowerTimes,
}

impl TcpPeer {
    fn failure(&self, reason: impl std::fmt::Display) -> RpcFailure {
        RpcFailure {
            target: self.target,
            addr: self.addr.clone(),
            reason: reason.to_string(),
        }
    }

    /// Sends `request` and reads the reply within `ttl`; on any failure the connection is dropped.
    async fn call(
        &mut self,
        request: &RaftRequest,
        ttl: Duration,
    ) -> Result<RaftReply, RpcFailure> {
        let payload = serde_json::to_vec(request).map_err(|e| self.failure(e))?;
        match tokio::time::timeout(ttl, self.exchange(&payload)).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => {
                self.stream = None;
                Err(e)
            }
            Err(_) => {
                self.stream = None;
                Err(self.failure(format!("no answer within {ttl:?}")))
            }
        }
    }

    async fn exchange(&mut self, payload: &[u8]) -> Result<RaftReply, RpcFailure> {
        if self.stream.is_none() {
            let config = ClientConfig {
                client_id: self.client_id.clone(),
                connect_timeout: CONNECT_TIMEOUT,
                request_timeout: CONNECT_TIMEOUT,
                security: self.security.clone(),
                ..ClientConfig::default()
            };
            let connection = Connection::open(&self.addr, &config)
                .await
                .map_err(|e| self.failure(e))?;
            self.stream = Some(connection.into_stream());
        }
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let correlation_id = self.next_correlation_id;
        let frame = request_frame(correlation_id, &self.client_id, payload);
        let failure = |reason: String| RpcFailure {
            target: self.target,
            addr: self.addr.clone(),
            reason,
        };
        let Some(stream) = self.stream.as_mut() else {
            return Err(failure("not connected".into()));
        };
        stream
            .write_all(&frame)
            .await
            .map_err(|e| failure(e.to_string()))?;
        let size = stream
            .read_i32()
            .await
            .map_err(|e| failure(e.to_string()))?;
        let size = usize::try_from(size)
            .ok()
            .filter(|s| (4..=MAX_RAFT_FRAME).contains(s))
            .ok_or_else(|| failure(format!("answer of {size} bytes")))?;
        let mut body = vec![0; size];
        stream
            .read_exact(&mut body)
            .await
            .map_err(|e| failure(e.to_string()))?;
        let (id, reply) = body.split_at(4);
        if id != correlation_id.to_be_bytes() {
            return Err(failure("answer to another request".into()));
        }
        serde_json::from_slice(reply).map_err(|e| failure(format!("unreadable answer: {e}")))
    }
}

fn unreachable<E: std::error::Error>(failure: RpcFailure) -> RPCError<u64, QuorumNode, E> {
    RPCError::Unreachable(Unreachable::new(&failure))
}

fn wrong_reply<E: std::error::Error>(failure: RpcFailure) -> RPCError<u64, QuorumNode, E> {
    RPCError::Network(NetworkError::new(&failure))
}

impl RaftNetwork<TypeConfig> for TcpPeer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RpcError> {
        match self
            .call(&RaftRequest::AppendEntries(rpc), option.hard_ttl())
            .await
        {
            Ok(RaftReply::AppendEntries(Ok(r))) => {
                self.follower_times
                    .answered(self.target, fjord_common::now_ms());
                Ok(r)
            }
            Ok(RaftReply::AppendEntries(Err(e))) => Err(RPCError::RemoteError(
                openraft::error::RemoteError::new(self.target, e),
            )),
            Ok(_) => Err(wrong_reply(self.failure("not an AppendEntries answer"))),
            Err(failure) => Err(unreachable(failure)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RpcError<InstallSnapshotError>> {
        match self
            .call(&RaftRequest::InstallSnapshot(rpc), option.hard_ttl())
            .await
        {
            Ok(RaftReply::InstallSnapshot(Ok(r))) => Ok(r),
            Ok(RaftReply::InstallSnapshot(Err(e))) => Err(RPCError::RemoteError(
                openraft::error::RemoteError::new(self.target, e),
            )),
            Ok(_) => Err(wrong_reply(self.failure("not an InstallSnapshot answer"))),
            Err(failure) => Err(unreachable(failure)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RpcError> {
        match self.call(&RaftRequest::Vote(rpc), option.hard_ttl()).await {
            Ok(RaftReply::Vote(Ok(r))) => Ok(r),
            Ok(RaftReply::Vote(Err(e))) => Err(RPCError::RemoteError(
                openraft::error::RemoteError::new(self.target, e),
            )),
            Ok(_) => Err(wrong_reply(self.failure("not a Vote answer"))),
            Err(failure) => Err(unreachable(failure)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_frames_parse_back_and_others_are_not_raft() {
        let frame = request_frame(42, "fjord-raft-1", b"{}");
        let body = &frame[4..];
        assert_eq!(
            i32::from_be_bytes(frame[..4].try_into().unwrap()) as usize,
            body.len()
        );
        assert_eq!(parse_request(body), Some((42, &b"{}"[..])));
        // A Kafka ApiVersions header, a truncated header, a negative client id length.
        assert_eq!(parse_request(&[0, 18, 0, 3, 0, 0, 0, 1, 0, 0]), None);
        assert_eq!(parse_request(&frame[4..9]), None);
        let mut odd = body.to_vec();
        odd[8..10].copy_from_slice(&(-1i16).to_be_bytes());
        assert_eq!(parse_request(&odd).map(|(id, _)| id), Some(42));
        odd[8..10].copy_from_slice(&i16::MAX.to_be_bytes());
        assert_eq!(parse_request(&odd), None);
    }
}
