//! Safe receiving of file names: a peer's name is checked by [`sanitize`], then every directory
//! on its way is opened relative to its parent with `O_NOFOLLOW` ([`open_parent`]), so neither
//! `..` nor a symlink (existing or raced in) can lead outside the output directory.
//!
//! Rules (see `docs/file-protocol.md`): a name is 1..=4096 bytes of UTF-8, `/`-separated, not
//! absolute, with no empty, `.` or `..` components, no NUL, no backslash, no control character
//! (C0, DEL, C1: a name must not be able to forge output lines or terminal escapes), each
//! component at most 255 bytes, and no final component ending in [`TEMP_SUFFIX`] (reserved for
//! temporary files).
//!
//! Peer-supplied text (names, messages) is shown through [`printable`].

use std::borrow::Cow;
use std::fmt;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use super::proto::{Reason, MAX_NAME_LEN};
use crate::{Error, Result};

/// Refusal: the entry differs and the sender did not ask to replace it (also when it appears
/// during the commit).
pub const DIFFERS: &str =
    "exists and differs: use send --force to replace it (the receiver must allow it with recv --force)";

/// Longest path component, in bytes (Linux `NAME_MAX`).
pub const MAX_COMPONENT_LEN: usize = 255;
/// Suffix of temporary files; names ending in it are refused.
pub const TEMP_SUFFIX: &str = ".rdmaxfer-part";
/// Suffix of a striped file's resume state next to its temporary file
/// ([`super::partial`]); names ending in it are refused.
pub const STRIPES_SUFFIX: &str = ".rdmaxfer-stripes";

/// A sanitized relative name: non-empty `/`-separated components, each safe to open below a
/// directory. Made only by [`sanitize`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RelPath(String);

impl RelPath {
    /// The name as `/`-separated text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The components, first to last (never empty).
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// The directories leading to the file (all components but the last).
    pub fn parents(&self) -> impl Iterator<Item = &str> {
        let dir = self.0.rsplit_once('/').map(|(dir, _)| dir);
        dir.into_iter().flat_map(|d| d.split('/'))
    }

