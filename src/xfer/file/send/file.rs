//! One file's (or stripe's) exchange: HELLO, the receiver's answer (MR, SKIP or REFUSE), the
//! data, DIGESTS, FIN and the verdict (ACK).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use super::core::{check_grant, AfterFin, Answer, Asked, ChunkPlan, Repairs, Verdict};
use super::data::{
    named_by_peer, send_data, send_digests, ChunkSource, DataTarget, Pacer, PHASE_TARGET as PHASE,
};
use super::part::{Part, RangeSource};
use super::source::{self, Source, SourceEntry};
use crate::error::{Error, Result};
use crate::verbs::RemoteRegion;
use crate::xfer::file::waits::{moved, wait_on};
use crate::xfer::file::ctl::{
    awaiting, is_lost, peer_err, reason_of, recv_ctl, send_err, send_msg,
};

/// The stage of waiting for the answer to a HELLO.
const ANSWER: &str = "the receiver's answer to a HELLO";
use crate::xfer::file::fault::{self, Faults};
use crate::xfer::file::link::Link;
use crate::xfer::file::names;
use crate::xfer::file::options::SenderOptions;
use crate::xfer::file::proto::{self, Digest, EntryKind, Hello, Msg, Reason};
use crate::xfer::file::report::{FileReport, Progress, SessionReport};

pub(super) use super::data::ChunkBufs;

/// One stream's state across the entries it sends: what each entry's exchange needs besides
/// the connection, the report and the progress callback.
pub(super) struct StreamState<'a, B> {
    pub(super) opts: &'a SenderOptions,
    /// The receiver's CHALLENGE nonce, answered in every HELLO when there is a token.
    pub(super) nonce: Digest,
    /// The registered chunk buffers, kept from one part to the next when they fit.
    pub(super) bufs: Option<ChunkBufs<B>>,
    /// The shared progress of a session over several streams: this stream's waits go on while
    /// it moves (see [`wait_on!`]).
    pub(super) session: Option<&'a AtomicU64>,
    /// This stream's share of `send --bwlimit`.
    pub(super) pace: Option<Pacer>,
    /// Another stream takes over this one's work if it is lost (`send::streams`): a part
    /// whose data fails with a lost connection is then not recorded as failed.
    pub(super) retake: bool,
    /// Bytes of the current part from its start that this stream had sent when its data
    /// failed (for the bytes sent again by the stream that takes it over).
    pub(super) sent_to: u64,
    /// Of a part taken over from a lost stream: the bytes of it that stream had sent from
    /// the part's start; what the receiver did not keep of them is sent again.
    pub(super) again_from: Option<u64>,
    /// Bytes sent again for parts taken over from lost streams.
    pub(super) resent: u64,
}

