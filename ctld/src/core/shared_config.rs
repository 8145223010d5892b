//! The config in force, as the core shares it with the client and HTTP handlers: the core swaps
//! it (reconfigure, sacctmgr changes), handlers read it per request.

use drover_shared::config::Config;
use drover_shared::sacctmgr::edit::Edit;
use std::sync::{Arc, RwLock};

/// The config in force, shared between the core (which swaps it on reconfigure and sacctmgr
/// changes) and the client and HTTP handlers (which read it per request), with the entities
/// sacctmgr changed (what `drover simulate` puts over a candidate file, as reconfigure does).
#[derive(Debug, Clone)]
pub(crate) struct SharedConfig(Arc<RwLock<(Arc<Config>, Arc<Vec<Edit>>)>>);

impl SharedConfig {
    pub(crate) fn new(config: Arc<Config>) -> SharedConfig {
        SharedConfig(Arc::new(RwLock::new((config, Arc::default()))))
    }

    /// The config in force now.
    pub(crate) fn get(&self) -> Arc<Config> {
        // A poisoned lock only means a reader panicked; the value is still a whole config.
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).0.clone()
    }

    /// The accounts, users and QOS sacctmgr changed, as stored.
    pub(crate) fn edits(&self) -> Arc<Vec<Edit>> {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).1.clone()
    }

    pub(super) fn set(&self, config: Arc<Config>, edits: Arc<Vec<Edit>>) {
        *self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner) = (config, edits);
    }
}
