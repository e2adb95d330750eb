//! The sender's side, independent of RDMA: listing the files to send ([`walk`]) and reading
//! one in chunks at their offsets, from any thread, each chunk hashed (`Source`, crate-private).

use std::fs::{File, FileType, Metadata as Meta};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::filter::Filter;
use crate::xfer::file::digest::{self, Algo, Chunks, Layout};
use crate::xfer::file::names::{check_name, sanitize, RelPath};
use crate::xfer::file::proto::{Digest, Reason, MAX_TARGET_LEN};
use crate::{Error, Result};

/// What an entry is on the sender.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SourceKind {
    /// A regular file: its data is sent.
    File,
    /// A directory with nothing sent below it (so that the receiver creates it).
    Dir,
    /// A symlink (not followed): its target text is sent.
    Symlink(String),
    /// Not sent, for this reason (a socket, a device, a dangling link with `--copy-links`, …):
    /// reported as skipped.
    Skipped(String),
    /// Cannot be sent under its name (not UTF-8, or a name the receiver would refuse: a
    /// backslash, a control character, …): reported as failed, and the rest of the tree is
    /// sent. `shown` is the name as printed (escaped); the entry's `name` is a stand-in that
    /// keeps the list sorted and is never sent.
    Unsendable {
        /// The name, printable (escapes for what is not UTF-8 or not printable).
        shown: String,
        /// Why it cannot be sent.
        why: String,
    },
}

/// An entry to send: the name the receiver gets, where it is here and what it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceEntry {
    /// Relative name sent in HELLO.
    pub name: RelPath,
    /// Local path.
    pub path: PathBuf,
    /// What it is.
    pub kind: SourceKind,
    /// A file's size, mode and mtime when it was listed (`None` for other kinds, or a file
    /// whose stat failed): what HELLO announces and what plans count, one stat per file.
    pub listed: Option<Listed>,
}

/// A file's metadata as the walk found it (see [`SourceEntry::listed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listed {
    /// Size in bytes.
    pub size: u64,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Modification time: seconds since the epoch.
    pub mtime_sec: i64,
    /// Modification time: nanoseconds (below 10⁹).
    pub mtime_nsec: u32,
}

impl Listed {
    /// The fields of `m`.
    pub(crate) fn of(m: &std::fs::Metadata) -> Listed {
        Listed {
            size: m.len(),
            mode: m.mode() & 0o7777,
            mtime_sec: m.mtime(),
            mtime_nsec: m.mtime_nsec().clamp(0, 999_999_999) as u32,
        }
    }
}

/// How [`walk_with`] treats symlinks inside a tree, and which entries it lists.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct WalkOptions {
    /// Send what a symlink points to instead of the link (`send --copy-links`); a dangling
    /// link is skipped, a directory reached twice (a loop) is skipped.
    pub copy_links: bool,
    /// `send --exclude/--include`: entries (roots too) the rules exclude are not listed, and
    /// an excluded directory is not entered.
    pub filter: Filter,
}

fn invalid(msg: String) -> Error {
    Error::InvalidArgument(msg)
}

impl WalkOptions {
    setters! { copy_links: bool, filter: Filter }
}

/// [`walk_with`] with default options: symlinks inside a tree are sent as symlinks.
pub fn walk(roots: &[PathBuf]) -> Result<Vec<SourceEntry>> {
    walk_with(roots, WalkOptions::default())
}

/// Lists what to send under `roots`, sorted by name. A file root is sent under its file name;
/// a directory root under `<its name>/<relative path>` (like `cp -r`), and one without a name
/// (`.`, `..`) as what it holds, at the top; a root itself may be a symlink (followed). Inside a
/// tree, symlinks are listed as symlinks (or, with `copy_links`, what they point to),
/// directories with nothing sent below them as directories (so empty ones arrive), special
/// files (sockets, FIFOs, devices) as skipped entries with the reason, and names that cannot be
/// sent (not UTF-8, a backslash, a control character, …) as [`SourceKind::Unsendable`]: one
/// odd name never stops a tree. Refuses a root whose own name cannot be sent, and the same name
/// from two roots.
pub fn walk_with(roots: &[PathBuf], opts: WalkOptions) -> Result<Vec<SourceEntry>> {
    let mut out = Vec::new();
    for root in roots {
        // One root's names are unique (a duplicate is only possible between roots, and is
        // refused below): its part is sorted in place, with no scratch memory.
        let start = out.len();
        walk_root(&opts, root, &mut out)?;
        out[start..].sort_unstable_by(|a, b| a.name.cmp(&b.name));
    }
    if roots.len() > 1 {
        // Sorted runs, merged; stable, so that of two entries of one name the first root's
        // comes first in the error below.
        out.sort_by(|a, b| a.name.cmp(&b.name));
    }
    if let Some(w) = out.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(invalid(format!(
            "{} and {} would both be sent as {}",
            w[0].path.display(),
            w[1].path.display(),
            w[0].name
        )));
    }
    // The list lives as long as the session: without the growth's spare room.
    out.shrink_to_fit();
    Ok(out)
}

