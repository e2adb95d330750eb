//! Device tests (rxe0, in the guest) of a receiver serving several senders at once: eight
//! senders while another connection is held, a connection over `--max-sessions` refused as
//! busy, and the memory budget (`--max-memory`): a smaller ring when it is short, busy when not
//! even the smallest ring fits. Held connections are raw library clients; the tests synchronise
//! on the receiver's "session N: serving" lines, never on sleeps.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rdmaxfer::cm::{CmId, ConnParam, EventKind};
use rdmaxfer::xfer::endpoint::{Endpoint, EndpointOptions};
use rdmaxfer::xfer::file::proto::{self, Hello, HelloFlags, Msg, RingGrant};
use rdmaxfer::xfer::file::ring_budget as budget;
use rdmaxfer::xfer::session;
use rdmaxfer::xfer::wire;

use crate::common::{self, addr, dirs, need_rxe0, pseudo_random, send, spawn, Done, Proc, IP};

const T: Duration = Duration::from_secs(120);
/// The receiver's step deadline: longer than the tests hold a session.
const RECV_TIMEOUT: &str = "100";

/// `common::recv` (`recv --json` on rxe0's address) with the step deadline [`RECV_TIMEOUT`].
fn recv_patient(port: u16, out: &Path, extra: &[&str]) -> Proc {
    common::recv(port, out, &[&["--timeout", RECV_TIMEOUT], extra].concat())
}

/// A sender that connects and takes the CHALLENGE, then does nothing until dropped.
fn hold(port: u16) -> Endpoint {
    let opts = EndpointOptions::default()
        .msg_size(proto::MAX_MSG_LEN)
        .timeout(Duration::from_secs(60));
    let mut ep = session::connect(IP, port, false, &opts).expect("connect to recv");
    match proto::decode(&ep.recv().expect("challenge")).expect("decode challenge") {
        Msg::Challenge { .. } => ep,
        m => panic!("expected CHALLENGE, got {m:?}"),
    }
}

/// Announces a file of `size` bytes in `chunk`-byte chunks on a held connection and returns
/// the ring the receiver offers (then sends no data).
fn announce(ep: &mut Endpoint, name: &str, size: u64, chunk: u32) -> RingGrant {
    let h = Hello {
        version: proto::VERSION,
        name: name.into(),
        size,
        mode: 0o644,
        mtime_sec: 0,
        mtime_nsec: 0,
        chunk_size: chunk,
        flags: HelloFlags::default(),
        auth: None,
        ..Default::default()
    };
    ep.send(&proto::encode(&Msg::Hello(h))).expect("send HELLO");
    match proto::decode(&ep.recv().expect("MR")).expect("decode MR") {
        Msg::Mr(r) => r,
        m => panic!("expected MR, got {m:?}"),
    }
}

fn busy_failure(d: &Done, what: &str, why: &str) {
    d.failed(what);
    let err = d.err.to_lowercase();
    assert!(
        err.contains("busy") && err.contains("retry") && err.contains(why),
        "{what}: the error should say the receiver is busy ({why}) and to retry:\n{}",
        d.err
    );
}

