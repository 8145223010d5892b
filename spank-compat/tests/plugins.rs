//! Real C plugins, compiled with gcc against `<slurm/spank.h>` (Slurm's own from libslurm-dev
//! when installed, else the crate's; `DROVER_SPANK_HEADER=ours` forces the crate's), loaded by
//! this test binary (which exports the SPANK API through build.rs's `--dynamic-list`) and driven
//! through every context.
//!
//! One stack per process: the tests take `SERIAL` so they run one at a time.

use drover_spank_compat::{
    Context, Espank, HasArg, Hook, JobInfo, LogLevel, PlugStack, STEP_ID_BATCH, SpankError, Stack,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

static SERIAL: Mutex<()> = Mutex::new(());

/// Which header the plugins are compiled against.
#[derive(Clone, Copy, PartialEq)]
enum Header {
    /// `/usr/include/slurm/spank.h` when it exists (CI installs libslurm-dev), else ours.
    Preferred,
    /// `spank-compat/include/slurm/spank.h`.
    Ours,
}

fn real_header_present() -> bool {
    Path::new("/usr/include/slurm/spank.h").exists()
}

fn compile(name: &str, header: Header) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/plugins").join(format!("{name}.c"));
    // DROVER_SPANK_HEADER=ours runs every test with Drover's header even where Slurm's exists.
    let force_ours = std::env::var("DROVER_SPANK_HEADER").is_ok_and(|value| value == "ours");
    let suffix = if header == Header::Ours || force_ours || !real_header_present() { "ours" } else { "slurm" };
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("spank-{name}-{suffix}.so"));
    // Once per test process: rewriting an object another test has loaded would pull the rug.
    static COMPILED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let mut compiled = COMPILED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if compiled.contains(&out) {
        return out;
    }
    let mut gcc = Command::new("gcc");
    gcc.args(["-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", "-std=gnu11"]);
    if suffix == "ours" {
        gcc.arg("-I").arg(drover_spank_compat::INCLUDE_DIR);
    }
    gcc.arg("-o").arg(&out).arg(&src);
    let output = gcc.output().expect("gcc runs");
    assert!(output.status.success(), "gcc {name}.c failed:\n{}", String::from_utf8_lossy(&output.stderr));
    compiled.push(out.clone());
    out
}

struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        // World-writable so a plugin running as another user can still record.
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        Scratch { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A record file any user may append to.
    fn record(&self, name: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, "").unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
        path
    }

    fn conf(&self, text: &str) -> PlugStack {
        let path = self.path("plugstack.conf");
        std::fs::write(&path, text).unwrap();
        PlugStack::read(&path).unwrap()
    }
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap().lines().map(str::to_owned).collect()
}

fn remote_job(env: Vec<(String, String)>) -> JobInfo {
    JobInfo {
        uid: 65534,
        gid: 65534,
        groups: vec![65534, 100],
        job_id: 42,
        step_id: STEP_ID_BATCH,
        n_nodes: 2,
        node_id: 1,
        local_task_count: 2,
        total_task_count: 4,
        n_cpus: 8,
        argv: vec!["/jobs/42/script".into(), "arg1".into()],
        env,
        task_global_ids: vec![10, 11],
        cpus_per_task: 2,
        job_alloc_cores: "0-3,8".into(),
        job_alloc_mem: 4096,
        step_alloc_cores: "0-1".into(),
        step_alloc_mem: 2048,
        restart_count: 3,
        array_job_id: 40,
        array_task_id: 2,
    }
}

/// Forks; the child runs `f` and exits with its return; returns the child's wait status.
fn in_child(f: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the other test threads wait on SERIAL and hold no lock the child needs; the child
    // only runs `f` and `_exit`s.
    match unsafe { libc::fork() } {
        0 => {
            let code = f();
            // SAFETY: ends the forked copy without running the test harness's exit code.
            unsafe { libc::_exit(code) }
        }
        pid => {
            let mut status = 0;
            // SAFETY: waits for our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            status
        }
    }
}

