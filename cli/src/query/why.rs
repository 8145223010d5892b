//! `drover why JOBID`: asks ctld for every reason a job waits (or how it runs) and prints one
//! finding per line — a Drover extension; Slurm shows a single `Reason=`.

use drover_shared::proto::client::{Request, Response};
use std::ffi::OsString;

/// The one line of usage `drover why` prints.
const USAGE: &str = "usage: drover why JOBID";

pub(crate) fn run(args: Vec<OsString>) -> anyhow::Result<i32> {
    let [job] = args.as_slice() else {
        eprintln!("{USAGE}");
        return Ok(1);
    };
    if job == "--help" || job == "-h" {
        println!("{USAGE}\n\nEvery reason job JOBID waits, with the numbers behind each.");
        return Ok(0);
    }
    let Ok(job_id) = job.to_string_lossy().parse::<u32>() else {
        eprintln!("why: error: Invalid job id: {}", job.to_string_lossy());
        return Ok(1);
    };
    match crate::client::call(&Request::Explain { job_id })? {
        Response::Explanation { lines, .. } => {
            for line in lines {
                println!("{}", drover_shared::text::printable(&line));
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

#[cfg(test)]
mod tests {
    /// `drover why --help` answers (exit 0) without asking the controller.
    #[test]
    fn help_is_an_answer() {
        for flag in ["--help", "-h"] {
            assert_eq!(super::run(vec![flag.into()]).ok(), Some(0));
        }
    }
}
