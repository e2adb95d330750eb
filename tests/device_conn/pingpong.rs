//! Device tests of `rdmaxfer pingpong` (need rxe0 at 198.18.0.1; run inside the guest by
//! ci/test.sh): rdmaxfer ↔ rdmaxfer over RDMA CM and OOB, interop with ibv_rc_pingpong both ways,
//! and bad input. Processes are synchronised on their output ("listening on", "connected to")
//! or on the TCP port being in LISTEN state, never on sleeps.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::common::{self, need_rxe0, spawn, spawn_env, spawn_prog, Done, IP};

/// Waits until something listens on TCP `port` (/proc/net/tcp{,6}, state 0A), bounded.
fn wait_tcp_listen(port: u16, within: Duration) {
    let want = format!(":{port:04X}");
    let t = Instant::now();
    while t.elapsed() < within {
        for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
            let s = std::fs::read_to_string(f).unwrap_or_default();
            for l in s.lines().skip(1) {
                let cols: Vec<&str> = l.split_whitespace().collect();
                if cols.len() > 3 && cols[1].ends_with(&want) && cols[3] == "0A" {
                    return;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("nothing listens on TCP port {port} after {within:?}");
}

const T: Duration = Duration::from_secs(120);

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// One server (`server_event`) on a port of its own answering one client per entry of
/// `client_events`; checks both.
fn pair_runs(size: usize, iters: u64, oob: bool, server_event: bool, client_events: &[bool]) {
    let mut shared: Vec<String> = vec![
        "-p".into(),
        common::port().to_string(),
        "-s".into(),
        size.to_string(),
        "-n".into(),
        iters.to_string(),
        "--json".into(),
    ];
    if oob {
        shared.push("--oob".into());
    }
    let mut sargs: Vec<String> = vec![
        "pingpong".into(),
        "--listen".into(),
        IP.into(),
        "--count".into(),
        client_events.len().to_string(),
    ];
    sargs.extend(shared.iter().cloned());
    if server_event {
        sargs.push("--event".into());
    }
    let mut server = spawn("server", &strs(&sargs));
    server.wait_for("listening on", T);
    for &ev in client_events {
        let mut cargs: Vec<String> = vec!["pingpong".into(), IP.into()];
        cargs.extend(shared.iter().cloned());
        if ev {
            cargs.push("--event".into());
        }
        let what = format!("client size {size} oob {oob} event {ev}");
        let t = Instant::now();
        let c = spawn("client", &strs(&cargs)).finish(T);
        eprintln!("{what}: {:?}", t.elapsed());
        c.ok(&what);
        let j = c.json_lines();
        assert_eq!(j.len(), 1, "{what}: {}", c.out);
        let j = &j[0];
        assert_eq!(j["size"], size as u64, "{what}");
        assert_eq!(j["iters"], iters, "{what}");
        assert_eq!(j["checked"], true, "{what}");
        assert_eq!(j["wait"], if ev { "event" } else { "poll" }, "{what}");
        assert_eq!(j["transport"], if oob { "oob" } else { "cm" }, "{what}");
        assert!(j["seconds"].as_f64().unwrap() > 0.0, "{what}");
        assert!(j["mbit_per_sec"].as_f64().unwrap() > 0.0, "{what}");
        assert!(j["cpu_seconds"].as_f64().unwrap() > 0.0, "{what}");
        let (rtt, ow) = (&j["rtt_us"], &j["one_way_us"]);
        let p50 = rtt["p50"].as_f64().unwrap();
        assert!(
            rtt["min"].as_f64().unwrap() > 0.0 && rtt["min"].as_f64().unwrap() <= p50,
            "{what}: {rtt}"
        );
        assert!(
            p50 <= rtt["p99"].as_f64().unwrap()
                && rtt["p99"].as_f64().unwrap() <= rtt["p999"].as_f64().unwrap(),
            "{what}: {rtt}"
        );
        assert!(
            rtt["p999"].as_f64().unwrap() <= rtt["max"].as_f64().unwrap(),
            "{what}: {rtt}"
        );
        assert!(
            (ow["p50"].as_f64().unwrap() * 2.0 - p50).abs() < 1e-6,
            "{what}: one-way is RTT/2"
        );
    }
    let s = server.finish(T);
    s.ok("server");
    let j = s.json_lines();
    assert_eq!(
        j.len(),
        client_events.len(),
        "one JSON object per connection:\n{}",
        s.out
    );
    for o in &j {
        assert_eq!(o["role"], "server");
        assert_eq!(o["iters"], iters);
        // Over CM the server knows the peer is rdmaxfer and checks every ping.
        assert_eq!(o["checked"], !oob);
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn cm_sizes_poll_and_event() {
    need_rxe0();
    // Each size once; client and server modes differ, so every side sees poll and event.
    pair_runs(1, 200, false, true, &[false]);
    pair_runs(4096, 200, false, false, &[true]);
    pair_runs(1 << 20, 10, false, true, &[false]);
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn oob_sizes_poll_and_event() {
    need_rxe0();
    pair_runs(1, 200, true, false, &[true]);
    pair_runs(4096, 200, true, true, &[false]);
    pair_runs(1 << 20, 10, true, false, &[true]);
}

fn ibv_ok(d: &Done, iters: u64) {
    d.ok("ibv_rc_pingpong");
    assert!(
        d.out.contains(&format!("{iters} iters in")),
        "ibv_rc_pingpong output:\n{}",
        d.out
    );
    assert!(d.out.contains("Mbit/sec"), "{}", d.out);
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn ibv_rc_pingpong_server_rdmaxfer_client() {
    need_rxe0();
    for (port, size) in [(common::port(), 4096usize), (common::port(), 1)] {
        let (p, s, n) = (port.to_string(), size.to_string(), "200");
        let server = spawn_prog(
            "ibv_rc_pingpong",
            "ibv_rc_pingpong",
            &["-d", "rxe0", "-g", "1", "-s", &s, "-n", n, "-p", &p],
        );
        wait_tcp_listen(port, T);
        let c = spawn(
            "client",
            &[
                "pingpong", "--oob", IP, "-p", &p, "-s", &s, "-n", n, "-g", "1", "-d", "rxe0",
            ],
        )
        .finish(T);
        c.ok("rdmaxfer client");
        assert!(c.out.contains("200 iters in"), "{}", c.out);
        assert!(c.out.contains("usec/iter"), "{}", c.out);
        assert!(
            c.out.contains("rtt_us:") && c.out.contains("one_way_us:"),
            "{}",
            c.out
        );
        ibv_ok(&server.finish(T), 200);
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn rdmaxfer_server_ibv_rc_pingpong_client() {
    need_rxe0();
    for (port, size) in [(common::port(), 4096usize), (common::port(), 1)] {
        let (p, s, n) = (port.to_string(), size.to_string(), "200");
        let mut server = spawn(
            "server",
            &[
                "pingpong", "--oob", "--listen", "-p", &p, "-s", &s, "-n", n, "--count", "1", "-g",
                "1",
            ],
        );
        server.wait_for("listening on", T);
        let c = spawn_prog(
            "ibv_rc_pingpong",
            "ibv_rc_pingpong",
            &["-d", "rxe0", "-g", "1", "-s", &s, "-n", n, "-p", &p, IP],
        )
        .finish(T);
        ibv_ok(&c, 200);
        let s = server.finish(T);
        s.ok("rdmaxfer server");
        assert!(s.out.contains("200 iters in"), "{}", s.out);
    }
}

/// Runs a ping-pong client that should fail: what it did, and the time from its last step
/// before connecting (mapping in its code, which alone took 30-45 s on a loaded guest's 9p
/// root; it says so with RDMAXFER_LOG=debug) to its exit.
fn failing_client(what: &str, args: &[&str]) -> (Done, Duration) {
    let spawned = Instant::now();
    let mut c = spawn_env(
        "client",
        args,
        &[("RDMAXFER_LOG", "rdmaxfer::pingpong=debug")],
    );
    c.wait_for("code", T);
    let t = Instant::now();
    let d = c.finish(T);
    let took = t.elapsed();
    d.failed(what);
    eprintln!(
        "{what}: {took:?} after mapping in its code, {:?} in all",
        spawned.elapsed()
    );
    (d, took)
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn no_listener_is_a_clear_error_within_the_deadline() {
    need_rxe0();
    // The clients' step deadline (--timeout 100).
    const STEP: Duration = Duration::from_secs(100);
    let p = common::port().to_string();
    let (c, took) = failing_client(
        "CM client without a server",
        &["pingpong", IP, "-p", &p, "-n", "5", "--timeout", "100"],
    );
    // Refused by the peer's CM at once, not by running into the deadline.
    assert!(
        c.err.contains("rejected") && c.err.contains("nothing is listening"),
        "{}",
        c.err
    );
    // With 100 s per step, an answer in under 100 s came from the rejection, not a deadline.
    assert!(!c.err.contains("timed out"), "{}", c.err);
    assert!(took < STEP, "took {took:?}");

    let p = common::port().to_string();
    let (c, took) = failing_client(
        "OOB client without a server",
        &[
            "pingpong",
            "--oob",
            IP,
            "-p",
            &p,
            "-n",
            "5",
            "--timeout",
            "100",
        ],
    );
    assert!(
        c.err.contains(&p) && c.err.to_lowercase().contains("refused"),
        "{}",
        c.err
    );
    assert!(!c.err.contains("timed out"), "{}", c.err);
    assert!(took < STEP, "took {took:?}");

    // An address nobody answers ARP for: address resolution fails by the deadline.
    let p = common::port().to_string();
    let (c, took) = failing_client(
        "CM client to a silent address",
        &[
            "pingpong",
            "198.18.0.99",
            "-p",
            &p,
            "-n",
            "5",
            "--timeout",
            "3",
        ],
    );
    assert!(c.err.contains("198.18.0.99"), "{}", c.err);
    // It says why: the resolution ran out of time (the kernel's resolution is given the 3 s
    // deadline; so is the wait for its event).
    assert!(
        c.err.contains("timed out") || c.err.contains("address resolution failed"),
        "{}",
        c.err
    );
    // The 3 s deadline, with slack for a loaded emulated guest: 20 times the deadline (the
    // resolution itself never ends without one).
    assert!(took < Duration::from_secs(60), "took {took:?}: {}", c.err);
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn bad_options_are_refused_before_connecting() {
    need_rxe0();
    // OOB: a plain TCP listener stands in for the server; no client may even connect to it.
    let port = common::port();
    let l = TcpListener::bind((IP, port)).unwrap();
    l.set_nonblocking(true).unwrap();
    let cases: [(&[&str], &str); 4] = [
        (&["-d", "rxe9"], "rxe9"),
        (&["-g", "77"], "GID index 77"),
        (&["-s", "16777216"], "max message size"),
        (&["-m", "4096"], "MTU"),
    ];
    let p = port.to_string();
    for (extra, needle) in cases {
        let mut args = vec!["pingpong", "--oob", IP, "-p", &p, "-n", "1"];
        args.extend_from_slice(extra);
        let c = spawn("client", &args).finish(T);
        c.failed(&format!("{extra:?}"));
        assert!(c.err.contains(needle), "{extra:?}: {}", c.err);
        assert!(
            matches!(l.accept(), Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "{extra:?} connected"
        );
    }
    // CM: a real server; it must never see a connection from the bad clients.
    let p = common::port().to_string();
    let mut server = spawn("server", &["pingpong", "--listen", IP, "-p", &p, "-n", "1"]);
    server.wait_for("listening on", T);
    for (extra, needle) in [
        (&["-d", "rxe9"][..], "rxe9"),
        (&["-g", "77"], "GID index 77"),
        (&["-s", "16777216"], "max message size"),
        (&["-g", "0"], "IPv4"),
    ] {
        let mut args = vec!["pingpong", IP, "-p", &p, "-n", "1"];
        args.extend_from_slice(extra);
        let c = spawn("client", &args).finish(T);
        c.failed(&format!("CM {extra:?}"));
        assert!(c.err.contains(needle), "CM {extra:?}: {}", c.err);
    }
    // A good client proves the server was up all along, and is the first it saw.
    spawn("client", &["pingpong", IP, "-p", &p, "-n", "1"])
        .finish(T)
        .ok("good client");
    server.kill();
    let s = server.finish(T);
    assert_eq!(s.err.matches("connection from").count(), 1, "{}", s.err);
    // Servers refuse bad options at start.
    let p = common::port().to_string();
    for extra in [&["-d", "rxe9"][..], &["-s", "16777216"], &["-g", "77"]] {
        let mut args = vec!["pingpong", "--listen", "-p", &p];
        args.extend_from_slice(extra);
        let s = spawn("server", &args).finish(T);
        s.failed(&format!("server {extra:?}"));
        assert!(!s.err.contains("listening on"), "{}", s.err);
    }
}

/// Starts a long run, kills `victim` once both sides are connected, and checks the survivor.
fn kill_mid_run(oob: bool, kill_server: bool) {
    let p = common::port().to_string();
    let mut s_args = vec![
        "pingpong",
        "--listen",
        IP,
        "-p",
        &p,
        "-s",
        "64",
        "-n",
        "100000000",
        "--count",
        "1",
        "--timeout",
        "3",
    ];
    let mut c_args = vec![
        "pingpong",
        IP,
        "-p",
        &p,
        "-s",
        "64",
        "-n",
        "100000000",
        "--timeout",
        "3",
    ];
    if oob {
        s_args.push("--oob");
        c_args.push("--oob");
    }
    let mut server = spawn("server", &s_args);
    server.wait_for("listening on", T);
    let mut client = spawn("client", &c_args);
    client.wait_for("connected to", T);
    server.wait_for("connection from", T);
    let (mut victim, survivor) = if kill_server {
        (server, client)
    } else {
        (client, server)
    };
    victim.kill();
    let t = Instant::now();
    let d = survivor.finish(T);
    let what = format!("survivor (oob {oob}, server killed {kill_server})");
    d.failed(&what);
    assert!(d.err.contains("error"), "{what}: {}", d.err);
    // Deadline 3 s, plus slack for the emulated guest.
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "{what} took {:?}: {}",
        t.elapsed(),
        d.err
    );
    let _ = victim.finish(T);
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn peer_killed_mid_run_survivor_fails_within_deadline() {
    need_rxe0();
    kill_mid_run(false, true);
    kill_mid_run(false, false);
    kill_mid_run(true, true);
    kill_mid_run(true, false);
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn oob_garbage_and_short_messages_are_protocol_errors() {
    need_rxe0();
    // Server side: garbage, then a short message, then a real client; the server survives both.
    let port = common::port();
    let p = port.to_string();
    let mut server = spawn(
        "server",
        &[
            "pingpong",
            "--oob",
            "--listen",
            IP,
            "-p",
            &p,
            "-n",
            "3",
            "--timeout",
            "3",
        ],
    );
    server.wait_for("listening on", T);
    let mut s = TcpStream::connect((IP, port)).unwrap();
    let mut garbage = [b'z'; 52];
    garbage[51] = 0;
    s.write_all(&garbage).unwrap();
    server.wait_for("protocol error", T);
    let mut s2 = TcpStream::connect((IP, port)).unwrap();
    s2.write_all(b"0000:00").unwrap();
    drop(s2);
    server.wait_for("protocol error", T);
    drop(s);
    spawn("client", &["pingpong", "--oob", IP, "-p", &p, "-n", "3"])
        .finish(T)
        .ok("client after garbage");
    server.wait_for("3 iters in", T);
    server.kill();
    let d = server.finish(T);
    assert!(!d.err.contains("panicked"), "{}", d.err);
    assert!(
        d.err.contains("LLLL:QQQQQQ"),
        "names the bad field: {}",
        d.err
    );
    assert!(d.err.contains("after 7 of 52 bytes"), "{}", d.err);

    // Client side: a fake server answering garbage, or closing after a short reply.
    let port = common::port();
    let p = port.to_string();
    for reply in [&[b'q'; 52][..], b"0000:"] {
        let l = TcpListener::bind((IP, port)).unwrap();
        let fake = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut b = [0u8; 52];
            c.read_exact(&mut b).unwrap();
            c.write_all(reply).unwrap();
        });
        let c = spawn(
            "client",
            &[
                "pingpong",
                "--oob",
                IP,
                "-p",
                &p,
                "-n",
                "1",
                "--timeout",
                "3",
            ],
        )
        .finish(T);
        fake.join().unwrap();
        c.failed("client against a garbage server");
        assert!(c.err.contains("protocol error"), "{}", c.err);
    }
}
