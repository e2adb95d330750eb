//! The credit engine: completions handled, credits applied and returned, receives re-posted,
//! and the waits for progress (see the module docs of [`super`]).

use std::time::{Duration, Instant};

use crate::cm::{CmId, EventKind};
use crate::error::{Error, Result};
use crate::verbs::{Completion, Polled, Retired, SendOp, SendRequest, SleepLeft, WaitMode};
use crate::xfer::wire::{self, ImmKind};

use super::conn::{
    credit_flow, is_list, sends_of, Deadline, Endpoint, Flow, Ready, WR_CREDIT, WR_DATA, WR_RECV,
};
use super::options::RESERVED_WR_ID;

/// Polls of the CQ in poll mode before a wait starts reading the clock.
pub(super) const SPIN_POLLS: u32 = 2000;
/// How often a wait for completions also looks for CM events (peer disconnect).
pub(super) const CM_CHECK: Duration = Duration::from_millis(50);

impl Endpoint {
    /// Switches an out-of-band endpoint from ibv_rc_pingpong's one-message-at-a-time flow to
    /// credit flow control (a no-op over CM, which has credits from the start). Both sides must
    /// call it, the connecting side with `initiator`; so it is for rdmaxfer ↔ rdmaxfer only.
    /// Each side sends one `wire::Hello` with its receive depth and message size.
    pub fn enable_credits(&mut self, initiator: bool) -> Result<()> {
        if !matches!(self.flow, Flow::Implicit { .. }) {
            return Ok(());
        }
        let mine = wire::Hello::new(self.recv_depth, self.msg_size as u32).encode();
        let theirs = if initiator {
            self.send(&mine)?;
            self.recv()?
        } else {
            let t = self.recv()?;
            self.send(&mine)?;
            t
        };
        let h = wire::Hello::decode(&theirs)?;
        // Our hello used one of the peer's receives and we have not been told it is re-posted;
        // we re-posted the one its hello used and owe it that credit.
        let mut flow = credit_flow(h.recv_depth, self.recv_depth);
        if let Flow::Credits { credits, owed, .. } = &mut flow {
            *credits = h.recv_depth - 1;
            *owed = 1;
        }
        self.flow = flow;
        self.peer_msg_size = (h.msg_size as usize).min(self.msg_size);
        self.peer.recv_depth = Some(h.recv_depth);
        self.peer.msg_size = Some(h.msg_size);
        Ok(())
    }

    /// Handles one completion as the per-message path takes it.
    #[inline(always)]
    pub(super) fn handle_polled(&mut self, p: Polled) -> Result<()> {
        if let Some(r) = self.handle_polled_take(p)? {
            self.ready.push_back(r);
        }
        Ok(())
    }

    /// [`handle_polled`](Self::handle_polled), a message received handed back instead of
    /// queued in `ready` (the caller queues it or, if `ready` is empty, takes it at once).
    #[inline(always)]
    fn handle_polled_take(&mut self, p: Polled) -> Result<Option<Ready>> {
        match p {
            Polled::Ring(r) => self.handle_ring(r),
            Polled::Sent { .. } => self.handle_sent().map(|()| None),
            Polled::Done => {
                let c = self.q.completion_of(Polled::Done);
                self.handle(c).map(|()| None)
            }
            Polled::Full(c) => self.handle(*c).map(|()| None),
        }
    }

    /// A message (or credit message) received into a slot of the receive ring: the message,
    /// for the caller to queue.
    #[inline(always)]
    fn handle_ring(&mut self, slot: u32) -> Result<Option<Ready>> {
        if let Flow::Credits { credits, .. } = &mut self.flow {
            // The slot just completed (were it not a slot, its taker would fail).
            let (write_imm, imm) = self
                .q
                .ring_done(slot)
                .map_or((true, None), |r| (r.write_imm, r.imm));
            if let (false, Some(imm)) = (write_imm, imm) {
                let (kind, n) = wire::decode_imm(imm)?;
                *credits = credits.saturating_add(n);
                if kind == ImmKind::Credit {
                    // Credit messages are not counted in the window: re-post at once.
                    return self.q.repost_ring(slot).map(|()| None);
                }
            }
        }
        Ok(Some(slot))
    }

