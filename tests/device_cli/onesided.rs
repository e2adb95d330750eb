//! Device tests (rxe0, in the guest) of `rdmaxfer expose`, `write`, `read` and `bench`, driven
//! through the binary over RDMA CM and OOB.

use std::time::Duration;

use rdmaxfer::verbs::{ExposedRegion, RemoteAccess};
use rdmaxfer::xfer::endpoint::EndpointOptions;
use rdmaxfer::xfer::onesided::{self, Msg};
use rdmaxfer::xfer::session::{self, Server};

use crate::common::{self, need_rxe0, spawn, Proc, IP};

const T: Duration = Duration::from_secs(60);

fn expose(port: u16, oob: bool, extra: &[&str]) -> Proc {
    let p = port.to_string();
    let mut args = vec!["expose", "--listen", IP, "-p", &p];
    if oob {
        args.push("--oob");
    }
    args.extend_from_slice(extra);
    let mut s = spawn("expose", &args);
    s.wait_for("listening on", T);
    s
}

fn client(cmd: &str, port: u16, oob: bool, extra: &[&str]) -> common::Done {
    let p = port.to_string();
    let mut args = vec![cmd, IP, "-p", &p];
    if oob {
        args.push("--oob");
    }
    args.extend_from_slice(extra);
    spawn(cmd, &args).finish(T)
}

