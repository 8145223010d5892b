//! `sacctmgr add|create`, `modify|update`, `delete|remove` of accounts, users (their
//! associations) and QOS, and `load` of a dump: the command line parsed into a [`Change`] (by
//! the `sacctmgr` command, which sends it), and the change applied to a configuration (by ctld,
//! which stores every entity it changed and runs the result). An applied change gives the next
//! configuration, the entities it changed as they now are ([`Edit`]: what ctld stores, a deleted
//! one as `None`), and Slurm's messages (`Adding Account(s)`, `Nothing new added.`, ...). The
//! cluster file's `[[accounts]]`, `[[users]]` and `[[qos]]` seed the configuration; an entity
//! sacctmgr changed is stored whole and wins over the file's entry of the same name
//! ([`overlay`]), so `scontrol reconfigure` never undoes a sacctmgr change. Every name is
//! checked with the config file's rules and every list is bounded before anything is built
//! from it.

use crate::config::{AccountConfig, AssocLimits, Config, QosConfig, Role, UserConfig};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};

/// The most names, accounts or settings one command may list, and the most commands a `load`
/// may carry: what a request may list ([`crate::proto::client::MAX_LIST_ITEMS`]).
pub const MAX_ITEMS: usize = crate::proto::client::MAX_LIST_ITEMS;
/// The most accounts, users and QOS a configuration may hold after a change (each is kept in
/// ctld's memory and database).
pub const MAX_ENTITIES: usize = 200_000;

/// What a command changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Kind {
    Account,
    User,
    Qos,
}

impl Kind {
    /// The code ctld stores.
    pub fn code(self) -> u8 {
        match self {
            Kind::Account => 0,
            Kind::User => 1,
            Kind::Qos => 2,
        }
    }

    /// The kind of a stored code.
    pub fn from_code(code: u8) -> Option<Kind> {
        [Kind::Account, Kind::User, Kind::Qos].into_iter().find(|k| k.code() == code)
    }

    fn word(self) -> &'static str {
        match self {
            Kind::Account => "account",
            Kind::User => "user",
            Kind::Qos => "qos",
        }
    }
}

/// How a setting changes a list (`QOS=`, `QOS+=`, `QOS-=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Set,
    Add,
    Remove,
}

/// One `Key=Value` after `set` (or of an `add`): the key in lower case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setting {
    pub key: String,
    pub op: Op,
    pub value: String,
}

/// A parsed write command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Change {
    /// `add|create KIND names… [cluster=C] [account=A…] [Key=Value…]`.
    Add { kind: Kind, names: Vec<String>, cluster: Option<String>, accounts: Vec<String>, settings: Vec<Setting> },
    /// `modify|update KIND [where] names|name=… [cluster=C] [account=A…] set Key=Value…`.
    Modify { kind: Kind, names: Vec<String>, cluster: Option<String>, accounts: Vec<String>, settings: Vec<Setting> },
    /// `delete|remove KIND [where] names|name=… [cluster=C] [account=A…]`.
    Delete { kind: Kind, names: Vec<String>, cluster: Option<String>, accounts: Vec<String> },
    /// `load FILE`: a dump's accounts and users, added where missing, in one change.
    Load { cluster: String, items: Vec<Change> },
}

impl Change {
    /// The length of the change's longest list (bounded by the request's checks).
    pub fn longest_list(&self) -> usize {
        match self {
            Change::Add { names, accounts, settings, .. } | Change::Modify { names, accounts, settings, .. } => {
                names.len().max(accounts.len()).max(settings.len())
            }
            Change::Delete { names, accounts, .. } => names.len().max(accounts.len()),
            Change::Load { items, .. } => items.len().max(items.iter().map(Change::longest_list).max().unwrap_or(0)),
        }
    }

    /// What the audit record says of it.
    pub fn describe(&self) -> String {
        let list = |v: &[String]| v.join(",");
        let settings = |s: &[Setting]| {
            s.iter()
                .map(|s| {
                    let op = match s.op {
                        Op::Set => "=",
                        Op::Add => "+=",
                        Op::Remove => "-=",
                    };
                    format!("{}{op}{}", s.key, s.value)
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        let text = match self {
            Change::Add { kind, names, accounts, settings: s, .. } => {
                format!("add {} names={} accounts={} {}", kind.word(), list(names), list(accounts), settings(s))
            }
            Change::Modify { kind, names, accounts, settings: s, .. } => {
                format!("modify {} names={} accounts={} set {}", kind.word(), list(names), list(accounts), settings(s))
            }
            Change::Delete { kind, names, accounts, .. } => {
                format!("delete {} names={} accounts={}", kind.word(), list(names), list(accounts))
            }
            Change::Load { cluster, items } => format!("load cluster={cluster} items={}", items.len()),
        };
        let mut text = text.trim_end().to_owned();
        if text.len() > 2000 {
            let mut cut = 2000;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push('…');
        }
        text
    }
}

/// One entity as a change left it: `None` when it was deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Entity {
    Account(AccountConfig),
    User(UserConfig),
    Qos(QosConfig),
}

/// An entity a change touched, by kind and name, and what it now is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub kind: Kind,
    pub name: String,
    pub entity: Option<Entity>,
}

/// A change applied: the next configuration, what it changed, and what sacctmgr prints.
#[derive(Debug, Clone)]
pub struct Applied {
    pub config: Config,
    pub edits: Vec<Edit>,
    /// Slurm's messages (`-Q` leaves out all but the `Nothing …` ones, which `changed` false marks).
    pub text: String,
    /// False when nothing changed (`Nothing new added.`, `Nothing deleted`, `Nothing modified`):
    /// sacctmgr prints the text and exits 1.
    pub changed: bool,
}

/// What ctld knows beyond the configuration when it applies a change.
pub struct Context<'a> {
    /// Whether jobs not yet ended are charged to the association of a user (any user: `None`)
    /// and an account.
    pub active: &'a dyn Fn(Option<&str>, &str) -> bool,
    /// Whether jobs not yet ended run under a QOS.
    pub active_qos: &'a dyn Fn(&str) -> bool,
    /// Whether the caller may make or unmake admins (Slurm: operators may add operators only).
    pub admin: bool,
}