    /// [`handle`](Self::handle) for the usual completion of a data SEND (a send ring slot's,
    /// retiring no table entry).
    #[inline(always)]
    fn handle_sent(&mut self) -> Result<()> {
        self.take_retired();
        if let Flow::Credits {
            credit_msg_pending: true,
            ..
        } = self.flow
        {
            self.send_credit_msg()?;
        }
        Ok(())
    }

    /// Handles one completion: returns send buffers, applies credits, queues messages.
    #[inline(always)]
    pub(super) fn handle(&mut self, mut c: Completion) -> Result<()> {
        self.take_retired();
        if c.retired.capacity() > 0 {
            self.retire_own(&mut c.retired);
            if c.retired.is_empty() {
                // Only our own SENDs: the list goes back to the queue for the next one.
                self.q.recycle(std::mem::take(&mut c.retired));
            }
        }
        if c.wr_id < RESERVED_WR_ID {
            if !self.user_retired.is_empty() {
                let mut r = std::mem::take(&mut self.user_retired);
                r.append(&mut c.retired);
                c.retired = r;
            }
            self.user_done.push_back(c);
            return Ok(());
        }
        if !c.retired.is_empty() {
            self.user_retired.append(&mut c.retired);
        }
        if !c.is_success() {
            let e = c.to_error();
            if c.status == crate::verbs::cq::WR_FLUSH_ERR && !self.user_done.is_empty() {
                // A flush is the consequence; the caller's failed work request (already queued)
                // is the cause: let it be seen first, and fail every later call.
                self.failed.get_or_insert_with(|| e.to_string());
                return Ok(());
            }
            return Err(e);
        }
        match c.wr_id {
            id if id == WR_DATA || id == WR_CREDIT || is_list(id) => {
                // One completion for this SEND (or for the part of a shared list that its entry
                // covers); unsignaled ones before it were retired above, and a data SEND (a send
                // ring slot's) was counted with the ring's (take_retired).
                if id != WR_DATA {
                    self.sends_posted = self.sends_posted.saturating_sub(sends_of(id));
                }
                if let Flow::Credits {
                    credit_msg_pending: true,
                    ..
                } = self.flow
                {
                    self.send_credit_msg()?;
                }
            }
            WR_RECV => {
                // Successful receives come from the ring (handle_ring), never in full.
                return Err(Error::Protocol(
                    "a receive completion outside the receive ring".into(),
                ));
            }
            other => {
                return Err(Error::Protocol(format!(
                    "completion with unknown internal wr_id {other:#x}"
                )))
            }
        }
        Ok(())
    }

    /// Counts our data SENDs that completed (their send ring slots are free again).
    #[inline(always)]
    fn take_retired(&mut self) {
        let n = self.q.take_retired();
        self.sends_posted = self.sends_posted.saturating_sub(n as u32);
    }

    /// Takes our own unsignaled SENDs (credit messages, shared lists) out of a completion's
    /// retired list: they count as completed; the caller's stay in the list.
    #[inline(never)]
    fn retire_own(&mut self, retired: &mut Vec<Retired>) {
        retired.retain(|r| {
            if r.wr_id < RESERVED_WR_ID {
                return true;
            }
            self.sends_posted = self.sends_posted.saturating_sub(sends_of(r.wr_id));
            false
        });
    }

    /// Looks for CM events without blocking; a disconnect or device removal is an error.
    pub(super) fn check_cm(&mut self) -> Result<()> {
        let Some(id) = &self.cm else { return Ok(()) };
        while let Some(ev) = id.try_next_event()? {
            match ev.kind() {
                EventKind::Disconnected => self.disconnected = true,
                EventKind::TimewaitExit | EventKind::AddrChange | EventKind::Established => {}
                _ => return Err(ev.to_error("connection")),
            }
        }
        Ok(())
    }

    /// Waits for at least one completion and handles it, or fails at `deadline`.
    #[inline(always)]
    pub(super) fn pump(&mut self, deadline: &mut Deadline, what: &'static str) -> Result<()> {
        if let Some(r) = self.pump_take(deadline, what)? {
            self.ready.push_back(r);
        }
        Ok(())
    }

