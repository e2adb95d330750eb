//! One-sided RDMA READ / WRITE against a peer's exposed region, split into messages no larger than
//! the port allows, bounds-checked locally before anything is posted.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::verbs::{
    Completion, CompletionQueue, LocalBuf, PostError, PostListError, ProtectionDomain, QueuePair,
    RemoteRegion, RemoteSlice, SendBatch, SendOp, SendRequest, Sge, SharedList, SharedPost,
};

/// Something that can post the caller's send-queue work requests and hand back their completions:
/// a bare connected QP ([`RawQp`]) or an endpoint that also carries its own messages.
pub trait Initiator {
    /// Posts one work request (signaled or not); a failed post gives its buffers back.
    fn post_wr(&mut self, wr: SendRequest) -> Result<(), PostError>;
    /// Posts every work request of `b` as one list (one doorbell) and empties it; the
    /// default posts them one by one. On failure the first `posted` were posted (they
    /// complete as usual) and the others' buffers come back.
    fn post_batch(&mut self, b: &mut SendBatch) -> Result<usize, PostListError> {
        let mut posted = 0;
        let mut wrs = b.drain().collect::<Vec<_>>().into_iter();
        while let Some(wr) = wrs.next() {
            let wr_id = wr.wr_id();
            if let Err(e) = self.post_wr(wr) {
                let mut unposted = vec![(wr_id, e.bufs)];
                unposted.extend(wrs.map(|w| (w.wr_id(), w.into_bufs())));
                return Err(PostListError {
                    error: e.error,
                    posted,
                    unposted,
                });
            }
            posted += 1;
        }
        Ok(posted)
    }
    /// Posts `p.n` RDMA WRITEs of one shared source as one list, work request `i` with `wr_id`
    /// `first_wr_id + i` and signaled where `signaled(i)` says (the list's last always comes
    /// back, in a completion's `retired` list if unsignaled); returns how many were posted. The
    /// queue implementations post it lean ([`QueuePair::post_shared_list`]: one check per list,
    /// table entries only for the signaled and the last); the default posts a [`SendBatch`].
    fn post_shared(
        &mut self,
        l: &mut SharedList,
        p: &SharedPost<'_>,
        first_wr_id: u64,
        mut signaled: impl FnMut(usize) -> bool,
    ) -> Result<usize, PostListError> {
        let _ = l;
        let mut b = SendBatch::with_capacity(p.n);
        for i in 0..p.n {
            let op = if i == 0 { p.first } else { p.rest };
            let wr = SendRequest::new(
                first_wr_id + i as u64,
                op,
                [Sge::range(p.src.clone(), p.off, p.len)],
            );
            b.push(if signaled(i) { wr } else { wr.unsignaled() });
        }
        self.post_batch(&mut b)
    }
    /// Waits up to `timeout` for at least one completion of the caller's work requests.
    fn wait_wc(&mut self, max: usize, timeout: Duration) -> Result<Vec<Completion>>;
    /// The PD to register staging buffers in.
    fn pd(&self) -> &ProtectionDomain;
    /// Largest single message.
    fn max_msg(&self) -> usize;
    /// Send-queue slots available for the caller's work requests.
    fn send_depth(&self) -> u32;
}

/// A connected QP used directly: its send CQ must carry nothing else.
pub struct RawQp<'a> {
    /// Connected QP.
    pub qp: &'a QueuePair,
    /// Its send CQ.
    pub cq: &'a CompletionQueue,
    /// Its PD.
    pub pd: &'a ProtectionDomain,
    /// Largest single message (the port's max_msg_sz).
    pub max_msg: usize,
}

impl Initiator for RawQp<'_> {
    fn post_wr(&mut self, wr: SendRequest) -> Result<(), PostError> {
        self.qp.post_send(wr)
    }
    fn post_batch(&mut self, b: &mut SendBatch) -> Result<usize, PostListError> {
        self.qp.post_send_batch(b)
    }
    fn post_shared(
        &mut self,
        l: &mut SharedList,
        p: &SharedPost<'_>,
        first_wr_id: u64,
        signaled: impl FnMut(usize) -> bool,
    ) -> Result<usize, PostListError> {
        self.qp
            .post_shared_list(l, p, signaled, |i, _| first_wr_id + i as u64)
    }
    fn wait_wc(&mut self, max: usize, timeout: Duration) -> Result<Vec<Completion>> {
        self.cq.wait(max, timeout)
    }
    fn pd(&self) -> &ProtectionDomain {
        self.pd
    }
    fn max_msg(&self) -> usize {
        self.max_msg
    }
    fn send_depth(&self) -> u32 {
        self.qp.caps().max_send_wr
    }
}

