//! `rdmaxfer_report`: what a file transfer did with each entry, filled by `rdmaxfer_send_files`
//! and `rdmaxfer_recv_files` whether they succeed or fail, and read with getters that fill
//! caller-allocated structs whose first field is their size (so they can grow:
//! [`boundary::Growable`]).

use std::ffi::{c_char, CString};

use super::boundary::{self, CResult, Fail};
use super::handle::{free_handle, handle, impl_handle, into_handle, Call, Slot};
use super::status::rdmaxfer_status;
use crate::xfer::file::report::{FileReport, SessionReport};

/// What happened to one entry (`rdmaxfer_file_result.outcome`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum rdmaxfer_outcome {
    /// Verified and committed (a file), made (a directory or symlink).
    RDMAXFER_OUTCOME_DELIVERED = 0,
    /// Nothing to do: the receiver has it (identical), or the options say to skip it.
    RDMAXFER_OUTCOME_SKIPPED = 1,
    /// Refused or failed (`result` names the reason, `message` the detail); nothing of it was
    /// committed.
    RDMAXFER_OUTCOME_FAILED = 2,
    /// Gone from the sender's source between its listing and its turn.
    RDMAXFER_OUTCOME_VANISHED = 3,
    /// A dry run (`RDMAXFER_SEND_DRY_RUN`): would be sent (`message`: "would create" or "would
    /// replace").
    RDMAXFER_OUTCOME_WOULD_SEND = 4,
}

/// One entry of a report (`rdmaxfer_report_file`; `struct_size` as the header's conventions
/// say). The strings belong to the report: valid until it is freed or filled again.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdmaxfer_file_result {
    /// In: `sizeof` the struct as the caller knows it. Out: the bytes written.
    pub struct_size: usize,
    /// The entry's name, relative, as sent (control characters escaped).
    pub name: *const c_char,
    /// "file", "dir", "symlink" or "other".
    pub kind: *const c_char,
    /// What happened.
    pub outcome: rdmaxfer_outcome,
    /// "ok", "skipped", "vanished", "would send", or the reason of a failure (e.g. "hash
    /// mismatch", "exists").
    pub result: *const c_char,
    /// The detail of a skip or a failure; NULL when there is none.
    pub message: *const c_char,
    /// The file's size in bytes.
    pub bytes: u64,
}

/// A report's totals (`rdmaxfer_report_totals`; `struct_size` as the header's conventions
/// say).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct rdmaxfer_totals {
    /// In: `sizeof` the struct as the caller knows it. Out: the bytes written.
    pub struct_size: usize,
    /// Entries announced (all of them; the report lists the first `RDMAXFER_REPORT_MAX_FILES`).
    pub entries: u64,
    /// Entries skipped.
    pub skipped: u64,
    /// Entries refused or failed (refused and vanished ones included).
    pub failed: u64,
    /// Entries the receiver refused before any data.
    pub refused: u64,
    /// Entries gone from the sender's source before their turn.
    pub vanished: u64,
    /// Entries a dry run would send.
    pub planned: u64,
    /// Entries deleted on the receiver (`RDMAXFER_SEND_DELETE`; in a dry run, that would be).
    pub deleted: u64,
    /// File bytes moved by RDMA in the session.
    pub bytes: u64,
}

// SAFETY: repr(C), first field `struct_size: usize`.
unsafe impl boundary::Growable for rdmaxfer_file_result {
    const V1: usize = std::mem::size_of::<rdmaxfer_file_result>();
}

// SAFETY: repr(C), first field `struct_size: usize`.
unsafe impl boundary::Growable for rdmaxfer_totals {
    const V1: usize = std::mem::size_of::<rdmaxfer_totals>();
}

/// The most entries a report lists (it counts the rest in its totals).
pub const RDMAXFER_REPORT_MAX_FILES: usize = 1000;
const _: () = assert!(RDMAXFER_REPORT_MAX_FILES == crate::xfer::file::report::MAX_REPORTED_FILES);

/// The strings of one entry, kept for the pointers handed out.
#[derive(Debug)]
struct Entry {
    name: CString,
    kind: CString,
    result: CString,
    message: Option<CString>,
    outcome: rdmaxfer_outcome,
    bytes: u64,
}

/// The report (Rust side): the session's, and each listed entry's strings.
#[derive(Debug, Default)]
pub struct Report {
    session: SessionReport,
    entries: Vec<Entry>,
}

/// A C string of `s` (NULs, which names never hold, become spaces).
fn c(s: &str) -> CString {
    CString::new(s.replace('\0', " ")).unwrap_or_default()
}

fn outcome(f: &FileReport) -> rdmaxfer_outcome {
    use rdmaxfer_outcome as O;
    if f.is_ok() {
        O::RDMAXFER_OUTCOME_DELIVERED
    } else if f.is_skipped() {
        O::RDMAXFER_OUTCOME_SKIPPED
    } else if f.is_vanished() {
        O::RDMAXFER_OUTCOME_VANISHED
    } else if f.is_planned() {
        O::RDMAXFER_OUTCOME_WOULD_SEND
    } else {
        O::RDMAXFER_OUTCOME_FAILED
    }
}

