//! Device tests (rxe0, in the guest) of each peer's share of a receiver: a session that starts
//! the first stripe of many files and never the rest holds a bounded number of them (and of
//! descriptors and memory), is ended by the budget named in `docs/file-protocol.md`, and a good
//! sender beside it is served; so is one beside a peer (on 198.18.0.2, `peers.rs`) that re-sends
//! the HELLO of an existing directory, which the idle or rate budget ends.

use std::path::Path;
use std::time::Duration;

use crate::common::{self, has_temp, need_rxe0, recv, send_args, spawn_env, wait_until};

const T: Duration = Duration::from_secs(120);

/// Descriptors process `pid` has open.
pub(crate) fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// VmRSS of process `pid`, in KiB.
pub(crate) fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// `n` sparse files of `size` bytes in `dir` (striped: at least `STRIPE_MIN`).
fn sparse_files(dir: &Path, n: usize, size: u64) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..n {
        let f = std::fs::File::create(dir.join(format!("f{i:02}.bin"))).unwrap();
        f.set_len(size).unwrap();
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn half_sent_striped_files_are_capped_and_a_good_sender_is_served_beside() {
    need_rxe0();
    let (tmp, src, out) = common::dirs();
    // 8 files of 8 MiB over 2 streams: 2 stripes each. A peer whose second stream starts only
    // once the first has nothing left leaves every file unfinished; the receiver allows 4 (2 a
    // stream) and ends the first stream at the fifth. (The second then sends the rest.)
    let greedy = tmp.path().join("greedy");
    sparse_files(&greedy, 8, 8 << 20);
    let data = common::pseudo_random(1 << 20, 39);
    std::fs::write(src.join("good.bin"), &data).unwrap();
    let port = common::port();
    let mut r = recv(port, &out, &["--timeout", "10"]);
    let pid = r.pid();
    let (before, rss0) = (fds(pid), rss_kib(pid));
    // The greedy peer: stream 1 takes no job while stream 0 has any (test hook), and the
    // sender's own cap is off with it.
    let args = send_args(port, &[&greedy], &["--streams", "2"]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut g = spawn_env("send", &a, &[("RDMAXFER_TEST_LAG_STREAM", "1")]);
    let good = {
        let src = src.join("good.bin");
        std::thread::spawn(move || common::send(port, &[&src], &[]).finish(T))
    };
    // Observed, not waited on: the receiver's descriptors while the greedy peer runs.
    let (mut peak, mut rss1) = (before, rss0);
    while g.running() {
        peak = peak.max(fds(pid));
        rss1 = rss1.max(rss_kib(pid));
        std::thread::sleep(Duration::from_millis(20));
    }
    let d = g.finish(T);
    d.failed("the greedy send");
    assert!(
        d.err.contains("unfinished in this session")
            || d.out.contains("unfinished in this session"),
        "the greedy sender is told which budget ended it:\n{}\n{}",
        d.out,
        d.err
    );
    let good = good.join().unwrap();
    good.ok("the good sender beside the greedy one");
    assert!(std::fs::read(out.join("good.bin")).unwrap() == data);
    // 2 slots of the greedy session and 1 of the good sender, 16 descriptors a slot at most
    // (`FDS_PER_SESSION`).
    assert!(
        peak <= before + 3 * 16,
        "the receiver's descriptors rose from {before} to {peak}"
    );
    // And a default ring (20 MiB) each, with room for the writers' buffers, plus what glibc
    // keeps of buffers freed by parts that ended (they are made per part): two CI runs peaked
    // 12 and 18 MiB above the three sessions' 72 (a fixed mmap threshold takes ~6 MiB off).
    assert!(
        rss1 <= rss0 + 3 * (24 << 10) + (24 << 10),
        "RSS {rss0} KiB → {rss1} KiB"
    );
    // The ended session's temporary files go with it, and the receiver serves on.
    wait_until("the greedy session's temporary files removed", T, || {
        !has_temp(&out)
    });
    assert!(r.running(), "the receiver serves on:\n{}", r.dump());
    r.kill();
    let rd = r.finish(T);
    assert!(
        rd.err.contains("unfinished in this session"),
        "the receiver names the budget:\n{}",
        rd.err
    );
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn re_sent_hellos_of_an_existing_directory_keep_no_session_alive() {
    use rdmaxfer::xfer::file::proto::{self, EntryKind, Msg, Reason};
    need_rxe0();
    let gid = crate::peers::second_peer();
    let (_tmp, src, out) = common::dirs();
    std::fs::create_dir(out.join("d")).unwrap();
    let data = common::pseudo_random(1 << 20, 40);
    std::fs::write(src.join("good.bin"), &data).unwrap();
    let port = common::port();
    // Two session slots: the peer (198.18.0.2) may hold one, its share; the good sender
    // (198.18.0.1) is served in the other beside it. Budgets of 10 s: under a loaded CI guest
    // the good sender's connect alone once took 7 s, and its session has the same budgets.
    let args = [
        "--idle-timeout",
        "10",
        "--rate-window",
        "10",
        "--max-sessions",
        "2",
    ];
    let mut r = recv(port, &out, &args);
    let pid = r.pid();
    let (fds0, rss0) = (fds(pid), rss_kib(pid));
    let (mut fds1, mut rss1) = (fds0, rss0);
    let t0 = std::time::Instant::now();
    let (mut ep, m) = crate::peers::connect_from_peer2(port, gid);
    assert!(matches!(m, Msg::Challenge { .. }), "{m:?}");
    let good = {
        let f = src.join("good.bin");
        std::thread::spawn(move || common::send(port, &[&f], &[]).finish(T))
    };
    let mut hello = common::hello("d", 0, 1 << 16, None);
    hello.kind = EntryKind::Dir;
    hello.mode = 0o755;
    let msg = proto::encode(&Msg::Hello(hello));
    // The HELLO of a directory that exists, twice a second: each answer was progress once.
    let mut skips = 0;
    let end = loop {
        assert!(
            t0.elapsed() < Duration::from_secs(50),
            "still answered after {skips} SKIPs in {:?}",
            t0.elapsed()
        );
        (fds1, rss1) = (fds1.max(fds(pid)), rss1.max(rss_kib(pid)));
        ep.send(&msg).expect("send HELLO");
        match crate::hostile::next(&mut ep) {
            Msg::Skip { .. } => skips += 1,
            m => break m,
        }
        ep.set_timeout(Duration::from_millis(500));
        match ep.recv() {
            Ok(m) => break proto::decode(&m).expect("decode"),
            Err(e) if e.is_timeout() => {}
            Err(e) => panic!("between HELLOs: {e}"),
        }
        ep.set_timeout(Duration::from_secs(30));
    };
    let took = t0.elapsed();
    match end {
        Msg::Err {
            reason: Reason::Budget,
            message,
        } => assert!(
            message.contains("--idle-timeout") || message.contains("--min-rate"),
            "{message}"
        ),
        m => panic!("expected ERR(budget) after {skips} SKIPs, got {m:?}"),
    }
    // The idle budget (10 s) from the first answer, and a step of the receiver's loop.
    assert!(
        took < Duration::from_secs(10 + 10),
        "ended after {took:?} ({skips} SKIPs)"
    );
    let d = good.join().unwrap();
    d.ok("the good sender beside the peer");
    assert!(d.elapsed < Duration::from_secs(30), "took {:?}", d.elapsed);
    assert!(std::fs::read(out.join("good.bin")).unwrap() == data);
    // 2 slots at most, 16 descriptors and a default ring (20 MiB) each.
    assert!(fds1 <= fds0 + 2 * 16, "descriptors {fds0} → {fds1}");
    assert!(rss1 <= rss0 + 2 * (24 << 10), "RSS {rss0} KiB → {rss1} KiB");
    drop(ep);
    r.kill();
    drop(r.finish(T));
}
