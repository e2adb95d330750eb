//! Device tests (rxe0, in the guest) of each peer's share of `recv`'s connections, with the
//! greedy peer on a second address of rx0 (198.18.0.2, its own RoCE v2 GID) and the good
//! sender on 198.18.0.1: a peer that stalls many handshakes holds a quarter of the set-up
//! places and is answered "busy ... retry" over them; a peer whose session opens many streams
//! and moves on one gets all session slots but one, its idle streams are ended by
//! `--idle-timeout` whatever the one moves, and a good sender is served beside it at once.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use rdmaxfer::cm::{CmId, EventKind};
use rdmaxfer::verbs::{CompletionQueue, ProtectionDomain, QpCaps, QueuePair, WaitMode};
use rdmaxfer::xfer::endpoint::{Endpoint, EndpointOptions};
use rdmaxfer::xfer::file::proto::{self, EntryKind, Join, Msg, Open, Reason};
use rdmaxfer::xfer::session;
use rdmaxfer::xfer::wire;

use crate::common::{self, addr, need_rxe0, recv, wait_until, IP};
use crate::share::{fds, rss_kib};

const T: Duration = Duration::from_secs(120);
/// The greedy peer's address (added to rx0 by [`second_peer`]).
const PEER2: &str = "198.18.0.2";

/// Adds [`PEER2`] to rx0 (once per guest) and returns the index of its RoCE v2 GID on rxe0.
pub(crate) fn second_peer() -> u32 {
    let has = || {
        let o = Command::new("ip")
            .args(["-4", "-o", "addr", "show", "dev", "rx0"])
            .output()
            .expect("ip addr show");
        String::from_utf8_lossy(&o.stdout).contains(&format!(" {PEER2}/"))
    };
    if !has() {
        let st = Command::new("ip")
            .args(["addr", "add", &format!("{PEER2}/24"), "dev", "rx0"])
            .status()
            .expect("ip addr add");
        assert!(
            st.success() || has(),
            "ip addr add {PEER2}/24 dev rx0 failed"
        );
    }
    let port = "/sys/class/infiniband/rxe0/ports/1";
    let read = |what: &str, i: u32| std::fs::read_to_string(format!("{port}/{what}/{i}"));
    let mut found = None;
    wait_until("the RoCE v2 GID of 198.18.0.2 on rxe0", T, || {
        found = (0..32).find(|&i| {
            read("gids", i).is_ok_and(|g| g.trim() == "0000:0000:0000:0000:0000:ffff:c612:0002")
                && read("gid_attrs/types", i).is_ok_and(|t| t.trim() == "RoCE v2")
        });
        found.is_some()
    });
    found.unwrap()
}

/// A CM id from [`PEER2`] whose connect request is on its way to `port` (`qp`: with a QP of
/// its own, so each request has its own QP number).
fn request_from_peer2(
    port: u16,
    qp: bool,
) -> (CmId, Option<(ProtectionDomain, CompletionQueue, QueuePair)>) {
    let id = CmId::new().unwrap();
    let src = SocketAddr::new(PEER2.parse().unwrap(), 0);
    id.resolve_addr(Some(src), addr(port), T).unwrap();
    id.expect_event(EventKind::AddrResolved, T, "address")
        .unwrap();
    id.resolve_route(T).unwrap();
    id.expect_event(EventKind::RouteResolved, T, "route")
        .unwrap();
    let parts = qp.then(|| {
        let ctx = id.context().unwrap();
        let pd = ProtectionDomain::new(&ctx).unwrap();
        let cq = CompletionQueue::new(&ctx, 16, WaitMode::Poll).unwrap();
        let qp = id.create_qp(&pd, &cq, &cq, QpCaps::default()).unwrap();
        (pd, cq, qp)
    });
    id.connect(&crate::recv_multi::connect_param()).unwrap();
    (id, parts)
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn stalled_handshakes_of_one_peer_leave_the_others_theirs_and_the_rest_hear_busy() {
    need_rxe0();
    second_peer();
    let (_tmp, src, out) = common::dirs();
    let data = common::pseudo_random(1 << 20, 41);
    std::fs::write(src.join("good.bin"), &data).unwrap();
    let port = common::port();
    // 1 slot: 16 set-up places (`Limits::max_handshakes`), 4 of them a peer's share. The
    // receiver's step deadline (60 s) outlasts the test: stalled handshakes hold throughout.
    let mut r = recv(port, &out, &["--max-sessions", "1", "--timeout", "60"]);
    let pid = r.pid();
    let (fds0, rss0) = (fds(pid), rss_kib(pid));
    // 20 connect requests that stall (each with its own QP, whose RTU librdmacm would send only
    // when the event is read, and it is not): more than all 16 set-up places.
    let stalled: Vec<_> = (0..20).map(|_| request_from_peer2(port, true)).collect();
    // A 21st from the same peer is rejected at once, with the reason.
    let (probe, _) = request_from_peer2(port, false);
    let ev = probe
        .next_event(Some(T), "the answer to the probe")
        .unwrap();
    assert_eq!(ev.kind(), EventKind::Rejected, "the probe over the share");
    let reject =
        wire::Reject::decode(ev.private_data()).expect("a reject with the receiver's reason");
    assert_eq!(reject.code, wire::RejectCode::Busy, "{reject:?}");
    let text = reject.text;
    assert!(
        text.contains("retry") && text.contains("a peer's share"),
        "{text}"
    );
    drop(ev);
    // The good sender from 198.18.0.1 is set up and served at once.
    let t0 = Instant::now();
    let d = common::send(port, &[&src.join("good.bin")], &[]).finish(T);
    d.ok("the good sender beside 20 stalled handshakes");
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "the good sender took {:?} (the receiver's step deadline is 60 s)",
        t0.elapsed()
    );
    assert!(std::fs::read(out.join("good.bin")).unwrap() == data);
    // 4 set-up connections and 1 session at most, 16 descriptors each (`FDS_PER_SESSION`);
    // memory for their queues and the session's ring (20 MiB), well under 64 MiB more.
    let (fds1, rss1) = (fds(pid), rss_kib(pid));
    assert!(fds1 <= fds0 + 5 * 16, "descriptors {fds0} → {fds1}");
    assert!(rss1 <= rss0 + (64 << 10), "RSS {rss0} KiB → {rss1} KiB");
    drop((stalled, probe));
    r.kill();
    let rd = r.finish(T);
    let refused = rd
        .err
        .lines()
        .filter(|l| l.starts_with(&format!("refused {PEER2}:")) && l.contains("a peer's share"))
        .count();
    // 16 of the 20 and the probe, less those let in when a stalled set-up failed early (the
    // kernel CM gives up on a REP without its RTU on its own schedule).
    assert!(
        (12..=17).contains(&refused),
        "{refused} refused: {}",
        rd.err
    );
    assert!(!rd.err.contains("disconnected"), "{}", rd.err);
}

