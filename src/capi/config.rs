//! `rdmaxfer_config`: how to connect (device, GID index, port, CM or OOB, MTU, timeout, event
//! mode, token, message size) and how many streams a file transfer uses.

use std::ffi::{c_char, c_int};
use std::time::Duration;

use super::boundary::{self, out, CResult, Fail};
use super::handle::{free_handle, handle, impl_handle, into_handle, Slot};
use super::status::rdmaxfer_status;
use crate::verbs::{Mtu, WaitMode};
use crate::xfer::endpoint::{
    check_rail, resolve_host, Endpoint, EndpointOptions, DEFAULT_PORT, DEFAULT_TIMEOUT,
};
use crate::xfer::file::proto::MAX_MSG_LEN;
use crate::xfer::file::DEFAULT_SLOTS;
use crate::xfer::session;

/// Set up connections with RDMA CM (the default).
pub const RDMAXFER_TRANSPORT_CM: u32 = 0;
/// Set up connections with ibv_rc_pingpong's out-of-band TCP exchange.
pub const RDMAXFER_TRANSPORT_OOB: u32 = 1;
/// The most streams `rdmaxfer_config_set_streams` takes.
pub const RDMAXFER_MAX_STREAMS: u16 = 64;
const _: () = assert!(RDMAXFER_MAX_STREAMS == crate::xfer::file::proto::MAX_STREAMS);
/// The default port (RDMA CM port, or TCP port of the out-of-band exchange).
pub const RDMAXFER_DEFAULT_PORT: u16 = 18515;
/// As the `port` of `rdmaxfer_listen` and `rdmaxfer_connect`: the configured port
/// (`rdmaxfer_config_set_port`; default `RDMAXFER_DEFAULT_PORT`). The same in both calls, so a
/// server and client that both pass it meet.
pub const RDMAXFER_PORT_CONFIGURED: u16 = 0;
/// As the port of `rdmaxfer_config_set_port`: any free port, which the system chooses when a
/// listener binds (`rdmaxfer_listener_port` tells which); a connect with it as its port fails
/// (`RDMAXFER_ERR_INVALID_ARGUMENT`).
pub const RDMAXFER_PORT_ANY: u16 = 0;
const _: () = assert!(RDMAXFER_DEFAULT_PORT == DEFAULT_PORT);
/// The smallest (and default) message size (`rdmaxfer_config_set_msg_size`).
pub const RDMAXFER_MIN_MSG_SIZE: usize = 8192;
const _: () = assert!(RDMAXFER_MIN_MSG_SIZE == MAX_MSG_LEN);

/// Connection settings. Made by `rdmaxfer_config_new`, freed by `rdmaxfer_config_free`;
/// `rdmaxfer_listen` and `rdmaxfer_connect` copy what they need, so it may be freed (or changed)
/// right after.
pub struct rdmaxfer_config {
    slot: Slot<Config>,
}

/// The settings (Rust side).
#[derive(Clone, Debug)]
pub struct Config {
    /// RDMA device; `None`: automatic.
    pub device: Option<String>,
    /// GID index; `None`: the IPv4-mapped RoCE v2 GID.
    pub gid_index: Option<u32>,
    /// Port `rdmaxfer_connect` uses when its port argument is 0.
    pub port: u16,
    /// Out-of-band exchange instead of RDMA CM.
    pub oob: bool,
    /// Path MTU (OOB only).
    pub mtu: Option<Mtu>,
    /// Sleep on the completion channel instead of busy-polling.
    pub event: bool,
    /// Deadline of each step.
    pub timeout: Duration,
    /// File-transfer token.
    pub token: Option<Vec<u8>>,
    /// Largest message either side may send.
    pub msg_size: usize,
    /// Streams `rdmaxfer_send_file` asks for (0: the CLI's default rule).
    pub streams: u16,
    /// Devices the streams of `rdmaxfer_send_file` go over in turn (stream i on
    /// `rails[i % len]`; the first is also `device`); empty: every stream on `device`.
    pub rails: Vec<String>,
    /// Receiver addresses the further streams connect to in turn (stream i to
    /// `stream_hosts[i % len]`); empty: every stream to the connection's host.
    pub stream_hosts: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            device: None,
            gid_index: None,
            port: DEFAULT_PORT,
            oob: false,
            mtu: None,
            event: false,
            timeout: DEFAULT_TIMEOUT,
            token: None,
            msg_size: MAX_MSG_LEN,
            streams: 1,
            rails: Vec::new(),
            stream_hosts: Vec::new(),
        }
    }
}

