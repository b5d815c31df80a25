//! The SPANK plugin inside the real local cluster: `srun`/`sbatch --gpudirect=...`.
//!
//! Every test takes `cluster()` first: some of them change the cluster's config or a
//! node's NIC, so they run one at a time whatever the test harness's thread count.

use std::collections::BTreeMap;

use cluster_tests::*;
use gpudirect_core::config::parse_config;
use gpudirect_core::marks::{mark_prefix, MARKS_DIR, SETTLE_SECS};
use gpudirect_core::resolve::{
    plan_node, plan_task, resolve_profile, AssumeHealthy, StepFacts, TaskFacts,
};
use gpudirect_core::system::FileStamp;

/// How long a batch job of these tests may take (they take seconds).
const BATCH_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// The variables the shipped tcpx profile gives a task, computed by the shared crate from
/// the cluster's own config file (the literal checks below pin the important ones).
fn expected_tcpx(node: &str, job_id: u32, local_rank: u32, rank: u32) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(plugin_config()).expect("read cluster config");
    let config = parse_config(&text, "cluster").expect("cluster config parses");
    let mode = config.parse_mode("tcpx").expect("tcpx exists");
    let resolved = resolve_profile(&config, node, &mode).unwrap().unwrap();
    let step = StepFacts {
        job_id,
        node: node.into(),
        ..Default::default()
    };
    let node_plan = plan_node(resolved, step, &AssumeHealthy);
    let task = TaskFacts {
        rank,
        local_rank,
        ..Default::default()
    };
    let plan = plan_task(&node_plan, &task, &|_| None);
    plan.set
        .into_iter()
        .filter(|(name, _)| name.starts_with("NCCL_"))
        .collect()
}

#[test]
fn srun_tcpx_gives_every_task_on_every_node_the_profile() {
    let _guard = cluster();
    let (output, tasks) = srun_env(&["-N3", "--ntasks-per-node=8", "--gpudirect=tcpx"], &[]);
    assert_ok(&output, "srun -N3 --ntasks-per-node=8 --gpudirect=tcpx");
    assert_eq!(
        tasks.len(),
        24,
        "one environment per task:\n{}",
        stdout(&output)
    );
    let mut nodes = std::collections::BTreeSet::new();
    for (rank, env) in &tasks {
        let node = &env["SLURMD_NODENAME"];
        nodes.insert(node.clone());
        let local_rank: u32 = env["SLURM_LOCALID"].parse().unwrap();
        let job_id: u32 = env["SLURM_JOB_ID"].parse().unwrap();
        assert_eq!(
            env.get("GPUDIRECT_PROFILE").map(String::as_str),
            Some("tcpx"),
            "rank {rank}"
        );
        assert_eq!(env["NCCL_NET"], "GPUDirectTCPX_v7");
        assert_eq!(env["NCCL_SOCKET_IFNAME"], "eth0");
        assert_eq!(
            env["NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"],
            "eth1,eth2,eth3,eth4"
        );
        assert_eq!(
            env["NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX"],
            format!("/run/tcpx-{job_id}")
        );
        assert!(
            env["LD_LIBRARY_PATH"].starts_with("/var/lib/tcpx/lib64"),
            "rank {rank}"
        );
        assert_eq!(env["GPUDIRECT_SKIPPED_CHECKS"], "libraries,rxdm_socket_dir");
        // GPUs 0,1 -> eth1; 2,3 -> eth2; 4,5 -> eth3; 6,7 -> eth4.
        let nic = format!("eth{}", local_rank / 2 + 1);
        assert_eq!(env["GPUDIRECT_NIC"], nic, "rank {rank} local {local_rank}");
        for (name, value) in expected_tcpx(node, job_id, local_rank, *rank) {
            assert_eq!(env.get(&name), Some(&value), "rank {rank}: {name}");
        }
    }
    assert_eq!(nodes.len(), 3, "tasks ran on three nodes: {nodes:?}");
}

#[test]
fn tcpx_pins_tasks_to_their_nics_cpus_where_the_node_has_them() {
    let _guard = cluster();
    // The profile's eth1/eth2 CPUs (0-51,...) include this machine's CPU 0; eth3/eth4's
    // (52-103,...) exist only on a real A3 VM, so those tasks are left unpinned.
    let mut cmd = slurm_command("srun");
    cmd.args(["-N1", "--ntasks-per-node=8", "--gpudirect=tcpx", "-l", "sh", "-c"])
        .arg("echo cpus=$(grep Cpus_allowed_list /proc/self/status | cut -f2) env=${GPUDIRECT_CPUS:-unset}");
    let output = run(&mut cmd);
    assert_ok(&output, "srun pinning");
    let text = stdout(&output);
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let online = gpudirect_core::cpulist::CpuList::parse(online.trim()).unwrap();
    let near = gpudirect_core::cpulist::CpuList::parse("0-51,104-155").unwrap();
    let expected = online.intersection(&near).to_string();
    for line in text.lines() {
        let (label, rest) = line.split_once(": ").unwrap();
        let rank: u32 = label.trim().parse().unwrap();
        if rank < 4 {
            assert_eq!(
                rest,
                format!("cpus={expected} env={expected}"),
                "rank {rank}"
            );
        } else {
            assert!(rest.ends_with("env=unset"), "rank {rank}: {rest}");
        }
    }
    assert_eq!(text.lines().count(), 8);
}

#[test]
fn srun_without_the_option_is_untouched() {
    let _guard = cluster();
    let (output, tasks) = srun_env(&["-N3"], &[]);
    assert_ok(&output, "srun -N3 env");
    assert_eq!(tasks.len(), 3);
    for env in tasks.values() {
        let ours: Vec<&String> = env
            .keys()
            .filter(|k| k.starts_with("GPUDIRECT_") || k.starts_with("NCCL_"))
            .collect();
        assert!(ours.is_empty(), "untouched step got {ours:?}");
    }
}

