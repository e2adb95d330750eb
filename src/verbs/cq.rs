//! Completion queues: `ibv_create_cq(3)`, `ibv_poll_cq(3)`, `ibv_req_notify_cq(3)`,
//! `ibv_create_comp_channel(3)`, `ibv_get_cq_event(3)` / `ibv_ack_cq_events(3)`.
//!
//! The CQ also keeps the *in-flight table*: every buffer posted on a queue pair using this CQ
//! lives here, keyed by an internal work request id, until its completion is polled. That is how
//! posted memory stays out of reach of safe code (and survives `mem::forget` of any handle).

use std::cell::UnsafeCell;
use std::os::fd::{AsRawFd as _, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::sys;
use crate::verbs::device::Context;

mod completion;
mod left;
mod notify;
mod recv_ring;
mod send_ring;
mod table;
pub use completion::{
    wc_status_str, Buf, Bufs, Completion, Retired, WaitMode, WcOpcode, REM_ACCESS_ERR, WR_FLUSH_ERR,
};
pub(crate) use left::SleepLeft;
#[cfg(feature = "tokio")]
pub(crate) use notify::CqChannel;
pub(crate) use recv_ring::RingDone;
pub(crate) use table::{Polled, Table};

/// How one sleep on a completion channel ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slept {
    /// The CQ's event came and was read: arm again before the next sleep.
    Event,
    /// The other descriptor is readable.
    Also,
    /// Cut short without an event (a signal, a spurious wake-up).
    Cut,
    /// The time given passed.
    Quiet,
}

/// Completion events read per `ibv_ack_cq_events(3)` call.
const ACK_BATCH: u32 = 64;

/// The per-message busy-poll yields the CPU once per this many empty looks: about 0.4 ms under
/// emulation, longer than a 4 KiB round trip's wait. Yielding every 256 (25 µs) made the 4 KiB
/// ping-pong 4-12 % slower than ibv_rc_pingpong, which never yields (measured with interleaved
/// rounds in one guest: `ci/bench-pingpong.sh`).
const SPIN_YIELD: u32 = 4096;

struct Channel(NonNull<sys::ibv_comp_channel>);

impl Drop for Channel {
    fn drop(&mut self) {
        // CqInner::drop destroys its CQ in its body, before its fields (this channel) drop, and
        // forgets the channel if that fails; if ibv_create_cq failed, no CQ uses it.
        // SAFETY: a channel is only used by the one CQ made with it; no live CQ uses it (above).
        let rc = unsafe { sys::ibv_destroy_comp_channel(self.0.as_ptr()) };
        if rc != 0 {
            tracing::warn!("ibv_destroy_comp_channel failed: {rc}");
        }
    }
}

/// Where a CQ keeps its in-flight table.
enum TableCell {
    /// A shared CQ ([`CompletionQueue::new`]): every access locks.
    Shared(Mutex<Table>),
    /// A single-owner CQ ([`SoloQueue`](crate::verbs::SoloQueue)): reached only through its one
    /// [`SoloCq`] (by `&mut`), without a lock; one QP may use it (`claimed`).
    Solo {
        table: UnsafeCell<Table>,
        claimed: AtomicBool,
    },
}

/// The one handle that reaches a single-owner CQ's in-flight table, without a lock.
///
/// Only [`CompletionQueue::new_solo`] makes one, one per such CQ, and it is not `Clone`. Nothing
/// else in this module touches a single-owner table while the CQ lives: the `&self` posts and
/// polls refuse it ([`CompletionQueue::lock`]), and a QP's drop leaves it alone (its buffers are
/// dropped with the table, after the QP is destroyed, or leaked: see `CqInner::leak`). So a
/// `&mut SoloCq` is exclusive access to the table, which is all [`table`](Self::table) needs.
pub(crate) struct SoloCq {
    table: NonNull<Table>,
    cq: CompletionQueue,
}

