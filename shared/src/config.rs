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

use crate::grammar::time::TimeLimit;
use crate::hostlist;
use crate::node::GpuDevice;
pub use sched::{FairShareAlgorithm, PriorityConfig};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
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
        /// The OCI runtime for `--container` jobs (Slurm's `oci.conf`).
        pub oci: Option<super::oci::RawOci>,
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
        /// Slurm's `ResumeTimeout`: seconds a node may take to come back from `scontrol
        /// reboot` before it is set `DOWN` (default 60).
        #[serde(default = "default_resume_timeout")]
        pub resume_timeout: u32,
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
    fn default_resume_timeout() -> u32 {
        60
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
        /// Slurm's `RebootProgram`: what noded runs, as root, for `scontrol reboot` (a path,
        /// then arguments separated by blanks; no shell).
        pub reboot_program: Option<String>,
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
    /// Slurm's `RebootProgram`: the program (its path resolved like the prolog's) and its
    /// arguments; `None`: `scontrol reboot` is refused for this node.
    pub reboot_program: Option<Vec<String>>,
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
    /// `[controller] resume_timeout`: seconds a rebooting node may take to register again.
    pub resume_timeout: u32,
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
    /// `[oci]`: the runtime `--container` jobs run in; `None`: containers are refused.
    pub oci: Option<oci::OciConfig>,
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

pub mod incidents;
pub mod oci;
pub mod sched;
pub mod templates;
#[cfg(test)]
mod tests;
pub mod topology;
pub mod usage;
mod validate;

use validate::Validator;
