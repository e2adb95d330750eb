//! The rdmaxfer command-line tool: parses arguments, calls the library, prints. No unsafe.
#![deny(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

/// `println!` that never panics (`println!` does when standard output is gone, as in
/// `rdmaxfer devices | head -1`): see [`out_line`].
macro_rules! outln {
    ($($t:tt)*) => {
        $crate::out_line(format_args!($($t)*))
    };
}

#[path = "rdmaxfer/args.rs"]
mod args;
#[path = "rdmaxfer/bench.rs"]
mod bench;
#[path = "rdmaxfer/conn.rs"]
mod conn;
#[path = "rdmaxfer/cp.rs"]
mod cp;
#[path = "rdmaxfer/file.rs"]
mod file;
#[path = "rdmaxfer/onesided.rs"]
mod onesided;
#[path = "rdmaxfer/pingpong.rs"]
mod pingpong;
#[path = "rdmaxfer/progress.rs"]
mod progress;
#[path = "rdmaxfer/remote.rs"]
mod remote;
#[path = "rdmaxfer/serve.rs"]
mod serve;
#[path = "rdmaxfer/signals.rs"]
mod signals;
#[path = "rdmaxfer/ssh.rs"]
mod ssh;
#[path = "rdmaxfer/summary.rs"]
mod summary;
#[path = "rdmaxfer/token.rs"]
mod token;

use anyhow::{Context as _, Result};
use clap::{CommandFactory as _, Parser, Subcommand};
use rdmaxfer::verbs::{self, DeviceInfo};
use rdmaxfer::xfer::file::printable;
use rdmaxfer::xfer::loopback::{self, LoopbackOptions};

/// The exit statuses: [`Exit`] and the signal watcher's (`signals.rs`), as `--help` shows them.
const EXIT_STATUS_HELP: &str = "\
Exit status:
  0    success: every file delivered (or skipped as already there)
  1    an error: connection, device, protocol, a file that cannot be read, ...
  2    usage: an unknown option, a bad value or options that do not go together
  23   partial transfer: the session ended, but some files were refused or failed
  24   partial transfer: the only files not sent vanished from the source after it was listed
  30   timeout: a step waited past its deadline (--timeout) for the peer
  130  interrupted by SIGINT (Ctrl-C); 143: by SIGTERM

Environment:
  RDMAXFER_LOG    what to log on stderr, as a tracing filter (e.g. debug, rdmaxfer_phase=debug,
                  rdmaxfer_wr=trace); overrides -v
  RDMAXFER_TOKEN  the token of send and recv when neither --token nor --token-file is given";

/// How the process ends; every error maps to one (see [`Exit::of`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exit {
    /// Everything done.
    Success = 0,
    /// Any error but those below.
    Failure = 1,
    /// A usage error (clap's own, or one found after parsing: `args::Usage`, e.g. --slots 0).
    Usage = 2,
    /// The session(s) ended, but some files were refused or failed (as rsync's 23).
    Partial = 23,
    /// As `Partial`, but every file not sent vanished from the source after the listing (as
    /// rsync's 24).
    Vanished = 24,
    /// A wait ran past its deadline (as rsync's 30).
    Timeout = 30,
}

impl Exit {
    /// The status of an error: the first cause in its chain that decides it.
    fn of(e: &anyhow::Error) -> Exit {
        for cause in e.chain() {
            if cause.downcast_ref::<clap::Error>().is_some()
                || cause.downcast_ref::<args::Usage>().is_some()
            {
                return Exit::Usage;
            }
            match cause.downcast_ref() {
                Some(&rdmaxfer::Error::Incomplete {
                    failed, vanished, ..
                }) => {
                    return match vanished {
                        v if v > 0 && v == failed => Exit::Vanished,
                        _ => Exit::Partial,
                    }
                }
                Some(rdmaxfer::Error::Timeout { .. } | rdmaxfer::Error::Stalled { .. }) => {
                    return Exit::Timeout
                }
                _ => {}
            }
            if let Some(r) = cause.downcast_ref::<args::RemoteStatus>() {
                // The other side of `cp`: its status, within this table.
                return match r.code {
                    Some(2) => Exit::Usage,
                    Some(23) => Exit::Partial,
                    Some(24) => Exit::Vanished,
                    Some(30) => Exit::Timeout,
                    _ => Exit::Failure,
                };
            }
        }
        Exit::Failure
    }
}