    /// [`pump`](Self::pump), a message received handed back instead of queued (see
    /// [`handle_polled_take`](Self::handle_polled_take)).
    #[inline(always)]
    pub(super) fn pump_take(
        &mut self,
        deadline: &mut Deadline,
        what: &'static str,
    ) -> Result<Option<Ready>> {
        // A timeout leaves the endpoint usable (the caller may wait again); errors do not.
        self.pump_inner(deadline, what)
            .map_err(|e| if e.is_timeout() { e } else { self.fail(e) })
    }

    #[inline(always)]
    fn pump_inner(&mut self, deadline: &mut Deadline, what: &'static str) -> Result<Option<Ready>> {
        if self.deferred.is_some() {
            // Re-posting returns credits: progress that the caller's condition may be waiting
            // for (an OOB peer grants no credit of its own), so let it look again first.
            return self.settle(true).map(|()| None);
        }
        let seen = self.disconnected;
        match self.q.mode() {
            WaitMode::Event => self.pump_event(deadline, what, seen),
            WaitMode::Poll => self.pump_poll(deadline, what, seen),
        }
    }

    /// [`pump`](Self::pump) sleeping on the completion channel and, over CM, on the CM channel
    /// too (a disconnect wakes it at once). The deadline is honest: the first sleep's time is
    /// the kernel's account (no clock read for what arrives within one sleep), the clock runs
    /// from the second sleep on.
    #[inline(always)]
    fn pump_event(
        &mut self,
        deadline: &mut Deadline,
        what: &'static str,
        seen: bool,
    ) -> Result<Option<Ready>> {
        loop {
            if self.disconnected {
                return self.after_disconnect(seen, what).map(|()| None);
            }
            // Until a sleep ends without the completion, `left` is what the wait started with.
            if let Some(at) = deadline.at {
                deadline.left = SleepLeft::new(at.saturating_duration_since(Instant::now()));
                if deadline.left.is_zero() {
                    return Err(Error::Timeout {
                        what,
                        after: deadline.timeout,
                    });
                }
            }
            let cm = self.cm.as_ref().map(CmId::channel_fd);
            let mut cm_ready = false;
            if let Some(c) = self.q.wait_one(&mut deadline.left, cm, &mut cm_ready)? {
                return self.handle_polled_take(c);
            }
            if cm_ready {
                self.check_cm()?;
            }
            // A sleep ended without the completion: the clock runs from here.
            deadline.at();
        }
    }

    /// [`pump`](Self::pump) busy-polling: spins first without a clock, then with one, looking
    /// for CM events (a peer's disconnect) every [`CM_CHECK`].
    #[inline(always)]
    fn pump_poll(
        &mut self,
        deadline: &mut Deadline,
        what: &'static str,
        seen: bool,
    ) -> Result<Option<Ready>> {
        if !seen && deadline.at.is_none() {
            // Busy-poll for a while: nothing but the poll itself per empty look.
            if let Some(c) = self.q.spin(SPIN_POLLS)? {
                return self.handle_polled_take(c);
            }
        }
        let at = deadline.at();
        let mut next_cm = Instant::now();
        loop {
            if self.disconnected {
                return self.after_disconnect(seen, what).map(|()| None);
            }
            if let Some(c) = self.q.spin(256)? {
                return self.handle_polled_take(c);
            }
            let now = Instant::now();
            if now >= at {
                return Err(Error::Timeout {
                    what,
                    after: deadline.timeout,
                });
            }
            if self.cm.is_some() && now >= next_cm {
                self.check_cm()?;
                next_cm = now + CM_CHECK;
            }
        }
    }

    /// Handles what is in the CQ now, at most `max` completions; returns how many.
    pub(super) fn poll_now_up_to(&mut self, max: usize) -> Result<usize> {
        let mut n = 0;
        while n < max {
            match self.q.spin(1)? {
                Some(c) => {
                    n += 1;
                    self.handle_polled(c)?;
                }
                None => break,
            }
        }
        Ok(n)
    }

    /// A wait once the peer has disconnected: what arrived before the disconnect is taken
    /// (progress). With nothing left, the wait that noticed the disconnect (`seen`: it was
    /// noticed before) returns once without progress, so that its caller looks at
    /// `disconnected` (a wait for our own sends ends there: see
    /// [`wait_sent`](Self::wait_sent)); any later wait fails, as nothing more will arrive.
    fn after_disconnect(&mut self, seen: bool, what: &'static str) -> Result<()> {
        if self.poll_now_up_to(32)? == 0 && seen {
            return Err(Error::Connection(format!(
                "the peer disconnected while waiting for {what}"
            )));
        }
        Ok(())
    }

