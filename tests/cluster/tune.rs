//! `gpudirect tune` inside a real allocation (issue #19): every run is an srun step with
//! `--gpudirect=tcpx`, run by the test user, so the plugin in slurmstepd applies the
//! profile and the knobs go on top of it; the overlay tune writes, appended to the
//! plugin's config, is applied by the plugin as a profile of its own. The nccl-tests
//! binary is the stand-in, cycling the recorded 2xH200 rounds (`h200x2-tuning/`).

use cluster_tests::*;

#[test]
fn tune_tries_knobs_on_top_of_the_profile_and_the_plugin_applies_its_overlay() {
    let _guard = cluster();
    let (standin, db) = standin_and_db("tune");
    let turns = fresh_temp_dir("tune-turns");
    let out_dir = fresh_temp_dir("tune-out");
    let overlay = out_dir.join("tcpx-tuned.toml");
    let standin = standin.to_str().expect("UTF-8 temp path");
    let overlay_arg = overlay.to_str().expect("UTF-8 temp path");
    let output = gpudirect_in_allocation_with(
        &["-N1", "-w", "node1"],
        &db,
        &[
            "tune",
            "--gpudirect",
            "tcpx",
            "-G",
            "2",
            "--gpus-per-process",
            "2",
            "--mpi",
            "none",
            "-b",
            "1M",
            "-e",
            "4G",
            "-f",
            "4",
            // The tcpx profile sets NCCL_BUFFSIZE=4194304 (the default, not tried again)
            // and forces the RxDM prefix (not tuned at all).
            "--knob",
            "NCCL_MIN_NCHANNELS=32",
            "--knob",
            "NCCL_BUFFSIZE=4194304,8388608",
            "--knob",
            "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX=/tmp/x",
            "--tune-id",
            "cluster1",
            "--write",
            overlay_arg,
            "--nccl-tests-dir",
            standin,
            "--",
            "-c",
            "1",
            "-n",
            "20",
            "-w",
            "5",
        ],
        &[(
            "STANDIN_CYCLE_DIR",
            turns.to_str().expect("UTF-8 temp path"),
        )],
    );
    let out = stdout(&output);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{out}\n{err}");
    assert!(
        err.contains("NCCL_BUFFSIZE=4194304 is the default here (set by the profile)"),
        "{err}"
    );
    assert!(
        err.contains("NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX is forced to"),
        "{err}"
    );
    assert!(
        err.contains("gpudirect tune: Open MPI's own TCP traffic kept on the control NIC eth0"),
        "{err}"
    );
    // 3 settings x 3 rounds, each an srun step on node1 recorded as the user ran it.
    let history = gpudirect::history::History::open_existing(&db).expect("history written");
    let runs = history
        .list_runs(&gpudirect::history::RunFilter {
            label: Some("cluster1".into()),
            ..Default::default()
        })
        .expect("list runs");
    assert_eq!(runs.len(), 9, "{out}");
    for run in &runs {
        assert_eq!(run.launcher, gpudirect::history::LaunchKind::Srun);
        assert_eq!(run.nodelist.as_deref(), Some("node1"));
        let detail = history.get_run(run.id).expect("detail");
        assert_eq!(
            detail
                .provenance
                .env
                .get("GPUDIRECT_MODE")
                .map(String::as_str),
            Some("tcpx")
        );
        // Issue #45: the launch's own Open MPI traffic on tcpx's control NIC, as validate's.
        for pinned in ["OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_oob_tcp_if_include"] {
            assert_eq!(
                detail.provenance.env.get(pinned).map(String::as_str),
                Some("eth0"),
                "{pinned}: {:?}",
                detail.provenance.env
            );
        }
        assert!(
            detail
                .provenance
                .command_line
                .as_deref()
                .is_some_and(|c| c.contains("--gpudirect=tcpx")),
            "{detail:?}"
        );
    }
    assert!(
        out.contains("size-independent winner: NCCL_MIN_NCHANNELS=32"),
        "{out}"
    );

    // The overlay extends tcpx; appended to the plugin's config it is accepted, and the
    // plugin gives a step everything of tcpx plus the tuned variable.
    let text = std::fs::read_to_string(&overlay).expect("the overlay");
    assert!(text.contains("extends = \"tcpx\""), "{text}");
    let check = run(std::process::Command::new(workspace_bin("gpudirect"))
        .args(["profiles", "check", "--config"])
        .arg(plugin_config())
        .arg("--overlay")
        .arg(&overlay));
    assert_ok(&check, "gpudirect profiles check --overlay");
    let config = FileSwap::config();
    config.write(&format!("{}\n{text}", config.original_text()));
    let (srun, tasks) = srun_env(&["-N1", "-w", "node1", "--gpudirect=tcpx-tuned"], &[]);
    assert_ok(&srun, "srun --gpudirect=tcpx-tuned env");
    let (_, base) = srun_env(&["-N1", "-w", "node1", "--gpudirect=tcpx"], &[]);
    let tuned = &tasks[&0];
    let base = &base[&0];
    assert_eq!(
        tuned.get("NCCL_MIN_NCHANNELS").map(String::as_str),
        Some("32")
    );
    assert_eq!(base.get("NCCL_MIN_NCHANNELS"), None);
    for inherited in [
        "NCCL_ALGO",
        "NCCL_BUFFSIZE",
        "NCCL_SOCKET_IFNAME",
        "LD_LIBRARY_PATH",
    ] {
        assert_eq!(
            tuned.get(inherited),
            base.get(inherited),
            "{inherited} as tcpx gives it"
        );
    }
    assert!(
        base.contains_key("NCCL_ALGO"),
        "tcpx sets NCCL_ALGO: {base:?}"
    );
}