impl Config {
    /// Endpoint options that suit every use of a C connection: messages up to `msg_size` (at
    /// least the file protocol's), receives and RDMA slots for file transfer and one-sided
    /// sessions.
    pub fn endpoint_options(&self) -> EndpointOptions {
        EndpointOptions {
            device: self.device.clone(),
            gid_index: self.gid_index,
            mtu: self.mtu,
            wait: if self.event {
                WaitMode::Event
            } else {
                WaitMode::Poll
            },
            timeout: self.timeout,
            msg_size: self.msg_size,
            recv_depth: DEFAULT_SLOTS,
            send_depth: 4,
            extra_send_wr: DEFAULT_SLOTS,
            ..EndpointOptions::default()
        }
    }

    /// [`endpoint_options`](Self::endpoint_options) of stream `i` of a file transfer: on
    /// device `rails[i % len]` (as `rdmaxfer send -d dev1,dev2` places them).
    pub fn stream_options(&self, i: u16) -> EndpointOptions {
        let mut o = self.endpoint_options();
        if !self.rails.is_empty() {
            o.device = Some(self.rails[usize::from(i) % self.rails.len()].clone());
        }
        o
    }

    /// Connects stream `i` of a file transfer to `host`'s receiver (placed by
    /// [`stream_host`](Self::stream_host) and [`stream_options`](Self::stream_options)) on
    /// `port`. A rail that cannot reach the address is dropped before its connect request.
    pub fn connect_stream(&self, i: u16, host: &str, port: u16) -> crate::Result<Endpoint> {
        let (host, opts) = (self.stream_host(i, host), self.stream_options(i));
        let dst = resolve_host(host, port)?;
        check_rail(opts.device.as_deref(), dst)?;
        session::connect(host, port, self.oob, &opts)
    }

    /// The receiver address stream `i` connects to: `stream_hosts[i % len]`, else `host` (as
    /// `rdmaxfer send HOST1,HOST2` places them).
    pub fn stream_host<'a>(&'a self, i: u16, host: &'a str) -> &'a str {
        match self.stream_hosts.len() {
            0 => host,
            n => &self.stream_hosts[usize::from(i) % n],
        }
    }

    /// The port a listener binds: `port`, or the configured one for `RDMAXFER_PORT_CONFIGURED`
    /// (which may be `RDMAXFER_PORT_ANY`: the system chooses).
    pub fn listen_port(&self, port: u16) -> u16 {
        if port == RDMAXFER_PORT_CONFIGURED {
            self.port
        } else {
            port
        }
    }

    /// The port to connect to: `port`, or the configured one for `RDMAXFER_PORT_CONFIGURED`;
    /// refused when that is `RDMAXFER_PORT_ANY`.
    pub fn connect_port(&self, port: u16) -> Result<u16, Fail> {
        match self.listen_port(port) {
            RDMAXFER_PORT_ANY => Err(Fail::invalid(
                "no port to connect to: the configured port is RDMAXFER_PORT_ANY, which only a \
                 listener can take; pass the port, or configure it (rdmaxfer_config_set_port)",
            )),
            p => Ok(p),
        }
    }
}

impl_handle!(rdmaxfer_config, Config);

