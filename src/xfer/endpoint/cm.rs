//! Connection set-up over RDMA CM: the client ([`Endpoint::connect_cm`]) and the
//! [`Listener`] (its accept is in [`super::accept`]).

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use crate::cm::{CmId, ConnParam, Event, EventKind};
use crate::error::{Error, Result};
use crate::xfer::wire::{Hello, Reject};

use super::conn::Endpoint;
use super::options::{EndpointOptions, ACK_TIMEOUT, RETRY_COUNT, RNR_RETRY};
use super::setup::{
    check_cm_device, check_msg_size, choose, gid_source, rd_atomic, resolve, Parts,
};
use super::wake::{ShutdownHandle, Wake};

impl Endpoint {
    /// Connects to an rdmaxfer [`Listener`] with RDMA CM: resolve address and route, create
    /// the QP, connect with the handshake as private data, wait for ESTABLISHED. `dst` is a
    /// socket address or a host name with its port (`"server:7471"`, `("server", 7471)`).
    pub fn connect_cm(dst: impl ToSocketAddrs, opts: &EndpointOptions) -> Result<Endpoint> {
        Endpoint::dial_cm(dst, opts)?.connect()
    }

    /// The first half of [`connect_cm`](Self::connect_cm), which reaches no server yet: resolves
    /// the address and the route, creates the QP and posts the receives. [`Dial::connect`]
    /// sends the connect request later (e.g. once another connection has opened the session
    /// this one is to join), each step within `opts.timeout`.
    pub fn dial_cm(dst: impl ToSocketAddrs, opts: &EndpointOptions) -> Result<Dial> {
        let dst = resolve(dst, "the address to connect to")?;
        let t = opts.timeout;
        let id = start_connect(dst, opts)?;
        id.expect_event(EventKind::AddrResolved, t, "resolving the server's address")?;
        id.resolve_route(t)?;
        id.expect_event(
            EventKind::RouteResolved,
            t,
            "resolving the route to the server",
        )?;
        let parts = make_parts(&id, dst, opts)?;
        Ok(Dial {
            id,
            parts,
            dst,
            opts: opts.clone(),
        })
    }

    /// Takes the next connection from `listener` (see [`Listener::accept`]): the server side of
    /// [`connect_cm`](Self::connect_cm).
    pub fn accept_cm(listener: &mut Listener, wait: Option<Duration>) -> Result<Endpoint> {
        listener.accept(wait)
    }
}

/// A connection made ready up to its connect request ([`Endpoint::dial_cm`]): route resolved,
/// QP created, receives posted; nothing has reached the server.
pub struct Dial {
    id: CmId,
    parts: Parts,
    dst: SocketAddr,
    opts: EndpointOptions,
}

impl std::fmt::Debug for Dial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Dial({})", self.dst)
    }
}

impl Dial {
    /// Sends the connect request and waits (within the timeout) for ESTABLISHED: the rest of
    /// [`Endpoint::connect_cm`].
    pub fn connect(self) -> Result<Endpoint> {
        let Dial {
            id,
            parts,
            dst,
            opts,
        } = self;
        request(&id, &opts)?;
        let ev = id.next_event(Some(opts.timeout), "the connection to be established")?;
        connected(ev, dst, &opts, parts, id)
    }
}

/// The first step of [`Endpoint::connect_cm`]: refuses bad options before any packet leaves
/// (device, GID index, message size), then starts resolving the address (ADDR_RESOLVED or an
/// error event follows on the id's channel).
pub(super) fn start_connect(dst: SocketAddr, opts: &EndpointOptions) -> Result<CmId> {
    if opts.mtu.is_some() {
        return Err(Error::InvalidArgument(
            "the path MTU cannot be set with rdma_cm (it follows the route's netdev MTU); use --oob to set it".into(),
        ));
    }
    let pre = choose(opts)?;
    let src = if opts.device.is_some() || opts.gid_index.is_some() {
        Some(SocketAddr::new(gid_source(&pre.gid)?, 0))
    } else {
        None
    };
    drop(pre);
    let id = CmId::new()?;
    id.resolve_addr(src, dst, opts.timeout)?;
    Ok(id)
}

/// After ROUTE_RESOLVED: creates the QP, posts the receives and sends the connect request with
/// the handshake as private data (ESTABLISHED, REJECTED or an error event follows).
pub(super) fn send_connect(id: &CmId, dst: SocketAddr, opts: &EndpointOptions) -> Result<Parts> {
    let parts = make_parts(id, dst, opts)?;
    request(id, opts)?;
    Ok(parts)
}