// ---------------------------------------------------------------------------------------------
// Parsing.

/// The keys a command's conditions take (everything else of an `add` is a setting).
fn condition(key: &str) -> Option<&'static str> {
    Some(match key {
        "name" | "names" | "user" | "users" => "name",
        "account" | "accounts" | "acct" => "account",
        "cluster" | "clusters" => "cluster",
        _ => return None,
    })
}

fn split_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(|v| v.trim().trim_matches('\'').trim_matches('"'))
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Parses the words of a write command after the options: `add user name=U account=A`,
/// `modify account A where Cluster=C set GrpSubmitJobs=0`, ...
pub fn parse(words: &[String]) -> Result<Change, String> {
    if words.len() > MAX_ITEMS {
        return Err(format!("too many words (at most {MAX_ITEMS})"));
    }
    let verb = words.first().map(|w| w.to_ascii_lowercase()).unwrap_or_default();
    let entity = words.get(1).map(|w| w.to_ascii_lowercase()).ok_or_else(|| format!("No entity given to {verb}"))?;
    let kind = match entity.as_str() {
        "account" | "accounts" => Kind::Account,
        "user" | "users" => Kind::User,
        "qos" => Kind::Qos,
        other => return Err(format!("Unknown or unsupported entity `{other}` (account, user or qos)")),
    };
    let adding = matches!(verb.as_str(), "add" | "create");
    let modifying = matches!(verb.as_str(), "modify" | "update");
    let (mut names, mut accounts, mut settings, mut cluster) = (Vec::new(), Vec::new(), Vec::new(), None);
    let mut after_set = false;
    for word in &words[2..] {
        let lower = word.to_ascii_lowercase();
        if lower == "where" {
            continue;
        }
        if lower == "set" {
            if !modifying {
                return Err(format!("`set` is only for modify; `{verb}` takes Key=Value"));
            }
            after_set = true;
            continue;
        }
        let Some(eq) = word.find('=') else {
            if after_set {
                return Err(format!("Unknown option: {word}"));
            }
            names.extend(split_list(word));
            continue;
        };
        let (raw_key, value) = (&word[..eq], &word[eq + 1..]);
        let (key, op) = match raw_key.strip_suffix('+') {
            Some(k) => (k, Op::Add),
            None => match raw_key.strip_suffix('-') {
                Some(k) => (k, Op::Remove),
                None => (raw_key, Op::Set),
            },
        };
        let key = key.to_ascii_lowercase();
        let as_condition = if adding {
            // `add account` names its accounts with name=; `add user` its associations with account=.
            condition(&key).filter(|c| !(kind == Kind::Account && *c == "account"))
        } else if after_set {
            None
        } else {
            Some(condition(&key).ok_or_else(|| format!("Unknown condition: {raw_key} (use `set` before settings)"))?)
        };
        match as_condition {
            Some("name") => names.extend(split_list(value)),
            Some("account") => accounts.extend(split_list(value)),
            Some(_) => cluster = Some(value.trim_matches('\'').to_owned()),
            None => settings.push(Setting { key, op, value: value.trim_matches('\'').trim_matches('"').to_owned() }),
        }
    }
    if names.is_empty() && !(kind == Kind::User && !adding && !accounts.is_empty()) {
        return Err(format!("You need to name the {}(s) to {verb}", kind.word()));
    }
    for list in [&names, &accounts] {
        if list.len() > MAX_ITEMS {
            return Err(format!("too many names (at most {MAX_ITEMS})"));
        }
    }
    Ok(match verb.as_str() {
        "add" | "create" => Change::Add { kind, names, cluster, accounts, settings },
        "modify" | "update" => {
            if settings.is_empty() {
                return Err("You didn't give me anything to set".into());
            }
            Change::Modify { kind, names, cluster, accounts, settings }
        }
        "delete" | "remove" => {
            if !settings.is_empty() {
                return Err(format!("Unknown condition: {}", settings[0].key));
            }
            Change::Delete { kind, names, cluster, accounts }
        }
        other => return Err(format!("Unknown command `{other}`")),
    })
}

// ---------------------------------------------------------------------------------------------
// Applying.

/// A valid entity name: the config file's rule (letters, digits, `_`, `-`, `.`; at most 64).
fn name_ok(name: &str) -> Result<(), String> {
    let valid =
        !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    if valid {
        Ok(())
    } else {
        Err(format!("`{}` is not a valid name (letters, digits, `_`, `-`, `.`)", crate::text::printable(name)))
    }
}

fn number(setting: &Setting) -> Result<Option<u32>, String> {
    if setting.value == "-1" || setting.value.is_empty() {
        return Ok(None);
    }
    setting
        .value
        .parse::<u32>()
        .map(Some)
        .map_err(|_| format!("{}: `{}` is not a number", setting.key, crate::text::printable(&setting.value)))
}

