//! Helpers shared by the device tests (`tests/device_*/main.rs`, each module a former test file):
//! the guest's addresses and ports, test data, and child processes whose output is collected
//! line by line, so tests synchronise on what they print, never on sleeps.
// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

pub mod verbs;

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The guest's rxe0 address.
pub const IP: &str = "198.18.0.1";

/// The second rail's address (rxe1 on rx1).
pub const IP1: &str = "198.18.1.1";

/// `port` on rxe0's address ([`IP`]).
pub fn addr(port: u16) -> SocketAddr {
    SocketAddr::new(IP.parse().unwrap(), port)
}

/// How many ports one test binary may take from [`port`] (each of its tests takes a few).
pub const PORTS_PER_BINARY: u16 = 300;
/// The test binaries' blocks of ports start here and end below 32768, where Linux's ephemeral
/// range starts by default: no connection's own local port can take one of them.
const FIRST_PORT: u16 = 20_000;
/// How many blocks of [`PORTS_PER_BINARY`] fit between [`FIRST_PORT`] and 32768.
const PORT_BLOCKS: u16 = (32_768 - FIRST_PORT) / PORTS_PER_BINARY;

/// A port no other call in this process gets: tests never choose ports by hand. Each call
/// takes the next of this test binary's block; [`port_base`] places the block by the binary's
/// name, so two binaries (which ci/test.sh runs one after the other anyway) rarely share one.
pub fn port() -> u16 {
    static BASE: OnceLock<u16> = OnceLock::new();
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = *BASE.get_or_init(|| port_base(&binary_name()));
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    assert!(
        n < PORTS_PER_BINARY,
        "this test binary took more than {PORTS_PER_BINARY} ports: raise PORTS_PER_BINARY"
    );
    base + n
}

/// The first port of the block of test binary `name` (cargo's name for it, without the hash):
/// a hash (FNV-1a) of the name picks one of the [`PORT_BLOCKS`] blocks.
pub fn port_base(name: &str) -> u16 {
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let block = u16::try_from(h % u64::from(PORT_BLOCKS)).unwrap();
    FIRST_PORT + block * PORTS_PER_BINARY
}

