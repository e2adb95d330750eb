//! Device tests of the C API, in one binary: the C examples against the CLI (several under
//! valgrind memcheck), and the listener and event-loop calls through the C ABI. Every test is
//! `#[ignore]`d: they need rxe0 (and the C examples built by ci/capi-examples.sh), so ci/test.sh
//! runs them with `--ignored` in the Soft-RoCE guest.

#[path = "../common/capi_ffi.rs"]
mod capi_ffi;
#[path = "../common/mod.rs"]
mod common;

mod accept_limits;
mod capi;
mod capi_poll;
mod causes;
mod transfer;
