//! A guide to the crate: connecting, messages, one-sided RDMA, file transfer and async.
//!
//! Every example needs an RDMA device (for a test machine, Soft-RoCE: `modprobe rdma_rxe &&
//! rdma link add rxe0 type rxe netdev eth0`) and enough locked memory (`ulimit -l`), so they
//! are compiled but not run by `cargo test`. Complete programs are in `examples/`.
//!
//! # Connecting
//! An [`Endpoint`](crate::xfer::endpoint::Endpoint) is one reliable connection (RC queue pair)
//! with its own buffers and flow control. The server binds a
//! [`Listener`](crate::xfer::endpoint::Listener) (RDMA CM, the address of an RDMA device's
//! netdev) and accepts; the client connects. Every step waits at most the options' `timeout`.
//!
//! ```no_run
//! use std::net::SocketAddr;
//! use rdmaxfer::xfer::endpoint::{Endpoint, EndpointOptions, Listener};
//!
//! fn server(addr: SocketAddr) -> rdmaxfer::Result<Endpoint> {
//!     let mut listener = Listener::bind(addr, &EndpointOptions::default())?;
//!     listener.accept(None) // None: wait for a client without limit
//! }
//!
//! fn client(addr: SocketAddr) -> rdmaxfer::Result<Endpoint> {
//!     Endpoint::connect_cm(addr, &EndpointOptions::default())
//! }
//! # fn main() {}
//! ```
//!
//! # Messages
//! [`send`](crate::xfer::endpoint::Endpoint::send) copies a message into a registered buffer
//! and posts it; it waits only when the peer has no receive free for it (credit flow control:
//! no receiver-not-ready retries can happen).
//! [`recv_with`](crate::xfer::endpoint::Endpoint::recv_with) lends the next message without a
//! copy; [`close`](crate::xfer::endpoint::Endpoint::close) waits for what was sent, then
//! disconnects.
//!
//! ```no_run
//! # use rdmaxfer::xfer::endpoint::Endpoint;
//! fn ping(ep: &mut Endpoint) -> rdmaxfer::Result<()> {
//!     ep.send(b"ping")?;
//!     let len = ep.recv_with(|m| m.data.len())?;
//!     println!("got {len} bytes back");
//!     Ok(())
//! }
//! # fn main() {}
//! ```
//!
//! # One-sided RDMA
//! One side exposes memory ([`ExposedRegion`](crate::verbs::ExposedRegion)) and sends its
//! [`RemoteRegion`](crate::verbs::RemoteRegion) descriptor; the other READs and WRITEs it
//! without involving the peer's CPU. The exposing side never gets a slice of memory the peer
//! may write: it copies out ([`ExposedRegion::to_vec`](crate::verbs::ExposedRegion::to_vec)),
//! best after revoking the peer's access
//! ([`ExposedRegion::revoke`](crate::verbs::ExposedRegion::revoke)).
//!
//! ```no_run
//! use rdmaxfer::verbs::{ExposedRegion, RemoteAccess, RemoteRegion};
//! use rdmaxfer::xfer::endpoint::Endpoint;
//! use rdmaxfer::xfer::rdma_rw;
//!
//! fn expose(ep: &mut Endpoint) -> rdmaxfer::Result<Vec<u8>> {
//!     let region = ExposedRegion::new(ep.pd(), 4096, RemoteAccess::ReadWrite)?;
//!     ep.send(&region.descriptor().encode())?;
//!     ep.recv()?; // the peer says it is done (after its WRITEs, in RC order)
//!     region.revoke()
//! }
//!
//! fn use_it(ep: &mut Endpoint) -> rdmaxfer::Result<()> {
//!     let remote = RemoteRegion::decode(&ep.recv()?)?;
//!     let t = ep.timeout();
//!     rdma_rw::write(ep, &remote, 0, b"hello", t)?;
//!     assert_eq!(rdma_rw::read(ep, &remote, 0, 5, t)?, b"hello");
//!     ep.send(b"done")
//! }
//! # fn main() {}
//! ```
//!
//! Work requests of your own (buffers you registered, several in flight) go through
//! [`Endpoint::post`](crate::xfer::endpoint::Endpoint::post) and
//! [`poll_user`](crate::xfer::endpoint::Endpoint::poll_user): posting **moves** the buffer into
//! the queue, and its completion hands it back, so it cannot be touched while the device may.
//!
//! # File transfer
//! The verified file protocol of `rdmaxfer send` / `rdmaxfer recv` (BLAKE3-checked, resumable):
//! make each endpoint with the options the transfer asks for.
//!
//! ```no_run
//! use std::net::SocketAddr;
//! use std::path::PathBuf;
//! use rdmaxfer::xfer::endpoint::{Endpoint, EndpointOptions, Listener};
//! use rdmaxfer::xfer::file::{self, source, ReceiverOptions, SenderOptions, SessionReport};
//!
//! fn receive(addr: SocketAddr) -> rdmaxfer::Result<SessionReport> {
//!     let opts = ReceiverOptions::new("/tmp/incoming").resume(true);
//!     let mut l = Listener::bind(addr, &opts.endpoint_options(&EndpointOptions::default()))?;
//!     let mut ep = l.accept(None)?;
//!     Ok(file::receive(&mut ep, &opts)?)
//! }
//!
//! fn send(addr: SocketAddr, path: PathBuf) -> rdmaxfer::Result<SessionReport> {
//!     let opts = SenderOptions::default().resume(true).streams(1);
//!     let ep_opts = opts.endpoint_options(&EndpointOptions::default());
//!     let mut ep = Endpoint::connect_cm(addr, &ep_opts)?;
//!     // On failure, the error carries the report too (`SessionError::report`).
//!     let report = file::send(&mut ep, &source::walk(&[path])?, &opts, &mut |_| {})?;
//!     ep.close()?;
//!     Ok(report)
//! }
//! # fn main() {}
//! ```
//!
//! # Event loops and async
//! Without blocking a thread: the endpoint's descriptors and `try_*` calls
//! ([non-blocking use](crate::xfer::endpoint#non-blocking-use)) fit any `poll(2)` loop. With the
//! cargo feature `tokio`, the `aio` module wraps them in futures: one current-thread runtime
//! can serve many connections, one task each (see `examples/async_server.rs`). Dropping a
//! future is always sound: a buffer lent to an RDMA operation is owned by the queue until its
//! completion, never by the future.
//!
//! ```no_run
//! # #[cfg(feature = "tokio")]
//! # mod with_tokio {
//! use std::net::SocketAddr;
//! use rdmaxfer::aio::{AsyncEndpoint, AsyncListener};
//! use rdmaxfer::xfer::endpoint::EndpointOptions;
//!
//! async fn echo_server(addr: SocketAddr) -> rdmaxfer::Result<()> {
//!     let mut listener = AsyncListener::bind(addr, &EndpointOptions::default())?;
//!     loop {
//!         let pending = listener.take().await?;
//!         tokio::spawn(async move {
//!             let Ok(mut ep) = pending.finish().await else { return };
//!             // Until the peer disconnects (recv fails).
//!             while let Ok(msg) = ep.recv().await {
//!                 if ep.send(&msg).await.is_err() {
//!                     break;
//!                 }
//!             }
//!         });
//!     }
//! }
//!
//! async fn client(addr: SocketAddr) -> rdmaxfer::Result<()> {
//!     let mut ep = AsyncEndpoint::connect(addr, &EndpointOptions::default()).await?;
//!     ep.send(b"ping").await?;
//!     let reply = ep.recv().await?;
//!     assert_eq!(reply, b"ping");
//!     ep.close().await
//! }
//! # }
//! # fn main() {}
//! ```
