//! Completion queues: `ibv_create_cq(3)`, `ibv_poll_cq(3)`, `ibv_req_notify_cq(3)`,
//! `ibv_create_comp_channel(3)`, `ibv_get_cq_event(3)` / `ibv_ack_cq_events(3)`.
//!
//! The CQ also keeps the *in-flight table*: every buffer posted on a queue pair using this CQ
//! lives here, keyed by an internal work request id, until its completion is polled. That is how
//! posted memory stays out of reach of safe code (and survives `mem::forget` of any handle).

use std::cell::UnsafeCell;
use std::ffi::CStr;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::sys;
use crate::verbs::device::Context;
use crate::verbs::mr::{LocalBuf, SharedBuf};

/// The buffers of one work request: inline for the usual one (no allocation per message).
pub type Bufs = smallvec::SmallVec<[Buf; 1]>;

/// A posted buffer: exclusive or shared read-only.
#[derive(Debug)]
pub enum Buf {
    /// An exclusive buffer (any operation).
    Local(LocalBuf),
    /// A frozen buffer (sources only: SEND, RDMA WRITE).
    Shared(SharedBuf),
}

impl Buf {
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Buf::Local(b) => b,
            Buf::Shared(b) => b,
        }
    }

    /// The exclusive buffer, if it is one.
    pub fn into_local(self) -> Option<LocalBuf> {
        match self {
            Buf::Local(b) => Some(b),
            Buf::Shared(_) => None,
        }
    }

    pub(crate) fn lkey(&self) -> u32 {
        match self {
            Buf::Local(b) => b.lkey(),
            Buf::Shared(b) => b.lkey(),
        }
    }

    pub(crate) fn addr(&self) -> u64 {
        match self {
            Buf::Local(b) => b.addr(),
            Buf::Shared(b) => b.addr(),
        }
    }

    /// The device context the buffer is registered in.
    #[inline(always)]
    pub(crate) fn ctx(&self) -> *mut sys::ibv_context {
        match self {
            Buf::Local(b) => b.ctx(),
            Buf::Shared(b) => b.ctx(),
        }
    }
}

impl From<LocalBuf> for Buf {
    fn from(b: LocalBuf) -> Buf {
        Buf::Local(b)
    }
}

impl From<SharedBuf> for Buf {
    fn from(b: SharedBuf) -> Buf {
        Buf::Shared(b)
    }
}

/// How [`CompletionQueue::wait`] waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WaitMode {
    /// Busy-poll the CQ (lowest latency, one core busy).
    #[default]
    Poll,
    /// Sleep on the completion channel (`ibv_req_notify_cq` + poll(2) on its fd).
    Event,
}

/// Opcode of a successful completion (`enum ibv_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcOpcode {
    /// SEND or SEND_WITH_IMM finished.
    Send,
    /// RDMA WRITE (with or without immediate) finished.
    RdmaWrite,
    /// RDMA READ finished.
    RdmaRead,
    /// A SEND arrived in a posted receive.
    Recv,
    /// An RDMA WRITE_WITH_IMM arrived (consumed a posted receive).
    RecvRdmaWithImm,
    /// Anything else.
    Other(u32),
}

impl WcOpcode {
    fn from_raw(v: u32) -> WcOpcode {
        match v {
            sys::IBV_WC_SEND => WcOpcode::Send,
            sys::IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
            sys::IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
            sys::IBV_WC_RECV => WcOpcode::Recv,
            sys::IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
            x => WcOpcode::Other(x),
        }
    }
}

/// `ibv_wc_status_str(3)`.
pub fn wc_status_str(status: u32) -> &'static str {
    // SAFETY: returns a pointer to a static string for any value.
    let p = unsafe { sys::ibv_wc_status_str(status) };
    if p.is_null() {
        return "unknown";
    }
    // SAFETY: non-null, NUL-terminated, static.
    unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("unknown")
}

/// A polled work completion, with the buffers the work request held.
#[derive(Debug)]
pub struct Completion {
    /// The caller's wr_id.
    pub wr_id: u64,
    /// `ibv_wc_status` (0 = success).
    pub status: u32,
    /// Provider error detail.
    pub vendor_err: u32,
    /// Opcode (meaningful only on success).
    pub opcode: WcOpcode,
    /// Bytes received (receives) or transferred.
    pub byte_len: u32,
    /// Immediate data, host order, if the peer sent any.
    pub imm: Option<u32>,
    /// QP number the work request was posted on.
    pub qp_num: u32,
    /// This work request's buffers, given back.
    pub bufs: Bufs,
    /// Earlier unsignaled work requests of the same send queue that this completion retired
    /// (they finished too), with their buffers.
    pub retired: Vec<Retired>,
    op: &'static str,
}

/// An unsignaled work request retired by a later completion.
#[derive(Debug)]
pub struct Retired {
    /// The caller's wr_id.
    pub wr_id: u64,
    /// Its buffers.
    pub bufs: Bufs,
}

