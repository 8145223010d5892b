//! srun's arbitrary distribution (`-m arbitrary`, or `SLURM_HOSTFILE` set without `-w`): the
//! host of each task, in task order, from `-w` (a hostlist expression, or a file when it names a
//! path) or from the file `SLURM_HOSTFILE` names, one host (or hostlist expression) per line.
//! Everything is bounded before it is read or expanded: the file's size and the host count.

use anyhow::{Context, bail};
use std::io::Read;

/// The most bytes of a host file srun reads.
pub(crate) const MAX_HOSTFILE_BYTES: u64 = 1 << 20;

/// The most tasks an arbitrary distribution may list.
pub(crate) const MAX_TASK_HOSTS: usize = 1 << 16;

/// The hosts `source` lists, duplicates kept: a file when it contains `/` (Slurm's rule), else a
/// hostlist expression. Empty lines and lines starting with `#` in a file are skipped.
pub(crate) fn task_hosts(source: &str) -> anyhow::Result<Vec<String>> {
    if !source.contains('/') {
        return expand(source, MAX_TASK_HOSTS);
    }
    let file = std::fs::File::open(source).with_context(|| format!("cannot open the host file {source}"))?;
    let mut text = String::new();
    file.take(MAX_HOSTFILE_BYTES + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("cannot read the host file {source}"))?;
    if text.len() as u64 > MAX_HOSTFILE_BYTES {
        bail!("the host file {source} is larger than {MAX_HOSTFILE_BYTES} bytes");
    }
    let mut hosts = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        hosts.extend(expand(line, MAX_TASK_HOSTS - hosts.len())?);
    }
    if hosts.is_empty() {
        bail!("Failure getting NodeNames from hostfile");
    }
    Ok(hosts)
}

fn expand(expr: &str, most: usize) -> anyhow::Result<Vec<String>> {
    drover_shared::hostlist::expand_at_most(expr, most)
        .map_err(|_| anyhow::anyhow!("invalid host list {expr:?}, or more than {MAX_TASK_HOSTS} tasks listed"))
}

/// The distinct hosts of `hosts`, in the order they first appear.
pub(crate) fn distinct(hosts: &[String]) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    hosts.iter().filter(|h| seen.insert(h.as_str())).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::{distinct, task_hosts};

    #[test]
    fn lists_and_files_keep_order_and_repeats() {
        assert_eq!(task_hosts("n2,n1,n[1-2]").unwrap(), ["n2", "n1", "n1", "n2"]);
        let dir = std::env::temp_dir().join(format!("drover-hostfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("hosts");
        std::fs::write(&file, "n3\n\n# a comment\nn1\nn[3-4]\n").unwrap();
        let hosts = task_hosts(file.to_str().unwrap()).unwrap();
        assert_eq!(hosts, ["n3", "n1", "n3", "n4"]);
        assert_eq!(distinct(&hosts), ["n3", "n1", "n4"]);
        std::fs::write(&file, "\n# nothing\n").unwrap();
        assert!(task_hosts(file.to_str().unwrap()).unwrap_err().to_string().contains("NodeNames"));
        std::fs::write(&file, "x".repeat(2 << 20)).unwrap();
        assert!(task_hosts(file.to_str().unwrap()).unwrap_err().to_string().contains("larger"));
        assert!(task_hosts("n[1-100000]").is_err());
        assert!(task_hosts(dir.join("missing").to_str().unwrap()).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
