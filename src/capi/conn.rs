//! Connections: `rdmaxfer_connect` (listeners and accepting: `super::listener`), messages,
//! ping-pong, close and free.

use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

use super::boundary::{self, out, CResult, Fail, Out};
use super::config::{for_connection, rdmaxfer_config, Config};
use super::handle::{free_handle, handle, impl_handle, into_handle, take_state, Slot};
use super::status::rdmaxfer_status;
use crate::os::Epoll;
use crate::xfer::endpoint::Endpoint;
use crate::xfer::pingpong;
use crate::xfer::session;

/// A connected peer. Made by `rdmaxfer_accept` or `rdmaxfer_connect`; ended by
/// `rdmaxfer_conn_close` (graceful) or `rdmaxfer_conn_free`.
pub struct rdmaxfer_conn {
    slot: Slot<Conn>,
}

/// Which side of the connection this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Made by `rdmaxfer_connect`.
    Client,
    /// Made by `rdmaxfer_accept`.
    Server,
}

/// A connection's state.
pub struct Conn {
    /// The endpoint.
    pub ep: Endpoint,
    /// Which side.
    pub role: Role,
    /// An out-of-band endpoint still in ibv_rc_pingpong's one-message flow (see [`Conn::rdmaxfer_peer`]).
    plain_oob: bool,
    /// Identifies the connection to the buffers and sessions made on it.
    pub id: u64,
    /// File-transfer token (from the configuration).
    pub token: Option<Vec<u8>>,
    /// What `rdmaxfer_conn_fd` gave out (made on its first call; see `super::poll`).
    pub events: Option<Epoll>,
    /// How `rdmaxfer_connect` made it (configuration, host, port): further streams of a file
    /// transfer connect the same way. `None` for an accepted connection.
    pub dial: Option<(Config, String, u16)>,
}

impl Conn {
    /// Before any exchange with an rdmaxfer peer: an out-of-band connection switches to credit
    /// flow control (both rdmaxfer sides do this on first use; ping-pong does not, so its peer
    /// may be ibv_rc_pingpong).
    pub fn rdmaxfer_peer(&mut self) -> CResult<&mut Endpoint> {
        if self.plain_oob {
            self.ep.enable_credits(self.role == Role::Client)?;
            self.plain_oob = false;
        }
        Ok(&mut self.ep)
    }
}

impl_handle!(rdmaxfer_conn, Conn);

static NEXT_CONN_ID: AtomicU64 = AtomicU64::new(1);

pub(crate) fn new_conn(ep: Endpoint, role: Role, oob: bool, cfg: &Config) -> *mut rdmaxfer_conn {
    into_handle::<rdmaxfer_conn>(Conn {
        ep,
        role,
        plain_oob: oob,
        id: NEXT_CONN_ID.fetch_add(1, Ordering::Relaxed),
        token: cfg.token.clone(),
        events: None,
        dial: None,
    })
}

/// Connects to `host` (name or IP address) at `port` (`RDMAXFER_PORT_CONFIGURED`, 0: the
/// configured port; `RDMAXFER_ERR_INVALID_ARGUMENT` when that is `RDMAXFER_PORT_ANY`).
/// Returns: RDMAXFER_OK; the handle statuses of cfg; the pointer statuses of host and out_conn;
/// RDMAXFER_ERR_INVALID_ARGUMENT for an MTU set with RDMA CM (rdmaxfer_config_set_mtu), no port
/// (above) or a host that resolves to no address; RDMAXFER_ERR_REFUSED when the server refused it
/// (busy, another version); the network statuses.
/// Blocks: yes: the name lookup, then each step of the connect at most the configured timeout.
#[no_mangle]
pub extern "C" fn rdmaxfer_connect(
    cfg: *const rdmaxfer_config,
    host: *const c_char,
    port: u16,
    out_conn: *mut *mut rdmaxfer_conn,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_connect", || {
        let cfg = for_connection(cfg)?;
        let host = boundary::arg_str(host, "host")?;
        let o = out(out_conn, "out_conn")?;
        let port = cfg.connect_port(port)?;
        let ep = session::connect_plain(host, port, cfg.oob, &cfg.endpoint_options())?;
        let conn = new_conn(ep, Role::Client, cfg.oob, &cfg);
        handle(conn, "conn")?.dial = Some((cfg, host.to_string(), port));
        o.set(conn);
        Ok(())
    })
}