/// Connects from [`PEER2`] (`gid` its GID index) and reads the receiver's first message.
pub(crate) fn connect_from_peer2(port: u16, gid: u32) -> (Endpoint, Msg) {
    let opts = EndpointOptions::default()
        .msg_size(proto::MAX_MSG_LEN)
        .timeout(Duration::from_secs(30))
        .gid_index(Some(gid));
    let mut ep = session::connect(IP, port, false, &opts).expect("connect to recv");
    let m = crate::hostile::next(&mut ep);
    (ep, m)
}

/// The answer to OPEN or JOIN: the SESSION message.
fn session_of(ep: &mut Endpoint, msg: &Msg) -> proto::Session {
    ep.send(&proto::encode(msg)).unwrap();
    match crate::hostile::next(ep) {
        Msg::Session(s) => s,
        m => panic!("expected SESSION, got {m:?}"),
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_session_of_many_streams_leaves_a_slot_and_its_idle_streams_are_ended() {
    need_rxe0();
    let gid = second_peer();
    let (_tmp, src, out) = common::dirs();
    let data = common::pseudo_random(1 << 20, 42);
    std::fs::write(src.join("good.bin"), &data).unwrap();
    let port = common::port();
    let args = [
        "--max-sessions",
        "4",
        "--idle-timeout",
        "5",
        "--min-rate",
        "0",
    ];
    let mut r = recv(port, &out, &args);
    let pid = r.pid();
    let (fds0, rss0) = (fds(pid), rss_kib(pid));
    let (mut fds1, mut rss1) = (fds0, rss0);
    // The greedy peer opens a session of 4 streams: it is granted 3 (a peer's share of 4
    // slots), joins them, and a fourth connection of its own is refused as busy.
    let (mut s0, m) = connect_from_peer2(port, gid);
    assert!(matches!(m, Msg::Challenge { .. }), "{m:?}");
    let open = Msg::Open(Open {
        streams: 4,
        auth: None,
    });
    let s = session_of(&mut s0, &open);
    assert_eq!(s.streams, 3, "{s:?}");
    let mut idle = Vec::new();
    for index in 1..3 {
        let (mut ep, m) = connect_from_peer2(port, gid);
        assert!(matches!(m, Msg::Challenge { .. }), "{m:?}");
        let join = Msg::Join(Join {
            id: s.id,
            index,
            auth: None,
        });
        session_of(&mut ep, &join);
        idle.push((ep, None));
    }
    let joined = Instant::now();
    let (_fourth, m) = connect_from_peer2(port, gid);
    match m {
        Msg::Refuse {
            reason: Reason::Busy,
            message,
        } => assert!(
            message.contains("retry") && message.contains("a peer's share"),
            "{message}"
        ),
        m => panic!("expected REFUSE(busy), got {m:?}"),
    }
    // The good sender gets the slot left, at once.
    let good = {
        let src = src.join("good.bin");
        std::thread::spawn(move || common::send(port, &[&src], &[]).finish(T))
    };
    // Stream 0 makes a directory every 100 ms or so; streams 1 and 2 send nothing and are ended
    // by the idle budget (5 s) although their session moves.
    let mut files = 0u32;
    while idle.iter().any(|(_, e)| e.is_none()) {
        assert!(
            joined.elapsed() < Duration::from_secs(5 + 20),
            "idle streams still served after {:?}",
            joined.elapsed()
        );
        let mut hello = common::hello(&format!("d{files}"), 0, 1 << 16, None);
        (hello.kind, hello.mode) = (EntryKind::Dir, 0o755);
        s0.send(&proto::encode(&Msg::Hello(hello))).unwrap();
        match crate::hostile::next(&mut s0) {
            Msg::Ack {
                status: Reason::Ok, ..
            } => files += 1,
            m => panic!("stream 0's directory: expected ACK, got {m:?}"),
        }
        (fds1, rss1) = (fds1.max(fds(pid)), rss1.max(rss_kib(pid)));
        for (ep, ended) in idle.iter_mut().filter(|(_, e)| e.is_none()) {
            ep.set_timeout(Duration::from_millis(100));
            match ep.recv() {
                Ok(m) => *ended = Some((proto::decode(&m).unwrap(), joined.elapsed())),
                Err(e) if e.is_timeout() => {}
                Err(e) => panic!("an idle stream: {e}"),
            }
        }
    }
    for (_, ended) in &idle {
        let (m, at) = ended.as_ref().unwrap();
        match m {
            Msg::Err {
                reason: Reason::Budget,
                message,
            } => assert!(message.contains("--idle-timeout"), "{message}"),
            m => panic!("expected ERR(budget), got {m:?}"),
        }
        assert!(*at >= Duration::from_secs(4), "ended after {at:?}");
    }
    assert!(files >= 10, "stream 0 moved throughout: {files} files");
    // 4 slots at most, 16 descriptors each (`FDS_PER_SESSION`) and a default ring (20 MiB).
    assert!(fds1 <= fds0 + 4 * 16, "descriptors {fds0} → {fds1}");
    assert!(rss1 <= rss0 + 4 * (24 << 10), "RSS {rss0} KiB → {rss1} KiB");
    let d = good.join().unwrap();
    d.ok("the good sender beside the greedy session");
    assert!(
        d.elapsed < Duration::from_secs(20),
        "the good sender took {:?}",
        d.elapsed
    );
    assert!(std::fs::read(out.join("good.bin")).unwrap() == data);
    drop((s0, idle));
    r.kill();
    drop(r.finish(T));
}

/// Over the out-of-band exchange too, a connection over a set-up cap hears "busy, retry" at
/// once (a refusal record in place of the receiver's address), and is served once the places
/// are free again.
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn an_oob_connection_over_its_peers_share_hears_busy_and_retry() {
    need_rxe0();
    let (_tmp, src, out) = common::dirs();
    let data = common::pseudo_random(1 << 20, 43);
    std::fs::write(src.join("f.bin"), &data).unwrap();
    let port = common::port();
    let args = ["--oob", "--max-sessions", "1", "--timeout", "60"];
    let mut r = recv(port, &out, &args);
    // Four silent TCP peers from this address: its share of the 16 set-up places.
    let silent: Vec<_> = (0..4)
        .map(|_| std::net::TcpStream::connect((IP, port)).unwrap())
        .collect();
    // The listener takes connections in order: these four before the sender's below.
    let f = src.join("f.bin");
    let d = common::send(port, &[&f], &["--oob"]).finish(T);
    d.failed("send --oob over the peer's share");
    let err = d.err.to_lowercase();
    assert!(err.contains("busy") && err.contains("retry"), "{}", d.err);
    // A library caller can tell busy from other failures without reading text.
    let dst = addr(port);
    let opts = EndpointOptions::default()
        .device(Some("rxe0".into()))
        .msg_size(proto::MAX_MSG_LEN);
    match Endpoint::connect_oob(dst, &opts) {
        Err(rdmaxfer::Error::Refused {
            reason: Reason::Busy,
            message,
        }) => assert!(message.contains("retry later"), "{message}"),
        r => panic!("expected Refused(Busy), got {:?}", r.map(|_| ())),
    }
    assert!(
        d.elapsed < Duration::from_secs(20),
        "refused at once, not after a deadline: {:?}",
        d.elapsed
    );
    // The silent peers go: their set-ups fail at once, and the next send is served.
    drop(silent);
    let d = common::send(port, &[&f], &["--oob"]).finish(T);
    d.ok("send --oob once the places are free");
    assert!(std::fs::read(out.join("f.bin")).unwrap() == data);
    r.kill();
    let rd = r.finish(T);
    assert!(rd.err.contains("a peer's share"), "{}", rd.err);
}