/// RDMA that just works: devices, ping-pong, one-sided READ/WRITE, benchmarks, file transfer.
#[derive(Parser, Debug)]
#[command(name = "rdmaxfer", version, about, after_help = EXIT_STATUS_HELP)]
struct Cli {
    /// Log more on stderr: -v what each step does (info), -vv its details (debug), -vvv every
    /// work request (trace). $RDMAXFER_LOG, when set, decides instead.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    cmd: Command,
}

/// Each subcommand's options are built only when it is the one given (`defer`): a start builds
/// one subcommand's arguments, not all of them.
#[derive(Subcommand, Debug)]
#[command(defer = true)]
enum Command {
    /// List RDMA devices: ports, MTU, link layer and GID table.
    Devices {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// One-process RDMA WRITE then READ round trip between two QPs on one device.
    Loopback {
        /// RDMA device (default: the first with an active port).
        #[arg(short = 'd', long = "ib-dev", visible_alias = "device")]
        device: Option<String>,
        /// GID index (default: the IPv4-mapped RoCE v2 GID).
        #[arg(
            short = 'x',
            long = "gid-index",
            visible_short_alias = 'g',
            visible_alias = "gid-idx"
        )]
        gid_index: Option<u32>,
        /// Bytes to move (e.g. 1048576, 64K, 1M).
        #[arg(short = 's', long = "size", value_parser = args::parse_mem_size, default_value_t = 1 << 20)]
        size: usize,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Ping-pong with a peer over RDMA CM or ibv_rc_pingpong's out-of-band exchange.
    Pingpong(pingpong::Args),
    /// Serve a buffer peers may RDMA WRITE and READ (one peer after another).
    Expose(onesided::ExposeArgs),
    /// RDMA WRITE into a peer's exposed buffer.
    Write(onesided::WriteArgs),
    /// RDMA READ from a peer's exposed buffer.
    Read(onesided::ReadArgs),
    /// Bandwidth of RDMA WRITE, READ or SEND, perftest-style.
    Bench(bench::Args),
    /// Send files and directories to `rdmaxfer recv`, verified by BLAKE3.
    #[command(after_help = EXIT_STATUS_HELP)]
    Send(file::SendArgs),
    /// Receive files from `rdmaxfer send` into a directory (up to --max-sessions senders at once).
    #[command(after_help = EXIT_STATUS_HELP)]
    Recv(file::RecvArgs),
    /// Copy files and trees to or from another host in one command, as scp: the other side is
    /// started over ssh (-e) and the data goes over RDMA, verified.
    #[command(
        after_help = EXIT_STATUS_HELP,
        override_usage = "rdmaxfer cp [OPTIONS] SRC... [USER@]HOST:DEST\n       rdmaxfer cp [OPTIONS] [USER@]HOST:SRC... DEST"
    )]
    Cp(cp::CpArgs),
    /// The remote side of `cp`, started by it over ssh.
    #[command(hide = true, name = "cp-remote")]
    CpRemote(remote::RemoteArgs),
    /// Print a shell completion script for SHELL on stdout.
    #[command(hide = true)]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Write the manual pages (rdmaxfer.1, rdmaxfer-SUBCOMMAND.1) into DIR.
    #[command(hide = true)]
    Man {
        /// Directory to write them to (must exist).
        dir: PathBuf,
    },
}

