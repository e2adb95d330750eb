//! Both protocol cores against each other, in one process and without a device: the sender's
//! [`ChunkPlan`] feeds the receiver's [`PartReceiver`] through a ring in memory, and whole files
//! go from a [`Source`] to a [`Sink`] that way (resume, a lying DIGESTS, a corrupted chunk).

use proptest::prelude::*;

use super::ctl::PEER_REPORTS;
use super::digest::{chunk_digest, Chunks, Layout};
use super::proto::{Algo, Digests, Msg, Reason, RingGrant, SkipWhy, MAX_DIGESTS};
use super::proto::{Repair, MAX_REPAIR_CHUNKS, MAX_REPAIR_ROUNDS};
use super::recv::core::{AfterFin, Arrival, PartReceiver, Tail};
use super::recv::sink::{Sink, SinkOptions};
use super::send::core::{check_grant, AfterFin as SendAfterFin, Answer, Asked, ChunkPlan};
use super::send::core::{Repairs, Verdict};
use super::send::source::Source;
use crate::error::Error;

fn grant(slot_size: u32, slot_count: u32, resume_offset: u64) -> RingGrant {
    RingGrant {
        addr: 0x1000,
        rkey: 7,
        slot_size,
        slot_count,
        resume_offset,
        resume_hash: [0; 32],
    }
}

