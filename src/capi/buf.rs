//! Registered buffers, one-sided sessions against a peer's exposed buffer (RDMA READ/WRITE),
//! and serving an exposure.

use std::ffi::c_void;

use super::boundary::{self, out, CResult, Fail};
use super::conn::rdmaxfer_conn;
use super::handle::{free_handle, handle, impl_handle, into_handle, Slot};
use super::status::rdmaxfer_status;
use crate::error::Error;
use crate::verbs::{LocalBuf, RemoteAccess};
use crate::xfer::onesided::{self, Exposure};
use crate::xfer::rdma_rw::{self, Direction};

/// Peers may RDMA READ the exposed buffer.
pub const RDMAXFER_ACCESS_READ: u32 = 1;
/// Peers may RDMA WRITE the exposed buffer.
pub const RDMAXFER_ACCESS_WRITE: u32 = 2;
/// Peers may RDMA READ and WRITE the exposed buffer.
pub const RDMAXFER_ACCESS_READ_WRITE: u32 = 3;

fn access_of(a: u32) -> CResult<RemoteAccess> {
    match a {
        RDMAXFER_ACCESS_READ => Ok(RemoteAccess::Read),
        RDMAXFER_ACCESS_WRITE => Ok(RemoteAccess::Write),
        RDMAXFER_ACCESS_READ_WRITE => Ok(RemoteAccess::ReadWrite),
        a => Err(Fail::invalid(format!(
            "access {a} (use RDMAXFER_ACCESS_READ, _WRITE or _READ_WRITE)"
        ))),
    }
}

fn access_bits(a: RemoteAccess) -> u32 {
    match a {
        RemoteAccess::Read => RDMAXFER_ACCESS_READ,
        RemoteAccess::Write => RDMAXFER_ACCESS_WRITE,
        RemoteAccess::ReadWrite => RDMAXFER_ACCESS_READ_WRITE,
    }
}

/// Memory registered on one connection (local access only): the source of RDMA WRITEs and the
/// target of RDMA READs, without copies. Its bytes are reached through `rdmaxfer_buf_write`
/// and `rdmaxfer_buf_read`, never a pointer, so freeing a connection or a failed transfer can
/// never leave the caller holding a pointer to memory the device owns.
pub struct rdmaxfer_buf {
    slot: Slot<BufState>,
}

/// A buffer's state.
pub struct BufState {
    /// `None` when a failed transfer left it with the queue (timed out).
    buf: Option<LocalBuf>,
    len: usize,
    conn_id: u64,
}

impl BufState {
    fn get(&mut self) -> CResult<&mut LocalBuf> {
        self.buf.as_mut().ok_or_else(|| {
            Fail::state(
                "the buffer was lost in a failed transfer (it stays with the queue); free it",
            )
        })
    }

    fn range(&self, offset: usize, len: usize) -> CResult<std::ops::Range<usize>> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(offset..end),
            _ => Err(Fail::invalid(format!(
                "offset {offset} + length {len} exceeds the {}-byte buffer",
                self.len
            ))),
        }
    }
}

impl_handle!(rdmaxfer_buf, BufState);

/// Registers a zeroed buffer of `len` bytes (at least 1) on `conn`'s protection domain.
/// Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of out_buf;
/// RDMAXFER_ERR_INVALID_ARGUMENT if len is 0 or too large; RDMAXFER_ERR_VERBS if the registration
/// fails (e.g. over the locked-memory limit: rdmaxfer_last_os_error).
/// Blocks: no (it waits for no peer).
#[no_mangle]
pub extern "C" fn rdmaxfer_buf_new(
    conn: *mut rdmaxfer_conn,
    len: usize,
    out_buf: *mut *mut rdmaxfer_buf,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_buf_new", || {
        let c = handle(conn, "conn")?;
        let o = out(out_buf, "out_buf")?;
        if len == 0 || len > isize::MAX as usize {
            return Err(Fail::invalid(format!("length {len}")));
        }
        let b = LocalBuf::new(c.ep.pd(), len)?;
        o.set(into_handle::<rdmaxfer_buf>(BufState {
            buf: Some(b),
            len,
            conn_id: c.id,
        }));
        Ok(())
    })
}

/// Frees a buffer (NULL: nothing).
/// Returns: nothing (NULL: a no-op; a misaligned or already freed buf: only the last error message
/// says so).
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_buf_free(buf: *mut rdmaxfer_buf) {
    free_handle("rdmaxfer_buf_free", buf);
}

