//! Validation of a parsed `cluster.toml` ([`raw::File`]) into a [`Config`]: every reference
//! resolved, every value checked, and each error located at its file, line, column and key path.
//! [`Validator::validate`] runs the checks as named steps in a fixed order, so the first error in
//! that order is the one reported.

use super::{
    AccountConfig, Config, ConfigError, DEFAULT_JOB_PIDS_MAX, DEFAULT_MAX_TASKS_PER_NODE, DEFAULT_TOKEN_SOCKET,
    MAX_CONFIG_NODES, MAX_LOGIN_HOSTS, MAX_NODE_GPUS, NodeConfig, PartitionConfig, PrivateData, QosConfig, Replica,
    Role, UserConfig, line_column, raw, sched, templates,
};
use crate::grammar::time::{TimeLimit, parse_time_limit};
use crate::hostlist;
use crate::node::GpuDevice;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

pub(super) struct Validator<'a> {
    pub(super) path: &'a Path,
    pub(super) text: &'a str,
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
    pub(super) fn replicas(&self, raw: &[raw::Replica]) -> Result<Vec<Replica>, ConfigError> {
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

    /// The whole file, step by step in a fixed order, so the first error in that order is reported.
    pub(super) fn validate(&self, file: raw::File) -> Result<Config, ConfigError> {
        let cluster_name = self.name_ok(&file.cluster_name, "cluster_name".into())?;
        let address = self.validate_controller_address(&file.controller.address)?;
        let (nodes, node_index) = self.validate_nodes(&file.nodes)?;
        let (mut accounts, account_names) = self.validate_accounts(&file.accounts)?;
        let qos = self.validate_qos(&file.qos)?;
        self.validate_account_qos(&file.accounts, &qos, &mut accounts)?;
        let partitions =
            self.validate_partitions(&file.partitions, &file.cluster_name, &node_index, &account_names, &qos)?;
        let users = self.validate_users(&file.users, &account_names, &qos)?;
        let default_account = file
            .default_account
            .as_ref()
            .map(|a| self.account_known(&account_names, a, "default_account".into()))
            .transpose()?;
        let quotas = self.validate_quotas(&file.quotas, &account_names, &partitions)?;
        let templates =
            self.validate_templates(file.templates, &file.cluster_name, &account_names, &partitions, &qos)?;
        let partition_names: Vec<&str> = partitions.iter().map(|p| p.name.as_str()).collect();
        let private_data = self.validate_private_data(&file.controller.private_data)?;
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
            controller_address: address,
            state_dir: self.relative(&file.controller.state_dir),
            replicas: self.replicas(&file.controller.replicas)?,
            login_hosts: self.login_hosts(&file.controller.login_hosts)?,
            source_text: std::sync::Arc::from(self.text),
            key_file: self.relative(&file.controller.key_file),
            plugstack: self.relative(file.plugstack.as_deref().unwrap_or("plugstack.conf")),
            token_socket: self.relative(file.token_socket.as_deref().unwrap_or(DEFAULT_TOKEN_SOCKET)),
            node_timeout: file.controller.node_timeout.max(1),
            resume_timeout: file.controller.resume_timeout.max(1),
            kill_wait: file.controller.kill_wait,
            min_job_age: file.controller.min_job_age,
            preempt_exempt_time: file.controller.preempt_exempt_time,
            max_connections_per_user: file.controller.max_connections_per_user.max(1),
            client_idle_timeout: file.controller.client_idle_timeout.max(1),
            config_overrides_set: file.controller.config_overrides,
            max_tasks_per_node: self.validate_max_tasks_per_node(&file.controller.max_tasks_per_node)?,
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
            oci: file
                .oci
                .map(super::oci::RawOci::validate)
                .transpose()
                .map_err(|(key, message)| self.error(&file.cluster_name, key, message))?,
        })
    }

    /// `[controller] address`: an IP address and port.
    fn validate_controller_address(&self, address: &Spanned<String>) -> Result<String, ConfigError> {
        if address.get_ref().parse::<std::net::SocketAddr>().is_err() {
            return Err(self.error(
                address,
                "controller.address",
                "expected an IP address and port, e.g. 127.0.0.1:6817",
            ));
        }
        Ok(address.get_ref().clone())
    }

    /// `[[nodes]]`: each set expanded into its nodes, no name twice; with each node's index by name.
    fn validate_nodes(&self, sets: &[raw::NodeSet]) -> Result<(Vec<NodeConfig>, HashMap<String, usize>), ConfigError> {
        let mut nodes = Vec::new();
        let mut node_index = HashMap::new();
        for (i, set) in sets.iter().enumerate() {
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
                    reboot_program: set.reboot_program.as_deref().and_then(|line| {
                        let mut words = line.split_whitespace().map(str::to_owned);
                        let program = self.relative(&words.next()?).to_string_lossy().into_owned();
                        Some(std::iter::once(program).chain(words).collect())
                    }),
                });
            }
        }
        Ok((nodes, node_index))
    }

    /// `[[accounts]]` under the implicit `root`: unique names, known parents, no cycle; with indices.
    fn validate_accounts(
        &self,
        raw: &[raw::Account],
    ) -> Result<(Vec<AccountConfig>, BTreeMap<String, usize>), ConfigError> {
        let mut accounts = vec![AccountConfig::new("root", None)];
        let mut account_names: BTreeMap<String, usize> = BTreeMap::from([("root".to_owned(), 0)]);
        for (i, account) in raw.iter().enumerate() {
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
        for (i, account) in raw.iter().enumerate() {
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
                    let written = &raw[i - 1];
                    return Err(self.error(
                        &written.name,
                        format!("accounts[{}].parent", i - 1),
                        "accounts form a cycle",
                    ));
                }
                current = accounts[account_names[&parent]].parent.clone();
            }
        }
        Ok((accounts, account_names))
    }

    /// An account name that `account_names` knows.
    fn account_known(
        &self,
        account_names: &BTreeMap<String, usize>,
        a: &Spanned<String>,
        key: String,
    ) -> Result<String, ConfigError> {
        if account_names.contains_key(a.get_ref()) {
            Ok(a.get_ref().clone())
        } else {
            Err(self.error(a, key, format!("unknown account `{}`", a.get_ref())))
        }
    }

    /// `[[qos]]`: unique names, limits and preempt modes; `normal` added first when not listed.
    fn validate_qos(&self, raw: &[raw::Qos]) -> Result<Vec<QosConfig>, ConfigError> {
        let mut qos = Vec::new();
        for (i, q) in raw.iter().enumerate() {
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
        Ok(qos)
    }

    /// Each account's `qos` list and `default_qos` ([`Validator::association_qos`]), into `accounts`.
    fn validate_account_qos(
        &self,
        raw: &[raw::Account],
        qos: &[QosConfig],
        accounts: &mut [AccountConfig],
    ) -> Result<(), ConfigError> {
        for (i, account) in raw.iter().enumerate() {
            let (list, default) = self.association_qos(
                qos,
                account.qos.as_deref(),
                account.default_qos.as_ref(),
                &format!("accounts[{i}]"),
            )?;
            accounts[i + 1].qos = list;
            accounts[i + 1].default_qos = default;
        }
        Ok(())
    }

    /// `[[partitions]]`: unique names, known nodes, accounts and QOS, limits; exactly one default.
    fn validate_partitions(
        &self,
        raw: &[raw::Partition],
        cluster_name: &Spanned<String>,
        node_index: &HashMap<String, usize>,
        account_names: &BTreeMap<String, usize>,
        qos: &[QosConfig],
    ) -> Result<Vec<PartitionConfig>, ConfigError> {
        let mut partitions: Vec<PartitionConfig> = Vec::new();
        for (i, p) in raw.iter().enumerate() {
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
                .map(|(j, a)| self.account_known(account_names, a, format!("partitions[{i}].allow_accounts[{j}]")))
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
        let defaults: Vec<_> = raw.iter().enumerate().filter(|(_, p)| p.default).collect();
        match defaults.as_slice() {
            [_] => {}
            [] => {
                return Err(match raw.first() {
                    Some(first) => {
                        self.error(&first.name, "partitions", "exactly one partition needs `default = true`")
                    }
                    None => self.error(cluster_name, "partitions", "at least one partition is required"),
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
        Ok(partitions)
    }

    /// `[[users]]`: known accounts, a role that agrees with `admin`, association QOS.
    fn validate_users(
        &self,
        raw: &[raw::User],
        account_names: &BTreeMap<String, usize>,
        qos: &[QosConfig],
    ) -> Result<Vec<UserConfig>, ConfigError> {
        let mut users = Vec::new();
        for (i, u) in raw.iter().enumerate() {
            let name = self.name_ok(&u.name, format!("users[{i}].name"))?;
            let default_account =
                self.account_known(account_names, &u.default_account, format!("users[{i}].default_account"))?;
            let mut user_accounts = vec![default_account.clone()];
            for (j, a) in u.accounts.iter().enumerate() {
                let a = self.account_known(account_names, a, format!("users[{i}].accounts[{j}]"))?;
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
                self.association_qos(qos, u.qos.as_deref(), u.default_qos.as_ref(), &format!("users[{i}]"))?;
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
        Ok(users)
    }

    /// `[[quotas]]`: a known account and partition, one quota per pair, TRES amounts.
    fn validate_quotas(
        &self,
        raw: &[sched::RawQuota],
        account_names: &BTreeMap<String, usize>,
        partitions: &[PartitionConfig],
    ) -> Result<Vec<sched::QuotaConfig>, ConfigError> {
        let mut quotas = Vec::new();
        for (i, q) in raw.iter().enumerate() {
            let account = self.account_known(account_names, &q.account, format!("quotas[{i}].account"))?;
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
        Ok(quotas)
    }

    /// `[[templates]]`: at most [`templates::MAX_TEMPLATES`], unique names, known names in each.
    fn validate_templates(
        &self,
        raw: Vec<Spanned<templates::RawTemplate>>,
        cluster_name: &Spanned<String>,
        account_names: &BTreeMap<String, usize>,
        partitions: &[PartitionConfig],
        qos: &[QosConfig],
    ) -> Result<Vec<templates::TemplateConfig>, ConfigError> {
        let mut templates: Vec<templates::TemplateConfig> = Vec::new();
        if raw.len() > templates::MAX_TEMPLATES {
            return Err(self.error(
                cluster_name,
                "templates",
                format!("at most {} templates", templates::MAX_TEMPLATES),
            ));
        }
        for (i, template) in raw.into_iter().enumerate() {
            let at = toml::Spanned::new(template.span(), ());
            let t = template
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
        Ok(templates)
    }

    /// `[controller] private_data`: known values only.
    fn validate_private_data(&self, raw: &[Spanned<String>]) -> Result<PrivateData, ConfigError> {
        let mut private_data = PrivateData::default();
        for (i, value) in raw.iter().enumerate() {
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
        Ok(private_data)
    }

    /// `[controller] max_tasks_per_node`: 1 to 65533, [`DEFAULT_MAX_TASKS_PER_NODE`] when not set.
    fn validate_max_tasks_per_node(&self, value: &Option<Spanned<u32>>) -> Result<u32, ConfigError> {
        Ok(match value {
            None => DEFAULT_MAX_TASKS_PER_NODE,
            Some(v) if (1..=65533).contains(v.get_ref()) => *v.get_ref(),
            Some(v) => {
                return Err(self.error(v, "controller.max_tasks_per_node", "must be between 1 and 65533"));
            }
        })
    }
}
