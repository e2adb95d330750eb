//! The receiver's file commit logic, independent of RDMA: checks before accepting, a temporary
//! file in the target directory, in-order BLAKE3 of the bytes written, then fsync, verify,
//! rename and directory fsync. See "Commit" in `docs/file-protocol.md`.

use std::fs::{File, Permissions};
use std::io::Read;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::Path;
use std::time::SystemTime;

use super::cleanup::{self, Leftovers, Registered};
use super::names::{self, ConfinedDir, RelPath};
use super::proto::{Digest, Reason};
use crate::{Error, Result};

/// How a [`Sink`] treats existing files and what it accepts.
#[derive(Clone, Debug, Default)]
pub struct SinkOptions {
    /// Replace an existing file.
    pub force: bool,
    /// Continue a temporary file left by an earlier attempt, and keep it on abort.
    pub resume: bool,
    /// Refuse files larger than this.
    pub max_size: Option<u64>,
    /// Permission bits for the committed file (masked with `0o777`); default 0600.
    pub mode: Option<u32>,
    /// Modification time for the committed file.
    pub mtime: Option<SystemTime>,
}

/// One file being received. Drop without [`commit`](Sink::commit) = [`abort`](Sink::abort).
#[derive(Debug)]
pub struct Sink {
    dir: ConfinedDir,
    final_name: String,
    temp_name: String,
    file: File,
    size: u64,
    held: u64,
    held_hash: Digest,
    written: u64,
    hasher: blake3::Hasher,
    opts: SinkOptions,
    finished: bool,
    /// The temporary file and the directories made for it, for [`cleanup::interrupt`].
    leftovers: Registered,
}

pub(crate) fn write_err(what: String, e: std::io::Error) -> Error {
    let reason = if e.raw_os_error() == Some(libc::ENOSPC) {
        Reason::NoSpace
    } else {
        Reason::WriteError
    };
    Error::refused(reason, format!("{what}: {e}"))
}

impl Sink {
    /// Checks and starts receiving `rel` (of `size` bytes) below `out_dir`. Refuses, before
    /// creating anything, a size over `max_size` ([`Reason::TooLarge`]), an existing target
    /// without `force` ([`Reason::Exists`]) and a size beyond the free space
    /// ([`Reason::NoSpace`]); then creates missing parent directories and the temporary file.
    /// With `resume`, an existing temporary file of at most `size` bytes is continued.
    pub fn create(out_dir: &Path, rel: &RelPath, size: u64, opts: SinkOptions) -> Result<Sink> {
        if let Some(max) = opts.max_size {
            if size > max {
                return Err(Error::refused(
                    Reason::TooLarge,
                    format!("{rel}: {size} bytes exceeds the limit of {max}"),
                ));
            }
        }
        let (dir, missing) = names::walk_existing(out_dir, rel)?;
        let final_name = rel.file_name().to_string();
        let temp_name = rel.temp_name();
        let mut previous = None;
        if missing.is_empty() {
            if let Some(kind) = dir.kind(&final_name) {
                let target = dir.path().join(&final_name);
                if kind == rustix::fs::FileType::Directory {
                    return Err(Error::refused(
                        Reason::Exists,
                        format!("{} exists and is a directory", target.display()),
                    ));
                }
                if !opts.force {
                    return Err(Error::refused(
                        Reason::Exists,
                        format!("{} exists: {}", target.display(), super::policy::DIFFERS),
                    ));
                }
            }
            if opts.resume {
                // A symlink or non-file here is not resumable; it is replaced below.
                previous = dir.open_file(&temp_name, false).ok();
            }
        }
        let held = match &previous {
            Some(f) => f
                .metadata()
                .map_err(|e| Error::io(format!("stat {temp_name}"), e))?
                .len(),
            None => 0,
        };
        let held = if held > size {
            previous = None;
            0
        } else {
            held
        };
        let free = dir.free_bytes()?;
        if free < size - held {
            return Err(Error::refused(
                Reason::NoSpace,
                format!(
                    "{rel}: needs {} bytes, {} has {free} free",
                    size - held,
                    dir.path().display()
                ),
            ));
        }
        // Directories and temporary file are made and registered in one critical section of the
        // clean-up registry: an interrupt removes all of them or finds none.
        let creating = cleanup::begin()?;
        let (dir, created) = names::create_dirs(dir, rel, &missing)?;
        let made = dir.try_clone().and_then(|reg_dir| {
            let file = match previous {
                Some(file) => file,
                None => {
                    dir.remove(&temp_name)?;
                    dir.open_file(&temp_name, true)?
                }
            };
            Ok((reg_dir, file))
        });
        let (reg_dir, file) = match made {
            Ok(x) => x,
            Err(e) => {
                dir.remove_created(&created);
                return Err(e);
            }
        };
        let leftovers = creating.register(Leftovers {
            dir: reg_dir,
            temp_name: temp_name.clone(),
            created,
            keep: opts.resume,
        });
        let mut hasher = blake3::Hasher::new();
        if held > 0 {
            let n = std::io::copy(&mut (&file).take(held), &mut hasher)
                .map_err(|e| Error::io(format!("read {temp_name}"), e))?;
            if n != held {
                return Err(Error::refused(
                    Reason::Internal,
                    format!("{temp_name} shrank while being read"),
                ));
            }
        }
        Ok(Sink {
            dir,
            final_name,
            temp_name,
            file,
            size,
            held,
            held_hash: *hasher.clone().finalize().as_bytes(),
            written: held,
            hasher,
            opts,
            finished: false,
            leftovers,
        })
    }

