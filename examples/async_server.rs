//! An async ping-pong server: one tokio current-thread runtime serves many peers at once,
//! one task per connection (feature `tokio`).
//!
//! ```text
//! cargo run --features tokio --example async_server -- 198.18.0.1:7503 [CONNECTIONS]
//! cargo run --features tokio --example async_client -- 198.18.0.1:7503 16
//! ```
//! Each connection's messages are echoed back until the peer disconnects. With CONNECTIONS
//! the server ends after serving that many.

use std::net::SocketAddr;

use anyhow::{Context, Result};
use rdmaxfer::aio::{AsyncEndpoint, AsyncListener};
use rdmaxfer::xfer::endpoint::EndpointOptions;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args
        .next()
        .context("usage: async_server ADDR:PORT [CONNECTIONS]")?
        .parse()
        .context("ADDR:PORT")?;
    let limit: Option<usize> = args.next().map(|n| n.parse()).transpose()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(serve(addr, limit))
}

async fn serve(addr: SocketAddr, limit: Option<usize>) -> Result<()> {
    let opts = EndpointOptions::default().msg_size(4096).recv_depth(8);
    let mut listener = AsyncListener::bind(addr, &opts)?;
    println!("listening on {}", listener.local_addr());
    let mut tasks = Vec::new();
    let mut served = 0;
    while limit.is_none_or(|n| served < n) {
        let pending = listener.take().await?;
        let peer = pending
            .peer_addr()
            .map_or_else(|| "?".to_string(), |a| a.to_string());
        // Finish the handshake in the connection's own task: a slow client holds up no other.
        tasks.push(tokio::spawn(async move {
            match pending.finish().await {
                Ok(ep) => match echo(ep).await {
                    Ok(n) => println!("{peer}: {n} messages echoed"),
                    Err(e) => eprintln!("{peer}: {e}"),
                },
                Err(e) => eprintln!("{peer}: accept failed: {e}"),
            }
        }));
        served += 1;
    }
    for t in tasks {
        t.await?;
    }
    Ok(())
}

/// Echoes until the peer disconnects; returns how many messages.
async fn echo(mut ep: AsyncEndpoint) -> rdmaxfer::Result<usize> {
    let mut n = 0;
    loop {
        let msg = match ep.recv().await {
            Ok(m) => m,
            // The peer closed the connection: done.
            Err(rdmaxfer::Error::Connection(_)) => return Ok(n),
            Err(e) => return Err(e),
        };
        ep.send(&msg).await?;
        n += 1;
    }
}
