//! [`AsyncEndpoint`]: an [`Endpoint`] whose waits are futures.

use std::net::SocketAddr;

use tokio::io::unix::AsyncFd;

use crate::error::{Error, Result};
use crate::verbs::WaitMode;
use crate::xfer::endpoint::{first_ipv4, Connecting, Endpoint, EndpointOptions, Message};

use crate::cm::{CmChannel, CmId};
use crate::verbs::CqChannel;

use super::{established, readable, reg_err};

/// Send-queue slots kept for one-sided operations when the options ask for none (the
/// blocking API's default): room for the operation in flight and for abandoned ones whose
/// completions have not come yet.
const ASYNC_EXTRA_SEND_WR: u32 = 8;

/// The options an async endpoint is made with: `opts` in event mode, with send-queue room for
/// one-sided operations.
pub(super) fn async_options(opts: &EndpointOptions) -> EndpointOptions {
    let mut o = opts.clone();
    o.wait = WaitMode::Event;
    if o.extra_send_wr == 0 {
        o.extra_send_wr = ASYNC_EXTRA_SEND_WR;
    }
    o
}

/// A connected endpoint whose operations are futures (see the [module docs](super) for cancel
/// safety). Each operation takes `&mut self`: one at a time per connection; serve many
/// connections with one task each, or [`split`](Self::split) one into a half that sends and
/// a half that receives for two tasks.
pub struct AsyncEndpoint {
    // Each holds a handle of its channel's owner (CQ, CM id). Declared before `ep`: dropped
    // first, so the endpoint's own teardown order (QP, CQ, ..., CM id) is unchanged.
    pub(super) cq: AsyncFd<CqChannel>,
    pub(super) cm: Option<AsyncFd<CmChannel>>,
    pub(super) ep: Endpoint,
    /// The wr_id of the next one-sided operation.
    pub(super) next_wr: u64,
}

impl std::fmt::Debug for AsyncEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AsyncEndpoint").field(&self.ep).finish()
    }
}

impl AsyncEndpoint {
    /// Registers a connected endpoint with the current tokio runtime's reactor. The endpoint
    /// must have been made in [`WaitMode::Event`] (refused otherwise). Must be called from
    /// inside a runtime with I/O enabled.
    pub fn new(ep: Endpoint) -> Result<AsyncEndpoint> {
        let Some(ch) = ep.cq().channel() else {
            return Err(crate::Error::InvalidArgument(
                "an async endpoint needs a completion channel: make it with WaitMode::Event".into(),
            ));
        };
        let cq = ch.register().map_err(reg_err)?;
        let cm = ep
            .cm_handle()
            .map(CmId::register)
            .transpose()
            .map_err(reg_err)?;
        Ok(AsyncEndpoint {
            cq,
            cm,
            ep,
            next_wr: 1,
        })
    }

    /// Connects to an rdmaxfer [`Listener`](crate::xfer::endpoint::Listener) (or an
    /// [`AsyncListener`](super::AsyncListener)) with RDMA CM, as
    /// [`Endpoint::connect_cm`] does, without blocking the thread. Made in event mode, with
    /// at least 8 send-queue slots for one-sided operations. Address and route resolution are
    /// bounded by `opts.timeout`, the connection by the CM's own retries; wrap the call in
    /// `tokio::time::timeout` for a shorter bound. `dst` is a socket address or a host name
    /// with its port (`"server:7471"`), looked up as tokio does (IPv4 preferred).
    pub async fn connect(
        dst: impl tokio::net::ToSocketAddrs,
        opts: &EndpointOptions,
    ) -> Result<AsyncEndpoint> {
        let what = "the address to connect to";
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host(dst)
            .await
            .map_err(|e| Error::io(format!("resolving {what}"), e))?
            .collect();
        let dst = first_ipv4(&addrs)
            .ok_or_else(|| Error::InvalidArgument(format!("{what} resolves to no address")))?;
        let mut c = Connecting::start(dst, &async_options(opts))?;
        established(c.cm_handle(), || c.try_finish()).await
    }

    /// The endpoint (accessors: peer, limits, PD to register buffers in, ...).
    pub fn get_ref(&self) -> &Endpoint {
        &self.ep
    }

    /// Gives the endpoint back for blocking use (deregistered from the reactor). Completions
    /// of abandoned one-sided operations may still come to its
    /// [`poll_user`](Endpoint::poll_user).
    pub fn into_inner(self) -> Endpoint {
        let AsyncEndpoint { cq, cm, ep, .. } = self;
        drop(cq);
        drop(cm);
        ep
    }

    /// Runs `f` until it does not fail with [`WouldBlock`](crate::Error::WouldBlock),
    /// waiting on the channels in between (re-arming as the non-blocking API's docs say).
    pub(super) async fn drive<R>(
        &mut self,
        mut f: impl FnMut(&mut Endpoint) -> Result<R>,
    ) -> Result<R> {
        loop {
            match f(&mut self.ep) {
                Err(e) if e.is_would_block() => {}
                r => return r,
            }
            self.ep.arm()?;
            // A completion that came before the arm raised no event: look again.
            match f(&mut self.ep) {
                Err(e) if e.is_would_block() => {}
                r => return r,
            }
            match &self.cm {
                Some(cm) => tokio::select! {
                    r = readable(&self.cq) => r?,
                    r = readable(cm) => r?,
                },
                None => readable(&self.cq).await?,
            }
        }
    }

    /// Sends `data` as one message, waiting for a credit and a send buffer. Cancel-safe:
    /// dropped before it completes, nothing was sent.
    pub async fn send(&mut self, data: &[u8]) -> Result<()> {
        self.drive(|ep| ep.try_send(data)).await
    }

    /// Sends a message of `len` bytes that `fill` writes into a registered buffer (see
    /// [`Endpoint::send_with`]). Cancel-safe as [`send`](Self::send).
    pub async fn send_with(&mut self, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<()> {
        let mut fill = Some(fill);
        self.drive(|ep| ep.try_send_with(len, |b| fill.take().expect("called once")(b)))
            .await
    }

    /// Waits for the next message and returns a copy of its payload. Cancel-safe: dropped
    /// before it completes, no message was taken.
    pub async fn recv(&mut self) -> Result<Vec<u8>> {
        self.drive(Endpoint::try_recv).await
    }

    /// Waits for the next message and lends it to `f` (see [`Endpoint::recv_with`]).
    /// Cancel-safe as [`recv`](Self::recv).
    pub async fn recv_with<R>(&mut self, f: impl FnOnce(Message<'_>) -> R) -> Result<R> {
        let mut f = Some(f);
        self.drive(|ep| ep.try_recv_with(|m| f.take().expect("called once")(m)))
            .await
    }

    /// Waits until every message sent so far has completed, or the peer has disconnected (see
    /// [`Endpoint::flush`]).
    pub async fn flush(&mut self) -> Result<()> {
        self.drive(Endpoint::try_flush).await
    }

    /// Ends the connection gracefully: waits for sent messages, then disconnects (see
    /// [`Endpoint::close`]). Dropping the endpoint tears down without waiting.
    pub async fn close(mut self) -> Result<()> {
        let r = self.flush().await;
        let closed = self.into_inner().close();
        r.and(closed)
    }

    /// A fresh wr_id for a one-sided operation.
    pub(super) fn next_wr_id(&mut self) -> u64 {
        let id = self.next_wr;
        self.next_wr += 1;
        id
    }
}
