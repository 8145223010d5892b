//! `drover node history NODE`: a node's recorded history, oldest first: every drain, down,
//! resume and undrain with who did it, the incident's owner, reason and ticket; the drains ctld
//! and noded made themselves with their evidence; and the jobs that failed there. `-n` bounds the
//! number of entries (the newest; default 100), `-P` prints `|`-separated fields.

use super::common;
use super::format::{self, Tz};
use clap::{ArgAction, Parser};
use drover_shared::proto::client::{NodeEvent, Request, Response};
use std::ffi::OsString;

#[derive(Debug, Parser)]
#[command(
    name = "drover node history",
    about = "Show a node's history of incidents and job failures",
    disable_help_flag = true
)]
struct Args {
    /// The node.
    node: String,
    /// The newest N entries (default 100, at most 10000).
    #[arg(short = 'n', long = "last", default_value_t = 100)]
    last: u32,
    /// `|`-separated fields, no padding.
    #[arg(short = 'P', long = "parsable")]
    parsable: bool,
    /// No header line.
    #[arg(long = "noheader")]
    noheader: bool,
    /// Print this help.
    #[arg(short = 'h', long = "help", action = ArgAction::Help)]
    help: Option<bool>,
}

/// Runs `drover node SUBCOMMAND …`; `history` is the one subcommand.
pub(crate) fn run(args: Vec<OsString>) -> anyhow::Result<i32> {
    let mut args = args.into_iter();
    match args.next().map(|a| a.to_string_lossy().into_owned()).as_deref() {
        Some("history") => history(args.collect()),
        _ => {
            eprintln!("usage: drover node history NODE [-n N] [-P] [--noheader]");
            Ok(1)
        }
    }
}

fn history(args: Vec<OsString>) -> anyhow::Result<i32> {
    let args = match common::parse_args::<Args>("drover node history", args) {
        Ok(args) => args,
        Err(code) => return Ok(code),
    };
    let request = Request::QueryNodeHistory { node: args.node, limit: args.last };
    match crate::client::call(&request)? {
        Response::NodeHistory { events } => {
            print!("{}", render(&events, args.parsable, !args.noheader, Tz::Local));
            Ok(0)
        }
        Response::Error { code, detail } => {
            eprintln!("drover node history: error: {}: {detail}", code.message());
            Ok(1)
        }
        other => anyhow::bail!("unexpected answer from the controller: {other:?}"),
    }
}

const HEADERS: [&str; 8] = ["TIME", "EVENT", "USER", "OWNER", "JOBID", "TICKET", "REASON", "EVIDENCE"];
/// Table widths; the last column is not padded.
const WIDTHS: [usize; 7] = [19, 11, 10, 10, 8, 12, 24];

fn fields(event: &NodeEvent, tz: Tz) -> Vec<String> {
    vec![
        format::timestamp(event.time, tz),
        event.event.clone(),
        event.user.clone(),
        event.owner.clone(),
        event.job_id.map_or_else(String::new, |j| j.to_string()),
        event.ticket.clone().unwrap_or_default(),
        event.reason.clone(),
        event.evidence.clone(),
    ]
}

fn render(events: &[NodeEvent], parsable: bool, header: bool, tz: Tz) -> String {
    let rows: Vec<Vec<String>> = events.iter().map(|e| fields(e, tz)).collect();
    common::render_table(&HEADERS, &WIDTHS, &rows, parsable, header)
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;

    #[test]
    fn history_as_a_table_and_parsable() {
        let event =
            |event: &str, user: &str, owner: &str, job_id, ticket: Option<&str>, reason: &str, evidence: &str| {
                NodeEvent {
                    time: 1_764_460_800,
                    node: "n1".into(),
                    event: event.into(),
                    uid: 0,
                    user: user.into(),
                    owner: owner.into(),
                    reason: reason.into(),
                    ticket: ticket.map(str::to_owned),
                    evidence: evidence.into(),
                    job_id,
                }
            };
        let events = vec![
            event("job_failure", "alice", "", Some(7), None, "", "FAILED 1:0 (NonZeroExitCode)"),
            event("auto_drain", "root", "system", None, None, "jobs keep failing here", "2 jobs of 2 users"),
            event("drain", "root", "hw-team", None, Some("INC-7"), "fan|loud", ""),
        ];
        expect![[r#"
            TIME                EVENT       USER       OWNER      JOBID    TICKET       REASON                   EVIDENCE
            2025-11-30T00:00:00 job_failure alice                 7                                              FAILED 1:0 (NonZeroExitCode)
            2025-11-30T00:00:00 auto_drain  root       system                           jobs keep failing here   2 jobs of 2 users
            2025-11-30T00:00:00 drain       root       hw-team             INC-7        fan|loud
        "#]]
        .assert_eq(&render(&events, false, true, Tz::Fixed(0)));
        expect![[r#"
            2025-11-30T00:00:00|drain|root|hw-team||INC-7|fan?loud|
        "#]]
        .assert_eq(&render(&events[2..], true, false, Tz::Fixed(0)));
    }
}
