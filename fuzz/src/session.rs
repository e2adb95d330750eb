//! The fuzz target `file_session`: a whole receiving session, the receiver unchanged over a
//! link in memory, driven by a sender the input scripts. Records, each a tag byte (mod 4):
//! - 0: a control message: u16 length, then its bytes;
//! - 1: an RDMA WRITE_WITH_IMM into the slot its immediate names (in the ring of the last MR):
//!   u32 immediate, u32 length, then the bytes;
//! - 2: the same at any offset of that ring: u32 offset, u32 immediate, u32 length, bytes;
//! - 3: wait for the receiver's next message (at most the step deadline), unless one arrived
//!   that no earlier wait took.
//!
//! Asserted: no panic, the session ends once the sender goes, and nothing is left in the
//! output directory but whole files (no temporary or partial file).
//!
//! The seeds are real sessions: a sender's own messages and writes, recorded (`session_seeds`,
//! written by `gen_seeds` but not compared with the committed ones: where the sender waits for
//! answers depends on timing).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdmaxfer::error::{Error, Result};
use rdmaxfer::verbs::{RemoteRegion, RemoteSlice};
use rdmaxfer::xfer::endpoint::Message;
use rdmaxfer::xfer::file::link::block::block_on;
use rdmaxfer::xfer::file::link::mem::{MemLink, MemRing};
use rdmaxfer::xfer::file::link::{EventListener, Link, Registrar};
use rdmaxfer::xfer::file::options::SENDER_RECV_DEPTH;
use rdmaxfer::xfer::file::proto::{self, Msg};
use rdmaxfer::xfer::file::{
    names, receive, receive_into, send, source, ReceiverOptions, SenderOptions,
};
use rdmaxfer::xfer::file::{SessionReport, DEFAULT_SLOTS};

/// Each wait of either side when fuzzing: long enough for a file's fsync, short enough for a
/// fuzzer (a wait the input leaves unanswered costs this much).
const STEP: Duration = Duration::from_millis(300);

/// Each wait when a seed is replayed as a test: a whole session must not lose a step to a
/// loaded machine (an answered wait returns at once).
const REPLAY_STEP: Duration = Duration::from_secs(10);

fn u16_at(b: &[u8], i: usize) -> usize {
    usize::from(b.get(i).copied().unwrap_or(0)) << 8
        | usize::from(b.get(i + 1).copied().unwrap_or(0))
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    (0..4).fold(0, |v, k| {
        v << 8 | u32::from(b.get(i + k).copied().unwrap_or(0))
    })
}

/// A directory of its own for one run, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("rdmaxfer-fuzz-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("scratch directory");
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every name under `dir` that a finished session must not leave.
fn unfinished(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(names::TEMP_SUFFIX) || name.ends_with(names::STRIPES_SUFFIX) {
            out.push(p.clone());
        }
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(unfinished(&p));
        }
    }
    out
}

/// The ring of the receiver's last MR, as a region.
fn ring_of(msg: &[u8]) -> Option<(RemoteRegion, u32, u32)> {
    match proto::decode(msg) {
        Ok(Msg::Mr(g)) => Some((
            RemoteRegion {
                addr: g.addr,
                rkey: g.rkey,
                len: u64::from(g.slot_size) * u64::from(g.slot_count),
            },
            g.slot_size,
            g.slot_count,
        )),
        _ => None,
    }
}

