//! Non-blocking use for event loops: descriptors and `try_*` calls (documented in the
//! [endpoint module](crate::xfer::endpoint#non-blocking-use)).

use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::{AsFd as _, BorrowedFd};
use std::time::Duration;

use crate::cm::{CmId, Event, EventKind};
use crate::error::{Error, Result};
use crate::os::Epoll;
use crate::verbs::{Bufs, Completion, PostError, SendOp, SendRequest};

use super::accept::{about_client, Pending, Start, Started};
use super::cm::{connected, send_connect, start_connect, Listener};
use super::conn::Endpoint;
use super::oob::OobHandshake;
use super::options::EndpointOptions;
use super::setup::{resolve, Parts};

impl Endpoint {
    /// A descriptor readable while the completion channel is, or `None` for an endpoint made
    /// in poll mode. See the [endpoint module docs](crate::xfer::endpoint#non-blocking-use) for
    /// how to wait on it. Readiness-only: an epoll instance over the channel
    /// ([`CompletionQueue::channel_fd`](crate::verbs::CompletionQueue::channel_fd)).
    pub fn completion_fd(&self) -> Result<Option<BorrowedFd<'_>>> {
        self.q.cq().channel_fd()
    }

    /// A descriptor readable while an RDMA CM event (the peer's disconnect) is queued for the
    /// connection, or `None` for an out-of-band endpoint. Readiness-only: an epoll instance
    /// over the CM event channel ([`CmId::fd`]).
    pub fn cm_fd(&self) -> Result<Option<BorrowedFd<'_>>> {
        self.cm.as_ref().map(CmId::fd).transpose()
    }

    /// The completion channel's and the CM event channel's own descriptors, for the crate's own
    /// waits (the C API's connection descriptor).
    #[cfg(feature = "capi")]
    pub(crate) fn raw_fds(&self) -> (Option<BorrowedFd<'_>>, Option<BorrowedFd<'_>>) {
        (
            self.q.cq().raw_channel_fd(),
            self.cm.as_ref().map(CmId::channel_fd),
        )
    }

    /// A handle of the connection's CM id (for registering its channel with a reactor: the
    /// `aio` module of feature `tokio`).
    #[cfg(feature = "tokio")]
    pub(crate) fn cm_handle(&self) -> Option<CmId> {
        self.cm.clone()
    }

    /// Arms the completion channel for the next completion (see the
    /// [endpoint module docs](crate::xfer::endpoint#non-blocking-use)): events already on it
    /// are read and acknowledged first, without blocking. Refused for an endpoint made in poll
    /// mode.
    pub fn arm(&mut self) -> Result<()> {
        self.check_usable()?;
        self.q.cq().arm().map(drop).map_err(|e| self.fail(e))
    }

    /// Handles every completion and CM event already there, without waiting; true if there was
    /// any completion.
    pub fn try_progress(&mut self) -> Result<bool> {
        self.check_usable()?;
        let r = self
            .poll_now()
            .and_then(|n| self.check_cm().map(|()| n > 0));
        r.map_err(|e| self.fail(e))
    }

    /// Sends `data` as one message if a credit and a send buffer are free now; else fails with
    /// [`Error::WouldBlock`] having sent nothing.
    pub fn try_send(&mut self, data: &[u8]) -> Result<()> {
        self.try_send_with(data.len(), |b| b.copy_from_slice(data))
    }

    /// [`send_with`](Self::send_with) if a credit and a send buffer are free now; else fails
    /// with [`Error::WouldBlock`] without calling `fill`.
    pub fn try_send_with(&mut self, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<()> {
        self.try_until("a send credit and buffer", Self::can_send_now)?;
        // Nothing left to wait for: send_with posts at once.
        self.send_with(len, fill)
    }

    /// Takes the next message if one has arrived (lending it to `f`, then re-posting its buffer
    /// as [`recv_with`](Self::recv_with) does); else fails with [`Error::WouldBlock`] without
    /// calling `f`.
    pub fn try_recv_with<R>(&mut self, f: impl FnOnce(super::Message<'_>) -> R) -> Result<R> {
        self.try_until("a message from the peer", |e| !e.ready.is_empty())?;
        self.recv_inner(f, false)
    }

    /// A copy of the next message if one has arrived; else [`Error::WouldBlock`].
    pub fn try_recv(&mut self) -> Result<Vec<u8>> {
        self.try_recv_with(|m| m.data.to_vec())
    }

    /// Ok once every message sent so far has completed, or the peer has disconnected (as
    /// [`flush`](Self::flush)); else [`Error::WouldBlock`].
    pub fn try_flush(&mut self) -> Result<()> {
        self.try_until("the last sends to complete", |e| {
            e.sends_posted == 0 || e.disconnected
        })
    }

    /// Posts the caller's work request like [`post`](Self::post), except that an RDMA
    /// WRITE_WITH_IMM without a credit fails with [`Error::WouldBlock`] (its buffers given
    /// back in the error) instead of waiting for one.
    pub fn try_post(&mut self, wr: SendRequest) -> Result<(), PostError> {
        if matches!(wr.op(), SendOp::WriteWithImm(..)) {
            if let Err(error) = self.try_until("send credit from the peer", |e| e.credits() > 0) {
                let bufs: Bufs = wr.sges.into_iter().map(|s| s.buf).collect();
                return Err(PostError { error, bufs });
            }
        }
        self.post(wr)
    }

    /// Up to `max` completions of work requests posted with [`post`](Self::post) /
    /// [`try_post`](Self::try_post) if any has come; else [`Error::WouldBlock`].
    pub fn try_poll_user(&mut self, max: usize) -> Result<Vec<Completion>> {
        self.try_until("a work completion", |e| !e.user_done.is_empty())?;
        let n = max.max(1).min(self.user_done.len());
        Ok(self.user_done.drain(..n).collect())
    }

    /// Waits (at most the timeout) until a message may be sent at once or one has arrived:
    /// true for the first. A protocol whose peer may itself be waiting for a credit takes what
    /// came instead of waiting for a credit with messages unread (both would wait).
    pub(crate) fn wait_send_or_message(&mut self) -> Result<bool> {
        self.check_usable()?;
        let mut deadline = self.deadline();
        loop {
            if self.can_send_now() {
                return Ok(true);
            }
            if !self.ready.is_empty() {
                return Ok(false);
            }
            self.pump(&mut deadline, "send credit from the peer or a message")?;
        }
    }

    /// Whether a message has arrived, handling what is in the CQ without waiting: a protocol
    /// that gathers its answers sends them before it would wait.
    pub(crate) fn has_message(&mut self) -> Result<bool> {
        self.check_usable()?;
        if self.ready.is_empty() {
            let r = self.poll_now();
            r.map_err(|e| self.fail(e))?;
        }
        Ok(!self.ready.is_empty())
    }

    fn can_send_now(&self) -> bool {
        self.credits() > 0 && self.sends_posted < self.own_sq && self.q.free_send_slots() > 0
    }

    /// Whether a message may be sent at once (true) or one has arrived (false), as
    /// [`wait_send_or_message`](Self::wait_send_or_message) says; else [`Error::WouldBlock`].
    #[cfg(feature = "tokio")]
    pub(crate) fn try_send_or_message(&mut self) -> Result<bool> {
        let what = "send credit from the peer or a message";
        self.try_until(what, |e| e.can_send_now() || !e.ready.is_empty())?;
        Ok(self.can_send_now())
    }

    /// Whether a credit for an RDMA WRITE_WITH_IMM is free (true), or, short of that, more
    /// than `done` completions of the caller's work requests wait to be taken (false: progress,
    /// see [`wait_credit`](Self::wait_credit)); else [`Error::WouldBlock`].
    #[cfg(feature = "tokio")]
    pub(crate) fn try_credit(&mut self, done: usize) -> Result<bool> {
        let what = "send credit from the peer";
        self.try_until(what, |e| e.credits() > 0 || e.user_done.len() > done)?;
        Ok(self.credits() > 0)
    }

    /// Completions of the caller's work requests not taken yet.
    #[cfg(feature = "tokio")]
    pub(crate) fn user_done_len(&self) -> usize {
        self.user_done.len()
    }

    /// Ok if `ready` holds now or after handling what is in the CQ; else WouldBlock (or the
    /// peer's disconnect, once nothing is left to take).
    fn try_until(&mut self, what: &'static str, ready: impl Fn(&Endpoint) -> bool) -> Result<()> {
        self.check_usable()?;
        if ready(self) {
            return Ok(());
        }
        let r = self.try_until_inner(what, ready);
        r.map_err(|e| if e.is_would_block() { e } else { self.fail(e) })
    }

    fn try_until_inner(
        &mut self,
        what: &'static str,
        ready: impl Fn(&Endpoint) -> bool,
    ) -> Result<()> {
        if self.deferred.is_some() {
            self.settle(true)?;
        }
        self.poll_now()?;
        if ready(self) {
            return Ok(());
        }
        self.check_cm()?;
        if self.disconnected {
            // Take what arrived before the disconnect; after that there is nothing to wait for.
            self.poll_now()?;
            if ready(self) {
                return Ok(());
            }
            return Err(Error::Connection(format!(
                "the peer disconnected while waiting for {what}"
            )));
        }
        Err(Error::WouldBlock { what })
    }

    /// Handles every completion in the CQ now; returns how many.
    fn poll_now(&mut self) -> Result<usize> {
        self.poll_now_up_to(usize::MAX)
    }
}

impl Listener {
    /// A descriptor readable when a connection request (or another event) is queued for
    /// [`try_take`](Self::try_take). Readiness-only: an epoll instance over the listener's
    /// RDMA CM event channel ([`CmId::fd`]).
    pub fn fd(&self) -> Result<BorrowedFd<'_>> {
        self.id.fd()
    }

    /// A handle of the listening CM id (for registering its channel with a reactor: the `aio`
    /// module of feature `tokio`).
    #[cfg(feature = "tokio")]
    pub(crate) fn cm_handle(&self) -> CmId {
        self.id.clone()
    }

    /// Takes the next connection request if one is queued; else [`Error::WouldBlock`]. Then
    /// [`Pending::finish`] (blocking) or [`Pending::start_accept`] (non-blocking).
    pub fn try_take(&mut self) -> Result<Pending> {
        match self.take(Some(Duration::ZERO)) {
            Err(Error::Timeout { what, .. }) => Err(Error::WouldBlock { what }),
            r => r,
        }
    }
}

