//! Slurm commands Drover answers with why it does not run them, instead of a shell's "command
//! not found": `sattach`, `sbcast`, `sgather` and `strigger` (docs/compat.md says what to
//! use instead). `--help`, `--usage` and `-V` still answer as for any command.

use std::ffi::OsString;

/// Why `command` is not available, and what to use instead.
fn reason(command: &str) -> &'static str {
    match command {
        "sattach" => {
            "attaching to a running step's I/O is not supported yet; run the step with srun, \
             or follow its output file"
        }
        "sbcast" => {
            "broadcasting a file to the nodes of an allocation is not supported yet; copy it with \
             `srun --ntasks-per-node=1 cp SOURCE DEST` from a shared file system"
        }
        "sgather" => {
            "gathering files from the nodes of an allocation is not supported yet; copy them with \
             `srun --ntasks-per-node=1 sh -c 'cp FILE DEST.$SLURMD_NODENAME'` onto a shared file system"
        }
        "strigger" => {
            "event triggers are not supported; node drains, downs and job failures are alerts on \
             the /metrics endpoint (docs/admin/metrics.md) and entries of `drover node history`"
        }
        _ => "not supported",
    }
}

/// Answers `command` with its reason on stderr and exit status 1.
pub(crate) fn run(command: &str, args: &[OsString]) -> i32 {
    if args.iter().any(|a| a == "-V" || a == "--version") {
        println!("slurm 22.05.8");
        return 0;
    }
    eprintln!("{command}: error: {}", reason(command));
    if args.iter().any(|a| a == "--help" || a == "-h" || a == "--usage") {
        return 0;
    }
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_command_says_why_and_fails() {
        for command in ["sattach", "sbcast", "sgather", "strigger"] {
            assert_ne!(reason(command), "not supported", "{command}");
            assert_eq!(run(command, &[OsString::from("12")]), 1);
            assert_eq!(run(command, &[OsString::from("-V")]), 0);
        }
    }
}
