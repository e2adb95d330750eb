//! A connected RC endpoint: PD + CQ + RC QP + a pre-posted receive ring + flow control.
//!
//! Made with RDMA CM ([`Endpoint::connect_cm`], [`Listener`]) or with ibv_rc_pingpong's
//! out-of-band TCP exchange ([`Endpoint::connect_oob`], [`OobListener`]).
//!
//! # Flow control
//! Sends never outrun the peer's posted receives, so no RNR NAK (and no RNR retry loop) can
//! happen, and `rnr_retry` is small and finite.
//! - **Credits** (CM; both ends are rdmaxfer): each side posts `recv_depth + 2` receives and
//!   grants `recv_depth` credits in the handshake. A message costs one credit. Credits come back
//!   in the immediate word of every SEND_WITH_IMM ([`wire::encode_imm`]); when half the window
//!   is owed and nothing is being sent, a zero-length credit message returns it. Credit messages
//!   take no credit: at most two are ever unread, which the two spare receives absorb.
//! - **Request/response** (OOB; the peer may be ibv_rc_pingpong, which knows no credits): one
//!   message may be outstanding, and each message taken from the peer allows one more. Messages
//!   are plain SENDs, as ibv_rc_pingpong sends them.
//!
//! A receive is re-posted (and its credit returned) when the application takes the message
//! ([`Endpoint::recv_with`]), so a peer that does not read stalls the sender (until its
//! deadline) instead of overrunning it.
//!
//! # Deadlines
//! Every step waits at most [`EndpointOptions::timeout`]: address and route resolution,
//! connecting, accepting, each TCP read and write, and each wait for a completion.
//!
//! # Per-message path
//! A message costs one post, one one-entry `ibv_poll_cq` per completion and no allocation, and
//! the functions on that path are `#[inline(always)]`: in an emulated guest each call and return
//! costs tens of nanoseconds (a translation-block lookup), which showed in every round trip.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::cm::{CmId, ConnParam, ConnectRequest, EventKind, DEPTH_AUTO, MAX_REJECT_PRIVATE_DATA};
use crate::error::{Error, Result};
use crate::verbs::{
    Completion, CompletionQueue, Context, Gid, GidEntry, InitAttr, LocalBuf, Mtu, PortAttr,
    ProtectionDomain, QpCaps, QueuePair, Retired, RtrAttr, RtsAttr, SendOp, SendRequest, WaitMode,
    WcOpcode,
};
use crate::xfer::params::SessionParams;
use crate::xfer::wire::{self, Hello, ImmKind, OobDest, Reject, RejectCode};

mod accept;
pub use accept::Pending;

/// ibv_rc_pingpong's TCP port, also rdmaxfer's default RDMA CM port.
pub const DEFAULT_PORT: u16 = 18515;
/// Default deadline for every step.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// RNR retries: finite, and never needed thanks to flow control.
pub const RNR_RETRY: u8 = 3;
/// Transport retries (ibv_rc_pingpong's retry_cnt).
pub const RETRY_COUNT: u8 = 7;
/// Local ACK timeout code (ibv_rc_pingpong's: 4.096 µs × 2^14 ≈ 67 ms), OOB and CM alike: under
/// loss Soft-RoCE spends about one ACK timeout per lost packet.
pub const ACK_TIMEOUT: u8 = 14;
/// Work request ids at or above this value are the endpoint's own.
pub const RESERVED_WR_ID: u64 = 1 << 62;
/// Outstanding RDMA READs asked for (capped by the device).
const RD_ATOMIC: u32 = 16;
/// Inline data asked for; creation is retried without inline if the device refuses.
const INLINE: u32 = 128;
/// Polls of the CQ in poll mode before a wait starts reading the clock.
const SPIN_POLLS: u32 = 2000;
/// How often a wait for completions also looks for CM events (peer disconnect).
const CM_CHECK: Duration = Duration::from_millis(50);

const WR_DATA: u64 = RESERVED_WR_ID | 1;
const WR_CREDIT: u64 = RESERVED_WR_ID | 2;
const WR_RECV: u64 = RESERVED_WR_ID | 3;

/// How an [`Endpoint`] is made and behaves.
#[derive(Clone, Debug)]
pub struct EndpointOptions {
    /// RDMA device; `None`: the first with an active port (OOB), or the one rdma_cm routes to (CM).
    pub device: Option<String>,
    /// GID index; `None`: the IPv4-mapped RoCE v2 GID. With CM it selects the source address.
    pub gid_index: Option<u32>,
    /// Port of the device (1-based); `None`: the first active one (CM: the one the route uses,
    /// which must then be this one).
    pub ib_port: Option<u8>,
    /// Path MTU (OOB only; rdma_cm takes it from the route). `None`: 1024, as ibv_rc_pingpong.
    pub mtu: Option<Mtu>,
    /// Busy-poll or sleep on the completion channel.
    pub wait: WaitMode,
    /// Deadline for each step.
    pub timeout: Duration,
    /// Largest message either side sends (the size of each receive buffer).
    pub msg_size: usize,
    /// Receives kept posted: the credits granted to the peer.
    pub recv_depth: u32,
    /// Send buffers (messages in flight at once).
    pub send_depth: u32,
    /// Send-queue slots for the caller's own work requests ([`Endpoint::post`]).
    pub extra_send_wr: u32,
    /// A client's session parameters, sent in the RDMA CM handshake (see [`crate::xfer::params`]).
    pub session: Option<SessionParams>,
}

impl Default for EndpointOptions {
    fn default() -> Self {
        EndpointOptions {
            device: None,
            gid_index: None,
            mtu: None,
            wait: WaitMode::Poll,
            timeout: DEFAULT_TIMEOUT,
            msg_size: 4096,
            recv_depth: 16,
            send_depth: 16,
            extra_send_wr: 0,
            ib_port: None,
            session: None,
        }
    }
}

impl EndpointOptions {
    fn validate(&self) -> Result<()> {
        if self.msg_size == 0 || self.msg_size > u32::MAX as usize {
            return Err(Error::InvalidArgument(format!(
                "message size {} is out of range",
                self.msg_size
            )));
        }
        if self.recv_depth == 0 || self.recv_depth > 1 << 16 {
            return Err(Error::InvalidArgument(format!(
                "receive depth {} is outside 1..=65536",
                self.recv_depth
            )));
        }
        if self.send_depth == 0 || self.send_depth > 1 << 16 {
            return Err(Error::InvalidArgument(format!(
                "send depth {} is outside 1..=65536",
                self.send_depth
            )));
        }
        if self.timeout.is_zero() {
            return Err(Error::InvalidArgument("timeout must be positive".into()));
        }
        Ok(())
    }
}

/// How the connection was set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// RDMA connection manager.
    Cm,
    /// ibv_rc_pingpong's out-of-band TCP exchange.
    Oob,
}

/// What the other side is, as far as the connection set-up tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum PeerKind {
    /// rdmaxfer, speaking handshake `version` (CM).
    Rdmaxfer {
        /// Handshake version.
        version: u16,
    },
    /// Unknown: an OOB peer may be ibv_rc_pingpong or rdmaxfer.
    Unknown,
}

