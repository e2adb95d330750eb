//! One-sided sessions: a server exposes a buffer, a client RDMA WRITEs / READs it. Also the
//! control messages of `rdmaxfer bench`.
//!
//! Messages (SENDs over the endpoint), big-endian: header `{magic u32 "RXOS", version u16,
//! type u16}` then the body of the type:
//! - SETUP (1, client → server): purpose u8 (0 session, 1 bench write, 2 bench read, 3 bench
//!   send), 3 reserved bytes, size u64, iters u64, tx_depth u32.
//! - EXPOSE (2, server → client): access u8 (bit 0 read, bit 1 write), 3 reserved bytes, then a
//!   `RemoteRegion` (addr u64, rkey u32, len u64). For bench send it only means "ready".
//! - DONE (3, either way): ok u8, 3 reserved bytes, bytes written u64, bytes read u64.
//! - REFUSE (4, server → client): u16 length + UTF-8 reason, at most [`MAX_REFUSAL_LEN`] bytes
//!   (the encoder cuts a longer reason on a character boundary, the decoder refuses one).

use std::time::Duration;

use crate::error::{Error, Result};
use crate::verbs::{ExposedRegion, RemoteAccess, RemoteRegion};
use crate::xfer::endpoint::Endpoint;
use crate::xfer::file::proto;
use crate::xfer::rdma_rw::{self, Initiator};

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

/// What one peer did to an exposed buffer.
#[derive(Clone, Debug, serde::Serialize)]
#[non_exhaustive]
pub struct PeerReport {
    /// The peer's address.
    pub peer: Option<String>,
    /// What it said it wrote (bytes).
    pub written: u64,
    /// What it said it read (bytes).
    pub read: u64,
    /// Whether it said it succeeded (false when it vanished without saying).
    pub ok: bool,
    /// Changed byte ranges `[start, end)`, merged.
    pub changed: Vec<(usize, usize)>,
    /// Why the session ended early, if it did.
    pub error: Option<String>,
}

/// Ranges where `a` and `b` differ (same length), merging gaps under 16 bytes.
pub fn diff_ranges(a: &[u8], b: &[u8]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        if x != y {
            match out.last_mut() {
                Some(last) if i - last.1 < 16 => last.1 = i + 1,
                _ => out.push((i, i + 1)),
            }
        }
    }
    out
}

