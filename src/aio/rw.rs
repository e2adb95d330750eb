//! One-sided RDMA READ / WRITE as futures, on the checks and splitting of
//! [`rdma_rw`](crate::xfer::rdma_rw).

use crate::error::{Error, Result};
use crate::verbs::{Completion, LocalBuf, RemoteRegion, RemoteSlice, SendOp, SendRequest, Sge};
use crate::xfer::endpoint::Endpoint;
use crate::xfer::rdma_rw::{buf_back, check_bounds, pieces, BufError, Direction};

use super::AsyncEndpoint;

/// Completions taken per look.
const POLL_MAX: usize = 16;

impl AsyncEndpoint {
    /// RDMA WRITEs `buf[buf_offset..buf_offset + len]` to `remote` at `offset` (in messages no
    /// larger than the port allows, each waited for) and gives the buffer back. Both ranges
    /// are checked before anything is posted.
    ///
    /// The buffer is taken by value: nothing can touch it while the device may read it. If
    /// the future is dropped after a post, the buffer stays with the queue until that
    /// operation's completion (discarded by a later operation) or the queue pair's flush.
    pub async fn write(
        &mut self,
        buf: LocalBuf,
        buf_offset: usize,
        remote: &RemoteRegion,
        offset: u64,
        len: u64,
    ) -> Result<LocalBuf, BufError> {
        self.transfer(Direction::Write, buf, buf_offset, remote, offset, len)
            .await
    }

    /// RDMA READs `len` bytes of `remote` at `offset` into `buf[buf_offset..]` and gives the
    /// buffer back; cancel safety as [`write`](Self::write) (the device may write the buffer
    /// until the operation completes, so it stays with the queue until then).
    pub async fn read(
        &mut self,
        buf: LocalBuf,
        buf_offset: usize,
        remote: &RemoteRegion,
        offset: u64,
        len: u64,
    ) -> Result<LocalBuf, BufError> {
        self.transfer(Direction::Read, buf, buf_offset, remote, offset, len)
            .await
    }

    /// RDMA WRITEs a copy of `data` to `remote` at `offset` (through a registered staging
    /// buffer of the future's own).
    pub async fn write_from(
        &mut self,
        remote: &RemoteRegion,
        offset: u64,
        data: &[u8],
    ) -> Result<()> {
        let mut buf = self.staging(data.len())?;
        buf[..data.len()].copy_from_slice(data);
        self.write(buf, 0, remote, offset, data.len() as u64)
            .await
            .map(drop)
            .map_err(|e| e.error)
    }

    /// RDMA READs `len` bytes of `remote` at `offset` into a new vector (through a registered
    /// staging buffer of the future's own).
    pub async fn read_to_vec(
        &mut self,
        remote: &RemoteRegion,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>> {
        check_bounds(remote, offset, len)?;
        let n = usize::try_from(len).map_err(|_| Error::TooLarge {
            what: "RDMA READ destination",
            detail: format!("{len} bytes do not fit in memory"),
        })?;
        let buf = self.staging(n)?;
        let buf = self
            .read(buf, 0, remote, offset, len)
            .await
            .map_err(|e| e.error)?;
        Ok(buf[..n].to_vec())
    }

    fn staging(&self, len: usize) -> Result<LocalBuf> {
        LocalBuf::new(self.ep.pd(), len.max(1))
    }

    async fn transfer(
        &mut self,
        dir: Direction,
        buf: LocalBuf,
        buf_offset: usize,
        remote: &RemoteRegion,
        offset: u64,
        len: u64,
    ) -> Result<LocalBuf, BufError> {
        let max = u64::from(self.ep.local().port_max_msg);
        let (mut buf, plan) = pieces(remote, offset, buf, buf_offset, len, max)?;
        for (slice, boff, n) in plan {
            buf = self.round(dir, slice, buf, boff, n).await?;
        }
        Ok(buf)
    }

    /// Posts one signaled READ or WRITE and waits for its completion.
    async fn round(
        &mut self,
        dir: Direction,
        slice: RemoteSlice,
        buf: LocalBuf,
        boff: usize,
        n: usize,
    ) -> Result<LocalBuf, BufError> {
        let op = match dir {
            Direction::Write => SendOp::Write(slice),
            Direction::Read => SendOp::Read(slice),
        };
        let id = self.next_wr_id();
        let wr = SendRequest::new(id, op, [Sge::range(buf, boff, n)]);
        if let Err(e) = self.ep.try_post(wr) {
            return Err(BufError {
                error: e.error,
                buf: e.bufs.into_iter().find_map(crate::verbs::Buf::into_local),
            });
        }
        // From here the buffer is the queue's until the completion hands it back.
        let c = match self.drive(|ep| completion_of(ep, id)).await {
            Ok(c) => c,
            Err(error) => return Err(BufError { error, buf: None }),
        };
        buf_back(dir, c)
    }
}

/// The completion of work request `id`, if it has come. Others are of operations whose
/// futures were dropped (one operation runs at a time per endpoint): the device is done with
/// their buffers, which are freed here.
fn completion_of(ep: &mut Endpoint, id: u64) -> Result<Completion> {
    loop {
        let mut found = None;
        for c in ep.try_poll_user(POLL_MAX)? {
            if c.wr_id == id {
                found = Some(c);
            } else {
                tracing::debug!(
                    "discarding the completion of an abandoned operation ({})",
                    c.wr_id
                );
            }
        }
        if let Some(c) = found {
            return Ok(c);
        }
    }
}