/// A connection being accepted without blocking ([`Pending::start_accept`]): over RDMA CM the
/// reply is sent; over OOB the exchange goes as the client's bytes arrive. Call
/// [`try_finish`](Self::try_finish) whenever [`fd`](Self::fd) is readable. It has no deadline
/// of its own: the caller drops one that takes too long. Dropping it abandons the client.
pub struct Accepting {
    peer: Option<SocketAddr>,
    how: Under,
}

enum Under {
    Cm {
        id: CmId,
        /// Taken when the endpoint is made (or the accept failed).
        started: Option<Box<Started>>,
    },
    Oob {
        hs: Box<OobHandshake>,
        /// Watches the socket: for reading, and for writing while our address is not all
        /// written (`writable`).
        ready: Epoll,
        writable: bool,
    },
}

impl std::fmt::Debug for Accepting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.how {
            Under::Cm { .. } => "rdma_cm",
            Under::Oob { .. } => "oob",
        };
        write!(f, "Accepting({kind}, {:?})", self.peer)
    }
}

impl Pending {
    /// Starts accepting without waiting: over RDMA CM sets up the connection's resources and
    /// sends the accept reply (a bad handshake is rejected with a reason, as
    /// [`finish`](Self::finish) does); over OOB (a connection taken from an
    /// [`OobListener`](super::OobListener)) makes the socket non-blocking, and
    /// [`Accepting::try_finish`] does the exchange as the client's bytes arrive (the endpoint
    /// keeps ibv_rc_pingpong's one-message-at-a-time flow, as [`finish`](Self::finish) gives
    /// it).
    pub fn start_accept(self) -> Result<Accepting> {
        Ok(match self.start()? {
            Start::Cm(s) => Accepting {
                peer: s.peer,
                how: Under::Cm {
                    id: s.id.clone(),
                    started: Some(s),
                },
            },
            Start::Oob(hs, peer) => {
                let io = |e| Error::io("epoll_create1/epoll_ctl (an OOB accept's descriptor)", e);
                let ready = Epoll::new().map_err(io)?;
                ready.add(hs.socket()).map_err(io)?;
                Accepting {
                    peer,
                    how: Under::Oob {
                        hs,
                        ready,
                        writable: false,
                    },
                }
            }
        })
    }
}

