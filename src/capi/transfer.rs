//! File transfer with the options of `rdmaxfer send` and `rdmaxfer recv`:
//! `rdmaxfer_send_options` and `rdmaxfer_send_files` (a progress callback that can stop it),
//! `rdmaxfer_recv_options` and `rdmaxfer_recv_files`, each filling an `rdmaxfer_report` with
//! what happened to every entry.

use std::ffi::{c_char, c_int, c_void};
use std::path::PathBuf;

use super::boundary::{self, CResult, Fail};
use super::conn::rdmaxfer_conn;
use super::file::RDMAXFER_RECV_RESUME;
use super::handle::{free_handle, handle, impl_handle, into_handle, Handle, Slot};
use super::report::{self, rdmaxfer_report};
use super::status::rdmaxfer_status;
use crate::xfer::endpoint::Endpoint;
use crate::xfer::file::digest::Algo;
use crate::xfer::file::send::filter::Filter;
use crate::xfer::file::source::{self, WalkOptions};
use crate::xfer::file::{self, Cancel, Progress, ReceiverOptions, SenderOptions, SessionReport};

/// `rdmaxfer_send_options_set_flags`: replace entries that exist and differ (`send --force`;
/// the receiver must allow it).
pub const RDMAXFER_SEND_FORCE: u32 = 1;
/// Skip entries newer on the receiver, replace older ones (`--update`).
pub const RDMAXFER_SEND_UPDATE: u32 = 2;
/// Skip every entry that exists on the receiver (`--ignore-existing`).
pub const RDMAXFER_SEND_IGNORE_EXISTING: u32 = 4;
/// Compare existing files by BLAKE3 instead of size and mtime (`--checksum`).
pub const RDMAXFER_SEND_CHECKSUM: u32 = 8;
/// Continue partial files the receiver kept (`--resume`).
pub const RDMAXFER_SEND_RESUME: u32 = 16;
/// Say what would be sent, skipped, replaced or deleted; change nothing (`--dry-run`).
pub const RDMAXFER_SEND_DRY_RUN: u32 = 32;
/// Delete what the receiver has in the sent directories and the source does not (`--delete`;
/// the receiver must allow it, `RDMAXFER_RECV_ALLOW_DELETE`).
pub const RDMAXFER_SEND_DELETE: u32 = 64;
/// Send what symlinks point to instead of the links (`--copy-links`).
pub const RDMAXFER_SEND_COPY_LINKS: u32 = 128;
const SEND_FLAGS: u32 = 255;

/// `rdmaxfer_recv_options_set_flags`: let a sender delete what its directories do not have
/// (`recv --allow-delete`).
pub const RDMAXFER_RECV_ALLOW_DELETE: u32 = 4;
const RECV_FLAGS: u32 =
    super::file::RDMAXFER_RECV_FORCE | RDMAXFER_RECV_RESUME | RDMAXFER_RECV_ALLOW_DELETE;

/// Called by `rdmaxfer_send_files` as data goes out and as each entry's verdict comes, on the
/// calling thread: file bytes sent so far, the bytes of the files to send (less those the
/// receiver skipped so far: the last call of a re-run of files it has gives `done == total`),
/// and the caller's `user`. Return 0 to go on, anything
/// else to stop the transfer: it ends at its next chunk or entry with `RDMAXFER_ERR_ABORTED`,
/// the receiver told; nothing it had not verified whole is committed (files completed before
/// stay). Calls back into rdmaxfer on the same connection return `RDMAXFER_ERR_BUSY`.
pub type rdmaxfer_transfer_cb =
    Option<extern "C" fn(done: u64, total: u64, user: *mut c_void) -> c_int>;

/// The send options (Rust side).
#[derive(Clone, Debug)]
pub struct SendOpts {
    flags: u32,
    chunk: u32,
    slots: u32,
    verify: Algo,
    bwlimit: Option<u64>,
    filter: Filter,
}

impl Default for SendOpts {
    fn default() -> Self {
        let d = SenderOptions::default();
        SendOpts {
            flags: 0,
            chunk: d.chunk,
            slots: d.slots,
            verify: d.verify,
            bwlimit: None,
            filter: Filter::new(),
        }
    }
}

