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
/// message, as one message alone or as a BATCH of them all. The BATCH is written in one buffer
/// as members come (each member encoded in place), so a member's bytes are copied once.
#[derive(Debug)]
pub struct Batch {
    /// The BATCH so far: its header and count (filled in by [`take`](Batch::take)), then each
    /// member's length and the member; empty with no members.
    buf: Vec<u8>,
    /// Members gathered.
    count: usize,
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
            buf: Vec::new(),
            count: 0,
            limit: msg_size.clamp(MAX_MSG_LEN, MAX_BATCH_LEN),
        }
    }

    /// Whether nothing is gathered.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Members gathered.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether `encoded` (one encoded message) still fits with what is gathered.
    pub fn fits(&self, encoded: &[u8]) -> bool {
        self.is_empty() || self.buf.len() + PER_MEMBER + encoded.len() <= self.limit
    }

    /// Adds one encoded batchable message. The caller checks [`fits`](Batch::fits) first
    /// (a message that does not fit is sent alone after [`take`](Batch::take)).
    pub fn push(&mut self, encoded: &[u8]) {
        debug_assert!(self.fits(encoded));
        let added = self.push_with(|b| b.extend_from_slice(encoded));
        debug_assert!(added);
    }

    /// Adds `msg` (batchable), encoded in place, if it fits with what is gathered (a first
    /// message always does); `false`, with nothing added, if it does not.
    pub fn push_msg(&mut self, msg: &Msg) -> bool {
        debug_assert!(batchable(msg));
        self.push_with(|b| super::encode_into(b, msg))
    }

    /// Adds the one batchable message `encode` appends (header and body) to the buffer it is
    /// given, if it fits with what is gathered (a first message always does); `false`, with
    /// nothing added, if it does not.
    pub fn push_with(&mut self, encode: impl FnOnce(&mut Vec<u8>)) -> bool {
        if self.is_empty() {
            self.buf.clear();
            super::open_frame(&mut self.buf);
            self.buf.extend_from_slice(&[0; 2]);
        }
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0; PER_MEMBER]);
        encode(&mut self.buf);
        let len = self.buf.len() - at - PER_MEMBER;
        let fits = self.count == 0 || self.buf.len() <= self.limit;
        let Some(len16) = u16::try_from(len).ok().filter(|_| fits) else {
            // Not added; one message alone longer than a member can be is a caller's bug.
            assert!(self.count > 0, "a message of {len} bytes does not fit a BATCH");
            self.buf.truncate(at);
            return false;
        };
        self.buf[at..at + PER_MEMBER].copy_from_slice(&len16.to_be_bytes());
        self.count += 1;
        true
    }

    /// The gathered messages as what one SEND carries (one message alone is sent as it is),
    /// and empties the batch; `None` when it was empty. Give the bytes back with
    /// [`recycle`](Batch::recycle) once sent, and the next batch is built in their memory.
    pub fn take(&mut self) -> Option<Vec<u8>> {
        let count = std::mem::take(&mut self.count);
        let mut buf = std::mem::take(&mut self.buf);
        match count {
            0 => None,
            1 => {
                buf.drain(..FIXED + PER_MEMBER);
                Some(buf)
            }
            n => {
                super::close_frame(&mut buf, 0, super::T_BATCH);
                let n = u16::try_from(n).expect("members fit one message");
                buf[HEADER_LEN..FIXED].copy_from_slice(&n.to_be_bytes());
                Some(buf)
            }
        }
    }

    /// Keeps the memory of `bytes` (from [`take`](Batch::take)) for the next batch.
    pub fn recycle(&mut self, bytes: Vec<u8>) {
        if self.is_empty() && bytes.capacity() > self.buf.capacity() {
            self.buf = bytes;
        }
    }
}

/// BATCH's body from its members (for [`super::encode`]).
pub(super) fn encode_batch(b: &mut Vec<u8>, members: &[Msg]) {
    let n = u16::try_from(members.len()).expect("members fit one message");
    b.extend_from_slice(&n.to_be_bytes());
    for m in members {
        let at = b.len();
        b.extend_from_slice(&[0; PER_MEMBER]);
        super::encode_into(b, m);
        let len = u16::try_from(b.len() - at - PER_MEMBER).expect("a member fits one message");
        b[at..at + PER_MEMBER].copy_from_slice(&len.to_be_bytes());
    }
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
        b.push(&want);
        b.push(&want);
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
        b.push(&done);
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
            b.push(&piece);
            let ack = encode(&Msg::Ack {
                status: Reason::Ok,
                message: String::new(),
            });
            if !b.fits(&ack) {
                sent.push(b.take().unwrap());
            }
            b.push(&ack);
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
    fn members_encoded_in_place_are_the_bytes_encode_gives() {
        let piece = |last: bool| Data {
            offset: 5000,
            hash: last.then_some([9; 32]),
            abandon: false,
            vanished: false,
            bytes: (0..1200).map(|i| i as u8).collect(),
        };
        for last in [false, true] {
            let d = piece(last);
            let mut b = Vec::new();
            super::super::encode_piece(&mut b, d.offset, d.hash, &d.bytes);
            assert_eq!(b, encode(&Msg::Data(d)));
        }
        let msgs = [
            Msg::Want,
            Msg::Data(piece(true)),
            Msg::Ack {
                status: Reason::Ok,
                message: "fine".into(),
            },
        ];
        let (mut copied, mut in_place) = (Batch::default(), Batch::default());
        let mut sent = Vec::new();
        for round in 0..3 {
            for m in &msgs {
                copied.push(&encode(m));
                assert!(in_place.push_msg(m));
            }
            let bytes = in_place.take().unwrap();
            assert_eq!(bytes, copied.take().unwrap(), "round {round}");
            assert_eq!(decode(&bytes).unwrap(), Msg::Batch(msgs.to_vec()));
            // The next batch is built in the memory of the one before.
            sent.push(bytes.as_ptr());
            in_place.recycle(bytes);
        }
        assert!(sent.windows(2).all(|w| w[0] == w[1]), "{sent:?}");
        // What does not fit is refused and leaves what was gathered as it was.
        let mut b = Batch::default();
        let mut n = 0;
        while b.push_msg(&msgs[1]) {
            n += 1;
        }
        assert!(n > 1);
        assert_eq!(b.len(), n);
        assert_eq!(decode(&b.take().unwrap()).unwrap(), Msg::Batch(vec![msgs[1].clone(); n]));
        // One message alone goes as itself, in place too.
        assert!(b.push_msg(&msgs[2]));
        assert_eq!(b.take().unwrap(), encode(&msgs[2]));
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
                b.push(&piece);
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
            b.push(&piece);
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
