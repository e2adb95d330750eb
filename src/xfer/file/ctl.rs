//! Control messages over an [`Endpoint`], shared by both sides: send, receive (decoding the
//! version first), and the errors a peer's REFUSE or ERR becomes.

use super::names;
use super::proto::{self, Msg, Reason};
use crate::error::{Error, Result};
use crate::xfer::file::link::Link;

/// The reason code an error travels with (REFUSE, ERR, ACK, reports).
pub(crate) fn reason_of(e: &Error) -> Reason {
    e.reason().unwrap_or(match e {
        Error::Protocol(_) => Reason::Protocol,
        _ => Reason::Internal,
    })
}

/// Whether `e` means the connection (its queue pair, its rail, or the peer's end of it) is
/// gone, so that another stream of the same session may take over its work: a disconnect, a
/// failed work request, a failed post, or no progress for a step deadline. Whatever the peer
/// said (ERR, REFUSE), a protocol violation, a local file error and a cancel are not.
pub(crate) fn is_lost(e: &Error) -> bool {
    matches!(
        e,
        Error::Connection(_)
            | Error::Completion { .. }
            | Error::Verb { .. }
            | Error::InvalidState { .. }
            | Error::Timeout { .. }
            | Error::Stalled { .. }
    )
}

/// The text of an error without its reason (REFUSE and reports carry the reason apart): one
/// clause per cause.
pub(crate) fn detail(e: &Error) -> String {
    match e {
        Error::Refused { message, .. } => message.clone(),
        e => e.to_string(),
    }
}

/// Sends one control message.
pub(crate) async fn send_msg<L: Link>(ep: &mut L, msg: &Msg) -> Result<()> {
    ep.send(&proto::encode(msg)).await
}

/// Best effort: tell the peer why the session ends.
pub(crate) async fn send_err<L: Link>(ep: &mut L, reason: Reason, e: &Error) {
    let msg = Msg::Err {
        reason,
        message: proto::truncate_text(&e.to_string()),
    };
    if let Err(e2) = send_msg(ep, &msg).await {
        tracing::debug!("sending ERR: {e2}");
    }
}

/// Decodes a control message; an unsupported version is [`Error::Version`] (checked before
/// anything else of the message).
pub(crate) fn decode_ctl(data: &[u8]) -> Result<Msg> {
    let h = proto::header(data)?;
    if h.version != proto::VERSION {
        return Err(Error::Version {
            what: "file protocol",
            ours: proto::VERSION,
            theirs: h.version,
        });
    }
    proto::decode(data)
}

/// Waits for the next control message (a data chunk here is a protocol error).
pub(crate) async fn recv_ctl<L: Link>(ep: &mut L) -> Result<Msg> {
    // Decoded where it lies: the receive buffer goes back to the queue after.
    ep.recv_with(|m| match m.rdma_write_len {
        Some(_) => Err(Error::Protocol(
            "a data chunk arrived where a control message was expected".into(),
        )),
        None => decode_ctl(m.data),
    })
    .await?
}

/// `r`, a wait's result, with a timeout naming `what` was awaited (the protocol's stage, where
/// the link's own name is generic, e.g. "a message from the peer").
pub(crate) fn awaiting<T>(what: &'static str, r: Result<T>) -> Result<T> {
    r.map_err(|e| match e {
        Error::Timeout { after, .. } => Error::Timeout { what, after },
        e => e,
    })
}

/// A session's end: a timeout becomes [`Error::Stalled`], naming the stream and the peer.
pub(crate) fn stalled<L: Link>(e: Error, stream: u16, ep: &L) -> Error {
    match e {
        Error::Timeout { what, after } => Error::Stalled {
            what,
            after,
            stream,
            peer: ep.peer_name(),
        },
        e => e,
    }
}

/// How [`peer_err`] begins its message.
pub(crate) const PEER_REPORTS: &str = "the peer reports: ";

/// The peer's REFUSE/ERR as an error; its text is made printable here, where it enters.
pub(crate) fn peer_err(reason: Reason, message: &str) -> Error {
    // The reason travels as a code: a label at the front of the text would name it twice.
    let message = names::printable(reason.strip_label(message));
    Error::refused(reason, format!("{PEER_REPORTS}{message}"))
}
