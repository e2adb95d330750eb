//! Device tests of connections, in one binary: the `Endpoint` library API (RDMA CM and OOB,
//! credits, one-sided operations through an endpoint, disconnects and deadlines), its
//! non-blocking calls, the async API (module `aio`, with `--features tokio`), and `rdmaxfer
//! pingpong` / `bench` (parameter exchange, interop with ibv_rc_pingpong, bad input). Every test
//! is `#[ignore]`d: they need rxe0, so ci/test.sh runs them with `--ignored` in the Soft-RoCE
//! guest.

#[path = "../common/mod.rs"]
mod common;

#[cfg(feature = "tokio")]
mod aio;
#[cfg(feature = "tokio")]
mod aio_files;
mod endpoint;
mod nonblock;
mod params;
mod pingpong;
