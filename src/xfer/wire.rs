//! Wire formats of connection set-up, as pure functions:
//! - ibv_rc_pingpong's out-of-band address message (`"%04x:%06x:%06x:%s"` + NUL, 52 bytes) and
//!   its `"done"` reply;
//! - rdmaxfer's RDMA CM handshake (private data of connect and accept) and reject reason;
//! - the immediate-data word that carries flow-control credits on SEND_WITH_IMM.
//!
//! All multi-byte integers are big-endian; decoders check lengths and never panic.

use crate::error::{Error, Result};
use crate::verbs::Gid;
use crate::xfer::params::{SessionParams, PARAMS_LEN};

/// Size of ibv_rc_pingpong's address message, NUL included.
pub const OOB_MSG_LEN: usize = 52;
/// ibv_rc_pingpong's reply after the exchange: `"done"` and its NUL.
pub const OOB_DONE: &[u8; 5] = b"done\0";

/// How an rdmaxfer server over the out-of-band exchange refuses a client it will not set up
/// (busy, over its limits), in place of its address: this prefix, the [`RejectCode`] (u16,
/// big-endian), a short reason, NULs to [`OOB_MSG_LEN`].
pub(crate) const OOB_REFUSED: &[u8] = b"RDMAXFER-REFUSED:";

/// The refusal record (see [`OOB_REFUSED`]) of `r`, its text cut to fit (at a character
/// boundary).
pub(crate) fn oob_refusal(r: &Reject) -> [u8; OOB_MSG_LEN] {
    let mut out = [0u8; OOB_MSG_LEN];
    out[..OOB_REFUSED.len()].copy_from_slice(OOB_REFUSED);
    let code = OOB_REFUSED.len();
    out[code..code + 2].copy_from_slice(&r.code.to_u16().to_be_bytes());
    let room = OOB_MSG_LEN - 1 - code - 2;
    let mut n = r.text.len().min(room);
    while !r.text.is_char_boundary(n) {
        n -= 1;
    }
    out[code + 2..][..n].copy_from_slice(&r.text.as_bytes()[..n]);
    out
}

/// The refusal a record carries, or `None` when `b` is not one (an address, say).
pub(crate) fn oob_refusal_of(b: &[u8]) -> Option<Reject> {
    let rest = b.strip_prefix(OOB_REFUSED)?;
    let (code, text) = rest.split_at_checked(2)?;
    let end = text.iter().position(|&c| c == 0).unwrap_or(text.len());
    Some(Reject {
        code: RejectCode::from_u16(u16::from_be_bytes([code[0], code[1]])),
        text: String::from_utf8_lossy(&text[..end]).into_owned(),
    })
}

/// One side's QP address as ibv_rc_pingpong exchanges it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OobDest {
    /// Port LID (0 on RoCE).
    pub lid: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// First packet sequence number (24 bits).
    pub psn: u32,
    /// Port GID (zero when the tool ran without `-g`).
    pub gid: Gid,
}

impl OobDest {
    /// `sprintf("%04x:%06x:%06x:%s")` of LID, QPN, PSN and the GID as 32 hex digits, plus NUL.
    pub fn encode(&self) -> [u8; OOB_MSG_LEN] {
        let s = format!(
            "{:04x}:{:06x}:{:06x}:{}",
            self.lid,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.gid.to_wire_hex()
        );
        let mut out = [0u8; OOB_MSG_LEN];
        out[..OOB_MSG_LEN - 1].copy_from_slice(s.as_bytes());
        out
    }

    /// Parses a 52-byte message (strictly: field widths, `:` separators, hex digits, final NUL).
    pub fn decode(b: &[u8]) -> Result<OobDest> {
        if b.len() != OOB_MSG_LEN {
            return Err(Error::Protocol(format!(
                "out-of-band address message is {} bytes, expected {OOB_MSG_LEN} (LID:QPN:PSN:GID as ibv_rc_pingpong sends it)",
                b.len()
            )));
        }
        if b[OOB_MSG_LEN - 1] != 0 {
            return Err(Error::Protocol(
                "out-of-band address message is not NUL-terminated".into(),
            ));
        }
        let body = &b[..OOB_MSG_LEN - 1];
        let bad = |why: &str| {
            Error::Protocol(format!(
                "bad out-of-band address message ({why}): {:?}",
                String::from_utf8_lossy(body)
            ))
        };
        if body[4] != b':' || body[11] != b':' || body[18] != b':' {
            return Err(bad("expected LLLL:QQQQQQ:PPPPPP:GID"));
        }
        let hex = |r: std::ops::Range<usize>, name: &str| -> Result<u32> {
            let f = &body[r];
            if !f.iter().all(u8::is_ascii_hexdigit) {
                return Err(bad(&format!("{name} is not hex")));
            }
            let s = std::str::from_utf8(f).map_err(|_| bad(name))?;
            u32::from_str_radix(s, 16).map_err(|_| bad(name))
        };
        let lid = hex(0..4, "LID")? as u16;
        let qpn = hex(5..11, "QPN")?;
        let psn = hex(12..18, "PSN")?;
        let g = &body[19..];
        if !g.iter().all(u8::is_ascii_hexdigit) {
            return Err(bad("GID is not 32 hex digits"));
        }
        let gid = Gid::from_wire_hex(std::str::from_utf8(g).map_err(|_| bad("GID"))?)
            .map_err(|_| bad("GID"))?;
        Ok(OobDest { lid, qpn, psn, gid })
    }
}