/// The buffer's length in bytes (0 for NULL).
/// Returns: the length; 0 for NULL (the last error message says nothing then), and for a
/// misaligned, freed, busy or poisoned buf (it says why).
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_buf_len(buf: *const rdmaxfer_buf) -> usize {
    boundary::run_or("rdmaxfer_buf_len", 0, || {
        if buf.is_null() {
            return Ok(0);
        }
        Ok(handle(buf, "buf")?.len)
    })
}

/// Copies `len` bytes from `src` into the buffer at `offset`.
/// Returns: RDMAXFER_OK; the handle statuses of buf; the pointer statuses of src (NULL allowed when
/// len is 0); RDMAXFER_ERR_INVALID_ARGUMENT if offset + len is past the buffer's end;
/// RDMAXFER_ERR_INVALID_STATE also when a failed transfer lost the buffer.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_buf_write(
    buf: *mut rdmaxfer_buf,
    offset: usize,
    src: *const c_void,
    len: usize,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_buf_write", || {
        let mut b = handle(buf, "buf")?;
        let src = boundary::arg_bytes(src, len, "src")?;
        let r = b.range(offset, len)?;
        b.get()?[r].copy_from_slice(src);
        Ok(())
    })
}

/// Copies `len` bytes of the buffer at `offset` to `dst`.
/// Returns: RDMAXFER_OK; the handle statuses of buf; the pointer statuses of dst (NULL allowed when
/// len is 0); RDMAXFER_ERR_INVALID_ARGUMENT if offset + len is past the buffer's end;
/// RDMAXFER_ERR_INVALID_STATE also when a failed transfer lost the buffer.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_buf_read(
    buf: *const rdmaxfer_buf,
    offset: usize,
    dst: *mut c_void,
    len: usize,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_buf_read", || {
        let mut b = handle(buf, "buf")?;
        let dst = boundary::arg_bytes_mut(dst, len, "dst")?;
        let r = b.range(offset, len)?;
        dst.copy_from_slice(&b.get()?[r]);
        Ok(())
    })
}

/// The client's side of a one-sided session with a peer serving an exposure (`rdmaxfer_expose`
/// or `rdmaxfer expose`). Made by `rdmaxfer_remote_open`, ended by `rdmaxfer_remote_close`,
/// freed by `rdmaxfer_remote_free`.
pub struct rdmaxfer_remote {
    slot: Slot<Remote>,
}

/// A session's state.
pub struct Remote {
    x: Exposure,
    conn_id: u64,
    written: u64,
    read: u64,
    failed: bool,
    closed: bool,
}

impl_handle!(rdmaxfer_remote, Remote);

/// Opens a one-sided session on `conn`: asks the peer to expose its buffer and learns where it
/// is, how long, and what it allows.
/// Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of out_remote; the
/// network statuses.
/// Blocks: yes, until the peer exposes its buffer, each wait at most the configured timeout.
#[no_mangle]
pub extern "C" fn rdmaxfer_remote_open(
    conn: *mut rdmaxfer_conn,
    out_remote: *mut *mut rdmaxfer_remote,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_remote_open", || {
        let mut c = handle(conn, "conn")?;
        let o = out(out_remote, "out_remote")?;
        let x = onesided::open_session(c.rdmaxfer_peer()?)?;
        o.set(into_handle::<rdmaxfer_remote>(Remote {
            x,
            conn_id: c.id,
            written: 0,
            read: 0,
            failed: false,
            closed: false,
        }));
        Ok(())
    })
}

/// The length in bytes of the peer's exposed buffer (0 for NULL).
/// Returns: the length; 0 for NULL (the last error message says nothing then), and for a
/// misaligned, freed, busy or poisoned remote (it says why).
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_remote_len(remote: *const rdmaxfer_remote) -> u64 {
    boundary::run_or("rdmaxfer_remote_len", 0, || {
        if remote.is_null() {
            return Ok(0);
        }
        Ok(handle(remote, "remote")?.x.region.len)
    })
}

/// What the peer allows: `RDMAXFER_ACCESS_READ`, `_WRITE` or `_READ_WRITE` (0 for NULL).
/// Returns: the access bits; 0 for NULL (the last error message says nothing then), and for a
/// misaligned, freed, busy or poisoned remote (it says why).
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_remote_access(remote: *const rdmaxfer_remote) -> u32 {
    boundary::run_or("rdmaxfer_remote_access", 0, || {
        if remote.is_null() {
            return Ok(0);
        }
        Ok(access_bits(handle(remote, "remote")?.x.access))
    })
}

