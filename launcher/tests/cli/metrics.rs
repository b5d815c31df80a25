//! Metrics (issue #32): `export --format openmetrics` over a history and `health
//! --textfile`, each accepted by `promtool check metrics` (Debian's `prometheus` package,
//! which .ci/run and scripts/test install) and read back against `history --json`.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::{fixture, gpudirect_without, run, scratch, stderr, stdout};

/// `promtool check metrics` on `text`: its exit code and what it said.
pub(crate) fn promtool(text: &str) -> (Option<i32>, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (apt-get install prometheus; scripts/test installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// The value of the sample `name{labels}` in `text`.
pub(crate) fn sample(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

#[test]
fn the_history_as_openmetrics_is_accepted_and_reads_back() {
    let dir = scratch("metrics", "export");
    let db = dir.path().join("history.sqlite");
    let import = |variant: &str, rel: &str| {
        let out = run(gpudirect_without(&["GPUDIRECT_DB"])
            .env("GPUDIRECT_DB", &db)
            .args(["import", "--cluster", "c1", "--variant", variant])
            .arg(fixture(rel)));
        assert!(out.status.success(), "{}", stderr(&out));
    };
    // Two quick tests of node `vm` (the second is the newest), and a validate pair.
    import("health", "h200x2-nvlink/all_reduce_g2.txt");
    import("health", "h200x2-degraded/all_reduce_g2_clean.txt");
    import(
        "validate:pairs",
        "h200x2-twohost/all_reduce_2host_socket.txt",
    );
    let out = run(gpudirect_without(&["GPUDIRECT_DB"])
        .env("GPUDIRECT_DB", &db)
        .args(["export", "--format", "openmetrics"]));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let (code, said) = promtool(&text);
    assert_eq!(code, Some(0), "promtool: {said}\n{text}");
    assert!(text.ends_with("# EOF\n"));

    // The values are the history's: the newest run of each node and tool.
    let history = run(gpudirect_without(&["GPUDIRECT_DB"])
        .env("GPUDIRECT_DB", &db)
        .args(["history", "--json"]));
    let runs: Value = serde_json::from_slice(&history.stdout).unwrap();
    let newest_health = runs
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["variant"] == "health")
        .unwrap();
    let busbw = newest_health["busbw"].as_f64().unwrap();
    let l = "{cluster=\"c1\",node=\"vm\",tool=\"health\",collective=\"all_reduce\"}";
    assert_eq!(
        sample(&text, &format!("gpudirect_node_busbw_bytes_per_second{l}")),
        Some(busbw * 1e9)
    );
    // Its baseline: the one earlier health run (343.64 GB/s at 8 GiB).
    assert_eq!(
        sample(
            &text,
            &format!("gpudirect_node_baseline_busbw_bytes_per_second{l}")
        ),
        Some(343.64e9)
    );
    for node in ["a3h-001", "a3h-002"] {
        let l = format!("{{cluster=\"c1\",node=\"{node}\",tool=\"validate\"}}");
        assert_eq!(
            sample(&text, &format!("gpudirect_node_check_ok{l}")),
            Some(1.0)
        );
    }
}

#[test]
fn health_writes_a_textfile_node_exporter_reads() {
    let dir = scratch("metrics", "textfile");
    let config = dir.path().join("gpudirect.toml");
    std::fs::write(
        &config,
        "[profiles.here]\ndata_nics = [\"lo\"]\n[profiles.here.checks]\nnics = true\n\n\
         [[node_set]]\nname = \"hx\"\nhosts = \"hx\"\nprofile = \"here\"\nskip_checks = [\"gpus\"]\n",
    )
    .unwrap();
    let textfile = dir.path().join("textfile");
    std::fs::create_dir(&textfile).unwrap();
    let out = run(gpudirect_without(&["GPUDIRECT_CONFIG"])
        .args(["health", "--node", "hx", "--config"])
        .arg(&config)
        .arg("--insecure-trust-below")
        .arg(dir.path())
        .arg("--textfile")
        .arg(&textfile));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let written = textfile.join("gpudirect_health.prom");
    let text = std::fs::read_to_string(&written).unwrap();
    let (code, said) = promtool(&text);
    assert_eq!(code, Some(0), "promtool: {said}\n{text}");
    assert_eq!(
        sample(&text, "gpudirect_health_ok{node=\"hx\",profile=\"here\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "gpudirect_health_check_ok{node=\"hx\",check=\"nics\"}"
        ),
        Some(1.0)
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&written).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644, "node_exporter reads it");
    // Nothing but the file itself is left in the folder.
    assert_eq!(std::fs::read_dir(&textfile).unwrap().count(), 1);
}

/// Security review T10: root's health wrote its textfile through a user's symlink (into a
/// root-only folder the link pointed at). Under root's rule (here the test's own, below its
/// scratch folder), a folder others can change, or a link in one, is not written.
#[test]
fn health_as_root_writes_no_textfile_into_a_folder_others_can_change() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("metrics", "textfile-unsafe");
    let config = dir.path().join("gpudirect.toml");
    std::fs::write(
        &config,
        "[profiles.here]\ndata_nics = [\"lo\"]\n[profiles.here.checks]\nnics = true\n\n\
         [[node_set]]\nname = \"hx\"\nhosts = \"hx\"\nprofile = \"here\"\nskip_checks = [\"gpus\"]\n",
    )
    .unwrap();
    let target = dir.path().join("root-only");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let link = open.join("textfile");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    for (textfile, written) in [(&link, &target), (&open, &open)] {
        let out = run(gpudirect_without(&["GPUDIRECT_CONFIG"])
            .args(["health", "--node", "hx", "--config"])
            .arg(&config)
            .arg("--insecure-trust-below")
            .arg(dir.path())
            .arg("--textfile")
            .arg(textfile));
        // The verdict stands; only the textfile is left out, and said.
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("not written") && err.contains("writable by group and others"),
            "{err}"
        );
        assert!(
            !written.join("gpudirect_health.prom").exists(),
            "written through {}",
            textfile.display()
        );
    }
}

