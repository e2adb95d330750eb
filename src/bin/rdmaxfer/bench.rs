//! `rdmaxfer bench write|read|send`: perftest-style bandwidth.

use anyhow::{Context as _, Result};
use rdmaxfer::verbs::WaitMode;
use rdmaxfer::xfer::bench::{self, BenchOp, BwParams, BwReport};

use crate::args::{parse_mem_size, usage, usage_of, LimitArgs};
use crate::conn::{serve_admitting, ConnArgs};

// Measure RDMA WRITE / READ / SEND bandwidth against `rdmaxfer bench --listen`, which runs
// what each client asks for (op, -s, -n, -t; within --max-size and --max-iters), as perftest.
// (A plain comment: the help shows `enum Command`'s text, which a doc comment would replace.)
#[derive(clap::Args, Debug)]
pub struct Args {
    /// write, read or send (a server serves whichever its clients ask for).
    #[arg(required_unless_present = "listen")]
    op: Option<String>,
    /// Serve: listen on ADDR (default, or a bare --listen: all addresses).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "0.0.0.0", conflicts_with = "host")]
    listen: Option<String>,
    /// The server to measure against.
    #[arg(required_unless_present = "listen")]
    host: Option<String>,
    /// Message size (e.g. 65536, 64K, 1M). Server over --oob: the largest SEND it takes.
    #[arg(short = 's', long = "size", value_parser = parse_mem_size, default_value_t = 65536)]
    size: usize,
    /// Messages.
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    iters: u64,
    /// Work requests in flight.
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    tx_depth: u32,
    /// send: post each refill of the send queue as one list of SENDs of one shared source
    /// (perftest's -l). The default; kept for scripts that name it.
    #[arg(long, conflicts_with = "per_message")]
    post_lists: bool,
    /// send: one SEND per call from the connection's send buffers, each stamped with its
    /// sequence number, instead of post lists.
    #[arg(long)]
    per_message: bool,
    /// Print one JSON object instead of perftest's lines.
    #[arg(long)]
    json: bool,
    /// Server: stop after this many clients (default: serve until killed).
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    conn: ConnArgs,
}

fn print(a: &Args, r: &BwReport) -> Result<()> {
    if a.json {
        let v = serde_json::json!({
            "op": r.op, "size": r.size, "iters": r.iters, "bw_peak_mib_s": r.bw_peak_mib_s,
            "bw_avg_mib_s": r.bw_avg_mib_s, "msg_rate_mpps": r.msg_rate_mpps,
            "cpu_seconds": r.cpu_seconds, "cpu_user_seconds": r.cpu_user_seconds,
            "seconds": r.seconds, "tx_depth": a.tx_depth, "post_lists": !a.per_message,
            "event": a.conn.event, "transport": if a.conn.oob { "oob" } else { "rdma_cm" },
        });
        outln!("{v}");
    } else {
        outln!("{}", BwReport::HEADER);
        outln!("{}", r.line());
    }
    Ok(())
}

/// Runs the subcommand.
pub fn run(a: Args) -> Result<()> {
    let op: Option<BenchOp> =
        a.op.as_deref()
            .map(str::parse)
            .transpose()
            .map_err(|e| usage_of("", e))?;
    if a.size == 0 || a.iters == 0 || a.tx_depth == 0 {
        usage!("-s, -n and -t must be at least 1");
    }
    let base = a.conn.options(4096, 4, 0)?;
    match (&a.listen, &a.host, op) {
        (Some(addr), _, _) => {
            // Clients that send no parameters (--oob) get buffers for the server's own op and
            // -s; the others get theirs (`bench::admit`).
            let mut opts =
                bench::endpoint_options(&base, op.unwrap_or(BenchOp::Send), a.size, a.tx_depth);
            if !matches!(op, None | Some(BenchOp::Send)) {
                opts.wait = WaitMode::Event;
            }
            let mut server = a.conn.listen(addr, &opts)?;
            let limits = a.limits.limits();
            serve_admitting(
                &mut server,
                a.count,
                false,
                |inc| {
                    if let Some(o) = bench::admit(inc.params(), &limits, &base)? {
                        *inc.options_mut() = o;
                    }
                    Ok(())
                },
                |ep, ()| {
                    let s = bench::serve_bench(ep, &limits)?;
                    eprintln!("served {:?}: {} × {} bytes", s.op, s.iters, s.size);
                    Ok(())
                },
            )
        }
        (None, Some(host), Some(op)) => {
            let p = BwParams::new(op)
                .size(a.size)
                .iters(a.iters)
                .tx_depth(a.tx_depth)
                .timeout(base.timeout)
                .post_lists(!a.per_message);
            let mut opts = bench::endpoint_options(&base, op, a.size, a.tx_depth);
            opts.session = Some(bench::session_params(&p));
            let mut ep = a.conn.connect(host, &opts)?;
            let r = bench::run_bench_client(&mut ep, &p)
                .with_context(|| format!("{op:?} bandwidth against {host}"))?;
            ep.close().context("closing the connection")?;
            print(&a, &r)
        }
        _ => {
            usage!("give the op (write, read or send) and HOST to connect to, or --listen to serve")
        }
    }
}