/// `rdmaxfer_rdma_write` or `rdmaxfer_rdma_read`, by `dir`.
fn rdma(
    dir: Direction,
    conn: *mut rdmaxfer_conn,
    remote: *mut rdmaxfer_remote,
    remote_offset: u64,
    buf: *mut rdmaxfer_buf,
    buf_offset: usize,
    len: usize,
) -> rdmaxfer_status {
    let func = match dir {
        Direction::Write => "rdmaxfer_rdma_write",
        Direction::Read => "rdmaxfer_rdma_read",
    };
    boundary::run(func, || {
        let mut c = handle(conn, "conn")?;
        let mut r = handle(remote, "remote")?;
        let mut b = handle(buf, "buf")?;
        if r.conn_id != c.id || b.conn_id != c.id {
            return Err(Fail::invalid(
                "remote and buf must be made on this conn (rdmaxfer_remote_open, rdmaxfer_buf_new)",
            ));
        }
        if r.closed {
            return Err(Fail::state("the session was closed"));
        }
        let allowed = match dir {
            Direction::Write => r.x.access.can_write(),
            Direction::Read => r.x.access.can_read(),
        };
        if !allowed {
            return Err(Fail::invalid(format!(
                "the peer exposes its buffer with {:?} access only",
                r.x.access
            )));
        }
        b.get()?;
        let lb = b.buf.take().expect("checked by get");
        let timeout = c.ep.timeout();
        let region = r.x.region;
        let t = rdma_rw::BufTransfer {
            dir,
            remote: &region,
            offset: remote_offset,
            buf_offset,
            len: len as u64,
        };
        match rdma_rw::transfer_buf(&mut c.ep, t, lb, timeout) {
            Ok(lb) => {
                b.buf = Some(lb);
                match dir {
                    Direction::Write => r.written += len as u64,
                    Direction::Read => r.read += len as u64,
                }
                Ok(())
            }
            Err(e) => {
                b.buf = e.buf;
                // Refused by the range checks before anything was posted: the peer's buffer was
                // never touched, so the session's report stays "ok" (rdmaxfer_expose_report).
                let refused_locally = matches!(
                    e.error,
                    Error::InvalidArgument(_) | Error::OutOfBounds { .. }
                );
                if !refused_locally {
                    r.failed = true;
                }
                Err(e.error.into())
            }
        }
    })
}

/// RDMA WRITEs `len` bytes of `buf` at `buf_offset` into the peer's buffer at `remote_offset`
/// (both ranges checked first), and waits until it is done.
/// Returns: RDMAXFER_OK; the handle statuses of conn, remote and buf; RDMAXFER_ERR_INVALID_ARGUMENT
/// if remote or buf was made on another conn, the exposure does not allow writes, or buf_offset +
/// len is past buf's end; RDMAXFER_ERR_OUT_OF_BOUNDS if remote_offset + len is past the exposed
/// buffer's end; RDMAXFER_ERR_INVALID_STATE also when the session was closed or a failed transfer
/// lost buf; the network statuses.
/// Blocks: yes, until the WRITE completes, at most the configured timeout.
#[no_mangle]
pub extern "C" fn rdmaxfer_rdma_write(
    conn: *mut rdmaxfer_conn,
    remote: *mut rdmaxfer_remote,
    remote_offset: u64,
    buf: *mut rdmaxfer_buf,
    buf_offset: usize,
    len: usize,
) -> rdmaxfer_status {
    rdma(
        Direction::Write,
        conn,
        remote,
        remote_offset,
        buf,
        buf_offset,
        len,
    )
}

/// RDMA READs `len` bytes of the peer's buffer at `remote_offset` into `buf` at `buf_offset`
/// (both ranges checked first), and waits until they are there.
/// Returns: RDMAXFER_OK; the handle statuses of conn, remote and buf; RDMAXFER_ERR_INVALID_ARGUMENT
/// if remote or buf was made on another conn, the exposure does not allow reads, or buf_offset +
/// len is past buf's end; RDMAXFER_ERR_OUT_OF_BOUNDS if remote_offset + len is past the exposed
/// buffer's end; RDMAXFER_ERR_INVALID_STATE also when the session was closed or a failed transfer
/// lost buf; the network statuses.
/// Blocks: yes, until the READ completes, at most the configured timeout.
#[no_mangle]
pub extern "C" fn rdmaxfer_rdma_read(
    conn: *mut rdmaxfer_conn,
    remote: *mut rdmaxfer_remote,
    remote_offset: u64,
    buf: *mut rdmaxfer_buf,
    buf_offset: usize,
    len: usize,
) -> rdmaxfer_status {
    rdma(
        Direction::Read,
        conn,
        remote,
        remote_offset,
        buf,
        buf_offset,
        len,
    )
}

