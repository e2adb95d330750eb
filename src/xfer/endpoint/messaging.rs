//! Messages: send, receive (lent or deferred), flush, and the caller's own work requests.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::verbs::{Completion, RingDone, SendOp, SendRequest};
use crate::xfer::wire::{self, ImmKind};

use super::conn::{Deadline, Endpoint, Flow, Ready};
use super::options::RESERVED_WR_ID;

/// Completions [`Endpoint::last_words`] handles at most (a receive window's worth and more).
const LAST_WORDS_POLLS: usize = 4096;

/// A received message, lent to [`Endpoint::recv_with`]'s closure.
#[derive(Debug)]
pub struct Message<'a> {
    /// The payload (empty for an RDMA WRITE_WITH_IMM).
    pub data: &'a [u8],
    /// The caller's immediate data: of an RDMA WRITE_WITH_IMM, or of a SEND_WITH_IMM from a
    /// peer without credits (OOB). `None` for rdmaxfer messages (their immediate is internal).
    pub imm: Option<u32>,
    /// For an RDMA WRITE_WITH_IMM: how many bytes the peer wrote.
    pub rdma_write_len: Option<u32>,
}

/// Waits (at most the timeout) for the next message and takes it: `Ready`, or returns the error.
/// A macro, not a function: the message stays in registers (returned in a `Result`, it went
/// through memory on every message).
macro_rules! next_ready {
    ($ep:expr) => {{
        $ep.check_usable()?;
        let mut deadline = $ep.deadline();
        // A message that arrives while none is queued is taken at once (not queued first).
        loop {
            if let Some(r) = $ep.take_ready() {
                break r;
            }
            if let Some(r) = $ep.pump_take(&mut deadline, "a message from the peer")? {
                break $ep.taken(r);
            }
        }
    }};
}