#[test]
fn each_job_gets_its_own_ras_address_and_a_users_own_is_kept() {
    let _guard = cluster();
    // Two jobs on one node: NCCL_RAS_ADDR = 127.0.0.1:(28100 + job id mod 900), the shipped
    // default of [ras], so their RAS services do not answer for each other.
    let mut seen = Vec::new();
    for _ in 0..2 {
        let (output, tasks) = srun_env(&["-N1", "-w", "node1", "--gpudirect=tcpx"], &[]);
        assert_ok(&output, "srun --gpudirect=tcpx");
        let env = &tasks[&0];
        let job: u32 = env["SLURM_JOB_ID"].parse().unwrap();
        let want = format!("127.0.0.1:{}", 28100 + job % 900);
        assert_eq!(env["NCCL_RAS_ADDR"], want, "job {job}");
        assert_eq!(env["GPUDIRECT_RAS_ADDR"], want);
        assert!(env["GPUDIRECT_SET"]
            .split(',')
            .any(|n| n == "NCCL_RAS_ADDR"));
        seen.push(want);
    }
    assert_ne!(seen[0], seen[1], "two jobs, two addresses");
    let (output, tasks) = srun_env(
        &["-N1", "-w", "node1", "--gpudirect=tcpx"],
        &[("NCCL_RAS_ADDR", "127.0.0.1:31999")],
    );
    assert_ok(&output, "srun with the user's NCCL_RAS_ADDR");
    let env = &tasks[&0];
    assert_eq!(
        env["NCCL_RAS_ADDR"], "127.0.0.1:31999",
        "the user's value is kept"
    );
    assert_eq!(env["GPUDIRECT_RAS_ADDR"], "127.0.0.1:31999");
    // Steps without a profile are left alone.
    let (output, tasks) = srun_env(&["-N1", "-w", "node1", "--gpudirect=none"], &[]);
    assert_ok(&output, "srun --gpudirect=none");
    assert!(!tasks[&0].contains_key("NCCL_RAS_ADDR"));
}

#[test]
fn user_values_survive_and_forced_ones_are_replaced() {
    let _guard = cluster();
    let user = [
        ("NCCL_ALGO", "Tree"),
        ("NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX", "/tmp/mine"),
    ];
    let (output, tasks) = srun_env(&["-N2", "--gpudirect=tcpx"], &user);
    assert_ok(&output, "srun with user variables");
    assert_eq!(tasks.len(), 2);
    for env in tasks.values() {
        assert_eq!(env["NCCL_ALGO"], "Tree", "the user's value is kept");
        assert!(!env["GPUDIRECT_SET"].split(',').any(|n| n == "NCCL_ALGO"));
        let job = &env["SLURM_JOB_ID"];
        assert_eq!(
            env["NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX"],
            format!("/run/tcpx-{job}"),
            "forced"
        );
        assert_eq!(env["NCCL_PROTO"], "Simple", "the rest still applies");
    }
}

#[test]
fn slurm_gpudirect_in_the_environment_selects_and_the_option_overrides() {
    let _guard = cluster();
    let (output, tasks) = srun_env(&["-N1"], &[("SLURM_GPUDIRECT", "tcpx")]);
    assert_ok(&output, "SLURM_GPUDIRECT=tcpx srun");
    assert_eq!(
        tasks[&0].get("GPUDIRECT_PROFILE").map(String::as_str),
        Some("tcpx")
    );
    let (output, tasks) = srun_env(&["-N1", "--gpudirect=none"], &[("SLURM_GPUDIRECT", "tcpx")]);
    assert_ok(&output, "srun --gpudirect=none");
    assert!(!tasks[&0].contains_key("GPUDIRECT_PROFILE"));
    assert!(!tasks[&0].contains_key("NCCL_NET"));
}

