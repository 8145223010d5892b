//! Who may do what: the one place ctld decides permissions. A caller's role comes from the
//! config (`controller.admins`, `controller.operators`, a user's `role` or `admin = true`; root is
//! always an admin), with Slurm's meaning: users act on their own jobs, operators on any job and
//! on node states, admins also reconfigure the controller. Every request handler asks here,
//! also what the config's `private_data` (Slurm's `PrivateData`) hides from plain users.

use crate::model::identity::{Caller, user_name};
use drover_shared::config::{Config, Role};
use drover_shared::proto::client::{ErrorCode, JobQuery};

/// Something a caller wants to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    /// Cancel, signal, hold, release, requeue or update a job (or cancel its steps) owned by `owner`.
    Job { owner: u32 },
    /// Start a step in (or report a step's end for) a job owned by `owner`: the step's tasks run
    /// as the job's owner, so for anyone else this is running code as that user.
    RunAs { owner: u32 },
    /// What only staff may do to a job: an admin hold (and releasing one), raising a time limit,
    /// a negative nice.
    JobPrivileged,
    /// Drain, resume, undrain or down nodes.
    NodeState,
    /// Re-read the config (partitions, accounts, users, QOS, roles).
    Reconfigure,
    /// Read every user's audit records and accounting by default.
    ReadAll,
    /// Charge an account the caller has no association with.
    ChargeAnyAccount,
    /// Run a what-if simulation (`drover simulate`): minutes of ctld's CPU.
    Simulate,
    /// Add, modify or delete accounts, users and QOS with sacctmgr (Slurm lets operators; who
    /// may make admins is checked with the change).
    EditAccounts,
}

impl Operation {
    /// The least role that may do it for `caller`.
    fn needs(self, caller: Caller) -> Role {
        match self {
            Operation::Job { owner } | Operation::RunAs { owner } if owner == caller.uid => Role::User,
            Operation::Job { .. }
            | Operation::JobPrivileged
            | Operation::NodeState
            | Operation::ReadAll
            | Operation::Simulate
            | Operation::EditAccounts => Role::Operator,
            Operation::RunAs { .. } | Operation::Reconfigure | Operation::ChargeAnyAccount => Role::Admin,
        }
    }
}

/// A caller with its role, looked up once per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Who {
    pub(crate) caller: Caller,
    pub(crate) role: Role,
}

impl Who {
    /// Looks the caller's role up in `config`.
    pub(crate) fn of(config: &Config, caller: Caller) -> Who {
        Who { caller, role: role(config, caller.uid) }
    }

    /// Whether the caller may do `operation`.
    pub(crate) fn may(self, operation: Operation) -> bool {
        self.role >= operation.needs(self.caller)
    }

    /// `Ok` when the caller may do `operation`, else Slurm's access error.
    pub(crate) fn check(self, operation: Operation) -> Result<(), ErrorCode> {
        if self.may(operation) { Ok(()) } else { Err(ErrorCode::AccessDenied) }
    }
}

/// Whether `caller` may run tasks without an allocation of their own (srun's `-Z/--no-allocate`):
/// root and the SlurmUser (the user ctld runs as) only, whatever role the config gives anyone
/// else, as in Slurm.
pub(crate) fn may_skip_allocation(caller: Caller) -> bool {
    caller.uid == 0 || caller.uid == nix::unistd::geteuid().as_raw()
}

/// What `PrivateData` hides from a caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Private {
    /// Other users' jobs (`squeue`, `scontrol show job`, `sacct`, `drover why`).
    Jobs,
    /// Other users' usage (`sshare`, `sreport`, `drover report`).
    Usage,
}

impl Who {
    /// Whether the config's `PrivateData` limits this caller to their own records of `what`:
    /// plain users yes, operators and admins never (Slurm's rule).
    pub(crate) fn limited_to_own(self, config: &Config, what: Private) -> bool {
        let private = match what {
            Private::Jobs => config.private_data.jobs,
            Private::Usage => config.private_data.usage,
        };
        private && !self.may(Operation::ReadAll)
    }
}

/// A job query as a caller may ask it: under `PrivateData=jobs` a plain user's query is narrowed
/// to their own jobs (`users = [uid]`); `false` when it asked only for other users' jobs, whose
/// answer is then empty.
pub(crate) fn narrow_job_query(config: &Config, caller: Caller, query: &mut JobQuery) -> bool {
    if !Who::of(config, caller).limited_to_own(config, Private::Jobs) {
        return true;
    }
    let own = query.users.is_empty() || query.users.contains(&caller.uid);
    query.users = vec![caller.uid];
    own
}

