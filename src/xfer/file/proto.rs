//! The file-transfer control protocol: fixed layout, big-endian, versioned, every length checked.
//!
//! The wire format is specified in `docs/file-protocol.md`; keep the two in step.
//! [`decode`] is total: it never panics, never allocates more than its input, and refuses
//! truncated, oversized, trailing, unknown and malformed messages with distinct errors.

use crate::{Error, Result};

/// `"RXFR"`: first four bytes of every control message.
pub const MAGIC: u32 = 0x5258_4652;
/// The protocol version this build speaks.
pub const VERSION: u16 = 1;
/// Header size: magic u32, version u16, type u16, body length u32.
pub const HEADER_LEN: usize = 12;
/// Largest whole control message (header + body), in bytes. Receive buffers of this size suffice.
pub const MAX_MSG_LEN: usize = 8192;
/// Longest file name in a HELLO, in bytes.
pub const MAX_NAME_LEN: usize = 4096;
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

const F_RESUME: u16 = 1 << 0;
const F_FORCE: u16 = 1 << 1;
const F_LAST: u16 = 1 << 2;
const F_AUTH: u16 = 1 << 3;
const F_ALL: u16 = F_RESUME | F_FORCE | F_LAST | F_AUTH;

pub use crate::error::Reason;

/// Options carried in a HELLO.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HelloFlags {
    /// Continue a partial file the receiver holds.
    pub resume: bool,
    /// Overwrite an existing file.
    pub force: bool,
    /// This is the last file of the session (a DONE need not follow).
    pub last: bool,
}

/// HELLO: the sender announces one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Highest protocol version the sender speaks.
    pub version: u16,
    /// Relative file name, `/`-separated, UTF-8, at most [`MAX_NAME_LEN`] bytes (not yet sanitized).
    pub name: String,
    /// File size in bytes.
    pub size: u64,
    /// Unix permission bits.
    pub mode: u32,
    /// Modification time, seconds since the epoch.
    pub mtime_sec: i64,
    /// Modification time, nanoseconds (< 1 000 000 000).
    pub mtime_nsec: u32,
    /// Bytes per data chunk (RDMA WRITE).
    pub chunk_size: u32,
    /// Options.
    pub flags: HelloFlags,
    /// Answer to the CHALLENGE nonce; present iff a token is configured.
    pub auth: Option<Digest>,
}

/// MR: the receiver's staging ring and resume point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ring {
    /// Ring start address on the receiver.
    pub addr: u64,
    /// Remote key of the ring (REMOTE_WRITE only).
    pub rkey: u32,
    /// Bytes per slot.
    pub slot_size: u32,
    /// Number of slots.
    pub slot_count: u32,
    /// Bytes of the file the receiver already holds (0 without resume).
    pub resume_offset: u64,
    /// BLAKE3 of those bytes (the hash of the empty input when `resume_offset` is 0).
    pub resume_hash: Digest,
}

/// A control message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Sender → receiver: one file follows.
    Hello(Hello),
    /// Receiver → sender, first message: nonce and the receiver's version.
    Challenge {
        /// Highest protocol version the receiver speaks.
        version: u16,
        /// Fresh random nonce.
        nonce: Digest,
    },
    /// Receiver → sender: file accepted; where to write.
    Mr(Ring),
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
        /// BLAKE3 of the whole file.
        hash: Digest,
    },
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

fn proto(msg: impl Into<String>) -> Error {
    Error::Protocol(msg.into())
}

