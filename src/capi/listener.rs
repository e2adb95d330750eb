//! Listeners: `rdmaxfer_listen`, `rdmaxfer_listener_port`, `rdmaxfer_accept` (with the
//! configured deadline), the event-loop pair `rdmaxfer_listener_fd` /
//! `rdmaxfer_listener_try_accept`, `rdmaxfer_listener_shutdown` (from any thread) and
//! `rdmaxfer_listener_free`.

use std::ffi::{c_char, c_int};
use std::os::fd::{AsFd as _, AsRawFd as _};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::boundary::{self, out, CResult, Fail};
use super::config::{for_connection, rdmaxfer_config, Config};
use super::conn::{new_conn, rdmaxfer_conn, Role};
use super::handle::{self, free_handle, handle, impl_handle, into_handle, Slot};
use super::status::rdmaxfer_status;
use crate::error::Error;
use crate::os::Epoll;
use crate::xfer::endpoint::{Accepting, ShutdownHandle};
use crate::xfer::session::Server;

/// A listening endpoint (RDMA CM or out-of-band TCP). Made by `rdmaxfer_listen`, freed by
/// `rdmaxfer_listener_free`.
pub struct rdmaxfer_listener {
    slot: Slot<ListenerState>,
    /// The shutdown handle of the listener in the slot, outside the state's lock:
    /// `rdmaxfer_listener_shutdown` runs while `rdmaxfer_accept` holds the state.
    shut: Mutex<Option<ShutdownHandle>>,
}

/// A listener's state.
pub struct ListenerState {
    server: Server,
    cfg: Config,
    /// Connections `rdmaxfer_listener_try_accept` has begun to accept (RDMA CM: answered;
    /// OOB: the TCP connection taken, its exchange going as bytes arrive), with when: a later
    /// call finishes each once its client completes it, or drops it after the configured
    /// timeout.
    accepting: Vec<(Accepting, Instant)>,
    /// What `rdmaxfer_listener_fd` gave out (made on its first call): readable when the
    /// listener or one of `accepting` is.
    ready: Option<Epoll>,
}

/// The most connections a listener accepts at once without blocking: past it, a new request
/// is refused as busy (a client that stalls its handshake holds one until the timeout).
const MAX_ACCEPTING: usize = 64;

impl ListenerState {
    /// Takes accept `i` out of `accepting` (and out of `ready`).
    fn settle(&mut self, i: usize) -> Accepting {
        let (a, _) = self.accepting.swap_remove(i);
        if let (Some(ready), Ok(fd)) = (&self.ready, a.fd()) {
            if let Err(e) = ready.remove(fd) {
                tracing::debug!("epoll_ctl(EPOLL_CTL_DEL) of an accept: {e}");
            }
        }
        a
    }
}

impl_handle!(rdmaxfer_listener, ListenerState, shut: Mutex::new(None));

impl rdmaxfer_listener {
    fn shut(&self) -> std::sync::MutexGuard<'_, Option<ShutdownHandle>> {
        // Only a clone or a store runs under this lock: nothing that can panic half-way.
        self.shut.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Listens on `addr` (an IP address, "0.0.0.0" for all) and `port`, with RDMA CM or the
/// out-of-band exchange as `cfg` says. `RDMAXFER_PORT_CONFIGURED` (0) listens on the configured
/// port (`rdmaxfer_config_set_port`), as `rdmaxfer_connect` connects to it; configure
/// `RDMAXFER_PORT_ANY` to let the system choose a free port (`rdmaxfer_listener_port` tells
/// which). The device, GID index and message size are checked now.
/// Returns: RDMAXFER_OK; the handle statuses of cfg; the pointer statuses of addr and out_listener;
/// RDMAXFER_ERR_INVALID_ARGUMENT for an addr that is not an IP address or an MTU set with RDMA CM;
/// the network statuses.
/// Blocks: no (it binds; it waits for no peer).
#[no_mangle]
pub extern "C" fn rdmaxfer_listen(
    cfg: *const rdmaxfer_config,
    addr: *const c_char,
    port: u16,
    out_listener: *mut *mut rdmaxfer_listener,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_listen", || {
        let cfg = for_connection(cfg)?;
        let addr = boundary::arg_str(addr, "addr")?;
        let o = out(out_listener, "out_listener")?;
        let port = cfg.listen_port(port);
        let server = Server::bind(addr, port, cfg.oob, &cfg.endpoint_options())?;
        let shut = server.shutdown_handle();
        let p = into_handle::<rdmaxfer_listener>(ListenerState {
            server,
            cfg,
            accepting: Vec::new(),
            ready: None,
        });
        *handle::arg(p.cast_const(), "listener")?.shut() = Some(shut);
        o.set(p);
        Ok(())
    })
}

