//! Messages taken in bulk, for a bandwidth receiver: [`Endpoint::recv_many`] takes every message
//! that has arrived (up to a limit) and re-posts their buffers as one list.

use crate::error::{Error, Result};
use crate::verbs::{LocalBuf, RecvList};

use super::conn::{Endpoint, Flow, Ready, WR_RECV};
use super::messaging::Message;

/// Scratch space of [`Endpoint::recv_many`], kept across calls (nothing is allocated per batch).
#[derive(Debug, Default)]
pub struct RecvScratch {
    bufs: Vec<LocalBuf>,
    list: RecvList,
}

impl Endpoint {
    /// Waits (at most the timeout) for the next message, then takes it and up to `max - 1`
    /// more that have already arrived (without waiting), lends each to `f` in order, and
    /// re-posts all their buffers as one list (one `ibv_post_recv(3)`), returning their credits
    /// as [`recv_with`](Self::recv_with) does (a credit message once enough are owed). Returns
    /// how many messages were taken (at least one).
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
            let Ready {
                buf,
                len,
                imm,
                write_imm,
            } = self.ready.pop_front().expect("n messages are ready");
            if let Flow::Implicit { credits } = &mut self.flow {
                // Request/response: a reply taken allows the next request.
                *credits += 1;
            }
            let imm = match self.flow {
                Flow::Credits { .. } if !write_imm => None,
                _ => imm,
            };
            if write_imm {
                f(Message {
                    data: &[],
                    imm,
                    rdma_write_len: Some(len),
                });
            } else if let Some(data) = buf.get(..len as usize) {
                f(Message {
                    data,
                    imm,
                    rdma_write_len: None,
                });
            } else {
                overrun.get_or_insert((len, buf.len()));
            }
            s.bufs.push(buf);
        }
        self.repost_list(s).map_err(|e| self.fail(e))?;
        match overrun {
            None => Ok(n),
            Some((len, cap)) => Err(self.fail(Error::Protocol(format!(
                "received {len} bytes into a {cap}-byte buffer"
            )))),
        }
    }

    /// Re-posts the buffers in `s` as one list and accounts for their credits.
    fn repost_list(&mut self, s: &mut RecvScratch) -> Result<()> {
        let n = s.bufs.len() as u32;
        if let Err(e) = self.q.post_recv_list(&mut s.list, WR_RECV, &mut s.bufs) {
            // The receives not posted (their buffers are dropped with the error) are credits
            // the peer will never get back: the endpoint fails.
            return Err(e.error);
        }
        if let Flow::Credits {
            owed, threshold, ..
        } = &mut self.flow
        {
            *owed += n;
            if *owed >= *threshold {
                self.send_credit_msg()?;
            }
        }
        Ok(())
    }
}
