//! How one cell of the matrix is started: the srun, mpirun or direct command line, its
//! environment, and where its JSON report goes. Pure apart from finding the binary and
//! writing an mpirun hostfile.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::matrix::{Cell, Matrix};
use crate::runner::Job;

/// Variables every cell gets so that the transport NCCL used is in its output.
pub const DEBUG_ENV: [(&str, &str); 2] =
    [("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "INIT,NET")];

/// For `--launcher local`: an nccl-tests built with `MPI=1` and started alone is an Open MPI
/// singleton, which forks a helper daemon through ssh/rsh unless told not to; where neither
/// is on PATH (slurmd's health check, a bare GPU host) MPI_Init then aborts. One process
/// never spawns others, so the singleton needs no daemon. Builds without MPI ignore it.
pub const SINGLETON_ENV: (&str, &str) = ("OMPI_MCA_ess_singleton_isolated", "1");

/// How ranks are started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Launcher {
    /// One job step per cell (`srun --nodes=N --ntasks-per-node=G`), inside an allocation.
    Srun,
    /// `mpirun` with a hostfile made from the allocation's nodes.
    Mpirun,
    /// The binary alone on this host, one process driving G GPUs (`-g G`); no Slurm.
    Local,
}

/// Everything about launching that is the same for every cell.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// srun, mpirun or local.
    pub launcher: Launcher,
    /// Where the `*_perf` binaries are.
    pub nccl_tests_dir: PathBuf,
    /// `srun --mpi=...` (e.g. `pmix`); `None` leaves Slurm's default.
    pub mpi: Option<String>,
    /// The allocation's nodes, in order (mpirun's hostfile takes the first N).
    pub nodes: Vec<String>,
    /// Folder for JSON reports and hostfiles; `None` runs without `-J`.
    pub work_dir: Option<PathBuf>,
    /// Per-cell limit.
    pub timeout: Duration,
    /// SIGTERM to SIGKILL.
    pub grace: Duration,
    /// Whether we run as root (mpirun then needs Open MPI's consent variables).
    pub as_root: bool,
    /// GPUs each srun/mpirun process drives (`-g`); ranks per node = G / this. 1 is the
    /// usual one-process-per-GPU; `--launcher local` always drives all G from one process.
    pub gpus_per_process: u32,
    /// `srun --exact`: steps take only what they ask for, so several can run at once on
    /// disjoint nodes of one allocation (validation rounds).
    pub exact: bool,
    /// The start-up deadline: a cell that shows no sign of NCCL (`Init COMPLETE`, or
    /// nccl-tests' column header) by then is stopped and run once more as its own step
    /// (`cell::exec`, issue #45); `None` waits for the whole `timeout` and judges a cell
    /// stopped before NCCL as any stopped cell (health's quick test: one local process, no
    /// launch to fail).
    pub startup_timeout: Option<Duration>,
}

/// The start-up deadline `--startup-timeout` gives by default: srun's PMIx wire-up and
/// NCCL's init take seconds on a pair of nodes; a launch that has not reached NCCL in a
/// minute is hung.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// A cell that cannot be launched as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    /// No binary for the collective.
    #[error("no {collective}_perf in {dir} (looked for {tried}); build nccl-tests there (`make MPI=1`) or pass --nccl-tests-dir")]
    NoBinary {
        /// The collective.
        collective: String,
        /// The folder.
        dir: String,
        /// The names tried.
        tried: String,
    },
    /// The cell needs more nodes than there are.
    #[error("cell needs {needed} nodes but the allocation has {have}")]
    TooFewNodes {
        /// Nodes the cell needs.
        needed: u32,
        /// Nodes we have.
        have: usize,
    },
    /// `--launcher local` with more than one node.
    #[error("--launcher local runs on this host only: use -N 1 (the cell asks for {0} nodes)")]
    LocalMultiNode(u32),
    /// The hostfile could not be written.
    #[error("cannot write the hostfile {path}: {message}")]
    Hostfile {
        /// The file.
        path: String,
        /// The cause.
        message: String,
    },
}