fn is_root() -> bool {
    // SAFETY: plain getter.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn our_header_compiles_every_test_plugin() {
    for name in ["order", "items", "opts", "crash", "missing", "surface", "e2e"] {
        compile(name, Header::Ours);
    }
    if real_header_present() {
        for name in ["order", "items", "opts", "crash", "missing", "surface", "e2e"] {
            compile(name, Header::Preferred);
        }
    }
}

#[test]
fn remote_context_calls_every_hook_in_order_with_the_right_privileges() {
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let scratch = Scratch::new();
    let out = scratch.record("order.txt");
    let so = compile("order", Header::Preferred);
    let conf = scratch.conf(&format!("required {} out={}\n", so.display(), out.display()));
    let stack = Stack::load(&conf, Context::Remote, &[]).unwrap();
    assert_eq!(stack.plugin_names(), ["order"]);
    stack.set_job(remote_job(vec![]));
    stack.remote_init().unwrap();
    stack.user_init().unwrap();
    let status = in_child(|| {
        if stack.task_init_privileged(0).is_err() {
            return 2;
        }
        if is_root() {
            // SAFETY: plain system calls in the forked task.
            unsafe {
                libc::setgroups(0, std::ptr::null());
                libc::setgid(65534);
                libc::setuid(65534);
            }
        }
        if stack.task_init(0).is_err() { 3 } else { 0 }
    });
    assert_eq!(status, 0);
    stack.task_post_fork(0, 4242).unwrap();
    stack.task_exit(0, 4242, 0).unwrap();
    stack.exit().unwrap();
    drop(stack);
    let got = lines(&out);
    let (root, user) = if is_root() { ("uid=0 euid=0", "uid=65534 euid=65534") } else { ("", "") };
    let expected = [
        ("init", root),
        ("init_post_opt", root),
        ("user_init", if is_root() { "uid=0 euid=65534" } else { "" }),
        ("task_init_privileged", root),
        ("task_init", user),
        ("task_post_fork", root),
        ("task_exit", root),
        ("exit", root),
    ];
    assert_eq!(got.len(), expected.len(), "{got:#?}");
    for (line, (hook, ids)) in got.iter().zip(expected) {
        assert!(line.starts_with(&format!("{hook} ctx=2 remote=1 ")), "{line}");
        assert!(line.ends_with(ids), "{line} should end with {ids}");
    }
}

#[test]
fn allocator_context_and_a_required_plugin_failing() {
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let scratch = Scratch::new();
    let out = scratch.record("order.txt");
    let so = compile("order", Header::Preferred);
    let conf = scratch.conf(&format!(
        "optional {so} out={out} fail=init\nrequired {so} out={out} fail=init_post_opt\n",
        so = so.display(),
        out = out.display()
    ));
    // The same object twice: dlopen shares it, the stack holds two entries.
    let stack = Stack::load(&conf, Context::Allocator, &[]).unwrap();
    assert_eq!(stack.context(), Context::Allocator);
    stack.call(Hook::Init).unwrap(); // the optional plugin's failure is only logged
    let error = stack.call(Hook::InitPostOpt).unwrap_err();
    assert!(matches!(error, SpankError::HookFailed { hook: "slurm_spank_init_post_opt", rc: -1, .. }), "{error}");
    assert_eq!(error.to_string(), "SPANK plugin order: slurm_spank_init_post_opt failed (returned -1)");
    drop(stack);
    let got = lines(&out);
    assert_eq!(got.len(), 4, "{got:#?}");
    assert!(got.iter().all(|line| line.contains("ctx=3 remote=0")), "{got:#?}");
}

