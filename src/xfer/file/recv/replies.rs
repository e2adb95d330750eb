//! The answers to entries in flight (WANT, SKIP, REFUSE, ACK), gathered and sent together in
//! one BATCH, and the directory fsyncs of the small files they commit, done once per directory
//! per batch. A file's ACK(ok) goes out only after its directory's fsync: what the sender hears
//! is committed is as durable as one file committed alone.

use super::answer::Reply;
use crate::error::Result;
use crate::xfer::file::link::Link;
use crate::xfer::file::names::ConfinedDir;
use crate::xfer::file::proto::{Batch, Msg};

/// Answers gathered before they are sent at once: the sender's window is 64 entries (its
/// posted receives less one, at most `MAX_IN_FLIGHT`), so at a quarter of it the sender has
/// answers to act on well before it runs dry.
pub(super) const FLUSH_AT: usize = 16;

/// Answers not sent yet, and the directories whose fsync they wait for.
pub(super) struct Replies {
    out: Batch,
    dirty: Vec<ConfinedDir>,
}

impl Replies {
    /// Answers to send on `ep`, gathered in BATCHes as long as it takes.
    pub(super) fn new<L: Link>(ep: &L) -> Replies {
        Replies {
            out: Batch::with_limit(ep.max_msg_size()),
            dirty: Vec::new(),
        }
    }

    /// Whether nothing waits to be sent.
    pub(super) fn is_empty(&self) -> bool {
        self.out.is_empty() && self.dirty.is_empty()
    }

    /// Notes that a file was committed in `dir`: it is fsynced before the next answers go.
    pub(super) fn dirty(&mut self, dir: &ConfinedDir) -> Result<()> {
        if !self.dirty.iter().any(|d| d.path() == dir.path()) {
            self.dirty.push(dir.try_clone()?);
        }
        Ok(())
    }

    /// Syncs the directories noted and sends the gathered answers (one message, or a BATCH).
    pub(super) async fn flush<L: Link>(&mut self, ep: &mut L) -> Result<()> {
        for d in self.dirty.drain(..) {
            d.sync()?;
        }
        match self.out.take() {
            Some(bytes) => {
                let sent = ep.send(&bytes).await;
                self.out.recycle(bytes);
                sent
            }
            None => Ok(()),
        }
    }

    /// `ep` and these replies as a [`Reply`]: answers are gathered, sent when the next does not
    /// fit or [`FLUSH_AT`] are there.
    pub(super) fn on<'a, L: Link>(&'a mut self, ep: &'a mut L) -> Gathered<'a, L> {
        Gathered { ep, replies: self }
    }
}

/// Answers gathered on an endpoint (see [`Replies::on`]).
pub(super) struct Gathered<'a, L> {
    pub(super) ep: &'a mut L,
    pub(super) replies: &'a mut Replies,
}

impl<L: Link> Reply for Gathered<'_, L> {
    async fn reply(&mut self, msg: &Msg) -> Result<()> {
        // A flush empties the batch, and a first message always fits: this sends at most once.
        while !self.replies.out.push_msg(msg) {
            self.replies.flush(self.ep).await?;
        }
        if self.replies.out.len() >= FLUSH_AT {
            self.replies.flush(self.ep).await?;
        }
        Ok(())
    }
}
