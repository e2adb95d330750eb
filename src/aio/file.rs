//! Verified file transfer from async code: the sessions of [`file`](crate::xfer::file) driven
//! on the caller's task over an [`AsyncEndpoint`] (its waits yield to the runtime). Chunk reads
//! and writes run on the session's worker threads, as in a blocking session; no thread of
//! tokio's blocking pool is used.
//!
//! # Cancel safety
//! Dropping one of these futures ends the session where it stands: the endpoint is dropped
//! (the peer sees the connection end), a file being received is not committed (its temporary
//! file is removed, or kept for a resume with [`ReceiverOptions::resume`]), and the worker
//! threads finish the chunk they hold and end. What was committed before stays.

use std::net::SocketAddr;

use crate::error::Result;
use crate::xfer::endpoint::EndpointOptions;
use crate::xfer::file::send::Connect;
use crate::xfer::file::source::SourceEntry;
use crate::xfer::file::{
    self, Progress, ReceiverOptions, SenderOptions, SessionError, SessionReport,
};

use super::AsyncEndpoint;

/// What a file transfer of an [`AsyncEndpoint`] gives: the endpoint back with the session's
/// report, or the error with the report (as the blocking calls).
pub type FilesResult = std::result::Result<(AsyncEndpoint, SessionReport), SessionError>;

impl AsyncEndpoint {
    /// Sends `entries` (from [`walk`](crate::xfer::file::source::walk)) as
    /// [`file::send`](fn@file::send) does, to a peer running
    /// [`receive_files`](Self::receive_files) (or `rdmaxfer recv`), and gives the endpoint back
    /// with the session's report. Connect with the options of
    /// [`SenderOptions::endpoint_options`].
    ///
    /// Runs on this task; each step keeps its deadline. Dropping this future ends the session
    /// (see [cancel safety](crate::aio#cancel-safety)): the receiver commits nothing it has
    /// not verified whole.
    pub async fn send_files(self, entries: Vec<SourceEntry>, opts: SenderOptions) -> FilesResult {
        self.send_files_with(entries, opts, |_| {}).await
    }

    /// [`send_files`](Self::send_files), telling `progress` of each file's start, its bytes as
    /// they are written and its verdict, as [`file::send`](fn@file::send) does. `progress`
    /// runs on this task: keep it short. Dropping this future ends the session as `send_files`
    /// says.
    pub async fn send_files_with(
        mut self,
        entries: Vec<SourceEntry>,
        opts: SenderOptions,
        mut progress: impl FnMut(Progress<'_>) + Send,
    ) -> FilesResult {
        let mut report = SessionReport::default();
        let r = file::send::send_into_async(&mut self, &entries, &opts, &mut report, &mut progress)
            .await;
        self.ended(r, report)
    }

    /// [`send_files_with`](Self::send_files_with) over up to [`SenderOptions::streams`]
    /// streams, as [`file::send_streams`](fn@file::send_streams) does: this endpoint opens the
    /// session, and each further stream the receiver grants is connected to `to` (over
    /// rdma_cm) with `ep_opts` (those this endpoint was connected with) and joins it. Large
    /// files are striped over the streams, and a stream whose connection is lost hands its
    /// work to the others (the report's `lost` names it). The receiver is one that takes
    /// sessions of several streams (`rdmaxfer recv`). Every stream runs on this task.
    /// Dropping this future ends the session as [`send_files`](Self::send_files) says, and
    /// drops every stream's connection.
    pub async fn send_files_streams(
        mut self,
        to: SocketAddr,
        ep_opts: &EndpointOptions,
        entries: Vec<SourceEntry>,
        opts: SenderOptions,
        mut progress: impl FnMut(Progress<'_>) + Send,
    ) -> FilesResult {
        let mut report = SessionReport::default();
        let dial = Dial { to, opts: ep_opts };
        let r = file::send::send_streams_into_async(
            &mut self,
            &dial,
            &entries,
            &opts,
            &mut report,
            &mut progress,
        )
        .await;
        self.ended(r, report)
    }

    /// Receives what one sender sends, as [`file::receive`] does, and gives the endpoint
    /// back with the session's report. Accept with the options of
    /// [`ReceiverOptions::endpoint_options`]. Runs on this task as
    /// [`send_files`](Self::send_files) does; dropping this future ends the session (see
    /// [cancel safety](crate::aio#cancel-safety)): nothing that was not verified whole is
    /// committed.
    pub async fn receive_files(self, opts: ReceiverOptions) -> FilesResult {
        self.receive_files_with(opts, |_| {}).await
    }

    /// [`receive_files`](Self::receive_files), telling `progress` of each file's verdict as it
    /// is recorded ([`Progress::FileDone`]). `progress` runs on this task, as for
    /// [`send_files_with`](Self::send_files_with).
    pub async fn receive_files_with(
        mut self,
        opts: ReceiverOptions,
        mut progress: impl FnMut(Progress<'_>) + Send,
    ) -> FilesResult {
        let mut report = SessionReport::default();
        let mut lease = file::recv::ring_budget::RingLease::unlimited();
        let r = file::recv::receive_leased_async(
            &mut self,
            &opts,
            &mut lease,
            &mut report,
            &mut progress,
        )
        .await;
        self.ended(r, report)
    }

    /// The endpoint with the session's report, or the error with it.
    fn ended(self, r: Result<()>, report: SessionReport) -> FilesResult {
        Ok((self, report.ended(r)?))
    }
}

/// Connects the further streams of a session (over rdma_cm).
struct Dial<'a> {
    to: SocketAddr,
    opts: &'a EndpointOptions,
}

impl Connect<AsyncEndpoint> for Dial<'_> {
    async fn connect(&self, _: u16) -> Result<AsyncEndpoint> {
        AsyncEndpoint::connect(self.to, self.opts).await
    }
}
