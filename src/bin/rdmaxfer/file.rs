//! `rdmaxfer send` and `rdmaxfer recv`: verified file transfer (library: `xfer::file`).

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use rdmaxfer::verbs::WaitMode;
use rdmaxfer::xfer::endpoint::{self, Dial, Endpoint, EndpointOptions};
use rdmaxfer::xfer::file::budget::{
    Budgets, DEFAULT_IDLE, DEFAULT_MAX_REFUSALS, DEFAULT_MIN_RATE, DEFAULT_RATE_WINDOW,
};
use rdmaxfer::xfer::file::printable;
use rdmaxfer::xfer::file::ring_budget::{self, RingBudget, RingLease};
use rdmaxfer::xfer::file::send::filter::Filter;
use rdmaxfer::xfer::file::source;
use rdmaxfer::xfer::file::{
    self, Progress, ReceiverOptions, Role, SenderOptions, SessionReport, StreamRegistry,
    DEFAULT_CHUNK, DEFAULT_MAX_STREAMS, DEFAULT_SLOTS,
};

use crate::args::{parse_size, usage, usage_of};
use crate::conn::ConnArgs;
use crate::progress::{self, SendDisplay, Show};
use crate::serve::{serve_concurrent, Limits};
use crate::signals;
use crate::summary::{print_dry_summary, print_summary, stats_text, summary};
use crate::token::{parse_token, token, warn_without_token};

// Arguments of `rdmaxfer recv`.
// (A plain comment: the help shows `enum Command`'s text, which a doc comment would replace.)
#[derive(clap::Args, Debug)]
pub struct RecvArgs {
    /// Directory the files go to (must exist).
    #[arg(long)]
    pub(crate) out: PathBuf,
    /// Address to listen on (default, or a bare --listen: all addresses).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_value = "0.0.0.0", default_missing_value = "0.0.0.0")]
    pub(crate) listen: String,
    /// Serve one sender, then exit (non-zero if anything failed); others meanwhile are busy.
    #[arg(long)]
    pub(crate) once: bool,
    /// Require senders to prove they know this token (default: $RDMAXFER_TOKEN; not empty). It
    /// shows in the process list: prefer --token-file.
    #[arg(long, value_parser = parse_token)]
    pub(crate) token: Option<String>,
    /// Read the token from FILE's first line (mode 600 or stricter), kept off the command line.
    #[arg(long, value_name = "FILE", conflicts_with = "token")]
    pub(crate) token_file: Option<PathBuf>,
    /// Refuse files larger than this (e.g. 10G).
    #[arg(long, value_parser = parse_size)]
    pub(crate) max_size: Option<u64>,
    /// Allow senders to replace existing entries that differ (they ask with send --force or
    /// --update); without it such files are refused, and identical ones are skipped anyway.
    #[arg(long)]
    pub(crate) force: bool,
    /// Keep partial files and continue them when the sender resumes.
    #[arg(long)]
    pub(crate) resume: bool,
    /// Let senders delete what they do not have in the directories they send (send --delete):
    /// only inside those directories, never through a symlink; without it they are refused.
    #[arg(long)]
    pub(crate) allow_delete: bool,
    /// Accept only this chunk verification (blake3 or xxh3); default: what the sender asks.
    #[arg(long)]
    pub(crate) verify: Option<rdmaxfer::xfer::file::Algo>,
    /// Staging ring slots (chunks the sender may have in flight).
    #[arg(long, default_value_t = DEFAULT_SLOTS)]
    pub(crate) slots: u32,
    /// End a session without progress (no data received, no file committed) for this many
    /// seconds, each stream of a session on its own; 0: never.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_IDLE.as_secs())]
    pub(crate) idle_timeout: u64,
    /// End a session that moves fewer bytes per second than this, averaged over
    /// --rate-window (a committed file counts as 64 KiB); 0: no floor.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value_t = DEFAULT_MIN_RATE)]
    pub(crate) min_rate: u64,
    /// The window, in seconds, over which --min-rate is averaged.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_RATE_WINDOW.as_secs())]
    pub(crate) rate_window: u64,
    /// End a session after more than this many refused or failed files.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_REFUSALS)]
    pub(crate) max_refusals: u32,
    /// Print one JSON summary per connection on stdout (one line each).
    #[arg(long)]
    pub(crate) json: bool,
    /// Print nothing but errors (no per-file lines, no summaries).
    #[arg(short, long, conflicts_with = "json")]
    pub(crate) quiet: bool,
    /// After each connection's summary, its statistics as rsync's --stats: entries by
    /// outcome, bytes and time (--json has the same figures)
    #[arg(long, conflicts_with_all = ["json", "quiet"])]
    pub(crate) stats: bool,
    /// Streams (connections) one sender may open for a transfer (send --streams); a sender
    /// asking for more gets this many. Each is served like a sender (--max-sessions,
    /// --max-memory).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_STREAMS, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub(crate) max_streams: u16,
    /// Senders served at once; one more is refused as busy (it may retry).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(crate) max_sessions: u32,
    /// Staging memory of all sessions together (e.g. 256M; default: 256 MiB, at most a quarter
    /// of RAM). Sessions get smaller ring slots when it runs short; a sender for which not even
    /// the smallest ring is left is refused as busy.
    #[arg(long, value_parser = parse_size)]
    pub(crate) max_memory: Option<u64>,
    #[command(flatten)]
    pub(crate) conn: ConnArgs,
}

