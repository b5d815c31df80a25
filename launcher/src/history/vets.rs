//! `gpudirect vet`'s rows: one per vet of a job's nodes ([`History::record_vet`]), listed
//! newest first by `gpudirect history --vets` ([`History::list_vets`]).

use rusqlite::params;
use serde::Serialize;

use super::error::HistoryError;
use super::store::History;

/// A vet to record.
#[derive(Debug, Clone)]
pub struct NewVet {
    /// When it ran, unix seconds.
    pub at: i64,
    /// The cluster.
    pub cluster: Option<String>,
    /// The job whose nodes it vetted.
    pub job_id: Option<String>,
    /// `nccl` or `rails`.
    pub test: String,
    /// Nodes the job held.
    pub allocated: usize,
    /// Good, bad and unchecked nodes.
    pub good: usize,
    /// Bad nodes.
    pub bad: usize,
    /// Nodes it could not judge within its budget.
    pub unchecked: usize,
    /// Good nodes the job needed.
    pub need: usize,
    /// What it decided (`all_good`, `go_on`, `shrink`, `requeue`, `too_few`).
    pub decision: String,
    /// The good nodes, as a hostlist.
    pub good_nodes: String,
    /// The bad nodes, as a hostlist.
    pub bad_nodes: String,
    /// The whole report.
    pub report_json: String,
}

/// A recorded vet, as `history --vets` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VetSummary {
    /// Its id.
    pub id: i64,
    /// When it ran, unix seconds.
    pub at: i64,
    /// The cluster.
    pub cluster: Option<String>,
    /// The job.
    pub job_id: Option<String>,
    /// `nccl` or `rails`.
    pub test: String,
    /// Nodes the job held.
    pub allocated: i64,
    /// Good nodes.
    pub good: i64,
    /// Bad nodes.
    pub bad: i64,
    /// Unchecked nodes.
    pub unchecked: i64,
    /// Good nodes needed.
    pub need: i64,
    /// What it decided.
    pub decision: String,
    /// The good nodes.
    pub good_nodes: String,
    /// The bad nodes.
    pub bad_nodes: String,
}

impl History {
    /// Records a vet; returns its id.
    pub fn record_vet(&mut self, vet: &NewVet) -> Result<i64, HistoryError> {
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.conn
            .execute(
                "INSERT INTO vets (at, cluster, job_id, test, allocated, good, bad, unchecked, need, \
                 decision, good_nodes, bad_nodes, report_json) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                params![
                    vet.at,
                    vet.cluster,
                    vet.job_id,
                    vet.test,
                    count(vet.allocated),
                    count(vet.good),
                    count(vet.bad),
                    count(vet.unchecked),
                    count(vet.need),
                    vet.decision,
                    vet.good_nodes,
                    vet.bad_nodes,
                    vet.report_json,
                ],
            )
            .map_err(self.err("recording a vet"))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// The newest `limit` vets (all without one), newest first.
    pub fn list_vets(&self, limit: Option<u32>) -> Result<Vec<VetSummary>, HistoryError> {
        let mut st = self
            .conn
            .prepare(
                "SELECT id, at, cluster, job_id, test, allocated, good, bad, unchecked, need, \
                 decision, good_nodes, bad_nodes FROM vets ORDER BY at DESC, id DESC LIMIT ?1",
            )
            .map_err(self.err("listing vets"))?;
        let rows = st
            .query_map(params![limit.map_or(-1, i64::from)], |r| {
                Ok(VetSummary {
                    id: r.get(0)?,
                    at: r.get(1)?,
                    cluster: r.get(2)?,
                    job_id: r.get(3)?,
                    test: r.get(4)?,
                    allocated: r.get(5)?,
                    good: r.get(6)?,
                    bad: r.get(7)?,
                    unchecked: r.get(8)?,
                    need: r.get(9)?,
                    decision: r.get(10)?,
                    good_nodes: r.get(11)?,
                    bad_nodes: r.get(12)?,
                })
            })
            .map_err(self.err("listing vets"))?;
        rows.collect::<Result<_, _>>()
            .map_err(self.err("listing vets"))
    }

    /// The report of vet `id`, as recorded (JSON).
    pub fn vet_report(&self, id: i64) -> Result<Option<String>, HistoryError> {
        let mut st = self
            .conn
            .prepare("SELECT report_json FROM vets WHERE id = ?1")
            .map_err(self.err("reading a vet"))?;
        let mut rows = st
            .query_map(params![id], |r| r.get(0))
            .map_err(self.err("reading a vet"))?;
        rows.next().transpose().map_err(self.err("reading a vet"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vet_is_recorded_and_listed_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = History::open(&dir.path().join("h.db")).unwrap();
        let vet = |at: i64, bad: &str| NewVet {
            at,
            cluster: Some("c".into()),
            job_id: Some("7".into()),
            test: "rails".into(),
            allocated: 6,
            good: 5,
            bad: 1,
            unchecked: 0,
            need: 5,
            decision: "go_on".into(),
            good_nodes: "node[1-2,4-6]".into(),
            bad_nodes: bad.into(),
            report_json: "{}".into(),
        };
        let first = h.record_vet(&vet(100, "node3")).unwrap();
        let second = h.record_vet(&vet(200, "node4")).unwrap();
        let listed = h.list_vets(None).unwrap();
        assert_eq!(
            listed.iter().map(|v| v.id).collect::<Vec<_>>(),
            [second, first]
        );
        assert_eq!(listed[1].bad_nodes, "node3");
        assert_eq!(h.list_vets(Some(1)).unwrap().len(), 1);
        assert_eq!(h.vet_report(first).unwrap().as_deref(), Some("{}"));
        assert_eq!(h.vet_report(999).unwrap(), None);
    }
}
