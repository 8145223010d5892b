//! What `sacctmgr` shows: `list|show user|account|association|qos|cluster` of a configuration
//! (the cluster file's accounts, users and QOS with the changes sacctmgr made over them, which
//! ctld keeps in its database), with Slurm's `format=` fields and `%N` widths, `where`
//! conditions, `withassoc`/`-s`, `-n`, `-p` and `-P`, and `dump` (`dump.rs`). ctld renders it
//! from the configuration it runs, for the caller it knows from the kernel
//! (`PrivateData=users,accounts` applied to plain users), and the `sacctmgr` command prints it.
//! Tools ask it which accounts a user may charge (Snakemake: `sacctmgr -n -s list user U
//! format=account%256`; Open OnDemand: `sacctmgr -nP show users withassoc format=account,qos
//! where user=U cluster=C`; ColdFront: `list associations User=U Cluster=C Format=Account -Pn`).
//! Changes (`add`, `modify`, `delete`, `load`) are parsed and applied by `edit.rs`.

pub mod dump;
pub mod edit;

use crate::config::{Config, Role};

/// What one listing prints per row: field name → value.
type Row = Vec<(&'static str, String)>;

/// A requested column: the field and its width (`%N`; Slurm's default is 10).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Column {
    field: &'static str,
    width: usize,
}

/// Every field this `sacctmgr` knows, by its canonical name and header.
const FIELDS: &[(&str, &str, &[&str])] = &[
    ("User", "User", &["user", "users"]),
    ("DefaultAccount", "Def Acct", &["defaultaccount", "defacct", "def acct"]),
    ("Admin", "Admin", &["admin", "adminlevel"]),
    ("Account", "Account", &["account", "accounts", "acct"]),
    ("Cluster", "Cluster", &["cluster", "clusters"]),
    ("Partition", "Partition", &["partition"]),
    ("Share", "Share", &["share", "shares", "fairshare"]),
    ("QOS", "QOS", &["qos"]),
    ("DefaultQOS", "Def QOS", &["defaultqos", "defqos", "def qos"]),
    ("Descr", "Descr", &["descr", "description"]),
    ("Org", "Org", &["org", "organization"]),
    ("ParentName", "Par Name", &["parentname", "parent"]),
    ("GrpJobs", "GrpJobs", &["grpjobs"]),
    ("GrpSubmit", "GrpSubmit", &["grpsubmit", "grpsubmitjobs"]),
    ("GrpTRES", "GrpTRES", &["grptres"]),
    ("MaxJobs", "MaxJobs", &["maxjobs"]),
    ("MaxSubmit", "MaxSubmit", &["maxsubmit", "maxsubmitjobs"]),
    ("MaxTRES", "MaxTRES", &["maxtres", "maxtresperjob"]),
    ("Name", "Name", &["name"]),
    ("Priority", "Priority", &["priority"]),
    ("MaxWall", "MaxWall", &["maxwall"]),
];

fn field(name: &str) -> Option<(&'static str, &'static str)> {
    let lower = name.to_ascii_lowercase();
    FIELDS
        .iter()
        .find(|(canonical, _, aliases)| aliases.contains(&lower.as_str()) || canonical.eq_ignore_ascii_case(&lower))
        .map(|(c, h, _)| (*c, *h))
}

/// What was asked for.
#[derive(Debug, Default)]
struct Request {
    noheader: bool,
    /// `Some(true)`: `-p` (a `|` after every field); `Some(false)`: `-P` (between fields).
    parsable: Option<bool>,
    with_assoc: bool,
    entity: String,
    names: Vec<String>,
    users: Vec<String>,
    accounts: Vec<String>,
    clusters: Vec<String>,
    format: Option<Vec<Column>>,
}

fn list(value: &str) -> Vec<String> {
    value.split(',').filter(|v| !v.is_empty()).map(str::to_owned).collect()
}