#[test]
fn slurmd_and_job_script_contexts_keep_only_the_plugins_they_call() {
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let scratch = Scratch::new();
    let order = compile("order", Header::Preferred);
    let opts = compile("opts", Header::Preferred);
    let conf = scratch.conf(&format!("required {}\nrequired {}\n", order.display(), opts.display()));
    let stack = Stack::load(&conf, Context::JobScript, &[]).unwrap();
    assert_eq!(stack.plugin_names(), ["order"], "opts has no job_prolog/job_epilog");
    drop(stack);
    let stack = Stack::load(&conf, Context::Slurmd, &[]).unwrap();
    assert_eq!(stack.plugin_names(), ["order", "opt-plugin"], "both have slurm_spank_init");
}

/// pyxis's calls in pyxis's callbacks (`surface.c`), in each of the five contexts, with the
/// answers Slurm gives; the same plugin runs on a real cluster in tests/tests/spank.rs.
#[test]
fn the_surface_pyxis_uses_answers_in_every_context() {
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let scratch = Scratch::new();
    let out = scratch.record("surface.txt");
    let so = compile("surface", Header::Preferred);
    let conf = scratch.conf(&format!("required {} out={}\n", so.display(), out.display()));
    let euid = if is_root() { 0 } else { i32::try_from(unsafe_geteuid()).unwrap() };
    let not_remote = Espank::NotRemote as i32;

    // slurmd: init, then slurmd_exit; no option is registered there (ESPANK_BAD_ARG is not asked).
    let stack = Stack::load(&conf, Context::Slurmd, &[]).unwrap();
    stack.call(Hook::Init).unwrap();
    stack.call(Hook::SlurmdExit).unwrap();
    drop(stack);
    // allocator and local: options, then init_post_opt sees the value; the environment calls
    // are the remote context's only.
    for context in [Context::Allocator, Context::Local] {
        let stack = Stack::load(&conf, context, &[]).unwrap();
        stack.call(Hook::Init).unwrap();
        assert_eq!(stack.options().iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), ["surface-image"]);
        stack.set_option("surface-image", Some("busybox")).unwrap();
        stack.call(Hook::InitPostOpt).unwrap();
        stack.exit().unwrap();
    }
    let got = lines(&out);
    assert_eq!(
        got,
        [
            format!("init ctx=4 register=-1 getenv={not_remote} setenv={not_remote} unsetenv={not_remote} euid={euid}"),
            format!("slurmd_exit ctx=4 euid={euid}"),
            format!("init ctx=3 register=0 getenv={not_remote} setenv={not_remote} unsetenv={not_remote} euid={euid}"),
            "init_post_opt ctx=3 image=busybox".to_owned(),
            "exit ctx=3".to_owned(),
            format!("init ctx=1 register=0 getenv={not_remote} setenv={not_remote} unsetenv={not_remote} euid={euid}"),
            "init_post_opt ctx=1 image=busybox".to_owned(),
            "exit ctx=1".to_owned(),
        ]
    );

    // remote: the option travels; items; the task sees and changes its own environment.
    std::fs::write(&out, "").unwrap();
    let stack = Stack::load(&conf, Context::Remote, &[]).unwrap();
    let env =
        |pairs: &[(&str, &str)]| pairs.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect::<Vec<_>>();
    stack.set_job(remote_job(env(&[
        ("PWD", "/home/u"),
        ("SURFACE_MARK", "m1"),
        ("LANG", "C.UTF-8"),
        ("_SLURM_SPANK_OPTION_surface_surface_image", "img"),
    ])));
    stack.remote_init().unwrap();
    stack.user_init().unwrap();
    let status = in_child(|| {
        if stack.task_init_privileged(0).is_err() {
            return 2;
        }
        // What noded does in the task: its own environment, then task_init, then exec with it.
        let mut task_env = env(&[
            ("SURFACE_MARK", "m1"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "C"),
            ("SLURM_PROCID", "10"),
            ("SURFACE_KEEP", "user"),
        ]);
        stack.apply_env_changes(&mut task_env);
        stack.set_env(task_env);
        if stack.task_init(0).is_err() {
            return 3;
        }
        let after = stack.env();
        let has =
            |name: &str, value: Option<&str>| after.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str()) == value;
        let right = has("LANG", None)
            && has("LC_ALL", None)
            && has("SLURM_PROCID", Some("10"))
            && has("SURFACE_FROM_PLUGIN", Some("container"))
            && has("SURFACE_KEEP", Some("user"));
        if right { 0 } else { 4 }
    });
    assert_eq!(status, 0, "the task's environment after task_init");
    stack.task_post_fork(0, 4242).unwrap();
    stack.task_exit(0, 4242, 256).unwrap();
    stack.exit().unwrap();
    drop(stack);
    let user = if is_root() { 65534 } else { euid };
    let got = lines(&out);
    let exists = Espank::EnvExists as i32;
    assert_eq!(
        got,
        [
            format!("init ctx=2 register=0 euid={euid}"),
            "init_post_opt ctx=2 job=42 step=4294967291 uid=65534 gid=65534 gids=65534,100 local=2 total=4 pwd_rc=0 \
             pwd=/home/u mark=m1 image=img(remote)"
                .to_owned(),
            format!("user_init job=42 step=batch:4294967291 argc=2 argv=/jobs/42/script|arg1 mark=m1 euid={user}"),
            format!("task_init job=42 rank=10 procid=10 unset=0 set=0 keep={exists} euid={euid}"),
            "task_exit job=42 status=256 local=2".to_owned(),
            "exit ctx=2".to_owned(),
        ]
    );

    // job_script: the job's ids; no option given, no environment.
    std::fs::write(&out, "").unwrap();
    let stack = Stack::load(&conf, Context::JobScript, &[]).unwrap();
    stack.set_job(JobInfo { uid: 1001, gid: 1002, job_id: 77, ..JobInfo::default() });
    stack.call(Hook::JobProlog).unwrap();
    drop(stack);
    let error = Espank::Error as i32;
    assert_eq!(
        lines(&out),
        [format!("job_prolog ctx=5 job=77 uid=1001 gid=1002 image=- getopt={error} getenv={not_remote} euid={euid}")]
    );
}

