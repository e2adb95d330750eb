//! The receiver's file commit logic, independent of RDMA: checks before accepting, a temporary
//! file in the target directory, chunks written at their offsets in any order (from any
//! thread) and hashed per chunk, then the sender's chunk digests compared, fsync, verify,
//! rename and directory fsync. See "Commit" and "Verification" in `docs/file-protocol.md`.

use std::fs::{File, Permissions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::SystemTime;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use super::cleanup::{self, Leftovers, Registered};
use crate::xfer::file::digest::{self, Algo, ChunkDigest, Chunks, Layout};
use crate::xfer::file::names::{self, ConfinedDir, DirCache, RelPath};
use crate::xfer::file::proto::{Digest, Reason};
use crate::{Error, Result};

/// A file of `size` bytes against the receiver's `--max-size`: [`Reason::TooLarge`] over it.
pub fn check_size(rel: &RelPath, size: u64, max_size: Option<u64>) -> Result<()> {
    match max_size {
        Some(max) if size > max => Err(Error::refused(
            Reason::TooLarge,
            format!("{rel}: {size} bytes exceeds the limit of {max}"),
        )),
        _ => Ok(()),
    }
}

/// Most threads hashing a resumed prefix.
const RESUME_THREADS: usize = 16;

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
    /// The caller has just looked at what the final name holds (`answer::plan_file`) and
    /// decided to write, replacing it if `force`: the sink does not look again (without `force`
    /// the rename still refuses a file that appeared since).
    pub planned: bool,
    /// Written whole right after it is made and committed at once, never kept (an inline
    /// file): the temporary file is made with the final mode when the umask leaves that mode
    /// whole, and the commit then needs no chmod.
    pub at_once: bool,
}

/// The mode of a kept temporary file cut to the chunks written without a gap (by a clean
/// stop): its length can be trusted. The mode of one being written is 0600.
const SEALED_MODE: u32 = 0o700;

/// Chunks the receiver writes at once, in any order (its copy buffers,
/// `ring_budget::COPY_BUFS`): a temporary file a killed receiver left may lack some of its
/// last this many chunks.
const OUT_OF_ORDER: u64 = 4;

/// One file being received. Drop without [`commit`](Sink::commit) = [`abort`](Sink::abort).
#[derive(Debug)]
pub struct Sink {
    dir: ConfinedDir,
    final_name: String,
    temp_name: String,
    /// Where a striped file's resume state is kept ([`super::partial`]).
    stripes_name: String,
    /// Whether a resume state may be kept under that name: one an earlier attempt left with
    /// the temporary file continued here, or one saved by this sink. Unset, the commit does not
    /// look for one (two `unlink`s a small file would pay for nothing).
    stripe_state: AtomicBool,
    /// Whether the temporary file was made with the committed file's mode.
    mode_set: bool,
    /// Whether the commit fsyncs the directory (not for [`commit_small`](Sink::commit_small)).
    sync_dir: bool,
    file: File,
    size: u64,
    /// Bytes of the temporary file from an earlier attempt (whole chunks once started).
    held: u64,
    /// Whether that file was cut to the chunks written without a gap when it was kept
    /// ([`SEALED_MODE`]); one left by a killed receiver was not.
    held_sealed: bool,
    /// The chunk digests, once [`start`](Sink::start)ed.
    chunks: Option<Chunks>,
    /// The sender's digests compared so far: chunks `0 .. theirs`.
    theirs: u64,
    /// The first chunk whose digests differ: index, ours, theirs.
    bad: Option<(u64, Option<ChunkDigest>, ChunkDigest)>,
    opts: SinkOptions,
    finished: bool,
    /// The temporary file and the directories made for it, for [`cleanup::interrupt`].
    leftovers: Registered,
}

/// The process's file mode creation mask, read once (`Umask:` in `/proc/self/status`, Linux
/// 4.7 and later; `umask(2)` cannot read it without setting it). `None` if unreadable.
fn umask() -> Option<u32> {
    static UMASK: OnceLock<Option<u32>> = OnceLock::new();
    *UMASK.get_or_init(|| {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
        u32::from_str_radix(line.trim(), 8).ok()
    })
}

