//! What `gpudirect tune` varies: NCCL variables and the values to try, built in per
//! collective and fabric, from a sweep file, or from `--knob` flags, then fitted to the
//! profile the runs apply (a value the profile already sets is the default; a variable it
//! forces cannot be tuned, since the plugin would replace the value).

use std::collections::BTreeMap;

use serde::Deserialize;

/// One NCCL variable and the values to try against the default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Knob {
    /// The variable, e.g. `NCCL_ALGO`.
    pub name: String,
    /// Values to try, in order, none of them the default's.
    pub values: Vec<String>,
}

/// A knob list that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KnobError(pub String);

fn knob(name: &str, values: &[&str]) -> Knob {
    Knob {
        name: name.to_string(),
        values: values.iter().map(|v| v.to_string()).collect(),
    }
}

/// Transports whose traffic goes over TCP sockets (NCCL's own, and Google's TCPX plugin,
/// which reads NCCL's socket variables), as the profile's `transport` names them.
fn socket_based(transport: &str) -> bool {
    let t = transport.to_ascii_lowercase();
    t == "socket" || t == "gpudirecttcpx"
}

/// Transports over NCCL's IB verbs code (InfiniBand, RoCE, Google's gIB).
fn verbs_based(transport: &str) -> bool {
    let t = transport.to_ascii_lowercase();
    t == "ib" || t == "gib"
}

/// The built-in knobs for `collective` on a fabric whose profile names `transport`.
///
/// - `NCCL_ALGO` (Ring, Tree) for all_reduce only: Tree is an all_reduce algorithm, and the
///   other collectives run Ring (or NVLS/PAT, which NCCL picks by itself).
/// - `NCCL_PROTO` (Simple, LL128): LL wins only below a few KiB, where nobody tunes.
/// - `NCCL_MIN_NCHANNELS` (16, 32): more channels, more SMs moving data.
/// - `NCCL_BUFFSIZE` (2 MiB, 8 MiB around NCCL's 4 MiB).
/// - Socket transports (Socket, GPUDirectTCPX): `NCCL_NSOCKS_PERTHREAD` (2, 4, 8) and
///   `NCCL_SOCKET_NTHREADS` (1, 2, 4).
/// - Verbs transports (IB, gIB): `NCCL_IB_QPS_PER_CONNECTION` (1, 2, 4).
pub fn builtin(collective: &str, transport: Option<&str>) -> Vec<Knob> {
    let mut knobs = Vec::new();
    if collective == "all_reduce" {
        knobs.push(knob("NCCL_ALGO", &["Ring", "Tree"]));
    }
    knobs.push(knob("NCCL_PROTO", &["Simple", "LL128"]));
    knobs.push(knob("NCCL_MIN_NCHANNELS", &["16", "32"]));
    knobs.push(knob("NCCL_BUFFSIZE", &["2097152", "8388608"]));
    match transport {
        Some(t) if socket_based(t) => {
            knobs.push(knob("NCCL_NSOCKS_PERTHREAD", &["2", "4", "8"]));
            knobs.push(knob("NCCL_SOCKET_NTHREADS", &["1", "2", "4"]));
        }
        Some(t) if verbs_based(t) => {
            knobs.push(knob("NCCL_IB_QPS_PER_CONNECTION", &["1", "2", "4"]));
        }
        _ => {}
    }
    knobs
}

/// Whether `name` is a variable name a shell and NCCL accept.
fn is_variable_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit()
}

/// Checks a value: printable, not empty, and none of `,` (lists), `+` (joins settings in a
/// run's name) or `{` `}` (the plugin's placeholders, once written to an overlay).
fn check_value(name: &str, value: &str, place: &str) -> Result<(), KnobError> {
    if value.is_empty()
        || value.len() > 256
        || value.contains([',', '+', '{', '}'])
        || !value.chars().all(|c| c.is_ascii_graphic())
    {
        return Err(KnobError(format!(
            "{place}: `{name}` value `{}` must be printable, without spaces, `,`, `+`, `{{` or `}}` (one value per list item)",
            gpudirect_core::config::sanitize_for_message(value)
        )));
    }
    Ok(())
}

fn checked(name: &str, values: Vec<String>, place: &str) -> Result<Knob, KnobError> {
    if !is_variable_name(name) {
        return Err(KnobError(format!(
            "{place}: `{}` is not a variable name (capitals, digits and `_`, e.g. NCCL_ALGO)",
            gpudirect_core::config::sanitize_for_message(name)
        )));
    }
    if values.is_empty() {
        return Err(KnobError(format!(
            "{place}: `{name}` has no values to try: give one or more, e.g. {name}=A,B"
        )));
    }
    let mut unique: Vec<String> = Vec::new();
    for value in values {
        check_value(name, &value, place)?;
        if !unique.contains(&value) {
            unique.push(value);
        }
    }
    Ok(Knob {
        name: name.to_string(),
        values: unique,
    })
}