/// Every chunk of a part of `size` bytes from `held`, through both cores: each arrival is the
/// chunk the sender wrote, in its slot, inside the ring; then the digests and FIN.
fn run_part(size: u64, slot_size: u32, slot_count: u32, held_chunks: u64) {
    let slot = u64::from(slot_size);
    let held = (held_chunks * slot).min(size);
    let held = if held == size { size } else { held };
    let g = grant(slot_size, slot_count, held);
    let plan = ChunkPlan::new(&g, size, held.div_ceil(slot));
    let mut rx = PartReceiver::new(slot_size, slot_count, held, size, Algo::Xxh3).unwrap();
    let ring = slot * u64::from(slot_count);
    let mut sent = 0u64;
    for k in plan.chunks() {
        let w = plan.write(k);
        let len = (size - k * slot).min(slot);
        let at = rx.on_data(w.imm, len as u32, "test").unwrap();
        assert_eq!(
            (at.chunk, at.ring_offset as u64, at.len as u64),
            (k, w.ring_offset, len)
        );
        assert!(w.ring_offset + len <= ring, "chunk {k} past the ring");
        sent += len;
    }
    assert!(!rx.wants_data());
    assert_eq!((rx.received(), held + sent), (size, size));
    let chunks = size.div_ceil(slot);
    let digest = crate::xfer::file::digest::chunk_digest(Algo::Xxh3, b"x");
    let mut first = 0;
    while first < chunks {
        let n = (chunks - first).min(MAX_DIGESTS as u64);
        let d = Digests {
            algo: Algo::Xxh3,
            first,
            digests: vec![digest; n as usize],
        };
        let tail = rx.on_control(Msg::Digests(d), "HELLO").unwrap();
        assert!(matches!(tail, Tail::Digests { first: f, .. } if f == first));
        first += n;
    }
    let fin = Msg::Fin {
        bytes: size,
        hash: [3; 32],
    };
    assert_eq!(rx.on_control(fin, "HELLO").unwrap(), Tail::Fin([3; 32]));
    assert!(
        rx.on_control(Msg::Done, "HELLO").is_err(),
        "nothing after FIN"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn every_part_arrives_chunk_by_chunk_where_the_sender_wrote_it(
        slot_size in prop_oneof![Just(4096u32), 1u32..70_000],
        slot_count in 1u32..40,
        chunks in 0u64..300,
        tail in 0u64..4096,
        held_chunks in 0u64..300,
    ) {
        let size = (chunks * u64::from(slot_size)).saturating_sub(tail);
        run_part(size, slot_size, slot_count, held_chunks.min(chunks));
    }
}

#[test]
fn sequence_numbers_and_slots_wrap_independently() {
    // 70 000 chunks through 3 slots: the sequence number wraps at 2^16, the slot every 3.
    run_part(70_000 * 4096 - 1, 4096, 3, 0);
    run_part(70_000 * 4096, 4096, 1024, 5);
}

/// A receiver past the first `n` chunks of a 10-chunk part in a 4-slot ring.
fn after(n: u64) -> (ChunkPlan, PartReceiver) {
    let g = grant(4096, 4, 0);
    let plan = ChunkPlan::new(&g, 10 * 4096 - 100, 0);
    let mut rx = PartReceiver::new(4096, 4, 0, 10 * 4096 - 100, Algo::Blake3).unwrap();
    for k in 0..n {
        let len = (10 * 4096 - 100 - k * 4096).min(4096) as u32;
        rx.on_data(plan.write(k).imm, len, "t").unwrap();
    }
    (plan, rx)
}

#[test]
fn what_the_sender_never_posted_is_refused() {
    let err = |r: Result<_, Error>| r.unwrap_err().to_string();
    // A chunk repeated (a transport replay), skipped, or of the wrong length.
    let (plan, mut rx) = after(3);
    assert!(err(rx.on_data(plan.write(2).imm, 4096, "f")).contains("repeated or out of order"));
    let (plan, mut rx) = after(3);
    assert!(err(rx.on_data(plan.write(4).imm, 4096, "f")).contains("out of order"));
    let (plan, mut rx) = after(3);
    assert!(err(rx.on_data(plan.write(3).imm, 4095, "f")).contains("where the sender wrote 4096"));
    let (plan, mut rx) = after(9);
    assert!(err(rx.on_data(plan.write(9).imm, 4096, "f")).contains("wrote 3996"));
    // The right sequence number in another slot, a slot outside the ring.
    let (_, mut rx) = after(1);
    let other_slot = super::proto::encode_chunk_imm(super::proto::Imm { slot: 2, seq: 1 });
    assert!(err(rx.on_data(other_slot, 4096, "f")).contains("slot 1 was granted"));
    let (_, mut rx) = after(0);
    assert!(err(rx.on_data(9, 4096, "f")).contains("slot 9 of a 4-slot ring"));
    // Data after the part, control messages while data is due, the tail before the data.
    let (plan, mut rx) = after(10);
    assert!(err(rx.on_data(plan.write(10).imm, 0, "f")).contains("after the part"));
    let (_, rx) = after(2);
    let e = rx.control_during_data(Ok(Msg::Err {
        reason: Reason::NoSpace,
        message: "disk full".into(),
    }));
    assert_eq!(e.reason(), Some(Reason::NoSpace));
    assert!(e.to_string().contains(PEER_REPORTS));
    assert!(rx
        .control_during_data(Ok(Msg::Done))
        .to_string()
        .contains("expected a data chunk"));
    let (_, mut rx) = after(2);
    let early = rx.on_control(Msg::Done, "HELLO").unwrap_err();
    assert!(early.to_string().contains("before the part's data"));
}

#[test]
fn the_tail_is_digests_in_order_then_fin_of_the_parts_size() {
    let d = |algo: Algo, first: u64, n: usize| {
        let digest = crate::xfer::file::digest::chunk_digest(algo, b"x");
        Msg::Digests(Digests {
            algo,
            first,
            digests: vec![digest; n],
        })
    };
    let err = |r: Result<_, Error>| r.unwrap_err().to_string();
    let (_, mut rx) = after(10);
    assert!(err(rx.on_control(d(Algo::Xxh3, 0, 1), "HELLO")).contains("HELLO asked for"));
    let (_, mut rx) = after(10);
    assert!(err(rx.on_control(d(Algo::Blake3, 1, 1), "HELLO")).contains("expected chunk 0"));
    let (_, mut rx) = after(10);
    rx.on_control(d(Algo::Blake3, 0, 4), "HELLO").unwrap();
    assert!(err(rx.on_control(d(Algo::Blake3, 0, 4), "HELLO")).contains("expected chunk 4"));
    assert!(err(rx.on_control(d(Algo::Blake3, 4, 7), "HELLO")).contains("of 10 chunks"));
    let (_, mut rx) = after(10);
    let fin = |bytes| Msg::Fin {
        bytes,
        hash: [0; 32],
    };
    assert!(err(rx.on_control(fin(10 * 4096), "STRIPE")).contains("STRIPE announced 40860"));
    let (_, mut rx) = after(10);
    let e = rx
        .on_control(
            Msg::Err {
                reason: Reason::ReadError,
                message: "gone".into(),
            },
            "HELLO",
        )
        .unwrap_err();
    assert_eq!(e.reason(), Some(Reason::ReadError));
    let (_, mut rx) = after(10);
    assert!(err(rx.on_control(Msg::Done, "HELLO")).contains("expected FIN"));
    // A part the receiver cannot take at all.
    assert!(PartReceiver::new(0, 4, 0, 1, Algo::Xxh3).is_err());
    assert!(PartReceiver::new(4096, 4, 100, 8192, Algo::Xxh3).is_err());
    assert!(PartReceiver::new(4096, 4, 9000, 8192, Algo::Xxh3).is_err());
    assert!(PartReceiver::new(4096, 4, 8192, 8192, Algo::Xxh3).is_ok());
}

#[test]
fn the_senders_reading_of_each_answer() {
    let refuse = |reason| Msg::Refuse {
        reason,
        message: "no".into(),
    };
    let ack = |status| Msg::Ack {
        status,
        message: "m".into(),
    };
    let mr = Msg::Mr(grant(4096, 4, 0));
    assert_eq!(
        Answer::of(mr.clone(), Asked::File).unwrap(),
        Answer::Ring(grant(4096, 4, 0))
    );
    assert!(Answer::of(mr, Asked::Entry).is_err(), "MR for a directory");
    assert_eq!(
        Answer::of(ack(Reason::Ok), Asked::Entry).unwrap(),
        Answer::Made
    );
    assert!(
        Answer::of(ack(Reason::Ok), Asked::File).is_err(),
        "ACK for a file"
    );
    for (reason, fatal) in [
        (Reason::Exists, false),
        (Reason::BadName, false),
        (Reason::AuthFailed, true),
        (Reason::Version, true),
    ] {
        let a = Answer::of(refuse(reason), Asked::File).unwrap();
        assert!(
            matches!(a, Answer::Refused { fatal: f, reason: r, .. } if f == fatal && r == reason)
        );
    }
    let e = Answer::of(
        Msg::Err {
            reason: Reason::Budget,
            message: "spent".into(),
        },
        Asked::File,
    )
    .unwrap_err();
    assert_eq!(e.reason(), Some(Reason::Budget));
    assert!(Answer::of(Msg::Done, Asked::File).is_err());
    // WANT answers an inline file only; MR never does.
    assert_eq!(Answer::of(Msg::Want, Asked::Inline).unwrap(), Answer::Want);
    assert!(
        Answer::of(Msg::Want, Asked::File).is_err(),
        "WANT for a ring file"
    );
    assert!(
        Answer::of(Msg::Want, Asked::Entry).is_err(),
        "WANT for a directory"
    );
    assert!(Answer::of(Msg::Mr(grant(4096, 4, 0)), Asked::Inline).is_err());
    // A dry run's HELLO gets SKIP (what would be done) or REFUSE, and only it gets "would".
    let skip = |why| Msg::Skip {
        why,
        message: "m".into(),
    };
    for (why, replace) in [(SkipWhy::WouldCreate, false), (SkipWhy::WouldReplace, true)] {
        assert_eq!(
            Answer::of(skip(why), Asked::DryRun).unwrap(),
            Answer::Would { replace }
        );
        for asked in [Asked::File, Asked::Inline, Asked::Entry] {
            let e = Answer::of(skip(why), asked).unwrap_err();
            assert!(e.to_string().contains("not a dry run"), "{e}");
        }
    }
    assert_eq!(
        Answer::of(skip(SkipWhy::Identical), Asked::DryRun).unwrap(),
        Answer::Skipped("m".into())
    );
    for m in [Msg::Want, Msg::Mr(grant(4096, 4, 0)), ack(Reason::Ok)] {
        assert!(
            Answer::of(m, Asked::DryRun).is_err(),
            "no data after a dry run"
        );
    }
    // The ring must fit the chunk size asked for and the immediate.
    assert!(check_grant(&grant(4096, 4, 0), 4096).is_ok());
    for g in [
        grant(8192, 4, 0),
        grant(0, 4, 0),
        grant(4096, 0, 0),
        grant(4096, super::proto::IMM_SLOTS + 1, 0),
    ] {
        assert!(check_grant(&g, 4096).is_err(), "{g:?}");
    }
    assert_eq!(Verdict::of(ack(Reason::Ok)).unwrap(), Verdict::Delivered);
    assert_eq!(
        Verdict::of(ack(Reason::HashMismatch)).unwrap(),
        Verdict::Failed {
            status: Reason::HashMismatch,
            message: "m".into()
        }
    );
    assert!(Verdict::of(Msg::Done).is_err());
}

/// What [`send_file`] changes on the way (tests of the receiver's verdict).
#[derive(Clone, Copy, Default)]
struct Lies {
    /// Flip a byte of this chunk in the ring.
    corrupt: Option<u64>,
    /// Send a wrong digest for this chunk.
    digest: Option<u64>,
    /// Stop after this many chunks (the receiver keeps what it has, for a resume).
    stop_after: Option<u64>,
}

/// One file from `src` into `out` through both cores and a ring in memory, as the drivers do it
/// over RDMA: the receiver's sink sets the resume point, the sender's source checks it and
/// reads the rest into the ring, the receiver copies each arrival out and writes it, then the
/// digests and FIN, and the sink's commit gives the verdict.
fn send_file(
    src: &std::path::Path,
    out: &std::path::Path,
    slot_size: u32,
    slot_count: u32,
    lies: Lies,
) -> Result<u64, Error> {
    let size = std::fs::metadata(src).unwrap().len();
    let rel = super::names::sanitize("f.bin").unwrap();
    let opts = SinkOptions {
        resume: true,
        ..SinkOptions::default()
    };
    let mut sink = Sink::create(out, &rel, size, opts)?;
    sink.set_keep_on_abort(true);
    let (held, held_hash) = sink.start(slot_size, Algo::Blake3)?;
    let mut rx = PartReceiver::new(slot_size, slot_count, held, size, Algo::Blake3)?;
    let g = RingGrant {
        resume_hash: held_hash,
        ..grant(slot_size, slot_count, held)
    };
    let mut source = Source::open(src)?;
    source.start(slot_size, Algo::Blake3)?;
    assert!(held == 0 || source.skip_verified(held, &g.resume_hash)?);
    let plan = ChunkPlan::new(&g, size, source.first_chunk());
    let mut ring = vec![0u8; slot_size as usize * slot_count as usize];
    for k in plan.chunks() {
        if lies.stop_after.is_some_and(|n| k >= n) {
            return sink.abort().map(|()| held);
        }
        let w = plan.write(k);
        let off = w.ring_offset as usize;
        let n = source.read_chunk_at(k, &mut ring[off..off + slot_size as usize])?;
        if lies.corrupt == Some(k) {
            ring[off] ^= 1;
        }
        let at = rx.on_data(w.imm, n as u32, "f.bin")?;
        sink.write_chunk_at(at.chunk, &ring[at.ring_offset..at.ring_offset + at.len])?;
    }
    let chunks = source.chunks()?;
    let mut first = 0;
    loop {
        let mut digests = chunks.batch(first, MAX_DIGESTS);
        if digests.is_empty() {
            break;
        }
        if let Some(i) = lies.digest.and_then(|i| i.checked_sub(first)) {
            if let Some(d) = digests.get_mut(i as usize) {
                *d = crate::xfer::file::digest::chunk_digest(Algo::Blake3, b"lie");
            }
        }
        let n = digests.len() as u64;
        let msg = Msg::Digests(Digests {
            algo: Algo::Blake3,
            first,
            digests,
        });
        match rx.on_control(msg, "HELLO")? {
            Tail::Digests { first, digests } => {
                sink.check_digests(first, &digests)?;
            }
            Tail::Fin(_) => unreachable!("DIGESTS is not FIN"),
        }
        first += n;
    }
    let fin = Msg::Fin {
        bytes: size,
        hash: source.finish()?,
    };
    let Tail::Fin(hash) = rx.on_control(fin, "HELLO")? else {
        unreachable!("FIN is FIN")
    };
    sink.commit(&hash)?;
    Ok(held)
}

fn file_of(len: usize) -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 5000) as u8).collect();
    let path = dir.path().join("src.bin");
    std::fs::write(&path, &data).unwrap();
    (dir, path, data)
}

