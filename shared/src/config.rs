//! The admin's one file, `cluster.toml`: cluster name, controller, nodes, partitions, accounts,
//! users and QOS. [`Config::load`] parses and validates it; every error names the file, line,
//! column and key path. Unknown keys are errors.
//!
//! The TOML structs ([`raw`]) are kept apart from the validated [`Config`] so that the rest of the
//! code never sees an unresolved reference (a partition naming a node that does not exist, say).
//!
//! A cluster home's file (`drover up` writes `<home>/cluster.toml`) is not a copy of the admin's
//! file but a short one that `include`s it and sets only what belongs to that home: ctld's
//! address, state directory and key file, and the user who runs the cluster as an admin. Every
//! load reads the admin's file afresh (relative paths in it resolve against its own directory),
//! so an edit there is what the next `scontrol reconfigure` applies.

use crate::grammar::time::{TimeLimit, parse_time_limit};
use crate::hostlist;
use crate::node::GpuDevice;
pub use sched::{FairShareAlgorithm, PriorityConfig};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// `pids.max` of a job's cgroup when the node set does not say: room for any real job, not for a
/// fork bomb.
pub const DEFAULT_JOB_PIDS_MAX: u32 = 4096;
/// Nodes one config may declare, all `[[nodes]]` sets together.
pub const MAX_CONFIG_NODES: usize = hostlist::MAX_HOSTS;
/// GPUs (or MIG instances) one node may declare.
pub const MAX_NODE_GPUS: u64 = 4096;

/// A config error with its place in the file.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {}", io_message(error))]
    Io { path: PathBuf, error: std::io::Error },
    /// A syntax, type or validation error at a place in the file.
    #[error("{path}:{line}:{column}: {key}: {message}")]
    Invalid { path: PathBuf, line: usize, column: usize, key: String, message: String },
}

fn io_message(error: &std::io::Error) -> String {
    crate::text::io_reason(error)
}

/// Raw TOML shapes, deserialized with `deny_unknown_fields`.
pub mod raw {
    use serde::Deserialize;
    use std::collections::BTreeMap;
    use toml::Spanned;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct File {
        pub cluster_name: Spanned<String>,
        pub controller: Controller,
        /// Account for users the file does not list; without it such users cannot submit.
        pub default_account: Option<Spanned<String>>,
        #[serde(default)]
        pub nodes: Vec<NodeSet>,
        #[serde(default)]
        pub partitions: Vec<Partition>,
        #[serde(default)]
        pub accounts: Vec<Account>,
        #[serde(default)]
        pub users: Vec<User>,
        #[serde(default)]
        pub qos: Vec<Qos>,
        /// Multifactor priority, fair share and backfill settings.
        #[serde(default)]
        pub priority: super::sched::RawPriority,
        /// Guaranteed team quotas with borrowing and reclaim.
        #[serde(default)]
        pub quotas: Vec<super::sched::RawQuota>,
        /// SPANK plugin stack file, relative to the config file; default `plugstack.conf` beside it.
        pub plugstack: Option<String>,
        /// Where commands on a node find its noded's token socket (`<noded --state-dir>/token.sock`).
        pub token_socket: Option<String>,
        /// Prometheus endpoint and status page.
        #[serde(default)]
        pub metrics: super::usage::RawMetrics,
        /// Usage rollup retention and GPU-hour prices.
        #[serde(default)]
        pub accounting: super::usage::RawAccounting,
        /// Automatic drains of nodes where jobs keep failing.
        #[serde(default)]
        pub incidents: super::incidents::RawIncidents,
        /// Team job templates.
        #[serde(default)]
        pub templates: Vec<toml::Spanned<super::templates::RawTemplate>>,
        /// Switches (or NVLink blocks) for topology-aware placement.
        #[serde(default)]
        pub topology: super::topology::RawTopology,
    }

    /// A cluster home's file: the admin's file it includes and the home's own settings.
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct HomeFile {
        /// The admin's config file, relative to this one.
        pub include: String,
        pub controller: HomeController,
    }