// SAFETY: the table is changed only through `&mut self` (`split`), so moving the handle to
// another thread moves that exclusive access with it; `Table` is `Send` (asserted below), and
// `CompletionQueue` is `Send`.
unsafe impl Send for SoloCq {}
// SAFETY: through `&SoloCq`, threads reach the `CompletionQueue` (`Sync`) and a `&Table`
// (`table`) at once, never a `&mut Table` (`split` takes `&mut self`). A shared `&Table` across
// threads is sound because `Table` is `Sync` (asserted below): no interior mutability, and its
// ring slots' raw requests are `Sync` by their own justified impls (`recv_ring.rs`, `send_ring.rs`).
unsafe impl Sync for SoloCq {}
const _: () = {
    const fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<Table>();
    send_and_sync::<CompletionQueue>();
};

impl SoloCq {
    /// The CQ.
    #[inline(always)]
    pub(crate) fn cq(&self) -> &CompletionQueue {
        &self.cq
    }

    /// The table, borrowed shared.
    #[inline(always)]
    pub(crate) fn table(&self) -> &Table {
        // SAFETY: `table` points into the `CqInner` that `self.cq` keeps alive; it is changed only
        // through `&mut self` (`split`), which cannot coexist with this borrow.
        unsafe { self.table.as_ref() }
    }

    /// The CQ and its table, borrowed exclusively.
    #[inline(always)]
    pub(crate) fn split(&mut self) -> (&CompletionQueue, &mut Table) {
        // SAFETY: `table` points into the `CqInner` that `self.cq` keeps alive; `&mut self` is
        // exclusive access to it (see the type's docs).
        (&self.cq, unsafe { self.table.as_mut() })
    }
}

/// A `&self` post or poll on a single-owner CQ (out of line: never on a real path).
#[cold]
#[inline(never)]
pub(crate) fn solo_refused(op: &'static str) -> Error {
    Error::InvalidState {
        op,
        object: "completion queue",
        state: "owned by a SoloQueue",
        needs: "a shared CompletionQueue (post and poll through the SoloQueue)",
    }
}

pub(crate) struct CqInner {
    cq: NonNull<sys::ibv_cq>,
    channel: Option<Channel>,
    /// The readiness-only descriptor handed out for the channel
    /// ([`CompletionQueue::channel_fd`]).
    ready: crate::os::ReadyFd,
    table: TableCell,
    /// A QP of this CQ could not be destroyed: the device may still reach buffers in the table,
    /// so its drop leaks them.
    leak: AtomicBool,
    /// Completion events read but not acknowledged yet (`ibv_ack_cq_events(3)` in batches, and
    /// before the CQ is destroyed).
    unacked: AtomicU32,
    /// The CQ was armed by someone other than its `SoloQueue`'s per-message wait (`arm`, the
    /// shared wait): that wait then looks at the CQ before every sleep until it arms it itself.
    foreign_arm: AtomicBool,
    wait_lock: Mutex<()>,
    mode: WaitMode,
    ctx: Context,
}

// SAFETY: the CQ and channel are only used through thread-safe verbs; a shared CQ's table is
// behind a Mutex; a single-owner CQ's table is reached only through its one `SoloCq`, by `&mut`
// (see there), and every `&self` path refuses it (`lock`); event waiting on a shared CQ is
// serialised by `wait_lock`. The raw pointers in the table (the rings' prebuilt work requests)
// point only into the table's own slots, so they move with it.
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        let unacked = *self.unacked.get_mut();
        if unacked > 0 {
            // SAFETY: valid CQ; exactly `unacked` of its events were read and not acked, so
            // ibv_destroy_cq below cannot block on them.
            unsafe { sys::ibv_ack_cq_events(self.cq.as_ptr(), unacked) };
        }
        // SAFETY: every QueuePair using this CQ holds a CompletionQueue clone (an Arc of this
        // CqInner), so none is left; destroyed once, here.
        let rc = unsafe { sys::ibv_destroy_cq(self.cq.as_ptr()) };
        if rc != 0 || *self.leak.get_mut() {
            tracing::warn!("ibv_destroy_cq: {rc}; leaking its in-flight buffers");
            let t = match &mut self.table {
                TableCell::Shared(m) => m.get_mut().unwrap_or_else(|p| p.into_inner()),
                TableCell::Solo { table, .. } => table.get_mut(),
            };
            std::mem::forget(std::mem::take(t));
            if rc != 0 {
                if let Some(ch) = self.channel.take() {
                    std::mem::forget(ch);
                }
            }
        }
    }
}

