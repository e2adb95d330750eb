//! Accepting in two steps, so a server can take connections on one thread and set each up on
//! another: [`Listener::take`] / [`OobListener::take`] only take the next request (the CM
//! CONNECT_REQUEST, already on its own event channel; or the accepted TCP socket) and return a
//! [`Pending`] connection; [`Pending::finish`] does the rest (PD/CQ/QP, `rdma_accept` and the
//! wait for ESTABLISHED; or the 52-byte exchange and RTR/RTS), each step within the options'
//! timeout. A peer that stalls mid-handshake then holds only the thread that finishes it (or
//! nothing: [`Pending::start_accept`] goes on without blocking). `accept` is `take` then
//! `finish`.

use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd as _;
use std::time::{Duration, Instant};

use crate::cm::{CmId, ConnParam, ConnectRequest, EventKind, DEPTH_AUTO, MAX_REJECT_PRIVATE_DATA};
use crate::error::{Error, Result};
use crate::xfer::params::SessionParams;
use crate::xfer::wire::{self, Hello, Reject, RejectCode};

use super::cm::Listener;
use super::conn::Endpoint;
use super::oob::{set_timeouts, OobHandshake, OobListener};
use super::options::{EndpointOptions, ACK_TIMEOUT, RETRY_COUNT, RNR_RETRY};
use super::setup::{check_cm_device, check_msg_size, Parts};

/// A connection taken from a listener whose set-up is not done yet: [`finish`](Self::finish)
/// it (on any thread), or drop it to abandon the peer.
pub struct Pending {
    peer: Option<SocketAddr>,
    opts: EndpointOptions,
    how: How,
}

enum How {
    Cm {
        req: ConnectRequest,
        listen: SocketAddr,
    },
    Oob(TcpStream),
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.how {
            How::Cm { .. } => "rdma_cm",
            How::Oob(_) => "oob",
        };
        write!(f, "Pending({kind}, from {})", fmt_addr(self.peer))
    }
}

fn fmt_addr(a: Option<SocketAddr>) -> String {
    a.map_or_else(|| "?".into(), |a| a.to_string())
}

impl Pending {
    /// The peer's address, when known.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// The session parameters the client sent in its handshake (RDMA CM; `None` over OOB, from
    /// a client that sent none, or from a handshake [`finish`](Self::finish) will reject).
    pub fn params(&self) -> Option<SessionParams> {
        match &self.how {
            How::Cm { req, .. } => Hello::decode(&req.private_data).ok()?.params,
            How::Oob(_) => None,
        }
    }

    /// The options this connection will be set up with (the listener's, until changed: e.g.
    /// buffers sized for the client's [`params`](Self::params)).
    pub fn options_mut(&mut self) -> &mut EndpointOptions {
        &mut self.opts
    }

    /// Refuses the client at once, without setting anything up, as over the server's limits
    /// (its connect fails with [`Error::Connection`] naming `why`): over RDMA CM a reject whose
    /// reason is `why`; over OOB a refusal record in place of this side's address (`why` cut
    /// to 32 bytes; ibv_rc_pingpong sees a bad address), then the TCP connection is closed.
    /// Never blocks.
    pub fn refuse(self, why: &str) {
        self.reject(RejectCode::Limits, why)
    }

    /// Refuses the client at once as [`refuse`](Self::refuse) does, as busy: its connect fails
    /// with [`Error::Refused`] and [`Reason::Busy`](crate::error::Reason::Busy) (retry later).
    pub fn refuse_busy(self, why: &str) {
        self.reject(RejectCode::Busy, why)
    }

    fn reject(self, code: RejectCode, why: &str) {
        let r = Reject {
            code,
            text: why.to_string(),
        };
        match self.how {
            How::Cm { req, .. } => {
                if let Err(e) = req.id.reject(&r.encode(MAX_REJECT_PRIVATE_DATA)) {
                    tracing::debug!("rdma_reject: {e}");
                }
            }
            How::Oob(mut s) => {
                use std::io::{Read as _, Write as _};
                // Non-blocking: the record fits an empty socket buffer, and a peer that reads
                // nothing cannot hold this thread.
                let r = s
                    .set_nonblocking(true)
                    .and_then(|()| s.write_all(&wire::oob_refusal(&r)))
                    .and_then(|()| s.shutdown(std::net::Shutdown::Write));
                if let Err(e) = r {
                    tracing::debug!("refusing an OOB client: {e}");
                }
                // What the client sent already is read, so that closing does not reset the
                // connection before it reads the record.
                let _ = s.read(&mut [0u8; wire::OOB_MSG_LEN]);
            }
        }
    }