    /// `[controller]` of a cluster home's file.
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct HomeController {
        pub address: String,
        pub state_dir: String,
        pub key_file: String,
        /// Users added to the admin's `controller.admins` (the user who runs the cluster).
        #[serde(default)]
        pub admins: Vec<String>,
        /// The replicas `drover up --replicas N` runs; they replace the admin's file's.
        #[serde(default)]
        pub replicas: Vec<Replica>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Controller {
        /// TCP address nodes connect to.
        pub address: Spanned<String>,
        /// Database, socket and logs; relative paths are relative to the config file.
        pub state_dir: String,
        /// Cluster key; relative to the config file.
        #[serde(default = "default_key_file")]
        pub key_file: String,
        /// Seconds without a heartbeat before a node is `DOWN`.
        #[serde(default = "default_node_timeout")]
        pub node_timeout: u32,
        /// Seconds between SIGTERM and SIGKILL when a job is cancelled or times out.
        #[serde(default = "default_kill_wait")]
        pub kill_wait: u32,
        /// Seconds an ended job stays visible to `squeue`/`scontrol` before only `sacct` has it.
        #[serde(default = "default_min_job_age")]
        pub min_job_age: u32,
        /// Slurm's `MaxTasksPerNode`: the most tasks one step may start on one node (default 512,
        /// at most 65533).
        pub max_tasks_per_node: Option<Spanned<u32>>,
        /// Slurm's `PreemptExemptTime`: seconds a run must have run before a reclaim may
        /// preempt it.
        #[serde(default = "default_preempt_exempt_time")]
        pub preempt_exempt_time: u32,
        /// Users with the admin role (as `role = "admin"` on a user).
        #[serde(default)]
        pub admins: Vec<String>,
        /// Users with the operator role (as `role = "operator"` on a user).
        #[serde(default)]
        pub operators: Vec<String>,
        /// Slurm's `PrivateData`: what users see only of their own (`jobs`, `usage`, `accounts`,
        /// `users`); empty = everything is readable by everyone, Slurm's default.
        #[serde(default)]
        pub private_data: Vec<Spanned<String>>,
        /// Client connections one user may hold at once (root, operators and admins excepted).
        #[serde(default = "default_max_connections_per_user")]
        pub max_connections_per_user: u32,
        /// Seconds a client connection may stay silent after its hello or an answer.
        #[serde(default = "default_client_idle_timeout")]
        pub client_idle_timeout: u32,
        /// Slurm's `SlurmdParameters=config_overrides`: a node whose real CPUs or memory fall
        /// short of its declaration runs on by the declaration instead of being drained. Default:
        /// off, but on for a `drover up` cluster (its nodes share one host).
        pub config_overrides: Option<bool>,
        /// Replicated controllers (`[[controller.replicas]]`, see docs/admin/ha.md); empty = one
        /// embedded controller at `address`.
        #[serde(default)]
        pub replicas: Vec<Replica>,
        /// Hosts without a node daemon's node whose commands may reach ctld (login hosts that run
        /// `drover-noded --login`): host names or host lists (`login[1-4]`).
        #[serde(default)]
        pub login_hosts: Vec<Spanned<String>>,
    }

    /// One replica of a replicated controller.
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Replica {
        /// Its Raft node id (1 or more, unique).
        pub id: Spanned<u64>,
        /// TCP address nodes and remote clients connect to while it leads.
        pub address: Spanned<String>,
        /// TCP address the other replicas reach it at (Raft messages).
        pub raft_address: Spanned<String>,
        /// Its own database, Raft log and client socket; relative to the config file.
        pub state_dir: String,
    }

    fn default_key_file() -> String {
        "cluster.key".into()
    }
    fn default_node_timeout() -> u32 {
        30
    }
    fn default_kill_wait() -> u32 {
        30
    }
    fn default_min_job_age() -> u32 {
        300
    }
    fn default_preempt_exempt_time() -> u32 {
        120
    }
    fn default_max_connections_per_user() -> u32 {
        64
    }
    fn default_client_idle_timeout() -> u32 {
        60
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct NodeSet {
        /// A hostlist expression, `gpu[01-04]`.
        pub names: Spanned<String>,
        pub cpus: u32,
        /// Memory in megabytes (Slurm's `RealMemory`).
        pub real_memory: u64,
        /// GPUs by type: `{ h100 = 4 }`.
        #[serde(default)]
        pub gpus: BTreeMap<String, u32>,
        #[serde(default)]
        pub features: Vec<String>,
        /// Device files of each GPU type, gres.conf's `File=`: `{ h100 = "/dev/nvidia[0-3]" }`,
        /// one file per GPU of that type, in index order.
        #[serde(default)]
        pub gpu_files: BTreeMap<String, Spanned<String>>,
        /// `pids.max` of every job's cgroup on these nodes (default 4096).
        pub job_pids_max: Option<u32>,
        /// Slurm's `Prolog`: run as root with the job's environment before each job.
        pub prolog: Option<String>,
        /// Slurm's `Epilog`: run as root with the job's environment after each job.
        pub epilog: Option<String>,
        /// Slurm's `PrologEpilogTimeout`, seconds (default 60).
        pub prolog_epilog_timeout: Option<u32>,
        /// Slurm's `HealthCheckProgram`: a failure drains the node.
        pub health_check_program: Option<String>,
        /// Slurm's `HealthCheckInterval`, seconds (default 300).
        pub health_check_interval: Option<u32>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Partition {
        pub name: Spanned<String>,
        /// A hostlist expression naming configured nodes.
        pub nodes: Spanned<String>,
        #[serde(default)]
        pub default: bool,
        #[serde(default)]
        pub hidden: bool,
        /// `UNLIMITED` when absent.
        pub max_time: Option<Spanned<String>>,
        pub default_time: Option<Spanned<String>>,
        pub max_nodes: Option<u32>,
        /// Accounts allowed to use the partition; empty = all.
        #[serde(default)]
        pub allow_accounts: Vec<Spanned<String>>,
        #[serde(default)]
        pub allow_qos: Vec<Spanned<String>>,
        #[serde(default = "one")]
        pub priority_job_factor: u32,
        #[serde(default = "one")]
        pub priority_tier: u32,
        /// Memory per CPU for jobs that ask for none, megabytes.
        pub default_mem_per_cpu: Option<u64>,
        /// `TRESBillingWeights`: `"CPU=1.0,Mem=0.25G,GRES/gpu:h100=8"`.
        pub tres_billing_weights: Option<Spanned<String>>,
    }

    fn one() -> u32 {
        1
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Account {
        pub name: Spanned<String>,
        /// Parent account; `root` when absent.
        pub parent: Option<Spanned<String>>,
        #[serde(default = "one")]
        pub shares: u32,
        pub description: Option<String>,
        /// Association `GrpTRES` over the account's subtree: `"gres/gpu=8"`.
        pub grp_tres: Option<Spanned<String>>,
        /// Association `GrpJobs`.
        pub grp_jobs: Option<u32>,
        /// Association `GrpSubmitJobs`: pending plus running jobs of the account's subtree; more
        /// are refused at submit time (0 blocks the account).
        pub grp_submit_jobs: Option<u32>,
        /// Association `QOS`: the QOS the account's jobs may use (sub-accounts and users inherit
        /// it unless they set their own); absent on the whole chain = any QOS.
        pub qos: Option<Vec<Spanned<String>>>,
        /// Association `DefaultQOS`: the QOS of a job that names none (inherited likewise).
        pub default_qos: Option<Spanned<String>>,
        /// Jobs charged to the account must use a job template (`--template`).
        #[serde(default)]
        pub require_template: bool,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct User {
        pub name: Spanned<String>,
        pub default_account: Spanned<String>,
        /// More accounts the user may charge; the default account is always allowed.
        #[serde(default)]
        pub accounts: Vec<Spanned<String>>,
        /// Same as `role = "admin"`.
        #[serde(default)]
        pub admin: bool,
        /// `user` (default), `operator` or `admin`: what the user may do besides their own jobs.
        pub role: Option<Spanned<String>>,
        /// Association `QOS` of all the user's associations; overrides the accounts' lists.
        pub qos: Option<Vec<Spanned<String>>>,
        /// Association `DefaultQOS` of all the user's associations.
        pub default_qos: Option<Spanned<String>>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Qos {
        pub name: Spanned<String>,
        #[serde(default)]
        pub priority: u32,
        pub max_wall: Option<Spanned<String>>,
        /// `GrpTRES`: running TRES of all the QOS's jobs.
        pub grp_tres: Option<Spanned<String>>,
        /// `GrpJobs`: running jobs of the QOS.
        pub grp_jobs: Option<u32>,
        /// `MaxTRESPerUser`: running TRES of one user's jobs in the QOS.
        pub max_tres_per_user: Option<Spanned<String>>,
        /// `MaxTRESPerJob`: refused at submit time when exceeded.
        pub max_tres_per_job: Option<Spanned<String>>,
        /// `MaxJobsPerUser`: running jobs of one user in the QOS.
        pub max_jobs_per_user: Option<u32>,
        /// `MaxSubmitJobsPerUser`: pending plus running jobs of one user; more are refused.
        pub max_submit_jobs_per_user: Option<u32>,
        /// `PreemptMode` of the QOS's jobs when they are preempted: `requeue` (default) or `cancel`.
        pub preempt_mode: Option<Spanned<String>>,
        /// `GraceTime`: seconds between SIGTERM and SIGKILL for a preempted job.
        pub grace_time: Option<u32>,
        /// `PreemptExemptTime` of the QOS's jobs: seconds a run is safe from reclaim after it
        /// starts (default: `[controller] preempt_exempt_time`).
        pub preempt_exempt_time: Option<u32>,
    }
}

/// One configured node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    pub name: String,
    pub cpus: u32,
    pub real_memory_mb: u64,
    /// GPUs numbered from 0 in type order, as noded reports them when it has no NVML.
    pub gpus: Vec<GpuDevice>,
    pub features: Vec<String>,
    /// The device file of each GPU, in `gpus` order; empty when the config names none.
    pub gpu_files: Vec<PathBuf>,
    /// `pids.max` of every job's cgroup.
    pub job_pids_max: u32,
    pub prolog: Option<PathBuf>,
    pub epilog: Option<PathBuf>,
    /// Seconds a prolog or epilog may run.
    pub prolog_epilog_timeout: u32,
    pub health_check_program: Option<PathBuf>,
    /// Seconds between health checks.
    pub health_check_interval: u32,
}

/// One configured partition, with its nodes resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionConfig {
    pub name: String,
    /// Node names in node-table order.
    pub nodes: Vec<String>,
    pub default: bool,
    pub hidden: bool,
    pub max_time: TimeLimit,
    pub default_time: Option<TimeLimit>,
    pub max_nodes: Option<u32>,
    pub allow_accounts: Vec<String>,
    pub allow_qos: Vec<String>,
    pub priority_job_factor: u32,
    pub priority_tier: u32,
    pub default_mem_per_cpu: Option<u64>,
    /// TRES name → billing weight per unit (memory per MB); empty = bill allocated CPUs.
    pub tres_billing_weights: sched::TresWeights,
}

/// One account of the tree. Also what ctld stores of an account `sacctmgr` created or changed
/// (a postcard blob, `crate::sacctmgr::edit`): its fields change append-only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountConfig {
    pub name: String,
    /// `None` only for `root`.
    pub parent: Option<String>,
    pub shares: u32,
    /// TRES name → count; empty = no limit.
    pub grp_tres: BTreeMap<String, u64>,
    pub grp_jobs: Option<u32>,
    /// The QOS its jobs may use; `None` = inherited from the parent (any QOS at the top).
    pub qos: Option<Vec<String>>,
    /// The QOS of a job that names none; `None` = inherited.
    pub default_qos: Option<String>,
    /// Jobs charged to it must use a job template.
    pub require_template: bool,
    /// `GrpSubmitJobs`: pending plus running jobs of its subtree; more are refused.
    pub grp_submit_jobs: Option<u32>,
}

impl AccountConfig {
    /// An account with no limits, QOS list or template requirement, and one share.
    pub fn new(name: &str, parent: Option<&str>) -> AccountConfig {
        AccountConfig {
            name: name.to_owned(),
            parent: parent.map(str::to_owned),
            shares: 1,
            grp_tres: BTreeMap::new(),
            grp_jobs: None,
            qos: None,
            default_qos: None,
            require_template: false,
            grp_submit_jobs: None,
        }
    }
}

/// One user's associations. Stored like [`AccountConfig`] when `sacctmgr` changed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserConfig {
    pub name: String,
    pub default_account: String,
    pub accounts: Vec<String>,
    pub role: Role,
    /// The QOS the user's jobs may use in any account; `None` = the account's.
    pub qos: Option<Vec<String>>,
    /// The QOS of the user's jobs that name none; `None` = the account's.
    pub default_qos: Option<String>,
    /// Limits of the user's association with an account, by account (set with sacctmgr; the
    /// file has none): absent = no limits, one share.
    pub limits: BTreeMap<String, AssocLimits>,
}

/// Slurm's limits on one user's association with one account.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssocLimits {
    /// `Fairshare`: the association's shares among its account's children; `None` = 1.
    pub shares: Option<u32>,
    /// `MaxJobs` (`GrpJobs` of the association is the same count): its running jobs.
    pub max_jobs: Option<u32>,
    /// `MaxSubmitJobs` (or `GrpSubmitJobs`): its pending plus running jobs; more are refused.
    pub max_submit_jobs: Option<u32>,
    /// `GrpTRES`: the TRES its running jobs hold together.
    pub grp_tres: BTreeMap<String, u64>,
    /// `MaxTRES`: what one job may ask (more is refused at submit time).
    pub max_tres_per_job: BTreeMap<String, u64>,
}

impl UserConfig {
    /// The limits of the user's association with `account` (none when unset).
    pub fn limits_in(&self, account: &str) -> Option<&AssocLimits> {
        self.limits.get(account)
    }
}

/// What a user may do beyond their own jobs, Slurm's `AdminLevel`: operators act on any job and
/// drain or resume nodes; admins also reconfigure the controller.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Role {
    #[default]
    User,
    Operator,
    Admin,
}

