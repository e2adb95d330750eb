//! Device tests (rxe0, in the guest) of the C API through the C examples (`examples/c`, built
//! against the installed library with pkg-config by `ci/capi-examples.sh` before the guest
//! boots): C ↔ Rust CLI file transfer both ways, ping-pong both ways (CM and OOB), the
//! read/write demo against `rdmaxfer expose` and as a server for `rdmaxfer write`/`read`, and
//! device listing, and the poll-loop server with two clients. Every C program runs under
//! valgrind memcheck at least once, with the README's command: no errors, nothing definitely or
//! possibly lost (rdma-core's process-wide caches are suppressed by `tests/valgrind.supp`, see
//! its comments).
//! Processes synchronise on their output lines, never on sleeps.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{
    self, need_rxe0, need_rxe1, pseudo_random, sent_pkts, spawn, spawn_prog, Done, Proc, IP, IP1,
};

pub(crate) const T: Duration = Duration::from_secs(300);
/// Per-step deadline for both sides: valgrind on an emulated CPU is slow.
pub(crate) const TIMEOUT_S: &str = "120";
pub(crate) const TIMEOUT_MS: &str = "120000";
/// valgrind's exit status when it found errors (or definite leaks).
const VG_ERR: i32 = 99;

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A C example built by ci/capi-examples.sh (`RDMAXFER_CAPI_BIN` overrides the directory).
fn c_prog(name: &str) -> String {
    let dir = std::env::var_os("RDMAXFER_CAPI_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest().join("target/capi/bin"));
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "{} is missing: build the C examples first with `bash ci/capi-examples.sh` (ci/test.sh does)",
        p.display()
    );
    p.to_str().unwrap().to_string()
}

/// Runs C example `name` natively.
pub(crate) fn native(name: &str, args: &[&str]) -> Proc {
    spawn_prog(name, &c_prog(name), args)
}

/// Runs C example `name` under valgrind memcheck (each example runs so at least once here;
/// the other runs are native, as valgrind on the emulated CPU costs about a minute each).
pub(crate) fn vg(name: &str, args: &[&str]) -> Proc {
    vg_with(name, &[], args)
}

/// [`vg`] with extra valgrind options.
fn vg_with(name: &str, vg_opts: &[&str], args: &[&str]) -> Proc {
    let prog = c_prog(name);
    let supp = format!(
        "--suppressions={}",
        manifest().join("tests/valgrind.supp").display()
    );
    let err = format!("--error-exitcode={VG_ERR}");
    // The README's command (its --error-exitcode=1 made 99 here, to tell valgrind's verdict
    // from the program's own exit 1): "possibly lost" blocks count as errors, so every one that
    // rdma-core keeps must be covered by tests/valgrind.supp; -q and the generated suppressions
    // show in a failure's output.
    let mut a = vec![
        "-q",
        "--leak-check=full",
        "--gen-suppressions=all",
        &err,
        &supp,
    ];
    a.extend_from_slice(vg_opts);
    a.push(prog.as_str());
    a.extend_from_slice(args);
    spawn_prog(name, "valgrind", &a)
}

/// Asserts a valgrind-run C program succeeded with a clean memcheck report.
pub(crate) fn vg_ok(d: &Done, what: &str) {
    vg_clean(d, what);
    d.ok(what);
}

/// Asserts a valgrind-run C program's memcheck report is clean, whatever its own exit status.
pub(crate) fn vg_clean(d: &Done, what: &str) {
    assert_ne!(
        d.status.code(),
        Some(VG_ERR),
        "{what}: valgrind found errors or definite leaks:\n{}",
        d.err
    );
    assert!(
        !d.err.contains("definitely lost")
            && !d.err.contains("possibly lost")
            && !d.err.contains("Invalid "),
        "{what}: valgrind report:\n{}",
        d.err
    );
}

/// Writes a small tree (`src/tree`: a 300 000-byte file, a text file, an empty file) and returns
/// each file's name as the receiver reports it and its contents.
fn sample_tree(src: &Path) -> Vec<(String, Vec<u8>)> {
    let files = [
        ("data.bin", pseudo_random(300_000, 7)),
        ("sub/small.txt", b"hello from C".to_vec()),
        ("sub/empty", Vec::new()),
    ];
    for (name, data) in &files {
        let p = src.join("tree").join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, data).unwrap();
    }
    files
        .iter()
        .map(|(n, d)| (format!("tree/{n}"), d.clone()))
        .collect()
}

