//! The caller's own work requests posted as a list (one doorbell): [`Endpoint::post_batch`].

use crate::error::{Error, Result};
use crate::verbs::{PostListError, SendBatch, SendOp, SharedBuf, SharedList, SharedPost};
use crate::xfer::wire::{self, ImmKind};

use super::conn::{Endpoint, Flow, WR_LIST};
use super::options::RESERVED_WR_ID;

impl Endpoint {
    /// Posts the caller's RDMA READ / WRITE work requests of `b` with one `ibv_post_send(3)`
    /// ([`SoloQueue::post_send_batch`](crate::verbs::SoloQueue::post_send_batch)); their
    /// completions come from [`poll_user`](Self::poll_user) as those of [`post`](Self::post). Every
    /// wr_id must be below [`RESERVED_WR_ID`]; SENDs (they carry credits) and WRITE_WITH_IMM (it
    /// spends one) go through [`send`](Self::send) and [`post`](Self::post). A refused batch is
    /// given back whole, nothing posted.
    pub fn post_batch(&mut self, b: &mut SendBatch) -> Result<usize, PostListError> {
        let refused = b.iter().find_map(|w| {
            if w.wr_id() >= RESERVED_WR_ID {
                Some(format!("wr_id must be below {RESERVED_WR_ID:#x}"))
            } else if !matches!(w.op(), SendOp::Write(_) | SendOp::Read(_)) {
                Some(format!(
                    "a post list takes RDMA WRITE and READ only, not {}: use Endpoint::send or \
                     Endpoint::post",
                    w.op().name()
                ))
            } else {
                None
            }
        });
        let refused = match refused {
            Some(why) => Some(Error::InvalidArgument(why)),
            None => self.check_usable().err(),
        };
        if let Some(error) = refused {
            return Err(PostListError {
                error,
                posted: 0,
                unposted: b.drain().map(|w| (w.wr_id(), w.into_bufs())).collect(),
            });
        }
        self.q.post_send_batch(b)
    }

    /// Posts the caller's RDMA WRITEs of one shared source as one list (one doorbell), as
    /// [`SoloQueue::post_shared_list`](crate::verbs::SoloQueue::post_shared_list) does: `p.n`
    /// WRITEs of `p.src[p.off..p.off + p.len]`, work request `i` with `wr_id` `first_wr_id + i`,
    /// signaled where `signaled(i)` says and table entries only where needed, so only the
    /// signaled ones complete (each retires the ones before it; the list's last, if unsignaled,
    /// comes back in a later completion's `retired`). Their completions come from
    /// [`poll_user`](Self::poll_user). Every `wr_id` must be below [`RESERVED_WR_ID`]; SENDs and
    /// WRITE_WITH_IMM (they take credits) are refused, as in [`post_batch`](Self::post_batch).
    pub fn post_shared_list(
        &mut self,
        l: &mut SharedList,
        p: &SharedPost<'_>,
        first_wr_id: u64,
        signaled: impl FnMut(usize) -> bool,
    ) -> Result<usize, PostListError> {
        let last = first_wr_id.checked_add(p.n as u64);
        let refused = if last.is_none_or(|end| end > RESERVED_WR_ID) {
            Some(Error::InvalidArgument(format!(
                "wr_id must be below {RESERVED_WR_ID:#x}"
            )))
        } else if !matches!((p.first, p.rest), (SendOp::Write(_), SendOp::Write(_))) {
            Some(Error::InvalidArgument(format!(
                "a shared list of the caller's takes RDMA WRITE only, not {}: use \
                 Endpoint::send_shared_list for SENDs",
                p.rest.name()
            )))
        } else {
            self.check_usable().err()
        };
        if let Some(error) = refused {
            return Err(PostListError {
                error,
                posted: 0,
                unposted: Vec::new(),
            });
        }
        self.q
            .post_shared_list(l, p, signaled, |i, _| first_wr_id + i as u64)
    }