/// Checks ibv_rc_pingpong's `"done"` reply (exactly 5 bytes).
pub fn check_done(b: &[u8]) -> Result<()> {
    if b == OOB_DONE {
        Ok(())
    } else {
        Err(Error::Protocol(format!(
            "expected \"done\\0\" from the peer, got {:?}",
            String::from_utf8_lossy(b)
        )))
    }
}

/// Magic of the CM handshake: "RDXF".
pub const HELLO_MAGIC: u32 = 0x5244_5846;
/// Magic of a reject reason: "RDXJ".
pub const REJECT_MAGIC: u32 = 0x5244_584a;
/// Handshake version this build speaks (2: the client's session parameters follow).
pub const HELLO_VERSION: u16 = 2;
/// Encoded size of [`Hello`]: 16 bytes, then the 24-byte session parameter block.
pub const HELLO_LEN: usize = 16 + PARAMS_LEN;
/// Encoded size of [`Reject`] without its text.
pub const REJECT_HEADER_LEN: usize = 8;

/// The CM handshake each side sends as private data (connect request, then accept):
/// `magic u32 | version u16 | flags u16 | recv_depth u32 | msg_size u32 | params (24 bytes)`,
/// big-endian; the parameter block is [`SessionParams`]' (all zero: none; servers send none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Protocol version.
    pub version: u16,
    /// Reserved, 0.
    pub flags: u16,
    /// Receives the sender keeps posted: the credits it grants.
    pub recv_depth: u32,
    /// Size of each of its receive buffers: the largest message it accepts.
    pub msg_size: u32,
    /// What the client asks the server for (a client's connect request only).
    pub params: Option<SessionParams>,
}

impl Hello {
    /// A version-[`HELLO_VERSION`] handshake without session parameters.
    pub fn new(recv_depth: u32, msg_size: u32) -> Hello {
        Hello {
            version: HELLO_VERSION,
            flags: 0,
            recv_depth,
            msg_size,
            params: None,
        }
    }

    /// The same handshake carrying `params`.
    pub fn with_params(self, params: Option<SessionParams>) -> Hello {
        Hello { params, ..self }
    }

    /// The [`HELLO_LEN`]-byte wire form.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(&HELLO_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&self.version.to_be_bytes());
        b[6..8].copy_from_slice(&self.flags.to_be_bytes());
        b[8..12].copy_from_slice(&self.recv_depth.to_be_bytes());
        b[12..16].copy_from_slice(&self.msg_size.to_be_bytes());
        b[16..].copy_from_slice(&SessionParams::encode(self.params.as_ref()));
        b
    }

    /// Decodes a handshake. Bytes past [`HELLO_LEN`] are ignored: the IB CM pads private data
    /// with zeroes to a fixed size.
    pub fn decode(b: &[u8]) -> Result<Hello> {
        // Magic and version first: a version-1 peer sends 16 bytes (CM pads them to 56).
        if b.len() < 8 {
            return Err(Error::Protocol(format!(
                "handshake is {} bytes, expected at least {HELLO_LEN} (is the peer rdmaxfer?)",
                b.len()
            )));
        }
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u16_at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let magic = u32_at(0);
        if magic != HELLO_MAGIC {
            return Err(Error::Protocol(format!("handshake magic is {magic:#010x}, expected {HELLO_MAGIC:#010x} (is the peer rdmaxfer?)")));
        }
        let version = u16_at(4);
        if version == HELLO_VERSION && b.len() < HELLO_LEN {
            return Err(Error::Protocol(format!(
                "handshake is {} bytes, expected at least {HELLO_LEN}",
                b.len()
            )));
        }
        if version != HELLO_VERSION {
            return Err(Error::Version {
                what: "connection handshake",
                ours: HELLO_VERSION,
                theirs: version,
            });
        }
        let h = Hello {
            version,
            flags: u16_at(6),
            recv_depth: u32_at(8),
            msg_size: u32_at(12),
            params: SessionParams::decode(&b[16..HELLO_LEN])?,
        };
        if h.recv_depth == 0 || h.recv_depth > MAX_CREDITS {
            return Err(Error::Protocol(format!(
                "peer's receive depth {} is outside 1..={MAX_CREDITS}",
                h.recv_depth
            )));
        }
        if h.msg_size == 0 {
            return Err(Error::Protocol("peer's message size is 0".into()));
        }
        Ok(h)
    }
}