#[test]
fn sbatch_option_reaches_the_batch_script_and_its_steps() {
    let _guard = cluster();
    let dir = fresh_temp_dir("sbatch");
    let out = dir.join("out.txt");
    let mut cmd = slurm_command("sbatch");
    cmd.args(["--parsable", "-N2", "--gpudirect=tcpx", "-o"])
        .arg(&out)
        .arg("--wrap")
        .arg("echo batch: ${GPUDIRECT_PROFILE:-unset} ${NCCL_NET:-unset}; srun -l sh -c 'echo step: $GPUDIRECT_PROFILE $NCCL_NET $GPUDIRECT_NIC'; srun -l --gpudirect=none sh -c 'echo none: ${GPUDIRECT_PROFILE:-unset} ${NCCL_NET:-unset}'");
    let end = submit_and_wait(&mut cmd, BATCH_LIMIT, "sbatch --gpudirect=tcpx");
    assert!(end.ok(), "sbatch --gpudirect=tcpx: {}", end.record);
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("batch: tcpx GPUDirectTCPX_v7"), "{text}");
    let steps: Vec<&str> = text.lines().filter(|l| l.contains("step:")).collect();
    assert_eq!(steps.len(), 2, "{text}");
    for line in steps {
        assert!(line.ends_with("step: tcpx GPUDirectTCPX_v7 eth1"), "{line}");
    }
    let none: Vec<&str> = text.lines().filter(|l| l.contains("none:")).collect();
    assert_eq!(none.len(), 2, "{text}");
    for line in none {
        assert!(
            line.ends_with("none: unset unset"),
            "explicit none clears what the batch step set: {line}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Each node of a step plans for itself: srun inside a batch script carries the batch
/// host's SLURMD_NODENAME in its environment, and a node that went by it took the batch
/// host's node set (found in review: node2's default profile was never applied).
#[test]
fn each_node_of_a_batch_step_uses_its_own_node_set() {
    let _guard = cluster();
    let swap = FileSwap::config();
    let original = swap.original_text();
    assert!(original.contains("hosts = \"node[1-16]\""), "{original}");
    swap.write(&format!(
        "{}\n[[node_set]]\nname = \"local2\"\nhosts = \"node2\"\nprofile = \"tcpx\"\n\
         skip_checks = [\"libraries\", \"rxdm_socket_dir\"]\ndefault_mode = \"tcpx\"\n",
        original.replace("hosts = \"node[1-16]\"", "hosts = \"node[1,3-16]\"")
    ));
    let dir = fresh_temp_dir("sbatch-nodes");
    let out = dir.join("out.txt");
    let mut cmd = slurm_command("sbatch");
    cmd.args(["--parsable", "-N2", "-w", "node1,node2", "-o"])
        .arg(&out)
        .arg("--wrap")
        .arg("srun -N2 -l sh -c 'echo $SLURMD_NODENAME ${GPUDIRECT_PROFILE:-untouched}'");
    let end = submit_and_wait(
        &mut cmd,
        BATCH_LIMIT,
        "sbatch on node1 (batch host) and node2",
    );
    assert!(end.ok(), "sbatch on node1 and node2: {}", end.record);
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        text.contains("0: node1 untouched"),
        "node1 has no default\n{text}"
    );
    assert!(
        text.contains("1: node2 tcpx"),
        "node2's default applies\n{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unknown_mode_is_refused_before_anything_runs() {
    let _guard = cluster();
    let text = std::fs::read_to_string(plugin_config()).expect("read cluster config");
    let known = parse_config(&text, "cluster")
        .expect("parses")
        .profile_names()
        .join(", ");
    let expected =
        format!("unknown --gpudirect mode `tcpxx`: use `auto`, `none` or a profile ({known})");
    for program in ["srun", "sbatch"] {
        let mut cmd = slurm_command(program);
        cmd.args(["-N1", "--gpudirect=tcpxx"]);
        if program == "sbatch" {
            cmd.args(["--wrap", "true"]);
        } else {
            cmd.arg("true");
        }
        let output = run(&mut cmd);
        assert!(!output.status.success(), "{program} accepted a bad mode");
        let err = stderr(&output);
        assert!(
            err.contains(&expected),
            "{program}: want {expected}\ngot {err}"
        );
        assert!(
            !stdout(&output).contains("Submitted batch job"),
            "{program} submitted"
        );
    }
    let mut cmd = slurm_command("srun");
    cmd.args(["-N1", "true"]).env("SLURM_GPUDIRECT", "bogus");
    let output = run(&mut cmd);
    assert!(!output.status.success(), "SLURM_GPUDIRECT=bogus accepted");
    assert_stderr_contains(&output, "SLURM_GPUDIRECT: unknown --gpudirect mode `bogus`");
}

#[test]
fn oversized_or_hostile_mode_values_are_refused() {
    let _guard = cluster();
    let long = format!("--gpudirect={}", "a".repeat(10_000));
    for arg in [
        long.as_str(),
        "--gpudirect=tcpx;id",
        "--gpudirect=$(touch /tmp/gd-pwned)",
    ] {
        let mut cmd = slurm_command("srun");
        cmd.args(["-N1", arg, "true"]);
        let output = run(&mut cmd);
        assert!(
            !output.status.success(),
            "accepted {}",
            &arg[..arg.len().min(40)]
        );
        assert_stderr_contains(&output, "gpudirect");
    }
    assert!(!std::path::Path::new("/tmp/gd-pwned").exists());
}

#[test]
fn a_broken_config_says_where_and_the_step_runs_without_the_profile() {
    let _guard = cluster();
    let swap = FileSwap::config();
    let original = swap.original_text();
    let broken_line = original.lines().count() + 3;
    swap.write(&format!(
        "{original}\n[profiles.broken.env]\nNCCL_X = \"{{jobid}}\"\n"
    ));
    let (output, tasks) = srun_env(&["-N2", "--gpudirect=tcpx"], &[]);
    let err = stderr(&output);
    let expected = format!(
        "{}:{broken_line}: profiles.broken.env.NCCL_X: unknown placeholder `{{jobid}}`",
        swap.path().display()
    );
    assert!(err.contains(&expected), "want {expected}\ngot {err}");
    assert_ok(&output, "optional plugin: the step still runs");
    assert_eq!(tasks.len(), 2);
    assert!(tasks
        .values()
        .all(|env| !env.contains_key("GPUDIRECT_PROFILE")));
}

#[test]
fn a_world_writable_config_is_refused() {
    let _guard = cluster();
    let swap = FileSwap::config();
    swap.chmod(0o666);
    let (output, tasks) = srun_env(&["-N1", "--gpudirect=tcpx"], &[]);
    let err = stderr(&output);
    assert!(
        err.contains("refusing the config") && err.contains("chmod go-w"),
        "{err}"
    );
    assert_ok(&output, "optional plugin: the step still runs");
    assert!(!tasks[&0].contains_key("GPUDIRECT_PROFILE"));
}

/// Takes a node's NIC down for the test's duration.
struct NicDown(&'static str, &'static str);

impl NicDown {
    fn new(node: &'static str, nic: &'static str) -> Self {
        let down = ip_in_node(node, &["link", "set", nic, "down"]);
        assert_ok(&down, "ip link set down in the node");
        NicDown(node, nic)
    }
}

impl Drop for NicDown {
    fn drop(&mut self) {
        ip_in_node(self.0, &["link", "set", self.1, "up"]);
    }
}

#[test]
fn a_missing_nic_on_one_node_names_the_node_and_spares_the_others() {
    let _guard = cluster();
    let _down = NicDown::new("node3", "eth4");
    let (output, tasks) = srun_env(&["-N3", "--gpudirect=tcpx"], &[]);
    assert_ok(
        &output,
        "optional plugin, non-strict profile: the step runs",
    );
    let err = stderr(&output);
    assert!(
        err.contains("gpudirect: node node3: profile tcpx not usable: NIC eth4 is down"),
        "{err}"
    );
    assert_eq!(
        err.matches("not usable").count(),
        1,
        "one line for the node: {err}"
    );
    assert!(
        err.contains("the step runs without the profile (the job's RAS address, 127.0.0.1:"),
        "{err}"
    );
    // Without its profile, node3 keeps the job's RAS address (issue #45): every rank of
    // the job answers `gpudirect hang` at one address, and nothing else of the profile.
    let job_ras: std::collections::BTreeSet<&str> = tasks
        .values()
        .map(|env| env.get("NCCL_RAS_ADDR").map_or("(none)", String::as_str))
        .collect();
    assert_eq!(job_ras.len(), 1, "one RAS address for the job: {job_ras:?}");
    for env in tasks.values() {
        let applied = env.contains_key("GPUDIRECT_PROFILE");
        assert_eq!(applied, env["SLURMD_NODENAME"] != "node3", "{env:?}");
        assert_eq!(
            env.get("NCCL_RAS_ADDR"),
            env.get("GPUDIRECT_RAS_ADDR"),
            "{env:?}"
        );
        if !applied {
            assert!(!env.contains_key("NCCL_NET"), "{env:?}");
        }
    }
}

#[test]
fn a_failed_check_fails_the_step_when_the_profile_is_strict() {
    let _guard = cluster();
    let swap = FileSwap::config();
    let strict =
        swap.original_text()
            .replacen("[profiles.tcpx]\n", "[profiles.tcpx]\nstrict = true\n", 1);
    assert_ne!(
        strict,
        swap.original_text(),
        "the tcpx profile header was found"
    );
    swap.write(&strict);
    let _down = NicDown::new("node2", "eth1");
    let mut cmd = slurm_command("srun");
    cmd.args(["-N2", "--gpudirect=tcpx", "true"]);
    let output = run(&mut cmd);
    assert!(
        !output.status.success(),
        "a strict profile ran without its NIC"
    );
    let err = stderr(&output);
    assert!(
        err.contains("node node2: profile tcpx not usable: NIC eth1 is down")
            && err.contains("the profile is strict: the step fails"),
        "{err}"
    );
}

#[test]
fn a_failed_check_fails_the_step_when_the_plugin_is_required() {
    let _guard = cluster();
    let plugstack = FileSwap::plugstack();
    let required = plugstack
        .original_text()
        .replacen("optional ", "required ", 1);
    assert!(
        required.lines().any(|l| l.starts_with("required ")),
        "{required}"
    );
    plugstack.write(&required);
    let _down = NicDown::new("node1", "eth2");
    let mut cmd = slurm_command("srun");
    cmd.args(["-N2", "--gpudirect=tcpx", "true"]);
    let output = run(&mut cmd);
    assert!(
        !output.status.success(),
        "required plugin: the step ran although a check failed"
    );
    assert_stderr_contains(
        &output,
        "node node1: profile tcpx not usable: NIC eth2 is down",
    );
    drop(_down);
    // With every NIC up the same required plugin runs the step.
    let (output, tasks) = srun_env(&["-N2", "--gpudirect=tcpx"], &[]);
    assert_ok(&output, "required plugin, all checks pass");
    assert!(tasks.values().all(|env| env["GPUDIRECT_PROFILE"] == "tcpx"));
}

#[test]
fn an_unprivileged_user_cannot_steer_the_plugin_to_their_own_files() {
    let _guard = cluster();
    let user = "gdtestuser";
    if run(std::process::Command::new("id").arg(user))
        .status
        .code()
        != Some(0)
    {
        let made = run(std::process::Command::new("useradd").args([
            "--no-create-home",
            "--shell",
            "/bin/sh",
            user,
        ]));
        assert_ok(&made, "useradd");
    }
    let evil = std::env::temp_dir().join("gd-user-evil.toml");
    std::fs::write(&evil, "[profiles.tcpx.env]\nNCCL_NET = \"Evil\"\n").unwrap();
    let as_user = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = slurm_command_as(Who::Root, "setpriv");
        cmd.args([
            "--reuid",
            user,
            "--regid",
            user,
            "--clear-groups",
            "--",
            "srun",
        ])
        .args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        run(&mut cmd)
    };
    // Modes are profile names: a path is refused before anything runs.
    for mode in [evil.to_str().unwrap(), "../../tmp/gd-user-evil"] {
        let out = as_user(&["-N1", &format!("--gpudirect={mode}"), "true"], &[]);
        assert!(!out.status.success(), "mode {mode} accepted");
        assert_stderr_contains(&out, "unknown --gpudirect mode");
    }
    let out = as_user(
        &["-N1", "true"],
        &[("SLURM_GPUDIRECT", evil.to_str().unwrap())],
    );
    assert!(!out.status.success(), "SLURM_GPUDIRECT as a path accepted");
    // The real profile applies, the task runs as the user, and the user's own library
    // path stays behind the profile's.
    let out = as_user(
        &[
            "-N1",
            "--gpudirect=tcpx",
            "sh",
            "-c",
            "echo $(id -u) $NCCL_NET $LD_LIBRARY_PATH",
        ],
        &[("LD_LIBRARY_PATH", "/tmp/mine")],
    );
    assert_ok(&out, "srun as the user");
    let fields: Vec<String> = stdout(&out)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_ne!(fields[0], "0", "the task must not run as root");
    assert_eq!(
        fields[1], "GPUDirectTCPX_v7",
        "the admin's profile, not the user's file"
    );
    assert_eq!(fields[2], "/var/lib/tcpx/lib64:/tmp/mine");
    // A config the user could write is refused even by root's slurmstepd.
    let swap = FileSwap::config();
    let chown = run(std::process::Command::new("chown")
        .arg(user)
        .arg(swap.path()));
    assert_ok(&chown, "chown the config to the user");
    let (out, tasks) = srun_env(&["-N1", "--gpudirect=tcpx"], &[]);
    assert_stderr_contains(&out, "refusing the config");
    assert_stderr_contains(&out, "owned by uid");
    assert!(!tasks[&0].contains_key("GPUDIRECT_PROFILE"));
    drop(swap);
    let restore = run(std::process::Command::new("chown")
        .args(["root:root"])
        .arg(plugin_config()));
    assert_ok(&restore, "chown the config back");
}

#[test]
fn a_config_changed_during_a_job_applies_to_the_steps_started_after_it() {
    let _guard = cluster();
    let swap = FileSwap::config();
    let dir = fresh_temp_dir("midjob");
    let out = dir.join("out.txt");
    let marker = dir.join("go");
    let script = format!(
        "srun -N1 sh -c 'echo first: $NCCL_ALGO'; while [ ! -e {m} ]; do sleep 0.1; done; srun -N1 sh -c 'echo second: $NCCL_ALGO'",
        m = marker.display()
    );
    let mut cmd = slurm_command("sbatch");
    cmd.args(["--parsable", "-N1", "--gpudirect=tcpx", "-o"])
        .arg(&out)
        .arg("--wrap")
        .arg(&script);
    let submitted = run(&mut cmd);
    assert_ok(&submitted, "sbatch --gpudirect=tcpx");
    let job = parsable_job_id(&submitted);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !std::fs::read_to_string(&out)
        .unwrap_or_default()
        .contains("first:")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the first step never ran"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let changed = swap
        .original_text()
        .replacen("NCCL_ALGO = \"Ring\"", "NCCL_ALGO = \"Tree\"", 1);
    assert_ne!(changed, swap.original_text());
    swap.write(&changed);
    std::fs::write(&marker, "").unwrap();
    let end = wait_for_job(job, BATCH_LIMIT)
        .unwrap_or_else(|| panic!("job {job} did not end within {BATCH_LIMIT:?}"));
    assert!(end.ok(), "the batch job: {}", end.record);
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("first: Ring"), "{text}");
    // The batch step set NCCL_ALGO=Ring itself (GPUDIRECT_SET), so the new step takes the
    // changed profile's value rather than keeping Ring as if the user had set it.
    assert!(text.contains("second: Tree"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_rxdm_readiness_check_wants_a_listening_socket() {
    let _guard = cluster();
    let swap = FileSwap::config();
    // The local node set skips this check (no RxDM here); turn it back on.
    let checked = swap.original_text().replace(
        "skip_checks = [\"libraries\", \"rxdm_socket_dir\", \"nic_speed\", \"gpus\"]",
        "skip_checks = [\"libraries\"]",
    );
    assert_ne!(checked, swap.original_text());
    swap.write(&checked);
    let script = r#"
dir=/run/tcpx-$SLURM_JOB_ID
step() { srun -N1 sh -c 'echo "$1 ${GPUDIRECT_PROFILE:-none}"' _ "$1"; }
step missing
mkdir -p "$dir"; step empty
python3 -c 'import socket,sys,time; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(); time.sleep(30)' "$dir/rxdm.sock" &
for i in $(seq 50); do [ -S "$dir/rxdm.sock" ] && break; sleep 0.1; done
step listening
kill %1; rm -rf "$dir"
"#;
    // The RxDM directory and daemon are the prolog's work, as root; this allocation plays
    // the prolog, so it runs as root.
    let mut cmd = slurm_command_as(Who::Root, "salloc");
    cmd.args(["-N1", "--quiet", "--gpudirect=tcpx", "bash", "-c", script]);
    let output = run(&mut cmd);
    assert_ok(&output, "salloc with the readiness steps");
    let out = stdout(&output);
    let err = stderr(&output);
    assert!(
        out.contains("missing none")
            && out.contains("empty none")
            && out.contains("listening tcpx"),
        "{out}\n{err}"
    );
    assert!(
        err.contains("RxDM socket directory /run/tcpx-") && err.contains("is missing"),
        "{err}"
    );
    assert!(
        err.contains("has no socket") && err.contains("tcpx-rxdm-prolog.sh"),
        "{err}"
    );
}

/// The stamp of a file now.
fn stamp_of(path: &std::path::Path) -> FileStamp {
    FileStamp::of(&std::fs::metadata(path).expect("stat for a stamp"))
}

/// The marks of `node` for the cluster's config as it is now (of any plugin build).
fn marks_for(node: &str) -> Vec<std::path::PathBuf> {
    let prefix = mark_prefix(node, &stamp_of(&plugin_config())).expect("a plain node name");
    let Ok(dir) = std::fs::read_dir(MARKS_DIR) else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

/// Waits until the config changed long enough ago to be marked ([`SETTLE_SECS`]).
fn wait_until_config_settles() {
    use std::os::unix::fs::MetadataExt;
    let changed = std::fs::metadata(plugin_config())
        .expect("stat config")
        .ctime();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let ready = changed + SETTLE_SECS + 1;
    let now = i64::try_from(now).expect("clock");
    if ready > now {
        std::thread::sleep(std::time::Duration::from_secs((ready - now) as u64));
    }
}

/// slurmstepd skips reading the config for a step that asks for no mode only when a
/// root-owned mark names this very config version, plugin build and node; a step that
/// asks for a mode always reads it, and a broken config is never marked. Every step here
/// is an ordinary user's: slurmstepd looks marks up and writes them while it is still root
/// (init_post_opt), not in user_init, which runs with the user's rights (review F1).
#[test]
fn a_mark_skips_reading_only_the_config_version_it_names() {
    use std::os::unix::fs::MetadataExt;
    let _guard = cluster();
    let on_node1 = |extra: &[&str]| {
        let mut cmd = slurm_command("srun");
        cmd.args(["-N1", "-w", "node1"]).args(extra).arg("true");
        run(&mut cmd)
    };

    // A valid config that gives node1 no default mode: the first step leaves a mark.
    wait_until_config_settles();
    for old in marks_for("node1") {
        std::fs::remove_file(old).expect("remove an old mark");
    }
    assert_ok(&on_node1(&[]), "a step without a mode");
    let marks = marks_for("node1");
    assert_eq!(
        marks.len(),
        1,
        "one mark for node1 after a plain step: {marks:?}"
    );
    let meta = std::fs::symlink_metadata(&marks[0]).expect("stat the mark");
    assert!(meta.is_file() && meta.uid() == 0 && meta.mode() & 0o022 == 0);
    // The installed plugin's build id ends the mark's name.
    let prefix = mark_prefix("node1", &stamp_of(&plugin_config())).unwrap();
    let name = marks[0].file_name().unwrap().to_string_lossy().into_owned();
    let build = name.strip_prefix(&prefix).unwrap().to_string();

    // The user's plain steps skip the read: with the config readable by root alone, a
    // plain step still runs and says nothing (root's side decided and marked the new
    // version), while a step that asks for a mode reads it as the user and is told why.
    {
        use std::os::unix::fs::PermissionsExt;
        let _restore = FileSwap::config();
        std::fs::set_permissions(plugin_config(), std::fs::Permissions::from_mode(0o600))
            .expect("chmod 600 the config");
        wait_until_config_settles();
        let plain = on_node1(&[]);
        assert_ok(&plain, "a plain step with the config readable by root only");
        assert!(
            !stderr(&plain).contains("gpudirect"),
            "the user's plain step read the config: {}",
            stderr(&plain)
        );
        assert_eq!(marks_for("node1").len(), 1, "the new version is marked");
        let asked = on_node1(&["--gpudirect=tcpx"]);
        assert!(
            stderr(&asked).contains("Permission denied"),
            "a mode is read with the user's rights: {}",
            stderr(&asked)
        );
    }
    wait_until_config_settles();
    assert_ok(
        &on_node1(&[]),
        "a plain step once the config is readable again",
    );

    // Break the config under a required plugin: the mark named the old version, so the
    // next step without a mode reads the new one and fails.
    let plugstack = FileSwap::plugstack();
    plugstack.write(
        &plugstack
            .original_text()
            .replacen("optional ", "required ", 1),
    );
    let swap = FileSwap::config();
    let original = swap.original_text();
    swap.write(&format!(
        "{original}\n[profiles.broken.env]\nNCCL_X = \"{{jobid}}\"\n"
    ));
    let output = on_node1(&[]);
    assert!(
        !output.status.success(),
        "required plugin, broken config: the step ran"
    );
    assert!(
        stderr(&output).contains("profiles.broken.env.NCCL_X: unknown placeholder"),
        "the user is told why: {}",
        stderr(&output)
    );
    assert!(marks_for("node1").is_empty(), "a broken config was marked");

    // A root-owned mark for the broken version (what only root could write) is trusted:
    // a step without a mode skips the read and runs; one asking for a mode still reads
    // the config and fails.
    let forged = std::path::Path::new(MARKS_DIR).join(format!(
        "{}{build}",
        mark_prefix("node1", &stamp_of(&plugin_config())).unwrap()
    ));
    std::fs::write(&forged, "").expect("write a mark");
    assert_ok(
        &on_node1(&[]),
        "a marked config is not read for a plain step",
    );
    let asked = on_node1(&["--gpudirect=tcpx"]);
    assert!(
        !asked.status.success(),
        "a mode was asked: the config must be read"
    );
    // Owned by anyone but root, the same mark is ignored.
    let chown = run(std::process::Command::new("chown")
        .arg("65534")
        .arg(&forged));
    assert_ok(&chown, "chown the mark");
    assert!(
        !on_node1(&[]).status.success(),
        "a mark not owned by root was trusted"
    );
    std::fs::remove_file(&forged).expect("remove the forged mark");
    drop(plugstack);

    // A config that gives node1 a default mode is never marked: every step needs it.
    let with_default = original.replace(
        "skip_checks = [\"libraries\", \"rxdm_socket_dir\", \"nic_speed\", \"gpus\"]",
        "skip_checks = [\"libraries\", \"rxdm_socket_dir\", \"nic_speed\", \"gpus\"]\ndefault_mode = \"tcpx\"",
    );
    assert_ne!(
        with_default, original,
        "the local node set's skip_checks line moved"
    );
    swap.write(&with_default);
    wait_until_config_settles();
    let (output, tasks) = srun_env(&["-N1", "-w", "node1"], &[]);
    assert_ok(&output, "a step on a node with a default mode");
    assert_eq!(
        tasks[&0]["GPUDIRECT_PROFILE"], "tcpx",
        "the default applied"
    );
    assert!(
        marks_for("node1").is_empty(),
        "a config with a default was marked"
    );
}

/// An over-long `--gpudirect` value that reaches slurmstepd (by hand, through the job
/// environment: srun itself refuses it) is not refused there, since Slurm would then copy
/// the raw value, newline and all, into slurmd's log (security review F2).
#[test]
fn an_over_long_remote_option_cannot_forge_a_slurmd_log_line() {
    let _guard = cluster();
    let forged = "gpudirect-forged-line: all is well";
    let value = format!("tcpx\n{forged}{}", "x".repeat(100));
    let log_path = state_dir().join("log/slurmd-node1.log");
    let before = std::fs::metadata(&log_path).map(|m| m.len()).unwrap_or(0) as usize;
    let mut cmd = slurm_command("srun");
    cmd.args(["-N1", "-w", "node1", "true"])
        .env("_SLURM_SPANK_OPTION_gpudirect_gpudirect", &value);
    let output = run(&mut cmd);
    let log = std::fs::read(&log_path).expect("read slurmd's log");
    // Only what this step wrote: an earlier build's run may have left forged lines.
    let log = String::from_utf8_lossy(log.get(before..).unwrap_or_default());
    assert!(
        !log.lines().any(|line| line.starts_with(forged)),
        "a forged line in slurmd's log (srun: {})",
        stderr(&output)
    );
    assert!(
        stderr(&output).contains("bytes refused") || output.status.success(),
        "{}",
        stderr(&output)
    );
}

/// Cancels a job when dropped (also when the test panics), so that the GPUs it holds are
/// free for the next test.
struct CancelOnDrop(String);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        run(slurm_command("scancel").arg(&self.0));
    }
}

/// Review F3: under ConstrainDevices=yes Slurm numbers CUDA_VISIBLE_DEVICES from 0 inside
/// every job, so the second job on a node sees its physical GPUs 4-7 as 0-3. Its tasks must
/// get the NICs and CPUs of GPUs 4-7 (eth3, eth4), not those of the first job's GPUs.
#[test]
fn a_second_job_on_a_node_gets_the_nics_of_its_own_physical_gpus() {
    let _guard = cluster();
    let mut sbatch = slurm_command("sbatch");
    sbatch.args([
        "--parsable",
        "-w",
        "node1",
        "-n1",
        "--gres=gpu:4",
        "-o",
        "/dev/null",
        "--wrap",
        "sleep 300",
    ]);
    let output = run(&mut sbatch);
    assert_ok(&output, "sbatch holding GPUs 0-3 of node1");
    let first = stdout(&output)
        .trim()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let _cancel = CancelOnDrop(first.clone());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let state = run(slurm_command("squeue").args(["-h", "-o", "%T", "-j", &first]));
        if stdout(&state).trim() == "RUNNING" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job {first} never ran: {}",
            stdout(&state)
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }

    let (output, tasks) = srun_env(
        &["-w", "node1", "-n4", "--gres=gpu:4", "--gpudirect=tcpx"],
        &[],
    );
    assert_ok(&output, "srun --gres=gpu:4 beside the first job");
    assert_eq!(tasks.len(), 4, "{}", stdout(&output));
    for (rank, env) in &tasks {
        // The premise: the job's own numbering starts at 0, the node's at 4.
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "0,1,2,3", "rank {rank}");
        assert_eq!(env["SLURM_STEP_GPUS"], "4,5,6,7", "rank {rank}");
        let local_rank: u32 = env["SLURM_LOCALID"].parse().unwrap();
        // Local rank r uses the job's GPU r, which is the node's GPU 4 + r:
        // GPUs 4,5 -> eth3; 6,7 -> eth4.
        let nic = format!("eth{}", (4 + local_rank) / 2 + 1);
        assert_eq!(
            env.get("GPUDIRECT_NIC"),
            Some(&nic),
            "rank {rank} local {local_rank}"
        );
        // GPUs 4-7 are near CPUs 52-103,156-207, which this machine lacks: the task keeps
        // the CPUs the job gave it (GPUs 0-3 would have pinned it to CPUs 0-51's).
        assert_eq!(env.get("GPUDIRECT_CPUS"), None, "rank {rank}");
    }
}

