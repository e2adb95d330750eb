//! Verified file transfer from async code: the blocking session of
//! [`file`](crate::xfer::file) on tokio's blocking pool.

use crate::error::Error;
use crate::xfer::endpoint::Endpoint;
use crate::xfer::file::source::SourceEntry;
use crate::xfer::file::{self, ReceiverOptions, SenderOptions, SessionError, SessionReport};

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
    /// The session runs on tokio's blocking pool (its steps keep their deadlines): dropping
    /// this future does not stop it; it runs to its end, then drops the endpoint.
    pub async fn send_files(self, entries: Vec<SourceEntry>, opts: SenderOptions) -> FilesResult {
        self.on_blocking_pool(move |ep, report| {
            file::send::send_into(ep, &entries, &opts, report, &mut |_| {})
        })
        .await
    }

    /// Receives what one sender sends, as [`file::receive`] does, and gives the endpoint
    /// back with the session's report. Accept with the options of
    /// [`ReceiverOptions::endpoint_options`]. Runs as [`send_files`](Self::send_files) does.
    pub async fn receive_files(self, opts: ReceiverOptions) -> FilesResult {
        self.on_blocking_pool(move |ep, report| file::recv::receive_into(ep, &opts, report))
            .await
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