#[test]
fn whole_files_go_through_both_cores_on_the_host() {
    for (len, slot, slots) in [
        (0, 4096, 4),
        (1, 4096, 1),
        (300_001, 4096, 3),
        (1 << 20, 65536, 16),
    ] {
        let (dir, src, data) = file_of(len);
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();
        assert_eq!(
            send_file(&src, &out, slot, slots, Lies::default()).unwrap(),
            0
        );
        assert_eq!(
            std::fs::read(out.join("f.bin")).unwrap(),
            data,
            "{len} bytes"
        );
    }
}

#[test]
fn an_interrupted_file_resumes_from_what_the_receiver_verified() {
    let (dir, src, data) = file_of(200_000);
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let stop = Lies {
        stop_after: Some(20),
        ..Lies::default()
    };
    assert_eq!(send_file(&src, &out, 4096, 8, stop).unwrap(), 0);
    assert!(
        !out.join("f.bin").exists(),
        "nothing committed after the stop"
    );
    let held = send_file(&src, &out, 4096, 8, Lies::default()).unwrap();
    assert!(held > 0 && held <= 20 * 4096, "resumed from byte {held}");
    assert_eq!(std::fs::read(out.join("f.bin")).unwrap(), data);
}

#[test]
fn a_lying_digests_or_a_corrupted_chunk_commits_nothing_and_names_the_chunk() {
    for lies in [
        Lies {
            digest: Some(5),
            ..Lies::default()
        },
        Lies {
            corrupt: Some(5),
            ..Lies::default()
        },
    ] {
        let (dir, src, _) = file_of(100_000);
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let e = send_file(&src, &out, 4096, 4, lies).unwrap_err();
        assert_eq!(e.reason(), Some(Reason::HashMismatch), "{e}");
        assert!(
            matches!(&e, Error::Verification { file, chunk: Some(5), .. } if file == "f.bin"),
            "{e:?}"
        );
        assert!(e.to_string().contains("chunk 5"), "{e}");
        assert!(!out.join("f.bin").exists());
    }
}

