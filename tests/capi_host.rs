//! Host tests of the C API's exported functions (no RDMA device needed): NULL and invalid
//! arguments give error statuses, out-parameters stay untouched on failure, every status has a
//! text, `_free(NULL)` is fine, the last error is per thread, the version macros match
//! Cargo.toml, and the committed header is what cbindgen generates (and compiles as C) and
//! says of each function what it returns and whether it blocks.
//! Everything goes through the C ABI, as a C program would (`common/capi_ffi.rs` declares the
//! exports; `rdmaxfer::capi` is not reachable from Rust).

use std::ffi::{c_char, c_void, CStr};
use std::path::Path;
use std::process::Command;
use std::ptr;

// Links the rlib that holds the exports.
use rdmaxfer as _;

#[path = "common/capi_ffi.rs"]
mod capi_ffi;
use capi_ffi::*;

use rdmaxfer_status as S;

fn text(p: *const c_char) -> String {
    assert!(!p.is_null());
    // SAFETY: the library returns NUL-terminated strings that stay valid until the next failing
    // call on this thread; this copies it at once.
    unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_string()
}

fn last() -> String {
    // SAFETY: takes no arguments; returns a NUL-terminated string (checked by `text`).
    text(unsafe { rdmaxfer_last_error_message() })
}

fn strerror(v: i32) -> String {
    // SAFETY: takes any int; returns a static NUL-terminated string.
    text(unsafe { rdmaxfer_strerror(v) })
}

fn config() -> *mut rdmaxfer_config {
    let mut cfg = ptr::null_mut();
    // SAFETY: `cfg` is a writable out-parameter.
    assert_eq!(unsafe { rdmaxfer_config_new(&mut cfg) }, S::RDMAXFER_OK);
    cfg
}

/// The committed header's text.
fn header() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("include/rdmaxfer.h"))
        .unwrap()
}

/// The `RDMAXFER_* = N` lines of `enum rdmaxfer_status` in the committed header.
fn header_statuses() -> Vec<(String, i32)> {
    let h = header();
    let body = h
        .split_once("typedef enum rdmaxfer_status {")
        .and_then(|(_, rest)| rest.split_once("} rdmaxfer_status;"))
        .expect("enum rdmaxfer_status in the header")
        .0;
    body.lines()
        .filter_map(|l| l.trim().strip_suffix(','))
        .filter_map(|l| l.split_once(" = "))
        .map(|(n, v)| (n.to_string(), v.parse().unwrap()))
        .collect()
}

/// A non-NULL pointer that must never be written through or freed: the "untouched" marker.
fn sentinel<T>() -> *mut T {
    ptr::dangling_mut::<u64>().cast()
}

#[test]
fn status_values_are_fixed_and_each_has_a_text() {
    let expect = [
        (S::RDMAXFER_OK, 0),
        (S::RDMAXFER_ERR_NULL_ARGUMENT, 1),
        (S::RDMAXFER_ERR_INVALID_ARGUMENT, 2),
        (S::RDMAXFER_ERR_BUSY, 3),
        (S::RDMAXFER_ERR_PANIC, 4),
        (S::RDMAXFER_ERR_NO_DEVICE, 5),
        (S::RDMAXFER_ERR_DEVICE_NOT_FOUND, 6),
        (S::RDMAXFER_ERR_VERBS, 7),
        (S::RDMAXFER_ERR_COMPLETION, 8),
        (S::RDMAXFER_ERR_TIMEOUT, 9),
        (S::RDMAXFER_ERR_OUT_OF_BOUNDS, 10),
        (S::RDMAXFER_ERR_PROTOCOL, 11),
        (S::RDMAXFER_ERR_CONNECTION, 12),
        (S::RDMAXFER_ERR_REFUSED, 13),
        (S::RDMAXFER_ERR_IO, 14),
        (S::RDMAXFER_ERR_INVALID_STATE, 15),
        (S::RDMAXFER_ERR_BUFFER_TOO_SMALL, 16),
        (S::RDMAXFER_ERR_AGAIN, 17),
        (S::RDMAXFER_ERR_SHUTDOWN, 18),
        (S::RDMAXFER_ERR_ABORTED, 19),
    ];
    let header = header_statuses();
    assert_eq!(
        expect.len(),
        header.len(),
        "a status without a fixed value here: {header:?}"
    );
    let mut texts = std::collections::HashSet::new();
    for (s, v) in expect {
        assert_eq!(s as i32, v, "{s:?}");
        assert!(
            header.contains(&(format!("{s:?}"), v)),
            "{s:?} = {v} is not in the header: {header:?}"
        );
        let t = strerror(v);
        assert!(!t.is_empty() && t != "unknown status", "{s:?}: {t:?}");
        assert!(texts.insert(t.clone()), "{s:?} shares its text {t:?}");
    }
    assert_eq!(strerror(0), "success");
    for v in [-1, 20, 1000, i32::MIN, i32::MAX] {
        assert_eq!(strerror(v), "unknown status", "{v}");
    }
}