impl Report {
    /// Replaces the contents with `session`'s.
    pub(crate) fn fill(&mut self, session: SessionReport) {
        self.entries = session
            .files
            .iter()
            .map(|f| Entry {
                name: c(&f.name),
                kind: c(f.kind),
                result: c(&f.result),
                message: f.message.as_deref().map(c),
                outcome: outcome(f),
                bytes: f.bytes,
            })
            .collect();
        self.session = session;
    }
}

/// What a transfer did, entry by entry. Made by `rdmaxfer_report_new`, filled by a transfer
/// call it is passed to, freed by `rdmaxfer_report_free`.
pub struct rdmaxfer_report {
    slot: Slot<Report>,
}

impl_handle!(rdmaxfer_report, Report);

/// Makes an empty report.
/// Returns: RDMAXFER_OK; the pointer statuses of out_report; RDMAXFER_ERR_PANIC.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_report_new(out_report: *mut *mut rdmaxfer_report) -> rdmaxfer_status {
    boundary::run("rdmaxfer_report_new", || {
        let o = boundary::out(out_report, "out_report")?;
        o.set(into_handle::<rdmaxfer_report>(Report::default()));
        Ok(())
    })
}

/// Frees a report and its strings (NULL: nothing).
/// Returns: nothing (NULL: a no-op; a misaligned or already freed report: only the last error
/// message says so).
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_report_free(report: *mut rdmaxfer_report) {
    free_handle("rdmaxfer_report_free", report);
}

/// A transfer's report, locked from before the transfer starts until it is filled: a handle
/// that is freed, in use or poisoned fails the call before anything moves, and no other call
/// can take it in between (a free meanwhile takes effect when the transfer returns, after the
/// fill).
pub(crate) struct Held(Option<Call<rdmaxfer_report>>);

/// Locks `report` (NULL: nothing to fill) before a transfer starts ([`Held`]).
pub(crate) fn hold(report: *mut rdmaxfer_report) -> CResult<Held> {
    if report.is_null() {
        return Ok(Held(None));
    }
    Ok(Held(Some(handle(report, "report")?)))
}

impl Held {
    /// Fills the report (if any) with `session`: what the transfer calls do on every return
    /// once the transfer has begun.
    pub(crate) fn fill(self, session: SessionReport) {
        if let Some(mut r) = self.0 {
            r.fill(session);
        }
    }
}

/// The entries `report` lists (at most `RDMAXFER_REPORT_MAX_FILES`); 0 for NULL or a handle
/// in use.
/// Returns: the count; 0 for a NULL, misaligned, freed, busy or poisoned report (the last error
/// message says why).
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_report_len(report: *const rdmaxfer_report) -> usize {
    boundary::run_or("rdmaxfer_report_len", 0, || {
        Ok(handle(report, "report")?.entries.len())
    })
}

/// Entry `i` (0-based, below `rdmaxfer_report_len`) of `report` into `*out` (see
/// `rdmaxfer_file_result` for its `struct_size`). `RDMAXFER_ERR_INVALID_ARGUMENT` for an index
/// past the end or a `struct_size` below the first release's struct.
/// Returns: RDMAXFER_OK; the handle statuses of report; the pointer statuses of out;
/// RDMAXFER_ERR_INVALID_ARGUMENT if i is past the end.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_report_file(
    report: *const rdmaxfer_report,
    i: usize,
    out: *mut rdmaxfer_file_result,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_report_file", || {
        let r = handle(report, "report")?;
        let o = boundary::sized_out(out, "out")?;
        let e = r.entries.get(i).ok_or_else(|| {
            Fail::invalid(format!("entry {i}: the report lists {}", r.entries.len()))
        })?;
        let v = rdmaxfer_file_result {
            struct_size: 0,
            name: e.name.as_ptr(),
            kind: e.kind.as_ptr(),
            outcome: e.outcome,
            result: e.result.as_ptr(),
            message: e.message.as_ref().map_or(std::ptr::null(), |m| m.as_ptr()),
            bytes: e.bytes,
        };
        o.set(v);
        Ok(())
    })
}

/// The totals of `report` into `*out` (`struct_size` as for `rdmaxfer_report_file`).
/// Returns: RDMAXFER_OK; the handle statuses of report; the pointer statuses of out.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_report_totals(
    report: *const rdmaxfer_report,
    out: *mut rdmaxfer_totals,
) -> rdmaxfer_status {
    boundary::run("rdmaxfer_report_totals", || {
        let r = handle(report, "report")?;
        let o = boundary::sized_out(out, "out")?;
        let s = &r.session;
        let v = rdmaxfer_totals {
            struct_size: 0,
            entries: s.file_count(),
            skipped: s.skipped,
            failed: s.failed,
            refused: s.refused,
            vanished: s.vanished,
            planned: s.planned,
            deleted: s.deleted,
            bytes: s.bytes,
        };
        o.set(v);
        Ok(())
    })
}
