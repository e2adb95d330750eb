//! [`AsyncListener`]: accepting RDMA CM connections without blocking the thread.

use std::net::{SocketAddr, ToSocketAddrs};

use tokio::io::unix::AsyncFd;

use crate::error::Result;
use crate::xfer::endpoint::{EndpointOptions, Listener, Pending};
use crate::xfer::params::SessionParams;

use super::endpoint::async_options;
use crate::cm::CmChannel;

use super::{established, readable, reg_err, AsyncEndpoint};

/// Accepts RDMA CM connections from rdmaxfer peers as futures. Take connections in one task
/// ([`take`](Self::take)) and finish each in its own ([`AsyncPending::finish`]), so a client
/// that stalls mid-handshake holds up no other.
pub struct AsyncListener {
    // Holds a handle of the listening id; declared before `l`, so dropped first.
    fd: AsyncFd<CmChannel>,
    l: Listener,
}

impl std::fmt::Debug for AsyncListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AsyncListener").field(&self.l).finish()
    }
}

impl AsyncListener {
    /// Binds and listens like [`Listener::bind`]; connections are made in event mode with at
    /// least 8 send-queue slots for one-sided operations. Must be called from inside a tokio
    /// runtime with I/O enabled.
    pub fn bind(addr: impl ToSocketAddrs, opts: &EndpointOptions) -> Result<AsyncListener> {
        let l = Listener::bind(addr, &async_options(opts))?;
        Ok(AsyncListener {
            fd: l.cm_handle().register().map_err(reg_err)?,
            l,
        })
    }

    /// The address listened on (with the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.l.local_addr()
    }

    /// Waits for the next connection request and takes it, without setting it up.
    /// Cancel-safe: dropped before it completes, no request was taken.
    pub async fn take(&mut self) -> Result<AsyncPending> {
        loop {
            match self.l.try_take() {
                Ok(p) => return Ok(AsyncPending(p)),
                Err(e) if e.is_would_block() => readable(&self.fd).await?,
                Err(e) => return Err(e),
            }
        }
    }

    /// [`take`](Self::take), then [`AsyncPending::finish`].
    pub async fn accept(&mut self) -> Result<AsyncEndpoint> {
        self.take().await?.finish().await
    }
}

/// A connection request taken by [`AsyncListener::take`]: [`finish`](Self::finish) it, or
/// [`refuse`](Self::refuse) (or drop) it.
#[derive(Debug)]
pub struct AsyncPending(Pending);

impl AsyncPending {
    /// The peer's address, when known.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.0.peer_addr()
    }

    /// The session parameters the client sent in its handshake, if any.
    pub fn params(&self) -> Option<SessionParams> {
        self.0.params()
    }

    /// The options this connection will be set up with (the listener's until changed; its
    /// wait mode stays event mode).
    pub fn options_mut(&mut self) -> &mut EndpointOptions {
        self.0.options_mut()
    }

    /// Refuses the client with `why` as the reject reason (see [`Pending::refuse`]).
    ///
    /// [`Pending::refuse`]: crate::xfer::endpoint::Pending::refuse
    pub fn refuse(self, why: &str) {
        self.0.refuse(why)
    }

    /// Refuses the client as busy (see [`Pending::refuse_busy`]).
    ///
    /// [`Pending::refuse_busy`]: crate::xfer::endpoint::Pending::refuse_busy
    pub fn refuse_busy(self, why: &str) {
        self.0.refuse_busy(why)
    }

    /// Sets the connection up (without blocking the thread) and waits for the client to
    /// complete it. Dropped half-way, the client is abandoned.
    pub async fn finish(mut self) -> Result<AsyncEndpoint> {
        let o = async_options(self.0.options_mut());
        *self.0.options_mut() = o;
        let mut a = self.0.start_accept()?;
        established(a.cm_handle()?, || a.try_finish()).await
    }
}
