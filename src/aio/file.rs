//! Verified file transfer from async code: the blocking session of
//! [`file`](crate::xfer::file) on tokio's blocking pool, stopped (its options' `cancel`
//! raised) when its future is dropped.

use crate::error::Error;
use crate::xfer::endpoint::Endpoint;
use crate::xfer::file::source::SourceEntry;
use crate::xfer::file::{
    self, Cancel, ReceiverOptions, SenderOptions, SessionError, SessionReport,
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
        let stop = CancelOnDrop(Some(opts.cancel.clone()));
        let r = self
            .on_blocking_pool(move |ep, report| {
                file::send::send_into(ep, &entries, &opts, report, &mut |_| {})
            })
            .await;
        stop.disarm();
        r
    }

    /// Receives what one sender sends, as [`file::receive`] does, and gives the endpoint
    /// back with the session's report. Accept with the options of
    /// [`ReceiverOptions::endpoint_options`]. Runs as [`send_files`](Self::send_files) does;
    /// dropping this future stops the session as [`ReceiverOptions::cancel`] does (within
    /// 250 ms): nothing that was not verified whole is committed.
    pub async fn receive_files(self, opts: ReceiverOptions) -> FilesResult {
        let stop = CancelOnDrop(Some(opts.cancel.clone()));
        let r = self
            .on_blocking_pool(move |ep, report| file::recv::receive_into(ep, &opts, report))
            .await;
        stop.disarm();
        r
    }

    async fn on_blocking_pool(
        self,
        f: impl FnOnce(&mut Endpoint, &mut SessionReport) -> crate::Result<()> + Send + 'static,
    ) -> FilesResult {
        let mut ep = self.into_inner();
        let joined = tokio::task::spawn_blocking(move || {
            let mut report = SessionReport::default();
            let r = f(&mut ep, &mut report);
            (ep, r, report)
        })
        .await;
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
