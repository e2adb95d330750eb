//! Verified file transfer from async code: the blocking session of
//! [`file`](crate::xfer::file) on tokio's blocking pool.

use crate::error::{Error, Result};
use crate::xfer::endpoint::Endpoint;
use crate::xfer::file::source::SourceEntry;
use crate::xfer::file::{self, ReceiverOptions, SenderOptions, SessionReport};

use super::AsyncEndpoint;

impl AsyncEndpoint {
    /// Sends `entries` (from [`walk`](crate::xfer::file::source::walk)) as
    /// [`file::send`](fn@file::send) does, to a peer running [`receive_files`](Self::receive_files) (or
    /// `rdmaxfer recv`), and gives the endpoint back with the session's report. Connect with
    /// the options of [`SenderOptions::endpoint_options`].
    ///
    /// The session runs on tokio's blocking pool (its steps keep their deadlines): dropping
    /// this future does not stop it; it runs to its end, then drops the endpoint.
    pub async fn send_files(
        self,
        entries: Vec<SourceEntry>,
        opts: SenderOptions,
    ) -> Result<(AsyncEndpoint, SessionReport)> {
        self.on_blocking_pool(move |ep, report| {
            file::send(ep, &entries, &opts, report, &mut |_| {})
        })
        .await
    }

    /// Receives what one sender sends, as [`file::receive`] does, and gives the endpoint
    /// back with the session's report. Accept with the options of
    /// [`ReceiverOptions::endpoint_options`]. Runs as [`send_files`](Self::send_files) does.
    pub async fn receive_files(
        self,
        opts: ReceiverOptions,
    ) -> Result<(AsyncEndpoint, SessionReport)> {
        self.on_blocking_pool(move |ep, report| file::receive(ep, &opts, report))
            .await
    }

    async fn on_blocking_pool(
        self,
        f: impl FnOnce(&mut Endpoint, &mut SessionReport) -> Result<()> + Send + 'static,
    ) -> Result<(AsyncEndpoint, SessionReport)> {
        let mut ep = self.into_inner();
        let (ep, r, report) = tokio::task::spawn_blocking(move || {
            let mut report = SessionReport::default();
            let r = f(&mut ep, &mut report);
            (ep, r, report)
        })
        .await
        .map_err(|e| Error::Connection(format!("the file transfer task failed: {e}")))?;
        r?;
        Ok((AsyncEndpoint::new(ep)?, report))
    }
}