/// Makes a configuration with the defaults: automatic device and GID, port 18515, RDMA CM,
/// busy-polling, 10 s per step, no token, messages up to 8192 bytes.
/// Returns: RDMAXFER_OK; the pointer statuses of out_cfg; RDMAXFER_ERR_PANIC.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_config_new(out_cfg: *mut *mut rdmaxfer_config) -> rdmaxfer_status {
    boundary::run("rdmaxfer_config_new", || {
        let o = out(out_cfg, "out_cfg")?;
        o.set(into_handle::<rdmaxfer_config>(Config::default()));
        Ok(())
    })
}

/// Frees a configuration (NULL: nothing).
/// Returns: nothing (NULL: a no-op; a misaligned or already freed cfg: only the last error message
/// says so).
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_config_free(cfg: *mut rdmaxfer_config) {
    free_handle("rdmaxfer_config_free", cfg);
}

fn set(
    func: &'static str,
    cfg: *mut rdmaxfer_config,
    f: impl FnOnce(&mut Config) -> CResult<()>,
) -> rdmaxfer_status {
    boundary::run(func, || {
        let mut c = handle(cfg, "cfg")?;
        // Changes apply only when valid: work on a copy.
        let mut next = c.clone();
        f(&mut next)?;
        *c = next;
        Ok(())
    })
}

/// [`set`] with the C array `list` = (strings, count, name): at most `RDMAXFER_MAX_STREAMS`
/// non-empty UTF-8 strings, copied.
fn set_list(
    func: &'static str,
    cfg: *mut rdmaxfer_config,
    list: (*const *const c_char, usize, &str),
    f: impl FnOnce(&mut Config, Vec<String>),
) -> rdmaxfer_status {
    set(func, cfg, |c| {
        let (p, n, name) = list;
        let max = usize::from(RDMAXFER_MAX_STREAMS);
        let items = boundary::arg_str_array(p, n, max, name)?;
        f(c, items.into_iter().map(str::to_string).collect());
        Ok(())
    })
}

/// Uses RDMA device `name` (e.g. "rxe0"); NULL: automatic (the first with an active port, or
/// with RDMA CM the one that routes to the peer). Replaces a list set by
/// `rdmaxfer_config_set_devices`.
/// Returns: RDMAXFER_OK; the handle statuses of cfg; RDMAXFER_ERR_INVALID_ARGUMENT if name is empty
/// or not UTF-8.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_config_set_device(
    cfg: *mut rdmaxfer_config,
    name: *const c_char,
) -> rdmaxfer_status {
    set("rdmaxfer_config_set_device", cfg, |c| {
        let name = boundary::opt_str(name, "name")?;
        if name.is_some_and(str::is_empty) {
            return Err(Fail::invalid("name is empty (pass NULL for automatic)"));
        }
        c.device = name.map(str::to_string);
        c.rails.clear();
        Ok(())
    })
}

/// Uses the `n` RDMA devices `names[0..n]` (e.g. {"rxe0", "rxe1"}): the streams of
/// `rdmaxfer_send_file` are placed on them in turn (stream i on `names[i % n]`, as
/// `rdmaxfer send --streams N -d dev1,dev2` does), and every other use of the configuration
/// (`rdmaxfer_connect`, whose connection is stream 0; `rdmaxfer_listen`) uses `names[0]`.
/// With RDMA CM each device must route to the address its streams connect to: give each rail's
/// receiver address with `rdmaxfer_config_set_stream_hosts`. A stream whose device cannot reach
/// its address (the routing table names another device's interface) is not used: it is dropped
/// before its connect request, and the others carry the transfer. A stream lost during a
/// transfer (its rail down, its connection broken) hands its work to the others. With `rdmaxfer_config_set_streams`
/// 0 the automatic stream count allows 2 per device. `n` 0 (`names` may then be NULL):
/// automatic, as `rdmaxfer_config_set_device(cfg, NULL)`. `names` NULL with `n` > 0, or a NULL
/// entry: `RDMAXFER_ERR_NULL_ARGUMENT`; more than `RDMAXFER_MAX_STREAMS` names, an empty one or
/// one that is not UTF-8: `RDMAXFER_ERR_INVALID_ARGUMENT`. On error the configuration is left
/// as it was. The names are copied.
/// Returns: RDMAXFER_OK; the handle statuses of cfg; RDMAXFER_ERR_NULL_ARGUMENT or
/// RDMAXFER_ERR_INVALID_ARGUMENT for a bad or misaligned names (above).
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_config_set_devices(
    cfg: *mut rdmaxfer_config,
    names: *const *const c_char,
    n: usize,
) -> rdmaxfer_status {
    set_list(
        "rdmaxfer_config_set_devices",
        cfg,
        (names, n, "names"),
        |c, names| {
            c.device = names.first().cloned();
            c.rails = names;
        },
    )
}

