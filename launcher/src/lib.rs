//! `gpudirect`: the launcher library behind the `gpudirect` CLI.
//!
//! The binary (`src/main.rs`) only parses arguments and dispatches; the work lives in the
//! modules here, each named after what it holds, so that it can be tested without a
//! cluster and reused by other front ends.

pub mod history;
