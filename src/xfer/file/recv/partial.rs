//! The resume state of a striped file (see "Streams" in `docs/file-protocol.md`): for each
//! stripe, its range and the bytes it holds without a gap, kept by the receiver in a small file
//! next to the temporary file (`.<name>.rdmaxfer-stripes`, fsynced), so that a restarted
//! receiver continues every stripe where it stopped. The file is read back from disk, so its
//! decoder ([`decode`]) refuses anything but the exact, checksummed encoding of a consistent
//! state (it is covered by the `file_proto` fuzz target).
//!
//! ```text
//! magic "RXSTRIPE" | version u16 (1) | file size u64 | stripes u16 (1..=64)
//!   | stripes × (offset u64, length u64, held u64) | BLAKE3 of everything before (32 bytes)
//! ```
//! Big-endian; every stripe lies within the file and holds at most its length.

use crate::xfer::file::proto::MAX_STRIPES;
use crate::{Error, Result};

/// The file's first bytes.
pub const MAGIC: &[u8; 8] = b"RXSTRIPE";
/// The format's version.
pub const VERSION: u16 = 1;
const HEAD: usize = 8 + 2 + 8 + 2;
const PER: usize = 24;
const SUM: usize = 32;
/// The longest encoding (64 stripes).
pub const MAX_LEN: usize = HEAD + PER * MAX_STRIPES as usize + SUM;

/// One stripe's range and the bytes of it held from its offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldStripe {
    /// Offset in the file.
    pub offset: u64,
    /// Length.
    pub len: u64,
    /// Bytes held from the offset without a gap (at most `len`).
    pub held: u64,
}

/// What a receiver keeps of an abandoned striped file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StripeState {
    /// The file's size.
    pub size: u64,
    /// Every stripe, in stripe order.
    pub stripes: Vec<HeldStripe>,
}

impl StripeState {
    fn check(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Protocol(format!("stripe state: {m}")));
        if self.stripes.is_empty() || self.stripes.len() > usize::from(MAX_STRIPES) {
            return bad(format!("{} stripes", self.stripes.len()));
        }
        for (i, s) in self.stripes.iter().enumerate() {
            let fits = s.offset.checked_add(s.len).is_some_and(|e| e <= self.size);
            if !fits || s.held > s.len {
                return bad(format!(
                    "stripe {i} ({} of {} bytes at {}) does not fit a {}-byte file",
                    s.held, s.len, s.offset, self.size
                ));
            }
        }
        Ok(())
    }
}

/// The encoding of `s` (which must be consistent: see [`decode`]).
pub fn encode(s: &StripeState) -> Result<Vec<u8>> {
    s.check()?;
    let mut b = Vec::with_capacity(HEAD + PER * s.stripes.len() + SUM);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&VERSION.to_be_bytes());
    b.extend_from_slice(&s.size.to_be_bytes());
    b.extend_from_slice(&(s.stripes.len() as u16).to_be_bytes());
    for h in &s.stripes {
        for v in [h.offset, h.len, h.held] {
            b.extend_from_slice(&v.to_be_bytes());
        }
    }
    Ok(seal(&b))
}

/// `body` followed by its checksum (what [`encode`] appends): lets a fuzzer reach the checks
/// behind the checksum.
pub fn seal(body: &[u8]) -> Vec<u8> {
    let mut b = body.to_vec();
    b.extend_from_slice(blake3::hash(body).as_bytes());
    b
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

/// Decodes a stripe state: refuses a wrong magic, another version, a length other than its
/// stripe count needs, a checksum that does not match, and an inconsistent state.
pub fn decode(b: &[u8]) -> Result<StripeState> {
    let bad = |m: &str| Err(Error::Protocol(format!("stripe state: {m}")));
    if b.len() < HEAD + SUM || b.len() > MAX_LEN {
        return bad("bad length");
    }
    if &b[..8] != MAGIC {
        return bad("bad magic");
    }
    if u16::from_be_bytes([b[8], b[9]]) != VERSION {
        return bad("unknown version");
    }
    let count = usize::from(u16::from_be_bytes([b[18], b[19]]));
    if b.len() != HEAD + PER * count + SUM {
        return bad("length does not match the stripe count");
    }
    let body = b.len() - SUM;
    if blake3::hash(&b[..body]).as_bytes() != &b[body..] {
        return bad("checksum mismatch (torn or altered)");
    }
    let stripes = (0..count)
        .map(|i| {
            let at = HEAD + PER * i;
            HeldStripe {
                offset: u64_at(b, at),
                len: u64_at(b, at + 8),
                held: u64_at(b, at + 16),
            }
        })
        .collect();
    let s = StripeState {
        size: u64_at(b, 10),
        stripes,
    };
    s.check()?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> StripeState {
        StripeState {
            size: 100,
            stripes: vec![
                HeldStripe {
                    offset: 0,
                    len: 60,
                    held: 20,
                },
                HeldStripe {
                    offset: 60,
                    len: 40,
                    held: 40,
                },
            ],
        }
    }

    #[test]
    fn round_trips_and_refuses_anything_else() {
        let s = state();
        let b = encode(&s).unwrap();
        assert_eq!(b.len(), HEAD + 2 * PER + SUM);
        assert_eq!(decode(&b).unwrap(), s);
        // Every single-byte change is refused (the checksum covers the body, the body the sum).
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x01;
            assert!(decode(&c).is_err(), "byte {i} changed");
        }
        assert!(decode(&b[..b.len() - 1]).is_err(), "truncated");
        assert!(decode(&[b.as_slice(), &[0]].concat()).is_err(), "trailing");
        assert!(decode(&[]).is_err());
        // Inconsistent states are neither written nor read.
        for broken in [
            StripeState {
                size: 50,
                ..state()
            },
            StripeState {
                stripes: vec![],
                ..state()
            },
            StripeState {
                stripes: vec![HeldStripe {
                    offset: 0,
                    len: 10,
                    held: 11,
                }],
                ..state()
            },
            StripeState {
                stripes: vec![HeldStripe {
                    offset: u64::MAX,
                    len: 2,
                    held: 0,
                }],
                ..state()
            },
        ] {
            assert!(encode(&broken).is_err(), "{broken:?}");
        }
        let many = StripeState {
            size: 1000,
            stripes: vec![
                HeldStripe {
                    offset: 0,
                    len: 1,
                    held: 1
                };
                65
            ],
        };
        assert!(encode(&many).is_err(), "65 stripes");
    }
}
