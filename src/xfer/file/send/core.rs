//! The sender's protocol core, without I/O: what the receiver's answers mean, and where each
//! chunk of a part (a whole file, or one stripe) goes. The drivers (`data`, `file`, `session`)
//! read, post, poll and wait; they ask this module what to do.

use crate::error::{Error, Result};
use crate::xfer::file::ctl::peer_err;
use crate::xfer::file::proto::{self, Imm, Msg, Reason, Repair, RingGrant, SkipWhy};

/// The receiver's answer to a HELLO.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Answer {
    /// MR: the ring to write the file's data into (see [`check_grant`]).
    Ring(RingGrant),
    /// WANT: send the inline file's data (DATA).
    Want,
    /// ACK(ok): a directory or symlink was made.
    Made,
    /// SKIP: nothing to send; the receiver's reason.
    Skipped(String),
    /// SKIP of a dry run's HELLO: it would be received, over what is there if `replace`.
    Would {
        /// Over an existing entry.
        replace: bool,
    },
    /// REFUSE: this entry is not taken; `fatal` when the session cannot go on either (a failed
    /// authentication, a version the receiver does not speak).
    Refused {
        /// The receiver's reason.
        reason: Reason,
        /// Its text, as sent (not yet made printable).
        message: String,
        /// The session cannot go on either.
        fatal: bool,
    },
}

/// What a HELLO announced, which decides the answers it may get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Asked {
    /// A file through the staging ring: MR, SKIP or REFUSE.
    File,
    /// A file inline: WANT, SKIP or REFUSE.
    Inline,
    /// A directory or symlink: ACK, SKIP or REFUSE.
    Entry,
    /// Any entry of a dry run: SKIP (what would be done) or REFUSE.
    DryRun,
}

impl Answer {
    /// `msg` as the answer to a HELLO of what `asked` says. An ERR or a message that answers
    /// nothing is an error.
    pub fn of(msg: Msg, asked: Asked) -> Result<Answer> {
        match (msg, asked) {
            (Msg::Mr(g), Asked::File) => Ok(Answer::Ring(g)),
            (Msg::Want, Asked::Inline) => Ok(Answer::Want),
            (
                Msg::Ack {
                    status: Reason::Ok, ..
                },
                Asked::Entry,
            ) => Ok(Answer::Made),
            (Msg::Skip { why, message }, asked) => match (why, asked) {
                (SkipWhy::WouldCreate | SkipWhy::WouldReplace, Asked::DryRun) => {
                    Ok(Answer::Would {
                        replace: why == SkipWhy::WouldReplace,
                    })
                }
                (SkipWhy::WouldCreate | SkipWhy::WouldReplace, _) => Err(Error::Protocol(format!(
                    "SKIP ({}) of a HELLO that is not a dry run",
                    why.as_str()
                ))),
                _ => Ok(Answer::Skipped(message)),
            },
            (Msg::Refuse { reason, message }, _) => Ok(Answer::Refused {
                reason,
                message,
                fatal: matches!(reason, Reason::AuthFailed | Reason::Version),
            }),
            (Msg::Err { reason, message }, _) => Err(peer_err(reason, &message)),
            (other, asked) => {
                let first = match asked {
                    Asked::File => "MR",
                    Asked::Inline => "WANT",
                    Asked::Entry => "ACK",
                    Asked::DryRun => "nothing else",
                };
                Err(Error::Protocol(format!(
                    "expected {first}, SKIP or REFUSE, got {}",
                    brief(&other)
                )))
            }
        }
    }
}

/// `msg` for an error: its debug form, cut short (a DATA's bytes are no help).
fn brief(msg: &Msg) -> String {
    let s = format!("{msg:?}");
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

/// A ring the sender can use for chunks of at most `chunk` bytes: slots no larger, and as
/// many as the immediate can name.
pub fn check_grant(g: &RingGrant, chunk: u32) -> Result<()> {
    if g.slot_size == 0
        || g.slot_size > chunk
        || g.slot_count == 0
        || g.slot_count > proto::IMM_SLOTS
    {
        return Err(Error::Protocol(format!(
            "receiver's ring of {} × {} bytes does not fit a chunk size of {chunk}",
            g.slot_count, g.slot_size
        )));
    }
    Ok(())
}

/// The receiver's verdict on a part after FIN.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// ACK(ok): verified and committed (a stripe: verified).
    Delivered,
    /// ACK with another status: not committed; the receiver's reason and text.
    Failed {
        /// The receiver's status.
        status: Reason,
        /// Its text, as sent.
        message: String,
    },
}

impl Verdict {
    /// `msg` as the answer to FIN; an ERR or anything but ACK is an error.
    pub fn of(msg: Msg) -> Result<Verdict> {
        match msg {
            Msg::Ack {
                status: Reason::Ok, ..
            } => Ok(Verdict::Delivered),
            Msg::Ack { status, message } => Ok(Verdict::Failed { status, message }),
            Msg::Err { reason, message } => Err(peer_err(reason, &message)),
            other => Err(Error::Protocol(format!("expected ACK, got {other:?}"))),
        }
    }
}

