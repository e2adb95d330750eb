//! SIGINT and SIGTERM during `send` and `recv`: a clean exit with status 128 + the signal number
//! (130, 143) after removing the receiver's partial files.
//!
//! A watcher thread (signal-hook's safe iterator; no code of ours runs in the signal handler)
//! rather than a flag checked between completions: a transfer can wait up to the step deadline
//! (`--timeout`, 10 s by default) for one completion, too long to be a prompt answer to Ctrl-C.
//! On the signal the thread calls [`cleanup::interrupt`], which removes every registered
//! temporary file (except those kept for `--resume`) and the directories created only for them
//! and refuses new files, then ends the process. Connections end with the process: the kernel
//! tears the queue pairs and CM identifiers down, and the peer sees the disconnect.

use std::io::Write as _;

use anyhow::{Context as _, Result};
use rdmaxfer::xfer::file::cleanup;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// Starts the watcher (once per process).
pub fn exit_cleanly_on_interrupt() -> Result<()> {
    let mut signals = Signals::new([SIGINT, SIGTERM]).context("installing signal handlers")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let removed = cleanup::interrupt();
                let name = if sig == SIGINT { "SIGINT" } else { "SIGTERM" };
                let what = match removed {
                    0 => String::new(),
                    1 => ", removed 1 partial file".into(),
                    n => format!(", removed {n} partial files"),
                };
                // Not eprintln!: a closed stderr must not keep the process from ending.
                let _ = writeln!(std::io::stderr(), "rdmaxfer: interrupted by {name}{what}");
                std::process::exit(128 + sig);
            }
        })
        .context("starting the signal watcher thread")?;
    Ok(())
}
