//! The receiver's side of a session: CHALLENGE, then OPEN or JOIN (several streams), then each
//! HELLO (after STRIPE, for one stripe of a file) until DONE.

use std::collections::VecDeque;
use std::sync::Arc;

use super::answer::{answer_dry, check_auth, tell_peer};
use super::data::StagingRing;
use super::delete::{self, SentDirs};
use super::file::{receive_file, SessionState};
use super::inline::Inline;
use super::joint::{Joint, StreamRegistry};
use super::replies::Replies;
use super::ring_budget::RingLease;
use super::stripe;
use crate::error::{Error, Result};
use crate::xfer::file::budget::{budget_wait, Budget, Stop};
use crate::xfer::file::ctl::{
    awaiting, detail, is_lost, peer_err, reason_of, recv_ctl, send_err, send_msg, stalled,
};
use crate::xfer::file::link::block::block_on;
use crate::xfer::file::link::{Link, StagingMem};
use crate::xfer::file::names::DirCache;
use crate::xfer::file::options::ReceiverOptions;
use crate::xfer::file::proto::{self, EntryKind, Msg, Reason, Session, Stripe};
use crate::xfer::file::report::{LostStream, Progress, SessionError, SessionReport};

/// Serves one sender on `ep` until DONE (or a HELLO flagged `last`) and returns the session's
/// report: each file's verdict. Refused or failed files make the result an error at the end
/// ([`Error::Incomplete`](crate::Error::Incomplete), in a [`SessionError`] with the report; the
/// session itself continues past them). A protocol violation, a failed authentication, an
/// unsupported version, a spent budget (`opts.budgets`: ERR(budget) tells the sender which) or
/// a lost connection ends the session at once. The ring is revoked before returning.
pub fn receive<L: Link>(
    ep: &mut L,
    opts: &ReceiverOptions,
) -> std::result::Result<SessionReport, SessionError> {
    block_on(receive_async(ep, opts))
}

/// [`receive`] on a link whose waits are awaited.
pub(crate) async fn receive_async<L: Link>(
    ep: &mut L,
    opts: &ReceiverOptions,
) -> std::result::Result<SessionReport, SessionError> {
    let mut report = SessionReport::default();
    let r = receive_into_async(ep, opts, &mut report).await;
    report.ended(r)
}

/// [`receive`], recording into `report` as it goes (the C API's and the tool's form).
pub fn receive_into<L: Link>(
    ep: &mut L,
    opts: &ReceiverOptions,
    report: &mut SessionReport,
) -> Result<()> {
    block_on(receive_into_async(ep, opts, report))
}

/// [`receive_into`] on a link whose waits are awaited.
pub(crate) async fn receive_into_async<L: Link>(
    ep: &mut L,
    opts: &ReceiverOptions,
    report: &mut SessionReport,
) -> Result<()> {
    receive_leased_async(ep, opts, &mut RingLease::unlimited(), report, &mut |_| {}).await
}

/// Like [`receive`], with the staging ring sized within `lease` (a share of the memory budget
/// of a receiver serving several sessions at once): smaller slots when the budget is short.
/// `progress` hears of each file's verdict as it is recorded ([`Progress::FileDone`]).
pub fn receive_leased<L: Link>(
    ep: &mut L,
    opts: &ReceiverOptions,
    lease: &mut RingLease,
    report: &mut SessionReport,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<()> {
    block_on(receive_leased_async(ep, opts, lease, report, progress))
}

/// [`receive_leased`] on a link whose waits are awaited.
pub(crate) async fn receive_leased_async<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
    ep: &mut L,
    opts: &ReceiverOptions,
    lease: &mut RingLease,
    report: &mut SessionReport,
    progress: &mut P,
) -> Result<()> {
    receive_streams_async(ep, opts, lease, Role::default(), report, progress).await
}

/// What a connection may be for a receiver that takes sessions of several streams.
#[derive(Clone, Copy, Debug, Default)]
pub struct Role<'a> {
    /// The receiver's registry of sessions with several streams (`None`: an OPEN is granted
    /// one stream, a JOIN is refused).
    pub streams: Option<&'a StreamRegistry>,
    /// Only a JOIN of a session being served is taken (`recv --once` after its session began):
    /// anything else is refused as busy.
    pub join_only: bool,
}