/// Review F6: slurmstepd reads SLURM_GPUDIRECT into a buffer of the longest mode, whatever
/// the job's value holds. `--export` gives the value to the job only, so that srun's own
/// check of its environment does not stop it first.
#[test]
fn an_oversized_mode_variable_is_refused_unread_by_the_step() {
    let _guard = cluster();
    let long = "a".repeat(100_000);
    let mut cmd = slurm_command("srun");
    cmd.args(["-N1", &format!("--export=ALL,SLURM_GPUDIRECT={long}")])
        .args(["sh", "-c", "echo profile=${GPUDIRECT_PROFILE:-unset}"]);
    let output = run(&mut cmd);
    assert_ok(&output, "srun with a 100 kB SLURM_GPUDIRECT");
    assert_eq!(stdout(&output).trim(), "profile=unset");
    let err = stderr(&output);
    assert!(
        err.contains("SLURM_GPUDIRECT is longer than 64 bytes: set it to a profile name"),
        "{err}"
    );
    assert!(!err.contains(&"a".repeat(65)), "the value is echoed: {err}");
}

/// The plugin built with the test-only fault-injection feature, against the cluster's own
/// Slurm: it panics in the callback a job's GPUDIRECT_TEST_PANIC names. `scripts/local-cluster
/// up` builds and installs it beside the plugin proper; nothing loads it unless a test
/// points plugstack.conf at it.
fn fault_injection_plugin() -> std::path::PathBuf {
    let installed = state_dir().join("lib/spank_gpudirect_faults.so");
    assert!(
        installed.is_file(),
        "{} is missing: run scripts/local-cluster up",
        installed.display()
    );
    installed
}