/// What was negotiated about the peer.
#[derive(Clone, Debug, Serialize)]
pub struct PeerInfo {
    /// Its address (the TCP peer for OOB).
    pub addr: Option<SocketAddr>,
    /// rdmaxfer or unknown.
    pub kind: PeerKind,
    /// Its QP number (OOB), if known.
    pub qpn: Option<u32>,
    /// Its first PSN (OOB).
    pub psn: Option<u32>,
    /// Its LID (0 on RoCE).
    pub lid: u16,
    /// Its GID.
    pub gid: Gid,
    /// Receives it keeps posted (credits it granted), if it said.
    pub recv_depth: Option<u32>,
    /// Its largest accepted message, if it said.
    pub msg_size: Option<u32>,
}

/// What this side of the connection uses.
#[derive(Clone, Debug, Serialize)]
pub struct LocalInfo {
    /// CM or OOB.
    pub transport: Transport,
    /// Device name.
    pub device: String,
    /// Port number.
    pub port: u8,
    /// Local address (CM: the RDMA address; OOB: the TCP socket's).
    pub addr: Option<SocketAddr>,
    /// Our QP number.
    pub qpn: u32,
    /// Our first PSN (OOB; rdma_cm picks its own).
    pub psn: Option<u32>,
    /// Our LID.
    pub lid: u16,
    /// Our GID.
    pub gid: Gid,
    /// Its index in the port's GID table, if chosen by us.
    pub gid_index: Option<u32>,
    /// Path MTU (OOB; CM: as the route says).
    pub path_mtu: Option<Mtu>,
    /// Largest message the port allows.
    pub port_max_msg: u32,
}

/// A received message, lent to [`Endpoint::recv_with`]'s closure.
#[derive(Debug)]
pub struct Message<'a> {
    /// The payload (empty for an RDMA WRITE_WITH_IMM).
    pub data: &'a [u8],
    /// The caller's immediate data: of an RDMA WRITE_WITH_IMM, or of a SEND_WITH_IMM from a
    /// peer without credits (OOB). `None` for rdmaxfer messages (their immediate is internal).
    pub imm: Option<u32>,
    /// For an RDMA WRITE_WITH_IMM: how many bytes the peer wrote.
    pub rdma_write_len: Option<u32>,
}

/// A received message waiting for the application: what [`Endpoint::recv_with`] needs of its
/// completion (kept small: it is queued and taken once per message).
struct Ready {
    buf: LocalBuf,
    /// Bytes received (or written, for an RDMA WRITE_WITH_IMM).
    len: u32,
    imm: Option<u32>,
    write_imm: bool,
}

impl Ready {
    #[inline(always)]
    fn of(mut c: Completion) -> Result<Ready> {
        let (len, imm) = (c.byte_len, c.imm);
        let write_imm = c.opcode == WcOpcode::RecvRdmaWithImm;
        let buf = c
            .take_local()
            .ok_or_else(|| Error::Protocol("receive completion without its buffer".into()))?;
        Ok(Ready {
            buf,
            len,
            imm,
            write_imm,
        })
    }
}

enum Flow {
    /// `credits`: messages we may still send; `owed`: receives re-posted but not yet announced.
    Credits {
        credits: u32,
        owed: u32,
        threshold: u32,
        credit_msg_pending: bool,
    },
    /// One outstanding message, one more per message taken from the peer.
    Implicit { credits: u32 },
}

/// A connected RC queue pair with its resources, receive ring and flow control.
pub struct Endpoint {
    // Field order is drop order: the QP goes first (ERR, drain, destroy), the CM id last.
    qp: QueuePair,
    ready: VecDeque<Ready>,
    user_done: VecDeque<Completion>,
    /// The caller's unsignaled work requests that one of our own completions retired: handed to
    /// the caller with its next completion.
    user_retired: Vec<Retired>,
    send_pool: Vec<LocalBuf>,
    /// Receive buffers taken by [`recv_deferred`](Endpoint::recv_deferred) and not re-posted
    /// yet, with their payload length: [`settle`](Endpoint::settle) re-posts them (and returns
    /// their credits).
    deferred: Vec<(LocalBuf, usize)>,
    cq: CompletionQueue,
    pd: ProtectionDomain,
    ctx: Context,
    flow: Flow,
    /// Our own SENDs (data and credit) not completed yet.
    sends_posted: u32,
    /// Send-queue slots for our own SENDs.
    own_sq: u32,
    msg_size: usize,
    /// Receives we keep posted.
    recv_depth: u32,
    peer_msg_size: usize,
    max_inline: u32,
    timeout: Duration,
    failed: Option<String>,
    disconnected: bool,
    local: LocalInfo,
    peer: PeerInfo,
    cm: Option<CmId>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("local", &self.local)
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

/// A deadline that reads the clock only when a wait actually starts: reading it can cost
/// microseconds (HPET in an emulated guest), which would show in every round trip.
struct Deadline {
    timeout: Duration,
    at: Option<Instant>,
}

impl Deadline {
    fn at(&mut self) -> Instant {
        let t = self.timeout;
        *self.at.get_or_insert_with(|| Instant::now() + t)
    }
}

/// Resources of an endpoint being set up.
struct Parts {
    ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
    send_pool: Vec<LocalBuf>,
    own_sq: u32,
    port: PortAttr,
}

/// Resolves `host:port` to one socket address (IPv4 preferred, as rdma_cm on RoCE needs).
pub fn resolve_host(host: &str, port: u16) -> Result<SocketAddr> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::io(format!("resolving {host:?}"), e))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| Error::InvalidArgument(format!("{host:?} resolves to no address")))
}

fn check_msg_size(opts: &EndpointOptions, ctx: &Context, port: &PortAttr) -> Result<()> {
    if opts.msg_size as u64 > u64::from(port.max_msg_sz) {
        return Err(Error::InvalidArgument(format!(
            "message size {} exceeds the max message size of {} port {} ({} bytes)",
            opts.msg_size,
            ctx.name(),
            port.port,
            port.max_msg_sz
        )));
    }
    Ok(())
}

fn caps(opts: &EndpointOptions, inline: u32) -> Result<(QpCaps, u32)> {
    let too_large = || Error::TooLarge {
        what: "queue pair depth",
        detail: format!(
            "send depth {} + {} extra send work requests, receive depth {} (+ 2 each) overflow u32",
            opts.send_depth, opts.extra_send_wr, opts.recv_depth
        ),
    };
    let own_sq = opts.send_depth.checked_add(2).ok_or_else(too_large)?;
    let caps = QpCaps {
        max_send_wr: own_sq
            .checked_add(opts.extra_send_wr)
            .ok_or_else(too_large)?,
        max_recv_wr: opts.recv_depth.checked_add(2).ok_or_else(too_large)?,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: inline,
    };
    Ok((caps, own_sq))
}

/// CQ entries for one QP's send and receive queues, plus spares.
fn cq_len(c: &QpCaps) -> Result<u32> {
    c.max_send_wr
        .checked_add(c.max_recv_wr)
        .and_then(|n| n.checked_add(8))
        .ok_or_else(|| Error::TooLarge {
            what: "completion queue",
            detail: format!(
                "{} send + {} receive work requests + 8 overflow u32",
                c.max_send_wr, c.max_recv_wr
            ),
        })
}

/// The device and GID to use, checked before anything touches the network.
struct Choice {
    ctx: Context,
    port: PortAttr,
    gid: GidEntry,
}

