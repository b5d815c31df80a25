//! Links the unwinder (libgcc_eh) into spank_gpudirect.so instead of depending on
//! libgcc_s.so.1: neither srun nor slurmstepd loads libgcc_s, so that dependency alone
//! made every job step open, map and relocate one more library, twice (srun and
//! slurmstepd), about 0.09 ms each on the bench machine (docs/benchmarks.md).
//!
//! Rust's std names `-lgcc_s` itself for panic unwinding, so a `-static-libgcc` flag is
//! not enough: this writes a one-line linker script called `libgcc_s.so` that stands for
//! the static archive, into a directory searched before the system's. The plugin keeps
//! `panic = "unwind"` and its panic guard; only where the unwinder's code lives changes.
//! Other crates of the workspace are not affected (link flags of a build script apply to
//! this crate's own links only).

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let dir = out.join("static-unwinder");
    std::fs::create_dir_all(&dir).expect("create OUT_DIR/static-unwinder");
    std::fs::write(dir.join("libgcc_s.so"), "INPUT(-lgcc_eh)\n")
        .expect("write OUT_DIR/static-unwinder/libgcc_s.so");
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-cdylib-link-arg=-static-libgcc");
}
