//! The remote side of `rdmaxfer cp` (the hidden subcommand `cp-remote`), started over ssh by the
//! local side (`cp.rs`, `ssh.rs`).
//!
//! It listens on a port the system chooses with a fresh random token, reports both (and the
//! addresses of its RDMA devices) on standard output in one line ([`READY`]), serves the one
//! copy and exits. The token never appears in any process's arguments or environment: it goes
//! from this process's memory down the ssh channel into the local side's memory. Standard input
//! is the lifeline: when it closes (ssh died, or the local side did), the partial files are
//! removed as on SIGTERM and the process exits at once.

use std::io::{Read as _, Write as _};
use std::net::Ipv4Addr;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context as _, Result};
use rdmaxfer::verbs::{self, WaitMode};
use rdmaxfer::xfer::file::cleanup;
use rdmaxfer::xfer::session::Server;

use crate::file::{RecvArgs, SendArgs};
use crate::signals;

/// The first word of the line that reports the remote side ready.
pub const READY: &str = "rdmaxfer-cp-ready";
/// The version of that line's format.
pub const READY_VERSION: u32 = 1;
/// The exit status after the lifeline (standard input) closed.
const LIFELINE_EXIT: i32 = 129;

// `rdmaxfer cp-remote`.
// (A plain comment: the help shows `enum Command`'s text, which a doc comment would replace.)
#[derive(clap::Args, Debug)]
pub struct RemoteArgs {
    #[command(subcommand)]
    role: Role,
}

#[derive(clap::Subcommand, Debug)]
enum Role {
    /// Receive what the local side pushes (options of `recv`; --out is created if missing).
    Recv(RecvArgs),
    /// Send what the local side pulls (options of `send`; the arguments are the paths only).
    Send(SendArgs),
}

/// What [`READY`] reports.
#[derive(Debug, PartialEq, Eq)]
pub struct Ready {
    /// The port the remote side listens on (RDMA CM).
    pub port: u16,
    /// The streams the remote sender will open (1 for a receiver).
    pub streams: u16,
    /// The IPv4 addresses of the remote side's active RDMA ports, one per device first.
    pub addrs: Vec<String>,
    /// The session's token.
    pub token: String,
}

impl Ready {
    /// The line, without its end.
    pub fn line(&self) -> String {
        format!(
            "{READY} v={READY_VERSION} port={} streams={} addrs={} token={}",
            self.port,
            self.streams,
            self.addrs.join(","),
            self.token
        )
    }

    /// Parses [`line`](Self::line); `None` for another line.
    pub fn parse(line: &str) -> Option<Result<Ready>> {
        let rest = line.trim_end().strip_prefix(READY)?.strip_prefix(' ')?;
        let (mut port, mut streams, mut addrs, mut token, mut version) =
            (None, None, None, None, None);
        for field in rest.split(' ') {
            match field.split_once('=') {
                Some(("v", v)) => version = v.parse::<u32>().ok(),
                Some(("port", v)) => port = v.parse::<u16>().ok(),
                Some(("streams", v)) => streams = v.parse::<u16>().ok(),
                Some(("addrs", v)) => {
                    addrs = Some(
                        v.split(',')
                            .filter(|a| !a.is_empty())
                            .map(String::from)
                            .collect(),
                    )
                }
                Some(("token", v)) if !v.is_empty() => token = Some(v.to_string()),
                _ => {}
            }
        }
        Some(match (version, port, streams, addrs, token) {
            (Some(READY_VERSION), Some(port), Some(streams), Some(addrs), Some(token))
                if port != 0 && streams != 0 =>
            {
                Ok(Ready {
                    port,
                    streams,
                    addrs,
                    token,
                })
            }
            (Some(v), ..) if v != READY_VERSION => Err(anyhow::anyhow!(
                "the remote rdmaxfer speaks cp version {v}, this one {READY_VERSION}: install the same version on both hosts"
            )),
            _ => Err(anyhow::anyhow!("the remote side's ready line is malformed: {line:?}")),
        })
    }
}

/// A fresh token: 32 random bytes in hex.
fn fresh_token() -> String {
    (0..32)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect()
}

/// The IPv4 addresses of the active RDMA ports (their IPv4-mapped GIDs), each device's first
/// address before any device's second; `device` limits it to one device.
fn rdma_addrs(device: Option<&str>) -> Result<Vec<String>> {
    let devs = verbs::devices().context("listing RDMA devices")?;
    let mut per_dev: Vec<Vec<Ipv4Addr>> = Vec::new();
    for d in devs.iter().filter(|d| device.is_none_or(|n| n == d.name)) {
        let mut mine = Vec::new();
        for p in d.ports.iter().filter(|p| p.attr.active) {
            for g in &p.gids {
                if let Some(ip) = g.gid.ipv4() {
                    if !mine.contains(&ip) {
                        mine.push(ip);
                    }
                }
            }
        }
        per_dev.push(mine);
    }
    let mut out: Vec<String> = Vec::new();
    for k in 0..per_dev.iter().map(Vec::len).max().unwrap_or(0) {
        for ips in &per_dev {
            if let Some(ip) = ips.get(k) {
                let s = ip.to_string();
                if !out.contains(&s) {
                    out.push(s);
                }
            }
        }
    }
    Ok(out)
}

