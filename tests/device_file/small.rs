//! Device tests (rxe0, in the guest) of trees of many small files (file protocol v3: entries in
//! flight, small files inline in DATA): a tree of 2 000 files in 50 directories arrives whole
//! and its re-run skips every entry; one file corrupted in flight fails alone; a receiver
//! killed mid-tree is completed by a `--resume` re-run with nothing partial left; a crafted
//! sender that announces inline files and never sends their data is ended with the receiver's
//! memory bounded; a receiver with 3 slots takes small and ring files without stalling.

use std::path::Path;
use std::time::Duration;

use rdmaxfer::xfer::endpoint::{Endpoint, EndpointOptions};
use rdmaxfer::xfer::file::proto::{self, Msg, Reason};
use rdmaxfer::xfer::session;

use crate::common::{
    self, dirs, has_temp, listing, need_rxe0, pseudo_random, recv, send, send_args, spawn_env,
    wait_until, IP,
};

const T: Duration = Duration::from_secs(300);

/// Writes a tree of `n` files in 50 directories below `root`: sizes from 0 to 9 000 bytes (some
/// take two DATA pieces), plus one of 100 KiB (through the ring), an empty directory and a
/// symlink. Returns the regular files' relative names, sorted.
fn small_tree(root: &Path, n: usize) -> Vec<String> {
    let mut names = Vec::new();
    for i in 0..n {
        let rel = format!("d{:02}/f{i:05}", i % 50);
        let p = root.join(&rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, pseudo_random(i * 37 % 9_001, i as u64)).unwrap();
        names.push(rel);
    }
    std::fs::write(root.join("big.bin"), pseudo_random(100 << 10, 7)).unwrap();
    names.push("big.bin".into());
    std::fs::create_dir_all(root.join("empty/dir")).unwrap();
    std::os::unix::fs::symlink("d00/f00000", root.join("link")).unwrap();
    names.sort();
    names
}

