//! `sacctmgr`: listings and `dump` are rendered by ctld from the configuration it runs (not the
//! file on this host, which may have been edited since, or be another host's copy), as this
//! caller may see them; this command prints them (a dump into its `file=`). Changes (`add`,
//! `create`, `modify`, `update`, `delete`, `remove`, `load FILE`) are parsed here
//! (`drover_shared::sacctmgr::edit`) and sent to ctld, which applies, stores and audits them.
//! Without `-i` the change is first described and the user asked to commit it, as Slurm does;
//! `-Q` prints only the `Nothing …` messages and errors. A change that changes nothing exits 1.

use anyhow::bail;
use drover_shared::proto::client::{ErrorCode, Request, Response};
use drover_shared::sacctmgr::dump;
use drover_shared::sacctmgr::edit::{self, Change};
use std::ffi::OsString;
use std::io::{BufRead, Read, Write};

/// What `sacctmgr --usage` and `--help` print: Slurm's layout (the `<OPTION>`, `<COMMAND>`,
/// `<ENTITY>` and `<SPECS>` sections), Drover's words and commands.
const USAGE: &str = "\
sacctmgr [<OPTION>] [<COMMAND>]
    Valid <OPTION> values are:
     -h or --help: print this text (so does --usage)
     -i or --immediate: commit changes without asking
     -n or --noheader: no header line in the listings
     -p or --parsable: fields separated by '|', one at the end of each line
     -P or --parsable2: fields separated by '|', none at the end
     -Q or --quiet: print only errors and the Nothing ... messages
     -r or --readonly: refuse changes
     -s or --withassoc: list users with their associations
     -V or --version: print the version

    Valid <COMMAND> values are:
     list <ENTITY> [<SPECS>]: print the entities the cluster configuration holds (show is
                              the same); e.g. list users, list accounts, list associations,
                              list qos, list clusters
     add <ENTITY> <SPECS>:    add (create) accounts, users (their associations) and QOS;
                              e.g. add account physics, add user ann account=physics
     modify <ENTITY> <SPECS>: modify (update) them: modify user ann set DefaultAccount=physics,
                              modify account physics set GrpSubmitJobs=0, modify qos high
                              set Priority=10; modify cluster is not supported
     delete <ENTITY> <SPECS>: delete (remove) them: delete user ann account=physics,
                              delete account physics, delete qos high
     dump <CLUSTER> [File=F]: the cluster's accounts and users in Slurm's flat file format
     load <FILE>:             add the accounts and users of such a file where missing
     archive:                 not supported

  <ENTITY> may be \"account\", \"association\", \"cluster\", \"qos\" or \"user\".

  <SPECS> are different for each command entity pair; list takes name=, user=, account=,
  cluster= (after an optional `where`), withassoc, and format=field[%width],...; modify and
  delete take the same conditions (after an optional `where`), modify its settings after `set`.
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
        println!("{}", crate::options::help::VERSION);
        return Ok(0);
    }
    let words: Vec<String> = args.iter().filter(|a| !a.starts_with('-') || a.len() == 1).cloned().collect();
    let verb = words.first().map(|w| w.to_ascii_lowercase()).unwrap_or_default();
    let flag = |short: char, long: &str| {
        args.iter().any(|a| a == long || (a.starts_with('-') && !a.starts_with("--") && a[1..].contains(short)))
    };
    if matches!(verb.as_str(), "add" | "create" | "modify" | "update" | "delete" | "remove" | "load") {
        if flag('r', "--readonly") {
            eprintln!("sacctmgr: error: Can't run this command in readonly mode.");
            return Ok(1);
        }
        let change =
            if verb == "load" { load(&words[1..]) } else { edit::parse(&words).map_err(|e| e.trim().to_owned()) };
        return match change {
            Ok(change) => send_change(change, flag('i', "--immediate"), flag('Q', "--quiet")),
            Err(e) => {
                eprintln!(" {e}");
                Ok(1)
            }
        };
    }
    // `dump CLUSTER file=F`: ctld's dump, written to F as this user (printed without a file).
    let file = words.iter().skip(1).filter(|_| verb == "dump").find_map(|w| match w.split_once('=') {
        Some((k, v)) if k.eq_ignore_ascii_case("file") => Some(v.to_owned()),
        _ => None,
    });
    match crate::client::call(&Request::Sacctmgr { args })? {
        Response::Listing { text } => match file {
            Some(file) => match std::fs::write(&file, text) {
                Ok(()) => Ok(0),
                Err(e) => {
                    eprintln!("sacctmgr: error: Can't open file {file}: {e}");
                    Ok(1)
                }
            },
            None => {
                print!("{text}");
                Ok(0)
            }
        },
        Response::Error { detail, .. } => {
            eprintln!("sacctmgr: error: {detail}");
            Ok(1)
        }
        _ => bail!("unexpected answer from the controller"),
    }
}

