//! `drover why JOBID`: asks ctld for every reason a job waits (or how it runs) and prints one
//! finding per line — a Drover extension; Slurm shows a single `Reason=`. ctld writes times as
//! `unix time N`; they are printed in local time (`%FT%T`, as squeue's), or left as they are
//! under `--unix` (for scripts).

use drover_shared::proto::client::{Request, Response};
use std::ffi::OsString;

/// The one line of usage `drover why` prints.
const USAGE: &str = "usage: drover why [--unix] JOBID";

pub(crate) fn run(args: Vec<OsString>) -> anyhow::Result<i32> {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!(
            "{USAGE}\n\nEvery reason job JOBID waits, with the numbers behind each. Times are local \
             (YYYY-MM-DDTHH:MM:SS);\n--unix prints them as seconds since 1970 instead."
        );
        return Ok(0);
    }
    let unix = args.iter().any(|a| a == "--unix");
    let rest: Vec<&OsString> = args.iter().filter(|a| *a != "--unix").collect();
    let [job] = rest.as_slice() else {
        eprintln!("{USAGE}");
        return Ok(1);
    };
    let Ok(job_id) = job.to_string_lossy().parse::<u32>() else {
        eprintln!("why: error: Invalid job id: {}", job.to_string_lossy());
        return Ok(1);
    };
    match crate::client::call(&Request::Explain { job_id })? {
        Response::Explanation { lines, .. } => {
            for line in lines {
                let line = drover_shared::text::printable(&line);
                if unix {
                    println!("{line}");
                } else {
                    println!("{}", local_times(&line, crate::query::format::Tz::Local));
                }
            }
            Ok(0)
        }
        Response::Error { code, .. } => {
            eprintln!("why: error: {code}");
            Ok(1)
        }
        other => anyhow::bail!("unexpected answer from the controller: {other:?}"),
    }
}

/// `line` with each `unix time N` written as a timestamp in `tz`.
fn local_times(line: &str, tz: crate::query::format::Tz) -> String {
    const MARK: &str = "unix time ";
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find(MARK) {
        out.push_str(&rest[..at]);
        let after = &rest[at + MARK.len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        match after[..digits].parse::<i64>() {
            Ok(time) => out.push_str(&crate::query::format::timestamp(time, tz)),
            Err(_) => out.push_str(MARK),
        }
        rest = if digits > 0 { &after[digits..] } else { after };
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    /// Times become timestamps; a line without one, or a mark without digits, is unchanged.
    #[test]
    fn times_are_written_as_timestamps() {
        let utc = crate::query::format::Tz::Fixed(0);
        assert_eq!(
            super::local_times("estimated start: in 0h59m (unix time 1700003600) (backfill reservation)", utc),
            "estimated start: in 0h59m (2023-11-14T23:13:20) (backfill reservation)"
        );
        assert_eq!(
            super::local_times("from unix time 0 to unix time 60, held since unix time x", utc),
            "from 1970-01-01T00:00:00 to 1970-01-01T00:01:00, held since unix time x"
        );
        assert_eq!(super::local_times("QOSGrpGRES: 2 in use", utc), "QOSGrpGRES: 2 in use");
    }

    /// `drover why --help` answers (exit 0) without asking the controller.
    #[test]
    fn help_is_an_answer() {
        for flag in ["--help", "-h"] {
            assert_eq!(super::run(vec![flag.into()]).ok(), Some(0));
        }
    }
}