/// Default `--max-memory`: 256 MiB (the default ring of 16 × 1 MiB slots plus its copy
/// buffers is 20 MiB, so the default 8 sessions fit with room for larger chunks), but at most a
/// quarter of the RAM, as the rings are pinned.
fn default_max_memory() -> u64 {
    const DEFAULT: u64 = 256 << 20;
    let ram = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        let kib = m.lines().find_map(|l| l.strip_prefix("MemTotal:"))?;
        kib.trim().trim_end_matches("kB").trim().parse::<u64>().ok()
    });
    ram.and_then(|kib| kib.checked_mul(1024))
        .map_or(DEFAULT, |b| DEFAULT.min(b / 4))
}

// Arguments of `rdmaxfer send`.
// (A plain comment: the help shows `enum Command`'s text, which a doc comment would replace.)
#[derive(clap::Args, Debug)]
pub struct SendArgs {
    /// Files and directories to send, then the receiver as HOST or HOST:PORT (with
    /// --files-from, the PATHs may be left out).
    #[arg(required = true, num_args = 1.., value_name = "PATH... HOST[:PORT]")]
    pub(crate) args: Vec<String>,
    /// Do not send what PATTERN matches (rsync's rules: `*` within a name, `**` across `/`,
    /// `?`, `[a-z]`; a trailing `/` for directories only, a leading `/` anchors at the top of
    /// the names sent, e.g. `tree/…`). Repeatable; with --include, the first matching rule
    /// decides, in the order given.
    #[arg(long, value_name = "PATTERN")]
    pub(crate) exclude: Vec<String>,
    /// Send what PATTERN matches even if a later --exclude matches it (see --exclude).
    #[arg(long, value_name = "PATTERN")]
    pub(crate) include: Vec<String>,
    /// At most RATE bytes of file data per second, all streams together (e.g. 50M; K, M, G
    /// are binary). The receiver's --min-rate still applies: stay above it.
    #[arg(long, value_name = "RATE", value_parser = parse_size)]
    pub(crate) bwlimit: Option<u64>,
    /// Also send the paths listed in FILE, one per line (`-` reads standard input; empty lines
    /// and lines starting with `#` are ignored).
    #[arg(long, value_name = "FILE")]
    pub(crate) files_from: Option<PathBuf>,
    /// Token the receiver requires (default: $RDMAXFER_TOKEN; not empty).
    #[arg(long, value_parser = parse_token)]
    pub(crate) token: Option<String>,
    /// Read the token from FILE's first line (mode 600 or stricter), kept off the command line.
    #[arg(long, value_name = "FILE", conflicts_with = "token")]
    pub(crate) token_file: Option<PathBuf>,
    /// Send nothing unless the receiver proves it knows the token too (in its CHALLENGE): a
    /// receiver without it, or with another token, gets not a byte (`cp` always does this).
    #[arg(long)]
    pub(crate) require_receiver_token: bool,
    /// Chunk size: bytes per RDMA WRITE (the receiver may lower it).
    #[arg(short = 's', long, visible_alias = "size", value_parser = parse_size, default_value_t = u64::from(DEFAULT_CHUNK))]
    pub(crate) chunk: u64,
    /// Chunks in flight at most.
    #[arg(long, default_value_t = DEFAULT_SLOTS)]
    pub(crate) slots: u32,
    /// Continue partial files the receiver kept (it must run with --resume).
    #[arg(long)]
    pub(crate) resume: bool,
    /// Print what would be sent (created or replaced), skipped or refused, and send nothing:
    /// the receiver answers for every entry and changes nothing either. One stream.
    #[arg(short = 'n', long)]
    pub(crate) dry_run: bool,
    /// After sending, delete on the receiver what is not here in each directory sent (as
    /// rsync --delete): names --exclude excludes are kept, nothing is deleted in a directory
    /// where an entry failed, and the receiver must allow it (recv --allow-delete). With
    /// --dry-run, prints what would be deleted.
    #[arg(long)]
    pub(crate) delete: bool,
    /// Connections (streams) carrying the transfer: a tree's files are spread over them and
    /// files of 8 MiB or more are striped across them. With several devices (-d a,b) or
    /// receiver addresses (HOST1,HOST2: one per rail), streams are placed on them in turn.
    /// The receiver may grant fewer (its --max-streams). Default: 1 for a transfer with no
    /// file of 8 MiB or more and less than 8 MiB in two or more files; otherwise the CPUs,
    /// at most 2 per device and at most 4 (2 streams beat 1 even on one emulated device:
    /// see "Streams" in docs/file-protocol.md). --json reports the streams used.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    pub(crate) streams: Option<u16>,
    /// Replace files that exist on the receiver and differ (the receiver must allow it with
    /// recv --force). Identical files are skipped either way.
    #[arg(long)]
    pub(crate) force: bool,
    /// Skip every file that exists on the receiver, identical or not.
    #[arg(long)]
    pub(crate) ignore_existing: bool,
    /// Skip files that are newer on the receiver; replace older ones (the receiver must allow
    /// it with recv --force).
    #[arg(long)]
    pub(crate) update: bool,
    /// Compare existing files by BLAKE3 checksum (both sides read them) instead of size and
    /// modification time.
    #[arg(long)]
    pub(crate) checksum: bool,
    /// How each chunk is verified end to end: xxh3 (XXH3-128, fast, against corruption) or
    /// blake3 (BLAKE3-256, cryptographic). The receiver may insist on one (recv --verify).
    #[arg(long, default_value_t = rdmaxfer::xfer::file::Algo::DEFAULT)]
    pub(crate) verify: rdmaxfer::xfer::file::Algo,
    /// In a tree, send the files symlinks point to instead of the symlinks.
    #[arg(long)]
    pub(crate) copy_links: bool,
    /// Print one JSON summary on stdout (and no progress).
    #[arg(long)]
    pub(crate) json: bool,
    /// Print nothing but errors (no progress, no per-file lines, no summary).
    #[arg(short, long, conflicts_with = "json")]
    pub(crate) quiet: bool,
    /// After the summary, statistics as rsync's --stats: entries by outcome, bytes, times and
    /// rates, streams (--json has the same figures)
    #[arg(long, conflicts_with_all = ["json", "quiet"])]
    pub(crate) stats: bool,
    #[command(flatten)]
    pub(crate) conn: ConnArgs,
}