/// Writes `n` source files of a few hundred KiB (different sizes and contents).
fn sources(dir: &Path, n: usize) -> Vec<(PathBuf, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let data = pseudo_random(200_000 + i * 37_000, 1000 + i as u64);
            let p = dir.join(format!("s{i}.bin"));
            std::fs::write(&p, &data).unwrap();
            (p, data)
        })
        .collect()
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn eight_senders_at_once_while_another_is_held() {
    need_rxe0();
    let port = common::port();
    let (_tmp, src, out) = dirs();
    let files = sources(&src, 8);
    // 9 connections from this one address: a peer's share is all slots but one.
    let mut r = recv_patient(port, &out, &["--max-sessions", "10"]);
    // One connection that never sends its HELLO: served one after another, it would hold all.
    let held = hold(port);
    r.wait_for("session 1: serving", T);
    let senders: Vec<Proc> = files
        .iter()
        .map(|(p, _)| send(port, &[p.as_path()], &["--chunk", "64K"]))
        .collect();
    for (i, s) in senders.into_iter().enumerate() {
        let d = s.finish(T);
        d.ok(&format!("sender {i}"));
        let j = d.json_lines();
        assert_eq!(j.len(), 1, "sender {i}: {}", d.out);
        assert_eq!(j[0]["result"], "ok", "sender {i}: {}", d.out);
    }
    // All eight were served while the first connection was still held.
    for _ in 0..8 {
        r.wait_for("\"session\":", T);
    }
    drop(held);
    r.kill();
    let d = r.finish(T);
    let mut sessions = std::collections::BTreeSet::new();
    let lines = d.json_lines();
    for j in lines.iter().filter(|j| j["result"] == "ok") {
        assert_eq!(j["files"].as_array().unwrap().len(), 1, "{j}");
        sessions.insert(j["session"].as_u64().expect("session number"));
    }
    assert_eq!(
        sessions,
        (2..=9).collect(),
        "one ok JSON line per sender, sessions 2..=9:\n{}",
        d.out
    );
    for (p, data) in &files {
        let got = std::fs::read(out.join(p.file_name().unwrap())).unwrap();
        assert!(got == *data, "{} differs", p.display());
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_sender_over_max_sessions_is_refused_busy_at_once() {
    need_rxe0();
    let port = common::port();
    let (_tmp, src, out) = dirs();
    let files = sources(&src, 1);
    let mut r = recv_patient(port, &out, &["--max-sessions", "1"]);
    let held = hold(port);
    r.wait_for("session 1: serving", T);
    // The sender's own step deadline is 60 s: a busy answer must come well before it.
    let d = send(port, &[files[0].0.as_path()], &["--timeout", "60"]).finish(T);
    busy_failure(&d, "send to a receiver at --max-sessions", "max-sessions");
    assert!(
        d.elapsed < Duration::from_secs(30),
        "the busy answer took {:?}",
        d.elapsed
    );
    r.wait_for("busy", T);
    assert!(
        !out.join("s0.bin").exists(),
        "nothing is received from a refused sender"
    );
    // Once the held session ends, the next sender is served.
    drop(held);
    let d = send(port, &[files[0].0.as_path()], &[]).finish(T);
    d.ok("send after the held session ended");
    assert!(std::fs::read(out.join("s0.bin")).unwrap() == files[0].1);
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_short_memory_budget_gives_a_smaller_ring_then_busy() {
    need_rxe0();
    let port = common::port();
    let (_tmp, src, out) = dirs();
    let data = pseudo_random(1 << 20, 7);
    std::fs::write(src.join("big.bin"), &data).unwrap();
    let chunk: u32 = 1 << 20;
    let slots = 16u32;
    // Room for one full ring of 1 MiB slots, and not for a second.
    let full = budget::ring_bytes(slots, u64::from(chunk)).unwrap();
    let limit = full + full / 2;
    let lim = limit.to_string();
    let mut r = recv_patient(
        port,
        &out,
        &["--max-memory", &lim, "--slots", &slots.to_string()],
    );
    let mut a = hold(port);
    r.wait_for("session 1: serving", T);
    let ring_a = announce(&mut a, "held-a.bin", 8 << 20, chunk);
    assert_eq!(
        ring_a.slot_size, chunk,
        "the first session gets what it asks"
    );
    let mut b = hold(port);
    r.wait_for("session 2: serving", T);
    let ring_b = announce(&mut b, "held-b.bin", 8 << 20, chunk);
    assert!(
        ring_b.slot_size < chunk && ring_b.slot_size >= budget::MIN_SLOT as u32,
        "the second session gets smaller slots: {ring_b:?}"
    );
    let total = budget::ring_bytes(slots, u64::from(ring_a.slot_size)).unwrap()
        + budget::ring_bytes(slots, u64::from(ring_b.slot_size)).unwrap();
    assert!(
        total <= limit,
        "{total} bytes leased over the limit {limit}"
    );
    drop(b);
    // A real sender next to the held full ring: a smaller ring, still verified.
    let d = send(port, &[src.join("big.bin").as_path()], &["--chunk", "1M"]).finish(T);
    d.ok("send with a short memory budget");
    assert!(std::fs::read(out.join("big.bin")).unwrap() == data);
    drop(a);
    r.kill();
    drop(r);

    // A budget of exactly one smallest ring: a second connection is busy.
    let port = common::port();
    let floor = budget::ring_bytes(slots, budget::MIN_SLOT)
        .unwrap()
        .to_string();
    let mut r = recv_patient(
        port,
        &out,
        &["--max-memory", &floor, "--slots", &slots.to_string()],
    );
    let mut a = hold(port);
    r.wait_for("session 1: serving", T);
    let d = send(port, &[src.join("big.bin").as_path()], &[]).finish(T);
    busy_failure(&d, "send with no memory left", "max-memory");
    // The session that holds the memory still gets its (smallest) ring.
    let ring_a = announce(&mut a, "held-c.bin", 8 << 20, chunk);
    assert_eq!(u64::from(ring_a.slot_size), budget::MIN_SLOT, "{ring_a:?}");
}

/// The connect parameters of an rdmaxfer client (its handshake in the private data).
pub(crate) fn connect_param() -> ConnParam {
    ConnParam {
        private_data: wire::Hello::new(16, proto::MAX_MSG_LEN as u32)
            .encode()
            .to_vec(),
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
    }
}

/// A CM peer that sends a valid connection request, waits until the receiver accepted it
/// (CONNECT_RESPONSE: it has no QP, so librdmacm leaves the rest to it) and then never completes
/// the connection (no RTU: the receiver waits for ESTABLISHED).
fn stall_cm(port: u16) -> CmId {
    let id = CmId::new().unwrap();
    id.resolve_addr(None, addr(port), T).unwrap();
    id.expect_event(EventKind::AddrResolved, T, "address")
        .unwrap();
    id.resolve_route(T).unwrap();
    id.expect_event(EventKind::RouteResolved, T, "route")
        .unwrap();
    id.connect(&connect_param()).unwrap();
    id.expect_event(EventKind::ConnectResponse, T, "the receiver's accept")
        .unwrap();
    id
}

/// Peers that stall mid-handshake (a CM one that never completes the connection, or two TCP
/// ones that never send their address to an `--oob` receiver) are set up on their own
/// threads and hold no session slot (only a handshake completed is admitted): with
/// `--max-sessions 1`, a good sender after them is served at once, not refused as busy and not
/// after the receiver's 60 s step deadline.
fn stalled_handshakes_do_not_delay_a_good_sender(oob: bool) {
    need_rxe0();
    let port = common::port();
    let (_tmp, src, out) = dirs();
    let files = sources(&src, 1);
    let extra: &[&str] = if oob { &["--oob"] } else { &[] };
    let mut args = vec!["--max-sessions", "1", "--timeout", "60"];
    args.extend_from_slice(extra);
    let p = port.to_string();
    let o = out.to_str().unwrap();
    let mut a = vec!["recv", "--out", o, "--listen", IP, "-p", &p, "--json"];
    a.extend_from_slice(&args);
    let mut r = spawn("recv", &a);
    r.wait_for("listening on", T);
    // One CM staller: a second request with the same (zero) QP number is refused by the
    // receiver's kernel CM as a stale connection before it reaches the receiver.
    let (mut cm, mut tcp) = (Vec::new(), Vec::new());
    if oob {
        for _ in 0..2 {
            // Taken in order: these are before the good sender's connection in the backlog.
            tcp.push(std::net::TcpStream::connect((IP, port)).unwrap());
        }
    } else {
        cm.push(stall_cm(port));
    }
    let mut sargs = vec!["--timeout", "60"];
    sargs.extend_from_slice(extra);
    let d = send(port, &[files[0].0.as_path()], &sargs).finish(T);
    d.ok("a good sender after stalled handshakes");
    assert!(
        d.elapsed < Duration::from_secs(30),
        "the good sender took {:?} (the receiver's step deadline is 60 s)",
        d.elapsed
    );
    assert!(std::fs::read(out.join("s0.bin")).unwrap() == files[0].1);
    r.wait_for("\"session\":", T);
    drop((cm, tcp));
    r.kill();
    let d = r.finish(T);
    let ok = d
        .json_lines()
        .iter()
        .filter(|j| j["result"] == "ok")
        .count();
    assert_eq!(ok, 1, "{}", d.out);
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_stalled_cm_handshake_does_not_delay_a_good_sender() {
    stalled_handshakes_do_not_delay_a_good_sender(false);
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_silent_oob_peer_does_not_delay_a_good_sender() {
    stalled_handshakes_do_not_delay_a_good_sender(true);
}
