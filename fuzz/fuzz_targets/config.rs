//! The admin config (`/etc/slurm/gpudirect.toml`): parse and check, then plan every profile.
//!
//! Invariants:
//! - `parse_config(text, "fuzz.toml")` never panics; an error's message is one line that
//!   names the file (`fuzz.toml[:line]: ...`), with a line inside the text;
//! - on success, every profile resolves on a node with no node set and on a host of every
//!   node set; `plan_node` with a probe that says everything exists reports no failed
//!   check, with one where nothing exists every required check that is not skipped fails,
//!   and the failure summary (shown to the user) is one line without control characters;
//!   `auto`'s errors and the mode's source are one line too; `plan_task` expands every template for a few task shapes without panicking and
//!   always sets `GPUDIRECT_PROFILE` to the profile's name and `GPUDIRECT_SET` last;
//! - `auto` on a node set host resolves to that set's profile.
#![no_main]

use gpudirect_core::config::{parse_config, Config, Mode};
use gpudirect_core::cpulist::CpuList;
use gpudirect_core::hostlist::expand_with_limit;
use gpudirect_core::resolve::{
    choose_mode, plan_node, plan_task, resolve_profile, vars, NodeProbe, StepFacts, TaskFacts,
};
use libfuzzer_sys::fuzz_target;

/// A node where every NIC is up and every file and directory exists.
struct EverythingExists;

/// A node where NICs are down or missing and no file or directory exists: every check
/// the profile requires fails.
struct NothingExists;

impl NodeProbe for NothingExists {
    fn nic_up(&self, name: &str) -> Option<bool> {
        // Some NICs down, others missing, so both messages are built.
        name.len().is_multiple_of(2).then_some(false)
    }
    fn file_exists(&self, _path: &str) -> bool {
        false
    }
    fn file_readable(&self, _path: &str) -> bool {
        false
    }
    fn dir_exists(&self, _path: &str) -> bool {
        false
    }
}

/// A task's environment, as `plan_task` reads it.
type TaskEnv = dyn Fn(&str) -> Option<String>;

impl NodeProbe for EverythingExists {
    fn nic_up(&self, _name: &str) -> Option<bool> {
        Some(true)
    }
    fn file_exists(&self, _path: &str) -> bool {
        true
    }
    fn file_readable(&self, _path: &str) -> bool {
        true
    }
    fn dir_exists(&self, _path: &str) -> bool {
        true
    }
}

fn tasks() -> Vec<TaskFacts> {
    vec![
        TaskFacts::default(),
        TaskFacts {
            rank: 9,
            local_rank: 1,
            cuda_visible_devices: Some("3".into()),
            step_gpus: None,
            allowed_cpus: Some(CpuList::from_ids(0..64)),
        },
        TaskFacts {
            rank: 7,
            local_rank: 7,
            cuda_visible_devices: Some("GPU-5b3e,MIG-1,2".into()),
            step_gpus: None,
            allowed_cpus: Some(CpuList::default()),
        },
        TaskFacts {
            rank: u32::MAX,
            local_rank: u32::MAX,
            cuda_visible_devices: Some("18446744073709551616".into()),
            step_gpus: None,
            allowed_cpus: None,
        },
    ]
}