    pub(super) fn send_credit_msg(&mut self) -> Result<()> {
        let Flow::Credits {
            owed,
            credit_msg_pending,
            ..
        } = &mut self.flow
        else {
            return Ok(());
        };
        if self.sends_posted >= self.own_sq {
            *credit_msg_pending = true;
            return Ok(());
        }
        let n = std::mem::take(owed);
        *credit_msg_pending = false;
        let wr = SendRequest::new(
            WR_CREDIT,
            SendOp::SendWithImm(wire::encode_imm(ImmKind::Credit, n)),
            [],
        );
        self.q.post_send(wr)?;
        self.sends_posted += 1;
        self.unsignaled_run = 0;
        Ok(())
    }

    /// Waits until a message may be sent (a credit and a free send slot).
    #[inline(always)]
    pub(super) fn reserve_send(&mut self, deadline: &mut Deadline) -> Result<()> {
        while self.credits() == 0 {
            self.pump(
                deadline,
                "send credit from the peer (it is not taking messages)",
            )?;
        }
        while self.sends_posted >= self.own_sq || self.q.free_send_slots() == 0 {
            self.pump(deadline, "a send completion")?;
        }
        Ok(())
    }

    /// Re-posts the buffer [`recv_deferred`](Self::recv_deferred) kept, returning its credit
    /// (with `credit_msg`, a credit message once enough are owed; see [`repost`](Self::repost)).
    #[inline(always)]
    pub(super) fn settle(&mut self, credit_msg: bool) -> Result<()> {
        if let Some((slot, _)) = self.deferred.take() {
            self.repost(slot, credit_msg)?;
        }
        Ok(())
    }

    /// Gives one receive buffer back: in credit flow it is released, and re-posted with the
    /// ones before it once a batch is released (see [`credit_flow`]), which accounts for their
    /// credits; with `credit_msg`, a credit message goes out once enough are owed (else they
    /// wait for the next message or re-post).
    #[inline(always)]
    pub(super) fn repost(&mut self, slot: u32, credit_msg: bool) -> Result<()> {
        match self.flow {
            Flow::Credits { batch, .. } => {
                if self.q.release_ring(slot)? < batch as usize {
                    return Ok(());
                }
                self.post_released(credit_msg)
            }
            // Its credit came when the message was taken (see recv_inner).
            Flow::Implicit { .. } => self.q.repost_ring(slot),
        }
    }

    /// Posts the released receives (one list post) and accounts for their credits (see
    /// [`repost`](Self::repost)). Once per batch: kept out of the per-message path.
    #[inline(never)]
    pub(super) fn post_released(&mut self, credit_msg: bool) -> Result<()> {
        let n = self.q.post_released()?;
        if let Flow::Credits {
            owed, threshold, ..
        } = &mut self.flow
        {
            *owed += n as u32;
            if credit_msg && *owed >= *threshold {
                self.send_credit_msg()?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credit_threshold_is_half_rounded_up() {
        // Our window `depth`, the peer's any other: the threshold follows ours, else a peer
        // with a larger window (a sender's 64 against a receiver's 16 slots) waits for a
        // credit message that never comes.
        for (depth, want, peer) in [(1, 1, 1), (2, 1, 8), (3, 2, 3), (16, 8, 64), (16, 8, 4)] {
            match credit_flow(peer, depth) {
                Flow::Credits {
                    credits,
                    threshold,
                    owed,
                    batch,
                    ..
                } => {
                    assert_eq!((credits, threshold, owed), (peer, want, 0));
                    // Both sides out of credits is ruled out (see credit_flow).
                    assert!(batch >= 1 && (batch == 1 || batch + threshold <= depth));
                    assert!(
                        batch == 1 || batch < threshold,
                        "a batch's credits ride on data"
                    );
                    // At most two unread credit messages: each carries >= threshold credits.
                    assert!(depth / threshold <= 2);
                }
                Flow::Implicit { .. } => panic!("credit flow expected"),
            }
        }
    }
}
