//! `sinfo --json`: Slurm's `v0.0.38_nodes_response`, one `v0.0.38_node` per node sinfo would
//! show (after `-n`, `-p`, `-t`, `-r`, `-d`), with every key of that schema.
//!
//! Filled from what sinfo fetches: name, address and host name, base state in lower case with
//! `DRAIN`, `NOT_RESPONDING` and `REBOOT_*` flags, CPUs (configured, allocated, idle), memory
//! (configured, allocated), GRES and GRES in use, TRES and TRES in use, partitions, reason with
//! who set it and when, boot and noded start times, version and features. Boards, sockets,
//! cores and threads say one board and socket with `cpus` cores of one thread; what Drover does
//! not track (load, free memory, temporary disk, ports, owner, …) is empty or zero.

use super::meta::{self, Plugin, time};
use crate::query::common;
use crate::query::sinfo::{Features, gres_string, gres_used_string, node_alloc_tres, node_tres};
use drover_shared::node::{NodeInfo, NodeState, RebootState};
use drover_shared::proto::client::NodeReason;
use serde_json::{Value, json};

/// What sinfo fetched besides the nodes themselves.
pub(crate) struct NodeContext<'a> {
    pub(crate) reasons: &'a [NodeReason],
    pub(crate) features: &'a Features,
}

/// The whole `sinfo --json` document for `nodes`.
pub(crate) fn document(nodes: &[NodeInfo], context: &NodeContext<'_>) -> Value {
    meta::response(Plugin::Slurmctld, "nodes", nodes.iter().map(|n| node(n, context)).collect())
}

/// One node's object.
pub(crate) fn node(node: &NodeInfo, context: &NodeContext<'_>) -> Value {
    meta::merge([identity(node, context), capacity(node), usage(node), reason(node, context.reasons), unknown()])
}

/// `gres_string`'s `(null)` is sinfo's text for none; the document has an empty string.
fn or_empty(text: String) -> String {
    if text == "(null)" { String::new() } else { text }
}

/// The base state as Slurm's node document names it (lower case).
fn base_state(node: &NodeInfo) -> String {
    node.state.long_name().to_ascii_lowercase()
}

/// The state flags Drover keeps, in Slurm's names.
fn state_flags(node: &NodeInfo) -> Vec<&'static str> {
    let mut flags = Vec::new();
    if node.drain {
        flags.push("DRAIN");
    }
    match node.reboot {
        Some(RebootState::Requested) => flags.push("REBOOT_REQUESTED"),
        Some(RebootState::Issued) => flags.push("REBOOT_ISSUED"),
        None => {}
    }
    if node.not_responding {
        flags.push("NOT_RESPONDING");
    }
    flags
}

fn identity(node: &NodeInfo, context: &NodeContext<'_>) -> Value {
    let features = context.features.get(&node.name).map(|f| f.join(",")).unwrap_or_default();
    json!({
        "name": node.name,
        "hostname": node.name,
        "address": node.address,
        "state": base_state(node),
        "state_flags": state_flags(node),
        "next_state_after_reboot": if node.reboot.is_some() { NodeState::Idle.long_name().to_ascii_lowercase() } else { String::new() },
        "next_state_after_reboot_flags": Vec::<String>::new(),
        "partitions": node.partitions,
        "features": features,
        "active_features": features,
        "boot_time": time(node.boot_time),
        "slurmd_start_time": time(node.noded_start_time),
        "slurmd_version": node.version,
    })
}

/// What the node has.
fn capacity(node: &NodeInfo) -> Value {
    json!({
        "boards": 1,
        "sockets": 1,
        "cores": node.cpus,
        "threads": 1,
        "cpus": node.cpus,
        "real_memory": node.real_memory_mb,
        "gres": or_empty(gres_string(node)),
        "tres": common::tres_string(&node_tres(node)),
        "weight": 1,
    })
}

/// What of it is in use.
fn usage(node: &NodeInfo) -> Value {
    json!({
        "alloc_cpus": node.cpus_alloc,
        "idle_cpus": node.cpus.saturating_sub(node.cpus_alloc),
        "alloc_memory": node.mem_alloc_mb,
        "gres_used": or_empty(gres_used_string(node)),
        "tres_used": common::tres_string(&node_alloc_tres(node)),
    })
}

/// Why the node is down or drained, who said so and when.
fn reason(node: &NodeInfo, reasons: &[NodeReason]) -> Value {
    let set = reasons.iter().find(|r| r.node == node.name);
    json!({
        "reason": node.reason.clone().unwrap_or_default(),
        "reason_changed_at": set.map_or(0, |r| r.time),
        "reason_set_by_user": set.map(|r| r.user.clone()).unwrap_or_default(),
    })
}

/// The keys Drover has no value for, with the schema's type.
fn unknown() -> Value {
    json!({
        "architecture": "",
        "burstbuffer_network_address": "",
        "cpu_binding": 0,
        "cpu_load": 0,
        "free_memory": 0,
        "gres_drained": "",
        "mcs_label": "",
        "operating_system": "",
        "owner": "",
        "port": 0,
        "temporary_disk": 0,
        "tres_weighted": 0.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::scenario;

    #[test]
    fn nodes_with_flags_reasons_and_gres() {
        let mut nodes = scenario::nodes();
        nodes[1].drain = true;
        nodes[1].reason = Some("disk".into());
        nodes[2].not_responding = true;
        nodes[3].gpus_alloc = vec![0];
        let reasons = vec![NodeReason {
            node: "n2".into(),
            reason: "disk".into(),
            uid: 0,
            user: "root".into(),
            time: scenario::at(10),
            owner: String::new(),
            ticket: None,
        }];
        let features = Features::from([("n1".to_owned(), vec!["a100".to_owned(), "ib".to_owned()])]);
        let document = document(&nodes, &NodeContext { reasons: &reasons, features: &features });
        assert_eq!(document["meta"]["Slurm"]["release"], "22.05.8");
        let list = document["nodes"].as_array().expect("a node list");
        assert_eq!(list.len(), 4);
        assert_eq!(list[0]["name"], "n1");
        assert_eq!(list[0]["state"], "allocated");
        assert_eq!(list[0]["state_flags"], json!([]));
        assert_eq!(list[0]["features"], "a100,ib");
        assert_eq!(list[0]["cpus"], 2);
        assert_eq!(list[0]["idle_cpus"], 0);
        assert_eq!(list[0]["real_memory"], 4000);
        assert_eq!(list[0]["alloc_memory"], 200);
        assert_eq!(list[0]["gres"], "gpu:1");
        assert_eq!(list[0]["tres"], "cpu=2,mem=4000M,billing=2,gres/gpu=1");
        assert_eq!(list[0]["partitions"], json!(["main", "teamA", "teamB"]));
        assert_eq!(list[0]["boot_time"], scenario::at(-1212));
        assert_eq!(list[1]["state_flags"], json!(["DRAIN"]));
        assert_eq!(list[1]["reason"], "disk");
        assert_eq!(list[1]["reason_set_by_user"], "root");
        assert_eq!(list[1]["reason_changed_at"], scenario::at(10));
        assert_eq!(list[2]["state_flags"], json!(["NOT_RESPONDING"]));
        assert_eq!(list[3]["gres_used"], "gpu:1(IDX:0)");
        assert_eq!(list[3]["tres_used"], "cpu=2,mem=200M,gres/gpu=1");
    }
}