/// Ends the session: tells the peer how many bytes were written and read and whether every
/// transfer succeeded, and waits until it has the message. The peer then revokes its exposure.
/// Returns: RDMAXFER_OK; the handle statuses of conn and remote; RDMAXFER_ERR_INVALID_ARGUMENT if
/// remote was opened on another conn; RDMAXFER_ERR_INVALID_STATE also when the session was already
/// closed; the network statuses.
/// Blocks: yes, until the peer has the message, at most the configured timeout.
#[no_mangle]
pub extern "C" fn rdmaxfer_remote_close(
    conn: *mut rdmaxfer_conn,
    remote: *mut rdmaxfer_remote,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_remote_close", || {
        let mut c = handle(conn, "conn")?;
        let mut r = handle(remote, "remote")?;
        if r.conn_id != c.id {
            return Err(Fail::invalid("remote was not opened on this conn"));
        }
        if r.closed {
            return Err(Fail::state("the session was already closed"));
        }
        r.closed = true;
        onesided::end_session(&mut c.ep, !r.failed, r.written, r.read)?;
        Ok(())
    })
}

/// Frees a session (NULL: nothing). Freeing it without `rdmaxfer_remote_close` leaves the peer
/// waiting until the connection ends.
/// Returns: nothing (NULL: a no-op; a misaligned or already freed remote: only the last error
/// message says so).
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_remote_free(remote: *mut rdmaxfer_remote) {
    free_handle("rdmaxfer_remote_free", remote);
}

/// What one peer did to an exposed buffer (`rdmaxfer_expose`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct rdmaxfer_expose_report {
    /// In: `sizeof` the struct as the caller knows it. Out: the bytes written (see the
    /// header's conventions: the struct can grow).
    pub struct_size: usize,
    /// Bytes the peer said it wrote.
    pub written: u64,
    /// Bytes the peer said it read.
    pub read: u64,
    /// 1 when the peer ended the session saying every transfer succeeded; 0 when it reported a
    /// failure or vanished (the last error message then says why). What counts as a failure is
    /// the peer's to say; an `rdmaxfer_remote_*` peer counts the RDMA READs and WRITEs that
    /// were posted and failed (a completion error such as a remote access error, a timeout, a
    /// lost connection), not the calls it refused before posting anything (a range outside
    /// the exposed buffer or its own, an access the exposure lacks, a closed session): those
    /// never reached this buffer, and the C caller already had their error status.
    pub ok: u32,
    /// Changed byte ranges (gaps under 16 bytes merged).
    pub changed_ranges: u32,
    /// Bytes inside those ranges.
    pub changed_bytes: u64,
}

// SAFETY: repr(C), first field `struct_size: usize`.
unsafe impl boundary::Growable for rdmaxfer_expose_report {
    const V1: usize = std::mem::size_of::<rdmaxfer_expose_report>();
}

/// Serves one session on `conn` (from `rdmaxfer_accept`): exposes a copy of `data` (`len`
/// bytes) with `access`, waits until the peer ends the session (or goes away), revokes the
/// exposure and copies what the peer left in it back to `data`. As `rdmaxfer expose` does; the
/// peer may be `rdmaxfer write`/`read` or `rdmaxfer_remote_open`.
/// Returns: RDMAXFER_OK, also when the session ended early (then out_report->ok is 0 and the last
/// error message says why); the handle statuses of conn; the pointer statuses of data and
/// out_report; RDMAXFER_ERR_INVALID_ARGUMENT if len is 0 or access is unknown; the network
/// statuses.
/// Blocks: yes, until the peer ends the session, each wait at most the configured timeout.
#[no_mangle]
pub extern "C" fn rdmaxfer_expose(
    conn: *mut rdmaxfer_conn,
    data: *mut c_void,
    len: usize,
    access: u32,
    out_report: *mut rdmaxfer_expose_report,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_expose", || {
        let mut c = handle(conn, "conn")?;
        if len == 0 {
            return Err(Fail::invalid("length 0"));
        }
        let dst = boundary::arg_bytes_mut(data, len, "data")?;
        let access = access_of(access)?;
        let o = boundary::sized_out(out_report, "out_report")?;
        let mut content = dst.to_vec();
        let rep = onesided::serve_session(c.rdmaxfer_peer()?, &mut content, access)?;
        dst.copy_from_slice(&content);
        if let Some(e) = &rep.error {
            boundary::set_last_error(format!("rdmaxfer_expose: the session ended early: {e}"));
        }
        o.set(rdmaxfer_expose_report {
            struct_size: 0,
            written: rep.written,
            read: rep.read,
            ok: u32::from(rep.ok),
            changed_ranges: rep.changed.len().try_into().unwrap_or(u32::MAX),
            changed_bytes: rep.changed.iter().map(|(s, e)| (e - s) as u64).sum(),
        });
        Ok(())
    })
}
