//! Streams: several connections (QPs, possibly on several devices) carrying one transfer in one
//! authenticated session. OPEN (the first connection asks for streams, authenticated as a
//! HELLO is), SESSION (the receiver's answer: an unguessable session id and the streams it
//! grants), JOIN (a further connection joins with that id) and STRIPE (the next file HELLO
//! on this connection covers one byte range of the file). See "Streams" in
//! `docs/file-protocol.md`.

use super::reader::Reader;
use super::{malformed, Digest};
use crate::Result;

/// Length of a session id: 128 random bits.
pub const SESSION_ID_LEN: usize = 16;
/// A session id (random, from the receiver).
pub type SessionId = [u8; SESSION_ID_LEN];
/// Most streams of one transfer that the protocol carries (a receiver grants at most its own
/// cap, `recv --max-streams`).
pub const MAX_STREAMS: u16 = 64;
/// Most stripes of one file.
pub const MAX_STRIPES: u16 = MAX_STREAMS;

/// Flag bit of OPEN and JOIN: an authentication answer follows.
const F_AUTH: u16 = 1;

/// OPEN (sender → receiver, first connection, in place of the first HELLO): asks for
/// `streams` connections in all (this one included).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Open {
    /// Streams asked for, 2..=[`MAX_STREAMS`].
    pub streams: u16,
    /// Answer to this connection's CHALLENGE (as in HELLO), when the sender has a token.
    pub auth: Option<Digest>,
}

/// SESSION (receiver → sender): the answer to OPEN and to an accepted JOIN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Session {
    /// The session's id (random; a JOIN must name it).
    pub id: SessionId,
    /// Streams granted, 1..=[`MAX_STREAMS`] (1: go on with this connection only).
    pub streams: u16,
    /// This connection's stream index (0 for the one that sent OPEN).
    pub index: u16,
}

/// JOIN (sender → receiver, further connections, in place of the first HELLO).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Join {
    /// The id SESSION gave.
    pub id: SessionId,
    /// This stream's index, 1..streams granted.
    pub index: u16,
    /// Answer to this connection's CHALLENGE, when the sender has a token.
    pub auth: Option<Digest>,
}

/// STRIPE (sender → receiver): the next HELLO (a file) covers bytes
/// `[offset, offset + len)` of the file, stripe `index` of `count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stripe {
    /// 0-based, below `count`.
    pub index: u16,
    /// Stripes of the file, 2..=[`MAX_STRIPES`].
    pub count: u16,
    /// First byte of the range.
    pub offset: u64,
    /// Bytes in the range (`offset + len` does not overflow).
    pub len: u64,
}

fn put_auth(b: &mut Vec<u8>, auth: &Option<Digest>) {
    b.extend_from_slice(&(if auth.is_some() { F_AUTH } else { 0 }).to_be_bytes());
    if let Some(a) = auth {
        b.extend_from_slice(a);
    }
}

fn auth(r: &mut Reader<'_>, what: &str) -> Result<Option<Digest>> {
    let flags = r.u16()?;
    if flags & !F_AUTH != 0 {
        return Err(malformed(format!(
            "{what} has unknown flag bits {flags:#06x}"
        )));
    }
    (flags & F_AUTH != 0).then(|| r.digest()).transpose()
}

fn streams(n: u16, min: u16, what: &str) -> Result<u16> {
    if n < min || n > MAX_STREAMS {
        return Err(malformed(format!(
            "{what} names {n} streams, outside {min}..={MAX_STREAMS}"
        )));
    }
    Ok(n)
}

pub(super) fn encode_open(b: &mut Vec<u8>, o: &Open) {
    b.extend_from_slice(&o.streams.to_be_bytes());
    put_auth(b, &o.auth);
}

pub(super) fn decode_open(r: &mut Reader<'_>) -> Result<Open> {
    let n = streams(r.u16()?, 2, "OPEN")?;
    Ok(Open {
        streams: n,
        auth: auth(r, "OPEN")?,
    })
}

