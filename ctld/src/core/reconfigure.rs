//! `scontrol reconfigure`: ctld re-reads its config file (on a `drover up` cluster, the admin's
//! file its home's file includes; see `drover_shared::config`), validates all of it with the loader,
//! and only then swaps it in (partitions, accounts, users, QOS, roles, limits, priority weights,
//! timeouts). A file that does not load is refused with the loader's `file:line:column` error and
//! the old config stays in force. What cannot change while ctld runs (cluster name, addresses,
//! state directory, key file, metrics listener) and node changes that would pull resources out
//! from under running jobs are refused the same way. Admins only.
//!
//! This file is a child module of `core` (declared there), so it extends [`Core`] directly.

use super::Core;
use super::shared_config::SharedConfig;
use crate::model::identity::Caller;
use crate::model::refusal::Refusal;
use crate::model::state::Node;
use crate::policy::authz::{Operation, Who};
use drover_shared::config::{Config, Replica};
use drover_shared::proto::client::{ErrorCode, Response};
use std::collections::HashMap;
use std::sync::Arc;

impl Core {
    /// Re-reads, validates and applies the config file; audits the request with its outcome.
    pub(crate) fn reconfigure(&mut self, caller: Caller) -> Response {
        let path = self.state.config().path.clone();
        let result = self.reconfigure_checked(Who::of(&self.state.config(), caller));
        let outcome = result.as_ref().map(|_| ()).map_err(|refusal| refusal.code);
        let detail = match &result {
            Ok(changes) if changes.is_empty() => format!("file={}", path.display()),
            Ok(changes) => format!("file={} {changes}", path.display()),
            Err(Refusal { detail, .. }) => format!("file={} {detail}", path.display()),
        };
        self.audit_request(caller, "reconfigure", None, outcome, detail);
        match result {
            Ok(_) => Response::Done,
            Err(Refusal { code, detail }) => {
                tracing::warn!(uid = caller.uid, %code, detail, "reconfigure refused; the old config stays");
                Response::Error { code, detail }
            }
        }
    }

    /// Applies the reloaded config; `Ok` says what changed in the job templates, for the audit.
    fn reconfigure_checked(&mut self, who: Who) -> Result<String, Refusal> {
        who.check(Operation::Reconfigure).map_err(|code| Refusal::new(code, "admin role required"))?;
        let old = self.state.config().clone();
        let file = old.reload().map_err(|e| Refusal::new(ErrorCode::InvalidConfig, e.to_string()))?;
        fixed_settings_unchanged(&old, &file).map_err(|e| Refusal::new(ErrorCode::InvalidConfig, e))?;
        // sacctmgr's changes stay over the file's accounts, users and QOS.
        let new = drover_shared::sacctmgr::edit::overlay(&file, &self.acct_edits)
            .map_err(|e| Refusal::new(ErrorCode::InvalidConfig, format!("{}: {e}", file.source.display())))?;
        let held = held_by_sacctmgr(&file, &self.acct_edits);
        let nodes = self.carry_nodes(&new).map_err(|e| Refusal::new(ErrorCode::InvalidConfig, e))?;
        let file_changed = old.source_text != new.source_text;
        self.install_config(Arc::new(new), Some(nodes));
        self.refilter_jobs();
        if file_changed {
            // Configless nodes fetch the file again (`drover_shared::configless`).
            for link in self.links.values() {
                let _ = link.tx.send(drover_shared::proto::node::CtldMessage::Reconfigured);
            }
        }
        tracing::info!(path = %old.path.display(), held, "config reloaded");
        let mut changes = crate::policy::template::changes(&old.templates, &self.state.config().templates);
        if !held.is_empty() {
            changes.push_str(&format!("{}{held}", if changes.is_empty() { "" } else { " " }));
        }
        Ok(changes)
    }

    /// Resolves the node filters of the jobs that have one again: the node table may have been
    /// renumbered, grown or shrunk, and features changed. A name no longer configured allows
    /// nothing.
    fn refilter_jobs(&mut self) {
        let jobs: Vec<(drover_shared::job::JobId, Arc<drover_shared::job::JobSpec>)> = self
            .state
            .jobs
            .values()
            .filter(|j| j.node_filter.is_some() && !j.info.state().is_terminal())
            .map(|j| (j.info.job_id, j.spec.clone()))
            .collect();
        for (job_id, spec) in jobs {
            let unknown = crate::policy::validate::UnknownNodes::Skip;
            let filter = crate::policy::validate::node_filter(&self.state, &spec, unknown).unwrap_or_default();
            if let Some(job) = self.state.jobs.get_mut(&job_id) {
                job.node_filter = filter;
            }
        }
    }