impl Completion {
    /// True if the work request succeeded.
    pub fn is_success(&self) -> bool {
        self.status == sys::IBV_WC_SUCCESS
    }

    /// The kind of work request that was posted ("SEND", "RDMA WRITE", "RECV", ...), known even
    /// when the completion is an error.
    pub fn op(&self) -> &'static str {
        self.op
    }

    /// `ibv_wc_status_str` of the status.
    pub fn status_str(&self) -> &'static str {
        wc_status_str(self.status)
    }

    /// `Ok(self)` on success, else [`Error::Completion`] (the buffers are dropped).
    pub fn result(self) -> Result<Completion> {
        if self.is_success() {
            Ok(self)
        } else {
            Err(self.to_error())
        }
    }

    /// The error this completion represents (meaningful when not successful).
    pub fn to_error(&self) -> Error {
        Error::Completion {
            op: self.op,
            wr_id: self.wr_id,
            status: self.status,
            status_str: self.status_str().to_string(),
            vendor_err: self.vendor_err,
        }
    }

    /// The first exclusive buffer of this work request (a receive has exactly one).
    #[inline(always)]
    pub fn take_local(&mut self) -> Option<LocalBuf> {
        if self.bufs.len() == 1 {
            return self.bufs.pop().and_then(Buf::into_local);
        }
        let i = self.bufs.iter().position(|b| matches!(b, Buf::Local(_)))?;
        self.bufs.remove(i).into_local()
    }

    /// This work request's exclusive buffers, in order (shared ones are dropped).
    pub fn into_local_bufs(self) -> Vec<LocalBuf> {
        self.bufs.into_iter().filter_map(Buf::into_local).collect()
    }

    /// The exclusive buffers of this and of every retired work request.
    pub fn into_all_local_bufs(self) -> Vec<LocalBuf> {
        let retired = self.retired.into_iter().flat_map(|r| r.bufs);
        self.bufs
            .into_iter()
            .chain(retired)
            .filter_map(Buf::into_local)
            .collect()
    }
}

/// `IBV_WC_REM_ACCESS_ERR`: the peer refused an RDMA access (bad rkey, rights, bounds).
pub const REM_ACCESS_ERR: u32 = sys::IBV_WC_REM_ACCESS_ERR;
/// `IBV_WC_WR_FLUSH_ERR`: flushed because the QP went to the error state.
pub const WR_FLUSH_ERR: u32 = sys::IBV_WC_WR_FLUSH_ERR;

mod notify;
mod table;
pub(crate) use table::Table;

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
    /// A single-owner CQ ([`SoloQueue`](crate::verbs::SoloQueue)): reached only through the
    /// queue's `&mut self` and the drop of its one QP (`claimed`), without a lock.
    Solo {
        table: UnsafeCell<Table>,
        claimed: AtomicBool,
    },
}

/// A CQ's table, locked (shared CQ) or borrowed exclusively (single-owner CQ).
pub(crate) enum TableRef<'a> {
    Locked(MutexGuard<'a, Table>),
    Solo(&'a mut Table),
}

impl Deref for TableRef<'_> {
    type Target = Table;
    #[inline(always)]
    fn deref(&self) -> &Table {
        match self {
            TableRef::Locked(g) => g,
            TableRef::Solo(t) => t,
        }
    }
}

impl DerefMut for TableRef<'_> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut Table {
        match self {
            TableRef::Locked(g) => g,
            TableRef::Solo(t) => t,
        }
    }
}

/// A `&self` post or poll on a single-owner CQ (out of line: never on a real path).
#[cold]
#[inline(never)]
pub(crate) fn solo_refused(op: &'static str) -> Error {
    Error::InvalidState {
        op,
        state: "owned by a SoloQueue",
        needs: "a shared CompletionQueue (post and poll through the SoloQueue)",
    }
}

pub(crate) struct CqInner {
    cq: NonNull<sys::ibv_cq>,
    channel: Option<Channel>,
    table: TableCell,
    wait_lock: Mutex<()>,
    mode: WaitMode,
    ctx: Context,
}

