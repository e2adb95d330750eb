//! Chunk repair in whole sessions on the host (over [`MemLink`](super::link::mem::MemLink)s,
//! as in `session_tests`): a chunk corrupted once is sent again and the file arrives; a chunk
//! corrupted every time fails its file by name after the last round, and the rest arrives.
//! Whole files, stripes over three streams, and a resumed file.

use super::proto::{Reason, MAX_REPAIR_ROUNDS};
use super::session_tests::{
    assert_same_tree, cancelled_at_2_mib, dirs, leftovers, session, tree, Ran,
};
use super::{ReceiverOptions, SenderOptions, STRIPE_MIN};
use crate::error::Error;

/// Chunks repaired on the receiving side, over every connection.
fn received_repairs(ran: &Ran) -> u64 {
    ran.received.iter().map(|(_, r)| r.repaired).sum()
}

/// Sends `top` with `so` to a receiver with default options writing to `out`.
fn run(top: &std::path::Path, so: &SenderOptions, out: &std::path::Path) -> Ran {
    let ro = ReceiverOptions::new(out);
    session(&[top.to_path_buf()], so, &ro, &mut |_| {})
}

/// Sender options with 256 KiB chunks over `streams`, chunk `k` of `name` corrupted on its
/// first send (`once`) or on every send.
fn corrupting(name: &str, k: u64, once: bool, streams: u16) -> SenderOptions {
    let mut so = SenderOptions {
        chunk: 256 << 10,
        streams,
        ..SenderOptions::default()
    };
    match once {
        true => so.hooks.corrupt_once = Some(k),
        false => so.hooks.corrupt_chunk = Some(k),
    }
    so.hooks.corrupt_name = Some(name.into());
    so
}

/// `top` arrived whole in `out`, `top/f0` with one chunk repaired, counted on both sides.
fn repaired_once(ran: &Ran, top: &std::path::Path, out: &std::path::Path) {
    ran.sent.as_ref().expect("send");
    assert_same_tree(top, &out.join("top"));
    assert_eq!(ran.report.repaired, 1, "sender");
    assert_eq!(received_repairs(ran), 1, "receiver");
    let f0 = ran.report.files.iter().find(|f| f.name == "top/f0");
    let f0 = f0.expect("f0 reported");
    assert_eq!((f0.result.as_str(), f0.repaired), ("ok", 1));
    assert!(leftovers(out).is_empty(), "{:?}", leftovers(out));
}

#[test]
fn a_chunk_corrupted_once_is_sent_again_and_counted_on_both_sides() {
    let (_t, src, out) = dirs();
    let top = tree(&src, &[3 << 20, 1000, 3 << 20]);
    let so = corrupting("top/f0", 5, true, 1);
    let ran = run(&top, &so, &out);
    repaired_once(&ran, &top, &out);
    let others: u64 = ran.report.files.iter().map(|f| f.repaired).sum();
    assert_eq!(others, 1, "only f0 was repaired");
    // The chunk went twice: 256 KiB more than the files.
    let files = 2 * (3 << 20) + 1000;
    assert_eq!(ran.report.bytes, files + (256 << 10));
}

/// The file `name` failed on both sides, naming chunk `chunk`, after every repair round; no
/// chunk is counted as repaired.
fn failed_after_every_round(ran: &Ran, name: &str, chunk: &str) {
    let e = ran.sent.as_ref().expect_err("a file failed");
    assert!(matches!(e, Error::Incomplete { failed: 1, .. }), "{e:?}");
    let bad: Vec<_> = ran.report.files.iter().filter(|f| !f.is_ok()).collect();
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert_eq!(bad[0].name, name);
    assert_eq!(bad[0].result, Reason::HashMismatch.as_str());
    let named: Vec<_> = ran
        .received
        .iter()
        .flat_map(|(_, r)| r.files.iter().filter(|f| !f.is_ok()))
        .collect();
    assert_eq!(named.len(), 1, "{named:?}");
    let why = named[0].message.as_deref().unwrap_or_default();
    let rounds = format!("sent again {MAX_REPAIR_ROUNDS} times");
    assert!(why.contains(chunk) && why.contains(&rounds), "{why}");
    assert_eq!((ran.report.repaired, received_repairs(ran)), (0, 0));
}

