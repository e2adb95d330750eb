//! The C API as a C program sees it: declarations mirroring `include/rdmaxfer.h`, for tests
//! that call the library's exports through the C ABI (`rdmaxfer::capi` is crate-private).
//! The test binary links the rdmaxfer rlib, which holds the `#[no_mangle]` symbols; a test
//! using this module says `use rdmaxfer as _;` so that it is linked. Only what the tests use is
//! declared; `tests/capi_host.rs` checks the struct sizes and the status values against the
//! header.
#![allow(non_camel_case_types, dead_code)]

use std::ffi::{c_char, c_int, c_void};

/// Declares opaque C handle types: `struct NAME` that Rust never sees inside.
macro_rules! opaque {
    ($($name:ident),*) => {$(
        #[repr(C)]
        pub struct $name {
            _p: [u8; 0],
        }
    )*};
}
opaque!(
    rdmaxfer_config,
    rdmaxfer_listener,
    rdmaxfer_conn,
    rdmaxfer_buf,
    rdmaxfer_remote,
    rdmaxfer_device_list,
    rdmaxfer_send_options,
    rdmaxfer_report,
    rdmaxfer_connecting,
    rdmaxfer_recv_options
);

/// `struct rdmaxfer_file_result`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdmaxfer_file_result {
    pub struct_size: usize,
    pub name: *const c_char,
    pub kind: *const c_char,
    pub outcome: c_int,
    pub result: *const c_char,
    pub message: *const c_char,
    pub bytes: u64,
}

/// `struct rdmaxfer_totals`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdmaxfer_totals {
    pub struct_size: usize,
    pub entries: u64,
    pub skipped: u64,
    pub failed: u64,
    pub refused: u64,
    pub vanished: u64,
    pub planned: u64,
    pub deleted: u64,
    pub bytes: u64,
}

/// `rdmaxfer_transfer_cb`.
pub type rdmaxfer_transfer_cb =
    Option<extern "C" fn(done: u64, total: u64, user: *mut c_void) -> c_int>;

/// `enum rdmaxfer_status`. The library only ever returns these values.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum rdmaxfer_status {
    RDMAXFER_OK = 0,
    RDMAXFER_ERR_NULL_ARGUMENT = 1,
    RDMAXFER_ERR_INVALID_ARGUMENT = 2,
    RDMAXFER_ERR_BUSY = 3,
    RDMAXFER_ERR_PANIC = 4,
    RDMAXFER_ERR_NO_DEVICE = 5,
    RDMAXFER_ERR_DEVICE_NOT_FOUND = 6,
    RDMAXFER_ERR_VERBS = 7,
    RDMAXFER_ERR_COMPLETION = 8,
    RDMAXFER_ERR_TIMEOUT = 9,
    RDMAXFER_ERR_OUT_OF_BOUNDS = 10,
    RDMAXFER_ERR_PROTOCOL = 11,
    RDMAXFER_ERR_CONNECTION = 12,
    RDMAXFER_ERR_REFUSED = 13,
    RDMAXFER_ERR_IO = 14,
    RDMAXFER_ERR_INVALID_STATE = 15,
    RDMAXFER_ERR_BUFFER_TOO_SMALL = 16,
    RDMAXFER_ERR_AGAIN = 17,
    RDMAXFER_ERR_SHUTDOWN = 18,
    RDMAXFER_ERR_ABORTED = 19,
}

pub const RDMAXFER_ACCESS_READ: u32 = 1;

/// `struct rdmaxfer_expose_report`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdmaxfer_expose_report {
    pub struct_size: usize,
    pub written: u64,
    pub read: u64,
    pub ok: u32,
    pub changed_ranges: u32,
    pub changed_bytes: u64,
}

/// `struct rdmaxfer_pingpong_stats`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdmaxfer_pingpong_stats {
    pub struct_size: usize,
    pub size: u64,
    pub iters: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub mbit_per_sec: f64,
    pub usec_per_iter: f64,
    pub cpu_seconds: f64,
    pub rtt_min_us: f64,
    pub rtt_p50_us: f64,
    pub rtt_mean_us: f64,
    pub rtt_p99_us: f64,
    pub rtt_p999_us: f64,
    pub rtt_max_us: f64,
    pub checked: u32,
}

/// `struct rdmaxfer_device_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdmaxfer_device_info {
    pub struct_size: usize,
    pub name: *const c_char,
    pub node_guid: *const c_char,
    pub transport: *const c_char,
    pub ports: u32,
    pub active_ports: u32,
    pub gids: u32,
}

/// `struct rdmaxfer_recv_summary`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdmaxfer_recv_summary {
    pub struct_size: usize,
    pub files: u64,
    pub bytes: u64,
}

