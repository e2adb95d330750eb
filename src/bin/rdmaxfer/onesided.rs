//! `rdmaxfer expose`, `write` and `read`: one-sided RDMA against a peer's exposed buffer.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result};
use rdmaxfer::verbs::RemoteAccess;
use rdmaxfer::xfer::endpoint::Endpoint;
use rdmaxfer::xfer::onesided::{self, preview, Exposure};
use rdmaxfer::xfer::rdma_rw;

use crate::args::{parse_mem_size, parse_size, usage, usage_of};
use crate::conn::{serve, ConnArgs};

// Serve one buffer that peers may RDMA WRITE and/or READ, to peers one after another.
// (A plain comment: the help shows `enum Command`'s text, which a doc comment would replace.)
#[derive(clap::Args, Debug)]
pub struct ExposeArgs {
    /// Listen on ADDR (a bare --listen: all addresses).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "0.0.0.0", required = true)]
    listen: Option<String>,
    /// Buffer size (e.g. 4096, 64K, 1M; kept across peers).
    #[arg(short = 's', long, value_parser = parse_mem_size)]
    size: usize,
    /// What peers may do: rw, r or w.
    #[arg(long, default_value = "rw")]
    access: String,
    /// Serve one peer, then exit.
    #[arg(long)]
    once: bool,
    /// Save the buffer to FILE after each peer (so it holds the final buffer at exit).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Print one JSON object per peer instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: ConnArgs,
}

// RDMA WRITE data into a peer's exposed buffer.
// (A plain comment: the help shows `enum Command`'s text, which a doc comment would replace.)
#[derive(clap::Args, Debug)]
pub struct WriteArgs {
    /// The `rdmaxfer expose` server.
    host: String,
    /// Offset in the peer's buffer.
    #[arg(long, default_value_t = 0)]
    offset: u64,
    /// The bytes to write (UTF-8).
    #[arg(long, conflicts_with_all = ["file", "size"], required_unless_present_any = ["file", "size"])]
    data: Option<String>,
    /// A file whose contents to write.
    #[arg(long, conflicts_with = "size")]
    file: Option<PathBuf>,
    /// Write this many bytes of a test pattern (e.g. 64K) instead of --data or --file.
    #[arg(short = 's', long, value_parser = parse_size)]
    size: Option<u64>,
    #[command(flatten)]
    conn: ConnArgs,
}

// RDMA READ bytes from a peer's exposed buffer (to stdout, or --out FILE).
// (A plain comment: the help shows `enum Command`'s text, which a doc comment would replace.)
#[derive(clap::Args, Debug)]
pub struct ReadArgs {
    /// The `rdmaxfer expose` server.
    host: String,
    /// Offset in the peer's buffer.
    #[arg(long, default_value_t = 0)]
    offset: u64,
    /// Bytes to read (e.g. 4096, 64K).
    #[arg(short = 's', long, visible_alias = "size", value_parser = parse_size)]
    len: u64,
    /// Write the bytes to FILE instead of stdout.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    #[command(flatten)]
    conn: ConnArgs,
}

/// Writes `data` to `path` through a temporary file and a rename, so it is never half-written.
fn save(path: &Path, data: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .context("--out needs a file name")?
        .to_string_lossy();
    let tmp = dir.join(format!(".{name}.rdmaxfer-tmp"));
    let r = std::fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(data)?;
        f.sync_all()
    });
    if let Err(e) = r.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("saving {}", path.display()));
    }
    Ok(())
}

