//! `rdmaxfer cp`: one command copies to or from another host, as scp and rsync do. The other
//! side is started over ssh (`-e/--rsh`, `ssh.rs`) as `rdmaxfer cp-remote` (`remote.rs`); it
//! listens on a port the system chooses with a fresh token and reports both over the ssh
//! channel; the data goes over RDMA with the verified file protocol of `send` and `recv`.
//!
//! Push (`cp SRC... [USER@]HOST:DEST`): the remote side receives, this side sends and prints.
//! Pull (`cp [USER@]HOST:SRC... DEST`): the remote side sends (and prints, relayed here), this
//! side connects each stream and receives.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use clap::Parser as _;
use rdmaxfer::verbs::WaitMode;
use rdmaxfer::xfer::endpoint::{self, Endpoint};
use rdmaxfer::xfer::file::ring_budget::RingBudget;
use rdmaxfer::xfer::file::{self, Role, SessionReport, StreamRegistry};

use crate::args::{parse_size, usage, usage_of, RemoteStatus};
use crate::file::{RecvArgs, SendArgs};
use crate::ssh::{split_command, Remote};
use crate::{progress, signals};

// Arguments of `rdmaxfer cp`.
// (A plain comment: the help shows `enum Command`'s text, which a doc comment would replace.)
#[derive(clap::Args, Debug)]
pub struct CpArgs {
    /// What to copy, then where: `SRC... [USER@]HOST:DEST` pushes, `[USER@]HOST:SRC... DEST`
    /// pulls. DEST is a directory (made if missing, one level); a name with a colon before any
    /// slash is a remote one (write `./a:b` for a local file named `a:b`).
    #[arg(required = true, num_args = 1.., value_name = "SRC... DEST")]
    args: Vec<String>,
    /// The remote shell, as rsync's -e: a command and its options (e.g. "ssh -p 2222").
    #[arg(short = 'e', long = "rsh", value_name = "CMD", default_value = "ssh")]
    rsh: String,
    /// Where rdmaxfer is on the remote host (as rsync's --rsync-path).
    #[arg(long, value_name = "PATH", default_value = "rdmaxfer")]
    remote_path: String,
    /// The remote side's RDMA address(es), comma-separated, one per rail (default: what the
    /// remote side finds on its active RDMA ports).
    #[arg(long, value_name = "ADDR", value_delimiter = ',')]
    rdma_addr: Vec<String>,
    /// Replace files that exist and differ (the remote receiver is told to allow it).
    #[arg(long)]
    force: bool,
    /// Skip files that are newer on the receiving side; replace older ones.
    #[arg(long)]
    update: bool,
    /// Skip every file that exists on the receiving side, identical or not.
    #[arg(long)]
    ignore_existing: bool,
    /// Compare existing files by BLAKE3 checksum instead of size and modification time.
    #[arg(long)]
    checksum: bool,
    /// Keep partial files of a failed copy and continue them on the next run.
    #[arg(long)]
    resume: bool,
    /// Print what would be copied, skipped, refused or deleted, and change nothing (either
    /// side).
    #[arg(short = 'n', long)]
    dry_run: bool,
    /// Delete what the destination has in the copied directories and the source does not
    /// (as rsync's --delete; never outside the copied tree; names --exclude excludes stay).
    /// `cp` lets the receiving side allow it (recv --allow-delete).
    #[arg(long)]
    delete: bool,
    /// Do not copy what PATTERN matches (as send --exclude; rsync's rules).
    #[arg(long, value_name = "PATTERN")]
    exclude: Vec<String>,
    /// Copy what PATTERN matches even if a later --exclude matches it.
    #[arg(long, value_name = "PATTERN")]
    include: Vec<String>,
    /// Also copy the paths listed in FILE (a local file; one path per line).
    #[arg(long, value_name = "FILE")]
    files_from: Option<PathBuf>,
    /// At most RATE bytes of file data per second (e.g. 50M).
    #[arg(long, value_name = "RATE", value_parser = parse_size)]
    bwlimit: Option<u64>,
    /// Connections (streams) carrying the copy (default as send's).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    streams: Option<u16>,
    /// Chunk size: bytes per RDMA WRITE.
    #[arg(short = 's', long, value_name = "CHUNK")]
    chunk: Option<String>,
    /// Chunks in flight at most.
    #[arg(long)]
    slots: Option<u32>,
    /// Chunk verification: xxh3 or blake3.
    #[arg(long)]
    verify: Option<String>,
    /// In a tree, copy the files symlinks point to instead of the symlinks.
    #[arg(long)]
    copy_links: bool,
    /// RDMA device(s) of this side (comma-separated: one per rail).
    #[arg(short = 'd', long = "ib-dev")]
    device: Option<String>,
    /// Print one JSON summary on stdout (and no progress).
    #[arg(long)]
    json: bool,
    /// Print nothing but errors.
    #[arg(short, long, conflicts_with = "json")]
    quiet: bool,
    /// After the summary, statistics as rsync's --stats.
    #[arg(long, conflicts_with_all = ["json", "quiet"])]
    stats: bool,
    /// Deadline in seconds for each step (as send's); ssh's start is given three.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    timeout: f64,
}

