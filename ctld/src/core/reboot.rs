//! `scontrol reboot [ASAP] [nextstate=RESUME|DOWN] [reason=…] ALL|NODELIST` and `scontrol
//! cancel_reboot NODELIST` (also `scontrol update NodeName=… State=CANCEL_REBOOT`), as Slurm
//! 22.05 has them. A requested reboot waits until the node runs no job (`ASAP` drains the node
//! first so that it empties; without it the node keeps taking jobs, as in Slurm). Then ctld
//! sends the node [`CtldMessage::Reboot`], marks it `REBOOT_ISSUED` (out of service) and waits
//! for its noded to register anew: a registration from a noded started after the reboot was
//! issued completes it, and the node is back in service (its `ASAP` drain lifted) or `DOWN`
//! with `nextstate=DOWN`. A node not back within `[controller] resume_timeout` is set `DOWN`
//! (`reboot timed out`). What noded runs is the node config's `reboot_program` only: nothing
//! in the request reaches it. Every step is stored with the node's flags, so a restarted or
//! failed-over ctld keeps it, and is an entry of the node's history.
//!
//! This file is a child module of `core` (declared there), so it extends [`Core`] directly.

use super::Core;
use crate::model::identity::Caller;
use crate::model::refusal::Refusal;
use crate::model::state::Reboot;
use crate::policy::authz::{Operation, Who};
use drover_shared::proto::client::{ErrorCode, NodeEvent, RebootRequest, Response};
use drover_shared::proto::node::CtldMessage;
use drover_shared::{UnixTime, hostlist, now};

/// The node reason a reboot sets when none is given (Slurm's words).
const REQUESTED: &str = "reboot requested";
/// The drain reason `ASAP` sets when none is given (Slurm's words).
const ASAP: &str = "Reboot ASAP";

impl Core {
    /// `scontrol reboot`: audited with its outcome, answered after the commit.
    pub(crate) fn reboot_nodes(&mut self, caller: Caller, request: &RebootRequest) -> Response {
        let detail = format!(
            "nodes={} asap={} nextstate={} reason={}",
            request.nodes,
            request.asap,
            if request.next_down { "DOWN" } else { "RESUME" },
            request.reason.as_deref().unwrap_or("")
        );
        let result = self.reboot_checked(Who::of(self.state.config(), caller), request);
        self.audit_request(caller, "reboot", None, result.as_ref().map(|_| ()).map_err(|r| r.code), detail);
        result.map_or_else(Refusal::into, |()| Response::Done)
    }

    /// `scontrol cancel_reboot`: a reboot not yet issued is forgotten and its `ASAP` drain
    /// lifted; one already issued is `RebootInProgress`.
    pub(crate) fn cancel_reboot(&mut self, caller: Caller, nodes: &str) -> Response {
        let result = self.cancel_reboot_checked(Who::of(self.state.config(), caller), nodes);
        let outcome = result.as_ref().map(|_| ()).map_err(|r| r.code);
        self.audit_request(caller, "cancel_reboot", None, outcome, format!("nodes={nodes}"));
        result.map_or_else(Refusal::into, |()| Response::Done)
    }

    fn reboot_nodes_named(&self, who: Who, nodes: &str) -> Result<Vec<String>, Refusal> {
        who.check(Operation::NodeState).map_err(|code| Refusal::new(code, "operator or admin role required"))?;
        let names = if nodes.eq_ignore_ascii_case("ALL") {
            self.state.nodes().iter().map(|n| n.config.name.clone()).collect()
        } else {
            hostlist::expand_at_most(nodes, self.state.nodes().len())
                .map_err(|e| Refusal::new(ErrorCode::InvalidNodeName, e.to_string()))?
        };
        if names.is_empty() {
            return Err(Refusal::new(ErrorCode::InvalidNodeName, "no node named"));
        }
        if let Some(unknown) = names.iter().find(|n| !self.state.node_index().contains_key(*n)) {
            return Err(Refusal::new(ErrorCode::InvalidNodeName, format!("node {unknown} is not configured")));
        }
        Ok(names)
    }

    fn reboot_checked(&mut self, who: Who, request: &RebootRequest) -> Result<(), Refusal> {
        let names = self.reboot_nodes_named(who, &request.nodes)?;
        let reason = request.reason.as_deref().map(str::trim).filter(|r| !r.is_empty());
        reason.map_or(Ok(()), |r| crate::policy::validate::check_string("reason", r))?;
        let index = self.state.node_index();
        if let Some(name) = names.iter().find(|n| self.state.nodes()[index[*n]].config.reboot_program.is_none()) {
            let detail = format!("node {name} has no reboot_program in the config");
            return Err(Refusal::new(ErrorCode::RebootProgramUndefined, detail));
        }
        let now = now();
        let uid = who.caller.uid;
        for name in &names {
            let node = self.state.node_mut(name).expect("checked above");
            // Slurm skips the nodes whose reboot is already asked or under way.
            if node.reboot.is_some() {
                continue;
            }
            let drained = request.asap && node.drain_reason.is_none();
            if drained {
                node.drain_reason = Some(reason.unwrap_or(ASAP).to_owned());
                node.reason_set = Some((uid, now));
            }
            node.reboot = Some(Reboot {
                asap: request.asap,
                next_down: request.next_down,
                drained,
                reason: reason.unwrap_or(if request.asap { ASAP } else { REQUESTED }).to_owned(),
                issued: None,
            });
            tracing::info!(node = name, asap = request.asap, uid, "reboot requested");
            self.reboot_event(name, "reboot requested", uid, now);
        }
        self.schedule_needed = true;
        self.advance_reboots(now);
        Ok(())
    }