/// A completion queue, optionally with a completion channel for sleeping waits. Cheap to clone.
#[derive(Clone)]
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
}

impl CompletionQueue {
    /// `ibv_create_cq(3)` with room for `cqe` entries; with [`WaitMode::Event`] also
    /// `ibv_create_comp_channel(3)`.
    pub fn new(ctx: &Context, cqe: u32, mode: WaitMode) -> Result<CompletionQueue> {
        Self::create(ctx, cqe, mode, false)
    }

    /// A CQ for a [`SoloQueue`](crate::verbs::SoloQueue): one QP may claim it.
    pub(crate) fn new_solo(ctx: &Context, cqe: u32, mode: WaitMode) -> Result<SoloCq> {
        let cq = Self::create(ctx, cqe, mode, true)?;
        let TableCell::Solo { table, .. } = &cq.inner.table else {
            unreachable!("made single-owner above")
        };
        let table = NonNull::new(table.get()).expect("UnsafeCell::get is never null");
        Ok(SoloCq { table, cq })
    }

    fn create(ctx: &Context, cqe: u32, mode: WaitMode, solo: bool) -> Result<CompletionQueue> {
        let cqe = i32::try_from(cqe.max(1)).map_err(|_| Error::TooLarge {
            what: "completion queue",
            detail: format!("{cqe} entries exceed i32::MAX (ibv_create_cq takes an int)"),
        })?;
        let channel = match mode {
            WaitMode::Poll => None,
            WaitMode::Event => {
                // SAFETY: `ctx` holds an open ibv_context (its Arc is held).
                let ch = unsafe { sys::ibv_create_comp_channel(ctx.as_ptr()) };
                let ch = Channel(
                    NonNull::new(ch).ok_or_else(|| Error::last_os("ibv_create_comp_channel"))?,
                );
                // SAFETY: the channel is valid; its fd is ours to configure.
                let fd = unsafe { (*ch.0.as_ptr()).fd };
                // SAFETY: fcntl on a valid fd.
                let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
                // SAFETY: as above.
                if fl < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) } < 0 {
                    return Err(Error::last_os("fcntl(comp_channel, O_NONBLOCK)"));
                }
                Some(ch)
            }
        };
        let ch_ptr = channel
            .as_ref()
            .map_or(std::ptr::null_mut(), |c| c.0.as_ptr());
        // SAFETY: `ctx` holds an open ibv_context; the channel is NULL or the one just created.
        let cq = unsafe { sys::ibv_create_cq(ctx.as_ptr(), cqe, std::ptr::null_mut(), ch_ptr, 0) };
        let cq = NonNull::new(cq).ok_or_else(|| Error::last_os("ibv_create_cq"))?;
        let table = Table::with_capacity(cqe as usize);
        let table = if solo {
            TableCell::Solo {
                table: UnsafeCell::new(table),
                claimed: AtomicBool::new(false),
            }
        } else {
            TableCell::Shared(Mutex::new(table))
        };
        Ok(CompletionQueue {
            inner: Arc::new(CqInner {
                cq,
                channel,
                ready: crate::os::ReadyFd::default(),
                table,
                leak: AtomicBool::new(false),
                unacked: AtomicU32::new(0),
                foreign_arm: AtomicBool::new(false),
                wait_lock: Mutex::new(()),
                mode,
                ctx: ctx.clone(),
            }),
        })
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::ibv_cq {
        self.inner.cq.as_ptr()
    }

    /// The device context the CQ was created on.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// True if both handles are the same CQ.
    pub fn same_as(&self, other: &CompletionQueue) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// True for a [`SoloQueue`](crate::verbs::SoloQueue)'s CQ.
    pub fn is_single_owner(&self) -> bool {
        matches!(self.inner.table, TableCell::Solo { .. })
    }

    /// Refuses a QP on a single-owner CQ unless it is the first, and uses it for both queues.
    pub(crate) fn check_claim(send: &CompletionQueue, recv: &CompletionQueue) -> Result<()> {
        for cq in [send, recv] {
            if let TableCell::Solo { claimed, .. } = &cq.inner.table {
                if !send.same_as(recv) || claimed.load(Ordering::Acquire) {
                    return Err(Error::InvalidArgument(
                        "a SoloQueue's CQ takes one QP, for both of its queues".into(),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Claims a single-owner CQ for the QP just made on it (see [`check_claim`]); false if
    /// another QP claimed it first.
    ///
    /// [`check_claim`]: Self::check_claim
    pub(crate) fn claim(&self) -> bool {
        match &self.inner.table {
            TableCell::Solo { claimed, .. } => !claimed.swap(true, Ordering::AcqRel),
            TableCell::Shared(_) => true,
        }
    }

    /// The table of a shared CQ, locked; a single-owner CQ's is refused (`op` names the call).
    #[inline(always)]
    pub(crate) fn lock(&self, op: &'static str) -> Result<MutexGuard<'_, Table>> {
        match &self.inner.table {
            TableCell::Shared(m) => Ok(m.lock().unwrap_or_else(|p| p.into_inner())),
            TableCell::Solo { .. } => Err(solo_refused(op)),
        }
    }

    /// How [`wait`](Self::wait) waits.
    pub fn mode(&self) -> WaitMode {
        self.inner.mode
    }

    #[inline(always)]
    pub(crate) fn poll_raw(
        &self,
        t: &mut Table,
        max: usize,
        out: &mut Vec<Completion>,
    ) -> Result<()> {
        while out.len() < max {
            match t.take_polled() {
                Some(c) => out.push(c.into_completion(t)),
                None => break,
            }
        }
        // Not zeroed: this runs on every spin of a busy-poll, and ibv_poll_cq fills what it returns.
        let mut wcs = [std::mem::MaybeUninit::<sys::ibv_wc>::uninit(); 16];
        while out.len() < max {
            let want = (max - out.len()).min(wcs.len()) as i32;
            // SAFETY: valid CQ; `wcs` has room for `want` entries.
            let n = unsafe { sys::shim_ibv_poll_cq(self.as_ptr(), want, wcs.as_mut_ptr().cast()) };
            if n < 0 {
                return Err(Error::verb("ibv_poll_cq", libc::EIO));
            }
            for wc in &wcs[..n as usize] {
                // SAFETY: ibv_poll_cq initialised the first `n` entries.
                let wc = unsafe { wc.assume_init_ref() };
                table::trace_wc(wc);
                if let Some(c) = t.complete(wc) {
                    out.push(c);
                }
            }
            if n < want {
                break;
            }
        }
        Ok(())
    }

    /// Polls one completion without blocking (`ibv_poll_cq(3)` for one entry): the per-message
    /// path, with no vector to fill and drain.
    #[inline(always)]
    pub fn poll_one(&self) -> Result<Option<Completion>> {
        let mut t = self.lock("ibv_poll_cq")?;
        self.poll_one_in(&mut t)
    }

    /// [`poll_one`](Self::poll_one) on a table the caller holds.
    #[inline(always)]
    pub(crate) fn poll_one_in(&self, t: &mut Table) -> Result<Option<Completion>> {
        if let Some(c) = t.take_polled() {
            return Ok(Some(c.into_completion(t)));
        }
        loop {
            let mut wc = std::mem::MaybeUninit::<sys::ibv_wc>::uninit();
            // SAFETY: valid CQ; `wc` has room for one entry.
            let n = unsafe { sys::shim_ibv_poll_cq(self.as_ptr(), 1, wc.as_mut_ptr()) };
            if n < 0 {
                return Err(Error::verb("ibv_poll_cq", libc::EIO));
            }
            if n == 0 {
                return Ok(None);
            }
            // SAFETY: ibv_poll_cq initialised the entry.
            let wc = unsafe { wc.assume_init_ref() };
            table::trace_wc(wc);
            if let Some(c) = t.complete(wc) {
                return Ok(Some(c));
            }
            // A destroyed QP's completion: look again.
        }
    }

    /// Up to `spins` one-entry polls for one completion, yielding every 256 (see
    /// [`SoloQueue::spin_one`](crate::verbs::SoloQueue::spin_one)).
    #[inline(always)]
    pub(crate) fn spin_one_in(&self, t: &mut Table, spins: u32) -> Result<Option<Completion>> {
        Ok(self.spin_in(t, spins)?.map(|p| p.into_completion(t)))
    }

    /// [`spin_one_in`](Self::spin_one_in), the completion as the per-message path takes it.
    #[inline(always)]
    pub(crate) fn spin_in(&self, t: &mut Table, spins: u32) -> Result<Option<Polled>> {
        if let Some(c) = t.take_polled() {
            return Ok(Some(c));
        }
        self.poll_in(t, spins)
    }

    /// [`spin_in`](Self::spin_in) for a caller whose last `t.take_polled()` found nothing (the
    /// stash and the pending list are empty): polls at once.
    #[inline(always)]
    pub(crate) fn poll_in(&self, t: &mut Table, spins: u32) -> Result<Option<Polled>> {
        let mut i = 0u32;
        while i < spins {
            i += 1;
            if let Some(c) = self.poll_once(t)? {
                return Ok(Some(c));
            }
            // No spin_loop() hint: PAUSE makes an emulated (TCG) vCPU leave its translated code
            // (0.14 µs each, measured), which would slow the polling.
            if i % SPIN_YIELD == 0 {
                // Let other threads run on a busy host in a long wait (not within a message's).
                std::thread::yield_now();
            }
        }
        Ok(None)
    }

    /// One look for [`poll_in`](Self::poll_in), its caller's stash and pending list empty:
    /// one `ibv_poll_cq(3)` of up to STASH completions (a send's and a receive's often come
    /// together); the ones after the first wait in the stash for the next look. `None` if the
    /// CQ was empty (or held only a destroyed QP's completions).
    #[inline(always)]
    pub(crate) fn poll_once(&self, t: &mut Table) -> Result<Option<Polled>> {
        // SAFETY: valid CQ; the stash has room for STASH entries.
        let n = unsafe {
            sys::shim_ibv_poll_cq(self.as_ptr(), table::STASH as i32, t.stash.as_mut_ptr())
        };
        // Short: the CQ was empty after these (see `Table::drained`).
        t.drained = n < table::STASH as i32;
        if n <= 0 {
            if n < 0 {
                return Err(Error::verb("ibv_poll_cq", libc::EIO));
            }
            return Ok(None);
        }
        (t.stash_at, t.stash_len) = (0, n as usize);
        // One level check per poll, not one loop per poll (off is the usual case).
        if tracing::level_enabled!(tracing::Level::TRACE) {
            t.stash[..n as usize].iter().for_each(table::trace_wc);
        }
        Ok(t.take_stashed())
    }

    /// Polls up to `max` completions without blocking (`ibv_poll_cq(3)`).
    pub fn poll(&self, max: usize) -> Result<Vec<Completion>> {
        let mut out = Vec::new();
        self.poll_into(max, &mut out)?;
        Ok(out)
    }

    /// Like [`poll`](Self::poll), appending to `out` (so a busy loop can reuse one vector);
    /// returns how many were appended.
    pub fn poll_into(&self, max: usize, out: &mut Vec<Completion>) -> Result<usize> {
        let before = out.len();
        let mut t = self.lock("ibv_poll_cq")?;
        self.poll_raw(&mut t, before + max, out)?;
        Ok(out.len() - before)
    }

    /// Waits until at least one completion is there (at most `max` returned), or fails with
    /// [`Error::Timeout`] after `timeout`.
    pub fn wait(&self, max: usize, timeout: Duration) -> Result<Vec<Completion>> {
        let mut out = Vec::new();
        self.wait_with(max, timeout, &mut out, |max, out| {
            let mut t = self.lock("ibv_poll_cq")?;
            self.poll_raw(&mut t, max, out)
        })?;
        Ok(out)
    }

    /// [`wait`](Self::wait) appending to `out`, with `poll(len, out)` polling until `out` holds
    /// `len` completions.
    pub(crate) fn wait_with(
        &self,
        max: usize,
        timeout: Duration,
        out: &mut Vec<Completion>,
        mut poll: impl FnMut(usize, &mut Vec<Completion>) -> Result<()>,
    ) -> Result<()> {
        let (base, max) = (out.len(), out.len() + max.max(1));
        // True once `out` has something new.
        let mut poll = |max| -> Result<bool> {
            poll(max, out)?;
            Ok(out.len() > base)
        };
        // A completion that is already there costs no clock read: reading the clock can take
        // microseconds (HPET in an emulated guest), which would show in every latency figure.
        if poll(max)? {
            return Ok(());
        }
        let deadline = Instant::now() + timeout;
        let timed_out = || Error::Timeout {
            what: "a work completion",
            after: timeout,
        };
        let mut spins = 0u32;
        loop {
            if poll(max)? {
                return Ok(());
            }
            match &self.inner.channel {
                None => {
                    spins = spins.wrapping_add(1);
                    // Busy-polling: look at the clock only every 64 spins, for the same reason.
                    if spins % 64 == 0 && Instant::now() >= deadline {
                        return Err(timed_out());
                    }
                    // No spin_loop() hint (PAUSE): see Endpoint's poll loop.
                    if spins % 256 == 0 {
                        std::thread::yield_now();
                    }
                }
                Some(ch) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(timed_out());
                    }
                    // Waiters on a shared CQ take turns; a single-owner CQ has one (`&mut`).
                    let _g = (!self.is_single_owner()).then(|| {
                        self.inner
                            .wait_lock
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                    });
                    self.note_foreign_arm();
                    // SAFETY: valid CQ.
                    let rc = unsafe { sys::shim_ibv_req_notify_cq(self.as_ptr(), 0) };
                    if rc != 0 {
                        return Err(Error::verb("ibv_req_notify_cq", rc));
                    }
                    // A completion may have landed before the notification was armed.
                    if poll(max)? {
                        return Ok(());
                    }
                    self.sleep_on_channel(ch, deadline - now)?;
                }
            }
        }
    }

    fn sleep_on_channel(&self, ch: &Channel, left: Duration) -> Result<()> {
        let mut left = SleepLeft::new(left);
        self.sleep_in(ch, &mut left, None).map(|_| ())
    }

    /// Sleeps on the channel (and on `also`, if given) for at most `left`, which is decreased
    /// by the time slept as the kernel measured it (`ppoll(2)` writes back the time left), so
    /// a caller keeps an honest deadline without reading the clock. Reads the CQ's event if it
    /// came (the notification is then used up).
    #[inline(always)]
    fn sleep_in(
        &self,
        ch: &Channel,
        left: &mut SleepLeft,
        also: Option<BorrowedFd<'_>>,
    ) -> Result<Slept> {
        // SAFETY: the channel is valid while the CQ lives.
        let fd = unsafe { (*ch.0.as_ptr()).fd };
        let mut pfds = [
            libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: also.map_or(-1, |f| f.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let nfds: libc::nfds_t = if also.is_some() { 2 } else { 1 };
        // The raw system call, not glibc's ppoll (which hides it): Linux writes the time left
        // back into the timespec (poll(2), NOTES).
        // A null signal mask leaves the mask alone (ppoll(2)).
        // SAFETY: `pfds` has room for `nfds` entries and `left` holds a valid timespec
        // (SleepLeft), both live across the call.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_ppoll,
                pfds.as_mut_ptr(),
                nfds,
                &mut left.0 as *mut libc::timespec,
                std::ptr::null::<libc::sigset_t>(),
                0usize,
            )
        };
        if rc < 0 {
            let e = crate::error::last_errno();
            return if e == libc::EINTR {
                Ok(Slept::Cut)
            } else {
                Err(Error::verb("ppoll(comp_channel)", e))
            };
        }
        if rc == 0 {
            *left = SleepLeft::ZERO;
            return Ok(Slept::Quiet);
        }
        if pfds[0].revents != 0 {
            let mut cq: *mut sys::ibv_cq = std::ptr::null_mut();
            let mut ctx: *mut libc::c_void = std::ptr::null_mut();
            // SAFETY: valid channel and out-pointers; the fd is non-blocking.
            let rc = unsafe { sys::ibv_get_cq_event(ch.0.as_ptr(), &mut cq, &mut ctx) };
            if rc == 0 {
                self.count_event();
                return Ok(Slept::Event);
            }
        }
        if pfds[1].revents != 0 {
            return Ok(Slept::Also);
        }
        Ok(Slept::Cut)
    }

    /// One more event read: acknowledged in batches (each ack takes a lock in libibverbs), and
    /// the rest before the CQ is destroyed (CqInner::drop), so ibv_destroy_cq never waits.
    #[inline(always)]
    fn count_event(&self) {
        if self.inner.unacked.fetch_add(1, Ordering::AcqRel) + 1 >= ACK_BATCH {
            let n = self.inner.unacked.swap(0, Ordering::AcqRel);
            if n > 0 {
                // SAFETY: the channel serves only this CQ, so every event read is this CQ's;
                // `n` of them were read and not acked yet (the counter).
                unsafe { sys::ibv_ack_cq_events(self.as_ptr(), n) };
            }
        }
    }

    /// Marks an arm other than [`notify_next`](Self::notify_next)'s (see `CqInner::foreign_arm`).
    pub(crate) fn note_foreign_arm(&self) {
        self.inner.foreign_arm.store(true, Ordering::Relaxed);
    }

    /// True if the CQ was armed by someone else since [`notify_next`](Self::notify_next).
    #[inline(always)]
    pub(crate) fn foreign_armed(&self) -> bool {
        self.inner.foreign_arm.load(Ordering::Relaxed)
    }

    /// Arms the CQ's notification (`ibv_req_notify_cq(3)`, next completion): the next completion
    /// added wakes [`sleep_once`](Self::sleep_once).
    #[inline(always)]
    pub(crate) fn notify_next(&self) -> Result<()> {
        self.inner.foreign_arm.store(false, Ordering::Relaxed);
        // SAFETY: valid CQ.
        let rc = unsafe { sys::shim_ibv_req_notify_cq(self.as_ptr(), 0) };
        if rc != 0 {
            return Err(Error::verb("ibv_req_notify_cq", rc));
        }
        Ok(())
    }

    /// One sleep on the completion channel of an event-mode CQ armed with
    /// [`notify_next`](Self::notify_next), and on `also` if given, at most `left` (decreased by
    /// the time slept): see [`Slept`]. A polling CQ has no channel: [`Slept::Quiet`] at once.
    #[inline(always)]
    pub(crate) fn sleep_once(
        &self,
        left: &mut SleepLeft,
        also: Option<BorrowedFd<'_>>,
    ) -> Result<Slept> {
        match &self.inner.channel {
            Some(ch) => self.sleep_in(ch, left, also),
            None => Ok(Slept::Quiet),
        }
    }

    /// Polls away completions of QP `qpn` (moved to ERR) until it has none in flight or the
    /// deadline passes; completions of other QPs are kept for the next poll. A single-owner CQ
    /// is left alone: its one QP's buffers go with its table (see [`SoloCq`]).
    pub(crate) fn drain_qp(&self, qpn: u32, deadline: Instant) {
        let mut wcs: [sys::ibv_wc; 16] = Default::default();
        loop {
            let TableCell::Shared(m) = &self.inner.table else {
                return;
            };
            let mut t = m.lock().unwrap_or_else(|p| p.into_inner());
            t.unstash();
            if !t.has_entries(qpn) || Instant::now() >= deadline {
                return;
            }
            // SAFETY: valid CQ; room for 16 entries.
            let n = unsafe { sys::shim_ibv_poll_cq(self.as_ptr(), 16, wcs.as_mut_ptr()) };
            if n < 0 {
                return;
            }
            for wc in &wcs[..n as usize] {
                table::trace_wc(wc);
                if let Some(c) = t.complete(wc) {
                    if c.qp_num != qpn {
                        t.pending.push_back(c);
                    }
                }
            }
            drop(t);
            if n == 0 {
                std::thread::yield_now();
            }
        }
    }

    /// Drops what a destroyed QP still had in flight (the device can no longer reach it); a
    /// single-owner CQ's go with its table.
    pub(crate) fn purge_qp(&self, qpn: u32) {
        if let TableCell::Shared(m) = &self.inner.table {
            let gone = m.lock().unwrap_or_else(|p| p.into_inner()).purge(qpn);
            drop(gone);
        }
    }

    /// A QP of this CQ could not be destroyed: never free the buffers in its table.
    pub(crate) fn leak_table(&self) {
        self.inner.leak.store(true, Ordering::Release);
    }
}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CompletionQueue({:?})", self.inner.mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_strings() {
        assert_eq!(wc_status_str(sys::IBV_WC_SUCCESS), "success");
        assert_eq!(
            wc_status_str(sys::IBV_WC_REM_ACCESS_ERR),
            "remote access error"
        );
    }
}
