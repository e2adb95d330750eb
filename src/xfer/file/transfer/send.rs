//! The sender: announces each file, writes its chunks into the receiver's ring, and records the
//! receiver's verdict.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Instant;

use super::fault::{self, Faults};
use super::streams::{RangeSource, StripeJob, PHASE_TARGET as PHASE};
use super::{
    decode_ctl, peer_err, reason_of, recv_ctl, send_err, send_msg, FileReport, Progress,
    SenderOptions, SessionReport,
};
use crate::error::{Error, Result};
use crate::verbs::{Buf, LocalBuf, RemoteRegion, SendOp, SendRequest, Sge, TRACE_TARGET};
use crate::xfer::endpoint::Endpoint;
use crate::xfer::file::budget::{moved, wait_on};
use crate::xfer::file::digest::{self, Chunks, StripeDigests};
use crate::xfer::file::names;
use crate::xfer::file::proto::{
    self, Digest, Digests, EntryKind, Hello, HelloFlags, Msg, Reason, MAX_DIGESTS,
};
use crate::xfer::file::source::{self, Source, SourceEntry, SourceKind};

/// The sender's registered chunk buffers: the free ones, how many there are, and their size.
pub(super) struct ChunkBufs {
    free: Vec<LocalBuf>,
    total: usize,
    slot_size: u32,
}

