//! RC queue pairs: `ibv_create_qp(3)`, `ibv_modify_qp(3)`, `ibv_post_send(3)`,
//! `ibv_post_recv(3)`, `ibv_destroy_qp(3)`.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::sys;
use crate::verbs::cq::CompletionQueue;
use crate::verbs::device::Mtu;
use crate::verbs::gid::Gid;
use crate::verbs::pd::ProtectionDomain;
pub use crate::verbs::wr::{BufRequest, PostError, SendOp, SendRequest, Sge};
pub use batch::{PostListError, SendBatch};
pub(crate) use post::ring_slot_busy;
pub use recvlist::RecvList;
pub use shared::{SharedList, SharedPost};

mod batch;
mod post;
mod recvlist;
mod shared;

/// Queue sizes asked for at creation (`struct ibv_qp_cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive.
    pub max_recv_sge: u32,
    /// Largest inline send.
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }
}

/// Queue pair state as rdmaxfer tracks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum QpState {
    /// Just created.
    Reset = 0,
    /// Initialised: receives may be posted.
    Init = 1,
    /// Ready to receive.
    Rtr = 2,
    /// Ready to send.
    Rts = 3,
    /// Error: everything posted is flushed.
    Error = 4,
}

impl QpState {
    fn from_u8(v: u8) -> QpState {
        match v {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            _ => QpState::Error,
        }
    }

    /// Short name: RESET, INIT, RTR, RTS, ERR.
    pub fn name(self) -> &'static str {
        match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Error => "ERR",
        }
    }
}

/// Attributes for RESET → INIT.
#[derive(Clone, Copy, Debug)]
pub struct InitAttr {
    /// Physical port (1-based).
    pub port: u8,
    /// Allow the peer to RDMA READ memory it was given an rkey for.
    pub remote_read: bool,
    /// Allow the peer to RDMA WRITE memory it was given an rkey for.
    pub remote_write: bool,
}

/// Attributes for INIT → RTR (the peer's address and first PSN).
#[derive(Clone, Copy, Debug)]
pub struct RtrAttr {
    /// The peer's QP number.
    pub dest_qp_num: u32,
    /// The peer's first PSN.
    pub rq_psn: u32,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// The peer's LID (0 on RoCE).
    pub dlid: u16,
    /// The peer's GID; a zero GID means no global routing header (IB only).
    pub dgid: Gid,
    /// Our GID index to send from.
    pub sgid_index: u8,
    /// Our port.
    pub port: u8,
    /// RDMA READs the peer may have outstanding against us.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code (12 = 0.64 ms).
    pub min_rnr_timer: u8,
    /// GRH hop limit.
    pub hop_limit: u8,
}

impl RtrAttr {
    /// ibv_rc_pingpong-style defaults for a peer at `dgid`.
    pub fn new(
        dest_qp_num: u32,
        rq_psn: u32,
        path_mtu: Mtu,
        dgid: Gid,
        sgid_index: u8,
        port: u8,
    ) -> RtrAttr {
        RtrAttr {
            dest_qp_num,
            rq_psn,
            path_mtu,
            dlid: 0,
            dgid,
            sgid_index,
            port,
            max_dest_rd_atomic: 16,
            min_rnr_timer: 12,
            hop_limit: 64,
        }
    }
}

/// Attributes for RTR → RTS.
#[derive(Clone, Copy, Debug)]
pub struct RtsAttr {
    /// Our first PSN.
    pub sq_psn: u32,
    /// Local ACK timeout code (4.096 µs × 2^timeout; 14 ≈ 67 ms).
    pub timeout: u8,
    /// Transport retries before IBV_WC_RETRY_EXC_ERR.
    pub retry_cnt: u8,
    /// RNR retries (7 = forever: avoided, receives are credit-controlled).
    pub rnr_retry: u8,
    /// RDMA READs we may have outstanding.
    pub max_rd_atomic: u8,
}

