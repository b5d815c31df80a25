//! Reading and asserting on a finished command's output. Shared by the cluster tests
//! (`common.rs`) and the launcher's CLI tests (`launcher/tests/cli/common.rs`, through a
//! `#[path]` module), so that both say the same thing when an assertion fails.

use std::process::Output;

/// stdout as text.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// stderr as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Asserts that a command's stderr contains `needle`, showing all of stderr when not.
#[track_caller]
pub fn assert_stderr_contains(output: &Output, needle: &str) {
    let text = stderr(output);
    assert!(text.contains(needle), "stderr lacks {needle:?}:\n{text}");
}

/// Asserts that a command's stdout contains `needle`, showing all of stdout when not.
#[track_caller]
pub fn assert_stdout_contains(output: &Output, needle: &str) {
    let text = stdout(output);
    assert!(text.contains(needle), "stdout lacks {needle:?}:\n{text}");
}
