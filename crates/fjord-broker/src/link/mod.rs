//! Connections from this node to others: to the active controller (`controller`), and to peer
//! brokers (`peers`). The bottom layer of the broker's folders: it imports none of the others.

pub(crate) mod controller;
pub(crate) mod peers;
