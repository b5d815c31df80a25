//! Every command in the guides' `console` blocks runs on the local cluster, so the docs
//! cannot rot. A block marked `console,fails` must exit non-zero; others must succeed.

use std::path::Path;

use cluster_tests::*;

/// Where the reader is in a markdown file.
enum Fence {
    Outside,
    /// Inside a `console` block; `true` when marked `console,fails`.
    Console(bool),
    /// Inside another fenced block (not run).
    Other,
}

/// (file, line, command, must_fail) for every `$ ` line of a console block.
fn commands(file: &str, text: &str) -> Vec<(String, usize, String, bool)> {
    let mut out = Vec::new();
    let mut fence = Fence::Outside;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match (&fence, trimmed.strip_prefix("```")) {
            (Fence::Outside, Some(info)) if info.starts_with("console") => {
                fence = Fence::Console(info.contains("fails"))
            }
            (Fence::Outside, Some(_)) => fence = Fence::Other,
            (_, Some(_)) => fence = Fence::Outside,
            (Fence::Console(fails), None) => {
                if let Some(cmd) = trimmed.strip_prefix("$ ") {
                    out.push((file.to_string(), i + 1, cmd.to_string(), *fails));
                }
            }
            (_, None) => {}
        }
    }
    out
}

#[test]
fn every_command_in_the_guides_runs() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let bin_dir = workspace_bin("gpudirect").parent().unwrap().to_path_buf();
    // `gpudirect vet --test rails` finds gpudirect-mpi beside gpudirect.
    workspace_bin("gpudirect-mpi");
    let standin = standin_dir("docs");
    let work = fresh_temp_dir("docs");
    // The user guide's `gpudirect log` reads two job outputs: the torch job recorded on the
    // lent GPU host under `srun --gpudirect=socket-bed` (docs/results/gpu-box/call8/),
    // with the profile's NIC (4243) and with the user's own NCCL_SOCKET_IFNAME=eth0 (4242).
    let logs = repo.join("tests/fixtures/nccl-logs/lent-host");
    for (name, file) in [
        ("slurm-4243.out", "torch-srun-gpudirect-socket-bed.txt"),
        (
            "slurm-4242.out",
            "torch-srun-gpudirect-socket-bed-user-eth0.txt",
        ),
    ] {
        std::fs::copy(logs.join(file), work.join(name)).expect("copy a job's log");
    }
    let mut all = Vec::new();
    for file in ["user-guide.md", "admin-guide.md", "troubleshooting.md"] {
        let text = std::fs::read_to_string(repo.join("docs").join(file)).expect("read a guide");
        all.extend(commands(file, &text));
    }
    assert!(
        all.len() >= 15,
        "the guides have their commands: {}",
        all.len()
    );
    let mut failures = Vec::new();
    for (file, line, command, must_fail) in &all {
        let mut cmd = slurm_command("bash");
        cmd.arg("-c")
            .arg(command)
            .current_dir(&work)
            .env(
                "PATH",
                format!(
                    "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    bin_dir.display()
                ),
            )
            .env("GPUDIRECT_CONFIG", plugin_config())
            .env("GPUDIRECT_DB", work.join("history.sqlite"))
            .env("NCCL_TESTS_DIR", &standin);
        let output = run(&mut cmd);
        if output.status.success() == *must_fail {
            failures.push(format!(
                "docs/{file}:{line}: `{command}` {} ({}):\n{}\n{}",
                if *must_fail {
                    "should fail but succeeded"
                } else {
                    "failed"
                },
                output.status,
                stdout(&output),
                stderr(&output)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    std::fs::remove_dir_all(&work).unwrap();
}

#[test]
fn the_console_block_reader_finds_commands_and_their_expectation() {
    let text =
        "x\n```console\n$ a b\nout\n```\n```console,fails\n$ c\n```\n```sh\n$ not-run\n```\n";
    let got = commands("f.md", text);
    assert_eq!(
        got,
        [
            ("f.md".to_string(), 3, "a b".to_string(), false),
            ("f.md".to_string(), 7, "c".to_string(), true)
        ]
    );
}

/// The marker the newcomer script prints after each command: `@@newcomer INDEX STATUS`.
const MARK: &str = "@@newcomer";

/// Issue #33, the newcomer's path: `scripts/demo` as the README prints it, then every
/// command of the `console` blocks of README.md and docs/local-cluster.md, in one shell, one
/// after another as a reader types them (so `eval "$(scripts/local-cluster env)"` carries
/// over to the commands after it), from the checkout, with no variable of ours set
/// beforehand: no SLURM_CONF, no GPUDIRECT_CONFIG, no gpudirect on PATH. As root, because
/// the README's path is root's (it starts the cluster); every other cluster test runs its
/// jobs as the test user. The history goes to a fresh XDG_DATA_HOME.
#[test]
fn the_newcomers_commands_run_as_printed_after_the_demo() {
    let _guard = cluster();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the checkout");
    let data = fresh_temp_dir("newcomer");
    // The runner's PATH (cargo for the demo's build) without this checkout's target folder.
    let path: Vec<String> = std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .filter(|d| !d.contains("/target/"))
        .map(str::to_string)
        .collect();
    let newcomer = |program: &str| {
        let mut cmd = std::process::Command::new("timeout");
        cmd.arg("600").arg(program).current_dir(&repo).env_clear();
        for var in [
            "HOME",
            "USER",
            "LANG",
            "CARGO_HOME",
            "RUSTUP_HOME",
            "RUSTUP_TOOLCHAIN",
        ] {
            if let Some(v) = std::env::var_os(var) {
                cmd.env(var, v);
            }
        }
        cmd.env("PATH", path.join(":")).env("XDG_DATA_HOME", &data);
        cmd
    };
    let demo = run(newcomer("scripts/demo").env("TERM", "dumb"));
    assert_ok(&demo, "scripts/demo");

    let mut all = Vec::new();
    for file in ["README.md", "docs/local-cluster.md"] {
        let text = std::fs::read_to_string(repo.join(file)).expect("read the docs");
        all.extend(commands(file, &text));
    }
    assert!(
        all.iter()
            .any(|(_, _, c, _)| c.contains("local-cluster env")),
        "the newcomer's commands are in README.md: {all:?}"
    );
    let mut script = String::new();
    for (i, (_, _, command, _)) in all.iter().enumerate() {
        script.push_str(&format!("{command}\necho \"{MARK} {i} $?\"\n"));
    }
    let output = run(newcomer("bash").arg("-c").arg(&script));
    let text = format!("{}{}", stdout(&output), stderr(&output));
    let mut failures = Vec::new();
    let mut since = 0;
    let lines: Vec<&str> = text.lines().collect();
    for (i, (file, line, command, must_fail)) in all.iter().enumerate() {
        let found = lines
            .iter()
            .position(|l| l.starts_with(&format!("{MARK} {i} ")));
        let Some(at) = found else {
            failures.push(format!(
                "{file}:{line}: `{command}` did not end (no marker)"
            ));
            continue;
        };
        let status: i32 = lines[at].rsplit(' ').next().unwrap().parse().unwrap();
        if (status == 0) == *must_fail {
            failures.push(format!(
                "{file}:{line}: `{command}` exited {status}:\n{}",
                lines[since.min(at)..at].join("\n")
            ));
        }
        since = at + 1;
    }
    assert!(
        failures.is_empty(),
        "{}\n--- the whole session:\n{text}",
        failures.join("\n")
    );
    // Issue #42: the README's first `gpudirect history` lists the demo's runs (the demo
    // once recorded into a temporary history, and this said there was none).
    let first = all
        .iter()
        .position(|(_, _, c, _)| c == "gpudirect history")
        .expect("README.md's `gpudirect history` after the demo");
    let output_of = |i: usize| {
        let end = |i: usize| {
            lines
                .iter()
                .position(|l| l.starts_with(&format!("{MARK} {i} ")))
                .unwrap()
        };
        let start = if i == 0 { 0 } else { end(i - 1) + 1 };
        lines[start..end(i)].join("\n")
    };
    let listed = output_of(first);
    // Every run the demo recorded is the local cluster's (ClusterName=gdlocal).
    assert!(
        listed.contains("gdlocal") && listed.contains("ID "),
        "the demo's runs: {listed}"
    );
    std::fs::remove_dir_all(&data).unwrap();
}
