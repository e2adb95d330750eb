//! A single-owner queue: one RC queue pair and the one completion queue it uses for both of its
//! queues, posted to and polled through `&mut self`, so the CQ's in-flight table needs no lock.
//!
//! A [`CompletionQueue`] is shared: any thread may post on its QPs and poll it, so every access to
//! its table takes a mutex. A [`SoloQueue`] makes its CQ itself, lets exactly one QP claim it
//! (any other QP made on that CQ is refused), and from then on is the only way to reach the
//! table: the QP's and the CQ's own `&self` posting and polling refuse that CQ, so two threads
//! can only use the queue one after the other (`&mut`), and `mem::forget` of it only leaks.

use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::verbs::cq::{Completion, CompletionQueue, Polled, SleepLeft, Slept, SoloCq, WaitMode};
use crate::verbs::device::Context;
use crate::verbs::mr::LocalBuf;
use crate::verbs::qp::{
    ring_slot_busy, BufRequest, PostError, PostListError, QueuePair, RecvList, SendBatch, SendOp,
    SendRequest, Sge, SharedList, SharedPost,
};

/// One QP and its own CQ, used by one owner at a time (see the [module docs](self)).
pub struct SoloQueue {
    // Field order is drop order: the QP first (ERR, destroy), then the CQ with its table.
    qp: QueuePair,
    cq: SoloCq,
    /// Event mode: the CQ's notification is armed and its event not read yet.
    armed: bool,
}

impl std::fmt::Debug for SoloQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SoloQueue({:?}, {:?})", self.qp, self.cq.cq())
    }
}

impl SoloQueue {
    /// Makes a single-owner CQ with room for `cqe` completions and the QP that `make_qp` creates
    /// on it (as both its send and its receive CQ, e.g. with [`QueuePair::new_rc`] or
    /// `CmId::create_qp`). `make_qp` may fail and be called again; the CQ accepts one QP.
    pub fn new(
        ctx: &Context,
        cqe: u32,
        mode: WaitMode,
        make_qp: impl FnOnce(&CompletionQueue) -> Result<QueuePair>,
    ) -> Result<SoloQueue> {
        let cq = CompletionQueue::new_solo(ctx, cqe, mode)?;
        let qp = make_qp(cq.cq())?;
        if !(qp.send_cq().same_as(cq.cq()) && qp.recv_cq().same_as(cq.cq())) {
            return Err(Error::InvalidArgument(
                "a single-owner queue's QP must use its CQ for both queues".into(),
            ));
        }
        Ok(SoloQueue {
            qp,
            cq,
            armed: false,
        })
    }

    /// The queue pair (state changes, attributes; its `&self` posts refuse this queue's CQ:
    /// post through the queue).
    pub fn qp(&self) -> &QueuePair {
        &self.qp
    }

    /// The completion queue (its `&self` polls refuse: poll through the queue).
    pub fn cq(&self) -> &CompletionQueue {
        self.cq.cq()
    }

    /// How [`wait`](Self::wait) waits.
    pub fn mode(&self) -> WaitMode {
        self.cq.cq().mode()
    }

    /// [`QueuePair::post_send`], without a lock.
    pub fn post_send(&mut self, wr: SendRequest) -> std::result::Result<(), PostError> {
        let (_, t) = self.cq.split();
        self.qp.post_send_into(t, wr)
    }

    /// [`QueuePair::post_send_batch`] (a post list: one doorbell), without a lock.
    pub fn post_send_batch(
        &mut self,
        b: &mut SendBatch,
    ) -> std::result::Result<usize, PostListError> {
        let (_, t) = self.cq.split();
        self.qp.post_send_batch_into(t, b)
    }

