//! The sender. Each file in order: `session` runs one stream's exchange of entries, `file` one
//! file's (or stripe's) HELLO, answer, data and verdict, `data` the chunks and digests, `part`
//! says whether a HELLO covers a whole file or one stripe, `streams` spreads a tree and stripes
//! over several streams, and `source` walks and reads what is sent. Nothing here imports the
//! receiver (`super::recv`).
//!
//! The files, in the order each imports only those before it: `filter` (`--exclude`,
//! `--include`), `source`, `core`, `data`, `part`, `file`, `small` (reading a small file whole), `pipe` (directories, symlinks and
//! small files in flight), `delete` (`--delete`: what the receiver has and the sender does
//! not), `session`, `streams`. `core` is the
//! protocol without I/O: what the receiver's answers mean and where each chunk goes.

internal! { mod core; }
mod data;
internal! { mod delete; }
mod file;
internal! { mod filter; }
mod part;
mod pipe;
mod queue;
mod session;
mod small;
pub mod source;
mod streams;

#[cfg(feature = "internals")]
pub use data::PHASE_TARGET;
pub use session::{send, send_into};
#[cfg(any(test, feature = "tokio"))]
pub(crate) use session::send_into_async;
#[cfg(any(test, feature = "tokio"))]
pub(crate) use streams::{send_streams_into_async, Connect};
pub use streams::{
    default_streams, send_streams, send_streams_into, DEFAULT_STREAMS_CAP, DEFAULT_STREAMS_PER_DEVICE, STRIPE_MIN,
};