/// A TRES limit list changed by `setting`: `-1` clears one TRES (or all, alone).
fn tres(current: &BTreeMap<String, u64>, setting: &Setting) -> Result<BTreeMap<String, u64>, String> {
    if setting.value == "-1" || setting.value.is_empty() {
        return Ok(BTreeMap::new());
    }
    let mut next = current.clone();
    let (clear, set): (Vec<&str>, Vec<&str>) = setting.value.split(',').partition(|i| i.ends_with("=-1"));
    for item in clear {
        next.remove(item.trim_end_matches("=-1"));
    }
    let parsed =
        crate::config::sched::parse_tres_limits(&set.join(",")).map_err(|e| format!("{}: {e}", setting.key))?;
    next.extend(parsed);
    Ok(next)
}

/// A QOS list after `QOS=`, `QOS+=` or `QOS-=`, from `current` (`None`: every QOS).
fn qos_list(config: &Config, current: Option<&[String]>, setting: &Setting) -> Result<Option<Vec<String>>, String> {
    let names = split_list(&setting.value);
    if let Some(unknown) = names.iter().find(|n| !config.qos.iter().any(|q| &q.name == *n)) {
        return Err(format!("Invalid qos specification: {}", crate::text::printable(unknown)));
    }
    let all = || config.qos.iter().map(|q| q.name.clone()).collect::<Vec<_>>();
    let mut list = current.map_or_else(all, <[String]>::to_vec);
    match setting.op {
        Op::Set if names.is_empty() => return Ok(None),
        Op::Set => list = names,
        Op::Add => list.extend(names.into_iter().filter(|n| !current.is_some_and(|c| c.contains(n)))),
        Op::Remove => list.retain(|q| !names.contains(q)),
    }
    list.dedup();
    Ok(Some(list))
}

/// Applies `change` to `config` as the caller `ctx` describes; `Err` is sacctmgr's message for a
/// refused change (nothing of it applies).
pub fn apply(config: &Config, change: &Change, ctx: &Context) -> Result<Applied, String> {
    let mut work = Work { config: config.clone(), touched: Vec::new(), text: String::new() };
    let changed = work.change(change, ctx)?;
    check(&work.config)?;
    let entities = work.config.accounts.len() + work.config.users.len() + work.config.qos.len();
    if entities > MAX_ENTITIES {
        return Err(format!("at most {MAX_ENTITIES} accounts, users and QOS"));
    }
    let edits = touched_entities(&work.config, &work.touched);
    let text = if changed { work.text } else { String::new() };
    let text = if changed {
        text
    } else {
        match change {
            Change::Add { .. } | Change::Load { .. } => " Nothing new added.\n".to_owned(),
            Change::Modify { .. } => " Nothing modified\n".to_owned(),
            Change::Delete { .. } => " Nothing deleted\n".to_owned(),
        }
    };
    Ok(Applied { config: work.config, edits, text, changed })
}

/// The entities `touched` names as `config` now has them (one pass over each list).
fn touched_entities(config: &Config, touched: &[(Kind, String)]) -> Vec<Edit> {
    let accounts: HashMap<&str, &AccountConfig> = config.accounts.iter().map(|a| (a.name.as_str(), a)).collect();
    let users: HashMap<&str, &UserConfig> = config.users.iter().map(|u| (u.name.as_str(), u)).collect();
    let qos: HashMap<&str, &QosConfig> = config.qos.iter().map(|q| (q.name.as_str(), q)).collect();
    touched
        .iter()
        .map(|(kind, name)| {
            let entity = match kind {
                Kind::Account => accounts.get(name.as_str()).map(|a| Entity::Account((*a).clone())),
                Kind::User => users.get(name.as_str()).map(|u| Entity::User((*u).clone())),
                Kind::Qos => qos.get(name.as_str()).map(|q| Entity::Qos((*q).clone())),
            };
            Edit { kind: *kind, name: name.clone(), entity }
        })
        .collect()
}

/// The entity of `kind` called `name` in `config`.
fn entity(config: &Config, kind: Kind, name: &str) -> Option<Entity> {
    match kind {
        Kind::Account => config.accounts.iter().find(|a| a.name == name).cloned().map(Entity::Account),
        Kind::User => config.users.iter().find(|u| u.name == name).cloned().map(Entity::User),
        Kind::Qos => config.qos.iter().find(|q| q.name == name).cloned().map(Entity::Qos),
    }
}

/// Puts `edits` over `config` (the file's configuration): each replaces, adds or removes its
/// entity (in one pass over each list, whatever their lengths). Accounts keep `root` first.
pub fn put(config: &mut Config, edits: &[Edit]) {
    fn place<T>(list: &mut Vec<T>, name_of: impl Fn(&T) -> &str, edits: impl Iterator<Item = (String, Option<T>)>) {
        let mut index: HashMap<String, usize> =
            list.iter().enumerate().map(|(i, x)| (name_of(x).to_owned(), i)).collect();
        let mut slots: Vec<Option<T>> = std::mem::take(list).into_iter().map(Some).collect();
        for (name, value) in edits {
            match index.get(&name) {
                Some(&i) => slots[i] = value,
                None => {
                    if let Some(value) = value {
                        index.insert(name, slots.len());
                        slots.push(Some(value));
                    }
                }
            }
        }
        *list = slots.into_iter().flatten().collect();
    }
    let (mut accounts, mut users, mut qos) = (Vec::new(), Vec::new(), Vec::new());
    for e in edits {
        let name = e.name.clone();
        match (e.kind, &e.entity) {
            (Kind::Account, Some(Entity::Account(a))) => accounts.push((name, Some(a.clone()))),
            (Kind::User, Some(Entity::User(u))) => users.push((name, Some(u.clone()))),
            (Kind::Qos, Some(Entity::Qos(q))) => qos.push((name, Some(q.clone()))),
            (Kind::Account, _) => accounts.push((name, None)),
            (Kind::User, _) => users.push((name, None)),
            (Kind::Qos, _) => qos.push((name, None)),
        }
    }
    place(&mut config.accounts, |a| &a.name, accounts.into_iter());
    place(&mut config.users, |u| &u.name, users.into_iter());
    place(&mut config.qos, |q| &q.name, qos.into_iter());
}

