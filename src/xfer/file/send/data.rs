//! The data phase of one part (a file or a stripe): chunks read by a pool of threads into the
//! registered buffers, posted in order as RDMA WRITE_WITH_IMM into the receiver's ring, then
//! the chunk digests (DIGESTS).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::core::{ChunkPlan, ChunkWrite};
use super::source::Source;
use crate::error::{Error, Result};
use crate::verbs::{RemoteRegion, TRACE_TARGET};
use crate::xfer::file::waits::{moved, wait_on};
use crate::xfer::file::ctl::{decode_ctl, peer_err, send_msg};
use crate::xfer::file::digest::{self, Chunks};
use crate::xfer::file::fault::{self, Faults};
use crate::xfer::file::link::Link;
use crate::xfer::file::options::Cancel;
use crate::xfer::file::proto::{Digest, Digests, Msg, Reason, MAX_DIGESTS};

/// The `tracing` target of the sender's phase markers (debug level): set `RDMAXFER_LOG` to
/// `rdmaxfer_phase=debug` to see, with timestamps, when each stream connects and joins, when
/// each file or stripe starts its data, sends FIN and hears its verdict, and when the session
/// ends (`ci/guest-send-phases.sh` reads them).
pub const PHASE_TARGET: &str = "rdmaxfer_phase";

/// The sender's registered chunk buffers: the free ones, how many there are, and their size.
pub(super) struct ChunkBufs<B> {
    pub(super) free: Vec<B>,
    pub(super) total: usize,
    pub(super) slot_size: u32,
}

/// What [`send_data`] reads from: a whole file ([`Source`]) or one stripe of it. Chunk
/// indices count from the start of what it covers.
pub(super) trait ChunkSource: Send + Sync + 'static {
    /// Bytes it covers.
    fn size(&self) -> u64;
    /// The first chunk to send (after those the receiver holds).
    fn first_chunk(&self) -> u64;
    /// Reads and hashes chunk `index` into `buf`; returns its length.
    fn read_chunk_at(&self, index: u64, buf: &mut [u8]) -> Result<usize>;
    /// Chunk repair: reads chunk `index` again into `buf` (a read error if it no longer
    /// hashes as it did when first read); returns its length.
    fn reread_chunk_at(&self, index: u64, buf: &mut [u8]) -> Result<usize>;
    /// The digest of all it covers, once every chunk was read.
    fn finish(&self) -> Result<Digest>;
}

impl ChunkSource for Source {
    fn size(&self) -> u64 {
        Source::size(self)
    }
    fn first_chunk(&self) -> u64 {
        Source::first_chunk(self)
    }
    fn read_chunk_at(&self, index: u64, buf: &mut [u8]) -> Result<usize> {
        Source::read_chunk_at(self, index, buf)
    }
    fn reread_chunk_at(&self, index: u64, buf: &mut [u8]) -> Result<usize> {
        Source::reread_chunk_at(self, index, buf)
    }
    fn finish(&self) -> Result<Digest> {
        Source::finish(self)
    }
}

/// Sends DIGESTS: the digest of every chunk of the file (or stripe), in order, in batches.
pub(super) async fn send_digests<L: Link>(
    ep: &mut L,
    chunks: &Chunks,
    session: Option<&AtomicU64>,
) -> Result<()> {
    let mut first = 0;
    loop {
        let digests = chunks.batch(first, MAX_DIGESTS);
        if digests.is_empty() {
            return Ok(());
        }
        let n = digests.len() as u64;
        let msg = Msg::Digests(Digests {
            algo: chunks.layout().algo,
            first,
            digests,
        });
        wait_on!(ep, session, send_msg(ep, &msg).await)?;
        first += n;
    }
}

/// Where one part's chunks go: the receiver's ring (from its MR), with the test hooks that
/// apply to the part and the label that names it in errors ([`fault::part_label`]).
pub(super) struct DataTarget<'a> {
    pub(super) remote: RemoteRegion,
    pub(super) plan: ChunkPlan,
    pub(super) faults: Faults,
    pub(super) label: &'a str,
    /// The stream's pace (`send --bwlimit`), kept from part to part.
    pub(super) pace: Option<&'a mut Pacer>,
    /// Looked at before each chunk.
    pub(super) cancel: &'a Cancel,
}

/// Holds a stream's data to at most `rate` bytes per second (`send --bwlimit`): a chunk is
/// posted no earlier than the time its bytes are due at that rate since the stream's first.
#[derive(Debug)]
pub(super) struct Pacer {
    rate: u64,
    start: Option<Instant>,
    sent: u64,
}

impl Pacer {
    /// A pace of `rate` bytes per second (at least 1).
    pub(super) fn new(rate: u64) -> Pacer {
        Pacer {
            rate: rate.max(1),
            start: None,
            sent: 0,
        }
    }

