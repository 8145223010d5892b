//! The environment of a job's prolog and epilog, which run as root: built from nothing by the
//! supervisor, never from the job's submitted environment. A user decides what their job's
//! environment holds (`--export=ALL,LD_PRELOAD=…`, `PATH`, `BASH_ENV`, `ENV`, `PYTHONPATH`…), so
//! one variable of it in a root process's environment would be the user's code running as root.
//! The programs get a fixed `PATH` and the job's `SLURM_*` values computed from the launch request
//! (job id, name, user, uid, gid, partition, account, nodes, GPUs with global indices, array task,
//! `SLURM_SCRIPT_CONTEXT`), as Slurm's slurmd gives them. The only names taken from the job's
//! environment are the job-control variables plugins set (`SLURM_SPANK_<NAME>`) and the plugin
//! options given to the job (`_SLURM_SPANK_OPTION_<plugin>_<option>`), passed as `SPANK_<NAME>`
//! and `SPANK__SLURM_SPANK_OPTION_…` — a prefix no loader or shell reads — and only when the name
//! is a plain identifier.

use crate::prolog::ADMIN_PATH;
use drover_shared::hostlist;
use drover_shared::proto::node::LaunchRequest;

/// The prolog's or epilog's environment for `launch`; `context` is `prolog_slurmd` or
/// `epilog_slurmd`. `hostname` names this node when the launch does not.
pub(super) fn admin_script_environment(launch: &LaunchRequest, hostname: &str, context: &str) -> Vec<(String, String)> {
    let spec = &launch.spec;
    let mut env: Vec<(String, String)> = Vec::new();
    let mut set = |name: &str, value: String| env.push((name.to_owned(), value));
    set("PATH", ADMIN_PATH.to_owned());
    set("SLURM_SCRIPT_CONTEXT", context.to_owned());
    set("SLURM_JOB_ID", launch.job_id.to_string());
    set("SLURM_JOBID", launch.job_id.to_string());
    set("SLURM_JOB_NAME", spec.name.clone());
    set("SLURM_JOB_USER", launch.user.clone());
    set("SLURM_JOB_UID", launch.uid.to_string());
    set("SLURM_JOB_GID", launch.gid.to_string());
    set("SLURM_JOB_PARTITION", launch.partition.clone());
    if !launch.account.is_empty() {
        set("SLURM_JOB_ACCOUNT", launch.account.clone());
    }
    if !launch.qos.is_empty() {
        set("SLURM_JOB_QOS", launch.qos.clone());
    }
    set("SLURM_JOB_NODELIST", hostlist::compress(&launch.nodes));
    set("SLURM_CLUSTER_NAME", launch.cluster_name.clone());
    set("SLURMD_NODENAME", launch.nodes.first().map_or(hostname, String::as_str).to_owned());
    if !launch.gpus.is_empty() {
        let gpus = launch.gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        set("SLURM_JOB_GPUS", gpus.clone());
        // Global indices, as Slurm gives the prolog: it runs outside the job's device cgroup.
        set("CUDA_VISIBLE_DEVICES", gpus);
    }
    if let Some(array) = &launch.array {
        set("SLURM_ARRAY_JOB_ID", array.array_job_id.to_string());
        set("SLURM_ARRAY_TASK_ID", array.task_id.to_string());
    }
    if launch.restart_count > 0 {
        set("SLURM_RESTART_COUNT", launch.restart_count.to_string());
    }
    for (name, value) in &spec.environment {
        // Job-control variables (`SLURM_SPANK_<NAME>`) and the plugin options given to the job
        // (`_SLURM_SPANK_OPTION_<plugin>_<option>`), which a job_script plugin reads with
        // `spank_option_getopt`.
        let plugin_name = name
            .strip_prefix("SLURM_SPANK_")
            .or_else(|| name.starts_with("_SLURM_SPANK_OPTION_").then_some(name.as_str()));
        if let Some(plugin_name) = plugin_name
            && is_identifier(plugin_name)
        {
            set(&format!("SPANK_{plugin_name}"), value.clone());
        }
    }
    env
}

