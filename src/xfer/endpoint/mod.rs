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
//!   in the immediate word of every SEND_WITH_IMM (`wire::encode_imm`); when half our window
//!   is owed and nothing is being sent, a zero-length credit message returns it. Credit messages
//!   take no credit: at most two are ever unread, which the two spare receives absorb. Neither
//!   side may wait for a credit with the peer's messages unread (the peer may be waiting for
//!   the credits they hold): a protocol where both sides send at will takes what arrived while
//!   it waits to send.
//! - **Request/response** (OOB; the peer may be ibv_rc_pingpong, which knows no credits): one
//!   message may be outstanding, and each message taken from the peer allows one more. Messages
//!   are plain SENDs, as ibv_rc_pingpong sends them.
//!
//! A receive is re-posted (and its credit returned) when the application takes the message
//! ([`Endpoint::recv_with`]), so a peer that does not read stalls the sender (until its
//! deadline) instead of overrunning it. With credits, taken receives go back in batches (one
//! list post for up to 16, fewer than half the window: see `credit_flow`), whose credits ride on
//! the next message.
//!
//! # Deadlines
//! Every step waits at most [`EndpointOptions::timeout`]: address and route resolution,
//! connecting, accepting, each TCP read and write, and each wait for a completion.
//!
//! # Per-message path
//! A message costs one post, a share of a batched receive post, at most one `ibv_poll_cq` per
//! completion (a look takes up to four at once and keeps the rest for the next) and no
//! allocation; the queue is single-owner ([`SoloQueue`](crate::verbs::SoloQueue): no lock),
//! receives go to a ring of slots the queue owns (re-posted by slot: no table entry, no buffer
//! moved; a completed slot keeps what came, and only its number moves), and the usual
//! completion (one buffer, nothing retired) is handled without building a full
//! [`Completion`](crate::verbs::Completion). A wait reads no clock unless it lasts: poll mode
//! spins first; event mode keeps the CQ armed between waits (as `ibv_rc_pingpong -e`), sleeps
//! without looking first when a look since the last arm found the CQ empty, sleeps on the CM
//! channel too (a disconnect wakes it), and times its first sleep by the kernel's account
//! (`ppoll(2)` writes back the time left), so the deadline stays honest without a clock read;
//! the clock runs from a second sleep on. The functions on that path are `#[inline(always)]`: in an emulated guest
//! each call and return costs tens of nanoseconds (a translation-block lookup), which showed in
//! every round trip.
//!
//! # Non-blocking use
//! For event loops (`poll(2)`, epoll, or tokio through the `aio` module of feature `tokio`):
//! descriptors to wait on, and `try_*` calls that never block. Each does its whole step or
//! nothing, and then fails with [`Error::WouldBlock`](crate::Error::WouldBlock) (the object
//! stays usable): [`Endpoint::try_send`], [`Endpoint::try_recv_with`], [`Endpoint::try_flush`],
//! [`Endpoint::try_post`], [`Endpoint::try_poll_user`], [`Listener::try_take`], then
//! [`Pending::start_accept`] and [`Accepting::try_finish`]; [`Connecting`] to connect.
//!
//! ## Descriptors
//! - [`Endpoint::completion_fd`]: the completion channel; needs an endpoint made with
//!   [`WaitMode::Event`](crate::verbs::WaitMode::Event) (poll mode has no channel).
//! - [`Endpoint::cm_fd`]: the connection's RDMA CM event channel (a peer's disconnect); CM
//!   endpoints only.
//! - [`Listener::fd`]: the listener's CM event channel (connection requests).
//! - [`Connecting::fd`], [`Accepting::fd`]: the channel of a connection being set up (or,
//!   for an OOB accept, its TCP socket: readable, or writable while a write waits).
//!
//! All stay open as long as their object. They are readable (`POLLIN`) when something may
//! have happened; a `try_*` call then finds out what. Each is readiness-only: an epoll
//! instance watching the channel (made on the first call), never the device's own descriptor
//! (`/dev/infiniband/rdma_cm`, whose `write(2)` takes commands with raw pointers): wait on it,
//! register it with a reactor, but reading or writing it does nothing to the connection.
//!
//! ## Re-arming the completion channel
//! The completion channel raises one event per [`Endpoint::arm`] (`ibv_req_notify_cq(3)`), and
//! only for a completion that arrives after it. So, for an endpoint:
//! 1. call the `try_*` you need until it says would-block;
//! 2. [`arm`](Endpoint::arm) (reads and acknowledges the events already on the channel, then
//!    re-arms);
//! 3. call the `try_*` once more (a completion may have landed before the arm);
//! 4. wait until [`completion_fd`](Endpoint::completion_fd) or [`cm_fd`](Endpoint::cm_fd) is
//!    readable, and go back to 1.
//!
//! The CM channels need no arming: an event stays readable until a `try_*` call takes it.
//!
//! ## Ownership
//! Nothing here changes who owns what: a posted buffer stays in the queue until its completion
//! (or the queue pair's flush when the endpoint is dropped), however the caller waits.
//!
//! # Files
//! `options` (what an endpoint is made with), `conn` (the [`Endpoint`] and its accessors),
//! `setup` (what every set-up shares), `wake` (a listener's shutdown from another thread),
//! `cm` and `oob` (the two set-ups and their listeners),
//! `accept` (accepting in two steps), `flow` (the credit engine and the waits) and `messaging`
//! (send, receive, the caller's own work requests), `batch` (those as a post list), `bulk` (messages taken in bulk), then `nonblock` (descriptors and `try_*`
//! calls for event loops). Each imports only the ones listed before it.

mod accept;
mod batch;
mod bulk;
mod cm;
mod conn;
mod flow;
mod messaging;
mod nonblock;
mod oob;
mod options;
mod rail;
mod setup;
mod wake;

pub use accept::Pending;
pub use bulk::RecvScratch;
pub use cm::{Dial, Listener};
pub use conn::Endpoint;
pub use messaging::Message;
pub use nonblock::{Accepting, Connecting};
pub use oob::OobListener;
pub use options::{
    EndpointOptions, LocalInfo, PeerInfo, PeerKind, Transport, ACK_TIMEOUT, DEFAULT_PORT,
    DEFAULT_TIMEOUT, RESERVED_WR_ID, RETRY_COUNT, RNR_RETRY,
};
pub use rail::{check_rail, rail_cannot_reach};
#[cfg(feature = "tokio")]
pub(crate) use setup::first_ipv4;
pub use setup::resolve_host;
pub use wake::ShutdownHandle;
