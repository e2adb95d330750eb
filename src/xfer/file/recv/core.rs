//! The receiver's protocol core for one part (a whole file, or one stripe of it) after its MR
//! went out, without I/O: what each arrival means. The driver (`data`, `file`, `stripe`) posts,
//! polls, copies and writes; it feeds [`PartReceiver`] each data chunk's immediate and length,
//! then each control message, and does what the answer says.
//!
//! The part's data comes first: chunk after chunk in order (`seq` counts them modulo 2^16 from
//! the first one sent, which is chunk `held / slot size` of the part), the n-th one sent into
//! slot `n mod slots` and exactly as long as the part leaves for it. Then DIGESTS, in order from
//! chunk 0, up to FIN, whose byte count must be the part's.
//!
//! Chunk repair: the driver hands each DIGESTS batch to [`PartReceiver::compare`] with the
//! digests of what it wrote, and after FIN asks [`PartReceiver::after_fin`] what to do: commit,
//! fail, or send REPAIR. After a REPAIR the listed chunks are due, in order, continuing the
//! sequence numbers and slots, then FIN again (same size and digest); then `after_fin` again.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::xfer::file::ctl::peer_err;
use crate::xfer::file::digest::Chunks;
use crate::xfer::file::fault;
use crate::xfer::file::proto::{
    self, Algo, ChunkDigest, Digest, Msg, Repair, MAX_REPAIR_CHUNKS, MAX_REPAIR_ROUNDS,
};

/// Where a part is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Data chunks due (the first time).
    Data,
    /// DIGESTS up to FIN.
    Tail,
    /// FIN seen: the verdict ([`PartReceiver::after_fin`]) is due.
    Fin,
    /// After REPAIR: the chunks asked for are due.
    Again,
    /// After the chunks of a REPAIR: FIN again.
    AgainFin,
    /// Decided: nothing more is taken.
    Done,
}

/// What the receiver does after FIN (see [`PartReceiver::after_fin`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AfterFin {
    /// Every chunk matches the sender's digest: commit (the file digest is still checked).
    Commit,
    /// Send this REPAIR, then receive its chunks and FIN again.
    Repair(Msg),
    /// A chunk still differs and no repair is left (rounds spent, too many chunks, or a chunk
    /// held from an earlier attempt): the part fails, naming it.
    Fail(Mismatch),
}

/// A chunk whose digest differs from the sender's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Mismatch {
    /// The first such chunk (of the part).
    pub chunk: u64,
    /// The digest of what was received (none if it was not).
    pub ours: Option<ChunkDigest>,
    /// The sender's.
    pub theirs: ChunkDigest,
    /// Repair rounds tried.
    pub rounds: u16,
}

/// One part's data and tail as the receiver expects them.
#[derive(Clone, Debug)]
pub struct PartReceiver {
    slot_size: u64,
    slot_count: u32,
    size: u64,
    /// The next byte expected (from the part's start).
    offset: u64,
    /// The next chunk expected (from the part's start).
    chunk: u64,
    /// Its sequence number.
    seq: u16,
    /// The slot it goes to.
    slot: u32,
    algo: Algo,
    /// The next chunk DIGESTS must start at.
    digests_next: u64,
    phase: Phase,
    /// Chunks held from an earlier attempt (verified by the resume digest; never repaired).
    held_chunks: u64,
    /// The sender's digests of chunks that differ, lowest first; at most one more than
    /// [`MAX_REPAIR_CHUNKS`] (more means no repair).
    bad: BTreeMap<u64, ChunkDigest>,
    /// Repair rounds asked for.
    round: u16,
    /// The chunks of the current round, and how many of them arrived.
    again: Vec<u64>,
    again_next: usize,
    /// The first FIN's digest: every later FIN must repeat it.
    fin: Option<Digest>,
    /// Chunks the first REPAIR asked for (all repaired once the part commits).
    repaired: u64,
}

/// A data chunk that arrived as expected: where it is in the ring and in the part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Arrival {
    /// The chunk's index in the part.
    pub chunk: u64,
    /// Where its bytes start in the ring.
    pub ring_offset: usize,
    /// Its length.
    pub len: usize,
    /// Sent again, after a REPAIR: it replaces what was written.
    pub again: bool,
}

/// What a control message after the data means.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Tail {
    /// The sender's digests of chunks `first..first + digests.len()`, to compare.
    Digests {
        /// The first chunk they cover.
        first: u64,
        /// One per chunk, in order.
        digests: Vec<ChunkDigest>,
    },
    /// FIN: the sender's digest of the whole part; the verdict is due.
    Fin(Digest),
}

