//! Small files inline (version 3): a HELLO flagged `inline` announces a file of at most
//! [`INLINE_MAX`] bytes whose data travels in DATA messages instead of the staging ring. The
//! receiver answers WANT (send it), SKIP or REFUSE; the sender does not wait for the answer
//! before its next HELLO, so up to [`MAX_IN_FLIGHT`] entries are in flight on a connection, and
//! the answers come in the order of the HELLOs.

use super::reader::Reader;
use super::{malformed, Digest, HEADER_LEN, MAX_MSG_LEN};
use crate::Result;

/// Largest file sent inline, in bytes. A file this small costs more in round trips and ring
/// set-up than in bytes: through the ring it takes HELLO, MR, a WRITE, DIGESTS, FIN and ACK
/// one after another; inline its HELLO, WANT, DATA and ACK are pipelined with other files'.
/// Above it, the ring's RDMA WRITEs of whole chunks move the bytes with fewer messages.
pub const INLINE_MAX: u64 = 64 * 1024;

/// Most data bytes in one DATA message (its header and fields fit [`MAX_MSG_LEN`] with it).
pub const PIECE_MAX: usize = MAX_MSG_LEN - DATA_FIXED;

/// Bytes of a DATA message besides its data: header, flags, offset, length, file digest.
const DATA_FIXED: usize = HEADER_LEN + 2 + 8 + 4 + 32;

/// Most entries a sender has in flight on one connection (HELLOs and DATA whose answer it has
/// not read). The receiver holds at most this many files it answered WANT and whose DATA has
/// not come; a sender with more is ended.
pub const MAX_IN_FLIGHT: usize = 64;

const D_LAST: u16 = 1 << 0;
const D_ABANDON: u16 = 1 << 1;
const D_VANISHED: u16 = 1 << 2;

/// DATA: sender → receiver, a piece of the oldest inline file the receiver answered WANT.
/// Pieces come in order (`offset` is the bytes before it); the last one carries the file
/// digest. An abandoned file (the sender could not read it) is one piece without data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Data {
    /// Where `bytes` starts in the file.
    pub offset: u64,
    /// The file digest (see `digest::combine`) in the last piece; `None` in the others.
    pub hash: Option<Digest>,
    /// The sender gave up on this file (could not read it): no bytes, no digest.
    pub abandon: bool,
    /// With `abandon`: the file was gone from the sender's source (removed after the listing).
    pub vanished: bool,
    /// At most [`PIECE_MAX`] bytes.
    pub bytes: Vec<u8>,
}

pub(super) fn decode_data(r: &mut Reader<'_>) -> Result<Data> {
    let bits = r.u16()?;
    if bits & !(D_LAST | D_ABANDON | D_VANISHED) != 0 {
        return Err(malformed(format!("DATA has unknown flag bits {bits:#06x}")));
    }
    let offset = r.u64()?;
    if offset >= INLINE_MAX {
        return Err(malformed(format!(
            "DATA at offset {offset}, beyond the inline limit of {INLINE_MAX} bytes"
        )));
    }
    let len = r.u32()? as usize;
    if len > PIECE_MAX {
        return Err(malformed(format!(
            "DATA of {len} bytes exceeds the maximum of {PIECE_MAX}"
        )));
    }
    let hash = r.digest()?;
    let bytes = r.take(len)?.to_vec();
    let (last, abandon) = (bits & D_LAST != 0, bits & D_ABANDON != 0);
    let vanished = bits & D_VANISHED != 0;
    if abandon && (last || len != 0) {
        return Err(malformed(
            "an abandoning DATA carries data or the last flag",
        ));
    }
    if vanished && !abandon {
        return Err(malformed(
            "a DATA flagged vanished does not abandon its file",
        ));
    }
    if !last && hash != [0; 32] {
        return Err(malformed("a DATA other than the last carries a digest"));
    }
    Ok(Data {
        offset,
        hash: last.then_some(hash),
        abandon,
        vanished,
        bytes,
    })
}

/// Panics on more than [`PIECE_MAX`] bytes or an abandoning piece with content: the sender
/// cuts its own pieces.
pub(super) fn encode_data(b: &mut Vec<u8>, d: &Data) {
    assert!(!d.abandon || (d.bytes.is_empty() && d.hash.is_none()));
    assert!(!d.vanished || d.abandon);
    let mut bits = 0;
    if d.abandon {
        bits |= D_ABANDON;
    }
    if d.vanished {
        bits |= D_VANISHED;
    }
    data_body(b, bits, d.offset, d.hash, &d.bytes);
}

/// Appends a whole DATA message (header and body) that carries `bytes`, a piece of a file
/// read whole, at `offset`; `hash`, the file digest, in its last piece. The same bytes as
/// `encode(&Msg::Data(..))` of that piece, without making the piece. Panics on more than
/// [`PIECE_MAX`] bytes.
pub fn encode_piece(b: &mut Vec<u8>, offset: u64, hash: Option<Digest>, bytes: &[u8]) {
    let start = super::open_frame(b);
    data_body(b, 0, offset, hash, bytes);
    super::close_frame(b, start, super::T_DATA);
}

fn data_body(b: &mut Vec<u8>, mut bits: u16, offset: u64, hash: Option<Digest>, bytes: &[u8]) {
    assert!(bytes.len() <= PIECE_MAX);
    if hash.is_some() {
        bits |= D_LAST;
    }
    b.extend_from_slice(&bits.to_be_bytes());
    b.extend_from_slice(&offset.to_be_bytes());
    b.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    b.extend_from_slice(&hash.unwrap_or([0; 32]));
    b.extend_from_slice(bytes);
}