fn unsafe_geteuid() -> u32 {
    // SAFETY: plain getter.
    unsafe { libc::geteuid() }
}

#[test]
fn every_item_in_the_remote_context() {
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let scratch = Scratch::new();
    let out = scratch.record("items.txt");
    let so = compile("items", Header::Preferred);
    let conf =
        scratch.conf(&format!("required {} out={} at=init at=task_init at=task_exit\n", so.display(), out.display()));
    let stack = Stack::load(&conf, Context::Remote, &[]).unwrap();
    stack.set_job(remote_job(vec![("ITEMS_PROBE".into(), "yes".into())]));
    stack.remote_init().unwrap();
    let status = in_child(|| i32::from(stack.task_init(1).is_err()));
    assert_eq!(status, 0);
    // SAFETY: plain getter; the test process stands in for the task.
    let me = unsafe { libc::getpid() };
    stack.task_post_fork(1, me).unwrap();
    stack.task_exit(1, me, 256).unwrap();
    drop(stack);
    let got = lines(&out).join("\n");
    let e = |code: Espank| code as i32;
    let expect = format!(
        "init S_JOB_UID=65534
init S_JOB_GID=65534
init S_JOB_ID=42
init S_JOB_STEPID=0xfffffffb
init S_JOB_NNODES=2
init S_JOB_NODEID=1
init S_JOB_LOCAL_TASK_COUNT=2
init S_JOB_TOTAL_TASK_COUNT=4
init S_JOB_NCPUS=8
init S_JOB_ARGV=2:/jobs/42/script:null-ended
init S_JOB_ENV=ITEMS_PROBE=yes
init S_TASK_ID rc={nt}
init S_TASK_GLOBAL_ID rc={nt}
init S_TASK_EXIT_STATUS rc={nt}
init S_TASK_PID rc={nt}
init S_JOB_PID_TO_GLOBAL_ID rc={ne}
init S_JOB_PID_TO_LOCAL_ID(unknown) rc={ne}
init S_JOB_LOCAL_TO_GLOBAL_ID(1)=11
init S_JOB_GLOBAL_TO_LOCAL_ID(11)=1
init S_JOB_SUPPLEMENTARY_GIDS=2:100
init S_SLURM_VERSION=22.05.8
init S_SLURM_VERSION_MAJOR=22
init S_SLURM_VERSION_MINOR=05
init S_SLURM_VERSION_MICRO=8
init S_STEP_CPUS_PER_TASK=2
init S_JOB_ALLOC_CORES=0-3,8
init S_JOB_ALLOC_MEM=4096
init S_STEP_ALLOC_CORES=0-1
init S_STEP_ALLOC_MEM=2048
init S_SLURM_RESTART_COUNT=3
init S_JOB_ARRAY_ID=40
init S_JOB_ARRAY_TASK_ID=2
init unknown-item rc={ba}
init bad-handle rc={ba}",
        nt = e(Espank::NotTask),
        ne = e(Espank::NotExecd),
        ba = e(Espank::BadArg),
    );
    assert!(got.starts_with(&expect), "got:\n{got}");
    let has = |line: &str| assert!(got.lines().any(|l| l == line), "missing `{line}` in:\n{got}");
    has("task_init S_TASK_ID=1");
    has("task_init S_TASK_GLOBAL_ID=11");
    has(&format!("task_init S_TASK_EXIT_STATUS rc={}", e(Espank::NotTask)));
    has("task_init S_TASK_PID=positive");
    has(&format!("task_init S_JOB_PID_TO_GLOBAL_ID rc={}", e(Espank::NotExecd)));
    has("task_exit S_TASK_EXIT_STATUS=256");
    has("task_exit S_TASK_ID=1");
    has("task_exit S_JOB_PID_TO_GLOBAL_ID=11");
    has(&format!("task_exit S_JOB_PID_TO_LOCAL_ID(unknown) rc={}", e(Espank::NoExist)));
}

