//! Verified file transfer: `rdmaxfer_send_file` and `rdmaxfer_recv_file` (the protocol of
//! `rdmaxfer send` / `rdmaxfer recv`).

use std::ffi::{c_char, c_void};
use std::path::PathBuf;

use super::boundary::{self, CResult, Fail};
use super::conn::rdmaxfer_conn;
use super::handle::handle;
use super::status::rdmaxfer_status;
use crate::xfer::endpoint::Endpoint;
use crate::xfer::file::source;
use crate::xfer::file::{self, Progress, ReceiverOptions, SenderOptions, SessionReport};

/// `rdmaxfer_recv_file`: allow a sender to replace existing files that differ (it asks with
/// `rdmaxfer send --force` or `--update`). Identical files are skipped either way.
pub const RDMAXFER_RECV_FORCE: u32 = 1;
/// `rdmaxfer_recv_file`: keep partial files and continue them when a sender resumes.
pub const RDMAXFER_RECV_RESUME: u32 = 2;

/// Called by `rdmaxfer_send_file` as data goes out: bytes sent so far, bytes in total, and the
/// caller's `user` pointer. It runs on the calling thread, inside the call, with the connection
/// in use: calling back into rdmaxfer on that connection returns `RDMAXFER_ERR_BUSY`.
pub type rdmaxfer_progress_cb = Option<extern "C" fn(sent: u64, total: u64, user: *mut c_void)>;