/// Parses `--knob NCCL_ALGO=Ring,Tree` items; a variable named twice is an error.
pub fn from_flags(items: &[String]) -> Result<Vec<Knob>, KnobError> {
    let mut knobs: Vec<Knob> = Vec::new();
    for item in items {
        let place = format!("--knob {item}");
        let (name, values) = item.split_once('=').ok_or_else(|| {
            KnobError(format!(
                "{place}: write VARIABLE=VALUE,VALUE, e.g. --knob NCCL_ALGO=Ring,Tree"
            ))
        })?;
        let values = values.split(',').map(|v| v.trim().to_string()).collect();
        let knob = checked(name.trim(), values, &place)?;
        if knobs.iter().any(|k| k.name == knob.name) {
            return Err(KnobError(format!(
                "{place}: {} is given twice; list all its values in one --knob",
                knob.name
            )));
        }
        knobs.push(knob);
    }
    Ok(knobs)
}

/// A sweep file: `[knobs]` with one list of values per variable, strings or integers.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SweepFile {
    knobs: BTreeMap<String, Vec<toml::Value>>,
}

/// Reads a sweep file's text; `file` names it in errors.
///
/// ```toml
/// [knobs]
/// NCCL_ALGO = ["Ring", "Tree"]
/// NCCL_MIN_NCHANNELS = [16, 32]
/// ```
pub fn from_sweep_file(text: &str, file: &str) -> Result<Vec<Knob>, KnobError> {
    let sweep: SweepFile = toml::from_str(text).map_err(|e| {
        let line = e
            .span()
            .map(|s| format!(":{}", gpudirect_core::config::line_of(text, s.start)))
            .unwrap_or_default();
        KnobError(format!(
            "{file}{line}: {} (a sweep file is `[knobs]` with lists, e.g. NCCL_ALGO = [\"Ring\", \"Tree\"])",
            e.message().lines().next().unwrap_or_default()
        ))
    })?;
    if sweep.knobs.is_empty() {
        return Err(KnobError(format!(
            "{file}: [knobs] lists no variable: add e.g. NCCL_ALGO = [\"Ring\", \"Tree\"]"
        )));
    }
    sweep
        .knobs
        .into_iter()
        .map(|(name, values)| {
            let place = format!("{file}: knobs.{name}");
            let values = values
                .into_iter()
                .map(|v| match v {
                    toml::Value::String(s) => Ok(s),
                    toml::Value::Integer(i) => Ok(i.to_string()),
                    other => Err(KnobError(format!(
                        "{place}: a {} is neither a string nor an integer",
                        other.type_str()
                    ))),
                })
                .collect::<Result<Vec<_>, _>>()?;
            checked(&name, values, &place)
        })
        .collect()
}

/// What the default runs already have for a variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Preset {
    /// The profile sets it (the user's own value would win).
    Profile(String),
    /// The profile forces it: the plugin replaces any other value.
    Forced(String),
    /// The user's environment sets it.
    User(String),
}

