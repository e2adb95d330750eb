//! Connect with RDMA CM and exchange messages (blocking API).
//!
//! ```text
//! cargo run --example send_recv -- server 198.18.0.1:7500
//! cargo run --example send_recv -- client 198.18.0.1:7500 "hello"
//! ```
//! The server answers each message with its bytes reversed until the client disconnects.

use std::net::SocketAddr;

use anyhow::{bail, Context, Result};
use rdmaxfer::xfer::endpoint::{Endpoint, EndpointOptions, Listener};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (role, addr) = match (args.first(), args.get(1)) {
        (Some(r), Some(a)) => (r.as_str(), a.parse::<SocketAddr>().context("ADDR:PORT")?),
        _ => bail!("usage: send_recv server|client ADDR:PORT [MESSAGE]"),
    };
    let opts = EndpointOptions::default();
    match role {
        "server" => {
            let mut listener = Listener::bind(addr, &opts)?;
            println!("listening on {}", listener.local_addr());
            let mut ep = listener.accept(None)?;
            // A message at a time until the peer goes away.
            while let Ok(msg) = ep.recv() {
                let reply: Vec<u8> = msg.iter().rev().copied().collect();
                ep.send(&reply)?;
            }
        }
        "client" => {
            let text = args.get(2).map_or("hello", String::as_str);
            let mut ep = Endpoint::connect_cm(addr, &opts)?;
            ep.send(text.as_bytes())?;
            let reply = ep.recv()?;
            println!("{}", String::from_utf8_lossy(&reply));
            ep.close()?;
        }
        other => bail!("unknown role {other:?}: server or client"),
    }
    Ok(())
}
