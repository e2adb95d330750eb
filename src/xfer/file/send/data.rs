//! The data phase of one part (a file or a stripe): chunks read by a pool of threads into the
//! registered buffers, posted in order as RDMA WRITE_WITH_IMM into the receiver's ring, then
//! the chunk digests (DIGESTS).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::core::{ChunkPlan, ChunkWrite};
use super::source::Source;
use crate::error::{Error, Result};
use crate::verbs::{RemoteRegion, TRACE_TARGET};
use crate::xfer::file::budget::{moved, wait_on};
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
pub(super) trait ChunkSource: Sync {
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
pub(super) fn send_digests<L: Link>(
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
        wait_on(ep, session, |ep| send_msg(ep, &msg))?;
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

    /// Waits until `n` more bytes may go, and counts them.
    fn before(&mut self, n: u64) {
        let start = *self.start.get_or_insert_with(Instant::now);
        let due = start + Duration::from_secs_f64(self.sent as f64 / self.rate as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            // Rate limiting, not synchronisation: the link may go no faster than asked.
            std::thread::sleep(wait);
        }
        self.sent += n;
    }
}

/// Sends the rest of `src` (after the chunks the receiver holds): a pool of reader threads
/// reads and hashes chunks straight into the registered buffers, in any order, while this
/// thread posts them in order and takes completed ones back, so disk, hashing (on every core)
/// and network overlap. Returns the whole file's digest and the bytes written (also with an
/// error). Its waits for credits and completions go on while `session` moves (see
/// [`wait_on`]); each chunk read, posted or completed counts as the session's progress.
/// `to` says where the chunks go.
pub(super) fn send_data<S: ChunkSource, L: Link>(
    ep: &mut L,
    r: &mut ChunkBufs<L::Buf>,
    src: &S,
    to: &mut DataTarget<'_>,
    progress: &mut dyn FnMut(u64),
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
    let threads = digest::threads(r.total);
    let (job_tx, job_rx) = std::sync::mpsc::channel::<(u64, L::Buf)>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<(u64, Result<usize>, L::Buf)>();
    let job_rx = Mutex::new(job_rx);
    std::thread::scope(|sc| {
        for _ in 0..threads {
            let (job_rx, done_tx) = (&job_rx, done_tx.clone());
            sc.spawn(move || loop {
                let job = job_rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                let Ok((i, mut buf)) = job else { return };
                let k = plan.chunk_at(i);
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
            });
        }
        drop(done_tx);
        let mut at_workers = 0usize;
        let mut assigned = 0;
        let mut ready: BTreeMap<u64, (L::Buf, usize)> = BTreeMap::new();
        let mut in_flight = 0usize;
        let res: Result<()> = (|| {
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
                        p.before(n as u64);
                    }
                    // The credit first (a timeout of `post`'s own wait would give up the buffer).
                    if let Err(e) = wait_on(ep, session, L::wait_credit) {
                        r.free.push(buf);
                        return Err(e);
                    }
                    if let Err((e, bufs)) = ep.write_imm(w.wr_id, target, w.imm, Some((buf, n))) {
                        r.free.extend(bufs);
                        return Err(e);
                    }
                    in_flight += 1;
                    if faults.replay == Some(plan.chunk_at(i)) && !again {
                        replay(ep, remote, &w, session)?;
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
                    if let Err(e) = job_tx.send((assigned, buf)) {
                        r.free.push(e.0 .1);
                        return Err(Error::refused(Reason::Internal, "the reader threads ended"));
                    }
                    at_workers += 1;
                    assigned += 1;
                } else if at_workers > 0 {
                    let (i, got, buf) = done_rx.recv().map_err(|_| {
                        Error::refused(Reason::Internal, "the reader threads ended")
                    })?;
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
                        .map_err(|e| fault::invalid_request(label, None, e))?;
                }
            }
            while in_flight > 0 {
                collect(ep, r, &mut in_flight, session)
                    .map_err(|e| fault::invalid_request(label, None, e))?;
            }
            Ok(())
        })();
        drop(job_tx);
        // Buffers still at the workers or waiting to be posted: the ring is whole again.
        for _ in 0..at_workers {
            match done_rx.recv() {
                Ok((_, _, buf)) => r.free.push(buf),
                Err(_) => break,
            }
        }
        r.free.extend(ready.into_values().map(|(b, _)| b));
        if r.free.len() + in_flight < r.total {
            // Some buffers were lost (a worker panicked): re-made on the next file.
            r.total = usize::MAX;
        }
        res.map_err(|e| (e, written))?;
        src.finish().map(|h| (h, written)).map_err(|e| (e, written))
    })
}

/// Test-only ([`Faults::replay`]): a zero-length WRITE_WITH_IMM repeating `w`'s immediate.
fn replay<L: Link>(
    ep: &mut L,
    remote: &RemoteRegion,
    w: &ChunkWrite,
    session: Option<&AtomicU64>,
) -> Result<()> {
    wait_on(ep, session, L::wait_credit)?;
    let to = remote.slice(w.ring_offset, 0)?;
    ep.write_imm(w.wr_id, to, w.imm, None).map_err(|(e, _)| e)
}

/// Waits for at least one data-chunk completion and takes its buffers back; each counts as
/// the session's progress.
fn collect<L: Link>(
    ep: &mut L,
    r: &mut ChunkBufs<L::Buf>,
    in_flight: &mut usize,
    session: Option<&AtomicU64>,
) -> Result<()> {
    let (done, bufs) = wait_on(ep, session, |ep| {
        let timeout = ep.timeout();
        ep.poll_writes(r.total, timeout)
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

    #[test]
    fn a_pace_never_lets_bytes_go_before_their_time() {
        // 1 MiB/s, five 256 KiB chunks: the fifth is due one second after the first.
        let mut p = Pacer::new(1 << 20);
        let t = Instant::now();
        for _ in 0..5 {
            p.before(256 << 10);
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