/// Plays the script in `data` as the sender (see the module docs).
fn play(peer: &mut MemLink, data: &[u8]) {
    let mut ring: Option<(RemoteRegion, u32, u32)> = None;
    let take = |peer: &mut MemLink, ring: &mut Option<_>| -> bool {
        match block_on(peer.recv_with(|m| m.data.to_vec())) {
            Ok(m) => {
                if let Some(r) = ring_of(&m) {
                    *ring = Some(r);
                }
                true
            }
            Err(_) => false,
        }
    };
    // Messages taken before a wait of the script asked for them: each such wait takes one of
    // these first (a recorded sender waited once per message it read).
    let mut early = 0usize;
    let mut i = 0;
    while i < data.len() {
        // What the receiver said so far: taken, so that it never waits for a credit.
        while peer.has_message().unwrap_or(false) {
            early += usize::from(take(peer, &mut ring));
        }
        let tag = data[i] % 4;
        i += 1;
        let ok = match tag {
            0 => {
                let n = u16_at(data, i).min(data.len().saturating_sub(i + 2));
                let msg = &data[i + 2..i + 2 + n];
                i += 2 + n;
                block_on(peer.send(msg)).is_ok()
            }
            1 | 2 => {
                let (off, head) = if tag == 2 {
                    (Some(u32_at(data, i)), 4)
                } else {
                    (None, 0)
                };
                let imm = u32_at(data, i + head);
                let n = (u32_at(data, i + head + 4) as usize)
                    .min(data.len().saturating_sub(i + head + 8));
                let start = (i + head + 8).min(data.len());
                let bytes = data[start..start + n].to_vec();
                i = start + n;
                match ring {
                    Some((region, slot_size, _)) => {
                        let at =
                            off.map_or(u64::from(imm & 0xffff) * u64::from(slot_size), u64::from);
                        match region.slice(at, n as u64) {
                            Ok(to) => write(peer, to, imm, bytes),
                            Err(_) => true,
                        }
                    }
                    None => true,
                }
            }
            _ if early > 0 => {
                early -= 1;
                true
            }
            _ => take(peer, &mut ring),
        };
        if !ok {
            return;
        }
    }
}

fn write(peer: &mut MemLink, to: RemoteSlice, imm: u32, bytes: Vec<u8>) -> bool {
    let n = bytes.len();
    let buf = (n > 0).then_some((bytes, n));
    peer.write_imm(0, to, imm, buf).is_ok()
}

/// A whole receiving session driven by the script in `data`.
pub fn check_file_session(data: &[u8]) {
    run(data, STEP);
}

/// Runs the session `data` scripts (with [`check_file_session`]'s assertions) with waits long
/// enough for any machine; returns how many files the receiver committed.
pub fn replay_session(data: &[u8]) -> usize {
    run(data, REPLAY_STEP)
}

fn run(data: &[u8], step: Duration) -> usize {
    let scratch = Scratch::new();
    let mut ro = ReceiverOptions::new(&scratch.0);
    ro.max_size = Some(1 << 20);
    let (mut peer, mut link) = MemLink::pair(SENDER_RECV_DEPTH, ro.slots);
    link.set_timeout(step);
    peer.set_timeout(step);
    let (ended, report) = std::thread::scope(|sc| {
        let receiver = sc.spawn(|| {
            let mut report = SessionReport::default();
            let r = receive_into(&mut link, &ro, &mut report);
            (r, report)
        });
        play(&mut peer, data);
        // The sender goes: the session ends, whatever state it was in.
        drop(peer);
        receiver.join().expect("the receiver does not panic")
    });
    let left = unfinished(&scratch.0);
    assert!(
        left.is_empty(),
        "left after the session ({ended:?}): {left:?}"
    );
    if ended.is_ok() {
        assert_eq!(
            report.failures(),
            0,
            "a session that succeeded failed files"
        );
    }
    files(&scratch.0)
}

/// Regular files under `dir`.
fn files(dir: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        match e.file_type() {
            Ok(t) if t.is_dir() => n += files(&e.path()),
            Ok(t) if t.is_file() => n += 1,
            _ => {}
        }
    }
    n
}

/// A sender's link that records what it sends, writes and waits for, as a script.
struct Recorder {
    inner: MemLink,
    script: Arc<Mutex<Vec<u8>>>,
}

impl Recorder {
    fn rec(&self, bytes: &[u8]) {
        self.script.lock().expect("script").extend_from_slice(bytes);
    }
}

impl Link for Recorder {
    type Buf = Vec<u8>;
    type Ring = MemRing;

