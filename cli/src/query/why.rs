//! `drover why JOBID`: asks ctld for every reason a job waits (or how it runs) and prints one
//! finding per line — a Drover extension; Slurm shows a single `Reason=`.

use drover_shared::proto::client::{Request, Response};
use std::ffi::OsString;

pub(crate) fn run(args: Vec<OsString>) -> anyhow::Result<i32> {
    let [job] = args.as_slice() else {
        eprintln!("usage: drover why JOBID");
        return Ok(1);
    };
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
