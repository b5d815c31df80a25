//! `validate --drain`, `--retries`, `--resume` and `--on-drain` in Slurm: the plans of
//! [`gpudirect::validate::actions`] carried out by [`gpudirect::drain`], with the evidence
//! validate has.
//!
//! Each node's outcome is said on stderr as it happens and kept as a [`NodeAction`] for
//! `--json`; a drain or resume that did not take, or an `--on-drain` command that failed,
//! is an error there and raises the exit status to 2 (never silent).

use anyhow::{Context as _, Result};
use gpudirect::drain::{self, Sanction, Tool};
use gpudirect::history::History;
use gpudirect::noteln;
use gpudirect::slurm::NodeState;
use gpudirect::units::now_unix;
use gpudirect::validate::actions::{
    evidence, Candidate, EvidenceFile, HistoryPoint, NodeAction, PairRun, ResumePlan,
};

/// What the evidence needs besides the node.
pub(super) struct EvidenceSource<'a> {
    /// Drain or quarantine ([`sanction`]).
    pub sanction: &'a Sanction,
    /// `--on-drain CMD`.
    pub on_drain: Option<&'a str>,
    /// The history the runs are in.
    pub history: &'a History,
    /// The cluster.
    pub cluster: Option<&'a str>,
    /// The collective and size of the node's history to read (None: all).
    pub collective: Option<&'a str>,
    /// The size read.
    pub size_bytes: Option<u64>,
    /// The validation's pair runs.
    pub pairs: &'a [PairRun],
}

/// What `--drain` or `--quarantine` asks for (`None`: neither), the `[quarantine]`
/// settings read from the config when they matter.
pub(super) fn sanction(args: &super::ValidateArgs) -> Result<Option<Sanction>> {
    if !args.drains.acts() {
        return Ok(None);
    }
    let path = &args.profile.config.path;
    match gpudirect::quarantine::settings_from(path) {
        Ok(settings) => Ok(Sanction::chosen(
            args.drains.drain,
            args.drains.quarantine,
            &settings,
        )),
        Err(e) if args.drains.quarantine => Err(e)
            .with_context(|| format!("--quarantine: reading [quarantine] of {}", path.display())),
        // A plain --drain needs no config: it drains, and says why it did not look.
        Err(e) => {
            if path.exists() {
                noteln!(
                    "gpudirect validate: --drain drains: cannot read [quarantine] of {} ({e})",
                    path.display()
                );
            }
            Ok(Some(Sanction::Drain))
        }
    }
}

/// `--drain` or `--quarantine`: the plans carried out by [`Sanction::apply`], each newly
/// drained or quarantined node's `--on-drain` evidence made from the validation's pairs
/// and the node's history.
pub(super) fn apply_drains(candidates: &[Candidate], src: &EvidenceSource) -> Vec<NodeAction> {
    src.sanction
        .apply(Tool::Validate, candidates, src.on_drain, |c, reason| {
            evidence_for(c, reason, src)
        })
}

/// The `--on-drain` evidence for a node just drained with `reason`.
fn evidence_for(c: &Candidate, reason: &str, src: &EvidenceSource) -> EvidenceFile {
    let history = match src
        .history
        .node_history(&c.node, src.collective, src.size_bytes)
    {
        Ok(h) => HistoryPoint::last_of(h.runs),
        Err(e) => {
            noteln!(
                "gpudirect validate: the evidence for {} has no history: {e}",
                c.node
            );
            Vec::new()
        }
    };
    evidence(c, reason, src.pairs, history, src.cluster, now_unix())
}

/// `--resume`: the plans carried out by [`drain::apply_resumes`].
pub(super) fn apply_resumes(
    drained: &[(String, NodeState)],
    plans: &[ResumePlan],
) -> Vec<NodeAction> {
    drain::apply_resumes(Tool::Validate, drained, plans)
}