#[test]
fn items_outside_the_remote_context() {
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let scratch = Scratch::new();
    let so = compile("items", Header::Preferred);
    let e = |code: Espank| code as i32;

    let out = scratch.record("allocator.txt");
    let conf = scratch.conf(&format!("required {} out={} at=init\n", so.display(), out.display()));
    let stack = Stack::load(&conf, Context::Allocator, &[]).unwrap();
    stack.call(Hook::Init).unwrap();
    drop(stack);
    let got = lines(&out);
    let has = |got: &[String], line: String| assert!(got.contains(&line), "missing `{line}` in {got:#?}");
    has(&got, format!("init S_JOB_UID rc={}", e(Espank::NotAvail)));
    has(&got, format!("init S_JOB_ID rc={}", e(Espank::BadArg)));
    has(&got, format!("init S_JOB_NCPUS rc={}", e(Espank::NotRemote)));
    has(&got, "init S_SLURM_VERSION=22.05.8".to_owned());

    let out = scratch.record("local.txt");
    let conf = scratch.conf(&format!("required {} out={} at=init at=local_user_init\n", so.display(), out.display()));
    let stack = Stack::load(&conf, Context::Local, &[]).unwrap();
    stack.call(Hook::Init).unwrap();
    stack.set_job(JobInfo { uid: 1000, job_id: 7, step_id: 0, argv: vec!["hostname".into()], ..JobInfo::default() });
    stack.call(Hook::LocalUserInit).unwrap();
    drop(stack);
    let got = lines(&out);
    has(&got, format!("init S_JOB_ID rc={}", e(Espank::NotAvail)));
    has(&got, "local_user_init S_JOB_ID=7".to_owned());
    has(&got, "local_user_init S_JOB_UID=1000".to_owned());
    has(&got, "local_user_init S_JOB_ARGV=1:hostname:null-ended".to_owned());
    has(&got, "local_user_init S_JOB_ENV=NULL".to_owned());
    has(&got, format!("local_user_init S_JOB_NODEID rc={}", e(Espank::NotRemote)));

    let out = scratch.record("prolog.txt");
    let conf = scratch.conf(&format!("required {} out={} at=job_prolog\n", so.display(), out.display()));
    let stack = Stack::load(&conf, Context::JobScript, &[]).unwrap();
    stack.set_job(JobInfo { uid: 1000, gid: 1000, job_id: 9, ..JobInfo::default() });
    stack.call(Hook::JobProlog).unwrap();
    drop(stack);
    let got = lines(&out);
    has(&got, "job_prolog S_JOB_ID=9".to_owned());
    has(&got, format!("job_prolog S_JOB_STEPID rc={}", e(Espank::NotAvail)));
}

