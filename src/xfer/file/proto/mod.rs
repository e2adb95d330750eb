//! The file-transfer control protocol: fixed layout, big-endian, versioned, every length checked.
//!
//! The wire format is specified in `docs/file-protocol.md`; keep the two in step.
//! [`decode`] is total: it never panics, never allocates more than its input, and refuses
//! truncated, oversized, trailing, unknown and malformed messages with distinct errors.
//!
//! Per concern: `hello` (HELLO and SKIP, the entry announcement and the "already there"
//! answer), `imm` (the data-chunk immediate), `auth` (the challenge answer), `verify` (the
//! verification algorithm and DIGESTS), `inline` (small files in DATA), `delete` (LIST, NAMES and DELETE: `send --delete`), `repair` (REPAIR: chunks sent again), `batch` (several messages in one SEND), `reader` (field codecs); this file holds the header, the message enum and the dispatch.

use crate::{Error, Result};

mod auth;
mod batch;
mod delete;
mod hello;
mod imm;
mod inline;
mod reader;
mod repair;
mod stream;
#[cfg(test)]
mod tests;
mod verify;

pub use auth::{
    auth_answer, auth_verify, new_nonce, receiver_proof, receiver_proof_ok, AUTH_CONTEXT,
};
pub use batch::{batchable, Batch};
pub use delete::{listable, Listed, ListedKind, Names, MAX_LISTED_LEN};
pub use hello::{EntryKind, Hello, HelloFlags, SkipWhy};
pub use imm::{decode_chunk_imm, encode_chunk_imm, Imm, IMM_SLOTS};
pub use inline::{encode_piece, Data, INLINE_MAX, MAX_IN_FLIGHT, PIECE_MAX};
use reader::{put_reason_text, Reader};
pub use repair::{Repair, MAX_REPAIR_CHUNKS, MAX_REPAIR_ROUNDS};
pub use stream::{
    new_session_id, plan_stripes, striped_digest, Join, Open, Session, SessionId, Stripe,
    MAX_STREAMS, MAX_STRIPES, SESSION_ID_LEN,
};
pub use verify::{Algo, ChunkDigest, Digests, MAX_CHUNK_DIGEST, MAX_DIGESTS};

/// `"RXFR"`: first four bytes of every control message.
pub const MAGIC: u32 = 0x5258_4652;
/// The protocol version this build speaks (2: entry kinds, SKIP, existing-file policies,
/// per-chunk verification; 3: small files inline, WANT and DATA, several entries in flight,
/// deletion: LIST, NAMES, DELETE; chunk repair: REPAIR).
pub const VERSION: u16 = 3;
/// Header size: magic u32, version u16, type u16, body length u32.
pub const HEADER_LEN: usize = 12;
/// Largest whole control message (header + body), in bytes. Receive buffers of this size suffice.
pub const MAX_MSG_LEN: usize = 8192;
/// Largest BATCH, in bytes: a BATCH may be as long as both ends' control-message size (what
/// their endpoints agreed at connect, [`MAX_MSG_LEN`] at least), up to this. Its members are
/// each at most [`MAX_MSG_LEN`].
pub const MAX_BATCH_LEN: usize = 64 * 1024;
/// Longest file name in a HELLO, in bytes.
pub const MAX_NAME_LEN: usize = 4096;
/// Longest symlink target in a HELLO, in bytes (a HELLO with the longest name, the longest
/// target, a checksum and an answer still fits [`MAX_MSG_LEN`]).
pub const MAX_TARGET_LEN: usize = 3072;
/// Longest human-readable message in REFUSE / ACK / ERR, in bytes.
pub const MAX_TEXT_LEN: usize = 1024;
/// Size of nonces, authentication answers and hashes.
pub const DIGEST_LEN: usize = 32;

/// A 32-byte value (nonce, MAC or BLAKE3 hash).
pub type Digest = [u8; DIGEST_LEN];

const T_HELLO: u16 = 1;
const T_CHALLENGE: u16 = 2;
const T_MR: u16 = 3;
const T_REFUSE: u16 = 4;
const T_CREDIT: u16 = 5;
const T_FIN: u16 = 6;
const T_ACK: u16 = 7;
const T_ERR: u16 = 8;
const T_DONE: u16 = 9;
const T_SKIP: u16 = 10;
const T_DIGESTS: u16 = 11;
const T_OPEN: u16 = 12;
const T_SESSION: u16 = 13;
const T_JOIN: u16 = 14;
const T_STRIPE: u16 = 15;
const T_WANT: u16 = 16;
const T_DATA: u16 = 17;
const T_BATCH: u16 = 18;
const T_LIST: u16 = 19;
const T_NAMES: u16 = 20;
const T_DELETE: u16 = 21;
const T_REPAIR: u16 = 22;

