//! Session parameters a client states when it connects, as perftest does: which test, message
//! size, iterations and depth. They travel in the RDMA CM handshake (`xfer::wire::Hello`,
//! version 2), so a server sizes its buffers and queues for them before it accepts, and refuses
//! a client over its [`Limits`] with a reason that names both values.
//!
//! Wire block (24 bytes, big-endian, inside the handshake):
//! `kind u8 | 3 reserved bytes (0) | size u64 | iters u64 | depth u32`. Kind 0 is "no
//! parameters" (every other byte 0); 1 ping-pong, 2 bench write, 3 bench read, 4 bench send.

use crate::error::{Error, Result};

/// Encoded size of the parameter block.
pub const PARAMS_LEN: usize = 24;

/// Default largest message size a server accepts: 8 MiB, Soft-RoCE's maximum message.
pub const DEFAULT_MAX_SIZE: u64 = 8 << 20;
/// Default most iterations a server runs for one client.
pub const DEFAULT_MAX_ITERS: u64 = 1_000_000_000;

/// Which test the client runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionKind {
    /// `rdmaxfer pingpong`.
    Pingpong,
    /// `rdmaxfer bench write`.
    BenchWrite,
    /// `rdmaxfer bench read`.
    BenchRead,
    /// `rdmaxfer bench send`.
    BenchSend,
}

impl SessionKind {
    fn code(self) -> u8 {
        match self {
            SessionKind::Pingpong => 1,
            SessionKind::BenchWrite => 2,
            SessionKind::BenchRead => 3,
            SessionKind::BenchSend => 4,
        }
    }

    /// The command line that runs it ("pingpong", "bench write", …).
    pub fn command(self) -> &'static str {
        match self {
            SessionKind::Pingpong => "pingpong",
            SessionKind::BenchWrite => "bench write",
            SessionKind::BenchRead => "bench read",
            SessionKind::BenchSend => "bench send",
        }
    }
}

/// What a client asks the server for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionParams {
    /// The test.
    pub kind: SessionKind,
    /// Message size in bytes (`-s`).
    pub size: u64,
    /// Iterations (`-n`).
    pub iters: u64,
    /// Work requests in flight (`-t` of bench; 0 when the test has none).
    pub depth: u32,
}

impl SessionParams {
    /// The 24-byte block of `p`; `None` encodes as zeroes.
    pub fn encode(p: Option<&SessionParams>) -> [u8; PARAMS_LEN] {
        let mut b = [0u8; PARAMS_LEN];
        if let Some(p) = p {
            b[0] = p.kind.code();
            b[4..12].copy_from_slice(&p.size.to_be_bytes());
            b[12..20].copy_from_slice(&p.iters.to_be_bytes());
            b[20..24].copy_from_slice(&p.depth.to_be_bytes());
        }
        b
    }

    /// Decodes exactly [`PARAMS_LEN`] bytes. Values are not range-checked here (the server
    /// checks them against its [`Limits`] and says why it refuses); the form is: a known kind,
    /// zero reserved bytes, and all zeroes for "no parameters".
    pub fn decode(b: &[u8]) -> Result<Option<SessionParams>> {
        if b.len() != PARAMS_LEN {
            return Err(Error::Protocol(format!(
                "session parameters are {} bytes, expected {PARAMS_LEN}",
                b.len()
            )));
        }
        if b[1..4] != [0, 0, 0] {
            return Err(Error::Protocol(
                "session parameters: reserved bytes are not zero".into(),
            ));
        }
        let u64_at = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let kind = match b[0] {
            0 if b.iter().all(|&x| x == 0) => return Ok(None),
            0 => {
                return Err(Error::Protocol(
                    "session parameters: values without a kind".into(),
                ))
            }
            1 => SessionKind::Pingpong,
            2 => SessionKind::BenchWrite,
            3 => SessionKind::BenchRead,
            4 => SessionKind::BenchSend,
            k => {
                return Err(Error::Protocol(format!(
                    "session parameters: unknown kind {k} (is the peer a newer rdmaxfer?)"
                )))
            }
        };
        Ok(Some(SessionParams {
            kind,
            size: u64_at(4),
            iters: u64_at(12),
            depth: u32::from_be_bytes(b[20..24].try_into().expect("4 bytes")),
        }))
    }
}

