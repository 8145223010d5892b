//! `sacctmgr dump CLUSTER file=F` and `load F`: the cluster's account tree in Slurm's flat file
//! format (`Cluster - 'c':…`, then per parent a `Parent - 'p'` line followed by the users and
//! accounts under it, each `Kind - 'name':Key=Value:…`), which tools read back (ColdFront's
//! `slurm_check` compares it with its allocations); and such a file read into one
//! [`Change::Load`] that adds what is missing and sets the user associations' limits it gives.
//! QOS definitions are not part of a dump (as in Slurm); association QOS lists and limits are
//! (`QOS='a,b'`, `MaxJobs=4`).

use super::edit::{Change, Kind, MAX_ITEMS, Op, Setting};
use crate::config::{AccountConfig, Config, Role};

/// The keys of a `User` line that are the user's own; the others are its association's limits.
const OWN: [&str; 5] = ["defaultaccount", "adminlevel", "qos", "defaultqos", "defacct"];

/// The most bytes of a file `load` reads.
pub const MAX_FILE: u64 = 4 << 20;

fn tres_text(tres: &std::collections::BTreeMap<String, u64>) -> String {
    tres.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

fn account_line(a: &AccountConfig) -> String {
    let mut line = format!("Account - '{0}':Description='{0}':Organization='{0}':Fairshare={1}", a.name, a.shares);
    if let Some(n) = a.grp_jobs {
        line.push_str(&format!(":GrpJobs={n}"));
    }
    if let Some(n) = a.grp_submit_jobs {
        line.push_str(&format!(":GrpSubmitJobs={n}"));
    }
    if !a.grp_tres.is_empty() {
        line.push_str(&format!(":GrpTRES={}", tres_text(&a.grp_tres)));
    }
    if let Some(list) = &a.qos {
        line.push_str(&format!(":QOS='{}'", list.join(",")));
    }
    if let Some(d) = &a.default_qos {
        line.push_str(&format!(":DefaultQOS='{d}'"));
    }
    line
}

/// The dump of `config` (`header`: the comment line first).
pub fn render(config: &Config, header: &str) -> String {
    let mut out = String::new();
    out.push_str(&format!("# {header}\n"));
    out.push_str(&format!("Cluster - '{}':Fairshare=1:QOS='normal'\n", config.cluster_name));
    // Depth first from root: each parent's users, then its accounts, then each account's own.
    let mut stack = vec!["root".to_owned()];
    let mut seen = 0;
    while let Some(parent) = stack.pop() {
        seen += 1;
        if seen > config.accounts.len() + 1 {
            break;
        }
        let users: Vec<_> = config.users.iter().filter(|u| u.accounts.contains(&parent)).collect();
        let children: Vec<_> =
            config.accounts.iter().filter(|a| a.parent.as_deref() == Some(parent.as_str())).collect();
        if users.is_empty() && children.is_empty() && parent != "root" {
            continue;
        }
        out.push_str(&format!("Parent - '{parent}'\n"));
        for u in users {
            let mut line = format!("User - '{}':DefaultAccount='{}'", u.name, u.default_account);
            match config.role_of(&u.name) {
                Role::Admin => line.push_str(":AdminLevel='Administrator'"),
                Role::Operator => line.push_str(":AdminLevel='Operator'"),
                Role::User => {}
            }
            let limits = u.limits_in(&parent).cloned().unwrap_or_default();
            line.push_str(&format!(":Fairshare={}", limits.shares.unwrap_or(1)));
            if let Some(n) = limits.max_jobs {
                line.push_str(&format!(":MaxJobs={n}"));
            }
            if let Some(n) = limits.max_submit_jobs {
                line.push_str(&format!(":MaxSubmitJobs={n}"));
            }
            for (key, tres) in [("GrpTRES", &limits.grp_tres), ("MaxTRES", &limits.max_tres_per_job)] {
                if !tres.is_empty() {
                    line.push_str(&format!(":{key}={}", tres_text(tres)));
                }
            }
            if let Some(list) = &u.qos {
                line.push_str(&format!(":QOS='{}'", list.join(",")));
            }
            if let Some(d) = &u.default_qos {
                line.push_str(&format!(":DefaultQOS='{d}'"));
            }
            out.push_str(&line);
            out.push('\n');
        }
        for a in &children {
            out.push_str(&account_line(a));
            out.push('\n');
        }
        // Pushed in reverse, so the first child's subtree comes out first.
        for a in children.iter().rev() {
            stack.push(a.name.clone());
        }
    }
    out
}

/// `'name'` or `name` → `name`.
fn unquote(text: &str) -> &str {
    let text = text.trim();
    text.strip_prefix('\'').and_then(|t| t.strip_suffix('\'')).unwrap_or(text)
}

/// One line of a dump: its kind (`Account`), the name, and its `Key=Value` specs (keys in lower
/// case).
type Line<'a> = (&'a str, String, Vec<(String, String)>);

