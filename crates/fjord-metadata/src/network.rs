//! The metadata quorum's raft network, which for now reaches no one.
//!
//! With a single voter openraft never needs to send a message: it elects itself
//! and commits on its own flush. It still requires a network factory, so this one
//! answers every RPC with `Unreachable`. The clustering work replaces it with a
//! real transport between controllers; nothing else here has to change for that.

use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;

use crate::types::TypeConfig;

/// Why an RPC could not be sent.
#[derive(Debug, thiserror::Error)]
#[error("the metadata quorum has no network yet; cannot reach node {target}")]
pub(crate) struct NoNetwork {
    target: u64,
}

type RpcError<E = openraft::error::Infallible> = RPCError<u64, BasicNode, RaftError<u64, E>>;

/// Network factory (and client) that reports every peer as unreachable.
pub(crate) struct UnreachableNetwork {
    target: u64,
}

impl UnreachableNetwork {
    pub(crate) fn factory() -> Self {
        Self { target: 0 }
    }

    fn unreachable<E: std::error::Error>(&self) -> RPCError<u64, BasicNode, E> {
        RPCError::Unreachable(Unreachable::new(&NoNetwork {
            target: self.target,
        }))
    }
}

impl RaftNetworkFactory<TypeConfig> for UnreachableNetwork {
    type Network = UnreachableNetwork;

    async fn new_client(&mut self, target: u64, _node: &BasicNode) -> Self::Network {
        UnreachableNetwork { target }
    }
}

impl RaftNetwork<TypeConfig> for UnreachableNetwork {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RpcError> {
        Err(self.unreachable())
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RpcError<InstallSnapshotError>> {
        Err(self.unreachable())
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<u64>,
        _option: RPCOption,
    ) -> Result<VoteResponse<u64>, RpcError> {
        Err(self.unreachable())
    }
}
