//! Helpers for the integration tests that run against the real local Slurm cluster
//! (`scripts/local-cluster up`). Nothing here imitates Slurm: every test runs the real
//! `srun`/`sbatch`, and the real plugin inside the real slurmstepd.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

mod output;
pub use output::{assert_stderr_contains, assert_stdout_contains, stderr, stdout};

/// The cluster's state folder (`GPUDIRECT_CLUSTER_DIR`, as the script reads it).
pub fn state_dir() -> PathBuf {
    std::env::var_os("GPUDIRECT_CLUSTER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/lib/gpudirect-local-cluster"))
}

/// The cluster's slurm.conf; fails the test with the fix when the cluster is not up.
pub fn slurm_conf() -> PathBuf {
    let conf = state_dir().join("etc/slurm.conf");
    assert!(
        conf.is_file(),
        "no local cluster at {}: run `scripts/local-cluster up` first (scripts/test does)",
        conf.display()
    );
    conf
}

/// The plugstack.conf.d entry of the gpudirect-slurm package (a link to the package's line).
const PACKAGE_PLUGSTACK: &str = "/etc/slurm/plugstack.conf.d/gpudirect.conf";

/// Whether the cluster runs the plugin the gpudirect-slurm package installed
/// (`scripts/local-cluster up --plugin installed`): its plugstack.conf then only includes
/// the package's plugstack.conf.d, as Debian's own does.
pub fn plugin_installed() -> bool {
    std::fs::read_to_string(state_dir().join("etc/plugstack.conf"))
        .is_ok_and(|text| text.trim_start().starts_with("include "))
}

/// The file that holds the plugin's plugstack line: the cluster's plugstack.conf, or the
/// package's entry.
pub fn plugstack_line_file() -> PathBuf {
    if plugin_installed() {
        PathBuf::from(PACKAGE_PLUGSTACK)
    } else {
        state_dir().join("etc/plugstack.conf")
    }
}

/// The plugin's line: (path of the .so, path of the config).
fn plugstack_line() -> (PathBuf, PathBuf) {
    let file = plugstack_line_file();
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("read {}: {e}: run scripts/local-cluster up", file.display()));
    let line = text
        .lines()
        .find(|l| l.contains("spank_gpudirect"))
        .unwrap_or_else(|| panic!("no spank_gpudirect line in {}", file.display()));
    let mut words = line.split_whitespace().skip(1);
    let so = words.next().map(PathBuf::from).expect("the plugin's path");
    let config = words
        .find_map(|w| w.strip_prefix("config="))
        .map(PathBuf::from)
        .expect("config= on the plugin's line");
    (so, config)
}

/// The admin config the plugin's plugstack line names.
pub fn plugin_config() -> PathBuf {
    plugstack_line().1
}

/// The plugin Slurm loads: this checkout's build in the state folder, or the package's.
pub fn plugin_so() -> PathBuf {
    plugstack_line().0
}

/// The ordinary user the tests run jobs as: a job never runs as root on a real cluster,
/// and slurmstepd runs the plugin's user_init and task_init with the job user's
/// credentials. `scripts/local-cluster up` creates it.
pub const TEST_USER: &str = "gdtestuser";

/// A second ordinary user, for tests about one user's job against another's (security
/// review T1: a squatter or decoy is another user, not root). `scripts/local-cluster up`
/// creates both.
pub const OTHER_USER: &str = "gdtestuser2";

/// Who runs a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// [`TEST_USER`]: every job step, unless the test is about root or an admin action.
    User,
    /// [`OTHER_USER`]: another ordinary user, whose jobs share the nodes with the user's.
    Other,
    /// root: admin actions (`scontrol update`, draining) and tests about root.
    Root,
}

/// A command run as [`TEST_USER`] with a clean environment: only what the test gives
/// reaches the job, so a variable in the test runner's own environment cannot make a test
/// pass.
pub fn slurm_command(program: &str) -> Command {
    slurm_command_as(Who::User, program)
}

