//! Device tests (in the guest) of a transfer that loses a rail or a stream: a 64 MiB file
//! striped over rxe0 and rxe2 whose rail rx2 goes down mid-file arrives verified and both sides
//! name the lost stream; a stream whose queue pair breaks (test hooks, on either side) is
//! taken over; a transfer whose every stream is lost fails naming them, with nothing
//! committed; a rail that cannot reach the receiver's only address is dropped at once. Only
//! rxe2 and rxe3 are used (ci/guest-init.sh adds them for these tests alone: the other lane of
//! ci/guest-tests.sh never moves their counters), and rx2, rx3 are brought up again whatever
//! happens.

use std::path::Path;
use std::process::Command;

use crate::common::{
    self, listing, need_rxe0, pseudo_random, sent_pkts, spawn, spawn_env, wait_until, Done,
    FILE_T as T, IP,
};

/// Sets `dev` (a dummy interface of the guest) down, and up again when dropped.
struct Down(&'static str);

fn ip_link(dev: &str, state: &str) {
    let s = Command::new("ip")
        .args(["link", "set", dev, state])
        .status()
        .expect("ip");
    assert!(s.success(), "ip link set {dev} {state}");
}

impl Down {
    fn now(dev: &'static str) -> Down {
        ip_link(dev, "down");
        Down(dev)
    }
}

impl Drop for Down {
    fn drop(&mut self) {
        ip_link(self.0, "up");
    }
}

/// Fails (never skips) when `dev` is missing.
fn need(dev: &str) {
    rdmaxfer::verbs::Context::open(Some(dev))
        .unwrap_or_else(|e| panic!("{dev} must exist (ci/guest-init.sh adds it): {e}"));
}

/// A 64 MiB file in a fresh directory, and an empty output directory.
fn setup() -> (
    tempfile::TempDir,
    std::path::PathBuf,
    std::path::PathBuf,
    Vec<u8>,
) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let src = tmp.path().join("big.bin");
    let data = pseudo_random(64 << 20, 42);
    std::fs::write(&src, &data).unwrap();
    (tmp, src, out, data)
}

/// `recv --once --json` on every address.
fn recv(port: u16, out: &Path) -> common::Proc {
    common::recv_on(None, port, out, &["--json", "--once"])
}