    /// Sets the connection up (each step waits at most the listener's timeout). A CM client
    /// that sent a bad handshake is rejected with a reason; one that fails mid-way only makes
    /// this call fail.
    pub fn finish(self) -> Result<Endpoint> {
        let peer = self.peer;
        let r = match self.how {
            How::Cm { req, listen } => setup_cm(&self.opts, listen, req),
            How::Oob(s) => setup_oob(&self.opts, s, peer),
        };
        r.map_err(|e| about_client(peer, e))
    }
}

/// A CM connection accepted (`rdma_accept` sent) whose ESTABLISHED has not come yet.
pub(super) struct Started {
    pub(super) id: CmId,
    pub(super) parts: Parts,
    pub(super) hello: Hello,
    pub(super) opts: EndpointOptions,
    pub(super) peer: Option<SocketAddr>,
}

/// A connection whose non-blocking accept has begun ([`Pending::start`]).
pub(super) enum Start {
    /// RDMA CM: the reply is sent; ESTABLISHED follows on the id's channel.
    Cm(Box<Started>),
    /// Out-of-band: the TCP socket, non-blocking, the exchange not begun.
    Oob(Box<OobHandshake>, Option<SocketAddr>),
}

impl Pending {
    /// For the non-blocking accept (`nonblock`): over RDMA CM the first half of
    /// [`finish`](Self::finish) ([`start_cm`]), with the options and the peer's address; over
    /// OOB the socket made non-blocking, ready for the exchange a byte at a time.
    pub(super) fn start(self) -> Result<Start> {
        let peer = self.peer;
        match self.how {
            How::Cm { req, listen } => {
                let (id, parts, hello) = start_cm(&self.opts, listen, req)?;
                Ok(Start::Cm(Box::new(Started {
                    id,
                    parts,
                    hello,
                    opts: self.opts,
                    peer,
                })))
            }
            How::Oob(s) => {
                s.set_nonblocking(true)
                    .map_err(|e| Error::io("setting the TCP socket non-blocking", e))?;
                s.set_nodelay(true)
                    .map_err(|e| Error::io("setting TCP_NODELAY", e))?;
                Ok(Start::Oob(
                    Box::new(OobHandshake::new(s, self.opts, peer)),
                    peer,
                ))
            }
        }
    }
}

/// `e`, a failed set-up of `peer`'s connection, naming the client.
pub(super) fn about_client(peer: Option<SocketAddr>, e: Error) -> Error {
    match e {
        Error::Connection(m) => Error::Connection(format!("client {}: {m}", fmt_addr(peer))),
        Error::Protocol(m) => Error::Protocol(format!("client {}: {m}", fmt_addr(peer))),
        e => e,
    }
}

impl Listener {
    /// Waits (at most `wait`; `None`: forever) for the next connection request and sets it up:
    /// [`take`](Self::take) then [`Pending::finish`].
    pub fn accept(&mut self, wait: Option<Duration>) -> Result<Endpoint> {
        self.take(wait)?.finish()
    }

    /// Waits (at most `wait`; `None`: forever; zero: only looks) for the next connection request
    /// and takes it, without setting it up. A timeout is [`Error::Timeout`]; a listener shut
    /// down ([`ShutdownHandle`](super::ShutdownHandle), before or during the wait) gives
    /// [`Error::Shutdown`].
    pub fn take(&mut self, wait: Option<Duration>) -> Result<Pending> {
        if let Some(b) = &self.broken {
            return Err(Error::Connection(format!(
                "listener on {} failed earlier: {b}",
                self.addr
            )));
        }
        let deadline = wait.map(|w| Instant::now() + w);
        let req = loop {
            self.wake
                .check(|| format!("the listener on {}", self.addr))?;
            // Zero: only the events already queued (the channel is non-blocking).
            match self.id.get_request(Some(Duration::ZERO)) {
                Ok(r) => break r,
                Err(Error::Timeout { .. }) => {}
                Err(e) => {
                    self.broken = Some(e.to_string());
                    return Err(e);
                }
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                return Err(Error::Timeout {
                    what: "a connection request",
                    after: wait.unwrap_or_default(),
                });
            }
            self.wake.wait(self.id.channel_fd(), left)?;
        };
        Ok(Pending {
            peer: req.id.peer_addr(),
            opts: self.opts.clone(),
            how: How::Cm {
                req,
                listen: self.addr,
            },
        })
    }
}

fn setup_cm(opts: &EndpointOptions, listen: SocketAddr, req: ConnectRequest) -> Result<Endpoint> {
    let (id, parts, hello) = start_cm(opts, listen, req)?;
    id.expect_event(
        EventKind::Established,
        opts.timeout,
        "the client to complete the connection",
    )?;
    let peer_addr = id.peer_addr();
    Ok(parts.into_cm_endpoint(opts, &hello, peer_addr, id))
}