    /// The last component.
    pub fn file_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }

    /// The temporary file's name for this file: `.<name>.rdmaxfer-part`, or, when that would
    /// exceed [`MAX_COMPONENT_LEN`], `.<first 32 hex digits of BLAKE3(name)>.rdmaxfer-part`.
    pub fn temp_name(&self) -> String {
        self.hidden(TEMP_SUFFIX)
    }

    /// The name of the striped file's resume state ([`super::partial`]), made like
    /// [`temp_name`](Self::temp_name) with [`STRIPES_SUFFIX`].
    pub fn stripes_name(&self) -> String {
        self.hidden(STRIPES_SUFFIX)
    }

    fn hidden(&self, suffix: &str) -> String {
        let name = self.file_name();
        let len = 1 + name.len() + suffix.len();
        if len <= MAX_COMPONENT_LEN {
            // Not `format!`: one of these per file of a tree.
            let mut s = String::with_capacity(len);
            s.push('.');
            s.push_str(name);
            s.push_str(suffix);
            s
        } else {
            let hex = blake3::hash(name.as_bytes()).to_hex();
            format!(".{}{suffix}", &hex[..32])
        }
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// True for characters that must not reach a terminal or a log raw: the control characters
/// (C0 U+0000–U+001F, DEL U+007F, C1 U+0080–U+009F) and the bidirectional-text controls
/// (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069), which reorder what is displayed.
fn is_unprintable(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` made safe to print: every control or bidirectional-text character (see the module docs)
/// becomes a `\u{…}` escape, so a peer cannot forge output lines or terminal escapes. Other text,
/// backslashes included, is unchanged, so applying it twice changes nothing more.
pub fn printable(s: &str) -> Cow<'_, str> {
    // Printable ASCII (most names) in one pass over the bytes, without decoding characters.
    if s.bytes().all(|b| (0x20..0x7f).contains(&b)) || !s.chars().any(is_unprintable) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_unprintable(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

fn bad_name(name: &str, why: impl fmt::Display) -> Error {
    // Quote at most 100 characters of a hostile name.
    let shown: String = name.chars().take(100).collect();
    let more = if shown.len() < name.len() { "…" } else { "" };
    // Debug quoting escapes control characters; `printable` also the bidirectional controls.
    let quoted = format!("{shown:?}");
    Error::refused(
        Reason::BadName,
        format!("{}{more}: {why}", printable(&quoted)),
    )
}

/// Checks a peer-supplied name against the rules in the module docs.
pub fn sanitize(name: &str) -> Result<RelPath> {
    check_name(name)?;
    Ok(RelPath(name.to_string()))
}

/// The checks of [`sanitize`], for a name that needs no [`RelPath`] (the sender's walk).
pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(bad_name(name, "empty name"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(bad_name(
            name,
            format_args!("{} bytes, the maximum is {MAX_NAME_LEN}", name.len()),
        ));
    }
    // Byte searches: NUL and the backslash are single bytes in UTF-8, and an ASCII name's
    // control characters are its bytes below 0x20 and 0x7f.
    let bytes = name.as_bytes();
    if bytes.contains(&0) {
        return Err(bad_name(name, "contains a NUL byte"));
    }
    if bytes.contains(&b'\\') {
        return Err(bad_name(name, "contains a backslash"));
    }
    let control = match name.is_ascii() {
        true => bytes.iter().find(|b| b.is_ascii_control()).map(|&b| char::from(b)),
        false => name.chars().find(|c| c.is_control()),
    };
    if let Some(c) = control {
        return Err(bad_name(
            name,
            format_args!("contains a control character (U+{:04X})", u32::from(c)),
        ));
    }
    if name.starts_with('/') {
        return Err(bad_name(name, "absolute path"));
    }
    for c in bytes.split(|&b| b == b'/') {
        match c {
            b"" => return Err(bad_name(name, "empty component (`//` or trailing `/`)")),
            b"." => return Err(bad_name(name, "`.` component")),
            b".." => return Err(bad_name(name, "`..` component")),
            c if c.len() > MAX_COMPONENT_LEN => {
                return Err(bad_name(
                    name,
                    format_args!(
                        "a component of {} bytes, the maximum is {MAX_COMPONENT_LEN}",
                        c.len()
                    ),
                ))
            }
            _ => {}
        }
    }
    for suffix in [TEMP_SUFFIX, STRIPES_SUFFIX] {
        if name.ends_with(suffix) {
            return Err(bad_name(
                name,
                format_args!("names ending in {suffix} are reserved"),
            ));
        }
    }
    Ok(())
}

/// A directory opened by [`open_parent`]: all operations are relative to its descriptor and
/// never follow a symlink in the last component.
#[derive(Debug)]
pub struct ConfinedDir {
    /// Shared by the handles [`try_clone`](ConfinedDir::try_clone) makes: a file's sink, its
    /// clean-up entry and the directory cache hold one descriptor, not one each.
    fd: Arc<OwnedFd>,
    path: Arc<Path>,
}

fn io_err(op: String, e: Errno) -> Error {
    Error::io(op, e.into())
}

impl ConfinedDir {
    /// Opens `dir` itself (symlinks in `dir` are followed: the operator chose it).
    pub fn open(dir: &Path) -> Result<ConfinedDir> {
        let fd = rustix::fs::open(
            dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_err(format!("open output directory {}", dir.display()), e))?;
        Ok(ConfinedDir {
            fd: Arc::new(fd),
            path: dir.into(),
        })
    }

