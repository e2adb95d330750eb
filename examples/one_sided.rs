//! One-sided RDMA WRITE and READ into a region the peer exposes (blocking API).
//!
//! ```text
//! cargo run --example one_sided -- server 198.18.0.1:7501
//! cargo run --example one_sided -- client 198.18.0.1:7501
//! ```
//! The server exposes 1 MiB, sends its descriptor, and prints what the client wrote once it
//! says it is done; the client writes a greeting, reads it back and checks it.

use std::net::SocketAddr;

use anyhow::{bail, ensure, Context, Result};
use rdmaxfer::verbs::{ExposedRegion, RemoteAccess, RemoteRegion};
use rdmaxfer::xfer::endpoint::{Endpoint, EndpointOptions, Listener};
use rdmaxfer::xfer::rdma_rw;

const LEN: usize = 1 << 20;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (role, addr) = match (args.first(), args.get(1)) {
        (Some(r), Some(a)) => (r.as_str(), a.parse::<SocketAddr>().context("ADDR:PORT")?),
        _ => bail!("usage: one_sided server|client ADDR:PORT"),
    };
    let opts = EndpointOptions::default();
    match role {
        "server" => {
            let mut listener = Listener::bind(addr, &opts)?;
            let mut ep = listener.accept(None)?;
            let region = ExposedRegion::new(ep.pd(), LEN, RemoteAccess::ReadWrite)?;
            ep.send(&region.descriptor().encode())?;
            // The client's "done" arrives after its WRITEs (RC keeps order).
            ensure!(ep.recv()? == b"done", "expected the client's \"done\"");
            // Revoke before reading: the peer can no longer write while we look.
            let data = region.revoke()?;
            println!(
                "{}",
                String::from_utf8_lossy(&data[..64]).trim_end_matches('\0')
            );
        }
        "client" => {
            let mut ep = Endpoint::connect_cm(addr, &opts)?;
            let remote = RemoteRegion::decode(&ep.recv()?)?;
            let t = ep.timeout();
            let greeting = b"written by RDMA WRITE";
            rdma_rw::write(&mut ep, &remote, 0, greeting, t)?;
            let back = rdma_rw::read(&mut ep, &remote, 0, greeting.len() as u64, t)?;
            ensure!(back == greeting, "read back something else");
            ep.send(b"done")?;
            ep.close()?;
            println!("wrote and read back {} bytes", back.len());
        }
        other => bail!("unknown role {other:?}: server or client"),
    }
    Ok(())
}