/// How `rdmaxfer_send_files` sends: the options of `rdmaxfer send` (connections, streams and
/// devices are the connection's configuration). Made by `rdmaxfer_send_options_new`, freed by
/// `rdmaxfer_send_options_free`; a transfer copies it, so it may be changed or freed after.
pub struct rdmaxfer_send_options {
    slot: Slot<SendOpts>,
}

impl_handle!(rdmaxfer_send_options, SendOpts);

/// Makes send options with the defaults of `rdmaxfer send`: no flags, 1 MiB chunks, 16 in
/// flight, XXH3-128, no rate limit, no exclusions.
/// Returns: RDMAXFER_OK; the pointer statuses of out_opts; RDMAXFER_ERR_PANIC.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_send_options_new(
    out_opts: *mut *mut rdmaxfer_send_options,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_send_options_new", || {
        let o = boundary::out(out_opts, "out_opts")?;
        o.set(into_handle::<rdmaxfer_send_options>(SendOpts::default()));
        Ok(())
    })
}

/// Frees send options (NULL: nothing).
/// Returns: nothing (NULL: a no-op; a misaligned or already freed opts: only the last error message
/// says so).
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_send_options_free(opts: *mut rdmaxfer_send_options) {
    free_handle("rdmaxfer_send_options_free", opts);
}

/// Runs `f` on a copy of the options behind `opts` and keeps the copy only if `f` succeeds.
fn set<H: Handle>(
    func: &'static str,
    opts: *mut H,
    f: impl FnOnce(&mut H::State) -> CResult<()>,
) -> rdmaxfer_status
where
    H::State: Clone,
{
    boundary::run(func, || {
        let mut o = handle(opts, "opts")?;
        let mut next = o.clone();
        f(&mut next)?;
        *o = next;
        Ok(())
    })
}

/// Sets the `RDMAXFER_SEND_*` flags (replacing those set before). Unknown bits:
/// `RDMAXFER_ERR_INVALID_ARGUMENT`.
/// Returns: RDMAXFER_OK; the handle statuses of opts; RDMAXFER_ERR_INVALID_ARGUMENT for unknown
/// bits.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_send_options_set_flags(
    opts: *mut rdmaxfer_send_options,
    flags: u32,
) -> rdmaxfer_status {
    set("rdmaxfer_send_options_set_flags", opts, |o| {
        if flags & !SEND_FLAGS != 0 {
            return Err(Fail::invalid(format!("unknown flags {flags:#x}")));
        }
        o.flags = flags;
        Ok(())
    })
}

/// Chunk size: bytes per RDMA WRITE (`send -s`; the receiver may lower it). Outside
/// 4096..=8388608: `RDMAXFER_ERR_INVALID_ARGUMENT`.
/// Returns: RDMAXFER_OK; the handle statuses of opts; RDMAXFER_ERR_INVALID_ARGUMENT outside
/// 4096..=8388608.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_send_options_set_chunk_size(
    opts: *mut rdmaxfer_send_options,
    bytes: u32,
) -> rdmaxfer_status {
    set("rdmaxfer_send_options_set_chunk_size", opts, |o| {
        if !(file::MIN_CHUNK..=file::MAX_CHUNK).contains(&bytes) {
            return Err(Fail::invalid(format!(
                "chunk size {bytes} is outside {}..={}",
                file::MIN_CHUNK,
                file::MAX_CHUNK
            )));
        }
        o.chunk = bytes;
        Ok(())
    })
}

/// Chunks in flight at most (`send --slots`; also capped by the receiver). Outside 1..=1024:
/// `RDMAXFER_ERR_INVALID_ARGUMENT`.
/// Returns: RDMAXFER_OK; the handle statuses of opts; RDMAXFER_ERR_INVALID_ARGUMENT outside
/// 1..=1024.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_send_options_set_slots(
    opts: *mut rdmaxfer_send_options,
    slots: u32,
) -> rdmaxfer_status {
    set("rdmaxfer_send_options_set_slots", opts, |o| {
        if !(1..=file::MAX_SLOTS).contains(&slots) {
            return Err(Fail::invalid(format!(
                "slots {slots} is outside 1..={}",
                file::MAX_SLOTS
            )));
        }
        o.slots = slots;
        Ok(())
    })
}

