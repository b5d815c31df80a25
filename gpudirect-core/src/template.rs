//! Profile value templates: `/run/tcpx-{job_id}`, `{nic:eth1}:8-21`.
//!
//! A template is parsed once, when the config is loaded, so an unknown placeholder is a
//! config error with its file:line rather than a surprise inside a job. Expansion
//! substitutes facts the plugin computed (job id, node name, rank, NIC names from the
//! admin's config) and one the user controls: `{gpu}` is the task's own
//! `CUDA_VISIBLE_DEVICES` entry, so a value with `{gpu}` is never a path the plugin
//! may trust. The ownership checks of `[env]` paths do not yet see through task
//! placeholders (security review S5, open; S12 for this comment).

/// A placeholder that a template may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placeholder {
    /// `{job_id}`: the Slurm job id.
    JobId,
    /// `{step_id}`: the Slurm step id.
    StepId,
    /// `{node}`: this node's Slurm name.
    Node,
    /// `{rank}`: the task's global rank in the step.
    Rank,
    /// `{local_rank}`: the task's rank on this node.
    LocalRank,
    /// `{local_size}`: the number of tasks of the step on this node.
    LocalSize,
    /// `{nnodes}`: the number of nodes of the step.
    NNodes,
    /// `{gpu}`: the task's GPU index (its `CUDA_VISIBLE_DEVICES` entry, else local rank).
    Gpu,
    /// `{nic}`: the task's data NIC (empty when the profile maps none).
    Nic,
    /// `{control_nic}`: the profile's control NIC on this node.
    ControlNic,
    /// `{data_nics}`: every data NIC on this node, comma-separated.
    DataNics,
    /// `{cpus}`: the CPU list the task is pinned to (empty when not pinned).
    Cpus,
    /// `{nic:NAME}`: the real name, on this node, of the profile's NIC `NAME`.
    NicNamed(String),
}

impl Placeholder {
    /// Whether it differs from task to task of a step (or is the user's own, `{gpu}`).
    pub fn per_task(&self) -> bool {
        matches!(
            self,
            Placeholder::Rank
                | Placeholder::LocalRank
                | Placeholder::Gpu
                | Placeholder::Nic
                | Placeholder::Cpus
        )
    }
}

impl std::fmt::Display for Placeholder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Placeholder::JobId => f.write_str("{job_id}"),
            Placeholder::StepId => f.write_str("{step_id}"),
            Placeholder::Node => f.write_str("{node}"),
            Placeholder::Rank => f.write_str("{rank}"),
            Placeholder::LocalRank => f.write_str("{local_rank}"),
            Placeholder::LocalSize => f.write_str("{local_size}"),
            Placeholder::NNodes => f.write_str("{nnodes}"),
            Placeholder::Gpu => f.write_str("{gpu}"),
            Placeholder::Nic => f.write_str("{nic}"),
            Placeholder::ControlNic => f.write_str("{control_nic}"),
            Placeholder::DataNics => f.write_str("{data_nics}"),
            Placeholder::Cpus => f.write_str("{cpus}"),
            Placeholder::NicNamed(n) => write!(f, "{{nic:{n}}}"),
        }
    }
}

/// The placeholders a user of the config may write, for error messages.
pub const PLACEHOLDER_NAMES: &str = "{job_id} {step_id} {node} {rank} {local_rank} {local_size} \
     {nnodes} {gpu} {nic} {control_nic} {data_nics} {cpus} {nic:NAME}";

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Placeholder(Placeholder),
}

/// A parsed template. `{{` and `}}` stand for literal braces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    segments: Vec<Segment>,
}

/// Why a template could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// `{name}` with a name we do not know.
    #[error("unknown placeholder `{{{name}}}`; known: {PLACEHOLDER_NAMES}")]
    Unknown {
        /// The name inside the braces.
        name: String,
    },
    /// A `{` without its `}` or a lone `}`.
    #[error("unbalanced brace at byte {offset} (write `{{{{` or `}}}}` for a literal brace)")]
    Unbalanced {
        /// Byte offset in the template.
        offset: usize,
    },
}