/// The sender's bytes of a 10-chunk part (4096-byte chunks, the last 3996).
const PART: usize = 10 * 4096 - 100;

fn chunk_of(data: &[u8], k: u64) -> &[u8] {
    let c = &data[k as usize * 4096..];
    &c[..c.len().min(4096)]
}

/// The part of [`after`] after its data, DIGESTS and FIN, where chunks `bad` were written
/// corrupted: its plan, its receiver, the digests of what was written and the sender's bytes.
fn finished_with_bad(bad: &[u64]) -> (ChunkPlan, PartReceiver, Chunks, Vec<u8>) {
    let (plan, mut rx) = after(10);
    let data: Vec<u8> = (0..PART).map(|i| (i / 7) as u8).collect();
    let ours = Chunks::new(Layout::new(Algo::Blake3, 4096, PART as u64).unwrap());
    let mut theirs = Vec::new();
    for k in 0..10u64 {
        let mut c = chunk_of(&data, k).to_vec();
        theirs.push(chunk_digest(Algo::Blake3, &c));
        if bad.contains(&k) {
            c[0] ^= 1;
        }
        ours.hash(k, &c).unwrap();
    }
    let msg = Msg::Digests(Digests {
        algo: Algo::Blake3,
        first: 0,
        digests: theirs,
    });
    let Tail::Digests { first, digests } = rx.on_control(msg, "HELLO").unwrap() else {
        panic!("DIGESTS")
    };
    assert_eq!(rx.compare(&ours, first, &digests), bad.first().copied());
    assert_eq!(
        rx.on_control(fin(PART as u64), "HELLO").unwrap(),
        Tail::Fin([3; 32])
    );
    (plan, rx, ours, data)
}