/// Why a server refused a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RejectCode {
    /// The handshake could not be decoded.
    BadHandshake,
    /// The handshake version is not supported.
    Version,
    /// The server could not set the connection up (resources, device).
    Resources,
    /// The client's session parameters are over the server's limits (or not what it serves).
    Limits,
    /// The server serves as many connections as it may: retry later.
    Busy,
    /// A code this build does not know.
    Other(u16),
}

impl RejectCode {
    fn to_u16(self) -> u16 {
        match self {
            RejectCode::BadHandshake => 1,
            RejectCode::Version => 2,
            RejectCode::Resources => 3,
            RejectCode::Limits => 4,
            RejectCode::Busy => 5,
            RejectCode::Other(x) => x,
        }
    }

    fn from_u16(v: u16) -> RejectCode {
        match v {
            1 => RejectCode::BadHandshake,
            2 => RejectCode::Version,
            3 => RejectCode::Resources,
            4 => RejectCode::Limits,
            5 => RejectCode::Busy,
            x => RejectCode::Other(x),
        }
    }
}

/// A reject reason: `magic u32 | version u16 | code u16 | UTF-8 text`, big-endian.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reject {
    /// What went wrong.
    pub code: RejectCode,
    /// Human-readable detail (may be truncated).
    pub text: String,
}

impl Reject {
    /// The wire form, at most `max` bytes (the text is cut at a character boundary).
    pub fn encode(&self, max: usize) -> Vec<u8> {
        let mut b = Vec::with_capacity(max);
        b.extend_from_slice(&REJECT_MAGIC.to_be_bytes());
        b.extend_from_slice(&HELLO_VERSION.to_be_bytes());
        b.extend_from_slice(&self.code.to_u16().to_be_bytes());
        let room = max.saturating_sub(REJECT_HEADER_LEN);
        let mut end = self.text.len().min(room);
        while !self.text.is_char_boundary(end) {
            end -= 1;
        }
        b.extend_from_slice(&self.text.as_bytes()[..end]);
        b
    }

    /// The error a client's connect to `dst` fails with: [`Error::Refused`] for what a caller
    /// may handle (busy: [`Reason::Busy`]; a version or handshake the server does not take),
    /// else [`Error::Connection`].
    ///
    /// [`Reason::Busy`]: crate::error::Reason::Busy
    pub(crate) fn into_error(self, dst: impl std::fmt::Display) -> Error {
        use crate::error::Reason;
        let reason = match self.code {
            RejectCode::Busy => Reason::Busy,
            RejectCode::Version => Reason::Version,
            RejectCode::BadHandshake => Reason::Protocol,
            RejectCode::Resources | RejectCode::Limits | RejectCode::Other(_) => {
                return Error::Connection(format!(
                    "connecting to {dst}: rejected by the server: {}",
                    self.text
                ))
            }
        };
        Error::refused(
            reason,
            format!("connecting to {dst}, the server said: {}", self.text),
        )
    }

    /// Decodes a reject reason; `None` if the bytes are not one (e.g. the CM's own reject).
    /// Trailing NULs (CM padding) are dropped from the text.
    pub fn decode(b: &[u8]) -> Option<Reject> {
        if b.len() < REJECT_HEADER_LEN || b[0..4] != REJECT_MAGIC.to_be_bytes() {
            return None;
        }
        let code = RejectCode::from_u16(u16::from_be_bytes([b[6], b[7]]));
        let text = &b[REJECT_HEADER_LEN..];
        let end = text.iter().position(|&c| c == 0).unwrap_or(text.len());
        Some(Reject {
            code,
            text: String::from_utf8_lossy(&text[..end]).into_owned(),
        })
    }
}

