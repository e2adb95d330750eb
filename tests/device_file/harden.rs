//! Device tests (rxe0, in the guest) of a receiver no sender can fool: names and messages with
//! control characters never reach its output raw; its own failures (the locked-memory limit)
//! reach the sender; SIGINT/SIGTERM end either side cleanly (exit 130/143, no temporary file and
//! no directory made for the unfinished file, unless `--resume` keeps it).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rdmaxfer::xfer::endpoint::EndpointOptions;
use rdmaxfer::xfer::file::proto::{self, Hello, HelloFlags, Msg, Reason};
use rdmaxfer::xfer::session;

use crate::common::{
    self, has_temp, need_rxe0, recv, send, spawn, spawn_prog, wait_until, Done, Proc, IP, SLOW,
};

const T: Duration = Duration::from_secs(120);

/// Every entry below `dir` (directories too), relative, sorted.
fn everything(dir: &Path) -> Vec<String> {
    fn go(base: &Path, d: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(base).unwrap().to_str().unwrap().to_string());
            if p.is_dir() {
                go(base, &p, out);
            }
        }
    }
    let mut v = Vec::new();
    go(dir, dir, &mut v);
    v.sort();
    v
}

/// Asserts that `text` has no control character but newlines (so nothing forged a line or a
/// terminal escape).
fn no_raw_controls(what: &str, text: &str) {
    let bad: Vec<char> = text
        .chars()
        .filter(|&c| c.is_control() && c != '\n')
        .collect();
    assert!(bad.is_empty(), "{what}: raw {bad:?} in:\n{text}");
}

/// `rdmaxfer recv --once` arguments, without `--json`.
fn text_recv_args(port: u16, out: &Path) -> Vec<String> {
    let p = port.to_string();
    let o = out.to_str().unwrap();
    ["recv", "--out", o, "--listen", IP, "-p", &p, "--once"]
        .map(String::from)
        .into()
}

// ---- names and messages with control characters ---------------------------------------------

const EVIL: &str = "evil\nok      forged (1 bytes, blake3 00)\x1b[31m\u{9b}2J\x7f";

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn control_characters_from_a_sender_are_refused_and_never_printed_raw() {
    need_rxe0();
    let port = common::port();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    // Text output (not --json): the lines a forged name would imitate.
    let args = text_recv_args(port, &out);
    let mut r = spawn("recv", &args.iter().map(String::as_str).collect::<Vec<_>>());
    r.wait_for("listening on", T);

    let opts = EndpointOptions::default()
        .msg_size(proto::MAX_MSG_LEN)
        .timeout(Duration::from_secs(10));
    let mut ep = session::connect(IP, port, false, &opts).expect("connect to recv");
    match proto::decode(&ep.recv().expect("challenge")).expect("decode") {
        Msg::Challenge { .. } => {}
        m => panic!("expected CHALLENGE, got {m:?}"),
    }
    let hello = Hello {
        version: proto::VERSION,
        name: EVIL.into(),
        size: 1,
        mode: 0o644,
        mtime_sec: 0,
        mtime_nsec: 0,
        chunk_size: 65536,
        flags: HelloFlags::default(),
        auth: None,
        ..Default::default()
    };
    ep.send(&proto::encode(&Msg::Hello(hello))).expect("HELLO");
    match proto::decode(&ep.recv().expect("reply")).expect("decode reply") {
        Msg::Refuse { reason, message } => {
            assert_eq!(reason, Reason::BadName, "{message}");
            assert!(message.contains("control character (U+000A)"), "{message}");
            no_raw_controls("REFUSE text", &message);
        }
        m => panic!("expected REFUSE, got {m:?}"),
    }
    // The sender's own message text, ending the session, is hostile too.
    let err = Msg::Err {
        reason: Reason::Protocol,
        message: "bye\nok      forged-too\x1b]0;title\x07".into(),
    };
    ep.send(&proto::encode(&err)).expect("ERR");
    let _ = ep.close();

    let d = r.finish(T);
    d.failed("recv --once after a bad name");
    no_raw_controls("recv stdout", &d.out);
    no_raw_controls("recv stderr", &d.err);
    for l in d.out.lines().chain(d.err.lines()) {
        assert!(!l.starts_with("ok"), "forged line {l:?}:\n{}", d.out);
    }
    assert!(
        d.out.contains("FAILED  evil\\u{a}ok      forged"),
        "the refused name, escaped:\n{}",
        d.out
    );
    assert!(
        d.err
            .contains("bye\\u{a}ok      forged-too\\u{1b}]0;title\\u{7}"),
        "the peer's message, escaped:\n{}",
        d.err
    );
    assert!(everything(&out).is_empty(), "{:?}", everything(&out));
}

// ---- the receiver's own failures reach the sender --------------------------------------------

