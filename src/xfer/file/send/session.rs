//! One stream's session: CHALLENGE, then each entry's HELLO and verdict, then DONE.

use std::os::unix::fs::MetadataExt;

use super::core::Answer;
use super::data::{named_by_peer, PHASE_TARGET as PHASE};
use super::file::{send_file, StreamState};
use super::part::Part;
use super::source::{SourceEntry, SourceKind};
use crate::error::{Error, Result};
use crate::xfer::endpoint::Endpoint;
use crate::xfer::file::budget::wait_on;
use crate::xfer::file::ctl::{peer_err, recv_ctl, send_msg};
use crate::xfer::file::options::SenderOptions;
use crate::xfer::file::proto::{self, Digest, EntryKind, Hello, Msg, Reason};
use crate::xfer::file::report::{FileReport, Progress, SessionReport};

/// Sends `entries` (from [`source::walk`](crate::xfer::file::source::walk)) on `ep`, one after
/// another, then DONE. Each file's verdict (the receiver's ACK) is recorded in `report`; refused or
/// failed files make the result an error at the end, but later files are still sent. A lost
/// connection, an ERR from the receiver or a failed authentication ends the session at once.
/// `progress` hears of each file's start, its bytes as they are written and its verdict.
pub fn send(
    ep: &mut Endpoint,
    entries: &[SourceEntry],
    opts: &SenderOptions,
    report: &mut SessionReport,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<()> {
    opts.check()?;
    let nonce = challenge(ep)?;
    send_entries(ep, entries, opts, &nonce, report, progress)
}

/// Waits for the receiver's CHALLENGE and returns its nonce.
pub(super) fn challenge(ep: &mut Endpoint) -> Result<Digest> {
    match recv_ctl(ep)? {
        Msg::Challenge { nonce, .. } => Ok(nonce),
        Msg::Refuse { reason, message } | Msg::Err { reason, message } => {
            Err(peer_err(reason, &message))
        }
        other => Err(Error::Protocol(format!(
            "expected CHALLENGE from the receiver, got {other:?} (is the peer `rdmaxfer recv`?)"
        ))),
    }
}

/// Sends `entries` one after another on `ep`, then DONE (see [`send`]).
pub(super) fn send_entries(
    ep: &mut Endpoint,
    entries: &[SourceEntry],
    opts: &SenderOptions,
    nonce: &Digest,
    report: &mut SessionReport,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<()> {
    let mut st = StreamState::new(opts, *nonce);
    for e in entries {
        send_entry(ep, &mut st, e, Part::Whole, report, progress)?;
    }
    send_done(ep);
    report.result("delivered")
}

/// Sends one entry (or one stripe of a file entry, a job of one stream of several) and tells
/// `progress` its verdict (a striped file's with its last stripe).
pub(super) fn send_entry(
    ep: &mut Endpoint,
    st: &mut StreamState<'_>,
    e: &SourceEntry,
    part: Part<'_>,
    report: &mut SessionReport,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<()> {
    let before = report.file_count();
    let r = match (part, &e.kind) {
        (Part::Whole, SourceKind::Skipped(why)) => {
            report.push(FileReport::skipped(e.name.as_str(), "other", 0, why));
            Ok(())
        }
        (Part::Whole, SourceKind::Unsendable { shown, why }) => {
            report.push(FileReport::failed(shown, 0, Reason::BadName, why.clone()));
            Ok(())
        }
        (Part::Whole, SourceKind::Dir) => {
            send_entry_without_data(ep, st, e, EntryKind::Dir, report)
        }
        (Part::Whole, SourceKind::Symlink(_)) => {
            send_entry_without_data(ep, st, e, EntryKind::Symlink, report)
        }
        (Part::Stripe(_), _) | (Part::Whole, SourceKind::File) => {
            send_file(ep, st, e, part, report, progress)
        }
    }
    .map_err(|err| named_by_peer(ep, err));
    report.announce_since(before, progress);
    r
}

/// Ends the session with DONE.
pub(super) fn send_done(ep: &mut Endpoint) {
    // Every file has its verdict (ACK) now. The receiver ends the session when DONE arrives; if
    // the acknowledgement of DONE is lost on the wire, its disconnect can overtake it, so a
    // failure to see DONE acknowledged does not undo what was delivered.
    if let Err(e) = send_msg(ep, &Msg::Done).and_then(|()| ep.flush()) {
        tracing::debug!("DONE not acknowledged ({e}); every file already has its verdict");
    }
    tracing::debug!(target: PHASE, "DONE sent");
}

/// A directory or a symlink (`kind`): HELLO and the receiver's answer.
fn send_entry_without_data(
    ep: &mut Endpoint,
    st: &mut StreamState<'_>,
    e: &SourceEntry,
    kind: EntryKind,
    report: &mut SessionReport,
) -> Result<()> {
    let name = e.name.as_str();
    let target = match &e.kind {
        SourceKind::Symlink(t) => t.clone(),
        _ => String::new(),
    };
    let (opts, session) = (st.opts, st.session);
    let meta = match std::fs::symlink_metadata(&e.path) {
        Ok(m) => m,
        Err(err) => {
            let err = Error::refused(Reason::ReadError, format!("{}: {err}", e.path.display()));
            report.push(
                FileReport::failed(name, 0, Reason::ReadError, err.to_string()).of_kind(kind),
            );
            return Ok(());
        }
    };
    let hello = Hello {
        version: proto::VERSION,
        kind,
        name: name.to_string(),
        target,
        size: 0,
        mode: meta.mode() & 0o7777,
        mtime_sec: meta.mtime(),
        mtime_nsec: meta.mtime_nsec().clamp(0, 999_999_999) as u32,
        chunk_size: opts.chunk,
        verify: opts.verify,
        flags: opts.hello_flags(),
        checksum: None,
        auth: opts
            .token
            .as_ref()
            .map(|t| proto::auth_answer(t, &st.nonce)),
    };
    let hello = Msg::Hello(hello);
    wait_on(ep, session, |ep| send_msg(ep, &hello))?;
    match Answer::of(wait_on(ep, session, recv_ctl)?, false)? {
        Answer::Made => report.push(FileReport::made(name, kind)),
        Answer::Skipped(message) => {
            report.push(FileReport::skipped(name, kind.as_str(), 0, &message))
        }
        Answer::Refused {
            reason,
            message,
            fatal,
        } => {
            let err = peer_err(reason, &message);
            report.push_refused(FileReport::failed(name, 0, reason, message).of_kind(kind));
            if fatal {
                return Err(err);
            }
        }
        // Not an answer to a directory's or symlink's HELLO (`Answer::of` refuses it already).
        Answer::Ring(_) => {
            return Err(Error::Protocol(
                "expected ACK, SKIP or REFUSE, got MR".into(),
            ))
        }
    }
    Ok(())
}
