//! Device tests of the parameter exchange (need rxe0 at 198.18.0.1; run inside the guest by
//! ci/test.sh): `pingpong` and `bench` servers started without -s / -n / op run what each
//! client asks for over RDMA CM, and refuse what is over their limits with a reason that names
//! both values. Processes are synchronised on their output ("listening on"), never on sleeps.

use std::time::Duration;

use crate::common::{self, need_rxe0, spawn, Done, Proc, IP};

const T: Duration = Duration::from_secs(120);

fn server(what: &str, args: &[&str]) -> Proc {
    let mut s = spawn(what, args);
    s.wait_for("listening on", T);
    s
}

fn client(args: &[&str]) -> Done {
    spawn("client", args).finish(T)
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn pingpong_default_server_runs_the_clients_size_and_count() {
    need_rxe0();
    let p = common::port().to_string();
    // No -s / -n on the server (its defaults are 4096 and 1000).
    let s = server(
        "pingpong server",
        &[
            "pingpong", "--listen", IP, "-p", &p, "--count", "2", "--json",
        ],
    );
    let c = client(&["pingpong", IP, "-p", &p, "-s", "64", "-n", "100", "--json"]);
    c.ok("pingpong -s 64 -n 100");
    let j = c.json_lines();
    assert_eq!(j.len(), 1, "{}", c.out);
    assert_eq!(
        (j[0]["size"].as_u64(), j[0]["iters"].as_u64()),
        (Some(64), Some(100))
    );
    assert_eq!(j[0]["checked"], true);
    // -n alone (the server would run 1000), and a size above the server's 4096, with a suffix.
    let c = client(&["pingpong", IP, "-p", &p, "-s", "64K", "-n", "20", "--json"]);
    c.ok("pingpong -s 64K -n 20");
    let j = c.json_lines();
    assert_eq!(
        (j[0]["size"].as_u64(), j[0]["iters"].as_u64()),
        (Some(65536), Some(20))
    );
    let d = s.finish(T);
    d.ok("pingpong server");
    let runs: Vec<(Option<u64>, Option<u64>)> = d
        .json_lines()
        .iter()
        .map(|o| (o["size"].as_u64(), o["iters"].as_u64()))
        .collect();
    assert_eq!(
        runs,
        [(Some(64), Some(100)), (Some(65536), Some(20))],
        "{}",
        d.out
    );
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn pingpong_over_the_limits_is_refused_naming_both_values() {
    need_rxe0();
    let p = common::port().to_string();
    let s = server(
        "pingpong server",
        &[
            "pingpong",
            "--listen",
            IP,
            "-p",
            &p,
            "--count",
            "3",
            "--max-size",
            "64K",
            "--max-iters",
            "50",
        ],
    );
    let c = client(&["pingpong", IP, "-p", &p, "-s", "1M", "-n", "10"]);
    c.failed("pingpong -s 1M against --max-size 64K");
    assert!(
        c.err
            .contains("the server allows at most -s 64K; asked for -s 1M"),
        "{}",
        c.err
    );
    let c = client(&["pingpong", IP, "-p", &p, "-s", "64", "-n", "100"]);
    c.failed("pingpong -n 100 against --max-iters 50");
    assert!(
        c.err
            .contains("the server allows at most -n 50; asked for -n 100"),
        "{}",
        c.err
    );
    // The server keeps serving: a client within the limits succeeds.
    client(&["pingpong", IP, "-p", &p, "-s", "64K", "-n", "50"]).ok("within the limits");
    let d = s.finish(T);
    d.failed("the server reports the refused clients");
    assert!(
        d.err.contains("refused") && d.err.contains("-s 1M"),
        "{}",
        d.err
    );
    assert!(d.err.contains("2 of 3 connections failed"), "{}", d.err);
}

fn bench_json(d: &Done, what: &str) -> serde_json::Value {
    d.ok(what);
    d.json_lines()
        .pop()
        .unwrap_or_else(|| panic!("{what}: no JSON:\n{}", d.out))
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn bench_default_server_runs_every_op_at_the_clients_size() {
    need_rxe0();
    let p = common::port().to_string();
    // No op, -s or -n on the server: each client gets its own.
    let s = server(
        "bench server",
        &["bench", "--listen", IP, "-p", &p, "--count", "4"],
    );
    for (op, size, bytes) in [
        ("write", "1M", 1u64 << 20),
        ("send", "1M", 1 << 20),
        ("read", "1M", 1 << 20),
        ("send", "4K", 4096),
    ] {
        let what = format!("bench {op} -s {size}");
        let v = bench_json(
            &client(&[
                "bench", op, IP, "-p", &p, "-s", size, "-n", "16", "-t", "8", "--json",
            ]),
            &what,
        );
        assert_eq!(v["op"], op, "{what}: {v}");
        assert_eq!(v["size"].as_u64(), Some(bytes), "{what}: {v}");
        assert_eq!(v["iters"].as_u64(), Some(16), "{what}: {v}");
        assert!(v["bw_avg_mib_s"].as_f64().unwrap() > 0.0, "{what}: {v}");
    }
    let d = s.finish(T);
    d.ok("bench server");
    for line in [
        "served Write: 16 × 1048576 bytes",
        "served Send: 16 × 1048576 bytes",
        "served Read: 16 × 1048576 bytes",
        "served Send: 16 × 4096 bytes",
    ] {
        assert!(d.err.contains(line), "{line}:\n{}", d.err);
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn bench_over_the_limits_is_refused_naming_both_values() {
    need_rxe0();
    let p = common::port().to_string();
    let s = server(
        "bench server",
        &["bench", "--listen", IP, "-p", &p, "--count", "2"],
    );
    // 16M is over the default --max-size (8M, Soft-RoCE's largest message).
    let c = client(&["bench", "write", IP, "-p", &p, "-s", "16M", "-n", "2"]);
    c.failed("bench write -s 16M");
    assert!(
        c.err
            .contains("the server allows at most -s 8M; asked for -s 16M"),
        "{}",
        c.err
    );
    let c = client(&["bench", "send", IP, "-p", &p, "-n", "2000000000"]);
    c.failed("bench send -n 2000000000");
    assert!(
        c.err
            .contains("at most -n 1000000000; asked for -n 2000000000"),
        "{}",
        c.err
    );
    s.finish(T).failed("the server reports the refused clients");
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn bench_oob_send_larger_than_the_servers_buffers_is_refused_naming_both() {
    need_rxe0();
    let p = common::port().to_string();
    // Over --oob nothing is exchanged before the QP exists: the server's -s sizes its receives.
    let s = server(
        "bench server",
        &[
            "bench", "--listen", IP, "-p", &p, "--oob", "-s", "4K", "--count", "1",
        ],
    );
    let c = client(&[
        "bench", "send", IP, "-p", &p, "--oob", "-s", "64K", "-n", "4",
    ]);
    c.failed("bench send -s 64K against an --oob server with -s 4K");
    assert!(
        c.err.contains("at most -s 4K; asked for -s 64K"),
        "{}",
        c.err
    );
    s.finish(T).failed("the server reports the refused client");
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn ib_port_is_checked_against_the_devices_ports() {
    need_rxe0();
    // rxe0 has one port: -i 2 is refused before anything is sent, by clients and servers.
    let p = common::port().to_string();
    let c = client(&["pingpong", "--oob", IP, "-p", &p, "-i", "2", "-n", "1"]);
    c.failed("pingpong -i 2");
    assert!(c.err.contains("there is no port 2"), "{}", c.err);
    let s = spawn("server", &["pingpong", "--listen", "-p", &p, "-i", "2"]).finish(T);
    s.failed("pingpong --listen -i 2");
    assert!(s.err.contains("there is no port 2"), "{}", s.err);
    // -i 1 on both sides works, over RDMA CM and --oob.
    let p = common::port().to_string();
    for oob in [false, true] {
        let mut sargs = vec![
            "pingpong", "--listen", IP, "-p", &p, "-i", "1", "--count", "1",
        ];
        let mut cargs = vec!["pingpong", IP, "-p", &p, "-i", "1", "-x", "1", "-n", "5"];
        if oob {
            sargs.extend(["--oob", "-n", "5"]);
            cargs.push("--oob");
        }
        let s = server("pingpong server", &sargs);
        client(&cargs).ok(&format!("pingpong -i 1 (oob {oob})"));
        s.finish(T).ok("pingpong server -i 1");
    }
}