/// `rdmaxfer recv`.
pub fn recv(a: RecvArgs) -> Result<()> {
    recv_announcing(a, |_| Ok(()))
}

/// `recv`, telling `ready` where it listens once it does (`cp`'s receiving side reports the
/// port the system chose).
pub(crate) fn recv_announcing(
    a: RecvArgs,
    ready: impl FnOnce(std::net::SocketAddr) -> Result<()>,
) -> Result<()> {
    let (ropts, max_memory, floor) = receiver_plan(&a)?;
    if ropts.token.is_none() {
        warn_without_token(&a.listen, &a.out);
    }
    let rings = RingBudget::new(max_memory, floor, u64::from(a.max_sessions));
    crate::serve::raise_fd_limit(a.max_sessions);
    let opts = ropts.endpoint_options(&a.conn.options_waiting(WaitMode::Event, 4096, 16, 0)?);
    signals::exit_cleanly_on_interrupt()?;
    let show = Show::pick(a.quiet, a.json);
    let mut server = a.conn.listen(&a.listen, &opts)?;
    ready(server.local_addr())?;
    serve_sessions(&a, &mut server, &ropts, &rings, max_memory, show)
}

/// The receiver's options from `a`, its memory budget and the smallest ring, with the checks
/// of their values (usage errors).
pub(crate) fn receiver_plan(a: &RecvArgs) -> Result<(ReceiverOptions, u64, u64)> {
    let meta = std::fs::metadata(&a.out).map_err(|e| {
        usage_of(
            &format!("--out {}", a.out.display()),
            format!("{e}: create the directory first"),
        )
    })?;
    if !meta.is_dir() {
        usage!("--out {} is not a directory", a.out.display());
    }
    if a.slots == 0 || a.slots > file::MAX_SLOTS {
        usage!("--slots must be 1..={}", file::MAX_SLOTS);
    }
    #[cfg_attr(not(feature = "test-hooks"), allow(unused_mut))]
    let mut ropts = ReceiverOptions::new(a.out.clone())
        .token(token(&a.token, &a.token_file)?)
        .max_size(a.max_size)
        .force(a.force)
        .resume(a.resume)
        .allow_delete(a.allow_delete)
        .slots(a.slots)
        .verify(a.verify)
        .budgets(
            Budgets::default()
                .idle((a.idle_timeout > 0).then(|| Duration::from_secs(a.idle_timeout)))
                .min_rate(a.min_rate)
                .rate_window(Duration::from_secs(a.rate_window))
                .max_refusals(Some(a.max_refusals)),
        );
    // Test-only hold: this stripe is answered after the others have ended.
    #[cfg(feature = "test-hooks")]
    {
        ropts.hooks = rdmaxfer::xfer::file::RecvHooks {
            hold_stripe: test_hook("RDMAXFER_TEST_RECV_HOLD_STRIPE"),
            break_streams: test_pairs("RDMAXFER_TEST_RECV_BREAK_STREAMS"),
        };
    }
    if a.min_rate > 0 && a.rate_window == 0 {
        usage!("--rate-window must be positive with --min-rate");
    }
    let max_memory = a.max_memory.unwrap_or_else(default_max_memory);
    let floor = ring_budget::ring_bytes(a.slots, ring_budget::MIN_SLOT).context("--slots")?;
    if max_memory < floor {
        usage!(
            "--max-memory {max_memory} is below the smallest ring of one session \
             ({} slots of {} bytes plus {} copy buffers = {floor} bytes)",
            a.slots,
            ring_budget::MIN_SLOT,
            ring_budget::COPY_BUFS
        );
    }
    Ok((ropts, max_memory, floor))
}