impl Accepting {
    /// A descriptor readable when [`try_finish`](Self::try_finish) may take a step: the client
    /// completed the connection (or another event came) over RDMA CM; bytes came, or the socket
    /// can take ours, over OOB. Readiness-only: an epoll instance over the connection's own CM
    /// event channel ([`CmId::fd`]) or its TCP socket.
    pub fn fd(&self) -> Result<BorrowedFd<'_>> {
        match &self.how {
            Under::Cm { id, .. } => id.fd(),
            Under::Oob { ready, .. } => Ok(ready.as_fd()),
        }
    }

    /// The peer's address, when known.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// A handle of the connection's CM id (for registering its channel with a reactor: the
    /// `aio` module of feature `tokio`); an OOB accept has none.
    #[cfg(feature = "tokio")]
    pub(crate) fn cm_handle(&self) -> Result<CmId> {
        match &self.how {
            Under::Cm { id, .. } => Ok(id.clone()),
            Under::Oob { .. } => Err(Error::InvalidArgument(
                "an out-of-band accept has no RDMA CM id".into(),
            )),
        }
    }

    /// Once the connection is set up: `Ok(Some(endpoint))`; until then `Ok(None)` (try again
    /// when [`fd`](Self::fd) is readable). Over RDMA CM that is the client's ESTABLISHED, and
    /// any other event fails; over OOB the exchange's last byte, and a client that closes or
    /// sends a bad message fails. Every call after a failure or after the endpoint fails.
    pub fn try_finish(&mut self) -> Result<Option<Endpoint>> {
        match &mut self.how {
            Under::Cm { id, started } => cm_finish(id, started),
            Under::Oob {
                hs,
                ready,
                writable,
            } => {
                let r = hs.advance().map_err(|e| about_client(self.peer, e))?;
                if r.is_none() && hs.wants_write() != *writable {
                    *writable = !*writable;
                    ready
                        .watch_writable(hs.socket(), *writable)
                        .map_err(|e| Error::io("epoll_ctl (an OOB accept's descriptor)", e))?;
                }
                Ok(r)
            }
        }
    }
}