#[test]
fn null_arguments_give_null_argument() {
    // SAFETY: each pointer passed is NULL (what this test is about), the live handle `cfg`,
    // a NUL-terminated literal, or a writable local; every call fails its NULL check before
    // touching anything else.
    unsafe {
        let n = S::RDMAXFER_ERR_NULL_ARGUMENT;
        let cfg = config();
        let np = ptr::null_mut();
        assert_eq!(rdmaxfer_config_new(ptr::null_mut()), n);
        assert!(
            last().contains("rdmaxfer_config_new: out_cfg is NULL"),
            "{}",
            last()
        );
        assert_eq!(rdmaxfer_config_set_port(np, 1), n);
        assert_eq!(rdmaxfer_config_set_device(np, c"x".as_ptr()), n);
        assert_eq!(rdmaxfer_config_set_gid_index(np, 0), n);
        assert_eq!(rdmaxfer_config_set_transport(np, 0), n);
        assert_eq!(rdmaxfer_config_set_mtu(np, 0), n);
        assert_eq!(rdmaxfer_config_set_timeout_ms(np, 1), n);
        assert_eq!(rdmaxfer_config_set_event_mode(np, 1), n);
        assert_eq!(rdmaxfer_config_set_token(np, ptr::null()), n);
        assert_eq!(rdmaxfer_config_set_msg_size(np, 1), n);

        let mut l = sentinel::<rdmaxfer_listener>();
        assert_eq!(
            rdmaxfer_listen(ptr::null(), c"0.0.0.0".as_ptr(), 1, &mut l),
            n
        );
        assert_eq!(rdmaxfer_listen(cfg, ptr::null(), 1, &mut l), n);
        assert!(last().contains("addr is NULL"), "{}", last());
        assert_eq!(
            rdmaxfer_listen(cfg, c"0.0.0.0".as_ptr(), 1, ptr::null_mut()),
            n
        );
        assert_eq!(l, sentinel(), "out-parameter written on failure");
        let mut port = 7u16;
        assert_eq!(rdmaxfer_listener_port(ptr::null(), &mut port), n);
        assert_eq!(port, 7);

        let mut c = sentinel::<rdmaxfer_conn>();
        assert_eq!(rdmaxfer_accept(ptr::null_mut(), &mut c), n);
        assert_eq!(rdmaxfer_connect(ptr::null(), c"h".as_ptr(), 1, &mut c), n);
        assert_eq!(rdmaxfer_connect(cfg, ptr::null(), 1, &mut c), n);
        assert_eq!(rdmaxfer_connect(cfg, c"h".as_ptr(), 1, ptr::null_mut()), n);
        assert_eq!(c, sentinel());

        let mut sz = 3usize;
        assert_eq!(rdmaxfer_conn_max_msg_size(ptr::null(), &mut sz), n);
        assert_eq!(sz, 3);
        assert_eq!(rdmaxfer_send(np.cast(), b"x".as_ptr().cast(), 1), n);
        let mut b = [0u8; 4];
        assert_eq!(
            rdmaxfer_recv(np.cast(), b.as_mut_ptr().cast(), 4, &mut sz),
            n
        );
        let mut st = rdmaxfer_pingpong_stats {
            iters: 99,
            ..Default::default()
        };
        assert_eq!(rdmaxfer_pingpong(np.cast(), 1, 1, &mut st), n);
        assert_eq!(st.iters, 99);

        let mut buf = sentinel::<rdmaxfer_buf>();
        assert_eq!(rdmaxfer_buf_new(np.cast(), 8, &mut buf), n);
        assert_eq!(buf, sentinel());
        assert_eq!(rdmaxfer_buf_write(np.cast(), 0, b.as_ptr().cast(), 1), n);
        assert_eq!(
            rdmaxfer_buf_read(ptr::null(), 0, b.as_mut_ptr().cast(), 1),
            n
        );
        assert_eq!(rdmaxfer_buf_len(ptr::null()), 0);
        let mut r = sentinel::<rdmaxfer_remote>();
        assert_eq!(rdmaxfer_remote_open(np.cast(), &mut r), n);
        assert_eq!(r, sentinel());
        assert_eq!(rdmaxfer_remote_len(ptr::null()), 0);
        assert_eq!(rdmaxfer_remote_access(ptr::null()), 0);
        let (nc, nr, nb) = (
            ptr::null_mut::<rdmaxfer_conn>(),
            ptr::null_mut::<rdmaxfer_remote>(),
            ptr::null_mut::<rdmaxfer_buf>(),
        );
        assert_eq!(rdmaxfer_rdma_write(nc, nr, 0, nb, 0, 1), n);
        assert_eq!(rdmaxfer_rdma_read(nc, nr, 0, nb, 0, 1), n);
        assert_eq!(rdmaxfer_remote_close(nc, nr), n);
        let mut rep = rdmaxfer_expose_report {
            written: 5,
            ..Default::default()
        };
        assert_eq!(
            rdmaxfer_expose(nc, b.as_mut_ptr().cast(), 4, RDMAXFER_ACCESS_READ, &mut rep),
            n
        );
        assert_eq!(rep.written, 5);

        assert_eq!(
            rdmaxfer_send_file(nc, c"/etc/hostname".as_ptr(), None, ptr::null_mut()),
            n
        );
        let mut sum = rdmaxfer_recv_summary {
            files: 4,
            bytes: 4,
            ..Default::default()
        };
        assert_eq!(rdmaxfer_recv_file(nc, c"/tmp".as_ptr(), 0, &mut sum), n);
        assert_eq!((sum.files, sum.bytes), (4, 4));

        let mut list = sentinel::<rdmaxfer_device_list>();
        assert_eq!(rdmaxfer_devices(ptr::null_mut()), n);
        assert_eq!(rdmaxfer_device_list_len(ptr::null()), 0);
        let mut info = rdmaxfer_device_info::default();
        assert_eq!(rdmaxfer_device_list_get(ptr::null(), 0, &mut info), n);
        assert_eq!(list, sentinel());
        list = ptr::null_mut();
        rdmaxfer_device_list_free(list);
        rdmaxfer_config_free(cfg);
    }
}

