//! From a parsed nccl-tests output and what we know of how it ran to the history's
//! [`NewRun`]. Shared by `gpudirect import` and `gpudirect run`, so an imported file and a
//! cell run here are recorded the same way.

use std::collections::BTreeMap;

use crate::checks::Verdict;
use crate::history::store::REPLAY_ENV;
use crate::history::{LaunchKind, NewRow, NewRun, Placement, RunProvenance};
use crate::nccl_output::{nccl_version_string, InferredFact, ParsedOutput};

/// Bumped when the parser changes what it extracts, so old runs can be re-parsed.
pub const PARSER_VERSION: u32 = 1;

/// The marker the nccl-tests stand-in prints first: its runs are replays, not measurements.
pub const STANDIN_MARKER: &str = "# nccl-tests STAND-IN replaying ";

/// How a run came to be, beyond what its output says.
#[derive(Debug, Clone, Default)]
pub struct RunContext {
    /// Unix seconds.
    pub started_at: Option<i64>,
    /// Unix seconds.
    pub finished_at: Option<i64>,
    /// Cluster name.
    pub cluster: Option<String>,
    /// Slurm job id.
    pub job_id: Option<String>,
    /// Slurm step id.
    pub step_id: Option<String>,
    /// The nodes it ran on (empty: taken from the output's rank lines).
    pub nodes: Vec<String>,
    /// GPUs (ranks) per node.
    pub gpus_per_node: Option<u32>,
    /// srun, mpirun, local or import.
    pub launcher: LaunchKind,
    /// The command line.
    pub command_line: Option<String>,
    /// The nccl-tests binary.
    pub binary_path: Option<String>,
    /// The environment variant's name.
    pub variant: Option<String>,
    /// A name the user gave the run (`--label`).
    pub label: Option<String>,
    /// The variables that mattered.
    pub env: BTreeMap<String, String>,
    /// For imports: the file's absolute path (duplicate detection).
    pub source_path: Option<String>,
    /// The exit code, when known.
    pub exit_code: Option<i32>,
    /// The collective, when the output does not say (older formats).
    pub collective: Option<String>,
    /// The node's line rate in GB/s, from the profile the run applied.
    pub line_rate_gbps: Option<f64>,
    /// The command recording it.
    pub tool: crate::history::Tool,
}

impl RunContext {
    /// The context of a run in this job: its cluster (`cluster`, else
    /// `$SLURM_CLUSTER_NAME`) and job id (`$SLURM_JOB_ID`), the rest default.
    pub fn for_job(cluster: Option<&str>) -> RunContext {
        RunContext {
            cluster: crate::slurm::cluster_name(cluster),
            job_id: crate::slurm::job_id(),
            ..RunContext::default()
        }
    }
}

/// The recording a stand-in replayed, if this output came from one.
pub fn standin_recording(raw: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(&raw[..raw.len().min(4096)]);
    text.lines()
        .find_map(|l| l.strip_prefix(STANDIN_MARKER))
        .map(|rest| {
            rest.split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string()
        })
}

/// The network plugin NCCL loaded (`Using network X`), with the versions plugins logged
/// of themselves: `GPUDirectTCPX_v7 (FasTrak 1.0.17)`; `None` when the output shows none.
pub fn net_plugin(parsed: &ParsedOutput) -> Option<String> {
    let loaded = parsed.debug.network_plugin();
    let versions: Vec<String> = parsed
        .debug
        .plugin_versions
        .iter()
        .filter(|v| Some(v.name.as_str()) != loaded)
        .map(|v| format!("{} {}", v.name, v.version))
        .collect();
    match (loaded, versions.is_empty()) {
        (Some(name), true) => Some(name.to_string()),
        (Some(name), false) => Some(format!("{name} ({})", versions.join(", "))),
        (None, false) => Some(versions.join(", ")),
        (None, true) => None,
    }
}