/// A fresh work folder for `-J` reports and hostfiles in `$TMPDIR`: `PREFIX` and random
/// letters, made by this process with mode 0700 (`mkdtemp`), and removed when dropped. Never
/// a folder that exists already: a name made of the pid could be one another user made
/// first, holding links where the reports go (security review S4).
pub fn work_dir(prefix: &str) -> std::io::Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .prefix(prefix)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
}

/// The binary for a collective: `<dir>/<c>_perf`, `<c>_perf_mpi`, or under `build/`.
pub fn find_binary(dir: &Path, collective: &str) -> Result<PathBuf, LaunchError> {
    let names = [
        format!("{collective}_perf"),
        format!("{collective}_perf_mpi"),
        format!("build/{collective}_perf"),
        format!("build/{collective}_perf_mpi"),
    ];
    names
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.is_file())
        .ok_or_else(|| LaunchError::NoBinary {
            collective: collective.to_string(),
            dir: dir.display().to_string(),
            tried: names.join(", "),
        })
}

/// A prepared cell: the job and where its JSON report will be.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// What to run.
    pub job: Job,
    /// The `-J` file, when asked for.
    pub json_path: Option<PathBuf>,
    /// The binary.
    pub binary: PathBuf,
    /// The start-up deadline ([`LaunchOptions::startup_timeout`]).
    pub startup_timeout: Option<Duration>,
}

fn os(s: impl Into<OsString>) -> OsString {
    s.into()
}

/// The Open MPI variables that keep a step's own MPI traffic on `control_nic` (issue #45):
/// with a data NIC down on one node, Open MPI's TCP transport and out-of-band channel pick
/// interfaces themselves, across the data rails, and on the lent GPU host 1 of 3
/// `srun --mpi=pmix` nccl-tests steps hung before NCCL started; with these two set to the
/// control NIC, 0 of 6 (docs/results/gpu-box-hang-and-nic-down.md; PMIx's
/// `ptl_tcp_if_include` changed nothing more there). A variable is left out where the
/// user set it or its `_exclude` twin (`is_set`): Open MPI refuses both at once.
fn launch_pinning(control_nic: &str, is_set: impl Fn(&str) -> bool) -> Vec<(String, String)> {
    ["btl_tcp", "oob_tcp"]
        .iter()
        .filter(|framework| {
            !is_set(&format!("OMPI_MCA_{framework}_if_include"))
                && !is_set(&format!("OMPI_MCA_{framework}_if_exclude"))
        })
        .map(|framework| {
            (
                format!("OMPI_MCA_{framework}_if_include"),
                control_nic.to_string(),
            )
        })
        .collect()
}

/// The control NIC for a step whose data transport is bound elsewhere (`--test rails`: the
/// rail under test, [`crate::validate::rails::transport_env`]): [`launch_pinning`]'s
/// out-of-band variable alone, by the same rule, so that only the launch's channel is kept
/// off the rails. `None` where there is no control NIC or the user chose.
pub fn oob_pin(control_nic: Option<String>, user_set: impl Fn(&str) -> bool) -> Option<String> {
    launch_pinning(&control_nic?, user_set)
        .into_iter()
        .find(|(name, _)| name == "OMPI_MCA_oob_tcp_if_include")
        .map(|(_, nic)| nic)
}

/// A variant's environment `env` with the launch pinned to the control NIC (issue #45),
/// where the profile names one (`control_nic`, from [`crate::profile::Choice::control_nic`]):
/// the variables of [`launch_pinning`] that neither the user's environment (`user_set`) nor
/// `env` itself already sets, or sets the `_exclude` twin of. The one rule validate, vet,
/// run and tune follow. Says on stderr what was pinned (naming `tool`) and returns it;
/// `None` where nothing was.
pub fn pin_launch(
    env: &mut BTreeMap<String, String>,
    control_nic: Option<&str>,
    tool: &str,
    user_set: impl Fn(&str) -> bool,
) -> Option<String> {
    let nic = control_nic?;
    let pins = launch_pinning(nic, |name| user_set(name) || env.contains_key(name));
    if pins.is_empty() {
        return None;
    }
    let names: Vec<&str> = pins.iter().map(|(k, _)| k.as_str()).collect();
    let note = format!(
        "gpudirect {tool}: Open MPI's own TCP traffic kept on the control NIC {nic} ({}={nic})",
        names.join(", ")
    );
    env.extend(pins);
    crate::noteln!("{note}");
    Some(note)
}