pub use crate::error::Reason;

/// MR: the receiver's staging ring and resume point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingGrant {
    /// Ring start address on the receiver.
    pub addr: u64,
    /// Remote key of the ring (REMOTE_WRITE only).
    pub rkey: u32,
    /// Bytes per slot.
    pub slot_size: u32,
    /// Number of slots.
    pub slot_count: u32,
    /// Bytes of the file the receiver already holds (0 without resume): whole chunks of
    /// `slot_size` bytes, or the whole file.
    pub resume_offset: u64,
    /// The file digest of those bytes as a file of their own (see `digest::combine`).
    pub resume_hash: Digest,
}

/// A control message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Sender → receiver: one entry (file, directory, symlink) follows.
    Hello(Hello),
    /// Receiver → sender, first message: nonce and the receiver's version.
    Challenge {
        /// Highest protocol version the receiver speaks.
        version: u16,
        /// Fresh random nonce.
        nonce: Digest,
        /// The receiver's proof that it knows the token ([`receiver_proof`]): present when it
        /// has one. A sender that requires it sends nothing to a receiver without it.
        proof: Option<Digest>,
    },
    /// Receiver → sender: file accepted; where to write.
    Mr(RingGrant),
    /// Receiver → sender: file refused.
    Refuse {
        /// Why (never [`Reason::Ok`]).
        reason: Reason,
        /// Human-readable detail.
        message: String,
    },
    /// Receiver → sender: this many ring slots are free again.
    Credit {
        /// Slots freed.
        slots: u32,
    },
    /// Sender → receiver: all data written.
    Fin {
        /// Total file size.
        bytes: u64,
        /// The file digest (see `digest::combine`).
        hash: Digest,
    },
    /// Sender → receiver, after the data and before FIN: its chunk digests, in batches.
    Digests(Digests),
    /// Receiver → sender: the file's verdict.
    Ack {
        /// [`Reason::Ok`] when verified and committed.
        status: Reason,
        /// Human-readable detail.
        message: String,
    },
    /// Either way: fatal error, the session ends.
    Err {
        /// Why (never [`Reason::Ok`]).
        reason: Reason,
        /// Human-readable detail.
        message: String,
    },
    /// Sender → receiver: no more files.
    Done,
    /// Receiver → sender, answering HELLO: the receiver needs nothing for this entry.
    Skip {
        /// Why.
        why: SkipWhy,
        /// Human-readable detail.
        message: String,
    },
    /// Sender → receiver, first connection of several (in place of the first HELLO).
    Open(Open),
    /// Receiver → sender: the session id and the streams granted (answers OPEN and JOIN).
    Session(Session),
    /// Sender → receiver, a further connection of an opened session.
    Join(Join),
    /// Sender → receiver: the next HELLO covers one byte range of its file.
    Stripe(Stripe),
    /// Receiver → sender, answering an inline HELLO: send its data (DATA).
    Want,
    /// Sender → receiver: a piece of an inline file's data.
    Data(Data),
    /// Either way: several pipelined messages (HELLO, DATA, WANT, SKIP, REFUSE, ACK) in one
    /// SEND, to be read in order.
    Batch(Vec<Msg>),
    /// Sender → receiver (`send --delete`), after every entry: the names in this directory
    /// (one the sender sent), please (answered NAMES, or REFUSE).
    List(String),
    /// Receiver → sender: names of the directory a LIST asked for.
    Names(Names),
    /// Sender → receiver: remove this entry (recursively for a directory), which the sender
    /// does not have (answered ACK, or REFUSE).
    Delete(String),
    /// Receiver → sender, answering FIN: write these chunks again, then FIN again (at most
    /// [`MAX_REPAIR_ROUNDS`] per part).
    Repair(Repair),
}

/// A parsed header (see [`header`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Protocol version of the message.
    pub version: u16,
    /// Message type code.
    pub kind: u16,
    /// Body length in bytes.
    pub len: u32,
}

/// A malformed or out-of-range message from the peer.
fn malformed(msg: impl Into<String>) -> Error {
    Error::Protocol(msg.into())
}

/// Parses only the header, without checking the version, so a receiver can answer a peer of
/// another version with a `Refuse { reason: Version }`. Checks the magic.
pub fn header(buf: &[u8]) -> Result<Header> {
    let mut r = Reader::new(buf, "header");
    let magic = r.u32()?;
    if magic != MAGIC {
        return Err(malformed(format!(
            "bad magic {magic:#010x} (expected {MAGIC:#010x} \"RXFR\"): not an rdmaxfer control message"
        )));
    }
    Ok(Header {
        version: r.u16()?,
        kind: r.u16()?,
        len: r.u32()?,
    })
}