fn choose(opts: &EndpointOptions) -> Result<Choice> {
    opts.validate()?;
    let ctx = Context::open(opts.device.as_deref())?;
    let port = ctx.active_port(opts.ib_port)?;
    let gid = ctx.choose_gid(port.port, opts.gid_index)?;
    check_msg_size(opts, &ctx, &port)?;
    Ok(Choice { ctx, port, gid })
}

fn rd_atomic(ctx: &Context) -> (u8, u8) {
    match ctx.query_device() {
        Ok(a) => (
            a.max_qp_rd_atom.min(RD_ATOMIC) as u8,
            a.max_qp_init_rd_atom.min(RD_ATOMIC) as u8,
        ),
        Err(_) => (1, 1),
    }
}

impl Parts {
    /// PD, CQ, send buffers and a QP made by `make_qp` (retried without inline data if the
    /// device refuses it).
    fn new(
        ctx: Context,
        port: PortAttr,
        opts: &EndpointOptions,
        make_qp: impl Fn(&ProtectionDomain, &CompletionQueue, QpCaps) -> Result<QueuePair>,
    ) -> Result<Parts> {
        let pd = ProtectionDomain::new(&ctx)?;
        let (c, own_sq) = caps(opts, INLINE)?;
        let cq = CompletionQueue::new(&ctx, cq_len(&c)?, opts.wait)?;
        let qp = match make_qp(&pd, &cq, c) {
            Ok(qp) => qp,
            Err(_) => make_qp(&pd, &cq, caps(opts, 0)?.0)?,
        };
        let send_pool = LocalBuf::slots(&pd, opts.msg_size, opts.send_depth as usize)?;
        Ok(Parts {
            ctx,
            pd,
            cq,
            qp,
            send_pool,
            own_sq,
            port,
        })
    }

    /// Posts `n` receives of `msg_size` bytes.
    fn post_receives(&self, msg_size: usize, n: u32) -> Result<()> {
        for buf in LocalBuf::slots(&self.pd, msg_size, n as usize)? {
            self.qp.post_recv_buf(WR_RECV, buf)?;
        }
        Ok(())
    }

    /// A connected rdma_cm endpoint: the QP is in RTS (rdma_cm moved it) and `hello` is the
    /// peer's handshake.
    fn into_cm_endpoint(
        self,
        opts: &EndpointOptions,
        hello: &Hello,
        peer_addr: Option<SocketAddr>,
        id: CmId,
    ) -> Endpoint {
        self.qp.set_state(crate::verbs::QpState::Rts);
        let (sgid, dgid) = id.gids();
        let local = LocalInfo {
            transport: Transport::Cm,
            device: self.ctx.name().to_string(),
            port: self.port.port,
            addr: id.local_addr(),
            qpn: self.qp.qp_num(),
            psn: None,
            lid: self.port.lid,
            gid: sgid,
            gid_index: None,
            path_mtu: self.port.active_mtu,
            port_max_msg: self.port.max_msg_sz,
        };
        let peer = PeerInfo {
            addr: peer_addr,
            kind: PeerKind::Rdmaxfer {
                version: hello.version,
            },
            qpn: None,
            psn: None,
            lid: 0,
            gid: dgid,
            recv_depth: Some(hello.recv_depth),
            msg_size: Some(hello.msg_size),
        };
        self.into_endpoint(opts, credit_flow(hello.recv_depth), local, peer, Some(id))
    }

    fn into_endpoint(
        self,
        opts: &EndpointOptions,
        flow: Flow,
        local: LocalInfo,
        peer: PeerInfo,
        cm: Option<CmId>,
    ) -> Endpoint {
        let peer_msg_size = peer
            .msg_size
            .map_or(opts.msg_size, |m| (m as usize).min(opts.msg_size));
        let max_inline = self.qp.caps().max_inline_data;
        Endpoint {
            qp: self.qp,
            ready: VecDeque::new(),
            user_done: VecDeque::new(),
            user_retired: Vec::new(),
            send_pool: self.send_pool,
            deferred: Vec::new(),
            cq: self.cq,
            pd: self.pd,
            ctx: self.ctx,
            flow,
            sends_posted: 0,
            own_sq: self.own_sq,
            msg_size: opts.msg_size,
            recv_depth: opts.recv_depth,
            peer_msg_size,
            max_inline,
            timeout: opts.timeout,
            failed: None,
            disconnected: false,
            local,
            peer,
            cm,
        }
    }
}

fn credit_flow(peer_depth: u32) -> Flow {
    Flow::Credits {
        credits: peer_depth,
        owed: 0,
        threshold: peer_depth.div_ceil(2),
        credit_msg_pending: false,
    }
}

/// The IPv4 address of a GID, as the source address rdma_cm should use.
fn gid_source(gid: &GidEntry) -> Result<IpAddr> {
    gid.gid.ipv4().map(IpAddr::V4).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "GID index {} ({}) has no IPv4 address; rdma_cm needs one: choose the IPv4-mapped RoCE v2 GID or use --oob",
            gid.index, gid.gid
        ))
    })
}

fn check_cm_device(opts: &EndpointOptions, ctx: &Context, port: u8, addr: &str) -> Result<()> {
    if let Some(d) = &opts.device {
        if d != ctx.name() {
            return Err(Error::InvalidArgument(format!(
                "{addr} is reached through device {}, not {d}",
                ctx.name()
            )));
        }
    }
    match opts.ib_port {
        Some(p) if p != port => Err(Error::InvalidArgument(format!(
            "{addr} is reached through port {port} of {}, not port {p} (-i)",
            ctx.name()
        ))),
        _ => Ok(()),
    }
}