/// Serves senders on `server` as `recv` does.
fn serve_sessions(
    a: &RecvArgs,
    server: &mut rdmaxfer::xfer::session::Server,
    ropts: &ReceiverOptions,
    rings: &std::sync::Arc<RingBudget>,
    max_memory: u64,
    show: Show,
) -> Result<()> {
    let limits = Limits::recv(a.max_sessions, a.once);
    // A session's streams are each a session slot: a session takes at most a peer's share.
    let share = u16::try_from(limits.per_peer).unwrap_or(u16::MAX);
    let streams = StreamRegistry::new(a.max_streams.min(share));
    let admit = |_join_only: bool| {
        rings
            .reserve()
            .map(|lease| (lease, _join_only))
            .ok_or_else(|| {
                format!("its staging memory (--max-memory {max_memory}) is taken by other sessions")
            })
    };
    let refuse = |ep: &mut _, why: &str| {
        if let Err(e) = ring_budget::refuse_busy(ep, why) {
            tracing::debug!("telling a sender the receiver is busy: {e}");
        }
    };
    let serve_one = |id: u64, ep: &mut Endpoint, (mut lease, join_only): (RingLease, bool)| {
        let start = Instant::now();
        let mut report = SessionReport::default();
        let mut lines = progress::recv_observer(show);
        let role = Role {
            streams: Some(&streams),
            join_only,
        };
        let r = file::receive_streams(ep, ropts, &mut lease, role, &mut report, &mut lines)
            .map_err(anyhow::Error::from);
        let secs = start.elapsed().as_secs_f64();
        if a.json {
            let mut v = summary(&report, secs, r.as_ref().err());
            v["session"] = id.into();
            if let Some(p) = ep.peer().addr {
                v["peer"] = p.to_string().into();
            }
            // One line per session: outln! holds stdout for the whole line.
            outln!("{v}");
        } else if show != Show::Quiet && (r.is_ok() || report.file_count() > 0) {
            // A session that failed before any file has nothing to say about files.
            print_summary(&report, secs, "received");
            if a.stats {
                // One block per connection (sessions served at once do not interleave).
                outln!("{}", stats_text(&report, secs, None, "received"));
            }
        }
        r
    };
    serve_concurrent(server, &limits, admit, refuse, serve_one)
}