/// The streams a `--json` summary names as lost: (stream, device).
fn lost(j: &serde_json::Value) -> Vec<(u64, String)> {
    j["streams_lost"]
        .as_array()
        .unwrap_or_else(|| panic!("no streams_lost in {j}"))
        .iter()
        .map(|l| {
            (
                l["stream"].as_u64().unwrap(),
                l["device"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Every stream the receiver lost, over its connections' summaries.
fn recv_lost(d: &Done) -> Vec<(u64, String)> {
    d.json_lines().iter().flat_map(lost).collect()
}

/// `send SRC TO --streams 2 -d DEVICES --json` to `recv --once --json` on `listen` (every
/// address with `None`), with `rail`'s interface (`rx` of `rxe`) taken down once the stream on
/// it moves data; both are done, the interface up again.
fn cut_mid_file(
    src: &Path,
    out: &Path,
    (listen, port): (Option<&str>, u16),
    to: &str,
    devices: &str,
    rail: (&str, &'static str),
) -> (Done, Done) {
    let r = common::recv_on(listen, port, out, &["--json", "--once"]);
    let args = [
        "send",
        src.to_str().unwrap(),
        to,
        "--streams",
        "2",
        "-d",
        devices,
        "--json",
    ];
    let s = spawn("send", &args);
    let (dev, netdev) = rail;
    // Once the stream on that rail moves data (a few MiB), the rail goes down.
    let before = sent_pkts(dev);
    wait_until("data on the rail", T, || sent_pkts(dev) > before + 1000);
    let cut = Down::now(netdev);
    let d = s.finish(T);
    let rd = r.finish(T);
    drop(cut);
    (d, rd)
}

#[test]
#[ignore = "needs rxe0 and rxe2: run via ci/test.sh"]
fn a_rail_that_goes_down_mid_file_is_survived() {
    need_rxe0();
    need("rxe2");
    let port = common::port();
    let (_tmp, src, out, data) = setup();
    let to = format!("{IP}:{port},198.18.2.1:{port}");
    let (d, rd) = cut_mid_file(&src, &out, (None, port), &to, "rxe0,rxe2", ("rxe2", "rx2"));
    d.ok("send over two rails, one of which went down");
    rd.ok("recv of that session");
    assert!(
        std::fs::read(out.join("big.bin")).unwrap() == data,
        "bytes differ"
    );
    assert_eq!(listing(&out), ["big.bin"], "one final file, no temporary");
    let j = d.one_json();
    assert_eq!(j["files"][0]["result"], "ok", "{j}");
    assert_eq!(
        lost(&j),
        [(1, "rxe2".to_string())],
        "the sender names the lost rail: {j}"
    );
    assert!(j["bytes_resent"].as_u64().is_some(), "{j}");
    assert_eq!(
        recv_lost(&rd),
        [(1, "rxe2".to_string())],
        "and so does the receiver: {}",
        rd.out
    );
}

/// Sends the 64 MiB file over two streams on rxe0 with the test hook `env` (on the sender
/// when `sender`, else on the receiver); both finish, and both name stream 1 as lost.
fn broken_stream_is_taken_over(sender: bool, env: (&str, &str)) {
    need_rxe0();
    let port = common::port();
    let (_tmp, src, out, data) = setup();
    let p = port.to_string();
    let o = out.to_str().unwrap();
    let r_args = [
        "recv", "--out", o, "--listen", IP, "-p", &p, "--json", "--once",
    ];
    let mut r = match sender {
        true => spawn("recv", &r_args),
        false => spawn_env("recv", &r_args, &[env]),
    };
    r.wait_for("listening on", T);
    let to = format!("{IP}:{port}");
    let s_args = [
        "send",
        src.to_str().unwrap(),
        &to,
        "--streams",
        "2",
        "--json",
    ];
    let s = match sender {
        true => spawn_env("send", &s_args, &[env]),
        false => spawn("send", &s_args),
    };
    let d = s.finish(T);
    let rd = r.finish(T);
    d.ok("send with a stream broken");
    rd.ok("recv");
    assert!(
        std::fs::read(out.join("big.bin")).unwrap() == data,
        "bytes differ"
    );
    assert_eq!(listing(&out), ["big.bin"], "one final file, no temporary");
    let j = d.one_json();
    assert_eq!(lost(&j), [(1, "rxe0".to_string())], "{j}");
    assert_eq!(recv_lost(&rd), [(1, "rxe0".to_string())], "{}", rd.out);
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_stream_whose_queue_pair_breaks_on_the_sender_is_taken_over() {
    broken_stream_is_taken_over(true, ("RDMAXFER_TEST_BREAK_STREAMS", "1:3"));
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_stream_whose_queue_pair_breaks_on_the_receiver_is_taken_over() {
    broken_stream_is_taken_over(false, ("RDMAXFER_TEST_RECV_BREAK_STREAMS", "1:3"));
}

#[test]
#[ignore = "needs rxe3: run via ci/test.sh"]
fn when_every_stream_is_lost_the_transfer_fails_naming_them_and_commits_nothing() {
    need("rxe3");
    let port = common::port();
    let (_tmp, src, out, _data) = setup();
    let to = format!("198.18.3.1:{port}");
    let listen = Some("198.18.3.1");
    let (d, rd) = cut_mid_file(&src, &out, (listen, port), &to, "rxe3", ("rxe3", "rx3"));
    d.failed("send whose every stream was lost");
    rd.failed("recv of a session whose every stream was lost");
    assert!(
        d.err.contains("every stream of the transfer was lost")
            && d.err.contains("stream 0 (rxe3")
            && d.err.contains("stream 1 (rxe3"),
        "{}",
        d.err
    );
    let j = d.one_json();
    let mut l = lost(&j);
    l.sort();
    assert_eq!(l, [(0, "rxe3".to_string()), (1, "rxe3".to_string())], "{j}");
    assert_eq!(j["files"][0]["result"], "failed", "{j}");
    assert!(
        listing(&out).is_empty(),
        "nothing committed, nothing left: {:?}",
        listing(&out)
    );
}

#[test]
#[ignore = "needs rxe0 and rxe3: run via ci/test.sh"]
fn a_rail_that_cannot_reach_the_only_address_is_dropped_at_once() {
    need_rxe0();
    need("rxe3");
    let port = common::port();
    let (_tmp, src, out, data) = setup();
    let r = recv(port, &out);
    let to = format!("{IP}:{port}");
    let before = sent_pkts("rxe3");
    let args = [
        "send",
        src.to_str().unwrap(),
        &to,
        "--streams",
        "2",
        "-d",
        "rxe0,rxe3",
        "--json",
    ];
    let d = spawn("send", &args).finish(T);
    let rd = r.finish(T);
    d.ok("send with a rail that cannot reach the receiver");
    rd.ok("recv");
    assert!(
        std::fs::read(out.join("big.bin")).unwrap() == data,
        "bytes differ"
    );
    assert!(
        d.err
            .contains("stream 1 is not used: 198.18.0.1 is reached through rx0 (device rxe0)"),
        "{}",
        d.err
    );
    // Dropped before its connect request: rxe3 sent nothing at all.
    assert_eq!(sent_pkts("rxe3"), before, "rxe3 carried packets");
    assert_eq!(
        rd.json_lines().len(),
        1,
        "one connection served: {}",
        rd.out
    );
}
