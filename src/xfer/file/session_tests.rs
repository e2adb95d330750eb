//! Whole file sessions on the host: the sender and the receiver, unchanged, over links in
//! memory ([`MemLink`]), one thread per stream. Trees, stripes over three streams, resume,
//! refusals, a lying DIGESTS and a spent budget, without a device.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

use super::link::block::block_on;
use super::link::mem::MemLink;
use super::link::task::TaskLink;
use super::link::Link;
use super::options::SENDER_RECV_DEPTH;
use super::proto::{self, Msg, Reason};
use super::recv::ring_budget::RingLease;
use super::recv::{receive_streams, Role, StreamRegistry};
use super::send::source::{walk, SourceEntry};
use super::send::{send_into, send_streams_into, send_streams_into_async};
use super::{Progress, ReceiverOptions, SenderOptions, SessionReport, STRIPE_MIN};
use crate::error::{Error, Result};

thread_local! {
    /// Whether this thread's sessions run the sender as an async link does ([`on_task`]).
    static ON_TASK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `test` with the sender of each of its sessions on one task of a current-thread runtime,
/// over links that yield ([`TaskLink`]), as [`AsyncEndpoint`](crate::aio::AsyncEndpoint)'s
/// file transfer does: the same drivers, their streams on one task.
pub(super) fn on_task(test: fn()) {
    ON_TASK.set(true);
    test();
    ON_TASK.set(false);
}

/// What one session gave on each side.
pub(super) struct Ran {
    pub(super) sent: Result<()>,
    pub(super) report: SessionReport,
    /// Each connection the receiver served, in the order they came.
    pub(super) received: Vec<(Result<()>, SessionReport)>,
}

/// Serves one connection as `rdmaxfer recv` does.
fn serve(
    mut link: MemLink,
    ro: &ReceiverOptions,
    registry: &StreamRegistry,
) -> (Result<()>, SessionReport) {
    let mut report = SessionReport::default();
    let role = Role {
        streams: Some(registry),
        join_only: false,
    };
    let mut lease = RingLease::unlimited();
    let r = receive_streams(&mut link, ro, &mut lease, role, &mut report, &mut |_| {});
    (r, report)
}

/// Sends `roots` to a receiver with `ro`, each stream over its own link in memory.
pub(super) fn session(
    roots: &[PathBuf],
    so: &SenderOptions,
    ro: &ReceiverOptions,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Ran {
    session_of(&walk(roots).expect("walk"), so, ro, progress)
}

/// [`session`] with a step deadline of `step` on every link (10 s otherwise).
#[cfg(feature = "test-hooks")]
pub(super) fn session_step(
    roots: &[PathBuf],
    so: &SenderOptions,
    ro: &ReceiverOptions,
    step: Duration,
) -> Ran {
    let entries = walk(roots).expect("walk");
    session_with(&entries, so, ro, &mut |_| {}, step)
}

/// Sends `entries` (as listed by a walk) as [`session`] does.
fn session_of(
    entries: &[SourceEntry],
    so: &SenderOptions,
    ro: &ReceiverOptions,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Ran {
    session_with(entries, so, ro, progress, Duration::from_secs(10))
}

fn session_with(
    entries: &[SourceEntry],
    so: &SenderOptions,
    ro: &ReceiverOptions,
    progress: &mut dyn FnMut(Progress<'_>),
    step: Duration,
) -> Ran {
    let registry = StreamRegistry::new(8);
    std::thread::scope(|sc| {
        let (tx, rx) = mpsc::channel::<MemLink>();
        let registry = &registry;
        let server = sc.spawn(move || {
            let served: Vec<_> = rx
                .into_iter()
                .map(|link| sc.spawn(move || serve(link, ro, registry)))
                .collect();
            served
                .into_iter()
                .map(|h| h.join().expect("receiver"))
                .collect()
        });
        let tx = Mutex::new(tx);
        let dial = || -> Result<MemLink> {
            let (mut near, mut far) = MemLink::pair(SENDER_RECV_DEPTH, ro.slots);
            near.set_timeout(step);
            far.set_timeout(step);
            tx.lock()
                .expect("dial")
                .send(far)
                .map_err(|_| Error::Connection("no receiver".into()))?;
            Ok(near)
        };
        let first = dial().expect("first link");
        let mut report = SessionReport::default();
        let sent = match ON_TASK.get() {
            false => {
                let mut first = first;
                send_streams_into(&mut first, &|_| dial(), entries, so, &mut report, progress)
            }
            // The sender as an async link runs it: every stream on this task.
            true => {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                    .expect("a runtime");
                let mut first = TaskLink::new(first);
                let dial = |_: u16| dial().map(TaskLink::new);
                let sending =
                    send_streams_into_async(&mut first, &dial, entries, so, &mut report, progress);
                rt.block_on(sending)
            }
        };
        drop(tx);
        Ran {
            sent,
            report,
            received: server.join().expect("server"),
        }
    })
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0] ^ seed)
        .collect()
}

/// A tree under `root`: files of awkward sizes in nested directories, and a symlink.
pub(super) fn tree(root: &Path, sizes: &[usize]) -> PathBuf {
    let top = root.join("top");
    std::fs::create_dir_all(top.join("a/b/c")).unwrap();
    std::fs::create_dir_all(top.join("empty")).unwrap();
    for (i, &n) in sizes.iter().enumerate() {
        let dir = ["", "a", "a/b", "a/b/c"][i % 4];
        std::fs::write(top.join(dir).join(format!("f{i}")), pattern(n, i as u8)).unwrap();
    }
    std::os::unix::fs::symlink("a/f1", top.join("link")).unwrap();
    top
}

/// Every entry under `a` is under `b` with the same contents (or link target), and no more.
pub(super) fn assert_same_tree(a: &Path, b: &Path) {
    let list = |p: &Path| -> Vec<String> {
        let mut v: Vec<String> = walkdir(p)
            .into_iter()
            .map(|e| e.strip_prefix(p).unwrap().display().to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        list(a),
        list(b),
        "entries of {} and {}",
        a.display(),
        b.display()
    );
    for rel in list(a) {
        let (x, y) = (a.join(&rel), b.join(&rel));
        let m = std::fs::symlink_metadata(&x).unwrap();
        if m.file_type().is_symlink() {
            assert_eq!(
                std::fs::read_link(&x).unwrap(),
                std::fs::read_link(&y).unwrap()
            );
        } else if m.is_file() {
            assert!(
                std::fs::read(&x).unwrap() == std::fs::read(&y).unwrap(),
                "{rel} differs"
            );
        }
    }
}

fn walkdir(p: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(p).unwrap() {
        let path = e.unwrap().path();
        out.push(path.clone());
        if std::fs::symlink_metadata(&path).unwrap().is_dir() {
            out.extend(walkdir(&path));
        }
    }
    out
}

pub(super) fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let (src, out) = (t.path().join("src"), t.path().join("out"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    (t, src, out)
}

/// Names under `out` that are not entries of a finished transfer (temporaries, partials).
pub(super) fn leftovers(out: &Path) -> Vec<PathBuf> {
    walkdir(out)
        .into_iter()
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect()
}

#[test]
fn a_tree_arrives_whole_and_a_rerun_skips_every_file() {
    let (_t, src, out) = dirs();
    let sizes = [0, 1, 4095, 4096, 65_537, 300_001, (2 << 20) + 3, 7];
    let top = tree(&src, &sizes);
    let ro = ReceiverOptions::new(&out);
    let so = SenderOptions::default();
    let ran = session(std::slice::from_ref(&top), &so, &ro, &mut |_| {});
    ran.sent.expect("send");
    assert_eq!(ran.received.len(), 1);
    assert!(ran.received[0].0.is_ok(), "{:?}", ran.received[0].0);
    assert_same_tree(&top, &out.join("top"));
    let files = sizes.len() as u64;
    assert_eq!(ran.report.failures(), 0);
    assert!(
        ran.report.file_count() >= files,
        "{}",
        ran.report.file_count()
    );

    let again = session(&[top], &so, &ro, &mut |_| {});
    again.sent.expect("re-run");
    assert_eq!(again.report.skipped, ran.report.file_count(), "all skipped");
    assert_eq!(again.report.bytes, 0);
}

#[test]
fn a_big_file_goes_in_stripes_over_three_streams() {
    let (_t, src, out) = dirs();
    let top = tree(
        &src,
        &[(STRIPE_MIN + (3 << 20) + 11) as usize, 1000, 5000, 0],
    );
    let ro = ReceiverOptions::new(&out);
    let so = SenderOptions {
        streams: 3,
        ..SenderOptions::default()
    };
    let ran = session(std::slice::from_ref(&top), &so, &ro, &mut |_| {});
    ran.sent.expect("send");
    assert_eq!(ran.received.len(), 3, "three streams connected");
    for (r, _) in &ran.received {
        assert!(r.is_ok(), "{r:?}");
    }
    assert_same_tree(&top, &out.join("top"));
    assert!(leftovers(&out).is_empty(), "{:?}", leftovers(&out));
}

/// Sends `top` (one file, `top/f0`) with `--resume` on both sides in 256 KiB chunks to `out`,
/// cancelled once 2 MiB were written; returns the receiver's options.
pub(super) fn cancelled_at_2_mib(top: &Path, out: &Path) -> ReceiverOptions {
    let ro = ReceiverOptions {
        resume: true,
        ..ReceiverOptions::new(out)
    };
    let so = SenderOptions {
        resume: true,
        chunk: 256 << 10,
        ..SenderOptions::default()
    };
    let cancel = so.cancel.clone();
    let ran = session(&[top.to_path_buf()], &so, &ro, &mut |p| {
        if matches!(p, Progress::Bytes { file_done, .. } if file_done >= 2 << 20) {
            cancel.cancel();
        }
    });
    assert!(matches!(ran.sent, Err(Error::Cancelled)), "{:?}", ran.sent);
    assert!(!out.join("top/f0").exists(), "nothing committed");
    ro
}

#[test]
fn an_interrupted_file_resumes_from_what_the_receiver_verified() {
    let (_t, src, out) = dirs();
    let size = 6usize << 20;
    let top = tree(&src, &[size]);
    let ro = cancelled_at_2_mib(&top, &out);
    let so = SenderOptions {
        resume: true,
        chunk: 256 << 10,
        ..SenderOptions::default()
    };
    let again = session(std::slice::from_ref(&top), &so, &ro, &mut |_| {});
    again.sent.expect("resumed");
    assert_same_tree(&top, &out.join("top"));
    // What the receiver had verified was not sent again.
    assert!(
        again.report.bytes < size as u64 - (1 << 20),
        "{}",
        again.report.bytes
    );
    assert!(again.report.bytes > 0);
    assert!(leftovers(&out).is_empty(), "{:?}", leftovers(&out));
}

#[test]
fn a_file_over_the_limit_is_refused_by_name_and_the_rest_arrives() {
    let (_t, src, out) = dirs();
    let top = tree(&src, &[10, 5000, 20]);
    let ro = ReceiverOptions {
        max_size: Some(1000),
        ..ReceiverOptions::new(&out)
    };
    let ran = session(&[top], &SenderOptions::default(), &ro, &mut |_| {});
    assert!(ran.sent.is_err());
    assert_eq!(ran.report.failures(), 1);
    let refused: Vec<_> = ran.report.files.iter().filter(|f| !f.is_ok()).collect();
    assert_eq!(refused.len(), 1);
    assert!(refused[0].name.ends_with("a/f1"), "{}", refused[0].name);
    assert!(out.join("top/f0").exists() && out.join("top/a/b/f2").exists());
    assert!(!out.join("top/a/f1").exists());
}

#[test]
fn a_wrong_token_ends_the_session_before_any_file() {
    let (_t, src, out) = dirs();
    let top = tree(&src, &[10]);
    let ro = ReceiverOptions {
        token: Some(b"right".to_vec()),
        ..ReceiverOptions::new(&out)
    };
    let so = SenderOptions {
        token: Some(b"wrong".to_vec()),
        ..SenderOptions::default()
    };
    let ran = session(&[top], &so, &ro, &mut |_| {});
    let e = ran.sent.expect_err("refused");
    assert_eq!(e.reason(), Some(Reason::AuthFailed), "{e}");
    assert!(
        std::fs::read_dir(&out).unwrap().next().is_none(),
        "nothing arrived"
    );
}

#[test]
fn a_spent_refusal_budget_ends_the_session_on_both_sides() {
    let (_t, src, out) = dirs();
    let top = tree(&src, &[100, 100, 100, 100, 100, 100]);
    let mut ro = ReceiverOptions {
        max_size: Some(10),
        ..ReceiverOptions::new(&out)
    };
    ro.budgets.max_refusals = Some(2);
    let ran = session(&[top], &SenderOptions::default(), &ro, &mut |_| {});
    let (r, _) = &ran.received[0];
    assert_eq!(
        r.as_ref().err().and_then(Error::reason),
        Some(Reason::Budget),
        "{r:?}"
    );
    let e = ran.sent.expect_err("ended");
    assert_eq!(e.reason(), Some(Reason::Budget), "{e}");
}

#[cfg(feature = "test-hooks")]
#[test]
fn a_corrupted_chunk_fails_its_file_by_name_and_the_rest_arrives() {
    let (_t, src, out) = dirs();
    let top = tree(&src, &[3 << 20, 1000, 3 << 20]);
    let mut so = SenderOptions {
        chunk: 256 << 10,
        ..SenderOptions::default()
    };
    so.hooks.corrupt_chunk = Some(5);
    so.hooks.corrupt_name = Some("top/f0".into());
    let ro = ReceiverOptions::new(&out);
    let ran = session(std::slice::from_ref(&top), &so, &ro, &mut |_| {});
    assert!(ran.sent.is_err());
    let bad: Vec<_> = ran.report.files.iter().filter(|f| !f.is_ok()).collect();
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].name.ends_with("f0"));
    let (r, got) = &ran.received[0];
    assert!(r.is_err());
    let named: Vec<_> = got.files.iter().filter(|f| !f.is_ok()).collect();
    assert_eq!(named.len(), 1, "{named:?}");
    let why = named[0].message.as_deref().unwrap_or_default();
    assert!(
        named[0].name.ends_with("f0") && why.contains("chunk 5"),
        "{named:?}"
    );
    assert!(!out.join("top/f0").exists());
    assert!(out.join("top/a/f1").exists() && out.join("top/a/b/f2").exists());
    assert!(leftovers(&out).is_empty(), "{:?}", leftovers(&out));
}

#[test]
fn a_peer_that_talks_nonsense_after_the_challenge_is_named() {
    let (_t, _src, out) = dirs();
    let ro = ReceiverOptions::new(&out);
    let (mut peer, link) = MemLink::pair(SENDER_RECV_DEPTH, ro.slots);
    std::thread::scope(|sc| {
        let server = sc.spawn(|| serve(link, &ro, &StreamRegistry::new(1)));
        let challenge = block_on(peer.recv_with(|m| m.data.to_vec())).unwrap();
        assert!(matches!(
            proto::decode(&challenge),
            Ok(Msg::Challenge { .. })
        ));
        block_on(peer.send(&[0xff; 40])).unwrap();
        let (r, _) = server.join().unwrap();
        assert!(r.is_err());
    });
}

/// Rewrites `path` in place (same size, other bytes, a later modification time).
fn rewrite(path: &Path) {
    let len = std::fs::metadata(path).unwrap().len() as usize;
    std::fs::write(path, pattern(len, 0x5a)).unwrap();
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(later).unwrap();
}

/// Sends a tree whose file `f0` is rewritten: once its first bytes are on the way, or (`listed`)
/// after the walk listed it and before it is sent.
fn changed_mid_send(sizes: &[usize], streams: u16, listed: bool) {
    let (_t, src, out) = dirs();
    let top = tree(&src, sizes);
    let victim = top.join("f0");
    let so = SenderOptions {
        streams,
        chunk: 256 << 10,
        ..SenderOptions::default()
    };
    let entries = walk(std::slice::from_ref(&top)).unwrap();
    let mut done = listed;
    if listed {
        rewrite(&victim);
    }
    let ran = session_of(&entries, &so, &ReceiverOptions::new(&out), &mut |p| {
        if let Progress::Bytes { name, .. } = p {
            if name.ends_with("f0") && !done {
                done = true;
                rewrite(&victim);
            }
        }
    });
    assert!(done, "f0 was sent");
    assert!(ran.sent.is_err(), "a changed file fails the send");
    let bad: Vec<_> = ran.report.files.iter().filter(|f| !f.is_ok()).collect();
    assert_eq!(bad.len(), 1, "{bad:?}");
    let why = bad[0].message.as_deref().unwrap_or_default();
    assert!(
        bad[0].name.ends_with("f0") && why.contains("changed"),
        "{bad:?}"
    );
    assert!(
        !out.join("top/f0").exists(),
        "neither the old nor a mix is committed"
    );
    assert!(out.join("top/a/f1").exists(), "the rest arrives");
    assert!(leftovers(&out).is_empty(), "{:?}", leftovers(&out));
}

#[test]
fn a_file_rewritten_while_it_is_sent_is_named_and_not_committed() {
    changed_mid_send(&[3 << 20, 1000], 1, false);
}

#[test]
fn a_striped_file_rewritten_after_the_walk_is_named_and_not_committed() {
    // Each stripe is read by its own stream, whenever that stream gets to it: all of them
    // compare the file with what the walk listed, so a file that changed between two stripes'
    // reads fails rather than commits a mix. (Rewritten mid-send, the stripes over links in
    // memory have often all been read before the progress callback runs.)
    changed_mid_send(&[(STRIPE_MIN + (1 << 20)) as usize, 1000], 3, true);
}

#[test]
fn a_sender_whose_receiver_goes_quiet_names_the_stage_the_stream_and_the_peer() {
    let (_t, src, _out) = dirs();
    let top = tree(&src, &[100_000]);
    let (mut near, mut far) = MemLink::pair(SENDER_RECV_DEPTH, 16);
    near.set_timeout(std::time::Duration::from_millis(200));
    let challenge = Msg::Challenge {
        version: proto::VERSION,
        nonce: [7; proto::DIGEST_LEN],
        proof: None,
    };
    block_on(far.send(&proto::encode(&challenge))).unwrap();
    // A file alone: its HELLO waits for an answer (a tree's directory goes first, in flight).
    let entries = walk(&[top.join("f0")]).unwrap();
    let mut report = SessionReport::default();
    let r = send_into(
        &mut near,
        &entries,
        &SenderOptions::default(),
        &mut report,
        &mut |_| {},
    );
    match r {
        Err(Error::Stalled {
            what, stream, peer, ..
        }) => {
            assert_eq!(what, "the receiver's answer to a HELLO");
            assert_eq!(stream, 0);
            assert_eq!(peer, near.peer_name());
        }
        other => panic!("{other:?}"),
    }
    drop(far);
}

#[test]
fn a_receiver_whose_sender_goes_quiet_names_the_stage_the_stream_and_the_peer() {
    let (_t, _src, out) = dirs();
    let ro = ReceiverOptions::new(&out);
    let (peer, mut link) = MemLink::pair(SENDER_RECV_DEPTH, ro.slots);
    link.set_timeout(std::time::Duration::from_millis(200));
    let (r, _) = serve(link, &ro, &StreamRegistry::new(1));
    let e = r.expect_err("stalled");
    assert!(e.is_timeout(), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("the sender's next entry") && text.contains("stream 0"),
        "{text}"
    );
    drop(peer);
}

// The async driver (streams on one task, waits that yield) over the same sessions.

#[test]
fn on_one_task_a_tree_arrives_whole_and_a_rerun_skips_every_file() {
    on_task(a_tree_arrives_whole_and_a_rerun_skips_every_file);
}

#[test]
fn on_one_task_a_big_file_goes_in_stripes_over_three_streams() {
    on_task(a_big_file_goes_in_stripes_over_three_streams);
}

#[test]
fn on_one_task_an_interrupted_file_resumes_from_what_the_receiver_verified() {
    on_task(an_interrupted_file_resumes_from_what_the_receiver_verified);
}

#[test]
fn on_one_task_a_file_over_the_limit_is_refused_by_name_and_the_rest_arrives() {
    on_task(a_file_over_the_limit_is_refused_by_name_and_the_rest_arrives);
}

#[test]
fn on_one_task_a_wrong_token_ends_the_session_before_any_file() {
    on_task(a_wrong_token_ends_the_session_before_any_file);
}

#[test]
fn on_one_task_a_spent_refusal_budget_ends_the_session_on_both_sides() {
    on_task(a_spent_refusal_budget_ends_the_session_on_both_sides);
}

#[test]
#[cfg(feature = "test-hooks")]
fn on_one_task_a_corrupted_chunk_fails_its_file_by_name_and_the_rest_arrives() {
    on_task(a_corrupted_chunk_fails_its_file_by_name_and_the_rest_arrives);
}

#[test]
fn on_one_task_a_striped_file_rewritten_after_the_walk_is_named_and_not_committed() {
    on_task(a_striped_file_rewritten_after_the_walk_is_named_and_not_committed);
}