fn fin(bytes: u64) -> Msg {
    Msg::Fin {
        bytes,
        hash: [3; 32],
    }
}

/// The chunks of `plan` written again (after a REPAIR of them), as the sender does: where they
/// arrive.
fn write_again(plan: &ChunkPlan, rx: &mut PartReceiver, chunks: &[u64]) -> Vec<Arrival> {
    let again = plan.again(chunks.to_vec());
    (0..again.len())
        .map(|i| {
            let len = (PART as u64 - again.chunk_at(i) * 4096).min(4096) as u32;
            rx.on_data(again.write_at(i).imm, len, "f").unwrap()
        })
        .collect()
}

fn repair(round: u16, chunks: &[u64]) -> AfterFin {
    AfterFin::Repair(Msg::Repair(Repair {
        round,
        chunks: chunks.to_vec(),
    }))
}

#[test]
fn a_repair_round_takes_the_chunks_asked_for_in_order_in_the_next_slots() {
    let (plan, mut rx, ours, data) = finished_with_bad(&[3, 9]);
    let mut tx = Repairs::new(&plan);
    let asked = rx.after_fin(&ours).unwrap();
    assert_eq!(asked, repair(1, &[3, 9]));
    assert!(rx.wants_data());
    assert_eq!((rx.due_chunks(), rx.due_bytes()), (2, 4096 + 3996));
    // The sender takes it; its writes go on from the tenth: slots 2 and 3 of the ring.
    let AfterFin::Repair(msg) = asked else {
        unreachable!()
    };
    assert_eq!(tx.after_fin(msg).unwrap(), SendAfterFin::Again(vec![3, 9]));
    let at = write_again(&plan, &mut rx, &[3, 9]);
    let got: Vec<_> = at
        .iter()
        .map(|a| (a.chunk, a.ring_offset, a.len, a.again))
        .collect();
    assert_eq!(got, [(3, 2 * 4096, 4096, true), (9, 3 * 4096, 3996, true)]);
    // Nothing but FIN, the first one's, after them.
    fn err<T: std::fmt::Debug>(r: Result<T, Error>) -> String {
        r.unwrap_err().to_string()
    }
    assert!(err(rx.after_fin(&ours)).contains("before its FIN"));
    assert!(err(rx.on_data(plan.write_at(12).imm, 4096, "f")).contains("after the part"));
    let mut other = rx.clone();
    assert!(err(other.on_control(fin(1), "HELLO")).contains("differs from the first FIN"));
    let mut other = rx.clone();
    let d = Msg::Digests(Digests {
        algo: Algo::Blake3,
        first: 0,
        digests: vec![chunk_digest(Algo::Blake3, b"x")],
    });
    assert!(err(other.on_control(d, "HELLO")).contains("expected FIN after the chunks"));
    // Written right this time: commit, two chunks repaired on both sides.
    for k in [3, 9] {
        ours.rehash(k, chunk_of(&data, k)).unwrap();
    }
    assert_eq!(
        rx.on_control(fin(PART as u64), "HELLO").unwrap(),
        Tail::Fin([3; 32])
    );
    assert_eq!(rx.after_fin(&ours).unwrap(), AfterFin::Commit);
    assert_eq!((rx.repaired(), tx.repaired()), (2, 2));
    assert!(err(rx.on_control(fin(PART as u64), "HELLO")).contains("after FIN"));
    let ack = Msg::Ack {
        status: Reason::Ok,
        message: String::new(),
    };
    assert_eq!(
        tx.after_fin(ack).unwrap(),
        SendAfterFin::Verdict(Verdict::Delivered)
    );
}