/// Splits `[offset, offset+len)` into `(offset, len)` pieces of at most `max` bytes.
pub(crate) fn split(offset: u64, len: u64, max: u64) -> Vec<(u64, u64)> {
    let max = max.max(1);
    let mut out = Vec::new();
    let mut done = 0;
    while done < len {
        let n = (len - done).min(max);
        out.push((offset + done, n));
        done += n;
    }
    out
}

/// Checks `[offset, offset+len)` lies in `remote`, refusing overflow and wrap-around.
pub fn check_bounds(remote: &RemoteRegion, offset: u64, len: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= remote.len => Ok(()),
        _ => Err(Error::OutOfBounds {
            offset,
            len,
            region_len: remote.len,
        }),
    }
}

/// Checks `[buf_offset, buf_offset+len)` lies in a local buffer of `buf_len` bytes.
pub(crate) fn check_local(buf_len: usize, buf_offset: usize, len: u64) -> Result<()> {
    let ok = usize::try_from(len)
        .ok()
        .and_then(|l| buf_offset.checked_add(l))
        .is_some_and(|end| end <= buf_len);
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "local range: offset {buf_offset} + length {len} exceeds the {buf_len}-byte buffer"
        )))
    }
}

fn staging(ini: &impl Initiator, len: u64) -> Result<LocalBuf> {
    LocalBuf::new(ini.pd(), (len as usize).min(ini.max_msg()).max(1))
}

/// Which way a one-sided transfer moves data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// RDMA WRITE: local buffer → remote region.
    Write,
    /// RDMA READ: remote region → local buffer.
    Read,
}

/// A failed transfer, with the caller's buffer when the device gave it back (it stays with
/// the queue when a completion never came, e.g. after a timeout).
#[derive(Debug)]
pub struct BufError {
    /// What went wrong.
    pub error: Error,
    /// The buffer, if it came back.
    pub buf: Option<LocalBuf>,
}

/// Posts one signaled READ or WRITE of `buf[boff..boff + n]` against `slice` and waits for it;
/// the buffer comes back either way when the device returns it.
fn round(
    ini: &mut impl Initiator,
    dir: Direction,
    slice: RemoteSlice,
    buf: LocalBuf,
    boff: usize,
    n: usize,
    timeout: Duration,
) -> Result<LocalBuf, BufError> {
    let op = match dir {
        Direction::Write => SendOp::Write(slice),
        Direction::Read => SendOp::Read(slice),
    };
    let wr = SendRequest::new(boff as u64, op, [Sge::range(buf, boff, n)]);
    if let Err(e) = ini.post_wr(wr) {
        return Err(BufError {
            error: e.error,
            buf: e.bufs.into_iter().find_map(crate::verbs::Buf::into_local),
        });
    }
    let c = match ini.wait_wc(1, timeout) {
        Ok(mut v) => v.remove(0),
        Err(error) => return Err(BufError { error, buf: None }),
    };
    buf_back(dir, c)
}

/// The buffer a READ's or WRITE's completion hands back, or its error (with the buffer).
pub(crate) fn buf_back(dir: Direction, c: Completion) -> Result<LocalBuf, BufError> {
    let error = (!c.is_success()).then(|| c.to_error());
    let buf = c.into_local_bufs().pop();
    match (error, buf) {
        (None, Some(b)) => Ok(b),
        (None, None) => Err(BufError {
            error: Error::Protocol(format!("{dir:?} buffer not returned")),
            buf: None,
        }),
        (Some(error), buf) => Err(BufError { error, buf }),
    }
}

/// Where a [`transfer_buf`] moves its bytes: `len` bytes between `buf[buf_offset..]` of the
/// registered buffer it is given and `remote` at `offset`, in direction `dir`.
#[derive(Clone, Copy, Debug)]
pub struct BufTransfer<'r> {
    /// READ from or WRITE to the peer.
    pub dir: Direction,
    /// The peer's exposed region.
    pub remote: &'r RemoteRegion,
    /// Offset in the peer's region.
    pub offset: u64,
    /// Offset in the local buffer.
    pub buf_offset: usize,
    /// Bytes to move.
    pub len: u64,
}

/// Moves `t.len` bytes between `buf[t.buf_offset..]` (a registered buffer, no copy) and
/// `t.remote` at `t.offset`, in messages of at most `max_msg`, each waited for. Both ranges are
/// checked before anything is posted. The buffer is handed back in both cases when the device
/// returned it.
pub fn transfer_buf(
    ini: &mut impl Initiator,
    t: BufTransfer<'_>,
    buf: LocalBuf,
    timeout: Duration,
) -> Result<LocalBuf, BufError> {
    let max = ini.max_msg() as u64;
    let (mut buf, plan) = pieces(t.remote, t.offset, buf, t.buf_offset, t.len, max)?;
    for (slice, boff, n) in plan {
        buf = round(ini, t.dir, slice, buf, boff, n, timeout)?;
    }
    Ok(buf)
}