impl Role {
    /// The TOML spelling.
    pub fn name(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(text: &str) -> Option<Role> {
        [Role::User, Role::Operator, Role::Admin].into_iter().find(|r| r.name() == text)
    }
}

/// Slurm's `PrivateData`: which records plain users see only of their own. Operators and admins
/// always see everything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrivateData {
    /// Jobs of other users are left out of `squeue`, `scontrol show job`, `sacct`, `drover why`.
    pub jobs: bool,
    /// `sshare`, `sreport` and `drover report` show only the caller's own usage.
    pub usage: bool,
    /// `sacctmgr` lists only the caller's own accounts.
    pub accounts: bool,
    /// `sacctmgr` lists only the caller's own user.
    pub users: bool,
}

impl PrivateData {
    /// The values the config accepts, in Slurm's spelling (lower case).
    pub const VALUES: [&'static str; 4] = ["jobs", "usage", "accounts", "users"];
}

/// One QOS. Stored like [`AccountConfig`] when `sacctmgr` changed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosConfig {
    pub name: String,
    pub priority: u32,
    pub max_wall: Option<TimeLimit>,
    /// TRES name → count for each limit; empty = no limit.
    pub grp_tres: BTreeMap<String, u64>,
    pub grp_jobs: Option<u32>,
    pub max_tres_per_user: BTreeMap<String, u64>,
    pub max_tres_per_job: BTreeMap<String, u64>,
    pub max_jobs_per_user: Option<u32>,
    pub max_submit_jobs_per_user: Option<u32>,
    /// Whether a preempted job is requeued (else cancelled, state `PREEMPTED`).
    pub preempt_requeue: bool,
    /// Seconds between SIGTERM and SIGKILL when preempted; `None` = the controller's `kill_wait`.
    pub grace_time: Option<u32>,
    /// Seconds a run of this QOS is safe from reclaim after it starts; `None` = the controller's
    /// `preempt_exempt_time`.
    pub preempt_exempt_time: Option<u32>,
}

impl QosConfig {
    /// A QOS with no limits and priority 0, its jobs requeued when preempted.
    pub fn new(name: &str) -> QosConfig {
        QosConfig {
            name: name.to_owned(),
            priority: 0,
            max_wall: None,
            grp_tres: BTreeMap::new(),
            grp_jobs: None,
            max_tres_per_user: BTreeMap::new(),
            max_tres_per_job: BTreeMap::new(),
            max_jobs_per_user: None,
            max_submit_jobs_per_user: None,
            preempt_requeue: true,
            grace_time: None,
            preempt_exempt_time: None,
        }
    }
}

/// Slurm's default `MaxTasksPerNode`.
pub const DEFAULT_MAX_TASKS_PER_NODE: u32 = 512;

/// What a cluster home's file sets over the admin's file it includes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HomeSettings {
    pub address: String,
    pub state_dir: PathBuf,
    pub key_file: PathBuf,
    pub admins: Vec<String>,
    /// `drover up --replicas N`'s replicas; empty = the admin's file's (usually none).
    pub replicas: Vec<Replica>,
}

/// The most login hosts `[controller] login_hosts` may name.
pub const MAX_LOGIN_HOSTS: usize = 4096;

/// Where commands on a node look for noded's token socket when the config does not say:
/// `token.sock` in noded's default state directory.
pub const DEFAULT_TOKEN_SOCKET: &str = "/var/spool/drover/token.sock";

/// One replica of a replicated controller (`[[controller.replicas]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replica {
    pub id: u64,
    /// Where nodes and remote clients reach it while it leads.
    pub address: String,
    /// Where the other replicas reach it.
    pub raft_address: String,
    pub state_dir: PathBuf,
}

