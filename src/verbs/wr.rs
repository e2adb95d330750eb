//! Work requests: scatter/gather elements, send requests and the `ibv_sge` lists posted by
//! [`QueuePair`](crate::verbs::QueuePair) (`ibv_post_send(3)`, `ibv_post_recv(3)`).

use std::ptr::NonNull;

use crate::error::{Error, Result};
use crate::sys;
use crate::verbs::cq::{Buf, Bufs};
use crate::verbs::mr::{LocalBuf, RemoteSlice};

/// One scatter/gather element: a buffer, or part of one.
#[derive(Debug)]
pub struct Sge {
    pub(crate) buf: Buf,
    pub(crate) off: usize,
    pub(crate) len: Option<usize>,
}

impl Sge {
    /// The whole buffer.
    pub fn new(buf: impl Into<Buf>) -> Sge {
        Sge {
            buf: buf.into(),
            off: 0,
            len: None,
        }
    }

    /// Only `len` bytes from `off` (checked when posted).
    pub fn range(buf: impl Into<Buf>, off: usize, len: usize) -> Sge {
        Sge {
            buf: buf.into(),
            off,
            len: Some(len),
        }
    }

    pub(crate) fn length(&self) -> usize {
        self.len
            .unwrap_or(self.buf.as_slice().len().saturating_sub(self.off))
    }
}

/// What a send-queue work request does.
#[derive(Clone, Copy, Debug)]
pub enum SendOp {
    /// SEND.
    Send,
    /// SEND_WITH_IMM.
    SendWithImm(u32),
    /// RDMA WRITE.
    Write(RemoteSlice),
    /// RDMA WRITE_WITH_IMM.
    WriteWithImm(RemoteSlice, u32),
    /// RDMA READ (local buffers must be exclusive).
    Read(RemoteSlice),
}

impl SendOp {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            SendOp::Send => "SEND",
            SendOp::SendWithImm(_) => "SEND_WITH_IMM",
            SendOp::Write(_) => "RDMA WRITE",
            SendOp::WriteWithImm(..) => "RDMA WRITE_WITH_IMM",
            SendOp::Read(_) => "RDMA READ",
        }
    }
}

/// The SGEs of one work request: inline for up to two (no allocation per message).
pub(crate) type SgeVec = smallvec::SmallVec<[Sge; 2]>;

/// A send-queue work request (`struct ibv_send_wr`).
#[derive(Debug)]
pub struct SendRequest {
    pub(crate) wr_id: u64,
    pub(crate) op: SendOp,
    pub(crate) sges: SgeVec,
    pub(crate) signaled: bool,
    pub(crate) inline: bool,
}

/// A send-queue work request over `len` bytes of one [`LocalBuf`] from `off`: what
/// [`QueuePair::post_send_buf`](crate::verbs::QueuePair::post_send_buf) posts without building
/// an SGE list (the per-message path). Signaled and not inline unless told.
#[derive(Debug)]
pub struct BufRequest {
    pub(crate) head: WrHead,
    pub(crate) buf: LocalBuf,
    pub(crate) off: usize,
    pub(crate) len: usize,
}

impl BufRequest {
    /// A work request of kind `op` over `buf[off..off + len]` (checked when posted).
    #[inline(always)]
    pub fn new(wr_id: u64, op: SendOp, buf: LocalBuf, off: usize, len: usize) -> BufRequest {
        BufRequest {
            head: WrHead {
                wr_id,
                op,
                signaled: true,
                inline: false,
            },
            buf,
            off,
            len,
        }
    }

    /// Whether a successful completion is generated (`IBV_SEND_SIGNALED`; default yes).
    #[inline(always)]
    pub fn signaled(mut self, signaled: bool) -> BufRequest {
        self.head.signaled = signaled;
        self
    }

    /// Whether the data goes inline (`IBV_SEND_INLINE`; default no): small sends that fit the
    /// QP's max_inline_data.
    #[inline(always)]
    pub fn inline(mut self, inline: bool) -> BufRequest {
        self.head.inline = inline;
        self
    }
}

/// What a send work request is, besides its SGEs: the caller's id, the opcode and its flags.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WrHead {
    pub(crate) wr_id: u64,
    pub(crate) op: SendOp,
    pub(crate) signaled: bool,
    pub(crate) inline: bool,
}