#[test]
fn free_of_null_is_a_no_op() {
    // SAFETY: NULL is a valid argument of every *_free and of rdmaxfer_conn_close.
    unsafe {
        rdmaxfer_config_free(ptr::null_mut());
        rdmaxfer_listener_free(ptr::null_mut());
        rdmaxfer_conn_free(ptr::null_mut());
        rdmaxfer_buf_free(ptr::null_mut());
        rdmaxfer_remote_free(ptr::null_mut());
        rdmaxfer_device_list_free(ptr::null_mut());
        assert_eq!(rdmaxfer_conn_close(ptr::null_mut()), S::RDMAXFER_OK);
    }
}

/// The event-loop calls (descriptors, try_*, shutdown) check their pointers like the rest; the
/// message size minimum the header names is enforced.
#[test]
fn event_loop_calls_and_the_msg_size_minimum_check_their_arguments() {
    // SAFETY: every handle passed is NULL (what this test is about) or the live `cfg`; the
    // out-parameters and buffers are writable locals; each call fails its NULL check first.
    unsafe {
        let n = S::RDMAXFER_ERR_NULL_ARGUMENT;
        let mut fd: std::ffi::c_int = -7;
        assert_eq!(rdmaxfer_listener_fd(ptr::null(), &mut fd), n);
        assert_eq!(rdmaxfer_conn_fd(ptr::null_mut(), &mut fd), n);
        assert_eq!(fd, -7, "out-parameter written on failure");
        let mut c = sentinel::<rdmaxfer_conn>();
        assert_eq!(rdmaxfer_listener_try_accept(ptr::null_mut(), &mut c), n);
        assert_eq!(c, sentinel());
        assert_eq!(rdmaxfer_listener_shutdown(ptr::null()), n);
        assert!(
            last().contains("rdmaxfer_listener_shutdown: listener is NULL"),
            "{}",
            last()
        );
        rdmaxfer_listener_free(ptr::null_mut());
        assert_eq!(
            rdmaxfer_conn_try_send(ptr::null_mut(), b"x".as_ptr().cast(), 1),
            n
        );
        let mut b = [0u8; 4];
        let mut len = 3usize;
        assert_eq!(
            rdmaxfer_conn_try_recv(ptr::null_mut(), b.as_mut_ptr().cast(), 4, &mut len),
            n
        );
        assert_eq!(len, 3);

        let i = S::RDMAXFER_ERR_INVALID_ARGUMENT;
        let cfg = config();
        for bad in [0, 100, 8191, (1 << 30) + 1] {
            assert_eq!(rdmaxfer_config_set_msg_size(cfg, bad), i, "{bad}");
            assert!(last().contains("at least 8192"), "{}", last());
        }
        assert_eq!(rdmaxfer_config_set_msg_size(cfg, 8192), S::RDMAXFER_OK);
        assert_eq!(rdmaxfer_config_set_msg_size(cfg, 1 << 30), S::RDMAXFER_OK);
        rdmaxfer_config_free(cfg);
    }
}