fn cm_finish(id: &CmId, started: &mut Option<Box<Started>>) -> Result<Option<Endpoint>> {
    let what = "the client to complete the connection";
    if started.is_none() {
        return Err(Error::Connection(format!("{what}: the accept is over")));
    }
    while let Some(ev) = id.try_next_event()? {
        match ev.kind() {
            EventKind::Established if ev.status() == 0 => {}
            EventKind::AddrChange => continue,
            _ => {
                *started = None;
                return Err(ev.to_error(what));
            }
        }
        drop(ev);
        let s = *started.take().expect("checked above");
        let peer = s.id.peer_addr();
        return Ok(Some(
            s.parts.into_cm_endpoint(&s.opts, &s.hello, peer, s.id),
        ));
    }
    Ok(None)
}

/// A connection to a [`Listener`] being made without blocking ([`Connecting::start`]): call
/// [`try_finish`](Self::try_finish) whenever [`fd`](Self::fd) is readable. Each step (address,
/// route, connection) is bounded by the kernel's own timeouts (the options' timeout for
/// address and route resolution); dropping it abandons the connection.
pub struct Connecting {
    dst: SocketAddr,
    opts: EndpointOptions,
    id: CmId,
    stage: Stage,
}

enum Stage {
    Address,
    Route,
    Reply(Box<Parts>),
    Gone,
}