/// `[A-Za-z_][A-Za-z0-9_]*`: a name a shell would also take as a variable name.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_shared::grammar::time::TimeLimit;
    use drover_shared::job::JobSpec;

    fn launch(environment: Vec<(String, String)>) -> LaunchRequest {
        LaunchRequest {
            job_id: 31,
            spec: JobSpec { name: "train".into(), environment, ..JobSpec::default() },
            user: "alice".into(),
            uid: 1001,
            gid: 1002,
            cluster_name: "drover".into(),
            partition: "gpu".into(),
            account: "vision".into(),
            qos: String::new(),
            time_limit: TimeLimit::Minutes(60),
            nodes: vec!["gpu01".into(), "gpu02".into()],
            cpus_per_node: vec![8, 8],
            tasks_per_node: vec![1, 1],
            cpus_on_node: 8,
            mem_per_node_mb: 0,
            gpus: vec![1, 3],
            kill_wait: 30,
            ctld_socket: "/run/drover/ctld.sock".into(),
            array: None,
            restart_count: 0,
        }
    }

    #[test]
    fn nothing_of_the_submitted_environment_reaches_the_programs() {
        let hostile = [
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "LD_AUDIT",
            "PATH",
            "BASH_ENV",
            "ENV",
            "SHELLOPTS",
            "PS4",
            "IFS",
            "PYTHONPATH",
            "PERL5LIB",
            "BASH_FUNC_id%%",
            "HOME",
            "SLURM_SPANK_LD_PRELOAD=x",
            "SLURM_SPANK_",
        ];
        let environment =
            hostile.iter().map(|name| ((*name).to_owned(), "/home/alice/evil".to_owned())).collect::<Vec<_>>();
        let env = admin_script_environment(&launch(environment), "node1", "prolog_slurmd");
        for (name, value) in &env {
            if name == "PATH" {
                assert_eq!(value, ADMIN_PATH);
                continue;
            }
            assert!(!hostile.contains(&name.as_str()), "{name} reached the prolog");
            if name != "SPANK_LD_PRELOAD" {
                assert_ne!(value, "/home/alice/evil", "{name} carries the user's value");
            }
        }
        assert_eq!(env.iter().filter(|(name, _)| name == "PATH").count(), 1);
        assert!(env.contains(&("PATH".into(), ADMIN_PATH.into())));
    }

    #[test]
    fn the_job_values_and_plugin_variables_are_there() {
        let environment = vec![
            ("SLURM_SPANK_SCRATCH".into(), "fast".into()),
            ("FOO".into(), "bar".into()),
            ("_SLURM_SPANK_OPTION_pyxis_container_image".into(), "/img.sqsh".into()),
            ("_SLURM_SPANK_OPTION_bad-name".into(), "x".into()),
        ];
        let env = admin_script_environment(&launch(environment), "node1", "epilog_slurmd");
        let rendered: String = env.iter().map(|(name, value)| format!("{name}={value}\n")).collect();
        assert_eq!(
            rendered,
            "PATH=/usr/sbin:/usr/bin:/sbin:/bin\nSLURM_SCRIPT_CONTEXT=epilog_slurmd\nSLURM_JOB_ID=31\n\
             SLURM_JOBID=31\nSLURM_JOB_NAME=train\nSLURM_JOB_USER=alice\nSLURM_JOB_UID=1001\n\
             SLURM_JOB_GID=1002\nSLURM_JOB_PARTITION=gpu\nSLURM_JOB_ACCOUNT=vision\n\
             SLURM_JOB_NODELIST=gpu[01-02]\nSLURM_CLUSTER_NAME=drover\nSLURMD_NODENAME=gpu01\n\
             SLURM_JOB_GPUS=1,3\nCUDA_VISIBLE_DEVICES=1,3\nSPANK_SCRATCH=fast\n\
             SPANK__SLURM_SPANK_OPTION_pyxis_container_image=/img.sqsh\n"
        );
    }
}
