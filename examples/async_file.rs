//! Verified file transfer from async code (feature `tokio`): the session runs on tokio's
//! blocking pool while the runtime thread stays free for other connections. The sender asks
//! for two streams (`rdmaxfer recv` grants them; this example's `recv` grants one) and shows
//! its progress from a task.
//!
//! ```text
//! cargo run --features tokio --example async_file -- recv 198.18.0.1:7504 /tmp/incoming
//! cargo run --features tokio --example async_file -- send 198.18.0.1:7504 some-file
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use rdmaxfer::aio::{AsyncEndpoint, AsyncListener};
use rdmaxfer::xfer::endpoint::EndpointOptions;
use rdmaxfer::xfer::file::source;
use rdmaxfer::xfer::file::{Progress, ReceiverOptions, SenderOptions};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (role, addr) = match (args.first(), args.get(1)) {
        (Some(r), Some(a)) => (r.clone(), a.parse::<SocketAddr>().context("ADDR:PORT")?),
        _ => bail!("usage: async_file recv ADDR:PORT DIR | send ADDR:PORT PATH..."),
    };
    let rest = args[2..].to_vec();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let base = EndpointOptions::default();
        let report = match role.as_str() {
            "recv" => {
                let dir = rest.first().context("the directory to receive into")?;
                let opts = ReceiverOptions::new(dir);
                let mut listener = AsyncListener::bind(addr, &opts.endpoint_options(&base))?;
                let ep = listener.accept().await?;
                let (ep, report) = ep.receive_files(opts).await?;
                ep.close().await?;
                report
            }
            "send" => {
                let paths: Vec<PathBuf> = rest.iter().map(PathBuf::from).collect();
                let entries = source::walk(&paths)?;
                let opts = SenderOptions::default().streams(2);
                let ep_opts = opts.endpoint_options(&base);
                let ep = AsyncEndpoint::connect(addr, &ep_opts).await?;
                // The callback runs on the session's thread: what it hears reaches a task
                // through a channel.
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                let shown = tokio::spawn(async move {
                    while let Some(done) = rx.recv().await {
                        eprint!("\r{done} bytes sent");
                    }
                    eprintln!();
                });
                let progress = move |p: Progress<'_>| {
                    if let Progress::Bytes { total_done, .. } = p {
                        let _ = tx.send(total_done);
                    }
                };
                let (ep, report) = ep
                    .send_files_streams(addr, &ep_opts, entries, opts, progress)
                    .await?;
                ep.close().await?;
                shown.await?;
                report
            }
            other => bail!("unknown role {other:?}: recv or send"),
        };
        println!(
            "{} files, {} failed",
            report.file_count(),
            report.failures()
        );
        Ok(())
    })
}