impl RtsAttr {
    /// Defaults: timeout 14, retry_cnt 7, rnr_retry 6 (finite), 16 outstanding reads.
    pub fn new(sq_psn: u32) -> RtsAttr {
        RtsAttr {
            sq_psn,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 6,
            max_rd_atomic: 16,
        }
    }
}

pub(crate) type Destroy = Box<dyn FnOnce(NonNull<sys::ibv_qp>) -> i32 + Send + Sync>;

/// A reliable-connected queue pair.
pub struct QueuePair {
    qp: NonNull<sys::ibv_qp>,
    qpn: u32,
    state: AtomicU8,
    modify_lock: Mutex<()>,
    caps: QpCaps,
    max_msg: u32,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    destroy: Option<Destroy>,
    /// The PD's device context: every posted buffer must be registered in it (one compare).
    ctx: NonNull<sys::ibv_context>,
    _pd: ProtectionDomain,
}

// SAFETY: the QP pointer is only passed to libibverbs calls, which may be made from any thread
// (libibverbs is thread-safe); the context pointer is only compared; Rust-side state is atomic
// or locked.
unsafe impl Send for QueuePair {}
// SAFETY: as above.
unsafe impl Sync for QueuePair {}

impl std::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QueuePair(qpn {:#x}, {})", self.qpn, self.state().name())
    }
}

pub(crate) fn qp_init_attr(
    send_cq: &CompletionQueue,
    recv_cq: &CompletionQueue,
    caps: &QpCaps,
) -> sys::ibv_qp_init_attr {
    sys::ibv_qp_init_attr {
        send_cq: send_cq.as_ptr(),
        recv_cq: recv_cq.as_ptr(),
        cap: sys::ibv_qp_cap {
            max_send_wr: caps.max_send_wr,
            max_recv_wr: caps.max_recv_wr,
            max_send_sge: caps.max_send_sge,
            max_recv_sge: caps.max_recv_sge,
            max_inline_data: caps.max_inline_data,
        },
        qp_type: sys::IBV_QPT_RC,
        sq_sig_all: 0,
        ..Default::default()
    }
}

impl QueuePair {
    /// Creates an RC QP (`ibv_create_qp(3)`) in RESET.
    pub fn new_rc(
        pd: &ProtectionDomain,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        caps: QpCaps,
    ) -> Result<QueuePair> {
        check_contexts("ibv_create_qp", pd, send_cq, recv_cq)?;
        let mut attr = qp_init_attr(send_cq, recv_cq, &caps);
        // SAFETY: the PD and both CQs are live (we hold their Arcs) and of one device context
        // (checked just above); `attr` is a complete ibv_qp_init_attr that outlives the call.
        let qp = unsafe { sys::ibv_create_qp(pd.as_ptr(), &mut attr) };
        let qp = NonNull::new(qp).ok_or_else(|| Error::Verb {
            verb: "ibv_create_qp",
            errno: crate::error::last_errno(),
            hint: " (queue depth or SGE count above the device limits?)",
        })?;
        let destroy: Destroy = Box::new(|qp| {
            // SAFETY: `destroy` is taken out of its Option and called once, from drop, with the
            // QP created here.
            unsafe { sys::ibv_destroy_qp(qp.as_ptr()) }
        });
        Self::wrap(qp, pd, send_cq, recv_cq, attr.cap, QpState::Reset, destroy)
    }