/// One operand: local, or `[USER@]HOST:PATH`.
#[derive(Debug, PartialEq, Eq)]
enum Place {
    Local(String),
    Remote {
        /// `USER@HOST` or `HOST`, as ssh takes it.
        login: String,
        host: String,
        path: String,
    },
}

impl Place {
    /// scp's rule: remote when a colon comes before any slash (`[v6addr]:path` too).
    fn of(s: &str) -> Place {
        let colon = if let Some(rest) = s
            .strip_prefix('[')
            .or_else(|| s.split_once("@[").map(|(_, r)| r))
        {
            rest.find("]:").map(|i| s.len() - rest.len() + i + 1)
        } else {
            s.find(':').filter(|&i| !s[..i].contains('/'))
        };
        match colon {
            Some(i) if i > 0 => {
                let login = s[..i].replace(['[', ']'], "");
                let host = login.rsplit('@').next().unwrap_or(&login).to_string();
                let path = match &s[i + 1..] {
                    "" => ".".to_string(),
                    p => p.to_string(),
                };
                Place::Remote { login, host, path }
            }
            _ => Place::Local(s.to_string()),
        }
    }
}

impl CpArgs {
    /// The options both sending sides take (`send` here, `cp-remote send` there).
    fn send_flags(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        let flags = [
            (self.force, "--force"),
            (self.update, "--update"),
            (self.ignore_existing, "--ignore-existing"),
            (self.checksum, "--checksum"),
            (self.resume, "--resume"),
            (self.dry_run, "--dry-run"),
            (self.delete, "--delete"),
            (self.copy_links, "--copy-links"),
        ];
        v.extend(flags.iter().filter(|f| f.0).map(|f| f.1.to_string()));
        for (name, val) in [
            ("--chunk", self.chunk.clone()),
            ("--slots", self.slots.map(|s| s.to_string())),
            ("--verify", self.verify.clone()),
            ("--streams", self.streams.map(|s| s.to_string())),
            ("--bwlimit", self.bwlimit.map(|s| s.to_string())),
        ] {
            if let Some(val) = val {
                v.extend([name.to_string(), val]);
            }
        }
        for (inc, pat) in self.filter_order() {
            v.extend([if inc { "--include" } else { "--exclude" }.to_string(), pat]);
        }
        v.extend(["--timeout".to_string(), self.timeout.to_string()]);
        v
    }

    /// The include and exclude rules in the order given (as `send` finds them).
    fn filter_order(&self) -> Vec<(bool, String)> {
        let mut order = Vec::new();
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            for (flag, inc) in [("--include", true), ("--exclude", false)] {
                if arg == flag {
                    order.extend(args.next().map(|v| (inc, v)));
                } else if let Some(v) = arg.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
                    order.push((inc, v.to_string()));
                }
            }
        }
        let given = |inc: bool| {
            order
                .iter()
                .filter(move |o| o.0 == inc)
                .map(|o| &o.1)
                .cloned()
        };
        if given(true).eq(self.include.iter().cloned())
            && given(false).eq(self.exclude.iter().cloned())
        {
            return order;
        }
        let mut o: Vec<_> = self.include.iter().map(|p| (true, p.clone())).collect();
        o.extend(self.exclude.iter().map(|p| (false, p.clone())));
        o
    }

    /// The receiving side's options.
    fn recv_flags(&self, out: &str) -> Vec<String> {
        let mut v = vec!["--out".to_string(), out.to_string()];
        if self.force || self.update {
            v.push("--force".into());
        }
        if self.resume {
            v.push("--resume".into());
        }
        if self.delete {
            v.push("--allow-delete".into());
        }
        v.extend(["--timeout".to_string(), self.timeout.to_string()]);
        v
    }

    /// How long ssh and the remote side may take to start, and to end once the transfer has:
    /// its summary, the device's teardown and ssh's own (more than one step deadline on a
    /// loaded host: 5 s was once too short in the emulated guest).
    fn start_wait(&self) -> Duration {
        Duration::from_secs_f64(self.timeout.max(10.0) * 3.0)
    }
}