impl Endpoint {
    /// Connects to an rdmaxfer [`Listener`] with RDMA CM: resolve address and route, create
    /// the QP, connect with the handshake as private data, wait for ESTABLISHED.
    pub fn connect_cm(dst: SocketAddr, opts: &EndpointOptions) -> Result<Endpoint> {
        if opts.mtu.is_some() {
            return Err(Error::InvalidArgument(
                "the path MTU cannot be set with rdma_cm (it follows the route's netdev MTU); use --oob to set it".into(),
            ));
        }
        let t = opts.timeout;
        // Refuse bad options before any packet leaves: device, GID index, message size.
        let pre = choose(opts)?;
        let src = if opts.device.is_some() || opts.gid_index.is_some() {
            Some(SocketAddr::new(gid_source(&pre.gid)?, 0))
        } else {
            None
        };
        drop(pre);
        let id = CmId::new()?;
        id.resolve_addr(src, dst, t)?;
        id.expect_event(EventKind::AddrResolved, t, "resolving the server's address")?;
        id.resolve_route(t)?;
        id.expect_event(
            EventKind::RouteResolved,
            t,
            "resolving the route to the server",
        )?;
        let ctx = id.context()?;
        check_cm_device(opts, &ctx, id.port_num(), &dst.to_string())?;
        let port = ctx.query_port(id.port_num())?;
        check_msg_size(opts, &ctx, &port)?;
        let (resp, init) = rd_atomic(&ctx);
        let parts = Parts::new(ctx, port, opts, |pd, cq, c| id.create_qp(pd, cq, cq, c))?;
        parts.post_receives(opts.msg_size, opts.recv_depth + 2)?;
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
        id.connect(&param)?;
        let what = "the connection to be established";
        let ev = id.next_event(Some(t), what)?;
        match ev.kind() {
            EventKind::Established if ev.status() == 0 => {}
            EventKind::Rejected => {
                if let Some(r) = Reject::decode(ev.private_data()) {
                    return Err(Error::Connection(format!(
                        "connecting to {dst}: rejected by the server: {}",
                        r.text
                    )));
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

    /// Takes the next connection from `listener` (see [`Listener::accept`]): the server side of
    /// [`connect_cm`](Self::connect_cm).
    pub fn accept_cm(listener: &mut Listener, wait: Option<Duration>) -> Result<Endpoint> {
        listener.accept(wait)
    }

    /// Connects to `dst` with ibv_rc_pingpong's out-of-band exchange (the peer may be
    /// `ibv_rc_pingpong` itself, or an [`OobListener`]).
    pub fn connect_oob(dst: SocketAddr, opts: &EndpointOptions) -> Result<Endpoint> {
        let c = choose(opts)?;
        let t = opts.timeout;
        let side = OobSide::new(c, opts)?;
        let mut s = TcpStream::connect_timeout(&dst, t)
            .map_err(|e| Error::io(format!("connecting to {dst} (TCP)"), e))?;
        set_timeouts(&s, t)?;
        write_all(&mut s, &side.me.encode(), "sending our address")?;
        let peer = OobDest::decode(
            &read_msg(&mut s, wire::OOB_MSG_LEN, "the server's address").map_err(|e| match e {
                // A server that cannot use our address closes without sending its own.
                Error::Protocol(m) if m.ends_with(CLOSED_EMPTY) => Error::Connection(format!(
                    "{m}: the server refused our address (its output says why; e.g. a GID \
                     index (-g) of another kind than the server's)"
                )),
                e => e,
            })?,
        )?;
        side.connect(&peer)?;
        write_all(&mut s, wire::OOB_DONE, "sending \"done\"")?;
        let local_addr = s.local_addr().ok();
        Ok(side.finish(opts, peer, Some(dst), local_addr))
    }

    /// Waits (at most `wait`, `None`: forever) for one OOB client on `addr` and connects it.
    /// For several clients use an [`OobListener`].
    pub fn accept_oob(
        addr: SocketAddr,
        opts: &EndpointOptions,
        wait: Option<Duration>,
    ) -> Result<Endpoint> {
        OobListener::bind(addr, opts)?.accept(wait)
    }

    /// The queue pair (to post the caller's own work requests, see [`post`](Self::post)).
    pub fn qp(&self) -> &QueuePair {
        &self.qp
    }

    /// The completion queue (send and receive). Poll it through [`poll_user`](Self::poll_user):
    /// the endpoint's own completions must reach the endpoint.
    pub fn cq(&self) -> &CompletionQueue {
        &self.cq
    }

    /// The protection domain (to register buffers and exposed regions for this connection).
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// The device context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The largest message [`send`](Self::send) takes: ours and the peer's limit.
    pub fn max_msg_size(&self) -> usize {
        self.peer_msg_size
    }

    /// The size of our receive buffers.
    pub fn msg_size(&self) -> usize {
        self.msg_size
    }

    /// What this side uses.
    pub fn local(&self) -> &LocalInfo {
        &self.local
    }

    /// What was negotiated about the peer.
    pub fn peer(&self) -> &PeerInfo {
        &self.peer
    }

    /// The deadline of each step.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Changes the deadline of each step.
    pub fn set_timeout(&mut self, t: Duration) {
        if !t.is_zero() {
            self.timeout = t;
        }
    }

    /// Switches an out-of-band endpoint from ibv_rc_pingpong's one-message-at-a-time flow to
    /// credit flow control (a no-op over CM, which has credits from the start). Both sides must
    /// call it, the connecting side with `initiator`; so it is for rdmaxfer ↔ rdmaxfer only.
    /// Each side sends one [`wire::Hello`] with its receive depth and message size.
    pub fn enable_credits(&mut self, initiator: bool) -> Result<()> {
        if !matches!(self.flow, Flow::Implicit { .. }) {
            return Ok(());
        }
        let mine = wire::Hello::new(self.recv_depth, self.msg_size as u32).encode();
        let theirs = if initiator {
            self.send(&mine)?;
            self.recv()?
        } else {
            let t = self.recv()?;
            self.send(&mine)?;
            t
        };
        let h = wire::Hello::decode(&theirs)?;
        // Our hello used one of the peer's receives and we have not been told it is re-posted;
        // we re-posted the one its hello used and owe it that credit.
        let mut flow = credit_flow(h.recv_depth);
        if let Flow::Credits { credits, owed, .. } = &mut flow {
            *credits = h.recv_depth - 1;
            *owed = 1;
        }
        self.flow = flow;
        self.peer_msg_size = (h.msg_size as usize).min(self.msg_size);
        self.peer.recv_depth = Some(h.recv_depth);
        self.peer.msg_size = Some(h.msg_size);
        Ok(())
    }

    /// Send-queue slots left for the caller's own work requests ([`post`](Self::post)).
    pub fn user_send_depth(&self) -> u32 {
        self.qp.caps().max_send_wr.saturating_sub(self.own_sq)
    }

    /// Receives kept posted for the peer's messages: the credits granted to it.
    pub fn recv_depth(&self) -> u32 {
        self.recv_depth
    }

    /// Messages we may send now without waiting for the peer.
    pub fn credits(&self) -> u32 {
        match self.flow {
            Flow::Credits { credits, .. } | Flow::Implicit { credits } => credits,
        }
    }

    #[inline(always)]
    fn check_usable(&self) -> Result<()> {
        match &self.failed {
            Some(e) => Err(Error::Connection(format!(
                "the endpoint failed earlier: {e}"
            ))),
            None => Ok(()),
        }
    }

    fn fail(&mut self, e: Error) -> Error {
        if self.failed.is_none() {
            self.failed = Some(e.to_string());
        }
        e
    }

    #[inline(always)]
    fn deadline(&self) -> Deadline {
        Deadline {
            timeout: self.timeout,
            at: None,
        }
    }

    /// Handles one completion: returns send buffers, applies credits, queues messages.
    #[inline(always)]
    fn handle(&mut self, mut c: Completion) -> Result<()> {
        if c.wr_id < RESERVED_WR_ID {
            if !self.user_retired.is_empty() {
                let mut r = std::mem::take(&mut self.user_retired);
                r.append(&mut c.retired);
                c.retired = r;
            }
            self.user_done.push_back(c);
            return Ok(());
        }
        if !c.retired.is_empty() {
            self.user_retired.append(&mut c.retired);
        }
        if !c.is_success() {
            let e = c.to_error();
            if c.status == crate::verbs::cq::WR_FLUSH_ERR && !self.user_done.is_empty() {
                // A flush is the consequence; the caller's failed work request (already queued)
                // is the cause: let it be seen first, and fail every later call.
                self.failed.get_or_insert_with(|| e.to_string());
                return Ok(());
            }
            return Err(e);
        }
        match c.wr_id {
            WR_DATA | WR_CREDIT => {
                // Our own SENDs are all signaled: one completion each.
                self.sends_posted = self.sends_posted.saturating_sub(1);
                while let Some(b) = c.take_local() {
                    self.send_pool.push(b);
                }
                if let Flow::Credits {
                    credit_msg_pending: true,
                    ..
                } = self.flow
                {
                    self.send_credit_msg()?;
                }
            }
            WR_RECV => match (&mut self.flow, c.opcode, c.imm) {
                (Flow::Credits { credits, .. }, WcOpcode::Recv, Some(imm)) => {
                    let (kind, n) = wire::decode_imm(imm)?;
                    *credits = credits.saturating_add(n);
                    match kind {
                        ImmKind::Data => self.ready.push_back(Ready::of(c)?),
                        ImmKind::Credit => {
                            // Credit messages are not counted in the window: re-post at once.
                            for buf in c.into_local_bufs() {
                                self.qp.post_recv_buf(WR_RECV, buf)?;
                            }
                        }
                    }
                }
                _ => self.ready.push_back(Ready::of(c)?),
            },
            other => {
                return Err(Error::Protocol(format!(
                    "completion with unknown internal wr_id {other:#x}"
                )))
            }
        }
        Ok(())
    }

    /// Looks for CM events without blocking; a disconnect or device removal is an error.
    fn check_cm(&mut self) -> Result<()> {
        let Some(id) = &self.cm else { return Ok(()) };
        while let Some(ev) = id.try_next_event()? {
            match ev.kind() {
                EventKind::Disconnected => self.disconnected = true,
                EventKind::TimewaitExit | EventKind::AddrChange | EventKind::Established => {}
                _ => return Err(ev.to_error("connection")),
            }
        }
        Ok(())
    }

    /// Waits for at least one completion and handles it, or fails at `deadline`.
    #[inline(always)]
    fn pump(&mut self, deadline: &mut Deadline, what: &'static str) -> Result<()> {
        // A timeout leaves the endpoint usable (the caller may wait again); errors do not.
        self.pump_inner(deadline, what)
            .map_err(|e| if e.is_timeout() { e } else { self.fail(e) })
    }

    #[inline(always)]
    fn pump_inner(&mut self, deadline: &mut Deadline, what: &'static str) -> Result<()> {
        if !self.deferred.is_empty() {
            // Re-posting returns credits: progress that the caller's condition may be waiting
            // for (an OOB peer grants no credit of its own), so let it look again first.
            return self.settle(true);
        }
        if !self.disconnected && deadline.at.is_none() {
            // No clock read for what arrives soon (see Deadline): poll first, busy-polling for
            // a while in poll mode.
            let spins = match self.cq.mode() {
                WaitMode::Poll => SPIN_POLLS,
                WaitMode::Event => 1,
            };
            for i in 1..=spins {
                if let Some(c) = self.cq.poll_one()? {
                    return self.handle(c);
                }
                // No spin_loop() hint: PAUSE makes an emulated (TCG) vCPU leave its translated
                // code (0.14 µs each, measured), which would slow the polling.
                if i % 256 == 0 {
                    // Let kernel threads (rxe's deferred work) run on a busy guest.
                    std::thread::yield_now();
                }
            }
        }
        let after = deadline.timeout;
        let deadline = deadline.at();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if self.disconnected {
                // Take what arrived before the disconnect; after that there is nothing to wait for.
                let cs = self.cq.poll(32)?;
                if cs.is_empty() {
                    return Err(Error::Connection(format!(
                        "the peer disconnected while waiting for {what}"
                    )));
                }
                for c in cs {
                    self.handle(c)?;
                }
                return Ok(());
            }
            if left.is_zero() {
                return Err(Error::Timeout { what, after });
            }
            let slice = if self.cm.is_some() {
                left.min(CM_CHECK)
            } else {
                left
            };
            match self.cq.wait(32, slice) {
                Ok(cs) => {
                    for c in cs {
                        self.handle(c)?;
                    }
                    return Ok(());
                }
                Err(e) if e.is_timeout() => self.check_cm()?,
                Err(e) => return Err(e),
            }
        }
    }

    fn send_credit_msg(&mut self) -> Result<()> {
        let Flow::Credits {
            owed,
            credit_msg_pending,
            ..
        } = &mut self.flow
        else {
            return Ok(());
        };
        if self.sends_posted >= self.own_sq {
            *credit_msg_pending = true;
            return Ok(());
        }
        let n = std::mem::take(owed);
        *credit_msg_pending = false;
        let wr = SendRequest::new(
            WR_CREDIT,
            SendOp::SendWithImm(wire::encode_imm(ImmKind::Credit, n)),
            [],
        );
        self.qp.post_send(wr)?;
        self.sends_posted += 1;
        Ok(())
    }

    /// Waits until a message may be sent (a credit and a send buffer).
    #[inline(always)]
    fn reserve_send(&mut self, deadline: &mut Deadline) -> Result<LocalBuf> {
        while self.credits() == 0 {
            self.pump(
                deadline,
                "send credit from the peer (it is not taking messages)",
            )?;
        }
        loop {
            if self.sends_posted < self.own_sq {
                if let Some(b) = self.send_pool.pop() {
                    return Ok(b);
                }
            }
            self.pump(deadline, "a send completion")?;
        }
    }

    /// Sends a message of `len` bytes that `fill` writes into a registered buffer, waiting (at
    /// most the timeout) for a credit and a free buffer.
    #[inline(always)]
    pub fn send_with(&mut self, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<()> {
        self.send_then(len, fill, |_| ())
    }

    /// [`send_with`](Self::send_with), then `after` on the payload of the last message taken
    /// with [`recv_deferred`](Self::recv_deferred) (empty if none), before its buffer is
    /// re-posted: work on the previous message that need not delay this one. When the send has
    /// to wait first (which re-posts deferred receives), `after` runs before the wait.
    #[inline(always)]
    pub(crate) fn send_then<R>(
        &mut self,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
        after: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        self.check_usable()?;
        if len > self.peer_msg_size {
            return Err(Error::InvalidArgument(format!(
                "message of {len} bytes exceeds the limit of {}",
                self.peer_msg_size
            )));
        }
        let mut after = Some(after);
        let mut out = None;
        let can_send_now =
            self.credits() > 0 && self.sends_posted < self.own_sq && !self.send_pool.is_empty();
        if !can_send_now {
            out = after.take().map(|a| a(self.last_deferred()));
        }
        let mut deadline = self.deadline();
        let mut buf = self.reserve_send(&mut deadline)?;
        fill(&mut buf[..len]);
        let op = match &mut self.flow {
            Flow::Credits { owed, .. } => {
                SendOp::SendWithImm(wire::encode_imm(ImmKind::Data, std::mem::take(owed)))
            }
            Flow::Implicit { .. } => SendOp::Send,
        };
        let inline = len as u64 <= u64::from(self.max_inline) && len > 0;
        if let Err(e) = self
            .qp
            .post_send_buf(WR_DATA, op, buf, 0, len, true, inline)
        {
            self.send_pool
                .extend(e.bufs.into_iter().filter_map(crate::verbs::Buf::into_local));
            return Err(self.fail(e.error));
        }
        self.sends_posted += 1;
        match &mut self.flow {
            Flow::Credits { credits, .. } | Flow::Implicit { credits } => *credits -= 1,
        }
        if let Some(a) = after.take() {
            out = Some(a(self.last_deferred()));
        }
        // After the post: a reply that waited for this message is not delayed by re-posts.
        self.settle(true).map_err(|e| self.fail(e))?;
        Ok(out.expect("`after` ran before or after the post"))
    }

    /// The payload of the last message [`recv_deferred`](Self::recv_deferred) took and that is
    /// not re-posted yet (empty if none).
    fn last_deferred(&self) -> &[u8] {
        self.deferred.last().map_or(&[], |(b, n)| &b[..*n])
    }

    /// Sends `data` as one message (copied into a registered buffer).
    pub fn send(&mut self, data: &[u8]) -> Result<()> {
        self.send_with(data.len(), |b| b.copy_from_slice(data))
    }

    /// Waits (at most the timeout) for the next message, lends it to `f`, then re-posts its
    /// buffer and returns the credit.
    pub fn recv_with<R>(&mut self, f: impl FnOnce(Message<'_>) -> R) -> Result<R> {
        self.recv_inner(f, false)
    }

    /// Like [`recv_with`](Self::recv_with), but the buffer is re-posted (and its credit
    /// returned) only by the next call that sends or waits: a ping-pong reply is then posted
    /// before the re-post, which stays off the round trip.
    #[inline(always)]
    pub(crate) fn recv_deferred<R>(&mut self, f: impl FnOnce(Message<'_>) -> R) -> Result<R> {
        self.recv_inner(f, true)
    }

    /// Re-posts the buffers [`recv_deferred`](Self::recv_deferred) kept, returning their credits
    /// (with `credit_msg`, a credit message once enough are owed; see [`repost`](Self::repost)).
    #[inline(always)]
    fn settle(&mut self, credit_msg: bool) -> Result<()> {
        while let Some((buf, _)) = self.deferred.pop() {
            self.repost(buf, credit_msg)?;
        }
        Ok(())
    }

    /// Re-posts one receive buffer and accounts for its credit; with `credit_msg`, a credit
    /// message goes out once enough are owed (else they wait for the next message or re-post).
    #[inline(always)]
    fn repost(&mut self, buf: LocalBuf, credit_msg: bool) -> Result<()> {
        self.qp.post_recv_buf(WR_RECV, buf)?;
        match &mut self.flow {
            Flow::Credits {
                owed, threshold, ..
            } => {
                *owed += 1;
                if credit_msg && *owed >= *threshold {
                    self.send_credit_msg()?;
                }
            }
            // Its credit came when the message was taken (see recv_inner).
            Flow::Implicit { .. } => {}
        }
        Ok(())
    }

    #[inline(always)]
    fn recv_inner<R>(&mut self, f: impl FnOnce(Message<'_>) -> R, defer: bool) -> Result<R> {
        self.check_usable()?;
        let mut deadline = self.deadline();
        while self.ready.is_empty() {
            self.pump(&mut deadline, "a message from the peer")?;
        }
        let Ready {
            buf,
            len,
            imm,
            write_imm,
        } = self.ready.pop_front().expect("not empty");
        if let Flow::Implicit { credits } = &mut self.flow {
            // Request/response: a reply taken allows the next request.
            *credits += 1;
        }
        let imm = match self.flow {
            Flow::Credits { .. } if !write_imm => None,
            _ => imm,
        };
        let len = len as usize;
        let out = if write_imm {
            f(Message {
                data: &[],
                imm,
                rdma_write_len: Some(len as u32),
            })
        } else {
            let data = buf.get(..len).ok_or_else(|| {
                Error::Protocol(format!(
                    "received {len} bytes into a {}-byte buffer",
                    buf.len()
                ))
            })?;
            f(Message {
                data,
                imm,
                rdma_write_len: None,
            })
        };
        if defer {
            self.deferred.push((buf, if write_imm { 0 } else { len }));
        } else {
            self.repost(buf, true).map_err(|e| self.fail(e))?;
        }
        Ok(out)
    }

    /// Waits for the next message and returns a copy of its payload.
    pub fn recv(&mut self) -> Result<Vec<u8>> {
        self.recv_with(|m| m.data.to_vec())
    }

    /// Waits until every message sent so far has completed (was acknowledged by the peer).
    pub fn flush(&mut self) -> Result<()> {
        self.check_usable()?;
        // The deferred receives go back, but no credit message for them: a flush ends a burst of
        // ours, and a peer that has finished too would not be there to take it.
        self.settle(false).map_err(|e| self.fail(e))?;
        self.wait_sent()
    }

    /// Waits until every message sent so far has completed; does nothing else when they have
    /// (unlike [`flush`](Self::flush), it leaves deferred receives for later).
    pub(crate) fn wait_sent(&mut self) -> Result<()> {
        self.check_usable()?;
        if self.sends_posted > 0 {
            // The wait would re-post deferred receives: without a credit message, as in flush.
            self.settle(false).map_err(|e| self.fail(e))?;
        }
        let mut deadline = self.deadline();
        while self.sends_posted > 0 {
            self.pump(&mut deadline, "the last sends to complete")?;
        }
        Ok(())
    }

    /// Posts the caller's own work request (RDMA READ / WRITE / WRITE_WITH_IMM) on the QP. Its
    /// wr_id must be below [`RESERVED_WR_ID`]. Its completion, from [`poll_user`](Self::poll_user),
    /// hands the buffers back; an unsignaled one's come back in the `retired` list of a later
    /// completion (so the last of a batch must be signaled). WRITE_WITH_IMM consumes a
    /// receive at the peer, so it waits for (and spends) a credit. SENDs go through
    /// [`send`](Self::send).
    pub fn post(&mut self, wr: SendRequest) -> Result<(), crate::verbs::PostError> {
        let refuse = |wr: SendRequest, msg: String| {
            let e = crate::verbs::PostError {
                error: Error::InvalidArgument(msg),
                bufs: crate::verbs::Bufs::new(),
            };
            drop(wr);
            Err(e)
        };
        if wr.wr_id() >= RESERVED_WR_ID {
            return refuse(wr, format!("wr_id must be below {RESERVED_WR_ID:#x}"));
        }
        if matches!(wr.op(), SendOp::Send | SendOp::SendWithImm(_)) {
            return refuse(
                wr,
                "use Endpoint::send for SENDs (they carry flow-control credits)".into(),
            );
        }
        if let Err(e) = self.check_usable() {
            return Err(crate::verbs::PostError {
                error: e,
                bufs: crate::verbs::Bufs::new(),
            });
        }
        let needs_credit = matches!(wr.op(), SendOp::WriteWithImm(..));
        if needs_credit {
            let mut deadline = self.deadline();
            while self.credits() == 0 {
                if let Err(e) = self.pump(&mut deadline, "send credit from the peer") {
                    return Err(crate::verbs::PostError {
                        error: e,
                        bufs: crate::verbs::Bufs::new(),
                    });
                }
            }
        }
        self.qp.post_send(wr)?;
        if needs_credit {
            match &mut self.flow {
                Flow::Credits { credits, .. } | Flow::Implicit { credits } => *credits -= 1,
            }
        }
        Ok(())
    }

    /// Waits (at most `timeout`) for completions of work requests posted with
    /// [`post`](Self::post), handling the endpoint's own on the way. Returns at least one.
    pub fn poll_user(&mut self, max: usize, timeout: Duration) -> Result<Vec<Completion>> {
        self.check_usable()?;
        let mut deadline = Deadline { timeout, at: None };
        while self.user_done.is_empty() {
            self.pump(&mut deadline, "a work completion")?;
        }
        let n = max.max(1).min(self.user_done.len());
        Ok(self.user_done.drain(..n).collect())
    }

    /// Ends the connection gracefully: waits for sent messages to complete, then (CM)
    /// disconnects. Dropping the endpoint tears down without waiting.
    pub fn close(mut self) -> Result<()> {
        let r = if self.failed.is_none() {
            self.flush()
        } else {
            Ok(())
        };
        if let Some(id) = self.cm.take() {
            if let Err(e) = id.disconnect() {
                tracing::debug!("rdma_disconnect: {e}");
            }
            self.cm = Some(id);
        }
        r
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        if let Some(id) = &self.cm {
            // Moves the QP to ERR and tells the peer; the QP, CQ, PD and id are then torn down in
            // field order. A second disconnect after close() fails harmlessly.
            let _ = id.disconnect();
        }
    }
}

/// One side of an out-of-band set-up: the QP in INIT with receives posted, and our address.
struct OobSide {
    parts: Parts,
    gid: GidEntry,
    me: OobDest,
    mtu: Mtu,
    rd: (u8, u8),
}

impl OobSide {
    fn new(c: Choice, opts: &EndpointOptions) -> Result<OobSide> {
        let mtu = opts.mtu.unwrap_or(Mtu::M1024);
        if let Some(active) = c.port.active_mtu {
            if mtu > active {
                return Err(Error::InvalidArgument(format!(
                    "path MTU {} exceeds the active MTU {} of {} port {}",
                    mtu.bytes(),
                    active.bytes(),
                    c.ctx.name(),
                    c.port.port
                )));
            }
        }
        let rd = rd_atomic(&c.ctx);
        let parts = Parts::new(c.ctx, c.port, opts, |pd, cq, caps| {
            QueuePair::new_rc(pd, cq, cq, caps)
        })?;
        parts.qp.to_init(&InitAttr {
            port: parts.port.port,
            remote_read: true,
            remote_write: true,
        })?;
        // Like ibv_rc_pingpong: receives are posted before the peer can send.
        parts.post_receives(opts.msg_size, opts.recv_depth)?;
        let psn = rand::random::<u32>() & 0xff_ffff;
        let me = OobDest {
            lid: parts.port.lid,
            qpn: parts.qp.qp_num(),
            psn,
            gid: c.gid.gid,
        };
        Ok(OobSide {
            parts,
            gid: c.gid,
            me,
            mtu,
            rd,
        })
    }

    /// INIT → RTR → RTS towards `peer`, with ibv_rc_pingpong's attributes.
    fn connect(&self, peer: &OobDest) -> Result<()> {
        if peer.gid.is_zero() && self.parts.port.link_layer == "Ethernet" {
            return Err(Error::Protocol(
                "the peer sent a zero GID: on RoCE both sides need a GID (run ibv_rc_pingpong with -g, e.g. -g 1)".into(),
            ));
        }
        check_gid_kinds(&self.gid, &peer.gid)?;
        let sgid = u8::try_from(self.gid.index)
            .map_err(|_| Error::InvalidArgument(format!("GID index {} > 255", self.gid.index)))?;
        // is_global only when the peer's GID has a non-zero interface id, as ibv_rc_pingpong.
        let dgid = if peer.gid.interface_id() != 0 {
            peer.gid
        } else {
            Gid::default()
        };
        let mut rtr = RtrAttr::new(
            peer.qpn,
            peer.psn,
            self.mtu,
            dgid,
            sgid,
            self.parts.port.port,
        );
        rtr.dlid = peer.lid;
        rtr.hop_limit = 1;
        rtr.max_dest_rd_atomic = self.rd.0;
        self.parts.qp.to_rtr(&rtr)?;
        let mut rts = RtsAttr::new(self.me.psn);
        rts.timeout = ACK_TIMEOUT;
        rts.retry_cnt = RETRY_COUNT;
        rts.rnr_retry = RNR_RETRY;
        rts.max_rd_atomic = self.rd.1;
        self.parts.qp.to_rts(&rts)
    }

    fn finish(
        self,
        opts: &EndpointOptions,
        peer: OobDest,
        peer_addr: Option<SocketAddr>,
        local_addr: Option<SocketAddr>,
    ) -> Endpoint {
        let local = LocalInfo {
            transport: Transport::Oob,
            device: self.parts.ctx.name().to_string(),
            port: self.parts.port.port,
            addr: local_addr,
            qpn: self.me.qpn,
            psn: Some(self.me.psn),
            lid: self.me.lid,
            gid: self.me.gid,
            gid_index: Some(self.gid.index),
            path_mtu: Some(self.mtu),
            port_max_msg: self.parts.port.max_msg_sz,
        };
        let peer = PeerInfo {
            addr: peer_addr,
            kind: PeerKind::Unknown,
            qpn: Some(peer.qpn),
            psn: Some(peer.psn),
            lid: peer.lid,
            gid: peer.gid,
            recv_depth: None,
            msg_size: None,
        };
        self.parts
            .into_endpoint(opts, Flow::Implicit { credits: 1 }, local, peer, None)
    }
}

/// Both sides of an OOB connection must use the same kind of GID: an IPv4-mapped (RoCE v2) one
/// cannot reach an IPv6 one (e.g. the `fe80::` link-local GID at index 0), and the RTR
/// transition or the first packet would fail without saying why.
fn check_gid_kinds(ours: &GidEntry, peer: &Gid) -> Result<()> {
    if ours.gid.is_ipv4_mapped() == peer.is_ipv4_mapped() {
        return Ok(());
    }
    let kind = |g: &Gid| {
        if g.is_ipv4_mapped() {
            "an IPv4-mapped (RoCE v2) GID"
        } else {
            "an IPv6 GID"
        }
    };
    Err(Error::InvalidArgument(format!(
        "GID mismatch: our GID index {} is {} ({}), the peer's GID is {} ({}): use GID indexes of \
         the same kind on both hosts (-g; the default is the IPv4-mapped RoCE v2 GID)",
        ours.index,
        kind(&ours.gid),
        std::net::Ipv6Addr::from(ours.gid.0),
        kind(peer),
        std::net::Ipv6Addr::from(peer.0)
    )))
}

fn set_timeouts(s: &TcpStream, t: Duration) -> Result<()> {
    s.set_read_timeout(Some(t))
        .map_err(|e| Error::io("setting the TCP read timeout", e))?;
    s.set_write_timeout(Some(t))
        .map_err(|e| Error::io("setting the TCP write timeout", e))?;
    s.set_nodelay(true)
        .map_err(|e| Error::io("setting TCP_NODELAY", e))
}

fn write_all(s: &mut TcpStream, b: &[u8], what: &str) -> Result<()> {
    s.write_all(b)
        .map_err(|e| Error::io(format!("{what} (TCP)"), e))
}

/// How [`read_msg`] reports a peer that closed before sending anything.
const CLOSED_EMPTY: &str = "the peer closed the connection without sending anything";

/// Reads exactly `n` bytes; a peer that closes early sent a short message (a protocol error).
fn read_msg(s: &mut TcpStream, n: usize, what: &str) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; n];
    let mut got = 0;
    while got < n {
        match s.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Err(Error::Protocol(format!("{what}: {CLOSED_EMPTY}"))),
            Ok(0) => {
                return Err(Error::Protocol(format!(
                    "{what}: the peer closed the connection after {got} of {n} bytes"
                )));
            }
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(Error::Protocol(format!(
                    "{what}: got {got} of {n} bytes before the deadline"
                )));
            }
            Err(e) => return Err(Error::io(format!("reading {what} (TCP)"), e)),
        }
    }
    Ok(buf)
}

/// Accepts RDMA CM connections from rdmaxfer peers, one after another.
pub struct Listener {
    id: CmId,
    opts: EndpointOptions,
    addr: SocketAddr,
    broken: Option<String>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Listener({})", self.addr)
    }
}

impl Listener {
    /// Binds and listens (`rdma_bind_addr` + `rdma_listen`). With an unspecified address and a
    /// device or GID index given, listens on that GID's IPv4 address. Options are checked now.
    pub fn bind(addr: SocketAddr, opts: &EndpointOptions) -> Result<Listener> {
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
        })
    }