fn plan_everything(config: &Config, node: &str, mode: &Mode) {
    let resolved = match resolve_profile(config, node, mode) {
        Ok(Some(resolved)) => resolved,
        Ok(None) => {
            assert_eq!(*mode, Mode::None);
            return;
        }
        // auto on a node without a set or profile: a user error, reported as such.
        Err(e) => {
            assert_eq!(*mode, Mode::Auto);
            let message = e.to_string();
            assert!(
                !message.chars().any(char::is_control),
                "not one line: {message:?}"
            );
            return;
        }
    };
    if let Mode::Profile(name) = mode {
        assert_eq!(&resolved.profile.name, name);
    }
    let step = StepFacts {
        job_id: 4242,
        step_id: 0,
        node: node.to_string(),
        nnodes: 2,
        local_size: 8,
    };
    let failing = plan_node(resolved, step.clone(), &NothingExists);
    for kind in resolved.profile.checks.required() {
        let skipped = failing.skipped.contains(&kind);
        let failed = failing.failures.iter().any(|f| f.kind == kind);
        assert!(
            skipped != failed,
            "check {kind:?}: skipped {skipped}, failed {failed}"
        );
    }
    if let Some(summary) = failing.failure_summary() {
        assert!(
            !summary.chars().any(char::is_control),
            "failure summary is not one line: {summary:?}"
        );
    }
    let plan = plan_node(resolved, step, &EverythingExists);
    assert!(
        plan.failures.is_empty(),
        "checks failed on a node where everything exists: {:?}",
        plan.failure_summary()
    );
    // A task whose environment already holds some of the profile's variables, and one with
    // an enclosing step's GPUDIRECT_SET.
    let envs: [&TaskEnv; 2] = [&|_: &str| None, &|name: &str| match name {
        vars::SET => Some("NCCL_OLD,,LD_LIBRARY_PATH".into()),
        "LD_LIBRARY_PATH" => Some("/usr/lib:/opt/lib::".into()),
        _ => Some(format!("user-{name}")),
    }];
    for task in tasks() {
        for env in envs {
            let task_plan = plan_task(&plan, &task, env);
            let profile_var = task_plan.set.iter().find(|(n, _)| n == vars::PROFILE);
            assert_eq!(
                profile_var.map(|(_, v)| v.as_str()),
                Some(resolved.profile.name.as_str())
            );
            assert_eq!(
                task_plan.set.last().map(|(n, _)| n.as_str()),
                Some(vars::SET)
            );
            if let Some(cpus) = &task_plan.cpus {
                assert!(!cpus.is_empty());
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        // The loader reads the file as UTF-8 and reports other bytes itself.
        return;
    };
    let config = match parse_config(text, "fuzz.toml") {
        Ok(config) => config,
        Err(e) => {
            let message = e.to_string();
            assert!(
                message.starts_with("fuzz.toml"),
                "error does not name the file: {message:?}"
            );
            assert!(
                !message.contains('\n') && !message.contains('\r'),
                "error is not one line: {message:?}"
            );
            if let Some(line) = e.line {
                let lines = text.matches('\n').count() + 1;
                assert!(
                    line >= 1 && line <= lines,
                    "line {line} outside the {lines} lines"
                );
            }
            return;
        }
    };
    assert_eq!(config.source, "fuzz.toml");
    let mut nodes = vec!["fuzz-node-without-set".to_string()];
    for set in &config.node_sets {
        if let Ok(hosts) = expand_with_limit(&set.hosts_expr, 64) {
            // Node names come from Slurm, which has no control characters in them.
            let printable = hosts
                .into_iter()
                .filter(|h| !h.chars().any(char::is_control));
            nodes.extend(printable.take(2));
        }
    }
    for node in &nodes {
        for name in config.profile_names() {
            plan_everything(&config, node, &Mode::Profile(name.to_string()));
        }
        plan_everything(&config, node, &Mode::Auto);
        plan_everything(&config, node, &Mode::None);
        if let Some(set) = config.node_set_for(node) {
            if let (Ok(Some(r)), Some(p)) =
                (resolve_profile(&config, node, &Mode::Auto), &set.profile)
            {
                assert_eq!(&r.profile.name, p);
            }
        }
        // The defaults of the config and the node sets name things that exist.
        if let Ok(Some(chosen)) = choose_mode(&config, node, None, None) {
            let source = chosen.source.to_string();
            assert!(
                !source.chars().any(char::is_control),
                "mode source {source:?}"
            );
            if let Mode::Profile(name) = &chosen.mode {
                assert!(
                    config.profiles.contains_key(name),
                    "default mode {name} names no profile"
                );
            }
        }
    }
});