/// `rdmaxfer recv` under a locked-memory limit of `kib` KiB (as root, without CAP_IPC_LOCK,
/// which would bypass the limit).
fn recv_memlocked(port: u16, out: &Path, kib: u32) -> Proc {
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    let script = format!("ulimit -l {kib} && exec \"$0\" \"$@\"");
    let mut args: Vec<String> = Vec::new();
    if root {
        args.extend(["--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock", "bash"].map(String::from));
    }
    args.extend(["-c".to_string(), script, common::bin()]);
    args.extend(text_recv_args(port, out));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut r = spawn_prog("recv", if root { "setpriv" } else { "bash" }, &a);
    r.wait_for("listening on", T);
    r
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_receiver_over_its_locked_memory_limit_tells_the_sender_why() {
    need_rxe0();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("sub/f.bin"), common::pseudo_random(2 << 20, 5)).unwrap();
    // 64 KiB: not even the connection's message buffers fit (refused while accepting);
    // 1 MiB: the connection fits, the 16 MiB staging ring for the file does not.
    for (kib, at) in [
        (64, "rejected by the server"),
        (1024, "cannot register its staging ring"),
    ] {
        let port = common::port();
        let out = tmp.path().join(format!("out{kib}"));
        std::fs::create_dir_all(&out).unwrap();
        let r = recv_memlocked(port, &out, kib);
        let s = send(port, &[&src], &[]).finish(T);
        s.failed("send to a receiver over its memlock limit");
        assert!(
            s.err.contains("locked-memory limit"),
            "{kib} KiB: the sender must name the receiver's reason:\n{}",
            s.err
        );
        assert!(s.err.contains(at), "{kib} KiB: {at:?} expected:\n{}", s.err);
        assert!(!s.err.contains("peer disconnected"), "{}", s.err);
        let d = r.finish(T);
        d.failed("recv over its memlock limit");
        assert!(d.err.contains("locked-memory limit"), "{}", d.err);
        assert!(
            everything(&out).is_empty(),
            "{kib} KiB: left {:?}",
            everything(&out)
        );
    }
}

// ---- interrupts ------------------------------------------------------------------------------

/// A tree with one 64 MiB sparse file in a subdirectory (`tree/sub/big.bin` on the receiver),
/// sent in 16 KiB chunks with one in flight over one stream: slow enough to interrupt.
fn slow_tree(dir: &Path) -> PathBuf {
    let root = dir.join("tree");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    let f = std::fs::File::create(root.join("sub/big.bin")).unwrap();
    f.set_len(64 << 20).unwrap();
    root
}

/// Interrupts the receiver with `sig` mid-file; returns its exit and what is left in --out.
fn interrupt_receiver(sig: &str, extra: &[&str]) -> (Done, Vec<String>) {
    need_rxe0();
    let port = common::port();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let tree = slow_tree(tmp.path());
    let r = recv(port, &out, extra);
    let s = send(port, &[&tree], &[&SLOW[..], &["--timeout", "5"]].concat());
    wait_until("the transfer starting", T, || has_temp(&out));
    r.signal(sig);
    let d = r.finish(Duration::from_secs(30));
    let left = everything(&out);
    let sd = s.finish(Duration::from_secs(60));
    sd.failed("send whose receiver was interrupted");
    (d, left)
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn sigint_ends_the_receiver_with_130_and_removes_the_partial_file_and_its_directories() {
    let (d, left) = interrupt_receiver("INT", &["--once"]);
    assert_eq!(d.status.code(), Some(130), "{}\n{}", d.out, d.err);
    assert!(d.err.contains("interrupted by SIGINT"), "{}", d.err);
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn sigterm_ends_the_receiver_with_143_and_removes_the_partial_file_and_its_directories() {
    let (d, left) = interrupt_receiver("TERM", &[]);
    assert_eq!(d.status.code(), Some(143), "{}\n{}", d.out, d.err);
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn an_interrupted_receiver_with_resume_keeps_the_partial_file() {
    let (d, left) = interrupt_receiver("INT", &["--once", "--resume"]);
    assert_eq!(d.status.code(), Some(130), "{}\n{}", d.out, d.err);
    assert_eq!(
        left,
        ["tree", "tree/sub", "tree/sub/.big.bin.rdmaxfer-part"],
        "kept for a resume"
    );
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn sigint_ends_the_sender_with_130_and_the_receiver_cleans_up() {
    need_rxe0();
    let port = common::port();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let tree = slow_tree(tmp.path());
    let r = recv(port, &out, &["--once", "--timeout", "5"]);
    let s = send(port, &[&tree], &SLOW);
    wait_until("the transfer starting", T, || has_temp(&out));
    s.signal("INT");
    let sd = s.finish(Duration::from_secs(30));
    assert_eq!(sd.status.code(), Some(130), "{}\n{}", sd.out, sd.err);
    let d = r.finish(Duration::from_secs(60));
    d.failed("recv --once whose sender was interrupted");
    assert!(
        everything(&out).is_empty(),
        "no temp file, no directory made for the file: {:?}",
        everything(&out)
    );
}

#[test]
#[ignore = "needs rxe0: run by ci/test.sh in the guest"]
fn a_sender_that_requires_the_receivers_proof_sends_nothing_to_a_receiver_without_the_token() {
    need_rxe0();
    let (_tmp, src, out) = common::dirs();
    let f = src.join("secret");
    std::fs::write(&f, b"not for them").unwrap();
    let mine = ["--token", "mine", "--require-receiver-token"];
    for (rtok, what) in [(Some("other"), "another token"), (None, "no token")] {
        let port = common::port();
        let mut extra = vec!["--once"];
        extra.extend(rtok.iter().flat_map(|t| ["--token", *t]));
        let r = recv(port, &out, &extra);
        let s = send(port, &[&f], &mine).finish(T);
        s.failed(&format!("a sender facing a receiver with {what}"));
        assert!(
            s.err.contains("did not prove it knows the token"),
            "{what}: {}",
            s.err
        );
        drop(r.finish(T));
        assert!(
            everything(&out).is_empty(),
            "{what}: {:?}",
            everything(&out)
        );
    }
    let port = common::port();
    let r = recv(port, &out, &["--once", "--token", "mine"]);
    send(port, &[&f], &mine).finish(T).ok("the same token");
    r.finish(T).ok("the receiver with the same token");
    assert_eq!(std::fs::read(out.join("secret")).unwrap(), b"not for them");
}