/// Fits `knobs` to what the default already has: a value equal to the preset one is
/// dropped (it is the default), a forced variable is dropped whole, and a knob left with
/// no value is dropped. Returns the knobs to try and one note per change.
pub fn fit(knobs: Vec<Knob>, presets: &BTreeMap<String, Preset>) -> (Vec<Knob>, Vec<String>) {
    let mut notes = Vec::new();
    let mut kept = Vec::new();
    for mut knob in knobs {
        match presets.get(&knob.name) {
            Some(Preset::Forced(value)) => {
                notes.push(format!(
                    "{} is forced to `{value}` by the profile: not tuned (the plugin would replace any other value)",
                    knob.name
                ));
                continue;
            }
            Some(Preset::Profile(value) | Preset::User(value)) => {
                let from = match presets.get(&knob.name) {
                    Some(Preset::User(_)) => "your environment",
                    _ => "the profile",
                };
                if knob.values.iter().any(|v| v == value) {
                    knob.values.retain(|v| v != value);
                    notes.push(format!(
                        "{}={value} is the default here (set by {from}); trying {}",
                        knob.name,
                        if knob.values.is_empty() {
                            "nothing else".to_string()
                        } else {
                            knob.values.join(", ")
                        }
                    ));
                }
            }
            None => {}
        }
        if !knob.values.is_empty() {
            kept.push(knob);
        }
    }
    (kept, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(knobs: &[Knob]) -> Vec<&str> {
        knobs.iter().map(|k| k.name.as_str()).collect()
    }

    #[test]
    fn builtin_knobs_follow_the_collective_and_the_fabric() {
        let plain = builtin("all_reduce", None);
        assert_eq!(
            names(&plain),
            [
                "NCCL_ALGO",
                "NCCL_PROTO",
                "NCCL_MIN_NCHANNELS",
                "NCCL_BUFFSIZE"
            ]
        );
        assert!(!names(&builtin("all_gather", None)).contains(&"NCCL_ALGO"));
        let tcpx = builtin("all_reduce", Some("GPUDirectTCPX"));
        assert!(names(&tcpx).contains(&"NCCL_NSOCKS_PERTHREAD"));
        assert!(names(&tcpx).contains(&"NCCL_SOCKET_NTHREADS"));
        let gib = builtin("all_reduce", Some("gIB"));
        assert!(names(&gib).contains(&"NCCL_IB_QPS_PER_CONNECTION"));
        assert!(!names(&gib).contains(&"NCCL_NSOCKS_PERTHREAD"));
    }

    #[test]
    fn flags_and_sweep_files_read_and_refuse_what_is_wrong() {
        let knobs =
            from_flags(&["NCCL_ALGO=Ring,Tree".into(), "NCCL_BUFFSIZE=8388608".into()]).unwrap();
        assert_eq!(knobs[0].values, ["Ring", "Tree"]);
        assert_eq!(knobs[1].values, ["8388608"]);
        for (bad, says) in [
            ("NCCL_ALGO", "VARIABLE=VALUE"),
            ("nccl_algo=Ring", "not a variable name"),
            ("NCCL_ALGO=", "printable"),
            ("NCCL_ALGO=a b", "printable"),
            ("NCCL_ALGO=a+b", "printable"),
            ("NCCL_ALGO={nic}", "printable"),
        ] {
            let e = from_flags(&[bad.into()]).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let twice = from_flags(&["NCCL_ALGO=Ring".into(), "NCCL_ALGO=Tree".into()])
            .unwrap_err()
            .to_string();
        assert!(twice.contains("given twice"), "{twice}");

        let sweep = from_sweep_file(
            "[knobs]\nNCCL_ALGO = [\"Ring\", \"Tree\"]\nNCCL_MIN_NCHANNELS = [16, 32]\n",
            "s.toml",
        )
        .unwrap();
        assert_eq!(sweep[1].name, "NCCL_MIN_NCHANNELS");
        assert_eq!(sweep[1].values, ["16", "32"]);
        let e = from_sweep_file("[knobs]\nNCCL_ALGO = [1.5]\n", "s.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("s.toml: knobs.NCCL_ALGO"), "{e}");
        let e = from_sweep_file("[knob]\nNCCL_ALGO = [\"Ring\"]\n", "s.toml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("s.toml:1:"), "{e}");
        let e = from_sweep_file("[knobs]\n", "s.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("lists no variable"), "{e}");
    }

    #[test]
    fn the_profile_decides_what_is_the_default_and_what_cannot_move() {
        let presets = BTreeMap::from([
            ("NCCL_ALGO".to_string(), Preset::Profile("Ring".into())),
            (
                "NCCL_SOCKET_NTHREADS".to_string(),
                Preset::Forced("1".into()),
            ),
            ("NCCL_PROTO".to_string(), Preset::User("Simple".into())),
        ]);
        let (kept, notes) = fit(builtin("all_reduce", Some("GPUDirectTCPX")), &presets);
        let algo = kept.iter().find(|k| k.name == "NCCL_ALGO").unwrap();
        assert_eq!(algo.values, ["Tree"], "Ring is the default already");
        assert!(!names(&kept).contains(&"NCCL_SOCKET_NTHREADS"));
        let proto = kept.iter().find(|k| k.name == "NCCL_PROTO").unwrap();
        assert_eq!(proto.values, ["LL128"]);
        assert!(notes.iter().any(|n| n.contains("forced")), "{notes:?}");
        assert!(
            notes.iter().any(|n| n.contains("your environment")),
            "{notes:?}"
        );
        let (kept, _) = fit(
            vec![knob("NCCL_ALGO", &["Ring"])],
            &BTreeMap::from([("NCCL_ALGO".to_string(), Preset::Profile("Ring".into()))]),
        );
        assert!(kept.is_empty(), "a knob with nothing left to try goes");
    }
}