    /// The directory's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory's descriptor (the receiver's deletions work relative to it).
    pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Opens the subdirectory `name`, refusing a symlink or a non-directory.
    fn child(&self, name: &str) -> std::result::Result<ConfinedDir, Errno> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::empty())?;
        Ok(ConfinedDir {
            fd: Arc::new(fd),
            path: self.path.join(name).into(),
        })
    }

    /// A refusal for a child that could not be opened as a directory.
    fn not_a_dir(&self, rel: &RelPath, name: &str, e: Errno) -> Error {
        let what = match self.kind(name) {
            Some(rustix::fs::FileType::Symlink) => "is a symbolic link".to_string(),
            Some(_) if e == Errno::NOTDIR || e == Errno::LOOP => "is not a directory".to_string(),
            _ => format!("cannot be opened: {}", std::io::Error::from(e)),
        };
        bad_name(
            rel.as_str(),
            format_args!("{} {what}", self.path.join(name).display()),
        )
    }

    /// The type of entry `name` (without following symlinks), or None if it does not exist.
    pub fn kind(&self, name: &str) -> Option<rustix::fs::FileType> {
        rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW)
            .ok()
            .map(|st| rustix::fs::FileType::from_raw_mode(st.st_mode))
    }

    /// The status of entry `name` (without following symlinks), or None if it does not exist.
    pub fn stat(&self, name: &str) -> Option<rustix::fs::Stat> {
        rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW).ok()
    }

    /// Opens regular file `name` read-only, never through a symlink.
    pub fn open_read(&self, name: &str) -> Result<File> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::empty())
            .map_err(|e| io_err(format!("open {}", self.path.join(name).display()), e))?;
        Ok(File::from(fd))
    }

    /// The target of symlink `name`, if it is one (and its target is UTF-8).
    pub fn read_link(&self, name: &str) -> Option<String> {
        let t = rustix::fs::readlinkat(&self.fd, name, Vec::new()).ok()?;
        t.into_string().ok()
    }

    /// Creates symlink `name` pointing at `target` (the text is stored, not resolved).
    pub fn symlink(&self, target: &str, name: &str) -> Result<()> {
        rustix::fs::symlinkat(target, &self.fd, name).map_err(|e| {
            io_err(
                format!("symlink {} -> {target}", self.path.join(name).display()),
                e,
            )
        })
    }

    /// True when an entry `name` exists (of any type, symlinks not followed).
    pub fn exists(&self, name: &str) -> bool {
        self.kind(name).is_some()
    }

    /// Opens regular file `name` for reading and writing, never through a symlink.
    /// `create`: create it exclusively (fails if it exists); else it must exist.
    pub fn open_file(&self, name: &str, create: bool) -> Result<File> {
        if create {
            return self.create_new(name, 0o600)?.ok_or_else(|| {
                io_err(
                    format!("open {}", self.path.join(name).display()),
                    Errno::EXIST,
                )
            });
        }
        let flags = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::from_bits_truncate(0o600))
            .map_err(|e| io_err(format!("open {}", self.path.join(name).display()), e))?;
        let file = File::from(fd);
        let meta = file
            .metadata()
            .map_err(|e| Error::io(format!("stat {}", self.path.join(name).display()), e))?;
        if !meta.is_file() {
            return Err(Error::refused(
                Reason::Exists,
                format!("{} is not a regular file", self.path.join(name).display()),
            ));
        }
        Ok(file)
    }

    /// Creates regular file `name` with `mode` (less the umask) for reading and writing; `None`
    /// when something of that name exists (`O_EXCL`: never through a symlink, and what it
    /// opens is new).
    pub fn create_new(&self, name: &str, mode: u32) -> Result<Option<File>> {
        let flags =
            OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::CREATE | OFlags::EXCL;
        match rustix::fs::openat(&self.fd, name, flags, Mode::from_bits_truncate(mode & 0o777)) {
            Ok(fd) => Ok(Some(File::from(fd))),
            Err(Errno::EXIST) => Ok(None),
            Err(e) => Err(io_err(
                format!("create {}", self.path.join(name).display()),
                e,
            )),
        }
    }

    /// Removes file `name`; a missing file is not an error.
    pub fn remove(&self, name: &str) -> Result<()> {
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(io_err(
                format!("remove {}", self.path.join(name).display()),
                e,
            )),
        }
    }

    /// Renames `from` to `to` within this directory. Without `replace`, an existing `to` is
    /// refused atomically (`RENAME_NOREPLACE`) with [`Reason::Exists`].
    pub fn rename(&self, from: &str, to: &str, replace: bool) -> Result<()> {
        let flags = if replace {
            RenameFlags::empty()
        } else {
            RenameFlags::NOREPLACE
        };
        match rustix::fs::renameat_with(&self.fd, from, &self.fd, to, flags) {
            Ok(()) => Ok(()),
            Err(Errno::EXIST) => Err(Error::refused(
                Reason::Exists,
                format!(
                    "{} appeared meanwhile: {}",
                    self.path.join(to).display(),
                    DIFFERS
                ),
            )),
            Err(e) => Err(io_err(
                format!("rename {} to {to}", self.path.join(from).display()),
                e,
            )),
        }
    }

    /// Flushes the directory's entries to disk (after a rename).
    pub fn sync(&self) -> Result<()> {
        rustix::fs::fsync(&self.fd)
            .map_err(|e| io_err(format!("fsync directory {}", self.path.display()), e))
    }

    /// Another handle on the same directory (the descriptor is shared, not duplicated: a
    /// small file's commit costs no `dup` and no extra `close`).
    pub fn try_clone(&self) -> Result<ConfinedDir> {
        Ok(ConfinedDir {
            fd: Arc::clone(&self.fd),
            path: Arc::clone(&self.path),
        })
    }

    /// Removes, deepest first, the directories `created` (the last components of the path to
    /// this directory, top first, as [`create_dirs`] returns them), each only while it is empty
    /// and still the directory reached (through `..`) from the one below it. Stops at the first
    /// that cannot be removed, e.g. because another file arrived in it. Best effort.
    pub fn remove_created(&self, created: &[String]) {
        let Ok(mut cur) = self.fd.as_fd().try_clone_to_owned() else {
            return;
        };
        for name in created.iter().rev() {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
            let Ok(parent) = rustix::fs::openat(&cur, "..", flags, Mode::empty()) else {
                return;
            };
            let same = match (
                rustix::fs::fstat(&cur),
                rustix::fs::statat(&parent, name.as_str(), AtFlags::SYMLINK_NOFOLLOW),
            ) {
                (Ok(a), Ok(b)) => a.st_dev == b.st_dev && a.st_ino == b.st_ino,
                _ => false,
            };
            if !same || rustix::fs::unlinkat(&parent, name.as_str(), AtFlags::REMOVEDIR).is_err() {
                return;
            }
            cur = parent;
        }
    }

    /// Bytes available to unprivileged users on this directory's filesystem.
    pub fn free_bytes(&self) -> Result<u64> {
        let st = rustix::fs::fstatvfs(self.fd.as_fd())
            .map_err(|e| io_err(format!("statvfs {}", self.path.display()), e))?;
        Ok(st.f_bavail.saturating_mul(st.f_frsize))
    }
}

