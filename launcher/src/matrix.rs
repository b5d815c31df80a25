//! The nccl-tests matrix: collectives x node counts x GPUs per node x environment variants,
//! all over one size range, from flags or a TOML file, expanded into an ordered plan of
//! cells. Pure: no process is started here.
//!
//! ```toml
//! collectives = ["all_reduce", "all_gather"]
//! nodes = [2, 4]
//! gpus_per_node = [8]
//! min_bytes = "8"
//! max_bytes = "8G"
//! factor = 2
//! timeout = "10m"                  # per cell
//! extra_args = ["-n", "20"]        # passed to every nccl-tests binary
//!
//! [[variant]]
//! name = "tcpx"
//! gpudirect = "tcpx"               # srun --gpudirect=tcpx
//!
//! [[variant]]
//! name = "tcpx-ring"
//! gpudirect = "tcpx"
//! env = { NCCL_ALGO = "Ring" }
//!
//! [[variant]]
//! name = "none"
//! gpudirect = "none"
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::units::{nccl_size, parse_duration, parse_size};

/// The nccl-tests collectives (`<name>_perf`).
pub const COLLECTIVES: [&str; 11] = [
    "all_reduce",
    "all_gather",
    "broadcast",
    "reduce_scatter",
    "reduce",
    "alltoall",
    "alltoallv",
    "scatter",
    "gather",
    "sendrecv",
    "hypercube",
];

/// A matrix that cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MatrixError {
    /// The TOML is malformed or has an unknown key.
    #[error("{file}:{line}: {message}")]
    Toml {
        /// The file.
        file: String,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A value is out of range or unknown.
    #[error("{0}")]
    Invalid(String),
}

/// One environment variant.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    /// Name shown in plans, summaries and the history.
    pub name: String,
    /// The `--gpudirect` mode for the step (`none`, `auto` or a profile); none: no option.
    #[serde(default)]
    pub gpudirect: Option<String>,
    /// Extra variables for the ranks.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

impl Variant {
    /// Parses a `--variants` item: `tcpx`, `none`, `ring:tcpx:NCCL_ALGO=Ring` or
    /// `default::NCCL_ALGO=Tree` (name, `--gpudirect` mode, comma-separated variables).
    pub fn from_flag(text: &str) -> Result<Variant, MatrixError> {
        let mut parts = text.splitn(3, ':');
        let name = parts.next().unwrap_or_default().trim().to_string();
        if name.contains('=') {
            return Err(MatrixError::Invalid(format!(
                "variant `{name}` looks like a variable: write NAME:MODE:VAR=V,VAR=V (with --variant)"
            )));
        }
        if name.is_empty() {
            return Err(MatrixError::Invalid(format!(
                "variant `{text}`: give a name, e.g. `tcpx` or `ring:tcpx:NCCL_ALGO=Ring`"
            )));
        }
        let (gpudirect, vars) = match (parts.next(), parts.next()) {
            (None, _) => (Some(name.clone()), ""),
            (Some(mode), vars) => (
                (!mode.is_empty()).then(|| mode.to_string()),
                vars.unwrap_or(""),
            ),
        };
        let mut env = BTreeMap::new();
        for pair in vars.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').ok_or_else(|| {
                MatrixError::Invalid(format!("variant `{name}`: `{pair}` is not NAME=VALUE"))
            })?;
            env.insert(k.to_string(), v.to_string());
        }
        let variant = Variant {
            name,
            gpudirect,
            env,
        };
        variant.check()?;
        Ok(variant)
    }

    fn check(&self) -> Result<(), MatrixError> {
        for name in self.env.keys() {
            let valid = !name.is_empty()
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && !name.as_bytes()[0].is_ascii_digit();
            if !valid {
                return Err(MatrixError::Invalid(format!(
                    "variant `{}`: `{name}` is not a variable name",
                    self.name
                )));
            }
        }
        Ok(())
    }
}

/// The whole matrix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matrix {
    /// Collectives, by nccl-tests name.
    pub collectives: Vec<String>,
    /// Node counts.
    pub nodes: Vec<u32>,
    /// GPUs (ranks) per node.
    pub gpus_per_node: Vec<u32>,
    /// Smallest message, bytes.
    pub min_bytes: u64,
    /// Largest message, bytes.
    pub max_bytes: u64,
    /// Multiplication factor between sizes (`-f`).
    pub factor: u64,
    /// Per-cell timeout.
    pub timeout: Duration,
    /// Extra nccl-tests arguments.
    pub extra_args: Vec<String>,
    /// Environment variants; at least one.
    pub variants: Vec<Variant>,
}

