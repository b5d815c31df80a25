//! What one task of a step sees, as one JSON line ([`TaskReport`]): its NCCL variables and
//! where each comes from, its CPUs, the node's GPUs and NICs, and where it differs from the
//! profile. [`TaskReport::collect`] runs inside every task, in `gpudirect agent probe`
//! (srun) or in `gpudirect-mpi facts` (gathered over MPI); `gpudirect probe` reads the
//! lines back and compares the tasks (`gpudirect::probe::analyse`).

use std::collections::{BTreeMap, BTreeSet};

use gpudirect_core::config::Config;
use gpudirect_core::resolve::{plan_node, plan_task, resolve_profile, vars, StepFacts, TaskFacts};
use gpudirect_core::system::{current_affinity, SystemProbe};

use crate::provenance::{
    conf_files, in_container, is_reported, provenance, Provenance, TaskVariables,
};
use serde::{Deserialize, Serialize};

/// The key that marks a probe line among other output.
pub const LINE_KEY: &str = "gpudirect_probe";

/// One NIC as sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicInfo {
    /// Interface name.
    pub name: String,
    /// `operstate`.
    pub state: String,
    /// Link speed in Mb/s, when the driver reports one.
    pub speed_mbps: Option<i64>,
    /// MTU.
    pub mtu: Option<u32>,
}

/// A difference between what the profile gives this task and what it has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mismatch {
    /// The variable, or `cpus`.
    pub name: String,
    /// What the profile gives.
    pub expected: Option<String>,
    /// What the task has.
    pub actual: Option<String>,
    /// Whether the user's own value explains it (kept on purpose, not an error).
    pub user_kept: bool,
}

/// What one task sees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskReport {
    /// Always 1: marks the line.
    pub gpudirect_probe: u32,
    /// The Slurm node name.
    pub node: String,
    /// Global rank.
    pub rank: u32,
    /// Rank on the node.
    pub local_rank: u32,
    /// NCCL_*, FI_*, GPUDIRECT_*, LD_LIBRARY_PATH, CUDA_VISIBLE_DEVICES.
    pub vars: BTreeMap<String, String>,
    /// The task's CPU affinity.
    pub cpus: String,
    /// NVIDIA GPUs the node has (PCI addresses under /proc/driver/nvidia/gpus).
    pub gpus: Vec<String>,
    /// The node's NICs (loopback left out).
    pub nics: Vec<NicInfo>,
    /// The profile's checks that fail here (library files, RxDM socket dir, NICs).
    pub check_failures: Vec<String>,
    /// Where the task differs from the profile.
    pub mismatches: Vec<Mismatch>,
    /// Every NCCL_*/FI_* variable in effect (the environment's and NCCL's config files')
    /// and where it comes from (absent in reports of older versions).
    #[serde(default)]
    pub provenance: Vec<Provenance>,
    /// NCCL config files that exist but could not be read, and why.
    #[serde(default)]
    pub conf_notes: Vec<String>,
}

fn interesting(name: &str) -> bool {
    name.starts_with("NCCL_")
        || name.starts_with("FI_")
        || name.starts_with("GPUDIRECT_")
        || name == "LD_LIBRARY_PATH"
        || name == "CUDA_VISIBLE_DEVICES"
}

/// The environment, a value that is not UTF-8 made readable instead of a panic (std's
/// `vars` panics on one, and a container image may well have one).
fn lossy_vars() -> impl Iterator<Item = (String, String)> {
    std::env::vars_os().map(|(k, v)| {
        (
            k.to_string_lossy().into_owned(),
            v.to_string_lossy().into_owned(),
        )
    })
}