/// Chunk verification: "xxh3" (the default) or "blake3" (`send --verify`). Another name:
/// `RDMAXFER_ERR_INVALID_ARGUMENT`.
/// Returns: RDMAXFER_OK; the handle statuses of opts; the pointer statuses of algo;
/// RDMAXFER_ERR_INVALID_ARGUMENT for another name.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_send_options_set_verify(
    opts: *mut rdmaxfer_send_options,
    algo: *const c_char,
) -> rdmaxfer_status {
    set("rdmaxfer_send_options_set_verify", opts, |o| {
        let name = boundary::arg_str(algo, "algo")?;
        o.verify = name.parse().map_err(Fail::invalid)?;
        Ok(())
    })
}

/// At most `bytes_per_second` bytes of file data per second over all streams (`send
/// --bwlimit`); 0: no limit.
/// Returns: RDMAXFER_OK; the handle statuses of opts.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_send_options_set_bwlimit(
    opts: *mut rdmaxfer_send_options,
    bytes_per_second: u64,
) -> rdmaxfer_status {
    set("rdmaxfer_send_options_set_bwlimit", opts, |o| {
        o.bwlimit = (bytes_per_second > 0).then_some(bytes_per_second);
        Ok(())
    })
}

/// Adds an exclusion rule (`send --exclude`, rsync's rules: `*`, `**`, `?`, `[..]`, a trailing
/// `/` for directories only, a leading `/` anchors). Rules apply in the order added, the first
/// that matches decides; with `RDMAXFER_SEND_DELETE` an excluded name is never deleted.
/// Returns: RDMAXFER_OK; the handle statuses of opts; the pointer statuses of pattern;
/// RDMAXFER_ERR_INVALID_ARGUMENT for a pattern that is empty or has an empty component.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_send_options_add_exclude(
    opts: *mut rdmaxfer_send_options,
    pattern: *const c_char,
) -> rdmaxfer_status {
    set("rdmaxfer_send_options_add_exclude", opts, |o| {
        Ok(o.filter.exclude(boundary::arg_str(pattern, "pattern")?)?)
    })
}

/// Adds an inclusion rule (`send --include`): what it matches is sent even if a later
/// exclusion matches it.
/// Returns: RDMAXFER_OK; the handle statuses of opts; the pointer statuses of pattern;
/// RDMAXFER_ERR_INVALID_ARGUMENT for a pattern that is empty or has an empty component.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_send_options_add_include(
    opts: *mut rdmaxfer_send_options,
    pattern: *const c_char,
) -> rdmaxfer_status {
    set("rdmaxfer_send_options_add_include", opts, |o| {
        Ok(o.filter.include(boundary::arg_str(pattern, "pattern")?)?)
    })
}

/// The progress of a send as the C callback sees it: file bytes sent, and the bytes of the
/// files to send less those the receiver skipped. The callback hears of each chunk and each
/// verdict, so its last call has both final.
struct Tally {
    done: u64,
    total: u64,
    cancel: Cancel,
    cb: rdmaxfer_transfer_cb,
    user: *mut c_void,
}

impl Tally {
    fn on(&mut self, p: Progress<'_>) {
        let Some(cb) = self.cb else { return };
        match p {
            Progress::Bytes { total_done, .. } => self.done = total_done,
            Progress::FileDone(f) => {
                if f.is_skipped() && f.kind == "file" {
                    self.total = self.total.saturating_sub(f.bytes);
                }
            }
            _ => return,
        }
        if cb(self.done, self.total, self.user) != 0 {
            self.cancel.cancel();
        }
    }
}

