//! Verified file transfer over a connected [`Endpoint`](crate::xfer::endpoint::Endpoint), or
//! any other [`link::Link`]: the receiver ([`recv`](mod@recv)) and the sender
//! ([`send`](mod@send)), which never import each other, over what both use: the connection as
//! the protocol sees it ([`link`]; [`link::mem::MemLink`] runs whole sessions in memory), the
//! wire format ([`proto`]), names ([`names`]), digests ([`digest`]), control messages (`ctl`),
//! deadlines and budgets ([`budget`]), the test hooks (`fault`), the options ([`options`]) and
//! the reports ([`report`]). See `docs/file-protocol.md`.
//!
//! Control messages are SENDs ([`proto`]); file data is RDMA WRITE_WITH_IMM
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

pub mod budget;
#[cfg(test)]
mod core_tests;
mod ctl;
pub mod digest;
mod fault;
pub mod link;
#[cfg(all(test, feature = "test-hooks"))]
mod lost_tests;
pub mod names;
pub mod options;
pub mod proto;
pub mod recv;
#[cfg(all(test, feature = "test-hooks"))]
mod repair_tests;
pub mod report;
pub mod send;
#[cfg(test)]
mod session_tests;

pub use options::{
    Cancel, ReceiverOptions, SenderOptions, DEFAULT_CHUNK, DEFAULT_SLOTS, MAX_CHUNK,
    MAX_RING_BYTES, MAX_SLOTS, MIN_CHUNK,
};
#[cfg(feature = "test-hooks")]
pub use options::{RecvHooks, SendHooks};
pub use recv::{
    cleanup, partial, receive, receive_leased, receive_streams, ring_budget, sink, Role,
    StreamRegistry, DEFAULT_MAX_STREAMS,
};
pub use report::{
    FileReport, Progress, SessionReport, MAX_REPORTED_FILES, MAX_REPORT_TEXT, SKIPPED,
};
pub use send::{
    default_streams, send, send_streams, source, DEFAULT_STREAMS_CAP, DEFAULT_STREAMS_PER_DEVICE,
    PHASE_TARGET, STRIPE_MIN,
};
