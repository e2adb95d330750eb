//! `rdmaxfer bench write|read|send`: perftest-style bandwidth.

use anyhow::{bail, Context as _, Result};
use rdmaxfer::verbs::WaitMode;
use rdmaxfer::xfer::bench::{self, BenchOp, BwParams, BwReport};

use crate::conn::{serve, ConnArgs};

/// Measure RDMA WRITE / READ / SEND bandwidth against `rdmaxfer bench --listen` (same options on
/// both sides, as perftest).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// write, read or send.
    op: String,
    /// Serve: listen on ADDR (default 0.0.0.0).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "0.0.0.0", conflicts_with = "host")]
    listen: Option<String>,
    /// The server to measure against.
    #[arg(required_unless_present = "listen")]
    host: Option<String>,
    /// Message size in bytes.
    #[arg(short = 's', long = "size", default_value_t = 65536)]
    size: usize,
    /// Messages.
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    iters: u64,
    /// Work requests in flight.
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    tx_depth: u32,
    /// Print one JSON object instead of perftest's lines.
    #[arg(long)]
    json: bool,
    /// Server: stop after this many clients (default: serve until killed).
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    #[command(flatten)]
    conn: ConnArgs,
}

/// Receive buffers for SEND: up to tx_depth, at most 64 MiB of them.
fn depth(a: &Args, op: BenchOp) -> u32 {
    match op {
        BenchOp::Send => a
            .tx_depth
            .clamp(2, ((64 << 20) / a.size.max(1)).max(2) as u32),
        _ => 4,
    }
}

fn print(a: &Args, r: &BwReport) -> Result<()> {
    if a.json {
        let v = serde_json::json!({
            "op": r.op, "size": r.size, "iters": r.iters, "bw_peak_mib_s": r.bw_peak_mib_s,
            "bw_avg_mib_s": r.bw_avg_mib_s, "msg_rate_mpps": r.msg_rate_mpps,
            "cpu_seconds": r.cpu_seconds, "cpu_user_seconds": r.cpu_user_seconds,
            "seconds": r.seconds, "tx_depth": a.tx_depth,
            "event": a.conn.event, "transport": if a.conn.oob { "oob" } else { "rdma_cm" },
        });
        println!("{v}");
    } else {
        println!("{}", BwReport::HEADER);
        println!("{}", r.line());
    }
    Ok(())
}

/// Runs the subcommand.
pub fn run(a: Args) -> Result<()> {
    let op: BenchOp = a.op.parse()?;
    if a.size == 0 || a.iters == 0 || a.tx_depth == 0 {
        bail!("-s, -n and -t must be at least 1");
    }
    let msg = if op == BenchOp::Send {
        a.size.max(64)
    } else {
        4096
    };
    let opts = a.conn.options(msg, depth(&a, op), a.tx_depth)?;
    match (&a.listen, &a.host) {
        (Some(addr), _) => {
            // The target of WRITE/READ is passive until DONE: it sleeps on the completion channel
            // rather than busy-poll a core away from the (soft) NIC, as perftest's server does.
            let mut opts = opts;
            if op != BenchOp::Send {
                opts.wait = WaitMode::Event;
            }
            let mut server = a.conn.listen(addr, &opts)?;
            serve(&mut server, a.count, |ep| {
                let s = bench::serve_bench(ep, op, a.size)?;
                eprintln!("served {:?}: {} × {} bytes", s.op, s.iters, s.size);
                Ok(())
            })
        }
        (None, Some(host)) => {
            let mut ep = a.conn.connect(host, &opts)?;
            let p = BwParams {
                op,
                size: a.size,
                iters: a.iters,
                tx_depth: a.tx_depth,
                timeout: opts.timeout,
            };
            let r = bench::run_bench_client(&mut ep, &p)
                .with_context(|| format!("{op:?} bandwidth against {host}"))?;
            ep.close().context("closing the connection")?;
            print(&a, &r)
        }
        (None, None) => bail!("give HOST to connect to, or --listen to serve"),
    }
}
