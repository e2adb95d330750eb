//! The two-host rig (docs/rig.md): guests A (198.18.0.1) and B (198.18.0.2), each with rxe0 on
//! its own virtio-net NIC, joined by a qemu socket netdev on 127.0.0.1, and rxe1 on a second NIC
//! and wire (198.18.1.1, 198.18.1.2); the two-host tests, the fault campaign and the two-host
//! benchmark, ending with "test result: … N passed; M failed".
//!
//! `ci/rig.sh [TEST...]` runs it: `cargo test --test rig -- --ignored [TEST...]` after building
//! the release binary. Without `--ignored` (as `cargo test` runs every test target) it runs only
//! its own checks of the parsers below, on the host. Outputs go to `target/rig/<run>/`.
//!
//! Environment: RIG_BIN (the rdmaxfer to test, default target/release/rdmaxfer), RIG_SOAK_N
//! (500), RIG_BOOT_SECS (240), RIG_STRIPED_N ("2 4"), RIG_STRIPED_RUNS (3), RIG_REORDER_MIB
//! (16), RIG_BENCH_MIB (64), RIG_BENCH_REORDER_MIB (8), RIG_BENCH_ITERS (100); passed to the
//! guests by ci/rig-boot.sh: RIG_MEMORY, RIG_GUEST_TIMEOUT, RIG_POLL, RIG_TRACE_STREAMS,
//! RIG_PCAP.

mod bench;
mod check;
mod hosts;
mod rails;
mod sessions;
mod transfer;

use std::path::PathBuf;
use std::time::Instant;

use check::Test;
use hosts::{log, Node, Rig};

/// What every test gets: the rig and the next TCP port (one per test, more for some).
pub struct Ctx {
    pub rig: Rig,
    pub port: u16,
}

impl Ctx {
    /// Starts a test on a fresh port.
    pub fn begin(&mut self, name: &'static str) -> Test {
        self.port += 1;
        Test::begin(name, self.port)
    }
}

/// An environment setting, or `default` when unset or unreadable.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

type TestFn = fn(&mut Ctx) -> (bool, String);

/// Every test, in the order they run.
const TESTS: &[(&str, TestFn)] = &[
    ("pingpong_cm", |cx| {
        transfer::pingpong(cx, "pingpong_cm", "")
    }),
    ("pingpong_oob", |cx| {
        transfer::pingpong(cx, "pingpong_oob", "--oob")
    }),
    ("xfer_cm", |cx| transfer::xfer_test(cx, "xfer_cm", "cm", "")),
    ("xfer_oob", |cx| {
        transfer::xfer_test(cx, "xfer_oob", "oob", "--oob")
    }),
    ("striped", transfer::striped),
    ("loss", transfer::loss),
    ("striped_loss", transfer::striped_loss),
    ("delay_reorder", transfer::delay_reorder),
    ("link_down", transfer::link_down),
    ("rail_cut", rails::rail_cut),
    ("wrong_token", transfer::wrong_token),
    ("wrong_gid", transfer::wrong_gid),
    ("mtu_mismatch", transfer::mtu_mismatch),
    ("cp", transfer::cp),
    ("multi_hostile", sessions::multi_hostile),
    ("soak", sessions::soak),
    ("bench", bench::bench),
    ("receiver_killed", sessions::receiver_killed),
    ("sender_killed", sessions::sender_killed),
    ("hold", hold),
];

/// Not a test: keeps both guests up (at most an hour) for manual commands (scripts dropped into
/// the agents' cmd/ directories, see ci/rig-agent.sh) until `<run>/release` exists.
fn hold(cx: &mut Ctx) -> (bool, String) {
    let t = Test::begin("hold", cx.port);
    log(format!(
        "holding: agents in {} and {}; touch {}/release to go on",
        cx.rig.agent_dir(Node::A).display(),
        cx.rig.agent_dir(Node::B).display(),
        cx.rig.run.display()
    ));
    let end = Instant::now() + std::time::Duration::from_secs(3600);
    while !cx.rig.run.join("release").exists() && Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_secs(1)); // a person's pace
    }
    t.end()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--ignored") {
        std::process::exit(self_checks());
    }
    let names: Vec<&str> = args
        .iter()
        .filter(|a| !a.starts_with('-'))
        .map(String::as_str)
        .collect();
    let chosen: Vec<(&str, TestFn)> = if names.is_empty() {
        TESTS
            .iter()
            .copied()
            .filter(|(n, _)| *n != "hold")
            .collect()
    } else {
        let mut v = Vec::new();
        for n in names {
            match TESTS.iter().find(|(t, _)| *t == n) {
                Some(t) => v.push(*t),
                None => {
                    let all: Vec<&str> = TESTS.iter().map(|t| t.0).collect();
                    eprintln!("unknown rig test {n} (tests: {})", all.join(" "));
                    std::process::exit(2);
                }
            }
        }
        v
    };
    std::process::exit(run(&chosen));
}

