//! Connections in an event loop: `rdmaxfer_conn_fd` (one descriptor for the completion channel
//! and the RDMA CM channel), `rdmaxfer_conn_try_send` and `rdmaxfer_conn_try_recv`, which never
//! wait for the peer (`RDMAXFER_ERR_AGAIN`). Built on `xfer::endpoint::nonblock`: a try call
//! that finds nothing re-arms the completion channel and looks once more before it returns
//! `RDMAXFER_ERR_AGAIN`, so "poll, then call until AGAIN" never misses a completion.

use std::ffi::{c_int, c_void};
use std::os::fd::{AsFd as _, AsRawFd as _};

use super::boundary::{self, out, CResult, Fail};
use super::conn::{copy_message, deliver, rdmaxfer_conn, Conn};
use super::handle::handle;
use super::status::rdmaxfer_status;
use crate::error::Result;
use crate::os::Epoll;
use crate::xfer::endpoint::Endpoint;

/// Runs `f`; when it would block, arms the completion channel (if there is one) and runs it
/// once more: a completion that came before the arm is seen now, any later one wakes the fd.
fn try_twice<R>(c: &mut Conn, mut f: impl FnMut(&mut Endpoint) -> Result<R>) -> CResult<R> {
    let ep = c.rdmaxfer_peer()?;
    match f(ep) {
        Err(e) if e.is_would_block() => {
            if ep.raw_fds().0.is_some() {
                ep.arm()?;
            }
            Ok(f(ep)?)
        }
        r => Ok(r?),
    }
}

/// The descriptor to `poll`/`select`/epoll (`POLLIN`) for this connection: readable when a
/// completion or a connection event (the peer's disconnect) may be pending. Needs a
/// connection made in event mode (`rdmaxfer_config_set_event_mode(cfg, 1)` before
/// `rdmaxfer_connect` / `rdmaxfer_listen`): `RDMAXFER_ERR_INVALID_STATE` otherwise. It belongs
/// to the connection: do not read or close it; it stays valid until the connection is freed
/// (take it out of the event loop first). Use: after getting it, and whenever it is readable,
/// call `rdmaxfer_conn_try_recv` (or `_try_send`) until it returns `RDMAXFER_ERR_AGAIN`, then
/// poll again; a blocking call on the connection in between is fine, as long as a try call
/// ends the round. Over the out-of-band transport the first call switches the connection to
/// rdmaxfer's flow control (one exchange with the peer, as `rdmaxfer_send` does).
/// Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of out_fd;
/// RDMAXFER_ERR_INVALID_STATE also for a connection not made in event mode; RDMAXFER_ERR_IO or
/// RDMAXFER_ERR_VERBS if the descriptor cannot be made or armed; over OOB, the network statuses of
/// the switch to rdmaxfer's flow control.
/// Blocks: no, except over OOB on a connection not yet switched to rdmaxfer's flow control: it
/// first exchanges it with the peer, at most the configured timeout.
#[no_mangle]
pub extern "C" fn rdmaxfer_conn_fd(
    conn: *mut rdmaxfer_conn,
    out_fd: *mut c_int,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_conn_fd", || {
        let mut c = handle(conn, "conn")?;
        let o = out(out_fd, "out_fd")?;
        if c.events.is_none() {
            let epoll = watch(c.rdmaxfer_peer()?)?;
            c.events = Some(epoll);
        }
        let fd = c.events.as_ref().map(|e| e.as_fd().as_raw_fd());
        o.set(fd.ok_or_else(|| Fail::state("no descriptor"))?);
        Ok(())
    })
}

/// An epoll instance over the endpoint's completion channel (armed) and CM channel.
fn watch(ep: &mut Endpoint) -> CResult<Epoll> {
    let io = |e| Fail::from(crate::Error::io("epoll for the connection's descriptor", e));
    let epoll = Epoll::new().map_err(io)?;
    let (cq, cm) = ep.raw_fds();
    let cq = cq.ok_or_else(|| {
        Fail::state(
            "the connection has no completion channel: make it in event mode \
             (rdmaxfer_config_set_event_mode(cfg, 1) before connecting or listening)",
        )
    })?;
    epoll.add(cq).map_err(io)?;
    if let Some(cm) = cm {
        epoll.add(cm).map_err(io)?;
    }
    ep.arm()?;
    Ok(epoll)
}

/// Sends `len` bytes at `data` as one message if that needs no wait (a flow-control credit and
/// a send buffer are free now): `RDMAXFER_ERR_AGAIN` otherwise, with nothing sent (the credit
/// comes back with the peer's next message or its credit return: wait for `rdmaxfer_conn_fd`).
/// The message is posted, not yet acknowledged, when this returns.
/// Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of data (NULL allowed
/// when len is 0); RDMAXFER_ERR_AGAIN when no credit or send buffer is free;
/// RDMAXFER_ERR_INVALID_ARGUMENT if len is over rdmaxfer_conn_max_msg_size; the network statuses.
/// Blocks: no, except over OOB on a connection not yet switched to rdmaxfer's flow control: it
/// first exchanges it with the peer, at most the configured timeout.
#[no_mangle]
pub extern "C" fn rdmaxfer_conn_try_send(
    conn: *mut rdmaxfer_conn,
    data: *const c_void,
    len: usize,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_conn_try_send", || {
        let mut c = handle(conn, "conn")?;
        let data = boundary::arg_bytes(data, len, "data")?;
        try_twice(&mut c, |ep| ep.try_send(data))
    })
}

/// Takes the next message if one has arrived, as `rdmaxfer_recv` does (copied to `buf`,
/// `cap` bytes; its length in `*out_len`; too long for `cap`: dropped, its length in
/// `*out_len`, `RDMAXFER_ERR_BUFFER_TOO_SMALL`); `RDMAXFER_ERR_AGAIN` when none has, and
/// `RDMAXFER_ERR_CONNECTION` once the peer has disconnected and every message it sent before
/// was taken.
/// Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of buf (NULL allowed
/// when cap is 0); the pointer statuses of out_len; RDMAXFER_ERR_AGAIN when no message has arrived;
/// RDMAXFER_ERR_BUFFER_TOO_SMALL and RDMAXFER_ERR_CONNECTION as above; the network statuses.
/// Blocks: no, except over OOB on a connection not yet switched to rdmaxfer's flow control: it
/// first exchanges it with the peer, at most the configured timeout.
#[no_mangle]
pub extern "C" fn rdmaxfer_conn_try_recv(
    conn: *mut rdmaxfer_conn,
    buf: *mut c_void,
    cap: usize,
    out_len: *mut usize,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_conn_try_recv", || {
        let mut c = handle(conn, "conn")?;
        let dst = boundary::arg_bytes_mut(buf, cap, "buf")?;
        let o = out(out_len, "out_len")?;
        let got = try_twice(&mut c, |ep| {
            ep.try_recv_with(|m| copy_message(m.data, &mut *dst))
        })?;
        deliver(got, cap, o)
    })
}
