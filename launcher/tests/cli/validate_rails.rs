//! `gpudirect validate --test rails` without a cluster: `srun` and `scontrol` on PATH are
//! small scripts, and the pairs start through srun (`--rails-launcher srun`: `auto` would
//! take the host's Open MPI mpirun). The fake `srun` prints the MPI program's start line and measurement line
//! for each pair (slow for every pair with `n3`); the fake `scontrol` refuses everything, as
//! it does for a user who is not a Slurm operator, so `--drain` fails.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::common::{gpudirect_without, run, scratch, stderr, stdout};

/// A pair's step: the measurement line `gpudirect-mpi pair` prints, 10 GB/s each way, or
/// 0.1 GB/s when one of the pair is `n3`.
const SRUN: &str = r#"#!/bin/sh
for arg in "$@"; do
  case "$arg" in
    --nodelist=*) pair=${arg#--nodelist=} ;;
  esac
done
first=${pair%,*}
second=${pair#*,}
gbps=10.0
case ",$pair," in
  *,n3,*) gbps=0.1 ;;
esac
echo "gpudirect-mpi: MPI started"
echo "{\"gpudirect_rail\":1,\"rail\":\"eth1\",\"hosts\":[\"$first\",\"$second\"],\"size_bytes\":16777216,\"messages\":8,\"forward_gbps\":$gbps,\"backward_gbps\":$gbps,\"latency_us\":5.0}"
"#;

/// `scontrol` of a user who may not drain: every call fails.
const SCONTROL: &str =
    "#!/bin/sh\necho 'scontrol: error: Invalid user for SlurmUser' >&2\nexit 1\n";

fn script(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a fake Slurm command");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .expect("make it executable");
}

#[test]
fn a_failed_rails_drain_prints_and_exits_2() {
    let dir = scratch("validate-rails", "failed-drain");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("create bin");
    script(&bin, "srun", SRUN);
    script(&bin, "scontrol", SCONTROL);
    // The MPI program is never started (srun is fake), but it must exist.
    let program = bin.join("gpudirect-mpi");
    script(&bin, "gpudirect-mpi", "#!/bin/sh\nexit 0\n");

    let mut cmd = gpudirect_without(&["SLURM_JOB_ID", "SLURM_CLUSTER_NAME", "GPUDIRECT_CLUSTER"]);
    cmd.env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("SLURM_JOB_NODELIST", "n[1-6]")
        .env("GPUDIRECT_DB", dir.path().join("history.sqlite"))
        .args(["validate", "--test", "rails", "--rails", "eth1", "--drain"])
        .args(["--rails-launcher", "srun"])
        .arg("--mpi-program")
        .arg(&program);
    let out = run(&mut cmd);
    let text = stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a drain that did not work is exit 2:\n{text}\n{}",
        stderr(&out)
    );
    let verdict = text
        .lines()
        .find(|l| l.starts_with("verdict:"))
        .unwrap_or_else(|| panic!("no verdict line in:\n{text}"));
    assert!(
        verdict.starts_with(
            "verdict: Degraded (exit 2: a drain, a resume or --on-drain did not work)"
        ),
        "the verdict line names the code the command exits with: {verdict}"
    );
    assert!(text.contains("n3"), "the slow node is named:\n{text}");
}

/// `scontrol` of an operator: `show node` says IDLE, or DRAIN with its reason once
/// `update ... state=drain` wrote one (kept in a file beside the script).
const SCONTROL_OPERATOR: &str = r#"#!/bin/sh
dir=$(dirname "$0")
case "$1" in
  show)
    node=$3
    if [ -f "$dir/drained-$node" ]; then
      echo "NodeName=$node State=IDLE+DRAIN Reason=$(cat "$dir/drained-$node")"
    else
      echo "NodeName=$node State=IDLE"
    fi ;;
  update)
    node=${2#nodename=}
    for arg in "$@"; do
      case "$arg" in reason=*) echo "${arg#reason=}" > "$dir/drained-$node" ;; esac
    done ;;
esac
"#;