/// Sends `entries` (from [`source::walk`](crate::xfer::file::source::walk)) on `ep`, one after
/// another, then DONE. Each file's verdict (the receiver's ACK) is recorded in `report`; refused or
/// failed files make the result an error at the end, but later files are still sent. A lost
/// connection, an ERR from the receiver or a failed authentication ends the session at once.
/// `progress` hears of each file's start, its bytes as they are written and its verdict.
pub fn send(
    ep: &mut Endpoint,
    entries: &[SourceEntry],
    opts: &SenderOptions,
    report: &mut SessionReport,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<()> {
    opts.check()?;
    let nonce = challenge(ep)?;
    send_entries(ep, entries, opts, &nonce, report, progress)
}

/// Waits for the receiver's CHALLENGE and returns its nonce.
pub(super) fn challenge(ep: &mut Endpoint) -> Result<Digest> {
    match recv_ctl(ep)? {
        Msg::Challenge { nonce, .. } => Ok(nonce),
        Msg::Refuse { reason, message } | Msg::Err { reason, message } => {
            Err(peer_err(reason, &message))
        }
        other => Err(Error::Protocol(format!(
            "expected CHALLENGE from the receiver, got {other:?} (is the peer `rdmaxfer recv`?)"
        ))),
    }
}

/// Sends `entries` one after another on `ep`, then DONE (see [`send`]).
pub(super) fn send_entries(
    ep: &mut Endpoint,
    entries: &[SourceEntry],
    opts: &SenderOptions,
    nonce: &Digest,
    report: &mut SessionReport,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<()> {
    let mut ring: Option<ChunkBufs> = None;
    for e in entries {
        send_entry(ep, e, opts, nonce, &mut ring, report, progress, None, None)?;
    }
    send_done(ep);
    report.result("delivered")
}

/// Sends one entry (or, with `stripe`, one stripe of a file entry, a job of one stream of
/// several) and tells `progress` its verdict (a striped file's with its last stripe). With
/// `session` (the progress of a session over several streams), its waits go on while the
/// session moves (see [`wait_on`]).
// The session's state, passed apart as in `send_one`, plus the stripe.
#[allow(clippy::too_many_arguments)]
pub(super) fn send_entry(
    ep: &mut Endpoint,
    e: &SourceEntry,
    opts: &SenderOptions,
    nonce: &Digest,
    ring: &mut Option<ChunkBufs>,
    report: &mut SessionReport,
    progress: &mut dyn FnMut(Progress<'_>),
    stripe: Option<&StripeJob>,
    session: Option<&AtomicU64>,
) -> Result<()> {
    let before = report.file_count();
    let r = match stripe {
        None => send_one(ep, e, opts, nonce, ring, report, progress, session),
        Some(s) => {
            let flags = hello_flags(opts);
            let st = (Some(s), session);
            send_file(ep, e, opts, nonce, flags, ring, report, progress, st)
        }
    }
    .map_err(|err| named_by_peer(ep, err));
    report.announce_since(before, progress);
    r
}

/// Ends the session with DONE.
pub(super) fn send_done(ep: &mut Endpoint) {
    // Every file has its verdict (ACK) now. The receiver ends the session when DONE arrives; if
    // the acknowledgement of DONE is lost on the wire, its disconnect can overtake it, so a
    // failure to see DONE acknowledged does not undo what was delivered.
    if let Err(e) = send_msg(ep, &Msg::Done).and_then(|()| ep.flush()) {
        tracing::debug!("DONE not acknowledged ({e}); every file already has its verdict");
    }
    tracing::debug!(target: PHASE, "DONE sent");
}

// The session's state, passed apart, plus the session's shared progress.
#[allow(clippy::too_many_arguments)]
fn send_one(
    ep: &mut Endpoint,
    e: &SourceEntry,
    opts: &SenderOptions,
    nonce: &Digest,
    ring: &mut Option<ChunkBufs>,
    report: &mut SessionReport,
    progress: &mut dyn FnMut(Progress<'_>),
    session: Option<&AtomicU64>,
) -> Result<()> {
    let name = e.name.as_str();
    let flags = hello_flags(opts);
    let (kind, target) = match &e.kind {
        SourceKind::Skipped(why) => {
            report.push(FileReport::skipped(name, "other", 0, why));
            return Ok(());
        }
        SourceKind::File => {
            let st = (None, session);
            return send_file(ep, e, opts, nonce, flags, ring, report, progress, st);
        }
        SourceKind::Dir => (EntryKind::Dir, String::new()),
        SourceKind::Symlink(t) => (EntryKind::Symlink, t.clone()),
    };
    let meta = match std::fs::symlink_metadata(&e.path) {
        Ok(m) => m,
        Err(err) => {
            let err = Error::refused(Reason::ReadError, format!("{}: {err}", e.path.display()));
            report.push(
                FileReport::failed(name, 0, Reason::ReadError, err.to_string()).of_kind(kind),
            );
            return Ok(());
        }
    };
    let hello = Hello {
        version: proto::VERSION,
        kind,
        name: name.to_string(),
        target,
        size: 0,
        mode: meta.mode() & 0o7777,
        mtime_sec: meta.mtime(),
        mtime_nsec: meta.mtime_nsec().clamp(0, 999_999_999) as u32,
        chunk_size: opts.chunk,
        verify: opts.verify,
        flags,
        checksum: None,
        auth: opts.token.as_ref().map(|t| proto::auth_answer(t, nonce)),
    };
    let hello = Msg::Hello(hello);
    wait_on(ep, session, |ep| send_msg(ep, &hello))?;
    match wait_on(ep, session, recv_ctl)? {
        Msg::Ack {
            status: Reason::Ok, ..
        } => report.push(FileReport::made(name, kind)),
        Msg::Skip { message, .. } => {
            report.push(FileReport::skipped(name, kind.as_str(), 0, &message))
        }
        Msg::Refuse { reason, message } => {
            let err = peer_err(reason, &message);
            report.push_refused(FileReport::failed(name, 0, reason, message).of_kind(kind));
            if matches!(reason, Reason::AuthFailed | Reason::Version) {
                return Err(err);
            }
        }
        Msg::Err { reason, message } => return Err(peer_err(reason, &message)),
        other => {
            return Err(Error::Protocol(format!(
                "expected ACK, SKIP or REFUSE, got {other:?}"
            )))
        }
    }
    Ok(())
}

fn hello_flags(opts: &SenderOptions) -> HelloFlags {
    HelloFlags {
        resume: opts.resume,
        force: opts.force,
        last: false,
        ignore_existing: opts.ignore_existing,
        update: opts.update,
    }
}

/// Records a file's (or, striped, a stripe's) verdict: a stripe's goes to its file's tracker,
/// which gives the file's verdict with the last stripe.
fn record(
    report: &mut SessionReport,
    stripe: Option<&StripeJob>,
    f: FileReport,
    refused: bool,
    digest: Option<StripeDigests>,
) {
    let (f, refused) = match stripe {
        None => (f, refused),
        Some(s) => match s.track.end(&s.stripe, f, refused, digest) {
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

/// The receiver's answer to a HELLO (MR, SKIP, REFUSE or ERR). When this stream has no send
/// buffers yet (`ring`) and the part (file or stripe) is at least a chunk long, the buffers it
/// will most likely need are registered on another thread meanwhile, while the receiver sets
/// the file up: as many slots of the chunk size as `--slots` (the receiver's slots are that
/// large for such a part unless it is short of memory; if its MR says otherwise, the caller
/// re-makes them as before). A failed registration leaves `ring` empty: the caller registers
/// what the MR asks for and reports a failure then.
fn answer_and_ring(
    ep: &mut Endpoint,
    ring: &mut Option<ChunkBufs>,
    opts: &SenderOptions,
    part_len: u64,
    session: Option<&AtomicU64>,
) -> Result<Msg> {
    if ring.is_some() || part_len < u64::from(opts.chunk) {
        return wait_on(ep, session, recv_ctl);
    }
    let pd = ep.pd().clone();
    let (slot_size, total) = (opts.chunk, opts.slots.max(1) as usize);
    std::thread::scope(|sc| {
        let early = sc.spawn(move || LocalBuf::slots(&pd, slot_size as usize, total));
        let answer = wait_on(ep, session, recv_ctl);
        *ring = early
            .join()
            .ok()
            .and_then(|r| r.ok())
            .map(|free| ChunkBufs {
                free,
                total,
                slot_size,
            });
        answer
    })
}

/// The file, or one stripe of it, as read for sending.
enum Reading {
    Whole(Source),
    Range(RangeSource),
}

/// `$e` with `$s` bound to whichever source `$r` holds.
macro_rules! either {
    ($r:expr, $s:ident => $e:expr) => {
        match $r {
            Reading::Whole($s) => $e,
            Reading::Range($s) => $e,
        }
    };
}

impl ChunkSource for Reading {
    fn size(&self) -> u64 {
        either!(self, s => ChunkSource::size(s))
    }
    fn first_chunk(&self) -> u64 {
        either!(self, s => ChunkSource::first_chunk(s))
    }
    fn read_chunk_at(&self, index: u64, buf: &mut [u8]) -> Result<usize> {
        either!(self, s => ChunkSource::read_chunk_at(s, index, buf))
    }
    fn finish(&self) -> Result<Digest> {
        either!(self, s => ChunkSource::finish(s))
    }
}

// The session's state, passed apart as in `send_one`, plus the flags made there, the stripe
// (when this is one stripe of the file) and the session's shared progress.
#[allow(clippy::too_many_arguments)]
fn send_file(
    ep: &mut Endpoint,
    e: &SourceEntry,
    opts: &SenderOptions,
    nonce: &Digest,
    flags: HelloFlags,
    ring: &mut Option<ChunkBufs>,
    report: &mut SessionReport,
    progress: &mut dyn FnMut(Progress),
    (stripe, session): (Option<&StripeJob>, Option<&AtomicU64>),
) -> Result<()> {
    let name = e.name.as_str();
    let opened = Source::open(&e.path).and_then(|src| {
        let sum = match (stripe, opts.checksum) {
            (Some(s), _) => s.track.checksum,
            (None, true) => Some(source::hash_file(&e.path)?),
            (None, false) => None,
        };
        if let Some(s) = stripe.filter(|s| s.track.size != src.size()) {
            return Err(Error::refused(
                Reason::ReadError,
                format!(
                    "{}: size changed from {} to {} while being sent",
                    e.path.display(),
                    s.track.size,
                    src.size()
                ),
            ));
        }
        Ok((src, sum))
    });
    let (mut src, checksum) = match opened {
        Ok(s) => s,
        Err(err) => {
            let f = FileReport::failed(name, 0, reason_of(&err), err.to_string());
            record(report, stripe, f, false, None);
            return Ok(());
        }
    };
    let size = src.size();
    progress(Progress::FileStart { name, size });
    let (mtime_sec, mtime_nsec) = src.mtime();
    let hello = Hello {
        version: proto::VERSION,
        kind: EntryKind::File,
        name: name.to_string(),
        target: String::new(),
        size,
        mode: src.mode(),
        mtime_sec,
        mtime_nsec,
        chunk_size: opts.chunk,
        verify: opts.verify,
        flags,
        checksum,
        auth: opts.token.as_ref().map(|t| proto::auth_answer(t, nonce)),
    };
    if let Some(s) = stripe {
        wait_on(ep, session, |ep| send_msg(ep, &Msg::Stripe(s.stripe)))?;
    }
    let hello = Msg::Hello(hello);
    wait_on(ep, session, |ep| send_msg(ep, &hello))?;
    let part_len = stripe.map_or(size, |s| s.stripe.len);
    let answer = answer_and_ring(ep, ring, opts, part_len, session)?;
    moved(session, 1);
    let mr = match answer {
        Msg::Mr(r) => r,
        Msg::Skip { message, .. } => {
            let f = FileReport::skipped(name, "file", size, &message);
            record(report, stripe, f, false, None);
            return Ok(());
        }
        Msg::Refuse { reason, message } => {
            let err = peer_err(reason, &message);
            let f = FileReport::failed(name, size, reason, message);
            record(report, stripe, f, true, None);
            if matches!(reason, Reason::AuthFailed | Reason::Version) {
                return Err(err);
            }
            return Ok(());
        }
        Msg::Err { reason, message } => return Err(peer_err(reason, &message)),
        other => {
            return Err(Error::Protocol(format!(
                "expected MR, SKIP or REFUSE, got {other:?}"
            )))
        }
    };
    if mr.slot_size == 0
        || mr.slot_size > opts.chunk
        || mr.slot_count == 0
        || mr.slot_count > proto::IMM_SLOTS
    {
        let err = Error::Protocol(format!(
            "receiver's ring of {} × {} bytes does not fit a chunk size of {}",
            mr.slot_count, mr.slot_size, opts.chunk
        ));
        send_err(ep, Reason::Protocol, &err);
        return Err(err);
    }
    let remote = RemoteRegion {
        addr: mr.addr,
        rkey: mr.rkey,
        len: u64::from(mr.slot_size) * u64::from(mr.slot_count),
    };
    let (reading, what) = match stripe {
        None => {
            src.start(mr.slot_size, opts.verify)?;
            let same =
                mr.resume_offset == 0 || src.skip_verified(mr.resume_offset, &mr.resume_hash)?;
            (same.then_some(Reading::Whole(src)), "partial file")
        }
        Some(s) => {
            let mut r = RangeSource::open(&e.path, size, &s.stripe)?;
            r.start(mr.slot_size, opts.verify)?;
            let same =
                mr.resume_offset == 0 || r.skip_verified(mr.resume_offset, &mr.resume_hash)?;
            (same.then_some(Reading::Range(r)), "partial stripe")
        }
    };
    let Some(reading) = reading else {
        let err = Error::refused(
            Reason::ReadError,
            format!(
                "{name}: the receiver's {what} ({} bytes) differs from this one; remove it there or send without --resume",
                mr.resume_offset
            ),
        );
        send_err(ep, Reason::ReadError, &err);
        let f = FileReport::failed(name, size, Reason::ReadError, err.to_string());
        record(report, stripe, f, false, None);
        return Err(err);
    };

    // Registered send buffers, re-made only if the slot size changes.
    let depth = opts.slots.min(mr.slot_count).max(1) as usize;
    if ring
        .as_ref()
        .is_none_or(|r| r.slot_size != mr.slot_size || r.total != depth)
    {
        *ring = None;
        let free = LocalBuf::slots(ep.pd(), mr.slot_size as usize, depth)?;
        *ring = Some(ChunkBufs {
            free,
            total: depth,
            slot_size: mr.slot_size,
        });
    }
    if let Some(s) = stripe.filter(|s| opts.hold_stripe == Some(s.stripe.index)) {
        s.track.wait_others(s.stripe.index);
    }
    let r = ring.as_mut().expect("made above");
    let sent_before = report.bytes;
    let part = stripe.map_or(0, |s| s.stripe.index);
    let shown = names::printable(name);
    tracing::debug!(target: PHASE, "{shown} part {part}: MR received, data starts");
    let data_start = Instant::now();
    let hash = match send_data(
        ep,
        r,
        &reading,
        &remote,
        mr.slot_count,
        // The test hooks name chunks of the file: a stripe's own chunks count from its offset.
        Faults::for_part(
            opts.corrupt_chunk,
            opts.replay_chunk,
            stripe.map_or(0, |s| s.stripe.offset / u64::from(mr.slot_size)),
        ),
        &fault::part_label(
            stripe.map(|s| s.stream),
            stripe.map(|s| (s.stripe.index, s.stripe.count)),
            name,
        ),
        &mut |n| {
            progress(Progress::Bytes {
                name,
                file_done: n,
                total_done: sent_before + n,
            })
        },
        session,
    ) {
        Ok((hash, n)) => {
            report.bytes += n;
            hash
        }
        Err((err, n)) => {
            report.bytes += n;
            let err = named_by_peer(ep, err);
            if err.reason() == Some(Reason::ReadError) {
                send_err(ep, Reason::ReadError, &err);
            }
            let f = FileReport::failed(name, size, reason_of(&err), err.to_string());
            record(report, stripe, f, false, None);
            return Err(err);
        }
    };
    // The chunk digests go ahead of FIN (the receiver names the first bad chunk).
    let (len, chunks) = match &reading {
        Reading::Whole(src) => (size, src.chunks()?),
        Reading::Range(r) => (r.len(), r.chunks()?),
    };
    send_digests(ep, chunks, session)?;
    let layout = *chunks.layout();
    wait_on(ep, session, |ep| {
        send_msg(ep, &Msg::Fin { bytes: len, hash })
    })?;
    tracing::debug!(target: PHASE, "{shown} part {part}: data written, FIN sent");
    let verdict = wait_on(ep, session, recv_ctl)?;
    moved(session, 1);
    tracing::debug!(target: PHASE, "{shown} part {part}: verdict received");
    report.data_seconds += data_start.elapsed().as_secs_f64();
    match verdict {
        Msg::Ack {
            status: Reason::Ok, ..
        } => {
            let f = FileReport::ok(name, size, &hash, &layout);
            let digests = stripe.map(|s| chunks.stripe(s.stripe.offset, hash));
            record(report, stripe, f, false, digests);
        }
        Msg::Ack { status, message } => {
            let f = FileReport::failed(
                name,
                size,
                status,
                format!("the receiver reports: {}", names::printable(&message)),
            );
            record(report, stripe, f, false, None);
        }
        Msg::Err { reason, message } => return Err(peer_err(reason, &message)),
        other => return Err(Error::Protocol(format!("expected ACK, got {other:?}"))),
    }
    Ok(())
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
    fn finish(&self) -> Result<Digest> {
        Source::finish(self)
    }
}

/// Sends DIGESTS: the digest of every chunk of the file (or stripe), in order, in batches.
fn send_digests(ep: &mut Endpoint, chunks: &Chunks, session: Option<&AtomicU64>) -> Result<()> {
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

/// Sends the rest of `src` (after the chunks the receiver holds): a pool of reader threads
/// reads and hashes chunks straight into the registered buffers, in any order, while this
/// thread posts them in order and takes completed ones back, so disk, hashing (on every core)
/// and network overlap. Returns the whole file's digest and the bytes written (also with an
/// error). Its waits for credits and completions go on while `session` moves (see
/// [`wait_on`]); each chunk read, posted or completed counts as the session's progress.
/// `label` names the part in errors ([`fault::part_label`]).
// The ring, the source and the receiver's ring, plus the test hooks and the progress callbacks.
#[allow(clippy::too_many_arguments)]
pub(super) fn send_data<S: ChunkSource>(
    ep: &mut Endpoint,
    r: &mut ChunkBufs,
    src: &S,
    remote: &RemoteRegion,
    slot_count: u32,
    faults: Faults,
    label: &str,
    progress: &mut dyn FnMut(u64),
    session: Option<&AtomicU64>,
) -> std::result::Result<(Digest, u64), (Error, u64)> {
    let slot = u64::from(r.slot_size);
    let first = src.first_chunk();
    let chunks = src.size().div_ceil(slot);
    let mut written = 0u64;
    tracing::trace!(
        target: TRACE_TARGET,
        "{label}: sending on qpn={} chunks {first}..{chunks} into a ring of {slot_count} x {slot} \
         bytes at {:#x}",
        ep.local().qpn,
        remote.addr,
    );
    let threads = digest::threads(r.total);
    let (job_tx, job_rx) = std::sync::mpsc::channel::<(u64, LocalBuf)>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<(u64, Result<usize>, LocalBuf)>();
    let job_rx = Mutex::new(job_rx);
    std::thread::scope(|sc| {
        for _ in 0..threads {
            let (job_rx, done_tx) = (&job_rx, done_tx.clone());
            sc.spawn(move || loop {
                let job = job_rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                let Ok((k, mut buf)) = job else { return };
                let got = src.read_chunk_at(k, &mut buf).inspect(|&n| {
                    if faults.corrupt == Some(k) && n > 0 {
                        buf[0] ^= 0xff;
                    }
                });
                if done_tx.send((k, got, buf)).is_err() {
                    return;
                }
            });
        }
        drop(done_tx);
        let mut at_workers = 0usize;
        let mut assigned = first;
        let mut ready: BTreeMap<u64, (LocalBuf, usize)> = BTreeMap::new();
        let mut in_flight = 0usize;
        let res: Result<()> = (|| {
            let mut k = first;
            while k < chunks {
                if let Some((buf, n)) = ready.remove(&k) {
                    let rel = k - first;
                    let slot_idx = (rel % u64::from(slot_count)) as u16;
                    let imm = proto::encode_chunk_imm(proto::Imm {
                        slot: slot_idx,
                        seq: rel as u16,
                    });
                    let target = match remote.slice(u64::from(slot_idx) * slot, n as u64) {
                        Ok(t) => t,
                        Err(e) => {
                            r.free.push(buf);
                            return Err(e);
                        }
                    };
                    // The credit first (a timeout of `post`'s own wait would give up the buffer).
                    if let Err(e) = wait_on(ep, session, Endpoint::wait_credit) {
                        r.free.push(buf);
                        return Err(e);
                    }
                    let wr = SendRequest::new(
                        rel,
                        SendOp::WriteWithImm(target, imm),
                        [Sge::range(buf, 0, n)],
                    );
                    if let Err(pe) = ep.post(wr) {
                        r.free
                            .extend(pe.bufs.into_iter().filter_map(Buf::into_local));
                        return Err(pe.error);
                    }
                    in_flight += 1;
                    if faults.replay == Some(k) {
                        replay(ep, remote, u64::from(slot_idx) * slot, rel, imm, session)?;
                        in_flight += 1;
                    }
                    k += 1;
                    written += n as u64;
                    moved(session, 1);
                    progress(written);
                } else if assigned < chunks && !r.free.is_empty() {
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

/// Test-only ([`Faults::replay`]): a zero-length WRITE_WITH_IMM at `off` repeating `imm`.
fn replay(
    ep: &mut Endpoint,
    remote: &RemoteRegion,
    off: u64,
    wr_id: u64,
    imm: u32,
    session: Option<&AtomicU64>,
) -> Result<()> {
    wait_on(ep, session, Endpoint::wait_credit)?;
    let wr = SendRequest::new(
        wr_id,
        SendOp::WriteWithImm(remote.slice(off, 0)?, imm),
        std::iter::empty::<Sge>(),
    );
    ep.post(wr).map_err(|pe| pe.error)
}

/// Waits for at least one data-chunk completion and takes its buffers back; each counts as
/// the session's progress.
fn collect(
    ep: &mut Endpoint,
    r: &mut ChunkBufs,
    in_flight: &mut usize,
    session: Option<&AtomicU64>,
) -> Result<()> {
    let polled = wait_on(ep, session, |ep| {
        let timeout = ep.timeout();
        ep.poll_user(r.total, timeout)
    })?;
    for c in polled {
        if c.status == crate::verbs::cq::REM_ACCESS_ERR {
            // The ring was valid when the receiver offered it: it has since been withdrawn.
            return Err(Error::Connection(format!(
                "the receiver withdrew its staging ring while data was being written: it ended \
                 this transfer on its side (at its step deadline, on a spent session budget, or \
                 on an error it reports). Detail: {}",
                c.to_error()
            )));
        }
        if !c.is_success() {
            return Err(c.to_error());
        }
        let done = 1 + c.retired.len();
        *in_flight = in_flight.saturating_sub(done);
        moved(session, done as u64);
        r.free.extend(c.into_all_local_bufs());
    }
    Ok(())
}

/// A failure seen on this side (a lost connection, a withdrawn ring, a timeout) whose cause the
/// receiver may have sent just before it ended the session (an ERR or REFUSE, e.g. a spent
/// budget, while this sender was stopped): that message, if it arrived, names the cause.
pub(super) fn named_by_peer(ep: &mut Endpoint, err: Error) -> Error {
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
