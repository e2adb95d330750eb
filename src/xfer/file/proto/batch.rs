//! BATCH (version 3): several pipelined messages in one SEND. A tree of small files costs a
//! HELLO and an answer per file, and a SEND costs each side a work request, a completion and a
//! wake-up whatever its size; a BATCH carries as many HELLOs, DATA pieces and answers as fit
//! one control message: [`MAX_MSG_LEN`], or up to [`MAX_BATCH_LEN`] where both endpoints' message
//! size takes it.
//!
//! Body: the member count (u16, at least 1), then per member its length (u16) and the member,
//! a whole message with its own header. Members are the messages that travel pipelined: HELLO,
//! DATA, WANT, SKIP, REFUSE and ACK; a BATCH inside a BATCH, or any other type, is refused.
//! Reading a BATCH is reading its members one after another, in order.

use super::reader::Reader;
use super::{decode, header, malformed, Msg, HEADER_LEN, MAX_BATCH_LEN, MAX_MSG_LEN};
use super::{T_ACK, T_DATA, T_HELLO, T_REFUSE, T_SKIP, T_WANT};
use crate::Result;

/// Bytes of a BATCH besides its members: header and count.
const FIXED: usize = HEADER_LEN + 2;

/// Bytes a member adds to a BATCH besides itself: its length.
const PER_MEMBER: usize = 2;

/// Whether `msg` may travel in a BATCH.
pub fn batchable(msg: &Msg) -> bool {
    matches!(
        msg,
        Msg::Hello(_)
            | Msg::Data(_)
            | Msg::Want
            | Msg::Skip { .. }
            | Msg::Refuse { .. }
            | Msg::Ack { .. }
    )
}

/// Encoded messages gathered for one SEND: what [`push`](Batch::push) takes fits one control
/// message, as one message alone or as a BATCH of them all.
#[derive(Debug)]
pub struct Batch {
    members: Vec<Vec<u8>>,
    /// The BATCH's length with the members so far.
    len: usize,
    /// The longest SEND: the link's message size, within `MAX_MSG_LEN ..= MAX_BATCH_LEN`.
    limit: usize,
}

impl Default for Batch {
    /// Batches of at most [`MAX_MSG_LEN`] bytes.
    fn default() -> Batch {
        Batch::with_limit(MAX_MSG_LEN)
    }
}

impl Batch {
    /// Batches of at most `msg_size` bytes (a link's message size), within [`MAX_MSG_LEN`] ..=
    /// [`MAX_BATCH_LEN`].
    pub fn with_limit(msg_size: usize) -> Batch {
        Batch {
            members: Vec::new(),
            len: 0,
            limit: msg_size.clamp(MAX_MSG_LEN, MAX_BATCH_LEN),
        }
    }

    /// Whether nothing is gathered.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Members gathered.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether `encoded` (one encoded message) still fits with what is gathered.
    pub fn fits(&self, encoded: &[u8]) -> bool {
        self.is_empty() || self.len + PER_MEMBER + encoded.len() <= self.limit
    }

    /// Adds one encoded batchable message. The caller checks [`fits`](Batch::fits) first
    /// (a message that does not fit is sent alone after [`take`](Batch::take)).
    pub fn push(&mut self, encoded: Vec<u8>) {
        debug_assert!(self.fits(&encoded));
        if self.is_empty() {
            self.len = FIXED;
        }
        self.len += PER_MEMBER + encoded.len();
        self.members.push(encoded);
    }

    /// The gathered messages as what one SEND carries (one message alone is sent as it is),
    /// and empties the batch; `None` when it was empty.
    pub fn take(&mut self) -> Option<Vec<u8>> {
        let mut members = std::mem::take(&mut self.members);
        self.len = 0;
        match members.len() {
            0 => None,
            1 => members.pop(),
            n => Some(super::framed(super::T_BATCH, &encode_members(n, &members))),
        }
    }
}

fn encode_members(n: usize, members: &[Vec<u8>]) -> Vec<u8> {
    let mut b = Vec::with_capacity(members.iter().map(|m| PER_MEMBER + m.len()).sum::<usize>() + 2);
    b.extend_from_slice(
        &u16::try_from(n)
            .expect("members fit one message")
            .to_be_bytes(),
    );
    for m in members {
        let len = u16::try_from(m.len()).expect("a member fits one message");
        b.extend_from_slice(&len.to_be_bytes());
        b.extend_from_slice(m);
    }
    b
}

/// BATCH's body from its members (for [`super::encode`]).
pub(super) fn encode_batch(b: &mut Vec<u8>, members: &[Msg]) {
    let encoded: Vec<Vec<u8>> = members.iter().map(super::encode).collect();
    b.extend_from_slice(&encode_members(encoded.len(), &encoded));
}