/// The evidence file of a rails drain names the cluster as every record does: `--cluster`,
/// else `$SLURM_CLUSTER_NAME` (docs/cli.md, "A recorded run").
#[test]
fn a_rails_drain_hands_on_drain_the_evidence_with_the_jobs_cluster() {
    let dir = scratch("validate-rails", "evidence");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("create bin");
    script(&bin, "srun", SRUN);
    script(&bin, "scontrol", SCONTROL_OPERATOR);
    let program = bin.join("gpudirect-mpi");
    script(&bin, "gpudirect-mpi", "#!/bin/sh\nexit 0\n");
    let kept = dir.path().join("evidence.json");
    script(
        &bin,
        "keep-evidence",
        &format!("#!/bin/sh\ncp \"$1\" '{}'\n", kept.display()),
    );

    let mut cmd = gpudirect_without(&["SLURM_JOB_ID", "GPUDIRECT_CLUSTER"]);
    cmd.env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("SLURM_JOB_NODELIST", "n[1-6]")
        .env("SLURM_CLUSTER_NAME", "c7")
        .env("GPUDIRECT_DB", dir.path().join("history.sqlite"))
        .args(["validate", "--test", "rails", "--rails", "eth1", "--drain"])
        .args(["--rails-launcher", "srun"])
        .arg("--on-drain")
        .arg(bin.join("keep-evidence"))
        .arg("--mpi-program")
        .arg(&program);
    let out = run(&mut cmd);
    assert_eq!(
        out.status.code(),
        Some(1),
        "degraded, the drain done:\n{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    let text = std::fs::read_to_string(&kept).expect("--on-drain kept the evidence");
    let evidence: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(evidence["node"], "n3", "{evidence}");
    assert_eq!(evidence["cluster"], "c7", "{evidence}");
    assert_eq!(evidence["tool"], "gpudirect validate", "{evidence}");
}

/// The fake `srun` of issue #45's two faults: the agent step (`gpudirect agent rail-states`)
/// answers for n1-n4 with n2's eth1 down; a pair step measures 10 GB/s, 0.1 GB/s on eth2
/// with n4, and logs its rail and pair to `pairs.log` beside the script. A pair on eth1
/// with n2 fails as the MPI program would (exit 6).
const SRUN_NIC_DOWN: &str = r#"#!/bin/sh
dir=$(dirname "$0")
rail=
prev=
for arg in "$@"; do
  case "$arg" in
    --nodelist=*) pair=${arg#--nodelist=} ;;
    rail-states) agent=1 ;;
  esac
  [ "$prev" = "--rail" ] && rail=$arg
  prev=$arg
done
if [ -n "$agent" ]; then
  for n in 1 2 3 4; do
    down='{}'
    [ $n = 2 ] && down='{"eth1":"eth1 is down (operstate down)"}'
    echo "$((n-1)): {\"gpudirect_rail_states\":1,\"node\":\"n$n\",\"down\":$down}"
  done
  exit 0
fi
echo "$rail $pair" >> "$dir/pairs.log"
case "$rail,$pair," in
  eth1,*n2,*) echo "eth1 is down (operstate down)" >&2; exit 6 ;;
esac
first=${pair%,*}
second=${pair#*,}
gbps=10.0
case "$rail,$pair," in
  eth2,*n4,*) gbps=0.1 ;;
esac
echo "gpudirect-mpi: MPI started"
echo "{\"gpudirect_rail\":1,\"rail\":\"$rail\",\"hosts\":[\"$first\",\"$second\"],\"size_bytes\":16777216,\"messages\":8,\"forward_gbps\":$gbps,\"backward_gbps\":$gbps,\"latency_us\":5.0}"
"#;

/// Issue #45: a NIC the nodes report down before any traffic is named `down` on its node,
/// never paired on its rail, and its node's other rail stays healthy; the slow NIC on the
/// other rail is named too, and nothing else.
#[test]
fn a_nic_down_is_named_down_and_left_out_of_its_rails_pairs() {
    let dir = scratch("validate-rails", "nic-down");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("create bin");
    script(&bin, "srun", SRUN_NIC_DOWN);
    script(&bin, "scontrol", SCONTROL);
    let program = bin.join("gpudirect-mpi");
    script(&bin, "gpudirect-mpi", "#!/bin/sh\nexit 0\n");

    let mut cmd = gpudirect_without(&["SLURM_JOB_ID", "SLURM_CLUSTER_NAME", "GPUDIRECT_CLUSTER"]);
    cmd.env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("SLURM_JOB_NODELIST", "n[1-4]")
        .env("GPUDIRECT_DB", dir.path().join("history.sqlite"))
        .args(["validate", "--test", "rails", "--rails", "eth1,eth2"])
        .args(["--rails-launcher", "srun"])
        .args(["--floor", "1", "--json"])
        .arg("--mpi-program")
        .arg(&program);
    let out = run(&mut cmd);
    let text = stdout(&out);
    let report: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}:\n{text}\n{}", stderr(&out)));
    let bad: Vec<(String, String, String)> = report["units"]
        .as_array()
        .expect("units")
        .iter()
        .filter(|u| u["verdict"]["kind"] != "healthy")
        .map(|u| {
            (
                u["node"].as_str().unwrap_or_default().to_string(),
                u["rail"].as_str().unwrap_or_default().to_string(),
                u["verdict"]["kind"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(
        bad,
        [
            ("n2".to_string(), "eth1".to_string(), "down".to_string()),
            (
                "n4".to_string(),
                "eth2".to_string(),
                "slow_node".to_string()
            ),
        ],
        "exactly the two faults:\n{text}\n{}",
        stderr(&out)
    );
    assert_eq!(report["health"], "failed", "{text}");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let pairs = std::fs::read_to_string(bin.join("pairs.log")).expect("pairs ran");
    assert!(
        !pairs
            .lines()
            .any(|l| l.starts_with("eth1 ") && l.contains("n2")),
        "n2 was paired on eth1, whose NIC is down:\n{pairs}"
    );
    assert!(
        pairs
            .lines()
            .any(|l| l.starts_with("eth2 ") && l.contains("n2")),
        "n2's eth2 is still measured:\n{pairs}"
    );
    assert!(
        stderr(&out).contains("n2 eth1: eth1 is down (operstate down): named down"),
        "{}",
        stderr(&out)
    );
}