/// The growable structs start zeroed with `struct_size` = their size, as a C caller sets it.
macro_rules! sized_default {
    ($($name:ident),*) => {$(
        impl Default for $name {
            fn default() -> Self {
                // SAFETY: every field is an integer, a float or a raw pointer: all-zero bytes
                // are a valid value of each (0, 0.0, NULL).
                let mut v: Self = unsafe { std::mem::zeroed() };
                v.struct_size = std::mem::size_of::<Self>();
                v
            }
        }
    )*};
}
sized_default!(
    rdmaxfer_expose_report,
    rdmaxfer_pingpong_stats,
    rdmaxfer_device_info,
    rdmaxfer_recv_summary,
    rdmaxfer_file_result,
    rdmaxfer_totals
);

/// `rdmaxfer_progress_cb`.
pub type rdmaxfer_progress_cb = Option<extern "C" fn(sent: u64, total: u64, user: *mut c_void)>;

extern "C" {
    pub fn rdmaxfer_version() -> *const c_char;
    pub fn rdmaxfer_strerror(status: c_int) -> *const c_char;
    pub fn rdmaxfer_last_error_message() -> *const c_char;
    pub fn rdmaxfer_last_os_error() -> c_int;
    pub fn rdmaxfer_last_wc_status() -> c_int;

    pub fn rdmaxfer_config_new(out_cfg: *mut *mut rdmaxfer_config) -> rdmaxfer_status;
    pub fn rdmaxfer_config_free(cfg: *mut rdmaxfer_config);
    pub fn rdmaxfer_config_set_device(
        cfg: *mut rdmaxfer_config,
        name: *const c_char,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_config_set_gid_index(cfg: *mut rdmaxfer_config, index: i32) -> rdmaxfer_status;
    pub fn rdmaxfer_config_set_port(cfg: *mut rdmaxfer_config, port: u16) -> rdmaxfer_status;
    pub fn rdmaxfer_config_set_transport(
        cfg: *mut rdmaxfer_config,
        transport: u32,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_config_set_mtu(cfg: *mut rdmaxfer_config, bytes: u32) -> rdmaxfer_status;
    pub fn rdmaxfer_config_set_timeout_ms(cfg: *mut rdmaxfer_config, ms: u32) -> rdmaxfer_status;
    pub fn rdmaxfer_config_set_event_mode(
        cfg: *mut rdmaxfer_config,
        enabled: c_int,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_config_set_token(
        cfg: *mut rdmaxfer_config,
        token: *const c_char,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_config_set_msg_size(cfg: *mut rdmaxfer_config, bytes: usize)
        -> rdmaxfer_status;

    pub fn rdmaxfer_listen(
        cfg: *const rdmaxfer_config,
        addr: *const c_char,
        port: u16,
        out_listener: *mut *mut rdmaxfer_listener,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_listener_port(
        listener: *const rdmaxfer_listener,
        out_port: *mut u16,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_accept(
        listener: *mut rdmaxfer_listener,
        out_conn: *mut *mut rdmaxfer_conn,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_listener_free(listener: *mut rdmaxfer_listener);
    pub fn rdmaxfer_listener_fd(
        listener: *const rdmaxfer_listener,
        out_fd: *mut c_int,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_listener_try_accept(
        listener: *mut rdmaxfer_listener,
        out_conn: *mut *mut rdmaxfer_conn,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_listener_shutdown(listener: *const rdmaxfer_listener) -> rdmaxfer_status;
    pub fn rdmaxfer_conn_fd(conn: *mut rdmaxfer_conn, out_fd: *mut c_int) -> rdmaxfer_status;
    pub fn rdmaxfer_conn_try_send(
        conn: *mut rdmaxfer_conn,
        data: *const c_void,
        len: usize,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_conn_try_recv(
        conn: *mut rdmaxfer_conn,
        buf: *mut c_void,
        cap: usize,
        out_len: *mut usize,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_connect(
        cfg: *const rdmaxfer_config,
        host: *const c_char,
        port: u16,
        out_conn: *mut *mut rdmaxfer_conn,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_conn_close(conn: *mut rdmaxfer_conn) -> rdmaxfer_status;
    pub fn rdmaxfer_conn_free(conn: *mut rdmaxfer_conn);
    pub fn rdmaxfer_conn_max_msg_size(
        conn: *const rdmaxfer_conn,
        out_size: *mut usize,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_conn_peer_addr(
        conn: *const rdmaxfer_conn,
        buf: *mut c_char,
        cap: usize,
        out_len: *mut usize,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_send(
        conn: *mut rdmaxfer_conn,
        data: *const c_void,
        len: usize,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_recv(
        conn: *mut rdmaxfer_conn,
        buf: *mut c_void,
        cap: usize,
        out_len: *mut usize,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_pingpong(
        conn: *mut rdmaxfer_conn,
        size: usize,
        iters: u64,
        out_stats: *mut rdmaxfer_pingpong_stats,
    ) -> rdmaxfer_status;

    pub fn rdmaxfer_buf_new(
        conn: *mut rdmaxfer_conn,
        len: usize,
        out_buf: *mut *mut rdmaxfer_buf,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_buf_free(buf: *mut rdmaxfer_buf);
    pub fn rdmaxfer_buf_len(buf: *const rdmaxfer_buf) -> usize;
    pub fn rdmaxfer_buf_write(
        buf: *mut rdmaxfer_buf,
        offset: usize,
        src: *const c_void,
        len: usize,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_buf_read(
        buf: *const rdmaxfer_buf,
        offset: usize,
        dst: *mut c_void,
        len: usize,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_remote_open(
        conn: *mut rdmaxfer_conn,
        out_remote: *mut *mut rdmaxfer_remote,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_remote_len(remote: *const rdmaxfer_remote) -> u64;
    pub fn rdmaxfer_remote_access(remote: *const rdmaxfer_remote) -> u32;
    pub fn rdmaxfer_rdma_write(
        conn: *mut rdmaxfer_conn,
        remote: *mut rdmaxfer_remote,
        remote_offset: u64,
        buf: *mut rdmaxfer_buf,
        buf_offset: usize,
        len: usize,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_rdma_read(
        conn: *mut rdmaxfer_conn,
        remote: *mut rdmaxfer_remote,
        remote_offset: u64,
        buf: *mut rdmaxfer_buf,
        buf_offset: usize,
        len: usize,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_remote_close(
        conn: *mut rdmaxfer_conn,
        remote: *mut rdmaxfer_remote,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_remote_free(remote: *mut rdmaxfer_remote);
    pub fn rdmaxfer_expose(
        conn: *mut rdmaxfer_conn,
        data: *mut c_void,
        len: usize,
        access: u32,
        out_report: *mut rdmaxfer_expose_report,
    ) -> rdmaxfer_status;

    pub fn rdmaxfer_devices(out_list: *mut *mut rdmaxfer_device_list) -> rdmaxfer_status;
    pub fn rdmaxfer_device_list_len(list: *const rdmaxfer_device_list) -> usize;
    pub fn rdmaxfer_device_list_get(
        list: *const rdmaxfer_device_list,
        index: usize,
        out_info: *mut rdmaxfer_device_info,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_device_list_free(list: *mut rdmaxfer_device_list);

    pub fn rdmaxfer_send_file(
        conn: *mut rdmaxfer_conn,
        path: *const c_char,
        progress: rdmaxfer_progress_cb,
        user: *mut c_void,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_recv_file(
        conn: *mut rdmaxfer_conn,
        out_dir: *const c_char,
        flags: u32,
        out_summary: *mut rdmaxfer_recv_summary,
    ) -> rdmaxfer_status;

    pub fn rdmaxfer_send_options_new(out: *mut *mut rdmaxfer_send_options) -> rdmaxfer_status;
    pub fn rdmaxfer_send_options_free(opts: *mut rdmaxfer_send_options);
    pub fn rdmaxfer_send_options_set_flags(
        opts: *mut rdmaxfer_send_options,
        flags: u32,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_send_options_set_chunk_size(
        opts: *mut rdmaxfer_send_options,
        bytes: u32,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_send_options_set_slots(
        opts: *mut rdmaxfer_send_options,
        slots: u32,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_send_options_set_verify(
        opts: *mut rdmaxfer_send_options,
        algo: *const c_char,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_send_options_add_exclude(
        opts: *mut rdmaxfer_send_options,
        pattern: *const c_char,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_send_files(
        conn: *mut rdmaxfer_conn,
        paths: *const *const c_char,
        n_paths: usize,
        opts: *const rdmaxfer_send_options,
        progress: rdmaxfer_transfer_cb,
        user: *mut c_void,
        report: *mut rdmaxfer_report,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_report_new(out: *mut *mut rdmaxfer_report) -> rdmaxfer_status;
    pub fn rdmaxfer_report_free(report: *mut rdmaxfer_report);
    pub fn rdmaxfer_report_len(report: *const rdmaxfer_report) -> usize;
    pub fn rdmaxfer_report_file(
        report: *const rdmaxfer_report,
        i: usize,
        out: *mut rdmaxfer_file_result,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_report_totals(
        report: *const rdmaxfer_report,
        out: *mut rdmaxfer_totals,
    ) -> rdmaxfer_status;

    pub fn rdmaxfer_connect_start(
        cfg: *const rdmaxfer_config,
        host: *const c_char,
        port: u16,
        out: *mut *mut rdmaxfer_connecting,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_connecting_fd(
        c: *const rdmaxfer_connecting,
        out_fd: *mut c_int,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_connecting_try_finish(
        c: *mut rdmaxfer_connecting,
        out_conn: *mut *mut rdmaxfer_conn,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_connecting_free(c: *mut rdmaxfer_connecting);

    pub fn rdmaxfer_recv_options_new(out: *mut *mut rdmaxfer_recv_options) -> rdmaxfer_status;
    pub fn rdmaxfer_recv_options_free(opts: *mut rdmaxfer_recv_options);
    pub fn rdmaxfer_recv_options_set_flags(
        opts: *mut rdmaxfer_recv_options,
        flags: u32,
    ) -> rdmaxfer_status;
    pub fn rdmaxfer_recv_options_set_verify(
        opts: *mut rdmaxfer_recv_options,
        algo: *const c_char,
    ) -> rdmaxfer_status;
}