// SAFETY: the CQ and channel are only used through thread-safe verbs; a shared CQ's table is
// behind a Mutex; a single-owner CQ's table is reached only through `CompletionQueue::table`,
// whose callers hold exclusive access (a `&mut SoloQueue`, or the drop of the one QP that
// claimed it), and every `&self` path refuses it (`lock`); event waiting is serialised by
// `wait_lock`.
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        // Every CQ event was acked as it was read, so ibv_destroy_cq cannot block.
        // SAFETY: every QueuePair using this CQ holds a CompletionQueue clone (an Arc of this
        // CqInner), so none is left; destroyed once, here.
        let rc = unsafe { sys::ibv_destroy_cq(self.cq.as_ptr()) };
        if rc != 0 {
            tracing::warn!("ibv_destroy_cq failed: {rc}; leaking its in-flight buffers");
            let t = match &mut self.table {
                TableCell::Shared(m) => m.get_mut().unwrap_or_else(|p| p.into_inner()),
                TableCell::Solo { table, .. } => table.get_mut(),
            };
            std::mem::forget(std::mem::take(t));
            if let Some(ch) = self.channel.take() {
                std::mem::forget(ch);
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
    pub(crate) fn new_solo(ctx: &Context, cqe: u32, mode: WaitMode) -> Result<CompletionQueue> {
        Self::create(ctx, cqe, mode, true)
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
                table,
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

    /// The table: locked for a shared CQ, borrowed without a lock for a single-owner one.
    ///
    /// # Safety
    /// For a single-owner CQ the caller must have exclusive access to its table until the
    /// returned value is dropped: it holds the `&mut SoloQueue` that owns the CQ, or it is the
    /// drop of the one QP that claimed it.
    #[inline(always)]
    pub(crate) unsafe fn table(&self) -> TableRef<'_> {
        match &self.inner.table {
            TableCell::Shared(m) => TableRef::Locked(m.lock().unwrap_or_else(|p| p.into_inner())),
            // SAFETY: exclusive access is this function's contract (above).
            TableCell::Solo { table, .. } => TableRef::Solo(unsafe { &mut *table.get() }),
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
            match t.pending.pop_front() {
                Some(c) => out.push(c),
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
        if let Some(c) = t.pending.pop_front() {
            return Ok(Some(c));
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
        if let Some(c) = t.pending.pop_front() {
            return Ok(Some(c));
        }
        let cq = self.as_ptr();
        let mut wc = std::mem::MaybeUninit::<sys::ibv_wc>::uninit();
        let mut i = 0u32;
        while i < spins {
            i += 1;
            // SAFETY: valid CQ; `wc` has room for one entry.
            let n = unsafe { sys::shim_ibv_poll_cq(cq, 1, wc.as_mut_ptr()) };
            if n != 0 {
                if n < 0 {
                    return Err(Error::verb("ibv_poll_cq", libc::EIO));
                }
                // SAFETY: ibv_poll_cq initialised the entry.
                if let Some(c) = t.complete(unsafe { wc.assume_init_ref() }) {
                    return Ok(Some(c));
                }
                // A destroyed QP's completion: look again.
                continue;
            }
            // No spin_loop() hint: PAUSE makes an emulated (TCG) vCPU leave its translated code
            // (0.14 µs each, measured), which would slow the polling.
            if i % 256 == 0 {
                // Let kernel threads (rxe's deferred work) run on a busy guest.
                std::thread::yield_now();
            }
        }
        Ok(None)
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
        // SAFETY: the channel is valid while the CQ lives.
        let fd = unsafe { (*ch.0.as_ptr()).fd };
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc < 0 {
            let e = crate::error::last_errno();
            return if e == libc::EINTR {
                Ok(())
            } else {
                Err(Error::verb("poll(comp_channel)", e))
            };
        }
        if rc == 0 {
            return Ok(());
        }
        let mut cq: *mut sys::ibv_cq = std::ptr::null_mut();
        let mut ctx: *mut libc::c_void = std::ptr::null_mut();
        // SAFETY: valid channel and out-pointers; the fd is non-blocking.
        let rc = unsafe { sys::ibv_get_cq_event(ch.0.as_ptr(), &mut cq, &mut ctx) };
        if rc == 0 {
            // SAFETY: the channel serves only this CQ, so `cq` is it; acked at once so
            // ibv_destroy_cq never waits for an unacked event (ibv_get_cq_event(3)).
            unsafe { sys::ibv_ack_cq_events(cq, 1) };
        }
        Ok(())
    }

    /// Polls away completions of QP `qpn` (moved to ERR) until it has none in flight or the
    /// deadline passes; completions of other QPs are kept for the next poll.
    ///
    /// # Safety
    /// As [`table`](Self::table): called from the drop of QP `qpn`, the one QP a single-owner
    /// CQ takes.
    pub(crate) unsafe fn drain_qp(&self, qpn: u32, deadline: Instant) {
        let mut wcs: [sys::ibv_wc; 16] = Default::default();
        loop {
            // SAFETY: this function's contract.
            let mut t = unsafe { self.table() };
            if !t.has_entries(qpn) || Instant::now() >= deadline {
                return;
            }
            // SAFETY: valid CQ; room for 16 entries.
            let n = unsafe { sys::shim_ibv_poll_cq(self.as_ptr(), 16, wcs.as_mut_ptr()) };
            if n < 0 {
                return;
            }
            for wc in &wcs[..n as usize] {
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

    /// Drops what a destroyed QP still had in flight (the device can no longer reach it).
    ///
    /// # Safety
    /// As [`drain_qp`](Self::drain_qp).
    pub(crate) unsafe fn purge_qp(&self, qpn: u32) {
        // SAFETY: this function's contract.
        let gone = unsafe { self.table() }.purge(qpn);
        drop(gone);
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
