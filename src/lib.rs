//! rdmaxfer: RDMA that just works, from Rust and C.
//!
//! Start with the [`guide`]: connecting, messages, one-sided RDMA, file transfer and async
//! (cargo feature `tokio`: the `aio` module).
//!
//! Layers: `sys` (generated bindings, crate-private) → [`verbs`] / [`cm`] (safe RAII wrappers;
//! with `os` and `capi`, the only modules with `unsafe`) → [`xfer`] (connections and protocols, no
//! `unsafe`) → `aio` (futures over `xfer`'s non-blocking calls), CLI, C API.
#![deny(unsafe_code)]
#![warn(
    unsafe_op_in_unsafe_fn,
    clippy::undocumented_unsafe_blocks,
    missing_docs
)]

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
/// cbindgen:ignore
pub mod os;
/// cbindgen:ignore
pub(crate) mod sys;
/// cbindgen:ignore
pub mod verbs;
/// cbindgen:ignore
pub mod xfer;

pub use error::{Error, Result};