#[test]
fn options_travel_from_the_allocator_to_the_remote_side() {
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let scratch = Scratch::new();
    let out = scratch.record("opts.txt");
    let cb_out = scratch.record("callbacks.txt");
    // SAFETY: the tests are serialized by SERIAL and no other thread reads the environment now.
    unsafe { std::env::set_var("OPTS_OUT", &cb_out) };
    let so = compile("opts", Header::Preferred);
    let conf = scratch.conf(&format!("required {} out={}\n", so.display(), out.display()));
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&log);
    drover_spank_compat::set_log_sink(move |level, line| sink.lock().unwrap().push(level.format(line)));

    // sbatch: the table is ignored in the allocator context; init registers --opt-value.
    let stack = Stack::load(&conf, Context::Allocator, &[]).unwrap();
    stack.call(Hook::Init).unwrap();
    let options = stack.options();
    assert_eq!(options.len(), 1, "{options:?}");
    assert_eq!(
        (options[0].name.as_str(), options[0].has_arg, options[0].plugin.as_str()),
        ("opt-value", HasArg::Required, "opt-plugin")
    );
    assert_eq!(
        stack.help(),
        "Options provided by plugins:\n      --opt-value=word         A word for the test plugin\n"
    );
    let refused = stack.set_option("opt-value", Some("bad")).unwrap_err();
    assert_eq!(refused.to_string(), "Invalid --opt-value argument: bad");
    assert!(matches!(stack.set_option("nope", None), Err(SpankError::UnknownOption { .. })));
    stack.set_options_from_env([("SLURM_SPANK__SLURM_SPANK_OPTION_opt_plugin_opt_value", "from-env")]).unwrap();
    stack.set_option("opt-value", Some("hello")).unwrap();
    stack.call(Hook::InitPostOpt).unwrap();
    let job_env = stack.job_env_additions();
    stack.exit().unwrap();
    drop(stack);
    assert_eq!(
        job_env,
        [
            ("_SLURM_SPANK_OPTION_opt_plugin_opt_value".to_owned(), "hello".to_owned()),
            ("SLURM_SPANK_OPT_JC".to_owned(), "jc-value".to_owned()),
        ]
    );

    // The supervisor: the option arrives in the job environment, with the table's flag.
    let mut env = job_env.clone();
    env.push(("_SLURM_SPANK_OPTION_opt_plugin_opt_flag".into(), String::new()));
    env.push(("SPANK__SLURM_SPANK_OPTION_opt_plugin_x".into(), "stale".into()));
    env.push(("OPT_GONE".into(), "x".into()));
    let stack = Stack::load(&conf, Context::Remote, &[]).unwrap();
    assert_eq!(stack.options().len(), 1, "the table's --opt-flag");
    stack.set_job(remote_job(env));
    stack.remote_init().unwrap();
    assert_eq!(stack.options().len(), 2, "and --opt-value from init");
    let status = in_child(|| i32::from(stack.task_init(0).is_err()));
    assert_eq!(status, 0);
    let task_env = stack.env();
    let mut own_env = vec![("SLURM_TASK_PID".to_owned(), "77".to_owned()), ("OPT_GONE".to_owned(), "x".to_owned())];
    own_env.push(("_SLURM_SPANK_OPTION_opt_plugin_opt_value".to_owned(), "hello".to_owned()));
    stack.apply_env_changes(&mut own_env);
    assert_eq!(
        own_env,
        [("SLURM_TASK_PID".to_owned(), "77".to_owned()), ("OPT_SET".to_owned(), "from-plugin".to_owned())]
    );
    stack.exit().unwrap();
    drop(stack);
    assert!(task_env.contains(&("OPT_SET".to_owned(), "from-plugin".to_owned())), "{task_env:?}");
    assert!(task_env.iter().all(|(name, _)| !name.contains("SPANK_OPTION") && name != "OPT_GONE"), "{task_env:?}");

    let e = |code: Espank| code as i32;
    let got = lines(&out);
    let expected = [
        // allocator
        "init register=0".to_owned(),
        format!("init getopt={}", e(Espank::NotAvail)),
        format!("init register-nameless={}", e(Espank::BadArg)),
        format!("init register-long={}", e(Espank::NoSpace)),
        "init strerror=Buffer too small".to_owned(),
        "init supported=1,0,-1".to_owned(),
        format!("init_post_opt register={}", e(Espank::BadArg)),
        "init_post_opt value=hello remote=0".to_owned(),
        "jc set=0".to_owned(),
        format!("jc set-again={}", e(Espank::EnvExists)),
        format!("jc get-small={}", e(Espank::NoSpace)),
        "jc get=0 jc-value".to_owned(),
        format!("jc get-missing={}", e(Espank::EnvNoexist)),
        format!("env get={}", e(Espank::NotRemote)),
        format!("exit getopt={}", e(Espank::NotAvail)),
        // remote
        "init register=0".to_owned(),
        format!("init getopt={}", e(Espank::NotAvail)),
        format!("init register-nameless={}", e(Espank::BadArg)),
        format!("init register-long={}", e(Espank::NoSpace)),
        "init strerror=Buffer too small".to_owned(),
        "init supported=1,0,-1".to_owned(),
        format!("init_post_opt register={}", e(Espank::BadArg)),
        "init_post_opt value=hello remote=1".to_owned(),
        format!("jc remote={}", e(Espank::NotLocal)),
        "env set=0".to_owned(),
        format!("env set-again={}", e(Espank::EnvExists)),
        "env get=0 from-plugin".to_owned(),
        format!("env get-small={}", e(Espank::NoSpace)),
        format!("env get-missing={}", e(Espank::EnvNoexist)),
        "env unset=0".to_owned(),
        format!("env option-var={}", e(Espank::EnvNoexist)),
        "task_init getopt=0 hello".to_owned(),
        "task_init getopt-flag=0".to_owned(),
        format!("task_init getopt-null={}", e(Espank::BadArg)),
        format!("exit getopt={}", e(Espank::NotAvail)),
    ];
    assert_eq!(got, expected);
    let callbacks = lines(&cb_out);
    assert_eq!(
        callbacks,
        [
            "cb value val=9 arg=from-env remote=0",
            "cb value val=9 arg=hello remote=0",
            "cb value val=9 arg=hello remote=1",
            "cb flag val=7 remote=1",
        ]
    );
    let log = log.lock().unwrap().clone();
    for line in
        ["opts: info 1", "error: opts: error two", "opts: verbose", "debug: opts: debug", "opts: spank_log 00042"]
    {
        assert!(log.iter().any(|l| l == line), "missing log line `{line}` in {log:#?}");
    }
    drover_spank_compat::set_log_sink(|level, line| {
        if level <= LogLevel::Info {
            eprintln!("{}", level.format(line));
        }
    });
}