fn check_received(out: &Path, files: &[(String, Vec<u8>)]) {
    for (name, data) in files {
        let got = std::fs::read(out.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(got == *data, "{name}: received bytes differ");
    }
}

/// `rdmaxfer recv --once` into `out` on `port`, listening.
pub(crate) fn cli_recv(out: &str, port: &str, extra: &[&str]) -> Proc {
    let mut args = vec![
        "recv",
        "--out",
        out,
        "--listen",
        IP,
        "-p",
        port,
        "--once",
        "--timeout",
        TIMEOUT_S,
        // A sender under valgrind on the emulated CPU of a loaded host can stay below the
        // default rate floor (64K/s over 30 s); the deadlines above still bound the session.
        "--min-rate",
        "0",
    ];
    args.extend_from_slice(extra);
    let mut r = spawn("recv", &args);
    r.wait_for("listening on", T);
    r
}

/// `rdmaxfer expose --once --json` of `size` bytes on `port`, listening.
fn cli_expose(port: &str, size: &str, extra: &[&str]) -> Proc {
    let mut args = vec![
        "expose",
        "--listen",
        IP,
        "-p",
        port,
        "--size",
        size,
        "--once",
        "--json",
        "--timeout",
        TIMEOUT_S,
    ];
    args.extend_from_slice(extra);
    let mut s = spawn("expose", &args);
    s.wait_for("listening on", T);
    s
}

/// C file_send → `rdmaxfer recv` (RDMA CM, with a token).
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn c_sender_to_cli_receiver() {
    need_rxe0();
    let p = common::port().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let (src, out) = (tmp.path().join("src"), tmp.path().join("out"));
    std::fs::create_dir_all(&out).unwrap();
    let files = sample_tree(&src);
    let o = out.to_str().unwrap();
    let r = cli_recv(o, &p, &["--json", "--token", "s3cret"]);
    let tree = src.join("tree");
    let s = vg(
        "file_send",
        &[
            "-p",
            &p,
            "-k",
            "s3cret",
            "-T",
            TIMEOUT_MS,
            tree.to_str().unwrap(),
            IP,
        ],
    )
    .finish(T);
    vg_ok(&s, "C file_send");
    assert!(s.out.contains("verified by the receiver"), "{}", s.out);
    assert!(
        s.out.contains("progress: 300012 of 300012 bytes"),
        "{}",
        s.out
    );
    let rd = r.finish(T);
    rd.ok("rdmaxfer recv");
    let j = rd.json_lines();
    assert_eq!(j.len(), 1, "{}", rd.out);
    assert_eq!(j[0]["result"], "ok", "{}", rd.out);
    assert_eq!(j[0]["files"].as_array().unwrap().len(), 3, "{}", rd.out);
    check_received(&out, &files);
}

/// C file_send -n 2 -D rxe0,rxe1 to both rails' addresses (`rdmaxfer_config_set_devices`,
/// `rdmaxfer_config_set_stream_hosts`) → `rdmaxfer recv` on every address: a 16 MiB file
/// striped over one stream per device arrives identical, and both devices carry its data.
#[test]
#[ignore = "needs rxe0 and rxe1: run via ci/test.sh"]
fn c_sender_places_two_streams_on_two_devices() {
    need_rxe0();
    let p = common::port().to_string();
    need_rxe1();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let src = tmp.path().join("big.bin");
    let data = pseudo_random(16 << 20, 23);
    std::fs::write(&src, &data).unwrap();
    let before = (sent_pkts("rxe0"), sent_pkts("rxe1"));
    let o = out.to_str().unwrap();
    let mut r = spawn(
        "recv",
        &[
            "recv",
            "--out",
            o,
            "--listen",
            "-p",
            &p,
            "--once",
            "--json",
            "--timeout",
            TIMEOUT_S,
            "--min-rate",
            "0",
        ],
    );
    r.wait_for("listening on", T);
    let hosts = format!("{IP},{IP1}");
    let args = [
        "-p",
        &p,
        "-T",
        TIMEOUT_MS,
        "-n",
        "2",
        "-D",
        "rxe0,rxe1",
        src.to_str().unwrap(),
        &hosts,
    ];
    let s = native("file_send", &args).finish(T);
    s.ok("C file_send -n 2 -D rxe0,rxe1");
    assert!(s.out.contains("verified by the receiver"), "{}", s.out);
    let rd = r.finish(T);
    rd.ok("rdmaxfer recv of two streams");
    let j = rd.json_lines();
    assert_eq!(j.len(), 2, "two connections served: {}", rd.out);
    assert!(
        std::fs::read(out.join("big.bin")).unwrap() == data,
        "bytes differ"
    );
    let after = (sent_pkts("rxe0"), sent_pkts("rxe1"));
    let (d0, d1) = (after.0 - before.0, after.1 - before.1);
    // A quarter of 16 MiB in packets of at most 4 KiB is over 1000 packets: each rail carries
    // a good share of the data, not just a connection's handshake.
    eprintln!("sent_pkts: rxe0 +{d0}, rxe1 +{d1}");
    assert!(
        d0 > 1000 && d1 > 1000,
        "both rails carry data: rxe0 +{d0}, rxe1 +{d1}"
    );
}

/// C file_send -n 2 (`rdmaxfer_config_set_streams`) → `rdmaxfer recv`: a 9 MiB file striped
/// over two connections, under valgrind (the streams' threads run inside the library).
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn c_sender_stripes_a_file_over_two_streams() {
    need_rxe0();
    let p = common::port().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let src = tmp.path().join("big.bin");
    let data = pseudo_random(9 << 20, 21);
    std::fs::write(&src, &data).unwrap();
    let o = out.to_str().unwrap();
    let r = cli_recv(o, &p, &["--json"]);
    let args = [
        "-p",
        &p,
        "-T",
        TIMEOUT_MS,
        "-n",
        "2",
        src.to_str().unwrap(),
        IP,
    ];
    let s = vg("file_send", &args).finish(T);
    vg_ok(&s, "C file_send -n 2");
    assert!(s.out.contains("verified by the receiver"), "{}", s.out);
    let total = format!("progress: {0} of {0} bytes", data.len());
    assert!(
        s.out.contains(&total),
        "progress reaches the total: {}",
        s.out
    );
    let rd = r.finish(T);
    rd.ok("rdmaxfer recv of two streams");
    let j = rd.json_lines();
    assert_eq!(j.len(), 2, "two connections served: {}", rd.out);
    let files: usize = j.iter().map(|l| l["files"].as_array().unwrap().len()).sum();
    assert_eq!(files, 1, "one file, reported once: {}", rd.out);
    assert!(
        std::fs::read(out.join("big.bin")).unwrap() == data,
        "bytes differ"
    );
    // A stream count beyond the library's range is refused before connecting.
    let bad = native(
        "file_send",
        &["-p", &p, "-n", "65", src.to_str().unwrap(), IP],
    )
    .finish(T);
    assert_ne!(bad.status.code(), Some(0), "{}", bad.err);
    assert!(
        bad.err.contains("rdmaxfer_config_set_streams"),
        "{}",
        bad.err
    );
}

/// A C sender with the wrong token is refused, and says why.
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn c_sender_wrong_token_is_refused() {
    need_rxe0();
    let p = common::port().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let f = tmp.path().join("f.txt");
    std::fs::write(&f, b"x").unwrap();
    let o = out.to_str().unwrap();
    let r = cli_recv(o, &p, &["--token", "right"]);
    let s = native(
        "file_send",
        &[
            "-p",
            &p,
            "-k",
            "wrong",
            "-T",
            TIMEOUT_MS,
            f.to_str().unwrap(),
            IP,
        ],
    )
    .finish(T);
    s.failed("C file_send with the wrong token");
    assert!(s.err.contains("rdmaxfer_send_file"), "{}", s.err);
    assert!(
        s.err.contains("status 13"),
        "refused status expected:\n{}",
        s.err
    );
    r.finish(T).failed("rdmaxfer recv (bad token)");
    assert_eq!(
        std::fs::read_dir(&out).unwrap().count(),
        0,
        "nothing received"
    );
}

/// `rdmaxfer send --oob` → C file_recv (out-of-band set-up; credits switched on first use).
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn cli_sender_to_c_receiver_oob() {
    need_rxe0();
    let p = common::port().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let (src, out) = (tmp.path().join("src"), tmp.path().join("out"));
    std::fs::create_dir_all(&out).unwrap();
    let files = sample_tree(&src);
    let mut r = vg(
        "file_recv",
        &[
            "-l",
            IP,
            "-p",
            &p,
            "-O",
            "-T",
            TIMEOUT_MS,
            out.to_str().unwrap(),
        ],
    );
    r.wait_for("listening on", T);
    let tree = src.join("tree");
    let dest = format!("{IP}:{p}");
    let s = spawn(
        "send",
        &[
            "send",
            tree.to_str().unwrap(),
            &dest,
            "--oob",
            "--json",
            "--timeout",
            TIMEOUT_S,
        ],
    )
    .finish(T);
    s.ok("rdmaxfer send --oob");
    let rd = r.finish(T);
    vg_ok(&rd, "C file_recv");
    assert!(
        rd.out.contains("received 3 files, 300012 bytes, verified"),
        "{}",
        rd.out
    );
    check_received(&out, &files);
}

fn pingpong_stats_ok(out: &str, size: u64, iters: u64) {
    assert!(
        out.contains(&format!("{} bytes in", size * iters * 2)),
        "ibv_rc_pingpong result line expected:\n{out}"
    );
    assert!(out.contains(&format!("{iters} iters in")), "{out}");
    assert!(out.contains("rtt_us: min"), "{out}");
}

/// C ping-pong client → `rdmaxfer pingpong --listen` (RDMA CM).
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn c_pingpong_client_against_cli_server() {
    need_rxe0();
    let p = common::port().to_string();
    let mut server = spawn(
        "server",
        &[
            "pingpong",
            "--listen",
            IP,
            "-p",
            &p,
            "-s",
            "4096",
            "-n",
            "50",
            "--count",
            "1",
            "--timeout",
            TIMEOUT_S,
        ],
    );
    server.wait_for("listening on", T);
    let c = vg(
        "pingpong",
        &["-p", &p, "-s", "4096", "-n", "50", "-T", TIMEOUT_MS, IP],
    )
    .finish(T);
    vg_ok(&c, "C pingpong client");
    pingpong_stats_ok(&c.out, 4096, 50);
    assert!(c.out.contains("checked: yes"), "{}", c.out);
    let s = server.finish(T);
    s.ok("rdmaxfer pingpong server");
    assert!(s.out.contains("409600 bytes in"), "{}", s.out);
}

/// `rdmaxfer pingpong` client → C ping-pong server, out-of-band set-up, event mode.
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn cli_pingpong_client_against_c_server_oob_event() {
    need_rxe0();
    let p = common::port().to_string();
    let mut server = native(
        "pingpong",
        &[
            "-l", IP, "-p", &p, "-s", "1024", "-n", "40", "-O", "-e", "-T", TIMEOUT_MS,
        ],
    );
    server.wait_for("listening on", T);
    let c = spawn(
        "client",
        &[
            "pingpong",
            IP,
            "-p",
            &p,
            "-s",
            "1024",
            "-n",
            "40",
            "--oob",
            "--json",
            "--timeout",
            TIMEOUT_S,
        ],
    )
    .finish(T);
    c.ok("rdmaxfer pingpong client");
    let j = c.json_lines();
    assert_eq!(j.len(), 1, "{}", c.out);
    assert_eq!(j[0]["iters"], 40);
    assert_eq!(j[0]["transport"], "oob");
    let s = server.finish(T);
    s.ok("C pingpong server");
    pingpong_stats_ok(&s.out, 1024, 40);
}

/// The read/write demo's client against `rdmaxfer expose --once`: WRITE, READ back, verify; the
/// server reports what changed and saves the buffer.
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn c_rw_demo_against_cli_expose() {
    need_rxe0();
    let p = common::port().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let saved = tmp.path().join("buf.bin");
    let s = cli_expose(&p, "4096", &["--out", saved.to_str().unwrap()]);
    let c = native("rw_demo", &["-p", &p, "-o", "100", "-T", TIMEOUT_MS, IP]).finish(T);
    c.ok("C rw_demo client");
    assert!(
        c.out.contains("peer exposes 4096 bytes (access 3)"),
        "{}",
        c.out
    );
    assert!(c.out.contains("read back 20 bytes: verified"), "{}", c.out);
    let d = s.finish(T);
    d.ok("rdmaxfer expose");
    let j = d.json_lines();
    assert_eq!(j.len(), 1, "{}", d.out);
    assert_eq!(j[0]["written"], 20, "{}", d.out);
    assert_eq!(j[0]["read"], 20, "{}", d.out);
    assert_eq!(j[0]["ok"], true, "{}", d.out);
    let buf = std::fs::read(&saved).unwrap();
    assert_eq!(buf.len(), 4096);
    assert_eq!(&buf[100..120], b"RDMA_Read_Write_Demo");
    assert!(buf[..100].iter().chain(&buf[120..]).all(|&b| b == 0));
}

/// The read/write demo's server (rdmaxfer_expose) for `rdmaxfer write`, then C to C: a server
/// and a client, both under valgrind (at once: two vCPUs).
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn c_rw_demo_server_for_cli_write_and_c_client() {
    need_rxe0();
    let p = common::port().to_string();
    let mut s = native(
        "rw_demo",
        &["-l", IP, "-p", &p, "-s", "256", "-T", TIMEOUT_MS],
    );
    s.wait_for("listening on", T);
    spawn(
        "write",
        &[
            "write",
            IP,
            "-p",
            &p,
            "--offset",
            "8",
            "--data",
            "written by the CLI",
            "--timeout",
            TIMEOUT_S,
        ],
    )
    .finish(T)
    .ok("rdmaxfer write");
    let d = s.finish(T);
    d.ok("C rw_demo server");
    assert!(
        d.out
            .contains("peer wrote 18 bytes, read 0 bytes, done; 18 bytes changed in 1 ranges"),
        "{}",
        d.out
    );
    assert!(
        d.out.contains("buffer at 8: \"written by the CLI\""),
        "{}",
        d.out
    );

    let p = common::port().to_string();
    let mut s = vg(
        "rw_demo",
        &["-l", IP, "-p", &p, "-s", "64", "-T", TIMEOUT_MS],
    );
    s.wait_for("listening on", T);
    let c = vg("rw_demo", &["-p", &p, "-m", "C to C", "-T", TIMEOUT_MS, IP]).finish(T);
    vg_ok(&c, "C rw_demo client");
    assert!(c.out.contains("read back 6 bytes: verified"), "{}", c.out);
    let d = s.finish(T);
    vg_ok(&d, "C rw_demo server");
    assert!(
        d.out.contains("peer wrote 6 bytes, read 6 bytes, done"),
        "{}",
        d.out
    );
    assert!(d.out.contains("buffer at 0: \"C to C\""), "{}", d.out);
}

/// A C client writing past the end of the exposure is refused locally, before anything is
/// posted, and the server's buffer is untouched.
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn c_rw_demo_out_of_bounds_is_refused() {
    need_rxe0();
    let p = common::port().to_string();
    let s = cli_expose(&p, "16", &[]);
    let c = native("rw_demo", &["-p", &p, "-o", "10", "-T", TIMEOUT_MS, IP]).finish(T);
    c.failed("C rw_demo writing past the end");
    assert!(
        c.err.contains("status 10"),
        "out of bounds expected:\n{}",
        c.err
    );
    assert!(
        c.err.contains("exceeds the exposed region of 16 bytes"),
        "{}",
        c.err
    );
    let d = s.finish(T);
    let j = d.json_lines();
    assert_eq!(j.len(), 1, "{}\n{}", d.out, d.err);
    assert_eq!(
        j[0]["changed"].as_array().map(Vec::len),
        Some(0),
        "{}",
        d.out
    );
}

/// The devices example lists rxe0 through rdmaxfer_devices.
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn c_devices_lists_rxe0() {
    need_rxe0();
    let d = vg("devices", &[]).finish(T);
    vg_ok(&d, "C devices");
    assert!(
        d.out.contains("librdmaxfer 0.1.0 (header 0.1.0)"),
        "{}",
        d.out
    );
    let line = d
        .out
        .lines()
        .find(|l| l.starts_with("rxe0:"))
        .unwrap_or_else(|| panic!("no rxe0 line:\n{}", d.out));
    assert!(line.contains("(1 active)"), "{line}");
}

/// Handles freed while other threads call functions on them (`free_race`, a C stress test of
/// the header's Ownership and Threading rules): every call returns OK, BUSY or "freed", never
/// another status or a crash. Natively with three caller threads, until at least 20 rounds of
/// calls saw a free happen while they ran (the race itself); then under valgrind memcheck
/// (which runs one thread at a time; `--fair-sched=yes` switches between them more evenly),
/// with device lists too: no invalid access, nothing definitely lost.
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn c_free_race_is_clean_natively_and_under_valgrind() {
    need_rxe0();
    let summary_ok = |d: &Done, what: &str| {
        assert!(d.out.contains(" 0 other;"), "{what}:\n{}", d.out);
        assert!(
            d.out
                .contains("free_race: a freed handle and a second free are refused; ok"),
            "{what}:\n{}\n{}",
            d.out,
            d.err
        );
    };
    let n = native(
        "free_race",
        &["-n", "5000", "-d", "50", "-t", "3", "-m", "20"],
    )
    .finish(T);
    eprintln!("natively, {:?}:\n{}", n.elapsed, n.out);
    n.ok("free_race natively");
    summary_ok(&n, "free_race natively");
    // (At least 5000 configs: more when the overlaps took longer to come.)
    assert!(
        n.out
            .contains(" config and 50 device list handles freed under 3 callers"),
        "{}",
        n.out
    );
    let v = vg_with(
        "free_race",
        &["--fair-sched=yes"],
        &["-n", "500", "-d", "10", "-t", "2"],
    )
    .finish(T);
    eprintln!("under valgrind, {:?}:\n{}", v.elapsed, v.out);
    vg_ok(&v, "free_race under valgrind");
    summary_ok(&v, "free_race under valgrind");
    assert!(
        v.out
            .contains("free_race: 500 config and 10 device list handles freed under 2 callers"),
        "{}",
        v.out
    );
}

/// The poll-loop example server (`poll_server`, one thread, under valgrind) on a port the system
/// chooses (`-p 0`: it prints the real one, which both clients reach) serves two clients at
/// once: the first is paused mid-session (after its first round trip) while the second
/// connects (without blocking, in a poll(2) loop), does all its round trips and leaves; then
/// the first resumes and finishes. Every echo is checked by its client.
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn c_poll_server_serves_two_clients_from_one_loop() {
    need_rxe0();
    let mut server = vg(
        "poll_server",
        &["-l", IP, "-p", "0", "-c", "2", "-T", TIMEOUT_MS],
    );
    let line = server.wait_for("listening on", T);
    let port = line.rsplit(':').next().unwrap().trim().to_string();
    assert!(
        port.parse::<u16>().is_ok_and(|p| p != 0),
        "port 0 must be reported as the real port: {line:?}"
    );
    let common = [
        "-p",
        port.as_str(),
        "-n",
        "20",
        "-s",
        "512",
        "-T",
        TIMEOUT_MS,
    ];
    let a_args: Vec<&str> = common.iter().copied().chain(["-P", IP]).collect();
    let b_args: Vec<&str> = common.iter().copied().chain([IP]).collect();
    let mut a = native("poll_server", &a_args);
    a.wait_for("paused", T);
    server.wait_for("client 1 connected", T);
    let b = vg("poll_server", &b_args).finish(T);
    vg_ok(
        &b,
        "second poll_server client (while the first is connected)",
    );
    assert!(
        b.out.contains("20 round trips of 512 bytes ok"),
        "{}",
        b.out
    );
    // Its connect went through rdmaxfer_connect_start and a poll(2) loop.
    assert!(b.err.contains("without blocking"), "{}", b.err);
    server.wait_for("client 2 disconnected after 20 echoes", T);
    a.signal("USR1");
    let a = a.finish(T);
    a.ok("paused poll_server client");
    assert!(
        a.out.contains("20 round trips of 512 bytes ok"),
        "{}",
        a.out
    );
    let s = server.finish(T);
    vg_ok(&s, "poll_server");
    assert!(s.out.contains("served 2 clients"), "{}", s.out);
    assert!(
        s.err.contains("client 1 disconnected after 20 echoes"),
        "{}",
        s.err
    );
}