impl SendRequest {
    /// A work request of kind `op` over `sges`.
    pub fn new(wr_id: u64, op: SendOp, sges: impl IntoIterator<Item = Sge>) -> SendRequest {
        SendRequest {
            wr_id,
            op,
            sges: sges.into_iter().collect(),
            signaled: true,
            inline: false,
        }
    }

    /// SEND.
    pub fn send(wr_id: u64, sges: impl IntoIterator<Item = Sge>) -> SendRequest {
        Self::new(wr_id, SendOp::Send, sges)
    }

    /// Don't generate a completion on success (its buffers come back with the next signaled one).
    pub fn unsignaled(mut self) -> SendRequest {
        self.signaled = false;
        self
    }

    /// Send the data inline (small sends; must fit the QP's max_inline_data).
    pub fn inline(mut self) -> SendRequest {
        self.inline = true;
        self
    }

    /// The caller's wr_id.
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }

    /// What the work request does.
    pub fn op(&self) -> SendOp {
        self.op
    }

    /// True unless [`unsignaled`](Self::unsignaled) was called.
    pub fn is_signaled(&self) -> bool {
        self.signaled
    }

    /// The buffers back (a request that will not be posted).
    pub fn into_bufs(self) -> Bufs {
        self.sges.into_iter().map(|s| s.buf).collect()
    }
}

/// A post that failed: the error and the buffers, given back.
#[derive(Debug)]
pub struct PostError {
    /// What went wrong.
    pub error: Error,
    /// The work request's buffers.
    pub bufs: Bufs,
}

impl std::fmt::Display for PostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for PostError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<PostError> for Error {
    fn from(e: PostError) -> Error {
        e.error
    }
}

/// The `ibv_sge` array of one work request: on the stack for the usual one to four entries (the
/// post path runs once per message and should not allocate for it).
pub(crate) enum SgList {
    Stack([sys::ibv_sge; 4], usize),
    Heap(Vec<sys::ibv_sge>),
}

impl SgList {
    pub(crate) fn with_capacity(n: usize) -> SgList {
        if n <= 4 {
            SgList::Stack(Default::default(), 0)
        } else {
            SgList::Heap(Vec::with_capacity(n))
        }
    }

    pub(crate) fn push(&mut self, sge: sys::ibv_sge) {
        match self {
            SgList::Stack(a, n) if *n < a.len() => {
                a[*n] = sge;
                *n += 1;
            }
            SgList::Stack(a, n) => {
                let mut v = a[..*n].to_vec();
                v.push(sge);
                *self = SgList::Heap(v);
            }
            SgList::Heap(v) => v.push(sge),
        }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [sys::ibv_sge] {
        match self {
            SgList::Stack(a, n) => &mut a[..*n],
            SgList::Heap(v) => v,
        }
    }
}

/// The `ibv_sge` for `len` bytes of `buf` from `off`, bounds-checked; `buf` must be registered
/// in the QP's context `ctx`.
#[inline(always)]
pub(crate) fn one_sge(
    ctx: NonNull<sys::ibv_context>,
    op: &'static str,
    buf: &LocalBuf,
    off: usize,
    len: usize,
) -> Result<sys::ibv_sge> {
    if buf.ctx() != ctx.as_ptr() {
        return Err(context_mismatch(op));
    }
    if off.checked_add(len).is_none_or(|e| e > buf.len()) {
        return Err(Error::InvalidArgument(format!(
            "SGE range {off}+{len} is outside its {}-byte buffer",
            buf.len()
        )));
    }
    let length = u32::try_from(len)
        .map_err(|_| Error::InvalidArgument(format!("SGE of {len} bytes is too large")))?;
    Ok(sys::ibv_sge {
        addr: buf.addr() + off as u64,
        length,
        lkey: buf.lkey(),
    })
}

/// A buffer of another device context was posted (out of line: the per-message path stays short).
#[cold]
#[inline(never)]
pub(crate) fn context_mismatch(op: &'static str) -> Error {
    Error::ContextMismatch {
        op,
        what: "a posted buffer (its registration)",
        with: "queue pair",
    }
}