pub(super) fn encode_session(b: &mut Vec<u8>, s: &Session) {
    b.extend_from_slice(&s.id);
    b.extend_from_slice(&s.streams.to_be_bytes());
    b.extend_from_slice(&s.index.to_be_bytes());
}

pub(super) fn decode_session(r: &mut Reader<'_>) -> Result<Session> {
    let id = r.array()?;
    let n = streams(r.u16()?, 1, "SESSION")?;
    let index = r.u16()?;
    if index >= n {
        return Err(malformed(format!(
            "SESSION gives stream index {index} of {n} streams"
        )));
    }
    Ok(Session {
        id,
        streams: n,
        index,
    })
}

pub(super) fn encode_join(b: &mut Vec<u8>, j: &Join) {
    b.extend_from_slice(&j.id);
    b.extend_from_slice(&j.index.to_be_bytes());
    put_auth(b, &j.auth);
}

pub(super) fn decode_join(r: &mut Reader<'_>) -> Result<Join> {
    let id = r.array()?;
    let index = r.u16()?;
    if index == 0 || index >= MAX_STREAMS {
        return Err(malformed(format!(
            "JOIN as stream {index} (the first stream opens the session; at most {MAX_STREAMS})"
        )));
    }
    Ok(Join {
        id,
        index,
        auth: auth(r, "JOIN")?,
    })
}

pub(super) fn encode_stripe(b: &mut Vec<u8>, s: &Stripe) {
    b.extend_from_slice(&s.index.to_be_bytes());
    b.extend_from_slice(&s.count.to_be_bytes());
    b.extend_from_slice(&s.offset.to_be_bytes());
    b.extend_from_slice(&s.len.to_be_bytes());
}

pub(super) fn decode_stripe(r: &mut Reader<'_>) -> Result<Stripe> {
    let s = Stripe {
        index: r.u16()?,
        count: r.u16()?,
        offset: r.u64()?,
        len: r.u64()?,
    };
    if s.count < 2 || s.count > MAX_STRIPES || s.index >= s.count {
        return Err(malformed(format!(
            "STRIPE {} of {} (stripes: 2..={MAX_STRIPES}, index below the count)",
            s.index, s.count
        )));
    }
    if s.offset.checked_add(s.len).is_none() {
        return Err(malformed(format!(
            "STRIPE range of {} bytes at {} overflows",
            s.len, s.offset
        )));
    }
    Ok(s)
}

