//! The messages of one-sided sessions and of `rdmaxfer bench` (SENDs over the endpoint),
//! big-endian: header `{magic u32 "RXOS", version u16, type u16}` then the body of the type:
//! - SETUP (1, client → server): purpose u8 (0 session, 1 bench write, 2 bench read, 3 bench
//!   send), 3 reserved bytes, size u64, iters u64, tx_depth u32.
//! - EXPOSE (2, server → client): access u8 (bit 0 read, bit 1 write), 3 reserved bytes, then a
//!   `RemoteRegion` (addr u64, rkey u32, len u64). For bench send it only means "ready".
//! - DONE (3, either way): ok u8, 3 reserved bytes, bytes written u64, bytes read u64.
//! - REFUSE (4, server → client): u16 length + UTF-8 reason, at most [`MAX_REFUSAL_LEN`] bytes
//!   (the encoder cuts a longer reason on a character boundary, the decoder refuses one).

use crate::error::{Error, Result};
use crate::verbs::{RemoteAccess, RemoteRegion};
use crate::xfer::endpoint::Endpoint;
use crate::xfer::file::proto;

const MAGIC: u32 = 0x5258_4f53;
/// Version of these messages.
pub const VERSION: u16 = 1;
const HDR: usize = 8;
/// Longest reason in a REFUSE, in bytes.
pub const MAX_REFUSAL_LEN: usize = proto::MAX_TEXT_LEN;

/// What the client wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// Expose/write/read session.
    Session,
    /// Bandwidth test of RDMA WRITE.
    BenchWrite,
    /// Bandwidth test of RDMA READ.
    BenchRead,
    /// Bandwidth test of SEND.
    BenchSend,
}

/// One control message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Client's opening message.
    Setup {
        /// What for.
        purpose: Purpose,
        /// Message size (bench).
        size: u64,
        /// Messages (bench).
        iters: u64,
        /// Work requests in flight (bench).
        tx_depth: u32,
    },
    /// The region the client may access.
    Expose {
        /// Rights granted.
        access: RemoteAccess,
        /// Where it is.
        region: RemoteRegion,
    },
    /// End of the session.
    Done {
        /// Whether the sender's side succeeded.
        ok: bool,
        /// Bytes it wrote.
        written: u64,
        /// Bytes it read.
        read: u64,
    },
    /// The server will not serve this request.
    Refuse(String),
}