    /// The node table under `new`: nodes kept with their live state, new nodes added (they join
    /// when their noded registers). Removing or shrinking a node that holds jobs is refused.
    fn carry_nodes(&mut self, new: &Config) -> Result<Vec<Node>, String> {
        let mut old: HashMap<String, Node> =
            self.state.take_nodes().into_iter().map(|n| (n.config.name.clone(), n)).collect();
        let busy = |n: &Node| n.cpus_alloc > 0 || n.mem_alloc_mb > 0 || !n.gpus_alloc.is_empty();
        let refusal = new.nodes.iter().find_map(|c| {
            let n = old.get(c.name.as_str())?;
            let shrinks = c.cpus < n.cpus_alloc || c.real_memory_mb < n.mem_alloc_mb || c.gpus != n.config.gpus;
            (busy(n) && shrinks).then(|| format!("node {} holds jobs that its new definition cannot", c.name))
        });
        let refusal = refusal.or_else(|| {
            old.values()
                .find(|n| busy(n) && new.node(&n.config.name).is_none())
                .map(|n| format!("node {} holds jobs and is no longer configured", n.config.name))
        });
        if let Some(refusal) = refusal {
            // Put the table back untouched, in its order.
            let order: Vec<String> = self.state.config().nodes.iter().map(|c| c.name.clone()).collect();
            let config = self.state.config().clone();
            self.state.install(config, Some(order.iter().filter_map(|name| old.remove(name)).collect()));
            return Err(refusal);
        }
        Ok(new
            .nodes
            .iter()
            .map(|c| match old.remove(&c.name) {
                Some(mut node) => {
                    if node.config != *c {
                        // A registered node keeps what it reported, within the new bounds.
                        node.cpus = if node.registered_once { node.cpus.min(c.cpus) } else { c.cpus };
                        node.real_memory_mb = if node.registered_once {
                            node.real_memory_mb.min(c.real_memory_mb)
                        } else {
                            c.real_memory_mb
                        };
                        if !node.registered_once {
                            node.gpus = c.gpus.clone().into();
                        }
                        node.config = c.clone();
                    }
                    node
                }
                None => Node::new(c),
            })
            .collect())
    }

    /// The config clients and the HTTP endpoint read.
    pub(crate) fn shared_config(&self) -> SharedConfig {
        self.shared_config.clone()
    }
}

/// The file's accounts, users and QOS that sacctmgr changed (so the file's entries for them do
/// not count), for the reconfigure's audit record and log: `sacctmgr_holds=account:a,user:b`
/// (the first 20, then how many more).
fn held_by_sacctmgr(file: &Config, edits: &[drover_shared::sacctmgr::edit::Edit]) -> String {
    use drover_shared::sacctmgr::edit::Kind;
    let names: Vec<String> = edits
        .iter()
        .filter(|e| match e.kind {
            Kind::Account => file.accounts.iter().any(|a| a.name == e.name),
            Kind::User => file.users.iter().any(|u| u.name == e.name),
            Kind::Qos => file.qos.iter().any(|q| q.name == e.name),
        })
        .map(|e| format!("{}:{}", format!("{:?}", e.kind).to_ascii_lowercase(), e.name))
        .collect();
    const SHOWN: usize = 20;
    match names.len() {
        0 => String::new(),
        n if n <= SHOWN => format!("sacctmgr_holds={}", names.join(",")),
        n => format!("sacctmgr_holds={},…({} more)", names[..SHOWN].join(","), n - SHOWN),
    }
}

/// Settings bound at startup: changing them needs a restart, so a file that changes them is refused.
fn fixed_settings_unchanged(old: &Config, new: &Config) -> Result<(), String> {
    let fixed = [
        ("cluster_name", old.cluster_name != new.cluster_name),
        ("controller.address", old.controller_address != new.controller_address),
        ("controller.state_dir", old.state_dir != new.state_dir),
        ("controller.key_file", old.key_file != new.key_file),
        ("metrics.listen", old.metrics.listen != new.metrics.listen),
        // One controller and replicas are different processes.
        ("controller.replicas", old.replicas.is_empty() != new.replicas.is_empty()),
    ];
    let changed: Vec<&str> = fixed.iter().filter(|(_, changed)| *changed).map(|(key, _)| *key).collect();
    if !changed.is_empty() {
        return Err(format!("{}: {} cannot change without restarting ctld", new.source.display(), changed.join(", ")));
    }
    replicas_change(&old.replicas, &new.replicas)
        .map_err(|e| format!("{}: controller.replicas: {e}", new.source.display()))
}

/// The changes of `[[controller.replicas]]` the leader can make at run time (docs/admin/ha.md):
/// one replica added or removed at a time (each step keeps a majority of the old set in the new
/// one), and a kept replica's addresses unchanged (its peers and clients know it there). At
/// least three replicas is the config check's.
fn replicas_change(old: &[Replica], new: &[Replica]) -> Result<(), String> {
    for replica in new {
        if let Some(was) = old.iter().find(|o| o.id == replica.id)
            && (was.address != replica.address || was.raft_address != replica.raft_address)
        {
            return Err(format!(
                "replica {}'s addresses cannot change while it runs; remove it, then add it with a new id",
                replica.id
            ));
        }
    }
    let ids = |list: &[Replica], other: &[Replica]| -> Vec<String> {
        list.iter().filter(|r| !other.iter().any(|o| o.id == r.id)).map(|r| r.id.to_string()).collect()
    };
    let (added, removed) = (ids(new, old), ids(old, new));
    if added.len() + removed.len() > 1 {
        let mut what = Vec::new();
        if !added.is_empty() {
            what.push(format!("adds {}", added.join(", ")));
        }
        if !removed.is_empty() {
            what.push(format!("removes {}", removed.join(", ")));
        }
        return Err(format!(
            "add or remove one replica at a time (this file {}); reconfigure after each",
            what.join(" and ")
        ));
    }
    Ok(())
}
