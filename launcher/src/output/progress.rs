//! The progress of a long command (a matrix of cells): on a terminal, one status line that
//! indicatif redraws twice a second, with each finished item printed above it; anywhere
//! else (a log file, CI), one plain line when an item starts and one when it ends.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::note;

/// What the status line shows: done/total, the item running, time spent and left, and the
/// last bandwidth seen (indicatif's `prefix`).
const STATUS_LINE: &str =
    "[{pos}/{len}] {msg} | {elapsed_precise} elapsed, ~{eta_precise} left{prefix}";

/// A status line on a terminal, plain log lines otherwise. Lines start with `tag`
/// (`gpudirect run`).
pub struct Progress {
    bar: ProgressBar,
    tag: &'static str,
}

impl Progress {
    /// Progress over `total` items, drawn on stderr when it is a terminal.
    pub fn new(tag: &'static str, total: usize) -> Self {
        Self::with_target(tag, total, ProgressDrawTarget::stderr())
    }

    fn with_target(tag: &'static str, total: usize, target: ProgressDrawTarget) -> Self {
        let bar = ProgressBar::with_draw_target(Some(total as u64), target);
        // The template is a constant that a unit test parses, so the fallback never runs.
        let style = ProgressStyle::with_template(STATUS_LINE)
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        if !bar.is_hidden() {
            bar.enable_steady_tick(Duration::from_millis(500));
        }
        Progress { bar, tag }
    }

    /// Item `index` (`label`) starts; a log gets the command it runs.
    pub fn start(&self, index: usize, label: &str, command: &str) {
        if self.bar.is_hidden() {
            let total = self.bar.length().unwrap_or_default();
            note(&format!(
                "{}: [{index}/{total}] {label}: {command}",
                self.tag
            ));
        }
        self.bar.set_message(label.to_string());
    }

    /// An item ended: `line` is printed (above the status line on a terminal), and `busbw`,
    /// when known, becomes the status line's last bandwidth.
    pub fn finish(&self, line: &str, busbw: Option<f64>) {
        if let Some(b) = busbw {
            self.bar.set_prefix(last_busbw(b));
        }
        self.bar.inc(1);
        let line = format!("{}: {line}", self.tag);
        if self.bar.is_hidden() {
            note(&line);
        } else {
            self.bar.println(line);
        }
    }

    /// Removes the status line.
    pub fn close(self) {
        self.bar.finish_and_clear();
    }
}

fn last_busbw(gbps: f64) -> String {
    format!(" | last busbw {gbps:.2} GB/s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_line_template_is_valid() {
        assert!(ProgressStyle::with_template(STATUS_LINE).is_ok());
        assert_eq!(last_busbw(65.254), " | last busbw 65.25 GB/s");
    }

    #[test]
    fn a_hidden_bar_still_counts() {
        let progress = Progress::with_target("test", 3, ProgressDrawTarget::hidden());
        progress.start(1, "all_reduce N=2", "srun ...");
        progress.finish("[1/3] all_reduce N=2: ok", Some(12.0));
        assert_eq!(progress.bar.position(), 1);
        assert_eq!(progress.bar.prefix(), " | last busbw 12.00 GB/s");
        progress.close();
    }
}
