//! The rdmaxfer command-line tool: parses arguments, calls the library, prints. No unsafe.
#![deny(unsafe_code)]

use std::process::ExitCode;

#[path = "rdmaxfer/args.rs"]
mod args;
#[path = "rdmaxfer/bench.rs"]
mod bench;
#[path = "rdmaxfer/conn.rs"]
mod conn;
#[path = "rdmaxfer/file.rs"]
mod file;
#[path = "rdmaxfer/onesided.rs"]
mod onesided;
#[path = "rdmaxfer/pingpong.rs"]
mod pingpong;
#[path = "rdmaxfer/serve.rs"]
mod serve;
#[path = "rdmaxfer/signals.rs"]
mod signals;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use rdmaxfer::verbs::{self, DeviceInfo};
use rdmaxfer::xfer::file::names::printable;
use rdmaxfer::xfer::loopback::{self, LoopbackOptions};

/// RDMA that just works: devices, ping-pong, one-sided READ/WRITE, benchmarks, file transfer.
#[derive(Parser, Debug)]
#[command(name = "rdmaxfer", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Command,
}

#[derive(Subcommand, Debug)]
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
    Send(file::SendArgs),
    /// Receive files from `rdmaxfer send` into a directory (up to --max-sessions senders at once).
    Recv(file::RecvArgs),
}

fn print_devices(devs: &[DeviceInfo]) {
    for d in devs {
        println!(
            "{}: node_guid {}, {} ({}), fw {}",
            d.name, d.node_guid, d.node_type, d.transport, d.attr.fw_ver
        );
        for p in &d.ports {
            let a = &p.attr;
            let mtu = a
                .active_mtu
                .map_or("-".to_string(), |m| m.bytes().to_string());
            println!(
                "  port {}: {}, active_mtu {}, link_layer {}, lid {}, max_msg_sz {:#x}",
                a.port, a.state, mtu, a.link_layer, a.lid, a.max_msg_sz
            );
            for g in &p.gids {
                println!(
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
                println!("{}", serde_json::to_string_pretty(&devs)?);
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
            let opts = LoopbackOptions {
                device,
                gid_index,
                ..Default::default()
            };
            let r =
                loopback::round_trip(&opts, size).context("loopback RDMA WRITE/READ round trip")?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!("device {} GID index {}", r.device, r.gid_index);
                println!(
                    "RDMA WRITE {} bytes in {:.1} us, blake3 {}",
                    r.bytes, r.write_us, r.written_hash
                );
                println!(
                    "RDMA READ  {} bytes in {:.1} us, blake3 {}",
                    r.bytes, r.read_us, r.read_hash
                );
                println!(
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
    }
    Ok(())
}

/// Set (to anything): parse the command line, print the result and exit (host tests).
const PARSE_ONLY_ENV: &str = "RDMAXFER_PARSE_ONLY";

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("RDMAXFER_LOG"))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    if std::env::var_os(PARSE_ONLY_ENV).is_some() {
        // Tests of the option spelling: print what was parsed, touch no device.
        println!("{cli:?}");
        return ExitCode::SUCCESS;
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(usage) = e.downcast_ref::<clap::Error>() {
                // A usage error found after parsing (e.g. an empty $RDMAXFER_TOKEN): exit 2.
                usage.exit();
            }
            // Error texts can carry names from a file system or a peer: printed escaped.
            let text = format!("{e:#}");
            eprintln!("rdmaxfer: error: {}", printable(&text));
            ExitCode::FAILURE
        }
    }
}