/// The first half of accepting over RDMA CM: checks the client's handshake (rejecting a bad
/// one with a reason), sets up PD/CQ/QP and receives, and calls `rdma_accept`; ESTABLISHED (or
/// an error event) follows on the returned id's channel.
pub(super) fn start_cm(
    opts: &EndpointOptions,
    listen: SocketAddr,
    req: ConnectRequest,
) -> Result<(CmId, Parts, Hello)> {
    let id = req.id;
    let reject = |code: RejectCode, e: Error| -> Error {
        let r = Reject {
            code,
            text: e.to_string(),
        };
        if let Err(x) = id.reject(&r.encode(MAX_REJECT_PRIVATE_DATA)) {
            tracing::debug!("rdma_reject: {x}");
        }
        e
    };
    let hello = match Hello::decode(&req.private_data) {
        Ok(h) => h,
        Err(e) => {
            let code = if e.to_string().contains("version") {
                RejectCode::Version
            } else {
                RejectCode::BadHandshake
            };
            return Err(reject(code, e));
        }
    };
    let built = (|| -> Result<Parts> {
        let ctx = id.context()?;
        check_cm_device(opts, &ctx, id.port_num(), &listen.to_string())?;
        let port = ctx.query_port(id.port_num())?;
        check_msg_size(opts, &ctx, &port)?;
        let mut parts = Parts::new(ctx, port, opts, |pd, cq, c| id.create_qp(pd, cq, cq, c))?;
        parts.post_receives(opts.msg_size, opts.recv_depth + 2)?;
        Ok(parts)
    })();
    let parts = built.map_err(|e| reject(RejectCode::Resources, e))?;
    let param = ConnParam {
        private_data: Hello::new(opts.recv_depth, opts.msg_size as u32)
            .encode()
            .to_vec(),
        // 255: as many as the peer asked for and the device allows (rdma_accept(3)).
        responder_resources: DEPTH_AUTO,
        initiator_depth: DEPTH_AUTO,
        retry_count: RETRY_COUNT,
        rnr_retry_count: RNR_RETRY,
    };
    id.set_ack_timeout(ACK_TIMEOUT)
        .map_err(|e| reject(RejectCode::Resources, e))?;
    id.accept(&param)?;
    Ok((id, parts, hello))
}

impl OobListener {
    /// Waits (at most `wait`; `None`: forever) for the next TCP client, then does the exchange
    /// as ibv_rc_pingpong's server: read its 52 bytes, RTR/RTS, send ours, read `"done"`.
    /// [`take`](Self::take) then [`Pending::finish`].
    pub fn accept(&self, wait: Option<Duration>) -> Result<Endpoint> {
        self.take(wait)?.finish()
    }

    /// Waits (at most `wait`; `None`: forever) for the next TCP client and accepts its socket,
    /// without reading anything from it.
    /// A shut-down listener gives [`Error::Shutdown`], as [`Listener::take`].
    pub fn take(&self, wait: Option<Duration>) -> Result<Pending> {
        self.wake.check(|| self.shut_what())?;
        let deadline = wait.map(|w| Instant::now() + w);
        let (s, peer_addr) = loop {
            match self.tcp.accept() {
                Ok(x) => break x,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                    if left == Some(Duration::ZERO) {
                        return Err(Error::Timeout {
                            what: "a TCP client",
                            after: wait.unwrap_or_default(),
                        });
                    }
                    self.wake.wait(self.tcp.as_fd(), left)?;
                    self.wake.check(|| self.shut_what())?;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io("accepting a TCP client", e)),
            }
        };
        Ok(Pending {
            peer: Some(peer_addr),
            opts: self.opts.clone(),
            how: How::Oob(s),
        })
    }
}

impl OobListener {
    fn shut_what(&self) -> String {
        format!("the listener on {} (TCP)", self.local_addr())
    }
}

fn setup_oob(
    opts: &EndpointOptions,
    s: TcpStream,
    peer_addr: Option<SocketAddr>,
) -> Result<Endpoint> {
    s.set_nonblocking(false)
        .map_err(|e| Error::io("setting the TCP socket blocking", e))?;
    set_timeouts(&s, opts.timeout)?;
    // Blocking, with the timeout on each read and write: one call does the whole exchange,
    // and stops short only when the client let a timeout pass.
    let mut hs = OobHandshake::new(s, opts.clone(), peer_addr);
    let ep = hs.advance()?;
    ep.ok_or_else(|| hs.stalled())
}
