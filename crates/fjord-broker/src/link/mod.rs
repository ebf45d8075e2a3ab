//! Connections from this node to others: to the active controller (`controller`), and to peer
//! brokers (`peers`). The bottom layer of the broker's folders: it imports none of the others.

pub(crate) mod controller;
pub(crate) mod envelope;
pub(crate) mod peers;

/// How this node's connections to the others are secured (TLS, a SASL login), set up once at
/// start from the config's links; plaintext for a cluster of one.
#[derive(Debug, Clone, Default)]
pub struct Links {
    /// To the other brokers' inter-broker listeners.
    pub inter_broker: fjord_client::Security,
    /// To the controllers' listener.
    pub controller: fjord_client::Security,
}