/// Reports `ready` on standard output.
fn announce(ready: &Ready) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", ready.line())
        .and_then(|()| out.flush())
        .context("reporting the port to the local side")
}

/// Ends the process when standard input closes (the local side or its ssh is gone): partial
/// files are removed first, as on SIGTERM.
fn watch_lifeline() -> Result<()> {
    std::thread::Builder::new()
        .name("lifeline".into())
        .spawn(|| {
            let mut buf = [0u8; 256];
            let mut stdin = std::io::stdin().lock();
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            let removed = cleanup::interrupt();
            // Not eprintln!: with ssh gone, stderr may be a broken pipe (that would panic
            // this thread and leave the process running).
            drop(writeln!(
                std::io::stderr(),
                "rdmaxfer: the local side is gone (its ssh channel closed); removed {removed} partial files"
            ));
            std::process::exit(LIFELINE_EXIT);
        })
        .context("starting the lifeline thread")?;
    Ok(())
}

/// `rdmaxfer cp-remote`.
pub fn run(a: RemoteArgs) -> Result<()> {
    match a.role {
        Role::Recv(a) => recv(a),
        Role::Send(a) => send(a),
    }
}

fn recv(mut a: RecvArgs) -> Result<()> {
    if !a.out.exists() {
        // As rsync: the destination directory is made (one level) when missing.
        std::fs::create_dir(&a.out)
            .with_context(|| format!("creating the destination {}", a.out.display()))?;
    }
    let token = fresh_token();
    a.token = Some(token.clone());
    a.token_file = None;
    a.once = true;
    a.conn.port = 0;
    let addrs = rdma_addrs(a.conn.device.as_deref())?;
    watch_lifeline()?;
    crate::file::recv_announcing(a, |at| {
        announce(&Ready {
            port: at.port(),
            streams: 1,
            addrs,
            token,
        })
    })
}

fn send(mut a: SendArgs) -> Result<()> {
    let token = fresh_token();
    a.token = Some(token.clone());
    a.token_file = None;
    let (entries, mut sopts) = crate::file::send_plan(&a, &a.args)?;
    sopts.token = Some(token.clone().into_bytes());
    // It listens: whoever connects first must prove it has the token before it gets a byte.
    sopts.require_receiver_proof = true;
    let addrs = rdma_addrs(a.conn.device.as_deref())?;
    let opts = sopts.endpoint_options(&a.conn.options_waiting(WaitMode::Event, 4096, 16, 0)?);
    let server = Server::bind("0.0.0.0", 0, false, &opts)
        .context("listening for the local side (rdma_cm)")?;
    watch_lifeline()?;
    signals::exit_cleanly_on_interrupt()?;
    announce(&Ready {
        port: server.local_addr().port(),
        streams: sopts.streams,
        addrs,
        token,
    })?;
    let wait = Some(Duration::from_secs_f64(a.conn.timeout));
    let server = Mutex::new(server);
    let accept = |what: &str| {
        let mut s = server.lock().unwrap_or_else(|p| p.into_inner());
        s.accept(wait).map_err(|e| {
            rdmaxfer::Error::Connection(format!("{what}: waiting for the local side: {e}"))
        })
    };
    let more = |i: u16| accept(&format!("stream {i}"));
    crate::file::send_over(
        &a,
        &entries,
        &sopts,
        || accept("stream 0").map_err(anyhow::Error::from),
        &more,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ready_line_round_trips_and_other_lines_are_not_it() {
        let r = Ready {
            port: 40123,
            streams: 2,
            addrs: vec!["198.18.0.1".into(), "198.19.0.1".into()],
            token: "ab".repeat(32),
        };
        assert_eq!(Ready::parse(&r.line()).unwrap().unwrap(), r);
        assert!(Ready::parse("listening on 0.0.0.0:1").is_none());
        assert!(
            Ready::parse(&format!("{READY} v=1 port=0 streams=1 addrs= token=x"))
                .unwrap()
                .is_err()
        );
        let newer = r.line().replace("v=1", "v=2");
        let e = Ready::parse(&newer).unwrap().unwrap_err().to_string();
        assert!(e.contains("version 2"), "{e}");
        assert_eq!(fresh_token().len(), 64);
        assert_ne!(fresh_token(), fresh_token());
    }
}