/// The receiver addresses (names or IP addresses) that the streams of `rdmaxfer_send_file`
/// connect to in turn, one per rail (as `rdmaxfer send HOST1,HOST2` does): stream i (i >= 1)
/// connects to `hosts[i % n]`, on the port of the connection; stream 0 is the connection
/// itself, made by `rdmaxfer_connect` to its `host` (normally `hosts[0]`). `n` 0 (`hosts` may
/// then be NULL, the default): every stream to the connection's host. `hosts` NULL with `n` > 0,
/// or a NULL entry: `RDMAXFER_ERR_NULL_ARGUMENT`; more than `RDMAXFER_MAX_STREAMS`, an empty one
/// or one that is not UTF-8: `RDMAXFER_ERR_INVALID_ARGUMENT`. On error the configuration is
/// left as it was. The strings are copied.
/// Returns: RDMAXFER_OK; the handle statuses of cfg; RDMAXFER_ERR_NULL_ARGUMENT or
/// RDMAXFER_ERR_INVALID_ARGUMENT for a bad or misaligned hosts (above).
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_config_set_stream_hosts(
    cfg: *mut rdmaxfer_config,
    hosts: *const *const c_char,
    n: usize,
) -> rdmaxfer_status {
    set_list(
        "rdmaxfer_config_set_stream_hosts",
        cfg,
        (hosts, n, "hosts"),
        |c, hosts| {
            c.stream_hosts = hosts;
        },
    )
}

/// Uses GID table entry `index`; -1: automatic (the IPv4-mapped RoCE v2 GID).
/// Returns: RDMAXFER_OK; the handle statuses of cfg; RDMAXFER_ERR_INVALID_ARGUMENT if index is
/// below -1.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_config_set_gid_index(
    cfg: *mut rdmaxfer_config,
    index: i32,
) -> rdmaxfer_status {
    set("rdmaxfer_config_set_gid_index", cfg, |c| {
        c.gid_index = match index {
            -1 => None,
            i => Some(
                u32::try_from(i)
                    .map_err(|_| Fail::invalid(format!("GID index {i} (use -1 for automatic)")))?,
            ),
        };
        Ok(())
    })
}

/// The port `rdmaxfer_listen` and `rdmaxfer_connect` use when their `port` argument is
/// `RDMAXFER_PORT_CONFIGURED` (default `RDMAXFER_DEFAULT_PORT`). `RDMAXFER_PORT_ANY`: listeners
/// take any free port (`rdmaxfer_listener_port` tells which), and a connect needs its port
/// given.
/// Returns: RDMAXFER_OK; the handle statuses of cfg.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_config_set_port(
    cfg: *mut rdmaxfer_config,
    port: u16,
) -> rdmaxfer_status {
    set("rdmaxfer_config_set_port", cfg, |c| {
        c.port = port;
        Ok(())
    })
}

/// `RDMAXFER_TRANSPORT_CM` (default) or `RDMAXFER_TRANSPORT_OOB` (ibv_rc_pingpong's TCP
/// exchange; a ping-pong peer may then be ibv_rc_pingpong itself).
/// Returns: RDMAXFER_OK; the handle statuses of cfg; RDMAXFER_ERR_INVALID_ARGUMENT for another
/// transport.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_config_set_transport(
    cfg: *mut rdmaxfer_config,
    transport: u32,
) -> rdmaxfer_status {
    set("rdmaxfer_config_set_transport", cfg, |c| {
        c.oob = match transport {
            RDMAXFER_TRANSPORT_CM => false,
            RDMAXFER_TRANSPORT_OOB => true,
            t => return Err(Fail::invalid(format!("transport {t}"))),
        };
        Ok(())
    })
}