impl Msg {
    /// Encodes the message.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(48);
        b.extend_from_slice(&MAGIC.to_be_bytes());
        b.extend_from_slice(&VERSION.to_be_bytes());
        match self {
            Msg::Setup {
                purpose,
                size,
                iters,
                tx_depth,
            } => {
                b.extend_from_slice(&1u16.to_be_bytes());
                let p = match purpose {
                    Purpose::Session => 0u8,
                    Purpose::BenchWrite => 1,
                    Purpose::BenchRead => 2,
                    Purpose::BenchSend => 3,
                };
                b.extend_from_slice(&[p, 0, 0, 0]);
                b.extend_from_slice(&size.to_be_bytes());
                b.extend_from_slice(&iters.to_be_bytes());
                b.extend_from_slice(&tx_depth.to_be_bytes());
            }
            Msg::Expose { access, region } => {
                b.extend_from_slice(&2u16.to_be_bytes());
                let a = u8::from(access.can_read()) | (u8::from(access.can_write()) << 1);
                b.extend_from_slice(&[a, 0, 0, 0]);
                b.extend_from_slice(&region.encode());
            }
            Msg::Done { ok, written, read } => {
                b.extend_from_slice(&3u16.to_be_bytes());
                b.extend_from_slice(&[u8::from(*ok), 0, 0, 0]);
                b.extend_from_slice(&written.to_be_bytes());
                b.extend_from_slice(&read.to_be_bytes());
            }
            Msg::Refuse(reason) => {
                b.extend_from_slice(&4u16.to_be_bytes());
                let r = proto::truncate_text(reason);
                b.extend_from_slice(&(r.len() as u16).to_be_bytes());
                b.extend_from_slice(r.as_bytes());
            }
        }
        b
    }

    /// Decodes one message; never panics, refuses wrong magic/version/type/length.
    pub fn decode(b: &[u8]) -> Result<Msg> {
        let bad = |m: String| Error::Protocol(format!("one-sided control message: {m}"));
        if b.len() < HDR {
            return Err(bad(format!(
                "{} bytes, shorter than the {HDR}-byte header",
                b.len()
            )));
        }
        let magic = u32::from_be_bytes(b[0..4].try_into().expect("4"));
        if magic != MAGIC {
            return Err(bad(format!(
                "bad magic {magic:#010x} (is the peer an rdmaxfer expose/bench server?)"
            )));
        }
        let version = u16::from_be_bytes(b[4..6].try_into().expect("2"));
        if version != VERSION {
            return Err(Error::Version {
                what: "one-sided session",
                ours: VERSION,
                theirs: version,
            });
        }
        let ty = u16::from_be_bytes(b[6..8].try_into().expect("2"));
        let body = &b[HDR..];
        let want = |n: usize| {
            if body.len() == n {
                Ok(())
            } else {
                Err(bad(format!(
                    "type {ty} body is {} bytes, expected {n}",
                    body.len()
                )))
            }
        };
        let u64_at = |o: usize| u64::from_be_bytes(body[o..o + 8].try_into().expect("8"));
        match ty {
            1 => {
                want(4 + 8 + 8 + 4)?;
                let purpose = match body[0] {
                    0 => Purpose::Session,
                    1 => Purpose::BenchWrite,
                    2 => Purpose::BenchRead,
                    3 => Purpose::BenchSend,
                    p => return Err(bad(format!("unknown purpose {p}"))),
                };
                let tx_depth = u32::from_be_bytes(body[20..24].try_into().expect("4"));
                Ok(Msg::Setup {
                    purpose,
                    size: u64_at(4),
                    iters: u64_at(12),
                    tx_depth,
                })
            }
            2 => {
                want(4 + RemoteRegion::WIRE_LEN)?;
                let access = match body[0] {
                    1 => RemoteAccess::Read,
                    2 => RemoteAccess::Write,
                    3 => RemoteAccess::ReadWrite,
                    a => return Err(bad(format!("bad access bits {a:#x}"))),
                };
                Ok(Msg::Expose {
                    access,
                    region: RemoteRegion::decode(&body[4..])?,
                })
            }
            3 => {
                want(4 + 16)?;
                let ok = match body[0] {
                    0 => false,
                    1 => true,
                    x => return Err(bad(format!("bad ok flag {x}"))),
                };
                Ok(Msg::Done {
                    ok,
                    written: u64_at(4),
                    read: u64_at(12),
                })
            }
            4 => {
                if body.len() < 2 {
                    return Err(bad("truncated refusal".into()));
                }
                let n = u16::from_be_bytes(body[0..2].try_into().expect("2")) as usize;
                if n > MAX_REFUSAL_LEN {
                    return Err(bad(format!(
                        "refusal of {n} bytes, the maximum is {MAX_REFUSAL_LEN}"
                    )));
                }
                want(2 + n)?;
                let s = std::str::from_utf8(&body[2..])
                    .map_err(|_| bad("refusal is not UTF-8".into()))?;
                Ok(Msg::Refuse(s.to_string()))
            }
            t => Err(bad(format!("unknown type {t}"))),
        }
    }
}

/// Sends one control message.
pub fn send_msg(ep: &mut Endpoint, m: &Msg) -> Result<()> {
    ep.send(&m.encode())
}

/// Receives one control message; a REFUSE becomes an error.
pub fn recv_msg(ep: &mut Endpoint) -> Result<Msg> {
    match Msg::decode(&ep.recv()?)? {
        Msg::Refuse(r) => Err(Error::Connection(format!("the server refused: {r}"))),
        m => Ok(m),
    }
}
