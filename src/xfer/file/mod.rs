//! Verified file transfer over a connected [`Endpoint`](crate::xfer::endpoint::Endpoint):
//! [`send`](fn@send) and [`receive`] with their options ([`SenderOptions`],
//! [`ReceiverOptions`]) and reports ([`SessionReport`], [`FileReport`]; a failed session's in
//! its [`SessionError`]), what to send ([`source::walk`]) and how to stop it ([`Cancel`]). See
//! `docs/file-protocol.md`.
//!
//! Inside (public only with the cargo feature `internals`, for rdmaxfer's own fuzzers, tests
//! and tool, with no semver promise): the receiver (`recv`) and the sender (`send`), which
//! never import each other, over what both use: the connection as the protocol sees it (`link`;
//! `link::mem::MemLink` runs whole sessions in memory), the wire format (`proto`), names
//! (`names`), digests (`digest`), control messages (`ctl`), waits that go on while a session
//! moves (`waits`), the receiver's deadlines and budgets (`budget`),
//! the test hooks (`fault`), the options (`options`) and the reports (`report`).
//!
//! Control messages are SENDs (`proto`); file data is RDMA WRITE_WITH_IMM
//! into the receiver's staging ring, one chunk per slot.
//!
//! # Ring flow control
//! The ring has exactly as many slots as the receiver keeps receives posted for the sender
//! (the endpoint's `recv_depth`, i.e. the send credits it grants). Every WRITE_WITH_IMM and
//! every control message consumes one such receive, and the receiver re-posts it (returning the
//! credit) only after it has copied the chunk out of its slot. Chunks are written to slot
//! `k mod slots` in order, so when the sender holds a credit for chunk `k`, at most
//! `slots − 1` earlier messages are unconsumed and chunk `k − slots` has been copied out: the
//! endpoint's credits are the slot credits, and the sender never overruns the ring. (`CREDIT`
//! messages are therefore not sent in versions 1 and 2.)
//!
//! Memory is bounded by the ring on both sides: `slots × slot size` registered bytes (plus one
//! slot-sized copy buffer on the receiver), whatever the file size.

internal! { mod budget; }
#[cfg(test)]
mod core_tests;
mod ctl;
internal! { mod digest; }
mod fault;
internal! { mod link; }
#[cfg(all(test, feature = "test-hooks"))]
mod lost_tests;
internal! { mod names; }
internal! { mod options; }
internal! { mod proto; }
internal! { mod recv; }
#[cfg(all(test, feature = "test-hooks"))]
mod repair_tests;
internal! { mod report; }
internal! { mod send; }
#[cfg(test)]
mod session_tests;
mod waits;

// What a user of the library needs, at `xfer::file::*`; the modules above are internals
// (public only with the cargo feature `internals`: rdmaxfer's own fuzzers, tests and tool).
pub use budget::Budgets;
pub use digest::Algo;
pub use names::printable;
pub use options::{
    Cancel, ReceiverOptions, SenderOptions, DEFAULT_CHUNK, DEFAULT_SLOTS, MAX_CHUNK,
    MAX_RING_BYTES, MAX_SLOTS, MIN_CHUNK,
};
#[cfg(feature = "test-hooks")]
pub use options::{RecvHooks, SendHooks};
pub use recv::receive;
#[cfg(feature = "internals")]
pub use recv::{
    cleanup, partial, receive_into, receive_leased, receive_streams, ring_budget, sink, Role,
    StreamRegistry, DEFAULT_MAX_STREAMS,
};
pub use report::{
    FileReport, LostStream, Progress, SessionError, SessionReport, MAX_REPORTED_FILES,
    MAX_REPORT_TEXT, SKIPPED,
};
pub use send::{
    default_streams, filter::Filter, send, send_streams, source, DEFAULT_STREAMS_CAP,
    DEFAULT_STREAMS_PER_DEVICE, STRIPE_MIN,
};
#[cfg(feature = "internals")]
pub use send::{send_into, send_streams_into, PHASE_TARGET};