/// Sends the `n_paths` files and trees at `paths` to an `rdmaxfer recv` / `rdmaxfer_recv_files`
/// peer, as `rdmaxfer send` with `opts` (NULL: the defaults) does: verified per chunk, with the
/// configuration's token, streams, devices and receiver addresses (see `rdmaxfer_send_file`).
/// `progress` (may be NULL) is called as data goes out and may stop the transfer
/// (`RDMAXFER_ERR_ABORTED`). `report` (may be NULL; made by `rdmaxfer_report_new`) is filled
/// with every entry's outcome when the call returns, whether it succeeds or fails, unless it
/// fails before anything is sent (a bad argument, the report's own handle statuses included:
/// the report is checked first and held for the whole call, so calls on it meanwhile, from
/// `progress` or another thread, return `RDMAXFER_ERR_BUSY`). `RDMAXFER_OK` only when every entry was
/// delivered or skipped (or, in a dry run, every one could be); `RDMAXFER_ERR_REFUSED` when
/// some were refused or failed (the report says which and why), or the receiver refused the
/// session (busy, a wrong token: the last error message says); `RDMAXFER_ERR_ABORTED` when
/// `progress` stopped it; `RDMAXFER_ERR_INVALID_ARGUMENT` for no paths; `RDMAXFER_ERR_IO` for
/// a path that cannot be listed; and the statuses of the network (see the header's
/// conventions).
/// Returns: RDMAXFER_OK; the handle statuses of conn, opts and report (opts and report may be NULL;
/// a report freed, in use or poisoned fails the call before anything is sent, the report
/// untouched); the pointer statuses of paths and its entries (an empty entry:
/// RDMAXFER_ERR_INVALID_ARGUMENT); RDMAXFER_ERR_INVALID_ARGUMENT, _IO, _REFUSED and _ABORTED as
/// above (INVALID_ARGUMENT also for a path that is not a file or directory, or cannot be sent by
/// its name); the network statuses.
/// Blocks: yes, until the transfer ends; each wait for the peer at most the configured timeout.
#[no_mangle]
pub extern "C" fn rdmaxfer_send_files(
    conn: *mut rdmaxfer_conn,
    paths: *const *const c_char,
    n_paths: usize,
    opts: *const rdmaxfer_send_options,
    progress: rdmaxfer_transfer_cb,
    user: *mut c_void,
    report: *mut rdmaxfer_report,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_send_files", || {
        let o: SendOpts = if opts.is_null() {
            SendOpts::default()
        } else {
            handle(opts, "opts")?.clone()
        };
        let report = report::hold(report)?;
        let roots: Vec<PathBuf> = boundary::arg_str_array(paths, n_paths, usize::MAX, "paths")?
            .into_iter()
            .map(PathBuf::from)
            .collect();
        if roots.is_empty() {
            return Err(Fail::invalid("no paths (n_paths is 0)"));
        }
        let mut c = handle(conn, "conn")?;
        let flag = |f: u32| o.flags & f != 0;
        let walk = WalkOptions {
            copy_links: flag(RDMAXFER_SEND_COPY_LINKS),
            filter: o.filter.clone(),
        };
        let entries = source::walk_with(&roots, walk)?;
        let dial = c.dial.clone();
        let streams = match &dial {
            Some((cfg, ..)) if cfg.streams == 0 => {
                file::default_streams(&entries, cfg.rails.len().max(1))
            }
            Some((cfg, ..)) => cfg.streams,
            None => 1,
        };
        let sopts = SenderOptions {
            token: c.token.clone(),
            chunk: o.chunk,
            slots: o.slots,
            resume: flag(RDMAXFER_SEND_RESUME),
            force: flag(RDMAXFER_SEND_FORCE),
            ignore_existing: flag(RDMAXFER_SEND_IGNORE_EXISTING),
            update: flag(RDMAXFER_SEND_UPDATE),
            checksum: flag(RDMAXFER_SEND_CHECKSUM),
            verify: o.verify,
            streams,
            bwlimit: o.bwlimit,
            dry_run: flag(RDMAXFER_SEND_DRY_RUN),
            delete: flag(RDMAXFER_SEND_DELETE),
            filter: o.filter,
            ..SenderOptions::default()
        };
        let mut tally = Tally {
            done: 0,
            total: entries
                .iter()
                .filter(|e| e.kind == source::SourceKind::File)
                .filter_map(|e| e.listed.map(|l| l.size))
                .sum(),
            cancel: sopts.cancel.clone(),
            cb: progress,
            user,
        };
        let connect = |i: u16| -> crate::Result<Endpoint> {
            let (cfg, host, port) = dial.as_ref().ok_or_else(|| {
                crate::Error::InvalidArgument(format!("stream {i}: an accepted connection"))
            })?;
            cfg.connect_stream(i, host, *port)
        };
        let ep = c.rdmaxfer_peer()?;
        let mut session_report = SessionReport::default();
        let r = file::send::send_streams_into(
            ep,
            &connect,
            &entries,
            &sopts,
            &mut session_report,
            &mut |p| tally.on(p),
        );
        report.fill(session_report);
        r.map_err(Fail::from)
    })
}

