//! Streams lost in whole sessions on the host (over [`MemLink`](super::link::mem::MemLink)s,
//! as in `session_tests`): a stream whose link breaks hands its stripe back and the others
//! finish it, whichever side broke; only when every stream is lost does the transfer fail,
//! naming them, with nothing committed.

use std::time::{Duration, Instant};

use super::session_tests::{assert_same_tree, dirs, leftovers, session_step, tree, Ran};
use super::{ReceiverOptions, SenderOptions, STRIPE_MIN};
use crate::error::Error;

/// A short step deadline: a silent stream is found out within it.
const STEP: Duration = Duration::from_secs(2);

/// 256 KiB chunks over `streams` streams.
fn striped(streams: u16) -> SenderOptions {
    SenderOptions {
        chunk: 256 << 10,
        streams,
        ..SenderOptions::default()
    }
}

/// A tree with one file striped in two (12 MiB and a bit) and two small ones.
fn big_tree(src: &std::path::Path) -> std::path::PathBuf {
    tree(src, &[(STRIPE_MIN + (4 << 20) + 5) as usize, 1000, 70_000])
}

/// Every receiving connection that ended `Ok`, and the streams the receiver lost.
fn received(ran: &Ran) -> (usize, Vec<u16>) {
    let ok = ran.received.iter().filter(|(r, _)| r.is_ok()).count();
    let lost = ran
        .received
        .iter()
        .flat_map(|(_, rep)| rep.lost.iter().map(|l| l.stream))
        .collect();
    (ok, lost)
}

#[test]
fn a_stream_whose_link_breaks_on_the_senders_side_is_taken_over() {
    let (_t, src, out) = dirs();
    let top = big_tree(&src);
    let mut so = striped(2);
    // Stream 1 breaks after its stripe's third chunk; its peer hears nothing more.
    so.hooks.break_streams = vec![(1, 2)];
    let t0 = Instant::now();
    let ran = session_step(
        std::slice::from_ref(&top),
        &so,
        &ReceiverOptions::new(&out),
        STEP,
    );
    ran.sent
        .as_ref()
        .expect("the transfer finishes on stream 0");
    assert!(t0.elapsed() < STEP * 6, "took {:?}", t0.elapsed());
    assert_same_tree(&top, &out.join("top"));
    assert!(leftovers(&out).is_empty(), "{:?}", leftovers(&out));
    let lost: Vec<_> = ran
        .report
        .lost
        .iter()
        .map(|l| (l.stream, l.handed_back))
        .collect();
    assert_eq!(
        lost,
        [(1, 1)],
        "the sender names the lost stream and its stripe"
    );
    assert!(
        ran.report.lost[0].error.contains("broke"),
        "{:?}",
        ran.report.lost
    );
    // At most what was in flight is sent again: stream 1 had sent 3 chunks of 256 KiB.
    assert!(ran.report.resent <= 3 << 18, "{}", ran.report.resent);
    assert_eq!(ran.report.failed, 0);
    // The receiver's stream 1 was stopped when stream 0 took its stripe over.
    assert_eq!(received(&ran), (2, vec![1]));
}

#[test]
fn a_stream_whose_link_breaks_on_the_receivers_side_is_taken_over() {
    let (_t, src, out) = dirs();
    let top = big_tree(&src);
    let mut ro = ReceiverOptions::new(&out);
    ro.hooks.break_streams = vec![(1, 4)];
    let ran = session_step(std::slice::from_ref(&top), &striped(2), &ro, STEP);
    ran.sent
        .as_ref()
        .expect("the transfer finishes on stream 0");
    assert_same_tree(&top, &out.join("top"));
    assert!(leftovers(&out).is_empty(), "{:?}", leftovers(&out));
    let lost: Vec<_> = ran.report.lost.iter().map(|l| l.stream).collect();
    assert_eq!(
        lost,
        [1],
        "the sender found stream 1 silent and handed its stripe back"
    );
    assert_eq!(received(&ran), (2, vec![1]));
}

#[test]
fn when_every_stream_is_lost_the_transfer_fails_naming_them_and_commits_nothing_partial() {
    let (_t, src, out) = dirs();
    let top = tree(&src, &[(STRIPE_MIN + (4 << 20) + 5) as usize]);
    let mut so = striped(2);
    so.hooks.break_streams = vec![(1, 1), (0, 6)];
    let ran = session_step(
        std::slice::from_ref(&top),
        &so,
        &ReceiverOptions::new(&out),
        STEP,
    );
    let e = ran.sent.as_ref().expect_err("no stream is left");
    assert!(matches!(e, Error::Connection(_)), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("every stream") && text.contains("stream 0") && text.contains("stream 1"),
        "{text}"
    );
    let mut lost: Vec<_> = ran.report.lost.iter().map(|l| l.stream).collect();
    lost.sort();
    assert_eq!(lost, [0, 1]);
    // The file, and the symlink no stream was left to send.
    assert_eq!(ran.report.failed, 2, "named: {:?}", ran.report.files);
    let link = ran
        .report
        .files
        .iter()
        .find(|f| f.name == "top/link")
        .unwrap();
    assert_eq!(link.kind, "symlink");
    assert!(
        link.message.as_deref().unwrap().starts_with("not sent"),
        "{link:?}"
    );
    assert!(!out.join("top/f0").exists(), "not committed");
    assert!(leftovers(&out).is_empty(), "{:?}", leftovers(&out));
    // The receiver's last stream does not take the session for a success.
    assert!(
        ran.received.iter().any(|(r, _)| r.is_err()),
        "{:?}",
        ran.received.iter().map(|(r, _)| r).collect::<Vec<_>>()
    );
}