/// Every file below `src` is below `dst` with the same contents, and nothing else is.
fn same_tree(src: &Path, dst: &Path) {
    assert_eq!(listing(dst), listing(src), "the lists of files differ");
    for rel in listing(src) {
        let (a, b) = (src.join(&rel), dst.join(&rel));
        if a.is_symlink() {
            assert_eq!(
                std::fs::read_link(&a).unwrap(),
                std::fs::read_link(&b).unwrap()
            );
        } else {
            assert!(
                std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(),
                "{rel} differs"
            );
        }
    }
    assert!(dst.join("empty/dir").is_dir(), "the empty directory");
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_tree_of_2000_small_files_arrives_whole_and_its_rerun_skips_everything() {
    need_rxe0();
    let port = common::port();
    let (_tmp, src, out) = dirs();
    let root = src.join("tree");
    let names = small_tree(&root, 2_000);

    let r = recv(port, &out, &["--once"]);
    let s = send(port, &[&root], &[]).finish(T);
    s.ok("send of the tree");
    r.finish(T).ok("recv of the tree");
    same_tree(&root, &out.join("tree"));
    assert!(!has_temp(&out), "no temporary file left");
    let j = s.one_json();
    let total: u64 = names
        .iter()
        .map(|n| std::fs::metadata(root.join(n)).unwrap().len())
        .sum();
    assert_eq!(j["bytes"], total, "every byte counted once: {j}");
    assert_eq!(j["files_failed"], 0, "{j}");

    let r = recv(port, &out, &["--once"]);
    let s = send(port, &[&root], &[]).finish(T);
    s.ok("re-run of the unchanged tree");
    let d = r.finish(T);
    d.ok("recv of the re-run");
    // 2 001 files, the symlink and the empty directory: all there already.
    let j = s.one_json();
    assert_eq!(j["result"], "ok", "{j}");
    assert_eq!(j["bytes"], 0, "nothing re-sent: {j}");
    assert_eq!(j["files_skipped"], 2_003, "{j}");
    assert_eq!(j["files_failed"], 0, "{j}");
    // The receiver reports each stream's connection on a line of its own.
    let lines = d.json_lines();
    let sum = |k: &str| lines.iter().map(|j| j[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!(
        (sum("files_skipped"), sum("bytes"), sum("files_failed")),
        (2_003, 0, 0)
    );
}

/// A receiver granting far fewer credits (`--slots 3`) than the sender's 32 posted receives:
/// small files in flight (the sender waits for credits with answers arriving: it takes them
/// meanwhile) and ring files of many more chunks than slots (the receiver owes credits with
/// nothing to answer: its credit messages go at half its own window, not half the sender's).
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_receiver_with_three_slots_takes_small_and_ring_files_without_stalling() {
    need_rxe0();
    let port = common::port();
    let (_tmp, src, out) = dirs();
    let root = src.join("tree");
    small_tree(&root, 300);
    std::fs::write(root.join("two.bin"), pseudo_random(2 << 20, 9)).unwrap();
    let r = recv(port, &out, &["--once", "--slots", "3", "--timeout", "5"]);
    let args = ["--chunk", "16K", "--streams", "1", "--timeout", "5"];
    let s = send(port, &[&root], &args).finish(T);
    s.ok("send to a receiver with 3 slots");
    r.finish(T).ok("recv --slots 3");
    same_tree(&root, &out.join("tree"));
    assert_eq!(s.one_json()["files_failed"], 0);
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn one_small_file_corrupted_in_flight_fails_alone_and_the_rest_arrive() {
    need_rxe0();
    let port = common::port();
    let (_tmp, src, out) = dirs();
    let root = src.join("tree");
    small_tree(&root, 300);
    let bad = "tree/d07/f00107";
    let r = recv(port, &out, &["--once"]);
    let args = send_args(port, &[&root], &[]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let env = [
        ("RDMAXFER_TEST_CORRUPT_CHUNK", "0"),
        ("RDMAXFER_TEST_CORRUPT_NAME", bad),
    ];
    let s = spawn_env("send", &a, &env).finish(T);
    s.failed("send with one corrupted file");
    assert_eq!(s.status.code(), Some(23), "partial transfer: {}", s.err);
    r.finish(T).failed("recv of a tree with one corrupted file");
    let j = s.one_json();
    assert_eq!(j["files_failed"], 1, "{j}");
    let f = j["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == bad)
        .unwrap_or_else(|| panic!("{bad} not reported: {j}"));
    assert_eq!(f["result"], "hash mismatch", "{f}");
    let got = out.join("tree");
    assert!(
        !got.join("d07/f00107").exists(),
        "the corrupted file is not committed"
    );
    let mut want = listing(&root);
    want.retain(|n| n != "d07/f00107");
    assert_eq!(
        listing(&got),
        want,
        "every other file arrived, nothing partial"
    );
    for rel in &want {
        if !root.join(rel).is_symlink() {
            assert!(
                std::fs::read(root.join(rel)).unwrap() == std::fs::read(got.join(rel)).unwrap()
            );
        }
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_receiver_killed_mid_tree_is_completed_by_a_resume_rerun() {
    need_rxe0();
    let port = common::port();
    let (_tmp, src, out) = dirs();
    let root = src.join("tree");
    small_tree(&root, 2_000);
    let mut r = recv(port, &out, &["--resume"]);
    let s = send(port, &[&root], &["--resume"]);
    let got = out.join("tree");
    wait_until("some 300 files arrived", T, || {
        got.is_dir() && listing(&got).len() >= 300
    });
    r.kill(); // SIGKILL: the receiver cleans nothing up
    let first = s.finish(T);
    first.failed("send to a receiver killed mid-tree");
    let held = listing(&got).len();
    assert!(held < 2_002, "interrupted before the end ({held} entries)");

    let r = recv(port, &out, &["--once", "--resume"]);
    let again = send(port, &[&root], &["--resume"]).finish(T);
    again.ok("the --resume re-run");
    r.finish(T).ok("recv of the --resume re-run");
    let j = again.one_json();
    assert!(
        j["files_skipped"].as_u64().unwrap() >= 250,
        "what arrived is skipped: {j}"
    );
    same_tree(&root, &got);
    assert!(!has_temp(&out), "nothing partial left: {:?}", listing(&out));
}

/// VmRSS of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_sender_announcing_inline_files_without_their_data_is_ended_with_memory_bounded() {
    need_rxe0();
    let port = common::port();
    let (_tmp, _src, out) = dirs();
    let mut r = recv(port, &out, &[]);
    let pid = r.pid();
    let before = rss_kib(pid);
    let opts = EndpointOptions::default()
        .msg_size(proto::MAX_MSG_LEN)
        .timeout(Duration::from_secs(30));
    let mut ep: Endpoint = session::connect(IP, port, false, &opts).expect("connect to recv");
    match proto::decode(&ep.recv().expect("challenge")).expect("decode") {
        Msg::Challenge { .. } => {}
        m => panic!("expected CHALLENGE, got {m:?}"),
    }
    // Announce up to 100 000 tiny inline files, reading each answer, never sending DATA.
    let mut wanted = 0;
    let end = loop {
        let name = format!("flood/{wanted:06}");
        let mut h = common::hello(&name, 1, 1 << 20, None);
        h.flags.inline = true;
        ep.send(&proto::encode(&Msg::Hello(h))).expect("HELLO");
        match proto::decode(&ep.recv().expect("an answer")).expect("decode") {
            Msg::Want => wanted += 1,
            m => break m,
        }
        assert!(wanted < 100_000, "never ended");
    };
    match &end {
        Msg::Err { reason, message } => {
            assert_eq!(*reason, Reason::Protocol, "{message}");
            assert!(message.contains("without sending their data"), "{message}");
        }
        m => panic!("expected ERR, got {m:?}"),
    }
    assert_eq!(
        wanted,
        proto::MAX_IN_FLIGHT,
        "the receiver holds a bounded queue"
    );
    drop(ep);
    r.wait_for("\"result\":\"error\"", T);
    let grown = rss_kib(pid).saturating_sub(before);
    assert!(grown < 16 << 10, "the receiver's RSS grew by {grown} KiB");
    assert!(
        listing(&out).is_empty(),
        "nothing made: {:?}",
        listing(&out)
    );
    // And it serves the next sender.
    let (_t2, src2, _) = dirs();
    let f = src2.join("after");
    std::fs::write(&f, b"still serving\n").unwrap();
    send(port, &[&f], &[])
        .finish(T)
        .ok("a sender after the flood");
    assert_eq!(
        std::fs::read(out.join("after")).unwrap(),
        b"still serving\n"
    );
}