/// Like [`receive_leased`], as one stream of a session with several streams (OPEN, JOIN)
/// where `role` allows it.
pub fn receive_streams<L: Link>(
    ep: &mut L,
    opts: &ReceiverOptions,
    lease: &mut RingLease,
    role: Role<'_>,
    report: &mut SessionReport,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<()> {
    block_on(receive_streams_async(ep, opts, lease, role, report, progress))
}

/// [`receive_streams`] on a link whose waits are awaited.
pub(crate) async fn receive_streams_async<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
    ep: &mut L,
    opts: &ReceiverOptions,
    lease: &mut RingLease,
    role: Role<'_>,
    report: &mut SessionReport,
    progress: &mut P,
) -> Result<()> {
    let mut ring: Option<StagingRing<L::Ring>> = None;
    let mut budget = Budget::new(opts.budgets, ep.timeout());
    budget.cancel_with(opts.cancel.flag());
    let mut s = SessionState {
        lease,
        ring: &mut ring,
        budget: &mut budget,
        stream: None,
        joint: None,
    };
    let r = receive_session(ep, opts, &mut s, role, report, progress).await
        .map_err(|e| stalled(e, s.stream.unwrap_or(0), ep));
    // A stream of several that is lost leaves its parts to the session's other streams (the
    // sender sends them again there): the session's verdict is theirs.
    // This stream has ended: the streams of its session still going.
    let others = s.joint.as_ref().map_or(0, |(j, _)| j.leave());
    let r = match r {
        Err(e) if others > 0 && is_lost(&e) => {
            let stream = s.stream.unwrap_or(0);
            tracing::warn!(
                "stream {stream} of the session ({} from {}) was lost, its parts are left to \
                 the others: {e}",
                ep.device_name(),
                ep.peer_name()
            );
            report.lost.push(LostStream {
                stream,
                device: ep.device_name(),
                peer: ep.peer_name(),
                error: e.to_string(),
                handed_back: 0,
            });
            Ok(())
        }
        r => r,
    };
    if let Err(e) = &r {
        if e.reason() == Some(Reason::Budget) {
            tracing::warn!("ending the session: {}", e.to_string().escape_debug());
            send_err(ep, Reason::Budget, e).await;
        }
    }
    if let Some(ring) = ring {
        if let Err(e) = ring.region.revoke() {
            tracing::warn!("deregistering the staging ring: {e}");
        }
    }
    r?;
    report.result("received")
}

