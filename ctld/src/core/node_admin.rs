//! `scontrol update NodeName=<hostlist> State=DRAIN|DOWN|RESUME|UNDRAIN Reason=…`: operators
//! and admins take nodes out of service and put them back. A drained node gets no new jobs while
//! its running ones finish (`drng` → `drain`); a node set `DOWN` gets nothing and its jobs end
//! `NODE_FAIL`. Flags and reasons (with who set them and when) are stored, so a restarted ctld
//! keeps them; `sinfo -R` and `scontrol show node` read them through [`Core::node_reasons`].
//!
//! A drain or down opens an incident with an owner (Drover's `Owner=`, the caller when not given;
//! `system` for the drains noded and ctld make themselves) and an optional `Ticket=`; resume
//! closes it. Every change, and every job that fails on a node, is an entry of the node's history
//! (`drover node history`). A node where jobs of several users keep failing is drained by ctld
//! with those jobs as evidence (`[incidents]`).
//!
//! This file is a child module of `core` (declared there), so it extends [`Core`] directly.

use super::Core;
use crate::model::identity::{Caller, user_name};
use crate::model::incident::{Failure, Incident, SYSTEM_OWNER};
use crate::model::state::State;
use crate::policy::authz::{Operation, Who};
use crate::policy::incident::Verdict;
use crate::store::db::{DbOp, StoredNodeState};
use drover_shared::hostlist;
use drover_shared::job::JobId;
use drover_shared::proto::client::{ErrorCode, NodeEvent, NodeReason, NodeStateChange, NodeUpdate, Response};
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
        let mut detail = format!("nodes={} reason={}", update.nodes, update.reason.as_deref().unwrap_or(""));
        for (key, value) in [("owner", &update.owner), ("ticket", &update.ticket)] {
            if let Some(value) = value {
                detail.push_str(&format!(" {key}={value}"));
            }
        }
        let result = self.update_node_checked(Who::of(&self.state.config(), caller), update);
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
        if let Some(unknown) = names.iter().find(|n| !self.state.node_index().contains_key(*n)) {
            return Err(Refusal::new(ErrorCode::InvalidNodeName, format!("node {unknown} is not configured")));
        }
        let reason = update.reason.as_deref().map(str::trim).filter(|r| !r.is_empty());
        let needs_reason = matches!(update.state, NodeStateChange::Drain | NodeStateChange::Down);
        if needs_reason && reason.is_none() {
            return Err(Refusal::new(ErrorCode::NodeReasonRequired, "no reason given"));
        }
        reason.map_or(Ok(()), |r| crate::policy::validate::check_string("reason", r))?;
        let owner = update.owner.as_deref().map(str::trim).filter(|o| !o.is_empty());
        let ticket = update.ticket.as_deref().map(str::trim).filter(|t| !t.is_empty());
        if !needs_reason && (owner.is_some() || ticket.is_some()) {
            return Err(Refusal::new(ErrorCode::InvalidSpec, "owner and ticket go with state=drain or state=down"));
        }
        owner.map_or(Ok(()), check_owner)?;
        ticket.map_or(Ok(()), check_ticket)?;
        let now = now();
        let set_by = Some((who.caller.uid, now));
        let caller_name = || user_name(who.caller.uid).unwrap_or_else(|| who.caller.uid.to_string());
        let incident = needs_reason.then(|| Incident {
            owner: owner.map_or_else(caller_name, str::to_owned),
            ticket: ticket.map(str::to_owned),
            evidence: String::new(),
        });
        let event = match update.state {
            NodeStateChange::Drain => "drain",
            NodeStateChange::Down => "down",
            NodeStateChange::Resume => "resume",
            NodeStateChange::Undrain => "undrain",
        };
        for name in &names {
            let node = self.state.node_mut(name).expect("checked above");
            let closed = node.incident.clone();
            match update.state {
                NodeStateChange::Drain => {
                    node.drain_reason = reason.map(str::to_owned);
                    node.reason_set = set_by;
                    node.incident = incident.clone();
                }
                NodeStateChange::Down => {
                    node.down_reason = reason.map(str::to_owned);
                    node.reason_set = set_by;
                    node.incident = incident.clone();
                }
                NodeStateChange::Resume => {
                    // As in Slurm, a resume also drops a reboot asked or under way.
                    node.reboot = None;
                    node.drain_reason = None;
                    node.down_reason = None;
                    node.reason_set = None;
                    node.incident = None;
                    node.recent_failures.clear();
                }
                NodeStateChange::Undrain => {
                    node.drain_reason = None;
                    if node.down_reason.is_none() {
                        node.reason_set = None;
                        node.incident = None;
                        node.recent_failures.clear();
                    }
                }
            }
            tracing::info!(node = name, state = ?update.state, reason, uid = who.caller.uid, "node updated");
            // A resume's entry names the incident it closed.
            let shown = incident.clone().or(closed).unwrap_or_else(|| Incident {
                owner: String::new(),
                ticket: None,
                evidence: String::new(),
            });
            self.record_node_event(NodeEvent {
                time: now,
                node: name.clone(),
                event: event.into(),
                uid: who.caller.uid,
                owner: shown.owner,
                reason: reason.unwrap_or_default().to_owned(),
                ticket: shown.ticket,
                ..NodeEvent::default()
            });
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
        let kill_wait = self.state.config().kill_wait;
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
        let Some(node) = self.state.node_index().get(name).map(|&i| &self.state.nodes()[i]) else { return };
        let (uid, time) = node.reason_set.unwrap_or((0, now()));
        let incident = node.incident.clone();
        let reboot = node.reboot.as_ref().map(super::reboot::encode);
        self.store(DbOp::SaveNodeState(StoredNodeState {
            name: name.to_owned(),
            drain_reason: node.drain_reason.clone(),
            down_reason: node.down_reason.clone(),
            uid,
            time,
            owner: incident.as_ref().map_or_else(|| SYSTEM_OWNER.to_owned(), |i| i.owner.clone()),
            ticket: incident.as_ref().and_then(|i| i.ticket.clone()),
            evidence: incident.map(|i| i.evidence).unwrap_or_default(),
            reboot: None,
        }));
        self.store(DbOp::SaveNodeReboot { name: name.to_owned(), reboot });
    }

    /// Stores an entry of a node's history.
    pub(super) fn record_node_event(&mut self, event: NodeEvent) {
        self.store(DbOp::NodeEvent(Box::new(event)));
    }

    /// A node's own report that it must be drained (prolog, epilog or health check failed).
    pub(crate) fn node_drains_itself(&mut self, name: &str, reason: String) {
        let Some(node) = self.state.node_mut(name) else { return };
        if node.drain_reason.as_deref() == Some(reason.as_str()) {
            return;
        }
        tracing::warn!(node = name, reason, "node drained");
        let evidence = format!("reported by noded on {name}");
        self.drain_by_system(name, reason, evidence);
    }

    /// Drains a node on ctld's or noded's own finding: owner `system`, the evidence recorded.
    fn drain_by_system(&mut self, name: &str, reason: String, evidence: String) {
        let Some(node) = self.state.node_mut(name) else { return };
        let time = now();
        node.drain_reason = Some(reason.clone());
        node.reason_set = Some((0, time));
        node.incident = Some(Incident { owner: SYSTEM_OWNER.into(), ticket: None, evidence: evidence.clone() });
        self.save_node_state(name);
        self.record_node_event(NodeEvent {
            time,
            node: name.to_owned(),
            event: "auto_drain".into(),
            owner: SYSTEM_OWNER.into(),
            reason: reason.clone(),
            evidence: evidence.clone(),
            ..NodeEvent::default()
        });
        let origin = format!("node:{name}");
        let detail = format!("nodes={name} reason={reason} owner={SYSTEM_OWNER} evidence={evidence}");
        self.store(DbOp::Audit {
            time,
            uid: 0,
            origin,
            action: "drain".into(),
            job_id: None,
            outcome: "ok".into(),
            detail,
        });
        self.schedule_needed = true;
    }

    /// A job of `uid` failed on `name` (`how`: its state and exit code, or why the node failed
    /// it): an entry of the node's history. A failure that points at the node (`counts`: a failed
    /// launch, a hardware signal; never an exit code, nor a job lost with its node, which the
    /// node's own state already shows) counts towards a drain when jobs of several users keep
    /// failing there and nowhere else; beyond the window's cap of automatic drains, an alert.
    pub(crate) fn job_failed_on_node(&mut self, name: &str, job_id: JobId, uid: u32, how: String, counts: bool) {
        let time = now();
        let config = self.state.config().incidents.clone();
        let window_start = crate::policy::incident::window_start(&config, time);
        let drains = self.state.auto_drains.since(window_start);
        if counts {
            self.state.failing_users.push(uid, name, time, config.auto_drain_window_secs);
        }
        let Some(&index) = self.state.node_index().get(name) else { return };
        // Read beside the node it judges (put back below).
        let failing_users = std::mem::take(&mut self.state.failing_users);
        let node = &mut self.state.nodes_mut()[index];
        let keep = config.auto_drain_failures.max(1) as usize;
        if counts {
            node.recent_failures.push(Failure { time, job_id, uid }, config.auto_drain_window_secs, keep);
        }
        let already = node.drain_reason.is_some() || node.down_reason.is_some();
        let elsewhere = |uid| failing_users.elsewhere(uid, name, window_start);
        let verdict = counts
            .then(|| {
                crate::policy::incident::auto_drain_verdict(&node.recent_failures, &config, time, elsewhere, drains)
            })
            .flatten()
            .filter(|_| !already);
        if verdict.is_some() {
            // What opened an incident or an alert is not counted again.
            node.recent_failures.clear();
        }
        self.state.failing_users = failing_users;
        self.record_node_event(NodeEvent {
            time,
            node: name.to_owned(),
            event: "job_failure".into(),
            uid,
            evidence: how,
            job_id: Some(job_id),
            ..NodeEvent::default()
        });
        match verdict {
            Some(Verdict::Drain(evidence)) => {
                tracing::warn!(node = name, evidence, "jobs keep failing on the node: drained");
                self.state.auto_drains.push(time);
                self.drain_by_system(name, "jobs keep failing here".into(), evidence);
            }
            Some(Verdict::Alert(evidence)) => self.withhold_drain(name, evidence, config.auto_drain_max_nodes),
            None => {}
        }
    }

    /// The alert raised instead of an automatic drain beyond the window's cap: a log line, an
    /// entry of the node's history, an audit record (`drain_withheld`) and the counter
    /// `drover_auto_drains_withheld_total`. The node stays in service.
    fn withhold_drain(&mut self, name: &str, evidence: String, cap: u32) {
        let time = now();
        self.state.auto_drains.withheld += 1;
        let reason = format!("jobs keep failing here; not drained: {cap} automatic drains per window already");
        tracing::warn!(node = name, evidence, reason, "ALERT: jobs keep failing on the node; drain withheld");
        self.record_node_event(NodeEvent {
            time,
            node: name.to_owned(),
            event: "drain_withheld".into(),
            owner: SYSTEM_OWNER.into(),
            reason: reason.clone(),
            evidence: evidence.clone(),
            ..NodeEvent::default()
        });
        let detail = format!("nodes={name} reason={reason} evidence={evidence}");
        let (origin, action) = ("ctld".to_owned(), "drain_withheld");
        self.store(DbOp::Audit {
            time,
            uid: 0,
            origin,
            action: action.into(),
            job_id: None,
            outcome: "alert".into(),
            detail,
        });
    }

    /// Who set each node's reason, and when: nodes with a reason, node-table order.
    pub(crate) fn node_reasons(&self) -> Response {
        let reasons = self
            .state
            .nodes()
            .iter()
            .filter_map(|n| {
                let reason = n.down_reason.clone().or_else(|| n.drain_reason.clone())?;
                let (uid, time) = n.reason_set.unwrap_or((0, 0));
                let user = user_name(uid).unwrap_or_else(|| uid.to_string());
                let incident = n.incident.clone();
                Some(NodeReason {
                    node: n.config.name.clone(),
                    reason,
                    uid,
                    user,
                    time,
                    owner: incident.as_ref().map_or_else(|| SYSTEM_OWNER.to_owned(), |i| i.owner.clone()),
                    ticket: incident.and_then(|i| i.ticket),
                })
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
            node.incident = Some(Incident { owner: row.owner, ticket: row.ticket, evidence: row.evidence });
            node.reboot = row.reboot.as_deref().and_then(super::reboot::decode);
        }
    }
}

/// An incident's owner: a user, team or rota name (letters, digits, `.`, `_`, `-`, `@`; at most
/// 64 bytes).
fn check_owner(owner: &str) -> Result<(), Refusal> {
    let ok = owner.len() <= 64 && owner.chars().all(|c| c.is_ascii_alphanumeric() || "._-@".contains(c));
    if ok {
        Ok(())
    } else {
        Err(Refusal::new(
            ErrorCode::InvalidSpec,
            "owner must be a name of at most 64 letters, digits, '.', '_', '-' or '@'",
        ))
    }
}

/// A ticket: an id or a link (no spaces or control characters; at most 256 bytes).
fn check_ticket(ticket: &str) -> Result<(), Refusal> {
    let ok = ticket.len() <= 256 && ticket.chars().all(|c| c.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        Err(Refusal::new(ErrorCode::InvalidSpec, "ticket must be an id or a link of at most 256 printable characters"))
    }
}
