//! Connection options shared by `expose`, `write`, `read` and `bench`.

use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use rdmaxfer::verbs::{Mtu, WaitMode};
use rdmaxfer::xfer::endpoint::{Endpoint, EndpointOptions, DEFAULT_PORT};
use rdmaxfer::xfer::session::{self, Server};

/// How to reach (or be reached by) the peer.
#[derive(clap::Args, Debug, Clone)]
pub struct ConnArgs {
    /// Port (RDMA CM port, or TCP port of the --oob exchange).
    #[arg(short = 'p', long = "port", default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Set up with ibv_rc_pingpong's out-of-band TCP exchange instead of RDMA CM.
    #[arg(long)]
    pub oob: bool,
    /// RDMA device (default: the first with an active port; with CM, the one routing to HOST).
    #[arg(short = 'd', long = "ib-dev")]
    pub device: Option<String>,
    /// GID index (default: the IPv4-mapped RoCE v2 GID).
    #[arg(short = 'g', long = "gid-idx")]
    pub gid_index: Option<u32>,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 (--oob only; default 1024).
    #[arg(short = 'm', long = "mtu")]
    pub mtu: Option<u32>,
    /// Sleep on the completion channel instead of busy-polling (the default of send and recv).
    #[arg(short = 'e', long = "event", conflicts_with = "poll")]
    pub event: bool,
    /// Busy-poll the completion queue (the default, except for send and recv).
    #[arg(long)]
    pub poll: bool,
    /// Deadline in seconds for each step (resolve, connect, accept, exchange, each completion).
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
}

impl ConnArgs {
    /// Endpoint options with message buffers of `msg_size` bytes, `depth` deep, and `extra`
    /// send-queue slots for RDMA READ/WRITE.
    pub fn options(&self, msg_size: usize, depth: u32, extra: u32) -> Result<EndpointOptions> {
        self.options_waiting(WaitMode::Poll, msg_size, depth, extra)
    }

    /// How completions are waited for: `--event`, `--poll`, else `default`.
    pub fn wait_mode(&self, default: WaitMode) -> WaitMode {
        if self.event {
            WaitMode::Event
        } else if self.poll {
            WaitMode::Poll
        } else {
            default
        }
    }

    /// Like [`options`](Self::options), waiting in `default` mode unless `--event` / `--poll`.
    pub fn options_waiting(
        &self,
        default: WaitMode,
        msg_size: usize,
        depth: u32,
        extra: u32,
    ) -> Result<EndpointOptions> {
        if !(self.timeout.is_finite() && self.timeout > 0.0 && self.timeout < 1e9) {
            bail!("--timeout must be a positive number of seconds");
        }
        let mtu = self.mtu.map(Mtu::from_bytes).transpose()?;
        if mtu.is_some() && !self.oob {
            bail!("-m sets the path MTU of the --oob exchange; with rdma_cm the MTU follows the route");
        }
        Ok(EndpointOptions {
            device: self.device.clone(),
            gid_index: self.gid_index,
            mtu,
            wait: self.wait_mode(default),
            timeout: Duration::from_secs_f64(self.timeout),
            msg_size,
            recv_depth: depth,
            send_depth: depth,
            extra_send_wr: extra,
        })
    }

    /// Connects to `host`.
    pub fn connect(&self, host: &str, opts: &EndpointOptions) -> Result<Endpoint> {
        let how = if self.oob {
            "out-of-band TCP exchange"
        } else {
            "rdma_cm"
        };
        session::connect(host, self.port, self.oob, opts)
            .with_context(|| format!("connecting to {host}:{} ({how})", self.port))
    }

    /// Listens on `addr` and says so on stderr (tests wait for that line).
    pub fn listen(&self, addr: &str, opts: &EndpointOptions) -> Result<Server> {
        let s = Server::bind(addr, self.port, self.oob, opts)
            .with_context(|| format!("listening on {addr}:{}", self.port))?;
        eprintln!("listening on {} ({})", s.local_addr(), s.kind());
        Ok(s)
    }
}

/// Serves peers one after another until `count` (if any) have been served; one failing peer
/// does not stop the server. Fails at the end if any peer failed.
pub fn serve(
    server: &mut Server,
    count: Option<u64>,
    mut one: impl FnMut(&mut Endpoint) -> Result<()>,
) -> Result<()> {
    let (mut served, mut failed) = (0u64, 0u64);
    while count.is_none_or(|c| served < c) {
        let r = server.accept(None).context("accepting a connection");
        served += 1;
        let r = r.and_then(|mut ep| {
            let who = ep.peer().addr.map_or("?".into(), |a| a.to_string());
            let r = one(&mut ep).with_context(|| format!("serving {who}"));
            if let Err(e) = ep.close() {
                // The peer may already be gone; what mattered was reported by `one`.
                tracing::debug!("closing the connection to {who}: {e}");
            }
            r
        });
        if let Err(e) = r {
            failed += 1;
            let text = format!("{e:#}");
            // Errors can quote what the peer sent: printed escaped.
            eprintln!(
                "rdmaxfer: error: {}",
                rdmaxfer::xfer::file::names::printable(&text)
            );
            if server.is_broken() {
                bail!("the listener failed; stopping");
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {served} connections failed");
    }
    Ok(())
}
