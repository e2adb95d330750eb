//! rdmaxfer: RDMA that just works, from Rust and C.
//!
//! Start with the [`guide`]: connecting, messages, one-sided RDMA, file transfer and async
//! (cargo feature `tokio`: the `aio` module).
//!
//! Layers: `sys` (generated bindings, crate-private) → [`verbs`] / [`cm`] (safe RAII wrappers;
//! with `os` and `capi`, the only modules with `unsafe`) → [`xfer`] (connections and protocols, no
//! `unsafe`) → `aio` (futures over `xfer`'s non-blocking calls), CLI, C API.
//!
//! The cargo feature `internals` makes the internal modules public (`os`, `xfer::wire`,
//! `xfer::onesided::msg`, and in `xfer::file` the wire codecs, the sender's and receiver's
//! cores, sinks and digests): it is for rdmaxfer's own fuzzers, tests and tool, and carries no
//! semver promise. Without it (a user's build) they are `pub(crate)`, and
//! `tests/public-items.txt` lists what is public.
#![deny(unsafe_code)]
#![warn(
    unsafe_op_in_unsafe_fn,
    clippy::undocumented_unsafe_blocks,
    missing_docs
)]

/// Declares internal modules: `pub` with the cargo feature `internals` (rdmaxfer's own fuzzers,
/// tests and tool; no semver promise), `pub(crate)` without, where what only those use is
/// unused. `tests/api_model` expands it as rustc does.
macro_rules! internal {
    ($($(#[$attr:meta])* mod $name:ident;)*) => {$(
        $(#[$attr])*
        #[cfg(feature = "internals")]
        pub mod $name;
        $(#[$attr])*
        #[cfg(not(feature = "internals"))]
        #[allow(dead_code, unused_imports)]
        pub(crate) mod $name;
    )*};
}

/// Builder-style setters of an options struct, one per field listed with its type: `fn field(mut
/// self, value) -> Self` (an options struct is `#[non_exhaustive]`: built from its `Default` or
/// `new` and these). `tests/api_model` expands it as rustc does.
macro_rules! setters {
    ($($field:ident: $ty:ty),* $(,)?) => {$(
        #[doc = concat!("Sets `", stringify!($field), "` (see the field).")]
        #[must_use]
        pub fn $field(mut self, $field: $ty) -> Self {
            self.$field = $field;
            self
        }
    )*};
}

// The C API: reachable only through the C ABI (the `#[no_mangle]` exports of librdmaxfer.so,
// built by the `librdmaxfer` package with this feature; a Rust dependent carries none).
#[cfg(feature = "capi")]
mod capi;
// cbindgen reads the whole crate: the other modules' items are not part of the C header.
/// cbindgen:ignore
#[cfg(feature = "tokio")]
pub mod aio;
/// cbindgen:ignore
pub mod cm;
/// cbindgen:ignore
pub mod error;
/// cbindgen:ignore
pub mod guide;
// (cbindgen does not read what a macro declares.)
internal! { mod os; }
/// cbindgen:ignore
pub(crate) mod sys;
/// cbindgen:ignore
pub mod verbs;
/// cbindgen:ignore
pub mod xfer;

pub use error::{Error, Result};