    /// Wraps a QP made elsewhere (rdma_cm); `destroy` tears it down.
    pub(crate) fn wrap(
        qp: NonNull<sys::ibv_qp>,
        pd: &ProtectionDomain,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        cap: sys::ibv_qp_cap,
        state: QpState,
        destroy: Destroy,
    ) -> Result<QueuePair> {
        // SAFETY: `qp` is non-NULL, just returned by ibv_create_qp / rdma_create_qp, and only
        // destroyed by `destroy`, from drop.
        let qpn = unsafe { (*qp.as_ptr()).qp_num };
        if !send_cq.claim() {
            // Another QP claimed this single-owner CQ since check_contexts looked.
            let rc = destroy(qp);
            if rc != 0 {
                tracing::warn!("destroying a refused QP failed: {rc}");
            }
            return Err(Error::InvalidArgument(
                "a SoloQueue's CQ takes one QP, for both of its queues".into(),
            ));
        }
        let max_msg = pd
            .context()
            .first_active_port()
            .map(|p| p.max_msg_sz)
            .unwrap_or(1 << 30);
        Ok(QueuePair {
            qp,
            qpn,
            state: AtomicU8::new(state as u8),
            modify_lock: Mutex::new(()),
            caps: QpCaps {
                max_send_wr: cap.max_send_wr,
                max_recv_wr: cap.max_recv_wr,
                max_send_sge: cap.max_send_sge,
                max_recv_sge: cap.max_recv_sge,
                max_inline_data: cap.max_inline_data,
            },
            max_msg,
            send_cq: send_cq.clone(),
            recv_cq: recv_cq.clone(),
            destroy: Some(destroy),
            ctx: pd.context().as_non_null(),
            _pd: pd.clone(),
        })
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        self.qpn
    }

