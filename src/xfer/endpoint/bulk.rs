//! Messages taken in bulk, for a bandwidth receiver: [`Endpoint::recv_many`] takes every message
//! that has arrived (up to a limit), then re-posts their receive ring slots and returns their
//! credits in one credit message.

use crate::error::Result;

use super::conn::{Endpoint, Flow};
use super::messaging::Message;

/// Scratch space of [`Endpoint::recv_many`], kept across calls (nothing is allocated per batch).
#[derive(Debug, Default)]
pub struct RecvScratch {
    slots: Vec<u32>,
}

impl Endpoint {
    /// Waits (at most the timeout) for the next message, then takes it and up to `max - 1`
    /// more that have already arrived (without waiting), lends each to `f` in order, then
    /// re-posts their ring slots and returns their credits as [`recv_with`](Self::recv_with)
    /// does (a credit message once enough are owed, at most one per call). Returns how many
    /// messages were taken (at least one).
    pub fn recv_many(
        &mut self,
        max: usize,
        s: &mut RecvScratch,
        mut f: impl FnMut(Message<'_>),
    ) -> Result<usize> {
        self.check_usable()?;
        let mut deadline = self.deadline();
        while self.ready.is_empty() {
            self.pump(&mut deadline, "a message from the peer")?;
        }
        let max = max.max(1);
        // What else has arrived, without waiting.
        while self.ready.len() < max {
            match self.q.spin(1) {
                Ok(Some(c)) => self.handle_polled(c).map_err(|e| self.fail(e))?,
                Ok(None) => break,
                Err(e) => return Err(self.fail(e)),
            }
        }
        let n = max.min(self.ready.len());
        let mut overrun = None;
        for _ in 0..n {
            let slot = self.take_ready().expect("n messages are ready");
            let lent = self.arrival(slot).and_then(|r| self.lend(slot, &r));
            match lent {
                Ok(m) => f(m),
                Err(e) => {
                    overrun.get_or_insert(e);
                }
            }
            s.slots.push(slot);
        }
        self.repost_slots(s).map_err(|e| self.fail(e))?;
        match overrun {
            None => Ok(n),
            Some(e) => Err(self.fail(e)),
        }
    }

    /// Re-posts the ring slots in `s` and accounts for their credits (one credit message at
    /// most, once enough are owed).
    fn repost_slots(&mut self, s: &mut RecvScratch) -> Result<()> {
        for slot in s.slots.drain(..) {
            self.repost(slot, false)?;
        }
        if let Flow::Credits {
            owed, threshold, ..
        } = &self.flow
        {
            if *owed >= *threshold {
                self.send_credit_msg()?;
            }
        }
        Ok(())
    }
}