fn print_devices(devs: &[DeviceInfo]) {
    for d in devs {
        outln!(
            "{}: node_guid {}, {} ({}), fw {}",
            d.name,
            d.node_guid,
            d.node_type,
            d.transport,
            d.attr.fw_ver
        );
        for p in &d.ports {
            let a = &p.attr;
            let mtu = a
                .active_mtu
                .map_or("-".to_string(), |m| m.bytes().to_string());
            outln!(
                "  port {}: {}, active_mtu {}, link_layer {}, lid {}, max_msg_sz {:#x}",
                a.port,
                a.state,
                mtu,
                a.link_layer,
                a.lid,
                a.max_msg_sz
            );
            for g in &p.gids {
                outln!(
                    "    GID[{:>3}] {}  {:<8} {}",
                    g.index,
                    g.gid,
                    g.gid_type.to_string(),
                    g.netdev.as_deref().unwrap_or("-")
                );
            }
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Command::Devices { json } => {
            let devs = verbs::devices().context("listing RDMA devices")?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&devs)?);
            } else {
                print_devices(&devs);
            }
        }
        Command::Loopback {
            device,
            gid_index,
            size,
            json,
        } => {
            let opts = LoopbackOptions::default()
                .device(device)
                .gid_index(gid_index);
            let r =
                loopback::round_trip(&opts, size).context("loopback RDMA WRITE/READ round trip")?;
            if json {
                outln!("{}", serde_json::to_string(&r)?);
            } else {
                outln!("device {} GID index {}", r.device, r.gid_index);
                outln!(
                    "RDMA WRITE {} bytes in {:.1} us, blake3 {}",
                    r.bytes,
                    r.write_us,
                    r.written_hash
                );
                outln!(
                    "RDMA READ  {} bytes in {:.1} us, blake3 {}",
                    r.bytes,
                    r.read_us,
                    r.read_hash
                );
                outln!(
                    "verified: the {} bytes read back match the bytes written",
                    r.bytes
                );
            }
        }
        Command::Pingpong(a) => pingpong::run(a)?,
        Command::Expose(a) => onesided::expose(a)?,
        Command::Write(a) => onesided::write(a)?,
        Command::Read(a) => onesided::read(a)?,
        Command::Bench(a) => bench::run(a)?,
        Command::Send(a) => file::send(a)?,
        Command::Recv(a) => file::recv(a)?,
        Command::Cp(a) => cp::run(a)?,
        Command::CpRemote(a) => remote::run(a)?,
        Command::Completions { shell } => {
            // Generated whole first: clap_complete panics when its writer fails.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "rdmaxfer", &mut script);
            let text = String::from_utf8_lossy(&script);
            outln!("{}", text.trim_end_matches('\n'));
        }
        Command::Man { dir } => clap_mangen::generate_to(Cli::command(), &dir)
            .with_context(|| format!("writing manual pages to {}", dir.display()))?,
    }
    Ok(())
}

/// Set when a line could not be written to standard output for another reason than a broken
/// pipe: the command then exits 1 (its output is lost), as `ls > /dev/full` does.
static OUT_LOST: AtomicBool = AtomicBool::new(false);

/// Writes one line to standard output. A reader that went away (a broken pipe) is not this
/// command's failure: the line is dropped and the command goes on, so that a receiver serving
/// other sessions, or a transfer near its end, is not cut short by it. Any other error (a full
/// disk behind a redirection) is said once on standard error, and the command goes on to its
/// end but exits 1.
fn out_line(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    if let Err(e) = writeln!(std::io::stdout().lock(), "{args}") {
        if e.kind() != std::io::ErrorKind::BrokenPipe && !OUT_LOST.swap(true, Ordering::Relaxed) {
            let _ = writeln!(
                std::io::stderr(),
                "rdmaxfer: writing to standard output: {e}"
            );
        }
    }
}

/// Set (to anything): parse the command line, print the result and exit (host tests).
const PARSE_ONLY_ENV: &str = "RDMAXFER_PARSE_ONLY";
/// `1`: trace every work request posted and every completion polled, on every stream's QP, to
/// stderr (as `RDMAXFER_LOG=rdmaxfer_wr=trace` would; see docs/rig.md).
const TRACE_STREAMS_ENV: &str = "RDMAXFER_TRACE_STREAMS";

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut filter = match (std::env::var_os("RDMAXFER_LOG"), cli.verbose) {
        (None, 1) => tracing_subscriber::EnvFilter::new("info"),
        (None, 2) => tracing_subscriber::EnvFilter::new("debug"),
        (None, n) if n > 2 => tracing_subscriber::EnvFilter::new("trace"),
        _ => tracing_subscriber::EnvFilter::from_env("RDMAXFER_LOG"),
    };
    if std::env::var_os(TRACE_STREAMS_ENV).is_some_and(|v| v == "1") {
        // Every post and completion of every stream's QP (see `verbs::TRACE_TARGET`).
        let wr = format!("{}=trace", verbs::TRACE_TARGET);
        filter = filter.add_directive(wr.parse().expect("a valid directive"));
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    if std::env::var_os(PARSE_ONLY_ENV).is_some() {
        // Tests of the option spelling: print what was parsed, touch no device.
        outln!("{cli:?}");
        return ExitCode::SUCCESS;
    }
    let exit = match run(cli) {
        Ok(()) if OUT_LOST.load(Ordering::Relaxed) => Exit::Failure,
        Ok(()) => Exit::Success,
        Err(e) => {
            if let Some(usage) = e.downcast_ref::<clap::Error>() {
                // A usage error found after parsing (e.g. an empty $RDMAXFER_TOKEN): exit 2.
                usage.exit();
            }
            // Error texts can carry names from a file system or a peer: printed escaped.
            let text = fold_clauses(&format!("{e:#}"));
            eprintln!("rdmaxfer: error: {}", printable(&text));
            Exit::of(&e)
        }
    };
    ExitCode::from(exit as u8)
}

