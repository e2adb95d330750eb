//! Order-independent, per-chunk file digests (see "Verification" in `docs/file-protocol.md`).
//!
//! A file of `size` bytes is cut into chunks of `chunk` bytes (the last one shorter); chunk
//! `i` covers `i × chunk ..`. Each chunk gets its own digest ([`chunk_digest`]: BLAKE3-256 or
//! XXH3-128 of its bytes, the algorithm negotiated in HELLO), computed on whichever thread holds
//! the chunk, in any order. The file digest ([`combine`]) is a BLAKE3 key derivation over the
//! algorithm, the chunk size, the size and the ordered list of chunk digests, so it is the same
//! whatever order the chunks were hashed in, and a prefix of whole chunks has a digest of its
//! own (resume). [`Chunks`] collects the digests of one file from several threads;
//! [`par_for`] runs a job per chunk on a pool of threads.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

pub use super::proto::{Algo, ChunkDigest, MAX_CHUNK_DIGEST};
use super::proto::{Digest, Reason};
use crate::{Error, Result};

/// The BLAKE3 key-derivation context of the file digest.
pub const FILE_DIGEST_CONTEXT: &str = "rdmaxfer 2026-11 file digest v2 (ordered chunk digests)";

/// The digest of one chunk's bytes.
pub fn chunk_digest(algo: Algo, data: &[u8]) -> ChunkDigest {
    match algo {
        Algo::Blake3 => ChunkDigest::from_bytes(algo, blake3::hash(data).as_bytes()),
        Algo::Xxh3 => {
            ChunkDigest::from_bytes(algo, &xxhash_rust::xxh3::xxh3_128(data).to_be_bytes())
        }
    }
    .expect("the hash has the algorithm's length")
}

/// How a file is cut into chunks and hashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Chunk hash.
    pub algo: Algo,
    /// Bytes per chunk (> 0).
    pub chunk: u64,
    /// File size.
    pub size: u64,
}

impl Layout {
    /// A layout; refuses a zero chunk size.
    pub fn new(algo: Algo, chunk: u64, size: u64) -> Result<Layout> {
        if chunk == 0 {
            return Err(Error::InvalidArgument("chunk size 0".into()));
        }
        Ok(Layout { algo, chunk, size })
    }

    /// Number of chunks (0 for an empty file).
    pub fn chunks(&self) -> u64 {
        self.size.div_ceil(self.chunk)
    }

    /// Offset and length of chunk `index`, if it exists.
    pub fn range(&self, index: u64) -> Option<(u64, usize)> {
        if index >= self.chunks() {
            return None;
        }
        let off = index * self.chunk;
        Some((off, (self.size - off).min(self.chunk) as usize))
    }

    /// The same cut of the first `size` bytes (a resume prefix).
    pub fn prefix(&self, size: u64) -> Layout {
        Layout {
            size: size.min(self.size),
            ..*self
        }
    }

    /// The largest prefix of at most `held` bytes made of whole chunks (or the whole file).
    pub fn whole_chunks(&self, held: u64) -> u64 {
        if held >= self.size {
            self.size
        } else {
            held / self.chunk * self.chunk
        }
    }
}

/// The file digest of `layout` from its chunk digests, in chunk order.
pub fn combine<'a>(layout: &Layout, digests: impl IntoIterator<Item = &'a ChunkDigest>) -> Digest {
    let mut h = blake3::Hasher::new_derive_key(FILE_DIGEST_CONTEXT);
    h.update(&layout.algo.code().to_be_bytes());
    h.update(&layout.chunk.to_be_bytes());
    h.update(&layout.size.to_be_bytes());
    for d in digests {
        h.update(d.as_bytes());
    }
    *h.finalize().as_bytes()
}

/// One verified stripe of a striped file: where it starts, how it was cut, its digest (the
/// file digest formula over its own chunks) and its chunk digests in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StripeDigests {
    /// Offset of the stripe in the file.
    pub offset: u64,
    /// How the stripe was cut (its `size` is the stripe's length).
    pub layout: Layout,
    /// The stripe's digest (FIN's).
    pub digest: Digest,
    /// Its chunk digests, chunk 0 first.
    pub chunks: Vec<ChunkDigest>,
}