#[test]
fn invalid_arguments_give_invalid_argument_and_leave_outs_alone() {
    // SAFETY: `cfg` is a live handle, strings are NUL-terminated, out-parameters are writable
    // locals; `mis` points into `raw` (24 writable bytes), misaligned on purpose: the library
    // checks alignment before writing.
    unsafe {
        let i = S::RDMAXFER_ERR_INVALID_ARGUMENT;
        let cfg = config();
        let mut l = sentinel::<rdmaxfer_listener>();
        assert_eq!(rdmaxfer_listen(cfg, c"not-an-ip".as_ptr(), 1, &mut l), i);
        assert!(last().contains("is not an IP address"), "{}", last());
        assert_eq!(l, sentinel());
        // A misaligned out-parameter is refused, not written.
        let mut raw = [0u8; 24];
        let mis = raw
            .as_mut_ptr()
            .wrapping_add(1)
            .cast::<*mut rdmaxfer_config>();
        assert_eq!(rdmaxfer_config_new(mis), i);
        assert!(last().contains("misaligned"), "{}", last());
        assert_eq!(raw, [0u8; 24]);
        // A non-UTF-8 host.
        let mut c = sentinel::<rdmaxfer_conn>();
        let bad = [0xc3u8, 0x28, 0];
        assert_eq!(rdmaxfer_connect(cfg, bad.as_ptr().cast(), 1, &mut c), i);
        assert_eq!(c, sentinel());
        // An empty token would turn authentication off silently: refused; NULL clears it.
        assert_eq!(rdmaxfer_config_set_token(cfg, c"".as_ptr()), i);
        assert!(last().contains("token is empty"), "{}", last());
        assert_eq!(
            rdmaxfer_config_set_token(cfg, c"s3cret".as_ptr()),
            S::RDMAXFER_OK
        );
        assert_eq!(rdmaxfer_config_set_token(cfg, ptr::null()), S::RDMAXFER_OK);
        rdmaxfer_config_free(cfg);
    }
}

#[test]
fn devices_succeed_or_say_why_without_touching_the_out_parameter() {
    // SAFETY: `list` and `info`/`past` are writable out-parameters; `list` is used only after
    // a successful rdmaxfer_devices made it, and freed once.
    unsafe {
        let mut list = sentinel::<rdmaxfer_device_list>();
        match rdmaxfer_devices(&mut list) {
            S::RDMAXFER_OK => {
                assert_ne!(list, sentinel());
                let n = rdmaxfer_device_list_len(list);
                assert!(n >= 1);
                let mut info = rdmaxfer_device_info::default();
                assert_eq!(rdmaxfer_device_list_get(list, 0, &mut info), S::RDMAXFER_OK);
                assert!(!text(info.name).is_empty());
                let mut past = rdmaxfer_device_info::default();
                assert_eq!(
                    rdmaxfer_device_list_get(list, n, &mut past),
                    S::RDMAXFER_ERR_INVALID_ARGUMENT
                );
                rdmaxfer_device_list_free(list);
            }
            S::RDMAXFER_ERR_NO_DEVICE => {
                assert_eq!(list, sentinel(), "out-parameter written on failure");
                assert!(last().contains("modprobe rdma_rxe"), "{}", last());
            }
            s => panic!("unexpected {s:?}: {}", last()),
        }
    }
}

