//! The sender's side, independent of RDMA: listing the files to send ([`walk`]) and reading
//! one in chunks at their offsets, from any thread, each chunk hashed (`Source`, crate-private).

use std::fs::{File, FileType, Metadata as Meta};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::filter::Filter;
use crate::xfer::file::digest::{self, Algo, Chunks, Layout};
use crate::xfer::file::names::{sanitize, RelPath};
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
            let mut w = Walker {
                opts: &opts,
                seen: vec![(meta.dev(), meta.ino())],
                out: &mut out,
            };
            w.dir(root, "")?;
            continue;
        };
        let base = base
            .to_str()
            .ok_or_else(|| invalid(format!("{}: name is not UTF-8", root.display())))?;
        if !opts.filter.allows(base, meta.is_dir()) {
            continue;
        }
        if meta.is_file() {
            out.push(entry(base.to_string(), root.clone(), SourceKind::File, Some(meta))?);
        } else if meta.is_dir() {
            let mut w = Walker {
                opts: &opts,
                seen: vec![(meta.dev(), meta.ino())],
                out: &mut out,
            };
            if w.dir(root, base)? == 0 {
                out.push(entry(base.to_string(), root.clone(), SourceKind::Dir, None)?);
            }
        } else {
            return Err(invalid(format!(
                "{}: not a file or directory",
                root.display()
            )));
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(w) = out.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(invalid(format!(
            "{} and {} would both be sent as {}",
            w[0].path.display(),
            w[1].path.display(),
            w[0].name
        )));
    }
    Ok(out)
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

