//! This host's real hardware, as Slurm's `slurmd -C` reports it: CPUs online, their sockets,
//! cores per socket and threads per core (from `/sys/devices/system/cpu`), and memory
//! (`MemTotal` of `/proc/meminfo`, in MB). `drover-noded -C` prints it; at registration noded
//! compares it with its declaration and drains a node whose CPUs or memory fall short, with
//! Slurm's reasons, unless the config's `config_overrides` says the declaration wins.

use std::collections::BTreeSet;
use std::path::Path;

/// What this host has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hardware {
    pub cpus: u32,
    pub sockets: u32,
    pub cores_per_socket: u32,
    pub threads_per_core: u32,
    /// MB (Slurm's `RealMemory`).
    pub real_memory_mb: u64,
}

/// Reads this host's hardware from `sys` (`/sys/devices/system/cpu`) and `meminfo`
/// (`/proc/meminfo`); `None` when they cannot be read.
pub fn read(sys: &Path, meminfo: &Path) -> Option<Hardware> {
    let online = std::fs::read_to_string(sys.join("online")).ok()?;
    let cpus = cpu_list(online.trim())?;
    let mut sockets = BTreeSet::new();
    let mut cores = BTreeSet::new();
    for cpu in &cpus {
        let topology = sys.join(format!("cpu{cpu}")).join("topology");
        let read = |name: &str| std::fs::read_to_string(topology.join(name)).ok()?.trim().parse::<i64>().ok();
        let socket = read("physical_package_id").unwrap_or(0);
        sockets.insert(socket);
        cores.insert((socket, read("core_id").unwrap_or(i64::from(*cpu))));
    }
    let count = u32::try_from(cpus.len()).ok()?;
    let sockets = u32::try_from(sockets.len()).ok()?.max(1);
    let cores_per_socket = (u32::try_from(cores.len()).ok()? / sockets).max(1);
    let threads_per_core = (count / (sockets * cores_per_socket)).max(1);
    let meminfo = std::fs::read_to_string(meminfo).ok()?;
    let kib: u64 =
        meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(Hardware { cpus: count, sockets, cores_per_socket, threads_per_core, real_memory_mb: kib / 1024 })
}

/// This host's hardware from the usual places.
pub fn this_host() -> Option<Hardware> {
    read(Path::new("/sys/devices/system/cpu"), Path::new("/proc/meminfo"))
}

/// The CPUs of a kernel CPU list (`0-3,8,10-11`), at most 1,048,576 of them.
fn cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        let (first, last) = match part.split_once('-') {
            Some((first, last)) => (first.parse::<u32>().ok()?, last.parse::<u32>().ok()?),
            None => {
                let cpu = part.parse::<u32>().ok()?;
                (cpu, cpu)
            }
        };
        if last < first || cpus.len() + (last - first) as usize >= 1 << 20 {
            return None;
        }
        cpus.extend(first..=last);
    }
    Some(cpus)
}

/// `slurmd -C`'s lines for this host (`NodeName=… CPUs=… RealMemory=…`, then `UpTime=`), and
/// the same as a `[[nodes]]` table for `cluster.toml`, with the GPUs found (`type = count`).
pub fn describe(name: &str, hardware: &Hardware, gpus: &[(String, u32)], uptime_secs: u64) -> String {
    let days = uptime_secs / 86_400;
    let (hours, minutes, seconds) = (uptime_secs / 3600 % 24, uptime_secs / 60 % 60, uptime_secs % 60);
    let gres: Vec<String> = gpus.iter().map(|(kind, count)| format!("gpu:{kind}:{count}")).collect();
    let gres = if gres.is_empty() { String::new() } else { format!(" Gres={}", gres.join(",")) };
    let toml_gpus: Vec<String> = gpus.iter().map(|(kind, count)| format!("{kind} = {count}")).collect();
    let toml_gpus =
        if toml_gpus.is_empty() { String::new() } else { format!("gpus = {{ {} }}\n", toml_gpus.join(", ")) };
    format!(
        "NodeName={name} CPUs={} Boards=1 SocketsPerBoard={} CoresPerSocket={} ThreadsPerCore={} RealMemory={}{gres}\n\
         UpTime={days}-{hours:02}:{minutes:02}:{seconds:02}\n\
         \n\
         # for cluster.toml:\n\
         [[nodes]]\n\
         names = \"{name}\"\n\
         cpus = {}\n\
         real_memory = {}\n\
         {toml_gpus}",
        hardware.cpus,
        hardware.sockets,
        hardware.cores_per_socket,
        hardware.threads_per_core,
        hardware.real_memory_mb,
        hardware.cpus,
        hardware.real_memory_mb,
    )
}