/// The parent directory of the entry walked to last ([`walk_existing`]), kept so that entries
/// of one directory one after another (a tree of small files) walk the path once: a handle on
/// it costs no system call where a walk costs an `open` per component. A walk that found the
/// parent missing is kept too (the deepest directory there and how many components are
/// missing): the entries announced before their directory is made do not walk again, and
/// [`forget`](DirCache::forget) drops it once the directories are made. For one session: the
/// receiver never renames a directory, and the handle goes with the session.
#[derive(Debug, Default)]
pub struct DirCache {
    last: Option<Walked>,
}

/// What [`DirCache`] keeps: output directory, parent name, deepest directory that exists, and
/// the number of components missing below it.
#[derive(Debug)]
struct Walked(PathBuf, String, ConfinedDir, usize);

/// The last `n` parent components of `rel`.
fn last_parents(rel: &RelPath, n: usize) -> Vec<&str> {
    if n == 0 {
        // A file's directory already there (as for most files): nothing to split.
        return Vec::new();
    }
    let parents: Vec<&str> = rel.parents().collect();
    parents[parents.len().saturating_sub(n)..].to_vec()
}

impl DirCache {
    /// [`walk_existing`], from the kept handle when `rel`'s parent is the last one walked to.
    pub fn walk<'r>(
        &mut self,
        out_dir: &Path,
        rel: &'r RelPath,
    ) -> Result<(ConfinedDir, Vec<&'r str>)> {
        let parent = rel.as_str().rsplit_once('/').map_or("", |(p, _)| p);
        if let Some(Walked(o, p, d, n)) = &self.last {
            if o == out_dir && p == parent {
                return Ok((d.try_clone()?, last_parents(rel, *n)));
            }
        }
        let (dir, missing) = walk_existing(out_dir, rel)?;
        let kept = dir.try_clone()?;
        self.last = Some(Walked(out_dir.into(), parent.into(), kept, missing.len()));
        Ok((dir, missing))
    }

    /// [`walk`](Self::walk) for a look only: `f` gets the directory and the components still
    /// missing, and the kept handle is lent, not duplicated.
    pub fn visit<'r, R>(
        &mut self,
        out_dir: &Path,
        rel: &'r RelPath,
        f: impl FnOnce(&ConfinedDir, &[&'r str]) -> R,
    ) -> Result<R> {
        let parent = rel.as_str().rsplit_once('/').map_or("", |(p, _)| p);
        if let Some(Walked(o, p, d, n)) = &self.last {
            if o == out_dir && p == parent {
                return Ok(f(d, &last_parents(rel, *n)));
            }
        }
        let (dir, missing) = walk_existing(out_dir, rel)?;
        let r = f(&dir, &missing);
        self.last = Some(Walked(out_dir.into(), parent.into(), dir, missing.len()));
        Ok(r)
    }

    /// Drops what is kept: directories were made below it.
    pub fn forget(&mut self) {
        self.last = None;
    }
}