/// Review F7: a panic inside a callback must not leave a strict profile's step running
/// without its transport. Before the fix the panic poisoned slurm-spank's lock, task_init
/// returned -1, which Slurm ignores for an optional plugin, and the task ran.
#[test]
fn a_panic_fails_a_strict_profile_closed_and_a_lenient_one_open() {
    let _guard = cluster();
    let faulty = fault_injection_plugin();
    let plugstack = FileSwap::plugstack();
    let real = plugin_so();
    plugstack.write(
        &plugstack
            .original_text()
            .replace(real.to_str().unwrap(), faulty.to_str().unwrap()),
    );
    let config = FileSwap::config();
    let lenient = config.original_text();
    let strict = lenient.replacen("[profiles.tcpx]\n", "[profiles.tcpx]\nstrict = true\n", 1);
    assert_ne!(strict, lenient, "the tcpx profile header was found");
    for (text, is_strict) in [(&strict, true), (&lenient, false)] {
        config.write(text);
        for callback in ["user_init", "task_init"] {
            let mut cmd = slurm_command("srun");
            cmd.args(["-N2", "--gpudirect=tcpx"])
                .args(["sh", "-c", "echo ran ${GPUDIRECT_PROFILE:-unset}"])
                .env("GPUDIRECT_TEST_PANIC", callback);
            let output = run(&mut cmd);
            let what = format!("strict={is_strict}, panic in {callback}");
            let err = stderr(&output);
            assert!(err.contains("internal error while"), "{what}: {err}");
            assert!(err.contains("fault injected in"), "{what}: {err}");
            if is_strict {
                assert!(!output.status.success(), "{what}: the step ran");
                assert!(!stdout(&output).contains("ran"), "{what}");
            } else {
                assert_ok(&output, &what);
            }
        }
    }
}