    /// Sends up to `n` messages, each the first `len` bytes of `src` (one read-only buffer
    /// shared by every message in flight: a bandwidth source, nothing to fill), as one post list
    /// (one doorbell); returns how many were posted, at least one. Each message takes a credit
    /// and a send-queue slot as [`send`](Self::send) does: this waits (at most the timeout) for
    /// a credit and for `min(n, signal_every)` free slots (only while a signaled SEND of ours
    /// is outstanding; else for one), then posts as many as both allow. `l` is the caller's
    /// scratch list (kept across calls: nothing allocated per list). The list is lean
    /// ([`SoloQueue::post_shared_list`](crate::verbs::SoloQueue::post_shared_list)): the range is
    /// checked once, and only signaled SENDs and the list's last hold a table entry (with a
    /// clone of `src`), each standing for the SENDs before it.
    ///
    /// One message in `signal_every` (counted across lists) asks for a completion, and so does
    /// the one taking the last send-queue slot (a wait for a slot always ends); with `more`
    /// (the caller sends again) the last of the list may go unsignaled, without it the last is
    /// signaled, so that [`flush`](Self::flush) sees every message complete.
    pub fn send_shared_list(
        &mut self,
        src: &SharedBuf,
        len: usize,
        n: usize,
        signal_every: u32,
        more: bool,
        l: &mut SharedList,
    ) -> Result<usize> {
        self.check_usable()?;
        self.check_msg_len(len)?;
        if len > src.len() {
            return Err(Error::InvalidArgument(format!(
                "message of {len} bytes is longer than its {}-byte source",
                src.len()
            )));
        }
        let mut deadline = self.deadline();
        while self.credits() == 0 {
            self.pump(
                &mut deadline,
                "send credit from the peer (it is not taking messages)",
            )?;
        }
        let every = signal_every.max(1);
        let n = u32::try_from(n).unwrap_or(u32::MAX).max(1);
        // A list's worth of slots (`every`, or `n` if fewer): waited for only while a signaled
        // work request is outstanding (the SENDs before our unsignaled run), whose completion
        // frees slots; never for one that cannot come. Posting into each slot as it frees would
        // cut the lists short and scatter the signals.
        let want = n.min(every).min(self.own_sq);
        while self.own_sq.saturating_sub(self.sends_posted) < want
            && self.sends_posted > self.unsignaled_run
        {
            self.pump(&mut deadline, "a send completion")?;
        }
        while self.sends_posted >= self.own_sq {
            self.pump(&mut deadline, "a send completion")?;
        }
        let room = (self.own_sq - self.sends_posted).min(self.credits());
        let k = n.min(room);
        let (first, rest) = match &mut self.flow {
            Flow::Credits { owed, .. } => (
                SendOp::SendWithImm(wire::encode_imm(ImmKind::Data, std::mem::take(owed))),
                SendOp::SendWithImm(wire::encode_imm(ImmKind::Data, 0)),
            ),
            Flow::Implicit { .. } => (SendOp::Send, SendOp::Send),
        };
        // One SEND in `every` of the running count of unsignaled ones (kept across lists) is
        // signaled, and so are the one taking the last slot and, without `more`, the last.
        let (base, own_sq, run) = (
            self.sends_posted,
            self.own_sq,
            u64::from(self.unsignaled_run),
        );
        let signaled = |i: usize| {
            let slot = base + i as u32 + 1;
            (run + i as u64 + 1) % u64::from(every) == 0
                || slot >= own_sq
                || (!more && i as u32 + 1 == k)
        };
        // The run after the list: 0 if its last is signaled, else what follows its last
        // periodic signal (or the whole list after the old run, if it had none).
        let run_after = if signaled(k as usize - 1) {
            0
        } else if run % u64::from(every) + u64::from(k) >= u64::from(every) {
            (run + u64::from(k)) % u64::from(every)
        } else {
            run + u64::from(k)
        };
        let run_after = u32::try_from(run_after).unwrap_or(u32::MAX);
        let p = SharedPost {
            src,
            off: 0,
            len,
            n: k as usize,
            first,
            rest,
        };
        let posted = match self
            .q
            .post_shared_list(l, &p, signaled, |_, covered| WR_LIST | u64::from(covered))
        {
            Ok(p) => p,
            Err(e) => {
                // The first `e.posted` are on the wire (they complete as usual); the credits
                // the others carried are lost with the endpoint, which fails here.
                // Their signalling is unknown here: the endpoint fails, nothing waits on them.
                self.account_sends(e.posted as u32, 0);
                return Err(self.fail(e.error));
            }
        };
        self.account_sends(posted as u32, run_after);
        // After the post: receives the caller deferred go back now.
        self.settle(true).map_err(|e| self.fail(e))?;
        Ok(posted)
    }

    /// `k` SENDs of ours posted: slots taken, credits spent, the unsignaled run after them noted.
    fn account_sends(&mut self, k: u32, unsignaled_run: u32) {
        if k == 0 {
            return;
        }
        self.sends_posted += k;
        self.unsignaled_run = unsignaled_run;
        match &mut self.flow {
            Flow::Credits { credits, .. } | Flow::Implicit { credits } => {
                *credits = credits.saturating_sub(k)
            }
        }
    }
}