impl Template {
    /// Parses a template.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let mut segments = Vec::new();
        let mut literal = String::new();
        let mut chars = text.char_indices().peekable();
        while let Some((offset, c)) = chars.next() {
            match c {
                '{' if chars.peek().map(|&(_, n)| n) == Some('{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek().map(|&(_, n)| n) == Some('}') => {
                    chars.next();
                    literal.push('}');
                }
                '{' => {
                    let rest = &text[offset + 1..];
                    let end = rest.find('}').ok_or(TemplateError::Unbalanced { offset })?;
                    let name = &rest[..end];
                    if name.contains('{') {
                        return Err(TemplateError::Unbalanced { offset });
                    }
                    if !literal.is_empty() {
                        segments.push(Segment::Literal(std::mem::take(&mut literal)));
                    }
                    segments.push(Segment::Placeholder(parse_placeholder(name)?));
                    // Skip the name and the closing brace.
                    for _ in 0..name.chars().count() + 1 {
                        chars.next();
                    }
                }
                '}' => return Err(TemplateError::Unbalanced { offset }),
                other => literal.push(other),
            }
        }
        if !literal.is_empty() {
            segments.push(Segment::Literal(literal));
        }
        Ok(Template { segments })
    }

    /// The placeholders this template uses, in order.
    pub fn placeholders(&self) -> impl Iterator<Item = &Placeholder> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Placeholder(p) => Some(p),
            Segment::Literal(_) => None,
        })
    }

    /// Expands the template; `lookup` gives each placeholder's value.
    pub fn expand(&self, mut lookup: impl FnMut(&Placeholder) -> String) -> String {
        let mut out = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Literal(text) => out.push_str(text),
                Segment::Placeholder(p) => out.push_str(&lookup(p)),
            }
        }
        out
    }
}

fn parse_placeholder(name: &str) -> Result<Placeholder, TemplateError> {
    Ok(match name {
        "job_id" => Placeholder::JobId,
        "step_id" => Placeholder::StepId,
        "node" => Placeholder::Node,
        "rank" => Placeholder::Rank,
        "local_rank" => Placeholder::LocalRank,
        "local_size" => Placeholder::LocalSize,
        "nnodes" => Placeholder::NNodes,
        "gpu" => Placeholder::Gpu,
        "nic" => Placeholder::Nic,
        "control_nic" => Placeholder::ControlNic,
        "data_nics" => Placeholder::DataNics,
        "cpus" => Placeholder::Cpus,
        other => match other.strip_prefix("nic:") {
            Some(nic) if is_nic_name(nic) => Placeholder::NicNamed(nic.to_string()),
            _ => {
                return Err(TemplateError::Unknown {
                    name: other.to_string(),
                })
            }
        },
    })
}

/// Whether `name` is a plausible Linux interface name (what `ip link` accepts).
pub fn is_nic_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 15
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(text: &str) -> String {
        Template::parse(text).unwrap().expand(|p| match p {
            Placeholder::JobId => "42".into(),
            Placeholder::NicNamed(n) => format!("real-{n}"),
            Placeholder::LocalRank => "3".into(),
            _ => "?".into(),
        })
    }

    #[test]
    fn expands_placeholders_and_literal_braces() {
        assert_eq!(expand("/run/tcpx-{job_id}"), "/run/tcpx-42");
        assert_eq!(
            expand("{nic:eth1}:8-21;{nic:eth2}"),
            "real-eth1:8-21;real-eth2"
        );
        assert_eq!(expand("{{x}} {local_rank}"), "{x} 3");
        assert_eq!(expand("plain"), "plain");
        assert_eq!(expand(""), "");
    }

    #[test]
    fn rejects_unknown_and_unbalanced() {
        assert_eq!(
            Template::parse("a{jobid}"),
            Err(TemplateError::Unknown {
                name: "jobid".into()
            })
        );
        assert_eq!(
            Template::parse("a{job_id"),
            Err(TemplateError::Unbalanced { offset: 1 })
        );
        assert_eq!(
            Template::parse("a}b"),
            Err(TemplateError::Unbalanced { offset: 1 })
        );
        assert!(Template::parse("{nic:$(rm -rf)}").is_err());
        assert_eq!(
            Template::parse("{{nested{job_id}}"),
            Err(TemplateError::Unbalanced { offset: 16 })
        );
    }

    #[test]
    fn lists_placeholders() {
        let t = Template::parse("{node}-{nic:eth0}").unwrap();
        let got: Vec<_> = t.placeholders().cloned().collect();
        assert_eq!(
            got,
            vec![Placeholder::Node, Placeholder::NicNamed("eth0".into())]
        );
    }
}
