//! The data phase of one part (a file or a stripe) at the receiver: the staging ring the
//! sender writes into, chunks copied out of it to writer threads, then DIGESTS up to FIN.

use std::sync::{Arc, Mutex};

use super::core::{AfterFin, Arrival, Mismatch, PartReceiver, Tail};
use super::ring_budget::{self, RingLease};
use super::sink::Sink;
use crate::error::{Error, Result};
use crate::verbs::TRACE_TARGET;
use crate::xfer::file::budget::{budget_wait, Budget};
use crate::xfer::file::ctl::{awaiting, decode_ctl, reason_of, recv_ctl, send_msg};
use crate::xfer::file::digest::{self, Chunks};
use crate::xfer::file::fault;
use crate::xfer::file::link::{Link, StagingMem};
use crate::xfer::file::options::{ReceiverOptions, MAX_CHUNK, MAX_RING_BYTES, MIN_SLOT};
use crate::xfer::file::proto::{self, Digest, Msg, Reason, RingGrant};

/// The connection's staging ring: the exposed region the sender writes chunks into, one per
/// slot.
pub(super) struct StagingRing<R> {
    pub(super) region: R,
    pub(super) slot_size: u32,
    pub(super) slot_count: u32,
}

impl<R: StagingMem> StagingRing<R> {
    /// MR offering this ring, with the resume point (bytes held and their digest).
    pub(super) fn offer(&self, resume_offset: u64, resume_hash: Digest) -> Msg {
        let desc = self.region.descriptor();
        Msg::Mr(RingGrant {
            addr: desc.addr,
            rkey: desc.rkey,
            slot_size: self.slot_size,
            slot_count: self.slot_count,
            resume_offset,
            resume_hash,
        })
    }

    /// Bytes per slot (the chunk size of what is received through it).
    pub(super) fn slot_size(&self) -> u32 {
        self.slot_size
    }
}

/// Where [`receive_data`] writes: a [`Sink`] (a whole file), or one stripe of a file received
/// over several streams. Chunk `index` counts from the start of what it receives.
pub(super) trait ChunkTarget: Send + Sync + 'static {
    /// Writes and hashes chunk `index`, from any thread, in any order.
    fn write_chunk_at(&self, index: u64, data: &[u8]) -> Result<()>;
    /// Writes chunk `index` again (sent again after a REPAIR) and replaces its digest.
    fn rewrite_chunk_at(&self, index: u64, data: &[u8]) -> Result<()>;
    /// The digests of what was written.
    fn digests(&self) -> Result<&Chunks>;
}

impl ChunkTarget for Sink {
    fn write_chunk_at(&self, index: u64, data: &[u8]) -> Result<()> {
        Sink::write_chunk_at(self, index, data)
    }
    fn rewrite_chunk_at(&self, index: u64, data: &[u8]) -> Result<()> {
        Sink::rewrite_chunk_at(self, index, data)
    }
    fn digests(&self) -> Result<&Chunks> {
        self.chunk_digests()
            .ok_or_else(|| Error::InvalidArgument("the sink was not started".into()))
    }
}

enum Chunk {
    Data(Arrival),
    Ctl(Result<Msg>),
}

/// Copy buffers between the receiving thread and the writer threads.
const WRITE_BUFS: usize = ring_budget::COPY_BUFS as usize;

/// Receives the data chunks of one file: this task copies each chunk out of its slot (then
/// the slot's credit goes back) into a private buffer; a pool of writer threads writes each
/// buffer at its offset and hashes it (see [`Sink::write_chunk_at`]), so the network, the disk
/// and hashing on every core overlap. A write error does not stop the draining: it is returned
/// with the sink for the ACK. Other errors (protocol, connection, an ERR from the sender) end
/// the file (the sink is dropped, which removes or keeps the temporary file). `label` names
/// the part in errors ([`fault::part_label`]).
///
/// Dropped before its end, the writers finish the chunk each holds, then the sink is dropped
/// (the file is not committed).
pub(super) async fn receive_data<T: ChunkTarget, L: Link>(
    ep: &mut L,
    r: &mut StagingRing<L::Ring>,
    budget: &mut Budget,
    sink: T,
    part: &mut PartReceiver,
    (label, brk): (&str, Option<u64>),
) -> Result<(T, Option<Error>)> {
    let slot = u64::from(r.slot_size);
    let (held, size) = (part.received(), part.size());
    let bufs = part.due_chunks().clamp(1, WRITE_BUFS as u64) as usize;
    let writers = Writers::start(sink, bufs, r.slot_size as usize)?;
    tracing::trace!(
        target: TRACE_TARGET,
        "{label}: receiving on qpn={} from byte {held}, {} bytes, ring of {} x {slot} bytes",
        ep.trace_id(),
        size - held,
        r.slot_count,
    );
    let ended = || Error::refused(Reason::Internal, "the writer threads ended");
    let (full, free) = (writers.full.as_ref(), writers.free.as_ref());
    let (full, free) = full.zip(free).expect("held until finish");
    let res: Result<()> = async {
        while part.wants_data() {
            let mut buf = free.recv_async().await.map_err(|_| ended())?;
            let region = &r.region;
            let got = budget_wait!(budget, ep, {
                ep.recv_with(|m| -> Result<Chunk> {
                    let (Some(imm), Some(len)) = (m.imm, m.rdma_write_len) else {
                        return Ok(Chunk::Ctl(decode_ctl(m.data)));
                    };
                    tracing::trace!(target: TRACE_TARGET, "{label}: data imm={imm:#x} len={len}");
                    let at = part.on_data(imm, len, label)?;
                    region.read_at(at.ring_offset, &mut buf[..at.len])?;
                    Ok(Chunk::Data(at))
                })
                .await?
            });
            let got = awaiting("the sender's data", got)
                .map_err(|e| fault::invalid_request(label, Some(part.next_seq()), e))?;
            let at = match got {
                Chunk::Data(at) => at,
                Chunk::Ctl(m) => return Err(part.control_during_data(m)),
            };
            let (chunk, len) = (at.chunk, at.len as u64);
            full.send_async((at, buf)).await.map_err(|_| ended())?;
            budget.progress(len);
            if brk == Some(chunk) {
                tracing::warn!("test hook: breaking the link of {label}");
                ep.break_link()?;
            }
        }
        Ok(())
    }
    .await;
    let (sink, failure) = writers.finish().await;
    match (res, sink) {
        (Ok(()), Some(sink)) => Ok((sink, failure)),
        (Ok(()), None) => Err(ended()),
        (Err(e), _) => Err(e),
    }
}