/// This test binary's name: its file name without cargo's `-HASH` suffix (`device_verbs` for
/// `target/debug/deps/device_verbs-0123456789abcdef`).
fn binary_name() -> String {
    let argv0 = std::env::args_os().next().unwrap_or_default();
    let name = Path::new(&argv0)
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    match name.rsplit_once('-') {
        Some((stem, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            stem.to_string()
        }
        _ => name,
    }
}

/// Fails (never skips) when rxe0 is missing.
pub fn need_rxe0() {
    rdmaxfer::verbs::Context::open(Some("rxe0"))
        .expect("rxe0 must exist: these tests run in the rxe guest (ci/test.sh)");
}

/// Fails (never skips) when rxe1, the second rail, is missing.
pub fn need_rxe1() {
    rdmaxfer::verbs::Context::open(Some("rxe1")).expect(
        "rxe1 must exist: these tests run in the guest of ci/test.sh, whose set-up adds rxe1 on rx1",
    );
}

/// Packets sent by `dev` so far (its rxe hardware counter).
pub fn sent_pkts(dev: &str) -> u64 {
    let f = format!("/sys/class/infiniband/{dev}/ports/1/hw_counters/sent_pkts");
    std::fs::read_to_string(&f)
        .unwrap_or_else(|e| panic!("{f}: {e}"))
        .trim()
        .parse()
        .unwrap()
}

/// A child process whose stdout and stderr are collected line by line.
pub struct Proc {
    name: String,
    child: Child,
    lines: Receiver<String>,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
}

pub struct Done {
    pub status: ExitStatus,
    /// The process id it had (a crash's core is `target/ci/cores/core.*.PID.SIGNAL` in the guest).
    pub pid: u32,
    pub out: String,
    pub err: String,
    pub elapsed: Duration,
}

impl Done {
    pub fn ok(&self, what: &str) -> &Self {
        assert!(
            self.status.success(),
            "{what} failed ({}, pid {}):\nstdout:\n{}\nstderr:\n{}",
            self.status,
            self.pid,
            self.out,
            self.err
        );
        self
    }

    pub fn failed(&self, what: &str) -> &Self {
        assert!(
            !self.status.success(),
            "{what} should have failed:\nstdout:\n{}\nstderr:\n{}",
            self.out,
            self.err
        );
        assert!(
            !self.err.contains("panicked"),
            "{what} panicked:\n{}",
            self.err
        );
        // A failure, not a crash: nothing here expects a core.
        assert!(
            !self.status.core_dumped(),
            "{what} crashed ({}, pid {}):\nstdout:\n{}\nstderr:\n{}",
            self.status,
            self.pid,
            self.out,
            self.err
        );
        self
    }

    pub fn json_lines(&self) -> Vec<serde_json::Value> {
        self.out
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON {l:?}: {e}")))
            .collect()
    }

    /// The one JSON summary on stdout (asserted to be the only one).
    pub fn one_json(&self) -> serde_json::Value {
        let mut j = self.json_lines();
        assert_eq!(
            j.len(),
            1,
            "one JSON summary expected:\n{}\n{}",
            self.out,
            self.err
        );
        j.pop().unwrap()
    }
}

pub fn spawn_prog(name: &str, prog: &str, args: &[&str]) -> Proc {
    spawn_command(name, Command::new(prog), args)
}

fn spawn_command(name: &str, mut cmd: Command, args: &[&str]) -> Proc {
    let prog = format!("{:?}", cmd.get_program());
    let mut child = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {prog}: {e}"));
    let (tx, lines) = mpsc::channel();
    let out = Arc::new(Mutex::new(String::new()));
    let err = Arc::new(Mutex::new(String::new()));
    let pump = |r: Box<dyn Read + Send>, acc: Arc<Mutex<String>>, tx: mpsc::Sender<String>| {
        std::thread::spawn(move || {
            for line in BufReader::new(r).lines().map_while(|l| l.ok()) {
                acc.lock().unwrap().push_str(&format!("{line}\n"));
                let _ = tx.send(line);
            }
        });
    };
    pump(
        Box::new(child.stdout.take().unwrap()),
        out.clone(),
        tx.clone(),
    );
    pump(Box::new(child.stderr.take().unwrap()), err.clone(), tx);
    Proc {
        name: name.to_string(),
        child,
        lines,
        out,
        err,
    }
}

/// The `rdmaxfer` binary the tests run: `RDMAXFER_BIN` when set (ci/test.sh points it at a
/// link that no later build on the host replaces while the guest runs), else the one cargo
/// built with the tests.
pub fn bin() -> String {
    std::env::var("RDMAXFER_BIN").unwrap_or_else(|_| match option_env!("CARGO_BIN_EXE_rdmaxfer") {
        Some(b) => b.to_string(),
        None => panic!("the rdmaxfer tool needs feature `cli`: cargo test --features cli"),
    })
}

pub fn spawn(name: &str, args: &[&str]) -> Proc {
    spawn_prog(name, &bin(), args)
}

impl Proc {
    pub fn dump(&self) -> String {
        format!(
            "stdout:\n{}\nstderr:\n{}",
            self.out.lock().unwrap(),
            self.err.lock().unwrap()
        )
    }

    /// Waits for an output line containing `needle`.
    pub fn wait_for(&mut self, needle: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.contains(needle) => return l,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => panic!(
                    "{}: no {needle:?} within {within:?}\n{}",
                    self.name,
                    self.dump()
                ),
                Err(RecvTimeoutError::Disconnected) => {
                    panic!(
                        "{}: exited before printing {needle:?}\n{}",
                        self.name,
                        self.dump()
                    )
                }
            }
        }
    }

    /// Waits (bounded) for the process to exit.
    pub fn finish(mut self, within: Duration) -> Done {
        let t = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if t.elapsed() > within {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "{}: still running after {within:?}\n{}",
                    self.name,
                    self.dump()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let elapsed = t.elapsed();
        // The pipes close at exit; wait (bounded) for the readers to drain them.
        let end = Instant::now() + Duration::from_secs(5);
        while self
            .lines
            .recv_timeout(end.saturating_duration_since(Instant::now()))
            .is_ok()
        {}
        let out = self.out.lock().unwrap().clone();
        let err = self.err.lock().unwrap().clone();
        Done {
            status,
            pid: self.child.id(),
            out,
            err,
            elapsed,
        }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
    }

    /// True while it runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A HELLO for a regular 0644 file (as a crafted sender would build it).
pub fn hello(
    name: &str,
    size: u64,
    chunk_size: u32,
    auth: Option<rdmaxfer::xfer::file::proto::Digest>,
) -> rdmaxfer::xfer::file::proto::Hello {
    use rdmaxfer::xfer::file::proto::{Hello, HelloFlags, VERSION};
    Hello {
        version: VERSION,
        name: name.into(),
        size,
        mode: 0o644,
        mtime_sec: 0,
        mtime_nsec: 0,
        chunk_size,
        flags: HelloFlags::default(),
        auth,
        ..Default::default()
    }
}

/// Like [`spawn`], with extra environment variables.
pub fn spawn_env(name: &str, args: &[&str], env: &[(&str, &str)]) -> Proc {
    spawn_cmd(name, &bin(), args, env)
}

fn spawn_cmd(name: &str, prog: &str, args: &[&str], env: &[(&str, &str)]) -> Proc {
    let mut cmd = Command::new(prog);
    cmd.envs(env.iter().copied());
    spawn_command(name, cmd, args)
}

/// `len` bytes of test data, cheap to make (also under valgrind), different for every `seed`
/// (its little-endian bytes lead, as far as `len` allows) and without a short period, so a
/// block that lands at another offset shows. Byte `i` is `7i + i/251 + seed` (mod 256), which
/// repeats every 251 × 256 bytes (7 × 64256 and 64256 / 251 are multiples of 256): one period
/// is made byte by byte and the rest copied, since a byte loop in a test's debug build costs
/// some 25 ns a byte, and ten times that on the guest's emulated CPU.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    const PERIOD: usize = 251 * 256;
    let period: Vec<u8> = (0..len.min(PERIOD))
        .map(|i| ((i * 7 + i / 251) as u8).wrapping_add(seed as u8))
        .collect();
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        let n = (len - v.len()).min(period.len());
        v.extend_from_slice(&period[..n]);
    }
    let n = len.min(8);
    v[..n].copy_from_slice(&seed.to_le_bytes()[..n]);
    v
}