/// One run of one nccl-tests binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    /// 1-based position in the plan.
    pub index: usize,
    /// The collective.
    pub collective: String,
    /// Nodes.
    pub nodes: u32,
    /// Ranks per node.
    pub gpus_per_node: u32,
    /// The variant.
    pub variant: Variant,
}

impl Cell {
    /// `all_reduce N=2 G=8 tcpx`.
    pub fn label(&self) -> String {
        format!(
            "{} N={} G={} {}",
            self.collective, self.nodes, self.gpus_per_node, self.variant.name
        )
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMatrix {
    collectives: Vec<String>,
    nodes: Vec<u32>,
    #[serde(default)]
    gpus_per_node: Option<Vec<u32>>,
    #[serde(default)]
    min_bytes: Option<String>,
    #[serde(default)]
    max_bytes: Option<String>,
    #[serde(default)]
    factor: Option<u64>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    extra_args: Vec<String>,
    #[serde(default)]
    variant: Vec<Variant>,
}

impl Matrix {
    /// The sizes a run of this matrix must show (from `min_bytes` to `max_bytes` by
    /// `factor`): what its checks expect.
    pub fn expected_sizes(&self) -> Vec<u64> {
        crate::checks::expected_sizes(self.min_bytes, self.max_bytes, Some(self.factor), None)
    }

    /// Reads a matrix file; `file` names it in errors.
    pub fn from_toml(text: &str, file: &str) -> Result<Matrix, MatrixError> {
        let raw: RawMatrix = toml::from_str(text).map_err(|e| MatrixError::Toml {
            file: file.to_string(),
            line: e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1)
                .unwrap_or(1),
            message: e.message().trim().to_string(),
        })?;
        let matrix = Matrix {
            collectives: raw.collectives,
            nodes: raw.nodes,
            gpus_per_node: raw.gpus_per_node.unwrap_or_else(|| vec![1]),
            min_bytes: parse_size(raw.min_bytes.as_deref().unwrap_or("8"))
                .map_err(|e| MatrixError::Invalid(format!("min_bytes: {e}")))?,
            max_bytes: parse_size(raw.max_bytes.as_deref().unwrap_or("8G"))
                .map_err(|e| MatrixError::Invalid(format!("max_bytes: {e}")))?,
            factor: raw.factor.unwrap_or(2),
            timeout: parse_duration(raw.timeout.as_deref().unwrap_or("10m"))
                .map_err(|e| MatrixError::Invalid(format!("timeout: {e}")))?,
            extra_args: raw.extra_args,
            variants: variant_default(raw.variant),
        };
        matrix.check().map_err(|e| match e {
            MatrixError::Invalid(m) => MatrixError::Invalid(format!("{file}: {m}")),
            other => other,
        })?;
        Ok(matrix)
    }

    /// Checks values a plan cannot use.
    pub fn check(&self) -> Result<(), MatrixError> {
        let invalid = |m: String| Err(MatrixError::Invalid(m));
        if self.collectives.is_empty() {
            return invalid("no collectives".into());
        }
        for c in &self.collectives {
            if !COLLECTIVES.contains(&c.as_str()) {
                return invalid(format!(
                    "unknown collective `{c}` (one of: {})",
                    COLLECTIVES.join(", ")
                ));
            }
        }
        if self.nodes.is_empty() || self.nodes.contains(&0) {
            return invalid("node counts must be at least 1".into());
        }
        if self.gpus_per_node.is_empty() || self.gpus_per_node.contains(&0) {
            return invalid("GPUs per node must be at least 1".into());
        }
        if self.min_bytes > self.max_bytes {
            return invalid(format!(
                "min size {} is above max size {}",
                nccl_size(self.min_bytes),
                nccl_size(self.max_bytes)
            ));
        }
        if self.factor < 2 {
            return invalid("the size factor must be at least 2".into());
        }
        let mut names = std::collections::BTreeSet::new();
        for v in &self.variants {
            v.check()?;
            if !names.insert(&v.name) {
                return invalid(format!("variant `{}` is listed twice", v.name));
            }
        }
        Ok(())
    }

    /// The cells, in run order: node count outermost (one allocation shape at a time),
    /// then GPUs per node, collective, variant (variants of one cell run back to back,
    /// so a comparison is not skewed by drift).
    pub fn plan(&self) -> Vec<Cell> {
        let mut cells = Vec::new();
        for &nodes in &self.nodes {
            for &gpus in &self.gpus_per_node {
                for collective in &self.collectives {
                    for variant in &self.variants {
                        cells.push(Cell {
                            index: cells.len() + 1,
                            collective: collective.clone(),
                            nodes,
                            gpus_per_node: gpus,
                            variant: variant.clone(),
                        });
                    }
                }
            }
        }
        cells
    }

    /// The nccl-tests size arguments.
    pub fn size_args(&self) -> Vec<String> {
        vec![
            "-b".into(),
            nccl_size(self.min_bytes),
            "-e".into(),
            nccl_size(self.max_bytes),
            "-f".into(),
            self.factor.to_string(),
        ]
    }
}

fn variant_default(variants: Vec<Variant>) -> Vec<Variant> {
    if variants.is_empty() {
        vec![Variant {
            name: "default".into(),
            gpudirect: None,
            env: BTreeMap::new(),
        }]
    } else {
        variants
    }
}

/// Builds the variant list from `--variants` items (none: one `default` variant).
pub fn variants_from_flags(items: &[String]) -> Result<Vec<Variant>, MatrixError> {
    let variants = items
        .iter()
        .map(|i| Variant::from_flag(i))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(variant_default(variants))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matrix_files_use_the_one_size_grammar() {
        let m = Matrix::from_toml(
            "collectives = [\"all_reduce\"]\nnodes = [2]\nmin_bytes = \"1 KiB\"\nmax_bytes = \"8GiB\"\ntimeout = \"1h30m\"\n",
            "m.toml",
        )
        .unwrap();
        assert_eq!((m.min_bytes, m.max_bytes), (1024, 8 << 30));
        assert_eq!(m.timeout, Duration::from_secs(5400));
        let err = Matrix::from_toml(
            "collectives = [\"all_reduce\"]\nnodes = [2]\nmax_bytes = \"8GB\"\n",
            "m.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("max_bytes") && err.contains("8GB"), "{err}");
    }

    #[test]
    fn variants_from_flags_read_name_mode_and_vars() {
        let v = Variant::from_flag("tcpx").unwrap();
        assert_eq!(
            (v.name.as_str(), v.gpudirect.as_deref()),
            ("tcpx", Some("tcpx"))
        );
        let v = Variant::from_flag("ring:tcpx:NCCL_ALGO=Ring,NCCL_PROTO=Simple").unwrap();
        assert_eq!(v.gpudirect.as_deref(), Some("tcpx"));
        assert_eq!(v.env["NCCL_PROTO"], "Simple");
        let v = Variant::from_flag("tree::NCCL_ALGO=Tree").unwrap();
        assert_eq!(v.gpudirect, None);
        assert!(Variant::from_flag("x:y:NOEQUALS").is_err());
        assert!(Variant::from_flag("x:y:A-B=1").is_err());
        assert!(Variant::from_flag("").is_err());
        assert!(Variant::from_flag("NCCL_SHM_DISABLE=1").is_err());
        assert_eq!(variants_from_flags(&[]).unwrap()[0].name, "default");
    }

    #[test]
    fn toml_matrix_plans_in_order() {
        let text = r#"
collectives = ["all_reduce", "all_gather"]
nodes = [2, 4]
gpus_per_node = [8]
max_bytes = "1G"
[[variant]]
name = "tcpx"
gpudirect = "tcpx"
[[variant]]
name = "ring"
gpudirect = "tcpx"
env = { NCCL_ALGO = "Ring" }
"#;
        let m = Matrix::from_toml(text, "m.toml").unwrap();
        let cells = m.plan();
        assert_eq!(cells.len(), 8);
        assert_eq!(cells[0].label(), "all_reduce N=2 G=8 tcpx");
        assert_eq!(cells[1].label(), "all_reduce N=2 G=8 ring");
        assert_eq!(cells[7].label(), "all_gather N=4 G=8 ring");
        assert_eq!(cells[7].index, 8);
        assert_eq!(m.size_args(), ["-b", "8", "-e", "1G", "-f", "2"]);
    }

    #[test]
    fn toml_errors_name_file_and_line() {
        let e = Matrix::from_toml(
            "collectives = [\"all_reduce\"]\nnodes = [1]\nmax_byte = \"1G\"\n",
            "m.toml",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("m.toml:3: unknown field `max_byte`"),
            "{e}"
        );
        let e = Matrix::from_toml("collectives = [\"allreduce\"]\nnodes = [1]\n", "m.toml")
            .unwrap_err();
        assert!(
            e.to_string().contains("unknown collective `allreduce`"),
            "{e}"
        );
        let e = Matrix::from_toml("collectives = [\"all_reduce\"]\nnodes = [0]\n", "m.toml")
            .unwrap_err();
        assert!(e.to_string().contains("at least 1"), "{e}");
        let e = Matrix::from_toml(
            "collectives = [\"all_reduce\"]\nnodes = [1]\nmin_bytes = \"2G\"\nmax_bytes = \"1G\"\n",
            "m.toml",
        )
        .unwrap_err();
        assert!(e.to_string().contains("above max"), "{e}");
    }
}
