//! Nodes as ctld reports them: state, configured and allocated resources, GPUs.

use crate::UnixTime;
use serde::{Deserialize, Serialize};

/// A node's base state, Slurm's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeState {
    /// Never registered since ctld started.
    Unknown,
    Idle,
    Allocated,
    Mixed,
    Down,
}

impl NodeState {
    /// Long upper-case name (`IDLE`).
    pub fn long_name(self) -> &'static str {
        match self {
            NodeState::Unknown => "UNKNOWN",
            NodeState::Idle => "IDLE",
            NodeState::Allocated => "ALLOCATED",
            NodeState::Mixed => "MIXED",
            NodeState::Down => "DOWN",
        }
    }

    /// Compact lower-case name as sinfo prints it (`idle`, `alloc`).
    pub fn compact_name(self) -> &'static str {
        match self {
            NodeState::Unknown => "unk",
            NodeState::Idle => "idle",
            NodeState::Allocated => "alloc",
            NodeState::Mixed => "mix",
            NodeState::Down => "down",
        }
    }
}

/// One GPU of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuDevice {
    /// Index on the node (the `N` of `/dev/nvidiaN`).
    pub index: u32,
    /// GRES type (`h100`, `a100`, `1g.10gb`).
    pub gpu_type: String,
    /// Device UUID when known (NVML), empty otherwise.
    pub uuid: String,
}

/// What `sinfo` and `scontrol show node` know about one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub name: String,
    pub state: NodeState,
    /// Set when the node stopped answering heartbeats (`*` suffix, `+NOT_RESPONDING`).
    pub not_responding: bool,
    /// Drained by an admin (`+DRAIN`).
    pub drain: bool,
    pub reason: Option<String>,
    pub cpus: u32,
    pub cpus_alloc: u32,
    pub real_memory_mb: u64,
    pub mem_alloc_mb: u64,
    pub gpus: Vec<GpuDevice>,
    /// Indices of allocated GPUs.
    pub gpus_alloc: Vec<u32>,
    pub partitions: Vec<String>,
    /// Address noded registered from.
    pub address: String,
    pub boot_time: Option<UnixTime>,
    pub noded_start_time: Option<UnixTime>,
    pub last_busy_time: Option<UnixTime>,
    pub version: String,
    /// `scontrol reboot`: asked (`REBOOT_REQUESTED`, `@`) or sent to the node
    /// (`REBOOT_ISSUED`, `^`).
    pub reboot: Option<RebootState>,
}

/// Where a node's `scontrol reboot` stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RebootState {
    /// Waiting for the node's jobs to end.
    Requested,
    /// The node was told to run its reboot program; it has not registered since.
    Issued,
}

/// What `sinfo` and `scontrol show partition` know about one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionInfo {
    pub name: String,
    pub default: bool,
    pub up: bool,
    pub hidden: bool,
    pub max_time: crate::grammar::time::TimeLimit,
    pub default_time: Option<crate::grammar::time::TimeLimit>,
    pub max_nodes: Option<u32>,
    /// Node names in node-table order.
    pub nodes: Vec<String>,
    pub allow_accounts: Vec<String>,
    pub allow_qos: Vec<String>,
    pub priority_job_factor: u32,
    pub priority_tier: u32,
    pub total_cpus: u32,
    pub total_mem_mb: u64,
    pub total_gpus: u32,
}