impl<'a, B> StreamState<'a, B> {
    /// A stream of `opts` after the receiver's CHALLENGE (`nonce`).
    pub(super) fn new(opts: &'a SenderOptions, nonce: Digest) -> StreamState<'a, B> {
        StreamState {
            opts,
            nonce,
            bufs: None,
            session: None,
            pace: opts.bwlimit.map(Pacer::new),
            retake: false,
            sent_to: 0,
            again_from: None,
            resent: 0,
        }
    }
}

/// The receiver's answer to a HELLO (MR, SKIP, REFUSE or ERR). When this stream has no send
/// buffers yet (`ring`) and the part (file or stripe) is at least a chunk long, the buffers it
/// will most likely need are registered on another thread meanwhile, while the receiver sets
/// the file up: as many slots of the chunk size as `--slots` (the receiver's slots are that
/// large for such a part unless it is short of memory; if its MR says otherwise, the caller
/// re-makes them as before). A failed registration leaves `ring` empty: the caller registers
/// what the MR asks for and reports a failure then.
async fn answer_and_ring<L: Link>(
    ep: &mut L,
    ring: &mut Option<ChunkBufs<L::Buf>>,
    opts: &SenderOptions,
    part_len: u64,
    session: Option<&AtomicU64>,
) -> Result<Msg> {
    if ring.is_some() || part_len < u64::from(opts.chunk) {
        let answer = wait_on!(ep, session, recv_ctl(ep).await);
        return awaiting(ANSWER, answer);
    }
    let register = ep.registrar();
    let (slot_size, total) = (opts.chunk, opts.slots.max(1) as usize);
    // Registered on a thread of its own while the receiver answers; dropped before that ends,
    // the thread's buffers are let go when it ends.
    let (tx, rx) = flume::bounded(1);
    let early = std::thread::Builder::new()
        .name("rdmaxfer-register".into())
        .spawn(move || {
            let _ = tx.send(register(slot_size as usize, total));
        });
    let answer = awaiting(
        ANSWER,
        wait_on!(ep, session, recv_ctl(ep).await),
    );
    let made = match early {
        Ok(_) => rx.recv_async().await.ok().and_then(|r| r.ok()),
        Err(e) => {
            tracing::debug!("starting the registration thread: {e}");
            None
        }
    };
    *ring = made.map(|free| ChunkBufs {
        free,
        total,
        slot_size,
    });
    answer
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
    fn reread_chunk_at(&self, index: u64, buf: &mut [u8]) -> Result<usize> {
        either!(self, s => ChunkSource::reread_chunk_at(s, index, buf))
    }
    fn finish(&self) -> Result<Digest> {
        either!(self, s => ChunkSource::finish(s))
    }
}

/// Sends one file, or one stripe of it (`part`): HELLO (after STRIPE), the receiver's answer,
/// the data, DIGESTS and FIN, and records the verdict.
pub(super) async fn send_file<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
    ep: &mut L,
    st: &mut StreamState<'_, L::Buf>,
    e: &SourceEntry,
    part: Part<'_>,
    report: &mut SessionReport,
    progress: &mut P,
) -> Result<()> {
    let StreamState {
        opts,
        nonce,
        bufs: ring,
        session,
        pace,
        retake,
        sent_to,
        again_from,
        resent,
    } = st;
    let (opts, session, stripe) = (*opts, *session, part.stripe());
    // Taken over from a lost stream: what it had sent that the receiver did not keep is sent
    // again (counted once the receiver's MR says what it kept).
    let again = again_from.take();
    *sent_to = 0;
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
            let f = if source::vanished(&e.path) {
                FileReport::vanished(name, &err.to_string())
            } else {
                FileReport::failed(name, 0, reason_of(&err), err.to_string())
            };
            part.record(report, f, false, None);
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
        flags: opts.hello_flags(),
        checksum,
        auth: opts.token.as_ref().map(|t| proto::auth_answer(t, nonce)),
    };
    if let Some(s) = stripe {
        wait_on!(ep, session, send_msg(ep, &Msg::Stripe(s.stripe)).await)?;
    }
    let hello = Msg::Hello(hello);
    wait_on!(ep, session, send_msg(ep, &hello).await)?;
    let part_len = stripe.map_or(size, |s| s.stripe.len);
    let answer = answer_and_ring(ep, ring, opts, part_len, session).await?;
    moved(session, 1);
    let mr = match Answer::of(answer, Asked::File)? {
        Answer::Ring(g) => g,
        Answer::Skipped(message) => {
            let f = FileReport::skipped(name, "file", size, &message);
            part.record(report, f, false, None);
            return Ok(());
        }
        Answer::Refused {
            reason,
            message,
            fatal,
        } => {
            let err = peer_err(reason, &message);
            let f = FileReport::failed(name, size, reason, message);
            part.record(report, f, true, None);
            return if fatal { Err(err) } else { Ok(()) };
        }
        // Not answers to a file's HELLO (`Answer::of` refuses them already).
        Answer::Made | Answer::Want | Answer::Would { .. } => {
            return Err(Error::Protocol(
                "expected MR, SKIP or REFUSE, got ACK or WANT".into(),
            ))
        }
    };
    if let Some(a) = again {
        *resent += a.saturating_sub(mr.resume_offset);
    }
    if let Err(err) = check_grant(&mr, opts.chunk) {
        send_err(ep, Reason::Protocol, &err).await;
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
            // Every stripe is read at the time the walk listed: a file modified between two
            // stripes' reads fails them, not commits a mix.
            let at = e
                .listed
                .map_or(src.mtime(), |l| (l.mtime_sec, l.mtime_nsec));
            let mut r = RangeSource::open(&e.path, (size, at), &s.stripe)?;
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
        send_err(ep, Reason::ReadError, &err).await;
        let f = FileReport::failed(name, size, Reason::ReadError, err.to_string());
        part.record(report, f, false, None);
        return Err(err);
    };
    let reading = Arc::new(reading);

    // Registered send buffers, re-made only if the slot size changes.
    let depth = opts.slots.min(mr.slot_count).max(1) as usize;
    if ring
        .as_ref()
        .is_none_or(|r| r.slot_size != mr.slot_size || r.total != depth)
    {
        *ring = None;
        let free = ep.registrar()(mr.slot_size as usize, depth)?;
        *ring = Some(ChunkBufs {
            free,
            total: depth,
            slot_size: mr.slot_size,
        });
    }
    if let Some(s) = stripe.filter(|s| opts.hooks().hold_stripe == Some(s.stripe.index)) {
        let t0 = Instant::now();
        s.track.wait_others(s.stripe.index);
        tracing::info!(
            "test hold: stripe {} held back for {:?}",
            s.stripe.index,
            t0.elapsed()
        );
    }
    let r = ring.as_mut().expect("made above");
    let sent_before = report.bytes;
    let part_index = stripe.map_or(0, |s| s.stripe.index);
    let shown = names::printable(name);
    tracing::debug!(target: PHASE, "{shown} part {part_index}: MR received, data starts");
    let data_start = Instant::now();
    let label = fault::part_label(
        stripe.map(|s| s.stream),
        stripe.map(|s| (s.stripe.index, s.stripe.count)),
        name,
    );
    let mut to = DataTarget {
        remote,
        plan: ChunkPlan::new(&mr, reading.size(), reading.first_chunk()),
        // The test hooks name chunks of the file: a stripe's own chunks count from its offset.
        faults: {
            let h = opts.hooks();
            let named = h.corrupt_name.as_deref().is_none_or(|n| n == name);
            let corrupt = [h.corrupt_chunk, h.corrupt_once].map(|c| c.filter(|_| named));
            let mut f = Faults::for_part(
                [corrupt[0], corrupt[1], h.replay_chunk],
                stripe.map_or(0, |s| s.stripe.offset / u64::from(mr.slot_size)),
            );
            f.brk = stripe.and_then(|s| {
                let mut hooked = h.break_streams.iter();
                hooked.find(|(i, _)| *i == s.stream).map(|(_, k)| *k)
            });
            f
        },
        label: &label,
        pace: pace.as_mut(),
        cancel: &opts.cancel,
    };
    let hash = match send_data(
        ep,
        r,
        &reading,
        &mut to,
        &mut |n| {
            progress(Progress::Bytes {
                name,
                file_done: n,
                total_done: sent_before + n,
            })
        },
        session,
    ).await {
        Ok((hash, n)) => {
            report.bytes += n;
            hash
        }
        Err((err, n)) => {
            report.bytes += n;
            *sent_to = mr.resume_offset + n;
            return Err(data_failed(ep, err, report, part, (name, size), *retake).await);
        }
    };
    // The chunk digests go ahead of FIN (the receiver names the first bad chunk).
    let (len, chunks) = match &*reading {
        Reading::Whole(src) => (size, src.chunks()?),
        Reading::Range(r) => (r.len(), r.chunks()?),
    };
    send_digests(ep, chunks, session).await?;
    let layout = *chunks.layout();
    let fin = Msg::Fin { bytes: len, hash };
    wait_on!(ep, session, send_msg(ep, &fin).await)?;
    tracing::debug!(target: PHASE, "{shown} part {part_index}: data written, FIN sent");
    // The receiver answers ACK, or REPAIR: those chunks again, then FIN again.
    let mut repairs = Repairs::new(&to.plan);
    let verdict = loop {
        let answer = awaiting("the receiver's verdict", wait_on!(ep, session, recv_ctl(ep).await))?;
        moved(session, 1);
        let again = match repairs.after_fin(answer)? {
            AfterFin::Verdict(v) => break v,
            AfterFin::Again(chunks) => chunks,
        };
        tracing::debug!(target: PHASE, "{shown} part {part_index}: chunks {again:?} again");
        to.plan = to.plan.again(again);
        match send_data(ep, r, &reading, &mut to, &mut |_| {}, session).await {
            Ok((_, n)) => report.bytes += n,
            Err((err, n)) => {
                report.bytes += n;
                *sent_to = part_len;
                return Err(data_failed(ep, err, report, part, (name, size), *retake).await);
            }
        }
        wait_on!(ep, session, send_msg(ep, &fin).await)?;
    };
    tracing::debug!(target: PHASE, "{shown} part {part_index}: verdict received");
    report.data_seconds += data_start.elapsed().as_secs_f64();
    match verdict {
        Verdict::Delivered => {
            let f = FileReport::ok(name, size, &hash, &layout).with_repaired(repairs.repaired());
            let digests = stripe.map(|s| chunks.stripe(s.stripe.offset, hash));
            part.record(report, f, false, digests);
        }
        Verdict::Failed { status, message } => {
            let f = FileReport::failed(
                name,
                size,
                status,
                format!("the receiver reports: {}", names::printable(&message)),
            );
            part.record(report, f, false, None);
        }
    }
    Ok(())
}

/// The data of a part failed (`err`, seen here): named by the receiver's last words if it sent
/// any; a read error or a cancel is told to the receiver; the part is recorded as failed,
/// unless the connection was lost and another stream takes it over (`retake`).
async fn data_failed<L: Link>(
    ep: &mut L,
    err: Error,
    report: &mut SessionReport,
    part: Part<'_>,
    (name, size): (&str, u64),
    retake: bool,
) -> Error {
    let err = named_by_peer(ep, err);
    if err.reason() == Some(Reason::ReadError) || matches!(err, Error::Cancelled) {
        send_err(ep, reason_of(&err), &err).await;
    }
    if retake && is_lost(&err) {
        return err;
    }
    let f = FileReport::failed(name, size, reason_of(&err), err.to_string());
    part.record(report, f, false, None);
    err
}