#[test]
fn send_options_refuse_bad_values_and_keep_what_they_had() {
    // SAFETY: every pointer passed is NULL, a handle made here and not yet freed, a static C
    // string, or the address of a local.
    unsafe {
        assert_eq!(
            rdmaxfer_send_options_new(ptr::null_mut()),
            S::RDMAXFER_ERR_NULL_ARGUMENT
        );
        rdmaxfer_send_options_free(ptr::null_mut());
        let mut o = ptr::null_mut();
        assert_eq!(rdmaxfer_send_options_new(&mut o), S::RDMAXFER_OK);
        assert_eq!(rdmaxfer_send_options_set_flags(o, 1 | 32), S::RDMAXFER_OK);
        assert_eq!(
            rdmaxfer_send_options_set_flags(o, 256),
            S::RDMAXFER_ERR_INVALID_ARGUMENT
        );
        assert!(last().contains("unknown flags 0x100"), "{}", last());
        for (chunk, st) in [
            (4096, S::RDMAXFER_OK),
            (4095, S::RDMAXFER_ERR_INVALID_ARGUMENT),
            (16 << 20, S::RDMAXFER_ERR_INVALID_ARGUMENT),
        ] {
            assert_eq!(
                rdmaxfer_send_options_set_chunk_size(o, chunk),
                st,
                "{chunk}"
            );
        }
        assert_eq!(
            rdmaxfer_send_options_set_slots(o, 0),
            S::RDMAXFER_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            rdmaxfer_send_options_set_verify(o, c"blake3".as_ptr()),
            S::RDMAXFER_OK
        );
        assert_eq!(
            rdmaxfer_send_options_set_verify(o, c"md5".as_ptr()),
            S::RDMAXFER_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            rdmaxfer_send_options_set_verify(o, ptr::null()),
            S::RDMAXFER_ERR_NULL_ARGUMENT
        );
        assert_eq!(
            rdmaxfer_send_options_add_exclude(o, c"*.tmp".as_ptr()),
            S::RDMAXFER_OK
        );
        // A bad argument fails before any connection is looked at, and leaves the report alone.
        let mut r = ptr::null_mut();
        assert_eq!(rdmaxfer_report_new(&mut r), S::RDMAXFER_OK);
        let paths = [c"/nonexistent".as_ptr()];
        assert_eq!(
            rdmaxfer_send_files(
                ptr::null_mut(),
                paths.as_ptr(),
                1,
                o,
                None,
                ptr::null_mut(),
                r
            ),
            S::RDMAXFER_ERR_NULL_ARGUMENT
        );
        assert_eq!(
            rdmaxfer_send_files(
                ptr::null_mut(),
                paths.as_ptr(),
                0,
                o,
                None,
                ptr::null_mut(),
                r
            ),
            S::RDMAXFER_ERR_INVALID_ARGUMENT
        );
        assert_eq!(rdmaxfer_report_len(r), 0);
        rdmaxfer_report_free(r);
        rdmaxfer_send_options_free(o);
    }
}

