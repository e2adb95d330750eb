//! Two RC queue pairs on one device, connected to each other: the single-process set-up the
//! device tests and `rdmaxfer loopback` use.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::verbs::{
    CompletionQueue, Context, GidEntry, InitAttr, Mtu, ProtectionDomain, QpCaps, QueuePair,
    RtrAttr, RtsAttr, WaitMode,
};

/// Options for [`LoopbackPair::new`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LoopbackOptions {
    /// Device name; `None` picks the first with an active port.
    pub device: Option<String>,
    /// GID index; `None` picks the IPv4-mapped RoCE v2 GID.
    pub gid_index: Option<u32>,
    /// Queue sizes.
    pub caps: QpCaps,
    /// Completion wait mode.
    pub mode: WaitMode,
    /// Path MTU; `None` uses the port's active MTU.
    pub mtu: Option<Mtu>,
}

impl LoopbackOptions {
    setters! {
        device: Option<String>,
        gid_index: Option<u32>,
        caps: QpCaps,
        mode: WaitMode,
        mtu: Option<Mtu>,
    }
}

impl Default for LoopbackOptions {
    fn default() -> Self {
        LoopbackOptions {
            device: None,
            gid_index: None,
            caps: QpCaps {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 64,
            },
            mode: WaitMode::Poll,
            mtu: None,
        }
    }
}

/// Two connected RC QPs `a` and `b` on one device, each with its own CQ.
pub struct LoopbackPair {
    /// First QP.
    pub a: QueuePair,
    /// Second QP.
    pub b: QueuePair,
    /// CQ of `a` (send and receive).
    pub cq_a: CompletionQueue,
    /// CQ of `b` (send and receive).
    pub cq_b: CompletionQueue,
    /// Their protection domain.
    pub pd: ProtectionDomain,
    /// The GID both use.
    pub gid: GidEntry,
}

impl LoopbackPair {
    /// Opens the device and connects two QPs to each other (RESET → INIT → RTR → RTS).
    pub fn new(opts: &LoopbackOptions) -> Result<LoopbackPair> {
        let ctx = Context::open(opts.device.as_deref())?;
        let port = ctx.first_active_port()?;
        let gid = ctx.choose_gid(port.port, opts.gid_index)?;
        let mtu = opts.mtu.or(port.active_mtu).unwrap_or(Mtu::M1024);
        let pd = ProtectionDomain::new(&ctx)?;
        let depth = opts.caps.max_send_wr + opts.caps.max_recv_wr;
        let cq_a = CompletionQueue::new(&ctx, depth, opts.mode)?;
        let cq_b = CompletionQueue::new(&ctx, depth, opts.mode)?;
        let a = QueuePair::new_rc(&pd, &cq_a, &cq_a, opts.caps)?;
        let b = QueuePair::new_rc(&pd, &cq_b, &cq_b, opts.caps)?;
        let sgid = u8::try_from(gid.index)
            .map_err(|_| Error::InvalidArgument(format!("GID index {} > 255", gid.index)))?;
        let init = InitAttr {
            port: port.port,
            remote_read: true,
            remote_write: true,
        };
        let (psn_a, psn_b) = (0x1234, 0x5678);
        for (qp, peer, rq_psn, sq_psn) in [(&a, &b, psn_b, psn_a), (&b, &a, psn_a, psn_b)] {
            qp.to_init(&init)?;
            qp.to_rtr(&RtrAttr::new(
                peer.qp_num(),
                rq_psn,
                mtu,
                gid.gid,
                sgid,
                port.port,
            ))?;
            qp.to_rts(&RtsAttr::new(sq_psn))?;
        }
        Ok(LoopbackPair {
            a,
            b,
            cq_a,
            cq_b,
            pd,
            gid,
        })
    }

    /// Default per-operation deadline for tests and the demo.
    pub const TIMEOUT: Duration = Duration::from_secs(10);
}

/// What [`round_trip`] moved.
#[derive(Clone, Debug, serde::Serialize)]
#[non_exhaustive]
pub struct RoundTrip {
    /// Device used.
    pub device: String,
    /// GID index used.
    pub gid_index: u32,
    /// Bytes written and read back.
    pub bytes: usize,
    /// BLAKE3 of the data written.
    pub written_hash: String,
    /// BLAKE3 of the data read back.
    pub read_hash: String,
    /// Microseconds for the RDMA WRITE.
    pub write_us: f64,
    /// Microseconds for the RDMA READ.
    pub read_us: f64,
}

/// Writes `len` patterned bytes from QP `a` into a region `b` exposes (RDMA WRITE), reads them
/// back into a fresh buffer (RDMA READ) and checks they match.
pub fn round_trip(opts: &LoopbackOptions, len: usize) -> Result<RoundTrip> {
    use crate::verbs::{ExposedRegion, LocalBuf, RemoteAccess, SendOp, SendRequest, Sge};
    use std::time::Instant;

    let p = LoopbackPair::new(opts)?;
    let region = ExposedRegion::new(&p.pd, len, RemoteAccess::ReadWrite)?;
    let remote = region.descriptor().slice(0, len as u64)?;
    let mut src = LocalBuf::new(&p.pd, len)?;
    for (i, b) in src.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let written_hash = blake3::hash(&src).to_hex().to_string();

    let t = Instant::now();
    p.a.post_send(SendRequest::new(1, SendOp::Write(remote), [Sge::new(src)]))?;
    p.cq_a.wait(1, LoopbackPair::TIMEOUT)?.remove(0).result()?;
    let write_us = t.elapsed().as_secs_f64() * 1e6;

    let dst = LocalBuf::new(&p.pd, len)?;
    let t = Instant::now();
    p.a.post_send(SendRequest::new(2, SendOp::Read(remote), [Sge::new(dst)]))?;
    let done = p.cq_a.wait(1, LoopbackPair::TIMEOUT)?.remove(0).result()?;
    let read_us = t.elapsed().as_secs_f64() * 1e6;
    let back = done.into_local_bufs().remove(0);
    let read_hash = blake3::hash(&back).to_hex().to_string();
    if read_hash != written_hash || region.to_vec()[..] != back[..] {
        return Err(Error::Protocol(
            "data read back differs from what was written".into(),
        ));
    }
    Ok(RoundTrip {
        device: p.pd.context().name().to_string(),
        gid_index: p.gid.index,
        bytes: len,
        written_hash,
        read_hash,
        write_us,
        read_us,
    })
}