fn read_trim(path: &std::path::Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn nics() -> Vec<NicInfo> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/sys/class/net") else {
        return out;
    };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "lo" {
            continue;
        }
        let path = entry.path();
        out.push(NicInfo {
            state: read_trim(&path.join("operstate")).unwrap_or_default(),
            // Virtual NICs answer "Invalid argument" or -1: no speed.
            speed_mbps: read_trim(&path.join("speed"))
                .and_then(|s| s.parse().ok())
                .filter(|&s: &i64| s > 0),
            mtu: read_trim(&path.join("mtu")).and_then(|s| s.parse().ok()),
            name,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn gpus() -> Vec<String> {
    gpudirect_core::derive::driver_gpus(std::path::Path::new("/proc/driver/nvidia/gpus"))
        .unwrap_or_default()
}

impl TaskReport {
    /// Collects this task's view. `config` and `mode` (what was asked for) give the
    /// expected environment; without them only what is seen is reported.
    pub fn collect(config: Option<&Config>, mode: Option<&str>) -> TaskReport {
        let (mut report, planned) = Self::collect_against_plan(config, mode);
        report.add_provenance(config, planned);
        report
    }

    /// Where each NCCL variable of this task comes from, with NCCL's config files read as
    /// NCCL will read them in this process.
    fn add_provenance(&mut self, config: Option<&Config>, planned: BTreeMap<String, String>) {
        let env = |name: &str| std::env::var(name).ok();
        let home = nix::unistd::User::from_uid(nix::unistd::getuid())
            .ok()
            .flatten()
            .map(|u| u.dir);
        let (files, notes) = conf_files(
            env("NCCL_CONF_FILE").as_deref(),
            home.as_deref(),
            std::path::Path::new("/etc/nccl.conf"),
        );
        let profile_name = env(vars::PROFILE);
        let profile = profile_name.as_ref().and_then(|p| config?.profiles.get(p));
        let task = TaskVariables {
            env: lossy_vars().filter(|(k, _)| is_reported(k)).collect(),
            set_by_plugin: env(vars::SET)
                .map(|s| s.split(',').map(str::to_string).collect())
                .unwrap_or_default(),
            profile: profile_name,
            profile_sets: profile
                .map(|p| p.env.iter().map(|v| v.name.clone()).collect())
                .unwrap_or_default(),
            profile_forces: profile
                .map(|p| {
                    p.env
                        .iter()
                        .filter(|v| v.forced)
                        .map(|v| v.name.clone())
                        .collect()
                })
                .unwrap_or_default(),
            planned,
            in_container: in_container(&env),
        };
        self.provenance = provenance(&task, &files);
        self.conf_notes = notes;
    }

    /// The task's view and, when the profile is known, the values its plan gives.
    fn collect_against_plan(
        config: Option<&Config>,
        mode: Option<&str>,
    ) -> (TaskReport, BTreeMap<String, String>) {
        let env = |name: &str| std::env::var(name).ok();
        let node = env("SLURMD_NODENAME")
            .or_else(|| read_trim(std::path::Path::new("/proc/sys/kernel/hostname")))
            .unwrap_or_default();
        let number = |name: &str| env(name).and_then(|v| v.parse().ok()).unwrap_or(0);
        let vars: BTreeMap<String, String> = lossy_vars().filter(|(k, _)| interesting(k)).collect();
        let affinity = current_affinity();
        let mut report = TaskReport {
            gpudirect_probe: 1,
            node: node.clone(),
            rank: number("SLURM_PROCID"),
            local_rank: number("SLURM_LOCALID"),
            vars,
            cpus: affinity
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            gpus: gpus(),
            nics: nics(),
            check_failures: Vec::new(),
            mismatches: Vec::new(),
            provenance: Vec::new(),
            conf_notes: Vec::new(),
        };
        let (Some(config), Some(mode)) = (config, mode) else {
            return (report, BTreeMap::new());
        };
        let Ok(mode) = config.parse_mode(mode) else {
            return (report, BTreeMap::new());
        };
        let Ok(Some(resolved)) = resolve_profile(config, &node, &mode) else {
            return (report, BTreeMap::new());
        };
        let step = StepFacts {
            job_id: number("SLURM_JOB_ID"),
            step_id: number("SLURM_STEP_ID"),
            node,
            nnodes: number("SLURM_STEP_NUM_NODES"),
            local_size: env("SLURM_STEP_TASKS_PER_NODE")
                .and_then(|v| v.split(['(', ',']).next().and_then(|n| n.parse().ok()))
                .unwrap_or(1),
        };
        let node_plan = plan_node(resolved, step, &SystemProbe::default());
        report.check_failures = node_plan.failures.iter().map(ToString::to_string).collect();
        let facts = TaskFacts {
            rank: report.rank,
            local_rank: report.local_rank,
            cuda_visible_devices: env("CUDA_VISIBLE_DEVICES"),
            step_gpus: env("SLURM_STEP_GPUS").or_else(|| env("SLURM_JOB_GPUS")),
            allowed_cpus: affinity,
        };
        // Plan as if the task had nothing: every profile variable is expected.
        let plan = plan_task(&node_plan, &facts, &|_| None);
        report.mismatches = compare_to_plan(
            &report.vars,
            &plan.set,
            plan.cpus.as_ref().map(ToString::to_string),
            &report.cpus,
        );
        let planned = plan.set.iter().cloned().collect();
        (report, planned)
    }
}

/// Compares a task's variables and CPUs with the plan's. Variables the plugin did not set
/// (absent from `GPUDIRECT_SET`) but the task has are the user's, kept on purpose.
pub fn compare_to_plan(
    actual: &BTreeMap<String, String>,
    planned: &[(String, String)],
    planned_cpus: Option<String>,
    actual_cpus: &str,
) -> Vec<Mismatch> {
    let set_by_plugin: BTreeSet<&str> = actual
        .get(vars::SET)
        .map(|s| s.split(',').collect())
        .unwrap_or_default();
    let mut out = Vec::new();
    for (name, expected) in planned {
        // Bookkeeping variables depend on what the task had; LD_LIBRARY_PATH is checked
        // for the prefix only.
        if name == vars::SET || name == vars::SKIPPED_CHECKS {
            continue;
        }
        let have = actual.get(name);
        let matches = match (name.as_str(), have) {
            ("LD_LIBRARY_PATH", Some(v)) => {
                expected.split(':').all(|d| v.split(':').any(|x| x == d))
            }
            (_, Some(v)) => v == expected,
            (_, None) => false,
        };
        if !matches {
            out.push(Mismatch {
                name: name.clone(),
                expected: Some(expected.clone()),
                actual: have.cloned(),
                user_kept: have.is_some()
                    && !set_by_plugin.contains(name.as_str())
                    && actual.contains_key(vars::PROFILE),
            });
        }
    }
    if let Some(cpus) = planned_cpus {
        if cpus != actual_cpus {
            out.push(Mismatch {
                name: "cpus".into(),
                expected: Some(cpus),
                actual: Some(actual_cpus.to_string()),
                user_kept: false,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_comparison_finds_missing_wrong_and_user_values() {
        let planned = vec![
            ("NCCL_NET".to_string(), "GPUDirectTCPX_v7".to_string()),
            ("NCCL_ALGO".to_string(), "Ring".to_string()),
            ("NCCL_PROTO".to_string(), "Simple".to_string()),
            (
                "LD_LIBRARY_PATH".to_string(),
                "/var/lib/tcpx/lib64".to_string(),
            ),
            ("GPUDIRECT_SET".to_string(), "x".to_string()),
        ];
        let actual: BTreeMap<String, String> = [
            ("NCCL_ALGO", "Tree"),
            ("NCCL_PROTO", "LL"),
            ("LD_LIBRARY_PATH", "/usr/lib:/var/lib/tcpx/lib64"),
            ("GPUDIRECT_PROFILE", "tcpx"),
            ("GPUDIRECT_SET", "NCCL_PROTO"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let m = compare_to_plan(&actual, &planned, Some("0-1".into()), "0-7");
        let names: Vec<(&str, bool)> = m.iter().map(|m| (m.name.as_str(), m.user_kept)).collect();
        assert_eq!(
            names,
            [
                ("NCCL_NET", false),
                ("NCCL_ALGO", true),
                ("NCCL_PROTO", false),
                ("cpus", false)
            ]
        );
    }
}
