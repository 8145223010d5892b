//! `sacctmgr`, read-only: ctld answers from the configuration it runs (not the file on this
//! host, which may have been edited since, or be another host's copy), rendered by
//! `drover_shared::sacctmgr` as this caller may see it; this command prints the answer.

use anyhow::bail;
use drover_shared::proto::client::{Request, Response};
use std::ffi::OsString;

/// Runs `sacctmgr`.
pub(crate) fn run(args: Vec<OsString>) -> anyhow::Result<i32> {
    let args: Vec<String> = args.into_iter().map(|a| a.to_string_lossy().into_owned()).collect();
    match crate::client::call(&Request::Sacctmgr { args })? {
        Response::Listing { text } => {
            print!("{text}");
            Ok(0)
        }
        Response::Error { detail, .. } => {
            eprintln!("sacctmgr: error: {detail}");
            Ok(1)
        }
        _ => bail!("unexpected answer from the controller"),
    }
}