/// Lists `root` (see [`walk_with`]) at the end of `out`.
fn walk_root(opts: &WalkOptions, root: &Path, out: &mut Vec<SourceEntry>) -> Result<()> {
    let meta = std::fs::metadata(root)
        .map_err(|e| Error::io(format!("stat {}", root.display()), e))?;
    let Some(base) = root.file_name() else {
        // `.`, `..`, `/`: what is in the directory, at the top (as `cp -r DIR/. DEST`).
        if !meta.is_dir() {
            return Err(invalid(format!(
                "{}: has no file name to send it as",
                root.display()
            )));
        }
        walk_tree(opts, root, "", (meta.dev(), meta.ino()), out)?;
        return Ok(());
    };
    let base = base
        .to_str()
        .ok_or_else(|| invalid(format!("{}: name is not UTF-8", root.display())))?;
    if !opts.filter.allows(base, meta.is_dir()) {
        return Ok(());
    }
    if meta.is_file() {
        out.push(entry(base.to_string(), root.into(), SourceKind::File, Some(meta))?);
    } else if meta.is_dir() {
        if walk_tree(opts, root, base, (meta.dev(), meta.ino()), out)? == 0 {
            out.push(entry(base.to_string(), root.into(), SourceKind::Dir, None)?);
        }
    } else {
        return Err(invalid(format!(
            "{}: not a file or directory",
            root.display()
        )));
    }
    Ok(())
}

fn entry(name: String, path: PathBuf, kind: SourceKind, meta: Option<Meta>) -> Result<SourceEntry> {
    let name =
        sanitize(&name).map_err(|e| invalid(format!("{}: cannot be sent: {e}", path.display())))?;
    let listed = match kind {
        // One stat per file: the walk's, else one following a symlink as opening does.
        SourceKind::File => meta
            .or_else(|| std::fs::metadata(&path).ok())
            .filter(|m| m.is_file())
            .map(|m| Listed::of(&m)),
        _ => None,
    };
    Ok(SourceEntry {
        name,
        path,
        kind,
        listed,
    })
}

/// The entry of a name in directory `prefix` that cannot be sent (see
/// [`SourceKind::Unsendable`]): its stand-in name is `prefix/.rdmaxfer-unsendable-HASH` (the
/// BLAKE3 of the raw name), never sent.
fn unsendable(
    prefix: &str,
    raw: &std::ffi::OsStr,
    path: PathBuf,
    why: &str,
) -> Result<SourceEntry> {
    use std::os::unix::ffi::OsStrExt as _;
    let hash = blake3::hash(raw.as_bytes()).to_hex();
    let stand_in = format!(".rdmaxfer-unsendable-{}", &hash[..32]);
    let name = if prefix.is_empty() {
        stand_in
    } else {
        format!("{prefix}/{stand_in}")
    };
    let raw_shown: String = raw
        .as_bytes()
        .utf8_chunks()
        .flat_map(|c| {
            let bad = c.invalid().iter().map(|b| format!("\\x{b:02x}"));
            std::iter::once(crate::xfer::file::names::printable(c.valid()).into_owned()).chain(bad)
        })
        .collect();
    let shown = match prefix {
        "" => raw_shown,
        p => format!("{p}/{raw_shown}"),
    };
    entry(
        name,
        path,
        SourceKind::Unsendable {
            shown,
            why: why.to_string(),
        },
        None,
    )
}

/// Why a special file is not sent.
fn special(ft: &std::fs::FileType) -> &'static str {
    if ft.is_socket() {
        "a socket: not sent"
    } else if ft.is_fifo() {
        "a FIFO: not sent"
    } else if ft.is_block_device() || ft.is_char_device() {
        "a device: not sent"
    } else {
        "not a file, directory or symlink: not sent"
    }
}

