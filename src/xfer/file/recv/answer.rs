//! What a HELLO gets before any data: the checks (authentication, name, chunk size, what
//! exists), and the answers (SKIP, REFUSE, ERR) with their report entries.

use std::time::{Duration, SystemTime};

use super::entry;
use super::policy::Decision;
use super::sink::{check_size, Sink, SinkOptions};
use crate::error::{Error, Result};
use crate::xfer::file::budget::Budget;
use crate::xfer::file::ctl::{detail, is_lost, reason_of, send_err, send_msg, PEER_REPORTS};
use crate::xfer::file::link::Link;
use crate::xfer::file::names::{self, DirCache, RelPath};
use crate::xfer::file::options::{ReceiverOptions, MIN_CHUNK};
use crate::xfer::file::proto::{self, Digest, EntryKind, Hello, Msg, Reason, SkipWhy};
use crate::xfer::file::report::{FileReport, SessionReport};

/// Where an answer goes: sent at once (an [`Endpoint`]) or gathered with others
/// (`replies::Gathered`).
pub(super) trait Reply {
    /// Sends `msg`, or keeps it to send with the next ones.
    fn reply(&mut self, msg: &Msg) -> impl std::future::Future<Output = Result<()>> + Send;
}

impl<L: Link> Reply for L {
    async fn reply(&mut self, msg: &Msg) -> Result<()> {
        send_msg(self, msg).await
    }
}

/// The checks of every HELLO: authentication, then the name.
pub(super) fn admit(opts: &ReceiverOptions, nonce: &Digest, h: &Hello) -> Result<RelPath> {
    check_auth(opts, nonce, h.auth.as_ref())?;
    if let Some(only) = opts.verify {
        if h.kind == EntryKind::File && h.verify != only {
            return Err(Error::refused(
                Reason::Protocol,
                format!(
                    "this receiver verifies with {only} only (recv --verify {only}); the sender \
                     asks for {}: send with --verify {only}",
                    h.verify
                ),
            ));
        }
    }
    names::sanitize(&h.name)
}

/// The answer to this connection's CHALLENGE, when the receiver has a token.
pub(super) fn check_auth(
    opts: &ReceiverOptions,
    nonce: &Digest,
    auth: Option<&Digest>,
) -> Result<()> {
    if let Some(token) = &opts.token {
        if !proto::auth_verify(token, nonce, auth) {
            let why = if auth.is_some() {
                "wrong token"
            } else {
                "this receiver requires a token (--token or RDMAXFER_TOKEN)"
            };
            return Err(Error::refused(Reason::AuthFailed, why));
        }
    }
    Ok(())
}

/// What a HELLO gets: a sink to receive its data into, a directory or symlink made, or
/// nothing to do.
pub(super) enum Opened {
    Sink(Box<Sink>),
    Made,
    Skip(SkipWhy, String),
}

/// The checks before anything is exposed: chunk size, what exists (the policy), then the
/// sink's (size limit, free space).
pub(super) fn open_sink(opts: &ReceiverOptions, rel: &RelPath, h: &Hello) -> Result<Opened> {
    let dirs = &mut DirCache::default();
    match plan_file(opts, dirs, rel, h)? {
        Planned::Write { replace } => {
            let resume = opts.resume && h.flags.resume;
            let mut sink = make_sink(opts, dirs, rel, h, replace, resume, false)?;
            sink.set_keep_on_abort(opts.resume);
            Ok(Opened::Sink(Box::new(sink)))
        }
        Planned::Skip(why, message) => Ok(Opened::Skip(why, message)),
    }
}

/// What the receiver does with a file's HELLO, by the policy.
pub(super) enum Planned {
    /// Write it (replacing what is there, if `replace`).
    Write { replace: bool },
    /// Nothing to do.
    Skip(SkipWhy, String),
}

/// The checks of a file's HELLO before anything is made: chunk size, then what exists.
pub(super) fn plan_file(
    opts: &ReceiverOptions,
    dirs: &mut DirCache,
    rel: &RelPath,
    h: &Hello,
) -> Result<Planned> {
    if h.chunk_size < MIN_CHUNK {
        return Err(Error::refused(
            Reason::Protocol,
            format!(
                "chunk size {} is below this receiver's minimum of {MIN_CHUNK} bytes",
                h.chunk_size
            ),
        ));
    }
    let existing = entry::inspect_file_in(dirs, &opts.out_dir, rel, h)?;
    match entry::decide(existing, h, opts.force)? {
        Decision::Write { replace } => Ok(Planned::Write { replace }),
        Decision::Skip(why, message) => Ok(Planned::Skip(why, message)),
        Decision::Refuse(_) => unreachable!("entry::decide returns refusals as errors"),
    }
}

/// The sink of a file planned to be written ([`plan_file`]): its size limit and free space
/// checked, its temporary file made.
pub(super) fn make_sink(
    opts: &ReceiverOptions,
    dirs: &mut DirCache,
    rel: &RelPath,
    h: &Hello,
    replace: bool,
    resume: bool,
    at_once: bool,
) -> Result<Sink> {
    let mtime = (h.mtime_sec >= 0)
        .then(|| SystemTime::UNIX_EPOCH + Duration::new(h.mtime_sec as u64, h.mtime_nsec));
    Sink::create_in(
        dirs,
        &opts.out_dir,
        rel,
        h.size,
        SinkOptions {
            force: replace,
            resume,
            max_size: opts.max_size,
            mode: Some(h.mode),
            mtime,
            planned: true,
            at_once,
        },
    )
}