/// `watch --textfile`: the late rank and the communicator's figures as metrics promtool
/// accepts, from the dumps recorded on the lent H200.
#[test]
fn watch_textfile_is_promtool_clean_and_names_the_late_rank() {
    let dir = scratch("metrics", "watch");
    let dumps = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/nccl-inspector/three-ranks-late2");
    let out = run(gpudirect_without(&["GPUDIRECT_DB"])
        .args(["watch", "--dumps"])
        .arg(&dumps)
        .arg("--textfile")
        .arg(dir.path()));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = std::fs::read_to_string(dir.path().join("gpudirect_watch_dumps.prom")).unwrap();
    let (code, said) = promtool(&text);
    assert_eq!(code, Some(0), "{said}\n{text}");
    let late = sample(
        &text,
        "gpudirect_watch_late_rank_seconds{job=\"dumps\",comm=\"0x31e9c1f7fb85ef\",rank=\"2\",host=\"node3\"}",
    )
    .expect(&text);
    assert!((0.04..0.06).contains(&late), "{late}");
    assert_eq!(
        sample(
            &text,
            "gpudirect_watch_findings{job=\"dumps\",comm=\"0x31e9c1f7fb85ef\"}"
        ),
        Some(1.0)
    );
}

/// Vet's runs are exported as vet's (issue #42): vet records its pairs with validate's
/// variants (`validate:pairs`, `rail:ethK`), from which export once guessed `validate`.
/// The runs are recorded here as vet's and validate's code record them (the pair from a
/// real two-host output through `record::new_run`, the rail through `rails::record_of`),
/// and the tool label is the history's `tool` column.
#[test]
fn vets_runs_are_exported_as_vets() {
    use gpudirect::checks::{judge, Expectations};
    use gpudirect::history::{History, NewRun, Tool};
    use gpudirect::record::{new_run, RunContext};
    use gpudirect::validate::rails::record_of;
    use gpudirect_wire::rails::RailMeasurement;

    let dir = scratch("metrics", "vet-tool");
    let db = dir.path().join("history.sqlite");
    let mut history = History::open(&db).unwrap();
    let raw = std::fs::read(fixture("h200x2-twohost/all_reduce_2host_socket.txt")).unwrap();
    let parsed = gpudirect::nccl_output::parse(&raw);
    let verdict = judge(&parsed, None, Some(0), &Expectations::default());
    let pair = |tool: Tool, nodes: [&str; 2]| {
        let mut run = new_run(
            &parsed,
            &raw,
            RunContext {
                cluster: Some("c1".into()),
                variant: Some("validate:pairs".into()),
                exit_code: Some(0),
                tool,
                ..RunContext::default()
            },
            &verdict,
        );
        run.nodes = nodes.iter().map(|n| n.to_string()).collect();
        run.nodelist = Some(nodes.join(","));
        run.node_count = Some(2);
        run
    };
    history
        .import_run(&pair(Tool::Vet, ["node1", "node2"]), true)
        .unwrap();
    history
        .import_run(&pair(Tool::Validate, ["node3", "node4"]), true)
        .unwrap();
    let rail = RailMeasurement {
        gpudirect_rail: 1,
        rail: "eth1".into(),
        hosts: ["node5".into(), "node6".into()],
        size_bytes: 1 << 26,
        messages: 8,
        forward_gbps: 11.9,
        backward_gbps: 12.1,
        latency_us: 9.5,
    };
    let base = NewRun {
        cluster: Some("c1".into()),
        tool: Tool::Vet,
        ..NewRun::default()
    };
    let rail_run = record_of(base, "eth1", ["node5", "node6"], Ok(&rail));
    assert_eq!(rail_run.variant.as_deref(), Some("rail:eth1"));
    history.import_run(&rail_run, true).unwrap();
    drop(history);

    let out = run(gpudirect_without(&["GPUDIRECT_DB"])
        .env("GPUDIRECT_DB", &db)
        .args(["export", "--format", "openmetrics"]));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for (node, tool) in [
        ("node1", "vet"),
        ("node2", "vet"),
        ("node3", "validate"),
        ("node4", "validate"),
        ("node5", "vet"),
        ("node6", "vet"),
    ] {
        let l = format!("{{cluster=\"c1\",node=\"{node}\",tool=\"{tool}\"}}");
        assert_eq!(
            sample(&text, &format!("gpudirect_node_check_ok{l}")),
            Some(1.0),
            "{node} as {tool}'s:\n{text}"
        );
    }
    for node in ["node1", "node2", "node5", "node6"] {
        assert!(
            !text.contains(&format!("node=\"{node}\",tool=\"validate\"")),
            "{node} is vet's only:\n{text}"
        );
    }
    let (code, said) = promtool(&text);
    assert_eq!(code, Some(0), "promtool: {said}\n{text}");

    // `history --json` shows the same column.
    let listed = run(gpudirect_without(&["GPUDIRECT_DB"])
        .env("GPUDIRECT_DB", &db)
        .args(["history", "--json"]));
    let runs: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let tools: Vec<&str> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["tool"].as_str().unwrap())
        .collect();
    assert_eq!(tools.iter().filter(|t| **t == "vet").count(), 2, "{runs}");
    assert_eq!(tools.iter().filter(|t| **t == "validate").count(), 1);
}