/// Security review S11: a panic in the remote `init_post_opt` (where the marks are
/// consulted, as root) is caught there: the lock slurm-spank guards stays usable, and the
/// step is decided from the config by `user_init`, so a node whose default profile is
/// strict still gets it. On the earlier build the caught-by-the-guard panic poisoned the
/// lock, every later callback failed, and the plain step ran without its profile.
#[test]
fn a_panic_while_consulting_the_marks_still_applies_the_default_profile() {
    let _guard = cluster();
    let faulty = fault_injection_plugin();
    let plugstack = FileSwap::plugstack();
    let real = plugin_so();
    plugstack.write(
        &plugstack
            .original_text()
            .replace(real.to_str().unwrap(), faulty.to_str().unwrap()),
    );
    let config = FileSwap::config();
    let text = config
        .original_text()
        .replacen("# default_mode = \"auto\"", "default_mode = \"auto\"", 1)
        .replacen("[profiles.tcpx]\n", "[profiles.tcpx]\nstrict = true\n", 1);
    assert!(
        text.contains("\ndefault_mode = \"auto\""),
        "the default_mode line was found"
    );
    config.write(&text);
    let mut cmd = slurm_command("srun");
    cmd.args([
        "-N2",
        "sh",
        "-c",
        "echo ran ${GPUDIRECT_PROFILE:-unset} $SLURM_JOB_ID $SLURMD_NODENAME",
    ])
    .env("GPUDIRECT_TEST_PANIC", "init_post_opt");
    let output = run(&mut cmd);
    assert_ok(&output, "a plain step after a panic in init_post_opt");
    let ran: Vec<(String, String)> = stdout(&output)
        .lines()
        .filter_map(|l| {
            let mut w = l.strip_prefix("ran tcpx ")?.split_whitespace();
            Some((w.next()?.to_string(), w.next()?.to_string()))
        })
        .collect();
    assert_eq!(
        ran.len(),
        2,
        "both tasks got the profile: {}",
        stdout(&output)
    );
    // The task's stderr is not connected yet in init_post_opt: slurmd's log has the line,
    // for this very step.
    for (job, node) in &ran {
        let log = std::fs::read_to_string(state_dir().join(format!("log/slurmd-{node}.log")))
            .unwrap_or_default();
        let want = format!(
            "[{job}.0] error: gpudirect: node {node}: internal error while consulting the marks (fault injected in init_post_opt)"
        );
        assert!(log.contains(&want), "{node}'s slurmd log lacks {want:?}");
    }
}