/// [`slurm_command`] run by `who`.
pub fn slurm_command_as(who: Who, program: &str) -> Command {
    slurm_command_within(who, program, 120)
}

/// [`slurm_command_as`], killed after `limit_s` seconds instead of 120 (an `sbatch --wait`
/// that outlives a requeue).
pub fn slurm_command_within(who: Who, program: &str, limit_s: u32) -> Command {
    let mut cmd = match who {
        Who::User | Who::Other => {
            let user = if who == Who::User {
                TEST_USER
            } else {
                OTHER_USER
            };
            let mut cmd = Command::new("setpriv");
            cmd.args(["--reuid", user, "--regid", user, "--init-groups", "--"])
                .arg("timeout");
            cmd
        }
        Who::Root => Command::new("timeout"),
    };
    cmd.arg(limit_s.to_string()).arg(program);
    let home = match who {
        Who::User | Who::Other => std::env::temp_dir().into_os_string(),
        Who::Root => std::env::var_os("HOME").unwrap_or_else(|| "/root".into()),
    };
    cmd.env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("SLURM_CONF", slurm_conf())
        .env("HOME", home)
        .env("STANDIN_FIXTURES", shared_fixtures())
        // The checkout may be out of the user's reach; a test that needs another folder
        // sets its own.
        .current_dir(std::env::temp_dir());
    cmd
}

/// Gives `path` to [`TEST_USER`], so that jobs run as the user can write there.
pub fn give_to_test_user(path: &Path) {
    give_to(path, TEST_USER)
}

/// Gives `path` to `name` ([`TEST_USER`] or [`OTHER_USER`]).
pub fn give_to(path: &Path, name: &str) {
    let user = nix::unistd::User::from_name(name)
        .ok()
        .flatten()
        .unwrap_or_else(|| {
            panic!("no user {name}: run `scripts/local-cluster up` (it creates the user)")
        });
    std::os::unix::fs::chown(path, Some(user.uid.as_raw()), Some(user.gid.as_raw()))
        .unwrap_or_else(|e| panic!("chown {} to {name}: {e}", path.display()));
}

/// Runs a command and returns its output, with stdout/stderr in the panic message on failure
/// to start.
pub fn run(cmd: &mut Command) -> Output {
    match cmd.output() {
        Ok(output) => output,
        Err(e) => panic!("could not run {cmd:?}: {e}"),
    }
}

/// Asserts success, showing everything when it is not.
/// A command that `timeout` cut (exit 124) also shows the cluster's state: an allocation that
/// waited for a node out of service says nothing itself.
pub fn assert_ok(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}{}",
        output.status,
        stdout(output),
        stderr(output),
        cluster_state_if_cut(output)
    );
}

/// [`cluster_state`] after a command `timeout` cut (exit 124), or nothing.
pub fn cluster_state_if_cut(output: &Output) -> String {
    if output.status.code() == Some(124) {
        format!(
            "\n(cut by its timeout) the cluster now:\n{}",
            cluster_state()
        )
    } else {
        String::new()
    }
}

/// One task's environment, from `srun -l env` output (`RANK: NAME=VALUE` lines).
pub type TaskEnv = BTreeMap<String, String>;

/// Splits `srun -l env` output into each task's environment, by global rank.
pub fn parse_labelled_env(text: &str) -> BTreeMap<u32, TaskEnv> {
    let mut tasks: BTreeMap<u32, TaskEnv> = BTreeMap::new();
    for line in text.lines() {
        let Some((label, rest)) = line.split_once(": ") else {
            continue;
        };
        let Ok(rank) = label.trim().parse::<u32>() else {
            continue;
        };
        if let Some((name, value)) = rest.split_once('=') {
            tasks
                .entry(rank)
                .or_default()
                .insert(name.to_string(), value.to_string());
        }
    }
    tasks
}

