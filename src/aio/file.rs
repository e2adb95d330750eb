//! Verified file transfer from async code: the blocking session of
//! [`file`](crate::xfer::file) on tokio's blocking pool, stopped (its options' `cancel`
//! raised) when its future is dropped.

use std::net::SocketAddr;

use crate::error::Error;
use crate::xfer::endpoint::{Endpoint, EndpointOptions};
use crate::xfer::file::source::SourceEntry;
use crate::xfer::file::{
    self, Cancel, Progress, ReceiverOptions, SenderOptions, SessionError, SessionReport,
};

use super::AsyncEndpoint;

/// What a file transfer of an [`AsyncEndpoint`] gives: the endpoint back with the session's
/// report, or the error with the report (as the blocking calls).
pub type FilesResult = std::result::Result<(AsyncEndpoint, SessionReport), SessionError>;

impl AsyncEndpoint {
    /// Sends `entries` (from [`walk`](crate::xfer::file::source::walk)) as
    /// [`file::send`](fn@file::send) does, to a peer running [`receive_files`](Self::receive_files) (or
    /// `rdmaxfer recv`), and gives the endpoint back with the session's report. Connect with
    /// the options of [`SenderOptions::endpoint_options`].
    ///
    /// The session runs on tokio's blocking pool (its steps keep their deadlines). Dropping
    /// this future stops it as [`SenderOptions::cancel`] does: at its next entry or chunk the
    /// sender tells the receiver, which commits nothing it has not verified whole; the
    /// endpoint is dropped when the session has ended.
    pub async fn send_files(self, entries: Vec<SourceEntry>, opts: SenderOptions) -> FilesResult {
        self.send_files_with(entries, opts, |_| {}).await
    }

    /// [`send_files`](Self::send_files), telling `progress` of each file's start, its bytes as
    /// they are written and its verdict, as [`file::send`](fn@file::send) does. `progress`
    /// runs on the session's thread: keep it short (hand what it hears to a channel to reach a
    /// task). Dropping this future stops the session as `send_files` says.
    pub async fn send_files_with(
        self,
        entries: Vec<SourceEntry>,
        opts: SenderOptions,
        mut progress: impl FnMut(Progress<'_>) + Send + 'static,
    ) -> FilesResult {
        let cancel = opts.cancel.clone();
        self.on_blocking_pool(cancel, move |ep, report| {
            file::send::send_into(ep, &entries, &opts, report, &mut progress)
        })
        .await
    }

    /// [`send_files_with`](Self::send_files_with) over up to [`SenderOptions::streams`]
    /// streams, as [`file::send_streams`](fn@file::send_streams) does: this endpoint opens the
    /// session, and each further stream the receiver grants is connected to `to` (over
    /// rdma_cm) with `ep_opts` (those this endpoint was connected with) and joins it. Large
    /// files are striped over the streams, and a stream whose connection is lost hands its
    /// work to the others (the report's `lost` names it). The receiver is one that takes
    /// sessions of several streams (`rdmaxfer recv`). Dropping this future stops the session as
    /// [`send_files`](Self::send_files) says; the further streams' connections are closed
    /// with it.
    pub async fn send_files_streams(
        self,
        to: SocketAddr,
        ep_opts: &EndpointOptions,
        entries: Vec<SourceEntry>,
        opts: SenderOptions,
        mut progress: impl FnMut(Progress<'_>) + Send + 'static,
    ) -> FilesResult {
        let ep_opts = ep_opts.clone();
        let cancel = opts.cancel.clone();
        self.on_blocking_pool(cancel, move |ep, report| {
            let connect = |_: u16| Endpoint::connect_cm(to, &ep_opts);
            file::send::send_streams_into(ep, &connect, &entries, &opts, report, &mut progress)
        })
        .await
    }

    /// Receives what one sender sends, as [`file::receive`] does, and gives the endpoint
    /// back with the session's report. Accept with the options of
    /// [`ReceiverOptions::endpoint_options`]. Runs as [`send_files`](Self::send_files) does;
    /// dropping this future stops the session as [`ReceiverOptions::cancel`] does (within
    /// 250 ms): nothing that was not verified whole is committed.
    pub async fn receive_files(self, opts: ReceiverOptions) -> FilesResult {
        self.receive_files_with(opts, |_| {}).await
    }

    /// [`receive_files`](Self::receive_files), telling `progress` of each file's verdict as it
    /// is recorded ([`Progress::FileDone`]). `progress` runs on the session's thread, as for
    /// [`send_files_with`](Self::send_files_with).
    pub async fn receive_files_with(
        self,
        opts: ReceiverOptions,
        mut progress: impl FnMut(Progress<'_>) + Send + 'static,
    ) -> FilesResult {
        let cancel = opts.cancel.clone();
        self.on_blocking_pool(cancel, move |ep, report| {
            let mut lease = file::recv::ring_budget::RingLease::unlimited();
            file::recv::receive_leased(ep, &opts, &mut lease, report, &mut progress)
        })
        .await
    }

    /// Runs the session `f` on tokio's blocking pool; dropping this future raises `cancel`.
    async fn on_blocking_pool(
        self,
        cancel: Cancel,
        f: impl FnOnce(&mut Endpoint, &mut SessionReport) -> crate::Result<()> + Send + 'static,
    ) -> FilesResult {
        let stop = CancelOnDrop(Some(cancel));
        let mut ep = self.into_inner();
        let joined = tokio::task::spawn_blocking(move || {
            let mut report = SessionReport::default();
            let r = f(&mut ep, &mut report);
            (ep, r, report)
        })
        .await;
        stop.disarm();
        let (ep, r, report) = joined.map_err(|e| SessionError {
            error: Error::Connection(format!("the file transfer task failed: {e}")),
            report: Box::default(),
        })?;
        let report = report.ended(r)?;
        match AsyncEndpoint::new(ep) {
            Ok(ep) => Ok((ep, report)),
            Err(error) => Err(SessionError {
                error,
                report: Box::new(report),
            }),
        }
    }
}

/// Raises a transfer's cancel flag when dropped, unless disarmed (the transfer ended).
struct CancelOnDrop(Option<Cancel>);

impl CancelOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(c) = &self.0 {
            c.cancel();
        }
    }
}