    /// [`QueuePair::post_shared_list`] (one shared source, one doorbell), without a lock.
    #[inline(always)]
    pub fn post_shared_list(
        &mut self,
        l: &mut SharedList,
        p: &SharedPost<'_>,
        signaled: impl FnMut(usize) -> bool,
        wr_id: impl FnMut(usize, u32) -> u64,
    ) -> std::result::Result<usize, PostListError> {
        let (_, t) = self.cq.split();
        self.qp.post_shared_into(t, l, p, signaled, wr_id)
    }

    /// [`QueuePair::post_send_buf`], without a lock.
    #[inline(always)]
    pub fn post_send_buf(&mut self, req: BufRequest) -> std::result::Result<(), PostError> {
        let (_, t) = self.cq.split();
        self.qp.post_send_buf_into(t, req)
    }

    /// [`QueuePair::post_recv`], without a lock.
    pub fn post_recv(
        &mut self,
        wr_id: u64,
        sges: impl IntoIterator<Item = Sge>,
    ) -> std::result::Result<(), PostError> {
        let (_, t) = self.cq.split();
        self.qp.post_recv_into(t, wr_id, sges)
    }

    /// Receives into every buffer of `bufs` (taken out of it, in order), all with `wr_id`, as one
    /// list (one `ibv_post_recv(3)`), without a lock; on failure the buffers not posted come
    /// back in the error.
    #[inline(always)]
    pub fn post_recv_list(
        &mut self,
        l: &mut RecvList,
        wr_id: u64,
        bufs: &mut Vec<LocalBuf>,
    ) -> std::result::Result<usize, PostListError> {
        let (_, t) = self.cq.split();
        self.qp.post_recv_list_into(t, l, wr_id, bufs)
    }

    /// [`QueuePair::post_recv_buf`], without a lock.
    #[inline(always)]
    pub fn post_recv_buf(
        &mut self,
        wr_id: u64,
        buf: LocalBuf,
    ) -> std::result::Result<(), PostError> {
        let (_, t) = self.cq.split();
        self.qp.post_recv_buf_into(t, wr_id, buf)
    }

    /// Makes `bufs` (each registered in the QP's context) the queue's receive ring and posts a
    /// receive into each: they stay with the queue for good. A slot's completion comes as a
    /// [`RingDone`](crate::verbs::cq::RingDone); read the slot with [`ring_data`](Self::ring_data), then give it back with
    /// [`repost_ring`](Self::repost_ring). Once per queue; `wr_id` names its receives in error
    /// completions.
    pub(crate) fn set_recv_ring(&mut self, wr_id: u64, bufs: Vec<LocalBuf>) -> Result<()> {
        let (_, t) = self.cq.split();
        self.qp.set_recv_ring(t, wr_id, bufs)
    }

    /// Posts ring slot `slot` again (its receive completed and the owner is done with it).
    #[inline(always)]
    pub(crate) fn repost_ring(&mut self, slot: u32) -> Result<()> {
        let (_, t) = self.cq.split();
        self.qp.post_ring_recv(t, slot)
    }

    /// Releases ring slot `slot` (its receive completed and the owner is done with it) for the
    /// next [`post_released`](Self::post_released): from here it is the queue's (not lent).
    /// Returns how many slots are released and not posted yet.
    #[inline(always)]
    pub(crate) fn release_ring(&mut self, slot: u32) -> Result<usize> {
        let (_, t) = self.cq.split();
        t.ring.release(slot).ok_or_else(|| ring_slot_busy(slot))
    }

    /// Posts the released ring slots' receives as one list (one `ibv_post_recv(3)`); returns
    /// how many.
    #[inline(always)]
    pub(crate) fn post_released(&mut self) -> Result<usize> {
        let (_, t) = self.cq.split();
        self.qp.post_ring_released(t)
    }

    /// What ring slot `slot`'s last receive got (meaningful while the owner holds the slot:
    /// after its completion, before it is posted again); `None` if there is no such slot.
    #[inline(always)]
    pub(crate) fn ring_done(&self, slot: u32) -> Option<&crate::verbs::cq::RingDone> {
        self.cq.table().ring.done(slot)
    }

