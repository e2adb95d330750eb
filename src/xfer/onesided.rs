//! One-sided sessions: a server exposes a buffer, a client RDMA WRITEs / READs it. Also the
//! control messages of `rdmaxfer bench`.
//!
//! Their messages are internal (`msg`; public with the cargo feature `internals`).

use std::time::Duration;

use crate::error::{Error, Result};
use crate::verbs::{ExposedRegion, RemoteAccess, RemoteRegion};
use crate::xfer::endpoint::Endpoint;
use crate::xfer::rdma_rw::{self, Initiator};

internal! { mod msg; }
#[cfg(feature = "internals")]
pub use msg::{recv_msg, send_msg, Msg, Purpose};
#[cfg(not(feature = "internals"))]
use msg::{recv_msg, send_msg, Msg, Purpose};

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
pub(crate) fn diff_ranges(a: &[u8], b: &[u8]) -> Vec<(usize, usize)> {
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
    use super::msg::*;
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