/// Largest credit count one immediate word carries (24 bits).
pub const MAX_CREDITS: u32 = 0xff_ffff;

/// What a SEND_WITH_IMM between rdmaxfer endpoints is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImmKind {
    /// An application message (returning `credits`).
    Data,
    /// Only returns credits; carries no payload and needs no credit itself.
    Credit,
}

/// Packs kind and returned credits into the immediate word: `kind u8 | credits u24`.
pub fn encode_imm(kind: ImmKind, credits: u32) -> u32 {
    let k: u32 = match kind {
        ImmKind::Data => 0,
        ImmKind::Credit => 1,
    };
    (k << 24) | credits.min(MAX_CREDITS)
}

/// Unpacks [`encode_imm`]'s word.
#[inline]
pub fn decode_imm(imm: u32) -> Result<(ImmKind, u32)> {
    let kind = match imm >> 24 {
        0 => ImmKind::Data,
        1 => ImmKind::Credit,
        k => return Err(unknown_kind(k, imm)),
    };
    Ok((kind, imm & MAX_CREDITS))
}

#[cold]
fn unknown_kind(k: u32, imm: u32) -> Error {
    Error::Protocol(format!(
        "unknown message kind {k} in immediate data {imm:#010x}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rxe_gid() -> Gid {
        "::ffff:198.18.0.1".parse().unwrap()
    }

    #[test]
    fn an_oob_refusal_carries_its_reason_cut_to_fit_and_is_no_address() {
        let busy = Reject {
            code: RejectCode::Busy,
            text: "retry later".into(),
        };
        let b = oob_refusal(&busy);
        assert_eq!(b[51], 0);
        assert_eq!(oob_refusal_of(&b), Some(busy));
        assert!(OobDest::decode(&b).is_err());
        let long = Reject {
            code: RejectCode::Limits,
            text: "é".repeat(40),
        };
        let r = oob_refusal_of(&oob_refusal(&long)).unwrap();
        assert_eq!(r.code, RejectCode::Limits);
        assert!(
            long.text.starts_with(&r.text) && r.text.len() <= 51 - 2 - OOB_REFUSED.len(),
            "{r:?}"
        );
        let addr = OobDest {
            lid: 0,
            qpn: 1,
            psn: 2,
            gid: rxe_gid(),
        };
        assert_eq!(oob_refusal_of(&addr.encode()), None);
    }

    #[test]
    fn oob_message_matches_ibv_rc_pingpong() {
        let d = OobDest {
            lid: 0,
            qpn: 0x11,
            psn: 0x746f86,
            gid: rxe_gid(),
        };
        let b = d.encode();
        assert_eq!(b.len(), 52);
        assert_eq!(
            &b[..51],
            b"0000:000011:746f86:00000000000000000000ffffc6120001"
        );
        assert_eq!(b[51], 0);
        assert_eq!(OobDest::decode(&b).unwrap(), d);
    }

    #[test]
    fn oob_decode_accepts_uppercase_and_rejects_bad_input() {
        let mut b = *b"0001:00ABCD:FFFFFF:FE800000000000000000000000000001\0";
        let d = OobDest::decode(&b).unwrap();
        assert_eq!((d.lid, d.qpn, d.psn), (1, 0xabcd, 0xffffff));
        assert_eq!(d.gid, "fe80::1".parse().unwrap());
        assert!(OobDest::decode(&b[..51]).is_err(), "short");
        b[51] = b'x';
        assert!(OobDest::decode(&b).is_err(), "no NUL");
        let e = OobDest::decode(&[b'z'; 52]).unwrap_err();
        assert!(matches!(e, Error::Protocol(_)), "{e}");
        let mut c = *b"0001;00abcd:ffffff:fe800000000000000000000000000001\0";
        assert!(OobDest::decode(&c).is_err(), "separator");
        c[4] = b':';
        c[7] = b'g';
        assert!(OobDest::decode(&c).is_err(), "non-hex QPN");
        assert!(
            OobDest::decode(b"+001:00abcd:ffffff:fe800000000000000000000000000001\0").is_err(),
            "sign"
        );
    }

    #[test]
    fn done_reply() {
        assert!(check_done(b"done\0").is_ok());
        assert!(check_done(b"done").is_err());
        assert!(check_done(b"nope\0").is_err());
    }

    #[test]
    fn hello_round_trip_with_cm_padding() {
        let h = Hello::new(16, 4096);
        let mut b = h.encode().to_vec();
        assert_eq!(&b[..4], b"RDXF");
        assert!(b.len() <= crate::cm::MAX_CONNECT_PRIVATE_DATA);
        b.resize(56, 0);
        assert_eq!(Hello::decode(&b).unwrap(), h);
        let p = SessionParams {
            kind: crate::xfer::params::SessionKind::Pingpong,
            size: 64,
            iters: 100,
            depth: 0,
        };
        let h = h.with_params(Some(p));
        let mut b = h.encode().to_vec();
        b.resize(56, 0);
        assert_eq!(Hello::decode(&b).unwrap().params, Some(p));
    }

    #[test]
    fn hello_rejects_bad_input() {
        let good = Hello::new(4, 64).encode();
        assert!(Hello::decode(&good[..15]).is_err());
        let mut b = good;
        b[0] = b'X';
        assert!(Hello::decode(&b).unwrap_err().to_string().contains("magic"));
        let mut b = good;
        b[5] = 3;
        assert!(Hello::decode(&b)
            .unwrap_err()
            .to_string()
            .contains("version 3"));
        // A version-1 peer (16 bytes, CM-padded): named as such, not as a short message.
        let mut v1 = good[..16].to_vec();
        v1[5] = 1;
        v1.resize(56, 0);
        let e = Hello::decode(&v1).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Version {
                    what: "connection handshake",
                    ours: 2,
                    theirs: 1
                }
            ),
            "{e:?}"
        );
        assert!(
            e.to_string().contains("version 1, this side version 2"),
            "{e}"
        );
        let mut b = good;
        b[16] = 9;
        assert!(Hello::decode(&b).is_err(), "unknown session kind");
        assert!(Hello::decode(&Hello::new(0, 64).encode()).is_err());
        assert!(Hello::decode(&Hello::new(MAX_CREDITS + 1, 64).encode()).is_err());
        assert!(Hello::decode(&Hello::new(1, 0).encode()).is_err());
    }

    #[test]
    fn reject_round_trip_and_truncation() {
        let r = Reject {
            code: RejectCode::Version,
            text: "peer speaks version 9".into(),
        };
        let mut b = r.encode(148);
        b.resize(148, 0);
        assert_eq!(Reject::decode(&b).unwrap(), r);
        let long = Reject {
            code: RejectCode::Resources,
            text: "é".repeat(100),
        };
        let b = long.encode(21);
        assert!(b.len() <= 21);
        assert_eq!(Reject::decode(&b).unwrap().text, "é".repeat(6));
        assert_eq!(Reject::decode(&[0; 148]), None);
        assert_eq!(Reject::decode(b"RDXJ"), None);
    }

    #[test]
    fn imm_round_trip() {
        for (k, c) in [
            (ImmKind::Data, 0),
            (ImmKind::Data, 5),
            (ImmKind::Credit, MAX_CREDITS),
        ] {
            assert_eq!(decode_imm(encode_imm(k, c)).unwrap(), (k, c));
        }
        assert_eq!(
            decode_imm(encode_imm(ImmKind::Data, u32::MAX)).unwrap().1,
            MAX_CREDITS
        );
        assert!(decode_imm(0x0200_0000).is_err());
    }

    proptest! {
        #[test]
        fn decoders_never_panic(b in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(h) = Hello::decode(&b) {
                prop_assert_eq!(&h.encode()[..], &b[..HELLO_LEN]);
            }
            let _ = OobDest::decode(&b);
            let _ = Hello::decode(&b);
            let _ = Reject::decode(&b);
            let _ = check_done(&b);
        }

        #[test]
        fn oob_decode_never_panics_on_52_bytes(b in proptest::collection::vec(any::<u8>(), 52)) {
            let _ = OobDest::decode(&b);
        }

        #[test]
        fn oob_round_trips(lid: u16, qpn in 0u32..=0xff_ffff, psn in 0u32..=0xff_ffff, gid: [u8; 16]) {
            let d = OobDest { lid, qpn, psn, gid: Gid(gid) };
            prop_assert_eq!(OobDest::decode(&d.encode()).unwrap(), d);
        }

        #[test]
        fn hello_round_trips(depth in 1u32..=MAX_CREDITS, size in 1u32.., pad in 0usize..40) {
            let h = Hello::new(depth, size);
            let mut b = h.encode().to_vec();
            b.resize(HELLO_LEN + pad, 0);
            prop_assert_eq!(Hello::decode(&b).unwrap(), h);
        }

        #[test]
        fn imm_decode_never_panics(imm: u32) {
            let _ = decode_imm(imm);
        }
    }
}
