//! Device tests (rxe0, in the guest) of the C API's listener and event-loop calls, through the
//! C ABI as a C program calls them (`common/capi_ffi.rs`): port 0 (the configured port in both
//! calls; configured as `RDMAXFER_PORT_ANY`, the system's choice), the listener and connection
//! descriptors with the try_* calls, the needed length on `RDMAXFER_ERR_BUFFER_TOO_SMALL`,
//! the expose report's `ok` after a call refused by the local range check, accept's deadline,
//! and a blocked accept released by `rdmaxfer_listener_shutdown` / `_free` from another
//! thread. (The poll-loop example server is in module `capi`.)

use std::ffi::{c_int, CStr};
use std::ptr;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rdmaxfer::cm::{CmId, ConnParam, EventKind};
use rdmaxfer::verbs::{CompletionQueue, ProtectionDomain, QpCaps, QueuePair, WaitMode};

use crate::capi_ffi::{rdmaxfer_status as S, *};
use crate::common::{need_rxe0, wait_until};

/// The header's RDMAXFER_TRANSPORT_OOB.
const RDMAXFER_TRANSPORT_OOB: u32 = 1;

/// `common::IP` as a C string.
pub(crate) const IP_C: &CStr = c"198.18.0.1";
const RW: u32 = 3;

/// A handle pointer handed to another thread (the C API allows any thread).
pub(crate) struct Send_<T>(pub(crate) *mut T);
// SAFETY: the library's handles may be used from any thread, one call at a time (the header's
// threading rule); the tests never call on one handle from two threads except where that rule
// is what is tested (busy, shutdown).
unsafe impl<T> Send for Send_<T> {}