/// Ends the connection gracefully (waits until what was sent has completed or the peer has
/// disconnected, then disconnects) and frees it, whatever the status (NULL: nothing to do,
/// `RDMAXFER_OK`). A connection that another call is using is left alone and
/// `RDMAXFER_ERR_BUSY` is returned; one already freed gives `RDMAXFER_ERR_INVALID_STATE`.
///
/// `RDMAXFER_OK` does not prove that the peer received the last messages: a peer that
/// disconnects right after its last receive may cut the acknowledgement of it, and that
/// disconnect ends the wait without an error. Only a reply from the peer proves receipt (as
/// in every rdmaxfer protocol): have the peer answer the last message before closing.
/// Returns: RDMAXFER_OK, also for NULL; RDMAXFER_ERR_INVALID_ARGUMENT (misaligned),
/// RDMAXFER_ERR_INVALID_STATE (freed) or RDMAXFER_ERR_BUSY (in another call: left open);
/// RDMAXFER_ERR_PANIC (poisoned: freed without the graceful end); the network statuses of the end
/// (the connection is freed all the same).
/// Blocks: yes, until what was sent has completed or the peer has disconnected, at most the
/// configured timeout.
#[no_mangle]
pub extern "C" fn rdmaxfer_conn_close(conn: *mut rdmaxfer_conn) -> rdmaxfer_status {
    boundary::run("rdmaxfer_conn_close", || {
        if conn.is_null() {
            return Ok(());
        }
        let state = take_state(conn)?;
        state.ep.close()?;
        Ok(())
    })
}

/// Frees a connection without waiting for the peer (NULL: nothing). Buffers and sessions made
/// on it stay valid to free.
/// Returns: nothing (NULL: a no-op; a misaligned or already freed conn: only the last error message
/// says so).
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_conn_free(conn: *mut rdmaxfer_conn) {
    free_handle("rdmaxfer_conn_free", conn);
}

/// The largest message `rdmaxfer_send` takes on this connection (ours and the peer's limit).
/// Over the out-of-band transport this first switches the connection to rdmaxfer's flow
/// control, as `rdmaxfer_send` and `rdmaxfer_recv` do (the peer must be rdmaxfer).
/// Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of out_size; over OOB,
/// the network statuses of the switch to rdmaxfer's flow control.
/// Blocks: no, except over OOB on a connection not yet switched to rdmaxfer's flow control: it
/// first exchanges it with the peer, at most the configured timeout.
#[no_mangle]
pub extern "C" fn rdmaxfer_conn_max_msg_size(
    conn: *const rdmaxfer_conn,
    out_size: *mut usize,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_conn_max_msg_size", || {
        let mut c = handle(conn, "conn")?;
        let o = out(out_size, "out_size")?;
        let n = c.rdmaxfer_peer()?.max_msg_size();
        o.set(n);
        Ok(())
    })
}

