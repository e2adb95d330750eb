//! Device tests (in the guest: rxe0 on 198.18.0.1, rxe1 on 198.18.1.1) of `send --streams`:
//! a file striped over three streams on two devices (both devices carry traffic, one final
//! file), a tree over two streams, resume of a striped file after the sender is killed, a JOIN
//! with an unknown session id refused, and more streams than the receiver's cap. Tests
//! synchronise on output lines and on the file system, never on sleeps.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use common::{
    listing, need_rxe0, pseudo_random, send, send_args, spawn, spawn_env, wait_until, Proc,
    FILE_T as T, IP,
};
use rdmaxfer::xfer::endpoint::EndpointOptions;
use rdmaxfer::xfer::file::proto::{self, Join, Msg, Reason};
use rdmaxfer::xfer::session;

/// The second rail's address (rxe1 on rx1).
const IP1: &str = "198.18.1.1";

fn need_rxe1() {
    rdmaxfer::verbs::Context::open(Some("rxe1")).expect(
        "rxe1 must exist: these tests run in the guest of ci/test.sh, whose set-up adds rxe1 on rx1",
    );
}

/// `recv --json` listening on every address (both rails), once it listens.
fn recv_all(port: u16, out: &Path, extra: &[&str]) -> Proc {
    let p = port.to_string();
    let mut args = vec![
        "recv",
        "--out",
        out.to_str().unwrap(),
        "--listen",
        "-p",
        &p,
        "--json",
    ];
    args.extend_from_slice(extra);
    let mut r = spawn("recv", &args);
    r.wait_for("listening on", T);
    r
}

/// Packets sent by `dev` so far (its rxe hardware counter).
fn sent_pkts(dev: &str) -> u64 {
    let f = format!("/sys/class/infiniband/{dev}/ports/1/hw_counters/sent_pkts");
    std::fs::read_to_string(&f)
        .unwrap_or_else(|e| panic!("{f}: {e}"))
        .trim()
        .parse()
        .unwrap()
}