/// A printable preview of `data`: UTF-8 text if it is, else hex; at most `max` bytes shown.
pub fn preview(data: &[u8], max: usize) -> String {
    let shown = &data[..data.len().min(max)];
    let more = if data.len() > max {
        format!(" … (+{} bytes)", data.len() - max)
    } else {
        String::new()
    };
    match std::str::from_utf8(shown) {
        Ok(s) if !s.chars().any(|c| c.is_control() && c != '\n' && c != '\t') => {
            format!("{s:?}{more}")
        }
        _ => format!(
            "{}{more}",
            shown
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
}

/// Serves one peer: exposes `content` with `access` for the session, then revokes the exposure
/// and takes back what the peer left in it. Used by `rdmaxfer expose`.
pub fn serve_session(
    ep: &mut Endpoint,
    content: &mut Vec<u8>,
    access: RemoteAccess,
) -> Result<PeerReport> {
    let peer = ep.peer().addr.map(|a| a.to_string());
    match recv_msg(ep)? {
        Msg::Setup {
            purpose: Purpose::Session,
            ..
        } => {}
        Msg::Setup { purpose, .. } => {
            let _ = send_msg(
                ep,
                &Msg::Refuse(format!(
                    "this is an expose server, not a {purpose:?} server"
                )),
            );
            return Err(Error::Protocol(format!("client asked for {purpose:?}")));
        }
        m => return Err(Error::Protocol(format!("expected SETUP, got {m:?}"))),
    }
    let mut region = ExposedRegion::new(ep.pd(), content.len(), access)?;
    region.write_at(0, content)?;
    let sent = send_msg(
        ep,
        &Msg::Expose {
            access,
            region: region.descriptor(),
        },
    );
    let done = sent.and_then(|()| recv_msg(ep));
    // Whatever happened, the exposure ends here and its contents are kept.
    let after = region.revoke()?;
    let changed = diff_ranges(content, &after);
    *content = after;
    Ok(match done {
        Ok(Msg::Done { ok, written, read }) => PeerReport {
            peer,
            written,
            read,
            ok,
            changed,
            error: None,
        },
        Ok(m) => PeerReport {
            peer,
            written: 0,
            read: 0,
            ok: false,
            changed,
            error: Some(format!("expected DONE, got {m:?}")),
        },
        Err(e) => PeerReport {
            peer,
            written: 0,
            read: 0,
            ok: false,
            changed,
            error: Some(e.to_string()),
        },
    })
}

/// The client's view of a server's exposure.
#[derive(Clone, Copy, Debug)]
pub struct Exposure {
    /// Rights granted.
    pub access: RemoteAccess,
    /// Where.
    pub region: RemoteRegion,
}

/// Opens a session: SETUP, then the server's EXPOSE.
pub fn open_session(ep: &mut Endpoint) -> Result<Exposure> {
    send_msg(
        ep,
        &Msg::Setup {
            purpose: Purpose::Session,
            size: 0,
            iters: 0,
            tx_depth: 0,
        },
    )?;
    match recv_msg(ep)? {
        Msg::Expose { access, region } => Ok(Exposure { access, region }),
        m => Err(Error::Protocol(format!("expected EXPOSE, got {m:?}"))),
    }
}

/// Explains a remote access error in terms of the exposure.
fn explain(e: Error, what: &str, x: &Exposure) -> Error {
    if e.wc_status() == Some(crate::verbs::cq::REM_ACCESS_ERR) {
        let why = format!(
            "{what} refused by the peer: remote access error (it exposes {} bytes with {:?} access; the exposure may also have been revoked). Detail: {e}",
            x.region.len, x.access
        );
        return Error::Connection(why);
    }
    e
}

/// Writes `data` at `offset` of the exposure, then ends the session.
pub fn write_session(
    ep: &mut Endpoint,
    x: &Exposure,
    offset: u64,
    data: &[u8],
    timeout: Duration,
) -> Result<()> {
    let r = rdma_rw::write(ep, &x.region, offset, data, timeout)
        .map_err(|e| explain(e, "RDMA WRITE", x));
    finish(
        ep,
        r.is_ok(),
        if r.is_ok() { data.len() as u64 } else { 0 },
        0,
    );
    r
}

/// Reads `len` bytes at `offset` of the exposure, then ends the session.
pub fn read_session(
    ep: &mut Endpoint,
    x: &Exposure,
    offset: u64,
    len: u64,
    timeout: Duration,
) -> Result<Vec<u8>> {
    let r =
        rdma_rw::read(ep, &x.region, offset, len, timeout).map_err(|e| explain(e, "RDMA READ", x));
    finish(ep, r.is_ok(), 0, if r.is_ok() { len } else { 0 });
    r
}

fn finish(ep: &mut Endpoint, ok: bool, written: u64, read: u64) {
    // Best effort: after a failed operation the QP is in error and the peer notices the
    // disconnect instead.
    if end_session(ep, ok, written, read).is_err() {
        tracing::debug!("could not tell the server the session is done");
    }
}

/// Ends a session opened with [`open_session`]: tells the server whether it went well and how
/// many bytes were written and read (DONE), and waits until the message is acknowledged.
pub fn end_session(ep: &mut Endpoint, ok: bool, written: u64, read: u64) -> Result<()> {
    send_msg(ep, &Msg::Done { ok, written, read })?;
    ep.flush()
}

impl Initiator for Endpoint {
    fn post_wr(
        &mut self,
        wr: crate::verbs::SendRequest,
    ) -> std::result::Result<(), crate::verbs::PostError> {
        self.post(wr)
    }
    fn post_batch(
        &mut self,
        b: &mut crate::verbs::SendBatch,
    ) -> std::result::Result<usize, crate::verbs::PostListError> {
        Endpoint::post_batch(self, b)
    }
    fn post_shared(
        &mut self,
        l: &mut crate::verbs::SharedList,
        p: &crate::verbs::SharedPost<'_>,
        first_wr_id: u64,
        signaled: impl FnMut(usize) -> bool,
    ) -> std::result::Result<usize, crate::verbs::PostListError> {
        self.post_shared_list(l, p, first_wr_id, signaled)
    }
    fn wait_wc(&mut self, max: usize, timeout: Duration) -> Result<Vec<crate::verbs::Completion>> {
        self.poll_user(max, timeout)
    }
    fn pd(&self) -> &crate::verbs::ProtectionDomain {
        Endpoint::pd(self)
    }
    fn max_msg(&self) -> usize {
        self.max_msg_size()
    }
    fn send_depth(&self) -> u32 {
        self.user_send_depth()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout_is_big_endian() {
        let m = Msg::Done {
            ok: true,
            written: 0x0102,
            read: 3,
        };
        let b = m.encode();
        assert_eq!(&b[..8], &[0x52, 0x58, 0x4f, 0x53, 0, 1, 0, 3]);
        assert_eq!(&b[8..12], &[1, 0, 0, 0]);
        assert_eq!(&b[12..20], &[0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(Msg::decode(&b).unwrap(), m);
    }

    #[test]
    fn refuses_bad_input() {
        let good = Msg::Expose {
            access: RemoteAccess::Read,
            region: RemoteRegion {
                addr: 1,
                rkey: 2,
                len: 3,
            },
        }
        .encode();
        assert!(Msg::decode(&good).is_ok());
        assert!(Msg::decode(&good[..good.len() - 1])
            .unwrap_err()
            .to_string()
            .contains("expected"));
        let mut long = good.clone();
        long.push(0);
        assert!(Msg::decode(&long).is_err());
        let mut v = good.clone();
        v[5] = 9;
        assert!(Msg::decode(&v)
            .unwrap_err()
            .to_string()
            .contains("version 9"));
        let mut m = good.clone();
        m[0] = 0;
        assert!(Msg::decode(&m).unwrap_err().to_string().contains("magic"));
        let mut a = good;
        a[8] = 0;
        assert!(Msg::decode(&a).is_err(), "no-access exposure");
        assert!(Msg::decode(&[]).is_err());
    }

    #[test]
    fn diff_and_preview() {
        let a = vec![0u8; 100];
        let mut b = a.clone();
        b[10..13].copy_from_slice(b"abc");
        b[20] = 1;
        b[60] = 1;
        assert_eq!(diff_ranges(&a, &b), vec![(10, 21), (60, 61)]);
        assert_eq!(preview(b"hello", 64), "\"hello\"");
        assert_eq!(preview(&[0, 255], 64), "00 ff");
        assert!(preview(&[b'a'; 100], 10).contains("+90 bytes"));
    }

    fn any_msg() -> impl Strategy<Value = Msg> {
        let access = prop_oneof![
            Just(RemoteAccess::Read),
            Just(RemoteAccess::Write),
            Just(RemoteAccess::ReadWrite)
        ];
        let purpose = prop_oneof![
            Just(Purpose::Session),
            Just(Purpose::BenchWrite),
            Just(Purpose::BenchRead),
            Just(Purpose::BenchSend)
        ];
        prop_oneof![
            (purpose, any::<u64>(), any::<u64>(), any::<u32>()).prop_map(
                |(purpose, size, iters, tx_depth)| Msg::Setup {
                    purpose,
                    size,
                    iters,
                    tx_depth
                }
            ),
            (access, any::<u64>(), any::<u32>(), any::<u64>()).prop_map(
                |(access, addr, rkey, len)| Msg::Expose {
                    access,
                    region: RemoteRegion { addr, rkey, len }
                }
            ),
            (any::<bool>(), any::<u64>(), any::<u64>()).prop_map(|(ok, written, read)| Msg::Done {
                ok,
                written,
                read
            }),
            "[ -~]{0,200}".prop_map(Msg::Refuse),
        ]
    }

    /// A REFUSE message carrying `reason` as is (as in fuzz/regressions/onesided/).
    fn refusal(reason: &[u8]) -> Vec<u8> {
        let mut b = vec![0x52, 0x58, 0x4f, 0x53, 0, 1, 0, 4];
        b.extend_from_slice(&(reason.len() as u16).to_be_bytes());
        b.extend_from_slice(reason);
        b
    }

    #[test]
    fn long_refusal_is_cut_on_a_character_boundary() {
        // Found with the `onesided` fuzz target's round-trip check (fuzz/regressions/onesided/):
        // the encoder cut at byte 1024, inside the `é`, and the client got "refusal is not
        // UTF-8" instead of the reason.
        let reason = format!("{}é", "a".repeat(MAX_REFUSAL_LEN - 1));
        let enc = Msg::Refuse(reason.clone()).encode();
        assert_eq!(enc, refusal(&reason.as_bytes()[..MAX_REFUSAL_LEN - 1]));
        assert_eq!(
            Msg::decode(&enc).unwrap(),
            Msg::Refuse("a".repeat(MAX_REFUSAL_LEN - 1))
        );
    }

    #[test]
    fn over_long_refusal_is_refused() {
        // The other half of the fuzz finding: a decoded reason the encoder could not give back.
        let e = Msg::decode(&refusal(&[b'a'; MAX_REFUSAL_LEN + 1])).unwrap_err();
        assert!(e.to_string().contains("the maximum is 1024"), "{e}");
        let ok = refusal(&[b'a'; MAX_REFUSAL_LEN]);
        assert_eq!(Msg::decode(&ok).unwrap().encode(), ok);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        #[test]
        fn round_trips(m in any_msg()) {
            prop_assert_eq!(Msg::decode(&m.encode()).unwrap(), m);
        }

        #[test]
        fn decoder_never_panics(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Msg::decode(&b);
        }

        #[test]
        fn decoder_never_panics_on_valid_headers(ty in 0u16..6, body in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut b = vec![0x52, 0x58, 0x4f, 0x53, 0, 1];
            b.extend_from_slice(&ty.to_be_bytes());
            b.extend_from_slice(&body);
            let _ = Msg::decode(&b);
        }
    }
}