/// Parses only the header, without checking the version, so a receiver can answer a peer of
/// another version with a `Refuse { reason: Version }`. Checks the magic.
pub fn header(buf: &[u8]) -> Result<Header> {
    let mut r = Reader::new(buf, "header");
    let magic = r.u32()?;
    if magic != MAGIC {
        return Err(proto(format!(
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
    if buf.len() > MAX_MSG_LEN {
        return Err(proto(format!(
            "control message of {} bytes exceeds the maximum of {MAX_MSG_LEN}",
            buf.len()
        )));
    }
    let h = header(buf)?;
    if h.version != VERSION {
        return Err(proto(format!(
            "unsupported protocol version {} (this side speaks {VERSION})",
            h.version
        )));
    }
    let body = &buf[HEADER_LEN..];
    if u64::from(h.len) != body.len() as u64 {
        let what = if u64::from(h.len) > body.len() as u64 {
            "truncated"
        } else {
            "trailing bytes after"
        };
        return Err(proto(format!(
            "{what} control message: header says {} body bytes, got {}",
            h.len,
            body.len()
        )));
    }
    let name =
        kind_name(h.kind).ok_or_else(|| proto(format!("unknown message type {}", h.kind)))?;
    let mut r = Reader::new(body, name);
    let msg = match h.kind {
        T_HELLO => {
            let version = r.u16()?;
            let bits = r.u16()?;
            if bits & !F_ALL != 0 {
                return Err(proto(format!("HELLO has unknown flag bits {bits:#06x}")));
            }
            let chunk_size = r.u32()?;
            let size = r.u64()?;
            let mode = r.u32()?;
            let mtime_sec = r.u64()? as i64;
            let mtime_nsec = r.u32()?;
            if mtime_nsec >= 1_000_000_000 {
                return Err(proto(format!(
                    "HELLO mtime nanoseconds {mtime_nsec} out of range"
                )));
            }
            let name = r.text(MAX_NAME_LEN, "file name")?;
            let auth = if bits & F_AUTH != 0 {
                Some(r.digest()?)
            } else {
                None
            };
            Msg::Hello(Hello {
                version,
                name,
                size,
                mode,
                mtime_sec,
                mtime_nsec,
                chunk_size,
                flags: HelloFlags {
                    resume: bits & F_RESUME != 0,
                    force: bits & F_FORCE != 0,
                    last: bits & F_LAST != 0,
                },
                auth,
            })
        }
        T_CHALLENGE => Msg::Challenge {
            version: r.u16()?,
            nonce: r.digest()?,
        },
        T_MR => Msg::Mr(Ring {
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
        _ => return None,
    })
}

/// Encodes a message. Panics if a string field is over its limit
/// ([`MAX_NAME_LEN`], [`MAX_TEXT_LEN`]): callers build messages from checked or own values;
/// use [`truncate_text`] for free-form messages.
pub fn encode(msg: &Msg) -> Vec<u8> {
    let mut b = Vec::with_capacity(64);
    let kind = match msg {
        Msg::Hello(h) => {
            let mut bits = 0;
            for (on, bit) in [
                (h.flags.resume, F_RESUME),
                (h.flags.force, F_FORCE),
                (h.flags.last, F_LAST),
                (h.auth.is_some(), F_AUTH),
            ] {
                if on {
                    bits |= bit;
                }
            }
            b.extend_from_slice(&h.version.to_be_bytes());
            b.extend_from_slice(&bits.to_be_bytes());
            b.extend_from_slice(&h.chunk_size.to_be_bytes());
            b.extend_from_slice(&h.size.to_be_bytes());
            b.extend_from_slice(&h.mode.to_be_bytes());
            b.extend_from_slice(&h.mtime_sec.to_be_bytes());
            b.extend_from_slice(&h.mtime_nsec.to_be_bytes());
            put_text(&mut b, &h.name, MAX_NAME_LEN);
            if let Some(a) = &h.auth {
                b.extend_from_slice(a);
            }
            T_HELLO
        }
        Msg::Challenge { version, nonce } => {
            b.extend_from_slice(&version.to_be_bytes());
            b.extend_from_slice(nonce);
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
            put_reason_text(&mut b, *reason, message);
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
            put_reason_text(&mut b, *status, message);
            T_ACK
        }
        Msg::Err { reason, message } => {
            put_reason_text(&mut b, *reason, message);
            T_ERR
        }
        Msg::Done => T_DONE,
    };
    let body_len = u32::try_from(b.len()).expect("bodies are bounded by the field limits");
    let mut out = Vec::with_capacity(HEADER_LEN + b.len());
    out.extend_from_slice(&MAGIC.to_be_bytes());
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&body_len.to_be_bytes());
    out.extend_from_slice(&b);
    out
}

/// Cuts `s` to at most [`MAX_TEXT_LEN`] bytes on a character boundary.
pub fn truncate_text(s: &str) -> String {
    let mut end = s.len().min(MAX_TEXT_LEN);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

fn put_text(b: &mut Vec<u8>, s: &str, max: usize) {
    assert!(
        s.len() <= max,
        "string of {} bytes over the {max}-byte limit",
        s.len()
    );
    b.extend_from_slice(&(s.len() as u16).to_be_bytes());
    b.extend_from_slice(s.as_bytes());
}

fn put_reason_text(b: &mut Vec<u8>, reason: Reason, message: &str) {
    b.extend_from_slice(&reason.code().to_be_bytes());
    put_text(b, message, MAX_TEXT_LEN);
}

/// A bounds-checked cursor over a message.
struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, what }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.buf.len() < n {
            return Err(proto(format!(
                "truncated {}: needs {n} more bytes, {} left",
                self.what,
                self.buf.len()
            )));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u16(&mut self) -> Result<u16> {
        self.array().map(u16::from_be_bytes)
    }

    fn u32(&mut self) -> Result<u32> {
        self.array().map(u32::from_be_bytes)
    }

    fn u64(&mut self) -> Result<u64> {
        self.array().map(u64::from_be_bytes)
    }

    fn digest(&mut self) -> Result<Digest> {
        self.array()
    }

    fn text(&mut self, max: usize, field: &str) -> Result<String> {
        let len = usize::from(self.u16()?);
        if len > max {
            return Err(proto(format!(
                "{} {field} length {len} exceeds the maximum of {max} bytes",
                self.what
            )));
        }
        let bytes = self.take(len)?;
        let s = std::str::from_utf8(bytes)
            .map_err(|e| proto(format!("{} {field} is not UTF-8: {e}", self.what)))?;
        Ok(s.to_string())
    }

    fn reason_text(&mut self, ok_allowed: bool) -> Result<(Reason, String)> {
        let code = self.u16()?;
        let reason = Reason::from_code(code)
            .ok_or_else(|| proto(format!("{} has unknown reason code {code}", self.what)))?;
        if reason == Reason::Ok && !ok_allowed {
            return Err(proto(format!("{} without a reason (code 0)", self.what)));
        }
        Ok((reason, self.text(MAX_TEXT_LEN, "message")?))
    }

    fn finish(self) -> Result<()> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(proto(format!(
                "{} has {} trailing bytes",
                self.what,
                self.buf.len()
            )))
        }
    }
}

// ---- data-chunk immediate ----------------------------------------------------------------

/// The immediate value of one data-chunk RDMA WRITE_WITH_IMM: which ring slot was written and
/// the chunk's sequence number modulo 2^16. Layout: `imm = seq << 16 | slot` (host-order `u32`;
/// the verbs layer converts to and from the network-order `imm_data`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Imm {
    /// Ring slot index (< slot count).
    pub slot: u16,
    /// Chunk sequence number, wrapping at 2^16.
    pub seq: u16,
}

/// Most ring slots the immediate can name.
pub const MAX_SLOTS: u32 = 1 << 16;

/// Packs `imm` into the 32-bit immediate.
pub fn encode_imm(imm: Imm) -> u32 {
    (u32::from(imm.seq) << 16) | u32::from(imm.slot)
}

/// Unpacks an immediate, refusing a slot outside a ring of `slot_count` slots.
pub fn decode_imm(value: u32, slot_count: u32) -> Result<Imm> {
    let imm = Imm {
        slot: (value & 0xffff) as u16,
        seq: (value >> 16) as u16,
    };
    if u32::from(imm.slot) >= slot_count {
        return Err(proto(format!(
            "data chunk names slot {} of a {slot_count}-slot ring",
            imm.slot
        )));
    }
    Ok(imm)
}

// ---- authentication -----------------------------------------------------------------------

/// BLAKE3 `derive_key` context for the authentication key.
pub const AUTH_CONTEXT: &str = "rdmaxfer 2025-01 file transfer auth key v1";
/// Prefix of the MAC input, binding the answer to its purpose.
const AUTH_LABEL: &[u8] = b"rdmaxfer HELLO answer v1\0";

/// A fresh random 32-byte nonce (ChaCha CSPRNG seeded by the OS).
pub fn new_nonce() -> Digest {
    rand::random()
}

/// The authentication answer: `blake3::keyed_hash(derive_key(AUTH_CONTEXT, token),
/// "rdmaxfer HELLO answer v1\0" ‖ nonce)`.
pub fn auth_answer(token: &[u8], nonce: &Digest) -> Digest {
    let key = blake3::derive_key(AUTH_CONTEXT, token);
    let mut h = blake3::Hasher::new_keyed(&key);
    h.update(AUTH_LABEL);
    h.update(nonce);
    *h.finalize().as_bytes()
}

/// True when `answer` is the right answer for `nonce` under `token`; constant-time compare.
pub fn auth_verify(token: &[u8], nonce: &Digest, answer: Option<&Digest>) -> bool {
    match answer {
        // blake3::Hash equality is constant-time.
        Some(a) => blake3::Hash::from(auth_answer(token, nonce)) == blake3::Hash::from(*a),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hello() -> Hello {
        Hello {
            version: 1,
            name: "a/b.txt".into(),
            size: 0x0102_0304_0506_0708,
            mode: 0o644,
            mtime_sec: -2,
            mtime_nsec: 999_999_999,
            chunk_size: 1 << 20,
            flags: HelloFlags {
                resume: true,
                force: false,
                last: true,
            },
            auth: Some([0xAA; 32]),
        }
    }

    fn hdr(kind: u16, len: u32) -> Vec<u8> {
        let mut v = b"RXFR".to_vec();
        v.extend_from_slice(&[0, 1]);
        v.extend_from_slice(&kind.to_be_bytes());
        v.extend_from_slice(&len.to_be_bytes());
        v
    }

    /// `encode(m) == bytes` and `decode(bytes) == m`.
    fn exact(m: Msg, bytes: Vec<u8>) {
        assert_eq!(encode(&m), bytes, "{m:?}");
        assert_eq!(decode(&bytes).unwrap(), m);
    }

    fn err(buf: &[u8]) -> String {
        match decode(buf) {
            Err(Error::Protocol(s)) => s,
            other => panic!("expected a protocol error, got {other:?}"),
        }
    }

    #[test]
    fn hello_layout() {
        let mut b = hdr(1, 2 + 2 + 4 + 8 + 4 + 8 + 4 + 2 + 7 + 32);
        b.extend_from_slice(&[0, 1]); // version
        b.extend_from_slice(&[0, 0b1101]); // resume | last | auth
        b.extend_from_slice(&[0, 0x10, 0, 0]); // chunk 1 MiB
        b.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]); // size
        b.extend_from_slice(&[0, 0, 0x01, 0xA4]); // 0o644
        b.extend_from_slice(&[0xFF; 7]);
        b.push(0xFE); // -2
        b.extend_from_slice(&[0x3B, 0x9A, 0xC9, 0xFF]); // 999 999 999
        b.extend_from_slice(&[0, 7]);
        b.extend_from_slice(b"a/b.txt");
        b.extend_from_slice(&[0xAA; 32]);
        exact(Msg::Hello(hello()), b);
    }

    #[test]
    fn hello_without_auth_has_no_answer_bytes() {
        let mut h = hello();
        h.auth = None;
        let b = encode(&Msg::Hello(h.clone()));
        assert_eq!(b.len(), HEADER_LEN + 34 + 7);
        assert_eq!(b[HEADER_LEN + 3], 0b0101);
        assert_eq!(decode(&b).unwrap(), Msg::Hello(h));
    }

    #[test]
    fn challenge_layout() {
        let mut b = hdr(2, 34);
        b.extend_from_slice(&[0, 3]);
        b.extend_from_slice(&[7; 32]);
        exact(
            Msg::Challenge {
                version: 3,
                nonce: [7; 32],
            },
            b,
        );
    }

    #[test]
    fn mr_layout() {
        let mut b = hdr(3, 8 + 4 + 4 + 4 + 8 + 32);
        b.extend_from_slice(&[0, 0, 0x7f, 0, 0, 0, 0x10, 0]);
        b.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        b.extend_from_slice(&[0, 1, 0, 0]);
        b.extend_from_slice(&[0, 0, 0, 16]);
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0x20, 0]);
        b.extend_from_slice(&[9; 32]);
        exact(
            Msg::Mr(Ring {
                addr: 0x7f00_0000_1000,
                rkey: 0xdead_beef,
                slot_size: 65536,
                slot_count: 16,
                resume_offset: 0x2000,
                resume_hash: [9; 32],
            }),
            b,
        );
    }

    #[test]
    fn refuse_ack_err_layout() {
        for (kind, mk) in [
            (
                4u16,
                (|r, m| Msg::Refuse {
                    reason: r,
                    message: m,
                }) as fn(Reason, String) -> Msg,
            ),
            (7, |r, m| Msg::Ack {
                status: r,
                message: m,
            }),
            (8, |r, m| Msg::Err {
                reason: r,
                message: m,
            }),
        ] {
            let mut b = hdr(kind, 2 + 2 + 3);
            b.extend_from_slice(&[0, 4, 0, 3]);
            b.extend_from_slice(b"x.y");
            exact(mk(Reason::Exists, "x.y".into()), b);
        }
    }

    #[test]
    fn credit_fin_done_layout() {
        let mut b = hdr(5, 4);
        b.extend_from_slice(&[0, 0, 1, 2]);
        exact(Msg::Credit { slots: 258 }, b);
        let mut b = hdr(6, 40);
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 5]);
        b.extend_from_slice(&[3; 32]);
        exact(
            Msg::Fin {
                bytes: 5,
                hash: [3; 32],
            },
            b,
        );
        exact(Msg::Done, hdr(9, 0));
    }

    #[test]
    fn ack_ok_allowed_but_refuse_ok_is_not() {
        let ok = encode(&Msg::Ack {
            status: Reason::Ok,
            message: String::new(),
        });
        assert!(matches!(
            decode(&ok),
            Ok(Msg::Ack {
                status: Reason::Ok,
                ..
            })
        ));
        let mut refuse = hdr(4, 4);
        refuse.extend_from_slice(&[0, 0, 0, 0]);
        assert!(err(&refuse).contains("without a reason"));
    }

    #[test]
    fn distinct_errors() {
        let good = encode(&Msg::Credit { slots: 1 });
        let mut bad = good.clone();
        bad[0] = b'X';
        assert!(err(&bad).contains("bad magic"));
        let mut bad = good.clone();
        bad[5] = 2;
        assert!(err(&bad).contains("unsupported protocol version 2"));
        assert_eq!(
            header(&bad).unwrap().version,
            2,
            "header() reads any version"
        );
        let mut bad = good.clone();
        bad[7] = 99;
        assert!(err(&bad).contains("unknown message type 99"));
        assert!(err(&good[..good.len() - 1]).contains("truncated"));
        assert!(err(&good[..5]).contains("truncated header"));
        assert!(err(&[]).contains("truncated header"));
        let mut bad = good.clone();
        bad.push(0);
        assert!(err(&bad).contains("trailing"));
        assert!(err(&vec![0; MAX_MSG_LEN + 1]).contains("exceeds the maximum"));
        // Header length agrees with the buffer, but the body has an extra byte.
        let mut b = hdr(5, 5);
        b.extend_from_slice(&[0, 0, 0, 1, 0]);
        assert!(err(&b).contains("CREDIT has 1 trailing bytes"));
        // A body shorter than its type needs.
        let mut b = hdr(6, 8);
        b.extend_from_slice(&[0; 8]);
        assert!(err(&b).contains("truncated FIN"));
    }

    #[test]
    fn field_checks() {
        let mut h = encode(&Msg::Hello(hello()));
        h[HEADER_LEN + 2] = 0x80; // unknown flag
        assert!(err(&h).contains("unknown flag"));
        let mut h = encode(&Msg::Hello(hello()));
        h[HEADER_LEN + 28..HEADER_LEN + 32].copy_from_slice(&1_000_000_000u32.to_be_bytes());
        assert!(err(&h).contains("nanoseconds"));
        let mut h = encode(&Msg::Hello(hello()));
        h[HEADER_LEN + 34] = 0xff; // name byte 0 -> invalid UTF-8
        assert!(err(&h).contains("not UTF-8"));
        let mut b = hdr(8, 4);
        b.extend_from_slice(&[0, 200, 0, 0]);
        assert!(err(&b).contains("unknown reason code 200"));
        // Name length over the limit, even with the bytes present.
        let mut b = hdr(1, 32 + 2 + 4097);
        b.extend_from_slice(&[0; 32]);
        b.extend_from_slice(&4097u16.to_be_bytes());
        b.resize(b.len() + 4097, b'a');
        let full = b;
        assert!(err(&full).contains("file name length 4097 exceeds"));
    }

    #[test]
    fn largest_messages_fit() {
        let mut h = hello();
        h.name = "n".repeat(MAX_NAME_LEN);
        let b = encode(&Msg::Hello(h.clone()));
        assert!(b.len() <= MAX_MSG_LEN, "{}", b.len());
        assert_eq!(decode(&b).unwrap(), Msg::Hello(h));
        let e = Msg::Err {
            reason: Reason::Internal,
            message: "é".repeat(MAX_TEXT_LEN / 2),
        };
        assert_eq!(decode(&encode(&e)).unwrap(), e);
    }

    #[test]
    fn truncate_text_keeps_char_boundary() {
        let s = "é".repeat(MAX_TEXT_LEN); // 2 bytes each
        let t = truncate_text(&format!("x{s}"));
        assert!(t.len() <= MAX_TEXT_LEN && t.len() == MAX_TEXT_LEN - 1);
        assert_eq!(truncate_text("short"), "short");
    }

    #[test]
    fn reason_codes_round_trip() {
        for r in Reason::ALL {
            assert_eq!(Reason::from_code(r.code()), Some(r));
        }
        assert_eq!(Reason::from_code(Reason::ALL.len() as u16), None);
        assert_eq!(Reason::HashMismatch.to_string(), "hash mismatch");
    }

    #[test]
    fn imm_layout() {
        assert_eq!(
            encode_imm(Imm {
                slot: 3,
                seq: 0x1234
            }),
            0x1234_0003
        );
        assert_eq!(
            decode_imm(0xffff_0007, 8).unwrap(),
            Imm {
                slot: 7,
                seq: 0xffff
            }
        );
        assert!(decode_imm(0x0000_0008, 8).is_err());
        assert!(decode_imm(0xffff, MAX_SLOTS).is_ok());
    }

    #[test]
    fn auth_answer_is_keyed_and_verifiable() {
        let n1 = new_nonce();
        let n2 = new_nonce();
        assert_ne!(n1, n2);
        let a = auth_answer(b"secret", &n1);
        assert!(auth_verify(b"secret", &n1, Some(&a)));
        assert!(!auth_verify(b"secret", &n2, Some(&a)), "other nonce");
        assert!(!auth_verify(b"Secret", &n1, Some(&a)), "other token");
        assert!(!auth_verify(b"secret", &n1, None), "no answer");
        // Pinned vector: the documented construction.
        let key = blake3::derive_key(AUTH_CONTEXT, b"secret");
        let mut input = b"rdmaxfer HELLO answer v1\0".to_vec();
        input.extend_from_slice(&[0u8; 32]);
        assert_eq!(
            auth_answer(b"secret", &[0; 32]),
            *blake3::keyed_hash(&key, &input).as_bytes()
        );
    }

    fn text(max: usize) -> impl Strategy<Value = String> {
        ".{0,40}".prop_map(move |s: String| {
            let mut end = s.len().min(max);
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s[..end].to_string()
        })
    }

    fn reason(ok: bool) -> impl Strategy<Value = Reason> {
        let lo = if ok { 0 } else { 1 };
        (lo..Reason::ALL.len()).prop_map(|i| Reason::ALL[i])
    }

    fn msg() -> impl Strategy<Value = Msg> {
        let hello = (
            any::<u16>(),
            text(MAX_NAME_LEN),
            any::<u64>(),
            any::<u32>(),
            any::<i64>(),
            0..1_000_000_000u32,
            any::<u32>(),
            any::<[bool; 3]>(),
            any::<Option<Digest>>(),
        )
            .prop_map(|(version, name, size, mode, s, ns, chunk_size, f, auth)| {
                Msg::Hello(Hello {
                    version,
                    name,
                    size,
                    mode,
                    mtime_sec: s,
                    mtime_nsec: ns,
                    chunk_size,
                    flags: HelloFlags {
                        resume: f[0],
                        force: f[1],
                        last: f[2],
                    },
                    auth,
                })
            });
        prop_oneof![
            hello,
            (any::<u16>(), any::<Digest>())
                .prop_map(|(version, nonce)| Msg::Challenge { version, nonce }),
            any::<(u64, u32, u32, u32, u64, Digest)>().prop_map(|t| Msg::Mr(Ring {
                addr: t.0,
                rkey: t.1,
                slot_size: t.2,
                slot_count: t.3,
                resume_offset: t.4,
                resume_hash: t.5,
            })),
            (reason(false), text(MAX_TEXT_LEN))
                .prop_map(|(reason, message)| Msg::Refuse { reason, message }),
            any::<u32>().prop_map(|slots| Msg::Credit { slots }),
            (any::<u64>(), any::<Digest>()).prop_map(|(bytes, hash)| Msg::Fin { bytes, hash }),
            (reason(true), text(MAX_TEXT_LEN))
                .prop_map(|(status, message)| Msg::Ack { status, message }),
            (reason(false), text(MAX_TEXT_LEN))
                .prop_map(|(reason, message)| Msg::Err { reason, message }),
            Just(Msg::Done),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(10_000))]

        #[test]
        fn round_trip(m in msg()) {
            let b = encode(&m);
            prop_assert!(b.len() <= MAX_MSG_LEN);
            prop_assert_eq!(decode(&b).unwrap(), m);
        }

        /// Every proper prefix and every extension of a valid message is refused.
        #[test]
        fn truncated_or_extended_refused(m in msg(), cut in any::<prop::sample::Index>(), extra in 1..8usize) {
            let b = encode(&m);
            let n = cut.index(b.len());
            prop_assert!(decode(&b[..n]).is_err());
            let mut long = b.clone();
            long.resize(b.len() + extra, 0);
            prop_assert!(decode(&long).is_err());
        }

        /// Arbitrary bytes never panic; bytes behind a valid header reach the body decoders.
        #[test]
        fn arbitrary_bytes_never_panic(kind in 0..12u16, body in prop::collection::vec(any::<u8>(), 0..200), raw in prop::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode(&raw);
            let mut b = hdr(kind, body.len() as u32);
            b.extend_from_slice(&body);
            if let Ok(m) = decode(&b) {
                // Anything accepted re-encodes to the same bytes: the layout is canonical.
                prop_assert_eq!(encode(&m), b);
            }
        }

        /// Flipping any byte of a valid message never panics and is either refused or canonical.
        #[test]
        fn mutated_messages(m in msg(), at in any::<prop::sample::Index>(), x in 1..=255u8) {
            let mut b = encode(&m);
            let i = at.index(b.len());
            b[i] ^= x;
            if let Ok(m2) = decode(&b) {
                prop_assert_eq!(encode(&m2), b);
            }
        }

        #[test]
        fn imm_round_trip(slot in any::<u16>(), seq in any::<u16>()) {
            let imm = Imm { slot, seq };
            prop_assert_eq!(decode_imm(encode_imm(imm), MAX_SLOTS).unwrap(), imm);
        }
    }
}
