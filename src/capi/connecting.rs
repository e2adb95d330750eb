//! A connect that never blocks: `rdmaxfer_connect_start`, then `rdmaxfer_connecting_fd` in an
//! event loop and `rdmaxfer_connecting_try_finish` whenever it is readable (RDMA CM; the Rust
//! side is [`Connecting`]).

use std::ffi::{c_char, c_int};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd as _;

use super::boundary::{self, out, Fail};
use super::config::{for_connection, rdmaxfer_config, Config};
use super::conn::{new_conn, rdmaxfer_conn, Role};
use super::handle::{free_handle, handle, impl_handle, into_handle, Slot};
use super::status::rdmaxfer_status;
use crate::xfer::endpoint::Connecting;

/// A connect under way (Rust side): `None` once it has ended (connected or failed).
pub struct Dialing {
    connecting: Option<Connecting>,
    cfg: Config,
    host: String,
    port: u16,
}

/// A connect under way. Made by `rdmaxfer_connect_start`, freed by `rdmaxfer_connecting_free`
/// (which abandons a connect not yet finished).
pub struct rdmaxfer_connecting {
    slot: Slot<Dialing>,
}

impl_handle!(rdmaxfer_connecting, Dialing);

/// Starts connecting to `host`, a numeric IPv4 or IPv6 address (a name would need a DNS lookup,
/// which blocks: resolve it first, or use `rdmaxfer_connect`), at `port` (as for
/// `rdmaxfer_connect`), and returns at once. RDMA CM only (a configuration with
/// `RDMAXFER_TRANSPORT_OOB`: `RDMAXFER_ERR_INVALID_ARGUMENT`). Then wait for
/// `rdmaxfer_connecting_fd` to be readable and call `rdmaxfer_connecting_try_finish`, until it
/// gives the connection or an error. The configured timeout does not apply to the steps: the
/// event loop decides how long to wait. `RDMAXFER_ERR_INVALID_ARGUMENT` for a name, OOB, an
/// MTU set or `RDMAXFER_PORT_ANY`; `RDMAXFER_ERR_NO_DEVICE`, `_DEVICE_NOT_FOUND` or
/// `_VERBS` when it cannot start (no device, or `rdma_create_id` or `rdma_resolve_addr`
/// refused); what else a connect may fail with comes from `rdmaxfer_connecting_try_finish`.
/// Returns: RDMAXFER_OK; the handle statuses of cfg; the pointer statuses of host and
/// out_connecting; RDMAXFER_ERR_INVALID_ARGUMENT, RDMAXFER_ERR_NO_DEVICE,
/// RDMAXFER_ERR_DEVICE_NOT_FOUND and RDMAXFER_ERR_VERBS as above.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_connect_start(
    cfg: *const rdmaxfer_config,
    host: *const c_char,
    port: u16,
    out_connecting: *mut *mut rdmaxfer_connecting,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_connect_start", || {
        let cfg = for_connection(cfg)?;
        let host = boundary::arg_str(host, "host")?;
        let o = out(out_connecting, "out_connecting")?;
        if cfg.oob {
            return Err(Fail::invalid(
                "a non-blocking connect is RDMA CM only: the configuration's transport is \
                 RDMAXFER_TRANSPORT_OOB (use rdmaxfer_connect)",
            ));
        }
        let ip: IpAddr = host.parse().map_err(|_| {
            Fail::invalid(format!(
                "host {host:?} is not a numeric address (resolving a name would block: \
                 resolve it first, or use rdmaxfer_connect)"
            ))
        })?;
        let port = cfg.connect_port(port)?;
        let connecting = Connecting::start(SocketAddr::new(ip, port), &cfg.endpoint_options())?;
        o.set(into_handle::<rdmaxfer_connecting>(Dialing {
            connecting: Some(connecting),
            cfg,
            host: host.to_string(),
            port,
        }));
        Ok(())
    })
}

/// The descriptor to `poll`/`select`/epoll for the connect's next step (`POLLIN`). It belongs
/// to the connect: do not read, write or close it; it is valid until
/// `rdmaxfer_connecting_free` and, once connected, no longer says anything (the connection has
/// its own, `rdmaxfer_conn_fd`). `RDMAXFER_ERR_INVALID_STATE` once the connect has ended.
/// Returns: RDMAXFER_OK; the handle statuses of connecting; the pointer statuses of out_fd;
/// RDMAXFER_ERR_INVALID_STATE also once the connect has ended; RDMAXFER_ERR_IO if the descriptor
/// cannot be made.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_connecting_fd(
    connecting: *const rdmaxfer_connecting,
    out_fd: *mut c_int,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_connecting_fd", || {
        let d = handle(connecting, "connecting")?;
        let o = out(out_fd, "out_fd")?;
        let c = d
            .connecting
            .as_ref()
            .ok_or_else(|| Fail::state("the connect has ended"))?;
        o.set(c.fd()?.as_raw_fd());
        Ok(())
    })
}

/// Takes every step of the connect whose event has come, without waiting: `RDMAXFER_OK` with
/// the connection in `*out_conn` once connected (then free the `rdmaxfer_connecting`);
/// `RDMAXFER_ERR_AGAIN` while it is under way (wait for `rdmaxfer_connecting_fd`); another
/// status when it failed as `rdmaxfer_connect` would (refused: `RDMAXFER_ERR_CONNECTION` or
/// `RDMAXFER_ERR_REFUSED`, unreachable, ...). After either end, `RDMAXFER_ERR_INVALID_STATE`.
/// Returns: RDMAXFER_OK; the handle statuses of connecting; the pointer statuses of out_conn;
/// RDMAXFER_ERR_AGAIN while the connect is under way; RDMAXFER_ERR_INVALID_STATE also after either
/// end; RDMAXFER_ERR_REFUSED when the server refused it (busy, another version); the network
/// statuses.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_connecting_try_finish(
    connecting: *mut rdmaxfer_connecting,
    out_conn: *mut *mut rdmaxfer_conn,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_connecting_try_finish", || {
        let mut d = handle(connecting, "connecting")?;
        let o = out(out_conn, "out_conn")?;
        let c = d
            .connecting
            .as_mut()
            .ok_or_else(|| Fail::state("the connect has ended"))?;
        let ep = match c.try_finish() {
            Ok(Some(ep)) => ep,
            Ok(None) => {
                return Err(Fail::new(
                    rdmaxfer_status::RDMAXFER_ERR_AGAIN,
                    "the connect is under way",
                ))
            }
            Err(e) => {
                d.connecting = None;
                return Err(e.into());
            }
        };
        d.connecting = None;
        let conn = new_conn(ep, Role::Client, false, &d.cfg);
        handle(conn, "conn")?.dial = Some((d.cfg.clone(), d.host.clone(), d.port));
        o.set(conn);
        Ok(())
    })
}

/// Frees a connect (NULL: nothing); one not yet finished is abandoned. A connection it gave
/// stays.
/// Returns: nothing (NULL: a no-op; a misaligned or already freed connecting: only the last error
/// message says so).
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_connecting_free(connecting: *mut rdmaxfer_connecting) {
    free_handle("rdmaxfer_connecting_free", connecting);
}
