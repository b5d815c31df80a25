//! `profiles list` and `profiles show`: the config as the plugin parsed it, in text and
//! JSON (pure: the command prints).

use serde_json::{json, Value};

use gpudirect_core::config::{CheckKind, Config, Mode, NicLocality, NodeSet, Profile};
use gpudirect_core::template::{Placeholder, Template};

use crate::output::{render_table, Align};

/// A template as the admin wrote it (placeholders back in braces).
pub fn template_text(template: &Template) -> String {
    template.expand(|p| match p {
        Placeholder::JobId => "{job_id}".into(),
        Placeholder::StepId => "{step_id}".into(),
        Placeholder::Node => "{node}".into(),
        Placeholder::Rank => "{rank}".into(),
        Placeholder::LocalRank => "{local_rank}".into(),
        Placeholder::LocalSize => "{local_size}".into(),
        Placeholder::NNodes => "{nnodes}".into(),
        Placeholder::Gpu => "{gpu}".into(),
        Placeholder::Nic => "{nic}".into(),
        Placeholder::ControlNic => "{control_nic}".into(),
        Placeholder::DataNics => "{data_nics}".into(),
        Placeholder::Cpus => "{cpus}".into(),
        Placeholder::NicNamed(name) => format!("{{nic:{name}}}"),
    })
}

pub(crate) fn check_names(profile: &Profile) -> Vec<&'static str> {
    profile
        .checks
        .required()
        .into_iter()
        .map(CheckKind::name)
        .collect()
}

/// "4", "1+4" (control + data), or "sysfs" when the NICs are found on the node.
pub(crate) fn nic_count(profile: &Profile) -> String {
    let data = if profile.data_nics.is_empty() && profile.nic_locality == NicLocality::Sysfs {
        "sysfs".to_string()
    } else {
        profile.data_nics.len().to_string()
    };
    match &profile.control_nic {
        Some(_) => format!("1+{data}"),
        None => data,
    }
}

fn mode_text(mode: &Option<Mode>) -> String {
    mode.as_ref().map_or("-".into(), ToString::to_string)
}

/// Node sets whose `auto` or default picks this profile.
fn sets_using<'c>(config: &'c Config, name: &str) -> Vec<&'c NodeSet> {
    config
        .node_sets
        .iter()
        .filter(|s| {
            s.profile.as_deref() == Some(name)
                || s.default_mode == Some(Mode::Profile(name.to_string()))
        })
        .collect()
}

pub fn list_text(config: &Config) -> String {
    let left = |names: &[&'static str]| -> Vec<(&'static str, Align)> {
        names.iter().map(|n| (*n, Align::Left)).collect()
    };
    let mut rows = Vec::new();
    for profile in config.profiles.values() {
        let checks = check_names(profile);
        rows.push(vec![
            profile.name.clone(),
            profile.transport.clone().unwrap_or_else(|| "-".into()),
            nic_count(profile),
            if checks.is_empty() {
                "-".into()
            } else {
                checks.join(",")
            },
            profile.description.clone(),
        ]);
    }
    let mut out = render_table(
        &left(&["PROFILE", "TRANSPORT", "NICS", "CHECKS", "DESCRIPTION"]),
        &rows,
    );
    out.push('\n');
    let mut rows = Vec::new();
    for set in &config.node_sets {
        let skipped: Vec<&str> = set.skip_checks.iter().map(|k| k.name()).collect();
        rows.push(vec![
            set.name.clone(),
            set.hosts_expr.clone(),
            set.profile.clone().unwrap_or_else(|| "-".into()),
            mode_text(&set.default_mode),
            if skipped.is_empty() {
                "-".into()
            } else {
                skipped.join(",")
            },
        ]);
    }
    out.push_str(&render_table(
        &left(&["NODE SET", "HOSTS", "PROFILE", "DEFAULT", "SKIPPED CHECKS"]),
        &rows,
    ));
    out.push_str(&format!(
        "\nconfig {} (default mode: {})\n",
        config.source,
        mode_text(&config.default_mode)
    ));
    out
}

fn node_set_json(set: &NodeSet) -> Value {
    json!({
        "name": set.name,
        "hosts": set.hosts_expr,
        "profile": set.profile,
        "default_mode": set.default_mode.as_ref().map(ToString::to_string),
        "skip_checks": set.skip_checks.iter().map(|k| k.name()).collect::<Vec<_>>(),
        "nic_names": set.nic_names,
    })
}

pub fn list_json(config: &Config) -> Value {
    let profiles: Vec<Value> = config
        .profiles
        .values()
        .map(|p| {
            json!({
                "name": p.name,
                "description": p.description,
                "transport": p.transport,
                "nics": nic_count(p),
                "data_nics": p.data_nics.len(),
                "checks": check_names(p),
            })
        })
        .collect();
    json!({
        "config": config.source,
        "default_mode": config.default_mode.as_ref().map(ToString::to_string),
        "profiles": profiles,
        "node_sets": config.node_sets.iter().map(node_set_json).collect::<Vec<_>>(),
    })
}

