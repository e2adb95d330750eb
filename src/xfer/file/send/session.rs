//! One stream's session: CHALLENGE, then each entry's HELLO and verdict (several in flight:
//! `pipe`), then DONE.

use super::data::{named_by_peer, PHASE_TARGET as PHASE};
use super::delete::delete_extras;
use super::file::{send_file, StreamState};
use super::part::Part;
use super::pipe::Pipe;
use super::source::{SourceEntry, SourceKind};
use crate::error::{Error, Result};
use crate::xfer::file::ctl::{awaiting, peer_err, recv_ctl, send_err, send_msg, stalled};
use crate::xfer::file::link::block::block_on;
use crate::xfer::file::link::Link;
use crate::xfer::file::options::SenderOptions;
use crate::xfer::file::proto::{self, Digest, Msg, Reason};
use crate::xfer::file::report::{FileReport, Progress, SessionError, SessionReport};

/// Sends `entries` (from [`source::walk`](crate::xfer::file::source::walk)) on `ep`, one after
/// another, then DONE, and returns the session's report: each file's verdict (the receiver's
/// ACK). Refused or failed files make the result an error at the end ([`Error::Incomplete`](
/// crate::Error::Incomplete), in a [`SessionError`] with the report), but later files are still
/// sent. A lost connection, an ERR from the receiver or a failed authentication ends the
/// session at once. `progress` hears of each file's start, its bytes as they are written and
/// its verdict.
pub fn send<L: Link>(
    ep: &mut L,
    entries: &[SourceEntry],
    opts: &SenderOptions,
    progress: &mut dyn FnMut(Progress<'_>),
) -> std::result::Result<SessionReport, SessionError> {
    block_on(send_async(ep, entries, opts, progress))
}

/// [`send`] on a link whose waits are awaited.
pub(crate) async fn send_async<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
    ep: &mut L,
    entries: &[SourceEntry],
    opts: &SenderOptions,
    progress: &mut P,
) -> std::result::Result<SessionReport, SessionError> {
    let mut report = SessionReport::default();
    let r = send_into_async(ep, entries, opts, &mut report, progress).await;
    report.ended(r)
}

/// [`send`], recording into `report` as it goes (the C API's and the tool's form).
pub fn send_into<L: Link>(
    ep: &mut L,
    entries: &[SourceEntry],
    opts: &SenderOptions,
    report: &mut SessionReport,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<()> {
    block_on(send_into_async(ep, entries, opts, report, progress))
}

/// [`send_into`] on a link whose waits are awaited.
pub(crate) async fn send_into_async<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
    ep: &mut L,
    entries: &[SourceEntry],
    opts: &SenderOptions,
    report: &mut SessionReport,
    progress: &mut P,
) -> Result<()> {
    opts.check()?;
    let nonce = challenge(ep, opts).await.map_err(|e| stalled(e, 0, ep))?;
    send_entries(ep, entries, opts, &nonce, report, progress).await.map_err(|e| stalled(e, 0, ep))
}

/// Waits for the receiver's CHALLENGE and returns its nonce; with
/// [`SenderOptions::require_receiver_proof`], only from a receiver that proved it knows the token.
pub(super) async fn challenge<L: Link>(ep: &mut L, opts: &SenderOptions) -> Result<Digest> {
    match awaiting("the receiver's CHALLENGE", recv_ctl(ep).await)? {
        Msg::Challenge { nonce, proof, .. } => {
            if opts.require_receiver_proof {
                let ok = opts
                    .token
                    .as_ref()
                    .is_some_and(|t| proto::receiver_proof_ok(t, &nonce, proof.as_ref()));
                if !ok {
                    return Err(Error::refused(
                        Reason::AuthFailed,
                        "the receiver did not prove it knows the token: nothing was sent to it",
                    ));
                }
            }
            Ok(nonce)
        }
        Msg::Refuse { reason, message } | Msg::Err { reason, message } => {
            Err(peer_err(reason, &message))
        }
        other => Err(Error::Protocol(format!(
            "expected CHALLENGE from the receiver, got {other:?} (is the peer `rdmaxfer recv`?)"
        ))),
    }
}

/// Sends `entries` one after another on `ep`, then DONE (see [`send`]).
pub(super) async fn send_entries<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
    ep: &mut L,
    entries: &[SourceEntry],
    opts: &SenderOptions,
    nonce: &Digest,
    report: &mut SessionReport,
    progress: &mut P,
) -> Result<()> {
    let mut st = StreamState::new(opts, *nonce);
    let mut pipe = Pipe::new(ep);
    for e in entries {
        send_entry(ep, &mut st, &mut pipe, e, Part::Whole, report, progress).await?;
    }
    drain(ep, &st, &mut pipe, report, progress).await?;
    if opts.delete {
        delete_extras(ep, entries, opts, report, progress).await.map_err(|e| named_by_peer(ep, e))?;
    }
    send_done(ep).await;
    report.result("delivered")
}

/// Sends one entry (or one stripe of a file entry, a job of one stream of several) and tells
/// `progress` its verdict (a striped file's with its last stripe). Directories, symlinks and
/// small files go through `pipe` (their verdicts may come while later entries are sent, and are
/// recorded in the order of the entries); anything else waits for what is in flight first.
pub(super) async fn send_entry<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
    ep: &mut L,
    st: &mut StreamState<'_, L::Buf>,
    pipe: &mut Pipe,
    e: &SourceEntry,
    part: Part<'_>,
    report: &mut SessionReport,
    progress: &mut P,
) -> Result<()> {
    if let Err(err) = st.opts.cancel.check() {
        send_err(ep, Reason::Internal, &err).await;
        return Err(err);
    }
    if matches!(part, Part::Whole) {
        match pipe.offer(ep, st, e, report, progress).await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(err) => return Err(named_by_peer(ep, err)),
        }
    }
    pipe.drain(ep, st, report, progress).await
        .map_err(|err| named_by_peer(ep, err))?;
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
        _ => send_file(ep, st, e, part, report, progress).await,
    }
    .map_err(|err| named_by_peer(ep, err));
    report.announce_since(before, progress);
    r
}

/// Takes what is in flight, then ends the session with DONE.
pub(super) async fn finish<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
    ep: &mut L,
    st: &StreamState<'_, L::Buf>,
    pipe: &mut Pipe,
    report: &mut SessionReport,
    progress: &mut P,
) -> Result<()> {
    drain(ep, st, pipe, report, progress).await?;
    send_done(ep).await;
    Ok(())
}

/// Takes what is in flight (every entry has its answer then).
pub(super) async fn drain<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
    ep: &mut L,
    st: &StreamState<'_, L::Buf>,
    pipe: &mut Pipe,
    report: &mut SessionReport,
    progress: &mut P,
) -> Result<()> {
    pipe.drain(ep, st, report, progress).await
        .map_err(|err| named_by_peer(ep, err))
}

/// Ends the session with DONE.
pub(super) async fn send_done<L: Link>(ep: &mut L) {
    // Every file has its verdict (ACK) now. The receiver ends the session when DONE arrives; if
    // the acknowledgement of DONE is lost on the wire, its disconnect can overtake it, so a
    // failure to see DONE acknowledged does not undo what was delivered.
    let done = match send_msg(ep, &Msg::Done).await {
        Ok(()) => ep.flush().await,
        e => e,
    };
    if let Err(e) = done {
        tracing::debug!("DONE not acknowledged ({e}); every file already has its verdict");
    }
    tracing::debug!(target: PHASE, "DONE sent");
}
