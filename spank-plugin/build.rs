//! What the build adds to spank_gpudirect.so.
//!
//! **A build id.** `GPUDIRECT_BUILD_ID` is a hash of every source the plugin's behaviour
//! comes from (this crate, gpudirect-core, the manifests and Cargo.lock). slurmstepd's
//! marks (gpudirect_core::marks) name it, so a rebuilt plugin never trusts a verdict an
//! older build wrote, whatever file it was installed as.
//!
//! **The Slurm it is built for.** Reads `SLURM_VERSION_NUMBER` from the `slurm/slurm_version.h`
//! that the C compiler (and so slurm-spank's bindgen) finds: `GPUDIRECT_SLURM_VERSION` names
//! it (the plugin's log line), and `slurm_lacks_prepend_task_argv` is set for a Slurm
//! before 23.x, whose header lacks that function (ffi.rs then defines a stub).
//!
//! **The unwinder.** Links the unwinder (libgcc_eh) into spank_gpudirect.so instead of depending on
//! libgcc_s.so.1: neither srun nor slurmstepd loads libgcc_s, so that dependency alone
//! made every job step open, map and relocate one more library, twice (srun and
//! slurmstepd), about 0.09 ms each on the bench machine (docs/benchmarks.md).
//!
//! Rust's std names `-lgcc_s` itself for panic unwinding, so a `-static-libgcc` flag is
//! not enough: this writes a one-line linker script called `libgcc_s.so` that stands for
//! the static archive, into a directory searched before the system's. The plugin keeps
//! `panic = "unwind"` and its panic guard; only where the unwinder's code lives changes.
//! Other crates of the workspace do not link this crate, so they are not affected.

use std::collections::hash_map::DefaultHasher;
use std::hash::Hasher;
use std::path::{Path, PathBuf};

/// What the plugin's behaviour is built from, relative to this crate.
const SOURCES: [&str; 8] = [
    "build.rs",
    "../build-support",
    "Cargo.toml",
    "src",
    "compat",
    "../gpudirect-core/Cargo.toml",
    "../gpudirect-core/src",
    "../Cargo.lock",
];

/// Hashes a file or, in name order, every file under a directory (path and content).
fn hash_tree(path: &Path, hasher: &mut DefaultHasher) {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map(|dir| dir.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        entries.sort();
        for entry in entries {
            hash_tree(&entry, hasher);
        }
    } else if let Ok(bytes) = std::fs::read(path) {
        hasher.write(path.to_string_lossy().as_bytes());
        hasher.write(&bytes);
    }
}

// slurm_include_dirs() and slurm_version(), shared with the launcher's build script.
include!("../build-support/slurm_version.rs");

fn main() {
    println!("cargo:rerun-if-changed=../build-support/slurm_version.rs");
    println!("cargo::rustc-check-cfg=cfg(slurm_lacks_prepend_task_argv)");
    match slurm_version() {
        Some(version) => {
            let text = slurm_version_text(version);
            println!("cargo:rustc-env=GPUDIRECT_SLURM_VERSION={text}");
            // The same rule as compat/slurm/spank.h, which declares the function then.
            if version.0 < 23 {
                println!("cargo:rustc-cfg=slurm_lacks_prepend_task_argv");
            }
        }
        // bindgen fails on the missing spank.h with its own message; name the fix here too.
        None => println!(
            "cargo:warning=slurm/slurm_version.h not found (CPATH, /usr/include): install libslurm-dev"
        ),
    }

    // Cargo runs build scripts in the crate's directory: the paths above are relative to it.
    let mut hasher = DefaultHasher::new();
    hasher.write(env!("CARGO_PKG_VERSION").as_bytes());
    for source in SOURCES {
        println!("cargo:rerun-if-changed={source}");
        hash_tree(Path::new(source), &mut hasher);
    }
    println!(
        "cargo:rustc-env=GPUDIRECT_BUILD_ID={:016x}",
        hasher.finish()
    );

    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let dir = out.join("static-unwinder");
    std::fs::create_dir_all(&dir).expect("create OUT_DIR/static-unwinder");
    std::fs::write(dir.join("libgcc_s.so"), "INPUT(-lgcc_eh)\n")
        .expect("write OUT_DIR/static-unwinder/libgcc_s.so");
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-cdylib-link-arg=-static-libgcc");
    // Symbols of the archives linked in (the crates' rlibs, libgcc_eh) stay out of the
    // dynamic symbol table: slurm-spank exports an option callback this plugin never uses.
    println!("cargo:rustc-cdylib-link-arg=-Wl,--exclude-libs=ALL");
}
