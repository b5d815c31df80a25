//! The config as written: the `Raw*` types serde reads (every key checked by
//! `deny_unknown_fields`, values kept [`Spanned`] for their lines), and `extends`: how a
//! profile inherits the keys of its base before anything is checked.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) default_mode: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) profiles: BTreeMap<Spanned<String>, RawProfile>,
    #[serde(default)]
    pub(super) node_set: Vec<Spanned<RawNodeSet>>,
    #[serde(default)]
    pub(super) ras: Option<Spanned<RawRas>>,
    #[serde(default)]
    pub(super) watch: Option<Spanned<RawWatch>>,
    #[serde(default)]
    pub(super) nic_counters: Option<Spanned<RawNicCounters>>,
    #[serde(default)]
    pub(super) quarantine: Option<Spanned<RawQuarantine>>,
}

/// `[quarantine]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawQuarantine {
    #[serde(default)]
    pub(super) reservation: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) users: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    pub(super) instead_of_drain: Option<bool>,
    #[serde(default)]
    pub(super) passes_to_return: Option<Spanned<i64>>,
    #[serde(default)]
    pub(super) failures_to_drain: Option<Spanned<i64>>,
}

/// `[nic_counters]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNicCounters {
    #[serde(default)]
    pub(super) state_dir: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) per_minute: BTreeMap<Spanned<String>, Spanned<i64>>,
}

/// `[watch]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWatch {
    pub(super) inspector: Spanned<String>,
    #[serde(default)]
    pub(super) connections: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) dump_root: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) interval_ms: Option<Spanned<i64>>,
    #[serde(default)]
    pub(super) verbose: Option<bool>,
    #[serde(default)]
    pub(super) always: Option<bool>,
    #[serde(default)]
    pub(super) replace_profiler: Option<bool>,
}

/// `[ras]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRas {
    #[serde(default)]
    pub(super) enabled: Option<bool>,
    #[serde(default)]
    pub(super) port_base: Option<Spanned<i64>>,
    #[serde(default)]
    pub(super) port_span: Option<Spanned<i64>>,
}

/// A profile as written. Keys that a profile extending another inherits when it leaves
/// them out are `Option`s, so that "written" can be told from "left out" ([`inherit`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProfile {
    #[serde(default)]
    pub(super) extends: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) description: Option<String>,
    #[serde(default)]
    pub(super) strict: Option<bool>,
    #[serde(default)]
    pub(super) transport: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) control_nic: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) data_nics: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    pub(super) data_nic_class: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) nic_locality: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) gpu_nics: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    pub(super) nic_cpus: Option<BTreeMap<Spanned<String>, Spanned<String>>>,
    #[serde(default)]
    pub(super) pin_cpus: Option<Spanned<bool>>,
    #[serde(default)]
    pub(super) gdr: Option<Spanned<bool>>,
    #[serde(default)]
    pub(super) line_rate_gbit: Option<Spanned<toml::Value>>,
    #[serde(default)]
    pub(super) library_dirs: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    pub(super) topology_file: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) env: BTreeMap<Spanned<String>, Spanned<String>>,
    #[serde(default)]
    pub(super) forced: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) checks: Option<RawChecks>,
}

#[derive(Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawChecks {
    #[serde(default)]
    pub(super) nics: bool,
    #[serde(default)]
    pub(super) libraries: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    pub(super) topology_file: Option<Spanned<bool>>,
    #[serde(default)]
    pub(super) rxdm_socket_dir: Option<Spanned<String>>,
}