impl Stripe {
    /// One past the range's last byte.
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// The digest a striped file is reported and compared by: BLAKE3 over a domain string, the
/// stripe count and each stripe's offset, length and BLAKE3, in stripe order. Both sides
/// compute it from the stripes they verified.
pub fn striped_digest(stripes: &[(u64, u64, Digest)]) -> Digest {
    let mut h = blake3::Hasher::new();
    h.update(b"rdmaxfer striped file v1\0");
    h.update(&(stripes.len() as u64).to_be_bytes());
    for (off, len, d) in stripes {
        h.update(&off.to_be_bytes());
        h.update(&len.to_be_bytes());
        h.update(d);
    }
    *h.finalize().as_bytes()
}

/// A fresh random session id (the operating system's generator).
pub fn new_session_id() -> SessionId {
    let n = super::new_nonce();
    let mut id = [0u8; SESSION_ID_LEN];
    id.copy_from_slice(&n[..SESSION_ID_LEN]);
    id
}

/// Splits `size` bytes into at most `count` stripes aligned to `align` bytes (the last takes
/// the rest); fewer when the file has fewer aligned blocks. Empty for an empty file.
pub fn plan_stripes(size: u64, count: u16, align: u64) -> Vec<Stripe> {
    let align = align.max(1);
    let blocks = size.div_ceil(align);
    let n = u64::from(count.clamp(1, MAX_STRIPES)).min(blocks);
    if n < 2 {
        return Vec::new();
    }
    let per = blocks / n;
    let extra = blocks % n;
    let mut out = Vec::with_capacity(n as usize);
    let mut off = 0u64;
    for i in 0..n {
        let b = per + u64::from(i < extra);
        let len = (b * align).min(size - off);
        out.push(Stripe {
            index: i as u16,
            count: n as u16,
            offset: off,
            len,
        });
        off += len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripes_cover_the_file_in_aligned_pieces() {
        let s = plan_stripes(32 << 20, 3, 1 << 20);
        assert_eq!(s.len(), 3);
        assert_eq!(s.iter().map(|s| s.len).sum::<u64>(), 32 << 20);
        assert_eq!(s[0].offset, 0);
        for w in s.windows(2) {
            assert_eq!(w[0].end(), w[1].offset);
            assert_eq!(w[1].offset % (1 << 20), 0);
        }
        assert_eq!((s[0].len, s[2].len), (11 << 20, 10 << 20));
        assert!(
            plan_stripes(1000, 4, 4096).is_empty(),
            "one block: no stripes"
        );
        assert_eq!(plan_stripes(5000, 4, 4096).len(), 2);
        assert_eq!(plan_stripes(5000, 4, 4096)[1].len, 5000 - 4096);
        assert!(plan_stripes(0, 4, 4096).is_empty());
    }

    #[test]
    fn messages_round_trip_and_bad_ones_are_refused() {
        use super::super::{decode, encode, Msg};
        let id = [9u8; SESSION_ID_LEN];
        for m in [
            Msg::Open(Open {
                streams: 3,
                auth: Some([1; 32]),
            }),
            Msg::Open(Open {
                streams: 64,
                auth: None,
            }),
            Msg::Session(Session {
                id,
                streams: 2,
                index: 1,
            }),
            Msg::Join(Join {
                id,
                index: 2,
                auth: Some([2; 32]),
            }),
            Msg::Stripe(Stripe {
                index: 1,
                count: 3,
                offset: 1 << 20,
                len: 5,
            }),
        ] {
            let b = encode(&m);
            assert_eq!(decode(&b).unwrap(), m);
            assert!(decode(&b[..b.len() - 1]).is_err(), "truncated {m:?}");
        }
        let bad = [
            Msg::Open(Open {
                streams: 1,
                auth: None,
            }),
            Msg::Open(Open {
                streams: 65,
                auth: None,
            }),
            Msg::Session(Session {
                id,
                streams: 2,
                index: 2,
            }),
            Msg::Join(Join {
                id,
                index: 0,
                auth: None,
            }),
            Msg::Stripe(Stripe {
                index: 2,
                count: 2,
                offset: 0,
                len: 1,
            }),
            Msg::Stripe(Stripe {
                index: 0,
                count: 1,
                offset: 0,
                len: 1,
            }),
            Msg::Stripe(Stripe {
                index: 0,
                count: 2,
                offset: u64::MAX,
                len: 1,
            }),
        ];
        for m in bad {
            let e = decode(&encode(&m)).unwrap_err().to_string();
            assert!(e.contains("stream") || e.contains("STRIPE"), "{m:?}: {e}");
        }
        let mut b = encode(&Msg::Join(Join {
            id,
            index: 1,
            auth: None,
        }));
        let n = b.len();
        b[n - 1] = 2; // an unknown flag bit
        assert!(decode(&b).unwrap_err().to_string().contains("flag"));
    }

    #[test]
    fn striped_digest_depends_on_every_field() {
        let base = [(0, 10, [1u8; 32]), (10, 5, [2u8; 32])];
        let d = striped_digest(&base);
        assert_ne!(d, striped_digest(&[(0, 10, [1u8; 32]), (10, 6, [2u8; 32])]));
        assert_ne!(d, striped_digest(&[(0, 10, [1u8; 32]), (10, 5, [3u8; 32])]));
        assert_ne!(d, striped_digest(&base[..1]));
        assert_ne!(new_session_id(), new_session_id());
    }
}