impl Endpoint {
    /// Sends a message of `len` bytes that `fill` writes into a registered buffer, waiting (at
    /// most the timeout) for a credit and a free buffer.
    #[inline(always)]
    pub fn send_with(&mut self, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<()> {
        self.send_then(len, fill, |_| (), false)
    }

    /// [`send_with`](Self::send_with), then `after` on the payload of the last message taken
    /// with [`recv_deferred`](Self::recv_deferred) (empty if none), before its buffer is
    /// re-posted: work on the previous message that need not delay this one. When the send has
    /// to wait first (which re-posts deferred receives), `after` runs before the wait.
    ///
    /// With `more` (the caller will send again, e.g. the next ping-pong message), the SEND may
    /// be posted unsignaled: no completion (no wake-up) of its own; its buffer stays with the
    /// queue until a later signaled work request's completion retires it (or a flush error
    /// returns it). The SEND that takes the last send-queue slot or the last send buffer is
    /// always signaled, so a wait for either always ends. If the caller stops before its next
    /// send, it must call [`end_burst`](Self::end_burst): an unsignaled last SEND can never be
    /// seen to complete.
    #[inline(always)]
    pub(crate) fn send_then<R>(
        &mut self,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
        mut after: impl FnMut(&[u8]) -> R,
        more: bool,
    ) -> Result<R> {
        self.check_usable()?;
        self.check_msg_len(len)?;
        let free = self.q.free_send_slots();
        let can_send_now = self.credits() > 0 && self.sends_posted < self.own_sq && free > 0;
        // One call site for the post (its `fill` stays in line): `after` runs (once) before a
        // wait or after the post.
        let mut early = None;
        if !can_send_now {
            early = Some(after(self.last_deferred()));
            // A deadline only when the send has to wait (see reserve_send).
            let mut deadline = self.deadline();
            self.reserve_send(&mut deadline)?;
        }
        self.post_data(len, fill, more)?;
        let out = match early {
            Some(r) => r,
            None => after(self.last_deferred()),
        };
        // After the post: a reply that waited for this message is not delayed by re-posts.
        self.settle(true).map_err(|e| self.fail(e))?;
        Ok(out)
    }

    /// [`send_then`](Self::send_then)'s post, once a credit and a send slot are free: fills the
    /// send ring's next slot and posts it.
    #[inline(always)]
    fn post_data(&mut self, len: usize, fill: impl FnOnce(&mut [u8]), more: bool) -> Result<()> {
        match self.q.next_send_buf() {
            Some(buf) => fill(&mut buf[..len]),
            None => return Err(self.fail(no_send_slot())),
        }
        let op = match &mut self.flow {
            Flow::Credits { owed, .. } => {
                SendOp::SendWithImm(wire::encode_imm(ImmKind::Data, std::mem::take(owed)))
            }
            Flow::Implicit { .. } => SendOp::Send,
        };
        // Unsignaled only while a later SEND is sure to come and a wait for a slot or a buffer
        // cannot depend on this one (see above).
        let signaled =
            !more || self.sends_posted + 1 >= self.own_sq || self.q.free_send_slots() <= 1;
        if let Err(e) = self.q.post_ring_send(op, len, signaled) {
            return Err(self.fail(e));
        }
        self.sends_posted += 1;
        self.unsignaled_run = if signaled {
            0
        } else {
            self.unsignaled_run.saturating_add(1)
        };
        match &mut self.flow {
            Flow::Credits { credits, .. } | Flow::Implicit { credits } => *credits -= 1,
        }
        Ok(())
    }

    /// Refuses a message longer than the peer takes.
    #[inline(always)]
    pub(super) fn check_msg_len(&self, len: usize) -> Result<()> {
        if len > self.peer_msg_size {
            return Err(too_long(len, self.peer_msg_size));
        }
        Ok(())
    }

    /// The payload of the last message [`recv_deferred`](Self::recv_deferred) (or
    /// [`take_deferred`](Self::take_deferred)) took and that is not re-posted yet (empty if none).
    #[inline(always)]
    pub(crate) fn last_deferred(&self) -> &[u8] {
        self.deferred
            .and_then(|(slot, n)| self.q.ring_data(slot, n as usize))
            .unwrap_or(&[])
    }

    /// Sends `data` as one message (copied into a registered buffer).
    pub fn send(&mut self, data: &[u8]) -> Result<()> {
        self.send_with(data.len(), |b| b.copy_from_slice(data))
    }

    /// Waits (at most the timeout) for the next message, lends it to `f`, then re-posts its
    /// buffer and returns the credit.
    pub fn recv_with<R>(&mut self, f: impl FnOnce(Message<'_>) -> R) -> Result<R> {
        self.recv_inner(f, false)
    }

    /// Like [`recv_with`](Self::recv_with), but the buffer is re-posted (and its credit
    /// returned) only by the next call that sends, waits or takes a message: a ping-pong reply is
    /// then posted before the re-post, which stays off the round trip.
    #[inline(always)]
    pub(crate) fn recv_deferred<R>(&mut self, f: impl FnOnce(Message<'_>) -> R) -> Result<R> {
        self.recv_inner(f, true)
    }

    /// Like [`recv_deferred`](Self::recv_deferred), but lends nothing: the message's payload is
    /// then `after`'s argument in the next [`send_then`](Self::send_then) (or
    /// [`last_deferred`](Self::last_deferred)'s). Returns its length (0 for an RDMA
    /// WRITE_WITH_IMM). For a caller that looks at a message only after its next send (the
    /// ping-pong client): one look-up of the payload, not two.
    #[inline(always)]
    pub(crate) fn take_deferred(&mut self) -> Result<usize> {
        let slot = next_ready!(self);
        let r = self.arrived(slot)?;
        let len = if r.write_imm { 0 } else { r.byte_len };
        if len as usize > self.msg_size {
            return Err(self.fail(overlong(len as usize, self.msg_size)));
        }
        self.defer(slot, len)?;
        Ok(len as usize)
    }

    /// What came into ring slot `slot`, a message taken and not given back yet (an error if
    /// the slot is not one: never on a real path).
    #[inline(always)]
    pub(super) fn arrived(&mut self, slot: u32) -> Result<RingDone> {
        self.arrival(slot).map_err(|e| self.fail(e))
    }

    /// [`arrived`](Self::arrived) without failing the endpoint (for callers that fail it
    /// later).
    #[inline(always)]
    pub(super) fn arrival(&self, slot: u32) -> Result<RingDone> {
        self.q
            .ring_done(slot)
            .copied()
            .ok_or_else(|| not_arrived(slot))
    }

    #[inline(always)]
    pub(super) fn recv_inner<R>(
        &mut self,
        f: impl FnOnce(Message<'_>) -> R,
        defer: bool,
    ) -> Result<R> {
        let slot = next_ready!(self);
        let r = self.arrived(slot)?;
        let out = match self.lend(slot, &r) {
            Ok(m) => f(m),
            Err(e) => return Err(self.fail(e)),
        };
        if defer {
            self.defer(slot, if r.write_imm { 0 } else { r.byte_len })?;
        } else {
            self.repost(slot, true).map_err(|e| self.fail(e))?;
        }
        Ok(out)
    }

    /// Keeps the buffer of the message in `slot` (its payload `len` bytes) until the next call
    /// that sends, waits or takes a message.
    #[inline(always)]
    fn defer(&mut self, slot: u32, len: u32) -> Result<()> {
        // One deferred at a time: taking the next message re-posts the one before.
        if let Some((slot, _)) = self.deferred.replace((slot, len)) {
            self.repost(slot, true).map_err(|e| self.fail(e))?;
        }
        Ok(())
    }

    /// Takes the oldest message that has arrived: in request/response flow a reply taken allows
    /// the next request, and the immediate is the caller's only where it is not internal.
    #[inline(always)]
    pub(super) fn take_ready(&mut self) -> Option<Ready> {
        let r = self.ready.pop_front()?;
        Some(self.taken(r))
    }

    /// [`take_ready`](Self::take_ready)'s accounting for message `r`, the oldest arrived.
    #[inline(always)]
    pub(super) fn taken(&mut self, r: Ready) -> Ready {
        if let Flow::Implicit { credits } = &mut self.flow {
            *credits += 1;
        }
        r
    }

    /// The message `r` in ring slot `slot` as lent to the caller; an error if its length
    /// overruns the slot.
    #[inline(always)]
    pub(super) fn lend(&self, slot: u32, r: &RingDone) -> Result<Message<'_>> {
        if r.write_imm {
            return Ok(Message {
                data: &[],
                imm: r.imm,
                rdma_write_len: Some(r.byte_len),
            });
        }
        let len = r.byte_len as usize;
        let data = self
            .q
            .ring_data(slot, len)
            .ok_or_else(|| overlong(len, self.msg_size))?;
        Ok(Message {
            data,
            // In credit flow a SEND's immediate is internal (its credits).
            imm: match self.flow {
                Flow::Credits { .. } => None,
                Flow::Implicit { .. } => r.imm,
            },
            rdma_write_len: None,
        })
    }

    /// Waits for the next message and returns a copy of its payload.
    pub fn recv(&mut self) -> Result<Vec<u8>> {
        self.recv_with(|m| m.data.to_vec())
    }

    /// Waits until every message sent so far has completed (was acknowledged by the peer), or
    /// until the peer has disconnected: its disconnect ends the wait without an error.
    ///
    /// A peer acknowledges a message after delivering it, and one that closes right after its
    /// last receive can disconnect before that acknowledgement reaches us (Soft-RoCE posts the
    /// receive completion first and may never send the acknowledgement once the peer's QP is in
    /// the error state; or the peer's disconnect overtakes it). So a disconnect during this wait
    /// is the end of an orderly close, not a failure; whether the peer *took* a message is for
    /// the protocol to say (a reply), as every rdmaxfer protocol does.
    pub fn flush(&mut self) -> Result<()> {
        self.check_usable()?;
        // The deferred receives go back, but no credit message for them: a flush ends a burst of
        // ours, and a peer that has finished too would not be there to take it.
        self.settle(false).map_err(|e| self.fail(e))?;
        self.wait_sent()
    }

    /// Ends a burst of [`send_then`](Self::send_then) calls that said more would follow, when
    /// the caller stops early with `e`: if the last SEND went unsignaled, its completion can
    /// never be seen, so the endpoint fails (a later [`close`](Self::close) does not wait for
    /// it; the queue keeps its buffer until teardown). Returns `e`.
    pub(crate) fn end_burst(&mut self, e: Error) -> Error {
        if self.unsignaled_run > 0 {
            self.failed
                .get_or_insert_with(|| format!("a burst of messages ended early: {e}"));
        }
        e
    }

    /// Waits until every message sent so far has completed, or the peer has disconnected (see
    /// [`flush`](Self::flush)); does nothing else when they have (unlike `flush`, it leaves
    /// deferred receives for later).
    pub(crate) fn wait_sent(&mut self) -> Result<()> {
        self.check_usable()?;
        if self.unsignaled_run > 0 {
            // A caller of send_then(more) that did not send again (a bug): fail rather than
            // wait for a completion that never comes.
            return Err(self.fail(Error::InvalidState {
                op: "wait for sent messages",
                object: "endpoint",
                state: "left with its last SEND unsignaled",
                needs: "a signaled SEND (send_then without `more`) or end_burst",
            }));
        }
        if self.sends_posted > 0 {
            // The wait would re-post deferred receives: without a credit message, as in flush.
            self.settle(false).map_err(|e| self.fail(e))?;
        }
        let mut deadline = self.deadline();
        while self.sends_posted > 0 {
            if self.disconnected {
                tracing::debug!(
                    "the peer disconnected before acknowledging our last {} message(s)",
                    self.sends_posted
                );
                break;
            }
            self.pump(&mut deadline, "the last sends to complete")?;
        }
        Ok(())
    }

    /// Posts the caller's own work request (RDMA READ / WRITE / WRITE_WITH_IMM) on the QP. Its
    /// wr_id must be below [`RESERVED_WR_ID`]. Its completion, from [`poll_user`](Self::poll_user),
    /// hands the buffers back; an unsignaled one's come back in the `retired` list of a later
    /// completion (so the last of a batch must be signaled). WRITE_WITH_IMM consumes a
    /// receive at the peer, so it waits for (and spends) a credit. SENDs go through
    /// [`send`](Self::send).
    pub fn post(&mut self, wr: SendRequest) -> Result<(), crate::verbs::PostError> {
        let refuse = |wr: SendRequest, msg: String| {
            let e = crate::verbs::PostError {
                error: Error::InvalidArgument(msg),
                bufs: crate::verbs::Bufs::new(),
            };
            drop(wr);
            Err(e)
        };
        if wr.wr_id() >= RESERVED_WR_ID {
            return refuse(wr, format!("wr_id must be below {RESERVED_WR_ID:#x}"));
        }
        if matches!(wr.op(), SendOp::Send | SendOp::SendWithImm(_)) {
            return refuse(
                wr,
                "use Endpoint::send for SENDs (they carry flow-control credits)".into(),
            );
        }
        if let Err(e) = self.check_usable() {
            return Err(crate::verbs::PostError {
                error: e,
                bufs: crate::verbs::Bufs::new(),
            });
        }
        let needs_credit = matches!(wr.op(), SendOp::WriteWithImm(..));
        if needs_credit {
            let mut deadline = self.deadline();
            while self.credits() == 0 {
                if let Err(e) = self.pump(&mut deadline, "send credit from the peer") {
                    return Err(crate::verbs::PostError {
                        error: e,
                        bufs: crate::verbs::Bufs::new(),
                    });
                }
            }
        }
        let signaled = wr.is_signaled();
        self.q.post_send(wr)?;
        if signaled {
            // Its completion retires our unsignaled SENDs before it.
            self.unsignaled_run = 0;
        }
        if needs_credit {
            match &mut self.flow {
                Flow::Credits { credits, .. } | Flow::Implicit { credits } => *credits -= 1,
            }
        }
        Ok(())
    }

    /// Waits until a credit for an RDMA WRITE_WITH_IMM is free, so that the next
    /// [`post`](Self::post) of one does not wait: at most the timeout without progress, where a
    /// completion of one of the caller's work requests is progress (the peer acknowledged a
    /// WRITE; its credit comes back once the peer takes it, a batch of credits at a time). On a
    /// slow link (seconds per chunk) credits come back seconds apart while the data moves.
    /// Unlike [`post`](Self::post)'s own wait (which gives up its work request), a timeout here
    /// leaves the caller's buffers with it and the endpoint usable: the caller may wait again.
    pub(crate) fn wait_credit(&mut self) -> Result<()> {
        self.check_usable()?;
        let mut deadline = self.deadline();
        while self.credits() == 0 {
            let done = self.user_done.len();
            self.pump(&mut deadline, "send credit from the peer")?;
            if self.user_done.len() > done {
                deadline = self.deadline();
            }
        }
        Ok(())
    }

    /// Waits (at most `timeout`) for completions of work requests posted with
    /// [`post`](Self::post), handling the endpoint's own on the way. Returns at least one.
    pub fn poll_user(&mut self, max: usize, timeout: Duration) -> Result<Vec<Completion>> {
        self.check_usable()?;
        let mut deadline = Deadline::new(timeout);
        while self.user_done.is_empty() {
            self.pump(&mut deadline, "a work completion")?;
        }
        let n = max.max(1).min(self.user_done.len());
        Ok(self.user_done.drain(..n).collect())
    }

    /// After a failure, the oldest message from the peer that arrived but was not taken, if
    /// any: completions already in the CQ are handled first (without waiting; errors among
    /// them are skipped). A peer's last words (e.g. why it ended the session) arrive before its
    /// disconnect, so they can name the cause of what the caller saw as a lost connection.
    pub fn last_words(&mut self) -> Option<Vec<u8>> {
        for _ in 0..LAST_WORDS_POLLS {
            match self.q.spin(1) {
                Ok(Some(c)) => {
                    if let Err(e) = self.handle_polled(c) {
                        tracing::debug!("a completion after the failure: {e}");
                    }
                }
                Ok(None) | Err(_) => break,
            }
        }
        while let Some(slot) = self.ready.pop_front() {
            match self.q.ring_done(slot) {
                Some(r) if !r.write_imm => {
                    return self
                        .q
                        .ring_data(slot, r.byte_len as usize)
                        .map(<[u8]>::to_vec);
                }
                _ => {}
            }
        }
        None
    }
}

/// A message longer than the peer takes (out of line: never on a real path).
#[cold]
#[inline(never)]
fn too_long(len: usize, limit: usize) -> Error {
    Error::InvalidArgument(format!(
        "message of {len} bytes exceeds the limit of {limit}"
    ))
}

/// No free send slot after reserve_send said there was one (out of line: never on a real path).
#[cold]
#[inline(never)]
fn no_send_slot() -> Error {
    Error::Protocol("no free send slot after waiting for one".into())
}

/// A message taken whose slot no longer says what came (out of line: never on a real path).
#[cold]
#[inline(never)]
pub(super) fn not_arrived(slot: u32) -> Error {
    Error::Protocol(format!("receive ring slot {slot} holds no message"))
}

/// A receive completion longer than its buffer (out of line: never on a real path).
#[cold]
#[inline(never)]
pub(super) fn overlong(len: usize, size: usize) -> Error {
    Error::Protocol(format!("received {len} bytes into a {size}-byte buffer"))
}