#[test]
fn a_sender_that_sends_the_wrong_chunk_in_repair_gets_another_round_or_an_error() {
    let (plan, mut rx, ours, data) = finished_with_bad(&[3, 7]);
    assert_eq!(rx.after_fin(&ours).unwrap(), repair(1, &[3, 7]));
    // Sequence numbers that start over (not continued) are refused as a transport fault.
    let mut other = rx.clone();
    let e = other.on_data(plan.write_at(0).imm, 4096, "f").unwrap_err();
    assert!(e.to_string().contains("out of order"), "{e}");
    // Chunk 4's bytes in place of chunk 3 (same length, slot and sequence number): its digest
    // still differs, so the next round asks for chunk 3 alone.
    write_again(&plan, &mut rx, &[3, 7]);
    ours.rehash(3, chunk_of(&data, 4)).unwrap();
    ours.rehash(7, chunk_of(&data, 7)).unwrap();
    rx.on_control(fin(PART as u64), "HELLO").unwrap();
    assert_eq!(rx.after_fin(&ours).unwrap(), repair(2, &[3]));
    // The sender refuses a REPAIR that skips a round, or names a chunk it did not send.
    let mut tx = Repairs::new(&plan);
    let ask = |round, chunks: &[u64]| {
        Msg::Repair(Repair {
            round,
            chunks: chunks.to_vec(),
        })
    };
    assert!(tx
        .after_fin(ask(2, &[3]))
        .unwrap_err()
        .to_string()
        .contains("round 2 after round 0"));
    assert!(tx
        .after_fin(ask(1, &[10]))
        .unwrap_err()
        .to_string()
        .contains("not among"));
    let resumed = Repairs::new(&ChunkPlan::new(&grant(4096, 4, 8192), PART as u64, 2));
    let mut resumed = resumed;
    assert!(resumed
        .after_fin(ask(1, &[1]))
        .unwrap_err()
        .to_string()
        .contains("chunk 1"));
    assert!(tx.after_fin(Msg::Done).is_err());
}