/// `load FILE` (or `load file=FILE`): the file read, bounded, into one change.
fn load(words: &[String]) -> Result<Change, String> {
    let path = words
        .iter()
        .find_map(|w| match w.split_once('=') {
            Some((k, v)) if k.eq_ignore_ascii_case("file") => Some(v.to_owned()),
            Some(_) => None,
            None => Some(w.clone()),
        })
        .ok_or("No filename given to load")?;
    let file = std::fs::File::open(&path).map_err(|e| format!("Can't open {path}: {e}"))?;
    let mut text = String::new();
    file.take(dump::MAX_FILE + 1).read_to_string(&mut text).map_err(|e| format!("Can't read {path}: {e}"))?;
    if text.len() as u64 > dump::MAX_FILE {
        return Err(format!("{path} is larger than {} MiB", dump::MAX_FILE >> 20));
    }
    dump::parse(&text)
}

/// Sends a change: at once with `-i`, else described first and committed when the user says so.
fn send_change(change: Change, immediate: bool, quiet: bool) -> anyhow::Result<i32> {
    let call = |commit: bool| -> anyhow::Result<Result<(String, bool), String>> {
        let request = Request::SacctmgrChange { change: Box::new(change.clone()), commit };
        Ok(match crate::client::call(&request)? {
            Response::AcctChanged { text, changed } => Ok((text, changed)),
            // sacctmgr's own messages start with a space; others are ctld's words.
            Response::Error { detail, .. } if detail.starts_with(' ') => Err(detail),
            Response::Error { code: ErrorCode::AccessDenied, detail } => {
                Err(format!("sacctmgr: error: {} ({detail})", ErrorCode::AccessDenied.message()))
            }
            Response::Error { detail, .. } => Err(format!("sacctmgr: error: {detail}")),
            _ => bail!("unexpected answer from the controller"),
        })
    };
    let (text, changed) = match call(immediate)? {
        Ok(answer) => answer,
        Err(detail) => {
            eprintln!("{detail}");
            return Ok(1);
        }
    };
    if !changed {
        print!("{text}");
        return Ok(1);
    }
    if !quiet {
        print!("{text}");
    }
    if immediate {
        return Ok(0);
    }
    print!("Would you like to commit changes? (You have 30 seconds to decide)\n(N/y): ");
    let _ = std::io::stdout().flush();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::stdin().lock().take(1024).read_line(&mut line);
        let _ = tx.send(line);
    });
    match rx.recv_timeout(std::time::Duration::from_secs(30)) {
        Ok(line) if line.trim().eq_ignore_ascii_case("y") || line.trim().eq_ignore_ascii_case("yes") => {
            match call(true)? {
                Ok((_, true)) => Ok(0),
                Ok((text, false)) => {
                    print!("{text}");
                    Ok(1)
                }
                Err(detail) => {
                    eprintln!("{detail}");
                    Ok(1)
                }
            }
        }
        Ok(_) => {
            println!(" Changes Discarded");
            Ok(0)
        }
        Err(_) => {
            println!("\nYou didn't commit changes; they are discarded.");
            Ok(1)
        }
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
            "delete account",
        ] {
            assert!(super::USAGE.contains(line), "{line}");
        }
    }
}