/// The file's configuration with the stored entities over it, checked: what ctld runs. `Err`
/// names what of the file now contradicts a stored entity (the file must be fixed, or the
/// entity changed with sacctmgr).
pub fn overlay(file: &Config, stored: &[Edit]) -> Result<Config, String> {
    let mut config = file.clone();
    put(&mut config, stored);
    check(&config).map_err(|e| format!("{e} (after the changes sacctmgr made, which the database holds)"))?;
    Ok(config)
}

/// The associations hold together: every parent, account and QOS named exists, no account is its
/// own ancestor, defaults are in their lists, and what the file's partitions, quotas and
/// templates name is still there.
pub fn check(config: &Config) -> Result<(), String> {
    let parents: HashMap<&str, Option<&str>> =
        config.accounts.iter().map(|a| (a.name.as_str(), a.parent.as_deref())).collect();
    let qos_names: HashSet<&str> = config.qos.iter().map(|q| q.name.as_str()).collect();
    let account = |name: &str| parents.contains_key(name);
    let qos = |name: &str| qos_names.contains(name);
    if !qos("normal") {
        return Err("QOS normal always exists".into());
    }
    if config.accounts.first().is_none_or(|a| a.name != "root" || a.parent.is_some()) {
        return Err("account root always exists".into());
    }
    // Every account reaches root: each walk stops at an account already known to.
    let mut reaches_root: HashSet<&str> = HashSet::from(["root"]);
    for a in &config.accounts {
        let mut path = vec![a.name.as_str()];
        let mut current = a.name.as_str();
        while !reaches_root.contains(current) {
            let parent =
                parents.get(current).copied().flatten().ok_or_else(|| format!("account {current} has no parent"))?;
            if !account(parent) {
                return Err(format!("account {current}: parent {} does not exist", crate::text::printable(parent)));
            }
            if path.len() > config.accounts.len() || path.contains(&parent) {
                return Err(format!("account {} would be its own ancestor", a.name));
            }
            path.push(parent);
            current = parent;
        }
        reaches_root.extend(path);
        association_qos(&qos, &a.qos, &a.default_qos, &format!("account {}", a.name))?;
    }
    for u in &config.users {
        if let Some(missing) = u.accounts.iter().find(|a| !account(a)) {
            return Err(format!("user {}: account {missing} does not exist", u.name));
        }
        if !u.accounts.contains(&u.default_account) {
            return Err(format!("user {}: default account {} is not one of their accounts", u.name, u.default_account));
        }
        if let Some(stale) = u.limits.keys().find(|a| !u.accounts.contains(a)) {
            return Err(format!("user {}: limits for account {stale}, which is not one of theirs", u.name));
        }
        association_qos(&qos, &u.qos, &u.default_qos, &format!("user {}", u.name))?;
    }
    let named = |what: String, name: &str| {
        if account(name) {
            Ok(())
        } else {
            Err(format!("{what} names account {name}, which does not exist; edit the config file"))
        }
    };
    if let Some(a) = &config.default_account {
        named("default_account".into(), a)?;
    }
    for p in &config.partitions {
        for a in &p.allow_accounts {
            named(format!("partition {}'s allow_accounts", p.name), a)?;
        }
        if let Some(q) = p.allow_qos.iter().find(|q| !qos(q)) {
            return Err(format!(
                "partition {}'s allow_qos names QOS {q}, which does not exist; edit the config file",
                p.name
            ));
        }
    }
    for q in &config.quotas {
        named("a [[quotas]] entry".into(), &q.account)?;
    }
    for t in &config.templates {
        for a in &t.accounts {
            named(format!("template {}", t.name), a)?;
        }
    }
    Ok(())
}

fn association_qos(
    known: &dyn Fn(&str) -> bool,
    list: &Option<Vec<String>>,
    default: &Option<String>,
    what: &str,
) -> Result<(), String> {
    if let Some(missing) = list.iter().flatten().chain(default).find(|q| !known(q)) {
        return Err(format!("{what}: QOS {} does not exist", crate::text::printable(missing)));
    }
    if let (Some(list), Some(default)) = (list, default)
        && !list.contains(default)
    {
        return Err(format!("{what}: default QOS {} is not in its QOS list", crate::text::printable(default)));
    }
    Ok(())
}

/// A change under way over a copy of the configuration.
struct Work {
    config: Config,
    touched: Vec<(Kind, String)>,
    text: String,
}

/// Slurm's association line: `  C = cluster    A = account    U = user      `.
fn assoc_line(pairs: &[(&str, &str)]) -> String {
    let mut line = String::from(" ");
    for (key, value) in pairs {
        line.push_str(&format!(" {key} = {value:<10.10}"));
    }
    line.push('\n');
    line
}