/// `text` ("context: cause: cause…") without the clauses that repeat an earlier one or its
/// beginning: the CLI's context and the library's message often both say what was being done
/// ("connecting to H:P (rdma_cm): connecting to H:P: rejected" names it once).
fn fold_clauses(text: &str) -> String {
    let mut kept: Vec<&str> = Vec::new();
    for clause in text.split(": ") {
        let said = kept.iter().any(|k| {
            *k == clause
                || k.strip_prefix(clause)
                    .is_some_and(|rest| rest.starts_with(' '))
        });
        if !said || clause.is_empty() {
            kept.push(clause);
        }
    }
    kept.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_their_exit_status() {
        let partial = |failed, vanished| rdmaxfer::Error::Incomplete {
            failed,
            total: 3,
            vanished,
            what: "delivered",
        };
        assert_eq!(Exit::of(&anyhow::Error::new(partial(1, 0))), Exit::Partial);
        assert_eq!(Exit::of(&anyhow::Error::new(partial(2, 2))), Exit::Vanished);
        assert_eq!(Exit::of(&anyhow::Error::new(partial(2, 1))), Exit::Partial);
        let wrapped = anyhow::Error::new(rdmaxfer::Error::Incomplete {
            failed: 1,
            total: 3,
            vanished: 0,
            what: "received",
        })
        .context("serving");
        assert_eq!(Exit::of(&wrapped), Exit::Partial);
        let usage = clap::Error::raw(clap::error::ErrorKind::InvalidValue, "bad");
        assert_eq!(Exit::of(&usage.into()), Exit::Usage);
        let after_parsing = anyhow::Error::new(args::Usage("--slots must be 1..=1024".into()));
        assert_eq!(Exit::of(&after_parsing.context("recv")), Exit::Usage);
        let timeout = anyhow::Error::new(rdmaxfer::Error::Timeout {
            what: "a completion",
            after: std::time::Duration::from_secs(10),
        });
        assert_eq!(Exit::of(&timeout.context("sending")), Exit::Timeout);
        let stalled = anyhow::Error::new(rdmaxfer::Error::Stalled {
            what: "the receiver's verdict",
            after: std::time::Duration::from_secs(10),
            stream: 1,
            peer: "198.18.0.1:18515".into(),
        });
        assert_eq!(Exit::of(&stalled.context("sending")), Exit::Timeout);
        let other = rdmaxfer::Error::Connection("the peer disconnected".into());
        assert_eq!(Exit::of(&other.into()), Exit::Failure);
        assert_eq!(Exit::of(&anyhow::anyhow!("x")), Exit::Failure);
        assert_eq!(
            [
                Exit::Success,
                Exit::Failure,
                Exit::Usage,
                Exit::Partial,
                Exit::Timeout
            ]
            .map(|e| e as u8),
            [0, 1, 2, 23, 30]
        );
    }

    #[test]
    fn the_help_lists_every_exit_status() {
        for help in [
            Cli::command().render_long_help().to_string(),
            Cli::command()
                .find_subcommand_mut("send")
                .expect("send")
                .render_long_help()
                .to_string(),
        ] {
            for code in [0, 1, 2, 23, 30, 130] {
                assert!(
                    help.lines()
                        .any(|l| l.trim_start().starts_with(&format!("{code} "))),
                    "{code}: {help}"
                );
            }
            assert!(help.contains("143"), "{help}");
        }
        Cli::command().debug_assert();
    }

    #[test]
    fn a_clause_said_twice_is_said_once() {
        assert_eq!(
            fold_clauses(
                "connecting to 198.18.0.1:7609 (rdma_cm): connection: connecting to \
                 198.18.0.1:7609: connection rejected: nothing is listening"
            ),
            "connecting to 198.18.0.1:7609 (rdma_cm): connection: connection rejected: \
             nothing is listening"
        );
        assert_eq!(fold_clauses("a: b: a: c"), "a: b: c");
        // A clause that only begins like an earlier one, mid-word, stays.
        assert_eq!(fold_clauses("reading x: read"), "reading x: read");
        assert_eq!(fold_clauses("[fe80::1]:7: x"), "[fe80::1]:7: x");
    }
}