pub fn profile_json(config: &Config, p: &Profile) -> Value {
    json!({
        "name": p.name,
        "extends": p.extends,
        "description": p.description,
        "strict": p.strict,
        "transport": p.transport,
        "control_nic": p.control_nic,
        "data_nics": p.data_nics,
        "data_nic_class": p.data_nic_class.name(),
        "nic_locality": p.nic_locality.name(),
        "gpu_nics": p.gpu_nics,
        "nic_cpus": p.nic_cpus.iter().map(|(k, v)| (k.clone(), v.to_string())).collect::<std::collections::BTreeMap<_, _>>(),
        "pin_cpus": p.pin_cpus,
        "gdr": p.gdr,
        "line_rate_gbit": p.line_rate_gbit,
        "node_line_rate_gbps": p.node_line_rate_gbps(),
        "library_dirs": p.library_dirs,
        "topology_file": p.topology_file,
        "env": p.env.iter().map(|v| json!({
            "name": v.name, "value": template_text(&v.value), "forced": v.forced,
        })).collect::<Vec<_>>(),
        "checks": {
            "nics": p.checks.nics,
            "libraries": p.checks.libraries,
            "topology_file": p.checks.topology_file,
            "rxdm_socket_dir": p.checks.rxdm_socket_dir.as_ref().map(template_text),
        },
        "node_sets": sets_using(config, &p.name).into_iter().map(node_set_json).collect::<Vec<_>>(),
    })
}

pub fn show_text(config: &Config, p: &Profile) -> String {
    let or_dash = |v: Option<&str>| v.unwrap_or("-").to_string();
    let list = |v: &[String]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(", ")
        }
    };
    let mut out = format!("profile {}: {}\n", p.name, p.description);
    let mut field = |k: &str, v: String| out.push_str(&format!("  {k:<15} {v}\n"));
    if let Some(base) = &p.extends {
        field("extends", format!("{base} (its keys, merged with these)"));
    }
    field("transport", or_dash(p.transport.as_deref()));
    field("strict", p.strict.to_string());
    field("control_nic", or_dash(p.control_nic.as_deref()));
    field(
        "data_nics",
        format!("{} ({})", list(&p.data_nics), p.data_nic_class.name()),
    );
    field("nic_locality", p.nic_locality.name().to_string());
    field("gpu_nics", list(&p.gpu_nics));
    let cpus: Vec<String> = p.nic_cpus.iter().map(|(k, v)| format!("{k}={v}")).collect();
    field("nic_cpus", list(&cpus));
    field("pin_cpus", p.pin_cpus.to_string());
    if let Some(gdr) = p.gdr {
        field("gdr", gdr.to_string());
    }
    if let Some(node) = p.node_line_rate_gbps() {
        let rates: Vec<String> = p
            .line_rate_gbit
            .iter()
            .map(|(nic, g)| format!("{nic} {g}"))
            .collect();
        field(
            "line rate",
            format!("{node:.1} GB/s per node (Gbit/s: {})", rates.join(", ")),
        );
    }
    field("library_dirs", list(&p.library_dirs));
    field("topology_file", or_dash(p.topology_file.as_deref()));
    let checks = check_names(p);
    field(
        "checks",
        if checks.is_empty() {
            "-".into()
        } else {
            checks.join(", ")
        },
    );
    if !p.checks.libraries.is_empty() {
        field("  libraries", p.checks.libraries.join(", "));
    }
    if let Some(dir) = &p.checks.rxdm_socket_dir {
        field("  rxdm_socket", template_text(dir));
    }
    out.push_str("  env (forced: replaces the user's value; else the user's value is kept):\n");
    for var in &p.env {
        let tag = if var.forced { "forced" } else { "keepable" };
        out.push_str(&format!(
            "    {tag:<9} {}={}\n",
            var.name,
            template_text(&var.value)
        ));
    }
    if let Some(file) = &p.topology_file {
        out.push_str(&format!("    {:<9} NCCL_TOPO_FILE={file}\n", "keepable"));
    }
    let sets = sets_using(config, &p.name);
    if sets.is_empty() {
        out.push_str("  node sets: none (used only when asked for by name)\n");
    } else {
        out.push_str("  node sets:\n");
        for set in sets {
            let names: Vec<String> = set
                .nic_names
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let skipped: Vec<&str> = set.skip_checks.iter().map(|k| k.name()).collect();
            out.push_str(&format!(
                "    {} ({}): default {}, skips {}, NIC names {}\n",
                set.name,
                set.hosts_expr,
                mode_text(&set.default_mode),
                if skipped.is_empty() {
                    "-".into()
                } else {
                    skipped.join(",")
                },
                if names.is_empty() {
                    "as in the profile".into()
                } else {
                    names.join(" ")
                }
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpudirect_core::config::parse_config;

    const SHIPPED: &str = include_str!("../../../slurm-conf/gpudirect.toml");

    #[test]
    fn template_text_round_trips_the_shipped_values() {
        let config = parse_config(SHIPPED, "gpudirect.toml").unwrap();
        let tcpx = &config.profiles["tcpx"];
        let tx = tcpx
            .env
            .iter()
            .find(|v| v.name == "NCCL_GPUDIRECTTCPX_TX_BINDINGS")
            .unwrap();
        assert!(SHIPPED.contains(&template_text(&tx.value)));
        assert_eq!(
            template_text(tcpx.checks.rxdm_socket_dir.as_ref().unwrap()),
            "/run/tcpx-{job_id}"
        );
    }
}