/// Where the chunks of one part go: chunk `k` of the part is the `k − first`-th written, into
/// slot `(k − first) mod slots`, with that count (mod 2^16) as its sequence number. A repair
/// round's plan ([`again`](Self::again)) writes the chunks a REPAIR lists, continuing the count.
#[derive(Clone, Debug)]
pub struct ChunkPlan {
    slot_size: u64,
    slot_count: u32,
    first: u64,
    chunks: u64,
    /// Writes of this part before this plan's.
    base: u64,
    /// A repair round: the chunks to write again, in order.
    again: Option<Vec<u64>>,
}

/// One chunk's RDMA WRITE_WITH_IMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChunkWrite {
    /// The work request id: the chunk's number among those written.
    pub wr_id: u64,
    /// Where it goes in the receiver's ring.
    pub ring_offset: u64,
    /// The immediate value (slot and sequence number).
    pub imm: u32,
}

impl ChunkPlan {
    /// The chunks of a part of `len` bytes written through `grant`'s ring, from chunk `first`
    /// (after those the receiver holds).
    pub fn new(grant: &RingGrant, len: u64, first: u64) -> ChunkPlan {
        let slot_size = u64::from(grant.slot_size.max(1));
        ChunkPlan {
            slot_size,
            slot_count: grant.slot_count.max(1),
            first,
            chunks: len.div_ceil(slot_size),
            base: 0,
            again: None,
        }
    }

    /// The chunks of the part's first send, in order.
    pub fn chunks(&self) -> std::ops::Range<u64> {
        self.first..self.chunks.max(self.first)
    }

    /// Writes in this plan.
    pub fn len(&self) -> u64 {
        match &self.again {
            Some(v) => v.len() as u64,
            None => self.chunks.saturating_sub(self.first),
        }
    }

    /// Whether it writes nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether it is a repair round's.
    pub fn is_again(&self) -> bool {
        self.again.is_some()
    }

    /// The chunk of the `i`-th write (`i` below [`len`](Self::len)).
    pub fn chunk_at(&self, i: u64) -> u64 {
        match &self.again {
            Some(v) => v.get(i as usize).copied().unwrap_or(u64::MAX),
            None => self.first + i,
        }
    }

    /// The plan of a repair round after this one: `chunks` (checked by [`Repairs`]) again,
    /// the sequence numbers and slots going on from this plan's last write.
    pub fn again(&self, chunks: Vec<u64>) -> ChunkPlan {
        ChunkPlan {
            base: self.base + self.len(),
            again: Some(chunks),
            ..self.clone()
        }
    }

    /// Chunk `k`'s write (`k` in [`chunks`](Self::chunks); first send only).
    pub fn write(&self, k: u64) -> ChunkWrite {
        self.write_at(k.saturating_sub(self.first))
    }

    /// The `i`-th write of this plan.
    pub fn write_at(&self, i: u64) -> ChunkWrite {
        let n = self.base + i;
        let slot = (n % u64::from(self.slot_count)) as u16;
        ChunkWrite {
            wr_id: n,
            ring_offset: u64::from(slot) * self.slot_size,
            imm: proto::encode_chunk_imm(Imm {
                slot,
                seq: n as u16,
            }),
        }
    }
}

/// What the receiver's answer to FIN asks of the sender.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AfterFin {
    /// ACK: the part's verdict.
    Verdict(Verdict),
    /// REPAIR: write these chunks again (in this order), then FIN again.
    Again(Vec<u64>),
}

/// The sender's side of chunk repair for one part: which REPAIRs it takes (the next round, at
/// most [`proto::MAX_REPAIR_ROUNDS`], chunks it sent in this attempt) and what was repaired.
#[derive(Clone, Debug)]
pub struct Repairs {
    /// The chunks sent in this attempt (those before were verified by the resume digest).
    sent: std::ops::Range<u64>,
    round: u16,
    /// Chunks the first REPAIR asked for.
    first_round: u64,
}

impl Repairs {
    /// Repairs of the part `plan` sends.
    pub fn new(plan: &ChunkPlan) -> Repairs {
        Repairs {
            sent: plan.chunks(),
            round: 0,
            first_round: 0,
        }
    }

    /// `msg`, the receiver's answer to FIN: ACK, or a REPAIR of the next round listing chunks
    /// sent in this attempt. An ERR or anything else is an error.
    pub fn after_fin(&mut self, msg: Msg) -> Result<AfterFin> {
        let Msg::Repair(Repair { round, chunks }) = msg else {
            return Verdict::of(msg).map(AfterFin::Verdict);
        };
        if round != self.round + 1 {
            return Err(Error::Protocol(format!(
                "REPAIR round {round} after round {}",
                self.round
            )));
        }
        if let Some(k) = chunks.iter().find(|k| !self.sent.contains(k)) {
            return Err(Error::Protocol(format!(
                "REPAIR of chunk {k}, not among the chunks {}..{} sent",
                self.sent.start, self.sent.end
            )));
        }
        self.round = round;
        if round == 1 {
            self.first_round = chunks.len() as u64;
        }
        Ok(AfterFin::Again(chunks))
    }

    /// Chunks repaired once the part is delivered: those the first REPAIR asked for (later
    /// rounds ask for some of them again).
    pub fn repaired(&self) -> u64 {
        self.first_round
    }
}
