//! What every set-up shares: options checked against the device, PD/CQ/QP made, receives
//! posted, and the parts turned into an [`Endpoint`].

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

use crate::cm::CmId;
use crate::error::{Error, Result};
use crate::verbs::{
    CompletionQueue, Context, GidEntry, LocalBuf, PortAttr, ProtectionDomain, QpCaps, QueuePair,
    SoloQueue,
};
use crate::xfer::wire::Hello;

use super::conn::{credit_flow, Endpoint, Flow, WR_DATA, WR_RECV};
use super::options::{EndpointOptions, LocalInfo, PeerInfo, PeerKind, Transport};

/// Outstanding RDMA READs asked for (capped by the device).
pub(super) const RD_ATOMIC: u32 = 16;
/// Inline data asked for; creation is retried without inline if the device refuses.
pub(super) const INLINE: u32 = 128;

/// Resources of an endpoint being set up.
pub(super) struct Parts {
    pub(super) ctx: Context,
    pub(super) pd: ProtectionDomain,
    pub(super) q: SoloQueue,
    pub(super) own_sq: u32,
    pub(super) port: PortAttr,
}

/// Resolves `host:port` to one socket address (IPv4 preferred, as rdma_cm on RoCE needs).
pub fn resolve_host(host: &str, port: u16) -> Result<SocketAddr> {
    resolve((host, port), &format!("{host:?}"))
}

/// The one socket address `addr` names (a `SocketAddr`, `"host:port"`, `(host, port)`, ...:
/// a host name is looked up by the system's resolver), IPv4 preferred as for
/// [`resolve_host`]; `what` names it in the error.
pub(crate) fn resolve(addr: impl ToSocketAddrs, what: &str) -> Result<SocketAddr> {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| Error::io(format!("resolving {what}"), e))?
        .collect();
    first_ipv4(&addrs)
        .ok_or_else(|| Error::InvalidArgument(format!("{what} resolves to no address")))
}

/// The first IPv4 address of `addrs`, else the first.
pub(crate) fn first_ipv4(addrs: &[SocketAddr]) -> Option<SocketAddr> {
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
}

pub(super) fn check_msg_size(opts: &EndpointOptions, ctx: &Context, port: &PortAttr) -> Result<()> {
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

pub(super) fn caps(opts: &EndpointOptions, inline: u32) -> Result<(QpCaps, u32)> {
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
pub(super) fn cq_len(c: &QpCaps) -> Result<u32> {
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
pub(super) struct Choice {
    pub(super) ctx: Context,
    pub(super) port: PortAttr,
    pub(super) gid: GidEntry,
}

pub(super) fn choose(opts: &EndpointOptions) -> Result<Choice> {
    opts.validate()?;
    let ctx = Context::open(opts.device.as_deref())?;
    let port = ctx.active_port(opts.ib_port)?;
    let gid = ctx.choose_gid(port.port, opts.gid_index)?;
    check_msg_size(opts, &ctx, &port)?;
    Ok(Choice { ctx, port, gid })
}

pub(super) fn rd_atomic(ctx: &Context) -> (u8, u8) {
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
    pub(super) fn new(
        ctx: Context,
        port: PortAttr,
        opts: &EndpointOptions,
        make_qp: impl Fn(&ProtectionDomain, &CompletionQueue, QpCaps) -> Result<QueuePair>,
    ) -> Result<Parts> {
        let pd = ProtectionDomain::new(&ctx)?;
        let (c, own_sq) = caps(opts, INLINE)?;
        let mut q = SoloQueue::new(&ctx, cq_len(&c)?, opts.wait, |cq| {
            match make_qp(&pd, cq, c) {
                Ok(qp) => Ok(qp),
                Err(_) => make_qp(&pd, cq, caps(opts, 0)?.0),
            }
        })?;
        // The endpoint's SENDs go from the queue's send ring (flow.rs counts them back).
        q.set_send_ring(
            WR_DATA,
            LocalBuf::slots(&pd, opts.msg_size, opts.send_depth as usize)?,
        )?;
        Ok(Parts {
            ctx,
            pd,
            q,
            own_sq,
            port,
        })
    }

    /// Posts `n` receives of `msg_size` bytes: the queue's receive ring.
    pub(super) fn post_receives(&mut self, msg_size: usize, n: u32) -> Result<()> {
        let bufs = LocalBuf::slots(&self.pd, msg_size, n as usize)?;
        self.q.set_recv_ring(WR_RECV, bufs)
    }

    /// A connected rdma_cm endpoint: the QP is in RTS (rdma_cm moved it) and `hello` is the
    /// peer's handshake.
    pub(super) fn into_cm_endpoint(
        self,
        opts: &EndpointOptions,
        hello: &Hello,
        peer_addr: Option<SocketAddr>,
        id: CmId,
    ) -> Endpoint {
        self.q.qp().set_state(crate::verbs::QpState::Rts);
        let (sgid, dgid) = id.gids();
        let local = LocalInfo {
            transport: Transport::Cm,
            device: self.ctx.name().to_string(),
            port: self.port.port,
            addr: id.local_addr(),
            qpn: self.q.qp().qp_num(),
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
        self.into_endpoint(
            opts,
            credit_flow(hello.recv_depth, opts.recv_depth),
            local,
            peer,
            Some(id),
        )
    }

    pub(super) fn into_endpoint(
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
        Endpoint {
            q: self.q,
            ready: VecDeque::new(),
            user_done: VecDeque::new(),
            user_retired: Vec::new(),
            deferred: None,
            pd: self.pd,
            ctx: self.ctx,
            flow,
            sends_posted: 0,
            unsignaled_run: 0,
            own_sq: self.own_sq,
            msg_size: opts.msg_size,
            recv_depth: opts.recv_depth,
            peer_msg_size,
            timeout: opts.timeout,
            failed: None,
            disconnected: false,
            local,
            peer,
            cm,
        }
    }
}

/// The IPv4 address of a GID, as the source address rdma_cm should use.
pub(super) fn gid_source(gid: &GidEntry) -> Result<IpAddr> {
    gid.gid.ipv4().map(IpAddr::V4).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "GID index {} ({}) has no IPv4 address; rdma_cm needs one: choose the IPv4-mapped RoCE v2 GID or use --oob",
            gid.index, gid.gid
        ))
    })
}

pub(super) fn check_cm_device(
    opts: &EndpointOptions,
    ctx: &Context,
    port: u8,
    addr: &str,
) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn resolve_host_prefers_ipv4() {
        assert_eq!(
            resolve_host("127.0.0.1", 5).unwrap(),
            "127.0.0.1:5".parse().unwrap()
        );
        assert!(resolve_host("[::1]", 5).is_err() || resolve_host("::1", 5).is_ok());
    }

    #[test]
    fn an_address_may_be_a_host_name_and_a_bad_one_says_which_it_was() {
        let want: SocketAddr = "127.0.0.1:7471".parse().unwrap();
        assert_eq!(resolve(want, "x").unwrap(), want);
        assert_eq!(resolve("127.0.0.1:7471", "x").unwrap(), want);
        assert_eq!(resolve(("localhost", 7471), "x").unwrap().port(), 7471);
        // No port: refused before any lookup.
        let e = resolve("server", "the address to connect to").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("resolving the address to connect to: "),
            "{e}"
        );
        let none: &[SocketAddr] = &[];
        let e = resolve(none, "the address to listen on").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid argument: the address to listen on resolves to no address"
        );
    }
}