    /// The first `len` bytes of ring slot `slot`, if its receive completed and it is not posted
    /// again (so the device cannot write it while the slice lives: re-posting takes `&mut`).
    #[inline(always)]
    pub(crate) fn ring_data(&self, slot: u32, len: usize) -> Option<&[u8]> {
        self.cq.table().ring.data(slot, len)
    }

    /// Hands back an emptied [`Completion::retired`] list: the next completion that retires
    /// unsignaled sends reuses it (no allocation per signaled SEND).
    #[inline(always)]
    pub fn recycle(&mut self, retired: Vec<crate::verbs::Retired>) {
        self.cq.split().1.recycle(retired);
    }

    /// Makes `bufs` (each registered in the QP's context) the queue's send ring: they stay with
    /// the queue for good. Fill the next free slot with [`next_send_buf`](Self::next_send_buf),
    /// post it with [`post_ring_send`](Self::post_ring_send); its completion (or a later one:
    /// sends complete in order) frees it, and [`take_retired`](Self::take_retired) counts the
    /// sends freed. Once per queue; `wr_id` names its sends in full completions.
    pub(crate) fn set_send_ring(&mut self, wr_id: u64, bufs: Vec<LocalBuf>) -> Result<()> {
        let (_, t) = self.cq.split();
        self.qp.set_send_ring(t, wr_id, bufs)
    }

    /// How many send ring slots are free.
    #[inline(always)]
    pub(crate) fn free_send_slots(&self) -> usize {
        self.cq.table().send_ring.free_slots()
    }

    /// The next free send ring slot's whole buffer, to fill before
    /// [`post_ring_send`](Self::post_ring_send) (posting takes `&mut self`: the slice cannot
    /// outlive it).
    #[inline(always)]
    pub(crate) fn next_send_buf(&mut self) -> Option<&mut [u8]> {
        self.cq.split().1.send_ring.next_free()
    }

    /// Posts the first `len` bytes of the next free send ring slot as a SEND (`op`: SEND or
    /// SEND_WITH_IMM), without a lock.
    #[inline(always)]
    pub(crate) fn post_ring_send(&mut self, op: SendOp, len: usize, signaled: bool) -> Result<()> {
        let (_, t) = self.cq.split();
        self.qp.post_ring_send(t, op, len, signaled)
    }

    /// How many send ring sends completed (signaled, or retired by a later completion) since
    /// the last call: count it after every completion handled.
    #[inline(always)]
    pub(crate) fn take_retired(&mut self) -> usize {
        self.cq.split().1.take_retired()
    }

    /// A completion this queue's wait handed out, in full.
    #[inline(always)]
    pub(crate) fn completion_of(&mut self, p: Polled) -> Completion {
        p.into_completion(self.cq.split().1)
    }

    /// [`CompletionQueue::poll_one`], without a lock.
    #[inline(always)]
    pub fn poll_one(&mut self) -> Result<Option<Completion>> {
        let (cq, t) = self.cq.split();
        cq.poll_one_in(t)
    }

    /// Busy-polls up to `spins` times for one completion (one-entry `ibv_poll_cq(3)` calls,
    /// yielding the CPU every 256): the per-message wait, with nothing but the poll itself in
    /// the loop. `Ok(None)` if none came.
    #[inline(always)]
    pub fn spin_one(&mut self, spins: u32) -> Result<Option<Completion>> {
        let (cq, t) = self.cq.split();
        cq.spin_one_in(t, spins)
    }

    /// [`spin_one`](Self::spin_one), the completion as the per-message path takes it.
    #[inline(always)]
    pub(crate) fn spin(&mut self, spins: u32) -> Result<Option<Polled>> {
        let (cq, t) = self.cq.split();
        cq.spin_in(t, spins)
    }