/// What a server allows one client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Largest message size (`--max-size`).
    pub max_size: u64,
    /// Most iterations (`--max-iters`).
    pub max_iters: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_size: DEFAULT_MAX_SIZE,
            max_iters: DEFAULT_MAX_ITERS,
        }
    }
}

impl Limits {
    setters! {
        max_size: u64,
        max_iters: u64,
    }

    /// Checks a client's size and iterations; the refusal names the limit and what was asked
    /// for, in the options' own terms (e.g. "the server allows at most -s 8M; asked for -s 16M").
    pub fn check(&self, size: u64, iters: u64) -> std::result::Result<(), String> {
        if size == 0 || iters == 0 {
            return Err(format!(
                "asked for -s {} -n {iters}; the server needs both at least 1",
                fmt_size(size)
            ));
        }
        if size > self.max_size {
            return Err(format!(
                "the server allows at most -s {}; asked for -s {} (the server's --max-size)",
                fmt_size(self.max_size),
                fmt_size(size)
            ));
        }
        if iters > self.max_iters {
            return Err(format!(
                "the server allows at most -n {}; asked for -n {iters} (the server's --max-iters)",
                self.max_iters
            ));
        }
        Ok(())
    }
}

/// A byte count as the `-s` option takes it: `16M`, `64K`, `3G`, or plain bytes when it is not
/// a whole number of KiB.
pub(crate) fn fmt_size(n: u64) -> String {
    for (shift, unit) in [(40, 'T'), (30, 'G'), (20, 'M'), (10, 'K')] {
        if n != 0 && n % (1u64 << shift) == 0 {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn none_is_all_zero_and_round_trips() {
        let b = SessionParams::encode(None);
        assert_eq!(b, [0; PARAMS_LEN]);
        assert_eq!(SessionParams::decode(&b).unwrap(), None);
        let mut b = b;
        b[12] = 1;
        assert!(SessionParams::decode(&b).is_err(), "values without a kind");
    }

    #[test]
    fn bad_forms_are_refused() {
        let p = SessionParams {
            kind: SessionKind::BenchSend,
            size: 1 << 20,
            iters: 100,
            depth: 128,
        };
        let good = SessionParams::encode(Some(&p));
        assert_eq!(SessionParams::decode(&good).unwrap(), Some(p));
        assert!(SessionParams::decode(&good[..23]).is_err());
        let mut b = good;
        b[2] = 1;
        assert!(SessionParams::decode(&b).is_err(), "reserved");
        let mut b = good;
        b[0] = 9;
        let e = SessionParams::decode(&b).unwrap_err().to_string();
        assert!(e.contains("unknown kind 9"), "{e}");
    }

    #[test]
    fn limits_name_both_values() {
        let l = Limits::default();
        assert!(l.check(8 << 20, 10).is_ok());
        let e = l.check(16 << 20, 10).unwrap_err();
        assert!(
            e.contains("at most -s 8M") && e.contains("asked for -s 16M"),
            "{e}"
        );
        let e = l.check(64, DEFAULT_MAX_ITERS + 1).unwrap_err();
        assert!(
            e.contains("at most -n 1000000000") && e.contains("-n 1000000001"),
            "{e}"
        );
        assert!(l.check(0, 1).is_err() && l.check(1, 0).is_err());
    }

    #[test]
    fn sizes_print_as_options_take_them() {
        assert_eq!(fmt_size(16 << 20), "16M");
        assert_eq!(fmt_size(65536), "64K");
        assert_eq!(fmt_size(1000), "1000");
        assert_eq!(fmt_size(0), "0");
        assert_eq!(fmt_size(3 << 30), "3G");
    }

    proptest! {
        #[test]
        fn decode_never_panics_and_round_trips(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(p) = SessionParams::decode(&b) {
                prop_assert_eq!(&SessionParams::encode(p.as_ref())[..], &b[..]);
            }
        }
    }
}