impl PartReceiver {
    /// The data of a part of `size` bytes through a ring of `slot_count` slots of `slot_size`
    /// bytes, of which the receiver holds the first `held` bytes (whole slots, or all), hashed
    /// by `algo`.
    pub fn new(
        slot_size: u32,
        slot_count: u32,
        held: u64,
        size: u64,
        algo: Algo,
    ) -> Result<PartReceiver> {
        let slot = u64::from(slot_size);
        if slot == 0 || slot_count == 0 || slot_count > proto::IMM_SLOTS || held > size {
            return Err(Error::InvalidArgument(format!(
                "a part of {size} bytes from byte {held} through {slot_count} slots of {slot} bytes"
            )));
        }
        if held < size && held % slot != 0 {
            return Err(Error::InvalidArgument(format!(
                "a resume point of {held} bytes is not a whole number of {slot}-byte slots"
            )));
        }
        Ok(PartReceiver {
            slot_size: slot,
            slot_count,
            size,
            offset: held,
            chunk: held / slot,
            seq: 0,
            slot: 0,
            algo,
            digests_next: 0,
            phase: Phase::Data,
            // All of a part held whole counts its last, shorter chunk too.
            held_chunks: held.div_ceil(slot),
            bad: BTreeMap::new(),
            round: 0,
            again: Vec::new(),
            again_next: 0,
            fin: None,
            repaired: 0,
        })
    }

    /// True while data chunks are due (the part's, or those a REPAIR asked for).
    pub fn wants_data(&self) -> bool {
        match self.phase {
            Phase::Data => self.offset < self.size,
            Phase::Again => self.again_next < self.again.len(),
            _ => false,
        }
    }

    /// Data chunks still due.
    pub fn due_chunks(&self) -> u64 {
        match self.phase {
            Phase::Data => (self.size - self.offset).div_ceil(self.slot_size),
            Phase::Again => (self.again.len() - self.again_next) as u64,
            _ => 0,
        }
    }

    /// Bytes of the data chunks still due.
    pub fn due_bytes(&self) -> u64 {
        match self.phase {
            Phase::Data => self.size - self.offset,
            Phase::Again => self.again[self.again_next..]
                .iter()
                .map(|&k| self.chunk_len(k) as u64)
                .sum(),
            _ => 0,
        }
    }

    /// Chunks repaired: those the first REPAIR asked for (all of them verified once
    /// [`after_fin`](Self::after_fin) says commit).
    pub fn repaired(&self) -> u64 {
        self.repaired
    }

    /// Repair rounds asked for so far.
    pub fn rounds(&self) -> u16 {
        self.round
    }

    /// The part's size.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The sequence number of the next data chunk (for errors about it).
    pub fn next_seq(&self) -> u64 {
        u64::from(self.seq)
    }

    /// Bytes of the part received so far (with those held before).
    pub fn received(&self) -> u64 {
        self.offset
    }

    /// A data chunk arrived with immediate `imm` and `len` bytes: where it is, or why it is not
    /// the chunk the sender posted next (`label` names the part).
    pub fn on_data(&mut self, imm: u32, len: u32, label: &str) -> Result<Arrival> {
        if !self.wants_data() {
            return Err(Error::Protocol(format!(
                "{label}: a data chunk arrived after the part's {} bytes",
                self.size
            )));
        }
        let (chunk, want) = match self.phase {
            Phase::Again => {
                let k = self.again[self.again_next];
                (k, self.chunk_len(k))
            }
            _ => (
                self.chunk,
                (self.size - self.offset).min(self.slot_size) as usize,
            ),
        };
        let imm = proto::decode_chunk_imm(imm, self.slot_count)?;
        if imm.seq != self.seq {
            return Err(fault::out_of_sequence(
                label, imm.seq, len, imm.slot, self.seq,
            ));
        }
        if len as usize != want {
            return Err(fault::wrong_length(label, self.seq, len, want));
        }
        if u32::from(imm.slot) != self.slot {
            return Err(Error::Protocol(format!(
                "{label}: data chunk {} was written into slot {} where slot {} was granted for it",
                self.seq, imm.slot, self.slot
            )));
        }
        let at = Arrival {
            chunk,
            ring_offset: (u64::from(imm.slot) * self.slot_size) as usize,
            len: want,
            again: self.phase == Phase::Again,
        };
        if at.again {
            self.again_next += 1;
            if self.again_next == self.again.len() {
                self.phase = Phase::AgainFin;
            }
        } else {
            self.offset += want as u64;
            self.chunk += 1;
            if self.offset == self.size {
                self.phase = Phase::Tail;
            }
        }
        self.seq = self.seq.wrapping_add(1);
        self.slot = (self.slot + 1) % self.slot_count;
        Ok(at)
    }

    /// What a control message that arrives while data chunks are due means: always an error
    /// (the sender's own ERR, or a protocol violation).
    pub fn control_during_data(&self, msg: Result<Msg>) -> Error {
        match msg {
            Ok(Msg::Err { reason, message }) => peer_err(reason, &message),
            Ok(m) => Error::Protocol(format!("expected a data chunk, got {m:?}")),
            Err(e) => e,
        }
    }

