//! What a user of `rdmaxfer send` / `recv` sees (in the rxe guest): progress on a terminal,
//! per-file lines as files end, exit statuses (23 partial, 24 vanished, 2 usage, 30 timeout,
//! 130 SIGINT) and messages that name each cause once.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{self, dirs, need_rxe0, recv, spawn, spawn_prog, wait_until, Done, FILE_T, IP};

/// `rdmaxfer send PATHS... IP:port EXTRA...` in text mode (no --json).
fn send_text(port: u16, paths: &[&Path], extra: &[&str]) -> common::Proc {
    let mut args: Vec<String> = vec!["send".into()];
    args.extend(paths.iter().map(|p| p.to_str().unwrap().to_string()));
    args.push(format!("{IP}:{port}"));
    args.extend(extra.iter().map(|s| s.to_string()));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    spawn("send", &a)
}

/// `rdmaxfer recv --once` in text mode on `port` into `out`, once it listens.
fn recv_text(port: u16, out: &Path, extra: &[&str]) -> common::Proc {
    common::recv_on(Some(IP), port, out, &[&["--once"], extra].concat())
}

/// A tree `src/tree` with `files` (relative name, contents) below a temporary directory, and an
/// empty `out`.
fn tree_of(files: &[(&str, Vec<u8>)]) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let (tmp, src, out) = dirs();
    let tree = src.join("tree");
    for (name, data) in files {
        let path = tree.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, data).unwrap();
    }
    (tmp, tree, out)
}

/// Runs `send` under a pseudo-terminal (`script`), so that stdout and stderr are a terminal, to
/// a `recv --once` into `out`; both must succeed. The output is what the terminal got (progress
/// redraws included).
fn send_on_a_terminal(out: &Path, paths: &[&Path], extra: &str) -> Done {
    let port = common::port();
    let r = recv(port, out, &["--once"]);
    let mut cmd = format!("stty cols 160; exec {} send", common::bin());
    for p in paths {
        cmd.push_str(&format!(" '{}'", p.to_str().unwrap()));
    }
    cmd.push_str(&format!(" {IP}:{port} --chunk 64K --slots 2 {extra}"));
    let d = spawn_prog("script send", "script", &["-qec", &cmd, "/dev/null"]).finish(FILE_T);
    d.ok("send on a terminal");
    r.finish(FILE_T).ok("recv");
    d
}

