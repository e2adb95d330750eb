//! Unit tests of the boundary that need a test-only hook: a panic injected inside a handle's
//! lock (the integration tests in `tests/capi_host.rs` cover the exports from outside).

use std::cell::Cell;

thread_local! {
    static PANIC_IN: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// Called by `boundary::lock` with the lock held: panics once when armed for this handle type.
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
use super::conn::{rdmaxfer_conn, rdmaxfer_listen, rdmaxfer_listener};
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
fn a_handle_in_use_is_busy_and_not_freed() {
    let cfg = new_config();
    // SAFETY: `cfg` is a live handle made above and freed only at the end of this test.
    let h = unsafe { &*cfg };
    let guard = boundary::lock(h).expect("free handle locks");
    assert_eq!(rdmaxfer_config_set_port(cfg, 5), S::RDMAXFER_ERR_BUSY);
    assert!(
        last_error().contains("in use by another call"),
        "{}",
        last_error()
    );
    rdmaxfer_config_free(cfg);
    assert!(last_error().contains("not freed"), "{}", last_error());
    assert_eq!(
        guard.port, RDMAXFER_DEFAULT_PORT,
        "the busy call changed nothing"
    );
    drop(guard);
    assert_eq!(rdmaxfer_config_set_port(cfg, 5), S::RDMAXFER_OK);
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
    assert_eq!(
        rdmaxfer_config_set_port(cfg, 0),
        S::RDMAXFER_ERR_INVALID_ARGUMENT
    );
    assert_eq!(
        rdmaxfer_config_set_msg_size(cfg, 0),
        S::RDMAXFER_ERR_INVALID_ARGUMENT
    );
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
        // SAFETY: `cfg` is live until the free below.
        let c = boundary::lock(unsafe { &*cfg }).unwrap();
        assert_eq!(c.timeout, std::time::Duration::from_millis(2500));
        assert_eq!(c.mtu, None);
        assert!(!c.oob);
        assert_eq!(c.gid_index, None);
        assert_eq!(c.port, RDMAXFER_DEFAULT_PORT);
        assert_eq!(c.device, None);
        assert_eq!(c.token, None);
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
    {
        // SAFETY: as above.
        let c = boundary::lock(unsafe { &*cfg }).unwrap();
        assert!(c.oob && c.event);
        assert_eq!(c.mtu.map(crate::verbs::Mtu::bytes), Some(2048));
        assert_eq!(c.gid_index, Some(3));
        assert_eq!(c.device.as_deref(), Some("rxe0"));
        assert_eq!(c.token.as_deref(), Some(&b"t"[..]));
        let o = c.endpoint_options();
        assert_eq!(o.msg_size, crate::xfer::file::proto::MAX_MSG_LEN);
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
