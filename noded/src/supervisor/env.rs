//! The environment of a batch script (slurm-compat §2): the environment the job was submitted with,
//! exactly, plus the `SLURM_*` variables Slurm computes at launch and at task setup, the GPU
//! variables, and `DROVER_SOCKET`. A pure function of the launch request, so it is tested here
//! and computed in the job's child process, where its pid is known.
//!
//! `USER`, `HOME`, `LOGNAME` and `SHELL` come only from the submitted environment, as in Slurm.
//! `CUDA_VISIBLE_DEVICES` carries the global indices, except where the job's device cgroup hides
//! the other GPUs: then it is renumbered from 0 or lists MIG UUIDs (§9.5), while `SLURM_JOB_GPUS`
//! keeps the global ones.

use drover_shared::hostlist;
use drover_shared::job::MemRequest;
use drover_shared::proto::node::LaunchRequest;

/// The batch script's environment, in order: the submitted variables first (a computed variable
/// replaces a submitted one of the same name in place), then the computed ones.
/// `cuda_visible_devices` replaces the global indices in `CUDA_VISIBLE_DEVICES` and
/// `GPU_DEVICE_ORDINAL` when the job's device cgroup hides its other GPUs.
pub(super) fn batch_environment(
    launch: &LaunchRequest,
    hostname: &str,
    task_pid: u32,
    cuda_visible_devices: Option<&str>,
) -> Vec<(String, String)> {
    let spec = &launch.spec;
    let mut env = Environment(spec.environment.clone());
    let join = |numbers: &[u32]| numbers.iter().map(u32::to_string).collect::<Vec<_>>().join(",");

    env.set("SLURM_JOB_ID", launch.job_id);
    env.set("SLURM_JOBID", launch.job_id);
    env.set("SLURM_JOB_NAME", &spec.name);
    env.set("SLURM_JOB_PARTITION", &launch.partition);
    if !launch.account.is_empty() {
        env.set("SLURM_JOB_ACCOUNT", &launch.account);
    }
    if !launch.qos.is_empty() {
        env.set("SLURM_JOB_QOS", &launch.qos);
    }
    let nodelist = hostlist::compress(&launch.nodes);
    env.set("SLURM_JOB_NODELIST", &nodelist);
    env.set("SLURM_NODELIST", &nodelist);
    env.set("SLURM_JOB_NUM_NODES", launch.nodes.len());
    env.set("SLURM_NNODES", launch.nodes.len());
    env.set("SLURM_JOB_CPUS_PER_NODE", run_length(&launch.cpus_per_node));
    env.set("SLURM_TASKS_PER_NODE", run_length(&launch.tasks_per_node));
    if let Some(ntasks) = spec.ntasks {
        env.set("SLURM_NTASKS", ntasks);
        env.set("SLURM_NPROCS", ntasks);
    }
    if let Some(cpus_per_task) = spec.cpus_per_task {
        env.set("SLURM_CPUS_PER_TASK", cpus_per_task);
    }
    if spec.overcommit {
        // srun reads it: the job's steps overcommit its CPUs too.
        env.set("SLURM_OVERCOMMIT", 1);
    }
    env.set("SLURM_CPUS_ON_NODE", launch.cpus_on_node);
    match spec.mem {
        Some(MemRequest::PerCpu(mb)) if mb != 0 => env.set("SLURM_MEM_PER_CPU", mb),
        Some(MemRequest::PerCpu(_)) => {}
        _ if launch.mem_per_node_mb != 0 => env.set("SLURM_MEM_PER_NODE", launch.mem_per_node_mb),
        _ => {}
    }
    env.set("SLURM_SUBMIT_DIR", &spec.submit_dir);
    env.set("SLURM_SUBMIT_HOST", &spec.submit_host);
    env.set("SLURM_CLUSTER_NAME", &launch.cluster_name);
    env.set("SLURM_PROCID", 0);
    env.set("SLURM_LOCALID", 0);
    env.set("SLURM_NODEID", 0);
    env.set("SLURM_GTIDS", 0);
    env.set("SLURM_TASK_PID", task_pid);
    env.set("SLURM_JOB_UID", launch.uid);
    env.set("SLURM_JOB_USER", &launch.user);
    env.set("SLURM_JOB_GID", launch.gid);
    env.set("SLURMD_NODENAME", launch.nodes.first().map_or(hostname, String::as_str));
    // sbatch records its own scheduling priority here; keep it when the submission carried it.
    env.set_if_absent("SLURM_PRIO_PROCESS", 0);
    env.set("SLURM_UMASK", format!("{:04o}", spec.umask));
    if let Some(export) = &spec.export {
        env.set("SLURM_EXPORT_ENV", export);
    }
    if let Some(append) = spec.open_append {
        env.set("SLURM_OPEN_MODE", if append { "a" } else { "t" });
    }
    env.set("ENVIRONMENT", "BATCH");
    env.set("HOSTNAME", hostname);
    if !launch.gpus.is_empty() {
        let gpus = join(&launch.gpus);
        env.set("SLURM_JOB_GPUS", &gpus);
        env.set("SLURM_GPUS_ON_NODE", launch.gpus.len());
        match cuda_visible_devices {
            Some(visible) => {
                env.set("CUDA_VISIBLE_DEVICES", visible);
                env.set(
                    "GPU_DEVICE_ORDINAL",
                    (0..launch.gpus.len()).map(|idx| idx.to_string()).collect::<Vec<_>>().join(","),
                );
            }
            None => {
                env.set("CUDA_VISIBLE_DEVICES", &gpus);
                env.set("GPU_DEVICE_ORDINAL", &gpus);
            }
        }
    }
    match &launch.array {
        Some(array) => {
            env.set("SLURM_ARRAY_JOB_ID", array.array_job_id);
            env.set("SLURM_ARRAY_TASK_ID", array.task_id);
            env.set("SLURM_ARRAY_TASK_COUNT", array.count);
            env.set("SLURM_ARRAY_TASK_MAX", array.max);
            env.set("SLURM_ARRAY_TASK_MIN", array.min);
            env.set("SLURM_ARRAY_TASK_STEP", array.step);
        }
        None => {
            // A job submitted from inside an array task must not look like one (clients.md §9).
            for name in ARRAY_VARIABLES {
                env.0.retain(|(n, _)| n != name);
            }
        }
    }
    if launch.restart_count > 0 {
        env.set("SLURM_RESTART_COUNT", launch.restart_count);
    }
    env.set("DROVER_SOCKET", &launch.ctld_socket);
    env.0
}

