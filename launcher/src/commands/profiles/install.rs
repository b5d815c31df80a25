//! `gpudirect profiles install-overlay FILE`: appends a profile overlay to the config
//! exactly as checked (security review S7). The overlay is read once; the config is opened
//! for appending, locked, and read through that descriptor; both texts are checked as
//! `profiles check --overlay` checks them; only then are the overlay's very bytes appended,
//! synced, and the installed config read back and checked again (a failure truncates the
//! config to what it was). Nobody can swap either text between the check and the append.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use gpudirect::output::note;
use gpudirect_core::lint::Severity;
use gpudirect_core::system::{load_config, short_hostname, Ownership};

use super::{check_texts, read_overlay};
use crate::commands::ExitStatus;

/// `profiles install-overlay`.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// The overlay: `[profiles.NAME]` tables only (`gpudirect tune --write`'s file).
    pub file: PathBuf,
    /// The node whose node set the check uses. Default: this host's short name.
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,
    /// Tests only: the config may be owned by the owner of DIR and lie below DIR, whose
    /// folders above are not checked (`health --insecure-trust-below`).
    #[arg(long, value_name = "DIR", hide = true)]
    pub insecure_trust_below: Option<PathBuf>,
}

/// The rule the config must meet: the plugin's, or the tests' widened one.
fn rights(args: &InstallArgs) -> Result<Ownership> {
    match &args.insecure_trust_below {
        Some(dir) => {
            let (owner, below) = crate::commands::args::trusting_below(dir)?;
            Ok(Ownership::TrustingBelow { owner, below })
        }
        None => Ok(Ownership::RootOnly),
    }
}

/// Checks the config at `config` with `args.file` appended and, when nothing is an error,
/// appends exactly the checked bytes. Exit 0 installed, 1 refused (the findings say why).
pub fn run(config: &Path, args: &InstallArgs) -> Result<ExitStatus> {
    let name = args.file.display().to_string();
    let overlay = read_overlay(&args.file).map_err(anyhow::Error::msg)?;
    if !overlay.ends_with('\n') {
        bail!("{name}: no line break at its end: what is appended after it would join its last line; end it with one (echo >> {name})");
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(config)
        .with_context(|| format!("cannot open {} to append to it", config.display()))?;
    // One installer at a time; the lock goes with the descriptor.
    let mut file = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .with_context(|| format!("cannot lock {}", config.display()))?;
    let mut text = String::new();
    file.seek(SeekFrom::Start(0))?;
    file.read_to_string(&mut text)
        .with_context(|| format!("cannot read {} (UTF-8)", config.display()))?;
    let node = args.node.clone().unwrap_or_else(short_hostname);
    let rights = rights(args)?;
    let outcome = check_texts(
        config,
        &text,
        &[(name.clone(), overlay.clone())],
        rights,
        (false, &node),
    );
    for finding in &outcome.findings {
        note(&finding.to_string());
    }
    for added in &outcome.added {
        note(added);
    }
    if outcome
        .findings
        .iter()
        .any(|f| f.severity == Severity::Error)
    {
        note(&format!(
            "{name}: not installed: fix the error(s) above; {} is unchanged",
            config.display()
        ));
        return Ok(ExitStatus::Problem);
    }
    let before = text.len() as u64;
    file.write_all(overlay.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot append to {}", config.display()))?;
    // Read back the way the plugin reads it, its ownership rules too.
    if let Err(e) = load_config(config, rights) {
        file.set_len(before)
            .and_then(|()| file.sync_all())
            .with_context(|| format!("the installed config fails ({e}), and {} could not be put back: restore it by hand", config.display()))?;
        bail!(
            "the installed config fails its check ({e}): {} is back as it was",
            config.display()
        );
    }
    note(&format!(
        "{name}: installed: {} bytes appended to {}, as checked",
        overlay.len(),
        config.display()
    ));
    Ok(ExitStatus::Ok)
}
