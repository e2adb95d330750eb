//! Serving and connecting the same way for every command: RDMA CM or the out-of-band exchange.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::BorrowedFd;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::xfer::endpoint::{
    self, Accepting, Endpoint, EndpointOptions, Listener, OobListener, Pending, ShutdownHandle,
};
use crate::xfer::params::SessionParams;

/// A listener of either kind.
pub enum Server {
    /// RDMA CM.
    Cm(Listener),
    /// ibv_rc_pingpong-style TCP exchange.
    Oob(OobListener),
}

impl Server {
    /// Listens on `addr:port` (an IP address; `0.0.0.0` for all).
    pub fn bind(addr: &str, port: u16, oob: bool, opts: &EndpointOptions) -> Result<Server> {
        let ip: IpAddr = addr.parse().map_err(|_| {
            Error::InvalidArgument(format!("listen address {addr:?} is not an IP address"))
        })?;
        let sa = SocketAddr::new(ip, port);
        Ok(if oob {
            Server::Oob(OobListener::bind(sa, opts)?)
        } else {
            Server::Cm(Listener::bind(sa, opts)?)
        })
    }

    /// Waits for the next peer (`None`: forever). Over OOB the endpoint is switched to credit
    /// flow control: the peer must be rdmaxfer (use [`connect`]).
    pub fn accept(&mut self, wait: Option<Duration>) -> Result<Endpoint> {
        self.take(wait)?.finish()
    }

    /// Waits for the next peer (`None`: forever) and only takes its request (see
    /// [`Listener::take`]): [`Incoming::finish`] sets the connection up, e.g. on another thread,
    /// so a peer that stalls mid-handshake does not hold the caller.
    pub fn take(&mut self, wait: Option<Duration>) -> Result<Incoming> {
        let (pending, credits) = match self {
            Server::Cm(l) => (l.take(wait)?, false),
            Server::Oob(l) => (l.take(wait)?, true),
        };
        Ok(Incoming { pending, credits })
    }

    /// Like [`accept`](Self::accept), but an OOB endpoint keeps ibv_rc_pingpong's
    /// one-message-at-a-time flow (the caller may switch it with [`Endpoint::enable_credits`]).
    pub fn accept_plain(&mut self, wait: Option<Duration>) -> Result<Endpoint> {
        match self {
            Server::Cm(l) => l.accept(wait),
            Server::Oob(l) => l.accept(wait),
        }
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        match self {
            Server::Cm(l) => l.local_addr(),
            Server::Oob(l) => l.local_addr(),
        }
    }

    /// A handle that shuts the listener down from any thread (see [`ShutdownHandle`]).
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        match self {
            Server::Cm(l) => l.shutdown_handle(),
            Server::Oob(l) => l.shutdown_handle(),
        }
    }

    /// The descriptor to watch for the next peer (non-blocking): readable when
    /// [`take`](Self::take) with a zero wait may find one. Readiness-only ([`Listener::fd`],
    /// [`OobListener::fd`]).
    pub fn fd(&self) -> Result<BorrowedFd<'_>> {
        match self {
            Server::Cm(l) => l.fd(),
            Server::Oob(l) => l.fd(),
        }
    }

    /// "rdma_cm" or "oob".
    pub fn kind(&self) -> &'static str {
        match self {
            Server::Cm(_) => "rdma_cm",
            Server::Oob(_) => "oob",
        }
    }

    /// True when the listener itself can serve no more peers.
    pub fn is_broken(&self) -> bool {
        match self {
            Server::Cm(l) => l.is_broken(),
            Server::Oob(_) => false,
        }
    }
}

/// A peer taken by [`Server::take`] whose connection is not set up yet.
#[derive(Debug)]
pub struct Incoming {
    pending: Pending,
    /// Over OOB: switch to credit flow control once connected (as [`Server::accept`]).
    credits: bool,
}

impl Incoming {
    /// The peer's address, when known.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.pending.peer_addr()
    }

    /// The session parameters the client sent (RDMA CM only; see [`Pending::params`]).
    pub fn params(&self) -> Option<SessionParams> {
        self.pending.params()
    }

    /// The options the connection will be set up with (see [`Pending::options_mut`]).
    pub fn options_mut(&mut self) -> &mut EndpointOptions {
        self.pending.options_mut()
    }

    /// Refuses the client with a reason (see [`Pending::refuse`]).
    pub fn refuse(self, why: &str) {
        self.pending.refuse(why)
    }

    /// Refuses the client as busy (see [`Pending::refuse_busy`]).
    pub fn refuse_busy(self, why: &str) {
        self.pending.refuse_busy(why)
    }

    /// Starts accepting without waiting (see [`Pending::start_accept`]; over OOB the endpoint
    /// keeps ibv_rc_pingpong's flow, as [`finish_plain`](Self::finish_plain)).
    pub fn start_accept(self) -> Result<Accepting> {
        self.pending.start_accept()
    }

    /// Like [`finish`](Self::finish), but an OOB endpoint keeps ibv_rc_pingpong's
    /// one-message-at-a-time flow (as [`Server::accept_plain`]).
    pub fn finish_plain(self) -> Result<Endpoint> {
        self.pending.finish()
    }

    /// Sets the connection up as [`Server::accept`] would (each step within the timeout).
    pub fn finish(self) -> Result<Endpoint> {
        let mut ep = self.pending.finish()?;
        if self.credits {
            ep.enable_credits(false)?;
        }
        Ok(ep)
    }
}

/// Connects to `host:port` with RDMA CM, or with the out-of-band exchange when `oob` (then
/// switched to credit flow control: the peer must be a [`Server`]).
pub fn connect(host: &str, port: u16, oob: bool, opts: &EndpointOptions) -> Result<Endpoint> {
    let mut ep = connect_plain(host, port, oob, opts)?;
    if oob {
        ep.enable_credits(true)?;
    }
    Ok(ep)
}

/// Like [`connect`], but an OOB endpoint keeps ibv_rc_pingpong's one-message-at-a-time flow
/// (the caller may switch it with [`Endpoint::enable_credits`]).
pub fn connect_plain(host: &str, port: u16, oob: bool, opts: &EndpointOptions) -> Result<Endpoint> {
    let dst = endpoint::resolve_host(host, port)?;
    if oob {
        Endpoint::connect_oob(dst, opts)
    } else {
        Endpoint::connect_cm(dst, opts)
    }
}