/// Runs `rdmaxfer expose`.
pub fn expose(a: ExposeArgs) -> Result<()> {
    if a.size == 0 {
        usage!("--size must be at least 1");
    }
    let access: RemoteAccess = a.access.parse().map_err(|e| usage_of("--access", e))?;
    let opts = a.conn.options(4096, 4, 16)?;
    let mut server = a
        .conn
        .listen(a.listen.as_deref().unwrap_or("0.0.0.0"), &opts)?;
    let mut content = vec![0u8; a.size];
    let count = a.once.then_some(1);
    serve(&mut server, count, |ep| {
        let r = onesided::serve_session(ep, &mut content, access)?;
        if a.json {
            outln!("{}", serde_json::to_string(&r)?);
        } else {
            let who = r.peer.as_deref().unwrap_or("?");
            let status = match (&r.error, r.ok) {
                (Some(e), _) => format!("ended early: {e}"),
                (None, true) => "done".into(),
                (None, false) => "reported a failure".into(),
            };
            outln!(
                "peer {who}: wrote {} bytes, read {} bytes, {status}",
                r.written,
                r.read
            );
            if r.changed.is_empty() {
                outln!("  buffer unchanged");
            }
            for &(s, e) in r.changed.iter().take(8) {
                outln!(
                    "  changed [{s}, {e}) ({} bytes): {}",
                    e - s,
                    preview(&content[s..e], 64)
                );
            }
            if r.changed.len() > 8 {
                outln!("  … and {} more changed ranges", r.changed.len() - 8);
            }
        }
        std::io::stdout().flush()?;
        if let Some(out) = &a.out {
            save(out, &content)?;
        }
        // A peer that failed or vanished was reported above; the server carries on.
        Ok(())
    })
}

fn timeout(c: &ConnArgs) -> Duration {
    Duration::from_secs_f64(c.timeout)
}

/// Refuses a range outside the peer's buffer before anything is posted. As the C client does
/// (`rdmaxfer_expose_report`'s `ok`), the session then ends as a success: the peer's buffer was
/// never touched, so its report has nothing to count; the error is ours alone.
fn check_range(ep: &mut Endpoint, x: &Exposure, offset: u64, len: u64) -> Result<()> {
    let Err(e) = rdma_rw::check_bounds(&x.region, offset, len) else {
        return Ok(());
    };
    if let Err(f) = onesided::end_session(ep, true, 0, 0) {
        tracing::debug!("ending the session after a refused range: {f}");
    }
    Err(e.into())
}

/// Runs `rdmaxfer write`.
pub fn write(a: WriteArgs) -> Result<()> {
    let data = match (&a.data, &a.file, a.size) {
        (Some(d), _, _) => d.as_bytes().to_vec(),
        (None, Some(f), _) => {
            std::fs::read(f).with_context(|| format!("reading {}", f.display()))?
        }
        (None, None, Some(n)) => {
            let n = usize::try_from(n).context("-s is too large for this machine")?;
            (0..n).map(|i| (i % 251) as u8).collect()
        }
        (None, None, None) => usage!("give --data, --file or -s"),
    };
    if data.is_empty() {
        usage!("nothing to write: --data, --file or -s gives no bytes");
    }
    let mut ep = a.conn.connect(&a.host, &a.conn.options(4096, 4, 16)?)?;
    let x = onesided::open_session(&mut ep).context("opening the session")?;
    let what = || format!("writing {} bytes at offset {}", data.len(), a.offset);
    check_range(&mut ep, &x, a.offset, data.len() as u64).with_context(what)?;
    onesided::write_session(&mut ep, &x, a.offset, &data, timeout(&a.conn)).with_context(what)?;
    ep.close().context("closing the connection")?;
    eprintln!(
        "wrote {} bytes at offset {} of the peer's {}-byte buffer",
        data.len(),
        a.offset,
        x.region.len
    );
    Ok(())
}

/// Runs `rdmaxfer read`.
pub fn read(a: ReadArgs) -> Result<()> {
    if a.len == 0 {
        usage!("-s (--len) must be at least 1");
    }
    let mut ep = a.conn.connect(&a.host, &a.conn.options(4096, 4, 16)?)?;
    let x = onesided::open_session(&mut ep).context("opening the session")?;
    let what = || format!("reading {} bytes at offset {}", a.len, a.offset);
    check_range(&mut ep, &x, a.offset, a.len).with_context(what)?;
    let data = onesided::read_session(&mut ep, &x, a.offset, a.len, timeout(&a.conn))
        .with_context(what)?;
    ep.close().context("closing the connection")?;
    match &a.out {
        Some(p) => save(p, &data)?,
        None => std::io::stdout().write_all(&data)?,
    }
    eprintln!(
        "read {} bytes at offset {} of the peer's {}-byte buffer",
        data.len(),
        a.offset,
        x.region.len
    );
    Ok(())
}
