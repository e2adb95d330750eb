//! Connection options shared by `expose`, `write`, `read` and `bench`.

use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use rdmaxfer::verbs::{Mtu, WaitMode};
use rdmaxfer::xfer::endpoint::{Endpoint, EndpointOptions, DEFAULT_PORT};
use rdmaxfer::xfer::onesided::{self, Msg};
use rdmaxfer::xfer::session::{self, Server};

use crate::serve::{serve_concurrent, Limits};

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

/// How long a peer that connects while another is served waits for its turn before it is
/// told the server is busy: longer than a scripted client's gap between two runs (the server
/// may still be saving or printing the last peer's results), shorter than a client's default
/// step deadline (10 s), so the client hears "busy" rather than timing out.
const TURN_WAIT: Duration = Duration::from_secs(5);

/// Serves peers one after another until `count` (if any) have been served; one failing peer
/// does not stop the server. A peer that connects while another is served is told at once that
/// the server is busy (and to retry) if the other does not end within [`TURN_WAIT`], rather than
/// left waiting in the backlog. Fails at the end
/// if any peer failed.
pub fn serve(
    server: &mut Server,
    count: Option<u64>,
    one: impl FnMut(&mut Endpoint) -> Result<()> + Send,
) -> Result<()> {
    let one = std::sync::Mutex::new(one);
    let limits = Limits {
        count,
        max_sessions: 1,
        full: "it serves one peer at a time".into(),
        wait_turn: TURN_WAIT,
    };
    let refuse = |ep: &mut Endpoint, why: &str| {
        let msg = Msg::Refuse(format!("busy: {why}; retry later"));
        if let Err(e) = onesided::send_msg(ep, &msg).and_then(|()| ep.flush()) {
            tracing::debug!("telling a peer the server is busy: {e}");
        }
    };
    serve_concurrent(
        server,
        &limits,
        || Ok(()),
        refuse,
        |_, ep, ()| {
            // One session at a time (max_sessions 1): the lock is never contended.
            let mut one = one.lock().unwrap_or_else(|p| p.into_inner());
            one(ep)
        },
    )
}