/// Most threads that list a tree's top directories at once (as many as CPUs up to this): a
/// walk is a stat per file, on a network file system mostly waiting (see "Trees of small
/// files" in `docs/benchmarks.md`: 1.7 times as fast over 9p on two threads as on one).
const WALK_THREADS: usize = 4;

/// Lists directory `root` (of `id`) as `prefix/…` into `out`: its own entries here, then its
/// subdirectories on up to [`WALK_THREADS`] threads. Returns the number of entries listed
/// below it.
fn walk_tree(
    opts: &WalkOptions,
    root: &Path,
    prefix: &str,
    id: (u64, u64),
    out: &mut Vec<SourceEntry>,
) -> Result<usize> {
    let mut w = Walker {
        opts,
        seen: vec![id],
        out,
        later: Some(Vec::new()),
    };
    let n = w.dir(root, prefix)?;
    let later = w.later.take().unwrap_or_default();
    let parts: Vec<std::sync::Mutex<Vec<SourceEntry>>> =
        later.iter().map(|_| Default::default()).collect();
    let jobs = u64::try_from(later.len()).unwrap_or(u64::MAX);
    digest::par_for(0..jobs, digest::threads(WALK_THREADS), |i| {
        let k = usize::try_from(i).unwrap_or(usize::MAX);
        let (Some((path, name, seen)), Some(part)) = (later.get(k), parts.get(k)) else {
            return Ok(());
        };
        let mut mine = Vec::new();
        let mut w = Walker {
            opts,
            seen: seen.clone(),
            out: &mut mine,
            later: None,
        };
        w.subdir(path.clone(), name.clone())?;
        *part.lock().unwrap_or_else(|p| p.into_inner()) = mine;
        Ok(())
    })?;
    for part in parts {
        out.extend(part.into_inner().unwrap_or_else(|p| p.into_inner()));
    }
    // Each subdirectory listed at least itself.
    Ok(n + later.len())
}

struct Walker<'a> {
    opts: &'a WalkOptions,
    /// (device, inode) of the directories on the current path (loops with `copy_links`).
    seen: Vec<(u64, u64)>,
    out: &'a mut Vec<SourceEntry>,
    /// At a tree's top: its subdirectories (with the path's `seen`), listed afterwards by
    /// [`walk_tree`]'s threads instead of now.
    later: Option<Vec<Later>>,
}

/// A subdirectory listed later: its path, its name, and the `seen` of its path.
type Later = (PathBuf, String, Vec<(u64, u64)>);

impl Walker<'_> {
    /// Lists `dir` as `prefix/…`; returns the number of entries listed below it.
    fn dir(&mut self, dir: &Path, prefix: &str) -> Result<usize> {
        let rd =
            std::fs::read_dir(dir).map_err(|e| Error::io(format!("read {}", dir.display()), e))?;
        let before = self.out.len();
        for de in rd {
            let de = de.map_err(|e| Error::io(format!("read {}", dir.display()), e))?;
            let path = de.path();
            // DirEntry::file_type does not follow symlinks.
            let ft = de
                .file_type()
                .map_err(|e| Error::io(format!("stat {}", path.display()), e))?;
            let name = match de.file_name().to_str() {
                Some(n) if prefix.is_empty() => n.to_string(),
                Some(n) => format!("{prefix}/{n}"),
                None => {
                    let why = "the name is not UTF-8, which this protocol version cannot send";
                    self.out
                        .push(unsendable(prefix, &de.file_name(), path, why)?);
                    continue;
                }
            };
            if !self.opts.filter.allows(&name, ft.is_dir()) {
                continue;
            }
            if let Err(e) = check_name(&name) {
                let why = format!("the receiver would refuse the name: {e}");
                self.out
                    .push(unsendable(prefix, &de.file_name(), path, &why)?);
                continue;
            }
            let meta = ft.is_file().then(|| de.metadata().ok()).flatten();
            self.one(path, name, ft, meta)?;
        }
        Ok(self.out.len() - before)
    }

    /// Lists subdirectory `path` (on the path's `seen`) as `name/…`, or as a directory when
    /// nothing is listed below it.
    fn subdir(&mut self, path: PathBuf, name: String) -> Result<()> {
        if self.dir(&path, &name)? == 0 {
            self.out.push(entry(name, path, SourceKind::Dir, None)?);
        }
        Ok(())
    }

    fn one(&mut self, path: PathBuf, name: String, ft: FileType, meta: Option<Meta>) -> Result<()> {
        let kind = if ft.is_dir() {
            let meta = std::fs::metadata(&path)
                .map_err(|e| Error::io(format!("stat {}", path.display()), e))?;
            let id = (meta.dev(), meta.ino());
            if self.seen.contains(&id) {
                SourceKind::Skipped("a directory loop (through a symlink): not sent".into())
            } else {
                self.seen.push(id);
                if let Some(later) = &mut self.later {
                    later.push((path, name, self.seen.clone()));
                    self.seen.pop();
                    return Ok(());
                }
                let r = self.subdir(path, name);
                self.seen.pop();
                return r;
            }
        } else if ft.is_file() {
            SourceKind::File
        } else if ft.is_symlink() && self.opts.copy_links {
            match std::fs::metadata(&path) {
                Ok(m) => return self.one(path, name, m.file_type(), None),
                Err(e) => SourceKind::Skipped(format!(
                    "a symlink that cannot be followed ({e}): not sent"
                )),
            }
        } else if ft.is_symlink() {
            let target = std::fs::read_link(&path)
                .map_err(|e| Error::io(format!("readlink {}", path.display()), e))?;
            match target.to_str() {
                Some(t) if t.len() > MAX_TARGET_LEN => SourceKind::Skipped(format!(
                    "a symlink whose target is over {MAX_TARGET_LEN} bytes: not sent"
                )),
                Some("") => SourceKind::Skipped("a symlink with an empty target: not sent".into()),
                Some(t) => SourceKind::Symlink(t.to_string()),
                None => SourceKind::Skipped("a symlink whose target is not UTF-8: not sent".into()),
            }
        } else {
            SourceKind::Skipped(special(&ft).into())
        };
        self.out.push(entry(name, path, kind, meta)?);
        Ok(())
    }
}