/// The peer's address of `conn` (the client's, for a connection `rdmaxfer_accept` made), as
/// text ("198.18.0.1:41234"; "[::1]:41234" for IPv6), NUL-terminated, into `buf` (`cap`
/// bytes); `*out_len` is its length without the NUL. When it does not fit (`cap` must be
/// at least length + 1), `RDMAXFER_ERR_BUFFER_TOO_SMALL` with the length in `*out_len`, `buf`
/// untouched; 48 bytes always suffice. `RDMAXFER_ERR_INVALID_STATE` when the transport did not
/// tell it. Never blocks.
/// Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of buf (NULL allowed
/// when cap is 0); the pointer statuses of out_len; RDMAXFER_ERR_BUFFER_TOO_SMALL and
/// RDMAXFER_ERR_INVALID_STATE as above.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_conn_peer_addr(
    conn: *const rdmaxfer_conn,
    buf: *mut c_char,
    cap: usize,
    out_len: *mut usize,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_conn_peer_addr", || {
        let c = handle(conn, "conn")?;
        let dst = boundary::arg_bytes_mut(buf.cast(), cap, "buf")?;
        let o = out(out_len, "out_len")?;
        let addr =
            c.ep.peer()
                .addr
                .ok_or_else(|| Fail::state("the transport did not tell the peer's address"))?
                .to_string();
        let n = addr.len();
        match dst.get_mut(..=n) {
            Some(d) => {
                d[..n].copy_from_slice(addr.as_bytes());
                d[n] = 0;
                o.set(n);
                Ok(())
            }
            None => {
                o.set(n);
                Err(Fail::new(
                    rdmaxfer_status::RDMAXFER_ERR_BUFFER_TOO_SMALL,
                    format!("the {n}-byte address and its NUL do not fit the {cap}-byte buffer"),
                ))
            }
        }
    })
}

/// Sends `len` bytes at `data` as one message to an rdmaxfer peer (waits for flow-control
/// credit, at most the timeout). `len` may be 0.
/// Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of data (NULL allowed
/// when len is 0); RDMAXFER_ERR_INVALID_ARGUMENT if len is over rdmaxfer_conn_max_msg_size; the
/// network statuses.
/// Blocks: yes, for a flow-control credit (over OOB, first for the switch to it), at most the
/// configured timeout.
#[no_mangle]
pub extern "C" fn rdmaxfer_send(
    conn: *mut rdmaxfer_conn,
    data: *const c_void,
    len: usize,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_send", || {
        let mut c = handle(conn, "conn")?;
        let data = boundary::arg_bytes(data, len, "data")?;
        c.rdmaxfer_peer()?.send(data)?;
        Ok(())
    })
}

/// Waits (at most the timeout) for the next message and copies it to `buf` (`cap` bytes);
/// `*out_len` is its length. A message longer than `cap` is consumed and dropped, and
/// `RDMAXFER_ERR_BUFFER_TOO_SMALL` returned with its length in `*out_len` (the one exception to
/// "out-parameters are written only on success"): a buffer of `rdmaxfer_conn_max_msg_size`
/// bytes always suffices.
/// Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of buf (NULL allowed
/// when cap is 0); the pointer statuses of out_len; RDMAXFER_ERR_BUFFER_TOO_SMALL (above); the
/// network statuses (RDMAXFER_ERR_TIMEOUT when no message came).
/// Blocks: yes, until a message arrives, at most the configured timeout.
#[no_mangle]
pub extern "C" fn rdmaxfer_recv(
    conn: *mut rdmaxfer_conn,
    buf: *mut c_void,
    cap: usize,
    out_len: *mut usize,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_recv", || {
        let mut c = handle(conn, "conn")?;
        let dst = boundary::arg_bytes_mut(buf, cap, "buf")?;
        let o = out(out_len, "out_len")?;
        let got = c
            .rdmaxfer_peer()?
            .recv_with(|m| copy_message(m.data, dst))?;
        deliver(got, cap, o)
    })
}

/// Copies a received message to `dst`: `Ok(len)`, or `Err(len)` when it does not fit.
pub(crate) fn copy_message(data: &[u8], dst: &mut [u8]) -> Result<usize, usize> {
    let n = data.len();
    match dst.get_mut(..n) {
        Some(d) => {
            d.copy_from_slice(data);
            Ok(n)
        }
        None => Err(n),
    }
}

