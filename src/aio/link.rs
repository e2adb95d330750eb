//! [`AsyncEndpoint`] as the file protocol's [`Link`]: its waits yield to the runtime (each
//! bounded by the endpoint's step deadline with `tokio::time::timeout`), so the same drivers
//! that run a blocking session run an async one on a task, with no thread of tokio's
//! blocking pool.

use std::future::Future;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::verbs::{ExposedRegion, LocalBuf, RemoteSlice};
use crate::xfer::endpoint::{Endpoint, Message};
use crate::xfer::file::link::{self, EventListener, Link, Registrar};

use super::AsyncEndpoint;

impl AsyncEndpoint {
    /// `f` driven as [`drive`](Self::drive) does, for at most `after`; then a timeout naming
    /// `what`. Dropped (or timed out) before it completes, `f` did nothing it would repeat.
    async fn within<R>(
        &mut self,
        what: &'static str,
        after: Duration,
        f: impl FnMut(&mut Endpoint) -> Result<R>,
    ) -> Result<R> {
        match tokio::time::timeout(after, self.drive(f)).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout { what, after }),
        }
    }
}

impl Link for AsyncEndpoint {
    type Buf = LocalBuf;
    type Ring = ExposedRegion;

    async fn send(&mut self, data: &[u8]) -> Result<()> {
        let t = self.ep.timeout();
        self.within("a send credit and buffer", t, |ep| ep.try_send(data))
            .await
    }
    async fn recv_with<R: Send>(&mut self, f: impl FnOnce(Message<'_>) -> R + Send) -> Result<R> {
        let t = self.ep.timeout();
        let mut f = Some(f);
        self.within("a message from the peer", t, |ep| {
            ep.try_recv_with(|m| f.take().expect("called once")(m))
        })
        .await
    }
    fn has_message(&mut self) -> Result<bool> {
        Link::has_message(&mut self.ep)
    }
    async fn wait_send_or_message(&mut self) -> Result<bool> {
        let t = self.ep.timeout();
        let what = "send credit from the peer or a message";
        self.within(what, t, Endpoint::try_send_or_message).await
    }
    async fn flush(&mut self) -> Result<()> {
        let t = self.ep.timeout();
        self.within("the last sends to complete", t, Endpoint::try_flush)
            .await
    }
    fn last_words(&mut self) -> Option<Vec<u8>> {
        Link::last_words(&mut self.ep)
    }
    fn timeout(&self) -> Duration {
        self.ep.timeout()
    }
    fn set_timeout(&mut self, t: Duration) {
        self.ep.set_timeout(t);
    }
    fn recv_depth(&self) -> u32 {
        self.ep.recv_depth()
    }
    fn max_msg_size(&self) -> usize {
        self.ep.max_msg_size()
    }
    fn trace_id(&self) -> u32 {
        Link::trace_id(&self.ep)
    }
    fn peer_name(&self) -> String {
        Link::peer_name(&self.ep)
    }
    fn device_name(&self) -> String {
        Link::device_name(&self.ep)
    }
    fn rail_down(&self) -> bool {
        Link::rail_down(&self.ep)
    }
    fn break_link(&mut self) -> Result<()> {
        Link::break_link(&mut self.ep)
    }
    async fn close(self) -> Result<()> {
        AsyncEndpoint::close(self).await
    }

    fn expose_ring(&mut self, len: usize) -> Result<ExposedRegion> {
        Link::expose_ring(&mut self.ep, len)
    }
    fn registrar(&self) -> Registrar<LocalBuf> {
        Link::registrar(&self.ep)
    }
    /// At most the step deadline without progress, where a completion of a write is progress
    /// (as the blocking endpoint waits).
    async fn wait_credit(&mut self) -> Result<()> {
        let t = self.ep.timeout();
        loop {
            let done = self.ep.user_done_len();
            let what = "send credit from the peer";
            if self.within(what, t, |ep| ep.try_credit(done)).await? {
                return Ok(());
            }
        }
    }
    fn write_imm(
        &mut self,
        wr_id: u64,
        to: RemoteSlice,
        imm: u32,
        buf: Option<(LocalBuf, usize)>,
    ) -> std::result::Result<(), (Error, Vec<LocalBuf>)> {
        // A credit is free (`wait_credit` came first): the post does not wait.
        Link::write_imm(&mut self.ep, wr_id, to, imm, buf)
    }
    async fn poll_writes(
        &mut self,
        max: usize,
        timeout: Duration,
    ) -> Result<(usize, Vec<LocalBuf>)> {
        let done = self
            .within("a work completion", timeout, |ep| ep.try_poll_user(max))
            .await?;
        link::writes_done(done)
    }
    async fn sleep(d: Duration) {
        tokio::time::sleep(d).await;
    }
    async fn wait_woken(woken: EventListener, d: Duration) {
        let _ = tokio::time::timeout(d, woken).await;
    }
    /// All on this task ([`link::block::on_one_task`]).
    async fn run_streams<F, G>(streams: Vec<F>, relay: G) -> Vec<std::thread::Result<F::Output>>
    where
        F: Future + Send,
        F::Output: Send,
        G: Future<Output = ()>,
    {
        link::block::on_one_task(streams, relay).await
    }
}