/// The validated cluster configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it was loaded from (a cluster home's file, or the admin's file itself).
    pub path: PathBuf,
    /// The admin's file the settings come from: `path`, or the file a home's file includes.
    pub source: PathBuf,
    /// What the cluster home's file set over `source`; `None` when `path` is the admin's file.
    pub home: Option<HomeSettings>,
    pub cluster_name: String,
    pub controller_address: String,
    pub state_dir: PathBuf,
    /// `[[controller.replicas]]`: empty for one embedded controller (the default).
    pub replicas: Vec<Replica>,
    /// `[controller] login_hosts`, expanded: hosts whose commands ctld accepts tokens from
    /// besides the nodes and controller hosts (see `docs/admin/configless.md`).
    pub login_hosts: Vec<String>,
    /// The admin's file as it was read (`source`'s text): what ctld serves to configless nodes
    /// and login hosts.
    pub source_text: std::sync::Arc<str>,
    pub key_file: PathBuf,
    pub node_timeout: u32,
    pub kill_wait: u32,
    pub min_job_age: u32,
    /// `[controller] preempt_exempt_time`: seconds a run is safe from reclaim after it starts.
    pub preempt_exempt_time: u32,
    /// `[controller] max_connections_per_user` (at least 1).
    pub max_connections_per_user: u32,
    /// `[controller] client_idle_timeout`, seconds (at least 1).
    pub client_idle_timeout: u32,
    /// `[controller] config_overrides` as the file sets it (see [`Config::config_overrides`]).
    pub config_overrides_set: Option<bool>,
    /// Slurm's `MaxTasksPerNode`: the most tasks of one step on one node.
    pub max_tasks_per_node: u32,
    pub admins: Vec<String>,
    pub operators: Vec<String>,
    /// `controller.private_data`.
    pub private_data: PrivateData,
    pub default_account: Option<String>,
    /// Node table order.
    pub nodes: Vec<NodeConfig>,
    /// File order; exactly one has `default`.
    pub partitions: Vec<PartitionConfig>,
    /// `root` first, then file order.
    pub accounts: Vec<AccountConfig>,
    pub users: Vec<UserConfig>,
    pub qos: Vec<QosConfig>,
    /// Multifactor priority and backfill settings.
    pub priority: PriorityConfig,
    /// Guaranteed quotas, file order.
    pub quotas: Vec<sched::QuotaConfig>,
    /// The SPANK plugin stack file (`plugstack.conf`); a missing file is an empty stack.
    pub plugstack: PathBuf,
    /// noded's token socket on this host, for commands where ctld's socket is not.
    pub token_socket: PathBuf,
    /// `[metrics]`: the HTTP listener for Prometheus text and the status page.
    pub metrics: usage::MetricsConfig,
    /// `[accounting]`: usage retention and GPU-hour prices.
    pub accounting: usage::AccountingConfig,
    /// `[incidents]`: automatic drains of nodes where jobs keep failing.
    pub incidents: incidents::IncidentConfig,
    /// `[[templates]]`: team job templates, file order.
    pub templates: Vec<templates::TemplateConfig>,
    /// `[[topology.switches]]`: the switch tree multi-node jobs are placed under.
    pub topology: topology::Topology,
}

impl Config {
    /// Reads and validates a config file: the admin's file, or a cluster home's file and the
    /// admin's file it includes.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = read(path)?;
        if !is_home_file(&text) {
            return Config::parse(path, &text);
        }
        let home: raw::HomeFile = deserialize(path, &text)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let source = dir.join(&home.include);
        let source_text = read(&source)?;
        if is_home_file(&source_text) {
            return Err(ConfigError::Invalid {
                path: path.to_owned(),
                line: 1,
                column: 1,
                key: "include".into(),
                message: format!("{} is itself a cluster home's file; include the admin's file", source.display()),
            });
        }
        let mut config = Config::parse(&source, &source_text)?;
        let controller = home.controller;
        let settings = HomeSettings {
            address: controller.address,
            state_dir: dir.join(controller.state_dir),
            key_file: dir.join(controller.key_file),
            admins: controller.admins,
            replicas: Validator { path, text: &text }.replicas(&controller.replicas)?,
        };
        config.apply_home(path, settings);
        Ok(config)
    }

    /// Reads the configuration again, as `scontrol reconfigure` does: [`Config::load`] of the
    /// same file. A cluster home's file that is gone (deleted by hand) is not needed: the admin's
    /// file is read and the home's settings are the ones in force.
    /// A replica's config (see [`Config::select_replica`]) stays that replica's, also when the
    /// file no longer lists it.
    pub fn reload(&self) -> Result<Config, ConfigError> {
        let mut config = match &self.home {
            Some(home) if !self.path.exists() => {
                let mut config = Config::load(&self.source)?;
                config.apply_home(&self.path, home.clone());
                config
            }
            _ => Config::load(&self.path)?,
        };
        // A replica removed from the file (docs/admin/ha.md) runs on as itself until the
        // membership no longer has it.
        match self.selected_replica() {
            Some(id) if config.select_replica(id).is_ok() => {}
            Some(_) => {
                config.controller_address = self.controller_address.clone();
                config.state_dir = self.state_dir.clone();
            }
            None => {}
        }
        Ok(config)
    }

    /// The replica this config was selected for, if any.
    fn selected_replica(&self) -> Option<u64> {
        self.replicas
            .iter()
            .find(|r| r.address == self.controller_address && r.state_dir == self.state_dir)
            .map(|r| r.id)
    }

    /// Puts a cluster home's settings over the admin's file's.
    fn apply_home(&mut self, path: &Path, home: HomeSettings) {
        self.path = path.to_owned();
        self.controller_address = home.address.clone();
        self.state_dir = home.state_dir.clone();
        self.key_file = home.key_file.clone();
        if !home.replicas.is_empty() {
            self.replicas = home.replicas.clone();
        }
        for admin in &home.admins {
            if !self.admins.contains(admin) {
                self.admins.push(admin.clone());
            }
        }
        self.home = Some(home);
    }

    /// Parses and validates config text; `path` locates relative paths and errors.
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let file: raw::File = deserialize(path, text)?;
        Validator { path, text }.validate(file)
    }

    /// The partition jobs go to when they name none.
    pub fn default_partition(&self) -> &PartitionConfig {
        self.partitions.iter().find(|p| p.default).expect("validation guarantees a default partition")
    }

    /// The Unix socket clients use.
    pub fn client_socket(&self) -> PathBuf {
        self.state_dir.join("ctld.sock")
    }

    /// Every client socket a command may try, in order: each replica's, or the one controller's.
    pub fn client_sockets(&self) -> Vec<PathBuf> {
        if self.replicas.is_empty() {
            return vec![self.client_socket()];
        }
        self.replicas.iter().map(|r| r.state_dir.join("ctld.sock")).collect()
    }

    /// Every address nodes and remote clients may try, in order: each replica's, or the one
    /// controller's.
    pub fn controller_addresses(&self) -> Vec<String> {
        if self.replicas.is_empty() {
            return vec![self.controller_address.clone()];
        }
        self.replicas.iter().map(|r| r.address.clone()).collect()
    }

    /// Whether a node's declaration wins over its real hardware (Slurm's `config_overrides`):
    /// as the file sets it, else only for a cluster home's file (`drover up`, whose nodes are one
    /// host's processes).
    pub fn config_overrides(&self) -> bool {
        self.config_overrides_set.unwrap_or(self.home.is_some())
    }

    /// Makes this config the one replica `id` runs with: its node address and state directory.
    pub fn select_replica(&mut self, id: u64) -> Result<(), String> {
        let Some(replica) = self.replicas.iter().find(|r| r.id == id) else {
            let ids: Vec<String> = self.replicas.iter().map(|r| r.id.to_string()).collect();
            return Err(if ids.is_empty() {
                format!("replica {id}: the config lists no [[controller.replicas]]")
            } else {
                format!("replica {id} is not in [[controller.replicas]] (ids: {})", ids.join(", "))
            });
        };
        self.controller_address = replica.address.clone();
        self.state_dir = replica.state_dir.clone();
        Ok(())
    }

    /// The role of the user called `name`: the highest of `controller.admins`,
    /// `controller.operators` and the user's own `role`/`admin`. `root` is always an admin.
    pub fn role_of(&self, name: &str) -> Role {
        let listed = if name == "root" || self.admins.iter().any(|a| a == name) {
            Role::Admin
        } else if self.operators.iter().any(|o| o == name) {
            Role::Operator
        } else {
            Role::User
        };
        let own = self.users.iter().find(|u| u.name == name).map_or(Role::User, |u| u.role);
        listed.max(own)
    }

    /// The QOS a job of `user` charging `account` may use (Slurm's association QOS list): the
    /// user's own `qos`, else that of the nearest account up the tree that sets one; `None` when
    /// nothing on the chain restricts (any QOS).
    pub fn allowed_qos(&self, user: Option<&str>, account: &str) -> Option<&[String]> {
        let user = user.and_then(|name| self.users.iter().find(|u| u.name == name));
        user.and_then(|u| u.qos.as_deref()).or_else(|| self.account_chain(account).find_map(|a| a.qos.as_deref()))
    }

    /// The QOS of a job of `user` charging `account` that names none (Slurm's `DefaultQOS`): the
    /// nearest `default_qos` on the chain when the association allows it, else `normal` when it
    /// is allowed, else the first QOS of the association's list.
    pub fn default_qos(&self, user: Option<&str>, account: &str) -> &str {
        let allowed = self.allowed_qos(user, account);
        let permitted = |name: &str| allowed.is_none_or(|list| list.iter().any(|q| q == name));
        let user = user.and_then(|name| self.users.iter().find(|u| u.name == name));
        let configured = user
            .and_then(|u| u.default_qos.as_deref())
            .or_else(|| self.account_chain(account).find_map(|a| a.default_qos.as_deref()));
        match (configured, allowed) {
            (Some(name), _) if permitted(name) => name,
            (_, Some([first, ..])) if !permitted("normal") => first,
            _ => "normal",
        }
    }

    /// `account` and its ancestors up to `root`, nearest first.
    fn account_chain<'a>(&'a self, account: &str) -> impl Iterator<Item = &'a AccountConfig> + 'a {
        let mut next = self.accounts.iter().find(|a| a.name == account);
        let mut steps = self.accounts.len();
        std::iter::from_fn(move || {
            let current = next.filter(|_| steps > 0)?;
            steps -= 1;
            next = current.parent.as_deref().and_then(|p| self.accounts.iter().find(|a| a.name == p));
            Some(current)
        })
    }

    /// Looks a node up by name.
    pub fn node(&self, name: &str) -> Option<&NodeConfig> {
        self.nodes.iter().find(|n| n.name == name)
    }
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|error| ConfigError::Io { path: path.to_owned(), error })
}