async fn receive_session<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
    ep: &mut L,
    opts: &ReceiverOptions,
    st: &mut SessionState<'_, L::Ring>,
    role: Role<'_>,
    report: &mut SessionReport,
    progress: &mut P,
) -> Result<()> {
    let nonce = proto::new_nonce();
    send_msg(
        ep,
        &Msg::Challenge {
            version: proto::VERSION,
            nonce,
            proof: opts
                .token
                .as_ref()
                .map(|t| proto::receiver_proof(t, &nonce)),
        },
    ).await?;
    let mut joint: Option<Arc<Joint>> = None;
    let mut stripe: Option<Stripe> = None;
    let mut inline = Inline::default();
    let mut replies = Replies::new(ep);
    let mut pending = VecDeque::new();
    let mut dry_dirs = DirCache::default();
    let mut sent_dirs = SentDirs::default();
    let mut last = false;
    let mut first = true;
    loop {
        if last && inline.is_idle() {
            return replies.flush(ep).await;
        }
        let next = match pending.pop_front() {
            Some(m) => Ok(m),
            None => next_msg(ep, st, &mut replies, &mut pending).await,
        };
        let msg = match next {
            Ok(m) => m,
            Err(e) if e.reason() == Some(Reason::Budget) => return Err(e),
            Err(e) => {
                if let Some(reason) = e.reason() {
                    // Unsupported version: answer in kind so the sender can say why.
                    let _ = send_msg(
                        ep,
                        &Msg::Refuse {
                            reason,
                            message: proto::truncate_text(&e.to_string()),
                        },
                    ).await;
                } else {
                    // A protocol violation, or a deadline: say so (unless the peer is gone).
                    tell_peer(ep, &e).await;
                }
                return Err(e);
            }
        };
        if let (Msg::Hello(h), true) = (&msg, opts.allow_delete) {
            sent_dirs.record(&h.name, h.kind == EntryKind::Dir);
        }
        let pipelined = match &msg {
            Msg::Hello(h) => (h.flags.inline || h.flags.dry_run) && stripe.is_none(),
            m => matches!(m, Msg::Data(_)),
        };
        if !pipelined {
            // What is answered otherwise is answered after what came before it.
            replies.flush(ep).await?;
        }
        let was_first = std::mem::replace(&mut first, false);
        if was_first && role.join_only && !matches!(msg, Msg::Join(_)) {
            let e = Error::refused(
                Reason::Busy,
                "it is finishing its last session: retry later",
            );
            return Err(refuse_session(ep, e).await);
        }
        match msg {
            Msg::Open(o) if was_first => {
                if let Err(e) = check_auth(opts, &nonce, o.auth.as_ref()) {
                    return Err(refuse_session(ep, e).await);
                }
                let (id, streams) = match role.streams {
                    Some(reg) => {
                        let j = reg.open(o.streams);
                        st.budget.share(j.progress.clone());
                        if j.granted > 1 {
                            let stop = Stop::default();
                            st.budget.stop_with(stop.clone());
                            j.enter();
                            st.joint = Some((j.clone(), stop));
                        }
                        sent_dirs = j.dirs.clone();
                        let granted = (j.id, j.granted);
                        joint = Some(j);
                        granted
                    }
                    None => (proto::new_session_id(), 1),
                };
                let index = 0;
                st.stream = (streams > 1).then_some(index);
                send_msg(ep, &Msg::Session(Session { id, streams, index })).await?;
            }
            Msg::Join(jn) if was_first => {
                let j = match check_auth(opts, &nonce, jn.auth.as_ref())
                    .and_then(|()| {
                        role.streams.ok_or_else(|| {
                            Error::refused(
                                Reason::AuthFailed,
                                "JOIN names no session of this receiver (it takes no streams)",
                            )
                        })
                    })
                    .and_then(|reg| reg.join(&jn.id, jn.index))
                {
                    Ok(j) => j,
                    Err(e) => return Err(refuse_session(ep, e).await),
                };
                let (id, streams, index) = (j.id, j.granted, jn.index);
                st.budget.share(j.progress.clone());
                let stop = Stop::default();
                st.budget.stop_with(stop.clone());
                j.enter();
                st.joint = Some((j.clone(), stop));
                st.stream = Some(index);
                send_msg(ep, &Msg::Session(Session { id, streams, index })).await?;
                sent_dirs = j.dirs.clone();
                joint = Some(j);
            }
            Msg::Stripe(s) if joint.is_some() && stripe.is_none() => stripe = Some(s),
            Msg::Hello(h) if h.flags.dry_run => {
                if stripe.is_some() {
                    let e = Error::Protocol(format!("STRIPE of a dry run's HELLO of {:?}", h.name));
                    send_err(ep, Reason::Protocol, &e).await;
                    return Err(e);
                }
                last = h.flags.last;
                let before = report.file_count();
                let out = &mut replies.on(ep);
                let r = answer_dry(out, opts, &mut dry_dirs, st.budget, report, &nonce, &h).await;
                report.announce_since(before, progress);
                if let Err(e) = r {
                    return Err(gathered_end(ep, &mut replies, e).await);
                }
            }
            Msg::Hello(h) if h.flags.inline && stripe.is_none() => {
                last = h.flags.last;
                let before = report.file_count();
                let r = inline.on_hello(&mut replies.on(ep), opts, st, report, &nonce, h).await;
                report.announce_since(before, progress);
                if let Err(e) = r {
                    return Err(gathered_end(ep, &mut replies, e).await);
                }
            }
            Msg::Data(d) => {
                let before = report.file_count();
                let r = inline.on_data(&mut replies.on(ep), opts, st, report, d).await;
                report.announce_since(before, progress);
                if let Err(e) = r {
                    return Err(gathered_end(ep, &mut replies, e).await);
                }
            }
            Msg::Done if !inline.is_idle() => {
                let e = Error::Protocol(format!(
                    "DONE while {} inline files answered WANT have no data",
                    inline.waiting()
                ));
                send_err(ep, Reason::Protocol, &e).await;
                return Err(e);
            }
            // Directories and symlinks may be in flight with inline files; a file through the
            // ring comes when nothing is.
            Msg::Hello(h) if !inline.is_idle() && h.kind == EntryKind::File => {
                let e = Error::Protocol(format!(
                    "HELLO of {:?} through the ring while {} inline files answered WANT have \
                     no data",
                    h.name,
                    inline.waiting()
                ));
                send_err(ep, Reason::Protocol, &e).await;
                return Err(e);
            }
            Msg::Hello(h) => {
                let last = h.flags.last;
                let before = report.file_count();
                let r = match (stripe.take(), &joint) {
                    (Some(s), Some(j)) => {
                        let offer = stripe::StripeOffer {
                            joint: j,
                            stripe: s,
                            hello: h,
                        };
                        stripe::receive_stripe(ep, opts, st, report, &nonce, offer).await
                    }
                    _ => receive_file(ep, opts, st, report, &nonce, h).await,
                };
                report.announce_since(before, progress);
                r?;
                if last {
                    return Ok(());
                }
            }
            Msg::List(dir) if inline.is_idle() && stripe.is_none() => {
                let d = &sent_dirs;
                delete::on_list(ep, opts, d, st.budget, report, progress, &dir).await?;
            }
            Msg::Delete(name) if inline.is_idle() && stripe.is_none() => {
                let d = &sent_dirs;
                delete::on_delete(ep, opts, d, st.budget, report, progress, &name).await?;
            }
            Msg::Done => return Ok(()),
            Msg::Err { reason, message } => return Err(peer_err(reason, &message)),
            other => {
                let e = Error::Protocol(format!("expected HELLO or DONE, got {other:?}"));
                send_err(ep, Reason::Protocol, &e).await;
                return Err(e);
            }
        }
    }
}