fn parse(args: &[String]) -> Result<Request, String> {
    let mut request = Request::default();
    let mut words = Vec::new();
    for arg in args {
        match arg.as_str() {
            "-n" | "--noheader" => request.noheader = true,
            "-p" | "--parsable" => request.parsable = Some(true),
            "-P" | "--parsable2" => request.parsable = Some(false),
            "-s" | "--withassoc" => request.with_assoc = true,
            "-i" | "--immediate" | "-Q" | "--quiet" | "-r" | "--readonly" => {}
            flag if flag.starts_with('-') && flag.len() > 1 && !flag.starts_with("--") => {
                // Bundled short flags: `-nP`, `-ns`.
                for c in flag[1..].chars() {
                    match c {
                        'n' => request.noheader = true,
                        'p' => request.parsable = Some(true),
                        'P' => request.parsable = Some(false),
                        's' => request.with_assoc = true,
                        'i' | 'Q' | 'r' => {}
                        other => return Err(format!("invalid option -- '{other}'")),
                    }
                }
            }
            flag if flag.starts_with("--") => return Err(format!("unrecognized option '{flag}'")),
            word => words.push(word.to_owned()),
        }
    }
    let mut words = words.into_iter();
    match words.next().map(|w| w.to_ascii_lowercase()).as_deref() {
        Some("list" | "show" | "ls") => {}
        Some("dump") => {
            request.entity = "dump".to_owned();
            for word in words {
                match word.split_once('=') {
                    Some((key, value)) if key.eq_ignore_ascii_case("cluster") => request.names.extend(list(value)),
                    Some((key, _)) if key.eq_ignore_ascii_case("file") => {}
                    Some(_) => return Err(format!("Unknown option: {word}")),
                    None => request.names.extend(list(&word)),
                }
            }
            return Ok(request);
        }
        Some("add" | "create" | "modify" | "update" | "delete" | "remove" | "load") => {
            return Err("sacctmgr sends changes as changes; this request lists only".into());
        }
        Some("archive") => {
            return Err(
                "archive is not supported: Drover's accounting retention is in the config's [accounting]".into()
            );
        }
        Some(other) => return Err(format!("Unknown command `{other}`; only `list` and `show` are supported")),
        None => return Err("No command given; `sacctmgr list user|account|association|qos|cluster`".into()),
    }
    let entity = words.next().ok_or("No entity given to list")?.to_ascii_lowercase();
    request.entity = match entity.as_str() {
        "user" | "users" => "user",
        "account" | "accounts" => "account",
        "association" | "associations" | "assoc" | "assocs" => "association",
        "qos" => "qos",
        "cluster" | "clusters" => "cluster",
        other => return Err(format!("Unknown or unsupported entity `{other}`")),
    }
    .to_owned();
    for word in words {
        let lower = word.to_ascii_lowercase();
        if lower == "where" || lower == "set" {
            continue;
        }
        if lower == "withassoc" || lower == "withassocs" {
            request.with_assoc = true;
            continue;
        }
        let Some((key, value)) = word.split_once('=') else {
            request.names.extend(list(&word));
            continue;
        };
        match key.to_ascii_lowercase().as_str() {
            "format" => {
                let mut columns = Vec::new();
                for item in value.split(',').filter(|v| !v.is_empty()) {
                    let (name, width) = match item.split_once('%') {
                        Some((name, width)) => {
                            (name, width.parse::<usize>().map_err(|_| format!("Bad width in `{item}`"))?)
                        }
                        None => (item, 10),
                    };
                    let (field, _) = field(name).ok_or_else(|| format!("Invalid field requested: \"{name}\""))?;
                    columns.push(Column { field, width });
                }
                request.format = Some(columns);
            }
            "name" | "names" => request.names.extend(list(value)),
            "user" | "users" => request.users.extend(list(value)),
            "account" | "accounts" | "acct" => request.accounts.extend(list(value)),
            "cluster" | "clusters" => request.clusters.extend(list(value)),
            other => return Err(format!("Unknown condition: {other}")),
        }
    }
    Ok(request)
}

fn admin_level(role: Role) -> &'static str {
    match role {
        Role::User => "None",
        Role::Operator => "Operator",
        Role::Admin => "Administrator",
    }
}