/// Runs `srun ARGS -l env` and returns each task's environment.
pub fn srun_env(args: &[&str], extra_env: &[(&str, &str)]) -> (Output, BTreeMap<u32, TaskEnv>) {
    let mut cmd = slurm_command("srun");
    cmd.args(args).args(["-l", "env"]);
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    let output = run(&mut cmd);
    let tasks = parse_labelled_env(&stdout(&output));
    (output, tasks)
}

/// Swaps one of the cluster's files (the admin config, plugstack.conf) for the test's
/// duration and restores it, bytes and mode, when dropped (also when the test panics).
pub struct FileSwap {
    path: PathBuf,
    original: Vec<u8>,
    mode: u32,
}

impl FileSwap {
    /// Saves the cluster's admin config.
    pub fn config() -> Self {
        Self::new(plugin_config())
    }

    /// Saves the file with the plugin's plugstack line ([`plugstack_line_file`]; the
    /// package's is a link, written through).
    pub fn plugstack() -> Self {
        Self::new(plugstack_line_file())
    }

    /// Saves the file at `path`.
    pub fn new(path: PathBuf) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let original = std::fs::read(&path).expect("read the cluster file to swap");
        let mode = std::fs::metadata(&path)
            .expect("stat the cluster file to swap")
            .permissions()
            .mode();
        FileSwap {
            path,
            original,
            mode,
        }
    }

    /// The text as it was.
    pub fn original_text(&self) -> String {
        String::from_utf8_lossy(&self.original).into_owned()
    }

    /// Writes new content.
    pub fn write(&self, text: &str) {
        std::fs::write(&self.path, text).expect("write the swapped file");
    }

    /// Sets the file's mode.
    pub fn chmod(&self, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(mode))
            .expect("chmod the swapped file");
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for FileSwap {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::write(&self.path, &self.original);
        let _ = std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(self.mode));
    }
}

/// Runs `ip` inside a node's network namespace (`gdnodeN`), e.g. to take a NIC down.
pub fn ip_in_node(node: &str, args: &[&str]) -> Output {
    let ns = format!("gd{node}");
    run(Command::new("ip").arg("-n").arg(ns).args(args))
}

/// A binary of this workspace (`gpudirect`, `nccl-tests-standin`, `gpudirect-mpi`), built
/// in the same target folder as the running test (scripts/test builds them first), as a
/// copy in [`shared_dir`]: jobs run as [`TEST_USER`], who may not be able to reach the
/// checkout (a clone under /root, or in a 0700 temporary folder, as CI makes).
pub fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current test executable");
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join(name))
        .expect("test executable lives in target/<profile>/deps");
    assert!(
        bin.is_file(),
        "{} is not built: run `cargo build -p gpudirect` (scripts/test does)",
        bin.display()
    );
    let shared = shared_dir().join(name);
    share(&bin, &shared);
    shared
}

/// A root-owned folder every user can read, in the cluster's state folder: where the tests
/// put what jobs run as [`TEST_USER`] must read (binaries, the stand-in's recordings).
pub fn shared_dir() -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = state_dir().join("test-shared");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", dir.display()));
    dir
}

/// Copies `from` to `to` (a file, or a folder with everything in it), each file through a
/// temporary name and a rename, so that a job still running the old copy is not disturbed.
pub fn share(from: &Path, to: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let copy_file = |from: &Path, to: &Path| {
        let tmp = to.with_extension(format!("tmp{}", std::process::id()));
        std::fs::copy(from, &tmp).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
        let mode = if from
            .metadata()
            .map(|m| m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
        {
            0o755
        } else {
            0o644
        };
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", tmp.display()));
        std::fs::rename(&tmp, to).unwrap_or_else(|e| panic!("rename to {}: {e}", to.display()));
    };
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("create {}: {e}", to.display()));
        std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", to.display()));
        for entry in std::fs::read_dir(from).expect("read a folder to share") {
            let path = entry.expect("a folder entry").path();
            share(&path, &to.join(path.file_name().expect("a file name")));
        }
    } else {
        copy_file(from, to);
    }
}