    fn cancel_reboot_checked(&mut self, who: Who, nodes: &str) -> Result<(), Refusal> {
        let names = self.reboot_nodes_named(who, nodes)?;
        let index = self.state.node_index();
        let issued =
            |name: &String| self.state.nodes()[index[name]].reboot.as_ref().is_some_and(|r| r.issued.is_some());
        if let Some(name) = names.iter().find(|n| issued(n)) {
            return Err(Refusal::new(ErrorCode::RebootInProgress, format!("node {name} is already rebooting")));
        }
        let now = now();
        for name in &names {
            let node = self.state.node_mut(name).expect("checked above");
            let Some(reboot) = node.reboot.take() else { continue };
            if reboot.drained {
                node.drain_reason = None;
            }
            self.reboot_event(name, "reboot cancelled", who.caller.uid, now);
        }
        self.schedule_needed = true;
        Ok(())
    }

    /// Each tick (and after a request): tells the nodes whose reboot waits and that run no job
    /// to reboot, and sets `DOWN` those not back within `resume_timeout`.
    pub(super) fn advance_reboots(&mut self, now: UnixTime) {
        let timeout = i64::from(self.state.config().resume_timeout);
        let mut issue = Vec::new();
        let mut late = Vec::new();
        for node in self.state.nodes() {
            let Some(reboot) = &node.reboot else { continue };
            match reboot.issued {
                Some(at) if now - at > timeout => late.push(node.config.name.clone()),
                Some(_) => {}
                None => {
                    let empty = node.cpus_alloc == 0 && node.gpus_alloc.is_empty() && node.mem_alloc_mb == 0;
                    if empty && node.responding && self.links.contains_key(&node.config.name) {
                        issue.push(node.config.name.clone());
                    }
                }
            }
        }
        for name in issue {
            let Some(link) = self.links.get(&name).cloned() else { continue };
            if link.tx.send(CtldMessage::Reboot).is_err() {
                continue;
            }
            if let Some(reboot) = self.state.node_mut(&name).and_then(|n| n.reboot.as_mut()) {
                reboot.issued = Some(now);
            }
            tracing::info!(node = name, "reboot issued");
            self.reboot_event(&name, "reboot issued", 0, now);
        }
        for name in late {
            let Some(node) = self.state.node_mut(&name) else { continue };
            node.reboot = None;
            node.down_reason = Some("reboot timed out".to_owned());
            node.reason_set = Some((0, now));
            tracing::warn!(node = name, "the node did not come back from its reboot in time; DOWN");
            self.reboot_event(&name, "down", 0, now);
        }
    }

    /// A node registered: a reboot issued before its noded started (`start_time`) is done.
    /// The node comes back in service, its `ASAP` drain lifted, or `DOWN` with `nextstate=DOWN`.
    pub(super) fn reboot_done(&mut self, name: &str, start_time: UnixTime) {
        let now = now();
        let Some(node) = self.state.node_mut(name) else { return };
        let Some(issued) = node.reboot.as_ref().and_then(|r| r.issued) else { return };
        if start_time < issued {
            return;
        }
        let Some(reboot) = node.reboot.take() else { return };
        if reboot.drained {
            node.drain_reason = None;
        }
        if reboot.next_down {
            node.down_reason = Some(reboot.reason);
            node.reason_set = Some((0, now));
        } else if node.drain_reason.is_none() && node.down_reason.is_none() {
            node.reason_set = None;
        }
        tracing::info!(node = name, "node back from its reboot");
        self.reboot_event(name, "rebooted", 0, now);
        self.schedule_needed = true;
    }

    /// Stores the node's flags and records `event` in its history.
    fn reboot_event(&mut self, name: &str, event: &str, uid: u32, now: UnixTime) {
        let reason = self.state.node_mut(name).and_then(|n| n.reboot.as_ref().map(|r| r.reason.clone()));
        self.record_node_event(NodeEvent {
            time: now,
            node: name.to_owned(),
            event: event.into(),
            uid,
            reason: reason.unwrap_or_default(),
            ..NodeEvent::default()
        });
        self.save_node_state(name);
    }
}

/// A pending reboot as stored with the node's flags: `FLAGS ISSUED REASON`, the flags three
/// digits (asap, next_down, drained), `ISSUED` 0 when not yet.
pub(crate) fn encode(reboot: &Reboot) -> String {
    format!(
        "{}{}{} {} {}",
        u8::from(reboot.asap),
        u8::from(reboot.next_down),
        u8::from(reboot.drained),
        reboot.issued.unwrap_or(0),
        reboot.reason
    )
}

/// [`encode`]'s inverse; `None` for text it did not write.
pub(crate) fn decode(text: &str) -> Option<Reboot> {
    let (flags, rest) = text.split_once(' ')?;
    let (issued, reason) = rest.split_once(' ').unwrap_or((rest, ""));
    let flag = |i: usize| flags.as_bytes().get(i).map(|b| *b == b'1');
    let issued: UnixTime = issued.parse().ok()?;
    Some(Reboot {
        asap: flag(0)?,
        next_down: flag(1)?,
        drained: flag(2)?,
        reason: reason.to_owned(),
        issued: (issued != 0).then_some(issued),
    })
}

#[cfg(test)]
mod tests {
    use super::{decode, encode};
    use crate::model::state::Reboot;

    #[test]
    fn stored_reboots_read_back() {
        for reboot in [
            Reboot { asap: true, next_down: false, drained: true, reason: "new kernel 6.1".into(), issued: None },
            Reboot { asap: false, next_down: true, drained: false, reason: String::new(), issued: Some(1_700_000_000) },
        ] {
            assert_eq!(decode(&encode(&reboot)), Some(reboot));
        }
        assert_eq!(decode("garbage"), None);
    }
}
