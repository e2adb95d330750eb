//! rdmaxfer: RDMA that just works, from Rust and C.
//!
//! Layers: `sys` (generated bindings, crate-private) → [`verbs`] / `cm` (safe RAII wrappers, the
//! only modules with `unsafe` besides `capi`) → `xfer` (connections and protocols) → CLI, C API.
#![deny(unsafe_code)]
#![warn(
    unsafe_op_in_unsafe_fn,
    clippy::undocumented_unsafe_blocks,
    missing_docs
)]

pub mod capi;
pub mod cm;
pub mod error;
pub mod os;
pub(crate) mod sys;
pub mod verbs;
pub mod xfer;

pub use error::{Error, Result};