fn split_host(s: &str, default_port: u16) -> Result<(String, u16)> {
    if let Some(rest) = s.strip_prefix('[') {
        // [v6]:port
        let (h, p) = rest
            .split_once(']')
            .with_context(|| format!("{s:?}: missing ']'"))?;
        let port = match p.strip_prefix(':') {
            Some(p) => p
                .parse()
                .map_err(|e| usage_of(&format!("{s:?}: {p:?} is not a port number"), e))?,
            None => default_port,
        };
        return Ok((h.to_string(), port));
    }
    match s.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => Ok((
            h.to_string(),
            p.parse()
                .map_err(|e| usage_of(&format!("{s:?}: {p:?} is not a port number"), e))?,
        )),
        _ => Ok((s.to_string(), default_port)),
    }
}

/// `--files-from FILE` (`-`: standard input): one path per line; empty lines and `#` comments
/// are skipped.
fn files_from(list: &std::path::Path) -> Result<Vec<PathBuf>> {
    use std::io::Read as _;
    use std::os::unix::ffi::OsStrExt as _;
    let mut bytes = Vec::new();
    let shown = printable(&list.display().to_string()).into_owned();
    let read = if list.as_os_str() == "-" {
        std::io::stdin().read_to_end(&mut bytes).map(drop)
    } else {
        std::fs::File::open(list).and_then(|mut f| f.read_to_end(&mut bytes).map(drop))
    };
    read.map_err(|e| usage_of(&format!("--files-from {shown}"), e))?;
    Ok(bytes
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !l.is_empty() && !l.starts_with(b"#"))
        .map(|l| PathBuf::from(std::ffi::OsStr::from_bytes(l)))
        .collect())
}

/// The include and exclude rules in the order they were given on the command line (clap keeps
/// each option's values apart, so the order comes from the arguments themselves).
fn filter_rules(include: &[String], exclude: &[String]) -> Result<Filter> {
    let mut order: Vec<(bool, String)> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        for (flag, inc) in [("--include", true), ("--exclude", false)] {
            if arg == flag {
                if let Some(v) = args.next() {
                    order.push((inc, v));
                }
            } else if let Some(v) = arg.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
                order.push((inc, v.to_string()));
            }
        }
    }
    let same = |inc: bool, given: &[String]| {
        order
            .iter()
            .filter(|o| o.0 == inc)
            .map(|o| &o.1)
            .eq(given.iter())
    };
    if !(same(true, include) && same(false, exclude)) {
        // Not found as given (e.g. a test calling `send` directly): includes first.
        order = include.iter().map(|p| (true, p.clone())).collect();
        order.extend(exclude.iter().map(|p| (false, p.clone())));
    }
    let mut f = Filter::new();
    for (inc, p) in order {
        let r = if inc { f.include(&p) } else { f.exclude(&p) };
        r.map_err(|e| usage_of("", e))?;
    }
    Ok(f)
}

/// `rdmaxfer send`.
pub fn send(a: SendArgs) -> Result<()> {
    tracing::debug!(target: file::PHASE_TARGET, "send: arguments parsed");
    let (dest, paths) = a.args.split_last().expect("clap requires an argument");
    let hosts = dest
        .split(',')
        .map(|h| split_host(h, a.conn.port))
        .collect::<Result<Vec<_>>>()?;
    let early = dial_early(&a, &hosts);
    let (entries, sopts) = send_plan(&a, paths)?;
    send_to(a, &hosts, &entries, &sopts, early)
}

