//! What one HELLO of a file sends: the whole file, or one stripe of it (a job of one stream of
//! several), and how a stripe's verdict becomes its file's.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::data::ChunkSource;
use super::source::{self, read_err};
use crate::error::{Error, Result};
use crate::xfer::file::digest::{file_digest_of_stripes, Chunks, Layout, StripeDigests};
use crate::xfer::file::proto::{Algo, Digest, Stripe};
use crate::xfer::file::report::{FileReport, SessionReport};

/// What a file's HELLO covers.
#[derive(Clone, Copy, Debug)]
pub(super) enum Part<'a> {
    /// The whole file, over one stream.
    Whole,
    /// One stripe of it, sent by one stream of several.
    Stripe(&'a StripeJob),
}

impl<'a> Part<'a> {
    /// The stripe, if this is one.
    pub(super) fn stripe(self) -> Option<&'a StripeJob> {
        match self {
            Part::Whole => None,
            Part::Stripe(s) => Some(s),
        }
    }

    /// Records a file's (or, striped, a stripe's) verdict: a stripe's goes to its file's tracker,
    /// which gives the file's verdict with the last stripe.
    pub(super) fn record(
        self,
        report: &mut SessionReport,
        f: FileReport,
        refused: bool,
        digest: Option<StripeDigests>,
    ) {
        let (f, refused) = match self {
            Part::Whole => (f, refused),
            Part::Stripe(s) => match s.track.end(&s.stripe, f, refused, digest) {
                Some(done) => done,
                None => return,
            },
        };
        if refused {
            report.push_refused(f);
        } else {
            report.push(f);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One stripe of a file, as a job of some stream.
#[derive(Debug, Clone)]
pub(super) struct StripeJob {
    pub(super) stripe: Stripe,
    pub(super) track: Arc<FileTrack>,
    /// The stream that sends it (set when a stream takes it; for errors).
    pub(super) stream: u16,
}

/// A stripe's verdict as the sender records it.
type StripeEnd = (FileReport, bool, Option<StripeDigests>);

/// The sender's view of a striped file: the stripes' verdicts, merged into the file's when the
/// last one arrives.
#[derive(Debug)]
pub(super) struct FileTrack {
    pub(super) size: u64,
    /// `send --checksum`: the file's BLAKE3, computed once for every stripe's HELLO.
    pub(super) checksum: Option<Digest>,
    stripes: Vec<Stripe>,
    ends: Mutex<Vec<Option<StripeEnd>>>,
    /// Signalled at each stripe's verdict.
    ended: Condvar,
}

impl FileTrack {
    /// A file of `size` bytes cut into `stripes`, none ended yet.
    pub(super) fn new(size: u64, checksum: Option<Digest>, stripes: Vec<Stripe>) -> FileTrack {
        FileTrack {
            size,
            checksum,
            ends: Mutex::new(vec![None; stripes.len()]),
            stripes,
            ended: Condvar::new(),
        }
    }

    /// Records stripe `s`'s verdict (`refused`: before any data; `digest`: verified); returns
    /// the file's verdict (and whether refused) once every stripe has one.
    pub(super) fn end(
        &self,
        s: &Stripe,
        f: FileReport,
        refused: bool,
        digest: Option<StripeDigests>,
    ) -> Option<(FileReport, bool)> {
        let mut ends = lock(&self.ends);
        ends[usize::from(s.index)] = Some((f, refused, digest));
        self.ended.notify_all();
        let all: Vec<&StripeEnd> = ends.iter().flatten().collect();
        if all.len() < self.stripes.len() {
            return None;
        }
        if let Some(e) = all.iter().find(|e| e.1) {
            return Some((e.0.clone(), true));
        }
        if let Some(e) = all.iter().find(|e| !e.0.is_ok() && !e.0.is_skipped()) {
            return Some((e.0.clone(), false));
        }
        let mut f = all[0].0.clone();
        f.repaired = all.iter().map(|e| e.0.repaired).sum();
        if all.iter().any(|e| e.0.is_skipped()) {
            return Some((f, false));
        }
        // Every stripe verified: the file's digest from the stripes' chunk digests (the
        // whole file's digest when they are on one chunk grid, as over one stream).
        let parts: Vec<StripeDigests> = all.iter().filter_map(|e| e.2.clone()).collect();
        f.bytes = self.size;
        f.hash = match file_digest_of_stripes(self.size, &parts) {
            Some((d, _)) if parts.len() == all.len() => {
                Some(blake3::Hash::from(d).to_hex().to_string())
            }
            _ => None,
        };
        Some((f, false))
    }
}

impl FileTrack {
    /// Whether every stripe has its verdict.
    pub(super) fn ended(&self) -> bool {
        lock(&self.ends).iter().all(Option::is_some)
    }

    /// For the test hold (`SendHooks::hold_stripe`): waits (at most a minute) until every
    /// stripe but `index` has its verdict.
    pub(super) fn wait_others(&self, index: u16) {
        let others_done = |ends: &mut Vec<Option<StripeEnd>>| {
            ends.iter()
                .enumerate()
                .all(|(i, e)| e.is_some() || i == usize::from(index))
        };
        let ends = lock(&self.ends);
        let _ = self
            .ended
            .wait_timeout_while(ends, Duration::from_secs(60), |e| !others_done(e));
    }
}

/// Reads one stripe of a file (`[offset, offset + len)`), chunk by chunk from several
/// threads, each chunk hashed as it is read: the stripe's digest is the file digest formula
/// over the stripe's chunks (see [`digest`]).
pub(super) struct RangeSource {
    file: File,
    path: PathBuf,
    size: u64,
    /// The modification time every stripe of the file is read at.
    mtime: (i64, u32),
    stripe: Stripe,
    /// Bytes of the stripe the receiver holds (whole chunks), not sent.
    held: u64,
    chunks: Option<Chunks>,
}

impl RangeSource {
    /// Opens `path` (of `size` bytes and modified at `mtime`, as planned) for stripe `s`.
    pub(super) fn open(
        path: &Path,
        (size, mtime): (u64, (i64, u32)),
        s: &Stripe,
    ) -> Result<RangeSource> {
        let file = File::open(path).map_err(|e| read_err(path, e))?;
        Ok(RangeSource {
            file,
            path: path.to_path_buf(),
            size,
            mtime,
            stripe: *s,
            held: 0,
            chunks: None,
        })
    }

    /// Fixes how the stripe is cut (the receiver's slot size) and hashed. Once, before reading.
    pub(super) fn start(&mut self, chunk: u32, algo: Algo) -> Result<()> {
        let layout = Layout::new(algo, u64::from(chunk), self.stripe.len)?;
        self.chunks = Some(Chunks::new(layout));
        Ok(())
    }

    /// The chunk digests so far (after [`start`](RangeSource::start)).
    pub(super) fn chunks(&self) -> Result<&Chunks> {
        self.chunks
            .as_ref()
            .ok_or_else(|| Error::InvalidArgument("the stripe source was not started".into()))
    }

    /// The stripe's length.
    pub(super) fn len(&self) -> u64 {
        self.stripe.len
    }

    /// How the stripe is cut and hashed.
    pub(super) fn layout(&self) -> Result<Layout> {
        self.chunks().map(|c| *c.layout())
    }

    /// For `--resume`: hashes the stripe's first `held` bytes (whole chunks) and continues
    /// after them if their digest matches the receiver's `hash`; false otherwise.
    pub(super) fn skip_verified(&mut self, held: u64, hash: &Digest) -> Result<bool> {
        let layout = self.layout()?;
        if held > self.stripe.len || layout.whole_chunks(held) != held {
            return Ok(false);
        }
        let mut buf = vec![0u8; layout.chunk as usize];
        for i in 0..layout.prefix(held).chunks() {
            self.read_chunk_at(i, &mut buf)?;
        }
        self.held = held;
        Ok(self.chunks()?.prefix_digest(held).as_ref() == Some(hash))
    }
}

impl ChunkSource for RangeSource {
    fn size(&self) -> u64 {
        self.stripe.len
    }
    fn first_chunk(&self) -> u64 {
        self.chunks
            .as_ref()
            .map_or(0, |c| self.held.div_ceil(c.layout().chunk))
    }
    fn read_chunk_at(&self, index: u64, buf: &mut [u8]) -> Result<usize> {
        let chunks = self.chunks()?;
        let (off, len) = chunks.layout().range(index).ok_or_else(|| {
            Error::InvalidArgument(format!("no chunk {index} in stripe {}", self.stripe.index))
        })?;
        let have = buf.len();
        let buf = buf.get_mut(..len).ok_or_else(|| {
            Error::InvalidArgument(format!("a buffer of {have} bytes for a {len}-byte chunk"))
        })?;
        self.file
            .read_exact_at(buf, self.stripe.offset + off)
            .map_err(|e| read_err(&self.path, e))?;
        chunks.hash(index, buf)?;
        Ok(len)
    }
    fn reread_chunk_at(&self, index: u64, buf: &mut [u8]) -> Result<usize> {
        let chunks = self.chunks()?;
        let len = chunks.layout().range(index).map_or(0, |r| r.1);
        let buf = buf.get_mut(..len).ok_or_else(|| {
            Error::InvalidArgument(format!("a buffer too small for a {len}-byte chunk"))
        })?;
        let off = self.stripe.offset + index * chunks.layout().chunk;
        self.file
            .read_exact_at(buf, off)
            .map_err(|e| read_err(&self.path, e))?;
        if !chunks.matches(index, buf)? {
            return Err(read_err(
                &self.path,
                format_args!("chunk {index} of stripe {} changed", self.stripe.index),
            ));
        }
        Ok(len)
    }
    fn finish(&self) -> Result<Digest> {
        source::unchanged(&self.file, &self.path, self.size, self.mtime)?;
        self.chunks()?.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(result: &str) -> FileReport {
        FileReport {
            name: "f".into(),
            kind: "file",
            bytes: 8,
            hash: None,
            result: result.into(),
            message: None,
            verify: None,
            repaired: 0,
        }
    }

    #[test]
    fn a_striped_file_has_one_verdict_when_every_stripe_has_one() {
        let stripes =
            crate::xfer::file::proto::plan_stripes(3 << 20, 3, super::super::streams::STRIPE_ALIGN);
        let track = || FileTrack::new(3 << 20, None, stripes.clone());
        // Each stripe of 1 MiB hashed in 256 KiB chunks: the file's chunks, in stripes.
        let data: Vec<u8> = (0..3u32 << 20).map(|i| (i / 4099) as u8).collect();
        let digests = |s: &Stripe| {
            let layout = Layout::new(Algo::Xxh3, 256 << 10, s.len).unwrap();
            let c = Chunks::new(layout);
            let part = &data[s.offset as usize..s.end() as usize];
            for (i, p) in part.chunks(256 << 10).enumerate() {
                c.hash(i as u64, p).unwrap();
            }
            Some(c.stripe(s.offset, c.finish().unwrap()))
        };
        let t = track();
        assert!(t
            .end(&stripes[2], report("ok"), false, digests(&stripes[2]))
            .is_none());
        assert!(t
            .end(&stripes[0], report("ok"), false, digests(&stripes[0]))
            .is_none());
        let (f, refused) = t
            .end(&stripes[1], report("ok"), false, digests(&stripes[1]))
            .unwrap();
        assert!(f.is_ok() && !refused);
        // The whole file's digest, as one stream would report it.
        let want = crate::xfer::file::digest::digest_of(Algo::Xxh3, 256 << 10, &data).unwrap();
        assert_eq!(
            f.hash.unwrap(),
            blake3::Hash::from(want).to_hex().to_string()
        );
        assert_eq!(f.bytes, 3 << 20);
        // One failed stripe fails the file; a refusal is reported as one.
        let t = track();
        t.end(&stripes[0], report("ok"), false, digests(&stripes[0]));
        t.end(&stripes[1], report("hash mismatch"), false, None);
        let (f, refused) = t
            .end(&stripes[2], report("ok"), false, digests(&stripes[2]))
            .unwrap();
        assert_eq!((f.result.as_str(), refused), ("hash mismatch", false));
        let t = track();
        t.end(&stripes[0], report("exists"), true, None);
        t.end(&stripes[1], report("exists"), true, None);
        let (f, refused) = t.end(&stripes[2], report("exists"), true, None).unwrap();
        assert_eq!((f.result.as_str(), refused), ("exists", true));
    }
}