fn failed_files(report: &SessionReport) -> String {
    report
        .files
        .iter()
        .filter(|f| !f.is_ok() && !f.is_skipped())
        .map(|f| {
            format!(
                "{} ({}: {})",
                f.name,
                f.result,
                f.message.as_deref().unwrap_or("")
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn with_files(e: crate::Error, report: &SessionReport) -> Fail {
    let mut f = Fail::from(e);
    let failed = failed_files(report);
    if !failed.is_empty() {
        f.msg = format!("{}; failed: {failed}", f.msg);
    }
    f
}

/// Sends the file or directory tree at `path` to an `rdmaxfer recv` / `rdmaxfer_recv_file`
/// peer, verified per chunk (XXH3-128, the protocol's default), with the configuration's
/// token, over the streams the configuration asks for (`rdmaxfer_config_set_streams`, placed
/// in turn on the devices of `rdmaxfer_config_set_devices` and the receiver addresses of
/// `rdmaxfer_config_set_stream_hosts`; a connection made by `rdmaxfer_accept` carries one). `progress` (may be NULL) is called with
/// the bytes sent so far (of all streams, on the calling thread); `user` is passed to it
/// untouched. Inside a tree, symlinks are sent as symlinks and empty directories as directories; files the receiver already has
/// (same size and modification time) are skipped. `RDMAXFER_OK` only when every entry was
/// delivered (verified and committed) or skipped.
/// Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of path;
/// RDMAXFER_ERR_INVALID_ARGUMENT for a path that is not a file or directory, or cannot be sent by
/// its name; RDMAXFER_ERR_IO for one that cannot be listed; RDMAXFER_ERR_REFUSED when an entry or
/// the session was refused or failed (the last error message names them); the network statuses.
/// Blocks: yes, until the transfer ends; each wait for the peer at most the configured timeout.
#[no_mangle]
pub extern "C" fn rdmaxfer_send_file(
    conn: *mut rdmaxfer_conn,
    path: *const c_char,
    progress: rdmaxfer_progress_cb,
    user: *mut c_void,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_send_file", || {
        let mut c = handle(conn, "conn")?;
        let path: PathBuf = boundary::arg_path(path, "path")?;
        let entries = source::walk(&[path])?;
        let total: u64 = entries
            .iter()
            .filter(|e| e.kind == source::SourceKind::File)
            .filter_map(|e| std::fs::metadata(&e.path).ok())
            .map(|m| m.len())
            .sum();
        let opts = SenderOptions {
            token: c.token.clone(),
            ..SenderOptions::default()
        };
        let mut report = SessionReport::default();
        let mut tick = |p: Progress<'_>| {
            if let (Some(cb), Progress::Bytes { total_done, .. }) = (progress, p) {
                cb(total_done, total, user);
            }
        };
        // Further streams connect as this connection did (an accepted one has one stream).
        let dial = c.dial.clone();
        let streams = match &dial {
            Some((cfg, ..)) if cfg.streams == 0 => {
                file::default_streams(&entries, cfg.rails.len().max(1))
            }
            Some((cfg, ..)) => cfg.streams,
            None => 1,
        };
        let opts = SenderOptions { streams, ..opts };
        let connect = |i: u16| -> crate::Result<Endpoint> {
            let (cfg, host, port) = dial.as_ref().ok_or_else(|| {
                crate::Error::InvalidArgument(format!("stream {i}: an accepted connection"))
            })?;
            // Placed as `rdmaxfer send` places them: device and address i mod those given.
            cfg.connect_stream(i, host, *port)
        };
        let ep = c.rdmaxfer_peer()?;
        file::send::send_streams_into(ep, &connect, &entries, &opts, &mut report, &mut tick)
            .map_err(|e| with_files(e, &report))
    })
}

/// `out_dir` of a receive: an existing directory.
pub(crate) fn check_out_dir(dir: &std::path::Path) -> CResult<()> {
    let meta = std::fs::metadata(dir)
        .map_err(|e| crate::Error::io(format!("out_dir {}", dir.display()), e))?;
    if !meta.is_dir() {
        return Err(Fail::invalid(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    Ok(())
}

/// What `rdmaxfer_recv_file` received.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct rdmaxfer_recv_summary {
    /// In: `sizeof` the struct as the caller knows it. Out: the bytes written (see the
    /// header's conventions: the struct can grow).
    pub struct_size: usize,
    /// Entries the sender announced: all verified and committed, or skipped (already here).
    pub files: u64,
    /// Bytes moved by RDMA.
    pub bytes: u64,
}

// SAFETY: repr(C), first field `struct_size: usize`.
unsafe impl boundary::Growable for rdmaxfer_recv_summary {
    const V1: usize = std::mem::size_of::<rdmaxfer_recv_summary>();
}

/// Receives what one sender sends on `conn` into the existing directory `out_dir`. The
/// receiving side is the accepting one: `rdmaxfer_listen` + `rdmaxfer_accept`, then this call,
/// while the sender connects (`rdmaxfer send PATH... HOST`, or `rdmaxfer_connect` +
/// `rdmaxfer_send_file`); as with `rdmaxfer recv --out DIR`, one call serves one sender's
/// session. Where files land: each entry at the relative name the sender gives it under
/// `out_dir` (a sent file `a.bin` as `out_dir/a.bin`, a sent tree `photos/` as
/// `out_dir/photos/...`), directories made as needed; names that would leave `out_dir` (`..`,
/// absolute, control characters) and symlinks that would point out of it are refused. Each
/// file is written to a temporary file in its directory, verified per chunk, fsynced and only
/// then renamed into place (a failed file leaves nothing, unless `RDMAXFER_RECV_RESUME`).
/// `flags`: `RDMAXFER_RECV_FORCE`, `RDMAXFER_RECV_RESUME` or 0. With a token in the
/// configuration the sender must know it. Files already here (same size and modification time)
/// are skipped. `RDMAXFER_OK` only when every entry arrived verified or was skipped.
/// Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of out_dir and
/// out_summary; RDMAXFER_ERR_INVALID_ARGUMENT for unknown flags or an out_dir that is not a
/// directory; RDMAXFER_ERR_IO for one that cannot be read; RDMAXFER_ERR_REFUSED when an entry or
/// the session was refused or failed (the last error message names them); the network statuses.
/// Blocks: yes, until the sender's session ends; each wait for the peer at most the configured
/// timeout.
#[no_mangle]
pub extern "C" fn rdmaxfer_recv_file(
    conn: *mut rdmaxfer_conn,
    out_dir: *const c_char,
    flags: u32,
    out_summary: *mut rdmaxfer_recv_summary,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_recv_file", || {
        let mut c = handle(conn, "conn")?;
        let dir = boundary::arg_path(out_dir, "out_dir")?;
        let o = boundary::sized_out(out_summary, "out_summary")?;
        if flags & !(RDMAXFER_RECV_FORCE | RDMAXFER_RECV_RESUME) != 0 {
            return Err(Fail::invalid(format!("unknown flags {flags:#x}")));
        }
        check_out_dir(&dir)?;
        let ep_depth = c.ep.recv_depth();
        let opts = ReceiverOptions {
            token: c.token.clone(),
            force: flags & RDMAXFER_RECV_FORCE != 0,
            resume: flags & RDMAXFER_RECV_RESUME != 0,
            slots: ep_depth,
            ..ReceiverOptions::new(dir)
        };
        let mut report = SessionReport::default();
        file::recv::receive_into(c.rdmaxfer_peer()?, &opts, &mut report)
            .map_err(|e| with_files(e, &report))?;
        o.set(rdmaxfer_recv_summary {
            struct_size: 0,
            files: report.file_count(),
            bytes: report.bytes,
        });
        Ok(())
    })
}
