//! The quarantine's Slurm calls (`scontrol`): the reservation's nodes read, the
//! reservation made, changed and deleted, and the nodes' comments read and written. Each
//! reader has a pure parser beside it, tested on Slurm's own output.
//!
//! Measured on Slurm 22.05: a reservation takes no `Comment=` there (23.02 added it), and
//! `scontrol update reservation ... nodes+=NODE` is refused ("The +=/-= notation is not
//! supported when updating nodes"), so the node list is always written whole.

use crate::slurm::{call, how, scontrol, stderr_of, succeeded, SlurmError};

/// Most nodes a reservation's hostlist is expanded to (a bound on bad input).
const MAX_NODES: usize = 100_000;

/// The nodes of reservation `name` (`scontrol show reservation NAME --oneliner`), or
/// `None` when there is no such reservation.
pub fn reservation_nodes(name: &str) -> Result<Option<Vec<String>>, SlurmError> {
    let job = scontrol(["show", "reservation", name, "--oneliner"]);
    let shown = job.command_line();
    let finished = call(&job, &shown)?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&finished.stdout),
        String::from_utf8_lossy(&finished.stderr)
    );
    if said.contains("not found") {
        return Ok(None);
    }
    succeeded(&shown, &finished)?;
    parse_reservation_nodes(&said)
        .map(Some)
        .map_err(|what| SlurmError::Failed {
            command: shown,
            what,
            how: how(finished.outcome),
            stderr: stderr_of(&finished),
        })
}

/// The nodes named by the `Nodes=` word of a `scontrol show reservation --oneliner` line
/// (pure); `Nodes=(null)` is none.
pub fn parse_reservation_nodes(text: &str) -> Result<Vec<String>, &'static str> {
    let expr = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("Nodes="))
        .ok_or("printed no Nodes=")?;
    if expr == "(null)" || expr.is_empty() {
        return Ok(Vec::new());
    }
    gpudirect_core::hostlist::expand_with_limit(expr, MAX_NODES)
        .map_err(|_| "printed a Nodes= list that is no hostlist")
}

/// `scontrol create reservation`: `name` on `nodes` from now on, for `users` only,
/// `flags=maint,ignore_jobs,flex` (made even where jobs run; jobs of its users may take
/// nodes outside it too, so a quarantined node can be paired with a healthy one).
pub fn create_reservation(
    name: &str,
    nodes: &[String],
    users: &[String],
) -> Result<(), SlurmError> {
    let job = scontrol([
        "create",
        "reservation",
        &format!("reservationname={name}"),
        "starttime=now",
        "duration=infinite",
        &format!("nodes={}", nodes.join(",")),
        "flags=maint,ignore_jobs,flex",
        &format!("users={}", users.join(",")),
    ]);
    let shown = job.command_line();
    let finished = call(&job, &shown)?;
    succeeded(&shown, &finished)
}

/// `scontrol update reservationname=NAME nodes=...`: the whole list.
pub fn set_reservation_nodes(name: &str, nodes: &[String]) -> Result<(), SlurmError> {
    let job = scontrol([
        "update",
        &format!("reservationname={name}"),
        &format!("nodes={}", nodes.join(",")),
    ]);
    let shown = job.command_line();
    let finished = call(&job, &shown)?;
    succeeded(&shown, &finished)
}

/// `scontrol delete reservationname=NAME`.
pub fn delete_reservation(name: &str) -> Result<(), SlurmError> {
    let job = scontrol(["delete", &format!("reservationname={name}")]);
    let shown = job.command_line();
    let finished = call(&job, &shown)?;
    succeeded(&shown, &finished)
}

/// Every node's comment (`scontrol show node`, the form of one field group a line, where
/// `Comment=` has a line of its own), as (node, comment).
pub fn node_comments() -> Result<Vec<(String, Option<String>)>, SlurmError> {
    let job = scontrol(["show", "node"]);
    let shown = job.command_line();
    let finished = call(&job, &shown)?;
    succeeded(&shown, &finished)?;
    Ok(parse_node_comments(&String::from_utf8_lossy(
        &finished.stdout,
    )))
}

/// The comment of each node of `scontrol show node` output (pure): a node starts at its
/// `NodeName=` line, its comment is the rest of its `Comment=` line.
pub fn parse_node_comments(text: &str) -> Vec<(String, Option<String>)> {
    let mut nodes: Vec<(String, Option<String>)> = Vec::new();
    for line in text.lines() {
        let line = line.trim_start();
        if let Some(rest) = line.strip_prefix("NodeName=") {
            let name = rest.split_whitespace().next().unwrap_or_default();
            nodes.push((name.to_string(), None));
        } else if let (Some(comment), Some(last)) =
            (line.strip_prefix("Comment="), nodes.last_mut())
        {
            let comment = comment.trim_end();
            last.1 = (!comment.is_empty() && comment != "(null)").then(|| comment.to_string());
        }
    }
    nodes
}

/// The comment of `node` alone.
pub fn node_comment(node: &str) -> Result<Option<String>, SlurmError> {
    let job = scontrol(["show", "node", node]);
    let shown = job.command_line();
    let finished = call(&job, &shown)?;
    succeeded(&shown, &finished)?;
    let nodes = parse_node_comments(&String::from_utf8_lossy(&finished.stdout));
    match nodes.into_iter().find(|(name, _)| name == node) {
        Some((_, comment)) => Ok(comment),
        None => Err(SlurmError::Failed {
            command: shown,
            what: "did not show the node",
            how: how(finished.outcome),
            stderr: stderr_of(&finished),
        }),
    }
}

/// `scontrol update nodename=NODE comment=TEXT` (an empty text clears it).
pub fn set_node_comment(node: &str, text: &str) -> Result<(), SlurmError> {
    let job = scontrol([
        "update",
        &format!("nodename={node}"),
        &format!("comment={text}"),
    ]);
    let shown = job.command_line();
    let finished = call(&job, &shown)?;
    succeeded(&shown, &finished)
}

/// `squeue -h -t PD -o "%i %r"`: the pending jobs and why each waits.
pub fn pending_jobs() -> Result<String, SlurmError> {
    let mut job = scontrol([]);
    job.program = "squeue".into();
    job.args = ["-h", "-t", "PD", "-o", "%i %r"].map(Into::into).to_vec();
    let shown = job.command_line();
    let finished = call(&job, &shown)?;
    succeeded(&shown, &finished)?;
    Ok(String::from_utf8_lossy(&finished.stdout).into_owned())
}

/// `sinfo -h -N -o "%N %T"`: every node and its state.
pub fn node_states() -> Result<String, SlurmError> {
    let mut job = scontrol([]);
    job.program = "sinfo".into();
    job.args = ["-h", "-N", "-o", "%N %T"].map(Into::into).to_vec();
    let shown = job.command_line();
    let finished = call(&job, &shown)?;
    succeeded(&shown, &finished)?;
    Ok(String::from_utf8_lossy(&finished.stdout).into_owned())
}