#[test]
fn an_mtu_with_rdma_cm_is_refused_not_ignored() {
    let cfg = config();
    // SAFETY: a live config (freed once, at the end), NUL-terminated strings, writable locals.
    unsafe {
        assert_eq!(rdmaxfer_config_set_mtu(cfg, 1024), S::RDMAXFER_OK);
        let mut c = sentinel();
        assert_eq!(
            rdmaxfer_connect(cfg, c"198.18.0.1".as_ptr(), 7000, &mut c),
            S::RDMAXFER_ERR_INVALID_ARGUMENT
        );
        assert!(
            last().contains("applies to the out-of-band transport only"),
            "{}",
            last()
        );
        let mut l = sentinel();
        assert_eq!(
            rdmaxfer_listen(cfg, c"0.0.0.0".as_ptr(), 7000, &mut l),
            S::RDMAXFER_ERR_INVALID_ARGUMENT
        );
        assert!(last().contains("rdmaxfer_config_set_mtu"), "{}", last());
        let mut n = sentinel();
        assert_eq!(
            rdmaxfer_connect_start(cfg, c"198.18.0.1".as_ptr(), 7000, &mut n),
            S::RDMAXFER_ERR_INVALID_ARGUMENT
        );
        assert_eq!((c, l, n), (sentinel(), sentinel(), sentinel()));
        // Over OOB the MTU applies: the call goes on (and fails here for want of a device, or
        // of a peer within 0.1 s).
        assert_eq!(rdmaxfer_config_set_transport(cfg, 1), S::RDMAXFER_OK);
        assert_eq!(rdmaxfer_config_set_timeout_ms(cfg, 100), S::RDMAXFER_OK);
        let st = rdmaxfer_connect(cfg, c"198.18.0.1".as_ptr(), 7000, &mut c);
        assert!(
            !last().contains("rdmaxfer_config_set_mtu"),
            "{st:?}: {}",
            last()
        );
        rdmaxfer_config_free(cfg);
    }
}

#[test]
fn a_nonblocking_connect_refuses_names_and_oob_before_anything_starts() {
    let cfg = config();
    // SAFETY: a live config (freed once, at the end), NUL-terminated strings, writable locals.
    unsafe {
        let mut c = sentinel();
        for (host, st) in [
            (c"localhost", S::RDMAXFER_ERR_INVALID_ARGUMENT),
            (c"rdma-host.example", S::RDMAXFER_ERR_INVALID_ARGUMENT),
        ] {
            assert_eq!(rdmaxfer_connect_start(cfg, host.as_ptr(), 7000, &mut c), st);
            assert!(last().contains("not a numeric address"), "{}", last());
        }
        assert_eq!(rdmaxfer_config_set_transport(cfg, 1), S::RDMAXFER_OK);
        assert_eq!(
            rdmaxfer_connect_start(cfg, c"198.18.0.1".as_ptr(), 7000, &mut c),
            S::RDMAXFER_ERR_INVALID_ARGUMENT
        );
        assert!(last().contains("RDMA CM only"), "{}", last());
        assert_eq!(c, sentinel(), "the out-parameter is untouched");
        assert_eq!(
            rdmaxfer_connect_start(cfg, ptr::null(), 7000, &mut c),
            S::RDMAXFER_ERR_NULL_ARGUMENT
        );
        rdmaxfer_connecting_free(ptr::null_mut());
        let mut fd = 0;
        assert_eq!(
            rdmaxfer_connecting_fd(ptr::null(), &mut fd),
            S::RDMAXFER_ERR_NULL_ARGUMENT
        );
        rdmaxfer_config_free(cfg);
    }
}

#[test]
fn recv_options_refuse_bad_values() {
    // SAFETY: a handle made here (freed once), static C strings.
    unsafe {
        assert_eq!(
            rdmaxfer_recv_options_new(ptr::null_mut()),
            S::RDMAXFER_ERR_NULL_ARGUMENT
        );
        rdmaxfer_recv_options_free(ptr::null_mut());
        let mut o = ptr::null_mut();
        assert_eq!(rdmaxfer_recv_options_new(&mut o), S::RDMAXFER_OK);
        assert_eq!(
            rdmaxfer_recv_options_set_flags(o, 1 | 2 | 4),
            S::RDMAXFER_OK
        );
        assert_eq!(
            rdmaxfer_recv_options_set_flags(o, 8),
            S::RDMAXFER_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            rdmaxfer_recv_options_set_verify(o, c"blake3".as_ptr()),
            S::RDMAXFER_OK
        );
        assert_eq!(
            rdmaxfer_recv_options_set_verify(o, ptr::null()),
            S::RDMAXFER_OK
        );
        assert_eq!(
            rdmaxfer_recv_options_set_verify(o, c"sha1".as_ptr()),
            S::RDMAXFER_ERR_INVALID_ARGUMENT
        );
        rdmaxfer_recv_options_free(o);
    }
}

