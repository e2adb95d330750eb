//! A connected RC endpoint: PD + CQ + RC QP + a pre-posted receive ring + flow control.
//!
//! Made with RDMA CM ([`Endpoint::connect_cm`], [`Listener`]) or with ibv_rc_pingpong's
//! out-of-band TCP exchange ([`Endpoint::connect_oob`], [`OobListener`]).
//!
//! # Flow control
//! Sends never outrun the peer's posted receives, so no RNR NAK (and no RNR retry loop) can
//! happen, and `rnr_retry` is small and finite.
//! - **Credits** (CM; both ends are rdmaxfer): each side posts `recv_depth + 2` receives and
//!   grants `recv_depth` credits in the handshake. A message costs one credit. Credits come back
//!   in the immediate word of every SEND_WITH_IMM ([`wire::encode_imm`]); when half the window
//!   is owed and nothing is being sent, a zero-length credit message returns it. Credit messages
//!   take no credit: at most two are ever unread, which the two spare receives absorb.
//! - **Request/response** (OOB; the peer may be ibv_rc_pingpong, which knows no credits): one
//!   message may be outstanding, and each message taken from the peer allows one more. Messages
//!   are plain SENDs, as ibv_rc_pingpong sends them.
//!
//! A receive is re-posted (and its credit returned) when the application takes the message
//! ([`Endpoint::recv_with`]), so a peer that does not read stalls the sender (until its
//! deadline) instead of overrunning it.
//!
//! # Deadlines
//! Every step waits at most [`EndpointOptions::timeout`]: address and route resolution,
//! connecting, accepting, each TCP read and write, and each wait for a completion.
//!
//! # Per-message path
//! A message costs one post, at most one `ibv_poll_cq` per completion (a look takes up to four
//! at once and keeps the rest for the next) and no allocation; the queue is single-owner
//! ([`SoloQueue`](crate::verbs::SoloQueue): no lock), and the usual completion (one buffer,
//! nothing retired) is handled without building a full [`Completion`](crate::verbs::Completion).
//! A wait reads no clock unless it lasts: poll mode spins first, event mode keeps the CQ armed
//! between waits (as `ibv_rc_pingpong -e`) and sleeps at most twice 50 ms before the deadline
//! starts counting. The functions on that path are `#[inline(always)]`: in an emulated guest
//! each call and return costs tens of nanoseconds (a translation-block lookup), which showed in
//! every round trip.
//!
//! # Files
//! `options` (what an endpoint is made with), `conn` (the [`Endpoint`] and its accessors),
//! `setup` (what every set-up shares), `cm` and `oob` (the two set-ups and their listeners),
//! `accept` (accepting in two steps), `flow` (the credit engine and the waits) and `messaging`
//! (send, receive, the caller's own work requests). Each imports only the ones listed before it.

mod accept;
mod cm;
mod conn;
mod flow;
mod messaging;
mod oob;
mod options;
mod setup;

pub use accept::Pending;
pub use cm::Listener;
pub use conn::Endpoint;
pub use messaging::Message;
pub use oob::OobListener;
pub use options::{
    EndpointOptions, LocalInfo, PeerInfo, PeerKind, Transport, ACK_TIMEOUT, DEFAULT_PORT,
    DEFAULT_TIMEOUT, RESERVED_WR_ID, RETRY_COUNT, RNR_RETRY,
};
pub use setup::resolve_host;