pub(super) fn decode_batch(r: &mut Reader<'_>) -> Result<Vec<Msg>> {
    let n = r.u16()?;
    if n == 0 {
        return Err(malformed("BATCH of no messages"));
    }
    // Each member takes at least its length and a header: the count is bounded by the input.
    let mut out = Vec::with_capacity(usize::from(n).min(MAX_BATCH_LEN / (PER_MEMBER + HEADER_LEN)));
    for i in 0..n {
        let len = usize::from(r.u16()?);
        let bytes = r.take(len)?;
        let kind = header(bytes)?.kind;
        if !matches!(kind, T_HELLO | T_DATA | T_WANT | T_SKIP | T_REFUSE | T_ACK) {
            return Err(malformed(format!(
                "BATCH member {i} is of type {kind}, which does not travel in a BATCH"
            )));
        }
        out.push(decode(bytes)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::{encode, Data, Reason, T_DONE, VERSION};
    use super::*;
    use crate::Error;

    fn hdr(kind: u16, len: usize) -> Vec<u8> {
        let mut v = b"RXFR".to_vec();
        v.extend_from_slice(&VERSION.to_be_bytes());
        v.extend_from_slice(&kind.to_be_bytes());
        v.extend_from_slice(&(len as u32).to_be_bytes());
        v
    }

    fn err(buf: &[u8]) -> String {
        match decode(buf) {
            Err(Error::Protocol(s)) => s,
            other => panic!("expected a protocol error, got {other:?}"),
        }
    }

    #[test]
    fn layout_count_then_length_prefixed_members() {
        let (want, done) = (encode(&Msg::Want), hdr(T_DONE, 0));
        assert_eq!(want, hdr(T_WANT, 0));
        let mut b = Batch::default();
        b.push(want.clone());
        b.push(want.clone());
        let bytes = b.take().unwrap();
        let mut expect = hdr(super::super::T_BATCH, 2 + 2 * (2 + 12));
        expect.extend_from_slice(&[0, 2, 0, 12]);
        expect.extend_from_slice(&want);
        expect.extend_from_slice(&[0, 12]);
        expect.extend_from_slice(&want);
        assert_eq!(bytes, expect);
        assert_eq!(
            decode(&bytes).unwrap(),
            Msg::Batch(vec![Msg::Want, Msg::Want])
        );
        assert_eq!(encode(&Msg::Batch(vec![Msg::Want, Msg::Want])), expect);
        assert!(b.is_empty() && b.take().is_none());
        // One message alone goes as itself.
        b.push(done.clone());
        assert_eq!(b.take().unwrap(), done);
    }

    /// An encoded last DATA piece of `len` bytes.
    fn data_piece(len: usize) -> Vec<u8> {
        encode(&Msg::Data(Data {
            offset: 0,
            hash: Some([7; 32]),
            abandon: false,
            vanished: false,
            bytes: vec![1; len],
        }))
    }

    #[test]
    fn a_batch_never_outgrows_one_message() {
        let piece = data_piece(3000);
        let mut b = Batch::default();
        let mut sent = Vec::new();
        for _ in 0..10 {
            if !b.fits(&piece) {
                sent.push(b.take().unwrap());
            }
            b.push(piece.clone());
            let ack = encode(&Msg::Ack {
                status: Reason::Ok,
                message: String::new(),
            });
            if !b.fits(&ack) {
                sent.push(b.take().unwrap());
            }
            b.push(ack);
        }
        sent.extend(b.take());
        let mut members = 0;
        for m in &sent {
            assert!(m.len() <= MAX_MSG_LEN, "{} bytes", m.len());
            members += match decode(m).unwrap() {
                Msg::Batch(v) => v.len(),
                _ => 1,
            };
        }
        assert_eq!(members, 20);
        assert!(sent.len() < 10, "{} SENDs for 20 messages", sent.len());
    }

    #[test]
    fn malformed_batches_are_refused() {
        let want = encode(&Msg::Want);
        let batch = |n: u16, members: &[Vec<u8>]| {
            let mut body = n.to_be_bytes().to_vec();
            for m in members {
                body.extend_from_slice(&(m.len() as u16).to_be_bytes());
                body.extend_from_slice(m);
            }
            let mut v = hdr(super::super::T_BATCH, body.len());
            v.extend_from_slice(&body);
            v
        };
        assert!(err(&batch(0, &[])).contains("no messages"));
        let inner = batch(1, std::slice::from_ref(&want));
        assert!(err(&batch(1, &[inner])).contains("does not travel in a BATCH"));
        assert!(err(&batch(1, &[hdr(T_DONE, 0)])).contains("does not travel in a BATCH"));
        // More members announced than there are, a member cut short, a bad member.
        assert!(decode(&batch(2, std::slice::from_ref(&want))).is_err());
        let mut cut = batch(1, std::slice::from_ref(&want));
        cut.truncate(cut.len() - 1);
        assert!(decode(&cut).is_err());
        let mut bad = want.clone();
        bad[0] = b'X';
        assert!(err(&batch(1, &[bad])).contains("bad magic"));
        assert_eq!(
            decode(&batch(1, &[want])).unwrap(),
            Msg::Batch(vec![Msg::Want])
        );
    }

    #[test]
    fn a_batch_is_as_long_as_the_link_takes_and_no_longer() {
        let piece = data_piece(4096);
        for (limit, per_send) in [(0, 1), (16 * 1024, 3), (1 << 20, 15)] {
            let mut b = Batch::with_limit(limit);
            let mut sent = Vec::new();
            for _ in 0..30 {
                if !b.fits(&piece) {
                    sent.push(b.take().unwrap());
                }
                b.push(piece.clone());
            }
            sent.extend(b.take());
            let len = limit.clamp(MAX_MSG_LEN, MAX_BATCH_LEN);
            assert!(sent.iter().all(|m| m.len() <= len), "{limit}");
            let first = match decode(&sent[0]).unwrap() {
                Msg::Batch(v) => v.len(),
                _ => 1,
            };
            assert_eq!(first, per_send, "{limit}");
        }
        // Longer than MAX_BATCH_LEN, or another message longer than MAX_MSG_LEN: refused.
        let mut b = Batch::with_limit(MAX_BATCH_LEN);
        while b.fits(&piece) {
            b.push(piece.clone());
        }
        let mut long = b.take().unwrap();
        assert!(decode(&long).is_ok());
        long.extend_from_slice(&[0; MAX_BATCH_LEN]);
        assert!(err(&long).contains("exceeds the maximum of 65536"));
        let mut data = piece.clone();
        data.extend_from_slice(&[0; MAX_MSG_LEN]);
        assert!(err(&data).contains("exceeds the maximum of 8192"));
    }
}
