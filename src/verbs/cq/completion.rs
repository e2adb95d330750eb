//! Completions and the buffers they hand back (see [`super`]).

use std::ffi::CStr;

use crate::error::{Error, Result};
use crate::sys;
use crate::verbs::mr::{LocalBuf, SharedBuf};

/// The buffers of one work request: inline for the usual one (no allocation per message).
pub type Bufs = smallvec::SmallVec<[Buf; 1]>;

/// A posted buffer: exclusive or shared read-only.
#[derive(Debug)]
pub enum Buf {
    /// An exclusive buffer (any operation).
    Local(LocalBuf),
    /// A frozen buffer (sources only: SEND, RDMA WRITE).
    Shared(SharedBuf),
}

impl Buf {
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Buf::Local(b) => b,
            Buf::Shared(b) => b,
        }
    }

    /// The exclusive buffer, if it is one.
    pub fn into_local(self) -> Option<LocalBuf> {
        match self {
            Buf::Local(b) => Some(b),
            Buf::Shared(_) => None,
        }
    }

    pub(crate) fn lkey(&self) -> u32 {
        match self {
            Buf::Local(b) => b.lkey(),
            Buf::Shared(b) => b.lkey(),
        }
    }

    pub(crate) fn addr(&self) -> u64 {
        match self {
            Buf::Local(b) => b.addr(),
            Buf::Shared(b) => b.addr(),
        }
    }

    /// The device context the buffer is registered in.
    #[inline(always)]
    pub(crate) fn ctx(&self) -> *mut sys::ibv_context {
        match self {
            Buf::Local(b) => b.ctx(),
            Buf::Shared(b) => b.ctx(),
        }
    }
}

impl From<LocalBuf> for Buf {
    fn from(b: LocalBuf) -> Buf {
        Buf::Local(b)
    }
}

impl From<SharedBuf> for Buf {
    fn from(b: SharedBuf) -> Buf {
        Buf::Shared(b)
    }
}

/// How [`CompletionQueue::wait`](super::CompletionQueue::wait) waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WaitMode {
    /// Busy-poll the CQ (lowest latency, one core busy).
    #[default]
    Poll,
    /// Sleep on the completion channel (`ibv_req_notify_cq` + poll(2) on its fd).
    Event,
}

/// Opcode of a successful completion (`enum ibv_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcOpcode {
    /// SEND or SEND_WITH_IMM finished.
    Send,
    /// RDMA WRITE (with or without immediate) finished.
    RdmaWrite,
    /// RDMA READ finished.
    RdmaRead,
    /// A SEND arrived in a posted receive.
    Recv,
    /// An RDMA WRITE_WITH_IMM arrived (consumed a posted receive).
    RecvRdmaWithImm,
    /// Anything else.
    Other(u32),
}

impl WcOpcode {
    pub(super) fn from_raw(v: u32) -> WcOpcode {
        match v {
            sys::IBV_WC_SEND => WcOpcode::Send,
            sys::IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
            sys::IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
            sys::IBV_WC_RECV => WcOpcode::Recv,
            sys::IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
            x => WcOpcode::Other(x),
        }
    }
}

/// `ibv_wc_status_str(3)`.
pub fn wc_status_str(status: u32) -> &'static str {
    // SAFETY: returns a pointer to a static string for any value.
    let p = unsafe { sys::ibv_wc_status_str(status) };
    if p.is_null() {
        return "unknown";
    }
    // SAFETY: non-null, NUL-terminated, static.
    unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("unknown")
}

/// A polled work completion, with the buffers the work request held.
#[derive(Debug)]
pub struct Completion {
    /// The caller's wr_id.
    pub wr_id: u64,
    /// `ibv_wc_status` (0 = success).
    pub status: u32,
    /// Provider error detail.
    pub vendor_err: u32,
    /// Opcode (meaningful only on success).
    pub opcode: WcOpcode,
    /// Bytes received (receives) or transferred.
    pub byte_len: u32,
    /// Immediate data, host order, if the peer sent any.
    pub imm: Option<u32>,
    /// QP number the work request was posted on.
    pub qp_num: u32,
    /// This work request's buffers, given back.
    pub bufs: Bufs,
    /// Earlier unsignaled work requests of the same send queue that this completion retired
    /// (they finished too), with their buffers.
    pub retired: Vec<Retired>,
    pub(super) op: &'static str,
}

/// An unsignaled work request retired by a later completion.
#[derive(Debug)]
pub struct Retired {
    /// The caller's wr_id.
    pub wr_id: u64,
    /// Its buffers.
    pub bufs: Bufs,
}

impl Completion {
    /// True if the work request succeeded.
    pub fn is_success(&self) -> bool {
        self.status == sys::IBV_WC_SUCCESS
    }

    /// The kind of work request that was posted ("SEND", "RDMA WRITE", "RECV", ...), known even
    /// when the completion is an error.
    pub fn op(&self) -> &'static str {
        self.op
    }

    /// `ibv_wc_status_str` of the status.
    pub fn status_str(&self) -> &'static str {
        wc_status_str(self.status)
    }

    /// `Ok(self)` on success, else [`Error::Completion`] (the buffers are dropped).
    pub fn result(self) -> Result<Completion> {
        if self.is_success() {
            Ok(self)
        } else {
            Err(self.to_error())
        }
    }

    /// The error this completion represents (meaningful when not successful).
    pub fn to_error(&self) -> Error {
        Error::Completion {
            op: self.op,
            wr_id: self.wr_id,
            status: self.status,
            status_str: self.status_str().to_string(),
            vendor_err: self.vendor_err,
        }
    }

    /// The first exclusive buffer of this work request (a receive has exactly one).
    #[inline(always)]
    pub fn take_local(&mut self) -> Option<LocalBuf> {
        if self.bufs.len() == 1 {
            return self.bufs.pop().and_then(Buf::into_local);
        }
        let i = self.bufs.iter().position(|b| matches!(b, Buf::Local(_)))?;
        self.bufs.remove(i).into_local()
    }

    /// This work request's exclusive buffers, in order (shared ones are dropped).
    pub fn into_local_bufs(self) -> Vec<LocalBuf> {
        self.bufs.into_iter().filter_map(Buf::into_local).collect()
    }

    /// The exclusive buffers of this and of every retired work request.
    pub fn into_all_local_bufs(self) -> Vec<LocalBuf> {
        let retired = self.retired.into_iter().flat_map(|r| r.bufs);
        self.bufs
            .into_iter()
            .chain(retired)
            .filter_map(Buf::into_local)
            .collect()
    }
}

/// `IBV_WC_REM_ACCESS_ERR`: the peer refused an RDMA access (bad rkey, rights, bounds).
pub const REM_ACCESS_ERR: u32 = sys::IBV_WC_REM_ACCESS_ERR;
/// `IBV_WC_WR_FLUSH_ERR`: flushed because the QP went to the error state.
pub const WR_FLUSH_ERR: u32 = sys::IBV_WC_WR_FLUSH_ERR;
