//! Safe wrappers over libibverbs. With `cm`, `os` and `capi` (and the generated `sys`), the only
//! modules with `unsafe`.
//!
//! Ownership rule: memory the device may touch is never reachable from safe code at the same
//! time. Posted buffers live in their CQ's in-flight table until completion; peer-writable memory
//! ([`ExposedRegion`](crate::verbs::ExposedRegion)) is only ever copied, never borrowed.
#![allow(unsafe_code)]

pub mod cq;
pub mod device;
pub mod gid;
pub mod mr;
pub mod pd;
pub mod qp;
pub mod solo;
mod wr;

#[cfg(feature = "tokio")]
pub(crate) use cq::CqChannel;
pub use cq::{wc_status_str, Buf, Bufs, Completion, CompletionQueue, Retired, WaitMode, WcOpcode};
pub(crate) use cq::{Polled, RingDone, SleepLeft};
pub use device::{device_names, devices, Context, DeviceAttr, DeviceInfo, Mtu, PortAttr, PortInfo};
pub use gid::{select_gid, Gid, GidEntry, GidType};
pub use mr::{ExposedRegion, LocalBuf, RemoteAccess, RemoteRegion, RemoteSlice, SharedBuf};
pub use pd::ProtectionDomain;
pub use qp::{
    BufRequest, InitAttr, PostError, PostListError, QpCaps, QpState, QueuePair, RecvList, RtrAttr,
    RtsAttr, SendBatch, SendOp, SendRequest, Sge, SharedList, SharedPost,
};
pub use solo::SoloQueue;

/// The `tracing` target of the work-request trace: each send and receive posted and each
/// completion polled (with its QP, ids, opcode, immediate, length and status), at trace level.
/// The CLI turns it on with `RDMAXFER_TRACE_STREAMS=1`; off, each site costs a level check.
pub const TRACE_TARGET: &str = "rdmaxfer_wr";