/// Stream 0's connection made ready up to its connect request (route, QP: `Dial`) on a thread
/// of its own while the files are listed, so that a tree's walk and the set-up overlap; with
/// the options it was made with (`Debug`), used only if the stream's turn out the same.
pub(crate) struct EarlyDial(std::thread::JoinHandle<(String, Result<Dial>)>);

/// [`EarlyDial`] for `send` over rdma_cm (`None` over OOB).
fn dial_early(a: &SendArgs, hosts: &[(String, u16)]) -> Option<EarlyDial> {
    let (host, port) = hosts.first()?.clone();
    let device = a.conn.devices().into_iter().next();
    let c = ConnArgs {
        device: device.or_else(|| a.conn.device.clone()),
        port,
        ..a.conn.clone()
    };
    let base = c.options_waiting(WaitMode::Event, 4096, 16, 0).ok()?;
    let opts = SenderOptions::default()
        .slots(a.slots)
        .endpoint_options(&base);
    (!a.conn.oob).then(|| {
        EarlyDial(std::thread::spawn(move || {
            let dial = endpoint::resolve_host(&host, port)
                .and_then(|dst| Endpoint::dial_cm(dst, &opts))
                .with_context(|| format!("connecting to {host}:{port} (rdma_cm)"));
            (format!("{opts:?}"), dial)
        }))
    })
}

/// What `send` (and `cp`'s sending side) sends, and how: the walk of `paths` (and
/// --files-from) and the options, with the checks of their values (usage errors).
pub(crate) fn send_plan(
    a: &SendArgs,
    paths: &[String],
) -> Result<(Vec<source::SourceEntry>, SenderOptions)> {
    let mut roots: Vec<PathBuf> = paths.iter().map(PathBuf::from).collect();
    if let Some(list) = &a.files_from {
        roots.extend(files_from(list)?);
    }
    if roots.is_empty() {
        usage!("give PATH... before HOST (or --files-from FILE)");
    }
    let filter = filter_rules(&a.include, &a.exclude)?;
    let walk = source::WalkOptions::default()
        .copy_links(a.copy_links)
        .filter(filter.clone());
    let entries = source::walk_with(&roots, walk).context("listing the files to send")?;
    let chunk = u32::try_from(a.chunk)
        .ok()
        .filter(|&c| (file::MIN_CHUNK..=file::MAX_CHUNK).contains(&c))
        .ok_or_else(|| {
            usage_of(
                "",
                format!(
                    "--chunk must be {}..={} bytes",
                    file::MIN_CHUNK,
                    file::MAX_CHUNK
                ),
            )
        })?;
    let devices = a.conn.devices().len();
    let streams = a
        .streams
        .unwrap_or_else(|| file::default_streams(&entries, devices));
    #[cfg_attr(not(feature = "test-hooks"), allow(unused_mut))]
    let mut sopts = SenderOptions::default()
        .token(token(&a.token, &a.token_file)?)
        .chunk(chunk)
        .slots(a.slots)
        .resume(a.resume)
        .force(a.force)
        .ignore_existing(a.ignore_existing)
        .update(a.update)
        .checksum(a.checksum)
        .verify(a.verify)
        .streams(streams)
        .bwlimit(a.bwlimit)
        .dry_run(a.dry_run)
        .delete(a.delete)
        .filter(filter)
        .require_receiver_proof(a.require_receiver_token);
    // Test-only (feature `test-hooks`): faults, a held stripe, a stream that starts late.
    #[cfg(feature = "test-hooks")]
    {
        sopts.hooks = rdmaxfer::xfer::file::SendHooks {
            corrupt_chunk: test_hook("RDMAXFER_TEST_CORRUPT_CHUNK"),
            corrupt_once: test_hook("RDMAXFER_TEST_CORRUPT_ONCE"),
            corrupt_name: test_hook("RDMAXFER_TEST_CORRUPT_NAME"),
            replay_chunk: test_hook("RDMAXFER_TEST_REPLAY_CHUNK"),
            hold_stripe: test_hook("RDMAXFER_TEST_HOLD_STRIPE"),
            lag_stream: test_hook("RDMAXFER_TEST_LAG_STREAM"),
            break_streams: test_pairs("RDMAXFER_TEST_BREAK_STREAMS"),
        };
    }
    if a.bwlimit == Some(0) {
        usage!("--bwlimit must be at least 1 byte per second");
    }
    if sopts.require_receiver_proof && sopts.token.is_none() {
        usage!(
            "--require-receiver-token needs a token (--token-file FILE or ${}): the receiver proves it knows that one",
            crate::token::TOKEN_ENV
        );
    }
    if a.slots == 0 || a.slots > file::MAX_SLOTS {
        usage!("--slots must be 1..={}", file::MAX_SLOTS);
    }
    Ok((entries, sopts))
}