/// Builds the command for `cell`. `json` asks for a `-J` report.
pub fn prepare(
    cell: &Cell,
    matrix: &Matrix,
    opts: &LaunchOptions,
    json: bool,
) -> Result<Prepared, LaunchError> {
    let binary = find_binary(&opts.nccl_tests_dir, &cell.collective)?;
    let json_path = match (&opts.work_dir, json) {
        (Some(dir), true) => Some(dir.join(format!("cell-{:03}.json", cell.index))),
        _ => None,
    };
    let mut test_args: Vec<OsString> = matrix.size_args().into_iter().map(os).collect();
    let gpus_per_process = match opts.launcher {
        Launcher::Local => cell.gpus_per_node,
        Launcher::Srun | Launcher::Mpirun => {
            opts.gpus_per_process.clamp(1, cell.gpus_per_node.max(1))
        }
    };
    let processes_per_node = (cell.gpus_per_node / gpus_per_process).max(1);
    test_args.extend([os("-g"), os(gpus_per_process.to_string())]);
    test_args.extend(matrix.extra_args.iter().map(os));
    if let Some(path) = &json_path {
        test_args.extend([os("-J"), os(path.clone())]);
    }

    let mut env: Vec<(OsString, OsString)> =
        DEBUG_ENV.iter().map(|(k, v)| (os(*k), os(*v))).collect();
    env.extend(cell.variant.env.iter().map(|(k, v)| (os(k), os(v))));

    let (program, args) = match opts.launcher {
        Launcher::Local => {
            if cell.nodes != 1 {
                return Err(LaunchError::LocalMultiNode(cell.nodes));
            }
            let (name, value) = SINGLETON_ENV;
            if std::env::var_os(name).is_none() && !env.iter().any(|(k, _)| k == name) {
                env.push((os(name), os(value)));
            }
            (os(binary.clone()), test_args)
        }
        Launcher::Srun => {
            let mut args = vec![
                os(format!("--nodes={}", cell.nodes)),
                os(format!("--ntasks-per-node={processes_per_node}")),
                os("--kill-on-bad-exit=1"),
            ];
            // Name the nodes, so the history knows where each cell ran.
            if let Some(nodes) = cell_nodes(opts, cell) {
                args.push(os(format!(
                    "--nodelist={}",
                    gpudirect_core::hostlist::compress(nodes)
                )));
            }
            if let Some(mpi) = &opts.mpi {
                args.push(os(format!("--mpi={mpi}")));
            }
            if let Some(mode) = &cell.variant.gpudirect {
                args.push(os(format!("--gpudirect={mode}")));
            }
            args.push(os(binary.clone()));
            args.extend(test_args);
            (os("srun"), args)
        }
        Launcher::Mpirun => {
            let needed = cell.nodes as usize;
            if opts.nodes.len() < needed {
                return Err(LaunchError::TooFewNodes {
                    needed: cell.nodes,
                    have: opts.nodes.len(),
                });
            }
            let hostfile = write_hostfile(opts, cell)?;
            let mut args = vec![
                os("-np"),
                os((cell.nodes * processes_per_node).to_string()),
                os("--hostfile"),
                os(hostfile),
                os("--map-by"),
                os(format!("ppr:{processes_per_node}:node")),
            ];
            args.extend(mpirun_forward(
                DEBUG_ENV
                    .iter()
                    .map(|(k, _)| *k)
                    .chain(cell.variant.env.keys().map(String::as_str)),
            ));
            args.push(os(binary.clone()));
            args.extend(test_args);
            if let Some(mode) = &cell.variant.gpudirect {
                // mpirun starts its daemons with srun inside the allocation: the plugin
                // applies the mode to them, and the ranks inherit their environment.
                env.push((os("SLURM_GPUDIRECT"), os(mode)));
            }
            if opts.as_root {
                env.extend(MPIRUN_ROOT_CONSENT.iter().map(|(k, v)| (os(*k), os(*v))));
            }
            (os("mpirun"), args)
        }
    };
    Ok(Prepared {
        job: Job {
            program,
            args,
            env,
            cwd: None,
            timeout: opts.timeout,
            grace: opts.grace,
            user: None,
        },
        json_path,
        binary,
        startup_timeout: opts.startup_timeout,
    })
}