/// `child` on top of `base`, the profile it `extends`: each key `child` writes replaces
/// `base`'s, but `env` merges by variable name (`child`'s values win) and `forced` is the
/// union. Values keep their spans, so a message about an inherited key points at `base`'s
/// line. Also returns the keys inherited (`transport`, `env.NCCL_NET`, ...), to say so in
/// messages about them.
pub(super) fn inherit(child: &RawProfile, base: &RawProfile) -> (RawProfile, Vec<String>) {
    let mut inherited = Vec::new();
    let mut merged = RawProfile {
        extends: child.extends.clone(),
        // A struct literal, not `..`: a new key has to say here how it is inherited.
        description: or_base(
            &child.description,
            &base.description,
            "description",
            &mut inherited,
        ),
        strict: or_base(&child.strict, &base.strict, "strict", &mut inherited),
        transport: or_base(
            &child.transport,
            &base.transport,
            "transport",
            &mut inherited,
        ),
        control_nic: or_base(
            &child.control_nic,
            &base.control_nic,
            "control_nic",
            &mut inherited,
        ),
        data_nics: or_base(
            &child.data_nics,
            &base.data_nics,
            "data_nics",
            &mut inherited,
        ),
        data_nic_class: or_base(
            &child.data_nic_class,
            &base.data_nic_class,
            "data_nic_class",
            &mut inherited,
        ),
        nic_locality: or_base(
            &child.nic_locality,
            &base.nic_locality,
            "nic_locality",
            &mut inherited,
        ),
        gpu_nics: or_base(&child.gpu_nics, &base.gpu_nics, "gpu_nics", &mut inherited),
        nic_cpus: or_base(&child.nic_cpus, &base.nic_cpus, "nic_cpus", &mut inherited),
        pin_cpus: or_base(&child.pin_cpus, &base.pin_cpus, "pin_cpus", &mut inherited),
        gdr: or_base(&child.gdr, &base.gdr, "gdr", &mut inherited),
        line_rate_gbit: or_base(
            &child.line_rate_gbit,
            &base.line_rate_gbit,
            "line_rate_gbit",
            &mut inherited,
        ),
        library_dirs: or_base(
            &child.library_dirs,
            &base.library_dirs,
            "library_dirs",
            &mut inherited,
        ),
        topology_file: or_base(
            &child.topology_file,
            &base.topology_file,
            "topology_file",
            &mut inherited,
        ),
        checks: or_base(&child.checks, &base.checks, "checks", &mut inherited),
        env: BTreeMap::new(),
        forced: Vec::new(),
    };
    merged.env = base.env.clone();
    for (name, value) in &child.env {
        // Remove first: `insert` would keep the base's key, and with it the base's line.
        merged.env.remove(name.get_ref().as_str());
        merged.env.insert(name.clone(), value.clone());
    }
    inherited.extend(
        base.env
            .keys()
            .filter(|name| !child.env.contains_key(name.get_ref().as_str()))
            .map(|name| format!("env.{}", name.get_ref())),
    );
    merged.forced = base.forced.iter().chain(&child.forced).cloned().collect();
    (merged, inherited)
}

/// The child's value of a key where it writes one, else the base's (noting `key` as
/// inherited when the base writes it).
pub(super) fn or_base<T: Clone>(
    own: &Option<T>,
    base: &Option<T>,
    key: &str,
    inherited: &mut Vec<String>,
) -> Option<T> {
    if own.is_none() && base.is_some() {
        inherited.push(key.to_string());
    }
    own.as_ref().or(base.as_ref()).cloned()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNodeSet {
    pub(super) name: String,
    pub(super) hosts: Spanned<String>,
    #[serde(default)]
    pub(super) profile: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) default_mode: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) skip_checks: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) nic_names: BTreeMap<Spanned<String>, Spanned<String>>,
}

/// Takes out of `table` the innermost entry whose key or value holds byte `pos` (where
/// serde refused something), so that the config can be read again without it: a key of
/// a table, or the key holding a list (a list's item is not taken alone). Returns the
/// path of what was taken (`["profiles", "tcpx", "data_nic"]`, a list of tables' item by
/// its index: `["node_set", "1", "hostz"]`), or `None` where nothing holds `pos`.
pub(super) fn remove_entry_at(table: &mut DeTable<'_>, pos: usize) -> Option<Vec<String>> {
    for (key, value) in table.iter_mut() {
        let inner = match value.get_mut() {
            DeValue::Table(inner) => remove_entry_at(inner, pos),
            DeValue::Array(items) => items.iter_mut().enumerate().find_map(|(i, item)| match item
                .get_mut()
            {
                DeValue::Table(inner) => remove_entry_at(inner, pos).map(|mut path| {
                    path.insert(0, i.to_string());
                    path
                }),
                _ => None,
            }),
            _ => None,
        };
        if let Some(mut path) = inner {
            path.insert(0, key.get_ref().to_string());
            return Some(path);
        }
    }
    let holds = |span: std::ops::Range<usize>| span.contains(&pos);
    let (key, _) = table
        .iter()
        .find(|(key, value)| holds(key.span()) || holds(value.span()))?;
    let name = key.get_ref().to_string();
    table.remove(name.as_str());
    Some(vec![name])
}

/// Whether a checked key (`profiles.tcpx.gpu_nics`, `node_set[1] (a3).hosts`) is in the
/// table that held the key at `path`, which serde refused ([`remove_entry_at`]).
pub(super) fn same_table(path: &[String], key: Option<&str>) -> bool {
    let Some(key) = key else { return false };
    let under = |prefix: &str| key == prefix || key.starts_with(&format!("{prefix}."));
    match path {
        [top] if top == "node_set" => key.starts_with("node_set["),
        [top, index, ..] if top == "node_set" => key.starts_with(&format!("node_set[{index}] ")),
        [top, name, ..] if top == "profiles" => under(&format!("profiles.{name}")),
        [top, ..] => under(top),
        [] => false,
    }
}
