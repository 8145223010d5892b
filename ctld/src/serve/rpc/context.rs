//! What every client request handler is given: the core's event channel, the config in force,
//! the published job snapshot, the admission table, the metrics registry, the replicas' states,
//! and the count of answers on their way (which a shutdown lets out before the process ends).

use super::admission;
use crate::core::Event;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// What a client handler needs.
#[derive(Clone)]
pub(crate) struct ClientContext {
    pub(crate) events: mpsc::UnboundedSender<Event>,
    pub(crate) db_path: PathBuf,
    /// The config in force (`scontrol reconfigure` swaps it).
    pub(crate) config: crate::core::shared_config::SharedConfig,
    /// RPC counts and latencies for `/metrics`.
    pub(crate) metrics: Arc<crate::core::metrics::Registry>,
    /// The job snapshot the core publishes; job queries are answered from it, off the core.
    pub(crate) jobs: tokio::sync::watch::Receiver<Arc<crate::model::snapshot::JobsSnapshot>>,
    /// Client connections by uid, local and remote ones alike.
    pub(crate) admission: Arc<admission::Admission>,
    /// A replicated controller's replicas as this (leading) replica sees them; `None` for a
    /// single controller.
    pub(crate) replicas: Option<tokio::sync::watch::Receiver<Vec<drover_shared::proto::client::ReplicaState>>>,
    /// Requests being answered, so that a shutdown lets their answers out (see [`Answering`]).
    pub(crate) answering: Arc<Answering>,
}

/// Counts the requests whose answers are on their way: a shutting-down ctld waits (briefly) for
/// them to be written before the process ends.
#[derive(Default)]
pub(crate) struct Answering(std::sync::atomic::AtomicUsize);

impl Answering {
    pub(super) fn begin(self: &Arc<Self>) -> AnswerGuard {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        AnswerGuard(self.clone())
    }

    /// Waits until no answer is on its way, or `limit` has passed.
    pub(crate) async fn settled(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while self.0.load(std::sync::atomic::Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// One request being answered; its drop ends it.
pub(super) struct AnswerGuard(Arc<Answering>);

impl Drop for AnswerGuard {
    fn drop(&mut self) {
        self.0.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}
