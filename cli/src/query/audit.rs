//! `drover audit`: the controller's audit records: who (user and uid), from where, when, what,
//! on which job, and the outcome, refused requests included. Operators and admins see every
//! record; a user sees their own. Filters `--user --action --job --since --until`; a table by
//! default, `-P` for `|`-separated fields.

use super::common;
use super::format::{self, Tz};
use clap::{ArgAction, Parser};
use drover_shared::job::JobId;
use drover_shared::proto::client::{AuditQuery, AuditRow, Request, Response};
use std::ffi::OsString;

#[derive(Debug, Parser)]
#[command(name = "drover audit", about = "Query the controller's audit log", disable_help_flag = true)]
struct Args {
    /// Only requests by these users (names or uids, comma-separated).
    #[arg(short = 'u', long = "user")]
    users: Vec<String>,
    /// Only these actions (submit, cancel, signal, hold, release, update, requeue, drain, down,
    /// resume, undrain, reconfigure, end, node-fail, ...).
    #[arg(short = 'a', long = "action")]
    actions: Vec<String>,
    /// Only records about these job ids.
    #[arg(short = 'j', long = "job")]
    jobs: Vec<String>,
    /// Only records from this time on (sacct's time forms: `2026-11-30T04:00`, `now-1hour`, ...).
    #[arg(short = 'S', long = "since")]
    since: Option<String>,
    /// Only records up to this time.
    #[arg(short = 'E', long = "until")]
    until: Option<String>,
    /// `|`-separated fields, no padding.
    #[arg(short = 'P', long = "parsable")]
    parsable: bool,
    /// No header line.
    #[arg(short = 'n', long = "noheader")]
    noheader: bool,
    /// Print this help.
    #[arg(short = 'h', long = "help", action = ArgAction::Help)]
    help: Option<bool>,
}

/// Runs `drover audit`.
pub(crate) fn run(args: Vec<OsString>) -> anyhow::Result<i32> {
    let args = match common::parse_args::<Args>("drover audit", args) {
        Ok(args) => args,
        Err(code) => return Ok(code),
    };
    let now = drover_shared::now();
    let tz = Tz::Local;
    let mut job_ids = Vec::new();
    for text in common::flat_list(&args.jobs) {
        job_ids.push(text.parse::<JobId>().map_err(|_| anyhow::anyhow!("Invalid job id: {text}"))?);
    }
    let query = AuditQuery {
        uids: common::resolve_users(&args.users)?,
        actions: common::flat_list(&args.actions),
        job_ids,
        since: args.since.as_deref().map(|t| format::parse_time_spec(t, now, tz)).transpose()?,
        until: args.until.as_deref().map(|t| format::parse_time_spec(t, now, tz)).transpose()?,
    };
    match crate::client::call(&Request::QueryAudit(query))? {
        Response::Audit { rows } => {
            print!("{}", render(&rows, args.parsable, !args.noheader, tz));
            Ok(0)
        }
        Response::Error { code, detail } => {
            eprintln!("drover audit: error: {}: {detail}", code.message());
            Ok(1)
        }
        other => anyhow::bail!("unexpected answer from the controller: {other:?}"),
    }
}

const HEADERS: [&str; 8] = ["TIME", "USER", "UID", "ORIGIN", "ACTION", "JOBID", "OUTCOME", "DETAIL"];
/// Table widths; the last column is not padded.
const WIDTHS: [usize; 7] = [19, 10, 6, 12, 12, 8, 24];

fn fields(row: &AuditRow, tz: Tz) -> [String; 8] {
    [
        format::timestamp(row.time, tz),
        row.user.clone(),
        row.uid.to_string(),
        row.origin.clone(),
        row.action.clone(),
        row.job_id.map_or_else(String::new, |j| j.to_string()),
        row.outcome.clone(),
        row.detail.clone(),
    ]
}

/// The records as a table (`parsable`: `|`-separated), oldest first.
fn render(rows: &[AuditRow], parsable: bool, header: bool, tz: Tz) -> String {
    let cells: Vec<Vec<String>> = rows.iter().map(|row| fields(row, tz).to_vec()).collect();
    common::render_table(&HEADERS, &WIDTHS, &cells, parsable, header)
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;

    fn rows() -> Vec<AuditRow> {
        let row = |id, action: &str, job_id, outcome: &str, detail: &str| AuditRow {
            id,
            time: 1_764_460_800,
            uid: 1001,
            user: "bob".into(),
            origin: "local".into(),
            action: action.into(),
            job_id,
            outcome: outcome.into(),
            detail: detail.into(),
        };
        vec![
            row(1, "submit", Some(7), "ok", "name=wrap partition=main"),
            row(2, "hold", Some(6), "Access/permission denied", ""),
            row(3, "drain", None, "ok", "nodes=n1 reason=fan"),
        ]
    }

    #[test]
    fn table_and_parsable() {
        expect![[r#"
            TIME                USER       UID    ORIGIN       ACTION       JOBID    OUTCOME                  DETAIL
            2025-11-30T00:00:00 bob        1001   local        submit       7        ok                       name=wrap partition=main
            2025-11-30T00:00:00 bob        1001   local        hold         6        Access/permission denied
            2025-11-30T00:00:00 bob        1001   local        drain                 ok                       nodes=n1 reason=fan
        "#]]
        .assert_eq(&render(&rows(), false, true, Tz::Fixed(0)));
        expect![[r#"
            2025-11-30T00:00:00|bob|1001|local|hold|6|Access/permission denied|
        "#]]
        .assert_eq(&render(&rows()[1..2], true, false, Tz::Fixed(0)));
    }
}