/// After ROUTE_RESOLVED: the device checked against the options, the QP created and the
/// receives posted.
fn make_parts(id: &CmId, dst: SocketAddr, opts: &EndpointOptions) -> Result<Parts> {
    let ctx = id.context()?;
    check_cm_device(opts, &ctx, id.port_num(), &dst.to_string())?;
    let port = ctx.query_port(id.port_num())?;
    check_msg_size(opts, &ctx, &port)?;
    let mut parts = Parts::new(ctx, port, opts, |pd, cq, c| id.create_qp(pd, cq, cq, c))?;
    parts.post_receives(opts.msg_size, opts.recv_depth + 2)?;
    Ok(parts)
}

/// Sends the connect request with the handshake as private data (ESTABLISHED, REJECTED or an
/// error event follows).
fn request(id: &CmId, opts: &EndpointOptions) -> Result<()> {
    let (resp, init) = rd_atomic(&id.context()?);
    let param = ConnParam {
        private_data: Hello::new(opts.recv_depth, opts.msg_size as u32)
            .with_params(opts.session)
            .encode()
            .to_vec(),
        responder_resources: resp,
        initiator_depth: init,
        retry_count: RETRY_COUNT,
        rnr_retry_count: RNR_RETRY,
    };
    // rdma_cm's own ACK timeout on RoCE is 2.1 s (code 19), and Soft-RoCE often waits one ACK
    // timeout to recover a lost packet: use ibv_rc_pingpong's, as the OOB path does.
    id.set_ack_timeout(ACK_TIMEOUT)?;
    id.connect(&param)
}

/// The last step of [`Endpoint::connect_cm`]: the event that answered the connect request.
pub(super) fn connected(
    ev: Event,
    dst: SocketAddr,
    opts: &EndpointOptions,
    parts: Parts,
    id: CmId,
) -> Result<Endpoint> {
    match ev.kind() {
        EventKind::Established if ev.status() == 0 => {}
        EventKind::Rejected => {
            if let Some(r) = Reject::decode(ev.private_data()) {
                return Err(r.into_error(dst));
            }
            return Err(ev.to_error(&format!("connecting to {dst}")));
        }
        _ => return Err(ev.to_error(&format!("connecting to {dst}"))),
    }
    let hello = Hello::decode(ev.private_data())?;
    drop(ev);
    let peer_addr = id.peer_addr().or(Some(dst));
    Ok(parts.into_cm_endpoint(opts, &hello, peer_addr, id))
}

/// Accepts RDMA CM connections from rdmaxfer peers, one after another.
pub struct Listener {
    pub(super) id: CmId,
    pub(super) opts: EndpointOptions,
    pub(super) addr: SocketAddr,
    pub(super) broken: Option<String>,
    pub(super) wake: Arc<Wake>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Listener({})", self.addr)
    }
}

impl Listener {
    /// Binds and listens (`rdma_bind_addr` + `rdma_listen`). With an unspecified address and a
    /// device or GID index given, listens on that GID's IPv4 address. Options are checked now.
    /// `addr` is a socket address or a host name with its port (`"0.0.0.0:7471"`).
    pub fn bind(addr: impl ToSocketAddrs, opts: &EndpointOptions) -> Result<Listener> {
        let addr = resolve(addr, "the address to listen on")?;
        if opts.mtu.is_some() {
            return Err(Error::InvalidArgument(
                "the path MTU cannot be set with rdma_cm (it follows the route's netdev MTU); use --oob to set it".into(),
            ));
        }
        let mut addr = addr;
        // Checks device, GID index and message size now, before any client shows up.
        let c = choose(opts)?;
        if addr.ip().is_unspecified() && (opts.device.is_some() || opts.gid_index.is_some()) {
            addr.set_ip(gid_source(&c.gid)?);
        }
        drop(c);
        let id = CmId::new()?;
        id.bind_addr(addr).map_err(|e| {
            if matches!(e.errno(), Some(x) if x == libc::EADDRNOTAVAIL || x == libc::ENODEV) {
                Error::InvalidArgument(format!(
                    "cannot listen on {addr}: no RDMA device has that address ({e})"
                ))
            } else {
                e
            }
        })?;
        id.listen(16)?;
        let bound = id.local_addr().unwrap_or(addr);
        Ok(Listener {
            id,
            opts: opts.clone(),
            addr: bound,
            broken: None,
            wake: Wake::new()?,
        })
    }

    /// The address listened on (with the real port when bound to port 0: the OS chooses one).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// A handle that shuts this listener down from any thread (see [`ShutdownHandle`]).
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(self.wake.clone())
    }

    /// True once the listener itself failed (e.g. its device was removed); accept fails from
    /// then on. Failures of single clients do not break it.
    pub fn is_broken(&self) -> bool {
        self.broken.is_some()
    }
}
