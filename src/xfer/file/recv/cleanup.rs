//! What unfinished received files leave behind, registered so that it can be removed even when
//! the process is interrupted: every [`Sink`](super::sink::Sink) registers its temporary file and
//! the directories created only for it while it is open, and [`interrupt`] (called by a signal
//! watcher thread, e.g. the CLI's) removes them all and refuses new files from then on.
//!
//! Plain safe Rust: a mutex-protected registry; nothing here runs inside a signal handler.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::xfer::file::names::ConfinedDir;
use crate::xfer::file::proto::Reason;
use crate::{Error, Result};

/// The leftovers of one unfinished file.
#[derive(Debug)]
pub(crate) struct Leftovers {
    /// The file's directory (its own descriptor, so removal never re-walks a path).
    pub dir: ConfinedDir,
    /// The temporary file's name in `dir`.
    pub temp_name: String,
    /// The directories created for this file only: the last components of the path to `dir`,
    /// top first.
    pub created: Vec<String>,
    /// Keep the temporary file (and so its directories) for a later resume.
    pub keep: bool,
}

impl Leftovers {
    /// Removes the temporary file and then the directories created for it (each only if empty),
    /// unless `keep`.
    fn remove(&self) -> Result<()> {
        if self.keep {
            return Ok(());
        }
        self.dir.remove(&self.temp_name)?;
        self.dir.remove_created(&self.created);
        Ok(())
    }
}

#[derive(Debug)]
struct Registry {
    next: u64,
    interrupted: bool,
    pending: BTreeMap<u64, Leftovers>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    next: 0,
    interrupted: false,
    pending: BTreeMap::new(),
});

fn registry() -> MutexGuard<'static, Registry> {
    // The registry stays consistent whatever a panicking holder was doing (inserts and removals
    // of whole entries), so a poisoned lock is still usable.
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A registration, held by the sink; dropping it forgets the leftovers (they were removed,
/// kept, or committed).
#[derive(Debug)]
pub(crate) struct Registered(u64);

/// Holds the registry while a file's directories and temporary file are made, so that an
/// [`interrupt`] sees either nothing of the file or all of it.
pub(crate) struct Creating(MutexGuard<'static, Registry>);

/// Starts creating a file's leftovers; refused once the process is being interrupted.
pub(crate) fn begin() -> Result<Creating> {
    let g = registry();
    if g.interrupted {
        return Err(Error::refused(
            Reason::Internal,
            "the receiver is being interrupted",
        ));
    }
    Ok(Creating(g))
}

impl Creating {
    /// Registers what was created; ends the critical section.
    pub(crate) fn register(mut self, leftovers: Leftovers) -> Registered {
        let id = self.0.next;
        self.0.next += 1;
        self.0.pending.insert(id, leftovers);
        Registered(id)
    }
}

impl Registered {
    /// Whether the temporary file is kept for a resume (see [`Leftovers::keep`]).
    pub(crate) fn set_keep(&self, keep: bool) {
        if let Some(l) = registry().pending.get_mut(&self.0) {
            l.keep = keep;
        }
    }

    /// Removes the leftovers now (unless kept); the registration stays until dropped.
    pub(crate) fn remove(&self) -> Result<()> {
        match registry().pending.get(&self.0) {
            Some(l) => l.remove(),
            None => Ok(()),
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        registry().pending.remove(&self.0);
    }
}

/// For a signal handler's watcher thread: refuses new files from now on and removes every
/// registered temporary file (except those kept for a resume) and the directories created only
/// for them. Returns how many files were removed. The caller then exits.
pub fn interrupt() -> usize {
    let mut g = registry();
    g.interrupted = true;
    let mut removed = 0;
    for l in g.pending.values().filter(|l| !l.keep) {
        match l.remove() {
            Ok(()) => removed += 1,
            Err(e) => tracing::warn!("removing {}: {e}", l.temp_name),
        }
    }
    g.pending.clear();
    removed
}

/// Files currently registered (for tests and diagnostics).
pub fn pending() -> usize {
    registry().pending.len()
}
