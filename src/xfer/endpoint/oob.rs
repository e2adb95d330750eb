//! Connection set-up over ibv_rc_pingpong's out-of-band TCP exchange: the client
//! ([`Endpoint::connect_oob`]), the QP's side of it and the [`OobListener`].

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd as _, BorrowedFd};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::verbs::{Gid, GidEntry, InitAttr, Mtu, QueuePair, RtrAttr, RtsAttr};
use crate::xfer::wire::{self, OobDest};

use super::conn::{Endpoint, Flow};
use super::options::{
    EndpointOptions, LocalInfo, PeerInfo, PeerKind, Transport, ACK_TIMEOUT, RETRY_COUNT, RNR_RETRY,
};
use super::setup::{choose, rd_atomic, resolve, Choice, Parts};
use super::wake::{ShutdownHandle, Wake};

impl Endpoint {
    /// Connects to `dst` with ibv_rc_pingpong's out-of-band exchange (the peer may be
    /// `ibv_rc_pingpong` itself, or an [`OobListener`]). `dst` is a socket address or a host
    /// name with its port.
    pub fn connect_oob(dst: impl ToSocketAddrs, opts: &EndpointOptions) -> Result<Endpoint> {
        let dst = resolve(dst, "the address to connect to")?;
        let c = choose(opts)?;
        let t = opts.timeout;
        let side = OobSide::new(c, opts)?;
        let mut s = TcpStream::connect_timeout(&dst, t)
            .map_err(|e| Error::io(format!("connecting to {dst} (TCP)"), e))?;
        set_timeouts(&s, t)?;
        write_all(&mut s, &side.me.encode(), "sending our address")?;
        let reply =
            read_msg(&mut s, wire::OOB_MSG_LEN, "the server's address").map_err(|e| match e {
                // A server that cannot use our address closes without sending its own.
                Error::Protocol(m) if m.ends_with(CLOSED_EMPTY) => Error::Connection(format!(
                    "{m}: the server refused our address (its output says why; e.g. a GID \
                     index (-g) of another kind than the server's)"
                )),
                e => e,
            })?;
        if let Some(r) = wire::oob_refusal_of(&reply) {
            return Err(r.into_error(dst));
        }
        let peer = OobDest::decode(&reply)?;
        side.connect(&peer)?;
        write_all(&mut s, wire::OOB_DONE, "sending \"done\"")?;
        let local_addr = s.local_addr().ok();
        Ok(side.finish(opts, peer, Some(dst), local_addr))
    }

    /// Waits (at most `wait`, `None`: forever) for one OOB client on `addr` and connects it.
    /// For several clients use an [`OobListener`].
    pub fn accept_oob(
        addr: impl ToSocketAddrs,
        opts: &EndpointOptions,
        wait: Option<Duration>,
    ) -> Result<Endpoint> {
        OobListener::bind(addr, opts)?.accept(wait)
    }
}

/// One side of an out-of-band set-up: the QP in INIT with receives posted, and our address.
pub(super) struct OobSide {
    pub(super) parts: Parts,
    pub(super) gid: GidEntry,
    pub(super) me: OobDest,
    pub(super) mtu: Mtu,
    pub(super) rd: (u8, u8),
}

