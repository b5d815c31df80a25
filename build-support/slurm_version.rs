// The Slurm whose headers a build uses, for the build scripts of spank-plugin and launcher
// (each `include!`s this file). Reads `SLURM_VERSION_NUMBER` from the first
// `slurm/slurm_version.h` found on CPATH, C_INCLUDE_PATH, then the system's folders, as the
// C compiler (and so slurm-spank's bindgen) would; tells cargo to build again when those
// change.

/// Where `slurm/slurm_version.h` is looked for.
fn slurm_include_dirs() -> Vec<std::path::PathBuf> {
    let mut dirs = Vec::new();
    for var in ["CPATH", "C_INCLUDE_PATH"] {
        if let Some(value) = std::env::var_os(var) {
            dirs.extend(std::env::split_paths(&value));
        }
        println!("cargo:rerun-if-env-changed={var}");
    }
    dirs.extend(["/usr/local/include", "/usr/include"].map(std::path::PathBuf::from));
    dirs
}

/// (major, minor, micro) of the Slurm whose headers the build uses, if found.
fn slurm_version() -> Option<(u32, u32, u32)> {
    for dir in slurm_include_dirs() {
        let header = dir.join("slurm/slurm_version.h");
        let Ok(text) = std::fs::read_to_string(&header) else {
            continue;
        };
        println!("cargo:rerun-if-changed={}", header.display());
        let number = text.lines().find_map(|line| {
            let rest = line.trim().strip_prefix("#define")?.trim();
            let value = rest.strip_prefix("SLURM_VERSION_NUMBER")?.trim();
            let hex = value.strip_prefix("0x").or_else(|| value.strip_prefix("0X"))?;
            u32::from_str_radix(hex, 16).ok()
        })?;
        return Some((number >> 16, (number >> 8) & 0xff, number & 0xff));
    }
    None
}

/// A version as Slurm writes it: `22.05.8`.
fn slurm_version_text((major, minor, micro): (u32, u32, u32)) -> String {
    format!("{major}.{minor:02}.{micro}")
}