    /// The address listened on (with the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// True once the listener itself failed (e.g. its device was removed); accept fails from
    /// then on. Failures of single clients do not break it.
    pub fn is_broken(&self) -> bool {
        self.broken.is_some()
    }
}

/// Accepts ibv_rc_pingpong-style out-of-band connections, one after another.
pub struct OobListener {
    tcp: TcpListener,
    opts: EndpointOptions,
}

impl std::fmt::Debug for OobListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OobListener({:?})", self.tcp.local_addr().ok())
    }
}

impl OobListener {
    /// Checks the options (device, GID index, message size, MTU) and listens on TCP `addr`.
    pub fn bind(addr: SocketAddr, opts: &EndpointOptions) -> Result<OobListener> {
        let c = choose(opts)?;
        if let (Some(m), Some(active)) = (opts.mtu, c.port.active_mtu) {
            if m > active {
                return Err(Error::InvalidArgument(format!(
                    "path MTU {} exceeds the active MTU {} of {} port {}",
                    m.bytes(),
                    active.bytes(),
                    c.ctx.name(),
                    c.port.port
                )));
            }
        }
        let tcp = TcpListener::bind(addr)
            .map_err(|e| Error::io(format!("listening on {addr} (TCP)"), e))?;
        tcp.set_nonblocking(true)
            .map_err(|e| Error::io("setting the TCP listener non-blocking", e))?;
        Ok(OobListener {
            tcp,
            opts: opts.clone(),
        })
    }