impl std::fmt::Debug for Connecting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Connecting({})", self.dst)
    }
}

impl Connecting {
    /// Checks the options and starts resolving `dst` (as [`Endpoint::connect_cm`] does, without
    /// waiting). A host name in `dst` is looked up first, blocking.
    pub fn start(dst: impl ToSocketAddrs, opts: &EndpointOptions) -> Result<Connecting> {
        let dst = resolve(dst, "the address to connect to")?;
        Ok(Connecting {
            dst,
            opts: opts.clone(),
            id: start_connect(dst, opts)?,
            stage: Stage::Address,
        })
    }

    /// A descriptor readable when the next step may be taken. Readiness-only: an epoll
    /// instance over the connection's CM event channel ([`CmId::fd`]).
    pub fn fd(&self) -> Result<BorrowedFd<'_>> {
        self.id.fd()
    }

    /// A handle of the connection's CM id (for registering its channel with a reactor: the
    /// `aio` module of feature `tokio`).
    #[cfg(feature = "tokio")]
    pub(crate) fn cm_handle(&self) -> CmId {
        self.id.clone()
    }

    /// Takes every step whose event has come: `Ok(Some(endpoint))` once connected, `Ok(None)`
    /// to try again when [`fd`](Self::fd) is readable. Fails as
    /// [`connect_cm`](Endpoint::connect_cm) would (rejected, unreachable, ...); after a
    /// failure it is done.
    pub fn try_finish(&mut self) -> Result<Option<Endpoint>> {
        while let Some(ev) = self.id.try_next_event()? {
            if let Some(ep) = self.step(ev)? {
                return Ok(Some(ep));
            }
        }
        Ok(None)
    }

    fn step(&mut self, ev: Event) -> Result<Option<Endpoint>> {
        let want = match self.stage {
            Stage::Address => Some((EventKind::AddrResolved, "resolving the server's address")),
            Stage::Route => Some((
                EventKind::RouteResolved,
                "resolving the route to the server",
            )),
            Stage::Reply(_) => None,
            Stage::Gone => {
                return Err(Error::Connection(format!(
                    "connecting to {} failed earlier",
                    self.dst
                )))
            }
        };
        if let Some((kind, what)) = want {
            if ev.kind() == EventKind::AddrChange {
                return Ok(None);
            }
            if ev.kind() != kind || ev.status() != 0 {
                self.stage = Stage::Gone;
                return Err(ev.to_error(what));
            }
            drop(ev);
            let next = match self.stage {
                Stage::Address => self
                    .id
                    .resolve_route(self.opts.timeout)
                    .map(|()| Stage::Route),
                _ => {
                    send_connect(&self.id, self.dst, &self.opts).map(|p| Stage::Reply(Box::new(p)))
                }
            };
            match next {
                Ok(s) => self.stage = s,
                Err(e) => {
                    self.stage = Stage::Gone;
                    return Err(e);
                }
            }
            return Ok(None);
        }
        let Stage::Reply(parts) = std::mem::replace(&mut self.stage, Stage::Gone) else {
            unreachable!("checked above");
        };
        let id = self.id.clone();
        connected(ev, self.dst, &self.opts, *parts, id).map(Some)
    }
}
