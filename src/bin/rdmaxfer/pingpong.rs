//! `rdmaxfer pingpong`: parse, call `xfer::pingpong`, print.

use std::net::Ipv6Addr;

use anyhow::{Context as _, Result};
use rdmaxfer::verbs::Gid;
use rdmaxfer::xfer::endpoint::{self, Endpoint, EndpointOptions, LocalInfo, PeerInfo};
use rdmaxfer::xfer::pingpong::{self, Stats};

use crate::args::{parse_mem_size, usage, LimitArgs};
use crate::conn::{serve_admitting, ConnArgs};

// Ping-pong SENDs with a peer (rdmaxfer, or ibv_rc_pingpong with --oob) and report latency.
//
// Server: `rdmaxfer pingpong --listen [ADDR]`; client: `rdmaxfer pingpong HOST`. Over RDMA CM
// the server runs each client's -s and -n (within --max-size and --max-iters); over --oob
// (the peer may be ibv_rc_pingpong, which exchanges none) both sides need the same -s and -n.
// (A plain comment: the help shows `enum Command`'s text, which a doc comment would replace.)
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Serve: listen on ADDR (default, or a bare --listen: all addresses) and answer clients
    /// one after another.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "0.0.0.0", conflicts_with = "host")]
    listen: Option<String>,
    /// The server to connect to.
    #[arg(required_unless_present = "listen")]
    host: Option<String>,
    /// Message size (e.g. 64, 4K, 1M). Server: for clients that do not send theirs (--oob,
    /// C API clients).
    #[arg(short = 's', long = "size", value_parser = parse_mem_size, default_value_t = 4096)]
    size: usize,
    /// Round trips. Server: for clients that do not send theirs (--oob, C API clients).
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    iters: u64,
    /// Print one JSON object per run (server: per connection) instead of text.
    #[arg(long)]
    json: bool,
    /// Server: stop after this many connections; exit status 1 if any failed (default: serve
    /// until killed).
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    conn: ConnArgs,
}

impl Args {
    fn options(&self) -> Result<EndpointOptions> {
        if self.size == 0 {
            usage!("-s must be at least 1");
        }
        if self.iters == 0 {
            usage!("-n must be at least 1");
        }
        let base = self.conn.options(self.size, 4, 0)?;
        Ok(pingpong::endpoint_options(&base, self.size))
    }
}

fn gid_str(g: &Gid) -> String {
    Ipv6Addr::from(g.0).to_string()
}

/// ibv_rc_pingpong's address lines (stdout in text mode, stderr with --json).
fn print_addresses(json: bool, local: &LocalInfo, peer: &PeerInfo) {
    let psn = |p: Option<u32>| p.map_or("-".into(), |p| format!("{p:#08x}"));
    let qpn = |q: Option<u32>| q.map_or("-".into(), |q| format!("{q:#08x}"));
    let l = format!(
        "  local address:  LID {:#06x}, QPN {}, PSN {}, GID {} ({} {})",
        local.lid,
        qpn(Some(local.qpn)),
        psn(local.psn),
        gid_str(&local.gid),
        local.device,
        match local.transport {
            endpoint::Transport::Cm => "rdma_cm",
            endpoint::Transport::Oob => "oob",
            _ => "?",
        }
    );
    let r = format!(
        "  remote address: LID {:#06x}, QPN {}, PSN {}, GID {}",
        peer.lid,
        qpn(peer.qpn),
        psn(peer.psn),
        gid_str(&peer.gid)
    );
    if json {
        eprintln!("{l}\n{r}");
    } else {
        outln!("{l}\n{r}");
    }
}

fn report(json: bool, s: &Stats) -> Result<()> {
    if json {
        outln!("{}", serde_json::to_string(s)?);
    } else {
        outln!("{}", s.text());
    }
    Ok(())
}

fn serve_one(a: &Args, ep: &mut Endpoint, (size, iters): (usize, u64)) -> Result<()> {
    let who = ep.peer().addr.map_or("?".into(), |x| x.to_string());
    eprintln!("connection from {who}");
    print_addresses(a.json, ep.local(), ep.peer());
    let s =
        pingpong::run_server(ep, size, iters).with_context(|| format!("ping-pong with {who}"))?;
    report(a.json, &s)
}

fn server(a: &Args, opts: &EndpointOptions, listen: &str) -> Result<()> {
    let mut server = a.conn.listen(listen, opts)?;
    prefault();
    let limits = a.limits.limits();
    let base = opts.clone();
    serve_admitting(
        &mut server,
        a.count,
        true,
        |inc| {
            let (size, iters) = pingpong::admit(inc.params(), &limits, (a.size, a.iters))?;
            // Buffers sized for this client's messages.
            *inc.options_mut() = pingpong::endpoint_options(&base, size);
            Ok((size, iters))
        },
        |ep, decided| serve_one(a, ep, decided),
    )
}

fn client(a: &Args, opts: &EndpointOptions, host: &str) -> Result<()> {
    prefault();
    let mut opts = opts.clone();
    if !a.conn.oob {
        // The server runs what the client asks for (over --oob the peer may be ibv_rc_pingpong).
        opts.session = Some(pingpong::session_params(a.size, a.iters));
    }
    let mut ep = a.conn.connect_plain(host, &opts)?;
    let dst = ep
        .peer()
        .addr
        .map_or_else(|| host.to_string(), |x| x.to_string());
    eprintln!("connected to {dst}");
    print_addresses(a.json, ep.local(), ep.peer());
    let s = pingpong::run_client(&mut ep, a.size, a.iters)
        .with_context(|| format!("ping-pong with {dst}"))?;
    ep.close().context("closing the connection")?;
    report(a.json, &s)
}

/// Maps in all code, the device providers' included, before any timed loop: first-touch page
/// faults would otherwise land in the first round trips, and where the binary sits on a slow
/// filesystem (the test guest's 9p root) each costs milliseconds. See `os::prefault_code`.
fn prefault() {
    // Listing the devices loads the provider libraries.
    if let Err(e) = rdmaxfer::verbs::device_names() {
        tracing::debug!("listing devices before prefaulting: {e}");
    }
    match rdmaxfer::os::prefault_code() {
        Ok(n) => tracing::debug!("prefaulted {n} bytes of code"),
        Err(e) => tracing::debug!("prefaulting code: {e} (timings may include page faults)"),
    }
}

/// Runs the subcommand.
pub fn run(a: Args) -> Result<()> {
    let opts = a.options()?;
    match (&a.listen, &a.host) {
        (Some(listen), _) => server(&a, &opts, listen),
        (None, Some(host)) => client(&a, &opts, host),
        (None, None) => usage!("give HOST to connect to, or --listen to serve"),
    }
}
