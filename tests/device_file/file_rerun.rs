//! Device tests (rxe0, in the guest) of file protocol v2: rsync-like re-runs (identical files
//! skipped, an interrupted tree completed with `--resume`), trees with empty directories and
//! symlinks (one pointing outside `--out`, refused), and the overwrite policies of both sides
//! (`send --force` asks, `recv --force` allows).

use std::path::Path;
use std::time::Duration;

use crate::common::{self, dirs, listing, need_rxe0, pseudo_random, recv, send, wait_until, Done};

const T: Duration = Duration::from_secs(120);

/// Writes `files` (relative name → contents) below `root`.
fn write_tree(root: &Path, files: &[(&str, Vec<u8>)]) {
    for (rel, data) in files {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, data).unwrap();
    }
}

/// The entries of a JSON summary as (name, result) pairs.
fn results(j: &serde_json::Value) -> Vec<(String, String)> {
    j["files"]
        .as_array()
        .unwrap_or_else(|| panic!("no files: {j}"))
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().to_string(),
                f["result"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn rerun_of_an_identical_tree_skips_everything_and_sends_nothing() {
    need_rxe0();
    let port = common::port();
    let (_tmp, src, out) = dirs();
    let root = src.join("tree");
    let files = [
        ("a.bin", pseudo_random(200_000, 1)),
        ("d/e/deep.bin", pseudo_random(70_000, 2)),
        ("zero", Vec::new()),
    ];
    write_tree(&root, &files);
    std::fs::create_dir_all(root.join("empty")).unwrap();
    std::os::unix::fs::symlink("d/e/deep.bin", root.join("link")).unwrap();

    let r = recv(port, &out, &["--once"]);
    let first = send(port, &[&root], &[]).finish(T);
    first.ok("first send");
    r.finish(T).ok("first recv");
    let j = first.one_json();
    let total: u64 = files.iter().map(|(_, d)| d.len() as u64).sum();
    assert_eq!(j["bytes"], total, "{j}");
    assert_eq!(j["files_skipped"], 0, "{j}");

    let r = recv(port, &out, &["--once"]);
    let again = send(port, &[&root], &[]).finish(T);
    again.ok("re-run of an identical tree (exit 0)");
    let rd = r.finish(T);
    rd.ok("recv of the re-run");
    for j in [again.one_json(), rd.one_json()] {
        assert_eq!(j["result"], "ok", "{j}");
        assert_eq!(j["bytes"], 0, "nothing re-sent: {j}");
        assert_eq!(j["files_failed"], 0, "{j}");
        let res = results(&j);
        assert_eq!(res.len(), 5, "{j}");
        assert!(res.iter().all(|(_, r)| r == "skipped"), "all skipped: {j}");
        assert_eq!(j["files_skipped"], 5, "{j}");
    }
    for (rel, data) in &files {
        assert!(
            std::fs::read(out.join("tree").join(rel)).unwrap() == *data,
            "{rel}"
        );
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn interrupted_tree_completes_with_resume_on_both_sides() {
    need_rxe0();
    let port = common::port();
    let (_tmp, src, out) = dirs();
    let root = src.join("tree");
    // Sent in name order: a.bin completes, b/big.bin is interrupted, c.txt never starts.
    let files = [
        ("a.bin", pseudo_random(300_000, 3)),
        ("b/big.bin", pseudo_random(24 << 20, 4)),
        ("c.txt", b"the rest\n".to_vec()),
    ];
    write_tree(&root, &files);
    let mut r = recv(port, &out, &["--resume"]);
    // One stream: this is the single-connection resume (striped: module `streams`).
    let slow = [
        "--chunk",
        "16K",
        "--slots",
        "1",
        "--resume",
        "--streams",
        "1",
    ];
    let mut s = send(port, &[&root], &slow);
    let temp = out.join("tree/b/.big.bin.rdmaxfer-part");
    wait_until("part of b/big.bin received", T, || {
        std::fs::metadata(&temp).is_ok_and(|m| m.len() >= 1 << 20)
    });
    s.kill(); // SIGKILL: no clean-up on the sender's side
    drop(s);
    // The receiver reports the broken session (synchronise on its output) and keeps serving.
    r.wait_for("\"result\":\"error\"", T);
    let held = std::fs::metadata(&temp).expect("partial file kept").len();
    assert!(held > 0 && held < 24 << 20, "held {held}");
    assert!(out.join("tree/a.bin").is_file() && !out.join("tree/c.txt").exists());

    let d = send(port, &[&root], &["--resume", "--streams", "1"]).finish(T);
    d.ok("the --resume re-run of the interrupted tree (exit 0)");
    let j = d.one_json();
    assert_eq!(j["result"], "ok", "{j}");
    assert_eq!(
        results(&j),
        [
            ("tree/a.bin".to_string(), "skipped".to_string()),
            ("tree/b/big.bin".into(), "ok".into()),
            ("tree/c.txt".into(), "ok".into()),
        ],
        "{j}"
    );
    let resent = j["bytes"].as_u64().unwrap();
    // Resume is chunk-granular: the held bytes count in whole chunks of this attempt.
    let how = j["files"][1]["verify"].as_str().unwrap();
    let chunk: u64 = how.split_once('/').unwrap().1.parse().unwrap();
    let whole = held / chunk * chunk;
    assert!(whole > 0, "held {held}, chunks of {chunk}");
    assert!(
        resent <= (24 << 20) - whole + 9,
        "only the rest of big.bin and c.txt: {resent} bytes, {held} were held ({whole} in whole chunks)"
    );
    r.kill();
    for (rel, data) in &files {
        let got = std::fs::read(out.join("tree").join(rel)).unwrap();
        assert!(got == *data, "{rel} differs after the re-run");
    }
    assert_eq!(
        listing(&out),
        ["tree/a.bin", "tree/b/big.bin", "tree/c.txt"],
        "no temporary file left"
    );
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn tree_with_empty_dir_and_symlinks_outside_link_refused() {
    need_rxe0();
    let port = common::port();
    let (_tmp, src, out) = dirs();
    let root = src.join("tree");
    write_tree(&root, &[("file.txt", b"hello\n".to_vec())]);
    std::fs::create_dir_all(root.join("empty")).unwrap();
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::os::unix::fs::symlink("../file.txt", root.join("sub/rel")).unwrap();
    std::os::unix::fs::symlink("../../../etc/passwd", root.join("sub/escape")).unwrap();
    let _sock = std::os::unix::net::UnixListener::bind(root.join("sock")).unwrap();

    let r = recv(port, &out, &["--once"]);
    let s = send(port, &[&root], &[]).finish(T);
    s.failed("send of a tree with a link pointing outside");
    let rd = r.finish(T);
    rd.failed("recv that refused a link");
    let want = [
        ("tree/empty", "ok"),
        ("tree/file.txt", "ok"),
        ("tree/sock", "skipped"),
        ("tree/sub/escape", "unsafe symlink"),
        ("tree/sub/rel", "ok"),
    ];
    let j = s.one_json();
    let got = results(&j);
    let got: Vec<(&str, &str)> = got.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_eq!(got, want, "{j}");
    assert_eq!(
        (&j["files_failed"], &j["files_refused"], &j["files_skipped"]),
        (&1.into(), &1.into(), &1.into()),
        "the summary counts the refused link and the skipped socket: {j}"
    );
    let files = j["files"].as_array().unwrap();
    let esc = &files[3]["message"];
    assert!(
        esc.as_str().unwrap().contains("outside --out"),
        "the refusal gives the reason: {j}"
    );
    assert!(
        files[2]["message"].as_str().unwrap().contains("socket"),
        "{j}"
    );
    let jr = rd.one_json();
    assert_eq!(jr["files_refused"], 1, "{jr}");
    assert!(out.join("tree/empty").is_dir());
    assert_eq!(
        std::fs::read_link(out.join("tree/sub/rel")).unwrap(),
        std::fs::read_link(root.join("sub/rel")).unwrap()
    );
    assert!(
        std::fs::symlink_metadata(out.join("tree/sub/escape")).is_err(),
        "the escaping link was not made"
    );
    assert_eq!(std::fs::read(out.join("tree/sub/rel")).unwrap(), b"hello\n");

    // --copy-links: the file the link points to is sent instead (the escaping link too: it is
    // the sender's own file system).
    let out2 = out.join("copied");
    std::fs::create_dir_all(&out2).unwrap();
    let outside = src.join("outside.txt");
    std::fs::write(&outside, b"outside\n").unwrap();
    std::fs::remove_file(root.join("sub/escape")).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("sub/escape")).unwrap();
    let r = recv(port, &out2, &["--once"]);
    send(port, &[&root], &["--copy-links"])
        .finish(T)
        .ok("send --copy-links");
    r.finish(T).ok("recv of copied links");
    let meta = std::fs::symlink_metadata(out2.join("tree/sub/escape")).unwrap();
    assert!(meta.is_file(), "a file, not a link");
    assert_eq!(
        std::fs::read(out2.join("tree/sub/escape")).unwrap(),
        b"outside\n"
    );
    assert_eq!(
        std::fs::read(out2.join("tree/sub/rel")).unwrap(),
        b"hello\n"
    );
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn overwriting_needs_send_force_and_recv_force() {
    need_rxe0();
    let port = common::port();
    let (_tmp, src, out) = dirs();
    std::fs::write(out.join("f"), b"old").unwrap();
    let f = src.join("f");
    std::fs::write(&f, b"new contents").unwrap();
    let message = |d: &Done| {
        let j = d.one_json();
        (
            j["files"][0]["result"].as_str().unwrap().to_string(),
            j["files"][0]["message"].as_str().unwrap_or("").to_string(),
        )
    };

    let mut r = recv(port, &out, &[]);
    let d = send(port, &[&f], &[]).finish(T);
    d.failed("send onto a differing file");
    let (res, msg) = message(&d);
    assert_eq!(res, "exists");
    assert!(msg.contains("use send --force"), "{msg}");

    let d = send(port, &[&f], &["--force"]).finish(T);
    d.failed("send --force to a receiver without --force");
    let (res, msg) = message(&d);
    assert_eq!(res, "exists");
    assert!(
        msg.contains("recv with --force"),
        "names the receiver's option: {msg}"
    );
    assert_eq!(std::fs::read(out.join("f")).unwrap(), b"old");

    let d = send(port, &[&f], &["--ignore-existing"]).finish(T);
    d.ok("send --ignore-existing");
    let (res, msg) = message(&d);
    assert_eq!(
        (res.as_str(), msg.contains("--ignore-existing")),
        ("skipped", true),
        "{msg}"
    );
    r.kill();
    drop(r);

    let r = recv(port, &out, &["--once", "--force"]);
    let d = send(port, &[&f], &["--force", "--checksum"]).finish(T);
    d.ok("send --force to recv --force");
    r.finish(T).ok("recv --force");
    assert_eq!(message(&d).0, "ok");
    assert_eq!(std::fs::read(out.join("f")).unwrap(), b"new contents");

    // The replaced file has the sender's mtime: a plain re-run skips it.
    let r = recv(port, &out, &["--once"]);
    let d = send(port, &[&f], &[]).finish(T);
    d.ok("re-run after the overwrite");
    r.finish(T).ok("recv of the re-run");
    assert_eq!(
        message(&d),
        ("skipped".to_string(), "identical".to_string())
    );
}
