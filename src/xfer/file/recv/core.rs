//! The receiver's protocol core for one part (a whole file, or one stripe of it) after its MR
//! went out, without I/O: what each arrival means. The driver (`data`, `file`, `stripe`) posts,
//! polls, copies and writes; it feeds [`PartReceiver`] each data chunk's immediate and length,
//! then each control message, and does what the answer says.
//!
//! The part's data comes first: chunk after chunk in order (`seq` counts them modulo 2^16 from
//! the first one sent, which is chunk `held / slot size` of the part), the n-th one sent into
//! slot `n mod slots` and exactly as long as the part leaves for it. Then DIGESTS, in order from
//! chunk 0, up to FIN, whose byte count must be the part's.

use crate::error::{Error, Result};
use crate::xfer::file::ctl::peer_err;
use crate::xfer::file::fault;
use crate::xfer::file::proto::{self, Algo, ChunkDigest, Digest, Msg};

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
    /// FIN was seen: nothing more is taken.
    finished: bool,
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
            finished: false,
        })
    }

    /// True while data chunks are due.
    pub fn wants_data(&self) -> bool {
        self.offset < self.size
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
        let want = (self.size - self.offset).min(self.slot_size) as usize;
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
            chunk: self.chunk,
            ring_offset: (u64::from(imm.slot) * self.slot_size) as usize,
            len: want,
        };
        self.offset += want as u64;
        self.chunk += 1;
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
        if self.wants_data() || self.finished {
            let why = if self.finished {
                "after FIN"
            } else {
                "before the part's data"
            };
            return Err(Error::Protocol(format!("a control message {why}: {msg:?}")));
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
                self.finished = true;
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
}
