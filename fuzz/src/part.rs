//! The fuzz check of the receiver's protocol core for one part (`PartReceiver`), chunk repair
//! included, and its seeds.

use rdmaxfer::xfer::file::digest::{self, Chunks, Layout};
use rdmaxfer::xfer::file::proto;
use rdmaxfer::xfer::file::recv::core::{AfterFin, PartReceiver, Tail};

use super::{u32_at, u64_at};

/// The receiver's protocol core for one part, fed what a peer (or a faulty transport) may send:
/// bytes 0..14 choose the part (slot size, slot count, size, resume point); then events, each a
/// tag byte: 0 a data chunk (immediate u32, length u32), 1 a control message (u16 length, then
/// that many bytes through the decoder), 2 the next chunk exactly as the sender would write it
/// (after a REPAIR: the next chunk it asked for), 3 a FIN of the part's size, 4 the sender's
/// DIGESTS of the next chunks (up to 8; a byte: bit j set, chunk j's digest differs from what
/// was written), 5 the verdict after FIN (commit, REPAIR or fail). What the core accepts is
/// consistent: each arrival is the next chunk (or the next one a REPAIR listed), inside the
/// ring, as long as the part leaves for it; FIN only after all the data; a REPAIR lists at most
/// 64 chunks of the part that were sent and differ, in at most 3 rounds; nothing after the
/// verdict.
pub fn check_file_part(data: &[u8]) {
    let slot_size = (u32_at(data, 0) >> 16).max(1) * 16;
    let slot_count = (u32_at(data, 2) >> 24).max(1);
    let size = u64_at(data, 4) >> 40;
    let held_chunks = u64::from(data.get(12).copied().unwrap_or(0));
    let algo = if data.get(13).is_some_and(|b| b & 1 == 1) {
        proto::Algo::Blake3
    } else {
        proto::Algo::Xxh3
    };
    let slot = u64::from(slot_size);
    let held = (held_chunks * slot).min(size);
    let Ok(mut rx) = PartReceiver::new(slot_size, slot_count, held, size, algo) else {
        return;
    };
    let Ok(layout) = Layout::new(algo, slot, size) else {
        return;
    };
    // What the receiver wrote: a made-up digest per chunk as it arrives, the digest of zeros
    // (what the sender's digest of a differing chunk is here) once written again.
    let ours = Chunks::new(layout);
    let made_up = |k: u64| {
        let b = [(k as u8) ^ 0x5a; proto::MAX_CHUNK_DIGEST];
        proto::ChunkDigest::from_bytes(algo, &b[..algo.digest_len()]).expect("its length")
    };
    let len_of = |k: u64| layout.range(k).map_or(0, |r| r.1);
    let zeros = |k: u64| digest::chunk_digest(algo, &vec![0u8; len_of(k)]);
    for k in 0..held.div_ceil(slot) {
        ours.record(k, made_up(k)).expect("new");
    }
    let ring = slot * u64::from(slot_count);
    let (mut next_chunk, mut received, mut finished) = (held / slot, held, false);
    let (mut sent_by_plan, mut digests_next, mut rounds) = (0u64, 0u64, 0u16);
    let mut again: std::collections::VecDeque<u64> = Default::default();
    let mut theirs = std::collections::BTreeMap::new();
    let mut i = 14;
    while i < data.len() {
        let tag = data[i] % 6;
        i += 1;
        match tag {
            0 | 2 => {
                let due = if again.is_empty() {
                    (size - received).min(slot)
                } else {
                    len_of(again[0]) as u64
                };
                let (imm, len) = if tag == 0 {
                    (u32_at(data, i), u32_at(data, i + 4) >> 8)
                } else {
                    let n = sent_by_plan;
                    let slot_index = (n % u64::from(slot_count)) as u16;
                    let imm = proto::encode_chunk_imm(proto::Imm {
                        slot: slot_index,
                        seq: n as u16,
                    });
                    (imm, due as u32)
                };
                if tag == 0 {
                    i += 8;
                }
                let own = tag == 2 && rx.wants_data();
                match rx.on_data(imm, len, "fuzz") {
                    Ok(at) => {
                        assert!(!finished, "data accepted after FIN");
                        assert_eq!(at.len as u64, due);
                        assert_eq!(at.len as u32, len);
                        assert!(at.ring_offset as u64 + at.len as u64 <= ring);
                        sent_by_plan += 1;
                        if at.again {
                            assert_eq!(Some(at.chunk), again.pop_front());
                            ours.rehash(at.chunk, &vec![0u8; at.len]).expect("received");
                        } else {
                            assert!(again.is_empty(), "a first send during a repair");
                            assert_eq!(at.chunk, next_chunk);
                            ours.record(at.chunk, made_up(at.chunk)).expect("new");
                            next_chunk += 1;
                            received += at.len as u64;
                            assert_eq!(rx.received(), received);
                        }
                    }
                    Err(_) => {
                        assert!(!own, "the sender's own next chunk refused");
                        return;
                    }
                }
            }
            1 | 3 | 4 => {
                let msg = match tag {
                    3 => proto::Msg::Fin {
                        bytes: size,
                        hash: [0; 32],
                    },
                    4 => {
                        let lies = data.get(i).copied().unwrap_or(0);
                        i += 1;
                        let end = layout.chunks().min(digests_next + 8);
                        let digests: Vec<_> = (digests_next..end)
                            .map(|k| match lies >> (k - digests_next) & 1 {
                                1 => zeros(k),
                                _ => ours.get(k).unwrap_or_else(|| zeros(k)),
                            })
                            .collect();
                        if digests.is_empty() {
                            continue;
                        }
                        proto::Msg::Digests(proto::Digests {
                            algo,
                            first: digests_next,
                            digests,
                        })
                    }
                    _ => {
                        let len = (u32_at(data, i) >> 16) as usize;
                        let body = data
                            .get(i + 2..(i + 2 + len).min(data.len()))
                            .unwrap_or(&[]);
                        i += 2 + len;
                        match proto::decode(body) {
                            Ok(m) => m,
                            Err(_) => continue,
                        }
                    }
                };
                if rx.wants_data() {
                    assert!(rx.on_control(msg.clone(), "HELLO").is_err());
                    let _ = rx.control_during_data(Ok(msg));
                    return;
                }
                match rx.on_control(msg, "HELLO") {
                    Ok(Tail::Fin(_)) => {
                        assert!(!finished, "a second FIN accepted");
                        assert_eq!(received, size);
                        assert!(again.is_empty());
                        finished = true;
                    }
                    Ok(Tail::Digests { first, digests }) => {
                        assert!(!finished, "DIGESTS accepted after FIN");
                        assert_eq!(first, digests_next);
                        digests_next = first + digests.len() as u64;
                        assert!(digests_next <= size.div_ceil(slot));
                        rx.compare(&ours, first, &digests);
                        theirs.extend((first..).zip(digests));
                    }
                    Ok(_) => {}
                    Err(_) => return,
                }
            }
            5 => match rx.after_fin(&ours) {
                Ok(AfterFin::Repair(msg)) => {
                    assert!(finished, "a verdict before FIN");
                    let b = proto::encode(&msg);
                    assert_eq!(proto::decode(&b).expect("a valid REPAIR"), msg);
                    let proto::Msg::Repair(r) = msg else {
                        panic!("REPAIR is a Msg::Repair")
                    };
                    rounds += 1;
                    assert_eq!(r.round, rounds);
                    for &k in &r.chunks {
                        let sent = held.div_ceil(slot)..next_chunk;
                        assert!(sent.contains(&k), "chunk {k} not sent");
                        assert_ne!(ours.get(k), theirs.get(&k).copied(), "chunk {k} matches");
                    }
                    again = r.chunks.into();
                    finished = false;
                }
                Ok(AfterFin::Fail(m)) => {
                    assert!(finished && m.rounds <= proto::MAX_REPAIR_ROUNDS);
                    return;
                }
                Ok(_) => {
                    assert!(finished, "a verdict before FIN");
                    return;
                }
                Err(_) => assert!(!finished, "no verdict after FIN"),
            },
            _ => unreachable!("tag is below 6"),
        }
    }
}