struct Walker<'a> {
    opts: &'a WalkOptions,
    /// (device, inode) of the directories on the current path (loops with `copy_links`).
    seen: Vec<(u64, u64)>,
    out: &'a mut Vec<SourceEntry>,
}

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
            if let Err(e) = sanitize(&name) {
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

    fn one(&mut self, path: PathBuf, name: String, ft: FileType, meta: Option<Meta>) -> Result<()> {
        let kind = if ft.is_dir() {
            let meta = std::fs::metadata(&path)
                .map_err(|e| Error::io(format!("stat {}", path.display()), e))?;
            let id = (meta.dev(), meta.ino());
            if self.seen.contains(&id) {
                SourceKind::Skipped("a directory loop (through a symlink): not sent".into())
            } else {
                self.seen.push(id);
                let n = self.dir(&path, &name)?;
                self.seen.pop();
                if n > 0 {
                    return Ok(());
                }
                SourceKind::Dir
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
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn names(v: &[SourceEntry]) -> Vec<&str> {
        v.iter().map(|e| e.name.as_str()).collect()
    }

    #[test]
    fn walk_lists_tree_sorted_with_links_empty_dirs_and_skipped_specials() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("top");
        std::fs::create_dir_all(root.join("b/c")).unwrap();
        std::fs::create_dir_all(root.join("empty")).unwrap();
        std::fs::write(root.join("z.txt"), b"z").unwrap();
        std::fs::write(root.join("b/c/deep"), b"d").unwrap();
        std::fs::write(root.join("a"), b"a").unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"s").unwrap();
        symlink(outside.path(), root.join("link_dir")).unwrap();
        symlink(outside.path().join("secret"), root.join("link_file")).unwrap();
        let _sock = std::os::unix::net::UnixListener::bind(root.join("sock")).unwrap();
        let single = t.path().join("single");
        std::fs::write(&single, b"1").unwrap();
        let v = walk(&[root.clone(), single.clone()]).unwrap();
        assert_eq!(
            names(&v),
            [
                "single",
                "top/a",
                "top/b/c/deep",
                "top/empty",
                "top/link_dir",
                "top/link_file",
                "top/sock",
                "top/z.txt"
            ]
        );
        assert_eq!(v[2].path, root.join("b/c/deep"));
        assert_eq!(v[2].kind, SourceKind::File);
        // A file is listed with its size, mode and mtime (one stat); other kinds without.
        let deep = std::fs::metadata(root.join("b/c/deep")).unwrap();
        assert_eq!(v[2].listed, Some(Listed::of(&deep)));
        assert_eq!(v[2].listed.unwrap().size, 1);
        assert_eq!(v[3].kind, SourceKind::Dir);
        assert_eq!(v[3].listed, None);
        let secret = outside.path().join("secret");
        assert_eq!(
            v[5].kind,
            SourceKind::Symlink(secret.to_str().unwrap().into())
        );
        assert!(
            matches!(&v[6].kind, SourceKind::Skipped(why) if why.contains("socket")),
            "{v:?}"
        );

        // --copy-links: what the links point to; a loop and a dangling link are skipped.
        symlink(&root, root.join("b/loop")).unwrap();
        symlink(t.path().join("nowhere"), root.join("dangling")).unwrap();
        let v = walk_with(
            std::slice::from_ref(&root),
            WalkOptions {
                copy_links: true,
                ..WalkOptions::default()
            },
        )
        .unwrap();
        let kinds: Vec<(&str, &SourceKind)> =
            v.iter().map(|e| (e.name.as_str(), &e.kind)).collect();
        assert!(
            kinds.contains(&("top/link_dir/secret", &SourceKind::File)),
            "{kinds:?}"
        );
        assert!(
            kinds.contains(&("top/link_file", &SourceKind::File)),
            "{kinds:?}"
        );
        assert!(
            v.iter().any(|e| e.name.as_str() == "top/b/loop"
                && matches!(&e.kind, SourceKind::Skipped(w) if w.contains("loop"))),
            "{kinds:?}"
        );
        assert!(
            v.iter().any(|e| e.name.as_str() == "top/dangling"
                && matches!(&e.kind, SourceKind::Skipped(w) if w.contains("cannot be followed"))),
            "{kinds:?}"
        );

        // An empty root directory is sent as a directory.
        std::fs::create_dir(t.path().join("bare")).unwrap();
        let v = walk(&[t.path().join("bare")]).unwrap();
        assert_eq!(names(&v), ["bare"]);
        assert_eq!(v[0].kind, SourceKind::Dir);
    }

    #[test]
    fn walk_refuses_duplicates_and_unsendable_names() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("x")).unwrap();
        std::fs::create_dir_all(t.path().join("y")).unwrap();
        std::fs::write(t.path().join("x/f"), b"").unwrap();
        std::fs::write(t.path().join("y/f"), b"").unwrap();
        let e = walk(&[t.path().join("x/f"), t.path().join("y/f")]).unwrap_err();
        assert!(e.to_string().contains("both be sent as f"), "{e}");
        // A root whose own name cannot be sent is refused up front.
        std::fs::write(t.path().join("x/back\\slash"), b"").unwrap();
        let e = walk(&[t.path().join("x/back\\slash")]).unwrap_err();
        assert!(e.to_string().contains("backslash"), "{e}");
        assert!(walk(&[t.path().join("missing")]).is_err());
    }

    #[test]
    fn one_odd_name_never_stops_a_tree() {
        use std::os::unix::ffi::OsStrExt as _;
        let t = tempfile::tempdir().unwrap();
        let x = t.path().join("x");
        std::fs::create_dir_all(x.join("sub")).unwrap();
        std::fs::write(x.join("ok.txt"), b"ok").unwrap();
        std::fs::write(x.join("back\\slash"), b"").unwrap();
        std::fs::write(x.join("new\nline"), b"").unwrap();
        let raw = std::ffi::OsStr::from_bytes(b"caf\xe9.txt");
        std::fs::write(x.join("sub").join(raw), b"latin-1").unwrap();
        let v = walk(std::slice::from_ref(&x)).unwrap();
        let sendable: Vec<&str> = v
            .iter()
            .filter(|e| !matches!(e.kind, SourceKind::Unsendable { .. }))
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(sendable, ["x/ok.txt"], "{v:?}");
        let mut shown: Vec<(&str, &str)> = v
            .iter()
            .filter_map(|e| match &e.kind {
                SourceKind::Unsendable { shown, why } => Some((shown.as_str(), why.as_str())),
                _ => None,
            })
            .collect();
        shown.sort();
        assert_eq!(shown.len(), 3, "{v:?}");
        assert_eq!(shown[0].0, "x/back\\slash");
        assert!(shown[0].1.contains("backslash"), "{shown:?}");
        assert_eq!(shown[1].0, "x/new\\u{a}line");
        assert_eq!(shown[2].0, "x/sub/caf\\xe9.txt");
        assert!(shown[2].1.contains("not UTF-8"), "{shown:?}");
        // The stand-in names are sendable names of their own, never a real entry's.
        for e in &v {
            assert!(sanitize(e.name.as_str()).is_ok());
        }
    }

    #[test]
    fn excluded_entries_are_not_listed_and_excluded_directories_not_entered() {
        let t = tempfile::tempdir().unwrap();
        let x = t.path().join("x");
        for f in ["a.c", "b.o", "keep.o", "cache/big", "sub/c.o", "sub/d.c"] {
            let p = x.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"").unwrap();
        }
        // Unreadable below an excluded directory: it is never entered.
        std::fs::write(x.join("cache").join("bad\\name"), b"").unwrap();
        let mut filter = Filter::new();
        filter.include("keep.o").unwrap();
        filter.exclude("*.o").unwrap();
        filter.exclude("cache/").unwrap();
        let opts = WalkOptions {
            filter,
            ..WalkOptions::default()
        };
        let v = walk_with(std::slice::from_ref(&x), opts).unwrap();
        let names: Vec<&str> = v.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["x/a.c", "x/keep.o", "x/sub/d.c"]);
        // A root is filtered too.
        let mut filter = Filter::new();
        filter.exclude("/x").unwrap();
        let opts = WalkOptions {
            filter,
            ..WalkOptions::default()
        };
        assert!(walk_with(&[x], opts).unwrap().is_empty());
    }

    #[test]
    fn a_root_without_a_name_sends_what_it_holds_at_the_top() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("d/e")).unwrap();
        std::fs::write(t.path().join("d/a"), b"a").unwrap();
        std::fs::write(t.path().join("top"), b"t").unwrap();
        // `DIR/d/..` is DIR, and has no file name, as `.` has none.
        let v = walk(&[t.path().join("d").join("..")]).unwrap();
        let names: Vec<&str> = v.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["d/a", "d/e", "top"]);
        assert!(walk(&[std::path::PathBuf::from("/nonexistent/..")]).is_err());
    }

    fn file_digest(data: &[u8], chunk: u64) -> Digest {
        let layout = Layout::new(Algo::Xxh3, chunk, data.len() as u64).unwrap();
        let ds: Vec<_> = data
            .chunks(chunk as usize)
            .map(|c| digest::chunk_digest(Algo::Xxh3, c))
            .collect();
        digest::combine(&layout, &ds)
    }

    #[test]
    fn chunks_in_any_order_and_digest() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f");
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let mut s = Source::open(&p).unwrap();
        assert_eq!(s.size(), 10_000);
        assert!(s.read_chunk_at(0, &mut [0u8; 4096]).is_err(), "not started");
        s.start(4096, Algo::Xxh3).unwrap();
        let mut got = vec![0u8; 10_000];
        let mut sizes = Vec::new();
        for i in [2u64, 0, 1] {
            let mut buf = vec![0u8; 4096];
            let n = s.read_chunk_at(i, &mut buf).unwrap();
            sizes.push(n);
            got[i as usize * 4096..][..n].copy_from_slice(&buf[..n]);
            if i == 2 {
                let e = s.finish().unwrap_err();
                assert!(e.to_string().contains("before chunk 0"), "{e}");
            }
        }
        assert_eq!(sizes, [1808, 4096, 4096]);
        assert_eq!(got, data);
        assert!(s.read_chunk_at(3, &mut [0u8; 4096]).is_err());
        assert!(s.read_chunk_at(1, &mut [0u8; 4096]).is_err(), "read twice");
        assert_eq!(s.finish().unwrap(), file_digest(&data, 4096));
    }

    #[test]
    fn resume_skips_only_verified_whole_chunks() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f");
        std::fs::write(&p, b"0123456789").unwrap();
        let mut s = Source::open(&p).unwrap();
        s.start(4, Algo::Xxh3).unwrap();
        assert!(s.skip_verified(4, &file_digest(b"0123", 4)).unwrap());
        assert_eq!(s.first_chunk(), 1);
        let mut buf = [0u8; 4];
        assert_eq!(s.read_chunk_at(1, &mut buf).unwrap(), 4);
        assert_eq!(s.read_chunk_at(2, &mut buf).unwrap(), 2);
        assert_eq!(s.finish().unwrap(), file_digest(b"0123456789", 4));
        let mut s = Source::open(&p).unwrap();
        s.start(4, Algo::Xxh3).unwrap();
        assert!(!s.skip_verified(4, &file_digest(b"XXXX", 4)).unwrap());
        for (held, why) in [(11, "beyond the size"), (5, "not whole chunks")] {
            let mut s = Source::open(&p).unwrap();
            s.start(4, Algo::Xxh3).unwrap();
            assert!(!s.skip_verified(held, &[0; 32]).unwrap(), "{why}");
        }
        // The whole file held: nothing left to send.
        let mut s = Source::open(&p).unwrap();
        s.start(4, Algo::Xxh3).unwrap();
        assert!(s.skip_verified(10, &file_digest(b"0123456789", 4)).unwrap());
        assert_eq!(s.first_chunk(), 3);
        s.finish().unwrap();
    }

    #[test]
    fn changed_file_detected() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f");
        std::fs::write(&p, b"0123456789").unwrap();
        let mut s = Source::open(&p).unwrap();
        s.start(16, Algo::Xxh3).unwrap();
        std::fs::write(&p, b"01").unwrap();
        let e = s.read_chunk_at(0, &mut [0u8; 16]).unwrap_err();
        assert_eq!(e.reason(), Some(Reason::ReadError));
        assert!(e.to_string().contains("shrank"), "{e}");
        let mut s = Source::open(&p).unwrap();
        s.start(16, Algo::Xxh3).unwrap();
        std::fs::write(&p, b"0123456789").unwrap();
        s.read_chunk_at(0, &mut [0u8; 16]).unwrap();
        std::fs::write(&p, b"0123").unwrap();
        assert!(s.finish().unwrap_err().to_string().contains("size changed"));
    }
}