    /// Waits (as `L` does) until `n` more bytes may go, and counts them.
    async fn before<L: Link>(&mut self, n: u64) {
        let start = *self.start.get_or_insert_with(Instant::now);
        let due = start + Duration::from_secs_f64(self.sent as f64 / self.rate as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            // Rate limiting, not synchronisation: the link may go no faster than asked.
            L::sleep(wait).await;
        }
        self.sent += n;
    }
}

/// Sends the rest of `src` (after the chunks the receiver holds): a pool of reader threads
/// reads and hashes chunks straight into the registered buffers, in any order, while this
/// task posts them in order and takes completed ones back, so disk, hashing (on every core)
/// and network overlap. Returns the whole file's digest and the bytes written (also with an
/// error). Its waits for credits and completions go on while `session` moves (see
/// [`wait_on!`]); each chunk read, posted or completed counts as the session's progress.
/// `to` says where the chunks go.
///
/// Dropped before its end, the readers finish the chunk they hold and end; the buffers they
/// held are let go.
pub(super) async fn send_data<S: ChunkSource, L: Link>(
    ep: &mut L,
    r: &mut ChunkBufs<L::Buf>,
    src: &Arc<S>,
    to: &mut DataTarget<'_>,
    progress: &mut impl FnMut(u64),
    session: Option<&AtomicU64>,
) -> std::result::Result<(Digest, u64), (Error, u64)> {
    let DataTarget {
        remote,
        plan,
        faults,
        label,
        pace,
        cancel,
    } = to;
    let (remote, faults, label) = (&*remote, *faults, *label);
    let slot = u64::from(r.slot_size);
    let (plan, writes, again) = (&*plan, plan.len(), plan.is_again());
    let mut written = 0u64;
    tracing::trace!(
        target: TRACE_TARGET,
        "{label}: sending on qpn={} {writes} chunks from chunk {} (again: {again}) into a ring \
         of {slot}-byte slots at {:#x}",
        ep.trace_id(),
        plan.chunk_at(0),
        remote.addr,
    );
    let readers = match Readers::start(src, r.total, again, faults) {
        Ok(x) => x,
        Err(e) => return Err((e, 0)),
    };
    let ended = || Error::refused(Reason::Internal, "the reader threads ended");
    let mut at_workers = 0usize;
    let mut assigned = 0;
    let mut ready: BTreeMap<u64, (L::Buf, usize)> = BTreeMap::new();
    let mut in_flight = 0usize;
    let res: Result<()> = async {
        let mut i = 0;
        while i < writes {
            cancel.check()?;
            if let Some((buf, n)) = ready.remove(&i) {
                let w = plan.write_at(i);
                let target = match remote.slice(w.ring_offset, n as u64) {
                    Ok(t) => t,
                    Err(e) => {
                        r.free.push(buf);
                        return Err(e);
                    }
                };
                if let Some(p) = pace.as_deref_mut() {
                    p.before::<L>(n as u64).await;
                }
                // The credit first (a timeout of `post`'s own wait would give up the buffer).
                if let Err(e) = wait_on!(ep, session, ep.wait_credit().await) {
                    r.free.push(buf);
                    return Err(e);
                }
                if let Err((e, bufs)) = ep.write_imm(w.wr_id, target, w.imm, Some((buf, n))) {
                    r.free.extend(bufs);
                    return Err(e);
                }
                in_flight += 1;
                if faults.replay == Some(plan.chunk_at(i)) && !again {
                    replay(ep, remote, &w, session).await?;
                    in_flight += 1;
                }
                if faults.brk == Some(plan.chunk_at(i)) && !again {
                    tracing::warn!("test hook: breaking the link of {label}");
                    ep.break_link()?;
                }
                i += 1;
                written += n as u64;
                moved(session, 1);
                progress(written);
            } else if assigned < writes && !r.free.is_empty() {
                let buf = r.free.pop().expect("not empty");
                if let Err(e) = readers.jobs.send((assigned, plan.chunk_at(assigned), buf)) {
                    r.free.push(e.0 .2);
                    return Err(ended());
                }
                at_workers += 1;
                assigned += 1;
            } else if at_workers > 0 {
                let (i, got, buf) = readers.done.recv_async().await.map_err(|_| ended())?;
                at_workers -= 1;
                match got {
                    Ok(n) => {
                        moved(session, 1);
                        ready.insert(i, (buf, n));
                    }
                    Err(e) => {
                        r.free.push(buf);
                        return Err(e);
                    }
                }
            } else {
                collect(ep, r, &mut in_flight, session)
                    .await
                    .map_err(|e| fault::invalid_request(label, None, e))?;
            }
        }
        while in_flight > 0 {
            collect(ep, r, &mut in_flight, session)
                .await
                .map_err(|e| fault::invalid_request(label, None, e))?;
        }
        Ok(())
    }
    .await;
    // Buffers still at the workers or waiting to be posted: the ring is whole again.
    r.free.extend(readers.finish(at_workers).await);
    r.free.extend(ready.into_values().map(|(b, _)| b));
    if r.free.len() + in_flight < r.total {
        // Some buffers were lost (a worker panicked): re-made on the next file.
        r.total = usize::MAX;
    }
    res.map_err(|e| (e, written))?;
    src.finish().map(|h| (h, written)).map_err(|e| (e, written))
}

