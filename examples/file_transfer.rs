//! Verified file transfer (the protocol of `rdmaxfer send` / `rdmaxfer recv`).
//!
//! ```text
//! cargo run --example file_transfer -- recv 198.18.0.1:7502 /tmp/incoming
//! cargo run --example file_transfer -- send 198.18.0.1:7502 some-file some-dir
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use rdmaxfer::xfer::endpoint::{Endpoint, EndpointOptions, Listener};
use rdmaxfer::xfer::file::source;
use rdmaxfer::xfer::file::{self, ReceiverOptions, SenderOptions};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (role, addr) = match (args.first(), args.get(1)) {
        (Some(r), Some(a)) => (r.as_str(), a.parse::<SocketAddr>().context("ADDR:PORT")?),
        _ => bail!("usage: file_transfer recv ADDR:PORT DIR | send ADDR:PORT PATH..."),
    };
    let base = EndpointOptions::default();
    let done = match role {
        "recv" => {
            let dir = args.get(2).context("the directory to receive into")?;
            let opts = ReceiverOptions::new(dir);
            let mut listener = Listener::bind(addr, &opts.endpoint_options(&base))?;
            let mut ep = listener.accept(None)?;
            file::receive(&mut ep, &opts)
        }
        "send" => {
            let paths: Vec<PathBuf> = args[2..].iter().map(PathBuf::from).collect();
            let entries = source::walk(&paths)?;
            let opts = SenderOptions::default();
            let mut ep = Endpoint::connect_cm(addr, &opts.endpoint_options(&base))?;
            let done = file::send(&mut ep, &entries, &opts, &mut |_| {});
            ep.close()?;
            done
        }
        other => bail!("unknown role {other:?}: recv or send"),
    };
    // A failed session still says what it did (each file's verdict).
    let report = match &done {
        Ok(report) => report,
        Err(e) => &*e.report,
    };
    println!(
        "{} files, {} failed",
        report.file_count(),
        report.failures()
    );
    done?;
    Ok(())
}