pub(crate) fn last() -> String {
    // SAFETY: no arguments; returns a NUL-terminated string valid until the next failure here.
    unsafe { CStr::from_ptr(rdmaxfer_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

pub(crate) fn config(timeout_ms: u32, event: bool) -> *mut rdmaxfer_config {
    let mut cfg = ptr::null_mut();
    // SAFETY: `cfg` is a writable out-parameter, then a live handle.
    unsafe {
        assert_eq!(rdmaxfer_config_new(&mut cfg), S::RDMAXFER_OK);
        assert_eq!(
            rdmaxfer_config_set_timeout_ms(cfg, timeout_ms),
            S::RDMAXFER_OK
        );
        assert_eq!(
            rdmaxfer_config_set_event_mode(cfg, c_int::from(event)),
            S::RDMAXFER_OK
        );
        // RDMAXFER_PORT_ANY: listeners made with port 0 (the configured port) get a free one.
        assert_eq!(rdmaxfer_config_set_port(cfg, 0), S::RDMAXFER_OK);
    }
    cfg
}

/// [`config`] with `timeout_ms`, over OOB when `oob`.
pub(crate) fn config_for(timeout_ms: u32, oob: bool) -> *mut rdmaxfer_config {
    let c = config(timeout_ms, false);
    if oob {
        // SAFETY: a live config made above.
        assert_eq!(
            unsafe { rdmaxfer_config_set_transport(c, RDMAXFER_TRANSPORT_OOB) },
            S::RDMAXFER_OK
        );
    }
    c
}

/// A second listener on a port taken fails with the OS error beside the message (and no
/// completion status).
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_port_in_use_gives_its_os_error() {
    need_rxe0();
    let cfg = config(10_000, false);
    // SAFETY: a live config; the OOB transport listens on TCP.
    unsafe {
        assert_eq!(rdmaxfer_config_set_transport(cfg, 1), S::RDMAXFER_OK);
    }
    let (l, port) = listen(cfg, 0);
    let mut l2 = ptr::null_mut();
    // SAFETY: a live config, a NUL-terminated address, a writable out-parameter.
    let st = unsafe { rdmaxfer_listen(cfg, IP_C.as_ptr(), port, &mut l2) };
    assert_eq!(st, S::RDMAXFER_ERR_IO, "{}", last());
    assert!(l2.is_null());
    // SAFETY: no arguments.
    let (os, wc) = unsafe { (rdmaxfer_last_os_error(), rdmaxfer_last_wc_status()) };
    assert_eq!((os, wc), (libc::EADDRINUSE, -1), "{}", last());
    // SAFETY: live handles, each freed once.
    unsafe {
        rdmaxfer_listener_free(l);
        rdmaxfer_config_free(cfg);
    }
}

/// A server and a client that both pass port 0 (`RDMAXFER_PORT_CONFIGURED`) with the same
/// configured port meet there: 0 means one thing in both calls (an earlier `rdmaxfer_listen`
/// let the system choose, and such a pair timed out).
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn port_0_means_the_configured_port_to_listen_and_to_connect() {
    need_rxe0();
    let port = crate::common::port();
    let configured = || {
        let cfg = config(60_000, false);
        // SAFETY: a live config.
        assert_eq!(
            unsafe { rdmaxfer_config_set_port(cfg, port) },
            S::RDMAXFER_OK
        );
        Send_(cfg)
    };
    let (server_cfg, client_cfg) = (configured(), configured());
    let (l, got) = listen(server_cfg.0, 0);
    assert_eq!(got, port, "the listener is on the configured port");
    let l = Send_(l);
    let server = thread::spawn(move || {
        let l = l;
        let mut c = ptr::null_mut();
        // SAFETY: a live listener used by this thread only, a writable out-parameter.
        let st = unsafe { rdmaxfer_accept(l.0, &mut c) };
        (st, Send_(c), l)
    });
    let mut c = ptr::null_mut();
    // SAFETY: a live config, a NUL-terminated host, a writable out-parameter.
    let st = unsafe { rdmaxfer_connect(client_cfg.0, IP_C.as_ptr(), 0, &mut c) };
    assert_eq!(st, S::RDMAXFER_OK, "connect with port 0: {}", last());
    let (st, sc, l) = server.join().unwrap();
    assert_eq!(st, S::RDMAXFER_OK, "accept");
    // Each side's peer address: the server's at its port, the client's on rxe0's address.
    let peer = |conn: *mut rdmaxfer_conn, cap: usize| {
        let mut buf = vec![0x55u8; cap];
        let mut n = 0usize;
        // SAFETY: a live connection, `cap` writable bytes, a writable out-parameter.
        let st = unsafe { rdmaxfer_conn_peer_addr(conn, buf.as_mut_ptr().cast(), cap, &mut n) };
        (st, n, buf)
    };
    let (st, n, buf) = peer(c, 48);
    assert_eq!(st, S::RDMAXFER_OK, "{}", last());
    assert_eq!(&buf[..=n], format!("198.18.0.1:{port}\0").as_bytes());
    let (st, n2, buf) = peer(sc.0, 48);
    assert_eq!(st, S::RDMAXFER_OK, "{}", last());
    assert!(
        buf[..n2].starts_with(b"198.18.0.1:") && buf[n2] == 0,
        "{buf:?}"
    );
    let (st, n3, buf) = peer(c, n);
    assert_eq!(
        (st, n3),
        (S::RDMAXFER_ERR_BUFFER_TOO_SMALL, n),
        "no room for the NUL"
    );
    assert!(buf.iter().all(|&b| b == 0x55), "buf untouched");
    // SAFETY: live handles, each freed once.
    unsafe {
        rdmaxfer_conn_free(c);
        rdmaxfer_conn_free(sc.0);
        rdmaxfer_listener_free(l.0);
        rdmaxfer_config_free(server_cfg.0);
        rdmaxfer_config_free(client_cfg.0);
    }
}

/// Listens on rxe0's address and `port`; returns the listener and the port it reports.
pub(crate) fn listen(cfg: *mut rdmaxfer_config, port: u16) -> (*mut rdmaxfer_listener, u16) {
    let mut l = ptr::null_mut();
    let mut got = 0u16;
    // SAFETY: live config, NUL-terminated address, writable out-parameters.
    unsafe {
        assert_eq!(
            rdmaxfer_listen(cfg, IP_C.as_ptr(), port, &mut l),
            S::RDMAXFER_OK,
            "{}",
            last()
        );
        assert_eq!(rdmaxfer_listener_port(l, &mut got), S::RDMAXFER_OK);
    }
    (l, got)
}

/// Waits (bounded) until `fd` is readable.
pub(crate) fn readable(fd: c_int, what: &str) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one writable pollfd.
    let n = unsafe { libc::poll(&mut p, 1, 120_000) };
    assert_eq!(n, 1, "{what}: not readable within 120 s");
}

/// The client side of [`port_zero_descriptors_try_calls_out_len_and_expose_ok`].
fn client(port: u16) {
    let cfg = config(120_000, false);
    // SAFETY: live handles made here, NUL-terminated strings, writable locals; each handle is
    // freed once, at the end.
    unsafe {
        let mut c = ptr::null_mut();
        assert_eq!(
            rdmaxfer_connect(cfg, IP_C.as_ptr(), port, &mut c),
            S::RDMAXFER_OK,
            "connecting to the port the listener reported: {}",
            last()
        );
        rdmaxfer_config_free(cfg);
        let big = [7u8; 100];
        assert_eq!(rdmaxfer_send(c, big.as_ptr().cast(), 100), S::RDMAXFER_OK);
        assert_eq!(rdmaxfer_send(c, b"abc".as_ptr().cast(), 3), S::RDMAXFER_OK);
        let mut back = [0u8; 16];
        let mut n = 0usize;
        assert_eq!(
            rdmaxfer_recv(c, back.as_mut_ptr().cast(), 16, &mut n),
            S::RDMAXFER_OK,
            "{}",
            last()
        );
        assert_eq!(&back[..n], b"abc", "the echo");
        // One-sided: a write past the 16-byte exposure is refused locally; one inside works.
        let mut r = ptr::null_mut();
        assert_eq!(
            rdmaxfer_remote_open(c, &mut r),
            S::RDMAXFER_OK,
            "{}",
            last()
        );
        let mut b = ptr::null_mut();
        assert_eq!(rdmaxfer_buf_new(c, 8, &mut b), S::RDMAXFER_OK);
        assert_eq!(
            rdmaxfer_buf_write(b, 0, b"WXYZwxyz".as_ptr().cast(), 8),
            S::RDMAXFER_OK
        );
        assert_eq!(
            rdmaxfer_rdma_write(c, r, 10, b, 0, 8),
            S::RDMAXFER_ERR_OUT_OF_BOUNDS
        );
        assert_eq!(
            rdmaxfer_rdma_write(c, r, 0, b, 0, 4),
            S::RDMAXFER_OK,
            "{}",
            last()
        );
        assert_eq!(rdmaxfer_remote_close(c, r), S::RDMAXFER_OK, "{}", last());
        rdmaxfer_remote_free(r);
        rdmaxfer_buf_free(b);
        assert_eq!(rdmaxfer_conn_close(c), S::RDMAXFER_OK, "{}", last());
    }
}

/// Port 0 lets the system choose (two listeners get two ports) and the reported port is the one
/// a client reaches; the listener descriptor wakes for it and try_accept takes it (AGAIN
/// before); a connection's descriptor and try_recv/try_send; a message too long for the buffer
/// gives BUFFER_TOO_SMALL with the needed length in `*out_len`; the expose report stays ok
/// after a write the client's range check refused; the peer's disconnect wakes the descriptor
/// and try_recv says CONNECTION.
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn port_zero_descriptors_try_calls_out_len_and_expose_ok() {
    need_rxe0();
    let cfg = config(120_000, true);
    let (l, port) = listen(cfg, 0);
    let (l2, port2) = listen(cfg, 0);
    assert_ne!(port, 0, "port 0 must report the port the system chose");
    assert_ne!(port2, 0);
    assert_ne!(port, port2, "two listeners on port 0 got the same port");
    // SAFETY: live handles, writable locals; each handle freed once.
    unsafe {
        rdmaxfer_listener_free(l2);
        rdmaxfer_config_free(cfg);
        let mut conn = ptr::null_mut();
        assert_eq!(
            rdmaxfer_listener_try_accept(l, &mut conn),
            S::RDMAXFER_ERR_AGAIN
        );
        assert!(conn.is_null(), "out-parameter written on AGAIN");
        let mut lfd: c_int = -1;
        assert_eq!(rdmaxfer_listener_fd(l, &mut lfd), S::RDMAXFER_OK);
        assert!(lfd >= 0);

        let peer = thread::spawn(move || client(port));
        let t = Instant::now();
        loop {
            readable(lfd, "the listener");
            match rdmaxfer_listener_try_accept(l, &mut conn) {
                S::RDMAXFER_OK => break,
                S::RDMAXFER_ERR_AGAIN => {
                    assert!(t.elapsed() < Duration::from_secs(120), "no client came")
                }
                s => panic!("try_accept: {s:?}: {}", last()),
            }
        }
        rdmaxfer_listener_free(l);

        let mut cfd: c_int = -1;
        assert_eq!(
            rdmaxfer_conn_fd(conn, &mut cfd),
            S::RDMAXFER_OK,
            "{}",
            last()
        );
        assert!(cfd >= 0);
        // Receives, by the rule: poll, then try until AGAIN.
        let mut small = [0u8; 10];
        // Each result with the thread's last error message as it was then (an AGAIN between
        // the two messages replaces it).
        let mut got: Vec<(S, usize, Vec<u8>, String)> = Vec::new();
        while got.len() < 2 {
            let mut n = 12345usize;
            match rdmaxfer_conn_try_recv(conn, small.as_mut_ptr().cast(), 10, &mut n) {
                S::RDMAXFER_ERR_AGAIN => readable(cfd, "the connection"),
                s => got.push((s, n, small[..n.min(10)].to_vec(), last())),
            }
        }
        assert_eq!(got[0].0, S::RDMAXFER_ERR_BUFFER_TOO_SMALL);
        assert_eq!(got[0].1, 100, "the needed length in *out_len");
        assert!(got[0].3.contains("100-byte message"), "{}", got[0].3);
        assert_eq!((got[1].0, got[1].1), (S::RDMAXFER_OK, 3));
        assert_eq!(got[1].2, b"abc");
        loop {
            match rdmaxfer_conn_try_send(conn, b"abc".as_ptr().cast(), 3) {
                S::RDMAXFER_OK => break,
                S::RDMAXFER_ERR_AGAIN => readable(cfd, "send credit"),
                s => panic!("try_send: {s:?}: {}", last()),
            }
        }

        let mut data = [0u8; 16];
        let mut rep = rdmaxfer_expose_report::default();
        assert_eq!(
            rdmaxfer_expose(conn, data.as_mut_ptr().cast(), 16, RW, &mut rep),
            S::RDMAXFER_OK,
            "{}",
            last()
        );
        assert_eq!(
            rep.ok, 1,
            "a call refused by the client's range check is not a failure"
        );
        assert_eq!(rep.written, 4);
        assert_eq!(&data[..4], b"WXYZ");
        assert!(data[4..].iter().all(|&b| b == 0));

        // The client closes: the descriptor wakes and try_recv tells.
        let st = loop {
            let mut n = 0usize;
            match rdmaxfer_conn_try_recv(conn, small.as_mut_ptr().cast(), 10, &mut n) {
                S::RDMAXFER_ERR_AGAIN => readable(cfd, "the disconnect"),
                s => break s,
            }
        };
        assert_eq!(st, S::RDMAXFER_ERR_CONNECTION, "{}", last());
        rdmaxfer_conn_free(conn);
        peer.join().unwrap();
    }
}

/// A client on its own thread: connects (OOB when `oob`), sends "hi" and checks the echo.
/// Gives the connect's status and last error message.
pub(crate) fn echo_client(port: u16, oob: bool) -> JoinHandle<(S, String)> {
    thread::spawn(move || {
        let cfg = config_for(20_000, oob);
        // SAFETY: handles made here, each freed once; NUL-terminated strings; writable locals.
        unsafe {
            let mut c = ptr::null_mut();
            let st = rdmaxfer_connect(cfg, IP_C.as_ptr(), port, &mut c);
            rdmaxfer_config_free(cfg);
            if st != S::RDMAXFER_OK {
                return (st, last());
            }
            assert_eq!(rdmaxfer_send(c, b"hi".as_ptr().cast(), 2), S::RDMAXFER_OK);
            let mut back = [0u8; 8];
            let mut n = 0usize;
            assert_eq!(
                rdmaxfer_recv(c, back.as_mut_ptr().cast(), 8, &mut n),
                S::RDMAXFER_OK,
                "{}",
                last()
            );
            assert_eq!(&back[..n], b"hi");
            assert_eq!(rdmaxfer_conn_close(c), S::RDMAXFER_OK, "{}", last());
            (S::RDMAXFER_OK, String::new())
        }
    })
}

/// Echoes one message on an accepted connection, then frees it.
pub(crate) fn echo(conn: *mut rdmaxfer_conn) {
    // SAFETY: the accepted connection (freed once), writable locals.
    unsafe {
        let mut buf = [0u8; 8];
        let mut n = 0usize;
        assert_eq!(
            rdmaxfer_recv(conn, buf.as_mut_ptr().cast(), 8, &mut n),
            S::RDMAXFER_OK,
            "{}",
            last()
        );
        assert_eq!(rdmaxfer_send(conn, buf.as_ptr().cast(), n), S::RDMAXFER_OK);
        rdmaxfer_conn_free(conn);
    }
}

/// A connect request from a client that will never complete its handshake: a CM id with a QP
/// of its own, whose RTU librdmacm would send only when the answer's event is read, and it is
/// not (dropping the id ends it).
pub(crate) fn stalled_client(port: u16) -> (CmId, (QueuePair, CompletionQueue, ProtectionDomain)) {
    let t = Duration::from_secs(30);
    let id = CmId::new().unwrap();
    let dst = std::net::SocketAddr::new(crate::common::IP.parse().unwrap(), port);
    id.resolve_addr(None, dst, t).unwrap();
    id.expect_event(EventKind::AddrResolved, t, "address")
        .unwrap();
    id.resolve_route(t).unwrap();
    id.expect_event(EventKind::RouteResolved, t, "route")
        .unwrap();
    let ctx = id.context().unwrap();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let cq = CompletionQueue::new(&ctx, 16, WaitMode::Poll).unwrap();
    let qp = id.create_qp(&pd, &cq, &cq, QpCaps::default()).unwrap();
    let param = ConnParam {
        private_data: rdmaxfer::xfer::wire::Hello::new(16, 8192).encode().to_vec(),
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
    };
    id.connect(&param).unwrap();
    (id, (qp, cq, pd))
}

/// try_accept never blocks on a client that stalls its handshake: it answers the request and
/// returns AGAIN at once, and takes a good client that comes meanwhile (the listener's
/// descriptor wakes for it) while the stalled one is still pending; the good client's echo
/// works.
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn try_accept_serves_others_while_a_client_stalls_its_handshake() {
    need_rxe0();
    let cfg = config(60_000, false);
    let (l, port) = listen(cfg, 0);
    let mut fd = -1;
    // SAFETY: a live listener and a writable local.
    assert_eq!(unsafe { rdmaxfer_listener_fd(l, &mut fd) }, S::RDMAXFER_OK);
    let stalled = stalled_client(port);
    readable(fd, "the stalled client's request");
    let mut conn = ptr::null_mut();
    let t = Instant::now();
    // SAFETY: a live listener and a writable local.
    let st = unsafe { rdmaxfer_listener_try_accept(l, &mut conn) };
    assert_eq!(st, S::RDMAXFER_ERR_AGAIN, "{}", last());
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let good = echo_client(port, false);
    let t0 = Instant::now();
    let mut calls = 0;
    loop {
        readable(fd, "the listener");
        let t = Instant::now();
        // SAFETY: a live listener and a writable local.
        let st = unsafe { rdmaxfer_listener_try_accept(l, &mut conn) };
        calls += 1;
        assert!(t.elapsed() < Duration::from_secs(2), "try_accept blocked");
        if st == S::RDMAXFER_OK {
            break;
        }
        assert_eq!(st, S::RDMAXFER_ERR_AGAIN, "{}", last());
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no good client in 60 s"
        );
    }
    echo(conn);
    let (st, msg) = good.join().unwrap();
    assert_eq!(st, S::RDMAXFER_OK, "{msg}");
    println!("the good client taken after {calls} try_accept calls");
    drop(stalled);
    // SAFETY: live handles, each freed once.
    unsafe {
        rdmaxfer_listener_free(l);
        rdmaxfer_config_free(cfg);
    }
}

/// A non-blocking connect to a port nobody listens on: each try_finish returns at once (AGAIN
/// while under way), the descriptor wakes the loop, and the refusal comes as the blocking
/// connect's would; after it, the connect is over (INVALID_STATE) and free is clean.
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_nonblocking_connect_to_nobody_fails_as_connect_would_and_never_blocks() {
    need_rxe0();
    let cfg = config(10_000, false);
    // A port taken from a listener that is then freed: nothing listens there.
    let (l, port) = listen(cfg, 0);
    // SAFETY: live handles made here (each freed once), NUL-terminated strings, writable
    // locals.
    unsafe {
        rdmaxfer_listener_free(l);
        let mut c = ptr::null_mut();
        assert_eq!(
            rdmaxfer_connect_start(cfg, IP_C.as_ptr(), port, &mut c),
            S::RDMAXFER_OK,
            "{}",
            last()
        );
        let mut fd = -1;
        assert_eq!(rdmaxfer_connecting_fd(c, &mut fd), S::RDMAXFER_OK);
        let mut conn = ptr::null_mut();
        let t0 = Instant::now();
        let st = loop {
            let t = Instant::now();
            let st = rdmaxfer_connecting_try_finish(c, &mut conn);
            assert!(t.elapsed() < Duration::from_secs(2), "try_finish blocked");
            if st != S::RDMAXFER_ERR_AGAIN {
                break st;
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "no end in 60 s");
            readable(fd, "the connect's descriptor");
        };
        assert_eq!(st, S::RDMAXFER_ERR_CONNECTION, "{}", last());
        assert!(last().contains("rejected"), "{}", last());
        assert!(conn.is_null());
        assert_eq!(
            rdmaxfer_connecting_try_finish(c, &mut conn),
            S::RDMAXFER_ERR_INVALID_STATE
        );
        assert_eq!(
            rdmaxfer_connecting_fd(c, &mut fd),
            S::RDMAXFER_ERR_INVALID_STATE
        );
        rdmaxfer_connecting_free(c);
        rdmaxfer_config_free(cfg);
    }
}

/// Accept waits at most the configured timeout (TIMEOUT, listener still usable); a thread
/// blocked in accept returns SHUTDOWN within 1 s of rdmaxfer_listener_shutdown (or of
/// rdmaxfer_listener_free) on another thread; a shut-down listener refuses every later accept.
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn blocked_accept_returns_shutdown_within_a_second_of_the_cancel() {
    need_rxe0();
    // SAFETY: live handles made here, writable locals; the listener is used from two threads
    // only as the header allows (shutdown/free while an accept is inside).
    unsafe {
        let cfg = config(300, false);
        let (l, _) = listen(cfg, 0);
        let mut c = ptr::null_mut();
        assert_eq!(rdmaxfer_accept(l, &mut c), S::RDMAXFER_ERR_TIMEOUT);
        assert!(last().contains("timed out"), "{}", last());
        assert_eq!(
            rdmaxfer_accept(l, &mut c),
            S::RDMAXFER_ERR_TIMEOUT,
            "usable again"
        );
        assert!(c.is_null());
        rdmaxfer_listener_free(l);
        rdmaxfer_config_free(cfg);

        for free in [false, true] {
            let cfg = config(600_000, false);
            let (l, _) = listen(cfg, 0);
            rdmaxfer_config_free(cfg);
            let lp = Send_(l);
            let t = thread::spawn(move || {
                let lp = lp;
                let mut c = ptr::null_mut();
                // BUSY while the main thread's rdmaxfer_listener_port (below) holds it: again.
                let st = loop {
                    match rdmaxfer_accept(lp.0, &mut c) {
                        S::RDMAXFER_ERR_BUSY => thread::yield_now(),
                        st => break st,
                    }
                };
                (st, c.is_null(), last())
            });
            // Synchronise on state: once the accept holds the listener, other calls are BUSY.
            wait_until(
                "the accept to hold the listener",
                Duration::from_secs(60),
                || {
                    let mut p = 0u16;
                    rdmaxfer_listener_port(l, &mut p) == S::RDMAXFER_ERR_BUSY
                },
            );
            let t0 = Instant::now();
            if free {
                rdmaxfer_listener_free(l);
            } else {
                assert_eq!(rdmaxfer_listener_shutdown(l), S::RDMAXFER_OK);
            }
            let (st, untouched, msg) = t.join().unwrap();
            let took = t0.elapsed();
            assert_eq!(st, S::RDMAXFER_ERR_SHUTDOWN, "free={free}: {msg}");
            assert!(msg.contains("was shut down"), "{msg}");
            assert!(untouched, "out-parameter written on SHUTDOWN");
            assert!(
                took < Duration::from_secs(1),
                "free={free}: the blocked accept returned {took:?} after the cancel"
            );
            let mut p = 0u16;
            if free {
                assert_eq!(
                    rdmaxfer_listener_port(l, &mut p),
                    S::RDMAXFER_ERR_INVALID_STATE
                );
            } else {
                let mut c = ptr::null_mut();
                assert_eq!(rdmaxfer_accept(l, &mut c), S::RDMAXFER_ERR_SHUTDOWN);
                assert_eq!(
                    rdmaxfer_listener_try_accept(l, &mut c),
                    S::RDMAXFER_ERR_SHUTDOWN
                );
                assert_eq!(rdmaxfer_listener_shutdown(l), S::RDMAXFER_OK, "again");
                rdmaxfer_listener_free(l);
            }
        }
    }
}
