//! Both protocol cores against each other, in one process and without a device: the sender's
//! [`ChunkPlan`] feeds the receiver's [`PartReceiver`] through a ring in memory, and whole files
//! go from a [`Source`] to a [`Sink`] that way (resume, a lying DIGESTS, a corrupted chunk).

use proptest::prelude::*;

use super::ctl::PEER_REPORTS;
use super::proto::{Algo, Digests, Msg, Reason, RingGrant, SkipWhy, MAX_DIGESTS};
use super::recv::core::{PartReceiver, Tail};
use super::recv::sink::{Sink, SinkOptions};
use super::send::core::{check_grant, Answer, Asked, ChunkPlan, Verdict};
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