    async fn send(&mut self, data: &[u8]) -> Result<()> {
        self.rec(&[0]);
        self.rec(&(data.len() as u16).to_be_bytes());
        self.rec(data);
        self.inner.send(data).await
    }
    async fn recv_with<R: Send>(&mut self, f: impl FnOnce(Message<'_>) -> R + Send) -> Result<R> {
        self.rec(&[3]);
        self.inner.recv_with(f).await
    }
    fn has_message(&mut self) -> Result<bool> {
        self.inner.has_message()
    }
    async fn wait_send_or_message(&mut self) -> Result<bool> {
        self.inner.wait_send_or_message().await
    }
    async fn flush(&mut self) -> Result<()> {
        self.inner.flush().await
    }
    fn last_words(&mut self) -> Option<Vec<u8>> {
        self.inner.last_words()
    }
    fn timeout(&self) -> Duration {
        self.inner.timeout()
    }
    fn set_timeout(&mut self, t: Duration) {
        self.inner.set_timeout(t)
    }
    fn recv_depth(&self) -> u32 {
        self.inner.recv_depth()
    }
    fn max_msg_size(&self) -> usize {
        self.inner.max_msg_size()
    }
    fn trace_id(&self) -> u32 {
        self.inner.trace_id()
    }
    fn peer_name(&self) -> String {
        self.inner.peer_name()
    }
    fn device_name(&self) -> String {
        self.inner.device_name()
    }
    fn rail_down(&self) -> bool {
        self.inner.rail_down()
    }
    fn break_link(&mut self) -> Result<()> {
        self.inner.break_link()
    }
    async fn close(self) -> Result<()> {
        self.inner.close().await
    }
    fn expose_ring(&mut self, len: usize) -> Result<MemRing> {
        self.inner.expose_ring(len)
    }
    fn registrar(&self) -> Registrar<Vec<u8>> {
        self.inner.registrar()
    }
    async fn wait_credit(&mut self) -> Result<()> {
        self.inner.wait_credit().await
    }
    fn write_imm(
        &mut self,
        wr_id: u64,
        to: RemoteSlice,
        imm: u32,
        buf: Option<(Vec<u8>, usize)>,
    ) -> std::result::Result<(), (Error, Vec<Vec<u8>>)> {
        let bytes = buf.as_ref().map_or(&[][..], |(b, n)| &b[..*n]);
        self.rec(&[1]);
        self.rec(&imm.to_be_bytes());
        self.rec(&(bytes.len() as u32).to_be_bytes());
        self.rec(bytes);
        self.inner.write_imm(wr_id, to, imm, buf)
    }
    async fn poll_writes(
        &mut self,
        max: usize,
        timeout: Duration,
    ) -> Result<(usize, Vec<Vec<u8>>)> {
        self.inner.poll_writes(max, timeout).await
    }
    async fn sleep(d: Duration) {
        MemLink::sleep(d).await
    }
    async fn wait_woken(woken: EventListener, d: Duration) {
        MemLink::wait_woken(woken, d).await
    }
    async fn run_streams<F, G>(streams: Vec<F>, relay: G) -> Vec<std::thread::Result<F::Output>>
    where
        F: Future + Send,
        F::Output: Send,
        G: Future<Output = ()>,
    {
        MemLink::run_streams(streams, relay).await
    }
}

/// Seeds: real sessions of small trees, one through the ring, recorded from the sender.
pub fn session_seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let trees: [(&str, &[usize], u32); 3] = [
        ("inline", &[0, 10, 3000], 4096),
        ("ring", &[70_000], 32 << 10),
        ("mixed", &[5, 100_000, 17], 16 << 10),
    ];
    let mut out = Vec::new();
    for (name, sizes, chunk) in trees {
        let src = Scratch::new();
        let dst = Scratch::new();
        let top = src.0.join("t");
        std::fs::create_dir_all(top.join("d")).expect("tree");
        for (i, &n) in sizes.iter().enumerate() {
            let bytes: Vec<u8> = (0..n).map(|k| (k * 7 + i) as u8).collect();
            let path = top
                .join(if i % 2 == 0 { "d" } else { "" })
                .join(format!("f{i}"));
            std::fs::write(&path, bytes).expect("file");
            let when = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
            std::fs::File::options()
                .write(true)
                .open(&path)
                .and_then(|f| f.set_modified(when))
                .expect("mtime");
        }
        let (near, mut far) = MemLink::pair(SENDER_RECV_DEPTH, DEFAULT_SLOTS);
        let script = Arc::new(Mutex::new(Vec::new()));
        let mut rec = Recorder {
            inner: near,
            script: script.clone(),
        };
        let so = SenderOptions::default().chunk(chunk);
        let ro = ReceiverOptions::new(&dst.0);
        let entries = source::walk(&[top]).expect("walk");
        std::thread::scope(|sc| {
            let r = sc.spawn(|| receive(&mut far, &ro));
            send(&mut rec, &entries, &so, &mut |_| {}).expect("the recorded session succeeds");
            drop(rec);
            r.join().expect("receiver").expect("received");
        });
        let bytes = script.lock().expect("script").clone();
        assert_eq!(
            replay_session(&bytes),
            sizes.len(),
            "{name}: the replay commits every file"
        );
        out.push(("file_session", name.to_string(), bytes));
    }
    out
}