/// Deterministic test data, different for each `seed`: BLAKE3's extendable output keyed by the
/// seed (blake3 is built optimised in debug builds too: Cargo.toml; a byte loop here made the
/// guest spend about a minute on 128 MiB).
pub fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    blake3::Hasher::new()
        .update(b"rdmaxfer test data")
        .update(&seed.to_le_bytes())
        .finalize_xof()
        .fill(&mut v);
    v
}

impl Proc {
    /// The child's process id (e.g. to send it a signal with `kill`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends signal `sig` (a name `kill -s` takes, e.g. "INT") to the child.
    pub fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .args(["-s", sig, &self.pid().to_string()])
            .status()
            .expect("running kill");
        assert!(st.success(), "kill -s {sig} {} failed", self.pid());
    }
}

// ---- `rdmaxfer send` / `recv` (tests of file transfer) ------------------------------------

/// Deadline of each step of the file-transfer tests.
pub const FILE_T: Duration = Duration::from_secs(120);

/// `send` options that make a large file slow enough to interrupt: one stream (the default
/// stripes large files over several), 16 KiB chunks, one in flight.
pub const SLOW: [&str; 6] = ["--chunk", "16K", "--slots", "1", "--streams", "1"];

/// A temporary directory with empty `src` and `out` below it (gone when the first is dropped).
pub fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let (src, out) = (tmp.path().join("src"), tmp.path().join("out"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    (tmp, src, out)
}

/// `rdmaxfer recv --json` on `port` into `out`, once it listens.
pub fn recv(port: u16, out: &Path, extra: &[&str]) -> Proc {
    recv_on(Some(IP), port, out, &[&["--json"], extra].concat())
}

/// `rdmaxfer recv --out OUT --listen [LISTEN] -p PORT ARGS...`, once it listens; `listen`
/// `None` is a bare `--listen` (every address).
pub fn recv_on(listen: Option<&str>, port: u16, out: &Path, args: &[&str]) -> Proc {
    let p = port.to_string();
    let mut a = vec!["recv", "--out", out.to_str().unwrap(), "--listen"];
    a.extend(listen);
    a.extend_from_slice(&["-p", &p]);
    a.extend_from_slice(args);
    let mut r = spawn("recv", &a);
    r.wait_for("listening on", FILE_T);
    r
}

/// The arguments of `rdmaxfer send --json PATHS... IP:port EXTRA...`.
pub fn send_args(port: u16, paths: &[&Path], extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = vec!["send".into()];
    args.extend(paths.iter().map(|p| p.to_str().unwrap().to_string()));
    args.push(format!("{IP}:{port}"));
    args.push("--json".into());
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// `rdmaxfer send --json`.
pub fn send(port: u16, paths: &[&Path], extra: &[&str]) -> Proc {
    let args = send_args(port, paths, extra);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    spawn("send", &a)
}

/// Every entry below `root` (symlinks not followed): its name relative to `root`, its path and
/// its metadata.
pub fn entries(root: &Path) -> Vec<(String, PathBuf, std::fs::Metadata)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if m.is_dir() {
                stack.push(p.clone());
            }
            out.push((rel, p, m));
        }
    }
    out
}

/// Every regular file below `dir`, relative, sorted.
pub fn listing(dir: &Path) -> Vec<String> {
    fn go(base: &Path, d: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                go(base, &p, out);
            } else {
                out.push(p.strip_prefix(base).unwrap().to_str().unwrap().to_string());
            }
        }
    }
    let mut v = Vec::new();
    go(dir, dir, &mut v);
    v.sort();
    v
}

/// Waits (bounded) until `cond` holds, polling the file system.
pub fn wait_until(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(
            t.elapsed() < within,
            "{what} did not happen within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// True when a temporary file is below `out`.
pub fn has_temp(out: &Path) -> bool {
    listing(out).iter().any(|n| n.ends_with(".rdmaxfer-part"))
}

/// This thread's id: `rdma resource show` lists the creating thread's id as "pid".
pub fn tid() -> String {
    let l = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
    l.file_name().unwrap().to_string_lossy().into_owned()
}

/// Lines of `rdma resource show KIND` created by one of the threads `tids` (or this process).
pub fn our_resources(kind: &str, tids: &[String]) -> Vec<String> {
    let out = Command::new("rdma")
        .args(["resource", "show", kind])
        .output()
        .expect("running `rdma resource show`");
    assert!(
        out.status.success(),
        "rdma resource show {kind}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid = std::process::id().to_string();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .collect::<Vec<_>>()
                .windows(2)
                .any(|w| w[0] == "pid" && (w[1] == pid || tids.iter().any(|t| t == w[1])))
        })
        .map(str::to_string)
        .collect()
}