/// Review F10: the dynamic symbol table holds what Slurm looks up and nothing else; the
/// stub for `spank_prepend_task_argv` only where the Slurm built against lacks it.
#[test]
fn the_plugin_exports_only_its_own_symbols() {
    let so = plugin_so();
    let output = run(std::process::Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&so));
    assert_ok(&output, "nm -D");
    let exported: std::collections::BTreeSet<String> = stdout(&output)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
        .collect();
    let version = stdout(&run(slurm_command("srun").arg("--version")));
    let major: u32 = version
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("srun --version: {version}"));
    let mut expected: std::collections::BTreeSet<String> = [
        "plugin_name",
        "plugin_type",
        "plugin_version",
        "slurm_spank_init",
        "slurm_spank_init_post_opt",
        "slurm_spank_task_init",
        "slurm_spank_user_init",
    ]
    .map(String::from)
    .into();
    if major < 23 {
        expected.insert("spank_prepend_task_argv".into());
    }
    assert_eq!(exported, expected, "{}", so.display());
}

/// An OCI bundle for `srun --container` made from busybox: `rootfs/` (where Slurm 22.05
/// looks for it, whatever config.json says) and a config.json for rootless runc run by the
/// test user, in the node's network namespace, whose image environment has `image_env`.
fn oci_bundle(tag: &str, image_env: &[(&str, &str)]) -> std::path::PathBuf {
    let bundle = fresh_temp_dir(&format!("bundle-{tag}"));
    let rootfs = bundle.join("rootfs");
    for dir in [
        "bin",
        "proc",
        "sys",
        "dev",
        "tmp",
        "etc",
        "var/run/slurm",
        "root",
    ] {
        std::fs::create_dir_all(rootfs.join(dir)).expect("rootfs folder");
    }
    std::fs::copy("/usr/bin/busybox", rootfs.join("bin/busybox"))
        .expect("copy busybox (Debian's busybox-static) into the bundle");
    for applet in ["sh", "env", "cat", "grep", "cut", "echo"] {
        std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet)).expect("applet");
    }
    let user = nix::unistd::User::from_name(TEST_USER)
        .ok()
        .flatten()
        .expect("the test user");
    let mut env = vec!["PATH=/bin".to_string(), "HOME=/root".to_string()];
    env.extend(image_env.iter().map(|(k, v)| format!("{k}={v}")));
    let config = serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": 0, "gid": 0},
            "args": ["/bin/sh"],
            "env": env,
            "cwd": "/",
            "noNewPrivileges": true
        },
        "root": {"path": "rootfs", "readonly": false},
        "hostname": "container",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/sys", "type": "none", "source": "/sys",
             "options": ["rbind", "nosuid", "noexec", "nodev", "ro"]}
        ],
        "linux": {
            "uidMappings": [{"containerID": 0, "hostID": user.uid.as_raw(), "size": 1}],
            "gidMappings": [{"containerID": 0, "hostID": user.gid.as_raw(), "size": 1}],
            // No network namespace: the task uses the node's NICs, as Slurm's containers must.
            "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"},
                           {"type": "mount"}, {"type": "user"}]
        }
    });
    std::fs::write(
        bundle.join("config.json"),
        serde_json::to_string_pretty(&config).expect("JSON"),
    )
    .expect("write config.json");
    // The runtime, as the user, makes mount points in the root filesystem (Slurm 26.05
    // mounts its spool folder at its own path): every folder is the user's.
    give_to_test_user(&bundle);
    give_tree_to_test_user(&rootfs);
    bundle
}

/// [`give_to_test_user`] for `dir` and every folder under it.
fn give_tree_to_test_user(dir: &std::path::Path) {
    give_to_test_user(dir);
    for entry in std::fs::read_dir(dir)
        .expect("read a rootfs folder")
        .flatten()
    {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            give_tree_to_test_user(&entry.path());
        }
    }
}