/// A chunk for a reader: its index in the plan, its chunk, and the buffer to read it into.
type Job<B> = (u64, u64, B);
/// A chunk read: its index in the plan, its length (or the read's error), and its buffer.
type Read<B> = (u64, Result<usize>, B);

/// The reader threads of [`send_data`] and their channels.
struct Readers<B> {
    jobs: flume::Sender<Job<B>>,
    done: flume::Receiver<Read<B>>,
}

impl<B: std::ops::DerefMut<Target = [u8]> + Send + 'static> Readers<B> {
    /// Starts readers of `src` for up to `bufs` buffers; `again`: chunks sent again.
    fn start<S: ChunkSource>(
        src: &Arc<S>,
        bufs: usize,
        again: bool,
        faults: Faults,
    ) -> Result<Self> {
        let (jobs, job_rx) = flume::unbounded::<Job<B>>();
        let (done_tx, done) = flume::unbounded::<Read<B>>();
        for _ in 0..digest::threads(bufs) {
            let (job_rx, done_tx, src) = (job_rx.clone(), done_tx.clone(), src.clone());
            let work = move || {
                while let Ok((i, k, mut buf)) = job_rx.recv() {
                    let got = match again {
                        true => src.reread_chunk_at(k, &mut buf),
                        false => src.read_chunk_at(k, &mut buf),
                    };
                    let got = got.inspect(|&n| {
                        if faults.corrupts(k, again) && n > 0 {
                            buf[0] ^= 0xff;
                        }
                    });
                    if done_tx.send((i, got, buf)).is_err() {
                        return;
                    }
                }
            };
            std::thread::Builder::new()
                .name("rdmaxfer-read".into())
                .spawn(work)
                .map_err(|e| Error::io("starting a reader thread", e))?;
        }
        Ok(Readers { jobs, done })
    }

    /// Ends the readers once the `held` jobs they hold are read; returns those buffers.
    async fn finish(self, held: usize) -> Vec<B> {
        let Readers { jobs, done } = self;
        drop(jobs);
        let mut back = Vec::with_capacity(held);
        for _ in 0..held {
            match done.recv_async().await {
                Ok((_, _, buf)) => back.push(buf),
                Err(_) => break,
            }
        }
        back
    }
}

/// Test-only ([`Faults::replay`]): a zero-length WRITE_WITH_IMM repeating `w`'s immediate.
async fn replay<L: Link>(
    ep: &mut L,
    remote: &RemoteRegion,
    w: &ChunkWrite,
    session: Option<&AtomicU64>,
) -> Result<()> {
    wait_on!(ep, session, ep.wait_credit().await)?;
    let to = remote.slice(w.ring_offset, 0)?;
    ep.write_imm(w.wr_id, to, w.imm, None).map_err(|(e, _)| e)
}

/// Waits for at least one data-chunk completion and takes its buffers back; each counts as
/// the session's progress.
async fn collect<L: Link>(
    ep: &mut L,
    r: &mut ChunkBufs<L::Buf>,
    in_flight: &mut usize,
    session: Option<&AtomicU64>,
) -> Result<()> {
    let (done, bufs) = wait_on!(ep, session, {
        let timeout = ep.timeout();
        ep.poll_writes(r.total, timeout).await
    })?;
    *in_flight = in_flight.saturating_sub(done);
    moved(session, done as u64);
    r.free.extend(bufs);
    Ok(())
}

/// A failure seen on this side (a lost connection, a withdrawn ring, a timeout) whose cause the
/// receiver may have sent just before it ended the session (an ERR or REFUSE, e.g. a spent
/// budget, while this sender was stopped): that message, if it arrived, names the cause.
pub(super) fn named_by_peer<L: Link>(ep: &mut L, err: Error) -> Error {
    if matches!(err, Error::Refused { .. }) {
        return err;
    }
    match ep.last_words().map(|d| decode_ctl(&d)) {
        Some(Ok(Msg::Err { reason, message } | Msg::Refuse { reason, message })) => {
            tracing::debug!("{err}; the receiver's last message names the cause");
            peer_err(reason, &message)
        }
        _ => err,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xfer::file::link::mem::MemLink;

    #[test]
    fn a_pace_never_lets_bytes_go_before_their_time() {
        // 1 MiB/s, five 256 KiB chunks: the fifth is due one second after the first.
        let mut p = Pacer::new(1 << 20);
        let t = Instant::now();
        for _ in 0..5 {
            crate::xfer::file::link::block::block_on(p.before::<MemLink>(256 << 10));
        }
        assert!(
            t.elapsed() >= Duration::from_millis(990),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(p.sent, 5 * (256 << 10));
        // No rate of 0: it would never send.
        assert_eq!(Pacer::new(0).rate, 1);
    }
}