#[test]
fn an_empty_report_reads_as_empty_and_checks_the_callers_size() {
    // SAFETY: every pointer passed is NULL, a handle made here and not yet freed, a static C
    // string, or the address of a local.
    unsafe {
        assert_eq!(
            rdmaxfer_report_new(ptr::null_mut()),
            S::RDMAXFER_ERR_NULL_ARGUMENT
        );
        rdmaxfer_report_free(ptr::null_mut());
        assert_eq!(rdmaxfer_report_len(ptr::null()), 0);
        let mut r = ptr::null_mut();
        assert_eq!(rdmaxfer_report_new(&mut r), S::RDMAXFER_OK);
        assert_eq!(rdmaxfer_report_len(r), 0);
        let mut f = rdmaxfer_file_result {
            outcome: -1,
            bytes: 7,
            ..Default::default()
        };
        assert_eq!(
            rdmaxfer_report_file(r, 0, &mut f),
            S::RDMAXFER_ERR_INVALID_ARGUMENT
        );
        assert!(last().contains("the report lists 0"), "{}", last());
        assert_eq!(f.bytes, 7, "untouched on failure");
        let mut t = rdmaxfer_totals {
            struct_size: 8,
            bytes: 9,
            ..Default::default()
        };
        assert_eq!(
            rdmaxfer_report_totals(r, &mut t),
            S::RDMAXFER_ERR_INVALID_ARGUMENT
        );
        assert!(last().contains("->struct_size is 8"), "{}", last());
        assert_eq!(t.bytes, 9, "untouched on failure");
        t.struct_size = std::mem::size_of::<rdmaxfer_totals>() + 16;
        assert_eq!(rdmaxfer_report_totals(r, &mut t), S::RDMAXFER_OK);
        assert_eq!(
            t.struct_size,
            std::mem::size_of::<rdmaxfer_totals>(),
            "the bytes written"
        );
        assert_eq!((t.entries, t.bytes), (0, 0));
        rdmaxfer_report_free(r);
    }
}

#[test]
fn the_last_error_is_per_thread_and_survives_successes() {
    // SAFETY: NULL arguments (refused by the NULL check); `cfg` is a live handle freed once.
    unsafe {
        assert_eq!(
            rdmaxfer_config_new(ptr::null_mut()),
            S::RDMAXFER_ERR_NULL_ARGUMENT
        );
        let here = last();
        assert!(here.contains("out_cfg is NULL"), "{here}");
        let cfg = config(); // a success does not clear it
        assert_eq!(last(), here);
        std::thread::spawn(|| {
            assert_eq!(last(), "", "a new thread starts with no error");
            assert_eq!(
                rdmaxfer_config_set_timeout_ms(ptr::null_mut(), 1),
                S::RDMAXFER_ERR_NULL_ARGUMENT
            );
            assert!(last().contains("rdmaxfer_config_set_timeout_ms"));
        })
        .join()
        .unwrap();
        assert_eq!(
            last(),
            here,
            "another thread's failure changed this thread's message"
        );
        rdmaxfer_config_free(cfg);
    }
}

#[test]
fn zero_length_data_may_be_null() {
    // SAFETY: NULL conn and NULL data with length 0: both allowed to be passed (NULL checks).
    unsafe {
        // NULL data with length 0 passes the argument check and fails on the NULL conn instead.
        assert_eq!(
            rdmaxfer_send(ptr::null_mut(), ptr::null::<c_void>(), 0),
            S::RDMAXFER_ERR_NULL_ARGUMENT
        );
        assert!(last().contains("conn is NULL"), "{}", last());
    }
}

fn version_parts() -> (u32, u32, u32) {
    let p = |s: &str| s.parse::<u32>().unwrap();
    (
        p(env!("CARGO_PKG_VERSION_MAJOR")),
        p(env!("CARGO_PKG_VERSION_MINOR")),
        p(env!("CARGO_PKG_VERSION_PATCH")),
    )
}