/// The port `listener` listens on (the one the system chose for `RDMAXFER_PORT_ANY`).
/// Returns: RDMAXFER_OK; the handle statuses of listener; the pointer statuses of out_port.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_listener_port(
    listener: *const rdmaxfer_listener,
    out_port: *mut u16,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_listener_port", || {
        let l = handle(listener, "listener")?;
        out(out_port, "out_port")?.set(l.server.local_addr().port());
        Ok(())
    })
}

/// Waits for the next peer, at most the configured timeout (`rdmaxfer_config_set_timeout_ms`,
/// default 10 s: `RDMAXFER_ERR_TIMEOUT`, and the listener stays usable: call again to keep
/// waiting), and sets the connection up (each step within the timeout too). A listener shut
/// down before or during the wait (`rdmaxfer_listener_shutdown` or `rdmaxfer_listener_free`
/// from another thread) makes it return `RDMAXFER_ERR_SHUTDOWN` at once.
/// Returns: RDMAXFER_OK; the handle statuses of listener; the pointer statuses of out_conn;
/// RDMAXFER_ERR_TIMEOUT when no peer came; RDMAXFER_ERR_SHUTDOWN (above); the network statuses.
/// Blocks: yes: for a peer, at most the configured timeout, then each set-up step at most it too.
#[no_mangle]
pub extern "C" fn rdmaxfer_accept(
    listener: *mut rdmaxfer_listener,
    out_conn: *mut *mut rdmaxfer_conn,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_accept", || {
        let mut l = handle(listener, "listener")?;
        let o = out(out_conn, "out_conn")?;
        let oob = matches!(l.server, Server::Oob(_));
        let wait = l.cfg.timeout;
        let ep = l.server.accept_plain(Some(wait))?;
        o.set(new_conn(ep, Role::Server, oob, &l.cfg));
        Ok(())
    })
}

/// The descriptor to `poll`/`select`/epoll for the next peer (`POLLIN`): readable when a
/// connection request is pending, or a connection `rdmaxfer_listener_try_accept` began to
/// accept has an event (RDMA CM) or bytes to read or room to write (OOB): then call
/// `rdmaxfer_listener_try_accept`. It does not wake for a deadline: to drop stalled clients on
/// time, also call it when the configured timeout has passed. It belongs to the listener:
/// do not read, write or close it; it stays valid until `rdmaxfer_listener_free` (take it out
/// of the event loop first). Level-triggered: it stays readable until the event is taken.
/// Returns: RDMAXFER_OK; the handle statuses of listener; the pointer statuses of out_fd;
/// RDMAXFER_ERR_IO if the descriptor cannot be made.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_listener_fd(
    listener: *const rdmaxfer_listener,
    out_fd: *mut c_int,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_listener_fd", || {
        let mut l = handle(listener, "listener")?;
        let o = out(out_fd, "out_fd")?;
        if l.ready.is_none() {
            let io = |e| Error::io("epoll_create1/epoll_ctl (the listener's descriptor)", e);
            let ready = Epoll::new().map_err(io)?;
            ready.add(l.server.fd()?).map_err(io)?;
            for (a, _) in &l.accepting {
                ready.add(a.fd()?).map_err(io)?;
            }
            l.ready = Some(ready);
        }
        let fd = l.ready.as_ref().expect("made above").as_fd().as_raw_fd();
        o.set(fd);
        Ok(())
    })
}

fn again() -> Fail {
    Fail::new(
        rdmaxfer_status::RDMAXFER_ERR_AGAIN,
        "no connection is ready to accept",
    )
}

