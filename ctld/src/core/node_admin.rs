//! `scontrol update NodeName=<hostlist> State=DRAIN|DOWN|RESUME|UNDRAIN Reason=…`: operators
//! and admins take nodes out of service and put them back. A drained node gets no new jobs while
//! its running ones finish (`drng` → `drain`); a node set `DOWN` gets nothing and its jobs end
//! `NODE_FAIL`. Flags and reasons (with who set them and when) are stored, so a restarted ctld
//! keeps them; `sinfo -R` and `scontrol show node` read them through [`Core::node_reasons`].
//!
//! This file is a child module of `core` (declared there), so it extends [`Core`] directly.

use super::Core;
use crate::model::identity::{Caller, user_name};
use crate::model::state::State;
use crate::policy::authz::{Operation, Who};
use crate::store::db::{DbOp, StoredNodeState};
use drover_shared::hostlist;
use drover_shared::job::JobId;
use drover_shared::proto::client::{ErrorCode, NodeReason, NodeStateChange, NodeUpdate, Response};
use drover_shared::proto::node::CtldMessage;
use drover_shared::{UnixTime, now};

/// A refused node update: Slurm's code and a detail for the log and the audit record.
use crate::model::refusal::Refusal;

impl Core {
    /// Applies a node update (all its nodes or none) and audits it with its outcome.
    pub(crate) fn update_node(&mut self, caller: Caller, update: &NodeUpdate) -> Response {
        let action = match update.state {
            NodeStateChange::Drain => "drain",
            NodeStateChange::Down => "down",
            NodeStateChange::Resume => "resume",
            NodeStateChange::Undrain => "undrain",
        };
        let detail = format!("nodes={} reason={}", update.nodes, update.reason.as_deref().unwrap_or(""));
        let result = self.update_node_checked(Who::of(&self.state.config, caller), update);
        self.audit_request(caller, action, None, result.as_ref().map(|_| ()).map_err(|refusal| refusal.code), detail);
        match result {
            Ok(()) => Response::Done,
            Err(Refusal { code, detail }) => {
                tracing::info!(uid = caller.uid, %code, detail, "node update refused");
                Response::Error { code, detail }
            }
        }
    }

    fn update_node_checked(&mut self, who: Who, update: &NodeUpdate) -> Result<(), Refusal> {
        who.check(Operation::NodeState).map_err(|code| Refusal::new(code, "operator or admin role required"))?;
        let names =
            hostlist::expand(&update.nodes).map_err(|e| Refusal::new(ErrorCode::InvalidNodeName, e.to_string()))?;
        if names.is_empty() {
            return Err(Refusal::new(ErrorCode::InvalidNodeName, "no node named"));
        }
        if let Some(unknown) = names.iter().find(|n| !self.state.node_index.contains_key(*n)) {
            return Err(Refusal::new(ErrorCode::InvalidNodeName, format!("node {unknown} is not configured")));
        }
        let reason = update.reason.as_deref().map(str::trim).filter(|r| !r.is_empty());
        let needs_reason = matches!(update.state, NodeStateChange::Drain | NodeStateChange::Down);
        if needs_reason && reason.is_none() {
            return Err(Refusal::new(ErrorCode::NodeReasonRequired, "no reason given"));
        }
        reason.map_or(Ok(()), |r| crate::policy::validate::forbidden_text("reason", r))?;
        let now = now();
        let set_by = Some((who.caller.uid, now));
        for name in &names {
            let node = self.state.node_mut(name).expect("checked above");
            match update.state {
                NodeStateChange::Drain => {
                    node.drain_reason = reason.map(str::to_owned);
                    node.reason_set = set_by;
                }
                NodeStateChange::Down => {
                    node.down_reason = reason.map(str::to_owned);
                    node.reason_set = set_by;
                }
                NodeStateChange::Resume => {
                    node.drain_reason = None;
                    node.down_reason = None;
                    node.reason_set = None;
                }
                NodeStateChange::Undrain => {
                    node.drain_reason = None;
                    if node.down_reason.is_none() {
                        node.reason_set = None;
                    }
                }
            }
            tracing::info!(node = name, state = ?update.state, reason, uid = who.caller.uid, "node updated");
            self.save_node_state(name);
            if update.state == NodeStateChange::Down {
                self.end_jobs_on_down_node(name, now);
            }
        }
        self.schedule_needed = true;
        Ok(())
    }

    /// A node set `DOWN` runs nothing: its jobs are killed and end `NODE_FAIL`, as in Slurm.
    fn end_jobs_on_down_node(&mut self, name: &str, now: UnixTime) {
        let kill_wait = self.state.config.kill_wait;
        let jobs: Vec<(JobId, u32, Option<String>)> = self
            .state
            .jobs
            .values()
            .filter(|j| j.alloc.as_ref().is_some_and(|a| a.nodes.iter().any(|n| n.node == name)))
            .map(|j| (j.info.job_id, j.info.restarts, j.info.nodes.first().cloned()))
            .collect();
        for (job_id, run, batch_host) in jobs {
            if let Some(link) = batch_host.and_then(|h| self.links.get(&h).cloned()) {
                let _ = link.tx.send(CtldMessage::Cancel { job_id, run, kill_wait });
            }
            self.fail_on_node(job_id, now);
        }
    }

    /// Queues a node's flags for storage (a node back in service deletes its row).
    pub(crate) fn save_node_state(&mut self, name: &str) {
        let Some(node) = self.state.node_index.get(name).map(|&i| &self.state.nodes[i]) else { return };
        let (uid, time) = node.reason_set.unwrap_or((0, now()));
        self.store(DbOp::SaveNodeState(StoredNodeState {
            name: name.to_owned(),
            drain_reason: node.drain_reason.clone(),
            down_reason: node.down_reason.clone(),
            uid,
            time,
        }));
    }

    /// A node's own report that it must be drained (prolog, epilog or health check failed).
    pub(crate) fn node_drains_itself(&mut self, name: &str, reason: String) {
        let Some(node) = self.state.node_mut(name) else { return };
        if node.drain_reason.as_deref() == Some(reason.as_str()) {
            return;
        }
        tracing::warn!(node = name, reason, "node drained");
        node.drain_reason = Some(reason.clone());
        node.reason_set = Some((0, now()));
        self.save_node_state(name);
        let origin = format!("node:{name}");
        let detail = format!("nodes={name} reason={reason}");
        self.store(DbOp::Audit {
            time: now(),
            uid: 0,
            origin,
            action: "drain",
            job_id: None,
            outcome: "ok".into(),
            detail,
        });
    }

    /// Who set each node's reason, and when: nodes with a reason, node-table order.
    pub(crate) fn node_reasons(&self) -> Response {
        let reasons = self
            .state
            .nodes
            .iter()
            .filter_map(|n| {
                let reason = n.down_reason.clone().or_else(|| n.drain_reason.clone())?;
                let (uid, time) = n.reason_set.unwrap_or((0, 0));
                let user = user_name(uid).unwrap_or_else(|| uid.to_string());
                Some(NodeReason { node: n.config.name.clone(), reason, uid, user, time })
            })
            .collect();
        Response::NodeReasons { reasons }
    }
}

/// Puts the stored flags back on the nodes after a restart; rows of nodes no longer configured
/// are ignored.
pub(crate) fn restore_node_states(state: &mut State, stored: Vec<StoredNodeState>) {
    for row in stored {
        if let Some(node) = state.node_mut(&row.name) {
            node.drain_reason = row.drain_reason;
            node.down_reason = row.down_reason;
            node.reason_set = Some((row.uid, row.time));
        }
    }
}