/// Walks `rel`'s parent directories below `out_dir` without following symlinks. Returns the
/// deepest directory that exists and the components still missing below it (empty when the
/// whole parent chain exists). Refuses a symlink or non-directory on the way.
pub fn walk_existing<'r>(out_dir: &Path, rel: &'r RelPath) -> Result<(ConfinedDir, Vec<&'r str>)> {
    let mut dir = ConfinedDir::open(out_dir)?;
    let mut parents = rel.parents();
    for c in parents.by_ref() {
        match dir.child(c) {
            Ok(d) => dir = d,
            Err(Errno::NOENT) => {
                let mut missing = vec![c];
                missing.extend(parents);
                return Ok((dir, missing));
            }
            Err(e) => return Err(dir.not_a_dir(rel, c, e)),
        }
    }
    Ok((dir, Vec::new()))
}

/// Creates the `missing` directories (from [`walk_existing`]) below `dir`; returns the last and
/// the names of the directories this call created, top first, that lead to it without one it
/// did not create in between (what [`ConfinedDir::remove_created`] takes). On failure, the
/// directories it created are removed again.
pub fn create_dirs(
    mut dir: ConfinedDir,
    rel: &RelPath,
    missing: &[&str],
) -> Result<(ConfinedDir, Vec<String>)> {
    let mut created: Vec<String> = Vec::new();
    for c in missing {
        match rustix::fs::mkdirat(&dir.fd, *c, Mode::from_bits_truncate(0o755)) {
            Ok(()) => created.push(c.to_string()),
            // Made meanwhile by someone else: not ours to remove, nor what is above it.
            Err(Errno::EXIST) => created.clear(),
            Err(e) => {
                let e = io_err(format!("mkdir {}", dir.path.join(c).display()), e);
                dir.remove_created(&created);
                return Err(e);
            }
        }
        dir = match dir.child(c) {
            Ok(d) => d,
            Err(e) => {
                let e = dir.not_a_dir(rel, c, e);
                dir.remove_created(&created);
                return Err(e);
            }
        };
    }
    Ok((dir, created))
}

/// Opens (creating as needed) the directory that will hold `rel`, strictly inside `out_dir`.
pub fn open_parent(out_dir: &Path, rel: &RelPath) -> Result<ConfinedDir> {
    let (dir, missing) = walk_existing(out_dir, rel)?;
    create_dirs(dir, rel, &missing).map(|(d, _)| d)
}

/// Creates the missing parents of `rel` and a fresh, empty temporary file
/// ([`RelPath::temp_name`]) for it, strictly inside `out_dir`; a stale temporary file is
/// replaced. Returns the parent directory and the open file.
pub fn create_confined(out_dir: &Path, rel: &RelPath) -> Result<(ConfinedDir, File)> {
    let dir = open_parent(out_dir, rel)?;
    let temp = rel.temp_name();
    dir.remove(&temp)?;
    let file = dir.open_file(&temp, true)?;
    Ok((dir, file))
}

#[cfg(test)]
mod tests;
