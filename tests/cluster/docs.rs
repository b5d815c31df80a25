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