impl Work {
    fn touch(&mut self, kind: Kind, name: &str) {
        if !self.touched.iter().any(|(k, n)| *k == kind && n == name) {
            self.touched.push((kind, name.to_owned()));
        }
    }

    fn cluster_ok(&self, cluster: &Option<String>) -> bool {
        cluster.as_ref().is_none_or(|c| c.eq_ignore_ascii_case(&self.config.cluster_name))
    }

    fn change(&mut self, change: &Change, ctx: &Context) -> Result<bool, String> {
        match change {
            Change::Add { kind, names, cluster, accounts, settings } => {
                if !self.cluster_ok(cluster) {
                    return Err(format!(
                        " This cluster '{}' doesn't exist.\n        Contact your admin to add it to accounting.",
                        crate::text::printable(cluster.as_deref().unwrap_or_default())
                    ));
                }
                for name in names.iter().chain(accounts) {
                    name_ok(name)?;
                }
                match kind {
                    Kind::Account => self.add_accounts(names, settings),
                    Kind::User => self.add_users(names, accounts, settings, ctx),
                    Kind::Qos => self.add_qos(names, settings),
                }
            }
            Change::Modify { kind, names, cluster, accounts, settings } => {
                if !self.cluster_ok(cluster) {
                    return Ok(false);
                }
                match kind {
                    Kind::Account => self.modify_accounts(names, settings),
                    Kind::User => self.modify_users(names, accounts, settings, ctx),
                    Kind::Qos => self.modify_qos(names, settings),
                }
            }
            Change::Delete { kind, names, cluster, accounts } => {
                if !self.cluster_ok(cluster) {
                    return Ok(false);
                }
                match kind {
                    Kind::Account => self.delete_accounts(names, ctx),
                    Kind::User => self.delete_users(names, accounts, ctx),
                    Kind::Qos => self.delete_qos(names, ctx),
                }
            }
            Change::Load { cluster, items } => {
                if !cluster.eq_ignore_ascii_case(&self.config.cluster_name) {
                    return Err(format!(
                        "The dump is of cluster {}, this is {}",
                        crate::text::printable(cluster),
                        self.config.cluster_name
                    ));
                }
                if items.len() > MAX_ITEMS {
                    return Err(format!("too many entries (at most {MAX_ITEMS})"));
                }
                let mut any = false;
                for item in items {
                    if matches!(item, Change::Load { .. }) {
                        return Err("a load inside a load".into());
                    }
                    any |= self.change(item, ctx)?;
                }
                Ok(any)
            }
        }
    }

    fn add_accounts(&mut self, names: &[String], settings: &[Setting]) -> Result<bool, String> {
        let parent = settings.iter().rev().find(|s| s.key == "parent").map_or("root", |s| s.value.as_str()).to_owned();
        if !self.config.accounts.iter().any(|a| a.name == parent) {
            return Err(format!(" Parent account '{}' doesn't exist.", crate::text::printable(&parent)));
        }
        let new: Vec<&String> = names.iter().filter(|n| !self.config.accounts.iter().any(|a| &a.name == *n)).collect();
        if new.is_empty() {
            return Ok(false);
        }
        let mut text = String::from(" Adding Account(s)\n");
        for name in &new {
            text.push_str(&format!("  {name}\n"));
            let mut account = AccountConfig::new(name, Some(&parent));
            for s in settings.iter().filter(|s| s.key != "parent") {
                account_setting(&self.config, &mut account, s)?;
            }
            self.config.accounts.push(account);
            self.touch(Kind::Account, name);
        }
        text.push_str(" Associations\n");
        for name in &new {
            text.push_str(&assoc_line(&[("A", name), ("C", &self.config.cluster_name)]));
        }
        self.text.push_str(&text);
        Ok(true)
    }

    fn add_users(
        &mut self,
        names: &[String],
        accounts: &[String],
        settings: &[Setting],
        ctx: &Context,
    ) -> Result<bool, String> {
        let default = settings
            .iter()
            .rev()
            .find(|s| matches!(s.key.as_str(), "defaultaccount" | "defacct"))
            .map(|s| s.value.clone());
        let mut accounts = accounts.to_vec();
        if accounts.is_empty()
            && let Some(d) = &default
        {
            accounts.push(d.clone());
        }
        if accounts.is_empty() {
            return Err(" Need name of account to add user to.".into());
        }
        if let Some(missing) = accounts.iter().find(|a| !self.config.accounts.iter().any(|x| &x.name == *a)) {
            return Err(format!(
                " This account '{missing}' doesn't exist.\n        Contact your admin to add this account."
            ));
        }
        let mut added = Vec::new();
        let mut new_users = Vec::new();
        let mut index: HashMap<String, usize> =
            self.config.users.iter().enumerate().map(|(i, u)| (u.name.clone(), i)).collect();
        for name in names {
            let existing = index.get(name).copied();
            let user = match existing {
                Some(i) => &mut self.config.users[i],
                None => {
                    let default_account = default.clone().unwrap_or_else(|| accounts[0].clone());
                    if !accounts.contains(&default_account) {
                        return Err(format!(" Default account {default_account} is not one of the accounts given"));
                    }
                    self.config.users.push(UserConfig {
                        name: name.clone(),
                        default_account,
                        accounts: Vec::new(),
                        role: Role::User,
                        qos: None,
                        default_qos: None,
                        limits: BTreeMap::new(),
                    });
                    index.insert(name.clone(), self.config.users.len() - 1);
                    new_users.push(name.clone());
                    self.config.users.last_mut().expect("just pushed")
                }
            };
            let new: Vec<String> = accounts.iter().filter(|a| !user.accounts.contains(a)).cloned().collect();
            user.accounts.extend(new.iter().cloned());
            if !new.is_empty() {
                let i = index[name];
                let mut user = self.config.users[i].clone();
                for s in settings.iter().filter(|s| !matches!(s.key.as_str(), "defaultaccount" | "defacct")) {
                    user_setting(&self.config, &mut user, &new, s, ctx)?;
                }
                self.config.users[i] = user;
                added.extend(new.into_iter().map(|a| (name.clone(), a)));
                self.touch(Kind::User, name);
            }
        }
        if added.is_empty() {
            return Ok(false);
        }
        if !new_users.is_empty() {
            self.text.push_str(" Adding User(s)\n");
            for u in &new_users {
                self.text.push_str(&format!("  {u}\n"));
            }
            if let Some(d) = default.as_ref().or(accounts.first()) {
                self.text.push_str(&format!(" Settings =\n  Default Account = {d}\n"));
            }
        }
        self.text.push_str(" Associations =\n");
        for (u, a) in &added {
            let line = assoc_line(&[("U", u), ("A", a), ("C", &self.config.cluster_name)]);
            self.text.push_str(&line);
        }
        Ok(true)
    }