/// The array variables, removed from the environment of a job that is not an array task.
const ARRAY_VARIABLES: [&str; 6] = [
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_STEP",
];

/// Slurm's run-length list: `[72, 72, 36]` → `72(x2),36`.
fn run_length(counts: &[u32]) -> String {
    let mut groups: Vec<(u32, usize)> = Vec::new();
    for &count in counts {
        match groups.last_mut() {
            Some((last, n_repeats)) if *last == count => *n_repeats += 1,
            _ => groups.push((count, 1)),
        }
    }
    let parts: Vec<String> = groups
        .into_iter()
        .map(|(count, n_repeats)| if n_repeats == 1 { count.to_string() } else { format!("{count}(x{n_repeats})") })
        .collect();
    parts.join(",")
}

/// An ordered environment with Slurm's `setenvf` semantics: setting a name replaces its value.
struct Environment(Vec<(String, String)>);

impl Environment {
    fn set(&mut self, name: &str, value: impl ToString) {
        let value = value.to_string();
        match self.0.iter().position(|(existing, _)| existing == name) {
            Some(idx) => {
                self.0[idx].1 = value;
                let mut seen = false;
                self.0.retain(|(existing, _)| existing != name || !std::mem::replace(&mut seen, true));
            }
            None => self.0.push((name.to_owned(), value)),
        }
    }

