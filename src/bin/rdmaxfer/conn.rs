//! Connection options shared by every subcommand that connects or listens, spelt as perftest's
//! (`-d/--ib-dev`, `-i/--ib-port`, `-x/--gid-index`, `-p`, `-m`, `-e`), and the serving loop.

use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use rdmaxfer::verbs::{Mtu, WaitMode};
use rdmaxfer::xfer::endpoint::{Endpoint, EndpointOptions, DEFAULT_PORT};
use rdmaxfer::xfer::onesided::{self, Msg};
use rdmaxfer::xfer::session::{self, Incoming, Server};

use crate::args::usage;
use crate::serve::{serve_concurrent, Limits};

// How to reach (or be reached by) the peer.
// (A plain comment: flattened into subcommands whose help a doc comment would replace.)
#[derive(clap::Args, Debug, Clone)]
pub struct ConnArgs {
    /// Port (RDMA CM port, or TCP port of the --oob exchange).
    #[arg(short = 'p', long = "port", default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Set up with ibv_rc_pingpong's out-of-band TCP exchange instead of RDMA CM.
    #[arg(long)]
    pub oob: bool,
    /// RDMA device (default: the first with an active port; with CM, the one routing to HOST).
    /// `send --streams` takes several (`-d dev1,dev2`): streams are placed on them in turn.
    #[arg(short = 'd', long = "ib-dev")]
    pub device: Option<String>,
    /// Port of the RDMA device (default: its first active port; with CM, the one routing to HOST).
    #[arg(short = 'i', long = "ib-port", value_parser = clap::value_parser!(u8).range(1..))]
    pub ib_port: Option<u8>,
    /// GID index (default: the IPv4-mapped RoCE v2 GID).
    #[arg(
        short = 'x',
        long = "gid-index",
        visible_short_alias = 'g',
        visible_alias = "gid-idx"
    )]
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
    /// Deadline in seconds for each step of a connection (resolve, connect, the handshake,
    /// each completion); a server waits for its next client without one. A file transfer
    /// that makes no progress for this long (on any of its streams) ends on both sides,
    /// naming the stage, the stream and the peer (exit 30).
    #[arg(
        long,
        visible_alias = "stall-timeout",
        value_name = "SECS",
        default_value_t = 10.0
    )]
    pub timeout: f64,
}

impl ConnArgs {
    /// The devices of `-d` (a comma-separated list; empty without `-d`).
    pub fn devices(&self) -> Vec<String> {
        self.device
            .iter()
            .flat_map(|d| d.split(','))
            .map(str::to_string)
            .collect()
    }

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
            usage!("--timeout must be a positive number of seconds");
        }
        if self.devices().len() > 1 {
            usage!("several devices (-d) are for send --streams; give one device here");
        }
        let mtu = self.mtu.map(Mtu::from_bytes).transpose()?;
        if mtu.is_some() && !self.oob {
            usage!("-m sets the path MTU of the --oob exchange; with rdma_cm the MTU follows the route");
        }
        Ok(EndpointOptions::default()
            .device(self.device.clone())
            .gid_index(self.gid_index)
            .mtu(mtu)
            .wait(self.wait_mode(default))
            .timeout(Duration::from_secs_f64(self.timeout))
            .msg_size(msg_size)
            .recv_depth(depth)
            .send_depth(depth)
            .extra_send_wr(extra)
            .ib_port(self.ib_port))
    }

    /// Connects to `host` (over OOB switched to rdmaxfer's credit flow: the peer must be an
    /// rdmaxfer server).
    pub fn connect(&self, host: &str, opts: &EndpointOptions) -> Result<Endpoint> {
        self.connecting(host, opts, session::connect)
    }

    /// Like [`connect`](Self::connect), but an OOB endpoint keeps ibv_rc_pingpong's flow (the
    /// peer may be ibv_rc_pingpong).
    pub fn connect_plain(&self, host: &str, opts: &EndpointOptions) -> Result<Endpoint> {
        self.connecting(host, opts, session::connect_plain)
    }

    fn connecting(
        &self,
        host: &str,
        opts: &EndpointOptions,
        how_to: fn(&str, u16, bool, &EndpointOptions) -> rdmaxfer::Result<Endpoint>,
    ) -> Result<Endpoint> {
        let how = if self.oob {
            "out-of-band TCP exchange"
        } else {
            "rdma_cm"
        };
        how_to(host, self.port, self.oob, opts)
            .with_context(|| format!("connecting to {host}:{} ({how})", self.port))
    }

    /// Listens on `addr` and says so on stderr (tests wait for that line).
    pub fn listen(&self, addr: &str, opts: &EndpointOptions) -> Result<Server> {
        let s = Server::bind(addr, self.port, self.oob, opts)
            .with_context(|| format!("setting up the server on {addr}:{}", self.port))?;
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
        joins: false,
        per_peer: 1,
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
        |_| Ok(()),
        refuse,
        |_, ep, ()| {
            // One session at a time (max_sessions 1): the lock is never contended.
            let mut one = one.lock().unwrap_or_else(|p| p.into_inner());
            one(ep)
        },
    )
}

/// [`serve`], deciding for each client before its connection is set up: `admit` may size the
/// connection for the parameters the client sent ([`Incoming::params`]) and hands `one` what
/// it decided, or refuses the client with a reason (which the client's error shows). `plain`:
/// an OOB endpoint keeps ibv_rc_pingpong's flow (see [`Incoming::finish_plain`]).
pub fn serve_admitting<T>(
    server: &mut Server,
    count: Option<u64>,
    plain: bool,
    mut admit: impl FnMut(&mut Incoming) -> std::result::Result<T, String>,
    mut one: impl FnMut(&mut Endpoint, T) -> Result<()>,
) -> Result<()> {
    let (mut served, mut failed) = (0u64, 0u64);
    while count.is_none_or(|c| served < c) {
        let r = server.take(None).context("accepting a connection");
        served += 1;
        let r = r.and_then(|mut inc| {
            let who = inc.peer_addr().map_or("?".into(), |a| a.to_string());
            let decided = match admit(&mut inc) {
                Ok(t) => t,
                Err(why) => {
                    inc.refuse(&why);
                    bail!("refused {who}: {why}");
                }
            };
            let ep = if plain {
                inc.finish_plain()
            } else {
                inc.finish()
            };
            let mut ep = ep.context("accepting a connection")?;
            let r = one(&mut ep, decided).with_context(|| format!("serving {who}"));
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
                rdmaxfer::xfer::file::printable(&text)
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