/// One work request of a transfer: the remote slice, the local offset and the length.
pub(crate) type Piece = (RemoteSlice, usize, usize);

/// The work requests of a transfer of `len` bytes between `buf[buf_offset..]` and `remote` at
/// `offset`, each at most `max` bytes: the remote slice, the local offset and the length of
/// each, with the buffer. Both ranges are checked first (a refusal gives the buffer back).
pub(crate) fn pieces(
    remote: &RemoteRegion,
    offset: u64,
    buf: LocalBuf,
    buf_offset: usize,
    len: u64,
    max: u64,
) -> Result<(LocalBuf, Vec<Piece>), BufError> {
    let plan = (|| {
        check_local(buf.len(), buf_offset, len)?;
        check_bounds(remote, offset, len)?;
        let mut boff = buf_offset;
        split(offset, len, max)
            .into_iter()
            .map(|(off, n)| {
                let s = remote.slice(off, n)?;
                let piece = (s, boff, n as usize);
                boff += n as usize;
                Ok(piece)
            })
            .collect::<Result<Vec<_>>>()
    })();
    match plan {
        Ok(p) => Ok((buf, p)),
        Err(error) => Err(BufError {
            error,
            buf: Some(buf),
        }),
    }
}

/// RDMA WRITEs `data` to `remote` at `offset`, one message of at most `max_msg` at a time.
pub fn write(
    ini: &mut impl Initiator,
    remote: &RemoteRegion,
    offset: u64,
    data: &[u8],
    timeout: Duration,
) -> Result<()> {
    check_bounds(remote, offset, data.len() as u64)?;
    let mut buf = Some(staging(ini, data.len() as u64)?);
    let mut pos = 0usize;
    for (off, n) in split(offset, data.len() as u64, ini.max_msg() as u64) {
        let mut b = buf.take().expect("staging buffer is back");
        let n = n as usize;
        b[..n].copy_from_slice(&data[pos..pos + n]);
        let slice = remote.slice(off, n as u64)?;
        let b = round(ini, Direction::Write, slice, b, 0, n, timeout).map_err(|e| e.error)?;
        buf = Some(b);
        pos += n;
    }
    Ok(())
}

/// RDMA READs `len` bytes of `remote` at `offset`.
pub fn read(
    ini: &mut impl Initiator,
    remote: &RemoteRegion,
    offset: u64,
    len: u64,
    timeout: Duration,
) -> Result<Vec<u8>> {
    check_bounds(remote, offset, len)?;
    // `len` is bounded only by the peer's region: reserve fallibly (no abort, no overflow).
    let mut out = Vec::new();
    usize::try_from(len)
        .ok()
        .filter(|&n| n <= isize::MAX as usize)
        .and_then(|n| out.try_reserve_exact(n).ok())
        .ok_or_else(|| Error::TooLarge {
            what: "RDMA READ destination",
            detail: format!("{len} bytes cannot be allocated"),
        })?;
    let mut buf = Some(staging(ini, len)?);
    for (off, n) in split(offset, len, ini.max_msg() as u64) {
        let b = buf.take().expect("staging buffer is back");
        let slice = remote.slice(off, n)?;
        let b =
            round(ini, Direction::Read, slice, b, 0, n as usize, timeout).map_err(|e| e.error)?;
        out.extend_from_slice(&b[..n as usize]);
        buf = Some(b);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn split_covers_exactly() {
        assert_eq!(split(0, 0, 8), vec![]);
        assert_eq!(split(5, 8, 8), vec![(5, 8)]);
        assert_eq!(split(5, 9, 8), vec![(5, 8), (13, 1)]);
    }

    #[test]
    fn bounds() {
        let r = RemoteRegion {
            addr: 0,
            rkey: 1,
            len: 10,
        };
        assert!(check_bounds(&r, 0, 10).is_ok());
        assert!(check_bounds(&r, 10, 0).is_ok());
        assert!(check_bounds(&r, 11, 0).is_err());
        assert!(check_bounds(&r, 9, 2).is_err());
        assert!(check_bounds(&r, u64::MAX, 1).is_err());
        assert!(check_bounds(&r, 1, u64::MAX).is_err());
    }

    proptest! {
        #[test]
        fn split_is_a_partition(off in 0u64..1 << 40, len in 0u64..1 << 26, max in 1u64..1 << 24) {
            let parts = split(off, len, max);
            let mut next = off;
            for &(o, n) in &parts {
                prop_assert_eq!(o, next);
                prop_assert!(n >= 1 && n <= max);
                next += n;
            }
            prop_assert_eq!(next, off + len);
        }
    }
}
