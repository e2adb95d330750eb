//! The receiver. `session` serves one connection (CHALLENGE, OPEN or JOIN, then each HELLO),
//! `file` one entry over one stream, `stripe` one stripe of a file received over several
//! streams (assembled in `joint`), `answer` the checks and answers before any data, and `data`
//! the staging ring and the chunks through it. What they stand on: `sink` writes, verifies and
//! commits a file, `entry` and `policy` decide about what exists, `partial` keeps a striped
//! file's resume state, `cleanup` removes unfinished files on interrupt, and `ring_budget`
//! shares the memory of several sessions. Nothing here imports the sender (`super::send`).
//!
//! `delete` answers a sender's LIST and DELETE (`recv --allow-delete`).
//!
//! The session files, in the order each imports only those before it: `core`, `data`,
//! `answer`, `file`, `replies` (answers sent together), `inline` (small files in DATA, several
//! in flight), `stripe`, `session`. `core` is the protocol without I/O: what each
//! arrival of a part (data chunk, DIGESTS, FIN) means.

mod answer;
mod claim;
internal! { mod cleanup; }
internal! { mod core; }
mod data;
internal! { mod delete; }
internal! { mod entry; }
mod file;
mod inline;
mod joint;
internal! { mod partial; }
mod policy;
mod replies;
internal! { mod ring_budget; }
mod session;
internal! { mod sink; }
mod stripe;

pub use joint::{StreamRegistry, DEFAULT_MAX_STREAMS};
pub use session::{receive, receive_into, receive_leased, receive_streams, Role};
#[cfg(feature = "tokio")]
pub(crate) use session::receive_leased_async;
