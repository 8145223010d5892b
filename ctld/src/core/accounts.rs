//! `sacctmgr add|modify|delete|load` of accounts, users (their associations) and QOS, at run
//! time: the change is applied to the configuration in force (`drover_shared::sacctmgr::edit`,
//! which checks that everything still holds together), each entity it changed is stored whole
//! (`acct_entities`, carried in the replicated log like every write), the change is audited
//! (who, from where, what, with its outcome, refused ones included), and the new configuration
//! replaces the old at once: validation, limits, fair-share and `sacctmgr`'s listings read it
//! from the next request. The answer waits for the commit; a failed commit puts the
//! configuration back as it was. Operators and admins (Slurm's `AdminLevel=Operator` may edit
//! accounts); only admins make or unmake admins.
//!
//! The cluster file seeds accounts, users and QOS; the stored entities are put over it at start
//! and at every `scontrol reconfigure` (`reconfigure.rs`), so a reconfigure never undoes a
//! sacctmgr change.
//!
//! This file is a child module of `core` (declared there), so it extends [`Core`] directly.

use super::Core;
use super::waiting::Undo;
use crate::model::identity::Caller;
use crate::model::refusal::Refusal;
use crate::policy::authz::{Operation, Who};
use crate::store::db::{DbOp, StoredEntity};
use drover_shared::config::{Config, Role};
use drover_shared::now;
use drover_shared::proto::client::{ErrorCode, Response};
use drover_shared::sacctmgr::edit::{self, Change, Context, Edit};
use std::collections::HashSet;
use std::sync::Arc;
use tokio::sync::oneshot;

impl Core {
    /// The core starts with the entities sacctmgr changed (already put over its config).
    pub(crate) fn with_acct_edits(mut self, edits: Vec<Edit>) -> Core {
        self.acct_edits = edits;
        self.shared_config.set(self.state.config().clone(), Arc::new(self.acct_edits.clone()));
        self
    }

    /// Checks, applies (with `commit`) and audits a sacctmgr change; answers after its commit.
    pub(crate) fn sacctmgr_change(
        &mut self,
        caller: Caller,
        change: &Change,
        commit: bool,
        reply: oneshot::Sender<Response>,
    ) {
        let before = (self.state.config().clone(), self.acct_edits.clone());
        let result = self.sacctmgr_checked(Who::of(&self.state.config(), caller), change, commit);
        if commit {
            let outcome = result.as_ref().map(|_| ()).map_err(|refusal| refusal.code);
            let detail = match &result {
                Ok((_, false)) => format!("{} (nothing changed)", change.describe()),
                Ok(_) => change.describe(),
                Err(Refusal { detail, .. }) => format!("{}: {detail}", change.describe()),
            };
            self.audit_request(caller, "sacctmgr", None, outcome, super::commits::bounded(detail));
        }
        let response = match result {
            Ok((text, changed)) => Response::AcctChanged { text, changed },
            Err(Refusal { code, detail }) => {
                tracing::info!(uid = caller.uid, %code, detail, "sacctmgr change refused");
                Response::Error { code, detail }
            }
        };
        let stored = commit && matches!(response, Response::AcctChanged { changed: true, .. });
        let token = self.answer_after_commit_token(reply, response);
        if stored {
            self.acct_undo.insert(token, Undo { config: before.0, edits: before.1 });
        }
    }

    fn sacctmgr_checked(&mut self, who: Who, change: &Change, commit: bool) -> Result<(String, bool), Refusal> {
        who.check(Operation::EditAccounts).map_err(|code| Refusal::new(code, "operator or admin role required"))?;
        // The associations, accounts and QOS of the jobs not yet ended, in one walk over the jobs.
        let (mut assocs, mut accounts, mut qos) = (HashSet::new(), HashSet::new(), HashSet::new());
        for job in self.state.jobs.values().filter(|j| !j.info.state().is_terminal()) {
            assocs.insert((job.info.user.as_str(), job.info.account.as_str()));
            accounts.insert(job.info.account.as_str());
            qos.insert(job.info.qos.as_str());
        }
        let active = |user: Option<&str>, account: &str| match user {
            Some(user) => assocs.contains(&(user, account)),
            None => accounts.contains(account),
        };
        let active_qos = |name: &str| qos.contains(name);
        let context = Context { active: &active, active_qos: &active_qos, admin: who.role == Role::Admin };
        let applied = edit::apply(&self.state.config(), change, &context)
            .map_err(|detail| Refusal::new(ErrorCode::InvalidSpec, detail))?;
        if !commit || !applied.changed {
            return Ok((applied.text, applied.changed));
        }
        let time = now();
        for e in &applied.edits {
            self.store(DbOp::AcctEntity(StoredEntity::of(e, who.caller.uid, time)));
            match self.acct_edits.iter_mut().find(|x| x.kind == e.kind && x.name == e.name) {
                Some(stored) => *stored = e.clone(),
                None => self.acct_edits.push(e.clone()),
            }
        }
        tracing::info!(uid = who.caller.uid, change = change.describe(), "sacctmgr change applied");
        self.install_config(Arc::new(applied.config), None);
        Ok((applied.text, true))
    }

    /// Puts back what the change answered under `token` replaced: its commit failed.
    pub(super) fn undo_acct_change(&mut self, token: u64) {
        if let Some(Undo { config, edits }) = self.acct_undo.remove(&token) {
            tracing::warn!("a sacctmgr change was not stored; the configuration is back as it was");
            self.acct_edits = edits;
            self.install_config(config, None);
        }
    }

    /// Makes `new` the configuration in force (with `nodes` as the node table when it changes):
    /// the state, its indexes and the handlers' copy.
    pub(super) fn install_config(&mut self, new: Arc<Config>, nodes: Option<Vec<crate::model::state::Node>>) {
        for user in &new.users {
            for account in &user.accounts {
                self.state.usage.touch(account, &user.name);
            }
        }
        self.state.install(new.clone(), nodes);
        self.shared_config.set(new, Arc::new(self.acct_edits.clone()));
        self.schedule_needed = true;
    }
}
