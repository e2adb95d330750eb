//! What the file protocol needs of a connection ([`Link`]): control messages with credits, a
//! staging ring the peer writes into, registered chunk buffers, and RDMA WRITE_WITH_IMM from
//! them. An [`Endpoint`] is one; [`mem::MemLink`] is another, in memory, so whole sessions run
//! on a host without a device (tests, fuzzing); an
//! [`AsyncEndpoint`](crate::aio::AsyncEndpoint) is a third, whose waits yield to its runtime.
//!
//! The waits are futures, so one set of drivers serves both: a blocking link's futures block
//! inside and are run by [`block::block_on`]; an async link's are awaited on a task.

pub mod block;
pub mod mem;
#[cfg(test)]
pub(crate) mod task;

pub use event_listener::EventListener;

use std::future::Future;
use std::ops::DerefMut;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::verbs::{
    cq, Buf, ExposedRegion, LocalBuf, ProtectionDomain, RemoteAccess, RemoteRegion, RemoteSlice,
    SendOp, SendRequest, Sge,
};
use crate::xfer::endpoint::{Endpoint, Message};

/// Makes registered chunk buffers (`slot length`, `count`), from any thread.
pub type Registrar<B> = Box<dyn Fn(usize, usize) -> Result<Vec<B>> + Send>;

/// A connection as the file protocol uses it. Every wait is bounded by [`timeout`](Self::timeout)
/// and fails with [`Error::Timeout`], leaving the link usable. Each wait is a future; a
/// blocking link's complete when first polled.
pub trait Link: Send + Sized {
    /// A registered buffer a chunk is read into and written from.
    type Buf: DerefMut<Target = [u8]> + Send + Sync + 'static;
    /// The receiver's staging ring.
    type Ring: StagingMem;