/// The stand-in's recordings, where jobs run as [`TEST_USER`] can read them (the stand-in
/// reads `STANDIN_FIXTURES`, which [`slurm_command`] sets).
pub fn shared_fixtures() -> PathBuf {
    static SHARED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    SHARED
        .get_or_init(|| {
            let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/nccl-tests");
            let to = shared_dir().join("nccl-tests-fixtures");
            share(&from, &to);
            to
        })
        .clone()
}

/// A folder of nccl-tests STAND-INs: `<collective>_perf` links to the replaying
/// `nccl-tests-standin` binary (no GPU here; see launcher/src/bin/nccl-tests-standin.rs).
pub fn standin_dir(tag: &str) -> PathBuf {
    let dir = fresh_temp_dir(&format!("standin-{tag}"));
    let standin = workspace_bin("nccl-tests-standin");
    for collective in [
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "alltoall",
        "sendrecv",
    ] {
        std::os::unix::fs::symlink(&standin, dir.join(format!("{collective}_perf")))
            .expect("link a stand-in");
    }
    dir
}

/// A test's fresh stand-in folder and fresh history path, both named after `tag`.
pub fn standin_and_db(tag: &str) -> (PathBuf, PathBuf) {
    (standin_dir(tag), temp_db(tag))
}

/// A fresh history file path in a fresh folder.
pub fn temp_db(tag: &str) -> PathBuf {
    fresh_temp_dir(&format!("db-{tag}")).join("history.sqlite")
}

/// `gd-{name}-{pid}` in the system temp folder, emptied: what an earlier run of this test
/// left there is gone (it stays after the test, for a look at what went wrong).
pub fn fresh_temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gd-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    // Jobs run as the test user write here (histories, reports, job output).
    give_to_test_user(&dir);
    dir
}

static CLUSTER: Mutex<()> = Mutex::new(());

/// A NIC of a node changed with `scripts/local-cluster nic NODE NIC ACTION...` (`slow RATE`
/// or `down`), restored when dropped, also when the test fails.
pub struct Nic {
    node: &'static str,
    nic: &'static str,
}

impl Nic {
    /// Applies `action` to `nic` of `node`; panics with the script's output if it fails.
    pub fn set(node: &'static str, nic: &'static str, action: &[&str]) -> Nic {
        local_cluster_ok(&[&["nic", node, nic], action].concat());
        Nic { node, nic }
    }
}

impl Drop for Nic {
    fn drop(&mut self) {
        local_cluster(&["nic", self.node, self.nic, "restore"]);
    }
}

/// `scripts/local-cluster ARGS` of this checkout, run to its end (its output, unchecked).
pub fn local_cluster(args: &[&str]) -> Output {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/local-cluster");
    run(Command::new(script).args(args))
}

/// [`local_cluster`], which must succeed.
pub fn local_cluster_ok(args: &[&str]) {
    let out = local_cluster(args);
    assert_ok(&out, &format!("scripts/local-cluster {}", args.join(" ")));
}

/// The cluster to this test alone until the guard drops: some tests change the cluster's
/// config or a node's NIC, so the tests of one binary run one at a time whatever the test
/// harness's thread count. A test that panicked while holding it does not stop the others.
///
/// The guard also keeps the cluster whole between tests. A test starts only when every node
/// is back in service (waiting out the previous test's completing jobs), and fails at once,
/// with Slurm's reason, when a node is drained or down: one lost node otherwise fails every
/// later test that asks for all nodes at its 120 s timeout, with an empty output. A test that
/// ends with a node out of service fails itself, naming the node, so that the test that lost
/// it is the one that says so.
pub fn cluster() -> ClusterGuard {
    let lock = CLUSTER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Err(state) = every_node_in_service() {
        panic!("the cluster is short of a node before this test started (an earlier test or the machine lost it):\n{state}");
    }
    ClusterGuard { _lock: lock }
}