/// Decodes one whole control message; `buf` must hold exactly one message.
pub fn decode(buf: &[u8]) -> Result<Msg> {
    let too_long = |max| buf.len() > max;
    if too_long(MAX_BATCH_LEN) {
        return Err(malformed(format!(
            "control message of {} bytes exceeds the maximum of {MAX_BATCH_LEN}",
            buf.len()
        )));
    }
    let h = header(buf)?;
    let max = match h.kind {
        T_BATCH => MAX_BATCH_LEN,
        _ => MAX_MSG_LEN,
    };
    if too_long(max) {
        return Err(malformed(format!(
            "control message of {} bytes exceeds the maximum of {max}",
            buf.len()
        )));
    }
    if h.version != VERSION {
        return Err(Error::Version {
            what: "file protocol",
            ours: VERSION,
            theirs: h.version,
        });
    }
    let body = &buf[HEADER_LEN..];
    if u64::from(h.len) != body.len() as u64 {
        let what = if u64::from(h.len) > body.len() as u64 {
            "truncated"
        } else {
            "trailing bytes after"
        };
        return Err(malformed(format!(
            "{what} control message: header says {} body bytes, got {}",
            h.len,
            body.len()
        )));
    }
    let name =
        kind_name(h.kind).ok_or_else(|| malformed(format!("unknown message type {}", h.kind)))?;
    let mut r = Reader::new(body, name);
    let msg = match h.kind {
        T_HELLO => Msg::Hello(hello::decode_hello(&mut r)?),
        T_CHALLENGE => {
            let version = r.u16()?;
            let nonce = r.digest()?;
            let proof = if r.is_empty() {
                None
            } else {
                Some(r.digest()?)
            };
            Msg::Challenge {
                version,
                nonce,
                proof,
            }
        }
        T_MR => Msg::Mr(RingGrant {
            addr: r.u64()?,
            rkey: r.u32()?,
            slot_size: r.u32()?,
            slot_count: r.u32()?,
            resume_offset: r.u64()?,
            resume_hash: r.digest()?,
        }),
        T_REFUSE => {
            let (reason, message) = r.reason_text(false)?;
            Msg::Refuse { reason, message }
        }
        T_CREDIT => Msg::Credit { slots: r.u32()? },
        T_FIN => Msg::Fin {
            bytes: r.u64()?,
            hash: r.digest()?,
        },
        T_ACK => {
            let (status, message) = r.reason_text(true)?;
            Msg::Ack { status, message }
        }
        T_ERR => {
            let (reason, message) = r.reason_text(false)?;
            Msg::Err { reason, message }
        }
        T_SKIP => {
            let (why, message) = hello::decode_skip(&mut r)?;
            Msg::Skip { why, message }
        }
        T_DIGESTS => Msg::Digests(verify::decode_digests(&mut r)?),
        T_OPEN => Msg::Open(stream::decode_open(&mut r)?),
        T_SESSION => Msg::Session(stream::decode_session(&mut r)?),
        T_JOIN => Msg::Join(stream::decode_join(&mut r)?),
        T_STRIPE => Msg::Stripe(stream::decode_stripe(&mut r)?),
        T_WANT => Msg::Want,
        T_DATA => Msg::Data(inline::decode_data(&mut r)?),
        T_BATCH => Msg::Batch(batch::decode_batch(&mut r)?),
        T_LIST => Msg::List(delete::decode_name(&mut r)?),
        T_NAMES => Msg::Names(delete::decode_names(&mut r)?),
        T_DELETE => Msg::Delete(delete::decode_name(&mut r)?),
        T_REPAIR => Msg::Repair(repair::decode_repair(&mut r)?),
        _ => Msg::Done, // T_DONE: kind_name already refused unknown types
    };
    r.finish()?;
    Ok(msg)
}

fn kind_name(kind: u16) -> Option<&'static str> {
    Some(match kind {
        T_HELLO => "HELLO",
        T_CHALLENGE => "CHALLENGE",
        T_MR => "MR",
        T_REFUSE => "REFUSE",
        T_CREDIT => "CREDIT",
        T_FIN => "FIN",
        T_ACK => "ACK",
        T_ERR => "ERR",
        T_DONE => "DONE",
        T_SKIP => "SKIP",
        T_DIGESTS => "DIGESTS",
        T_OPEN => "OPEN",
        T_SESSION => "SESSION",
        T_JOIN => "JOIN",
        T_STRIPE => "STRIPE",
        T_WANT => "WANT",
        T_DATA => "DATA",
        T_BATCH => "BATCH",
        T_LIST => "LIST",
        T_NAMES => "NAMES",
        T_DELETE => "DELETE",
        T_REPAIR => "REPAIR",
        _ => return None,
    })
}