/// Why a node declared with `cpus` CPUs and `real_memory_mb` MB cannot stand by that on
/// `hardware`, in Slurm's words (`sinfo -R`); `None` when the hardware holds the declaration.
pub fn shortfall(hardware: &Hardware, cpus: u32, real_memory_mb: u64) -> Option<String> {
    if hardware.cpus < cpus {
        return Some(format!(
            "Low socket*core*thread count, Low CPUs (reported:{} < configured:{cpus})",
            hardware.cpus
        ));
    }
    if hardware.real_memory_mb < real_memory_mb {
        return Some(format!(
            "Low RealMemory (reported:{} < 100.00% of configured:{real_memory_mb})",
            hardware.real_memory_mb
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host of two sockets of two cores with two threads each, 16 GiB.
    #[test]
    fn topology_and_memory_read_as_slurmd_reports_them() {
        let dir = tempfile::tempdir().unwrap();
        let sys = dir.path().join("cpu");
        std::fs::create_dir_all(&sys).unwrap();
        std::fs::write(sys.join("online"), "0-7\n").unwrap();
        for cpu in 0..8u32 {
            let topology = sys.join(format!("cpu{cpu}/topology"));
            std::fs::create_dir_all(&topology).unwrap();
            std::fs::write(topology.join("physical_package_id"), format!("{}\n", cpu / 4)).unwrap();
            std::fs::write(topology.join("core_id"), format!("{}\n", cpu % 4 / 2)).unwrap();
        }
        let meminfo = dir.path().join("meminfo");
        std::fs::write(&meminfo, "MemTotal:       16777216 kB\nMemFree:  1 kB\n").unwrap();
        let hardware = read(&sys, &meminfo).unwrap();
        assert_eq!(
            hardware,
            Hardware { cpus: 8, sockets: 2, cores_per_socket: 2, threads_per_core: 2, real_memory_mb: 16384 }
        );
        let text = describe("n1", &hardware, &[("h200".into(), 1)], 90_061);
        assert!(text.starts_with(
            "NodeName=n1 CPUs=8 Boards=1 SocketsPerBoard=2 CoresPerSocket=2 ThreadsPerCore=2 RealMemory=16384 Gres=gpu:h200:1\nUpTime=1-01:01:01\n"
        ), "{text}");
        assert!(
            text.contains("[[nodes]]\nnames = \"n1\"\ncpus = 8\nreal_memory = 16384\ngpus = { h200 = 1 }\n"),
            "{text}"
        );
    }

    #[test]
    fn a_declaration_above_the_hardware_is_a_shortfall_in_slurms_words() {
        let hardware =
            Hardware { cpus: 2, sockets: 1, cores_per_socket: 2, threads_per_core: 1, real_memory_mb: 23_000 };
        assert_eq!(shortfall(&hardware, 2, 23_000), None);
        assert_eq!(shortfall(&hardware, 1, 8_000), None);
        assert_eq!(
            shortfall(&hardware, 32, 8_000).as_deref(),
            Some("Low socket*core*thread count, Low CPUs (reported:2 < configured:32)")
        );
        assert_eq!(
            shortfall(&hardware, 2, 131_072).as_deref(),
            Some("Low RealMemory (reported:23000 < 100.00% of configured:131072)")
        );
        assert_eq!(cpu_list("0-1,4,6-7"), Some(vec![0, 1, 4, 6, 7]));
        assert_eq!(cpu_list("0-4294967295"), None, "bounded before it is expanded");
        assert_eq!(cpu_list("3-1"), None);
    }
}
