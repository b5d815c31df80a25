//! Names the Slurm the launcher was built for (`gpudirect --version`): the version of the
//! Slurm headers on the build machine, as the plugin of the same package is built against.
//! The launcher itself only runs Slurm's commands, which every version since 22.05 shares.

include!("../build-support/slurm_version.rs");

fn main() {
    println!("cargo:rerun-if-changed=../build-support/slurm_version.rs");
    let built_for = match slurm_version() {
        Some(version) => format!("Slurm {}", slurm_version_text(version)),
        None => "an unknown Slurm: no slurm_version.h at build time".to_string(),
    };
    println!("cargo:rustc-env=GPUDIRECT_BUILT_FOR={built_for}");
}