/// Asserts that a frame of the terminal's output (cut where it is redrawn: line feeds, carriage
/// returns, escapes) shows both `a` and `b`.
fn assert_a_frame_shows(out: &str, a: &str, b: &str) {
    assert!(
        out.split(['\n', '\r', '\x1b'])
            .any(|f| f.contains(a) && f.contains(b)),
        "no frame shows {a:?} and {b:?}:\n{out:?}"
    );
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn progress_on_a_terminal_shows_the_file_name_and_reaches_100_percent() {
    need_rxe0();
    let (_tmp, src, out) = dirs();
    let file = src.join("progress-file.bin");
    std::fs::write(&file, common::pseudo_random(8 << 20, 17)).unwrap();
    let d = send_on_a_terminal(&out, &[&file], "");
    assert_a_frame_shows(&d.out, "progress-file.bin", "100%");
    assert!(
        d.out
            .contains("ok      progress-file.bin (8388608 bytes, xxh3 "),
        "{:?}",
        d.out
    );
    assert!(d.out.contains("sent 1 of 1 files"), "{:?}", d.out);
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn progress_of_a_tree_has_a_total_bar_that_reaches_100_percent_and_stats_follow() {
    need_rxe0();
    let (_tmp, tree, out) = tree_of(&[
        ("a.bin", common::pseudo_random(3 << 20, 1)),
        ("sub/b.bin", common::pseudo_random(5 << 20, 2)),
    ]);
    let d = send_on_a_terminal(&out, &[&tree], "--stats");
    assert_a_frame_shows(&d.out, "total: 2 of 2 files", "100%");
    for name in ["tree/a.bin", "tree/sub/b.bin"] {
        assert!(
            d.out.contains(&format!("ok      {name} (")),
            "{name}: {:?}",
            d.out
        );
    }
    // --stats: the figures after the summary line.
    for line in [
        "Number of entries: ",
        "Failed entries: 0 (refused by the receiver: 0, vanished from the source: 0)",
        "File data sent: 8388608 bytes",
        "Streams: ",
    ] {
        assert!(d.out.contains(line), "--stats: {line:?} in {:?}", d.out);
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_tree_with_a_refused_file_is_a_partial_transfer_exit_23() {
    need_rxe0();
    let (_tmp, tree, out) = tree_of(&[
        ("big.bin", common::pseudo_random(64 << 10, 3)),
        ("small.txt", b"small\n".to_vec()),
    ]);
    let port = common::port();
    let r = recv_text(port, &out, &["--max-size", "1K", "--stats"]);
    let d = send_text(port, &[&tree], &[]).finish(FILE_T);
    let rd = r.finish(FILE_T);
    assert_eq!(d.status.code(), Some(23), "send:\n{}\n{}", d.out, d.err);
    assert_eq!(rd.status.code(), Some(23), "recv:\n{}\n{}", rd.out, rd.err);
    // recv --stats: the connection's figures after its summary line.
    for line in [
        "Number of entries: 2 (delivered or made: 1, skipped: 0, failed: 1)",
        // big.bin is inline: refused at its commit, after its data came (not before it).
        "Failed entries: 1 (refused by the receiver: 0, vanished from the source: 0)",
        "File data received: 65542 bytes",
    ] {
        assert!(
            rd.out.contains(line),
            "recv --stats: {line:?} in {:?}",
            rd.out
        );
    }
    assert_eq!(
        std::fs::read(out.join("tree/small.txt")).unwrap(),
        b"small\n"
    );
    assert!(!out.join("tree/big.bin").exists());
    for (who, done, verb) in [("send", &d, "sent"), ("recv", &rd, "received")] {
        let failed: Vec<&str> = done
            .out
            .lines()
            .filter(|l| l.starts_with("FAILED"))
            .collect();
        assert_eq!(failed.len(), 1, "{who}: {}", done.out);
        let line = failed[0];
        assert!(line.starts_with("FAILED  tree/big.bin"), "{who}: {line}");
        assert!(line.contains("too large"), "{who}: {line}");
        assert_eq!(line.matches("too large").count(), 1, "{who}: once: {line}");
        assert!(!line.contains("internal error"), "{who}: {line}");
        assert!(
            done.out.contains("ok      tree/small.txt ("),
            "{who}: {}",
            done.out
        );
        assert!(
            done.out.contains(&format!("{verb} 1 of 2 files")),
            "{who}: {}",
            done.out
        );
        assert!(!done.err.contains("internal error"), "{who}: {}", done.err);
    }
    assert!(
        d.err
            .contains("rdmaxfer: error: 1 of 2 files were not delivered"),
        "{}",
        d.err
    );
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn an_existing_file_is_named_once_and_is_no_internal_error() {
    need_rxe0();
    let (_tmp, src, out) = dirs();
    let file = src.join("again.txt");
    std::fs::write(&file, b"again\n").unwrap();
    std::fs::write(out.join("again.txt"), b"already here\n").unwrap();
    let port = common::port();
    let r = recv_text(port, &out, &[]);
    let d = send_text(port, &[&file], &[]).finish(FILE_T);
    let rd = r.finish(FILE_T);
    for (who, done) in [("send", &d), ("recv", &rd)] {
        let all = format!("{}{}", done.out, done.err);
        let line = done
            .out
            .lines()
            .find(|l| l.starts_with("FAILED  again.txt"))
            .unwrap_or_else(|| panic!("{who}: no FAILED line:\n{all}"));
        assert_eq!(line.matches("exists").count(), 1, "{who}: once: {line}");
        assert!(line.contains("--force"), "{who}: the way out: {line}");
        assert!(!all.contains("internal error"), "{who}: {all}");
        assert_eq!(done.status.code(), Some(23), "{who}: {all}");
    }
    assert_eq!(
        std::fs::read(out.join("again.txt")).unwrap(),
        b"already here\n"
    );
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn sigint_to_the_sender_mid_transfer_exits_130() {
    need_rxe0();
    // "a.txt" goes first (names are sorted); the sparse 64 MiB file then takes a while in 16 KiB
    // chunks with one in flight.
    let (_tmp, tree, out) = tree_of(&[("a.txt", b"first\n".to_vec())]);
    let f = std::fs::File::create(tree.join("b.bin")).unwrap();
    f.set_len(64 << 20).unwrap();
    let port = common::port();
    let r = recv_text(port, &out, &[]);
    let mut s = send_text(
        port,
        &[&tree],
        &["--chunk", "16K", "--slots", "1", "--timeout", "5"],
    );
    // The first file's line is printed as it is delivered: the second is under way.
    s.wait_for("ok      tree/a.txt", FILE_T);
    s.signal("INT");
    let d = s.finish(Duration::from_secs(30));
    assert_eq!(d.status.code(), Some(130), "{}\n{}", d.out, d.err);
    assert!(d.err.contains("interrupted by SIGINT"), "{}", d.err);
    let rd = r.finish(FILE_T);
    assert_eq!(rd.status.code(), Some(1), "{}\n{}", rd.out, rd.err);
    assert!(rd.out.contains("ok      tree/a.txt ("), "{}", rd.out);
    let all = format!("{}{}", rd.out, rd.err);
    assert!(!all.contains("internal error"), "{all}");
    assert!(out.join("tree/a.txt").exists());
    assert!(!out.join("tree/b.bin").exists());
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_usage_error_exits_2_before_connecting() {
    need_rxe0();
    let (_tmp, src, _out) = dirs();
    let file = src.join("x");
    std::fs::write(&file, b"x").unwrap();
    // Nobody listens on this port: a usage error must come first.
    let d = send_text(common::port(), &[&file], &["--chunk", "10Q"]).finish(FILE_T);
    assert_eq!(d.status.code(), Some(2), "{}\n{}", d.out, d.err);
    assert!(d.err.contains("--chunk"), "{}", d.err);
    assert!(d.out.is_empty(), "{}", d.out);
    let d = spawn("recv", &["recv", "--out"]).finish(FILE_T);
    assert_eq!(d.status.code(), Some(2), "{}\n{}", d.out, d.err);
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn on_a_terminal_quiet_prints_nothing_and_json_only_its_summary() {
    need_rxe0();
    let (_tmp, tree, out) = tree_of(&[
        ("a.bin", common::pseudo_random(1 << 20, 5)),
        ("b.bin", common::pseudo_random(1 << 20, 6)),
    ]);
    let d = send_on_a_terminal(&out, &[&tree], "-q");
    assert!(d.out.trim().is_empty(), "-q: {:?}", d.out);
    std::fs::remove_dir_all(out.join("tree")).unwrap();
    let d = send_on_a_terminal(&out, &[&tree], "--json");
    let lines: Vec<&str> = d.out.lines().map(str::trim).collect();
    assert_eq!(lines.len(), 1, "--json: one line, no progress: {:?}", d.out);
    let j: serde_json::Value = serde_json::from_str(lines[0]).expect("JSON");
    assert_eq!(j["result"], "ok", "{j}");
    assert_eq!(j["files"].as_array().map(Vec::len), Some(2), "{j}");
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_receiver_that_never_answers_ends_the_sender_at_its_deadline_with_exit_30() {
    use rdmaxfer::xfer::endpoint::{EndpointOptions, Listener};
    use rdmaxfer::xfer::file::ReceiverOptions;
    need_rxe0();
    let (_tmp, tree, out) = tree_of(&[("a.txt", b"never sent\n".to_vec())]);
    let port = common::port();
    let opts = ReceiverOptions::new(&out).endpoint_options(&EndpointOptions::default());
    let mut l = Listener::bind(format!("{IP}:{port}"), &opts).expect("bind");
    // Accepts, then says nothing (no CHALLENGE) until the sender has given up.
    let silent = std::thread::spawn(move || l.accept(Some(FILE_T)).expect("accept"));
    let d = send_text(port, &[&tree], &["--timeout", "2"]).finish(FILE_T);
    assert_eq!(d.status.code(), Some(30), "{}\n{}", d.out, d.err);
    // The stall names the stage, the stream and the peer.
    let named = [
        "stalled",
        "the receiver's CHALLENGE",
        "stream 0",
        &format!("{IP}:{port}"),
    ];
    assert!(named.iter().all(|n| d.err.contains(n)), "{}", d.err);
    drop(silent.join().expect("the silent receiver"));
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_name_that_cannot_be_sent_fails_alone_and_the_rest_arrives_exit_23() {
    use std::os::unix::ffi::OsStrExt as _;
    need_rxe0();
    let (_tmp, tree, out) = tree_of(&[("a.txt", b"a\n".to_vec()), ("sub/b.txt", b"b\n".to_vec())]);
    std::fs::write(
        tree.join(std::ffi::OsStr::from_bytes(b"caf\xe9.txt")),
        b"latin-1",
    )
    .unwrap();
    std::fs::write(tree.join("sub/back\\slash"), b"x").unwrap();
    std::fs::write(tree.join("evil\nok      forged"), b"x").unwrap();
    let port = common::port();
    let r = recv_text(port, &out, &[]);
    let d = send_text(port, &[&tree], &[]).finish(FILE_T);
    let rd = r.finish(FILE_T);
    assert_eq!(d.status.code(), Some(23), "send:\n{}\n{}", d.out, d.err);
    assert_eq!(rd.status.code(), Some(0), "recv:\n{}\n{}", rd.out, rd.err);
    assert!(
        d.out.lines().all(|l| !l.starts_with("ok      forged")),
        "a forged line:\n{}",
        d.out
    );
    for name in [
        "tree/caf\\xe9.txt",
        "tree/sub/back\\slash",
        "tree/evil\\u{a}ok      forged",
    ] {
        assert!(
            d.out
                .lines()
                .any(|l| l.starts_with(&format!("FAILED  {name}"))),
            "{name}:\n{}",
            d.out
        );
    }
    assert_eq!(std::fs::read(out.join("tree/a.txt")).unwrap(), b"a\n");
    assert_eq!(std::fs::read(out.join("tree/sub/b.txt")).unwrap(), b"b\n");
    let arrived: Vec<_> = std::fs::read_dir(out.join("tree")).unwrap().collect();
    assert_eq!(arrived.len(), 2, "only a.txt and sub/: {arrived:?}");
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn exclude_include_and_files_from_select_what_is_sent() {
    need_rxe0();
    let (tmp, tree, out) = tree_of(&[
        ("a.c", b"a".to_vec()),
        ("b.o", b"b".to_vec()),
        ("keep.o", b"k".to_vec()),
        ("cache/big", b"c".to_vec()),
        ("sub/c.o", b"c".to_vec()),
    ]);
    let port = common::port();
    let r = recv_text(port, &out, &[]);
    // In the order given: the include rule first, so keep.o is sent; *.o and cache/ are not.
    let rules = [
        "--include",
        "keep.o",
        "--exclude",
        "*.o",
        "--exclude=cache/",
    ];
    let d = send_text(port, &[&tree], &rules).finish(FILE_T);
    let rd = r.finish(FILE_T);
    d.ok("send --exclude/--include");
    rd.ok("recv");
    let mut got: Vec<String> = Vec::new();
    for e in walk_names(&out.join("tree")) {
        got.push(e);
    }
    got.sort();
    assert_eq!(got, ["a.c", "keep.o", "sub/"], "{}", d.out);
    // --files-from: the listed paths only (comments and empty lines skipped), no PATH needed.
    let list = tmp.path().join("list");
    let a = tree.join("a.c");
    let b = tree.join("b.o");
    std::fs::write(
        &list,
        format!("# two files\n{}\n\n{}\n", a.display(), b.display()),
    )
    .unwrap();
    let out2 = tmp.path().join("out2");
    std::fs::create_dir(&out2).unwrap();
    let port = common::port();
    let r = recv_text(port, &out2, &[]);
    let d = spawn(
        "send",
        &[
            "send",
            "--files-from",
            list.to_str().unwrap(),
            &format!("{IP}:{port}"),
        ],
    )
    .finish(FILE_T);
    let rd = r.finish(FILE_T);
    d.ok("send --files-from");
    rd.ok("recv");
    let mut got = walk_names(&out2);
    got.sort();
    assert_eq!(got, ["a.c", "b.o"]);
}

/// The names under `dir`, relative, directories with a trailing `/` when empty.
fn walk_names(dir: &Path) -> Vec<String> {
    fn go(dir: &Path, prefix: &str, out: &mut Vec<String>) {
        let mut any = false;
        for e in std::fs::read_dir(dir).unwrap() {
            any = true;
            let e = e.unwrap();
            let name = format!("{prefix}{}", e.file_name().to_str().unwrap());
            if e.file_type().unwrap().is_dir() {
                go(&e.path(), &format!("{name}/"), out);
            } else {
                out.push(name);
            }
        }
        if !any && !prefix.is_empty() {
            out.push(prefix.to_string());
        }
    }
    let mut out = Vec::new();
    go(dir, "", &mut out);
    out
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn bwlimit_holds_the_data_to_its_rate() {
    need_rxe0();
    let (_tmp, tree, out) = tree_of(&[("f.bin", common::pseudo_random(2 << 20, 9))]);
    let port = common::port();
    let r = recv_text(port, &out, &[]);
    // 2 MiB in 256 KiB chunks at 1 MiB/s: the eighth chunk is due 1.75 s after the first.
    let args = ["--bwlimit", "1M", "--chunk", "256K", "--json"];
    let d = send_text(port, &[&tree], &args).finish(FILE_T);
    let rd = r.finish(FILE_T);
    d.ok("send --bwlimit");
    rd.ok("recv");
    let j: serde_json::Value = serde_json::from_str(d.out.trim()).expect("JSON");
    let secs = j["data_seconds"].as_f64().expect("data_seconds");
    assert!(secs >= 1.7, "2 MiB at 1 MiB/s in {secs} s: {j}");
    assert_eq!(
        std::fs::read(out.join("tree/f.bin")).unwrap(),
        common::pseudo_random(2 << 20, 9)
    );
}

/// A file removed from the source after the listing, before its turn, is reported "vanished"
/// and the sender exits 24 (as rsync does) when that is all that went wrong; the rest arrives.
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_source_file_removed_before_its_turn_vanishes_with_exit_24() {
    need_rxe0();
    let big = common::pseudo_random(2 << 20, 5);
    let (_tmp, tree, out) = tree_of(&[("a.bin", big.clone()), ("b.txt", b"gone".to_vec())]);
    let port = common::port();
    let r = recv_text(port, &out, &[]);
    // a.bin (through the ring) takes about 2 s at 1 MiB/s; b.txt comes after it.
    let args = [
        "--bwlimit",
        "1M",
        "--chunk",
        "256K",
        "--json",
        "--streams",
        "1",
    ];
    let s = send_text(port, &[&tree], &args);
    let part = out.join("tree/.a.bin.rdmaxfer-part");
    wait_until("a.bin under way", FILE_T, || part.exists());
    std::fs::remove_file(tree.join("b.txt")).unwrap();
    let d = s.finish(FILE_T);
    r.finish(FILE_T).ok("recv");
    assert_eq!(d.status.code(), Some(24), "{}\n{}", d.out, d.err);
    let j: serde_json::Value = serde_json::from_str(d.out.trim()).expect("JSON");
    assert_eq!(j["files_vanished"], 1, "{j}");
    assert_eq!(j["files_failed"], 1, "{j}");
    let b = j["files"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["name"] == "tree/b.txt"))
        .unwrap_or_else(|| panic!("no tree/b.txt in {j}"));
    assert_eq!(b["result"], "vanished", "{j}");
    assert_eq!(std::fs::read(out.join("tree/a.bin")).unwrap(), big);
    assert!(!out.join("tree/b.txt").exists());
}