    fn add_qos(&mut self, names: &[String], settings: &[Setting]) -> Result<bool, String> {
        let new: Vec<&String> = names.iter().filter(|n| !self.config.qos.iter().any(|q| &q.name == *n)).collect();
        if new.is_empty() {
            return Ok(false);
        }
        self.text.push_str(" Adding QOS(s)\n");
        for name in new {
            let mut qos = QosConfig::new(name);
            for s in settings {
                qos_setting(&mut qos, s)?;
            }
            self.text.push_str(&format!("  {name}\n"));
            self.config.qos.push(qos);
            self.touch(Kind::Qos, name);
        }
        Ok(true)
    }

    fn modify_accounts(&mut self, names: &[String], settings: &[Setting]) -> Result<bool, String> {
        let mut modified = Vec::new();
        for name in names {
            let Some(i) = self.config.accounts.iter().position(|a| &a.name == name) else { continue };
            let mut account = self.config.accounts[i].clone();
            for s in settings {
                if s.key == "parent" {
                    if name == "root" {
                        return Err("root has no parent".into());
                    }
                    account.parent = Some(s.value.clone());
                } else {
                    account_setting(&self.config, &mut account, s)?;
                }
            }
            if self.config.accounts[i] != account {
                self.config.accounts[i] = account;
                modified.push(name.clone());
                self.touch(Kind::Account, name);
            }
        }
        if modified.is_empty() {
            return Ok(false);
        }
        self.text.push_str(" Modified account associations...\n");
        for a in &modified {
            let line = assoc_line(&[("C", &self.config.cluster_name), ("A", a)]);
            self.text.push_str(&line);
        }
        Ok(true)
    }

    fn modify_users(
        &mut self,
        names: &[String],
        accounts: &[String],
        settings: &[Setting],
        ctx: &Context,
    ) -> Result<bool, String> {
        let mut modified = Vec::new();
        for i in 0..self.config.users.len() {
            let user = &self.config.users[i];
            let named = names.is_empty() || names.contains(&user.name);
            let associated = accounts.is_empty() || accounts.iter().any(|a| user.accounts.contains(a));
            if !(named && associated) {
                continue;
            }
            let mut user = user.clone();
            let scope: Vec<String> = if accounts.is_empty() {
                user.accounts.clone()
            } else {
                accounts.iter().filter(|a| user.accounts.contains(a)).cloned().collect()
            };
            for s in settings {
                user_setting(&self.config, &mut user, &scope, s, ctx)?;
            }
            if self.config.users[i] != user {
                self.config.users[i] = user;
                let name = self.config.users[i].name.clone();
                self.touch(Kind::User, &name);
                modified.push(name);
            }
        }
        if modified.is_empty() {
            return Ok(false);
        }
        self.text.push_str(" Modified users...\n");
        for u in &modified {
            self.text.push_str(&format!("  {u}\n"));
        }
        Ok(true)
    }

    fn modify_qos(&mut self, names: &[String], settings: &[Setting]) -> Result<bool, String> {
        let mut modified = Vec::new();
        for qos in self.config.qos.iter_mut().filter(|q| names.contains(&q.name)) {
            let before = qos.clone();
            for s in settings {
                qos_setting(qos, s)?;
            }
            if *qos != before {
                modified.push(qos.name.clone());
            }
        }
        if modified.is_empty() {
            return Ok(false);
        }
        self.listed(" Modified qos...", Kind::Qos, &modified);
        Ok(true)
    }

    /// The entities of `kind` among `names` that exist, to be deleted; `Err` when they include
    /// `kept` (account `root`, QOS `normal`: always there).
    fn doomed(&self, kind: Kind, names: &[String], kept: &str) -> Result<Vec<String>, String> {
        if names.iter().any(|n| n == kept) {
            return Err(format!("{} {kept} cannot be deleted", if kind == Kind::Qos { "QOS" } else { "account" }));
        }
        Ok(names.iter().filter(|n| entity(&self.config, kind, n).is_some()).cloned().collect())
    }

    /// Slurm's header line and one line per name changed (each touched).
    fn listed(&mut self, header: &str, kind: Kind, names: &[String]) {
        self.text.push_str(header);
        self.text.push('\n');
        for name in names {
            self.text.push_str(&format!("  {name}\n"));
            self.touch(kind, name);
        }
    }