/// A HELLO of a dry run (`send --dry-run`): answered with what receiving it would do (SKIP
/// saying create, replace or why not; REFUSE as a real run would), changing nothing here.
pub(super) async fn answer_dry(
    out: &mut impl Reply,
    opts: &ReceiverOptions,
    dirs: &mut DirCache,
    budget: &mut Budget,
    report: &mut SessionReport,
    nonce: &Digest,
    h: &Hello,
) -> Result<()> {
    let planned = admit(opts, nonce, h).and_then(|rel| match h.kind {
        EntryKind::File => plan_file(opts, dirs, &rel, h).and_then(|p| match p {
            Planned::Write { replace } => {
                check_size(&rel, h.size, opts.max_size)?;
                Ok(Decision::Write { replace })
            }
            Planned::Skip(why, message) => Ok(Decision::Skip(why, message)),
        }),
        _ => entry::plan_entry(&opts.out_dir, &rel, h, opts.force),
    });
    match planned {
        Ok(Decision::Write { replace }) => {
            let why = match replace {
                true => SkipWhy::WouldReplace,
                false => SkipWhy::WouldCreate,
            };
            out.reply(&Msg::Skip {
                why,
                message: why.as_str().into(),
            }).await?;
            report.push(FileReport::would(&h.name, h.kind, h.size, replace));
            budget.answered(&h.name)
        }
        Ok(Decision::Skip(why, message)) => answer_skip(out, report, budget, h, why, message).await,
        Ok(Decision::Refuse(why)) => {
            let e = Error::refused(Reason::Exists, why);
            answer_refuse(out, report, budget, h, e).await
        }
        Err(e) => answer_refuse(out, report, budget, h, e).await,
    }
}

/// A directory or symlink entry: made, skipped or refused, without data.
pub(super) fn receive_entry(
    opts: &ReceiverOptions,
    rel: &RelPath,
    h: &Hello,
) -> Result<entry::Outcome> {
    match h.kind {
        EntryKind::Dir => entry::receive_dir(&opts.out_dir, rel),
        EntryKind::Symlink => entry::receive_symlink(&opts.out_dir, rel, h, opts.force),
        EntryKind::File => unreachable!("files are received by receive_file"),
    }
}

/// Ends a file that failed while receiving: tells the sender why (see [`tell_peer`]), records
/// the failure in `report`, and returns the error.
pub(super) async fn file_failed<L: Link>(
    ep: &mut L,
    report: &mut SessionReport,
    name: &str,
    size: u64,
    e: Error,
    several: bool,
) -> Error {
    tell_peer(ep, &e).await;
    // Of a session with several streams, a file whose stream was lost is sent again on
    // another: it has no verdict here.
    if several && is_lost(&e) {
        return e;
    }
    report.push(FileReport::failed(name, size, reason_of(&e), e.to_string()));
    e
}

/// Best effort, before a failure ends the session: sends ERR with the error's reason, unless the
/// error is the peer's own report or the connection is already gone (nothing would arrive).
pub(super) async fn tell_peer<L: Link>(ep: &mut L, e: &Error) {
    let gone = matches!(
        e,
        Error::Connection(_) | Error::Completion { .. } | Error::InvalidState { .. }
    );
    let theirs = matches!(e, Error::Refused { message, .. } if message.starts_with(PEER_REPORTS));
    if !gone && !theirs {
        send_err(ep, reason_of(e), e).await;
    }
}

/// Answers a HELLO with SKIP (nothing to do) and records it; skipping counts as progress the
/// first time for a name, as a refusal after ([`Budget::answered`]).
pub(super) async fn answer_skip(
    ep: &mut impl Reply,
    report: &mut SessionReport,
    budget: &mut Budget,
    h: &Hello,
    why: SkipWhy,
    message: String,
) -> Result<()> {
    ep.reply(&Msg::Skip {
        why,
        message: proto::truncate_text(&message),
    }).await?;
    report.push(FileReport::skipped(
        &h.name,
        h.kind.as_str(),
        h.size,
        &message,
    ));
    budget.answered(&h.name)
}

/// Answers a HELLO with REFUSE and records it (a refusal spends the refusal budget); a failed
/// authentication ends the session.
pub(super) async fn answer_refuse(
    ep: &mut impl Reply,
    report: &mut SessionReport,
    budget: &mut Budget,
    h: &Hello,
    e: Error,
) -> Result<()> {
    let reason = reason_of(&e);
    let refused = FileReport::failed(&h.name, h.size, reason, detail(&e)).of_kind(h.kind);
    if let Err(spent) = budget.refused() {
        report.push_refused(refused);
        return Err(spent);
    }
    ep.reply(&Msg::Refuse {
        reason,
        message: proto::truncate_text(&detail(&e)),
    }).await?;
    report.push_refused(refused);
    if reason == Reason::AuthFailed {
        return Err(e);
    }
    Ok(())
}