/// The role of `uid`: root is an admin; a uid without a user name is a plain user.
pub(crate) fn role(config: &Config, uid: u32) -> Role {
    if uid == 0 {
        return Role::Admin;
    }
    user_name(uid).map_or(Role::User, |name| config.role_of(&name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(uid: u32, role: Role) -> Who {
        Who { caller: Caller::local(uid, uid), role }
    }

    #[test]
    fn slurm_role_table() {
        let (user, operator, admin) = (who(1000, Role::User), who(1001, Role::Operator), who(1002, Role::Admin));
        assert!(user.may(Operation::Job { owner: 1000 }));
        assert!(!user.may(Operation::Job { owner: 1001 }));
        for op in [Operation::JobPrivileged, Operation::NodeState, Operation::Reconfigure, Operation::ReadAll] {
            assert_eq!(user.check(op), Err(ErrorCode::AccessDenied), "{op:?}");
        }
        assert!(operator.may(Operation::Job { owner: 1000 }));
        assert!(operator.may(Operation::NodeState));
        assert!(operator.may(Operation::JobPrivileged));
        assert!(!operator.may(Operation::Reconfigure));
        assert!(!operator.may(Operation::RunAs { owner: 1000 }));
        assert!(operator.may(Operation::RunAs { owner: 1001 }));
        assert!(admin.may(Operation::RunAs { owner: 1000 }));
        assert!(!operator.may(Operation::ChargeAnyAccount));
        for op in
            [Operation::Job { owner: 1 }, Operation::NodeState, Operation::Reconfigure, Operation::ChargeAnyAccount]
        {
            assert!(admin.may(op), "{op:?}");
        }
    }

    #[test]
    fn private_jobs_narrow_a_users_query_to_their_own() {
        let text = "cluster_name = \"c\"\n[controller]\naddress = \"127.0.0.1:1\"\nstate_dir = \"/tmp\"\n\
                    private_data = [\"jobs\"]\n[[nodes]]\nnames = \"n1\"\ncpus = 1\nreal_memory = 100\n\
                    [[partitions]]\nname = \"p\"\nnodes = \"n1\"\ndefault = true\n";
        let mut config = Config::parse(std::path::Path::new("/tmp/c.toml"), text).unwrap();
        // Uids without a user name: plain users.
        let (me, other) = (Caller::local(4_000_001, 1), 4_000_002);
        let narrowed = |config: &Config, caller: Caller, users: Vec<u32>| {
            let mut query = JobQuery { users, job_ids: vec![7], ..JobQuery::default() };
            let visible = narrow_job_query(config, caller, &mut query);
            (visible, query.users, query.job_ids)
        };
        assert_eq!(narrowed(&config, me, vec![]), (true, vec![me.uid], vec![7]));
        assert_eq!(narrowed(&config, me, vec![other, me.uid]), (true, vec![me.uid], vec![7]));
        assert!(!narrowed(&config, me, vec![other]).0);
        // Root sees everyone's; without the setting so does everyone.
        assert_eq!(narrowed(&config, Caller::local(0, 0), vec![other]), (true, vec![other], vec![7]));
        config.private_data.jobs = false;
        assert_eq!(narrowed(&config, me, vec![other]), (true, vec![other], vec![7]));
    }

    #[test]
    fn roles_from_config() {
        let text = r#"
cluster_name = "c"
[controller]
address = "127.0.0.1:1"
state_dir = "/tmp"
admins = ["ann"]
operators = ["olga"]
[[nodes]]
names = "n1"
cpus = 1
real_memory = 100
[[partitions]]
name = "p"
nodes = "n1"
default = true
[[accounts]]
name = "a"
[[users]]
name = "bob"
default_account = "a"
role = "operator"
[[users]]
name = "carl"
default_account = "a"
admin = true
[[users]]
name = "dora"
default_account = "a"
"#;
        let config = Config::parse(std::path::Path::new("/tmp/c.toml"), text).unwrap();
        assert_eq!(config.role_of("root"), Role::Admin);
        assert_eq!(config.role_of("ann"), Role::Admin);
        assert_eq!(config.role_of("olga"), Role::Operator);
        assert_eq!(config.role_of("bob"), Role::Operator);
        assert_eq!(config.role_of("carl"), Role::Admin);
        assert_eq!(config.role_of("dora"), Role::User);
        assert_eq!(config.role_of("nobody-listed"), Role::User);
        let bad = text.replace("role = \"operator\"", "role = \"wizard\"");
        let err = Config::parse(std::path::Path::new("/tmp/c.toml"), &bad).unwrap_err().to_string();
        assert!(err.starts_with("/tmp/c.toml:21:8: users[0].role: unknown role `wizard`"), "{err}");
        let both = text.replace("admin = true", "admin = true\nrole = \"user\"");
        let err = Config::parse(std::path::Path::new("/tmp/c.toml"), &both).unwrap_err().to_string();
        assert!(err.contains("users[1].role: `admin = true` contradicts `role = \"user\"`"), "{err}");
    }
}
