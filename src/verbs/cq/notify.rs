//! Completion-channel hooks for event loops: the channel's file descriptor, and arming it
//! without blocking (`ibv_req_notify_cq(3)`, `ibv_get_cq_event(3)` on the non-blocking fd,
//! `ibv_ack_cq_events(3)`).
//!
//! # Re-arming rules
//! `ibv_req_notify_cq` arms the CQ for **one** event: the next completion added after it makes
//! the channel fd readable once. Completions that were already in the CQ when it was armed
//! raise nothing. So an event loop must:
//! 1. poll the CQ until it is empty (a `try_*` call that says "would block");
//! 2. [`arm`](CompletionQueue::arm) (this reads and acknowledges every event already on the
//!    channel, then re-arms);
//! 3. poll once more: a completion that landed between 1 and 2 raised no event;
//! 4. only then wait for the fd to be readable, and go back to 1.
//!
//! Events are read and acknowledged at once, so `ibv_destroy_cq` never waits for one.

use std::os::fd::BorrowedFd;

use crate::error::{Error, Result};
use crate::sys;

use super::CompletionQueue;

impl CompletionQueue {
    /// A descriptor that is readable while the completion channel is (an armed CQ got a
    /// completion), or `None` for a CQ made in [`WaitMode::Poll`](super::WaitMode::Poll),
    /// which has no channel. It is an epoll instance watching the channel (made on the first
    /// call, open as long as the CQ), never the channel's own descriptor, whose `read(2)` would
    /// take events that `ibv_destroy_cq(3)` then waits for forever.
    pub fn channel_fd(&self) -> Result<Option<BorrowedFd<'_>>> {
        let Some(fd) = self.raw_channel_fd() else {
            return Ok(None);
        };
        let ready = self.inner.ready.get(fd).map_err(|e| {
            Error::io(
                "epoll_create1 (a completion channel's readiness descriptor)",
                e,
            )
        })?;
        Ok(Some(ready))
    }

    /// The completion channel's own descriptor (non-blocking), for the crate's own waits only.
    pub(crate) fn raw_channel_fd(&self) -> Option<BorrowedFd<'_>> {
        let ch = self.inner.channel.as_ref()?;
        // SAFETY: the channel is valid while the CQ lives (it is destroyed after the CQ).
        let fd = unsafe { (*ch.0.as_ptr()).fd };
        // SAFETY: the fd belongs to the channel, which is closed only when the CQ (borrowed
        // for the returned lifetime) is dropped (ibv_destroy_comp_channel(3)).
        Some(unsafe { BorrowedFd::borrow_raw(fd) })
    }

    /// Reads and acknowledges every event already on the completion channel (never blocking),
    /// then asks for an event on the next completion (`ibv_req_notify_cq(3)`, all
    /// completions). Returns how many events were read. See the module docs for the order of
    /// polls and waits that loses no completion. Refused for a CQ without a channel.
    pub fn arm(&self) -> Result<usize> {
        let Some(ch) = self.inner.channel.as_ref() else {
            return Err(Error::InvalidArgument(
                "this completion queue has no completion channel (made in poll mode)".into(),
            ));
        };
        let mut n = 0;
        loop {
            let mut cq: *mut sys::ibv_cq = std::ptr::null_mut();
            let mut ctx: *mut libc::c_void = std::ptr::null_mut();
            // SAFETY: valid channel and out-pointers; its fd is non-blocking (set in `create`),
            // so this returns -1 (EAGAIN) instead of waiting when no event is queued.
            let rc = unsafe { sys::ibv_get_cq_event(ch.0.as_ptr(), &mut cq, &mut ctx) };
            if rc != 0 {
                break;
            }
            // SAFETY: the channel serves only this CQ, so `cq` is it; acked at once so
            // ibv_destroy_cq never waits for an unacked event (ibv_get_cq_event(3)).
            unsafe { sys::ibv_ack_cq_events(cq, 1) };
            n += 1;
        }
        self.note_foreign_arm();
        // SAFETY: valid CQ (alive while `self` is).
        let rc = unsafe { sys::shim_ibv_req_notify_cq(self.as_ptr(), 0) };
        if rc != 0 {
            return Err(Error::verb("ibv_req_notify_cq", rc));
        }
        Ok(n)
    }
}

/// A completion queue's channel, kept open by a handle to the CQ: the owner of the
/// descriptor for the crate's own reactor registrations (`aio`). Crate-private, so the channel's
/// own descriptor never reaches safe code.
#[cfg(feature = "tokio")]
#[derive(Clone)]
pub(crate) struct CqChannel(CompletionQueue);

#[cfg(feature = "tokio")]
impl CompletionQueue {
    /// The CQ's completion channel with a handle that keeps it open, or `None` in poll mode.
    pub(crate) fn channel(&self) -> Option<CqChannel> {
        self.inner.channel.as_ref()?;
        Some(CqChannel(self.clone()))
    }
}

#[cfg(feature = "tokio")]
impl CqChannel {
    /// Registers the channel with the current tokio runtime's reactor, for readability.
    pub(crate) fn register(self) -> std::io::Result<tokio::io::unix::AsyncFd<CqChannel>> {
        // SAFETY: register_with_interest's contract (fd open and the same while registered):
        // the AsyncFd owns `self`, whose CQ handle keeps the CQ's one channel open till dropped.
        unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(self, tokio::io::Interest::READABLE)
        }
        .map_err(std::io::Error::from)
    }
}

#[cfg(feature = "tokio")]
impl std::os::fd::AsRawFd for CqChannel {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0
            .raw_channel_fd()
            .expect("a CqChannel is made only for a CQ with a channel")
            .as_raw_fd()
    }
}