    fn set_if_absent(&mut self, name: &str, value: impl ToString) {
        if !self.0.iter().any(|(existing, _)| existing == name) {
            self.0.push((name.to_owned(), value.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_shared::grammar::time::TimeLimit;
    use drover_shared::job::JobSpec;

    fn launch() -> LaunchRequest {
        LaunchRequest {
            job_id: 4242,
            spec: JobSpec {
                name: "train".into(),
                work_dir: "/home/alice/run".into(),
                submit_dir: "/home/alice".into(),
                submit_host: "login1".into(),
                environment: vec![
                    ("PATH".into(), "/usr/bin:/bin".into()),
                    ("HOME".into(), "/home/alice".into()),
                    ("USER".into(), "alice".into()),
                    ("SLURM_JOB_ID".into(), "stale".into()),
                    ("SLURM_PRIO_PROCESS".into(), "5".into()),
                ],
                umask: 0o022,
                ..JobSpec::default()
            },
            user: "alice".into(),
            uid: 1001,
            gid: 1002,
            cluster_name: "drover".into(),
            partition: "gpu".into(),
            account: "vision".into(),
            qos: "normal".into(),
            time_limit: TimeLimit::Minutes(60),
            nodes: vec!["gpu01".into(), "gpu02".into(), "gpu03".into()],
            cpus_per_node: vec![72, 72, 36],
            tasks_per_node: vec![2, 2, 2],
            cpus_on_node: 72,
            mem_per_node_mb: 0,
            gpus: vec![0, 3],
            kill_wait: 30,
            ctld_socket: "/run/drover/ctld.sock".into(),
            array: None,
            restart_count: 0,
        }
    }

    fn render(env: &[(String, String)]) -> String {
        env.iter().map(|(name, value)| format!("{name}={value}\n")).collect()
    }

    #[test]
    fn full_batch_environment() {
        let env = batch_environment(&launch(), "gpu01.cluster", 777, None);
        assert_eq!(
            render(&env),
            "\
PATH=/usr/bin:/bin
HOME=/home/alice
USER=alice
SLURM_JOB_ID=4242
SLURM_PRIO_PROCESS=5
SLURM_JOBID=4242
SLURM_JOB_NAME=train
SLURM_JOB_PARTITION=gpu
SLURM_JOB_ACCOUNT=vision
SLURM_JOB_QOS=normal
SLURM_JOB_NODELIST=gpu[01-03]
SLURM_NODELIST=gpu[01-03]
SLURM_JOB_NUM_NODES=3
SLURM_NNODES=3
SLURM_JOB_CPUS_PER_NODE=72(x2),36
SLURM_TASKS_PER_NODE=2(x3)
SLURM_CPUS_ON_NODE=72
SLURM_SUBMIT_DIR=/home/alice
SLURM_SUBMIT_HOST=login1
SLURM_CLUSTER_NAME=drover
SLURM_PROCID=0
SLURM_LOCALID=0
SLURM_NODEID=0
SLURM_GTIDS=0
SLURM_TASK_PID=777
SLURM_JOB_UID=1001
SLURM_JOB_USER=alice
SLURM_JOB_GID=1002
SLURMD_NODENAME=gpu01
SLURM_UMASK=0022
ENVIRONMENT=BATCH
HOSTNAME=gpu01.cluster
SLURM_JOB_GPUS=0,3
SLURM_GPUS_ON_NODE=2
CUDA_VISIBLE_DEVICES=0,3
GPU_DEVICE_ORDINAL=0,3
DROVER_SOCKET=/run/drover/ctld.sock
"
        );
    }

    #[test]
    fn optional_variables() {
        let mut launch = launch();
        launch.account.clear();
        launch.qos.clear();
        launch.gpus.clear();
        launch.mem_per_node_mb = 4000;
        launch.spec.environment.clear();
        launch.spec.export = Some("NONE".into());
        launch.spec.open_append = Some(true);
        launch.spec.ntasks = Some(6);
        launch.spec.cpus_per_task = Some(4);
        launch.spec.umask = 0o077;
        let env = batch_environment(&launch, "h", 1, None);
        let get = |name: &str| env.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        assert_eq!(get("SLURM_JOB_ACCOUNT"), None);
        assert_eq!(get("SLURM_JOB_QOS"), None);
        assert_eq!(get("SLURM_JOB_GPUS"), None);
        assert_eq!(get("CUDA_VISIBLE_DEVICES"), None);
        assert_eq!(get("SLURM_MEM_PER_NODE"), Some("4000"));
        assert_eq!(get("SLURM_EXPORT_ENV"), Some("NONE"));
        assert_eq!(get("SLURM_OPEN_MODE"), Some("a"));
        assert_eq!(get("SLURM_NTASKS"), Some("6"));
        assert_eq!(get("SLURM_NPROCS"), Some("6"));
        assert_eq!(get("SLURM_CPUS_PER_TASK"), Some("4"));
        assert_eq!(get("SLURM_PRIO_PROCESS"), Some("0"));
        assert_eq!(get("SLURM_UMASK"), Some("0077"));
        assert_eq!(get("USER"), None, "USER comes only from the submitted environment");

        launch.spec.mem = Some(MemRequest::PerCpu(1000));
        launch.spec.open_append = Some(false);
        let env = batch_environment(&launch, "h", 1, None);
        let get = |name: &str| env.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        assert_eq!(get("SLURM_MEM_PER_CPU"), Some("1000"));
        assert_eq!(get("SLURM_MEM_PER_NODE"), None);
        assert_eq!(get("SLURM_OPEN_MODE"), Some("t"));
    }

    #[test]
    fn setting_a_duplicated_name_keeps_one_entry() {
        let mut env = Environment(vec![("A".into(), "1".into()), ("B".into(), "2".into()), ("A".into(), "3".into())]);
        env.set("A", "x");
        assert_eq!(render(&env.0), "A=x\nB=2\n");
    }

    #[test]
    fn run_lengths() {
        assert_eq!(run_length(&[72, 72, 36]), "72(x2),36");
        assert_eq!(run_length(&[1]), "1");
        assert_eq!(run_length(&[2, 2, 2, 1, 2]), "2(x3),1,2");
        assert_eq!(run_length(&[]), "");
    }

    #[test]
    fn constrained_gpus_are_renumbered() {
        let mut launch = launch();
        launch.gpus = vec![2, 3];
        let env = batch_environment(&launch, "h", 1, Some("0,1"));
        let get = |name: &str| env.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        assert_eq!(get("CUDA_VISIBLE_DEVICES"), Some("0,1"));
        assert_eq!(get("GPU_DEVICE_ORDINAL"), Some("0,1"));
        assert_eq!(get("SLURM_JOB_GPUS"), Some("2,3"));
        assert_eq!(get("SLURM_GPUS_ON_NODE"), Some("2"));
        let env = batch_environment(&launch, "h", 1, Some("MIG-a,MIG-b"));
        assert!(env.contains(&("CUDA_VISIBLE_DEVICES".to_owned(), "MIG-a,MIG-b".to_owned())));
    }
}
