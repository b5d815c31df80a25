//! Profile value templates (`/run/tcpx-{job_id}`, `{nic:eth1}:8-21`): parse and expand.
//!
//! Invariants:
//! - `Template::parse` never panics; an `Unbalanced` error points at a `{` or `}` of the
//!   input, an `Unknown` one names text that is in the input; messages are one line;
//! - expansion calls the lookup once per placeholder, in `placeholders()` order;
//! - writing each placeholder back as `{name}` gives the input again, when the input has
//!   no `{{`/`}}` escapes (which parse to literal braces);
//! - with empty values, the expansion is the literal text: no longer than the input.
#![no_main]

use gpudirect_core::template::{Placeholder, Template, TemplateError};
use libfuzzer_sys::fuzz_target;

/// The placeholder as a template writes it.
fn written(p: &Placeholder) -> String {
    let name = match p {
        Placeholder::JobId => "job_id",
        Placeholder::StepId => "step_id",
        Placeholder::Node => "node",
        Placeholder::Rank => "rank",
        Placeholder::LocalRank => "local_rank",
        Placeholder::LocalSize => "local_size",
        Placeholder::NNodes => "nnodes",
        Placeholder::Gpu => "gpu",
        Placeholder::Nic => "nic",
        Placeholder::ControlNic => "control_nic",
        Placeholder::DataNics => "data_nics",
        Placeholder::Cpus => "cpus",
        Placeholder::NicNamed(nic) => return format!("{{nic:{nic}}}"),
    };
    format!("{{{name}}}")
}

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    let s = s.as_ref();
    match Template::parse(s) {
        Ok(template) => {
            let listed: Vec<Placeholder> = template.placeholders().cloned().collect();
            let mut seen = Vec::new();
            let back = template.expand(|p| {
                seen.push(p.clone());
                written(p)
            });
            assert_eq!(seen, listed, "expand and placeholders() disagree for {s:?}");
            if !s.contains("{{") && !s.contains("}}") {
                assert_eq!(back, s, "placeholders written back do not give the input");
            }
            let literal = template.expand(|_| String::new());
            assert!(
                literal.len() <= s.len(),
                "{s:?} expands to longer literal text {literal:?}"
            );
            assert!(!literal.contains(['{', '}']) || s.contains("{{") || s.contains("}}"));
        }
        Err(e) => {
            match &e {
                TemplateError::Unbalanced { offset } => {
                    let byte = s.as_bytes().get(*offset);
                    assert!(
                        matches!(byte, Some(b'{' | b'}')),
                        "Unbalanced at {offset} of {s:?} is not a brace"
                    );
                }
                TemplateError::Unknown { name } => {
                    assert!(
                        s.contains(&format!("{{{name}}}")),
                        "Unknown {name:?} not in {s:?}"
                    );
                }
            }
            assert!(!e.to_string().is_empty());
        }
    }
});