#[test]
fn load_failures_name_the_problem() {
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let scratch = Scratch::new();
    let missing = compile("missing", Header::Preferred);
    let conf = scratch.conf(&format!("required {}\n", missing.display()));
    let error = Stack::load(&conf, Context::Remote, &[]).unwrap_err().to_string();
    assert!(error.contains("undefined symbol: slurm_get_nonexistent_thing"), "{error}");

    let oldver = compile("oldver", Header::Ours);
    let conf = scratch.conf(&format!("required {}\n", oldver.display()));
    let error = Stack::load(&conf, Context::Remote, &[]).unwrap_err().to_string();
    assert!(error.contains("built for Slurm 21.08, the host speaks 22.05"), "{error}");

    let conf = scratch.conf("required /nonexistent/plugin.so\n");
    assert!(matches!(Stack::load(&conf, Context::Remote, &[]), Err(SpankError::Load { .. })));

    // Optional: skipped with a warning; a relative path is searched in the plugin dirs.
    let dir = oldver.parent().unwrap().to_owned();
    let order = compile("order", Header::Preferred);
    let conf = scratch.conf(&format!(
        "optional {}\noptional {}\n",
        missing.display(),
        order.file_name().unwrap().to_string_lossy()
    ));
    let stack = Stack::load(&conf, Context::Remote, &[PathBuf::from("/nonexistent"), dir]).unwrap();
    assert_eq!(stack.plugin_names(), ["order"]);
    assert_eq!(stack.warnings().len(), 1);
    assert!(stack.warnings()[0].contains("slurm_get_nonexistent_thing"), "{:?}", stack.warnings());
    // One stack per process.
    assert!(matches!(Stack::load(&PlugStack::default(), Context::Remote, &[]), Err(SpankError::Busy)));
}

