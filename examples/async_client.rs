//! Async ping-pong clients: N connections on one tokio current-thread runtime, each sending
//! messages and checking their echo (feature `tokio`; serve them with `async_server`).
//!
//! ```text
//! cargo run --features tokio --example async_client -- 198.18.0.1:7503 16
//! ```

use std::net::SocketAddr;

use anyhow::{ensure, Context, Result};
use rdmaxfer::aio::AsyncEndpoint;
use rdmaxfer::xfer::endpoint::EndpointOptions;

const ROUNDS: usize = 100;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args
        .next()
        .context("usage: async_client ADDR:PORT [CLIENTS]")?
        .parse()
        .context("ADDR:PORT")?;
    let clients: usize = args.next().map_or(Ok(4), |n| n.parse())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let tasks: Vec<_> = (0..clients)
            .map(|c| tokio::spawn(client(addr, c)))
            .collect();
        for t in tasks {
            t.await??;
        }
        println!("{clients} clients × {ROUNDS} round trips verified");
        Ok(())
    })
}

async fn client(addr: SocketAddr, id: usize) -> Result<()> {
    let opts = EndpointOptions::default().msg_size(4096).recv_depth(8);
    let mut ep = AsyncEndpoint::connect(addr, &opts).await?;
    for round in 0..ROUNDS {
        let msg = format!("client {id} round {round}");
        ep.send(msg.as_bytes()).await?;
        let back = ep.recv().await?;
        ensure!(
            back == msg.as_bytes(),
            "client {id}: wrong echo in round {round}"
        );
    }
    ep.close().await?;
    Ok(())
}