/// Encodes a message. Panics if a string field is over its limit
/// ([`MAX_NAME_LEN`], [`MAX_TEXT_LEN`]): callers build messages from checked or own values;
/// use [`truncate_text`] for free-form messages.
pub fn encode(msg: &Msg) -> Vec<u8> {
    let mut b = Vec::with_capacity(64);
    encode_into(&mut b, msg);
    b
}

/// Appends `msg`, encoded as [`encode`] does, to `b` (the body written in place after its
/// header, then its length put in the header). Panics as [`encode`] does.
pub fn encode_into(b: &mut Vec<u8>, msg: &Msg) {
    let start = open_frame(b);
    let kind = match msg {
        Msg::Hello(h) => {
            hello::encode_hello(b, h);
            T_HELLO
        }
        Msg::Challenge {
            version,
            nonce,
            proof,
        } => {
            b.extend_from_slice(&version.to_be_bytes());
            b.extend_from_slice(nonce);
            if let Some(p) = proof {
                b.extend_from_slice(p);
            }
            T_CHALLENGE
        }
        Msg::Mr(r) => {
            b.extend_from_slice(&r.addr.to_be_bytes());
            b.extend_from_slice(&r.rkey.to_be_bytes());
            b.extend_from_slice(&r.slot_size.to_be_bytes());
            b.extend_from_slice(&r.slot_count.to_be_bytes());
            b.extend_from_slice(&r.resume_offset.to_be_bytes());
            b.extend_from_slice(&r.resume_hash);
            T_MR
        }
        Msg::Refuse { reason, message } => {
            put_reason_text(b, *reason, message);
            T_REFUSE
        }
        Msg::Credit { slots } => {
            b.extend_from_slice(&slots.to_be_bytes());
            T_CREDIT
        }
        Msg::Fin { bytes, hash } => {
            b.extend_from_slice(&bytes.to_be_bytes());
            b.extend_from_slice(hash);
            T_FIN
        }
        Msg::Ack { status, message } => {
            put_reason_text(b, *status, message);
            T_ACK
        }
        Msg::Err { reason, message } => {
            put_reason_text(b, *reason, message);
            T_ERR
        }
        Msg::Done => T_DONE,
        Msg::Skip { why, message } => {
            hello::encode_skip(b, *why, message);
            T_SKIP
        }
        Msg::Digests(d) => {
            verify::encode_digests(b, d);
            T_DIGESTS
        }
        Msg::Open(o) => {
            stream::encode_open(b, o);
            T_OPEN
        }
        Msg::Session(x) => {
            stream::encode_session(b, x);
            T_SESSION
        }
        Msg::Join(j) => {
            stream::encode_join(b, j);
            T_JOIN
        }
        Msg::Stripe(x) => {
            stream::encode_stripe(b, x);
            T_STRIPE
        }
        Msg::Want => T_WANT,
        Msg::Data(d) => {
            inline::encode_data(b, d);
            T_DATA
        }
        Msg::Batch(members) => {
            batch::encode_batch(b, members);
            T_BATCH
        }
        Msg::List(dir) => {
            delete::encode_name(b, dir);
            T_LIST
        }
        Msg::Names(n) => {
            delete::encode_names(b, n);
            T_NAMES
        }
        Msg::Delete(name) => {
            delete::encode_name(b, name);
            T_DELETE
        }
        Msg::Repair(x) => {
            repair::encode_repair(b, x);
            T_REPAIR
        }
    };
    close_frame(b, start, kind);
}

/// Appends a header to `b` whose type and length [`close_frame`] fills in; returns where it
/// starts.
fn open_frame(b: &mut Vec<u8>) -> usize {
    let start = b.len();
    b.extend_from_slice(&MAGIC.to_be_bytes());
    b.extend_from_slice(&VERSION.to_be_bytes());
    b.extend_from_slice(&[0; 6]);
    start
}

/// Puts `kind` and the length of the body written after it into the header at `start`.
fn close_frame(b: &mut [u8], start: usize, kind: u16) {
    let body = b.len() - start - HEADER_LEN;
    let body_len = u32::try_from(body).expect("bodies are bounded by the field limits");
    b[start + 6..start + 8].copy_from_slice(&kind.to_be_bytes());
    b[start + 8..start + HEADER_LEN].copy_from_slice(&body_len.to_be_bytes());
}

/// Cuts `s` to at most [`MAX_TEXT_LEN`] bytes on a character boundary.
pub fn truncate_text(s: &str) -> String {
    let mut end = s.len().min(MAX_TEXT_LEN);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}