#[test]
fn a_task_in_slurms_own_container_gets_the_profile_or_is_told_why_not() {
    let _guard = cluster();
    // The image sets a value the profile sets too (kept, as a user's would be: it is not
    // forced) and one the profile forces (replaced).
    let bundle = oci_bundle(
        "tcpx",
        &[
            ("IMAGE_MARK", "busybox"),
            ("NCCL_SOCKET_IFNAME", "image0"),
            ("NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX", "/image/tcpx"),
        ],
    );
    let mut cmd = slurm_command("srun");
    cmd.arg("-N1")
        .arg("-w")
        .arg("node1")
        .arg(format!("--container={}", bundle.display()))
        .args(["--gpudirect=tcpx", "/bin/sh", "-c"])
        .arg("env; echo cpus=$(grep Cpus_allowed_list /proc/self/status | cut -f2)");
    let output = run(&mut cmd);
    let text = stdout(&output);
    let err = stderr(&output);
    let env: std::collections::BTreeMap<&str, &str> =
        text.lines().filter_map(|l| l.split_once('=')).collect();
    assert_eq!(
        env.get("IMAGE_MARK"),
        Some(&"busybox"),
        "the task ran in the container:\n{text}\n{err}"
    );
    let (major, minor) = slurm_major_minor();
    if (major, minor) < (23, 2) {
        // Slurm 22.05 wrote the container's config before task_init: the plugin says so
        // instead of applying a profile nobody would see.
        assert_ok(&output, "srun --container on 22.05 (tcpx is not strict)");
        assert!(
            err.contains("profile tcpx cannot reach this step's container")
                && err.contains("use Slurm 23.02 or later"),
            "{err}"
        );
        assert_eq!(env.get("GPUDIRECT_PROFILE"), None, "{text}");
        return;
    }
    assert_ok(&output, "srun --container --gpudirect=tcpx");
    let job_id = env
        .get("SLURM_JOB_ID")
        .expect("SLURM_JOB_ID in the container");
    assert_eq!(env.get("GPUDIRECT_PROFILE"), Some(&"tcpx"), "{text}");
    assert_eq!(env.get("NCCL_NET"), Some(&"GPUDirectTCPX_v7"), "{text}");
    assert_eq!(
        env.get("GPUDIRECT_NIC"),
        Some(&"eth1"),
        "local rank 0's NIC: {text}"
    );
    assert_eq!(
        env.get("NCCL_SOCKET_IFNAME"),
        Some(&"image0"),
        "the image's value is kept, as a user's is: {text}"
    );
    assert_eq!(
        env.get("NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX").copied(),
        Some(format!("/run/tcpx-{job_id}").as_str()),
        "forced over the image's: {text}"
    );
    assert!(
        err.contains("the container keeps NCCL_SOCKET_IFNAME=image0 over profile tcpx's value"),
        "told, since it chooses the transport: {err}"
    );
    let pinned = env.get("GPUDIRECT_CPUS").expect("pinned CPUs");
    assert!(text.contains(&format!("cpus={pinned}\n")), "{text}");
}

/// `[watch]`: a job that asks (`GPUDIRECT_WATCH=1`) gets NCCL's Inspector variables and its
/// own dump folder, made by its tasks as its user with mode 0700; a job that does not ask
/// gets neither; and a folder another user made first for the job's id is never used (the
/// squatter here is root, standing for any other account): the job runs without telemetry
/// and says why.
#[test]
fn a_job_that_asks_gets_its_own_telemetry_folder_and_a_squatted_one_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let _guard = cluster();
    let (_swap, inspector) = watch_config(500);

    // The task reports the folder itself: once srun returns, the job ends and the epilog
    // (`gpudirect epilog`) removes it, racing a look from here.
    let mut cmd = slurm_command("srun");
    cmd.args(["-N1", "-w", "node1", "--gpudirect=tcpx", "-l", "sh", "-c"])
        .arg(r#"echo "dump_folder=$(stat -c '%u %a %F' "$NCCL_INSPECTOR_DUMP_DIR")"; env"#)
        .env("GPUDIRECT_WATCH", "1");
    let output = run(&mut cmd);
    assert_ok(&output, "srun --gpudirect=tcpx with GPUDIRECT_WATCH=1");
    let tasks = parse_labelled_env(&stdout(&output));
    let env = &tasks[&0];
    let job: u32 = env["SLURM_JOB_ID"].parse().unwrap();
    let folder = format!("/tmp/gpudirect-watch-{job}");
    assert_eq!(env["NCCL_INSPECTOR_DUMP_DIR"], folder);
    assert_eq!(env["NCCL_PROFILER_PLUGIN"], inspector.display().to_string());
    assert_eq!(env["NCCL_INSPECTOR_ENABLE"], "1");
    assert_eq!(
        env["NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"],
        "500000"
    );
    let user_uid = nix::unistd::User::from_name(TEST_USER)
        .unwrap()
        .unwrap()
        .uid
        .as_raw();
    assert_eq!(
        env["dump_folder"],
        format!("{user_uid} 700 directory"),
        "{folder}"
    );
    // Gone with the job, unless the epilog has not run yet.
    let _ = std::fs::remove_dir_all(&folder);

    let (output, tasks) = srun_env(&["-N1", "-w", "node1", "--gpudirect=tcpx"], &[]);
    assert_ok(&output, "srun --gpudirect=tcpx without asking");
    assert!(!tasks[&0].contains_key("NCCL_PROFILER_PLUGIN"));
    assert!(!tasks[&0].contains_key("NCCL_INSPECTOR_DUMP_DIR"));

    // The squatter: a held job's id is known before its tasks start.
    let dir = fresh_temp_dir("watch-squat");
    let out = dir.join("out.txt");
    let mut cmd = slurm_command("sbatch");
    cmd.args(["--parsable", "--hold", "-N1", "-w", "node1", "--gpudirect=tcpx", "-o"])
        .arg(&out)
        .arg("--wrap")
        .arg("srun -l sh -c 'echo dump=${NCCL_INSPECTOR_DUMP_DIR:-unset} plugin=${NCCL_PROFILER_PLUGIN:-unset}'")
        .env("GPUDIRECT_WATCH", "1");
    let output = run(&mut cmd);
    assert_ok(&output, "sbatch --hold");
    let held: u32 = parsable_job_id(&output);
    let squatted = format!("/tmp/gpudirect-watch-{held}");
    std::fs::create_dir(&squatted).unwrap();
    std::fs::set_permissions(&squatted, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut release = slurm_command_as(Who::Root, "scontrol");
    release.args(["release", &held.to_string()]);
    assert_ok(&run(&mut release), "scontrol release");
    let mut text = String::new();
    for _ in 0..120 {
        text = std::fs::read_to_string(&out).unwrap_or_default();
        if text.contains("dump=") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    std::fs::remove_dir_all(&squatted).unwrap();
    assert!(text.contains("dump=unset plugin=unset"), "{text}");
    assert!(text.contains("job telemetry off for this task"), "{text}");
    assert!(text.contains("belongs to uid 0"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_file(&inspector).unwrap();
}