/// The file digest of a file of `size` bytes received as `stripes` (in stripe order): when
/// the stripes cover the file, share one chunk size `c` and start on the file's `c`-byte grid,
/// their chunks are the file's chunks and the result is the file digest of the whole file cut
/// in `c`-byte chunks ([`combine`]), the same as over one stream: the digest depends on the
/// bytes, the chunk size and the algorithm, not on the streams. Otherwise (stripes cut in
/// different sizes, e.g. receiver rings of different slot sizes under memory pressure) it is
/// [`striped_digest`](super::proto::striped_digest) of the stripes' digests. Returns the
/// digest and the layout it was computed over (the first stripe's in the second case).
pub fn file_digest_of_stripes(size: u64, stripes: &[StripeDigests]) -> Option<(Digest, Layout)> {
    let first = stripes.first()?.layout;
    let mut next = 0u64;
    let aligned = stripes.iter().all(|s| {
        let ok = s.layout.algo == first.algo
            && s.layout.chunk == first.chunk
            && s.offset == next
            && s.offset % first.chunk == 0
            && s.chunks.len() as u64 == s.layout.chunks();
        next = s.offset.saturating_add(s.layout.size);
        ok
    }) && next == size;
    if aligned {
        let layout = Layout { size, ..first };
        let all = stripes.iter().flat_map(|s| s.chunks.iter());
        return Some((combine(&layout, all), layout));
    }
    let parts: Vec<(u64, u64, Digest)> = stripes
        .iter()
        .map(|s| (s.offset, s.layout.size, s.digest))
        .collect();
    Some((super::proto::striped_digest(&parts), first))
}

/// The file digest of `data` cut in `chunk`-byte chunks, on one thread (tests, tools).
pub fn digest_of(algo: Algo, chunk: u64, data: &[u8]) -> Result<Digest> {
    let layout = Layout::new(algo, chunk, data.len() as u64)?;
    let step = usize::try_from(chunk).unwrap_or(usize::MAX);
    let ds: Vec<ChunkDigest> = data.chunks(step).map(|c| chunk_digest(algo, c)).collect();
    Ok(combine(&layout, &ds))
}

/// The chunk digests of one file as they are computed, from any thread, in any order.
/// Memory grows with the chunks recorded (about 80 bytes each), not with the announced size.
#[derive(Debug)]
pub struct Chunks {
    layout: Layout,
    done: Mutex<BTreeMap<u64, ChunkDigest>>,
}