#[test]
fn a_chunk_bad_after_every_round_or_too_many_chunks_fail_the_part() {
    let (plan, mut rx, ours, _) = finished_with_bad(&[5]);
    let mut tx = Repairs::new(&plan);
    let mut p = plan.clone();
    for round in 1..=MAX_REPAIR_ROUNDS {
        let AfterFin::Repair(msg) = rx.after_fin(&ours).unwrap() else {
            panic!("round {round}")
        };
        assert_eq!(tx.after_fin(msg).unwrap(), SendAfterFin::Again(vec![5]));
        write_again(&p, &mut rx, &[5]);
        p = p.again(vec![5]);
        rx.on_control(fin(PART as u64), "HELLO").unwrap();
    }
    let AfterFin::Fail(m) = rx.after_fin(&ours).unwrap() else {
        panic!("no round left")
    };
    assert_eq!(
        (m.chunk, m.rounds, Some(m.ours.unwrap())),
        (5, 3, ours.get(5))
    );
    assert_ne!(Some(m.theirs), ours.get(5));
    // More chunks than a REPAIR may list: no repair at all.
    let size = 100 * 4096;
    let mut rx = PartReceiver::new(4096, 4, 0, size, Algo::Xxh3).unwrap();
    let plan = ChunkPlan::new(&grant(4096, 4, 0), size, 0);
    for k in plan.chunks() {
        rx.on_data(plan.write(k).imm, 4096, "f").unwrap();
    }
    let bad: Vec<u64> = (0..=MAX_REPAIR_CHUNKS as u64).collect();
    let AfterFin::Fail(m) = xxh3_verdict(&mut rx, 100, &bad) else {
        panic!("too many to repair")
    };
    assert_eq!((m.chunk, m.rounds), (0, 0));
}