    /// [`CompletionQueue::poll_into`], without a lock: up to `max` completions in one
    /// `ibv_poll_cq` batch.
    #[inline(always)]
    pub fn poll_into(&mut self, max: usize, out: &mut Vec<Completion>) -> Result<usize> {
        let before = out.len();
        let (cq, t) = self.cq.split();
        cq.poll_raw(t, before + max, out)?;
        Ok(out.len() - before)
    }

    /// [`CompletionQueue::wait`], without a lock.
    pub fn wait(&mut self, max: usize, timeout: Duration) -> Result<Vec<Completion>> {
        let mut out = Vec::new();
        self.wait_into(max, timeout, &mut out)?;
        Ok(out)
    }

    /// [`wait`](Self::wait) appending to `out` (so a loop can reuse one vector): at least one
    /// completion, at most `max`; returns how many.
    pub fn wait_into(
        &mut self,
        max: usize,
        timeout: Duration,
        out: &mut Vec<Completion>,
    ) -> Result<usize> {
        let base = out.len();
        if self.mode() == WaitMode::Poll {
            // Busy-poll with nothing but the poll in the loop; the clock is read once per 256
            // looks (it can cost microseconds in an emulated guest), and not at all if the first
            // 256 find something.
            let mut deadline = None;
            loop {
                let (cq, t) = self.cq.split();
                if let Some(c) = cq.spin_one_in(t, 256)? {
                    out.push(c);
                    cq.poll_raw(t, base + max.max(1), out)?;
                    return Ok(out.len() - base);
                }
                let d = *deadline.get_or_insert_with(|| Instant::now() + timeout);
                if Instant::now() >= d {
                    return Err(Error::Timeout {
                        what: "a work completion",
                        after: timeout,
                    });
                }
            }
        }
        // The shared wait arms and reads events on its own: arm again before the next sleep.
        self.armed = false;
        let (cq, t) = self.cq.split();
        cq.wait_with(max, timeout, out, |max, out| cq.poll_raw(t, max, out))?;
        Ok(out.len() - base)
    }

    /// The per-message wait: one look at the CQ and, in event mode, one sleep on the
    /// completion channel (and on `also`, e.g. a CM channel) of at most `left`, which is
    /// decreased by the time slept (as the kernel measured it: no clock read). The
    /// notification stays armed between calls (armed again as soon as its event is read, as
    /// `ibv_rc_pingpong -e` does), and once a look after that arm found the CQ empty, the next
    /// wait sleeps without looking first: everything that lands later raises an event.
    ///
    /// `None` when no completion came: the sleep ended (the CQ's event came without one, a
    /// signal cut it, or `left` ran out: then it is zero), or a polling CQ found nothing; and
    /// `also_ready` is set when `also` is readable.
    #[inline(always)]
    pub(crate) fn wait_one(
        &mut self,
        left: &mut SleepLeft,
        also: Option<BorrowedFd<'_>>,
        also_ready: &mut bool,
    ) -> Result<Option<Polled>> {
        let event = self.mode() == WaitMode::Event;
        let (cq, t) = self.cq.split();
        if let Some(c) = t.take_polled() {
            return Ok(Some(c));
        }
        // From here the stash and the pending list are empty: each look polls at once.
        let quiet = event && self.armed && t.drained && !cq.foreign_armed();
        if !quiet {
            if let Some(c) = cq.poll_once(t)? {
                return Ok(Some(c));
            }
        }
        if !event {
            return Ok(None);
        }
        if !self.armed || cq.foreign_armed() {
            cq.notify_next()?;
            self.armed = true;
            // A completion may have landed before the notification was armed.
            if let Some(c) = cq.poll_once(t)? {
                return Ok(Some(c));
            }
        }
        match cq.sleep_once(left, also)? {
            Slept::Quiet | Slept::Cut => Ok(None),
            Slept::Also => {
                *also_ready = true;
                Ok(None)
            }
            // The event of a completion an earlier look took (it landed after that arm), if
            // this look finds none.
            Slept::Event => {
                cq.notify_next()?;
                cq.poll_once(t)
            }
        }
    }
}
