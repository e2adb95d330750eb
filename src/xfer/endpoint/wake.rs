//! Shutting a listener down from another thread: [`ShutdownHandle`]. A listener waits with
//! `poll(2)` on its own descriptor (the CM event channel, or the TCP socket) and on the read
//! end of a socket pair; [`ShutdownHandle::shutdown`] sets a flag and writes one byte to the
//! other end, which is never read, so every wait from then on returns at once.

use std::io::Write as _;
use std::os::fd::{AsFd as _, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::os;

/// The shared state of a listener and its [`ShutdownHandle`]s.
#[derive(Debug)]
pub(super) struct Wake {
    down: AtomicBool,
    tx: UnixStream,
    rx: UnixStream,
}

impl Wake {
    pub(super) fn new() -> Result<Arc<Wake>> {
        let (tx, rx) =
            UnixStream::pair().map_err(|e| Error::io("socketpair (listener wake-up)", e))?;
        for s in [&tx, &rx] {
            s.set_nonblocking(true)
                .map_err(|e| Error::io("setting the listener wake-up non-blocking", e))?;
        }
        Ok(Arc::new(Wake {
            down: AtomicBool::new(false),
            tx,
            rx,
        }))
    }

    /// [`Error::Shutdown`] naming `what` once shut down.
    pub(super) fn check(&self, what: impl FnOnce() -> String) -> Result<()> {
        if self.down.load(Ordering::SeqCst) {
            return Err(Error::Shutdown { what: what() });
        }
        Ok(())
    }

    /// Waits until `fd` is readable or the listener is shut down, at most `left` (`None`:
    /// forever). Returns without saying which: the caller looks again.
    pub(super) fn wait(&self, fd: BorrowedFd<'_>, left: Option<Duration>) -> Result<()> {
        os::wait_readable_any(&[fd, self.rx.as_fd()], left)
            .map_err(|e| Error::io("poll(listener)", e))?;
        Ok(())
    }
}

/// Shuts a listener down from any thread (made by `Listener::shutdown_handle` and
/// `OobListener::shutdown_handle`): a wait for the next connection that is blocked in it, and
/// every later one, returns [`Error::Shutdown`] (the blocked one within one `poll(2)` wake-up).
/// Connections already taken are not affected. There is no undo.
#[derive(Clone, Debug)]
pub struct ShutdownHandle(pub(super) Arc<Wake>);

impl ShutdownHandle {
    /// Shuts the listener down (again: nothing more happens).
    pub fn shutdown(&self) {
        if !self.0.down.swap(true, Ordering::SeqCst) {
            // One byte that nobody reads: the read end stays readable from now on. The pair's
            // buffer is empty, so this cannot block; a failure would leave only the flag, seen
            // at the next look (`check`), so it is not fatal.
            if let Err(e) = (&self.0.tx).write(&[1]) {
                tracing::warn!("waking the listener: {e}");
            }
        }
    }

    /// True once [`shutdown`](Self::shutdown) was called.
    pub fn is_shut_down(&self) -> bool {
        self.0.down.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn shutdown_wakes_a_wait_and_stays() {
        let w = Wake::new().unwrap();
        let h = ShutdownHandle(w.clone());
        let (idle, _peer) = UnixStream::pair().unwrap();
        assert!(w.check(|| "x".into()).is_ok());
        assert!(!h.is_shut_down());
        let t = std::thread::spawn({
            let h = h.clone();
            move || h.shutdown()
        });
        // Without the shutdown this would wait forever.
        w.wait(idle.as_fd(), None).unwrap();
        t.join().unwrap();
        assert!(h.is_shut_down());
        let e = w.check(|| "the listener".into()).unwrap_err();
        assert!(matches!(e, Error::Shutdown { .. }), "{e}");
        assert_eq!(e.to_string(), "the listener was shut down");
        // Still readable: a second wait returns at once although it has no deadline.
        h.shutdown();
        let t0 = Instant::now();
        w.wait(idle.as_fd(), Some(Duration::from_secs(60))).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(60));
    }
}