/// Sends `entries` to the receiver at `hosts` (one per rail), as `send` does.
pub(crate) fn send_to(
    a: SendArgs,
    hosts: &[(String, u16)],
    entries: &[source::SourceEntry],
    sopts: &SenderOptions,
    early: Option<EarlyDial>,
) -> Result<()> {
    let streams = sopts.streams;
    // Stream i goes over device i mod the devices given, to receiver address i mod those given.
    let rails: Vec<ConnArgs> = match a.conn.devices() {
        d if d.is_empty() => vec![a.conn.clone()],
        d => d
            .into_iter()
            .map(|d| ConnArgs {
                device: Some(d),
                ..a.conn.clone()
            })
            .collect(),
    };
    if a.streams == Some(1) && (rails.len() > 1 || hosts.len() > 1) {
        eprintln!(
            "rdmaxfer: note: one stream uses the first device and address only (see --streams)"
        );
    }
    let place = |i: usize| -> Result<(ConnArgs, String, EndpointOptions)> {
        let mut c = rails[i % rails.len()].clone();
        let (host, port) = &hosts[i % hosts.len()];
        c.port = *port;
        let opts = sopts.endpoint_options(&c.options_waiting(WaitMode::Event, 4096, 16, 0)?);
        Ok((c, host.clone(), opts))
    };
    let (conn, host, opts) = place(0)?;
    signals::exit_cleanly_on_interrupt()?;
    std::thread::scope(|sc| {
        // Streams 1.. are made ready (route, QP) on their own threads while stream 0 connects
        // and opens the session: they send their connect requests only once it is open (the
        // receiver takes a connection that does not open a session only to join one).
        let dials: Vec<Mutex<Option<_>>> = (1..streams)
            .map(|i| {
                (!a.conn.oob).then(|| {
                    let place = &place;
                    sc.spawn(move || -> Result<(Dial, String)> {
                        let (c, host, opts) = place(usize::from(i))?;
                        let to = format!("{host}:{}", c.port);
                        let dial = endpoint::resolve_host(&host, c.port)
                            .and_then(|dst| rail_reaches(i, &c, dst).map(|()| dst))
                            .and_then(|dst| Endpoint::dial_cm(dst, &opts))
                            .with_context(|| format!("connecting to {to} (rdma_cm)"))?;
                        Ok((dial, to))
                    })
                })
            })
            .map(Mutex::new)
            .collect();
        let more = |i: u16| -> rdmaxfer::Result<Endpoint> {
            let ready = usize::from(i)
                .checked_sub(1)
                .and_then(|k| dials.get(k))
                .and_then(|d| d.lock().unwrap_or_else(|p| p.into_inner()).take());
            let ep = match ready {
                Some(h) => h
                    .join()
                    .unwrap_or_else(|_| bail!("the set-up thread panicked"))
                    .and_then(|(dial, to)| {
                        dial.connect()
                            .with_context(|| format!("connecting to {to} (rdma_cm)"))
                    }),
                None => place(usize::from(i)).and_then(|(c, host, opts)| {
                    let dst = endpoint::resolve_host(&host, c.port)?;
                    rail_reaches(i, &c, dst)?;
                    c.connect(&host, &opts)
                }),
            };
            ep.map_err(|e| rdmaxfer::Error::Connection(format!("stream {i}: {e:#}")))
        };
        tracing::debug!(target: file::PHASE_TARGET, "stream 0: connecting");
        let first = || -> Result<Endpoint> {
            if let Some(EarlyDial(h)) = early {
                let (made_with, dial) = h
                    .join()
                    .unwrap_or_else(|_| (String::new(), Err(anyhow::anyhow!("panicked"))));
                if made_with == format!("{opts:?}") {
                    return dial?
                        .connect()
                        .with_context(|| format!("connecting to {host}:{} (rdma_cm)", conn.port));
                }
            }
            conn.connect(&host, &opts)
        };
        send_over(&a, entries, sopts, first, &more)
    })
}