/// What [`cluster`] returns: the cluster to one test, checked whole when it drops.
pub struct ClusterGuard {
    _lock: MutexGuard<'static, ()>,
}

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        if let Err(state) = every_node_in_service() {
            panic!("this test ended with a node out of service:\n{state}");
        }
    }
}

/// Waits up to a minute for every node to be idle (jobs of the last test completing, nodes
/// re-registering after a reconfigure); a node drained, down or failed ends the wait at once.
/// On failure, what Slurm says of the nodes and the queue.
fn every_node_in_service() -> Result<(), String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let mut sinfo = slurm_command_as(Who::Root, "sinfo");
        sinfo.args(["-h", "-N", "-o", "%N %T"]);
        let listing = stdout(&run(&mut sinfo));
        let states: Vec<&str> = listing
            .lines()
            .filter_map(|line| line.split_whitespace().nth(1))
            .collect();
        if !states.is_empty() && states.iter().all(|state| *state == "idle") {
            return Ok(());
        }
        let lost = states.iter().any(|state| {
            ["drain", "down", "fail"]
                .iter()
                .any(|bad| state.contains(bad))
        });
        if lost || std::time::Instant::now() >= deadline {
            return Err(cluster_state());
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// The nodes' states with Slurm's reasons, and the queue: what a failure about a lost node
/// shows.
pub fn cluster_state() -> String {
    let mut sinfo = slurm_command_as(Who::Root, "sinfo");
    sinfo.args(["-h", "-N", "-o", "%N %T (%E, since %H)"]);
    let mut squeue = slurm_command_as(Who::Root, "squeue");
    squeue.args(["-h", "-o", "%i %u %T %M %N %j"]);
    let (nodes, queue) = (run(&mut sinfo), run(&mut squeue));
    format!(
        "sinfo:\n{}{}\nsqueue:\n{}{}",
        stdout(&nodes),
        stderr(&nodes),
        stdout(&queue),
        stderr(&queue),
    )
}

/// The arguments with which `gpudirect validate` judges pairs replayed by the nccl-tests
/// stand-in: 2 GPUs per node in one process, the 2xH200 recordings' sizes and a floor their
/// clean busbw passes and their slowed one does not, and no MPI (the stand-in needs none).
pub const VALIDATE_STANDIN_ARGS: [&str; 12] = [
    "--floor",
    "300",
    "-G",
    "2",
    "--gpus-per-process",
    "2",
    "-b",
    "8",
    "-e",
    "8G",
    "--mpi",
    "none",
];

/// `salloc -N<nodes> gpudirect ARGS` with the history at `db`.
pub fn gpudirect_in_allocation(
    nodes: u32,
    db: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Output {
    gpudirect_in_allocation_with(&[&format!("-N{nodes}")], db, args, env)
}

/// `salloc ALLOC gpudirect ARGS` with the history at `db`, as the test user.
pub fn gpudirect_in_allocation_with(
    alloc: &[&str],
    db: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Output {
    gpudirect_in_allocation_as(Who::User, alloc, db, args, env)
}

/// [`gpudirect_in_allocation_with`] run by `who`.
pub fn gpudirect_in_allocation_as(
    who: Who,
    alloc: &[&str],
    db: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Output {
    let mut cmd = slurm_command_as(who, "salloc");
    cmd.args(alloc)
        .arg("--quiet")
        .arg(workspace_bin("gpudirect"))
        .arg("--db")
        .arg(db)
        .args(args)
        .env("GPUDIRECT_CONFIG", plugin_config());
    for (k, v) in env {
        cmd.env(k, v);
    }
    run(&mut cmd)
}

/// One command of [`steps_in_one_allocation_as`]: a program, its arguments, and variables
/// of its own on top of the allocation's environment.
#[derive(Debug, Clone, Default)]
pub struct Step {
    /// The program (a path, or a name on `PATH`).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its own variables.
    pub env: Vec<(String, String)>,
}

impl Step {
    /// `program args...`.
    pub fn new(program: &str, args: &[&str]) -> Self {
        Step {
            program: program.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: Vec::new(),
        }
    }

    /// `gpudirect --db DB args...` (this workspace's build).
    pub fn gpudirect(db: &Path, args: &[&str]) -> Self {
        let mut step = Step::new(&workspace_bin("gpudirect").display().to_string(), &[]);
        step.args.push("--db".into());
        step.args.push(db.display().to_string());
        step.args.extend(args.iter().map(|a| a.to_string()));
        step
    }

    /// With `name=value` in its environment.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_string(), value.to_string()));
        self
    }

    /// The shell line that runs it (every word single-quoted).
    fn line(&self) -> String {
        let quote = |w: &str| format!("'{}'", w.replace('\'', r"'\''"));
        let mut words = vec!["env".to_string()];
        words.extend(self.env.iter().map(|(k, v)| quote(&format!("{k}={v}"))));
        words.push(quote(&self.program));
        words.extend(self.args.iter().map(|a| quote(a)));
        words.join(" ")
    }
}

/// What one step of [`steps_in_one_allocation_as`] gave.
#[derive(Debug, Clone)]
pub struct StepOutput {
    /// Its exit status (`None` when it never ran: the allocation ended first).
    pub code: Option<i32>,
    /// Its stdout.
    pub stdout: String,
    /// Its stderr.
    pub stderr: String,
}

impl StepOutput {
    /// Asserts its exit status, showing everything when it differs.
    #[track_caller]
    pub fn assert_code(&self, code: i32, what: &str) {
        assert_eq!(
            self.code,
            Some(code),
            "{what}:\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
    }
}

/// Runs `steps` one after another inside ONE allocation (`salloc ALLOC sh SCRIPT`, by
/// `who`), each step's stdout, stderr and exit status kept apart in `dir`: what several
/// commands need when the second must see what the first did to the allocation's nodes
/// (a node drained after the allocation started still runs its steps). Every step gets
/// `GPUDIRECT_CONFIG` (the plugin's config), as [`gpudirect_in_allocation_as`] gives it.
pub fn steps_in_one_allocation_as(
    who: Who,
    alloc: &[&str],
    dir: &Path,
    steps: &[Step],
) -> (Output, Vec<StepOutput>) {
    let mut script = String::from("#!/bin/sh\n");
    for (i, step) in steps.iter().enumerate() {
        let base = dir.join(format!("step-{i}"));
        script.push_str(&format!(
            "{} >'{}.out' 2>'{}.err'\necho $? >'{}.rc'\n",
            step.line(),
            base.display(),
            base.display(),
            base.display()
        ));
    }
    let path = dir.join("steps.sh");
    std::fs::write(&path, script).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    let mut cmd = slurm_command_as(who, "salloc");
    cmd.args(alloc)
        .arg("--quiet")
        .arg("/bin/sh")
        .arg(&path)
        .env("GPUDIRECT_CONFIG", plugin_config());
    let output = run(&mut cmd);
    let outputs = (0..steps.len())
        .map(|i| {
            let read = |ext: &str| {
                std::fs::read_to_string(dir.join(format!("step-{i}.{ext}"))).unwrap_or_default()
            };
            StepOutput {
                code: read("rc").trim().parse().ok(),
                stdout: read("out"),
                stderr: read("err"),
            }
        })
        .collect();
    (output, outputs)
}

/// Resumes the local cluster's nodes (`node1` to `node3`) when dropped, also when the test
/// panics: a test that drains nodes leaves none drained for the next one.
pub struct ResumeNodesOnDrop;

impl Drop for ResumeNodesOnDrop {
    fn drop(&mut self) {
        for node in ["node1", "node2", "node3"] {
            // An admin action: root. A node that is not drained answers with an error,
            // which is fine.
            let mut cmd = slurm_command_as(Who::Root, "scontrol");
            cmd.args(["update", &format!("nodename={node}"), "state=resume"]);
            let _ = cmd.output();
        }
    }
}

/// The nodes of the cluster, as sinfo lists them.
pub fn cluster_nodes() -> usize {
    let mut sinfo = slurm_command("sinfo");
    sinfo.args(["-h", "-N", "-o", "%N"]);
    stdout(&run(&mut sinfo)).lines().count()
}

/// `sinfo`'s state and reason of `node`: `drained|gpudirect: slow node ...`.
pub fn sinfo_state(node: &str) -> String {
    let mut sinfo = slurm_command("sinfo");
    sinfo.args(["-h", "-n", node, "-o", "%T|%E"]);
    stdout(&run(&mut sinfo)).trim().to_string()
}

/// The Slurm the cluster runs, as (major, minor) from `srun --version`.
pub fn slurm_major_minor() -> (u32, u32) {
    let output = run(slurm_command("srun").arg("--version"));
    let text = stdout(&output);
    let version = text
        .split_whitespace()
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .unwrap_or_else(|| panic!("no version in `srun --version`: {text}"));
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// The cluster's config with a `[watch]` table for the test's duration (restored when the
/// returned swap drops), its Inspector an empty root-owned file in the state folder: a
/// STAND-IN for an installed Inspector, which no NCCL loads on these CPU nodes. Returns the
/// swap and the stand-in's path (removed by the caller).
pub fn watch_config(interval_ms: u32) -> (FileSwap, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let inspector = state_dir().join("lib/inspector-standin.so");
    std::fs::write(&inspector, b"").unwrap();
    std::fs::set_permissions(&inspector, std::fs::Permissions::from_mode(0o644)).unwrap();
    let swap = FileSwap::config();
    swap.write(&format!(
        "{}\n[watch]\ninspector = \"{}\"\ninterval_ms = {interval_ms}\n",
        swap.original_text(),
        inspector.display()
    ));
    (swap, inspector)
}

/// The job id `sbatch --parsable` printed (`1234` or `1234;cluster`).
pub fn parsable_job_id(output: &Output) -> u32 {
    let text = stdout(output);
    text.trim()
        .split(';')
        .next()
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("sbatch --parsable printed no job id: {text}"))
}

/// How a batch job ended, as `scontrol show job` last showed it.
#[derive(Debug, Clone)]
pub struct JobEnd {
    /// `JobState` (`COMPLETED`, `FAILED`, ...).
    pub state: String,
    /// `ExitCode` (`0:0`).
    pub exit_code: String,
    /// The whole `--oneliner` record.
    pub record: String,
}

impl JobEnd {
    /// Completed with exit code 0, what `sbatch --wait` would have exited 0 for.
    pub fn ok(&self) -> bool {
        self.state == "COMPLETED" && self.exit_code == "0:0"
    }
}

/// The value of `key` in a `scontrol show job --oneliner` record.
pub fn record_field(record: &str, key: &str) -> String {
    record
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_default()
        .to_string()
}

/// Waits for batch job `job` to end (through requeues), polling `scontrol show job` every
/// 250 ms, for at most `limit`. In place of `sbatch
/// --wait`, whose Slurm 22.05 polls come 2, 10 and 42 s after the submission: a 12 s job
/// was seen ended after 42 s, about 30 s lost by each vet test. The record stays
/// MinJobAge (30 s here) after the end, so a poll cannot miss it. None when the job was
/// never seen or did not end in time.
pub fn wait_for_job(job: u32, limit: std::time::Duration) -> Option<JobEnd> {
    const ENDED: [&str; 9] = [
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
    ];
    let start = std::time::Instant::now();
    let mut last: Option<String> = None;
    while start.elapsed() < limit {
        let out = run(slurm_command_as(Who::Root, "scontrol").args([
            "show",
            "job",
            "--oneliner",
            &job.to_string(),
        ]));
        let record = stdout(&out).lines().next().unwrap_or("").to_string();
        if record.contains(&format!("JobId={job} ")) {
            let state = record_field(&record, "JobState");
            if ENDED.contains(&state.as_str()) {
                return Some(JobEnd {
                    state,
                    exit_code: record_field(&record, "ExitCode"),
                    record,
                });
            }
            last = Some(record);
        } else if let Some(record) = last.take() {
            // Purged after its end between two polls (not seen here in practice).
            return Some(JobEnd {
                state: record_field(&record, "JobState"),
                exit_code: record_field(&record, "ExitCode"),
                record,
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    None
}

/// Submits the batch job `sbatch` (a command with `--parsable` among its arguments, not
/// `--wait`) and waits for its end as [`wait_for_job`] does, for at most `limit`; panics,
/// naming `what`, when sbatch fails or the job does not end in time.
pub fn submit_and_wait(sbatch: &mut Command, limit: std::time::Duration, what: &str) -> JobEnd {
    let submitted = run(sbatch);
    assert_ok(&submitted, what);
    let job = parsable_job_id(&submitted);
    wait_for_job(job, limit)
        .unwrap_or_else(|| panic!("{what}: job {job} did not end within {limit:?}"))
}

/// The reservation of the cluster's config (it writes no `[quarantine]`: the default).
pub const RESERVATION: &str = "gpudirect-quarantine";

/// Quarantine (issue #44): the quarantine lifted and every comment cleared, whatever happened: the next test
/// starts with every node idle.
pub struct LiftQuarantine;

impl Drop for LiftQuarantine {
    fn drop(&mut self) {
        let mut delete = slurm_command_as(Who::Root, "scontrol");
        delete.args(["delete", &format!("reservationname={RESERVATION}")]);
        let _ = delete.output();
        for node in ["node1", "node2", "node3", "node4"] {
            let mut clear = slurm_command_as(Who::Root, "scontrol");
            clear.args(["update", &format!("nodename={node}"), "comment="]);
            let _ = clear.output();
        }
    }
}

/// What `scontrol show reservation` says of ours (empty when there is none).
pub fn reservation() -> String {
    let mut show = slurm_command_as(Who::Root, "scontrol");
    show.args(["show", "reservation", RESERVATION, "--oneliner"]);
    stdout(&run(&mut show))
}

/// node3's comment, from `scontrol show node node3`'s `Comment=` line.
pub fn comment_of(node: &str) -> String {
    let mut show = slurm_command_as(Who::Root, "scontrol");
    show.args(["show", "node", node]);
    stdout(&run(&mut show))
        .lines()
        .find_map(|l| l.trim().strip_prefix("Comment="))
        .unwrap_or_default()
        .to_string()
}

/// `gpudirect sweep --json -- VALIDATE` as root: its exit status and JSON outcome.
pub fn sweep_with(
    db: &std::path::Path,
    validate: &[&str],
    env: &[(&str, &str)],
) -> (Option<i32>, serde_json::Value) {
    sweep_with_args(db, &[], validate, env)
}

/// [`sweep_with`], with `sweep_args` for the sweep itself (before `--`).
pub fn sweep_with_args(
    db: &std::path::Path,
    sweep_args: &[&str],
    validate: &[&str],
    env: &[(&str, &str)],
) -> (Option<i32>, serde_json::Value) {
    let lock = db.with_file_name("sweep.lock");
    let gpudirect = workspace_bin("gpudirect").display().to_string();
    let mut cmd = slurm_command_within(Who::Root, &gpudirect, 420);
    cmd.args(["--db", db.to_str().unwrap(), "sweep", "--json"])
        .args(["--lock", lock.to_str().unwrap()])
        .args(sweep_args)
        .arg("--")
        .args(validate)
        .env("GPUDIRECT_CONFIG", plugin_config());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let output = run(&mut cmd);
    let text = stdout(&output);
    let value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "sweep --json: {e}: {text}\n{}{}",
            stderr(&output),
            cluster_state_if_cut(&output)
        )
    });
    (output.status.code(), value)
}
