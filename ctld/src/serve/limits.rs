//! The process limits ctld's listeners need: its open-file limit raised toward what the
//! cluster's node connections take, as Slurm's daemons raise theirs at start.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Raises the soft open-file limit to `wanted`, or to the hard limit where that is lower.
/// Returns the soft limit now in force; a limit already high enough is left as it is.
pub(crate) fn raise_open_files(wanted: u64) -> nix::Result<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft >= wanted {
        return Ok(soft);
    }
    let raised = wanted.min(hard);
    setrlimit(Resource::RLIMIT_NOFILE, raised, hard)?;
    Ok(raised)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The soft limit rises to the hard limit at most, and a high enough one stays.
    #[test]
    fn the_soft_limit_rises_up_to_the_hard_one() {
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(raise_open_files(1).unwrap(), soft);
        assert_eq!(raise_open_files(u64::MAX).unwrap(), hard);
        assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap(), (hard, hard));
    }
}