/// Seeds of `file_part`.
pub(super) fn seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut out = Vec::new();
    // A part of 5 chunks of 4 KiB through 3 slots: the sender's chunks, DIGESTS, FIN; the
    // same resumed after 2 chunks; and a replayed chunk.
    let part = |held: u8, events: &[u8]| {
        let mut b = 256u16.to_be_bytes().to_vec();
        b.extend_from_slice(&[3, 0]);
        b.extend_from_slice(&20_000u32.to_be_bytes()[1..]);
        b.extend_from_slice(&[0, 0, 0, 0, 0, held, 1]);
        b.extend_from_slice(events);
        b
    };
    let d = proto::encode(&proto::Msg::Digests(proto::Digests {
        algo: proto::Algo::Blake3,
        first: 0,
        digests: vec![rdmaxfer::xfer::file::digest::chunk_digest(proto::Algo::Blake3, b"x"); 5],
    }));
    let mut whole = vec![2, 2, 2, 2, 2, 1];
    whole.extend_from_slice(&(d.len() as u16).to_be_bytes());
    whole.extend_from_slice(&d);
    whole.push(3);
    out.push(("file_part", "whole".into(), part(0, &whole)));
    out.push(("file_part", "resumed".into(), part(2, &[2, 2, 2, 3])));
    let replay = proto::encode_chunk_imm(proto::Imm { slot: 0, seq: 0 });
    let mut replayed = vec![2, 2, 0];
    replayed.extend_from_slice(&replay.to_be_bytes());
    replayed.extend_from_slice(&(4096u32 << 8).to_be_bytes());
    out.push(("file_part", "replayed".into(), part(0, &replayed)));
    // The same 5 chunks with chunks 1 and 3 differing from the sender's digests: REPAIR of
    // both, written again, FIN, commit; and a chunk that differs in every round.
    let tail = |lies: u8| vec![2, 2, 2, 2, 2, 4, lies, 3, 5];
    let mut repaired = tail(0b01010);
    repaired.extend_from_slice(&[2, 2, 3, 5]);
    out.push(("file_part", "repaired".into(), part(0, &repaired)));
    let mut spent = vec![2, 2, 2, 2, 2, 1];
    let lie = proto::encode(&proto::Msg::Digests(proto::Digests {
        algo: proto::Algo::Blake3,
        first: 0,
        digests: vec![rdmaxfer::xfer::file::digest::chunk_digest(proto::Algo::Blake3, b"x"); 5],
    }));
    spent.extend_from_slice(&(lie.len() as u16).to_be_bytes());
    spent.extend_from_slice(&lie);
    spent.extend_from_slice(&[3, 5]);
    for _ in 0..proto::MAX_REPAIR_ROUNDS {
        spent.extend_from_slice(&[2, 2, 2, 2, 2, 3, 5]);
    }
    out.push(("file_part", "spent".into(), part(0, &spent)));
    out
}