    fn delete_accounts(&mut self, names: &[String], ctx: &Context) -> Result<bool, String> {
        let doomed = self.doomed(Kind::Account, names, "root")?;
        if doomed.is_empty() {
            return Ok(false);
        }
        if let Some(child) = self
            .config
            .accounts
            .iter()
            .find(|a| a.parent.as_ref().is_some_and(|p| doomed.contains(p)) && !doomed.contains(&a.name))
        {
            return Err(format!(
                " Account {} has child account {}; delete or move it first",
                child.parent.as_deref().unwrap_or_default(),
                child.name
            ));
        }
        if let Some(a) = doomed.iter().find(|a| (ctx.active)(None, a)) {
            return Err(format!(" Error with request: Job(s) active, cancel job(s) before remove (account {a})"));
        }
        // The users' associations under them go too; a user left with none goes.
        for user in self.config.users.clone() {
            let keep: Vec<String> = user.accounts.iter().filter(|a| !doomed.contains(a)).cloned().collect();
            if keep.len() == user.accounts.len() {
                continue;
            }
            if keep.is_empty() {
                self.config.users.retain(|u| u.name != user.name);
            } else {
                if doomed.contains(&user.default_account) {
                    return Err(format!(
                        " Account {} is the default account of user {}, who has others: set their DefaultAccount first",
                        user.default_account, user.name
                    ));
                }
                let u = self.config.users.iter_mut().find(|u| u.name == user.name).expect("present");
                u.limits.retain(|a, _| keep.contains(a));
                u.accounts = keep;
            }
            self.touch(Kind::User, &user.name);
        }
        self.config.accounts.retain(|a| !doomed.contains(&a.name));
        self.listed(" Deleting accounts...", Kind::Account, &doomed);
        Ok(true)
    }

    fn delete_users(&mut self, names: &[String], accounts: &[String], ctx: &Context) -> Result<bool, String> {
        let mut removed: Vec<(String, String)> = Vec::new();
        for user in self.config.users.clone() {
            if !(names.is_empty() || names.contains(&user.name)) {
                continue;
            }
            let gone: Vec<String> =
                user.accounts.iter().filter(|a| accounts.is_empty() || accounts.contains(a)).cloned().collect();
            if gone.is_empty() {
                continue;
            }
            if let Some(a) = gone.iter().find(|a| (ctx.active)(Some(&user.name), a)) {
                return Err(format!(
                    " Error with request: Job(s) active, cancel job(s) before remove (user {} account {a})",
                    user.name
                ));
            }
            let keep: Vec<String> = user.accounts.iter().filter(|a| !gone.contains(a)).cloned().collect();
            if keep.is_empty() {
                self.config.users.retain(|u| u.name != user.name);
            } else if gone.contains(&user.default_account) {
                return Err(format!(
                    " Can't remove the default account ({}) of user {} while they have others: set DefaultAccount first",
                    user.default_account, user.name
                ));
            } else {
                let u = self.config.users.iter_mut().find(|u| u.name == user.name).expect("present");
                u.limits.retain(|a, _| keep.contains(a));
                u.accounts = keep;
            }
            removed.extend(gone.into_iter().map(|a| (user.name.clone(), a)));
            self.touch(Kind::User, &user.name);
        }
        if removed.is_empty() {
            return Ok(false);
        }
        self.text.push_str(" Deleting user associations...\n");
        for (u, a) in &removed {
            let line = assoc_line(&[("C", &self.config.cluster_name), ("A", a), ("U", u)]);
            self.text.push_str(&line);
        }
        Ok(true)
    }

    fn delete_qos(&mut self, names: &[String], ctx: &Context) -> Result<bool, String> {
        let doomed = self.doomed(Kind::Qos, names, "normal")?;
        if doomed.is_empty() {
            return Ok(false);
        }
        if let Some(q) = doomed.iter().find(|q| (ctx.active_qos)(q)) {
            return Err(format!(" Error with request: Job(s) active, cancel job(s) before remove (QOS {q})"));
        }
        let named = |list: &Option<Vec<String>>, default: &Option<String>| {
            list.iter().flatten().chain(default).any(|q| doomed.contains(q))
        };
        if let Some(a) = self.config.accounts.iter().find(|a| named(&a.qos, &a.default_qos)) {
            return Err(format!(" QOS still in the association of account {}: remove it there first", a.name));
        }
        if let Some(u) = self.config.users.iter().find(|u| named(&u.qos, &u.default_qos)) {
            return Err(format!(" QOS still in the association of user {}: remove it there first", u.name));
        }
        self.config.qos.retain(|q| !doomed.contains(&q.name));
        self.listed(" Deleting QOS(s)...", Kind::Qos, &doomed);
        Ok(true)
    }
}

fn unsupported(what: &str, key: &str) -> String {
    format!(
        " Unknown option: {} ({what} in Drover take the settings listed in docs/compat.md)",
        crate::text::printable(key)
    )
}

fn account_setting(config: &Config, account: &mut AccountConfig, s: &Setting) -> Result<(), String> {
    match s.key.as_str() {
        "fairshare" | "shares" => {
            account.shares = s
                .value
                .parse()
                .map_err(|_| format!("Fairshare: `{}` is not a number", crate::text::printable(&s.value)))?;
        }
        "grpjobs" => account.grp_jobs = number(s)?,
        "grpsubmitjobs" | "grpsubmit" => account.grp_submit_jobs = number(s)?,
        "grptres" => account.grp_tres = tres(&account.grp_tres, s)?,
        "qos" | "qoslevel" => {
            let inherited = config.allowed_qos(None, &account.name);
            account.qos = qos_list(config, account.qos.as_deref().or(inherited), s)?;
        }
        "defaultqos" => account.default_qos = Some(s.value.clone()).filter(|v| !v.is_empty() && v != "-1"),
        other => return Err(unsupported("accounts", other)),
    }
    Ok(())
}

