//! [`TaskLink`]: a [`MemLink`] end that behaves as an async link does (tests only): its waits
//! yield (on tokio's clock), and a session's streams run on one task. The host tests run the
//! async driver through it as an [`AsyncEndpoint`](crate::aio::AsyncEndpoint) would.

use std::future::Future;
use std::time::Duration;

use super::mem::{MemLink, MemRing};
use super::{block, EventListener, Link, Registrar};
use crate::error::{Error, Result};
use crate::verbs::RemoteSlice;
use crate::xfer::endpoint::Message;

/// A [`MemLink`] end made [`yielding`](MemLink::yielding), as a link of its own.
#[derive(Debug)]
pub(crate) struct TaskLink(MemLink);

impl TaskLink {
    pub(crate) fn new(end: MemLink) -> TaskLink {
        TaskLink(end.yielding())
    }
}

impl Link for TaskLink {
    type Buf = Vec<u8>;
    type Ring = MemRing;

    async fn send(&mut self, data: &[u8]) -> Result<()> {
        self.0.send(data).await
    }
    async fn recv_with<R: Send>(&mut self, f: impl FnOnce(Message<'_>) -> R + Send) -> Result<R> {
        self.0.recv_with(f).await
    }
    fn has_message(&mut self) -> Result<bool> {
        self.0.has_message()
    }
    async fn wait_send_or_message(&mut self) -> Result<bool> {
        self.0.wait_send_or_message().await
    }
    async fn flush(&mut self) -> Result<()> {
        self.0.flush().await
    }
    fn last_words(&mut self) -> Option<Vec<u8>> {
        self.0.last_words()
    }
    fn timeout(&self) -> Duration {
        self.0.timeout()
    }
    fn set_timeout(&mut self, t: Duration) {
        self.0.set_timeout(t);
    }
    fn recv_depth(&self) -> u32 {
        self.0.recv_depth()
    }
    fn max_msg_size(&self) -> usize {
        self.0.max_msg_size()
    }
    fn trace_id(&self) -> u32 {
        self.0.trace_id()
    }
    fn peer_name(&self) -> String {
        self.0.peer_name()
    }
    fn device_name(&self) -> String {
        self.0.device_name()
    }
    fn rail_down(&self) -> bool {
        self.0.rail_down()
    }
    fn break_link(&mut self) -> Result<()> {
        self.0.break_link()
    }
    async fn close(self) -> Result<()> {
        self.0.close().await
    }
    fn expose_ring(&mut self, len: usize) -> Result<MemRing> {
        self.0.expose_ring(len)
    }
    fn registrar(&self) -> Registrar<Vec<u8>> {
        self.0.registrar()
    }
    async fn wait_credit(&mut self) -> Result<()> {
        self.0.wait_credit().await
    }
    fn write_imm(
        &mut self,
        wr_id: u64,
        to: RemoteSlice,
        imm: u32,
        buf: Option<(Vec<u8>, usize)>,
    ) -> std::result::Result<(), (Error, Vec<Vec<u8>>)> {
        self.0.write_imm(wr_id, to, imm, buf)
    }
    async fn poll_writes(
        &mut self,
        max: usize,
        timeout: Duration,
    ) -> Result<(usize, Vec<Vec<u8>>)> {
        self.0.poll_writes(max, timeout).await
    }
    async fn sleep(d: Duration) {
        tokio::time::sleep(d).await;
    }
    async fn wait_woken(woken: EventListener, d: Duration) {
        let _ = tokio::time::timeout(d, woken).await;
    }
    async fn run_streams<F, G>(streams: Vec<F>, relay: G) -> Vec<std::thread::Result<F::Output>>
    where
        F: Future + Send,
        F::Output: Send,
        G: Future<Output = ()>,
    {
        block::on_one_task(streams, relay).await
    }
}