/// Below this many bytes to write, the free space is not asked for before the temporary file
/// is made (a statfs per file is a tree of small files' cost; a write onto a full disk fails
/// with ENOSPC, reported as no space too).
const FREE_CHECK_MIN: u64 = 64 * 1024;

pub(crate) fn write_err(what: String, e: std::io::Error) -> Error {
    let reason = if e.raw_os_error() == Some(libc::ENOSPC) {
        Reason::NoSpace
    } else {
        Reason::WriteError
    };
    Error::refused(reason, format!("{what}: {e}"))
}

/// [`Error::Verification`] for chunk `i` of `file` (cut as `layout`), received as `ours` where
/// the sender's digest is `theirs`, after `rounds` repair rounds.
pub(crate) fn mismatch_error(
    file: &str,
    layout: &Layout,
    i: u64,
    ours: Option<ChunkDigest>,
    theirs: ChunkDigest,
    rounds: u16,
) -> Error {
    let (off, len) = layout.range(i).unwrap_or((0, 0));
    let after = match rounds {
        0 => String::new(),
        1 => " (sent again once, still different)".into(),
        n => format!(" (sent again {n} times, still different)"),
    };
    Error::Verification {
        file: file.to_string(),
        chunk: Some(i),
        detail: format!(
            "chunk {i} (bytes {off}..{}) differs{after}: received bytes hash to {}, the \
             sender's {} is {}",
            off + len as u64,
            ours.map_or_else(|| "nothing".into(), |d| d.to_hex()),
            layout.algo,
            theirs.to_hex()
        ),
    }
}

impl Sink {
    /// Checks and starts receiving `rel` (of `size` bytes) below `out_dir`. Refuses, before
    /// creating anything, a size over `max_size` ([`Reason::TooLarge`]), an existing target
    /// without `force` ([`Reason::Exists`]) and a size beyond the free space
    /// ([`Reason::NoSpace`]); then creates missing parent directories and the temporary file.
    /// With `resume`, an existing temporary file of at most `size` bytes is continued.
    pub fn create(out_dir: &Path, rel: &RelPath, size: u64, opts: SinkOptions) -> Result<Sink> {
        Sink::create_in(&mut DirCache::default(), out_dir, rel, size, opts)
    }

    /// [`create`](Sink::create), walking through `dirs`. A directory `dirs` kept that is gone
    /// since (one made for a file that failed is removed with it while empty) is walked to, and
    /// made, again.
    pub fn create_in(
        dirs: &mut DirCache,
        out_dir: &Path,
        rel: &RelPath,
        size: u64,
        opts: SinkOptions,
    ) -> Result<Sink> {
        match Sink::create_once(dirs, out_dir, rel, size, opts.clone()) {
            Err(e) if e.errno() == Some(libc::ENOENT) => {
                dirs.forget();
                Sink::create_once(dirs, out_dir, rel, size, opts)
            }
            r => r,
        }
    }