/// Parses `argv` (after the program name and subcommand) as `sub`'s arguments.
fn parse_as<T: clap::Args>(sub: &str, argv: Vec<String>) -> Result<T> {
    #[derive(clap::Parser)]
    struct One<T: clap::Args> {
        #[command(flatten)]
        a: T,
    }
    let mut all: Vec<OsString> = vec![format!("rdmaxfer {sub}").into()];
    all.extend(argv.into_iter().map(OsString::from));
    One::<T>::try_parse_from(all).map(|o| o.a).map_err(|e| {
        usage_of(
            "",
            e.to_string()
                .lines()
                .next()
                .unwrap_or("")
                .trim_start_matches("error: "),
        )
    })
}

/// `rdmaxfer cp`.
pub fn run(a: CpArgs) -> Result<()> {
    if !(a.timeout.is_finite() && a.timeout > 0.0 && a.timeout < 1e9) {
        usage!("--timeout must be a positive number of seconds");
    }
    let rsh = split_command(&a.rsh).map_err(|e| usage_of("", e))?;
    let (dest, srcs) = a.args.split_last().expect("clap requires an argument");
    if srcs.is_empty() && a.files_from.is_none() {
        usage!("give SRC... and then DEST (one of them [USER@]HOST:PATH)");
    }
    let srcs: Vec<Place> = srcs.iter().map(|s| Place::of(s)).collect();
    match Place::of(dest) {
        Place::Remote { login, host, path } => {
            let mut local = Vec::new();
            for s in srcs {
                match s {
                    Place::Local(p) => local.push(p),
                    Place::Remote { .. } => usage!(
                        "both sides are remote: one of SRC... and DEST must be local (run cp on one of the hosts)"
                    ),
                }
            }
            push(&a, &rsh, &login, &host, &path, &local)
        }
        Place::Local(dest) => {
            let mut from: Option<(String, String)> = None;
            let mut paths = Vec::new();
            for s in srcs {
                match s {
                    Place::Local(p) => usage!(
                        "{p:?} and {dest:?} are both local: one side must be [USER@]HOST:PATH (for a local copy use cp or rsync)"
                    ),
                    Place::Remote { login, host, path } => {
                        if from.as_ref().is_some_and(|f| f.0 != login) {
                            usage!("the sources are on two hosts ({} and {login}): pull from one at a time", from.as_ref().map_or("", |f| &f.0));
                        }
                        from = Some((login, host));
                        paths.push(path);
                    }
                }
            }
            let (login, host) = from.expect("at least one source");
            pull(&a, &rsh, &login, &host, &paths, &dest)
        }
    }
}

/// Test-only hook (feature `test-hooks`): the token goes to the file
/// `$RDMAXFER_TEST_CP_TOKEN_OUT` names, so a test can look for it in every process's arguments
/// and environment.
fn token_hook(token: &str) {
    if cfg!(feature = "test-hooks") {
        if let Some(p) = std::env::var_os("RDMAXFER_TEST_CP_TOKEN_OUT") {
            if let Err(e) = std::fs::write(&p, token) {
                tracing::warn!("test hook: writing the token: {e}");
            }
        }
    }
}

