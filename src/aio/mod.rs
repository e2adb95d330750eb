//! Async rdmaxfer on tokio (cargo feature `tokio`): connections, messages, one-sided RDMA and
//! file transfer as futures, for servers that serve many peers from one runtime thread.
//!
//! Built on the non-blocking calls of [`Endpoint`](crate::xfer::endpoint::Endpoint) (its
//! `try_*` methods and descriptors): the completion channel and the RDMA CM event channels
//! are registered with tokio's reactor ([`tokio::io::unix::AsyncFd`], each owning a handle of
//! the CQ or CM id that keeps its descriptor open; the descriptors themselves stay inside the
//! crate: `docs/soundness.md`, "Descriptors"), and a future waits
//! only when a `try_*` call would block, following the re-arming rules of the non-blocking
//! API. Endpoints made here use [`WaitMode::Event`](crate::verbs::WaitMode::Event).
//!
//! Needs a tokio runtime with I/O enabled (`Builder::enable_io` or `enable_all`); a
//! current-thread runtime is enough.
//!
//! # Cancel safety
//! Dropping any future of this module is sound: memory the device may touch is owned by the
//! queue from the post until its completion (or the queue pair's flush when the endpoint is
//! dropped), never by the future. In detail:
//! - [`AsyncEndpoint::send`] and [`AsyncEndpoint::recv`] either do their whole step or
//!   nothing: dropped before completing, no message was sent or taken (cancel-safe in
//!   `tokio::select!`).
//! - The halves of a [split](crate::aio::AsyncEndpoint::split) endpoint
//!   ([`SendHalf`](crate::aio::SendHalf), [`RecvHalf`](crate::aio::RecvHalf)) are
//!   as cancel-safe as the endpoint's own calls: one task may send while another receives.
//! - [`AsyncEndpoint::write`] / [`AsyncEndpoint::read`] take the registered buffer **by
//!   value**: while the future lives it cannot be touched (a borrow would end with the future
//!   and let the device write into memory the program uses again). Dropped after the post, the
//!   buffer stays in the queue and is freed only after its completion (which later calls
//!   discard) or the queue's flush.
//! - Accepting or connecting futures dropped half-way abandon the peer; the CM id, QP and
//!   buffers are torn down in the usual order.
//! - [`AsyncEndpoint::send_files`] / [`AsyncEndpoint::receive_files`] run the file transfer on
//!   the caller's task (no thread of tokio's blocking pool): dropping their future ends the
//!   session where it stands, with the endpoint. Nothing that was not verified whole is
//!   committed: a file being received is dropped unfinished (its temporary file removed), and
//!   the worker threads that read or write chunks finish the one they hold and end.
//!
//! Dropping an endpoint (any endpoint) moves its queue pair to the error state and destroys it
//! (`ibv_destroy_qp(3)`: the device is then done with every posted buffer) before the buffers go
//! with its completion queue's table: a few system calls on the dropping thread, no wait for
//! completions.
//!
//! [`AsyncEndpoint::send`]: crate::aio::AsyncEndpoint::send
//! [`AsyncEndpoint::recv`]: crate::aio::AsyncEndpoint::recv
//! [`AsyncEndpoint::write`]: crate::aio::AsyncEndpoint::write
//! [`AsyncEndpoint::read`]: crate::aio::AsyncEndpoint::read
//! [`AsyncEndpoint::send_files`]: crate::aio::AsyncEndpoint::send_files
//! [`AsyncEndpoint::receive_files`]: crate::aio::AsyncEndpoint::receive_files
#![forbid(unsafe_code)]

mod endpoint;
mod file;
mod link;
mod listen;
mod rw;
mod split;

use std::os::fd::AsRawFd;

use tokio::io::unix::AsyncFd;

use crate::cm::CmId;
use crate::error::{Error, Result};
use crate::xfer::endpoint::Endpoint;

pub use endpoint::AsyncEndpoint;
pub use file::FilesResult;
pub use listen::{AsyncListener, AsyncPending};
pub use split::{RecvHalf, SendHalf};

/// What registering a channel with the reactor fails with.
pub(crate) fn reg_err(e: std::io::Error) -> Error {
    Error::io("registering an RDMA channel with the tokio reactor", e)
}

/// Takes `step` (a CM set-up's `try_finish`) whenever the id's channel is readable, until it
/// gives the endpoint; then registers that.
pub(crate) async fn established(
    id: CmId,
    mut step: impl FnMut() -> Result<Option<Endpoint>>,
) -> Result<AsyncEndpoint> {
    let fd = id.register().map_err(reg_err)?;
    loop {
        if let Some(ep) = step()? {
            // The endpoint registers the same channel again (one registration per fd).
            drop(fd);
            return AsyncEndpoint::new(ep);
        }
        readable(&fd).await?;
    }
}

/// Waits until `fd` is readable and clears its readiness (the caller then takes what is there
/// with a `try_*` call, and, for a completion channel, re-arms before waiting again).
pub(crate) async fn readable<T: AsRawFd>(fd: &AsyncFd<T>) -> Result<()> {
    let mut g = fd
        .readable()
        .await
        .map_err(|e| Error::io("waiting for an RDMA channel", e))?;
    g.clear_ready();
    Ok(())
}