fn run(tests: &[(&str, TestFn)]) -> i32 {
    let t0 = Instant::now();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let stamp = std::process::Command::new("date")
        .arg("+%Y%m%d-%H%M%S")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let run = root
        .join("target/rig")
        .join(format!("{stamp}-{}", std::process::id()));
    std::fs::create_dir_all(&run).expect("the run directory");
    let bin = std::env::var("RIG_BIN")
        .unwrap_or_else(|_| root.join("target/release/rdmaxfer").display().to_string());
    let bin = std::fs::canonicalize(&bin)
        .unwrap_or_else(|_| panic!("{bin} missing: build it (ci/rig.sh does)"));
    let names: Vec<&str> = tests.iter().map(|t| t.0).collect();
    log(format!(
        "binary {}; tests: {}",
        bin.display(),
        names.join(" ")
    ));
    let mut cx = Ctx {
        rig: Rig::new(root, run, bin),
        port: 18600,
    };
    let boot_secs = env_or("RIG_BOOT_SECS", 240);
    cx.rig.boot(Node::A);
    if cx.rig.wire_listening(120) {
        cx.rig.boot(Node::B);
    }
    let ok_a = cx.rig.ready(Node::A, boot_secs);
    let ok_b = cx.rig.ready(Node::B, boot_secs) && cx.rig.wire_up();
    if !ok_a || !ok_b {
        log(format!(
            "FAIL: the rig did not come up (A ready: {ok_a}, B ready: {ok_b}); see above"
        ));
        println!("test result: FAILED. 0 passed; 1 failed");
        return 1;
    }
    log(format!("both hosts up after {} s", t0.elapsed().as_secs()));
    let (mut passed, mut failed, mut rows) = (0, 0, Vec::new());
    for (_, f) in tests {
        let (ok, row) = f(&mut cx);
        if ok {
            passed += 1;
        } else {
            failed += 1;
        }
        rows.push(row);
    }
    log(format!(
        "=== rig summary (outputs in {})",
        cx.rig.run.display()
    ));
    for r in &rows {
        println!("  {r}");
    }
    log(format!("rig took {} s", t0.elapsed().as_secs()));
    cx.rig.stop();
    let verdict = if failed == 0 { "ok" } else { "FAILED" };
    println!("test result: {verdict}. {passed} passed; {failed} failed");
    i32::from(failed > 0)
}

/// The host-side checks of what the rig parses (guest output, perftest rows, JSON, counters).
fn self_checks() -> i32 {
    type Check = (&'static str, fn());
    let checks: &[Check] = &[
        ("counters_grow_by_name", || {
            let (b, a) = (
                "duplicate_request=3 rcvd_pkts=10 rcvd_seq_err=0 ",
                "duplicate_request=5 rcvd_pkts=90 rcvd_seq_err=0 ",
            );
            assert_eq!(check::counter_delta(b, a, "duplicate_request"), Some(2));
            assert_eq!(
                check::counter_delta(b, a, "request"),
                None,
                "a name is matched whole"
            );
            assert_eq!(
                check::grown(b, a),
                "duplicate_request +2",
                "packet counts and unchanged ones left out"
            );
            assert_eq!(check::grown(a, a), "none");
        }),
        ("json_sha_and_errors_of_outputs", || {
            let out = "listening on 198.18.0.1:1\n{\"result\":\"error\",\"error\":\"timed out after 5 s\",\"mib_s\":1.25}\n";
            assert_eq!(check::json(out, "result"), "error");
            assert_eq!(check::rate(out, "mib_s"), "1.2");
            assert!(check::says_why(out));
            assert!(!check::says_why("{\"result\":\"ok\"}"));
            let h = "ab".repeat(32);
            assert_eq!(check::sha(&format!("{h}  f.bin\n")), h);
            assert_eq!(check::sha("no final file\n"), "");
        }),
        ("perftest_row_and_failed_runs", || {
            let pt = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n 1048576    100              48.10              47.55                0.000045\n";
            assert_eq!(bench::perftest_bw(pt), Some(47.55));
            assert_eq!(bench::perftest_bw("Correlation coefficient"), None);
            assert_eq!(
                bench::last_rate("{\"result\":\"ok\",\"data_mib_s\":40.5}", "data_mib_s"),
                Some(40.5)
            );
            assert_eq!(
                bench::last_rate("{\"result\":\"error\",\"data_mib_s\":40.5}", "data_mib_s"),
                None
            );
        }),
        ("ratio_table_names_missing_figures", || {
            let d = std::env::temp_dir().join(format!("rig-self-check-{}", std::process::id()));
            std::fs::create_dir_all(&d).unwrap();
            let pt = " #bytes #iterations peak average\n 1048576 100 50.0 50.00 0.1\n";
            std::fs::write(d.join("ib_write_bw.clean.txt"), pt).unwrap();
            std::fs::write(
                d.join("rdx_send.clean.txt"),
                "{\"result\":\"ok\",\"data_mib_s\":49.0,\"mib_s\":40.0}\n",
            )
            .unwrap();
            let t = bench::ratios(&d);
            let _ = std::fs::remove_dir_all(&d);
            assert!(t.contains("send file clean ratio: 0.980"), "{t}");
            assert!(t.contains("clean 0.980 (goal >= 0.95: met)"), "{t}");
            assert!(t.contains("write bench clean ratio: missing"), "{t}");
        }),
    ];
    println!("\nrunning {} tests", checks.len());
    let mut failed = 0;
    for (name, f) in checks {
        let ok = std::panic::catch_unwind(f).is_ok();
        println!("test {name} ... {}", if ok { "ok" } else { "FAILED" });
        failed += usize::from(!ok);
    }
    let ignored = TESTS.len() - 1;
    let verdict = if failed == 0 { "ok" } else { "FAILED" };
    println!(
        "\ntest result: {verdict}. {} passed; {failed} failed; {ignored} ignored (the two-host tests: ci/rig.sh)\n",
        checks.len() - failed
    );
    i32::from(failed > 0)
}
