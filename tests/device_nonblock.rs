//! Device test of the non-blocking API without any runtime (need rxe0 at 198.18.0.1; run
//! inside the guest by ci/test.sh): a listener, a connection and messages driven only by
//! `try_*` calls and `poll(2)` on the descriptors, following the re-arming rules; a peer's
//! disconnect ends a `try_recv` with a connection error.

mod common;

use std::net::SocketAddr;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use rdmaxfer::os::wait_readable;
use rdmaxfer::verbs::WaitMode;
use rdmaxfer::xfer::endpoint::{Connecting, Endpoint, EndpointOptions, Listener};
use rdmaxfer::{Error, Result};

use common::need_rxe0;

/// How long one poll(2) waits before the loop looks again (CM events of an endpoint are read
/// by its `try_*` calls); not a pass criterion.
const SLICE: Option<Duration> = Some(Duration::from_millis(200));

fn addr(port: u16) -> SocketAddr {
    SocketAddr::new(common::IP.parse().unwrap(), port)
}

/// `op` until it does not would-block, with the documented order: try, arm, try, wait.
fn drive<R>(ep: &mut Endpoint, mut op: impl FnMut(&mut Endpoint) -> Result<R>) -> Result<R> {
    loop {
        match op(ep) {
            Err(e) if e.is_would_block() => {}
            r => return r,
        }
        ep.arm()?;
        match op(ep) {
            Err(e) if e.is_would_block() => {}
            r => return r,
        }
        let fd = ep.completion_fd().expect("event mode");
        wait_readable(fd, SLICE).expect("poll");
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_connection_driven_by_try_calls_and_poll() {
    need_rxe0();
    let opts = EndpointOptions {
        wait: WaitMode::Event,
        msg_size: 256,
        recv_depth: 4,
        ..Default::default()
    };
    let mut l = Listener::bind(addr(7331), &opts).expect("bind");
    let first = l.try_take().map(drop);
    assert!(
        matches!(first, Err(Error::WouldBlock { .. })),
        "no client yet: {first:?}"
    );
    let (go, started) = mpsc::channel();
    let server = thread::spawn(move || {
        started.recv().expect("the client started");
        let pending = loop {
            match l.try_take() {
                Ok(p) => break p,
                Err(e) if e.is_would_block() => {
                    wait_readable(l.fd(), None).expect("poll listener");
                }
                Err(e) => panic!("try_take: {e}"),
            }
        };
        let mut acc = pending.start_accept().expect("start_accept");
        let mut ep = loop {
            if let Some(ep) = acc.try_finish().expect("try_finish") {
                break ep;
            }
            wait_readable(acc.fd(), None).expect("poll accepting");
        };
        let msg = drive(&mut ep, Endpoint::try_recv).expect("server recv");
        let reply: Vec<u8> = msg.iter().rev().copied().collect();
        drive(&mut ep, |e| e.try_send(&reply)).expect("server send");
        // The client closes: the next receive ends with its disconnect.
        drive(&mut ep, Endpoint::try_recv)
    });
    let mut c = Connecting::start(addr(7331), &opts).expect("start connecting");
    go.send(()).unwrap();
    let mut ep = loop {
        if let Some(ep) = c.try_finish().expect("try_finish") {
            break ep;
        }
        wait_readable(c.fd(), None).expect("poll connecting");
    };
    drive(&mut ep, |e| e.try_send(b"non-blocking")).expect("client send");
    let back = drive(&mut ep, Endpoint::try_recv).expect("client recv");
    assert_eq!(back, b"gnikcolb-non");
    drive(&mut ep, Endpoint::try_flush).expect("flush");
    ep.close().expect("close");
    match server.join().expect("server thread") {
        Err(Error::Connection(m)) => assert!(m.contains("disconnected"), "{m}"),
        other => panic!("expected the peer's disconnect, got {other:?}"),
    }
}