    fn create_once(
        dirs: &mut DirCache,
        out_dir: &Path,
        rel: &RelPath,
        size: u64,
        opts: SinkOptions,
    ) -> Result<Sink> {
        check_size(rel, size, opts.max_size)?;
        let (dir, missing) = dirs.walk(out_dir, rel)?;
        let final_name = rel.file_name().to_string();
        let temp_name = rel.temp_name();
        let mut previous = None;
        if missing.is_empty() {
            let kind = match opts.planned {
                true => None,
                false => dir.kind(&final_name),
            };
            if let Some(kind) = kind {
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
        let (held, held_sealed) = match &previous {
            Some(f) => {
                let m = f
                    .metadata()
                    .map_err(|e| Error::io(format!("stat {temp_name}"), e))?;
                // Written to again from here on: no longer sealed, should this attempt be
                // killed too.
                f.set_permissions(Permissions::from_mode(0o600))
                    .map_err(|e| write_err(format!("chmod {temp_name}"), e))?;
                (m.len(), m.mode() & 0o777 == SEALED_MODE)
            }
            None => (0, false),
        };
        let held = if held > size {
            previous = None;
            0
        } else {
            held
        };
        let free = match size - held > FREE_CHECK_MIN {
            true => dir.free_bytes()?,
            // A write this small onto a full disk fails with ENOSPC: no space, as here.
            false => u64::MAX,
        };
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
        let continued = previous.is_some();
        // The final mode at once, when nothing can keep the file half-written under it.
        let mode_at_once = opts
            .mode
            .map(|m| m & 0o777)
            .filter(|&m| opts.at_once && !opts.resume && m != SEALED_MODE)
            .filter(|&m| umask().is_some_and(|u| m & u == 0));
        let create_mode = mode_at_once.unwrap_or(0o600);
        let creating = cleanup::begin()?;
        if !missing.is_empty() {
            dirs.forget();
        }
        let (dir, created) = names::create_dirs(dir, rel, &missing)?;
        let made = dir.try_clone().and_then(|reg_dir| {
            let (file, mode_set) = match previous {
                Some(file) => (file, false),
                None => {
                    // Without resume, a new temporary file at once when none is there (then
                    // no striped file's state can describe it).
                    let fresh = match opts.resume {
                        true => None,
                        false => dir.create_new(&temp_name, create_mode)?,
                    };
                    match fresh {
                        Some(file) => (file, mode_at_once.is_some()),
                        None => {
                            dir.remove(&temp_name)?;
                            // A striped file's state describes the temporary file just removed.
                            dir.remove(&rel.stripes_name())?;
                            (dir.open_file(&temp_name, true)?, false)
                        }
                    }
                }
            };
            Ok((reg_dir, file, mode_set))
        });
        let (reg_dir, file, mode_set) = match made {
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
        Ok(Sink {
            dir,
            final_name,
            temp_name,
            stripes_name: rel.stripes_name(),
            stripe_state: AtomicBool::new(continued),
            mode_set,
            sync_dir: true,
            file,
            size,
            held,
            held_sealed,
            chunks: None,
            theirs: 0,
            bad: None,
            opts,
            finished: false,
            leftovers,
        })
    }

    /// Fixes how the file is cut and hashed (the ring's slot size and the negotiated
    /// algorithm) and returns what MR's resume fields carry: the bytes already held from an
    /// earlier attempt, cut down to whole chunks (0 without resume), and their digest (hashed
    /// on a pool of threads). Writing fills the remaining chunks. Called once, before any write.
    pub fn start(&mut self, chunk: u32, algo: Algo) -> Result<(u64, Digest)> {
        if self.chunks.is_some() {
            return Err(Error::InvalidArgument("sink started twice".into()));
        }
        let layout = Layout::new(algo, u64::from(chunk), self.size)?;
        // A file kept by a clean stop holds what its length says. One a killed receiver left
        // may lack some of its last OUT_OF_ORDER chunks (written in any order): they are sent
        // again (and the sender checks the prefix's digest either way).
        let trusted = match self.held_sealed {
            true => self.held,
            false => self
                .held
                .saturating_sub(OUT_OF_ORDER.saturating_mul(u64::from(chunk))),
        };
        let held = layout.whole_chunks(trusted);
        let chunks = Chunks::new(layout);
        let n = layout.prefix(held).chunks();
        let file = &self.file;
        let temp = &self.temp_name;
        digest::par_for(0..n, digest::threads(RESUME_THREADS), |i| {
            let (off, len) = layout.range(i).expect("a chunk of the prefix");
            let mut buf = vec![0u8; len];
            file.read_exact_at(&mut buf, off)
                .map_err(|e| Error::io(format!("read {temp}"), e))?;
            chunks.hash(i, &buf).map(|_| ())
        })?;
        let hash = chunks
            .prefix_digest(held)
            .expect("every chunk of the prefix was hashed");
        self.held = held;
        self.chunks = Some(chunks);
        Ok((held, hash))
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

    fn started(&self) -> Result<&Chunks> {
        self.chunks
            .as_ref()
            .ok_or_else(|| Error::InvalidArgument("the sink was not started".into()))
    }

    /// How the file is cut and hashed, once started.
    pub fn layout(&self) -> Option<&Layout> {
        self.chunks.as_ref().map(Chunks::layout)
    }

    /// Bytes held from an earlier attempt (whole chunks once started).
    pub fn held(&self) -> u64 {
        self.held
    }

    /// Chunks written or held so far.
    pub fn chunks_done(&self) -> u64 {
        self.chunks.as_ref().map_or(0, Chunks::count)
    }

    /// Writes chunk `index` (at `index × chunk size`; every chunk whole, the last one shorter)
    /// and hashes it. Chunks may come in any order and from several threads at once; each at
    /// most once (a held chunk counts as written).
    pub fn write_chunk_at(&self, index: u64, data: &[u8]) -> Result<()> {
        self.put(index, data)?.hash(index, data).map(|_| ())
    }

    /// Chunk repair: writes chunk `index` again (it was received before and differed from
    /// the sender's digest) and replaces its digest. From any thread.
    pub fn rewrite_chunk_at(&self, index: u64, data: &[u8]) -> Result<()> {
        self.put(index, data)?.rehash(index, data).map(|_| ())
    }

    /// Writes chunk `index` (not one held) at its offset; returns the digests to record it in.
    fn put(&self, index: u64, data: &[u8]) -> Result<&Chunks> {
        let chunks = self.started()?;
        let off = chunks.check(index, data.len())?;
        if off < self.held {
            return Err(Error::Protocol(format!(
                "chunk {index} is held from an earlier attempt (resume at {})",
                self.held
            )));
        }
        self.file
            .write_all_at(data, off)
            .map_err(|e| write_err(format!("write {}", self.temp_name), e))?;
        Ok(chunks)
    }

    /// The digests of the chunks written or held, once started.
    pub fn chunk_digests(&self) -> Option<&Chunks> {
        self.chunks.as_ref()
    }

    /// Compares the sender's digests of chunks `first ..` (DIGESTS, in order from chunk 0) with
    /// the chunks written; the first that differs is named by [`commit`](Sink::commit).
    /// Returns that chunk's index when this batch holds the first difference.
    pub fn check_digests(&mut self, first: u64, theirs: &[ChunkDigest]) -> Result<Option<u64>> {
        let chunks = self
            .chunks
            .as_ref()
            .ok_or_else(|| Error::InvalidArgument("the sink was not started".into()))?;
        if first != self.theirs {
            return Err(Error::Protocol(format!(
                "DIGESTS from chunk {first}, expected chunk {}",
                self.theirs
            )));
        }
        let end = first + theirs.len() as u64;
        if end > chunks.layout().chunks() {
            return Err(Error::Protocol(format!(
                "DIGESTS up to chunk {end} of a file of {} chunks",
                chunks.layout().chunks()
            )));
        }
        if let Some(d) = theirs.first() {
            if d.as_bytes().len() != chunks.layout().algo.digest_len() {
                return Err(Error::Protocol("DIGESTS of another algorithm".into()));
            }
        }
        self.theirs = end;
        if self.bad.is_some() {
            return Ok(None);
        }
        let found = chunks.first_mismatch(first, theirs);
        if let Some(i) = found {
            let t = theirs[(i - first) as usize];
            self.bad = Some((i, chunks.get(i), t));
        }
        Ok(found)
    }

    /// Writes `data` at `offset`, which must be the start of a chunk with `data` the whole
    /// chunk ([`write_chunk_at`](Sink::write_chunk_at) by offset).
    pub fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        let chunk = self.started()?.layout().chunk;
        if offset % chunk != 0 {
            return Err(Error::Protocol(format!(
                "write at offset {offset}, not at a chunk boundary ({chunk}-byte chunks)"
            )));
        }
        self.write_chunk_at(offset / chunk, data)
    }

    /// Finishes the file: every chunk must be there and the sender's digests of all of them
    /// compared equal (else [`Reason::HashMismatch`] naming the first chunk that differs); the
    /// file digest must equal `expected`; then fsync, apply mode and mtime, rename onto the
    /// final name (refusing an existing one unless `force`), fsync the directory. Returns the
    /// file digest. On failure the temporary file is removed and nothing is left under the
    /// final name.
    pub fn commit(mut self, expected: &Digest) -> Result<Digest> {
        self.finished = true;
        let r = self.try_commit(expected);
        self.removed_on_failure(r)
    }

    /// [`commit`](Sink::commit) of a file of at most one chunk whose digest the sender sent
    /// with its data (inline, no DIGESTS): `expected`, the file digest, covers that chunk.
    /// The directory is not fsynced: the caller syncs [`dir`](Sink::dir) (once for the
    /// files of a batch) before it tells anyone the file is committed.
    pub fn commit_small(mut self, expected: &Digest) -> Result<Digest> {
        let chunks = self.started()?.layout().chunks();
        if chunks > 1 {
            return Err(Error::Protocol(format!(
                "{}: a file of {chunks} chunks sent without their digests",
                self.final_name
            )));
        }
        self.theirs = chunks;
        self.sync_dir = false;
        self.commit(expected)
    }

    /// The directory the file is committed in.
    pub fn dir(&self) -> &ConfinedDir {
        &self.dir
    }

    /// Striped receipt (`recv::stripe`, never [`start`](Sink::start)ed): another handle on
    /// the temporary file, for positional writes of the byte ranges other streams receive. A
    /// kept partial file of an unstarted sink is kept whole (its stripes say what is there).
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
        let chunks = self.started()?;
        let layout = *chunks.layout();
        if let Some(i) = chunks.first_missing() {
            let (off, _) = layout.range(i).expect("a missing chunk exists");
            return Err(Error::Protocol(format!(
                "FIN before chunk {i} (at byte {off}) of {} arrived",
                layout.chunks()
            )));
        }
        // The first chunk that differed, unless received again since and now the same.
        if let Some((i, _, theirs)) = self.bad.filter(|b| chunks.get(b.0) != Some(b.2)) {
            let ours = chunks.get(i);
            return Err(mismatch_error(
                &self.final_name,
                &layout,
                i,
                ours,
                theirs,
                0,
            ));
        }
        if self.theirs != layout.chunks() {
            return Err(Error::Protocol(format!(
                "FIN after the digests of {} of {} chunks",
                self.theirs,
                layout.chunks()
            )));
        }
        let got = chunks.finish()?;
        if got != *expected {
            return Err(Error::Verification {
                file: self.final_name.to_string(),
                chunk: None,
                detail: format!(
                    "received file digest {}, the sender's is {}",
                    blake3::Hash::from(got).to_hex(),
                    blake3::Hash::from(*expected).to_hex()
                ),
            });
        }
        self.install()?;
        Ok(got)
    }

    /// Mode, mtime, fsync, rename onto the final name, directory fsync.
    fn install(&mut self) -> Result<()> {
        let mode = self.opts.mode.map_or(0o600, |m| m & 0o777);
        let werr = |what: &str, e| write_err(format!("{what} {}", self.temp_name), e);
        if !self.mode_set {
            self.file
                .set_permissions(Permissions::from_mode(mode))
                .map_err(|e| werr("chmod", e))?;
        }
        if let Some(t) = self.opts.mtime {
            self.file
                .set_modified(t)
                .map_err(|e| werr("set mtime of", e))?;
        }
        self.file.sync_all().map_err(|e| werr("fsync", e))?;
        self.dir
            .rename(&self.temp_name, &self.final_name, self.opts.force)?;
        if self.stripe_state.load(Ordering::Relaxed) {
            self.dir.remove(&self.stripes_name)?;
            self.dir.remove(&self.next_stripes_name())?;
        }
        match self.sync_dir {
            true => self.dir.sync(),
            false => Ok(()),
        }
    }

    /// Keeps a striped file's resume state (an encoded [`super::partial::StripeState`]) next
    /// to the kept temporary file: written anew and fsynced (a torn write fails its checksum).
    pub fn save_stripe_state(&self, encoded: &[u8]) -> Result<()> {
        // Written aside, then renamed over the last one: a receiver killed at any moment
        // leaves the old state or the new, never none or half of one.
        self.stripe_state.store(true, Ordering::Relaxed);
        let next = self.next_stripes_name();
        self.dir.remove(&next)?;
        let mut f = self.dir.open_file(&next, true)?;
        f.write_all(encoded)
            .and_then(|()| f.sync_all())
            .map_err(|e| write_err(format!("write {next}"), e))?;
        self.dir.rename(&next, &self.stripes_name, true)?;
        self.dir.sync()
    }

    /// Where [`save_stripe_state`](Sink::save_stripe_state) writes before its rename: a short
    /// name (whatever the file's) ending in the state's suffix, like the state itself.
    fn next_stripes_name(&self) -> String {
        let hex = blake3::hash(self.stripes_name.as_bytes()).to_hex();
        format!(".{}.next{}", &hex[..16], names::STRIPES_SUFFIX)
    }

    /// The striped file's resume state kept by an earlier attempt, if any (at most
    /// [`super::partial::MAX_LEN`] bytes are read; the caller decodes).
    pub fn load_stripe_state(&self) -> Option<Vec<u8>> {
        let f = self.dir.open_file(&self.stripes_name, false).ok()?;
        let mut b = Vec::new();
        let limit = super::partial::MAX_LEN as u64 + 1;
        f.take(limit).read_to_end(&mut b).ok()?;
        Some(b)
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
        if self.opts.resume && self.keep_prefix().is_ok() {
            return Ok(());
        }
        self.leftovers.set_keep(false);
        let _ = self.dir.remove(&self.stripes_name);
        let _ = self.dir.remove(&self.next_stripes_name());
        self.leftovers.remove()
    }
}

impl Sink {
    /// For a kept temporary file: cuts it to the chunks written without a gap (chunks arrive
    /// in any order, so a later one may be there without an earlier one: a resume trusts the
    /// length) and before the first that differs from the sender's digest, then syncs it.
    fn keep_prefix(&self) -> Result<()> {
        // Not started: the file is as the last attempt left it, sealed or not.
        let mut sealed = self.held_sealed;
        if let Some(chunks) = &self.chunks {
            sealed = true;
            // Nor the first chunk that still differs from the sender's digest: kept, it would
            // make the next resume's prefix differ.
            let bad = self
                .bad
                .filter(|b| chunks.get(b.0) != Some(b.2))
                .map(|b| b.0);
            let cut = match (chunks.first_missing(), bad) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if let Some(i) = cut {
                let keep = i.saturating_mul(chunks.layout().chunk);
                let len = self
                    .file
                    .metadata()
                    .map_err(|e| Error::io(format!("stat {}", self.temp_name), e))?
                    .len();
                if len > keep {
                    self.file
                        .set_len(keep)
                        .map_err(|e| write_err(format!("truncate {}", self.temp_name), e))?;
                }
            }
        }
        // Sealed: whole up to its length (until a resume writes to it again).
        if sealed {
            self.file
                .set_permissions(Permissions::from_mode(SEALED_MODE))
                .map_err(|e| write_err(format!("chmod {}", self.temp_name), e))?;
        }
        self.file
            .sync_all()
            .map_err(|e| write_err(format!("fsync {}", self.temp_name), e))
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.finish_abort();
    }
}

#[cfg(test)]
mod tests;