/// Open MPI's consent to start as root, which mpirun asks of an admin's run (4.1's and 5's
/// read the same two variables).
pub const MPIRUN_ROOT_CONSENT: [(&str, &str); 2] = [
    ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
    ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
];

/// mpirun's `-x NAME` for each of `names`: those variables of its environment reach the
/// ranks.
pub fn mpirun_forward<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<OsString> {
    names
        .into_iter()
        .flat_map(|name| [OsString::from("-x"), OsString::from(name)])
        .collect()
}

/// The nodes a cell runs on: the first N of the allocation, when it is known and large
/// enough.
pub fn cell_nodes<'a>(opts: &'a LaunchOptions, cell: &Cell) -> Option<&'a [String]> {
    opts.nodes.get(..cell.nodes as usize)
}

fn write_hostfile(opts: &LaunchOptions, cell: &Cell) -> Result<PathBuf, LaunchError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    // Only in the command's own work folder (mkdtemp, 0700): never a shared folder such as
    // /tmp, where another user could plant a link (security review S4).
    let Some(dir) = &opts.work_dir else {
        return Err(LaunchError::Hostfile {
            path: format!("hostfile-{:03}", cell.index),
            message: "no work folder to write it in".into(),
        });
    };
    let path = dir.join(format!("hostfile-{:03}", cell.index));
    let text: String = opts
        .nodes
        .iter()
        .take(cell.nodes as usize)
        .map(|n| format!("{n} slots={}\n", cell.gpus_per_node))
        .collect();
    let failed = |e: std::io::Error| LaunchError::Hostfile {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    // A cell run again writes its hostfile anew; what is there is never written through.
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(failed(e)),
        _ => {}
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(failed)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::{variants_from_flags, Matrix};

    /// Open MPI's TCP and out-of-band channel on the control NIC, unless the user chose.
    #[test]
    fn the_launch_is_pinned_to_the_control_nic_unless_the_user_chose() {
        let pins = launch_pinning("eth0", |_| false);
        assert_eq!(
            pins,
            [
                (
                    "OMPI_MCA_btl_tcp_if_include".to_string(),
                    "eth0".to_string()
                ),
                (
                    "OMPI_MCA_oob_tcp_if_include".to_string(),
                    "eth0".to_string()
                ),
            ]
        );
        // The user's exclude (Open MPI refuses include and exclude together) or include.
        let pins = launch_pinning("eth0", |name| name == "OMPI_MCA_btl_tcp_if_exclude");
        assert_eq!(
            pins,
            [(
                "OMPI_MCA_oob_tcp_if_include".to_string(),
                "eth0".to_string()
            )]
        );
        assert!(launch_pinning("eth0", |name| name.ends_with("_include")).is_empty());
    }

    /// validate, vet, run and tune pin alike: a variant's own include or exclude counts as
    /// the user's choice, and the note names what was pinned.
    #[test]
    fn a_variants_own_choice_is_kept_and_the_note_names_the_pins() {
        let mut env = BTreeMap::from([(
            "OMPI_MCA_oob_tcp_if_exclude".to_string(),
            "eth3".to_string(),
        )]);
        let note = pin_launch(&mut env, Some("eth0"), "run", |_| false).unwrap();
        assert_eq!(
            note,
            "gpudirect run: Open MPI's own TCP traffic kept on the control NIC eth0 \
             (OMPI_MCA_btl_tcp_if_include=eth0)"
        );
        assert_eq!(
            env.get("OMPI_MCA_btl_tcp_if_include").map(String::as_str),
            Some("eth0")
        );
        assert!(!env.contains_key("OMPI_MCA_oob_tcp_if_include"));
        // Everything chosen already: nothing pinned, nothing said.
        let mut chosen = env.clone();
        assert_eq!(
            pin_launch(&mut chosen, Some("eth0"), "run", |_| false),
            None
        );
        // No control NIC: nothing.
        assert_eq!(pin_launch(&mut chosen, None, "run", |_| false), None);
        assert_eq!(chosen, env);
    }

    fn setup(launcher: Launcher) -> (Matrix, LaunchOptions, tempfile::TempDir) {
        let dir = tempfile::Builder::new()
            .prefix("gd-launch-")
            .tempdir()
            .unwrap();
        std::fs::write(dir.path().join("all_reduce_perf"), "").unwrap();
        let matrix = Matrix {
            collectives: vec!["all_reduce".into()],
            nodes: vec![2],
            gpus_per_node: vec![8],
            min_bytes: 8,
            max_bytes: 1 << 30,
            factor: 2,
            timeout: Duration::from_secs(60),
            extra_args: vec!["-n".into(), "20".into()],
            variants: variants_from_flags(&["ring:tcpx:NCCL_ALGO=Ring".into()]).unwrap(),
        };
        let opts = LaunchOptions {
            launcher,
            nccl_tests_dir: dir.path().to_path_buf(),
            mpi: Some("pmix".into()),
            nodes: vec!["node1".into(), "node2".into(), "node3".into()],
            work_dir: Some(dir.path().to_path_buf()),
            timeout: Duration::from_secs(60),
            grace: Duration::from_secs(5),
            as_root: true,
            gpus_per_process: 1,
            exact: false,
            startup_timeout: None,
        };
        (matrix, opts, dir)
    }

    fn words(job: &Job) -> Vec<String> {
        job.args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn srun_cells_are_job_steps_with_the_variant_mode() {
        let (m, opts, dir) = setup(Launcher::Srun);
        let cell = &m.plan()[0];
        let p = prepare(cell, &m, &opts, true).unwrap();
        assert_eq!(p.job.program, "srun");
        let bin = dir.path().join("all_reduce_perf").display().to_string();
        let json = dir.path().join("cell-001.json").display().to_string();
        assert_eq!(
            words(&p.job),
            [
                "--nodes=2",
                "--ntasks-per-node=8",
                "--kill-on-bad-exit=1",
                "--nodelist=node[1-2]",
                "--mpi=pmix",
                "--gpudirect=tcpx",
                &bin,
                "-b",
                "8",
                "-e",
                "1G",
                "-f",
                "2",
                "-g",
                "1",
                "-n",
                "20",
                "-J",
                &json
            ]
        );
        let env: Vec<(String, String)> = p
            .job
            .env
            .iter()
            .map(|(k, v)| (k.to_string_lossy().into(), v.to_string_lossy().into()))
            .collect();
        assert!(env.contains(&("NCCL_DEBUG".into(), "INFO".into())));
        assert!(env.contains(&("NCCL_ALGO".into(), "Ring".into())));
    }

    #[test]
    fn a_hostfile_is_written_only_in_the_work_folder_and_never_through_a_link() {
        let (m, opts, dir) = setup(Launcher::Mpirun);
        // A link planted where the hostfile goes: replaced, its target untouched.
        let target = dir.path().join("victim");
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("hostfile-001")).unwrap();
        prepare(&m.plan()[0], &m, &opts, false).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        let written = dir.path().join("hostfile-001");
        assert!(!written.symlink_metadata().unwrap().file_type().is_symlink());
        // No work folder: no hostfile in a shared one.
        let mut none = opts.clone();
        none.work_dir = None;
        let err = prepare(&m.plan()[0], &m, &none, false).unwrap_err();
        assert!(err.to_string().contains("no work folder"), "{err}");
    }

    #[test]
    fn mpirun_cells_get_a_hostfile_and_forward_variables() {
        let (m, opts, dir) = setup(Launcher::Mpirun);
        let p = prepare(&m.plan()[0], &m, &opts, false).unwrap();
        let w = words(&p.job);
        assert_eq!(
            &w[..6],
            [
                "-np",
                "16",
                "--hostfile",
                &dir.path().join("hostfile-001").display().to_string(),
                "--map-by",
                "ppr:8:node"
            ]
        );
        assert!(w.windows(2).any(|x| x == ["-x", "NCCL_ALGO"]));
        let hostfile = std::fs::read_to_string(dir.path().join("hostfile-001")).unwrap();
        assert_eq!(hostfile, "node1 slots=8\nnode2 slots=8\n");
        assert!(p
            .job
            .env
            .iter()
            .any(|(k, v)| k == "SLURM_GPUDIRECT" && v == "tcpx"));
        assert!(p.job.env.iter().any(|(k, _)| k == "OMPI_ALLOW_RUN_AS_ROOT"));
        let mut few = opts.clone();
        few.nodes.truncate(1);
        assert_eq!(
            prepare(&m.plan()[0], &m, &few, false).unwrap_err(),
            LaunchError::TooFewNodes { needed: 2, have: 1 }
        );
    }

    /// A folder planted under the old predictable name (`$TMPDIR/gpudirect-run-PID`, with a
    /// link where a report would go) is never the one used; ours is new, and only ours.
    #[test]
    fn work_folders_are_fresh_and_private() {
        use std::os::unix::fs::PermissionsExt;
        let planted = std::env::temp_dir().join(format!("gpudirect-run-{}", std::process::id()));
        std::fs::create_dir_all(&planted).unwrap();
        let target = planted.join("target");
        std::fs::write(&target, "keep").unwrap();
        let _ = std::fs::remove_file(planted.join("cell-001.json"));
        std::os::unix::fs::symlink(&target, planted.join("cell-001.json")).unwrap();
        let ours = work_dir("gpudirect-run-").unwrap();
        assert_ne!(ours.path(), planted.as_path());
        let mode = std::fs::metadata(ours.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert_eq!(std::fs::read_dir(ours.path()).unwrap().count(), 0, "empty");
        let other = work_dir("gpudirect-run-").unwrap();
        assert_ne!(ours.path(), other.path());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        std::fs::remove_dir_all(&planted).unwrap();
    }

    #[test]
    fn local_runs_one_process_driving_every_gpu() {
        let (mut m, opts, _dir) = setup(Launcher::Local);
        assert_eq!(
            prepare(&m.plan()[0], &m, &opts, false).unwrap_err(),
            LaunchError::LocalMultiNode(2)
        );
        m.nodes = vec![1];
        let p = prepare(&m.plan()[0], &m, &opts, false).unwrap();
        assert!(words(&p.job).windows(2).any(|x| x == ["-g", "8"]));
        // An MPI build started alone must not need ssh for Open MPI's singleton daemon
        // (found under slurmd on the GPU bed: "plm_rsh_agent: ssh : rsh" not found).
        if std::env::var_os(SINGLETON_ENV.0).is_none() {
            assert!(
                p.job
                    .env
                    .iter()
                    .any(|(k, v)| k == SINGLETON_ENV.0 && v == SINGLETON_ENV.1),
                "{:?}",
                p.job.env
            );
        }
    }

    #[test]
    fn missing_binaries_say_where_to_build_them() {
        let (mut m, opts, _dir) = setup(Launcher::Srun);
        m.collectives = vec!["all_gather".into()];
        let e = prepare(&m.plan()[0], &m, &opts, false).unwrap_err();
        assert!(
            e.to_string().contains("no all_gather_perf in") && e.to_string().contains("make MPI=1"),
            "{e}"
        );
    }
}
