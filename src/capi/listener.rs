//! Listeners: `rdmaxfer_listen`, `rdmaxfer_listener_port`, `rdmaxfer_accept` (with the
//! configured deadline), the event-loop pair `rdmaxfer_listener_fd` /
//! `rdmaxfer_listener_try_accept`, `rdmaxfer_listener_shutdown` (from any thread) and
//! `rdmaxfer_listener_free`.

use std::ffi::{c_char, c_int};
use std::os::fd::AsRawFd as _;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use super::boundary::{self, out, CResult, Fail};
use super::config::{rdmaxfer_config, snapshot, Config};
use super::conn::{new_conn, rdmaxfer_conn, Role};
use super::handle::{self, free_handle, handle, impl_handle, into_handle, Slot};
use super::status::rdmaxfer_status;
use crate::error::Error;
use crate::xfer::endpoint::ShutdownHandle;
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
#[no_mangle]
pub extern "C" fn rdmaxfer_listen(
    cfg: *const rdmaxfer_config,
    addr: *const c_char,
    port: u16,
    out_listener: *mut *mut rdmaxfer_listener,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_listen", || {
        let cfg = snapshot(cfg)?;
        let addr = boundary::arg_str(addr, "addr")?;
        let o = out(out_listener, "out_listener")?;
        let port = cfg.listen_port(port);
        let server = Server::bind(addr, port, cfg.oob, &cfg.endpoint_options())?;
        let shut = server.shutdown_handle();
        let p = into_handle::<rdmaxfer_listener>(ListenerState { server, cfg });
        *handle::arg(p.cast_const(), "listener")?.shut() = Some(shut);
        o.set(p);
        Ok(())
    })
}

/// The port `listener` listens on (the one the system chose for `RDMAXFER_PORT_ANY`).
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
/// connection request is pending (then `rdmaxfer_listener_try_accept`). It belongs to the
/// listener: do not read, write or close it; it stays valid until `rdmaxfer_listener_free`
/// (take it out of the event loop first). Level-triggered: it stays readable until the
/// request is taken.
#[no_mangle]
pub extern "C" fn rdmaxfer_listener_fd(
    listener: *const rdmaxfer_listener,
    out_fd: *mut c_int,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_listener_fd", || {
        let l = handle(listener, "listener")?;
        let o = out(out_fd, "out_fd")?;
        o.set(l.server.fd()?.as_raw_fd());
        Ok(())
    })
}

/// Accepts a pending peer without waiting for one: `RDMAXFER_ERR_AGAIN` when none is pending
/// (wait for `rdmaxfer_listener_fd` to be readable). A peer that is pending is set up as
/// `rdmaxfer_accept` does, which takes one round trip of the handshake (at most the configured
/// timeout); a peer that fails its handshake gives that error and the listener stays usable.
#[no_mangle]
pub extern "C" fn rdmaxfer_listener_try_accept(
    listener: *mut rdmaxfer_listener,
    out_conn: *mut *mut rdmaxfer_conn,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_listener_try_accept", || {
        let mut l = handle(listener, "listener")?;
        let o = out(out_conn, "out_conn")?;
        let oob = matches!(l.server, Server::Oob(_));
        let incoming = match l.server.take(Some(Duration::ZERO)) {
            Err(Error::Timeout { .. }) => {
                return Err(Fail::new(
                    rdmaxfer_status::RDMAXFER_ERR_AGAIN,
                    "no connection request is pending",
                ))
            }
            r => r?,
        };
        let ep = incoming.finish_plain()?;
        o.set(new_conn(ep, Role::Server, oob, &l.cfg));
        Ok(())
    })
}

/// Shuts the listener down, from any thread, also while another thread is blocked in
/// `rdmaxfer_accept` on it: that call returns `RDMAXFER_ERR_SHUTDOWN` at once (within one
/// wake-up of its thread), as does every later accept. The listener still has to be freed;
/// connections accepted from it are not affected. Shutting down again changes nothing. (It
/// does not make `rdmaxfer_listener_fd` readable: an event loop that wants to be woken uses
/// its own descriptor.)
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