#[test]
fn a_crashing_plugin_fails_its_call_and_the_host_survives() {
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let scratch = Scratch::new();
    let out = scratch.record("crash.txt");
    let so = compile("crash", Header::Preferred);

    // In the host process itself: init crashes, the call says so, the stack is poisoned.
    let conf = scratch.conf(&format!("required {} out={} crash=init\n", so.display(), out.display()));
    let stack = Stack::load(&conf, Context::Remote, &[]).unwrap();
    let error = stack.remote_init().unwrap_err();
    assert_eq!(error.to_string(), "SPANK plugin crasher crashed with SIGSEGV in slurm_spank_init");
    assert!(matches!(stack.exit(), Err(SpankError::Poisoned)));
    drop(stack);

    // In the forked task: task_init crashes; the task reports it, the host carries on.
    let conf = scratch.conf(&format!("required {} out={} crash=task_init\n", so.display(), out.display()));
    let stack = Stack::load(&conf, Context::Remote, &[]).unwrap();
    stack.set_job(remote_job(vec![]));
    stack.remote_init().unwrap();
    let report = scratch.path("report.txt");
    let status = in_child(|| match stack.task_init(0) {
        Err(error) => {
            std::fs::write(&report, error.to_string()).unwrap();
            7
        }
        Ok(()) => 0,
    });
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 7, "status {status:#x}");
    assert_eq!(
        std::fs::read_to_string(&report).unwrap(),
        "SPANK plugin crasher crashed with SIGSEGV in slurm_spank_task_init"
    );
    stack.exit().unwrap();
    drop(stack);
    assert_eq!(lines(&out), ["init survived", "exit survived"]);

    // And the host's own fault handling is back in place: a stack for the next job works.
    let conf = scratch.conf(&format!("required {} out={}\n", so.display(), out.display()));
    let stack = Stack::load(&conf, Context::Remote, &[]).unwrap();
    stack.remote_init().unwrap();
}