fn tres_text(tres: &std::collections::BTreeMap<String, u64>) -> String {
    tres.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// The share and limits of `user`'s association with `account`, as listed.
fn assoc_limits(user: &crate::config::UserConfig, account: &str) -> Row {
    let limits = user.limits_in(account).cloned().unwrap_or_default();
    let number = |n: Option<u32>| n.map(|n| n.to_string()).unwrap_or_default();
    vec![
        ("Share", limits.shares.unwrap_or(1).to_string()),
        ("GrpJobs", String::new()),
        ("GrpTRES", tres_text(&limits.grp_tres)),
        ("MaxJobs", number(limits.max_jobs)),
        ("MaxSubmit", number(limits.max_submit_jobs)),
        ("MaxTRES", tres_text(&limits.max_tres_per_job)),
    ]
}

/// The rows of the listing, before formatting, and the default columns.
fn rows(config: &Config, request: &Request) -> (Vec<Row>, Vec<&'static str>) {
    let all_qos = config.qos.iter().map(|q| q.name.clone()).collect::<Vec<_>>().join(",");
    let default_qos = config.qos.first().map(|q| q.name.clone()).unwrap_or_default();
    // An association's `QOS` and `Def QOS`: its own list and default when the config restricts it.
    let assoc_qos = |user: Option<&str>, account: &str| match config.allowed_qos(user, account) {
        Some(list) => (list.join(","), config.default_qos(user, account).to_owned()),
        None => (all_qos.clone(), default_qos.clone()),
    };
    let cluster_ok = request.clusters.is_empty() || request.clusters.iter().any(|c| c == &config.cluster_name);
    let wanted = |list: &[String], value: &str| list.is_empty() || list.iter().any(|v| v == value);
    let mut rows: Vec<Row> = Vec::new();
    let defaults: Vec<&'static str>;
    match request.entity.as_str() {
        "user" => {
            defaults = if request.with_assoc {
                vec!["User", "DefaultAccount", "Admin", "Cluster", "Account", "Partition", "Share", "QOS", "DefaultQOS"]
            } else {
                vec!["User", "DefaultAccount", "Admin"]
            };
            let mut names: Vec<&str> = request.names.iter().chain(&request.users).map(String::as_str).collect();
            names.dedup();
            for user in &config.users {
                if !(names.is_empty() || names.contains(&user.name.as_str())) {
                    continue;
                }
                let base: Row = vec![
                    ("User", user.name.clone()),
                    ("DefaultAccount", user.default_account.clone()),
                    ("Admin", admin_level(config.role_of(&user.name)).to_owned()),
                ];
                if !request.with_assoc {
                    if cluster_ok && wanted(&request.accounts, &user.default_account) {
                        rows.push(base);
                    }
                    continue;
                }
                for account in user.accounts.iter().filter(|a| cluster_ok && wanted(&request.accounts, a)) {
                    let mut row = base.clone();
                    let (qos, default) = assoc_qos(Some(&user.name), account);
                    row.extend([
                        ("Cluster", config.cluster_name.clone()),
                        ("Account", account.clone()),
                        ("Partition", String::new()),
                        ("QOS", qos),
                        ("DefaultQOS", default),
                    ]);
                    row.extend(assoc_limits(user, account));
                    rows.push(row);
                }
            }
        }
        "account" => {
            defaults = if request.with_assoc {
                vec!["Account", "Descr", "Org", "Cluster", "ParentName", "User", "Share", "QOS", "DefaultQOS"]
            } else {
                vec!["Account", "Descr", "Org"]
            };
            for account in &config.accounts {
                let names: Vec<&String> = request.names.iter().chain(&request.accounts).collect();
                if !(names.is_empty() || names.contains(&&account.name)) || !cluster_ok {
                    continue;
                }
                let base: Row = vec![
                    ("Account", account.name.clone()),
                    ("Descr", account.name.clone()),
                    ("Org", account.name.clone()),
                ];
                if !request.with_assoc {
                    rows.push(base);
                    continue;
                }
                let assoc = |user: String, share: String| {
                    let mut row = base.clone();
                    let (qos, default) = assoc_qos(Some(user.as_str()).filter(|u| !u.is_empty()), &account.name);
                    row.extend([
                        ("Cluster", config.cluster_name.clone()),
                        ("ParentName", account.parent.clone().unwrap_or_default()),
                        ("User", user),
                        ("Share", share),
                        ("QOS", qos),
                        ("DefaultQOS", default),
                    ]);
                    row
                };
                rows.push(assoc(String::new(), account.shares.to_string()));
                for user in config.users.iter().filter(|u| u.accounts.contains(&account.name)) {
                    if wanted(&request.users, &user.name) {
                        let share = user.limits_in(&account.name).and_then(|l| l.shares).unwrap_or(1);
                        rows.push(assoc(user.name.clone(), share.to_string()));
                    }
                }
            }
        }
        "association" => {
            defaults =
                vec!["Cluster", "Account", "User", "Partition", "Share", "GrpJobs", "GrpTRES", "QOS", "DefaultQOS"];
            if cluster_ok {
                for account in config.accounts.iter().filter(|a| wanted(&request.accounts, &a.name)) {
                    if request.users.is_empty() {
                        let (qos, default) = assoc_qos(None, &account.name);
                        rows.push(vec![
                            ("Cluster", config.cluster_name.clone()),
                            ("Account", account.name.clone()),
                            ("User", String::new()),
                            ("Partition", String::new()),
                            ("Share", account.shares.to_string()),
                            ("GrpJobs", account.grp_jobs.map(|j| j.to_string()).unwrap_or_default()),
                            ("GrpSubmit", account.grp_submit_jobs.map(|j| j.to_string()).unwrap_or_default()),
                            ("GrpTRES", tres_text(&account.grp_tres)),
                            ("QOS", qos),
                            ("DefaultQOS", default),
                            ("ParentName", account.parent.clone().unwrap_or_default()),
                        ]);
                    }
                    for user in config.users.iter().filter(|u| u.accounts.contains(&account.name)) {
                        if wanted(&request.users, &user.name) {
                            let (qos, default) = assoc_qos(Some(&user.name), &account.name);
                            let mut row = vec![
                                ("Cluster", config.cluster_name.clone()),
                                ("Account", account.name.clone()),
                                ("User", user.name.clone()),
                                ("Partition", String::new()),
                                ("QOS", qos),
                                ("DefaultQOS", default),
                                ("ParentName", account.name.clone()),
                            ];
                            row.extend(assoc_limits(user, &account.name));
                            rows.push(row);
                        }
                    }
                }
            }
        }
        "qos" => {
            defaults = vec!["Name", "Priority", "MaxWall", "GrpJobs", "GrpTRES"];
            for qos in config.qos.iter().filter(|q| wanted(&request.names, &q.name)) {
                rows.push(vec![
                    ("Name", qos.name.clone()),
                    ("Priority", qos.priority.to_string()),
                    (
                        "MaxWall",
                        qos.max_wall
                            .and_then(|t| t.seconds())
                            .map(|s| {
                                let mut text = String::new();
                                crate::queue_lines::clock_into(&mut text, s.cast_signed());
                                text
                            })
                            .unwrap_or_default(),
                    ),
                    ("GrpJobs", qos.grp_jobs.map(|j| j.to_string()).unwrap_or_default()),
                    ("GrpTRES", tres_text(&qos.grp_tres)),
                ]);
            }
        }
        _ => {
            defaults = vec!["Cluster"];
            if wanted(&request.names, &config.cluster_name) && cluster_ok {
                rows.push(vec![("Cluster", config.cluster_name.clone())]);
            }
        }
    }
    (rows, defaults)
}

/// Renders the listing as Slurm does: columns right-aligned in their widths (values cut to the
/// width) under a header and a dash line, or `|`-separated with `-p`/`-P`.
fn render(rows: &[Row], columns: &[Column], noheader: bool, parsable: Option<bool>) -> String {
    let value =
        |row: &Row, field: &str| row.iter().find(|(f, _)| *f == field).map(|(_, v)| v.clone()).unwrap_or_default();
    let header =
        |column: &Column| FIELDS.iter().find(|(c, ..)| *c == column.field).map_or(column.field, |(_, h, _)| *h);
    let mut out = String::new();
    let line = |cells: Vec<String>, out: &mut String| match parsable {
        Some(trailing) => {
            out.push_str(&cells.join("|"));
            if trailing {
                out.push('|');
            }
            out.push('\n');
        }
        None => {
            let cells: Vec<String> = cells
                .iter()
                .zip(columns)
                .map(|(cell, column)| {
                    let cut: String = cell.chars().take(column.width).collect();
                    format!("{cut:>width$}", width = column.width)
                })
                .collect();
            out.push_str(&cells.join(" "));
            out.push_str(" \n");
        }
    };
    if !noheader {
        line(columns.iter().map(|c| header(c).to_owned()).collect(), &mut out);
        if parsable.is_none() {
            line(columns.iter().map(|c| "-".repeat(c.width)).collect(), &mut out);
        }
    }
    for row in rows {
        line(columns.iter().map(|c| value(row, c.field)).collect(), &mut out);
    }
    out
}

/// `PrivateData=users` and `accounts` for a plain user called `viewer`: only rows about
/// themselves (or no user) and about accounts they belong to.
fn private_rows(config: &Config, viewer: &str, rows: &mut Vec<Row>) {
    if config.role_of(viewer) != Role::User {
        return;
    }
    let private = config.private_data;
    let own_accounts: Vec<&str> = match config.users.iter().find(|u| u.name == viewer) {
        Some(user) => user.accounts.iter().map(String::as_str).collect(),
        None => config.default_account.iter().map(String::as_str).collect(),
    };
    let field = |row: &Row, name: &str| row.iter().find(|(f, _)| *f == name).map(|(_, v)| v.clone());
    rows.retain(|row| {
        let user_ok = !private.users || field(row, "User").is_none_or(|u| u.is_empty() || u == viewer);
        let account_ok = !private.accounts || field(row, "Account").is_none_or(|a| own_accounts.contains(&a.as_str()));
        user_ok && account_ok
    });
}

/// The listing `args` (sacctmgr's command line) ask for, as `viewer` may see it (`None`: all of
/// it); `Err` the message for a command line sacctmgr refuses.
pub fn listing(config: &Config, args: &[String], viewer: Option<&str>) -> Result<String, String> {
    let request = parse(args)?;
    if request.entity == "dump" {
        if !request.names.iter().any(|c| c.eq_ignore_ascii_case(&config.cluster_name)) {
            let named = request.names.first().map(|c| crate::text::printable(c).into_owned()).unwrap_or_default();
            return Err(format!("Cluster {named} doesn't exist (this is {})", config.cluster_name));
        }
        let private = config.private_data.accounts || config.private_data.users;
        if let Some(viewer) = viewer
            && private
            && config.role_of(viewer) == Role::User
        {
            return Err("Access/permission denied: PrivateData hides other users and accounts".into());
        }
        return Ok(dump::render(config, &format!("sacctmgr dump of cluster {} (Drover)", config.cluster_name)));
    }
    let (mut rows, defaults) = rows(config, &request);
    if let Some(viewer) = viewer {
        private_rows(config, viewer, &mut rows);
    }
    let columns =
        request.format.clone().unwrap_or_else(|| defaults.iter().map(|field| Column { field, width: 10 }).collect());
    Ok(render(&rows, &columns, request.noheader, request.parsable))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../etc/cluster.toml");
        Config::load(std::path::Path::new(path)).expect("etc/cluster.toml loads")
    }

    fn show(args: &str) -> String {
        let args: Vec<String> = args.split_whitespace().map(str::to_owned).collect();
        listing(&config(), &args, None).unwrap_or_else(|e| format!("error: {e}\n"))
    }

    #[test]
    fn private_users_and_accounts_leave_a_plain_user_their_own() {
        let mut config = config();
        config.private_data = crate::config::PrivateData { users: true, accounts: true, ..Default::default() };
        let args: Vec<String> = "-nP show assoc format=account,user".split_whitespace().map(str::to_owned).collect();
        let as_viewer = |viewer| listing(&config, &args, Some(viewer)).unwrap();
        assert_eq!(as_viewer("alice"), "vision|\nvision|alice\n");
        assert_eq!(as_viewer("bob"), "nlp|\nnlp|bob\nshared|\nshared|bob\n");
        // Root (an admin) sees every association, as without the setting.
        assert_eq!(as_viewer("root"), listing(&config, &args, None).unwrap());
        let users: Vec<String> = "-nP show user format=user".split_whitespace().map(str::to_owned).collect();
        assert_eq!(listing(&config, &users, Some("bob")).unwrap(), "bob\n");
    }

    #[test]
    fn snakemake_and_ood_account_lookups() {
        let config = config();
        let user = config.users.iter().find(|u| u.accounts.len() > 1).or(config.users.first()).expect("a user");
        // Snakemake: one padded account per line, whatever the width.
        let out = show(&format!("-n -s list user {} format=account%256", user.name));
        let accounts: Vec<&str> = out.lines().map(str::trim).collect();
        assert_eq!(accounts, user.accounts.iter().map(String::as_str).collect::<Vec<_>>(), "{out:?}");
        assert!(out.lines().all(|l| l.len() == 257), "{out:?}");
        // Open OnDemand: account|qos per association, no trailing separator.
        let out = show(&format!(
            "-nP show users withassoc format=account,qos where user={} cluster={}",
            user.name, config.cluster_name
        ));
        let qos = config.qos.iter().map(|q| q.name.clone()).collect::<Vec<_>>().join(",");
        let expected: String = user.accounts.iter().map(|a| format!("{a}|{qos}\n")).collect();
        assert_eq!(out, expected);
        // Another cluster's associations: none.
        assert_eq!(
            show(&format!("-nP show users withassoc format=account where user={} cluster=elsewhere", user.name)),
            ""
        );
        // An unknown user: nothing, not an error.
        assert_eq!(show("-n -s list user nosuchuser format=account%256"), "");
    }

    #[test]
    fn default_layout_and_errors() {
        let out = show("list cluster");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "   Cluster ");
        assert_eq!(lines[1], "---------- ");
        assert_eq!(lines[2].trim(), config().cluster_name);
        assert_eq!(show("-p list cluster format=cluster%5"), format!("Cluster|\n{}|\n", config().cluster_name));
        assert!(show("add user bob account=x").contains("lists only"));
        assert!(show("list user format=bogus").contains("Invalid field requested: \"bogus\""));
        assert!(show("list frobs").contains("Unknown or unsupported entity"));
    }
}