fn dir_with(tmp: &Path, name: &str) -> std::path::PathBuf {
    let d = tmp.join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
#[ignore = "needs rxe0 and rxe1: run via ci/test.sh"]
fn striped_file_over_three_streams_and_two_devices() {
    need_rxe0();
    need_rxe1();
    let port = 7480;
    let tmp = tempfile::tempdir().unwrap();
    let out = dir_with(tmp.path(), "out");
    let src = tmp.path().join("big.bin");
    let data = pseudo_random(32 << 20, 31);
    std::fs::write(&src, &data).unwrap();
    let before = (sent_pkts("rxe0"), sent_pkts("rxe1"));
    let r = recv_all(port, &out, &["--once"]);
    let dest = format!("{IP}:{port},{IP1}:{port}");
    let d = spawn(
        "send",
        &[
            "send",
            src.to_str().unwrap(),
            &dest,
            "--streams",
            "3",
            "-d",
            "rxe0,rxe1",
            "--json",
        ],
    )
    .finish(T);
    d.ok("send --streams 3 -d rxe0,rxe1");
    let rd = r.finish(T);
    rd.ok("recv --once of a 3-stream session");
    let j = d.one_json();
    assert_eq!(j["files"].as_array().unwrap().len(), 1, "{j}");
    assert_eq!(j["files"][0]["result"], "ok", "{j}");
    assert_eq!(j["bytes"], data.len() as u64, "{j}");
    assert!(
        std::fs::read(out.join("big.bin")).unwrap() == data,
        "bytes differ"
    );
    assert_eq!(listing(&out), ["big.bin"], "one final file, no temporary");
    // Three receiving connections (one per stream), one of which committed the file.
    let lines = rd.json_lines();
    assert_eq!(lines.len(), 3, "{}", rd.out);
    let files: usize = lines
        .iter()
        .map(|l| l["files"].as_array().unwrap().len())
        .sum();
    assert_eq!(files, 1, "the file is reported once: {}", rd.out);
    let after = (sent_pkts("rxe0"), sent_pkts("rxe1"));
    let (d0, d1) = (after.0 - before.0, after.1 - before.1);
    // A third of 32 MiB in packets of at most 4 KiB is over 2500 packets per rail.
    eprintln!("sent_pkts: rxe0 +{d0}, rxe1 +{d1}");
    assert!(
        d0 > 2500 && d1 > 2500,
        "both rails carry data: rxe0 +{d0}, rxe1 +{d1}"
    );
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn tree_over_two_streams() {
    need_rxe0();
    let port = 7481;
    let tmp = tempfile::tempdir().unwrap();
    let out = dir_with(tmp.path(), "out");
    let tree = dir_with(tmp.path(), "tree");
    let mut want = Vec::new();
    for i in 0..12u64 {
        let sub = dir_with(&tree, &format!("d{}", i % 3));
        let data = pseudo_random((i as usize + 1) * 70_001, i + 100);
        std::fs::write(sub.join(format!("f{i}")), &data).unwrap();
        want.push((format!("tree/d{}/f{i}", i % 3), data));
    }
    let big = pseudo_random(9 << 20, 7);
    std::fs::write(tree.join("big"), &big).unwrap();
    want.push(("tree/big".into(), big));
    let r = common::recv(port, &out, &["--once"]);
    let d = send(port, &[&tree], &["--streams", "2"]).finish(T);
    d.ok("send --streams 2 of a tree");
    r.finish(T).ok("recv --once");
    let j = d.one_json();
    assert_eq!(j["files"].as_array().unwrap().len(), want.len(), "{j}");
    assert_eq!(j["files_failed"], 0, "{j}");
    let mut names: Vec<String> = want.iter().map(|w| w.0.clone()).collect();
    names.sort();
    assert_eq!(listing(&out), names);
    for (name, data) in &want {
        assert!(
            std::fs::read(out.join(name)).unwrap() == *data,
            "{name} differs"
        );
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn striped_file_resumes_after_the_sender_is_killed() {
    need_rxe0();
    let port = 7482;
    let tmp = tempfile::tempdir().unwrap();
    let out = dir_with(tmp.path(), "out");
    let src = tmp.path().join("big.bin");
    let data = pseudo_random(32 << 20, 77);
    std::fs::write(&src, &data).unwrap();
    let mut r = common::recv(port, &out, &["--resume", "--timeout", "5"]);
    let slow = [
        "--streams",
        "3",
        "--resume",
        "--chunk",
        "64K",
        "--slots",
        "2",
    ];
    let mut s = send(port, &[&src], &slow);
    for _ in 0..3 {
        r.wait_for("serving", T);
    }
    let temp = out.join(".big.bin.rdmaxfer-part");
    // Some data in the (sparse) temporary file: its allocated bytes, not its length.
    wait_until("some data received", T, || {
        std::fs::metadata(&temp).is_ok_and(|m| m.blocks() * 512 >= 6 << 20)
    });
    s.kill(); // SIGKILL
    drop(s);
    // Each of the three streams notices and ends (its JSON summary); the partial file is kept.
    for _ in 0..3 {
        r.wait_for("\"result\":", T);
    }
    assert!(temp.exists(), "partial file kept: {:?}", listing(&out));
    // The same command again (stripes resume in whole chunks of the same size).
    let again = ["--streams", "3", "--resume", "--chunk", "64K"];
    let d = send(port, &[&src], &again).finish(T);
    d.ok("resumed send --streams 3");
    let j = d.one_json();
    assert_eq!(j["files"][0]["result"], "ok", "{j}");
    let moved = j["bytes"].as_u64().unwrap();
    assert!(
        moved < data.len() as u64,
        "the resumed send moved {moved} bytes: what was held is not sent again: {j}"
    );
    assert!(
        std::fs::read(out.join("big.bin")).unwrap() == data,
        "bytes differ"
    );
    assert!(!temp.exists());
    r.kill();
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn join_with_an_unknown_session_id_is_refused() {
    need_rxe0();
    let port = 7483;
    let tmp = tempfile::tempdir().unwrap();
    let out = dir_with(tmp.path(), "out");
    let mut r = common::recv(port, &out, &["--once", "--token", "s3cret"]);
    let opts = EndpointOptions {
        msg_size: proto::MAX_MSG_LEN,
        timeout: Duration::from_secs(60),
        ..Default::default()
    };
    let mut ep = session::connect(IP, port, false, &opts).expect("connect to recv");
    let nonce = match proto::decode(&ep.recv().expect("challenge")).unwrap() {
        Msg::Challenge { nonce, .. } => nonce,
        m => panic!("expected CHALLENGE, got {m:?}"),
    };
    // The right token, a made-up session id: a session id is not guessable.
    let join = Join {
        id: proto::new_session_id(),
        index: 1,
        auth: Some(proto::auth_answer(b"s3cret", &nonce)),
    };
    ep.send(&proto::encode(&Msg::Join(join))).unwrap();
    match proto::decode(&ep.recv().expect("answer to JOIN")).unwrap() {
        Msg::Refuse { reason, message } => {
            assert_eq!(reason, Reason::AuthFailed, "{message}");
            assert!(message.contains("session"), "{message}");
        }
        m => panic!("expected REFUSE, got {m:?}"),
    }
    drop(ep);
    r.wait_for("rdmaxfer: error", T);
    let d = r.finish(T);
    d.failed("recv --once after a refused JOIN");
    assert!(listing(&out).is_empty());
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn more_streams_than_the_receiver_allows_are_capped() {
    need_rxe0();
    let port = 7484;
    let tmp = tempfile::tempdir().unwrap();
    let out = dir_with(tmp.path(), "out");
    let src = tmp.path().join("f.bin");
    let data = pseudo_random(12 << 20, 3);
    std::fs::write(&src, &data).unwrap();
    let r = common::recv(port, &out, &["--once", "--max-streams", "2"]);
    let d = send(port, &[&src], &["--streams", "5"]).finish(T);
    d.ok("send --streams 5 to a receiver allowing 2");
    assert!(
        d.err.contains(
            "the receiver allows 2 streams per transfer (its --max-streams); using 2 of the 5"
        ),
        "{}",
        d.err
    );
    let rd = r.finish(T);
    rd.ok("recv --once --max-streams 2");
    assert_eq!(
        rd.json_lines().len(),
        2,
        "two connections served: {}",
        rd.out
    );
    assert!(std::fs::read(out.join("f.bin")).unwrap() == data);
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_corrupted_chunk_of_one_stripe_is_named_and_nothing_is_committed() {
    need_rxe0();
    let port = 7485;
    let tmp = tempfile::tempdir().unwrap();
    let out = dir_with(tmp.path(), "out");
    let src = tmp.path().join("f.bin");
    std::fs::write(&src, pseudo_random(12 << 20, 9)).unwrap();
    let r = common::recv(port, &out, &["--once"]);
    // Stripes of 4 MiB; file chunk 70 (64 KiB chunks) is chunk 6 of stripe 1.
    let args = send_args(port, &[&src], &["--streams", "3", "--chunk", "64K"]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let d = spawn_env("send", &a, &[("RDMAXFER_TEST_CORRUPT_CHUNK", "70")]).finish(T);
    d.failed("send --streams 3 with a corrupted chunk");
    let rd = r.finish(T);
    rd.failed("recv of a corrupted striped file");
    let want = "chunk 6 of stripe 1 of 3 (bytes 4587520..4653056) differs";
    let sj = d.one_json();
    assert_eq!(sj["files"][0]["result"], "hash mismatch", "{sj}");
    assert!(
        sj["files"][0]["message"].as_str().unwrap().contains(want),
        "{sj}"
    );
    let lines = rd.json_lines();
    let verdicts: Vec<&serde_json::Value> = lines
        .iter()
        .flat_map(|l| l["files"].as_array().unwrap())
        .collect();
    assert_eq!(verdicts.len(), 1, "one verdict for the file: {}", rd.out);
    assert_eq!(verdicts[0]["result"], "hash mismatch", "{}", rd.out);
    assert!(
        verdicts[0]["message"].as_str().unwrap().contains(want),
        "{}",
        rd.out
    );
    assert!(listing(&out).is_empty(), "left behind: {:?}", listing(&out));
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_stream_held_back_past_the_step_deadline_waits_while_the_others_move() {
    need_rxe0();
    let port = 7487;
    let tmp = tempfile::tempdir().unwrap();
    let out = dir_with(tmp.path(), "out");
    let src = tmp.path().join("f.bin");
    let data = pseudo_random(64 << 20, 11);
    std::fs::write(&src, &data).unwrap();
    // A step deadline of 1 s; stripe 1's stream holds its data (MR in hand) until stripe 0's
    // 32 MiB have their verdict, which takes longer in the guest: its receiving stream waits
    // its turn while the session moves, and must not time out.
    let r = common::recv(port, &out, &["--once", "--timeout", "1"]);
    let args = send_args(port, &[&src], &["--streams", "2"]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let d = spawn_env("send", &a, &[("RDMAXFER_TEST_HOLD_STRIPE", "1")]).finish(T);
    d.ok("send --streams 2 with stripe 1 held back");
    let rd = r.finish(T);
    rd.ok("recv --timeout 1 of a striped file with a stream held back");
    assert!(std::fs::read(out.join("f.bin")).unwrap() == data);
}