/// One setting of a user: their own (`DefaultAccount`, `AdminLevel`, `QOS`, `DefaultQOS`, which
/// hold for all their associations) or a limit of their associations with `scope`.
fn user_setting(
    config: &Config,
    user: &mut UserConfig,
    scope: &[String],
    s: &Setting,
    ctx: &Context,
) -> Result<(), String> {
    match s.key.as_str() {
        "defaultaccount" | "defacct" => {
            if !user.accounts.contains(&s.value) {
                return Err(format!(
                    " User {} has no association with account {}; add one first (sacctmgr add user {} account={})",
                    user.name,
                    crate::text::printable(&s.value),
                    user.name,
                    crate::text::printable(&s.value)
                ));
            }
            user.default_account = s.value.clone();
        }
        "qos" | "qoslevel" => {
            let inherited = config.allowed_qos(None, &user.default_account);
            user.qos = qos_list(config, user.qos.as_deref().or(inherited), s)?;
        }
        "defaultqos" => user.default_qos = Some(s.value.clone()).filter(|v| !v.is_empty() && v != "-1"),
        "adminlevel" | "admin" => {
            let role = match s.value.to_ascii_lowercase().as_str() {
                "none" => Role::User,
                "operator" => Role::Operator,
                "admin" | "administrator" => Role::Admin,
                other => {
                    return Err(format!(
                        "AdminLevel: `{}` (None, Operator or Administrator)",
                        crate::text::printable(other)
                    ));
                }
            };
            if (role == Role::Admin || user.role == Role::Admin) && role != user.role && !ctx.admin {
                return Err(" Only administrators may make or unmake administrators".into());
            }
            user.role = role;
        }
        "maxjobs" | "grpjobs" | "maxsubmitjobs" | "maxsubmit" | "grpsubmitjobs" | "grptres" | "maxtres"
        | "maxtresperjob" | "fairshare" | "shares" => {
            for account in scope {
                let limits = user.limits.entry(account.clone()).or_default();
                assoc_setting(limits, s)?;
                if *limits == AssocLimits::default() {
                    user.limits.remove(account);
                }
            }
        }
        "maxtresperuser" | "maxtrespu" | "maxjobsperuser" | "maxjobspu" => {
            return Err(format!(" {}: a QOS limit; set it with sacctmgr modify qos NAME set {}=…", s.key, s.key));
        }
        other => return Err(unsupported("users", other)),
    }
    Ok(())
}

/// A limit of one user association.
fn assoc_setting(limits: &mut AssocLimits, s: &Setting) -> Result<(), String> {
    match s.key.as_str() {
        "maxjobs" | "grpjobs" => limits.max_jobs = number(s)?,
        "maxsubmitjobs" | "maxsubmit" | "grpsubmitjobs" => limits.max_submit_jobs = number(s)?,
        "grptres" => limits.grp_tres = tres(&limits.grp_tres, s)?,
        "maxtres" | "maxtresperjob" => limits.max_tres_per_job = tres(&limits.max_tres_per_job, s)?,
        // `parent` (share the parent's) and the default 1 are both no shares of its own.
        _ if s.value.eq_ignore_ascii_case("parent") => limits.shares = None,
        _ => limits.shares = number(s)?.filter(|n| *n != 1),
    }
    Ok(())
}

fn qos_setting(qos: &mut QosConfig, s: &Setting) -> Result<(), String> {
    match s.key.as_str() {
        "priority" => qos.priority = number(s)?.unwrap_or(0),
        "maxwall" | "maxwalldurationperjob" => {
            qos.max_wall = if s.value == "-1" {
                None
            } else {
                Some(crate::grammar::time::parse_time_limit(&s.value).map_err(|e| e.to_string())?)
            };
        }
        "grptres" => qos.grp_tres = tres(&qos.grp_tres, s)?,
        "grpjobs" => qos.grp_jobs = number(s)?,
        "maxtresperuser" | "maxtrespu" => qos.max_tres_per_user = tres(&qos.max_tres_per_user, s)?,
        "maxtresperjob" | "maxtres" => qos.max_tres_per_job = tres(&qos.max_tres_per_job, s)?,
        "maxjobsperuser" | "maxjobspu" => qos.max_jobs_per_user = number(s)?,
        "maxsubmitjobsperuser" | "maxsubmitjobspu" | "maxsubmitpu" => qos.max_submit_jobs_per_user = number(s)?,
        "preemptmode" => {
            qos.preempt_requeue = match s.value.to_ascii_lowercase().as_str() {
                "requeue" | "" | "off" => true,
                "cancel" => false,
                other => return Err(format!("PreemptMode: `{}` (requeue or cancel)", crate::text::printable(other))),
            };
        }
        "gracetime" => qos.grace_time = number(s)?,
        "preemptexempttime" => qos.preempt_exempt_time = number(s)?,
        "preempt" => {
            return Err(" Preempt: Drover preempts only to give a team back its guarantee (docs/admin/quotas.md); \
                        a QOS's list of QOS it may preempt is not supported"
                .into());
        }
        other => return Err(unsupported("QOS", other)),
    }
    Ok(())
}

#[cfg(test)]
mod tests;