/// Whether config text is a cluster home's file (it has a top-level `include`).
fn is_home_file(text: &str) -> bool {
    toml::from_str::<toml::Table>(text).is_ok_and(|table| table.contains_key("include"))
}

/// Deserializes TOML text; errors name `path`, line, column and key.
fn deserialize<T: serde::de::DeserializeOwned>(path: &Path, text: &str) -> Result<T, ConfigError> {
    let locate = |span: Option<std::ops::Range<usize>>, key: String, message: String| {
        let (line, column) = line_column(text, span.map_or(0, |s| s.start));
        ConfigError::Invalid { path: path.to_owned(), line, column, key, message }
    };
    let deserializer =
        toml::Deserializer::parse(text).map_err(|e| locate(e.span(), "(syntax)".into(), e.message().to_owned()))?;
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let key = e.path().to_string();
        let inner = e.into_inner();
        locate(inner.span(), key, inner.message().to_owned())
    })
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

struct Validator<'a> {
    path: &'a Path,
    text: &'a str,
}

type Spanned<T> = toml::Spanned<T>;

impl Validator<'_> {
    fn error<T>(&self, spanned: &Spanned<T>, key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        let (line, column) = line_column(self.text, spanned.span().start);
        ConfigError::Invalid { path: self.path.to_owned(), line, column, key: key.into(), message: message.into() }
    }

    /// `[controller] login_hosts`: host names or host lists, [`MAX_LOGIN_HOSTS`] names in all.
    fn login_hosts(&self, raw: &[Spanned<String>]) -> Result<Vec<String>, ConfigError> {
        let mut hosts: Vec<String> = Vec::new();
        for (i, expr) in raw.iter().enumerate() {
            let key = format!("controller.login_hosts[{i}]");
            let room = MAX_LOGIN_HOSTS.saturating_sub(hosts.len());
            let names = crate::hostlist::expand_at_most(expr.get_ref(), room).map_err(|e| {
                self.error(expr, key.clone(), format!("{e} (at most {MAX_LOGIN_HOSTS} login hosts in all)"))
            })?;
            if let Some(bad) = names.iter().find(|n| n.is_empty() || n.len() > 64 || n.contains(['/', ' ', ','])) {
                return Err(self.error(expr, key, format!("`{bad}` is not a host name")));
            }
            for name in names {
                if !hosts.contains(&name) {
                    hosts.push(name);
                }
            }
        }
        Ok(hosts)
    }

    /// `[[controller.replicas]]`: none, or at least three with unique ids, addresses and state
    /// directories.
    fn replicas(&self, raw: &[raw::Replica]) -> Result<Vec<Replica>, ConfigError> {
        let mut replicas: Vec<Replica> = Vec::new();
        for (i, r) in raw.iter().enumerate() {
            let key = |field: &str| format!("controller.replicas[{i}].{field}");
            if *r.id.get_ref() == 0 {
                return Err(self.error(&r.id, key("id"), "replica ids start at 1"));
            }
            for (value, field) in [(&r.address, "address"), (&r.raft_address, "raft_address")] {
                if value.get_ref().parse::<std::net::SocketAddr>().is_err() {
                    return Err(self.error(value, key(field), "expected an IP address and port, e.g. 10.0.0.1:6817"));
                }
            }
            let replica = Replica {
                id: *r.id.get_ref(),
                address: r.address.get_ref().clone(),
                raft_address: r.raft_address.get_ref().clone(),
                state_dir: self.relative(&r.state_dir),
            };
            if let Some(other) = replicas.iter().find(|o| o.id == replica.id) {
                return Err(self.error(&r.id, key("id"), format!("replica id {} is used twice", other.id)));
            }
            let addresses = [&replica.address, &replica.raft_address];
            if replica.address == replica.raft_address
                || replicas.iter().any(|o| addresses.contains(&&o.address) || addresses.contains(&&o.raft_address))
            {
                return Err(self.error(&r.address, key("address"), "every replica needs its own two addresses"));
            }
            if replicas.iter().any(|o| o.state_dir == replica.state_dir) {
                return Err(self.error(&r.address, key("state_dir"), "every replica needs its own state directory"));
            }
            replicas.push(replica);
        }
        if let Some(first) = raw.first()
            && replicas.len() < 3
        {
            return Err(self.error(
                &first.id,
                "controller.replicas",
                "list at least three replicas (fewer survive no failure), or none for one controller",
            ));
        }
        Ok(replicas)
    }

    fn relative(&self, value: &str) -> PathBuf {
        let p = Path::new(value);
        if p.is_absolute() { p.to_owned() } else { self.path.parent().unwrap_or(Path::new(".")).join(p) }
    }

    fn time(&self, value: &Option<Spanned<String>>, key: String) -> Result<Option<TimeLimit>, ConfigError> {
        value
            .as_ref()
            .map(|v| parse_time_limit(v.get_ref()).map_err(|e| self.error(v, key.clone(), e.to_string())))
            .transpose()
    }

    fn tres(&self, value: &Option<Spanned<String>>, key: String) -> Result<BTreeMap<String, u64>, ConfigError> {
        match value {
            Some(v) => sched::parse_tres_limits(v.get_ref()).map_err(|e| self.error(v, key, e)),
            None => Ok(BTreeMap::new()),
        }
    }

    fn name_ok(&self, name: &Spanned<String>, key: String) -> Result<String, ConfigError> {
        let n = name.get_ref();
        let valid =
            !n.is_empty() && n.len() <= 64 && n.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
        if !valid {
            return Err(self.error(name, key, format!("`{n}` is not a valid name (letters, digits, `_`, `-`, `.`)")));
        }
        Ok(n.clone())
    }

    /// An association's `qos` list and `default_qos`: every name a configured QOS, and the default
    /// one of the list when both are given (Slurm refuses a default outside the list too).
    fn association_qos(
        &self,
        known: &[QosConfig],
        list: Option<&[Spanned<String>]>,
        default: Option<&Spanned<String>>,
        key: &str,
    ) -> Result<(Option<Vec<String>>, Option<String>), ConfigError> {
        let known_name = |q: &Spanned<String>, key: String| {
            if known.iter().any(|k| &k.name == q.get_ref()) {
                Ok(q.get_ref().clone())
            } else {
                Err(self.error(q, key, format!("unknown QOS `{}`", q.get_ref())))
            }
        };
        let names: Option<Vec<String>> = list
            .map(|l| l.iter().enumerate().map(|(j, q)| known_name(q, format!("{key}.qos[{j}]"))).collect())
            .transpose()?;
        let default_name = default.map(|d| known_name(d, format!("{key}.default_qos"))).transpose()?;
        if let (Some(names), Some(name), Some(spanned)) = (&names, &default_name, default)
            && !names.contains(name)
        {
            return Err(self.error(
                spanned,
                format!("{key}.default_qos"),
                format!("`{name}` is not in the `qos` list"),
            ));
        }
        Ok((names, default_name))
    }

    /// A node set's GPU device files in GPU index order: every type with GPUs names exactly one
    /// file per GPU, or no type names any.
    fn gpu_files(&self, set: &raw::NodeSet, i: usize) -> Result<Vec<PathBuf>, ConfigError> {
        let mut files = Vec::new();
        for (gpu_type, expr) in &set.gpu_files {
            let key = format!("nodes[{i}].gpu_files.{gpu_type}");
            let Some(&count) = set.gpus.get(gpu_type) else {
                return Err(self.error(expr, key, format!("no GPUs of type `{gpu_type}` are declared")));
            };
            let paths = hostlist::expand(expr.get_ref()).map_err(|e| self.error(expr, key.clone(), e.to_string()))?;
            if paths.len() != usize::try_from(count).unwrap_or(usize::MAX) {
                return Err(self.error(
                    expr,
                    key,
                    format!("names {} files for {count} GPUs of type `{gpu_type}`", paths.len()),
                ));
            }
            if let Some(path) = paths.iter().find(|path| !path.starts_with('/')) {
                return Err(self.error(expr, key, format!("`{path}` is not an absolute path")));
            }
            files.extend(paths.into_iter().map(PathBuf::from));
        }
        if let Some((gpu_type, _)) =
            set.gpus.iter().find(|(gpu_type, count)| **count > 0 && !set.gpu_files.contains_key(*gpu_type))
            && let Some((_, expr)) = set.gpu_files.iter().next()
        {
            return Err(self.error(
                expr,
                format!("nodes[{i}].gpu_files"),
                format!("names no files for the GPUs of type `{gpu_type}`"),
            ));
        }
        Ok(files)
    }

    fn validate(&self, file: raw::File) -> Result<Config, ConfigError> {
        let cluster_name = self.name_ok(&file.cluster_name, "cluster_name".into())?;
        let address = &file.controller.address;
        if address.get_ref().parse::<std::net::SocketAddr>().is_err() {
            return Err(self.error(
                address,
                "controller.address",
                "expected an IP address and port, e.g. 127.0.0.1:6817",
            ));
        }

        let mut nodes = Vec::new();
        let mut node_index = HashMap::new();
        for (i, set) in file.nodes.iter().enumerate() {
            let key = format!("nodes[{i}].names");
            let names = hostlist::expand(set.names.get_ref())
                .map_err(|e| self.error(&set.names, key.clone(), e.to_string()))?;
            if nodes.len() + names.len() > MAX_CONFIG_NODES {
                let detail = format!("the config declares more than {MAX_CONFIG_NODES} nodes");
                return Err(self.error(&set.names, key, detail));
            }
            if set.gpus.values().map(|n| u64::from(*n)).sum::<u64>() > MAX_NODE_GPUS {
                let detail = format!("a node may have at most {MAX_NODE_GPUS} GPUs");
                return Err(self.error(&set.names, format!("nodes[{i}].gpus"), detail));
            }
            if set.cpus == 0 {
                return Err(self.error(&set.names, format!("nodes[{i}].cpus"), "a node needs at least one CPU"));
            }
            let gpu_files = self.gpu_files(set, i)?;
            for name in names {
                if node_index.insert(name.clone(), nodes.len()).is_some() {
                    return Err(self.error(&set.names, key, format!("node `{name}` is defined twice")));
                }
                let mut gpus = Vec::new();
                for (gpu_type, count) in &set.gpus {
                    for _ in 0..*count {
                        let index = u32::try_from(gpus.len()).unwrap_or(u32::MAX);
                        gpus.push(GpuDevice { index, gpu_type: gpu_type.clone(), uuid: String::new() });
                    }
                }
                nodes.push(NodeConfig {
                    name,
                    cpus: set.cpus,
                    real_memory_mb: set.real_memory,
                    gpus,
                    features: set.features.clone(),
                    gpu_files: gpu_files.clone(),
                    job_pids_max: set.job_pids_max.unwrap_or(DEFAULT_JOB_PIDS_MAX),
                    prolog: set.prolog.as_deref().map(|path| self.relative(path)),
                    epilog: set.epilog.as_deref().map(|path| self.relative(path)),
                    prolog_epilog_timeout: set.prolog_epilog_timeout.unwrap_or(60),
                    health_check_program: set.health_check_program.as_deref().map(|path| self.relative(path)),
                    health_check_interval: set.health_check_interval.unwrap_or(300).max(1),
                });
            }
        }

        let mut accounts = vec![AccountConfig::new("root", None)];
        let mut account_names: BTreeMap<String, usize> = BTreeMap::from([("root".to_owned(), 0)]);
        for (i, account) in file.accounts.iter().enumerate() {
            let name = self.name_ok(&account.name, format!("accounts[{i}].name"))?;
            if account_names.insert(name.clone(), accounts.len()).is_some() {
                return Err(self.error(
                    &account.name,
                    format!("accounts[{i}].name"),
                    format!("account `{name}` is defined twice"),
                ));
            }
            accounts.push(AccountConfig {
                name,
                parent: Some(account.parent.as_ref().map_or_else(|| "root".to_owned(), |p| p.get_ref().clone())),
                shares: account.shares,
                grp_tres: self.tres(&account.grp_tres, format!("accounts[{i}].grp_tres"))?,
                grp_jobs: account.grp_jobs,
                qos: None,
                default_qos: None,
                require_template: account.require_template,
                grp_submit_jobs: account.grp_submit_jobs,
            });
        }
        for (i, account) in file.accounts.iter().enumerate() {
            if let Some(parent) = &account.parent
                && !account_names.contains_key(parent.get_ref())
            {
                return Err(self.error(
                    parent,
                    format!("accounts[{i}].parent"),
                    format!("unknown account `{}`", parent.get_ref()),
                ));
            }
        }
        // The tree must be acyclic: walking up from any account reaches root.
        for (i, account) in accounts.iter().enumerate().skip(1) {
            let mut current = account.parent.clone();
            let mut steps = 0;
            while let Some(parent) = current {
                if parent == "root" {
                    break;
                }
                steps += 1;
                if steps > accounts.len() {
                    let raw = &file.accounts[i - 1];
                    return Err(self.error(&raw.name, format!("accounts[{}].parent", i - 1), "accounts form a cycle"));
                }
                current = accounts[account_names[&parent]].parent.clone();
            }
        }
        let account_known = |a: &Spanned<String>, key: String| -> Result<String, ConfigError> {
            if account_names.contains_key(a.get_ref()) {
                Ok(a.get_ref().clone())
            } else {
                Err(self.error(a, key, format!("unknown account `{}`", a.get_ref())))
            }
        };

        let mut qos = Vec::new();
        for (i, q) in file.qos.iter().enumerate() {
            let name = self.name_ok(&q.name, format!("qos[{i}].name"))?;
            if qos.iter().any(|existing: &QosConfig| existing.name == name) {
                return Err(self.error(&q.name, format!("qos[{i}].name"), format!("QOS `{name}` is defined twice")));
            }
            qos.push(QosConfig {
                name,
                priority: q.priority,
                max_wall: self.time(&q.max_wall, format!("qos[{i}].max_wall"))?,
                grp_tres: self.tres(&q.grp_tres, format!("qos[{i}].grp_tres"))?,
                grp_jobs: q.grp_jobs,
                max_tres_per_user: self.tres(&q.max_tres_per_user, format!("qos[{i}].max_tres_per_user"))?,
                max_tres_per_job: self.tres(&q.max_tres_per_job, format!("qos[{i}].max_tres_per_job"))?,
                max_jobs_per_user: q.max_jobs_per_user,
                max_submit_jobs_per_user: q.max_submit_jobs_per_user,
                preempt_requeue: match q.preempt_mode.as_ref().map(|m| m.get_ref().to_ascii_lowercase()) {
                    None => true,
                    Some(m) if m == "requeue" => true,
                    Some(m) if m == "cancel" => false,
                    Some(_) => {
                        let mode = q.preempt_mode.as_ref().expect("matched Some");
                        return Err(self.error(
                            mode,
                            format!("qos[{i}].preempt_mode"),
                            "expected `requeue` or `cancel`",
                        ));
                    }
                },
                grace_time: q.grace_time,
                preempt_exempt_time: q.preempt_exempt_time,
            });
        }
        if !qos.iter().any(|q| q.name == "normal") {
            qos.insert(0, QosConfig::new("normal"));
        }

        for (i, account) in file.accounts.iter().enumerate() {
            let (list, default) = self.association_qos(
                &qos,
                account.qos.as_deref(),
                account.default_qos.as_ref(),
                &format!("accounts[{i}]"),
            )?;
            accounts[i + 1].qos = list;
            accounts[i + 1].default_qos = default;
        }

        let mut partitions: Vec<PartitionConfig> = Vec::new();
        for (i, p) in file.partitions.iter().enumerate() {
            let name = self.name_ok(&p.name, format!("partitions[{i}].name"))?;
            if partitions.iter().any(|existing| existing.name == name) {
                return Err(self.error(
                    &p.name,
                    format!("partitions[{i}].name"),
                    format!("partition `{name}` is defined twice"),
                ));
            }
            let key = format!("partitions[{i}].nodes");
            let mut members =
                hostlist::expand(p.nodes.get_ref()).map_err(|e| self.error(&p.nodes, key.clone(), e.to_string()))?;
            if let Some(unknown) = members.iter().find(|n| !node_index.contains_key(*n)) {
                return Err(self.error(&p.nodes, key, format!("unknown node `{unknown}`")));
            }
            members.sort_by_key(|n| node_index[n]);
            members.dedup();
            let allow_accounts = p
                .allow_accounts
                .iter()
                .enumerate()
                .map(|(j, a)| account_known(a, format!("partitions[{i}].allow_accounts[{j}]")))
                .collect::<Result<Vec<_>, _>>()?;
            let mut allow_qos = Vec::new();
            for (j, q) in p.allow_qos.iter().enumerate() {
                if !qos.iter().any(|known| &known.name == q.get_ref()) {
                    return Err(self.error(
                        q,
                        format!("partitions[{i}].allow_qos[{j}]"),
                        format!("unknown QOS `{}`", q.get_ref()),
                    ));
                }
                allow_qos.push(q.get_ref().clone());
            }
            partitions.push(PartitionConfig {
                name,
                nodes: members,
                default: p.default,
                hidden: p.hidden,
                max_time: self.time(&p.max_time, format!("partitions[{i}].max_time"))?.unwrap_or(TimeLimit::Unlimited),
                default_time: self.time(&p.default_time, format!("partitions[{i}].default_time"))?,
                max_nodes: p.max_nodes,
                allow_accounts,
                allow_qos,
                priority_job_factor: p.priority_job_factor,
                priority_tier: p.priority_tier,
                default_mem_per_cpu: p.default_mem_per_cpu,
                tres_billing_weights: match &p.tres_billing_weights {
                    Some(text) => sched::parse_tres_weights(text.get_ref())
                        .map_err(|e| self.error(text, format!("partitions[{i}].tres_billing_weights"), e))?,
                    None => sched::TresWeights::default(),
                },
            });
        }
        let defaults: Vec<_> = file.partitions.iter().enumerate().filter(|(_, p)| p.default).collect();
        match defaults.as_slice() {
            [_] => {}
            [] => {
                return Err(match file.partitions.first() {
                    Some(first) => {
                        self.error(&first.name, "partitions", "exactly one partition needs `default = true`")
                    }
                    None => self.error(&file.cluster_name, "partitions", "at least one partition is required"),
                });
            }
            [_, (j, second), ..] => {
                return Err(self.error(
                    &second.name,
                    format!("partitions[{j}].default"),
                    "only one partition may be the default",
                ));
            }
        }

        let mut users = Vec::new();
        for (i, u) in file.users.iter().enumerate() {
            let name = self.name_ok(&u.name, format!("users[{i}].name"))?;
            let default_account = account_known(&u.default_account, format!("users[{i}].default_account"))?;
            let mut user_accounts = vec![default_account.clone()];
            for (j, a) in u.accounts.iter().enumerate() {
                let a = account_known(a, format!("users[{i}].accounts[{j}]"))?;
                if !user_accounts.contains(&a) {
                    user_accounts.push(a);
                }
            }
            let role = match &u.role {
                None => Role::User,
                Some(text) => Role::parse(text.get_ref()).ok_or_else(|| {
                    self.error(
                        text,
                        format!("users[{i}].role"),
                        format!("unknown role `{}` (expected user, operator or admin)", text.get_ref()),
                    )
                })?,
            };
            if let (true, Some(text), false) = (u.admin, &u.role, role == Role::Admin) {
                return Err(self.error(
                    text,
                    format!("users[{i}].role"),
                    format!("`admin = true` contradicts `role = \"{}\"`", role.name()),
                ));
            }
            let role = if u.admin { Role::Admin } else { role };
            let (qos_list, default_qos) =
                self.association_qos(&qos, u.qos.as_deref(), u.default_qos.as_ref(), &format!("users[{i}]"))?;
            users.push(UserConfig {
                name,
                default_account,
                accounts: user_accounts,
                role,
                qos: qos_list,
                default_qos,
                limits: BTreeMap::new(),
            });
        }
        let default_account =
            file.default_account.as_ref().map(|a| account_known(a, "default_account".into())).transpose()?;

        let mut quotas = Vec::new();
        for (i, q) in file.quotas.iter().enumerate() {
            let account = account_known(&q.account, format!("quotas[{i}].account"))?;
            if !partitions.iter().any(|p| &p.name == q.partition.get_ref()) {
                return Err(self.error(
                    &q.partition,
                    format!("quotas[{i}].partition"),
                    format!("unknown partition `{}`", q.partition.get_ref()),
                ));
            }
            if quotas.iter().any(|o: &sched::QuotaConfig| o.account == account && &o.partition == q.partition.get_ref())
            {
                return Err(self.error(
                    &q.account,
                    format!("quotas[{i}]"),
                    "a second quota for the same account and partition",
                ));
            }
            let guarantee = self.tres(&Some(q.guarantee.clone()), format!("quotas[{i}].guarantee"))?;
            let burst = self.tres(&q.burst, format!("quotas[{i}].burst"))?;
            let lend = q.lend.as_ref().map(|l| self.tres(&Some(l.clone()), format!("quotas[{i}].lend"))).transpose()?;
            quotas.push(sched::QuotaConfig {
                account,
                partition: q.partition.get_ref().clone(),
                guarantee,
                burst,
                lend,
            });
        }
        let mut templates: Vec<templates::TemplateConfig> = Vec::new();
        if file.templates.len() > templates::MAX_TEMPLATES {
            return Err(self.error(
                &file.cluster_name,
                "templates",
                format!("at most {} templates", templates::MAX_TEMPLATES),
            ));
        }
        for (i, raw) in file.templates.into_iter().enumerate() {
            let at = toml::Spanned::new(raw.span(), ());
            let t = raw
                .into_inner()
                .validate()
                .map_err(|(key, message)| self.error(&at, format!("templates[{i}].{key}"), message))?;
            if templates.iter().any(|o| o.name == t.name) {
                return Err(self.error(
                    &at,
                    format!("templates[{i}].name"),
                    format!("template `{}` is defined twice", t.name),
                ));
            }
            if let Some(a) = t.accounts.iter().find(|a| !account_names.contains_key(a.as_str())) {
                return Err(self.error(&at, format!("templates[{i}].accounts"), format!("unknown account `{a}`")));
            }
            let partition_ok = |p: &String| partitions.iter().any(|q| &q.name == p);
            let qos_ok = |q: &String| qos.iter().any(|o: &QosConfig| &o.name == q);
            let mut names: Vec<(&str, &String, bool)> = Vec::new();
            names.extend(t.defaults.partition.iter().map(|p| ("partition", p, partition_ok(p))));
            names.extend(t.defaults.qos.iter().map(|q| ("qos", q, qos_ok(q))));
            for (field, bound) in &t.overridable {
                if let templates::Bound::OneOf(values) = bound {
                    for v in values {
                        let ok =
                            if *field == templates::TemplateField::Partition { partition_ok(v) } else { qos_ok(v) };
                        names.push((field.key(), v, ok));
                    }
                }
            }
            if let Some((key, value, _)) = names.into_iter().find(|(_, _, ok)| !ok) {
                return Err(self.error(&at, format!("templates[{i}]"), format!("unknown {key} `{value}`")));
            }
            templates.push(t);
        }
        let partition_names: Vec<&str> = partitions.iter().map(|p| p.name.as_str()).collect();
        let mut private_data = PrivateData::default();
        for (i, value) in file.controller.private_data.iter().enumerate() {
            match value.get_ref().to_ascii_lowercase().as_str() {
                "jobs" => private_data.jobs = true,
                "usage" => private_data.usage = true,
                "accounts" => private_data.accounts = true,
                "users" => private_data.users = true,
                other => {
                    return Err(self.error(
                        value,
                        format!("controller.private_data[{i}]"),
                        format!("unknown value `{other}` (expected {})", PrivateData::VALUES.join(", ")),
                    ));
                }
            }
        }
        let accounting = file
            .accounting
            .validate(&partition_names)
            .map_err(|(key, message)| self.error(&file.cluster_name, key, message))?;
        let node_names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        let topology = file
            .topology
            .validate(&node_names)
            .map_err(|(key, message)| self.error(&file.cluster_name, key, message))?;
        Ok(Config {
            path: self.path.to_owned(),
            source: self.path.to_owned(),
            home: None,
            cluster_name,
            controller_address: address.get_ref().clone(),
            state_dir: self.relative(&file.controller.state_dir),
            replicas: self.replicas(&file.controller.replicas)?,
            login_hosts: self.login_hosts(&file.controller.login_hosts)?,
            source_text: std::sync::Arc::from(self.text),
            key_file: self.relative(&file.controller.key_file),
            plugstack: self.relative(file.plugstack.as_deref().unwrap_or("plugstack.conf")),
            token_socket: self.relative(file.token_socket.as_deref().unwrap_or(DEFAULT_TOKEN_SOCKET)),
            node_timeout: file.controller.node_timeout.max(1),
            kill_wait: file.controller.kill_wait,
            min_job_age: file.controller.min_job_age,
            preempt_exempt_time: file.controller.preempt_exempt_time,
            max_connections_per_user: file.controller.max_connections_per_user.max(1),
            client_idle_timeout: file.controller.client_idle_timeout.max(1),
            config_overrides_set: file.controller.config_overrides,
            max_tasks_per_node: match &file.controller.max_tasks_per_node {
                None => DEFAULT_MAX_TASKS_PER_NODE,
                Some(v) if (1..=65533).contains(v.get_ref()) => *v.get_ref(),
                Some(v) => {
                    return Err(self.error(v, "controller.max_tasks_per_node", "must be between 1 and 65533"));
                }
            },
            admins: file.controller.admins,
            operators: file.controller.operators,
            private_data,
            default_account,
            nodes,
            partitions,
            accounts,
            users,
            qos,
            quotas,
            priority: file
                .priority
                .validate()
                .map_err(|(key, message)| self.error(&file.cluster_name, key, message))?,
            metrics: file.metrics.validate().map_err(|(key, message)| self.error(&file.cluster_name, key, message))?,
            accounting,
            templates,
            topology,
            incidents: file
                .incidents
                .validate()
                .map_err(|(key, message)| self.error(&file.cluster_name, key, message))?,
        })
    }
}

pub mod incidents;
pub mod sched;
pub mod templates;
#[cfg(test)]
mod tests;
pub mod topology;
pub mod usage;