/// The BLAKE3 of the file at `path` (`send --checksum`).
pub(crate) fn hash_file(path: &Path) -> Result<Digest> {
    let mut f = File::open(path).map_err(|e| read_err(path, e))?;
    let mut h = blake3::Hasher::new();
    std::io::copy(&mut f, &mut h).map_err(|e| read_err(path, e))?;
    Ok(*h.finalize().as_bytes())
}

/// Most threads hashing a resumed prefix.
const RESUME_THREADS: usize = 16;

/// A file read for sending: chunks at any offset, from any thread, each hashed as read.
#[derive(Debug)]
pub(crate) struct Source {
    file: File,
    path: PathBuf,
    size: u64,
    mode: u32,
    mtime: (i64, u32),
    /// Bytes the receiver holds already (whole chunks), not sent.
    held: u64,
    chunks: Option<Chunks>,
}

/// Refuses a file whose size or modification time is no longer `size` and `mtime` (it
/// changed while being sent): what was read may mix the old and the new, so it is never
/// committed (the file is reported failed, as rsync reports a file it could not send whole).
pub(crate) fn unchanged(file: &File, path: &Path, size: u64, mtime: (i64, u32)) -> Result<()> {
    let m = file.metadata().map_err(|e| read_err(path, e))?;
    let now = (m.mtime(), m.mtime_nsec().clamp(0, 999_999_999) as u32);
    let why = match (m.len(), now) {
        (n, _) if n != size => format!("size changed from {size} to {n} while being sent"),
        (_, t) if t != mtime => "changed while being sent (its mtime moved): not committed".into(),
        _ => return Ok(()),
    };
    Err(read_err(path, why))
}