/// Accepts a peer without waiting: `RDMAXFER_ERR_AGAIN` when none is ready (wait for
/// `rdmaxfer_listener_fd` to be readable, then call again). It never blocks: a pending peer is
/// answered (RDMA CM) or its TCP connection taken (OOB, whose exchange of connection
/// parameters then goes as its bytes arrive), and left to complete across calls, so a client
/// that stalls its handshake holds nobody up. A call after the configured timeout drops a
/// client that has not completed it; past 64 under way at once, new peers are refused as busy
/// (over OOB: told so in place of the server's address, then closed). A peer whose handshake
/// fails gives that error and the listener stays usable.
/// Returns: RDMAXFER_OK; the handle statuses of listener; the pointer statuses of out_conn;
/// RDMAXFER_ERR_AGAIN when no peer is ready; RDMAXFER_ERR_SHUTDOWN once shut down; the network
/// statuses of a peer whose set-up failed.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_listener_try_accept(
    listener: *mut rdmaxfer_listener,
    out_conn: *mut *mut rdmaxfer_conn,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_listener_try_accept", || {
        let mut l = handle(listener, "listener")?;
        let o = out(out_conn, "out_conn")?;
        let oob = matches!(l.server, Server::Oob(_));
        // Accepts under way first: a client that completed, failed or ran out of time.
        let timeout = l.cfg.timeout;
        let mut i = 0;
        while i < l.accepting.len() {
            let (a, since) = &mut l.accepting[i];
            let r = a.try_finish();
            let late = since.elapsed() > timeout;
            match r {
                Ok(None) if !late => i += 1,
                Ok(None) => {
                    let a = l.settle(i);
                    tracing::debug!("dropping {a:?}: not completed within {timeout:?}");
                }
                Ok(Some(ep)) => {
                    l.settle(i);
                    o.set(new_conn(ep, Role::Server, oob, &l.cfg));
                    return Ok(());
                }
                Err(e) => {
                    l.settle(i);
                    return Err(e.into());
                }
            }
        }
        // Then new requests, answered without waiting for their clients.
        loop {
            let incoming = match l.server.take(Some(Duration::ZERO)) {
                Err(Error::Timeout { .. }) => return Err(again()),
                r => r?,
            };
            if l.accepting.len() >= MAX_ACCEPTING {
                incoming.refuse_busy(&format!(
                    "{MAX_ACCEPTING} connections are being set up: retry later"
                ));
                continue;
            }
            let mut a = incoming.start_accept()?;
            if let Some(ep) = a.try_finish()? {
                o.set(new_conn(ep, Role::Server, oob, &l.cfg));
                return Ok(());
            }
            if let Some(ready) = &l.ready {
                ready
                    .add(a.fd()?)
                    .map_err(|e| Error::io("epoll_ctl (the listener's descriptor)", e))?;
            }
            l.accepting.push((a, Instant::now()));
        }
    })
}

/// Shuts the listener down, from any thread, also while another thread is blocked in
/// `rdmaxfer_accept` on it: that call returns `RDMAXFER_ERR_SHUTDOWN` at once (within one
/// wake-up of its thread), as does every later accept. The listener still has to be freed;
/// connections accepted from it are not affected. Shutting down again changes nothing. (It
/// does not make `rdmaxfer_listener_fd` readable: an event loop that wants to be woken uses
/// its own descriptor.)
/// Returns: RDMAXFER_OK, also when already shut down; RDMAXFER_ERR_NULL_ARGUMENT (NULL),
/// RDMAXFER_ERR_INVALID_ARGUMENT (misaligned), RDMAXFER_ERR_INVALID_STATE (freed),
/// RDMAXFER_ERR_PANIC; never RDMAXFER_ERR_BUSY.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_listener_shutdown(
    listener: *const rdmaxfer_listener,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_listener_shutdown", || {
        shut_down(handle::arg(listener, "listener")?)
    })
}

fn shut_down(h: &'static rdmaxfer_listener) -> CResult<()> {
    let _inside = handle::enter(h)?;
    let shut = h.shut().clone();
    if let Some(s) = shut {
        s.shutdown();
    }
    Ok(())
}

/// Frees a listener (NULL: nothing); connections accepted from it stay usable. It is shut down
/// first, so an `rdmaxfer_accept` blocked in it on another thread returns
/// `RDMAXFER_ERR_SHUTDOWN` at once (and the listener is released when that call has returned).
/// Returns: nothing (NULL: a no-op; a misaligned or already freed listener: only the last error
/// message says so).
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_listener_free(listener: *mut rdmaxfer_listener) {
    boundary::run_or("rdmaxfer_listener_free", (), || {
        // A NULL or already freed listener is free_handle's to report.
        if let Ok(h) = handle::arg(listener.cast_const(), "listener") {
            let _ = shut_down(h);
        }
        Ok(())
    });
    free_handle("rdmaxfer_listener_free", listener);
}