/// Path MTU in bytes (256, 512, 1024, 2048 or 4096; out-of-band transport only: with RDMA CM,
/// `rdmaxfer_listen` and `rdmaxfer_connect` refuse a configuration that sets one); 0: default
/// (1024).
/// Returns: RDMAXFER_OK; the handle statuses of cfg; RDMAXFER_ERR_INVALID_ARGUMENT for another
/// size.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_config_set_mtu(
    cfg: *mut rdmaxfer_config,
    bytes: u32,
) -> rdmaxfer_status {
    set("rdmaxfer_config_set_mtu", cfg, |c| {
        c.mtu = match bytes {
            0 => None,
            b => Some(Mtu::from_bytes(b)?),
        };
        Ok(())
    })
}

/// Deadline of each step (resolve, connect, accept's wait for a peer, each message and
/// completion), in milliseconds (default 10000; must be positive).
/// Returns: RDMAXFER_OK; the handle statuses of cfg; RDMAXFER_ERR_INVALID_ARGUMENT if ms is 0.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_config_set_timeout_ms(
    cfg: *mut rdmaxfer_config,
    ms: u32,
) -> rdmaxfer_status {
    set("rdmaxfer_config_set_timeout_ms", cfg, |c| {
        if ms == 0 {
            return Err(Fail::invalid("timeout 0"));
        }
        c.timeout = Duration::from_millis(u64::from(ms));
        Ok(())
    })
}

/// Non-zero: sleep on the completion channel while waiting; 0 (default): busy-poll.
/// Returns: RDMAXFER_OK; the handle statuses of cfg.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_config_set_event_mode(
    cfg: *mut rdmaxfer_config,
    enabled: c_int,
) -> rdmaxfer_status {
    set("rdmaxfer_config_set_event_mode", cfg, |c| {
        c.event = enabled != 0;
        Ok(())
    })
}

/// The file-transfer token (a receiver requires senders to know it; a sender answers with it);
/// NULL: none (authentication off). An empty string is `RDMAXFER_ERR_INVALID_ARGUMENT` and
/// leaves the configuration as it was: it would otherwise turn authentication off silently.
/// Returns: RDMAXFER_OK; the handle statuses of cfg; RDMAXFER_ERR_INVALID_ARGUMENT if token is
/// empty or not UTF-8.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_config_set_token(
    cfg: *mut rdmaxfer_config,
    token: *const c_char,
) -> rdmaxfer_status {
    set("rdmaxfer_config_set_token", cfg, |c| {
        let token = boundary::opt_str(token, "token")?;
        if token.is_some_and(str::is_empty) {
            return Err(Fail::invalid(
                "token is empty: pass a non-empty token, or NULL for no authentication",
            ));
        }
        c.token = token.map(|t| t.as_bytes().to_vec());
        Ok(())
    })
}

/// Largest message `rdmaxfer_send` / ping-pong may use: 8192 (`RDMAXFER_MIN_MSG_SIZE`, the
/// default and the minimum, which the file and one-sided protocols need) to 1 GiB; a size
/// outside that is `RDMAXFER_ERR_INVALID_ARGUMENT` and leaves the configuration as it was.
/// Returns: RDMAXFER_OK; the handle statuses of cfg; RDMAXFER_ERR_INVALID_ARGUMENT outside 8192 to
/// 1 GiB.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_config_set_msg_size(
    cfg: *mut rdmaxfer_config,
    bytes: usize,
) -> rdmaxfer_status {
    set("rdmaxfer_config_set_msg_size", cfg, |c| {
        if !(RDMAXFER_MIN_MSG_SIZE..=1 << 30).contains(&bytes) {
            return Err(Fail::invalid(format!(
                "message size {bytes} (at least {RDMAXFER_MIN_MSG_SIZE}, at most 1 GiB)"
            )));
        }
        c.msg_size = bytes;
        Ok(())
    })
}