/// The `Kind - 'name'` head and the `Key=Value` specs of one line.
fn fields(line: &str) -> Result<Line<'_>, String> {
    let (head, rest) =
        line.split_once(" - ").ok_or_else(|| format!("not a dump line: {}", crate::text::printable(line)))?;
    let mut parts = rest.split(':');
    let name = unquote(parts.next().unwrap_or_default()).to_owned();
    let specs = parts
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.trim().to_ascii_lowercase(), unquote(v).to_owned())
        })
        .collect();
    Ok((head.trim(), name, specs))
}

/// A dump file's text as one change: every account (under its `Parent`) and every user
/// association, added where missing with the settings the file gives.
pub fn parse(text: &str) -> Result<Change, String> {
    let mut cluster = None;
    let mut parent = None::<String>;
    let mut items = Vec::new();
    // Each user once, with every account it is listed under, after all the accounts; then the
    // limits of each of its associations.
    let mut users: Vec<(String, Vec<String>, Vec<Setting>)> = Vec::new();
    let mut limits: Vec<Change> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if items.len() >= MAX_ITEMS {
            return Err(format!("line {}: more than {MAX_ITEMS} entries", n + 1));
        }
        let (head, name, specs) = fields(line).map_err(|e| format!("line {}: {e}", n + 1))?;
        let settings = |skip: &[&str]| -> Vec<Setting> {
            specs
                .iter()
                .filter(|(k, _)| !skip.contains(&k.as_str()))
                .map(|(k, v)| Setting { key: k.clone(), op: Op::Set, value: v.clone() })
                .collect()
        };
        match head {
            "Cluster" => cluster = Some(name),
            "Parent" => parent = Some(name),
            "Account" => {
                let p = parent.clone().ok_or_else(|| format!("line {}: an Account before any Parent", n + 1))?;
                let mut s = settings(&["description", "organization"]);
                s.push(Setting { key: "parent".into(), op: Op::Set, value: p });
                items.push(Change::Add {
                    kind: Kind::Account,
                    names: vec![name],
                    cluster: None,
                    accounts: vec![],
                    settings: s,
                });
            }
            "User" => {
                let p = parent.clone().ok_or_else(|| format!("line {}: a User before any Parent", n + 1))?;
                if p == "root" && name == "root" {
                    // Slurm's root association; Drover's root user needs none.
                    continue;
                }
                let (own, association): (Vec<Setting>, Vec<Setting>) =
                    settings(&[]).into_iter().partition(|s| OWN.contains(&s.key.as_str()));
                if !association.is_empty() {
                    limits.push(Change::Modify {
                        kind: Kind::User,
                        names: vec![name.clone()],
                        cluster: None,
                        accounts: vec![p.clone()],
                        settings: association,
                    });
                }
                match users.iter_mut().find(|(u, ..)| *u == name) {
                    Some((_, accounts, _)) => accounts.push(p),
                    None => users.push((name, vec![p], own)),
                }
            }
            other => return Err(format!("line {}: unknown line kind `{}`", n + 1, crate::text::printable(other))),
        }
    }
    if items.len() + users.len() + limits.len() > MAX_ITEMS {
        return Err(format!("more than {MAX_ITEMS} entries"));
    }
    for (name, accounts, settings) in users {
        items.push(Change::Add { kind: Kind::User, names: vec![name], cluster: None, accounts, settings });
    }
    items.extend(limits);
    let cluster = cluster.ok_or("no `Cluster - 'name'` line: is this a sacctmgr dump?")?;
    Ok(Change::Load { cluster, items })
}
