//! Device tests (rxe0, in the guest) of the causes a C program reads beside the message
//! (`rdmaxfer_last_os_error`, `rdmaxfer_last_wc_status`), through the read/write demo under
//! valgrind: a peer that exposes a region it has already revoked makes the C client's RDMA
//! WRITE fail at the NIC with a remote access error (work-completion status 10, no errno), and
//! a C server asked to listen out-of-band on a taken port fails with `EADDRINUSE` (no status).
//! The demo prints both causes in its error line (`report` in examples/c/common.h) and frees
//! what it made on the way out, so valgrind sees a clean failure.

use std::net::TcpListener;
use std::thread;
use std::time::Duration;

use rdmaxfer::verbs::{ExposedRegion, RemoteAccess};
use rdmaxfer::xfer::endpoint::{EndpointOptions, Listener};
use rdmaxfer::xfer::onesided::{recv_msg, send_msg, Msg, Purpose};
use rdmaxfer::Error;

use super::capi::{vg, vg_clean, T, TIMEOUT_MS};
use crate::common::{self, addr, need_rxe0, Done, IP};

/// `IBV_WC_REM_ACCESS_ERR`.
const REM_ACCESS_ERR: &str = "[work completion status 10]";

/// A hostile expose server: answers SETUP with the descriptor of a region it revoked before
/// sending it, then waits until the client goes away (its failed WRITE breaks its queue pair, so
/// it sends nothing more) and returns how that wait ended.
fn serve_a_revoked_region(mut l: Listener) -> rdmaxfer::Result<Msg> {
    let mut ep = l.accept(Some(T))?;
    match recv_msg(&mut ep)? {
        Msg::Setup {
            purpose: Purpose::Session,
            ..
        } => {}
        m => panic!("expected SETUP, got {m:?}"),
    }
    let region = ExposedRegion::new(ep.pd(), 4096, RemoteAccess::ReadWrite)?;
    let stale = region.descriptor();
    region.revoke()?;
    send_msg(
        &mut ep,
        &Msg::Expose {
            access: RemoteAccess::ReadWrite,
            region: stale,
        },
    )?;
    recv_msg(&mut ep)
}

/// Asserts a valgrind-run C example failed (exit 1) with a clean memcheck report; returns its
/// error line.
fn failed_cleanly<'a>(d: &'a Done, what: &str) -> &'a str {
    vg_clean(d, what);
    assert_eq!(d.status.code(), Some(1), "{what}:\n{}\n{}", d.out, d.err);
    d.err
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("{what}: no error line:\n{}", d.err))
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_write_into_a_revoked_exposure_gives_the_c_client_its_completion_status() {
    need_rxe0();
    let port = common::port();
    // Each wait of the server outlasts the client's start under valgrind.
    let opts = EndpointOptions::default()
        .msg_size(8192)
        .timeout(Duration::from_secs(240));
    let l = Listener::bind(addr(port), &opts).unwrap();
    let server = thread::spawn(move || serve_a_revoked_region(l));
    let p = port.to_string();
    let c = vg("rw_demo", &["-p", &p, "-T", TIMEOUT_MS, IP]).finish(T);
    let line = failed_cleanly(&c, "C rw_demo client");
    assert!(
        c.out.contains("peer exposes 4096 bytes (access 3)") && !c.out.contains("wrote"),
        "{}",
        c.out
    );
    assert!(
        line.contains("rdmaxfer_rdma_write") && line.contains(REM_ACCESS_ERR),
        "{line}"
    );
    assert!(!line.contains("[OS error"), "{line}");
    // The server's last wait ended with the client's departure, not at its deadline.
    match server.join().unwrap() {
        Err(Error::Timeout { .. }) => panic!("the server waited out its deadline"),
        Err(_) => {}
        Ok(m) => panic!("the client sent {m:?} after its WRITE failed"),
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_c_server_on_a_taken_port_names_its_os_error() {
    need_rxe0();
    let taken = TcpListener::bind((IP, 0)).unwrap();
    let p = taken.local_addr().unwrap().port().to_string();
    let s = vg("rw_demo", &["-l", IP, "-p", &p, "-O", "-T", TIMEOUT_MS]).finish(T);
    let line = failed_cleanly(&s, "C rw_demo server");
    let os = format!("[OS error {}: ", libc::EADDRINUSE);
    assert!(
        line.contains("rdmaxfer_listen") && line.contains(&os),
        "{line}"
    );
    assert!(!line.contains("[work completion status"), "{line}");
}
