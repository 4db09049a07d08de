//! Command-line shell.

/// Runs the command line; returns the process exit code.
pub fn run() -> i32 {
    0
}