/// The next message from the sender. The answers gathered go out first when nothing has
/// arrived (the sender may be waiting for them); a BATCH's members are taken one by one.
async fn next_msg<L: Link>(
    ep: &mut L,
    st: &mut SessionState<'_, L::Ring>,
    replies: &mut Replies,
    pending: &mut VecDeque<Msg>,
) -> Result<Msg> {
    if !replies.is_empty() && !ep.has_message()? {
        replies.flush(ep).await?;
    }
    let mut next = budget_wait!(st.budget, ep, recv_ctl(ep).await);
    // Between entries, a stream of several may wait for the sender to find out that another
    // stream was lost (up to two steps after the session stopped moving) and to send its parts
    // again on this one.
    for _ in 0..2 {
        if st.joint.is_none() || !next.as_ref().is_err_and(Error::is_timeout) {
            break;
        }
        next = budget_wait!(st.budget, ep, recv_ctl(ep).await);
    }
    match awaiting("the sender's next entry", next)? {
        Msg::Batch(members) => {
            pending.extend(members);
            Ok(pending.pop_front().expect("a BATCH has members"))
        }
        m => Ok(m),
    }
}

/// An error of a pipelined entry ends the session: the answers gathered go out first (a
/// REFUSE of a failed authentication among them, which tells the sender why), then ERR for a
/// protocol violation; returns `e`.
async fn gathered_end<L: Link>(ep: &mut L, replies: &mut Replies, e: Error) -> Error {
    if let Err(e2) = replies.flush(ep).await {
        tracing::debug!("sending the gathered answers: {e2}");
    }
    protocol_end(ep, e).await
}

/// A protocol violation ends the session with ERR (budget and connection errors are told
/// elsewhere, or cannot be); returns `e`.
async fn protocol_end<L: Link>(ep: &mut L, e: Error) -> Error {
    if matches!(e, Error::Protocol(_)) {
        send_err(ep, Reason::Protocol, &e).await;
    }
    e
}

/// Refuses the session (REFUSE with the error's reason, best effort) and returns the error.
async fn refuse_session<L: Link>(ep: &mut L, e: Error) -> Error {
    let msg = Msg::Refuse {
        reason: reason_of(&e),
        message: proto::truncate_text(&detail(&e)),
    };
    if let Err(e2) = send_msg(ep, &msg).await {
        tracing::debug!("sending REFUSE: {e2}");
    }
    e
}
