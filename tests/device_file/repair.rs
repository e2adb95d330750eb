//! Device tests of chunk repair (`docs/file-protocol.md`, "Chunk repair"): a chunk corrupted on
//! its first send only (the sender's test hook `RDMAXFER_TEST_CORRUPT_ONCE`) is sent again and
//! the file arrives, counted as repaired in both sides' `--json`; a chunk corrupted on every
//! send (`RDMAXFER_TEST_CORRUPT_CHUNK`) fails its file after the last round, `send` exits 23 and
//! the rest of the tree arrives.

use std::path::{Path, PathBuf};

use crate::common::{
    self, listing, need_rxe0, pseudo_random, send_args, spawn_env, Done, FILE_T as T,
};

/// A tree `tree/` under `dir`: `c.bin` (4 chunks of 64 KiB and 5 bytes), a small file and a
/// file of 12 MiB (striped with `--streams 3`).
fn tree(dir: &Path) -> PathBuf {
    let root = dir.join("tree");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("c.bin"), pseudo_random(4 * 65536 + 5, 3)).unwrap();
    std::fs::write(root.join("sub/small"), pseudo_random(1000, 4)).unwrap();
    std::fs::write(root.join("big.bin"), pseudo_random(12 << 20, 5)).unwrap();
    root
}

/// `recv --once` and `send --chunk 64K` of `tree` with `streams` and the test hook `hook` at
/// chunk `chunk` of `name`: the sender's and the receiver's results.
fn run(streams: &str, hook: &str, chunk: &str, name: &str) -> (tempfile::TempDir, Done, Done) {
    need_rxe0();
    let port = common::port();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let root = tree(tmp.path());
    let r = common::recv(port, &out, &["--once"]);
    let extra = ["--chunk", "64K", "--streams", streams];
    let args = send_args(port, &[&root], &extra);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let env = [(hook, chunk), ("RDMAXFER_TEST_CORRUPT_NAME", name)];
    let s = spawn_env("send", &a, &env).finish(T);
    let d = r.finish(T);
    (tmp, s, d)
}

/// Every file of `tree` under `out`, the same (but `except`), nothing temporary.
fn arrived(tmp: &Path, except: Option<&str>) {
    let (root, got) = (tmp.join("tree"), tmp.join("out/tree"));
    let mut want = listing(&root);
    want.retain(|n| Some(n.as_str()) != except);
    assert_eq!(listing(&got), want, "every other file, nothing partial");
    for rel in &want {
        let same = std::fs::read(root.join(rel)).unwrap() == std::fs::read(got.join(rel)).unwrap();
        assert!(same, "{rel} differs");
    }
}

/// The one file named `name` in `j`'s files.
fn file<'a>(j: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    let files = j["files"].as_array().unwrap();
    files
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {j}"))
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_chunk_corrupted_once_is_repaired_and_send_exits_0() {
    let (tmp, s, d) = run("1", "RDMAXFER_TEST_CORRUPT_ONCE", "1", "tree/c.bin");
    s.ok("send with a chunk corrupted once");
    d.ok("recv of a chunk corrupted once");
    arrived(tmp.path(), None);
    for j in [s.one_json(), d.one_json()] {
        assert_eq!(j["result"], "ok", "{j}");
        assert_eq!(j["chunks_repaired"], 1, "{j}");
        assert_eq!(file(&j, "tree/c.bin")["repaired"], 1, "{j}");
        assert!(file(&j, "tree/sub/small")["repaired"].is_null(), "{j}");
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_chunk_of_a_stripe_corrupted_once_is_repaired_over_three_streams() {
    // 64 KiB chunks, stripes of 4 MiB: file chunk 70 is chunk 6 of stripe 1.
    let (tmp, s, d) = run("3", "RDMAXFER_TEST_CORRUPT_ONCE", "70", "tree/big.bin");
    s.ok("send --streams 3 with a chunk corrupted once");
    d.ok("recv of a striped chunk corrupted once");
    arrived(tmp.path(), None);
    let j = s.one_json();
    assert_eq!(j["chunks_repaired"], 1, "{j}");
    assert_eq!(file(&j, "tree/big.bin")["repaired"], 1, "{j}");
    let served: u64 = d
        .json_lines()
        .iter()
        .map(|l| l["chunks_repaired"].as_u64().unwrap())
        .sum();
    assert_eq!(served, 1, "{}", d.out);
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_chunk_corrupted_every_time_fails_its_file_exit_23_and_the_rest_arrives() {
    let (tmp, s, d) = run("1", "RDMAXFER_TEST_CORRUPT_CHUNK", "1", "tree/c.bin");
    s.failed("send with a chunk corrupted every time");
    assert_eq!(s.status.code(), Some(23), "partial transfer: {}", s.err);
    d.failed("recv of a chunk corrupted every time");
    arrived(tmp.path(), Some("c.bin"));
    for j in [s.one_json(), d.one_json()] {
        assert_eq!(j["files_failed"], 1, "{j}");
        assert_eq!(j["chunks_repaired"], 0, "{j}");
        let f = file(&j, "tree/c.bin");
        assert_eq!(f["result"], "hash mismatch", "{j}");
        let m = f["message"].as_str().unwrap_or_default();
        let want = "chunk 1 (bytes 65536..131072) differs (sent again 3 times, still different)";
        assert!(m.contains(want), "{j}");
    }
}