/// Streams (connections) `rdmaxfer_send_file` carries a transfer over, on a connection made
/// by `rdmaxfer_connect` with this configuration: it connects `n - 1` more to the same host and
/// port (each with its own QP and staging ring); a tree's files are spread over them and files
/// of 8 MiB or more are striped across them. 1 (the default): the one connection; 0: the rule
/// `rdmaxfer send` uses without `--streams` (1 for small transfers, else the CPUs, at most 2 per
/// device and at most 4); at most 64 (`RDMAXFER_MAX_STREAMS`), else
/// `RDMAXFER_ERR_INVALID_ARGUMENT` and the configuration is left as it was. The receiver may
/// grant fewer (`rdmaxfer recv --max-streams`; `rdmaxfer_recv_file` grants 1): the transfer
/// then goes on with what it grants.
/// Returns: RDMAXFER_OK; the handle statuses of cfg; RDMAXFER_ERR_INVALID_ARGUMENT if n is over 64.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_config_set_streams(
    cfg: *mut rdmaxfer_config,
    n: u32,
) -> rdmaxfer_status {
    set("rdmaxfer_config_set_streams", cfg, |c| {
        c.streams = u16::try_from(n)
            .ok()
            .filter(|&n| n <= RDMAXFER_MAX_STREAMS)
            .ok_or_else(|| {
                Fail::invalid(format!(
                    "{n} streams (0: automatic, else 1 to {RDMAXFER_MAX_STREAMS})"
                ))
            })?;
        Ok(())
    })
}

/// A copy of the settings.
pub(crate) fn snapshot(cfg: *const rdmaxfer_config) -> CResult<Config> {
    Ok(handle(cfg, "cfg")?.clone())
}