/// Whether `path` is gone now (it, or a directory above it): listed, then removed before its
/// turn.
pub(crate) fn vanished(path: &Path) -> bool {
    matches!(std::fs::symlink_metadata(path), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
}

pub(crate) fn read_err(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::refused(Reason::ReadError, format!("{}: {what}", path.display()))
}

impl Source {
    /// Opens a regular file and records its size, mode and mtime (what HELLO announces).
    pub fn open(path: &Path) -> Result<Source> {
        let file = File::open(path).map_err(|e| read_err(path, e))?;
        let meta = file.metadata().map_err(|e| read_err(path, e))?;
        if !meta.is_file() {
            return Err(read_err(path, "not a regular file"));
        }
        Ok(Source {
            file,
            path: path.to_path_buf(),
            size: meta.len(),
            mode: meta.mode() & 0o7777,
            mtime: (meta.mtime(), meta.mtime_nsec().clamp(0, 999_999_999) as u32),
            held: 0,
            chunks: None,
        })
    }

    /// Size at open; exactly this many bytes are sent.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Permission bits.
    pub fn mode(&self) -> u32 {
        self.mode
    }

    /// Modification time: seconds and nanoseconds since the epoch.
    pub fn mtime(&self) -> (i64, u32) {
        self.mtime
    }

    /// Fixes how the file is cut (the receiver's slot size) and hashed. Once, before reading.
    pub fn start(&mut self, chunk: u32, algo: Algo) -> Result<()> {
        if self.chunks.is_some() {
            return Err(invalid("source started twice".into()));
        }
        self.chunks = Some(Chunks::new(Layout::new(algo, u64::from(chunk), self.size)?));
        Ok(())
    }

    /// The chunk digests so far (after [`start`](Source::start)).
    pub fn chunks(&self) -> Result<&Chunks> {
        self.chunks
            .as_ref()
            .ok_or_else(|| invalid("the source was not started".into()))
    }

    /// The first chunk to send: the one after those the receiver holds.
    pub fn first_chunk(&self) -> u64 {
        self.chunks
            .as_ref()
            .map_or(0, |c| self.held.div_ceil(c.layout().chunk))
    }

    /// For `--resume`: hashes the first `held` bytes (whole chunks, or the whole file) on a pool
    /// of threads and, if their digest matches the receiver's `hash`, continues after them and
    /// returns true. On a mismatch (or `held` not a prefix of whole chunks) returns false and
    /// the source is unusable for this file. Must be called before any read.
    pub fn skip_verified(&mut self, held: u64, hash: &Digest) -> Result<bool> {
        let chunks = self.chunks()?;
        let layout = *chunks.layout();
        if chunks.count() != 0 {
            return Err(invalid("skip_verified after reading".into()));
        }
        if held > self.size || layout.whole_chunks(held) != held {
            return Ok(false);
        }
        let n = layout.prefix(held).chunks();
        digest::par_for(0..n, digest::threads(RESUME_THREADS), |i| {
            let (_, len) = layout.range(i).expect("a chunk of the prefix");
            self.read_chunk_at(i, &mut vec![0u8; len]).map(|_| ())
        })?;
        self.held = held;
        Ok(self.chunks()?.prefix_digest(held).as_ref() == Some(hash))
    }

    /// Reads chunk `index` into the start of `buf` (which must hold it), hashes it and returns
    /// its length. Each chunk is read at most once.
    pub fn read_chunk_at(&self, index: u64, buf: &mut [u8]) -> Result<usize> {
        let chunks = self.chunks()?;
        let (off, len) = chunks.layout().range(index).ok_or_else(|| {
            invalid(format!(
                "{}: no chunk {index} in {} bytes",
                self.path.display(),
                self.size
            ))
        })?;
        let have = buf.len();
        let buf = buf
            .get_mut(..len)
            .ok_or_else(|| invalid(format!("a buffer of {have} bytes for a {len}-byte chunk")))?;
        self.file.read_exact_at(buf, off).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                read_err(&self.path, "file shrank while being sent")
            } else {
                read_err(&self.path, e)
            }
        })?;
        chunks.hash(index, buf)?;
        Ok(len)
    }

    /// Chunk repair: reads chunk `index` again into the start of `buf`; a read error if it
    /// no longer hashes as it did when first read (the file changed while being sent).
    pub fn reread_chunk_at(&self, index: u64, buf: &mut [u8]) -> Result<usize> {
        let chunks = self.chunks()?;
        let len = chunks.layout().range(index).map_or(0, |r| r.1);
        let buf = buf
            .get_mut(..len)
            .ok_or_else(|| invalid(format!("a buffer too small for a {len}-byte chunk")))?;
        self.file
            .read_exact_at(buf, index * chunks.layout().chunk)
            .map_err(|e| read_err(&self.path, e))?;
        if !chunks.matches(index, buf)? {
            return Err(read_err(
                &self.path,
                format_args!("chunk {index} changed while being sent"),
            ));
        }
        Ok(len)
    }

    /// The file digest, for FIN. Refuses if a chunk was not read or the file's size changed
    /// meanwhile.
    pub fn finish(&self) -> Result<Digest> {
        let chunks = self.chunks()?;
        if let Some(i) = chunks.first_missing() {
            return Err(invalid(format!(
                "{}: finish before chunk {i} of {} was read",
                self.path.display(),
                chunks.layout().chunks()
            )));
        }
        unchanged(&self.file, &self.path, self.size, self.mtime)?;
        chunks.finish()
    }
}

#[cfg(test)]
mod tests;