impl OobSide {
    pub(super) fn new(c: Choice, opts: &EndpointOptions) -> Result<OobSide> {
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
        let mut parts = Parts::new(c.ctx, c.port, opts, |pd, cq, caps| {
            QueuePair::new_rc(pd, cq, cq, caps)
        })?;
        parts.q.qp().to_init(&InitAttr {
            port: parts.port.port,
            remote_read: true,
            remote_write: true,
        })?;
        // Like ibv_rc_pingpong: receives are posted before the peer can send.
        parts.post_receives(opts.msg_size, opts.recv_depth)?;
        let psn = rand::random::<u32>() & 0xff_ffff;
        let me = OobDest {
            lid: parts.port.lid,
            qpn: parts.q.qp().qp_num(),
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
    pub(super) fn connect(&self, peer: &OobDest) -> Result<()> {
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
        self.parts.q.qp().to_rtr(&rtr)?;
        let mut rts = RtsAttr::new(self.me.psn);
        rts.timeout = ACK_TIMEOUT;
        rts.retry_cnt = RETRY_COUNT;
        rts.rnr_retry = RNR_RETRY;
        rts.max_rd_atomic = self.rd.1;
        self.parts.q.qp().to_rts(&rts)
    }

    pub(super) fn finish(
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
pub(super) fn check_gid_kinds(ours: &GidEntry, peer: &Gid) -> Result<()> {
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

pub(super) fn set_timeouts(s: &TcpStream, t: Duration) -> Result<()> {
    s.set_read_timeout(Some(t))
        .map_err(|e| Error::io("setting the TCP read timeout", e))?;
    s.set_write_timeout(Some(t))
        .map_err(|e| Error::io("setting the TCP write timeout", e))?;
    s.set_nodelay(true)
        .map_err(|e| Error::io("setting TCP_NODELAY", e))
}

pub(super) fn write_all(s: &mut TcpStream, b: &[u8], what: &str) -> Result<()> {
    s.write_all(b)
        .map_err(|e| Error::io(format!("{what} (TCP)"), e))
}

/// How [`read_msg`] reports a peer that closed before sending anything.
pub(super) const CLOSED_EMPTY: &str = "the peer closed the connection without sending anything";

/// Reads exactly `n` bytes; a peer that closes early sent a short message (a protocol error),
/// and one that sends less before the socket's read timeout ran out of time.
pub(super) fn read_msg(s: &mut TcpStream, n: usize, what: &'static str) -> Result<Vec<u8>> {
    let mut r = ReadExact::new(n, what);
    match r.advance(s)? {
        Some(b) => Ok(b.to_vec()),
        None => Err(r.stalled()),
    }
}

/// A message of a known length (at most [`wire::OOB_MSG_LEN`]: the buffer is bounded) read
/// as its bytes arrive, over as many calls as they take.
pub(super) struct ReadExact {
    buf: [u8; wire::OOB_MSG_LEN],
    n: usize,
    got: usize,
    what: &'static str,
}

impl ReadExact {
    /// Reads `n` bytes (cut to [`wire::OOB_MSG_LEN`]) of `what`.
    pub(super) fn new(n: usize, what: &'static str) -> ReadExact {
        ReadExact {
            buf: [0; wire::OOB_MSG_LEN],
            n: n.min(wire::OOB_MSG_LEN),
            got: 0,
            what,
        }
    }

    /// Reads what has arrived: the whole message once its last byte is in; `None` when the
    /// socket has nothing more now (non-blocking: would block; blocking: its read timeout
    /// passed). A peer that closes before the end sent a short message: a protocol error.
    pub(super) fn advance(&mut self, s: &mut impl Read) -> Result<Option<&[u8]>> {
        let (n, what) = (self.n, self.what);
        while self.got < n {
            let buf = &mut self.buf[self.got..n];
            match once(|| s.read(buf)).map_err(|e| Error::io(format!("reading {what} (TCP)"), e))? {
                None => return Ok(None),
                Some(0) if self.got == 0 => {
                    return Err(Error::Protocol(format!("{what}: {CLOSED_EMPTY}")))
                }
                Some(0) => {
                    return Err(Error::Protocol(format!(
                        "{what}: the peer closed the connection after {} of {n} bytes",
                        self.got
                    )));
                }
                Some(k) => self.got += k,
            }
        }
        Ok(Some(&self.buf[..n]))
    }

    /// What a peer that stopped here before the deadline did.
    pub(super) fn stalled(&self) -> Error {
        Error::Protocol(format!(
            "{}: got {} of {} bytes before the deadline",
            self.what, self.got, self.n
        ))
    }
}

/// A message of [`wire::OOB_MSG_LEN`] bytes written as the socket takes it.
struct WriteAll {
    buf: [u8; wire::OOB_MSG_LEN],
    sent: usize,
    what: &'static str,
}

impl WriteAll {
    /// True once every byte is written; false when the socket takes no more now.
    fn advance(&mut self, s: &mut impl Write) -> Result<bool> {
        while self.sent < self.buf.len() {
            let rest = &self.buf[self.sent..];
            let what = self.what;
            match once(|| s.write(rest)).map_err(|e| Error::io(format!("{what} (TCP)"), e))? {
                None => return Ok(false),
                Some(0) => {
                    return Err(Error::Connection(format!(
                        "{what}: the socket took no more bytes"
                    )))
                }
                Some(k) => self.sent += k,
            }
        }
        Ok(true)
    }
}

/// One read or write (`op`), again while interrupted: the bytes it moved, or `None` when the
/// socket has or takes no more now (non-blocking: would block; blocking: its timeout passed).
fn once(mut op: impl FnMut() -> std::io::Result<usize>) -> std::io::Result<Option<usize>> {
    loop {
        match op() {
            Ok(k) => return Ok(Some(k)),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e),
        }
    }
}

/// The server's side of the out-of-band exchange, as ibv_rc_pingpong's server does it: read
/// the client's 52 bytes, then (QP made, RTR/RTS) send ours, then read its `"done"`. Each
/// [`advance`](Self::advance) takes the steps the socket allows: on a blocking socket with
/// timeouts the whole exchange, on a non-blocking one what has arrived (the accept of an event
/// loop). The QP is made only once the client's address is in, so a client that sends
/// nothing holds a socket and nothing more.
pub(super) struct OobHandshake {
    s: TcpStream,
    opts: EndpointOptions,
    peer_addr: Option<SocketAddr>,
    step: Step,
}

enum Step {
    Address(ReadExact),
    Reply {
        side: Box<OobSide>,
        peer: OobDest,
        out: WriteAll,
        done: ReadExact,
    },
    Over,
}

impl OobHandshake {
    pub(super) fn new(
        s: TcpStream,
        opts: EndpointOptions,
        peer_addr: Option<SocketAddr>,
    ) -> OobHandshake {
        OobHandshake {
            s,
            opts,
            peer_addr,
            step: Step::Address(ReadExact::new(wire::OOB_MSG_LEN, "the client's address")),
        }
    }

    /// The TCP socket, to wait on.
    pub(super) fn socket(&self) -> BorrowedFd<'_> {
        self.s.as_fd()
    }

    /// True while our address is not all written (wait for the socket to be writable too).
    pub(super) fn wants_write(&self) -> bool {
        matches!(&self.step, Step::Reply { out, .. } if out.sent < out.buf.len())
    }

    /// Takes every step the socket allows now: the endpoint once the exchange is done, `None`
    /// while it waits for the client. After a failure, or the endpoint, every call fails.
    pub(super) fn advance(&mut self) -> Result<Option<Endpoint>> {
        let r = self.steps();
        if r.is_err() {
            self.step = Step::Over;
        }
        r
    }

    fn steps(&mut self) -> Result<Option<Endpoint>> {
        loop {
            match &mut self.step {
                Step::Address(r) => {
                    let Some(b) = r.advance(&mut self.s)? else {
                        return Ok(None);
                    };
                    let peer = OobDest::decode(b)?;
                    let side = OobSide::new(choose(&self.opts)?, &self.opts)?;
                    side.connect(&peer)?;
                    let out = WriteAll {
                        buf: side.me.encode(),
                        sent: 0,
                        what: "sending our address",
                    };
                    let done = ReadExact::new(wire::OOB_DONE.len(), "the client's \"done\"");
                    self.step = Step::Reply {
                        side: Box::new(side),
                        peer,
                        out,
                        done,
                    };
                }
                Step::Reply { out, done, .. } => {
                    if !out.advance(&mut self.s)? {
                        return Ok(None);
                    }
                    let Some(b) = done.advance(&mut self.s)? else {
                        return Ok(None);
                    };
                    wire::check_done(b)?;
                    let Step::Reply { side, peer, .. } =
                        std::mem::replace(&mut self.step, Step::Over)
                    else {
                        unreachable!("matched above");
                    };
                    let local = self.s.local_addr().ok();
                    return Ok(Some(side.finish(&self.opts, peer, self.peer_addr, local)));
                }
                Step::Over => {
                    return Err(Error::Connection("the out-of-band exchange is over".into()))
                }
            }
        }
    }

    /// What a client that stopped where the exchange is now did, once its time is up.
    pub(super) fn stalled(&self) -> Error {
        match &self.step {
            Step::Address(r) => r.stalled(),
            Step::Reply { out, .. } if out.sent < out.buf.len() => Error::Protocol(format!(
                "{}: the client took {} of {} bytes before the deadline",
                out.what,
                out.sent,
                out.buf.len()
            )),
            Step::Reply { done, .. } => done.stalled(),
            Step::Over => Error::Connection("the out-of-band exchange is over".into()),
        }
    }
}

/// Accepts ibv_rc_pingpong-style out-of-band connections, one after another.
pub struct OobListener {
    pub(super) tcp: TcpListener,
    pub(super) opts: EndpointOptions,
    pub(super) wake: Arc<Wake>,
    /// The readiness-only descriptor handed out ([`fd`](Self::fd)).
    ready: crate::os::ReadyFd,
}

impl std::fmt::Debug for OobListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OobListener({:?})", self.tcp.local_addr().ok())
    }
}

impl OobListener {
    /// Checks the options (device, GID index, message size, MTU) and listens on TCP `addr` (a
    /// socket address or a host name with its port).
    pub fn bind(addr: impl ToSocketAddrs, opts: &EndpointOptions) -> Result<OobListener> {
        let addr = resolve(addr, "the address to listen on")?;
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
            wake: Wake::new()?,
            ready: crate::os::ReadyFd::default(),
        })
    }

    /// A handle that shuts this listener down from any thread (see [`ShutdownHandle`]).
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(self.wake.clone())
    }

    /// A descriptor readable when a client is waiting, as [`Listener::fd`](super::Listener::fd):
    /// readiness-only, an epoll instance over the TCP listening socket (so that no descriptor
    /// the crate hands out can take a connection, or a device command, behind its back).
    pub fn fd(&self) -> Result<BorrowedFd<'_>> {
        self.ready
            .get(self.tcp.as_fd())
            .map_err(|e| Error::io("epoll_create1 (the TCP listener's readiness descriptor)", e))
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
    use std::time::Instant;

    use super::*;

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
    fn the_server_exchange_reads_as_bytes_arrive_and_fails_a_bad_address_once_whole() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, peer) = l.accept().unwrap();
        s.set_nonblocking(true).unwrap();
        let mut hs = OobHandshake::new(s, EndpointOptions::default(), Some(peer));
        // Nothing yet, then part of a message: the call returns at once, waiting for more.
        let t = Instant::now();
        assert!(hs.advance().unwrap().is_none());
        c.write_all(&[b'z'; 30]).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(hs.advance().unwrap().is_none());
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        assert!(!hs.wants_write());
        let e = hs.stalled().to_string();
        assert!(
            e.contains("the client's address: got 30 of 52 bytes"),
            "{e}"
        );
        // The rest: decoded once whole (before any device is touched), refused, and over.
        c.write_all(&[b'z'; 22]).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let e = hs.advance().unwrap_err();
        assert!(matches!(e, Error::Protocol(_)), "{e}");
        let e = hs.advance().unwrap_err().to_string();
        assert!(e.contains("over"), "{e}");
    }

    #[test]
    fn a_client_that_closes_mid_message_fails_the_server_exchange() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        s.set_nonblocking(true).unwrap();
        let mut hs = OobHandshake::new(s, EndpointOptions::default(), None);
        c.write_all(b"0000:").unwrap();
        drop(c);
        std::thread::sleep(Duration::from_millis(50));
        let e = hs.advance().unwrap_err().to_string();
        assert!(
            e.contains("closed the connection after 5 of 52 bytes"),
            "{e}"
        );
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