impl Chunks {
    /// No chunk recorded yet.
    pub fn new(layout: Layout) -> Chunks {
        Chunks {
            layout,
            done: Mutex::new(BTreeMap::new()),
        }
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, ChunkDigest>> {
        self.done.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks that `data` is chunk `index` by its length, hashes it and records the digest.
    /// Refuses a chunk outside the file, of the wrong length, or recorded before.
    pub fn hash(&self, index: u64, data: &[u8]) -> Result<ChunkDigest> {
        self.check(index, data.len())?;
        let d = chunk_digest(self.layout.algo, data);
        self.record(index, d)?;
        Ok(d)
    }

    /// Checks that chunk `index` exists and is `len` bytes long; returns its offset.
    pub fn check(&self, index: u64, len: usize) -> Result<u64> {
        match self.layout.range(index) {
            Some((off, want)) if want == len => Ok(off),
            Some((_, want)) => Err(Error::Protocol(format!(
                "chunk {index} is {len} bytes, expected {want}"
            ))),
            None => Err(Error::Protocol(format!(
                "chunk {index} is beyond the {} chunks of a {}-byte file",
                self.layout.chunks(),
                self.layout.size
            ))),
        }
    }

    /// Chunk repair: hashes chunk `index` written again and replaces its digest. Refuses a
    /// chunk never recorded (only a chunk received can be received again).
    pub fn rehash(&self, index: u64, data: &[u8]) -> Result<ChunkDigest> {
        self.check(index, data.len())?;
        let d = chunk_digest(self.layout.algo, data);
        match self.map().get_mut(&index) {
            Some(old) => *old = d,
            None => {
                return Err(Error::Protocol(format!(
                    "chunk {index} sent again before it was received"
                )))
            }
        }
        Ok(d)
    }

    /// Chunk repair, sender: whether `data`, read again for chunk `index`, hashes to the digest
    /// recorded when it was first read.
    pub fn matches(&self, index: u64, data: &[u8]) -> Result<bool> {
        self.check(index, data.len())?;
        Ok(self.get(index) == Some(chunk_digest(self.layout.algo, data)))
    }

    /// Records the digest of chunk `index` (computed elsewhere).
    pub fn record(&self, index: u64, d: ChunkDigest) -> Result<()> {
        if self.map().insert(index, d).is_some() {
            return Err(Error::Protocol(format!("chunk {index} arrived twice")));
        }
        Ok(())
    }

    /// The digest of chunk `index`, if recorded.
    pub fn get(&self, index: u64) -> Option<ChunkDigest> {
        self.map().get(&index).copied()
    }

    /// Chunks recorded.
    pub fn count(&self) -> u64 {
        self.map().len() as u64
    }

    /// The first chunk of the file not recorded, if any.
    pub fn first_missing(&self) -> Option<u64> {
        let map = self.map();
        let n = self.layout.chunks();
        // Keys are < n (checked on insert) and distinct: all present iff there are n of them.
        if map.len() as u64 == n {
            return None;
        }
        let mut want = 0;
        for &k in map.keys() {
            if k != want {
                break;
            }
            want += 1;
        }
        Some(want)
    }

    /// The digest of the first `size` bytes (whole chunks, or the whole file), if all their
    /// chunks are recorded.
    pub fn prefix_digest(&self, size: u64) -> Option<Digest> {
        let layout = self.layout.prefix(size);
        let n = layout.chunks();
        let map = self.map();
        let ds: Vec<&ChunkDigest> = map.range(..n).map(|(_, d)| d).collect();
        (ds.len() as u64 == n).then(|| combine(&layout, ds))
    }

    /// The file digest; refuses if a chunk is missing.
    pub fn finish(&self) -> Result<Digest> {
        if let Some(i) = self.first_missing() {
            return Err(Error::Protocol(format!(
                "chunk {i} of {} was never received",
                self.layout.chunks()
            )));
        }
        let map = self.map();
        Ok(combine(&self.layout, map.values()))
    }

    /// A verified stripe at `offset`: its digest and every chunk digest (after
    /// [`finish`](Chunks::finish) succeeded).
    pub fn stripe(&self, offset: u64, digest: Digest) -> StripeDigests {
        StripeDigests {
            offset,
            layout: self.layout,
            digest,
            chunks: self.map().values().copied().collect(),
        }
    }

    /// Digests of chunks `first ..` (at most `max`), in order, for a DIGESTS message.
    pub fn batch(&self, first: u64, max: usize) -> Vec<ChunkDigest> {
        self.map()
            .range(first..)
            .take(max)
            .map(|(_, d)| *d)
            .collect()
    }

    /// Compares the peer's digests of chunks `first ..` with the recorded ones; returns the
    /// first chunk that differs (or was not recorded here), if any.
    pub fn first_mismatch(&self, first: u64, theirs: &[ChunkDigest]) -> Option<u64> {
        let map = self.map();
        (first..)
            .zip(theirs)
            .find(|(i, d)| map.get(i) != Some(*d))
            .map(|(i, _)| i)
    }
}

/// Threads for hashing: the machine's parallelism, at most `cap`, at least 1.
/// The parallelism is read once per process: `available_parallelism` reads the cgroup files
/// on every call, which a tree of small files would pay per file.
pub fn threads(cap: usize) -> usize {
    static PARALLELISM: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let n =
        *PARALLELISM.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    n.clamp(1, cap.max(1))
}

/// Runs `job(i)` for every `i` in `range` on `threads` scoped threads (work taken in order from
/// a shared counter); stops at the first error and returns it.
pub fn par_for(
    range: std::ops::Range<u64>,
    threads: usize,
    job: impl Fn(u64) -> Result<()> + Sync,
) -> Result<()> {
    let next = AtomicU64::new(range.start);
    let failed = Mutex::new(None);
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= range.end {
            return;
        }
        if let Err(e) = job(i) {
            next.store(range.end, Ordering::Relaxed);
            failed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(e);
            return;
        }
    };
    // No more threads than jobs: a file with nothing to hash spawns none.
    let jobs = usize::try_from(range.end.saturating_sub(range.start)).unwrap_or(usize::MAX);
    if jobs == 0 {
        return Ok(());
    }
    let n = threads.clamp(1, 256).min(jobs);
    let spawned = std::thread::scope(|s| {
        let handles: Vec<_> = (1..n).map(|_| s.spawn(work)).collect();
        work();
        handles.into_iter().all(|h| h.join().is_ok())
    });
    if !spawned {
        return Err(Error::refused(
            Reason::Internal,
            "a worker thread (hashing or listing) panicked",
        ));
    }
    match failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