/// Writes the length of a received message to `o` and turns one that did not fit the
/// `cap`-byte buffer into `RDMAXFER_ERR_BUFFER_TOO_SMALL`.
pub(crate) fn deliver(got: Result<usize, usize>, cap: usize, o: Out<usize>) -> CResult<()> {
    match got {
        Ok(n) => {
            o.set(n);
            Ok(())
        }
        Err(n) => {
            o.set(n);
            Err(Fail::new(
                rdmaxfer_status::RDMAXFER_ERR_BUFFER_TOO_SMALL,
                format!("a {n}-byte message does not fit the {cap}-byte buffer (dropped)"),
            ))
        }
    }
}

/// Results of `rdmaxfer_pingpong` (times in microseconds unless named otherwise).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct rdmaxfer_pingpong_stats {
    /// In: `sizeof` the struct as the caller knows it. Out: the bytes written (see the
    /// header's conventions: the struct can grow).
    pub struct_size: usize,
    /// Message size in bytes.
    pub size: u64,
    /// Round trips.
    pub iters: u64,
    /// Bytes moved both ways (size × iters × 2, as ibv_rc_pingpong counts).
    pub bytes: u64,
    /// Wall time of the loop, seconds.
    pub seconds: f64,
    /// bytes × 8 / µs.
    pub mbit_per_sec: f64,
    /// µs per round trip (ibv_rc_pingpong's usec/iter).
    pub usec_per_iter: f64,
    /// CPU seconds (user + system) the process used during the loop.
    pub cpu_seconds: f64,
    /// Smallest round trip.
    pub rtt_min_us: f64,
    /// Median round trip.
    pub rtt_p50_us: f64,
    /// Mean round trip.
    pub rtt_mean_us: f64,
    /// 99th percentile round trip.
    pub rtt_p99_us: f64,
    /// 99.9th percentile round trip.
    pub rtt_p999_us: f64,
    /// Largest round trip.
    pub rtt_max_us: f64,
    /// 1 when every received message was checked (client: always; server: rdmaxfer peers).
    pub checked: u32,
}

// SAFETY: repr(C), first field `struct_size: usize`.
unsafe impl boundary::Growable for rdmaxfer_pingpong_stats {
    const V1: usize = std::mem::size_of::<rdmaxfer_pingpong_stats>();
}

/// Ping-pong: `iters` round trips of `size`-byte messages. The connecting side sends the pings
/// and checks each pong; the accepting side answers. Both sides need the same size and count;
/// the peer may be `rdmaxfer pingpong` (or, over the out-of-band transport, ibv_rc_pingpong).
/// Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of out_stats;
/// RDMAXFER_ERR_INVALID_ARGUMENT if size or iters is 0; the network statuses.
/// Blocks: yes, each message at most the configured timeout.
#[no_mangle]
pub extern "C" fn rdmaxfer_pingpong(
    conn: *mut rdmaxfer_conn,
    size: usize,
    iters: u64,
    out_stats: *mut rdmaxfer_pingpong_stats,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_pingpong", || {
        let mut c = handle(conn, "conn")?;
        let o = boundary::sized_out(out_stats, "out_stats")?;
        if size == 0 || iters == 0 {
            return Err(Fail::invalid(format!(
                "size {size} and iters {iters} must both be at least 1"
            )));
        }
        let s = match c.role {
            Role::Client => pingpong::run_client(&mut c.ep, size, iters)?,
            Role::Server => pingpong::run_server(&mut c.ep, size, iters)?,
        };
        o.set(rdmaxfer_pingpong_stats {
            struct_size: 0,
            size: s.size as u64,
            iters: s.iters,
            bytes: s.bytes,
            seconds: s.seconds,
            mbit_per_sec: s.mbit_per_sec,
            usec_per_iter: s.usec_per_iter,
            cpu_seconds: s.cpu_seconds,
            rtt_min_us: s.rtt_us.min,
            rtt_p50_us: s.rtt_us.p50,
            rtt_mean_us: s.rtt_us.mean,
            rtt_p99_us: s.rtt_us.p99,
            rtt_p999_us: s.rtt_us.p999,
            rtt_max_us: s.rtt_us.max,
            checked: u32::from(s.checked),
        });
        Ok(())
    })
}