    /// Sends a control message, waiting for a credit.
    fn send(&mut self, data: &[u8]) -> impl Future<Output = Result<()>> + Send;
    /// Waits for the next message (a control message, or a WRITE_WITH_IMM's arrival) and lends
    /// it to `f`; its credit goes back to the peer after `f`.
    fn recv_with<R: Send>(
        &mut self,
        f: impl FnOnce(Message<'_>) -> R + Send,
    ) -> impl Future<Output = Result<R>> + Send;
    /// Whether a message has arrived, without waiting.
    fn has_message(&mut self) -> Result<bool>;
    /// Waits until a send would not wait (`true`) or a message has arrived (`false`).
    fn wait_send_or_message(&mut self) -> impl Future<Output = Result<bool>> + Send;
    /// Waits until every message sent so far was taken by the peer, or the peer has gone.
    fn flush(&mut self) -> impl Future<Output = Result<()>> + Send;
    /// After a failure: the oldest message from the peer not taken yet, if any.
    fn last_words(&mut self) -> Option<Vec<u8>>;
    /// The deadline of each wait.
    fn timeout(&self) -> Duration;
    /// Sets the deadline of each wait.
    fn set_timeout(&mut self, t: Duration);
    /// The receives this side keeps posted (the credits it grants the peer).
    fn recv_depth(&self) -> u32;
    /// The longest message either side takes (what both ends agreed at connect).
    fn max_msg_size(&self) -> usize;
    /// A number naming this side of the link in traces (the QP number).
    fn trace_id(&self) -> u32;
    /// The peer, as errors name it (its address, as known).
    fn peer_name(&self) -> String;
    /// The device this side runs on (its rail), as reports name it.
    fn device_name(&self) -> String;
    /// Whether this side's port is down (its rail gone): a lost link, whatever the waits say.
    fn rail_down(&self) -> bool;
    /// For the test hooks: breaks the link as a transport fault does (the queue pair goes to
    /// the error state; the peer hears nothing more).
    fn break_link(&mut self) -> Result<()>;
    /// Closes the link in order (waits for what was sent to be taken).
    fn close(self) -> impl Future<Output = Result<()>> + Send;

    /// Registers a ring of `len` zeroed bytes the peer may write into.
    fn expose_ring(&mut self, len: usize) -> Result<Self::Ring>;
    /// What registers chunk buffers, to be run on another thread.
    fn registrar(&self) -> Registrar<Self::Buf>;
    /// Waits until a credit for a WRITE_WITH_IMM is free (a completion of a write resets
    /// the deadline).
    fn wait_credit(&mut self) -> impl Future<Output = Result<()>> + Send;
    /// Posts an RDMA WRITE_WITH_IMM of the first `len` bytes of `buf` (or of nothing) to `to`,
    /// spending a credit. On failure the buffers it held are given back with the error.
    fn write_imm(
        &mut self,
        wr_id: u64,
        to: RemoteSlice,
        imm: u32,
        buf: Option<(Self::Buf, usize)>,
    ) -> std::result::Result<(), (Error, Vec<Self::Buf>)>;
    /// Waits (at most `timeout`) for completions of writes: how many completed, and the
    /// buffers they give back. A failed write is an error.
    fn poll_writes(
        &mut self,
        max: usize,
        timeout: Duration,
    ) -> impl Future<Output = Result<(usize, Vec<Self::Buf>)>> + Send;
    /// Waits `d` (a pace, not a synchronisation): a blocking link sleeps, an async one yields.
    fn sleep(d: Duration) -> impl Future<Output = ()> + Send;
    /// Waits until `woken` is notified, at most `d`.
    fn wait_woken(
        woken: EventListener,
        d: Duration,
    ) -> impl Future<Output = ()> + Send;
    /// Runs `streams` (one future a stream of a session) and `relay` to their ends, together:
    /// a blocking link runs each stream on a thread of its own (their futures block inside),
    /// an async one all of them on the calling task. A stream that panicked is `Err`.
    fn run_streams<F, G>(
        streams: Vec<F>,
        relay: G,
    ) -> impl Future<Output = Vec<std::thread::Result<F::Output>>>
    where
        F: Future + Send,
        F::Output: Send,
        G: Future<Output = ()>;
}

/// The receiver's staging ring: registered memory a peer writes chunks into.
pub trait StagingMem: Send + Sync {
    /// What the peer needs to reach it.
    fn descriptor(&self) -> RemoteRegion;
    /// Copies `dst.len()` bytes at `off` out of it.
    fn read_at(&self, off: usize, dst: &mut [u8]) -> Result<()>;
    /// Ends the peer's access.
    fn revoke(self) -> Result<()>;
}

impl StagingMem for ExposedRegion {
    fn descriptor(&self) -> RemoteRegion {
        ExposedRegion::descriptor(self)
    }
    fn read_at(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        ExposedRegion::read_at(self, off, dst)
    }
    fn revoke(self) -> Result<()> {
        ExposedRegion::revoke(self).map(drop)
    }
}

impl Link for Endpoint {
    type Buf = LocalBuf;
    type Ring = ExposedRegion;