    /// The capabilities the device granted.
    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    /// The state rdmaxfer last moved it to, or last read with
    /// [`query_state`](Self::query_state). The device also moves a QP to ERR by itself (a
    /// remote access error, retries exhausted), which this does not see: after an error
    /// completion it may still say RTS.
    ///
    /// No check relies on it for soundness: a post it lets through to a QP the device has moved
    /// to ERR is refused by the device (the buffers come back with the error) or completes with
    /// a flush error (they come back with the completion), and a drop moves the QP to ERR and
    /// drains it whatever this says.
    #[inline(always)]
    pub fn state(&self) -> QpState {
        QpState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// True in RTS (sends may be posted): [`state`](Self::state) without the conversion.
    #[inline(always)]
    pub(crate) fn is_rts(&self) -> bool {
        self.state.load(Ordering::Acquire) == QpState::Rts as u8
    }

    /// True in INIT, RTR or RTS (receives may be posted).
    #[inline(always)]
    pub(crate) fn takes_recvs(&self) -> bool {
        let s = self.state.load(Ordering::Acquire);
        s != QpState::Reset as u8 && s < QpState::Error as u8
    }

    /// Marks the state (for QPs that rdma_cm transitions).
    #[allow(dead_code)]
    pub(crate) fn set_state(&self, s: QpState) {
        self.state.store(s as u8, Ordering::Release);
    }

    /// The RTS attributes as the device has them (`ibv_query_qp(3)`): for a QP that rdma_cm
    /// moved to RTS, what it chose (PSN, ACK timeout, retry counts, outstanding reads).
    pub fn query_rts(&self) -> Result<RtsAttr> {
        let mut attr = sys::ibv_qp_attr::default();
        let mut init = sys::ibv_qp_init_attr::default();
        let mask = sys::IBV_QP_SQ_PSN.0
            | sys::IBV_QP_TIMEOUT.0
            | sys::IBV_QP_RETRY_CNT.0
            | sys::IBV_QP_RNR_RETRY.0
            | sys::IBV_QP_MAX_QP_RD_ATOMIC.0;
        // SAFETY: `self.qp` is live until drop; both out-structures are ours and outlive the call.
        let rc = unsafe { sys::ibv_query_qp(self.qp.as_ptr(), &mut attr, mask as i32, &mut init) };
        if rc != 0 {
            return Err(Error::verb("ibv_query_qp", rc));
        }
        Ok(RtsAttr {
            sq_psn: attr.sq_psn,
            timeout: attr.timeout,
            retry_cnt: attr.retry_cnt,
            rnr_retry: attr.rnr_retry,
            max_rd_atomic: attr.max_rd_atomic,
        })
    }

    /// The state the device has the QP in now (`ibv_query_qp(3)`, `IBV_QP_STATE`); from then on
    /// [`state`](Self::state) says it too. SQD and SQE, which rdmaxfer never asks for, read as
    /// [`QpState::Error`] (no send of an RC QP proceeds in them).
    pub fn query_state(&self) -> Result<QpState> {
        let _g = self.modify_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut attr = sys::ibv_qp_attr::default();
        let mut init = sys::ibv_qp_init_attr::default();
        // SAFETY: `self.qp` is live until drop; both out-structures are ours and outlive the call.
        let rc = unsafe {
            sys::ibv_query_qp(
                self.qp.as_ptr(),
                &mut attr,
                sys::IBV_QP_STATE.0 as i32,
                &mut init,
            )
        };
        if rc != 0 {
            return Err(Error::verb("ibv_query_qp", rc));
        }
        let s = match attr.qp_state {
            sys::IBV_QPS_RESET => QpState::Reset,
            sys::IBV_QPS_INIT => QpState::Init,
            sys::IBV_QPS_RTR => QpState::Rtr,
            sys::IBV_QPS_RTS => QpState::Rts,
            _ => QpState::Error,
        };
        self.state.store(s as u8, Ordering::Release);
        Ok(s)
    }

    /// The send CQ.
    pub fn send_cq(&self) -> &CompletionQueue {
        &self.send_cq
    }

    /// The receive CQ.
    pub fn recv_cq(&self) -> &CompletionQueue {
        &self.recv_cq
    }

    fn modify(
        &self,
        attr: &mut sys::ibv_qp_attr,
        mask: u32,
        from: QpState,
        to: QpState,
        verb: &'static str,
    ) -> Result<()> {
        let _g = self.modify_lock.lock().unwrap_or_else(|p| p.into_inner());
        let cur = self.state();
        if cur != from && to != QpState::Error {
            return Err(Error::InvalidState {
                op: verb,
                object: "queue pair",
                state: cur.name(),
                needs: from.name(),
            });
        }
        attr.qp_state = match to {
            QpState::Reset => sys::IBV_QPS_RESET,
            QpState::Init => sys::IBV_QPS_INIT,
            QpState::Rtr => sys::IBV_QPS_RTR,
            QpState::Rts => sys::IBV_QPS_RTS,
            QpState::Error => sys::IBV_QPS_ERR,
        };
        // SAFETY: `self.qp` is live until drop; `attr` outlives the call; `mask` names the
        // fields set.
        let rc = unsafe { sys::ibv_modify_qp(self.qp.as_ptr(), attr, mask as i32) };
        if rc != 0 {
            return Err(Error::verb(verb, rc));
        }
        self.state.store(to as u8, Ordering::Release);
        Ok(())
    }

    /// RESET → INIT.
    pub fn to_init(&self, a: &InitAttr) -> Result<()> {
        let mut access = sys::IBV_ACCESS_LOCAL_WRITE.0;
        if a.remote_read {
            access |= sys::IBV_ACCESS_REMOTE_READ.0;
        }
        if a.remote_write {
            access |= sys::IBV_ACCESS_REMOTE_WRITE.0;
        }
        let mut attr = sys::ibv_qp_attr {
            pkey_index: 0,
            port_num: a.port,
            qp_access_flags: access,
            ..Default::default()
        };
        let mask = sys::IBV_QP_STATE.0
            | sys::IBV_QP_PKEY_INDEX.0
            | sys::IBV_QP_PORT.0
            | sys::IBV_QP_ACCESS_FLAGS.0;
        self.modify(
            &mut attr,
            mask,
            QpState::Reset,
            QpState::Init,
            "ibv_modify_qp(RESET->INIT)",
        )
    }

    /// INIT → RTR.
    pub fn to_rtr(&self, a: &RtrAttr) -> Result<()> {
        let mut attr = sys::ibv_qp_attr {
            path_mtu: a.path_mtu.to_raw(),
            dest_qp_num: a.dest_qp_num,
            rq_psn: a.rq_psn & 0xff_ffff,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            ..Default::default()
        };
        attr.ah_attr.dlid = a.dlid;
        attr.ah_attr.sl = 0;
        attr.ah_attr.src_path_bits = 0;
        attr.ah_attr.port_num = a.port;
        if !a.dgid.is_zero() {
            attr.ah_attr.is_global = 1;
            attr.ah_attr.grh.dgid.raw = a.dgid.0;
            attr.ah_attr.grh.sgid_index = a.sgid_index;
            attr.ah_attr.grh.hop_limit = a.hop_limit;
        }
        let mask = sys::IBV_QP_STATE.0
            | sys::IBV_QP_AV.0
            | sys::IBV_QP_PATH_MTU.0
            | sys::IBV_QP_DEST_QPN.0
            | sys::IBV_QP_RQ_PSN.0
            | sys::IBV_QP_MAX_DEST_RD_ATOMIC.0
            | sys::IBV_QP_MIN_RNR_TIMER.0;
        self.modify(
            &mut attr,
            mask,
            QpState::Init,
            QpState::Rtr,
            "ibv_modify_qp(INIT->RTR)",
        )
    }

    /// RTR → RTS.
    pub fn to_rts(&self, a: &RtsAttr) -> Result<()> {
        let mut attr = sys::ibv_qp_attr {
            sq_psn: a.sq_psn & 0xff_ffff,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            max_rd_atomic: a.max_rd_atomic,
            ..Default::default()
        };
        let mask = sys::IBV_QP_STATE.0
            | sys::IBV_QP_TIMEOUT.0
            | sys::IBV_QP_RETRY_CNT.0
            | sys::IBV_QP_RNR_RETRY.0
            | sys::IBV_QP_SQ_PSN.0
            | sys::IBV_QP_MAX_QP_RD_ATOMIC.0;
        self.modify(
            &mut attr,
            mask,
            QpState::Rtr,
            QpState::Rts,
            "ibv_modify_qp(RTR->RTS)",
        )
    }

    /// Any state → ERR: everything posted completes with a flush error.
    pub fn to_error(&self) -> Result<()> {
        let mut attr = sys::ibv_qp_attr::default();
        self.modify(
            &mut attr,
            sys::IBV_QP_STATE.0,
            QpState::Rts,
            QpState::Error,
            "ibv_modify_qp(->ERR)",
        )
    }
}

/// Refuses CQs of another device context than the PD's (libibverbs does not check it, and
/// librdmacm checks only the PD against the CM id's context).
pub(crate) fn check_contexts(
    op: &'static str,
    pd: &ProtectionDomain,
    send_cq: &CompletionQueue,
    recv_cq: &CompletionQueue,
) -> Result<()> {
    CompletionQueue::check_claim(send_cq, recv_cq)?;
    for (what, cq) in [("the send CQ", send_cq), ("the receive CQ", recv_cq)] {
        if !cq.context().same_as(pd.context()) {
            return Err(Error::ContextMismatch {
                op,
                what,
                with: "protection domain",
            });
        }
    }
    Ok(())
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // Teardown order: ERR (flushes everything posted), drain, destroy, then drop what is left.
        if self.state() != QpState::Reset {
            if let Err(e) = self.to_error() {
                tracing::debug!("moving QP {:#x} to ERR on drop: {e}", self.qpn);
            }
            let deadline = Instant::now() + Duration::from_secs(2);
            self.send_cq.drain_qp(self.qpn, deadline);
            self.recv_cq.drain_qp(self.qpn, deadline);
        }
        let rc = match self.destroy.take() {
            Some(d) => d(self.qp),
            None => 0,
        };
        if rc != 0 {
            // The device may still reach the posted buffers: leave them in the table (leaked).
            tracing::warn!(
                "destroying QP {:#x} failed: {}",
                self.qpn,
                std::io::Error::from_raw_os_error(rc)
            );
            self.send_cq.leak_table();
            self.recv_cq.leak_table();
            return;
        }
        self.send_cq.purge_qp(self.qpn);
        self.recv_cq.purge_qp(self.qpn);
    }
}
