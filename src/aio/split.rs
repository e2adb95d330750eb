//! [`AsyncEndpoint::split`]: a send half and a receive half of one connection, for two tasks
//! at once (one sending while the other receives), as `tokio::net::TcpStream::into_split`.
//!
//! Both halves share the endpoint behind a mutex held only for its non-blocking `try_*` calls,
//! and both wait on its completion channel. A call that takes completions may take the other
//! half's too (a message arrived, a credit or a send buffer came back), so a half that took
//! any, or did its step, wakes the other, which then looks again.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

use crate::cm::CmChannel;
use crate::error::{Error, Result};
use crate::verbs::CqChannel;
use crate::xfer::endpoint::{Endpoint, Message};

use super::{readable, AsyncEndpoint};

/// What the halves share. The channels are declared before the endpoint: dropped first, as
/// in [`AsyncEndpoint`].
struct Shared {
    cq: AsyncFd<CqChannel>,
    cm: Option<AsyncFd<CmChannel>>,
    ep: Mutex<Endpoint>,
    /// Raised by a half that took completions or did its step.
    moved: Notify,
    next_wr: u64,
}

/// The sending half of a split [`AsyncEndpoint`].
pub struct SendHalf(Arc<Shared>);

/// The receiving half of a split [`AsyncEndpoint`].
pub struct RecvHalf(Arc<Shared>);

impl std::fmt::Debug for SendHalf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SendHalf").field(&self.0.ep).finish()
    }
}

impl std::fmt::Debug for RecvHalf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RecvHalf").field(&self.0.ep).finish()
    }
}

fn lock(m: &Mutex<Endpoint>) -> MutexGuard<'_, Endpoint> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl AsyncEndpoint {
    /// Splits the endpoint into a half that sends and a half that receives, which two tasks
    /// may use at once; [`reunite`](SendHalf::reunite) puts them back together. Each half's
    /// calls are cancel-safe as the endpoint's.
    pub fn split(self) -> (SendHalf, RecvHalf) {
        let AsyncEndpoint {
            cq,
            cm,
            ep,
            next_wr,
        } = self;
        let shared = Arc::new(Shared {
            cq,
            cm,
            ep: Mutex::new(ep),
            moved: Notify::new(),
            next_wr,
        });
        (SendHalf(shared.clone()), RecvHalf(shared))
    }
}

impl Shared {
    /// Runs `f` on the endpoint until it does not fail with
    /// [`WouldBlock`](crate::Error::WouldBlock), waiting on the channels and on the other
    /// half in between.
    async fn drive<R>(&self, mut f: impl FnMut(&mut Endpoint) -> Result<R>) -> Result<R> {
        loop {
            let woken = {
                let mut ep = lock(&self.ep);
                let mut took = ep.try_progress()?;
                let mut r = f(&mut ep);
                if r.as_ref().is_err_and(Error::is_would_block) {
                    ep.arm()?;
                    // A completion that came before the arm raised no event: look again.
                    took |= ep.try_progress()?;
                    r = f(&mut ep);
                }
                let done = !r.as_ref().is_err_and(Error::is_would_block);
                if took || done {
                    self.moved.notify_waiters();
                }
                if done {
                    return r;
                }
                // Listening before the lock goes: the other half moves only under it.
                let woken = self.moved.notified();
                drop(ep);
                woken
            };
            tokio::pin!(woken);
            match &self.cm {
                Some(cm) => tokio::select! {
                    r = readable(&self.cq) => r?,
                    r = readable(cm) => r?,
                    () = &mut woken => {}
                },
                None => tokio::select! {
                    r = readable(&self.cq) => r?,
                    () = &mut woken => {}
                },
            }
        }
    }
}

impl SendHalf {
    /// Sends `data` as one message (see [`AsyncEndpoint::send`]; cancel-safe).
    pub async fn send(&mut self, data: &[u8]) -> Result<()> {
        self.0.drive(|ep| ep.try_send(data)).await
    }

    /// Sends a message of `len` bytes that `fill` writes (see [`AsyncEndpoint::send_with`];
    /// cancel-safe).
    pub async fn send_with(&mut self, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<()> {
        let mut fill = Some(fill);
        self.0
            .drive(|ep| ep.try_send_with(len, |b| fill.take().expect("called once")(b)))
            .await
    }

    /// Waits until every message sent so far has completed (see [`AsyncEndpoint::flush`]).
    pub async fn flush(&mut self) -> Result<()> {
        self.0.drive(Endpoint::try_flush).await
    }

    /// Puts the halves of one endpoint back together; two halves of different endpoints are
    /// refused (and dropped).
    pub fn reunite(self, other: RecvHalf) -> Result<AsyncEndpoint> {
        if !Arc::ptr_eq(&self.0, &other.0) {
            return Err(Error::InvalidArgument(
                "these halves come from two different endpoints".into(),
            ));
        }
        drop(other);
        let shared = Arc::into_inner(self.0)
            .ok_or_else(|| Error::InvalidArgument("the other half is still in use".into()))?;
        let Shared {
            cq,
            cm,
            ep,
            next_wr,
            ..
        } = shared;
        Ok(AsyncEndpoint {
            cq,
            cm,
            ep: ep.into_inner().unwrap_or_else(|p| p.into_inner()),
            next_wr,
        })
    }
}

impl RecvHalf {
    /// Waits for the next message and returns a copy of its payload (see
    /// [`AsyncEndpoint::recv`]; cancel-safe).
    pub async fn recv(&mut self) -> Result<Vec<u8>> {
        self.0.drive(Endpoint::try_recv).await
    }

    /// Waits for the next message and lends it to `f` (see [`AsyncEndpoint::recv_with`];
    /// cancel-safe).
    pub async fn recv_with<R>(&mut self, f: impl FnOnce(Message<'_>) -> R) -> Result<R> {
        let mut f = Some(f);
        self.0
            .drive(|ep| ep.try_recv_with(|m| f.take().expect("called once")(m)))
            .await
    }
}