/// One line per fact the parser inferred, kept with the run and shown by `import` and
/// `show`: `inferred 8 ranks: only 8 ranks fit busbw/algbw in every row (...)`.
pub fn inference_notes(parsed: &ParsedOutput) -> Vec<String> {
    parsed
        .inferences
        .iter()
        .filter_map(|i| {
            let value = i.value.as_deref()?;
            let what = match i.fact {
                InferredFact::Collective => format!("collective {value}"),
                InferredFact::Ranks => format!("{value} ranks"),
            };
            Some(format!("inferred {what}: {}", i.basis))
        })
        .collect()
}

/// Builds the history record.
pub fn new_run(parsed: &ParsedOutput, raw: &[u8], ctx: RunContext, verdict: &Verdict) -> NewRun {
    let mut nodes = ctx.nodes;
    if nodes.is_empty() {
        for rank in &parsed.ranks {
            if let Some(host) = &rank.host {
                if !nodes.contains(host) {
                    nodes.push(host.clone());
                }
            }
        }
    }
    let mut env = ctx.env;
    if let Some(recording) = standin_recording(raw) {
        // Kept with the run so no report can present a replay as a measurement.
        env.insert(REPLAY_ENV.into(), recording);
    }
    // Several headers: several worlds in one output (only a world's rank 0 prints one), each
    // process alone or whole runs appended. A run's ranks are one world's, not their sum.
    let worlds = parsed.parameter_lines.max(1);
    let total_ranks = parsed
        .nranks()
        .map(|t| if t % worlds == 0 { t / worlds } else { t });
    let gpus_per_node = ctx.gpus_per_node.or_else(|| {
        let n = u32::try_from(nodes.len()).ok().filter(|&n| n > 0)?;
        total_ranks.map(|t| t / n)
    });
    let mut rows = Vec::new();
    for row in &parsed.rows {
        let (algorithm, protocol) = parsed.tuning_for(row.size_bytes).unzip();
        for (placement, data) in [
            (Placement::Out, &row.out_of_place),
            (Placement::In, &row.in_place),
        ] {
            let Some(data) = data else { continue };
            rows.push(NewRow {
                size_bytes: row.size_bytes,
                count: row.count.unwrap_or(0),
                dtype: row.dtype.clone().unwrap_or_default(),
                redop: row.redop.clone().unwrap_or_default(),
                root: row.root,
                placement,
                time_us: data.time_us.unwrap_or(f64::NAN),
                algbw: data.algbw_gbps.unwrap_or(f64::NAN),
                busbw: data.busbw_gbps.unwrap_or(f64::NAN),
                wrong: data.wrong,
                algorithm: algorithm.clone(),
                protocol: protocol.clone(),
            });
        }
    }
    let collective = parsed
        .collective
        .clone()
        .or(ctx.collective)
        .unwrap_or_else(|| "unknown".into());
    NewRun {
        tool: ctx.tool,
        started_at: ctx.started_at,
        finished_at: ctx.finished_at,
        cluster: ctx.cluster,
        job_id: ctx.job_id,
        step_id: ctx.step_id,
        nodelist: (!nodes.is_empty()).then(|| gpudirect_core::hostlist::compress(&nodes)),
        node_count: u32::try_from(nodes.len()).ok().filter(|&n| n > 0),
        nodes,
        gpus_per_node,
        total_ranks,
        collective,
        variant: ctx.variant,
        label: ctx.label,
        provenance: RunProvenance {
            command_line: ctx.command_line,
            binary_path: ctx.binary_path,
            env,
            nccl_tests_version: parsed.nccl_tests_version.clone(),
            // rccl-tests (AMD's fork) names its library: `RCCL 2.28.3`, on `ROCm 7.12.0.2`, so
            // that no listing calls them NCCL and CUDA.
            nccl_version: match parsed.library.as_deref() {
                Some(lib) => parsed
                    .rccl_version
                    .clone()
                    .or_else(|| parsed.nccl_library_version.map(nccl_version_string))
                    .map(|v| format!("{lib} {v}")),
                None => parsed
                    .debug
                    .nccl_version
                    .clone()
                    .or_else(|| parsed.nccl_library_version.map(nccl_version_string)),
            },
            cuda_version: match (&parsed.rocm_version, &parsed.hip_version) {
                (Some(rocm), _) => Some(format!("ROCm {rocm}")),
                (None, Some(hip)) => Some(format!("HIP {hip}")),
                (None, None) => parsed.debug.cuda_version.clone(),
            },
            cuda_driver: parsed.debug.cuda_driver_version,
            net_plugin: net_plugin(parsed),
            notes: inference_notes(parsed),
        },
        line_rate_gbps: ctx.line_rate_gbps,
        launcher: ctx.launcher,
        source_path: ctx.source_path,
        exit_code: ctx.exit_code,
        status: verdict.status,
        transport: verdict.transport.clone(),
        avg_busbw: parsed.avg_busbw.as_ref().and_then(|a| a.value),
        failures: verdict.findings.iter().map(|f| f.message.clone()).collect(),
        raw_output: raw.to_vec(),
        parser_version: PARSER_VERSION,
        rows,
        node_results: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::{judge, Expectations};
    use crate::history::RunStatus;
    use crate::nccl_output::parse;

    #[test]
    fn maps_a_two_host_run() {
        let path = format!(
            "{}/../tests/fixtures/nccl-tests/h200x2-twohost/all_reduce_2host_socket.txt",
            env!("CARGO_MANIFEST_DIR")
        );
        let raw = std::fs::read(path).unwrap();
        let parsed = parse(&raw);
        let verdict = judge(&parsed, None, Some(0), &Expectations::default());
        let run = new_run(&parsed, &raw, RunContext::default(), &verdict);
        assert_eq!(run.collective, "all_reduce");
        assert_eq!(run.nodes, ["a3h-001", "a3h-002"]);
        assert_eq!(run.nodelist.as_deref(), Some("a3h-[001-002]"));
        assert_eq!(run.total_ranks, Some(2));
        assert_eq!(run.gpus_per_node, Some(1));
        assert_eq!(run.status, RunStatus::Ok);
        assert_eq!(run.transport.as_deref(), Some("Socket"));
        assert_eq!(run.rows.len(), 2 * parsed.rows.len());
        assert_eq!(run.provenance.nccl_version.as_deref(), Some("2.28.9"));
        assert!(!run.provenance.env.contains_key("GPUDIRECT_STANDIN_REPLAY"));
    }

    /// Two processes that each ran the whole test alone, their outputs appended: the run is
    /// failed, and its ranks are one world's (2 GPUs), not the 4 rank lines of both.
    #[test]
    fn a_run_of_separate_worlds_counts_one_worlds_ranks() {
        let one = std::fs::read_to_string(format!(
            "{}/../tests/fixtures/nccl-tests/h200x2-nvlink/all_reduce_g2.txt",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let both = format!("{one}{one}");
        let parsed = parse(both.as_bytes());
        assert_eq!(parsed.nranks(), Some(4));
        let verdict = judge(&parsed, None, Some(0), &Expectations::default());
        let run = new_run(&parsed, both.as_bytes(), RunContext::default(), &verdict);
        assert_eq!(run.status, RunStatus::Failed);
        assert_eq!(run.total_ranks, Some(2));
        let alone = parse(one.as_bytes());
        let run = new_run(&alone, one.as_bytes(), RunContext::default(), &verdict);
        assert_eq!(run.total_ranks, Some(2));
    }

    #[test]
    fn marks_standin_replays() {
        let raw = b"# nccl-tests STAND-IN replaying h200x2-nvlink/all_reduce_g2.txt (recorded on 2xH200)\n# nThread 1\n";
        assert_eq!(
            standin_recording(raw).as_deref(),
            Some("h200x2-nvlink/all_reduce_g2.txt")
        );
        assert_eq!(standin_recording(b"# nThread 1\n"), None);
    }
}