/// [`snapshot`] for making a connection or a listener: a setting that cannot apply to the
/// configured transport is refused, not ignored.
pub(crate) fn for_connection(cfg: *const rdmaxfer_config) -> CResult<Config> {
    let c = snapshot(cfg)?;
    if let (false, Some(m)) = (c.oob, c.mtu) {
        return Err(Fail::invalid(format!(
            "a path MTU ({} bytes, rdmaxfer_config_set_mtu) applies to the out-of-band \
             transport only; RDMA CM takes the port's: set it to 0, or use \
             RDMAXFER_TRANSPORT_OOB",
            m.bytes()
        )));
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_checked_and_a_bad_value_changes_nothing() {
        let mut cfg = std::ptr::null_mut();
        assert_eq!(rdmaxfer_config_new(&mut cfg), rdmaxfer_status::RDMAXFER_OK);
        assert_eq!(snapshot(cfg).unwrap().streams, 1, "one stream by default");
        for n in [0u32, 1, 2, 64] {
            assert_eq!(
                rdmaxfer_config_set_streams(cfg, n),
                rdmaxfer_status::RDMAXFER_OK
            );
            assert_eq!(u32::from(snapshot(cfg).unwrap().streams), n);
        }
        for n in [65u32, 1000, u32::MAX] {
            assert_eq!(
                rdmaxfer_config_set_streams(cfg, n),
                rdmaxfer_status::RDMAXFER_ERR_INVALID_ARGUMENT
            );
            assert_eq!(snapshot(cfg).unwrap().streams, 64, "unchanged");
        }
        assert_eq!(
            rdmaxfer_config_set_streams(std::ptr::null_mut(), 2),
            rdmaxfer_status::RDMAXFER_ERR_NULL_ARGUMENT
        );
        rdmaxfer_config_free(cfg);
    }

    #[test]
    fn devices_and_stream_hosts_place_streams_in_turn_and_a_bad_list_changes_nothing() {
        use rdmaxfer_status as S;
        let mut cfg = std::ptr::null_mut();
        assert_eq!(rdmaxfer_config_new(&mut cfg), S::RDMAXFER_OK);
        let names = [c"rxe0".as_ptr(), c"rxe1".as_ptr()];
        let hosts = [c"198.18.0.1".as_ptr(), c"198.18.1.1".as_ptr()];
        assert_eq!(
            rdmaxfer_config_set_devices(cfg, names.as_ptr(), 2),
            S::RDMAXFER_OK
        );
        assert_eq!(
            rdmaxfer_config_set_stream_hosts(cfg, hosts.as_ptr(), 2),
            S::RDMAXFER_OK
        );
        let c = snapshot(cfg).unwrap();
        assert_eq!(
            c.device.as_deref(),
            Some("rxe0"),
            "the first for everything else"
        );
        assert_eq!(c.endpoint_options().device.as_deref(), Some("rxe0"));
        let placed: Vec<_> = (0..4)
            .map(|i| {
                (
                    c.stream_options(i).device.unwrap(),
                    c.stream_host(i, "h").to_string(),
                )
            })
            .collect();
        let want = |d: &str, h: &str| (d.to_string(), h.to_string());
        assert_eq!(
            placed,
            [
                want("rxe0", "198.18.0.1"),
                want("rxe1", "198.18.1.1"),
                want("rxe0", "198.18.0.1"),
                want("rxe1", "198.18.1.1")
            ]
        );
        // Bad lists: refused with the right status, nothing changed.
        let empty = [c"rxe0".as_ptr(), c"".as_ptr()];
        let null = [c"rxe0".as_ptr(), std::ptr::null()];
        let bad_utf8 = [c"\xff".as_ptr()];
        let many = [c"rxe0".as_ptr(); 65];
        for (p, n, want) in [
            (empty.as_ptr(), 2, S::RDMAXFER_ERR_INVALID_ARGUMENT),
            (null.as_ptr(), 2, S::RDMAXFER_ERR_NULL_ARGUMENT),
            (bad_utf8.as_ptr(), 1, S::RDMAXFER_ERR_INVALID_ARGUMENT),
            (many.as_ptr(), 65, S::RDMAXFER_ERR_INVALID_ARGUMENT),
            (std::ptr::null(), 1, S::RDMAXFER_ERR_NULL_ARGUMENT),
        ] {
            assert_eq!(rdmaxfer_config_set_devices(cfg, p, n), want);
            assert_eq!(rdmaxfer_config_set_stream_hosts(cfg, p, n), want);
            let c = snapshot(cfg).unwrap();
            assert_eq!(c.rails, ["rxe0", "rxe1"], "unchanged");
            assert_eq!(c.stream_hosts, ["198.18.0.1", "198.18.1.1"], "unchanged");
        }
        assert_eq!(
            rdmaxfer_config_set_devices(std::ptr::null_mut(), names.as_ptr(), 2),
            S::RDMAXFER_ERR_NULL_ARGUMENT
        );
        // 0 (NULL allowed): automatic again; one device replaces the list.
        assert_eq!(
            rdmaxfer_config_set_devices(cfg, std::ptr::null(), 0),
            S::RDMAXFER_OK
        );
        assert_eq!(
            rdmaxfer_config_set_stream_hosts(cfg, std::ptr::null(), 0),
            S::RDMAXFER_OK
        );
        let c = snapshot(cfg).unwrap();
        assert_eq!((c.device.as_deref(), c.rails.len()), (None, 0));
        assert_eq!(c.stream_host(1, "h"), "h");
        assert_eq!(
            rdmaxfer_config_set_devices(cfg, names.as_ptr(), 2),
            S::RDMAXFER_OK
        );
        assert_eq!(
            rdmaxfer_config_set_device(cfg, c"rxe1".as_ptr()),
            S::RDMAXFER_OK
        );
        let c = snapshot(cfg).unwrap();
        assert!(c.rails.is_empty());
        assert_eq!(c.stream_options(1).device.as_deref(), Some("rxe1"));
        rdmaxfer_config_free(cfg);
    }
}