    async fn send(&mut self, data: &[u8]) -> Result<()> {
        Endpoint::send(self, data)
    }
    async fn recv_with<R: Send>(&mut self, f: impl FnOnce(Message<'_>) -> R + Send) -> Result<R> {
        Endpoint::recv_with(self, f)
    }
    fn has_message(&mut self) -> Result<bool> {
        Endpoint::has_message(self)
    }
    async fn wait_send_or_message(&mut self) -> Result<bool> {
        Endpoint::wait_send_or_message(self)
    }
    async fn flush(&mut self) -> Result<()> {
        Endpoint::flush(self)
    }
    fn last_words(&mut self) -> Option<Vec<u8>> {
        Endpoint::last_words(self)
    }
    fn timeout(&self) -> Duration {
        Endpoint::timeout(self)
    }
    fn set_timeout(&mut self, t: Duration) {
        Endpoint::set_timeout(self, t)
    }
    fn recv_depth(&self) -> u32 {
        Endpoint::recv_depth(self)
    }
    fn max_msg_size(&self) -> usize {
        Endpoint::max_msg_size(self)
    }
    fn trace_id(&self) -> u32 {
        self.local().qpn
    }
    fn peer_name(&self) -> String {
        self.peer().addr.map_or_else(
            || format!("qpn {}", self.peer().qpn.unwrap_or(0)),
            |a| a.to_string(),
        )
    }
    fn device_name(&self) -> String {
        self.local().device.clone()
    }
    fn rail_down(&self) -> bool {
        let port = self.local().port;
        self.context().query_port(port).is_ok_and(|a| !a.active)
    }
    fn break_link(&mut self) -> Result<()> {
        self.qp().to_error()
    }
    async fn close(self) -> Result<()> {
        Endpoint::close(self)
    }

    fn expose_ring(&mut self, len: usize) -> Result<ExposedRegion> {
        ExposedRegion::new(self.pd(), len, RemoteAccess::Write)
    }
    fn registrar(&self) -> Registrar<LocalBuf> {
        let pd: ProtectionDomain = self.pd().clone();
        Box::new(move |len, count| LocalBuf::slots(&pd, len, count))
    }
    async fn wait_credit(&mut self) -> Result<()> {
        Endpoint::wait_credit(self)
    }
    fn write_imm(
        &mut self,
        wr_id: u64,
        to: RemoteSlice,
        imm: u32,
        buf: Option<(LocalBuf, usize)>,
    ) -> std::result::Result<(), (Error, Vec<LocalBuf>)> {
        let op = SendOp::WriteWithImm(to, imm);
        let wr = match buf {
            Some((buf, n)) => SendRequest::new(wr_id, op, [Sge::range(buf, 0, n)]),
            None => SendRequest::new(wr_id, op, std::iter::empty::<Sge>()),
        };
        self.post(wr).map_err(|pe| {
            let bufs = pe.bufs.into_iter().filter_map(Buf::into_local).collect();
            (pe.error, bufs)
        })
    }
    async fn poll_writes(
        &mut self,
        max: usize,
        timeout: Duration,
    ) -> Result<(usize, Vec<LocalBuf>)> {
        writes_done(self.poll_user(max, timeout)?)
    }
    async fn sleep(d: Duration) {
        // Rate limiting, not synchronisation: the link may go no faster than asked.
        std::thread::sleep(d);
    }
    async fn wait_woken(woken: EventListener, d: Duration) {
        block::wait_woken(woken, d);
    }
    async fn run_streams<F, G>(streams: Vec<F>, relay: G) -> Vec<std::thread::Result<F::Output>>
    where
        F: Future + Send,
        F::Output: Send,
        G: Future<Output = ()>,
    {
        block::on_threads(streams, relay)
    }
}

/// The writes among `completions` (each with those it retired): how many, and their buffers.
/// A failed one is an error.
pub(crate) fn writes_done(
    completions: Vec<crate::verbs::Completion>,
) -> Result<(usize, Vec<LocalBuf>)> {
    let (mut done, mut bufs) = (0, Vec::new());
    for c in completions {
        if c.status == cq::REM_ACCESS_ERR {
            // The ring was valid when the receiver offered it: it has since been withdrawn.
            return Err(withdrawn(c.to_error()));
        }
        if !c.is_success() {
            return Err(c.to_error());
        }
        done += 1 + c.retired.len();
        bufs.extend(c.into_all_local_bufs());
    }
    Ok((done, bufs))
}

/// A write refused by the receiver's ring after it was offered.
pub(crate) fn withdrawn(detail: Error) -> Error {
    Error::Connection(format!(
        "the receiver withdrew its staging ring while data was being written: it ended this \
         transfer on its side (at its step deadline, on a spent session budget, or on an error \
         it reports). Detail: {detail}"
    ))
}
