//! `gpudirect generate`: man pages and shell completions, rendered from the same clap
//! definitions as `--help`, for packages (`scripts/package`). Hidden from `--help`: users
//! get these files from the package, not from this command.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, CommandFactory, ValueEnum};
use clap_complete::Shell;

use super::{Cli, ExitStatus};
use gpudirect::noteln;

/// Arguments of `gpudirect generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// What to write: `man` (gpudirect.1 and one page per subcommand, e.g.
    /// gpudirect-validate.1) or `completions` (bash, zsh and fish).
    #[arg(value_enum)]
    pub what: What,
    /// The folder to write into (created if missing; files of the same names are replaced).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

/// The kinds of file `gpudirect generate` writes.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum What {
    Man,
    Completions,
}

/// The shells completions are written for, with the file name each one loads.
const SHELLS: [Shell; 3] = [Shell::Bash, Shell::Zsh, Shell::Fish];

pub fn run(args: &GenerateArgs) -> Result<ExitStatus> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let written = match args.what {
        What::Man => man_pages(&args.out)?,
        What::Completions => completions(&args.out)?,
    };
    noteln!(
        "gpudirect generate: {written} file(s) in {}",
        args.out.display()
    );
    Ok(ExitStatus::Ok)
}

/// One page per command and subcommand, hidden ones left out.
fn man_pages(dir: &Path) -> Result<usize> {
    clap_mangen::generate_to(Cli::command(), dir)
        .with_context(|| format!("cannot write man pages in {}", dir.display()))?;
    count_files(dir, "1")
}

fn completions(dir: &Path) -> Result<usize> {
    let mut command = Cli::command();
    for shell in SHELLS {
        clap_complete::generate_to(shell, &mut command, "gpudirect", dir)
            .with_context(|| format!("cannot write {shell} completions in {}", dir.display()))?;
    }
    Ok(SHELLS.len())
}

/// Files in `dir` with this extension.
fn count_files(dir: &Path, extension: &str) -> Result<usize> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?;
    Ok(entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == extension))
        .count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_visible_subcommand_gets_a_man_page_and_every_shell_a_completion() {
        let dir = tempfile::tempdir().unwrap();
        man_pages(dir.path()).unwrap();
        for page in [
            "gpudirect.1",
            "gpudirect-validate.1",
            "gpudirect-profiles-check.1",
        ] {
            let text = std::fs::read_to_string(dir.path().join(page)).unwrap();
            assert!(
                text.starts_with(".ie"),
                "{page}: {}",
                &text[..40.min(text.len())]
            );
        }
        assert!(!dir.path().join("gpudirect-generate.1").exists());
        completions(dir.path()).unwrap();
        let bash = std::fs::read_to_string(dir.path().join("gpudirect.bash")).unwrap();
        assert!(bash.contains("validate"), "{bash}");
        assert!(dir.path().join("_gpudirect").is_file());
        assert!(dir.path().join("gpudirect.fish").is_file());
    }
}
