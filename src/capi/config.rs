//! `rdmaxfer_config`: how to connect (device, GID index, port, CM or OOB, MTU, timeout, event
//! mode, token, message size) and how many streams a file transfer uses.

use std::ffi::{c_char, c_int};
use std::time::Duration;

use super::boundary::{self, out, CResult, Fail};
use super::handle::{free_handle, handle, impl_handle, into_handle, Slot};
use super::status::rdmaxfer_status;
use crate::verbs::{Mtu, WaitMode};
use crate::xfer::endpoint::{EndpointOptions, DEFAULT_PORT, DEFAULT_TIMEOUT};
use crate::xfer::file::proto::MAX_MSG_LEN;
use crate::xfer::file::transfer::DEFAULT_SLOTS;

/// Set up connections with RDMA CM (the default).
pub const RDMAXFER_TRANSPORT_CM: u32 = 0;
/// Set up connections with ibv_rc_pingpong's out-of-band TCP exchange.
pub const RDMAXFER_TRANSPORT_OOB: u32 = 1;
/// The most streams `rdmaxfer_config_set_streams` takes.
pub const RDMAXFER_MAX_STREAMS: u16 = 64;
const _: () = assert!(RDMAXFER_MAX_STREAMS == crate::xfer::file::proto::MAX_STREAMS);
/// The default port (RDMA CM port, or TCP port of the out-of-band exchange).
pub const RDMAXFER_DEFAULT_PORT: u16 = 18515;
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

    /// `port`, or the configured port when it is 0.
    pub fn port_or_default(&self, port: u16) -> u16 {
        if port == 0 {
            self.port
        } else {
            port
        }
    }
}

impl_handle!(rdmaxfer_config, Config);

/// Makes a configuration with the defaults: automatic device and GID, port 18515, RDMA CM,
/// busy-polling, 10 s per step, no token, messages up to 8192 bytes.
#[no_mangle]
pub extern "C" fn rdmaxfer_config_new(out_cfg: *mut *mut rdmaxfer_config) -> rdmaxfer_status {
    boundary::run("rdmaxfer_config_new", || {
        let o = out(out_cfg, "out_cfg")?;
        o.set(into_handle::<rdmaxfer_config>(Config::default()));
        Ok(())
    })
}

/// Frees a configuration (NULL: nothing).
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

/// Uses RDMA device `name` (e.g. "rxe0"); NULL: automatic (the first with an active port, or
/// with RDMA CM the one that routes to the peer).
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
        Ok(())
    })
}

/// Uses GID table entry `index`; -1: automatic (the IPv4-mapped RoCE v2 GID).
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

/// The port `rdmaxfer_connect` uses when its `port` argument is 0 (default 18515).
/// (`rdmaxfer_listen` takes its port as given: 0 lets the system choose.)
#[no_mangle]
pub extern "C" fn rdmaxfer_config_set_port(
    cfg: *mut rdmaxfer_config,
    port: u16,
) -> rdmaxfer_status {
    set("rdmaxfer_config_set_port", cfg, |c| {
        if port == 0 {
            return Err(Fail::invalid("port 0"));
        }
        c.port = port;
        Ok(())
    })
}

/// `RDMAXFER_TRANSPORT_CM` (default) or `RDMAXFER_TRANSPORT_OOB` (ibv_rc_pingpong's TCP
/// exchange; a ping-pong peer may then be ibv_rc_pingpong itself).
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

/// Path MTU in bytes (256, 512, 1024, 2048 or 4096; out-of-band transport only); 0: default
/// (1024).
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
}
