//! Unit tests of the boundary that need a test-only hook: a panic injected inside a handle's
//! lock (the integration tests in `tests/capi_host.rs` cover the exports from outside).

use std::cell::Cell;

thread_local! {
    static PANIC_IN: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// Called by `handle::lock` with the lock held: panics once when armed for this handle type.
pub(crate) fn maybe_panic(name: &str) {
    if let Some(armed) = PANIC_IN.with(Cell::get) {
        if armed == name {
            PANIC_IN.with(|p| p.set(None));
            panic!("injected test panic in {name}");
        }
    }
}

use std::ptr;

use super::boundary::{self, last_error, Fail};
use super::config::*;
use super::conn::rdmaxfer_conn;
use super::handle::{self, free_handle, impl_handle, into_handle, take_state, Slot};
use super::listener::{rdmaxfer_listen, rdmaxfer_listener};
use super::status::rdmaxfer_status as S;

/// Arms a panic inside the next lock of a handle of type `name` on this thread.
fn arm(name: &'static str) {
    PANIC_IN.with(|p| p.set(Some(name)));
}

fn new_config() -> *mut rdmaxfer_config {
    let mut cfg = ptr::null_mut();
    assert_eq!(rdmaxfer_config_new(&mut cfg), S::RDMAXFER_OK);
    assert!(!cfg.is_null());
    cfg
}

#[test]
fn a_panic_in_the_body_becomes_a_status() {
    let s = boundary::run("test_fn", || panic!("boom {}", 42));
    assert_eq!(s, S::RDMAXFER_ERR_PANIC);
    let m = last_error();
    assert!(m.contains("test_fn: panicked: boom 42"), "{m}");
    let v = boundary::run_or("test_fn2", 7usize, || panic!("again"));
    assert_eq!(v, 7);
    assert!(last_error().contains("test_fn2: panicked: again"));
}

#[test]
fn a_panic_payload_that_panics_when_dropped_is_contained() {
    struct Bomb;
    impl Drop for Bomb {
        fn drop(&mut self) {
            panic!("the payload's destructor panics too");
        }
    }
    let s = boundary::run("bomb", || std::panic::panic_any(Bomb));
    assert_eq!(s, S::RDMAXFER_ERR_PANIC);
    assert!(
        last_error().contains("non-string payload"),
        "{}",
        last_error()
    );
}

#[test]
fn failures_carry_the_function_name_and_status() {
    let s = boundary::run("f", || Err(Fail::invalid("bad thing")));
    assert_eq!(s, S::RDMAXFER_ERR_INVALID_ARGUMENT);
    assert_eq!(last_error(), "f: bad thing");
    let e = crate::Error::Timeout {
        what: "x",
        after: std::time::Duration::from_secs(1),
    };
    let s = boundary::run("g", || Err(e.into()));
    assert_eq!(s, S::RDMAXFER_ERR_TIMEOUT);
    assert!(last_error().starts_with("g: timed out"));
}

#[test]
fn a_panic_inside_an_export_poisons_only_that_handle() {
    let cfg = new_config();
    let other = new_config();
    arm("rdmaxfer_config");
    assert_eq!(rdmaxfer_config_set_port(cfg, 1234), S::RDMAXFER_ERR_PANIC);
    assert!(
        last_error().contains("rdmaxfer_config_set_port: panicked: injected test panic"),
        "{}",
        last_error()
    );
    // Poisoned: every later call says so, and out-parameters stay untouched.
    assert_eq!(rdmaxfer_config_set_port(cfg, 1234), S::RDMAXFER_ERR_PANIC);
    assert!(last_error().contains("earlier call on this rdmaxfer_config panicked"));
    let sentinel = 0x1000 as *mut rdmaxfer_listener;
    let mut l = sentinel;
    assert_eq!(
        rdmaxfer_listen(cfg, c"127.0.0.1".as_ptr(), 1, &mut l),
        S::RDMAXFER_ERR_PANIC
    );
    assert_eq!(l, sentinel, "out-parameter written on failure");
    // The other handle is fine; the poisoned one can still be freed.
    assert_eq!(rdmaxfer_config_set_port(other, 1234), S::RDMAXFER_OK);
    rdmaxfer_config_free(cfg);
    rdmaxfer_config_free(other);
}

#[test]
fn a_free_during_a_call_takes_effect_when_the_call_leaves() {
    let cfg = new_config();
    let call = handle::handle(cfg, "cfg").expect("a free handle locks");
    assert_eq!(rdmaxfer_config_set_port(cfg, 5), S::RDMAXFER_ERR_BUSY);
    assert!(
        last_error().contains("in use by another call"),
        "{}",
        last_error()
    );
    assert_eq!(
        call.port, RDMAXFER_DEFAULT_PORT,
        "the busy call changed nothing"
    );
    // The free closes the handle at once; the call inside keeps its state until it leaves.
    rdmaxfer_config_free(cfg);
    assert_eq!(call.port, RDMAXFER_DEFAULT_PORT);
    drop(call);
}

/// A handle type of its own, so that no other test's handles share its free list.
struct test_handle {
    slot: Slot<Probe>,
}
impl_handle!(test_handle, Probe);

/// Counts its drops.
struct Probe(std::sync::Arc<std::sync::atomic::AtomicUsize>);
impl Drop for Probe {
    fn drop(&mut self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn freed_handles_fail_clearly_and_their_slots_are_reused() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;
    let drops = Arc::new(AtomicUsize::new(0));
    let a = into_handle::<test_handle>(Probe(drops.clone()));
    let call = handle::handle(a, "a").unwrap();
    free_handle("free_a", a);
    assert_eq!(drops.load(SeqCst), 0, "dropped while a call is inside");
    let again = handle::handle(a, "a")
        .err()
        .expect("a freed handle is refused");
    assert_eq!(again.status, S::RDMAXFER_ERR_INVALID_STATE);
    assert_eq!(again.msg, "this test_handle was freed");
    free_handle("free_a", a);
    assert_eq!(last_error(), "free_a: this test_handle was already freed");
    drop(call);
    assert_eq!(drops.load(SeqCst), 1, "the last call out drops the state");
    assert!(handle::handle(a, "a").is_err());

    // The next handle of this type reuses the slot; freeing it with no call inside drops at once.
    let b = into_handle::<test_handle>(Probe(drops.clone()));
    assert_eq!(b, a, "the freed slot is reused");
    assert!(handle::handle(b, "b").is_ok());
    free_handle("free_b", b);
    assert_eq!(drops.load(SeqCst), 2);

    // take_state: refused while another call is inside (the handle stays open), then hands
    // the state over and leaves the slot closed.
    let c = into_handle::<test_handle>(Probe(drops.clone()));
    let call = handle::handle(c, "c").unwrap();
    let busy = take_state(c).err().expect("busy");
    assert_eq!(busy.status, S::RDMAXFER_ERR_BUSY);
    drop(call);
    let st = take_state(c).expect("idle: taken");
    assert_eq!(drops.load(SeqCst), 2, "handed over, not dropped");
    drop(st);
    assert_eq!(drops.load(SeqCst), 3);
    assert_eq!(
        take_state(c).err().expect("taken already").status,
        S::RDMAXFER_ERR_INVALID_STATE
    );
    free_handle("free_c", c);
    assert_eq!(last_error(), "free_c: this test_handle was already freed");
}

#[test]
fn a_panicking_drop_of_a_freed_state_does_not_unwind() {
    struct Bomb;
    impl Drop for Bomb {
        fn drop(&mut self) {
            panic!("state drop panics");
        }
    }
    struct bomb_handle {
        slot: Slot<Bomb>,
    }
    impl_handle!(bomb_handle, Bomb);
    let h = into_handle::<bomb_handle>(Bomb);
    free_handle("free_bomb", h);
    assert!(
        last_error().contains("dropping the freed handle's state panicked: state drop panics"),
        "{}",
        last_error()
    );
    // The slot went back to the free list in a usable state.
    let h2 = into_handle::<bomb_handle>(Bomb);
    assert_eq!(h2, h);
    assert!(handle::handle(h2, "h2").is_ok());
    let st = take_state(h2).expect("taken");
    std::mem::forget(st);
}

#[test]
fn the_version_constants_match_cargo_toml() {
    use super::status::*;
    let p = |s: &str| s.parse::<u32>().unwrap();
    assert_eq!(
        (
            RDMAXFER_VERSION_MAJOR,
            RDMAXFER_VERSION_MINOR,
            RDMAXFER_VERSION_PATCH
        ),
        (
            p(env!("CARGO_PKG_VERSION_MAJOR")),
            p(env!("CARGO_PKG_VERSION_MINOR")),
            p(env!("CARGO_PKG_VERSION_PATCH"))
        )
    );
}

#[test]
fn port_0_is_the_configured_port_in_both_calls_and_any_only_for_a_listener() {
    let mut c = Config::default();
    assert_eq!(
        (c.listen_port(0), c.connect_port(0).ok()),
        (RDMAXFER_DEFAULT_PORT, Some(RDMAXFER_DEFAULT_PORT)),
        "RDMAXFER_PORT_CONFIGURED means one port in both calls"
    );
    c.port = RDMAXFER_PORT_ANY;
    assert_eq!((c.listen_port(0), c.listen_port(9)), (0, 9));
    assert_eq!(c.connect_port(9).ok(), Some(9));
    let mut cfg = ptr::null_mut();
    assert_eq!(rdmaxfer_config_new(&mut cfg), S::RDMAXFER_OK);
    assert_eq!(
        rdmaxfer_config_set_port(cfg, RDMAXFER_PORT_ANY),
        S::RDMAXFER_OK
    );
    // A listener then lets the system choose; a connect refuses at once, before any packet.
    let mut conn = ptr::null_mut();
    assert_eq!(
        super::conn::rdmaxfer_connect(
            cfg,
            c"198.18.0.1".as_ptr(),
            RDMAXFER_PORT_CONFIGURED,
            &mut conn
        ),
        S::RDMAXFER_ERR_INVALID_ARGUMENT
    );
    assert!(conn.is_null(), "the out-parameter is untouched");
    assert!(
        last_error().contains("RDMAXFER_PORT_ANY"),
        "{}",
        last_error()
    );
    rdmaxfer_config_free(cfg);
}

#[test]
fn invalid_settings_leave_the_config_unchanged() {
    let cfg = new_config();
    assert_eq!(rdmaxfer_config_set_timeout_ms(cfg, 2500), S::RDMAXFER_OK);
    assert_eq!(
        rdmaxfer_config_set_timeout_ms(cfg, 0),
        S::RDMAXFER_ERR_INVALID_ARGUMENT
    );
    assert_eq!(
        rdmaxfer_config_set_mtu(cfg, 1000),
        S::RDMAXFER_ERR_INVALID_ARGUMENT
    );
    assert_eq!(
        rdmaxfer_config_set_transport(cfg, 2),
        S::RDMAXFER_ERR_INVALID_ARGUMENT
    );
    assert_eq!(
        rdmaxfer_config_set_gid_index(cfg, -2),
        S::RDMAXFER_ERR_INVALID_ARGUMENT
    );
    // The minimum the header names is enforced (8192 and up; 1 GiB at most).
    for bad in [0, 100, RDMAXFER_MIN_MSG_SIZE - 1, (1 << 30) + 1] {
        assert_eq!(
            rdmaxfer_config_set_msg_size(cfg, bad),
            S::RDMAXFER_ERR_INVALID_ARGUMENT,
            "{bad}"
        );
        assert!(last_error().contains("at least 8192"), "{}", last_error());
    }
    assert_eq!(
        rdmaxfer_config_set_device(cfg, c"".as_ptr()),
        S::RDMAXFER_ERR_INVALID_ARGUMENT
    );
    let bad_utf8 = [0xffu8, 0xfe, 0];
    assert_eq!(
        rdmaxfer_config_set_token(cfg, bad_utf8.as_ptr().cast()),
        S::RDMAXFER_ERR_INVALID_ARGUMENT
    );
    assert!(last_error().contains("not valid UTF-8"), "{}", last_error());
    {
        let c = handle::handle(cfg, "cfg").unwrap();
        assert_eq!(c.timeout, std::time::Duration::from_millis(2500));
        assert_eq!(c.mtu, None);
        assert!(!c.oob);
        assert_eq!(c.gid_index, None);
        assert_eq!(c.port, RDMAXFER_DEFAULT_PORT);
        assert_eq!(c.device, None);
        assert_eq!(c.token, None);
        assert_eq!(c.msg_size, RDMAXFER_MIN_MSG_SIZE);
    }
    // Valid settings do apply.
    assert_eq!(
        rdmaxfer_config_set_transport(cfg, RDMAXFER_TRANSPORT_OOB),
        S::RDMAXFER_OK
    );
    assert_eq!(rdmaxfer_config_set_mtu(cfg, 2048), S::RDMAXFER_OK);
    assert_eq!(rdmaxfer_config_set_gid_index(cfg, 3), S::RDMAXFER_OK);
    assert_eq!(
        rdmaxfer_config_set_device(cfg, c"rxe0".as_ptr()),
        S::RDMAXFER_OK
    );
    assert_eq!(
        rdmaxfer_config_set_token(cfg, c"t".as_ptr()),
        S::RDMAXFER_OK
    );
    assert_eq!(rdmaxfer_config_set_event_mode(cfg, 5), S::RDMAXFER_OK);
    assert_eq!(
        rdmaxfer_config_set_msg_size(cfg, RDMAXFER_MIN_MSG_SIZE),
        S::RDMAXFER_OK
    );
    assert_eq!(rdmaxfer_config_set_msg_size(cfg, 1 << 20), S::RDMAXFER_OK);
    {
        let c = handle::handle(cfg, "cfg").unwrap();
        assert!(c.oob && c.event);
        assert_eq!(c.mtu.map(crate::verbs::Mtu::bytes), Some(2048));
        assert_eq!(c.gid_index, Some(3));
        assert_eq!(c.device.as_deref(), Some("rxe0"));
        assert_eq!(c.token.as_deref(), Some(&b"t"[..]));
        let o = c.endpoint_options();
        assert_eq!(o.msg_size, 1 << 20);
        assert_eq!(o.wait, crate::verbs::WaitMode::Event);
    }
    rdmaxfer_config_free(cfg);
}

#[test]
fn conn_close_of_null_is_ok() {
    assert_eq!(
        super::conn::rdmaxfer_conn_close(ptr::null_mut::<rdmaxfer_conn>()),
        S::RDMAXFER_OK
    );
}

#[test]
fn the_os_error_and_wc_status_of_the_last_failure_are_kept_beside_its_message() {
    use super::boundary::{rdmaxfer_last_os_error, rdmaxfer_last_wc_status};
    use crate::error::Error;
    assert_eq!(
        boundary::run("a", || Err(Error::verb("ibv_reg_mr", libc::ENOMEM).into())),
        S::RDMAXFER_ERR_VERBS
    );
    assert_eq!(
        (rdmaxfer_last_os_error(), rdmaxfer_last_wc_status()),
        (libc::ENOMEM, -1)
    );
    let wc = Error::Completion {
        op: "RDMA WRITE",
        wr_id: 1,
        status: 10,
        status_str: "remote access error".into(),
        vendor_err: 0,
    };
    assert_eq!(
        boundary::run("b", || Err(wc.into())),
        S::RDMAXFER_ERR_COMPLETION
    );
    assert_eq!(
        (rdmaxfer_last_os_error(), rdmaxfer_last_wc_status()),
        (0, 10)
    );
    assert!(
        last_error().starts_with("b: RDMA WRITE"),
        "{}",
        last_error()
    );
    // A failure without either clears both; a success leaves them.
    assert_eq!(
        boundary::run("c", || Err(Fail::invalid("bad"))),
        S::RDMAXFER_ERR_INVALID_ARGUMENT
    );
    assert_eq!(
        (rdmaxfer_last_os_error(), rdmaxfer_last_wc_status()),
        (0, -1)
    );
    assert_eq!(boundary::run("d", || Ok(())), S::RDMAXFER_OK);
    assert_eq!(last_error(), "c: bad");
}

#[test]
fn a_report_in_use_poisoned_or_freed_fails_a_transfer_before_its_connection_is_looked_at() {
    use super::report::{rdmaxfer_report, rdmaxfer_report_free, rdmaxfer_report_new};
    use super::transfer::{rdmaxfer_recv_files, rdmaxfer_send_files};
    // Each transfer gets a NULL connection: a report checked only after the transfer (or not
    // at all) would give the connection's RDMAXFER_ERR_NULL_ARGUMENT instead.
    let paths = [c"/".as_ptr()];
    let send = |r: *mut rdmaxfer_report| {
        rdmaxfer_send_files(
            ptr::null_mut(),
            paths.as_ptr(),
            1,
            ptr::null(),
            None,
            ptr::null_mut(),
            r,
        )
    };
    let recv = |r| rdmaxfer_recv_files(ptr::null_mut(), c"/".as_ptr(), ptr::null(), r);
    let mut r = ptr::null_mut();
    assert_eq!(rdmaxfer_report_new(&mut r), S::RDMAXFER_OK);
    assert_eq!(send(r), S::RDMAXFER_ERR_NULL_ARGUMENT, "a good report");
    assert!(last_error().contains("conn"), "{}", last_error());
    assert_eq!(recv(r), S::RDMAXFER_ERR_NULL_ARGUMENT, "a good report");
    // In use (another call holds it).
    let call = handle::handle(r, "r").unwrap();
    assert_eq!(send(r), S::RDMAXFER_ERR_BUSY);
    assert!(
        last_error().contains("rdmaxfer_report is in use"),
        "{}",
        last_error()
    );
    assert_eq!(recv(r), S::RDMAXFER_ERR_BUSY);
    // Freed while that call is inside (so its slot is not reused by another test meanwhile).
    rdmaxfer_report_free(r);
    assert_eq!(send(r), S::RDMAXFER_ERR_INVALID_STATE);
    assert!(
        last_error().contains("rdmaxfer_report was freed"),
        "{}",
        last_error()
    );
    assert_eq!(recv(r), S::RDMAXFER_ERR_INVALID_STATE);
    drop(call);
    // Poisoned.
    let mut p = ptr::null_mut();
    assert_eq!(rdmaxfer_report_new(&mut p), S::RDMAXFER_OK);
    arm("rdmaxfer_report");
    assert_eq!(send(p), S::RDMAXFER_ERR_PANIC);
    assert_eq!(send(p), S::RDMAXFER_ERR_PANIC);
    assert!(
        last_error().contains("earlier call on this rdmaxfer_report panicked"),
        "{}",
        last_error()
    );
    assert_eq!(recv(p), S::RDMAXFER_ERR_PANIC);
    rdmaxfer_report_free(p);
}
