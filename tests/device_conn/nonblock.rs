//! Device test of the non-blocking API without any runtime (need rxe0 at 198.18.0.1; run
//! inside the guest by ci/test.sh): a listener, a connection and messages driven only by
//! `try_*` calls and `poll(2)` on the descriptors, following the re-arming rules; a peer's
//! disconnect ends a `try_recv` with a connection error.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use rdmaxfer::os::wait_readable;
use rdmaxfer::verbs::WaitMode;
use rdmaxfer::xfer::endpoint::{Connecting, Endpoint, EndpointOptions, Listener};
use rdmaxfer::{Error, Result};

use crate::common::{self, addr, need_rxe0};

/// How long one poll(2) waits before the loop looks again (CM events of an endpoint are read
/// by its `try_*` calls); not a pass criterion.
const SLICE: Option<Duration> = Some(Duration::from_millis(200));

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
        let fd = ep.completion_fd()?.expect("event mode");
        wait_readable(fd, SLICE).expect("poll");
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_connection_driven_by_try_calls_and_poll() {
    need_rxe0();
    let opts = EndpointOptions::default()
        .wait(WaitMode::Event)
        .msg_size(256)
        .recv_depth(4);
    let port = common::port();
    let mut l = Listener::bind(addr(port), &opts).expect("bind");
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
                    wait_readable(l.fd().expect("listener fd"), None).expect("poll listener");
                }
                Err(e) => panic!("try_take: {e}"),
            }
        };
        let mut acc = pending.start_accept().expect("start_accept");
        let mut ep = loop {
            if let Some(ep) = acc.try_finish().expect("try_finish") {
                break ep;
            }
            wait_readable(acc.fd().expect("accepting fd"), None).expect("poll accepting");
        };
        let msg = drive(&mut ep, Endpoint::try_recv).expect("server recv");
        let reply: Vec<u8> = msg.iter().rev().copied().collect();
        drive(&mut ep, |e| e.try_send(&reply)).expect("server send");
        // The client closes: the next receive ends with its disconnect.
        drive(&mut ep, Endpoint::try_recv)
    });
    let mut c = Connecting::start(addr(port), &opts).expect("start connecting");
    go.send(()).unwrap();
    let mut ep = loop {
        if let Some(ep) = c.try_finish().expect("try_finish") {
            break ep;
        }
        wait_readable(c.fd().expect("connecting fd"), None).expect("poll connecting");
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

/// `write(2)` of a well-formed UCMA command, CREATE_ID (`rdma_user_cm.h`: a header of cmd 0,
/// in 24, out 4, then uid, response, ps RDMA_PS_TCP, qp_type IBV_QPT_RC), whose response the
/// kernel writes to `target`. On `/dev/infiniband/rdma_cm` it succeeds (32 bytes) and writes
/// the new id's number there.
fn ucma_create_id(f: &mut std::fs::File, target: u64) -> std::io::Result<usize> {
    let mut cmd = Vec::with_capacity(32);
    cmd.extend_from_slice(&0u32.to_ne_bytes());
    cmd.extend_from_slice(&24u16.to_ne_bytes());
    cmd.extend_from_slice(&4u16.to_ne_bytes());
    cmd.extend_from_slice(&0u64.to_ne_bytes());
    cmd.extend_from_slice(&target.to_ne_bytes());
    cmd.extend_from_slice(&0x0106u16.to_ne_bytes());
    cmd.push(2);
    cmd.extend_from_slice(&[0; 5]);
    std::io::Write::write(f, &cmd)
}

/// `write(2)` of a uverbs command in the legacy write format (`ib_user_verbs.h`: a header of
/// QUERY_DEVICE, command 2, in_words 4, out_words 44, then the response address).
fn uverbs_query_device(f: &mut std::fs::File, target: u64) -> std::io::Result<usize> {
    let mut cmd = Vec::with_capacity(16);
    cmd.extend_from_slice(&2u32.to_ne_bytes());
    cmd.extend_from_slice(&4u16.to_ne_bytes());
    cmd.extend_from_slice(&44u16.to_ne_bytes());
    cmd.extend_from_slice(&target.to_ne_bytes());
    std::io::Write::write(f, &cmd)
}

/// A descriptor the public API handed out is readiness-only: it is not a device file, and a
/// device command written to a copy of it reaches nothing (the write fails and the memory the
/// command names is unchanged).
fn assert_readiness_only(fd: std::os::fd::BorrowedFd<'_>, what: &str) {
    use std::os::fd::AsRawFd as _;
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .unwrap_or_else(|e| panic!("{what}: readlink: {e}"));
    let link = link.to_string_lossy().into_owned();
    assert_eq!(link, "anon_inode:[eventpoll]", "{what} is {link}");
    let mut f = std::fs::File::from(fd.try_clone_to_owned().expect("dup"));
    let held: Box<[u32; 64]> = Box::new([0xaaaa_aaaa; 64]);
    let target = std::hint::black_box(held.as_ptr()) as u64;
    let r = ucma_create_id(&mut f, target);
    assert!(r.is_err(), "{what}: a UCMA command was taken: {r:?}");
    let r = uverbs_query_device(&mut f, target);
    assert!(r.is_err(), "{what}: a uverbs command was taken: {r:?}");
    assert!(
        std::hint::black_box(&held)
            .iter()
            .all(|&w| w == 0xaaaa_aaaa),
        "{what}: memory behind a shared reference changed"
    );
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn every_descriptor_handed_out_is_readiness_only() {
    use rdmaxfer::cm::CmId;
    use rdmaxfer::verbs::{CompletionQueue, Context};
    use rdmaxfer::xfer::endpoint::OobListener;
    use rdmaxfer::xfer::session::Server;
    need_rxe0();
    // The control: the same command on the device itself is taken, and the kernel writes the
    // new id's number into memory this test owns.
    let mut dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/infiniband/rdma_cm")
        .expect("open /dev/infiniband/rdma_cm");
    let mut own = Box::new(0xaaaa_aaaau32);
    let target = std::hint::black_box(&mut *own as *mut u32) as u64;
    assert_eq!(
        ucma_create_id(&mut dev, target).expect("CREATE_ID on the device"),
        32
    );
    assert_ne!(
        **std::hint::black_box(&own),
        0xaaaa_aaaa,
        "the control command wrote nothing"
    );
    drop(dev);

    let opts = EndpointOptions::default()
        .wait(WaitMode::Event)
        .msg_size(256)
        .recv_depth(4);
    let id = CmId::new().expect("CmId::new");
    assert_readiness_only(id.fd().expect("CmId::fd"), "CmId::fd");
    let ctx = Context::open(Some("rxe0")).expect("open rxe0");
    let cq = CompletionQueue::new(&ctx, 16, WaitMode::Event).expect("event-mode CQ");
    let cq_fd = cq.channel_fd().expect("CompletionQueue::channel_fd");
    assert_readiness_only(cq_fd.expect("a channel"), "CompletionQueue::channel_fd");
    let poll_cq = CompletionQueue::new(&ctx, 16, WaitMode::Poll).expect("poll-mode CQ");
    assert!(poll_cq.channel_fd().unwrap().is_none());

    let mut l = Listener::bind(addr(0), &opts).expect("bind");
    let at = l.local_addr();
    assert_readiness_only(l.fd().expect("Listener::fd"), "Listener::fd");
    let mut c = Connecting::start(at, &opts).expect("start connecting");
    assert_readiness_only(c.fd().expect("Connecting::fd"), "Connecting::fd");
    let (tx, rx) = mpsc::channel();
    let server = thread::spawn(move || {
        let pending = loop {
            match l.try_take() {
                Ok(p) => break p,
                Err(e) if e.is_would_block() => {
                    wait_readable(l.fd().unwrap(), SLICE).expect("poll listener");
                }
                Err(e) => panic!("try_take: {e}"),
            }
        };
        let mut acc = pending.start_accept().expect("start_accept");
        assert_readiness_only(acc.fd().expect("Accepting::fd"), "Accepting::fd");
        let ep = loop {
            if let Some(ep) = acc.try_finish().expect("try_finish") {
                break ep;
            }
            wait_readable(acc.fd().unwrap(), SLICE).expect("poll accepting");
        };
        tx.send(ep).unwrap();
    });
    let ep = loop {
        if let Some(ep) = c.try_finish().expect("try_finish") {
            break ep;
        }
        wait_readable(c.fd().unwrap(), SLICE).expect("poll connecting");
    };
    let theirs = rx.recv_timeout(Duration::from_secs(30)).expect("accepted");
    server.join().unwrap();
    for (side, e) in [("client", &ep), ("server", &theirs)] {
        let fd = e
            .completion_fd()
            .expect("completion_fd")
            .expect("event mode");
        assert_readiness_only(fd, &format!("{side} Endpoint::completion_fd"));
        let fd = e.cm_fd().expect("cm_fd").expect("a CM endpoint");
        assert_readiness_only(fd, &format!("{side} Endpoint::cm_fd"));
    }
    let s = Server::bind(common::IP, 0, false, &opts).expect("Server::bind");
    assert_readiness_only(s.fd().expect("Server::fd"), "Server::fd (rdma_cm)");
    let oob = OobListener::bind(addr(0), &opts).expect("OobListener::bind");
    assert_readiness_only(oob.fd().expect("OobListener::fd"), "OobListener::fd");
    let s = Server::bind(common::IP, 0, true, &opts).expect("Server::bind --oob");
    assert_readiness_only(s.fd().expect("Server::fd"), "Server::fd (oob)");
}
