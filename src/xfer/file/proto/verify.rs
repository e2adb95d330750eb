//! The verification algorithm (negotiated in HELLO) and DIGESTS, the sender's chunk digests.

use super::reader::Reader;
use super::{malformed, HEADER_LEN, MAX_MSG_LEN};
use crate::Result;

/// Longest chunk digest, in bytes.
pub const MAX_CHUNK_DIGEST: usize = 32;

/// How chunks are hashed (`--verify`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
#[non_exhaustive]
pub enum Algo {
    /// BLAKE3-256: cryptographic; resists deliberate collisions.
    Blake3 = 1,
    /// XXH3-128 (rsync's default since 3.2): detects corruption, not adversaries; several
    /// times faster per core.
    Xxh3 = 2,
}

impl Algo {
    /// Every algorithm, in code order.
    pub const ALL: [Algo; 2] = [Algo::Blake3, Algo::Xxh3];
    /// What a sender asks for unless told otherwise (see the measurements in
    /// `docs/file-protocol.md`).
    pub const DEFAULT: Algo = Algo::Xxh3;

    /// The wire code.
    pub fn code(self) -> u16 {
        self as u16
    }

    /// The algorithm of a wire code, if known (0 is not one).
    pub fn from_code(code: u16) -> Option<Algo> {
        Algo::ALL.into_iter().find(|a| a.code() == code)
    }

    /// Bytes of one chunk digest.
    pub fn digest_len(self) -> usize {
        match self {
            Algo::Blake3 => 32,
            Algo::Xxh3 => 16,
        }
    }

    /// `"blake3"` or `"xxh3"` (the `--verify` spelling).
    pub fn as_str(self) -> &'static str {
        match self {
            Algo::Blake3 => "blake3",
            Algo::Xxh3 => "xxh3",
        }
    }
}

impl Default for Algo {
    fn default() -> Algo {
        Algo::DEFAULT
    }
}

impl std::str::FromStr for Algo {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Algo, String> {
        Algo::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| format!("unknown verification {s:?} (blake3 or xxh3)"))
    }
}

impl std::fmt::Display for Algo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The digest of one chunk: [`Algo::digest_len`] significant bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChunkDigest {
    len: u8,
    bytes: [u8; MAX_CHUNK_DIGEST],
}

impl ChunkDigest {
    /// A digest from its wire bytes (`bytes.len()` must be `algo`'s digest length).
    pub fn from_bytes(algo: Algo, bytes: &[u8]) -> Option<ChunkDigest> {
        if bytes.len() != algo.digest_len() {
            return None;
        }
        let mut d = ChunkDigest {
            len: bytes.len() as u8,
            bytes: [0; MAX_CHUNK_DIGEST],
        };
        d.bytes[..bytes.len()].copy_from_slice(bytes);
        Some(d)
    }

    /// The significant bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// Lower-case hexadecimal.
    pub fn to_hex(self) -> String {
        self.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl std::fmt::Debug for ChunkDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ChunkDigest({})", self.to_hex())
    }
}

/// Most chunk digests in one DIGESTS message (a BLAKE3 batch fits [`MAX_MSG_LEN`]).
pub const MAX_DIGESTS: usize = 240;
const _: () = assert!(HEADER_LEN + 12 + MAX_DIGESTS * MAX_CHUNK_DIGEST <= MAX_MSG_LEN);

/// DIGESTS: the sender's digests of chunks `first ..`, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Digests {
    /// Their algorithm (the one HELLO asked for).
    pub algo: Algo,
    /// Index of the first chunk.
    pub first: u64,
    /// At most [`MAX_DIGESTS`] digests of [`Algo::digest_len`] bytes.
    pub digests: Vec<ChunkDigest>,
}

pub(super) fn decode_algo(r: &mut Reader<'_>, what: &str) -> Result<Algo> {
    let code = r.u16()?;
    Algo::from_code(code)
        .ok_or_else(|| malformed(format!("{what} has unknown verification {code}")))
}

pub(super) fn decode_digests(r: &mut Reader<'_>) -> Result<Digests> {
    let algo = decode_algo(r, "DIGESTS")?;
    let first = r.u64()?;
    let count = usize::from(r.u16()?);
    if count == 0 || count > MAX_DIGESTS {
        return Err(malformed(format!(
            "DIGESTS carries {count} digests (1 to {MAX_DIGESTS})"
        )));
    }
    if first.checked_add(count as u64).is_none() {
        return Err(malformed(format!("DIGESTS chunk index {first} overflows")));
    }
    let mut digests = Vec::with_capacity(count);
    for _ in 0..count {
        let b = r.take(algo.digest_len())?;
        digests.push(ChunkDigest::from_bytes(algo, b).expect("length taken"));
    }
    Ok(Digests {
        algo,
        first,
        digests,
    })
}

/// Panics on an empty batch, more than [`MAX_DIGESTS`] or digests of another algorithm: the
/// sender builds batches from its own digests.
pub(super) fn encode_digests(b: &mut Vec<u8>, d: &Digests) {
    assert!(!d.digests.is_empty() && d.digests.len() <= MAX_DIGESTS);
    b.extend_from_slice(&d.algo.code().to_be_bytes());
    b.extend_from_slice(&d.first.to_be_bytes());
    b.extend_from_slice(&(d.digests.len() as u16).to_be_bytes());
    for x in &d.digests {
        assert_eq!(x.as_bytes().len(), d.algo.digest_len());
        b.extend_from_slice(x.as_bytes());
    }
}