/// The writer threads of [`receive_data`] and their channels: full buffers go to them, empty
/// ones come back. Dropped before [`finish`](Self::finish) (the data phase's future was), it
/// stops them and waits for the chunk each is writing: then the sink is dropped, on this
/// thread (its temporary file removed or kept, as [`Sink`]'s drop says).
struct Writers<T> {
    full: Option<flume::Sender<(Arrival, Vec<u8>)>>,
    free: Option<flume::Receiver<Vec<u8>>>,
    sink: Option<Arc<T>>,
    failure: Arc<Mutex<Option<Error>>>,
    /// Disconnected once every writer has let go of the sink.
    exited: flume::Receiver<()>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl<T: ChunkTarget> Writers<T> {
    /// Starts writers for `sink` with `bufs` buffers of `len` bytes.
    fn start(sink: T, bufs: usize, len: usize) -> Result<Writers<T>> {
        let (full, full_rx) = flume::bounded::<(Arrival, Vec<u8>)>(bufs);
        let (free_tx, free) = flume::unbounded();
        for _ in 0..bufs {
            free_tx.send(vec![0u8; len]).expect("receiver alive");
        }
        let (exit_tx, exited) = flume::bounded::<()>(0);
        let mut w = Writers {
            full: Some(full),
            free: Some(free),
            sink: Some(Arc::new(sink)),
            failure: Arc::new(Mutex::new(None)),
            exited,
            threads: Vec::new(),
        };
        for _ in 0..digest::threads(bufs) {
            let (full_rx, free_tx) = (full_rx.clone(), free_tx.clone());
            let (sink, failure, exit_tx) = (w.sink.clone(), w.failure.clone(), exit_tx.clone());
            let sink = sink.expect("held until finish");
            let work = move || {
                while let Ok((at, buf)) = full_rx.recv() {
                    let data = &buf[..at.len];
                    let written = match at.again {
                        true => sink.rewrite_chunk_at(at.chunk, data),
                        false => sink.write_chunk_at(at.chunk, data),
                    };
                    if let Err(e) = written {
                        lock(&failure).get_or_insert(e);
                    }
                    if free_tx.send(buf).is_err() {
                        break;
                    }
                }
                // The sink first: once every exit sender is gone, no writer holds it.
                drop(sink);
                drop(exit_tx);
            };
            let t = std::thread::Builder::new()
                .name("rdmaxfer-write".into())
                .spawn(work)
                .map_err(|e| Error::io("starting a writer thread", e))?;
            w.threads.push(t);
        }
        Ok(w)
    }

    /// Waits for the writers to write what they hold and end; returns the sink (none if a
    /// writer is stuck with it) and the first write failure.
    async fn finish(mut self) -> (Option<T>, Option<Error>) {
        // The writers drain what was sent, then end (`free` kept until then: they give back
        // each buffer).
        drop(self.full.take());
        // Disconnected (an error) once the last writer has ended.
        let _ = self.exited.recv_async().await;
        self.free = None;
        self.threads.clear();
        let failure = lock(&self.failure).take();
        (self.sink.take().and_then(Arc::into_inner), failure)
    }
}

impl<T> Drop for Writers<T> {
    fn drop(&mut self) {
        (self.full, self.free) = (None, None);
        for t in self.threads.drain(..) {
            // A writer that panicked has let go of the sink too.
            let _ = t.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Reads DIGESTS up to FIN (see [`PartReceiver::on_control`]), comparing each batch with the
/// chunks written; returns FIN's digest. A mismatch is recorded in the sink (and named by its
/// commit).
pub(super) async fn receive_digests<L: Link>(
    ep: &mut L,
    budget: &mut Budget,
    sink: &mut Sink,
    part: &mut PartReceiver,
) -> Result<Digest> {
    loop {
        let next = budget_wait!(budget, ep, recv_ctl(ep).await);
        let next = awaiting("the sender's DIGESTS or FIN", next)?;
        match part.on_control(next, "HELLO")? {
            Tail::Digests { first, digests } => {
                sink.check_digests(first, &digests)?;
                if let Some(i) = part.compare(ChunkTarget::digests(sink)?, first, &digests) {
                    tracing::debug!("chunk {i} differs from the sender's digest");
                }
            }
            Tail::Fin(hash) => return Ok(hash),
        }
    }
}

/// After FIN (see [`PartReceiver::after_fin`]): while chunks differ from the sender's digests
/// and the core allows, sends REPAIR, receives those chunks again into `target` and FIN again.
/// Returns the target, a write failure (which ends the repair: the part fails with it), the
/// chunk that still differs if any (the part fails naming it), and the bytes received again.
/// `what` names the part for errors, as in [`PartReceiver::on_control`].
pub(super) async fn settle<T: ChunkTarget, L: Link>(
    ep: &mut L,
    r: &mut StagingRing<L::Ring>,
    budget: &mut Budget,
    target: T,
    part: &mut PartReceiver,
    (label, what): (&str, &str),
    write_failure: Option<Error>,
) -> Result<(T, Option<Error>, Option<Mismatch>, u64)> {
    let (mut target, mut failure, mut again) = (target, write_failure, 0u64);
    while failure.is_none() {
        let msg = match part.after_fin(target.digests()?)? {
            AfterFin::Commit => break,
            AfterFin::Fail(m) => return Ok((target, None, Some(m), again)),
            AfterFin::Repair(msg) => msg,
        };
        tracing::debug!("{label}: repair round {}: {msg:?}", part.rounds());
        again += part.due_bytes();
        send_msg(ep, &msg).await?;
        (target, failure) = receive_data(ep, r, budget, target, part, (label, None)).await?;
        // The core takes nothing but FIN (or the sender's ERR) after the chunks again.
        part.on_control(budget_wait!(budget, ep, recv_ctl(ep).await)?, what)?;
    }
    Ok((target, failure, None, again))
}

/// The connection's staging ring for a transfer of `size` bytes in chunks of at most
/// `chunk_size`: kept from the last file when its slots fit, else (re)made within `lease`.
pub(super) async fn ensure_ring<'r, L: Link>(
    ep: &mut L,
    opts: &ReceiverOptions,
    lease: &mut RingLease,
    ring: &'r mut Option<StagingRing<L::Ring>>,
    chunk_size: u32,
    size: u64,
) -> Result<&'r mut StagingRing<L::Ring>> {
    // The ring: one per connection, re-made only if the chunk size changes.
    // The ring must have at least as many slots as the sender may have messages in flight (the
    // credits this endpoint grants), or a credit would not imply a free slot (see the parent
    // module's docs).
    let slot_count = opts.slots.max(ep.recv_depth()).clamp(1, proto::IMM_SLOTS);
    // A small file gets slots no bigger than itself (a power of two, at least MIN_SLOT): pinning
    // a 16 MiB ring to receive 1 KiB costs more than moving it. A ring with slots at least that
    // large is kept for the next file of the session.
    let slot_size = u64::from(chunk_size.min(MAX_CHUNK))
        .min(MAX_RING_BYTES / u64::from(slot_count))
        .min(size.max(MIN_SLOT).next_power_of_two())
        .max(1);
    // Within this session's share of the receiver's memory budget (smaller slots when short).
    let slot_size = lease.fit_slot(slot_count, slot_size) as u32;
    if ring
        .as_ref()
        .is_some_and(|r| r.slot_size < slot_size || r.slot_size > chunk_size)
    {
        if let Some(old) = ring.take() {
            old.region.revoke()?;
        }
    }
    if ring.is_none() {
        let want = ring_budget::ring_bytes(slot_count, u64::from(slot_size)).unwrap_or(u64::MAX);
        // Another session may have taken the room since `fit_slot`: take what is left.
        let per = lease.resize(want) / (u64::from(slot_count) + ring_budget::COPY_BUFS);
        let slot_size = u64::from(slot_size).min(per.max(1)) as u32;
        let len = (slot_size as usize)
            .checked_mul(slot_count as usize)
            .ok_or_else(|| Error::TooLarge {
                what: "staging ring",
                detail: format!("{slot_count} slots × {slot_size} bytes overflow usize"),
            })?;
        // The sender waits for MR: tell it why there is none (e.g. the memlock limit).
        let region = ep.expose_ring(len).map_err(|e| {
            Error::refused(
                reason_of(&e),
                format!("the receiver cannot register its staging ring of {len} bytes: {e}"),
            )
        })?;
        *ring = Some(StagingRing {
            region,
            slot_size,
            slot_count,
        });
    }
    Ok(ring.as_mut().expect("made above"))
}