#[test]
fn version_matches_cargo_toml() {
    // SAFETY: takes no arguments; returns a static NUL-terminated string.
    assert_eq!(
        text(unsafe { rdmaxfer_version() }),
        env!("CARGO_PKG_VERSION")
    );
    // (The Rust constants behind the header's macros: src/capi/tests.rs, and a build-time
    // assertion in src/capi/status.rs.)
    let h = header();
    let define = |name: &str| -> u32 {
        let prefix = format!("#define {name} ");
        h.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {name} in the header"))
            .trim()
            .parse()
            .unwrap()
    };
    assert_eq!(
        (
            define("RDMAXFER_VERSION_MAJOR"),
            define("RDMAXFER_VERSION_MINOR"),
            define("RDMAXFER_VERSION_PATCH")
        ),
        version_parts()
    );
}

/// Compiles a C program against the committed header (-Wall -Wextra -Werror -pedantic) that
/// prints the header's version macro and a few constants; checks what it prints.
#[test]
fn the_header_compiles_as_c_and_its_version_macro_matches() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("v.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include \"rdmaxfer.h\"\n\
         int main(void) {\n\
           enum rdmaxfer_status s = RDMAXFER_ERR_BUFFER_TOO_SMALL;\n\
           printf(\"%s %d %d %d %x\\n\", RDMAXFER_VERSION, (int)s, RDMAXFER_ACCESS_READ_WRITE, RDMAXFER_DEFAULT_PORT,\n\
                  (unsigned)RDMAXFER_VERSION_NUMBER);\n\
           printf(\"%zu %zu %zu %zu %zu %d\\n\", sizeof(rdmaxfer_expose_report), sizeof(rdmaxfer_pingpong_stats),\n\
                  sizeof(rdmaxfer_device_info), sizeof(rdmaxfer_recv_summary), sizeof(s), RDMAXFER_ACCESS_READ);\n\
           return 0;\n}\n",
    )
    .unwrap();
    let exe = dir.path().join("v");
    let cc = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I"])
        .arg(root.join("include"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("running cc");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    let out = String::from_utf8(out.stdout).unwrap();
    let (first, second) = out.split_once('\n').unwrap();
    assert_eq!(format!("{first}\n"), {
        let (a, b, c) = version_parts();
        format!(
            "{} 16 3 18515 {:x}\n",
            env!("CARGO_PKG_VERSION"),
            (a << 16) | (b << 8) | c
        )
    });
    // The declarations in common/capi_ffi.rs match the header's layout.
    use std::mem::size_of;
    assert_eq!(
        second,
        format!(
            "{} {} {} {} {} {}\n",
            size_of::<rdmaxfer_expose_report>(),
            size_of::<rdmaxfer_pingpong_stats>(),
            size_of::<rdmaxfer_device_info>(),
            size_of::<rdmaxfer_recv_summary>(),
            size_of::<rdmaxfer_status>(),
            RDMAXFER_ACCESS_READ
        )
    );
}

/// The committed header is what the pinned cbindgen generates from src/capi (needs cbindgen
/// 0.27.0: ci/setup.sh installs it).
#[test]
fn the_committed_header_is_current() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("bash")
        .arg(root.join("ci/gen-header.sh"))
        .arg("--check")
        .output()
        .expect("running ci/gen-header.sh");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every function the header declares has a "Returns:" and a "Blocks:" line in the comment
/// right before its declaration (the header's conventions define their terms).
#[test]
fn every_function_in_the_header_says_what_it_returns_and_whether_it_blocks() {
    let h = header();
    let lines: Vec<&str> = h.lines().collect();
    let mut found = 0;
    for (i, l) in lines.iter().enumerate() {
        // Declarations start at column 0; comments, macros and struct fields do not.
        let head = l.split_once('(').map_or("", |(head, _)| head);
        let name = head.rsplit([' ', '*']).next().unwrap_or_default();
        if l.starts_with([' ', '#', '/', '}']) || !name.starts_with("rdmaxfer_") {
            continue;
        }
        found += 1;
        let in_comment = |c: &&str| c.starts_with(" *") || c.starts_with("/**");
        let start = lines[..i].iter().rposition(|c| !in_comment(c));
        let comment = &lines[start.map_or(0, |p| p + 1)..i];
        for label in [" * Returns: ", " * Blocks: "] {
            assert!(
                comment.iter().any(|c| c.starts_with(label)),
                "{name}: no {label:?} line in the comment before its declaration"
            );
        }
    }
    assert!(
        found >= 80,
        "only {found} declarations found: a parse error?"
    );
}
