//! `rdmaxfer pingpong`: parse, call `xfer::pingpong`, print.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use anyhow::{bail, Context as _, Result};
use rdmaxfer::verbs::Gid;
use rdmaxfer::xfer::endpoint::{
    self, Endpoint, EndpointOptions, Listener, LocalInfo, OobListener, PeerInfo,
};
use rdmaxfer::xfer::pingpong::{self, Stats};

use crate::conn::ConnArgs;

/// Ping-pong SENDs with a peer (rdmaxfer, or ibv_rc_pingpong with --oob) and report latency.
///
/// Server: `rdmaxfer pingpong --listen [ADDR]`; client: `rdmaxfer pingpong HOST`. Both sides
/// need the same -s and -n.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Serve: listen on ADDR (default 0.0.0.0) and answer clients one after another.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "0.0.0.0", conflicts_with = "host")]
    listen: Option<String>,
    /// The server to connect to.
    #[arg(required_unless_present = "listen")]
    host: Option<String>,
    /// Message size in bytes.
    #[arg(short = 's', long = "size", default_value_t = 4096)]
    size: usize,
    /// Round trips.
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
    conn: ConnArgs,
}

impl Args {
    fn options(&self) -> Result<EndpointOptions> {
        if self.size == 0 {
            bail!("-s must be at least 1");
        }
        if self.iters == 0 {
            bail!("-n must be at least 1");
        }
        let mut opts = self.conn.options(self.size, 4, 0)?;
        // Ping-pong has one message in flight; 4 receives keep credit returns piggy-backed.
        opts.send_depth = 2;
        Ok(opts)
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
        println!("{l}\n{r}");
    }
}

fn report(json: bool, s: &Stats) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(s)?);
    } else {
        println!("{}", s.text());
    }
    Ok(())
}

fn serve_one(a: &Args, ep: &mut Endpoint) -> Result<()> {
    let who = ep.peer().addr.map_or("?".into(), |x| x.to_string());
    eprintln!("connection from {who}");
    print_addresses(a.json, ep.local(), ep.peer());
    let s = pingpong::run_server(ep, a.size, a.iters)
        .with_context(|| format!("ping-pong with {who}"))?;
    report(a.json, &s)
}

fn server(a: &Args, opts: &EndpointOptions, listen: &str) -> Result<()> {
    let ip: IpAddr = listen
        .parse()
        .with_context(|| format!("--listen {listen:?} is not an IP address"))?;
    let addr = SocketAddr::new(ip, a.conn.port);
    enum L {
        Cm(Listener),
        Oob(OobListener),
    }
    let mut l = if a.conn.oob {
        let l = OobListener::bind(addr, opts).context("setting up the out-of-band listener")?;
        eprintln!("listening on {} (oob, TCP)", l.local_addr());
        L::Oob(l)
    } else {
        let l = Listener::bind(addr, opts).context("setting up the RDMA CM listener")?;
        eprintln!("listening on {} (rdma_cm)", l.local_addr());
        L::Cm(l)
    };
    prefault();
    let (mut served, mut failed) = (0u64, 0u64);
    while a.count.is_none_or(|c| served < c) {
        let r = match &mut l {
            L::Cm(l) => l.accept(None),
            L::Oob(l) => l.accept(None),
        };
        served += 1;
        let r = r.context("accepting a connection").and_then(|mut ep| {
            let r = serve_one(a, &mut ep);
            let closed = ep.close();
            r.and(closed.context("closing the connection"))
        });
        if let Err(e) = r {
            failed += 1;
            eprintln!("rdmaxfer: error: {e:#}");
            if let L::Cm(l) = &l {
                if l.is_broken() {
                    bail!("the listener failed; stopping");
                }
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {served} connections failed");
    }
    Ok(())
}

fn client(a: &Args, opts: &EndpointOptions, host: &str) -> Result<()> {
    prefault();
    let dst = endpoint::resolve_host(host, a.conn.port)?;
    let mut ep = if a.conn.oob {
        Endpoint::connect_oob(dst, opts)
            .with_context(|| format!("connecting to {dst} (out-of-band TCP exchange)"))?
    } else {
        Endpoint::connect_cm(dst, opts).with_context(|| format!("connecting to {dst} (rdma_cm)"))?
    };
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
        (None, None) => bail!("give HOST to connect to, or --listen to serve"),
    }
}
