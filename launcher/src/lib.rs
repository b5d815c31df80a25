//! The `gpudirect` launcher's library: everything the CLI does that is worth testing on its
//! own. The binary (`main.rs`) parses arguments and calls into these modules.
//!
//! - [`runner`]: runs srun/mpirun/nccl-tests in a process group with timeouts and Ctrl-C.

pub mod runner;