#[test]
fn a_chunk_corrupted_every_time_fails_its_file_by_name_and_the_rest_arrives() {
    let (_t, src, out) = dirs();
    let top = tree(&src, &[3 << 20, 1000, 3 << 20]);
    let so = corrupting("top/f0", 5, false, 1);
    let ran = run(&top, &so, &out);
    failed_after_every_round(&ran, "top/f0", "chunk 5 (bytes 1310720..1572864)");
    // Sent once and in every round.
    let files = 2 * (3 << 20) + 1000;
    let again = u64::from(MAX_REPAIR_ROUNDS) * (256 << 10);
    assert_eq!(ran.report.bytes, files + again);
    assert!(!out.join("top/f0").exists());
    assert!(out.join("top/a/f1").exists() && out.join("top/a/b/f2").exists());
    assert!(leftovers(&out).is_empty(), "{:?}", leftovers(&out));
}

/// A tree with one file of 11 MiB and a bit (three stripes on the 1 MiB grid: chunk 18 of the
/// file is in the second) and two small ones.
fn striped_tree(src: &std::path::Path) -> std::path::PathBuf {
    tree(src, &[(STRIPE_MIN + (3 << 20) + 11) as usize, 1000, 5000])
}

#[test]
fn a_stripe_repairs_its_chunk_over_three_streams() {
    let (_t, src, out) = dirs();
    let top = striped_tree(&src);
    let so = corrupting("top/f0", 18, true, 3);
    let ran = run(&top, &so, &out);
    assert_eq!(ran.received.len(), 3, "three streams connected");
    repaired_once(&ran, &top, &out);
}

#[test]
fn a_stripe_whose_chunk_fails_every_time_fails_its_file_and_the_rest_arrives() {
    let (_t, src, out) = dirs();
    let top = striped_tree(&src);
    let so = corrupting("top/f0", 18, false, 3);
    let ran = run(&top, &so, &out);
    // Chunk 18 of the file: its bytes, in the stripe that holds it.
    failed_after_every_round(&ran, "top/f0", "(bytes 4718592..4980736)");
    assert!(!out.join("top/f0").exists());
    assert!(out.join("top/a/f1").exists() && out.join("top/a/b/f2").exists());
    assert!(leftovers(&out).is_empty(), "{:?}", leftovers(&out));
}

#[test]
fn a_resumed_file_repairs_a_chunk_after_what_was_verified() {
    let (_t, src, out) = dirs();
    let size = 6u64 << 20;
    let top = tree(&src, &[size as usize]);
    let ro = cancelled_at_2_mib(&top, &out);
    // Chunk 20 (at 5 MiB) is past what the receiver kept: sent, corrupted once, repaired.
    let mut so = corrupting("top/f0", 20, true, 1);
    so.resume = true;
    let again = session(std::slice::from_ref(&top), &so, &ro, &mut |_| {});
    repaired_once(&again, &top, &out);
    // What the receiver had verified was not sent again.
    assert!(again.report.bytes < size, "{}", again.report.bytes);
}

#[test]
fn a_file_that_fails_every_round_keeps_only_its_verified_prefix_for_a_resume() {
    let (_t, src, out) = dirs();
    let size = 6u64 << 20;
    let top = tree(&src, &[size as usize]);
    let ro = ReceiverOptions {
        resume: true,
        ..ReceiverOptions::new(&out)
    };
    let mut so = corrupting("top/f0", 20, false, 1);
    so.resume = true;
    let ran = session(std::slice::from_ref(&top), &so, &ro, &mut |_| {});
    failed_after_every_round(&ran, "top/f0", "chunk 20");
    // Kept for a resume: the 20 chunks before the one that differs, not it.
    let kept = leftovers(&out);
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(std::fs::metadata(&kept[0]).unwrap().len(), 20 * (256 << 10));
    so.hooks.corrupt_chunk = None;
    let again = session(std::slice::from_ref(&top), &so, &ro, &mut |_| {});
    again.sent.as_ref().expect("resumed");
    assert_same_tree(&top, &out.join("top"));
    assert_eq!(again.report.bytes, size - 20 * (256 << 10));
    assert!(leftovers(&out).is_empty(), "{:?}", leftovers(&out));
}
