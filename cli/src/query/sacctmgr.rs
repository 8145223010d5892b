//! `sacctmgr`, read-only: ctld answers from the configuration it runs (not the file on this
//! host, which may have been edited since, or be another host's copy), rendered by
//! `drover_shared::sacctmgr` as this caller may see it; this command prints the answer.

use anyhow::bail;
use drover_shared::proto::client::{Request, Response};
use std::ffi::OsString;

/// What `sacctmgr --usage` and `--help` print: Slurm's layout (the `<OPTION>`, `<COMMAND>`,
/// `<ENTITY>` and `<SPECS>` sections), Drover's words and commands.
const USAGE: &str = "\
sacctmgr [<OPTION>] [<COMMAND>]
    Valid <OPTION> values are:
     -h or --help: print this text (so does --usage)
     -i or --immediate: accepted (nothing is ever committed)
     -n or --noheader: no header line in the listings
     -p or --parsable: fields separated by '|', one at the end of each line
     -P or --parsable2: fields separated by '|', none at the end
     -Q or --quiet, -r or --readonly: accepted
     -s or --withassoc: list users with their associations
     -V or --version: print the version

    Valid <COMMAND> values are:
     list <ENTITY> [<SPECS>]: print the entities the cluster configuration holds (show is
                              the same); e.g. list users, list accounts, list associations,
                              list qos, list clusters
     add <ENTITY> <SPECS>, modify <ENTITY> <SPECS>, delete <ENTITY> <SPECS>, archive, dump,
     load: Drover's accounts, users and QOS come from the cluster config file, so these
                              (add account, add user, modify cluster, modify user, delete qos,
                              delete account, ...) are refused with a message saying so: edit
                              the file and run `scontrol reconfigure`

  <ENTITY> may be \"account\", \"association\", \"cluster\", \"qos\" or \"user\".

  <SPECS> are different for each command entity pair; list takes name=, user=, account=,
  cluster= (after an optional `where`), withassoc, and format=field[%width],...
";

/// Runs `sacctmgr`.
pub(crate) fn run(args: Vec<OsString>) -> anyhow::Result<i32> {
    let args: Vec<String> = args.into_iter().map(|a| a.to_string_lossy().into_owned()).collect();
    // Answered here, without a cluster: the help, usage and version.
    let command = args.iter().find(|a| !a.starts_with('-')).map(String::as_str);
    if command == Some("help") || args.iter().any(|a| matches!(a.as_str(), "-h" | "--help" | "--usage")) {
        print!("{USAGE}");
        return Ok(0);
    }
    if command == Some("version") || args.iter().any(|a| matches!(a.as_str(), "-V" | "--version")) {
        println!("{}", crate::sbatch::help::VERSION);
        return Ok(0);
    }
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

#[cfg(test)]
mod tests {
    /// The usage has Slurm's section lines (the suite and scripts look for them) and names the
    /// commands Drover answers, the write ones included (which it refuses).
    #[test]
    fn usage_has_slurms_sections() {
        for line in [
            "sacctmgr [<OPTION>] [<COMMAND>]",
            "Valid <OPTION> values are:",
            "Valid <COMMAND> values are:",
            "<ENTITY> may be",
            "<SPECS> are different for each command entity pair",
            "add account",
            "list associations",
            "modify cluster",
            "delete qos",
        ] {
            assert!(super::USAGE.contains(line), "{line}");
        }
    }
}