fn text_round_trip(oob: bool) {
    need_rxe0();
    let port = common::port();
    let mut s = expose(port, oob, &["--size", "4096"]);
    client(
        "write",
        port,
        oob,
        &["--offset", "100", "--data", "hello, one-sided world"],
    )
    .ok("write");
    s.wait_for("changed [100, 122)", T);
    let r = client("read", port, oob, &["--offset", "100", "--len", "22"]);
    r.ok("read");
    assert_eq!(r.out.trim_end_matches('\n'), "hello, one-sided world");
    let r = client("read", port, oob, &["--offset", "98", "--len", "4"]);
    assert_eq!(
        r.ok("read").out.trim_end_matches('\n').as_bytes(),
        b"\0\0he"
    );
    s.kill();
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn text_round_trip_cm() {
    text_round_trip(false);
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn text_round_trip_oob() {
    text_round_trip(true);
}

fn file_round_trip(oob: bool) {
    need_rxe0();
    let port = common::port();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.bin");
    let back = dir.path().join("back.bin");
    let saved = dir.path().join("saved.bin");
    let len = 3 << 20;
    let data: Vec<u8> = (0..len)
        .map(|i: usize| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(&src, &data).unwrap();
    let size = (len + 7).to_string();
    let mut s = expose(
        port,
        oob,
        &["--size", &size, "--once", "--out", saved.to_str().unwrap()],
    );
    // --once: one peer writes; the buffer is saved to --out.
    client(
        "write",
        port,
        oob,
        &["--offset", "7", "--file", src.to_str().unwrap()],
    )
    .ok("write");
    let done = {
        s.wait_for("changed [", T);
        s.finish(T)
    };
    done.ok("expose --once");
    let saved = std::fs::read(&saved).unwrap();
    assert_eq!(saved.len(), len + 7);
    assert!(saved[7..] == data[..], "saved buffer holds the file");
    // A new server starts from zeroes; write again and read it back through a file.
    let mut s = expose(port, oob, &["--size", &size]);
    client(
        "write",
        port,
        oob,
        &["--offset", "7", "--file", src.to_str().unwrap()],
    )
    .ok("write");
    let lenarg = len.to_string();
    client(
        "read",
        port,
        oob,
        &[
            "--offset",
            "7",
            "--len",
            &lenarg,
            "--out",
            back.to_str().unwrap(),
        ],
    )
    .ok("read");
    assert!(
        std::fs::read(&back).unwrap() == data,
        "3 MiB read back byte for byte"
    );
    s.kill();
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn file_3_mib_round_trip_cm() {
    file_round_trip(false);
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn file_3_mib_round_trip_oob() {
    file_round_trip(true);
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn out_of_bounds_is_refused_locally() {
    need_rxe0();
    let port = common::port();
    let mut s = expose(port, false, &["--size", "4096"]);
    for (off, len) in [
        ("4096", "1"),
        ("4000", "97"),
        ("18446744073709551615", "2"),
        ("1", "18446744073709551615"),
    ] {
        let r = client("read", port, false, &["--offset", off, "--len", len]);
        r.failed("out-of-bounds read");
        assert!(r.err.contains("out of bounds"), "{off}+{len}: {}", r.err);
    }
    let r = client(
        "write",
        port,
        false,
        &["--offset", "4090", "--data", "0123456789"],
    );
    r.failed("out-of-bounds write");
    assert!(r.err.contains("out of bounds"), "{}", r.err);
    // Nothing reached the buffer, and the server kept serving.
    let r = client("read", port, false, &["--offset", "4090", "--len", "6"]);
    assert_eq!(
        r.ok("read after refusals")
            .out
            .trim_end_matches('\n')
            .as_bytes(),
        &[0u8; 6]
    );
    s.kill();
}

/// A range refused locally before anything is posted is the client's error alone: the
/// server's report of that session says `ok` (as for a C client, `rdmaxfer_expose_report`).
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_locally_refused_range_leaves_the_servers_report_ok() {
    need_rxe0();
    let port = common::port();
    let mut s = expose(port, false, &["--size", "4096", "--json"]);
    for (cmd, range) in [
        ("write", ["--offset", "4090", "--data", "0123456789"]),
        ("read", ["--offset", "4000", "--len", "97"]),
    ] {
        let r = client(cmd, port, false, &range);
        r.failed(&format!("out-of-bounds {cmd}"));
        assert!(r.err.contains("out of bounds"), "{cmd}: {}", r.err);
        let line = s.wait_for("\"ok\"", T);
        let j: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad JSON {line:?}: {e}"));
        assert_eq!(j["ok"], true, "{cmd}: {line}");
        assert_eq!(j["error"], serde_json::Value::Null, "{cmd}: {line}");
        assert_eq!(
            (j["written"].as_u64(), j["read"].as_u64()),
            (Some(0), Some(0))
        );
        assert_eq!(
            j["changed"].as_array().map(Vec::len),
            Some(0),
            "{cmd}: {line}"
        );
    }
    s.kill();
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn reading_a_write_only_exposure_is_a_remote_access_error() {
    need_rxe0();
    let port = common::port();
    let mut s = expose(port, false, &["--size", "64", "--access", "w"]);
    let r = client("read", port, false, &["--len", "8"]);
    r.failed("read of write-only exposure");
    assert!(r.err.contains("remote access error"), "{}", r.err);
    assert!(
        r.err.contains("Write access"),
        "the error names the exposure's rights: {}",
        r.err
    );
    client("write", port, false, &["--data", "still serving"]).ok("write after the failed read");
    s.wait_for("\"still serving\"", T);
    s.kill();
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn access_after_revoke_fails_without_hanging() {
    need_rxe0();
    let opts = EndpointOptions::default()
        .device(Some("rxe0".into()))
        .extra_send_wr(8);
    let port = common::port();
    let mut server = Server::bind(IP, port, false, &opts).unwrap();
    let t = std::thread::spawn(move || {
        let mut ep = server.accept(Some(T)).unwrap();
        assert!(matches!(
            onesided::recv_msg(&mut ep).unwrap(),
            Msg::Setup { .. }
        ));
        let region = ExposedRegion::new(ep.pd(), 4096, RemoteAccess::ReadWrite).unwrap();
        onesided::send_msg(
            &mut ep,
            &Msg::Expose {
                access: RemoteAccess::ReadWrite,
                region: region.descriptor(),
            },
        )
        .unwrap();
        let left = region.revoke().unwrap();
        assert_eq!(left, vec![0u8; 4096]);
        // Tell the client the exposure is gone, then wait for it to hang up.
        onesided::send_msg(
            &mut ep,
            &Msg::Done {
                ok: true,
                written: 0,
                read: 0,
            },
        )
        .unwrap();
        let _ = ep.recv();
    });
    let mut ep = session::connect(IP, port, false, &opts).unwrap();
    let x = onesided::open_session(&mut ep).unwrap();
    assert!(matches!(
        onesided::recv_msg(&mut ep).unwrap(),
        Msg::Done { .. }
    ));
    let t0 = std::time::Instant::now();
    let e =
        onesided::write_session(&mut ep, &x, 0, b"too late", Duration::from_secs(10)).unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(10), "no hang");
    assert!(e.to_string().contains("remote access error"), "{e}");
    drop(ep);
    t.join().unwrap();
}

/// A `bench` server and client on a port of their own; the client's JSON report, checked.
fn bench_pair(op: &str, size: usize, iters: u64, flags: &[&str]) -> serde_json::Value {
    let p = common::port().to_string();
    let s_ = size.to_string();
    let mut sargs = vec![
        "bench", op, "--listen", IP, "-p", &p, "-s", &s_, "--count", "1",
    ];
    sargs.extend_from_slice(flags);
    let mut server = spawn("bench server", &sargs);
    server.wait_for("listening on", T);
    let n = iters.to_string();
    let mut cargs = vec![
        "bench", op, IP, "-p", &p, "-s", &s_, "-n", &n, "-t", "32", "--json",
    ];
    cargs.extend_from_slice(flags);
    let c = spawn("bench client", &cargs).finish(T);
    if !c.status.success() {
        server.kill();
        let s = server.finish(T);
        panic!(
            "bench client {cargs:?} failed:\n{}\nserver stdout:\n{}\nserver stderr:\n{}",
            c.err, s.out, s.err
        );
    }
    server.finish(T).ok("bench server");
    let v = c.json_lines().pop().expect("one JSON object");
    assert_eq!(v["op"], op);
    assert_eq!(v["size"], size);
    assert_eq!(v["iters"], iters);
    for k in [
        "bw_peak_mib_s",
        "bw_avg_mib_s",
        "msg_rate_mpps",
        "cpu_seconds",
        "cpu_user_seconds",
    ] {
        assert!(v[k].as_f64().is_some_and(|x| x >= 0.0), "{k} in {v}");
    }
    assert!(
        v["cpu_user_seconds"].as_f64() <= v["cpu_seconds"].as_f64(),
        "{v}"
    );
    assert!(v["bw_avg_mib_s"].as_f64().unwrap() > 0.0, "{v}");
    v
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn bench_every_op_at_4k_and_1m_poll_cm_and_event_oob() {
    need_rxe0();
    for flags in [&[][..], &["--event", "--oob"][..]] {
        for op in ["write", "read", "send"] {
            for (size, iters) in [(4096usize, 300u64), (1 << 20, 16)] {
                let v = bench_pair(op, size, iters, flags);
                assert_eq!(v["event"], flags.contains(&"--event"), "{v}");
            }
        }
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn bench_server_runs_the_clients_op_and_size() {
    need_rxe0();
    // The server's op and -s are what it offers clients that state nothing (--oob); over RDMA CM
    // it runs what the client asks for, as perftest does.
    let p = common::port().to_string();
    let mut server = spawn(
        "bench server",
        &[
            "bench", "write", "--listen", IP, "-p", &p, "-s", "4096", "--count", "1",
        ],
    );
    server.wait_for("listening on", T);
    let c = spawn(
        "bench client",
        &["bench", "read", IP, "-p", &p, "-s", "8K", "-n", "10"],
    )
    .finish(T);
    c.ok("bench read -s 8K against a bench write -s 4096 server");
    let s = server.finish(T);
    s.ok("bench server");
    assert!(s.err.contains("served Read: 10 × 8192 bytes"), "{}", s.err);
}

/// While one peer holds the expose server, another is told that it is busy and to retry once
/// its wait for a turn (5 s) ends, not left to time out in the backlog; once the first is
/// done, the next is served.
fn busy_while_another_is_served(oob: bool) {
    need_rxe0();
    let port = common::port();
    // Deadlines far above the 5 s wait for a turn, so that a loaded guest (seen to need 6 s just
    // to start a client and resolve) meets none of them: the server's step deadline and the held
    // peer's outlast the second peer's whole run, whose own step deadline is CLIENT_T.
    const CLIENT_T: Duration = Duration::from_secs(100);
    let mut s = expose(port, oob, &["--size", "4096", "--timeout", "300"]);
    let opts = EndpointOptions::default()
        .extra_send_wr(16)
        .timeout(Duration::from_secs(300));
    let mut held = session::connect(IP, port, oob, &opts).expect("connect");
    onesided::open_session(&mut held).expect("the first peer's session");
    let p = port.to_string();
    let mut args = vec!["write", IP, "-p", &p, "--data", "x", "--timeout", "100"];
    if oob {
        args.push("--oob");
    }
    let d = spawn("write", &args).finish(CLIENT_T + T);
    d.failed("write while another peer is served");
    assert!(
        d.err.contains("busy") && d.err.contains("retry"),
        "the error should say the server is busy and to retry: {}",
        d.err
    );
    // Told, not left in the backlog until its own deadline (20 times the wait for a turn).
    assert!(!d.err.contains("timed out"), "{}", d.err);
    assert!(d.elapsed < CLIENT_T, "refused after {:?}", d.elapsed);
    onesided::end_session(&mut held, true, 0, 0).expect("DONE");
    let _ = held.close();
    s.wait_for("peer ", T);
    client("write", port, oob, &["--data", "y"]).ok("write after the first peer is done");
    s.wait_for("changed [0, 1)", T);
    s.kill();
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_second_peer_is_told_busy_cm() {
    busy_while_another_is_served(false);
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_second_peer_is_told_busy_oob() {
    busy_while_another_is_served(true);
}