    /// Bytes already held from an earlier attempt (0 without resume) and their BLAKE3: what
    /// MR's resume offset and hash carry. Writing continues at that offset.
    pub fn resume_state(&self) -> (u64, Digest) {
        (self.held, self.held_hash)
    }

    /// Whether [`abort`](Sink::abort) (or drop) keeps the temporary file for a later resume
    /// (initially: the `resume` option). A receiver run with `--resume` keeps partial files even
    /// when this attempt did not itself resume.
    pub fn set_keep_on_abort(&mut self, keep: bool) {
        self.opts.resume = keep;
        self.leftovers.set_keep(keep);
    }

    /// The announced file size.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes written so far (including those held from an earlier attempt).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Writes `data` at `offset`. Writes must be contiguous and in order (the hash is computed
    /// as they arrive) and stay within the announced size.
    pub fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        if offset != self.written {
            return Err(Error::Protocol(format!(
                "write at offset {offset}, expected {} (writes must be in order)",
                self.written
            )));
        }
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= self.size)
            .ok_or_else(|| {
                Error::Protocol(format!(
                    "write of {} bytes at {offset} goes past the announced size {}",
                    data.len(),
                    self.size
                ))
            })?;
        self.file
            .write_all_at(data, offset)
            .map_err(|e| write_err(format!("write {}", self.temp_name), e))?;
        self.hasher.update(data);
        self.written = end;
        Ok(())
    }

    /// Finishes the file: all bytes must be there; fsync, compare the BLAKE3 with `expected`,
    /// apply mode and mtime, rename onto the final name (refusing an existing one unless
    /// `force`), fsync the directory. Returns the hash. On failure the temporary file is removed
    /// and nothing is left under the final name.
    pub fn commit(mut self, expected: &Digest) -> Result<Digest> {
        self.finished = true;
        let r = self.try_commit(expected);
        self.removed_on_failure(r)
    }

    /// Striped receipt (`transfer::stripe`): another handle on the temporary file, for
    /// positional writes of the byte ranges other streams receive.
    pub fn temp_file(&self) -> Result<File> {
        self.file
            .try_clone()
            .map_err(|e| Error::io(format!("dup {}", self.temp_name), e))
    }

    /// Striped receipt: commits a file whose bytes were written through
    /// [`temp_file`](Sink::temp_file) and verified range by range by the caller (`digest` is
    /// what it verified, returned as is); otherwise as [`commit`](Sink::commit).
    pub fn commit_verified(mut self, digest: &Digest) -> Result<Digest> {
        self.finished = true;
        self.written = self.size;
        let r = self.install().map(|()| *digest);
        self.removed_on_failure(r)
    }

    fn removed_on_failure(&mut self, r: Result<Digest>) -> Result<Digest> {
        if r.is_err() {
            self.leftovers.set_keep(false);
            let _ = self.leftovers.remove();
        }
        r
    }

    fn try_commit(&mut self, expected: &Digest) -> Result<Digest> {
        if self.written != self.size {
            return Err(Error::Protocol(format!(
                "FIN after {} of {} bytes",
                self.written, self.size
            )));
        }
        let got = self.hasher.finalize();
        if got != blake3::Hash::from(*expected) {
            return Err(Error::refused(
                Reason::HashMismatch,
                format!(
                    "{}: received bytes hash to {}, the sender's hash is {}",
                    self.final_name,
                    got.to_hex(),
                    blake3::Hash::from(*expected).to_hex()
                ),
            ));
        }
        self.install()?;
        Ok(*got.as_bytes())
    }

    /// Mode, mtime, fsync, rename onto the final name, directory fsync.
    fn install(&mut self) -> Result<()> {
        let mode = self.opts.mode.map_or(0o600, |m| m & 0o777);
        let werr = |what: &str, e| write_err(format!("{what} {}", self.temp_name), e);
        self.file
            .set_permissions(Permissions::from_mode(mode))
            .map_err(|e| werr("chmod", e))?;
        if let Some(t) = self.opts.mtime {
            self.file
                .set_modified(t)
                .map_err(|e| werr("set mtime of", e))?;
        }
        self.file.sync_all().map_err(|e| werr("fsync", e))?;
        self.dir
            .rename(&self.temp_name, &self.final_name, self.opts.force)?;
        self.dir.sync()
    }

    /// Gives up on the file: removes the temporary file and the directories created only for
    /// it, or with `resume` syncs and keeps it for the next attempt.
    pub fn abort(mut self) -> Result<()> {
        self.finish_abort()
    }

    fn finish_abort(&mut self) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        self.finished = true;
        if self.opts.resume && self.file.sync_all().is_ok() {
            return Ok(());
        }
        self.leftovers.set_keep(false);
        self.leftovers.remove()
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.finish_abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xfer::file::names::sanitize;
    use std::os::unix::fs::MetadataExt;

    fn hash(b: &[u8]) -> Digest {
        *blake3::hash(b).as_bytes()
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    fn sink(out: &Path, name: &str, size: u64, opts: SinkOptions) -> Result<Sink> {
        Sink::create(out, &sanitize(name).unwrap(), size, opts)
    }

    #[test]
    fn commit_ok() {
        let out = tempfile::tempdir().unwrap();
        let data = b"hello, rdma world";
        let mtime = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        let opts = SinkOptions {
            mode: Some(0o4755), // setuid is dropped
            mtime: Some(mtime),
            ..Default::default()
        };
        let mut s = sink(out.path(), "d/e/f.bin", data.len() as u64, opts).unwrap();
        assert_eq!(s.resume_state(), (0, hash(b"")));
        s.write_at(0, &data[..5]).unwrap();
        s.write_at(5, &data[5..]).unwrap();
        assert_eq!(s.written(), data.len() as u64);
        assert_eq!(s.commit(&hash(data)).unwrap(), hash(data));
        let f = out.path().join("d/e/f.bin");
        assert_eq!(std::fs::read(&f).unwrap(), data);
        let meta = std::fs::metadata(&f).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o755);
        assert_eq!(meta.modified().unwrap(), mtime);
        assert_eq!(entries(&out.path().join("d/e")), ["f.bin"]);
    }

    #[test]
    fn empty_file_commits() {
        let out = tempfile::tempdir().unwrap();
        let s = sink(out.path(), "empty", 0, SinkOptions::default()).unwrap();
        s.commit(&hash(b"")).unwrap();
        assert_eq!(std::fs::read(out.path().join("empty")).unwrap(), b"");
    }

    #[test]
    fn hash_mismatch_leaves_nothing() {
        let out = tempfile::tempdir().unwrap();
        for resume in [false, true] {
            let opts = SinkOptions {
                resume,
                ..Default::default()
            };
            let mut s = sink(out.path(), "x", 3, opts).unwrap();
            s.write_at(0, b"abc").unwrap();
            let e = s.commit(&hash(b"abd")).unwrap_err();
            assert_eq!(e.reason(), Some(Reason::HashMismatch), "{e}");
            assert!(entries(out.path()).is_empty(), "{:?}", entries(out.path()));
        }
    }

    #[test]
    fn existing_file_refused_unless_force() {
        let out = tempfile::tempdir().unwrap();
        let f = out.path().join("x");
        std::fs::write(&f, b"old").unwrap();
        let e = sink(out.path(), "x", 3, SinkOptions::default()).unwrap_err();
        assert_eq!(e.reason(), Some(Reason::Exists), "{e}");
        assert_eq!(std::fs::read(&f).unwrap(), b"old");
        assert_eq!(entries(out.path()), ["x"], "no temp file");
        let opts = SinkOptions {
            force: true,
            ..Default::default()
        };
        let mut s = sink(out.path(), "x", 3, opts).unwrap();
        s.write_at(0, b"new").unwrap();
        s.commit(&hash(b"new")).unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"new");
    }

    #[test]
    fn directory_in_the_way_refused_even_with_force() {
        let out = tempfile::tempdir().unwrap();
        std::fs::create_dir(out.path().join("x")).unwrap();
        let opts = SinkOptions {
            force: true,
            ..Default::default()
        };
        let e = sink(out.path(), "x", 0, opts).unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
    }

    #[test]
    fn file_appearing_before_commit_is_not_overwritten() {
        let out = tempfile::tempdir().unwrap();
        let mut s = sink(out.path(), "x", 1, SinkOptions::default()).unwrap();
        s.write_at(0, b"n").unwrap();
        std::fs::write(out.path().join("x"), b"raced").unwrap();
        let e = s.commit(&hash(b"n")).unwrap_err();
        assert_eq!(e.reason(), Some(Reason::Exists));
        assert_eq!(std::fs::read(out.path().join("x")).unwrap(), b"raced");
        assert_eq!(entries(out.path()), ["x"]);
    }

    #[test]
    fn abort_and_drop_remove_temp() {
        let out = tempfile::tempdir().unwrap();
        let mut s = sink(out.path(), "a", 4, SinkOptions::default()).unwrap();
        s.write_at(0, b"ab").unwrap();
        assert_eq!(entries(out.path()), [".a.rdmaxfer-part"]);
        s.abort().unwrap();
        assert!(entries(out.path()).is_empty());
        let mut s = sink(out.path(), "b", 4, SinkOptions::default()).unwrap();
        s.write_at(0, b"ab").unwrap();
        drop(s);
        assert!(entries(out.path()).is_empty());
    }

    #[test]
    fn failed_file_removes_only_the_directories_made_for_it() {
        let out = tempfile::tempdir().unwrap();
        std::fs::create_dir(out.path().join("had")).unwrap();
        // Abort (an ERR mid-file): the new directories go, the existing one stays.
        let mut s = sink(out.path(), "had/new/deeper/x", 4, SinkOptions::default()).unwrap();
        s.write_at(0, b"ab").unwrap();
        drop(s);
        assert_eq!(entries(out.path()), ["had"]);
        assert!(entries(&out.path().join("had")).is_empty());
        // Commit failure: the same.
        let mut s = sink(out.path(), "n1/n2/y", 1, SinkOptions::default()).unwrap();
        s.write_at(0, b"y").unwrap();
        s.commit(&hash(b"z")).unwrap_err();
        assert_eq!(entries(out.path()), ["had"]);
        // A directory another file of the session committed into stays.
        let mut a = sink(out.path(), "shared/a", 1, SinkOptions::default()).unwrap();
        a.write_at(0, b"a").unwrap();
        a.commit(&hash(b"a")).unwrap();
        let b = sink(out.path(), "shared/b", 1, SinkOptions::default()).unwrap();
        b.abort().unwrap();
        assert_eq!(entries(&out.path().join("shared")), ["a"]);
        // Kept for resume: temp and directories stay.
        let opts = SinkOptions {
            resume: true,
            ..Default::default()
        };
        let mut r = sink(out.path(), "keep/me", 4, opts).unwrap();
        r.write_at(0, b"ab").unwrap();
        drop(r);
        assert_eq!(entries(&out.path().join("keep")), [".me.rdmaxfer-part"]);
    }

    #[test]
    fn resume_continues_a_partial_file() {
        let out = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let opts = SinkOptions {
            resume: true,
            ..Default::default()
        };
        let mut s = sink(out.path(), "r", data.len() as u64, opts.clone()).unwrap();
        s.write_at(0, &data[..4096]).unwrap();
        drop(s); // kept with resume
        assert_eq!(entries(out.path()), [".r.rdmaxfer-part"]);
        let mut s = sink(out.path(), "r", data.len() as u64, opts.clone()).unwrap();
        assert_eq!(s.resume_state(), (4096, hash(&data[..4096])));
        assert!(s.write_at(0, &data[..1]).is_err(), "must continue at 4096");
        s.write_at(4096, &data[4096..]).unwrap();
        s.commit(&hash(&data)).unwrap();
        assert_eq!(std::fs::read(out.path().join("r")).unwrap(), data);
        assert_eq!(entries(out.path()), ["r"]);
        // Without resume a leftover temp is discarded.
        std::fs::write(out.path().join(".q.rdmaxfer-part"), b"stale").unwrap();
        let s = sink(out.path(), "q", 9, SinkOptions::default()).unwrap();
        assert_eq!(s.resume_state(), (0, hash(b"")));
        // A leftover longer than the new size is not resumable.
        drop(s);
        std::fs::write(out.path().join(".q.rdmaxfer-part"), b"too long!!").unwrap();
        let s = sink(out.path(), "q", 9, opts).unwrap();
        assert_eq!(s.resume_state().0, 0);
    }

    #[test]
    fn writes_checked_against_order_and_size() {
        let out = tempfile::tempdir().unwrap();
        let mut s = sink(out.path(), "w", 4, SinkOptions::default()).unwrap();
        let e = s.write_at(1, b"a").unwrap_err();
        assert!(e.to_string().contains("expected 0"), "{e}");
        let e = s.write_at(0, b"abcde").unwrap_err();
        assert!(e.to_string().contains("past the announced size"), "{e}");
        s.write_at(0, b"ab").unwrap();
        let e = s.commit(&hash(b"ab")).unwrap_err();
        assert!(e.to_string().contains("FIN after 2 of 4"), "{e}");
        assert!(entries(out.path()).is_empty());
    }

    #[test]
    fn size_limits_checked_before_creating_anything() {
        let out = tempfile::tempdir().unwrap();
        let opts = SinkOptions {
            max_size: Some(100),
            ..Default::default()
        };
        let e = sink(out.path(), "p/x", 101, opts).unwrap_err();
        assert_eq!(e.reason(), Some(Reason::TooLarge), "{e}");
        let e = sink(out.path(), "p/x", u64::MAX / 2, SinkOptions::default()).unwrap_err();
        assert_eq!(e.reason(), Some(Reason::NoSpace), "{e}");
        assert!(
            entries(out.path()).is_empty(),
            "no directory or temp created"
        );
    }
}
