//! The core's link to one node's noded: the connection it arrived on and the channel its
//! messages go out by (the core alone sends on it).

use drover_shared::proto::node::CtldMessage;
use tokio::sync::mpsc;

/// A connection to a node's noded.
#[derive(Debug, Clone)]
pub(crate) struct NodeLink {
    pub(crate) connection_id: u64,
    pub(crate) tx: mpsc::UnboundedSender<CtldMessage>,
}