/// The addresses to reach the remote side at: `--rdma-addr`, else what it reported.
fn addrs(a: &CpArgs, ready: &crate::remote::Ready, host: &str) -> Result<Vec<String>> {
    let addrs = if a.rdma_addr.is_empty() {
        ready.addrs.clone()
    } else {
        a.rdma_addr.clone()
    };
    if addrs.is_empty() {
        anyhow::bail!(
            "the remote side on {host} found no IPv4 address on an active RDMA port: give --rdma-addr ADDR"
        );
    }
    Ok(addrs)
}

/// The copy's status: this side's result, else the remote side's exit status.
fn combined(host: &str, r: Result<()>, remote: Option<std::process::ExitStatus>) -> Result<()> {
    r?;
    match remote {
        Some(st) if st.success() => Ok(()),
        Some(st) => Err(anyhow::Error::new(RemoteStatus {
            code: st.code(),
            what: format!("the remote side on {host} failed ({st})"),
        })),
        None => Err(anyhow::Error::new(RemoteStatus {
            code: None,
            what: format!("the remote side on {host} did not end in time"),
        })),
    }
}

fn push(
    a: &CpArgs,
    rsh: &[String],
    login: &str,
    host: &str,
    dest: &str,
    srcs: &[String],
) -> Result<()> {
    let mut argv = a.send_flags();
    argv.extend(a.device.iter().flat_map(|d| ["-d".to_string(), d.clone()]));
    argv.extend(
        a.files_from
            .iter()
            .flat_map(|f| ["--files-from".to_string(), f.display().to_string()]),
    );
    for (flag, on) in [
        ("--json", a.json),
        ("--quiet", a.quiet),
        ("--stats", a.stats),
    ] {
        if on {
            argv.push(flag.into());
        }
    }
    argv.push("--".into());
    argv.extend(srcs.iter().cloned());
    argv.push("remote".into());
    let mut sa: SendArgs = parse_as("cp", argv)?;
    let (entries, mut sopts) = crate::file::send_plan(&sa, srcs)?;
    let mut remote_cmd = vec![
        a.remote_path.clone(),
        "cp-remote".into(),
        "recv".into(),
        "--quiet".into(),
    ];
    remote_cmd.extend(a.recv_flags(dest));
    if sopts.streams > file::DEFAULT_MAX_STREAMS {
        remote_cmd.extend(["--max-streams".to_string(), sopts.streams.to_string()]);
    }
    let mut remote = Remote::start(rsh, login, host, &remote_cmd)?;
    let ready = remote.ready(a.start_wait())?;
    token_hook(&ready.token);
    let mut addrs = addrs(a, &ready, host)?;
    if a.rdma_addr.is_empty() {
        // What the remote side found: one rail per stream at most.
        addrs.truncate(usize::from(sopts.streams.max(1)));
    }
    let hosts: Vec<(String, u16)> = addrs.into_iter().map(|ip| (ip, ready.port)).collect();
    sopts.token = Some(ready.token.into_bytes());
    sopts.require_receiver_proof = true;
    sa.token = None;
    let r = crate::file::send_to(sa, &hosts, &entries, &sopts, None);
    let st = remote.finish(a.start_wait());
    combined(host, r, st)
}

fn pull(
    a: &CpArgs,
    rsh: &[String],
    login: &str,
    host: &str,
    paths: &[String],
    dest: &str,
) -> Result<()> {
    let out = std::path::Path::new(dest);
    if !out.exists() {
        std::fs::create_dir(out).with_context(|| format!("creating the destination {dest}"))?;
    }
    let mut paths = paths.to_vec();
    if let Some(list) = &a.files_from {
        let text = std::fs::read_to_string(list)
            .map_err(|e| usage_of(&format!("--files-from {}", list.display()), e))?;
        paths.extend(
            text.lines()
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(String::from),
        );
    }
    let mut local = vec!["--quiet".to_string()];
    local.extend(a.recv_flags(dest));
    local.extend(a.device.iter().flat_map(|d| ["-d".to_string(), d.clone()]));
    let mut ra: RecvArgs = parse_as("cp", local)?;
    let mut remote_cmd = vec![a.remote_path.clone(), "cp-remote".into(), "send".into()];
    remote_cmd.extend(a.send_flags());
    for (flag, on) in [
        ("--json", a.json),
        ("--quiet", a.quiet),
        ("--stats", a.stats),
    ] {
        if on {
            remote_cmd.push(flag.into());
        }
    }
    remote_cmd.push("--".into());
    remote_cmd.extend(paths);
    let mut remote = Remote::start(rsh, login, host, &remote_cmd)?;
    let ready = remote.ready(a.start_wait())?;
    token_hook(&ready.token);
    let addrs = addrs(a, &ready, host)?;
    ra.token = Some(ready.token.clone());
    ra.max_streams = ready.streams;
    let r = receive_dialing(ra, &addrs, ready.port, ready.streams);
    let st = remote.finish(a.start_wait());
    combined(host, r, st)
}