/// The receive options (Rust side).
#[derive(Clone, Debug, Default)]
pub struct RecvOpts {
    flags: u32,
    max_size: Option<u64>,
    verify: Option<Algo>,
    idle: Option<std::time::Duration>,
    min_rate: Option<u64>,
}

/// How `rdmaxfer_recv_files` receives: the options of `rdmaxfer recv` that apply to one
/// session. Made by `rdmaxfer_recv_options_new`, freed by `rdmaxfer_recv_options_free`; a
/// transfer copies it.
pub struct rdmaxfer_recv_options {
    slot: Slot<RecvOpts>,
}

impl_handle!(rdmaxfer_recv_options, RecvOpts);

/// Makes receive options with the defaults of `rdmaxfer recv`: no flags, no size limit, any
/// verification, its idle timeout and rate floor.
/// Returns: RDMAXFER_OK; the pointer statuses of out_opts; RDMAXFER_ERR_PANIC.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_recv_options_new(
    out_opts: *mut *mut rdmaxfer_recv_options,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_recv_options_new", || {
        let o = boundary::out(out_opts, "out_opts")?;
        o.set(into_handle::<rdmaxfer_recv_options>(RecvOpts::default()));
        Ok(())
    })
}

/// Frees receive options (NULL: nothing).
/// Returns: nothing (NULL: a no-op; a misaligned or already freed opts: only the last error message
/// says so).
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_recv_options_free(opts: *mut rdmaxfer_recv_options) {
    free_handle("rdmaxfer_recv_options_free", opts);
}

/// Sets the flags: `RDMAXFER_RECV_FORCE`, `RDMAXFER_RECV_RESUME`,
/// `RDMAXFER_RECV_ALLOW_DELETE` (replacing those set before). Unknown bits:
/// `RDMAXFER_ERR_INVALID_ARGUMENT`.
/// Returns: RDMAXFER_OK; the handle statuses of opts; RDMAXFER_ERR_INVALID_ARGUMENT for unknown
/// bits.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_recv_options_set_flags(
    opts: *mut rdmaxfer_recv_options,
    flags: u32,
) -> rdmaxfer_status {
    set("rdmaxfer_recv_options_set_flags", opts, |o| {
        if flags & !RECV_FLAGS != 0 {
            return Err(Fail::invalid(format!("unknown flags {flags:#x}")));
        }
        o.flags = flags;
        Ok(())
    })
}

/// Refuses files larger than `bytes` (`recv --max-size`); 0: no limit.
/// Returns: RDMAXFER_OK; the handle statuses of opts.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_recv_options_set_max_size(
    opts: *mut rdmaxfer_recv_options,
    bytes: u64,
) -> rdmaxfer_status {
    set("rdmaxfer_recv_options_set_max_size", opts, |o| {
        o.max_size = (bytes > 0).then_some(bytes);
        Ok(())
    })
}