    /// The TCP address listened on.
    pub fn local_addr(&self) -> SocketAddr {
        self.tcp
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_validated() {
        assert!(EndpointOptions::default().validate().is_ok());
        let bad = [
            EndpointOptions {
                msg_size: 0,
                ..Default::default()
            },
            EndpointOptions {
                recv_depth: 0,
                ..Default::default()
            },
            EndpointOptions {
                send_depth: 0,
                ..Default::default()
            },
            EndpointOptions {
                timeout: Duration::ZERO,
                ..Default::default()
            },
        ];
        for o in bad {
            assert!(
                matches!(o.validate(), Err(Error::InvalidArgument(_))),
                "{o:?}"
            );
        }
    }

    #[test]
    fn caps_leave_room_for_credit_messages_and_spares() {
        let o = EndpointOptions {
            send_depth: 4,
            recv_depth: 8,
            extra_send_wr: 10,
            ..Default::default()
        };
        let (c, own) = caps(&o, 64).unwrap();
        assert_eq!(own, 6);
        assert_eq!(c.max_send_wr, 16);
        assert_eq!(c.max_recv_wr, 10);
        assert_eq!(c.max_inline_data, 64);
        assert_eq!(cq_len(&c).unwrap(), 34);
        let huge = EndpointOptions {
            extra_send_wr: u32::MAX - 5,
            ..o
        };
        assert!(matches!(caps(&huge, 0), Err(Error::TooLarge { .. })));
        let c = QpCaps {
            max_send_wr: u32::MAX - 8,
            ..c
        };
        assert!(matches!(cq_len(&c), Err(Error::TooLarge { .. })));
    }

    #[test]
    fn credit_threshold_is_half_rounded_up() {
        for (depth, want) in [(1, 1), (2, 1), (3, 2), (16, 8)] {
            match credit_flow(depth) {
                Flow::Credits {
                    credits,
                    threshold,
                    owed,
                    ..
                } => {
                    assert_eq!((credits, threshold, owed), (depth, want, 0));
                    // At most two unread credit messages: each carries >= threshold credits.
                    assert!(depth / threshold <= 2);
                }
                Flow::Implicit { .. } => panic!("credit flow expected"),
            }
        }
    }

    #[test]
    fn gid_source_needs_ipv4() {
        let v4 = GidEntry {
            index: 1,
            gid: "::ffff:198.18.0.1".parse().unwrap(),
            gid_type: crate::verbs::GidType::RoceV2,
            netdev: None,
        };
        assert_eq!(
            gid_source(&v4).unwrap(),
            "198.18.0.1".parse::<IpAddr>().unwrap()
        );
        let ll = GidEntry {
            index: 0,
            gid: "fe80::1".parse().unwrap(),
            ..v4
        };
        assert!(gid_source(&ll).unwrap_err().to_string().contains("IPv4"));
    }

    #[test]
    fn oob_gid_kinds_must_match() {
        let v4 = GidEntry {
            index: 1,
            gid: "::ffff:198.18.0.1".parse().unwrap(),
            gid_type: crate::verbs::GidType::RoceV2,
            netdev: None,
        };
        let ll = GidEntry {
            index: 0,
            gid: "fe80::5054:ff:fe12:3402".parse().unwrap(),
            ..v4.clone()
        };
        let peer_v4: Gid = "::ffff:198.18.0.2".parse().unwrap();
        assert!(check_gid_kinds(&v4, &peer_v4).is_ok());
        assert!(check_gid_kinds(&ll, &ll.gid).is_ok());
        let e = check_gid_kinds(&v4, &ll.gid).unwrap_err().to_string();
        assert!(e.contains("GID mismatch") && e.contains("fe80::"), "{e}");
        let e = check_gid_kinds(&ll, &peer_v4).unwrap_err().to_string();
        assert!(e.contains("GID index 0") && e.contains("-g"), "{e}");
    }

    #[test]
    fn resolve_host_prefers_ipv4() {
        assert_eq!(
            resolve_host("127.0.0.1", 5).unwrap(),
            "127.0.0.1:5".parse().unwrap()
        );
        assert!(resolve_host("[::1]", 5).is_err() || resolve_host("::1", 5).is_ok());
    }

    #[test]
    fn short_tcp_message_is_a_protocol_error() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let mut c = TcpStream::connect(a).unwrap();
            c.write_all(b"0000:0001").unwrap();
        });
        let (mut s, _) = l.accept().unwrap();
        t.join().unwrap();
        set_timeouts(&s, Duration::from_secs(5)).unwrap();
        let e = read_msg(&mut s, 52, "the client's address").unwrap_err();
        assert!(matches!(e, Error::Protocol(_)), "{e}");
        assert!(e.to_string().contains("9 of 52"), "{e}");
    }

    #[test]
    fn silent_tcp_peer_times_out_as_protocol_error() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        let _c = TcpStream::connect(a).unwrap();
        let (mut s, _) = l.accept().unwrap();
        set_timeouts(&s, Duration::from_millis(50)).unwrap();
        let t = Instant::now();
        let e = read_msg(&mut s, 52, "x").unwrap_err();
        assert!(e.to_string().contains("0 of 52"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