/// This side receives, connecting each of `streams` streams to `addrs` (in turn) at `port`:
/// the remote sender listens.
fn receive_dialing(ra: RecvArgs, addrs: &[String], port: u16, streams: u16) -> Result<()> {
    let (ropts, max_memory, floor) = crate::file::receiver_plan(&ra)?;
    let rings = RingBudget::new(max_memory, floor, u64::from(streams));
    let opts = ropts.endpoint_options(&ra.conn.options_waiting(WaitMode::Event, 4096, 16, 0)?);
    signals::exit_cleanly_on_interrupt()?;
    let registry = StreamRegistry::new(streams);
    let dial = |i: u16| -> Result<Endpoint> {
        let ip = &addrs[usize::from(i) % addrs.len()];
        let to = format!("{ip}:{port}");
        endpoint::resolve_host(ip, port)
            .and_then(|dst| Endpoint::connect_cm(dst, &opts))
            .with_context(|| format!("stream {i}: connecting to {to} (rdma_cm)"))
    };
    let show = progress::Show::pick(ra.quiet, ra.json);
    let report = Mutex::new(SessionReport::default());
    let start = Instant::now();
    let serve = |i: u16, mut ep: Endpoint| -> Result<()> {
        let mut lease = rings.reserve().context("staging memory")?;
        let role = Role {
            streams: Some(&registry),
            join_only: i > 0,
        };
        let mut mine = SessionReport::default();
        let mut lines = progress::recv_observer(show);
        let r = file::receive_streams(&mut ep, &ropts, &mut lease, role, &mut mine, &mut lines);
        report.lock().unwrap_or_else(|p| p.into_inner()).merge(mine);
        if let Err(e) = ep.close() {
            tracing::debug!("closing stream {i}: {e}");
        }
        r.map_err(anyhow::Error::from)
    };
    let first = dial(0)?;
    let results: Vec<Result<()>> = std::thread::scope(|sc| {
        let serve = &serve;
        let mut handles = vec![sc.spawn(move || serve(0, first))];
        for i in 1..streams {
            let ep = match dial(i) {
                Ok(ep) => ep,
                Err(e) => {
                    handles.push(sc.spawn(move || Err(e)));
                    break;
                }
            };
            handles.push(sc.spawn(move || serve(i, ep)));
        }
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a receiving thread panicked")))
            })
            .collect()
    });
    tracing::debug!(
        "received in {:.3} s: {} entries",
        start.elapsed().as_secs_f64(),
        report
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .file_count()
    );
    results.into_iter().collect::<Result<Vec<()>>>().map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(login: &str, host: &str, path: &str) -> Place {
        Place::Remote {
            login: login.into(),
            host: host.into(),
            path: path.into(),
        }
    }

    #[test]
    fn operands_are_remote_when_a_colon_comes_before_any_slash() {
        assert_eq!(Place::of("h:/tmp/x"), remote("h", "h", "/tmp/x"));
        assert_eq!(Place::of("root@h:d"), remote("root@h", "h", "d"));
        assert_eq!(Place::of("h:"), remote("h", "h", "."));
        assert_eq!(Place::of("[fe80::1]:x"), remote("fe80::1", "fe80::1", "x"));
        assert_eq!(Place::of("u@[::1]:x"), remote("u@::1", "::1", "x"));
        assert_eq!(Place::of("./a:b"), Place::Local("./a:b".into()));
        assert_eq!(Place::of("dir/a:b"), Place::Local("dir/a:b".into()));
        assert_eq!(Place::of("plain"), Place::Local("plain".into()));
        assert_eq!(Place::of(":x"), Place::Local(":x".into()));
    }
}