    /// A control message after the data: DIGESTS (in order, by the part's algorithm, within
    /// its chunks) or FIN (with the part's byte count). `what` names the part for errors ("HELLO"
    /// or "STRIPE", whichever announced its size).
    pub fn on_control(&mut self, msg: Msg, what: &str) -> Result<Tail> {
        if self.phase == Phase::Data && self.offset == self.size {
            // An empty part (or one held whole) has no data: its tail comes at once.
            self.phase = Phase::Tail;
        }
        let why = match self.phase {
            Phase::Data | Phase::Again => "before the part's data",
            Phase::Fin | Phase::Done => "after FIN",
            Phase::Tail | Phase::AgainFin => "",
        };
        if !why.is_empty() {
            return Err(Error::Protocol(format!("a control message {why}: {msg:?}")));
        }
        if self.phase == Phase::AgainFin {
            return match msg {
                Msg::Fin { bytes, hash } if bytes == self.size && Some(hash) == self.fin => {
                    self.phase = Phase::Fin;
                    Ok(Tail::Fin(hash))
                }
                Msg::Fin { .. } => Err(Error::Protocol(
                    "FIN after the chunks sent again differs from the first FIN".into(),
                )),
                Msg::Err { reason, message } => Err(peer_err(reason, &message)),
                m => Err(Error::Protocol(format!(
                    "expected FIN after the chunks sent again, got {m:?}"
                ))),
            };
        }
        match msg {
            Msg::Digests(d) if d.algo != self.algo => Err(Error::Protocol(format!(
                "DIGESTS by {}, HELLO asked for {}",
                d.algo, self.algo
            ))),
            Msg::Digests(d) => {
                if d.first != self.digests_next {
                    return Err(Error::Protocol(format!(
                        "DIGESTS from chunk {}, expected chunk {}",
                        d.first, self.digests_next
                    )));
                }
                let end = d.first.saturating_add(d.digests.len() as u64);
                let chunks = self.size.div_ceil(self.slot_size);
                if end > chunks {
                    return Err(Error::Protocol(format!(
                        "DIGESTS up to chunk {end} of a part of {chunks} chunks"
                    )));
                }
                self.digests_next = end;
                Ok(Tail::Digests {
                    first: d.first,
                    digests: d.digests,
                })
            }
            Msg::Fin { bytes, hash } if bytes == self.size => {
                self.phase = Phase::Fin;
                self.fin = Some(hash);
                Ok(Tail::Fin(hash))
            }
            Msg::Fin { bytes, .. } => Err(Error::Protocol(format!(
                "FIN announces {bytes} bytes, {what} announced {}",
                self.size
            ))),
            Msg::Err { reason, message } => Err(peer_err(reason, &message)),
            m => Err(Error::Protocol(format!("expected FIN, got {m:?}"))),
        }
    }

    /// The length of chunk `k` of the part.
    fn chunk_len(&self, k: u64) -> usize {
        let off = k.saturating_mul(self.slot_size);
        self.size.saturating_sub(off).min(self.slot_size) as usize
    }

    /// Compares a DIGESTS batch (`theirs`, of chunks `first ..`, as [`on_control`] returned
    /// it) with `ours`, the digests of what was written, and remembers the chunks that differ
    /// (at most one more than a REPAIR can ask for). Returns the first that differs.
    ///
    /// [`on_control`]: Self::on_control
    pub fn compare(&mut self, ours: &Chunks, first: u64, theirs: &[ChunkDigest]) -> Option<u64> {
        let mut found = None;
        for (i, d) in (first..).zip(theirs) {
            if ours.get(i) != Some(*d) {
                found = found.or(Some(i));
                if self.bad.len() <= MAX_REPAIR_CHUNKS {
                    self.bad.insert(i, *d);
                }
            }
        }
        found
    }

    /// After FIN (its digest in hand; a write error decides before this): what `ours`, the
    /// digests of what was written, says. The chunks that differed and now match are dropped;
    /// none left is [`AfterFin::Commit`]. Some left get a REPAIR while rounds are left
    /// ([`MAX_REPAIR_ROUNDS`]), they are at most [`MAX_REPAIR_CHUNKS`] and none was held from
    /// an earlier attempt; else [`AfterFin::Fail`] naming the first.
    pub fn after_fin(&mut self, ours: &Chunks) -> Result<AfterFin> {
        if self.phase != Phase::Fin {
            return Err(Error::InvalidArgument(format!(
                "the verdict on a part before its FIN ({:?})",
                self.phase
            )));
        }
        self.bad.retain(|&i, d| ours.get(i) != Some(*d));
        let Some((&chunk, &theirs)) = self.bad.iter().next() else {
            self.phase = Phase::Done;
            return Ok(AfterFin::Commit);
        };
        let repairable = self.round < MAX_REPAIR_ROUNDS
            && self.bad.len() <= MAX_REPAIR_CHUNKS
            && chunk >= self.held_chunks;
        if !repairable {
            self.phase = Phase::Done;
            return Ok(AfterFin::Fail(Mismatch {
                chunk,
                ours: ours.get(chunk),
                theirs,
                rounds: self.round,
            }));
        }
        self.round += 1;
        self.again = self.bad.keys().copied().collect();
        self.again_next = 0;
        if self.round == 1 {
            self.repaired = self.again.len() as u64;
        }
        self.phase = Phase::Again;
        Ok(AfterFin::Repair(Msg::Repair(Repair {
            round: self.round,
            chunks: self.again.clone(),
        })))
    }
}