/// Accepts only this chunk verification, "xxh3" or "blake3" (`recv --verify`); NULL: any.
/// Returns: RDMAXFER_OK; the handle statuses of opts; RDMAXFER_ERR_INVALID_ARGUMENT for a name
/// other than those, or not UTF-8.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_recv_options_set_verify(
    opts: *mut rdmaxfer_recv_options,
    algo: *const c_char,
) -> rdmaxfer_status {
    set("rdmaxfer_recv_options_set_verify", opts, |o| {
        o.verify = match boundary::opt_str(algo, "algo")? {
            Some(name) => Some(name.parse().map_err(Fail::invalid)?),
            None => None,
        };
        Ok(())
    })
}

/// The session's budget (`recv --idle-timeout`, `--min-rate`): it ends after `idle_ms`
/// milliseconds without progress (0: never), or when its data comes slower than
/// `min_bytes_per_second` (0: no floor).
/// Returns: RDMAXFER_OK; the handle statuses of opts.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_recv_options_set_budget(
    opts: *mut rdmaxfer_recv_options,
    idle_ms: u64,
    min_bytes_per_second: u64,
) -> rdmaxfer_status {
    set("rdmaxfer_recv_options_set_budget", opts, |o| {
        o.idle = (idle_ms > 0).then(|| std::time::Duration::from_millis(idle_ms));
        o.min_rate = Some(min_bytes_per_second);
        Ok(())
    })
}

/// Receives one sender's session on `conn` into the existing directory `out_dir`, as
/// `rdmaxfer_recv_file` does (where files land, what is refused), with `opts` (NULL: the
/// defaults), and fills `report` (may be NULL) with every entry's outcome when the call
/// returns, whether it succeeds or fails, unless it fails before the session starts (a bad
/// argument, the report's own handle statuses included: the report is checked first and held
/// for the whole call, so calls on it meanwhile return `RDMAXFER_ERR_BUSY`). `RDMAXFER_OK` when every entry arrived verified or
/// was skipped; `RDMAXFER_ERR_REFUSED` when some were refused or failed (the report says which)
/// or the session was refused (a wrong token); `RDMAXFER_ERR_INVALID_ARGUMENT` for an
/// `out_dir` that is not a directory; `RDMAXFER_ERR_IO` for one that cannot be read; and the
/// statuses of the network.
/// Returns: RDMAXFER_OK; the handle statuses of conn, opts and report (opts and report may be NULL;
/// a report freed, in use or poisoned fails the call before the session starts, the report
/// untouched); the pointer statuses of out_dir; RDMAXFER_ERR_INVALID_ARGUMENT, _IO and _REFUSED as
/// above; the network statuses.
/// Blocks: yes, until the sender's session ends; each wait for the peer at most the configured
/// timeout.
#[no_mangle]
pub extern "C" fn rdmaxfer_recv_files(
    conn: *mut rdmaxfer_conn,
    out_dir: *const c_char,
    opts: *const rdmaxfer_recv_options,
    report: *mut rdmaxfer_report,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_recv_files", || {
        let o: RecvOpts = if opts.is_null() {
            RecvOpts::default()
        } else {
            handle(opts, "opts")?.clone()
        };
        let report = report::hold(report)?;
        let dir = boundary::arg_path(out_dir, "out_dir")?;
        let mut c = handle(conn, "conn")?;
        super::file::check_out_dir(&dir)?;
        let mut ropts = ReceiverOptions {
            token: c.token.clone(),
            force: o.flags & super::file::RDMAXFER_RECV_FORCE != 0,
            resume: o.flags & RDMAXFER_RECV_RESUME != 0,
            allow_delete: o.flags & RDMAXFER_RECV_ALLOW_DELETE != 0,
            max_size: o.max_size,
            verify: o.verify,
            slots: c.ep.recv_depth(),
            ..ReceiverOptions::new(dir)
        };
        if let Some(rate) = o.min_rate {
            ropts.budgets.idle = o.idle;
            ropts.budgets.min_rate = rate;
        }
        let mut session_report = SessionReport::default();
        let r = file::recv::receive_into(c.rdmaxfer_peer()?, &ropts, &mut session_report);
        report.fill(session_report);
        r.map_err(Fail::from)
    })
}