/// Stream `i`'s rail (`c.device`) can reach `dst`, as far as the routing table says; if not,
/// the stream is dropped at once, with a message, instead of waiting out its connect request.
fn rail_reaches(i: u16, c: &ConnArgs, dst: std::net::SocketAddr) -> rdmaxfer::Result<()> {
    let Some(why) = c
        .device
        .as_deref()
        .and_then(|d| endpoint::rail_cannot_reach(d, dst.ip()))
    else {
        return Ok(());
    };
    let dev = c.device.as_deref().unwrap_or_default();
    eprintln!(
        "rdmaxfer: stream {i} is not used: {why}; give one receiver address per device \
         (HOST1,HOST2 with -d {dev},…) to use this rail"
    );
    Err(rdmaxfer::Error::Connection(format!(
        "stream {i}: {dev} cannot reach {dst}: {why}"
    )))
}

/// Sends `entries` on the endpoint `first` makes (stream 0, which opens the session) and those
/// `more` makes (streams 1..), showing progress and the summary as `send` does.
pub(crate) fn send_over(
    a: &SendArgs,
    entries: &[source::SourceEntry],
    sopts: &SenderOptions,
    first: impl FnOnce() -> Result<Endpoint>,
    more: &(dyn Fn(u16) -> rdmaxfer::Result<Endpoint> + Sync),
) -> Result<()> {
    let total: u64 = entries
        .iter()
        .filter(|e| e.kind == source::SourceKind::File)
        .filter_map(|e| e.listed.map(|m| m.size))
        .sum();
    let show = Show::pick(a.quiet, a.json);
    let start = Instant::now();
    let mut report = SessionReport::default();
    let mut connected = false;
    let mut used = 1u16;
    let r = first().and_then(|mut ep| {
            connected = true;
            tracing::debug!(target: file::PHASE_TARGET, "stream 0: connected");
            let mut display = SendDisplay::new(show, entries.len(), total);
            let mut events = |p: Progress<'_>| {
                if let Progress::Streams { asked, granted } = p {
                    used = granted;
                    // Only a count the user asked for is worth a note; the default adapts.
                    if granted < asked && !a.quiet && a.streams.is_some() {
                        eprintln!(
                            "rdmaxfer: the receiver allows {granted} streams per transfer (its --max-streams, or its --max-sessions less one); using {granted} of the {asked} asked for"
                        );
                    }
                }
                display.event(p)
            };
            let r = file::send_streams_into(&mut ep, more, entries, sopts, &mut report, &mut events)
                .map_err(anyhow::Error::from);
            display.finish();
            if let Err(e) = ep.close() {
                tracing::debug!("closing: {e}");
            }
            tracing::debug!(target: file::PHASE_TARGET, "stream 0: closed");
            r
        });
    let secs = start.elapsed().as_secs_f64();
    if a.json {
        let mut j = summary(&report, secs, r.as_ref().err());
        j["streams"] = serde_json::json!(used);
        outln!("{j}");
    } else if show != Show::Quiet && connected {
        // Without a connection there is nothing to say about files: the error says it all.
        if a.dry_run {
            print_dry_summary(&report);
        } else {
            print_summary(&report, secs, "sent");
        }
        if a.stats {
            outln!("{}", stats_text(&report, secs, Some(used), "sent"));
        }
    }
    r
}

/// A test-only hook's value from the environment variable `name` (feature `test-hooks`).
#[cfg(feature = "test-hooks")]
fn test_hook<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// A test hook's pairs of numbers, `A:B,C:D` (streams and chunks of `*_BREAK_STREAMS`).
#[cfg(feature = "test-hooks")]
fn test_pairs(name: &str) -> Vec<(u16, u64)> {
    let v = std::env::var(name).unwrap_or_default();
    v.split(',')
        .filter_map(|p| {
            let (a, b) = p.split_once(':')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .collect()
}