/// The verdict on an XXH3 part of `n` 4096-byte chunks (chunk `k` all bytes `k`) whose data
/// has arrived, with the sender's digests of chunks `bad` differing.
fn xxh3_verdict(rx: &mut PartReceiver, n: u64, bad: &[u64]) -> AfterFin {
    verdict_of(rx, Layout::new(Algo::Xxh3, 4096, n * 4096).unwrap(), bad)
}

/// The verdict on a part cut as `layout` (chunk `k` all bytes `k`) whose data has arrived,
/// with the sender's digests of chunks `bad` differing.
fn verdict_of(rx: &mut PartReceiver, layout: Layout, bad: &[u64]) -> AfterFin {
    let ours = Chunks::new(layout);
    let theirs: Vec<_> = (0..layout.chunks())
        .map(|k| {
            let len = layout.range(k).unwrap().1;
            ours.hash(k, &vec![k as u8; len]).unwrap();
            let lie = bad.contains(&k).then_some(&b"lie"[..]);
            chunk_digest(layout.algo, lie.unwrap_or(&vec![k as u8; len]))
        })
        .collect();
    for (i, batch) in theirs.chunks(MAX_DIGESTS).enumerate() {
        let d = Msg::Digests(Digests {
            algo: layout.algo,
            first: (i * MAX_DIGESTS) as u64,
            digests: batch.to_vec(),
        });
        let Tail::Digests { first, digests } = rx.on_control(d, "HELLO").unwrap() else {
            panic!("DIGESTS")
        };
        rx.compare(&ours, first, &digests);
    }
    let fin = Msg::Fin {
        bytes: layout.size,
        hash: [0; 32],
    };
    rx.on_control(fin, "HELLO").unwrap();
    rx.after_fin(&ours).unwrap()
}

#[test]
fn a_chunk_held_from_an_earlier_attempt_is_never_asked_for_again() {
    // Held: chunks 0 and 1; chunk 0's digest differs (the resume digest would have caught it).
    let mut rx = PartReceiver::new(4096, 4, 8192, 4 * 4096, Algo::Xxh3).unwrap();
    let plan = ChunkPlan::new(&grant(4096, 4, 8192), 4 * 4096, 2);
    for k in plan.chunks() {
        rx.on_data(plan.write(k).imm, 4096, "f").unwrap();
    }
    let AfterFin::Fail(m) = xxh3_verdict(&mut rx, 4, &[0]) else {
        panic!("a held chunk is not repaired")
    };
    assert_eq!((m.chunk, m.theirs), (0, chunk_digest(Algo::Xxh3, b"lie")));
}

#[test]
fn the_last_short_chunk_of_a_part_held_whole_is_never_asked_for_again() {
    // Found by the fuzz target file_part: 20000 bytes in 7712-byte slots, all held; the short
    // chunk 2 was counted as not held, and a lying DIGESTS got it into a REPAIR.
    let (slot, size) = (7712u64, 20_000u64);
    let mut rx = PartReceiver::new(slot as u32, 3, size, size, Algo::Xxh3).unwrap();
    let layout = Layout::new(Algo::Xxh3, slot, size).unwrap();
    let AfterFin::Fail(m) = verdict_of(&mut rx, layout, &[2]) else {
        panic!("a held chunk is not repaired")
    };
    assert_eq!(m.chunk, 2);
}
