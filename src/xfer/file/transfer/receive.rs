//! The receiver: serves one sender, staging each file's chunks through an exposed ring (see the
//! parent module's docs for the ring's flow control).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::fault;
use super::joint::{Joint, StreamRegistry};
use super::stripe;
use super::{
    decode_ctl, detail, peer_err, reason_of, recv_ctl, send_err, send_msg, FileReport, Progress,
    ReceiverOptions, SessionReport, MAX_CHUNK, MAX_RING_BYTES, MIN_CHUNK, MIN_SLOT, PEER_REPORTS,
};
use crate::error::{Error, Result};
use crate::verbs::{ExposedRegion, RemoteAccess, TRACE_TARGET};
use crate::xfer::endpoint::Endpoint;
use crate::xfer::file::budget::{Budget, FILE_CREDIT};
use crate::xfer::file::digest;
use crate::xfer::file::entry;
use crate::xfer::file::names::{self, RelPath};
use crate::xfer::file::policy::Decision;
use crate::xfer::file::proto::{
    self, Digest, EntryKind, Hello, Msg, Reason, RingGrant, Session, SkipWhy, Stripe,
};
use crate::xfer::file::ring_budget::{self, RingLease};
use crate::xfer::file::sink::{Sink, SinkOptions};

pub(super) struct StagingRing {
    region: ExposedRegion,
    slot_size: u32,
    slot_count: u32,
}

impl StagingRing {
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

/// Serves one sender on `ep` until DONE (or a HELLO flagged `last`). Files are recorded in
/// `report` as they finish; refused or failed files make the result an error at the end (the
/// session itself continues past them). A protocol violation, a failed authentication, an
/// unsupported version, a spent budget (`opts.budgets`: ERR(budget) tells the sender which) or
/// a lost connection ends the session at once. The ring is revoked before returning.
pub fn receive(
    ep: &mut Endpoint,
    opts: &ReceiverOptions,
    report: &mut SessionReport,
) -> Result<()> {
    receive_leased(ep, opts, &mut RingLease::unlimited(), report, &mut |_| {})
}

/// Like [`receive`], with the staging ring sized within `lease` (a share of the memory budget
/// of a receiver serving several sessions at once): smaller slots when the budget is short.
/// `progress` hears of each file's verdict as it is recorded ([`Progress::FileDone`]).
pub fn receive_leased(
    ep: &mut Endpoint,
    opts: &ReceiverOptions,
    lease: &mut RingLease,
    report: &mut SessionReport,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<()> {
    receive_streams(ep, opts, lease, Role::default(), report, progress)
}

/// What a connection may be for a receiver that takes sessions of several streams.
#[derive(Clone, Copy, Debug, Default)]
pub struct Role<'a> {
    /// The receiver's registry of sessions with several streams (`None`: an OPEN is granted
    /// one stream, a JOIN is refused).
    pub streams: Option<&'a StreamRegistry>,
    /// Only a JOIN of a session being served is taken (`recv --once` after its session began):
    /// anything else is refused as busy.
    pub join_only: bool,
}

/// Like [`receive_leased`], as one stream of a session with several streams (OPEN, JOIN)
/// where `role` allows it.
pub fn receive_streams(
    ep: &mut Endpoint,
    opts: &ReceiverOptions,
    lease: &mut RingLease,
    role: Role<'_>,
    report: &mut SessionReport,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<()> {
    let mut ring: Option<StagingRing> = None;
    let mut budget = Budget::new(opts.budgets, ep.timeout());
    let mut s = SessionState {
        lease,
        ring: &mut ring,
        budget: &mut budget,
        role,
        stream: None,
    };
    let r = receive_session(ep, opts, &mut s, report, progress);
    if let Err(e) = &r {
        if e.reason() == Some(Reason::Budget) {
            tracing::warn!("ending the session: {}", e.to_string().escape_debug());
            send_err(ep, Reason::Budget, e);
        }
    }
    if let Some(ring) = ring {
        if let Err(e) = ring.region.revoke() {
            tracing::warn!("deregistering the staging ring: {e}");
        }
    }
    r?;
    report.result("received")
}

/// A connection's state across its files.
pub(super) struct SessionState<'a, 'b> {
    pub(super) lease: &'a mut RingLease,
    pub(super) ring: &'a mut Option<StagingRing>,
    pub(super) budget: &'a mut Budget,
    role: Role<'b>,
    /// This connection's stream of a session with several (for errors).
    pub(super) stream: Option<u16>,
}

fn receive_session(
    ep: &mut Endpoint,
    opts: &ReceiverOptions,
    st: &mut SessionState<'_, '_>,
    report: &mut SessionReport,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<()> {
    let nonce = proto::new_nonce();
    send_msg(
        ep,
        &Msg::Challenge {
            version: proto::VERSION,
            nonce,
        },
    )?;
    let mut joint: Option<Arc<Joint>> = None;
    let mut stripe: Option<Stripe> = None;
    let mut first = true;
    loop {
        let msg = match st.budget.wait(ep, recv_ctl) {
            Ok(m) => m,
            Err(e) if e.reason() == Some(Reason::Budget) => return Err(e),
            Err(e) => {
                if let Some(reason) = e.reason() {
                    // Unsupported version: answer in kind so the sender can say why.
                    let _ = send_msg(
                        ep,
                        &Msg::Refuse {
                            reason,
                            message: proto::truncate_text(&e.to_string()),
                        },
                    );
                } else {
                    // A protocol violation, or a deadline: say so (unless the peer is gone).
                    tell_peer(ep, &e);
                }
                return Err(e);
            }
        };
        let was_first = std::mem::replace(&mut first, false);
        if was_first && st.role.join_only && !matches!(msg, Msg::Join(_)) {
            let e = Error::refused(
                Reason::Busy,
                "it is finishing its last session: retry later",
            );
            return Err(refuse_session(ep, e));
        }
        match msg {
            Msg::Open(o) if was_first => {
                check_auth(opts, &nonce, o.auth.as_ref()).map_err(|e| refuse_session(ep, e))?;
                let (id, streams) = match st.role.streams {
                    Some(reg) => {
                        let j = reg.open(o.streams);
                        st.budget.share(j.progress.clone());
                        let granted = (j.id, j.granted);
                        joint = Some(j);
                        granted
                    }
                    None => (proto::new_session_id(), 1),
                };
                let index = 0;
                st.stream = (streams > 1).then_some(index);
                send_msg(ep, &Msg::Session(Session { id, streams, index }))?;
            }
            Msg::Join(jn) if was_first => {
                let j = check_auth(opts, &nonce, jn.auth.as_ref())
                    .and_then(|()| {
                        st.role.streams.ok_or_else(|| {
                            Error::refused(
                                Reason::AuthFailed,
                                "JOIN names no session of this receiver (it takes no streams)",
                            )
                        })
                    })
                    .and_then(|reg| reg.join(&jn.id, jn.index))
                    .map_err(|e| refuse_session(ep, e))?;
                let (id, streams, index) = (j.id, j.granted, jn.index);
                st.budget.share(j.progress.clone());
                st.stream = Some(index);
                send_msg(ep, &Msg::Session(Session { id, streams, index }))?;
                joint = Some(j);
            }
            Msg::Stripe(s) if joint.is_some() && stripe.is_none() => stripe = Some(s),
            Msg::Hello(h) => {
                let last = h.flags.last;
                let before = report.file_count();
                let r = match (stripe.take(), &joint) {
                    (Some(s), Some(j)) => {
                        let offer = stripe::StripeOffer {
                            joint: j,
                            stripe: s,
                            hello: h,
                        };
                        stripe::receive_stripe(ep, opts, st, report, &nonce, offer)
                    }
                    _ => receive_file(ep, opts, st, report, &nonce, h),
                };
                report.announce_since(before, progress);
                r?;
                if last {
                    return Ok(());
                }
            }
            Msg::Done => return Ok(()),
            Msg::Err { reason, message } => return Err(peer_err(reason, &message)),
            other => {
                let e = Error::Protocol(format!("expected HELLO or DONE, got {other:?}"));
                send_err(ep, Reason::Protocol, &e);
                return Err(e);
            }
        }
    }
}

/// Refuses the session (REFUSE with the error's reason, best effort) and returns the error.
fn refuse_session(ep: &mut Endpoint, e: Error) -> Error {
    let msg = Msg::Refuse {
        reason: reason_of(&e),
        message: proto::truncate_text(&detail(&e)),
    };
    if let Err(e2) = send_msg(ep, &msg) {
        tracing::debug!("sending REFUSE: {e2}");
    }
    e
}

/// The checks of every HELLO: authentication, then the name.
pub(super) fn admit(opts: &ReceiverOptions, nonce: &Digest, h: &Hello) -> Result<RelPath> {
    check_auth(opts, nonce, h.auth.as_ref())?;
    if let Some(only) = opts.verify {
        if h.kind == EntryKind::File && h.verify != only {
            return Err(Error::refused(
                Reason::Protocol,
                format!(
                    "this receiver verifies with {only} only (recv --verify {only}); the sender \
                     asks for {}: send with --verify {only}",
                    h.verify
                ),
            ));
        }
    }
    names::sanitize(&h.name)
}

/// The answer to this connection's CHALLENGE, when the receiver has a token.
fn check_auth(opts: &ReceiverOptions, nonce: &Digest, auth: Option<&Digest>) -> Result<()> {
    if let Some(token) = &opts.token {
        if !proto::auth_verify(token, nonce, auth) {
            let why = if auth.is_some() {
                "wrong token"
            } else {
                "this receiver requires a token (--token or RDMAXFER_TOKEN)"
            };
            return Err(Error::refused(Reason::AuthFailed, why));
        }
    }
    Ok(())
}

/// What a HELLO gets: a sink to receive its data into, a directory or symlink made, or
/// nothing to do.
pub(super) enum Opened {
    Sink(Box<Sink>),
    Made,
    Skip(SkipWhy, String),
}

/// The checks before anything is exposed: chunk size, what exists (the policy), then the
/// sink's (size limit, free space).
pub(super) fn open_sink(opts: &ReceiverOptions, rel: &RelPath, h: &Hello) -> Result<Opened> {
    if h.chunk_size < MIN_CHUNK {
        return Err(Error::refused(
            Reason::Protocol,
            format!(
                "chunk size {} is below this receiver's minimum of {MIN_CHUNK} bytes",
                h.chunk_size
            ),
        ));
    }
    let existing = entry::inspect_file(&opts.out_dir, rel, h)?;
    let replace = match entry::decide(existing, h, opts.force)? {
        Decision::Write { replace } => replace,
        Decision::Skip(why, message) => return Ok(Opened::Skip(why, message)),
        Decision::Refuse(_) => unreachable!("entry::decide returns refusals as errors"),
    };
    let mtime = (h.mtime_sec >= 0)
        .then(|| SystemTime::UNIX_EPOCH + Duration::new(h.mtime_sec as u64, h.mtime_nsec));
    let mut sink = Sink::create(
        &opts.out_dir,
        rel,
        h.size,
        SinkOptions {
            force: replace,
            resume: opts.resume && h.flags.resume,
            max_size: opts.max_size,
            mode: Some(h.mode),
            mtime,
        },
    )?;
    sink.set_keep_on_abort(opts.resume);
    Ok(Opened::Sink(Box::new(sink)))
}

/// A directory or symlink entry: made, skipped or refused, without data.
fn receive_entry(opts: &ReceiverOptions, rel: &RelPath, h: &Hello) -> Result<entry::Outcome> {
    match h.kind {
        EntryKind::Dir => entry::receive_dir(&opts.out_dir, rel),
        EntryKind::Symlink => entry::receive_symlink(&opts.out_dir, rel, h, opts.force),
        EntryKind::File => unreachable!("files are received by receive_file"),
    }
}

/// Where [`receive_data`] writes: a [`Sink`] (a whole file), or one stripe of a file received
/// over several streams. Chunk `index` counts from the start of what it receives.
pub(super) trait ChunkTarget: Sync {
    /// Writes and hashes chunk `index`, from any thread, in any order.
    fn write_chunk_at(&self, index: u64, data: &[u8]) -> Result<()>;
}

impl ChunkTarget for Sink {
    fn write_chunk_at(&self, index: u64, data: &[u8]) -> Result<()> {
        Sink::write_chunk_at(self, index, data)
    }
}

enum Chunk {
    Data(usize),
    Ctl(Result<Msg>),
}

/// Copy buffers between the receiving thread and the writer threads.
const WRITE_BUFS: usize = ring_budget::COPY_BUFS as usize;

/// Receives the data chunks of one file: this thread copies each chunk out of its slot (then
/// the slot's credit goes back) into a private buffer; a pool of writer threads writes each
/// buffer at its offset and hashes it (see [`Sink::write_chunk_at`]), so the network, the disk
/// and hashing on every core overlap. A write error does not stop the draining: it is returned
/// with the sink for the ACK. Other errors (protocol, connection, an ERR from the sender) end
/// the file (the sink is dropped, which removes or keeps the temporary file). `label` names
/// the part in errors ([`fault::part_label`]).
pub(super) fn receive_data<T: ChunkTarget>(
    ep: &mut Endpoint,
    r: &mut StagingRing,
    budget: &mut Budget,
    sink: T,
    (held, size): (u64, u64),
    label: &str,
) -> Result<(T, Option<Error>)> {
    let slot = u64::from(r.slot_size);
    let first = held / slot;
    let bufs = (size - held).div_ceil(slot).clamp(1, WRITE_BUFS as u64) as usize;
    let failure: Mutex<Option<Error>> = Mutex::new(None);
    let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<(u64, Vec<u8>, usize)>(bufs);
    let (free_tx, free_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    for _ in 0..bufs {
        free_tx
            .send(vec![0u8; r.slot_size as usize])
            .expect("receiver alive");
    }
    let full_rx = Mutex::new(full_rx);
    let res = std::thread::scope(|sc| {
        let (sink, failure) = (&sink, &failure);
        for _ in 0..digest::threads(bufs) {
            let (full_rx, free_tx) = (&full_rx, free_tx.clone());
            sc.spawn(move || loop {
                let job = full_rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                let Ok((k, buf, n)) = job else { return };
                if let Err(e) = sink.write_chunk_at(k, &buf[..n]) {
                    failure
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert(e);
                }
                if free_tx.send(buf).is_err() {
                    return;
                }
            });
        }
        drop(free_tx);
        let mut off = held;
        let mut k = first;
        let mut seq: u16 = 0;
        tracing::trace!(
            target: TRACE_TARGET,
            "{label}: receiving on qpn={} from chunk {first}, {} bytes, ring of {} x {slot} bytes",
            ep.local().qpn,
            size - held,
            r.slot_count,
        );
        let res: Result<()> = (|| {
            while off < size {
                let want = (size - off).min(slot) as usize;
                let mut buf = free_rx
                    .recv()
                    .map_err(|_| Error::refused(Reason::Internal, "the writer threads ended"))?;
                let StagingRing {
                    region, slot_count, ..
                } = &*r;
                let got = budget
                    .wait(ep, |ep| {
                        ep.recv_with(|m| -> Result<Chunk> {
                            let (Some(imm), Some(len)) = (m.imm, m.rdma_write_len) else {
                                return Ok(Chunk::Ctl(decode_ctl(m.data)));
                            };
                            let imm = proto::decode_chunk_imm(imm, *slot_count)?;
                            tracing::trace!(
                                target: TRACE_TARGET,
                                "{label}: data seq={} slot={} len={len}, expected seq={seq}",
                                imm.seq,
                                imm.slot,
                            );
                            if imm.seq != seq {
                                return Err(fault::out_of_sequence(
                                    label, imm.seq, len, imm.slot, seq,
                                ));
                            }
                            if len as usize != want {
                                return Err(fault::wrong_length(label, seq, len, want));
                            }
                            region
                                .read_at(usize::from(imm.slot) * slot as usize, &mut buf[..want])?;
                            Ok(Chunk::Data(want))
                        })?
                    })
                    .map_err(|e| fault::invalid_request(label, Some(u64::from(seq)), e))?;
                let n = match got {
                    Chunk::Data(n) => n,
                    Chunk::Ctl(Ok(Msg::Err { reason, message })) => {
                        return Err(peer_err(reason, &message))
                    }
                    Chunk::Ctl(Ok(m)) => {
                        return Err(Error::Protocol(format!("expected a data chunk, got {m:?}")))
                    }
                    Chunk::Ctl(Err(e)) => return Err(e),
                };
                full_tx
                    .send((k, buf, n))
                    .map_err(|_| Error::refused(Reason::Internal, "the writer threads ended"))?;
                budget.progress(n as u64);
                off += n as u64;
                k += 1;
                seq = seq.wrapping_add(1);
            }
            Ok(())
        })();
        drop(full_tx);
        res
    });
    match res {
        Ok(()) => Ok((
            sink,
            failure.into_inner().unwrap_or_else(|p| p.into_inner()),
        )),
        Err(e) => {
            drop(sink);
            Err(e)
        }
    }
}

/// Reads DIGESTS up to FIN, comparing each batch with the chunks written; returns FIN's
/// fields. A mismatch is recorded in the sink (and named by its commit).
fn receive_digests(
    ep: &mut Endpoint,
    budget: &mut Budget,
    sink: &mut Sink,
    algo: proto::Algo,
) -> Result<Msg> {
    loop {
        match budget.wait(ep, recv_ctl)? {
            Msg::Digests(d) if d.algo == algo => {
                if let Some(i) = sink.check_digests(d.first, &d.digests)? {
                    tracing::debug!("chunk {i} differs from the sender's digest");
                }
            }
            Msg::Digests(d) => {
                return Err(Error::Protocol(format!(
                    "DIGESTS by {}, HELLO asked for {algo}",
                    d.algo
                )))
            }
            m => return Ok(m),
        }
    }
}

/// Ends a file that failed while receiving: tells the sender why (see [`tell_peer`]), records
/// the failure in `report`, and returns the error.
fn file_failed(
    ep: &mut Endpoint,
    report: &mut SessionReport,
    name: &str,
    size: u64,
    e: Error,
) -> Error {
    tell_peer(ep, &e);
    report.push(FileReport::failed(name, size, reason_of(&e), e.to_string()));
    e
}

/// Best effort, before a failure ends the session: sends ERR with the error's reason, unless the
/// error is the peer's own report or the connection is already gone (nothing would arrive).
pub(super) fn tell_peer(ep: &mut Endpoint, e: &Error) {
    let gone = matches!(
        e,
        Error::Connection(_) | Error::Completion { .. } | Error::InvalidState { .. }
    );
    let theirs = matches!(e, Error::Refused { message, .. } if message.starts_with(PEER_REPORTS));
    if !gone && !theirs {
        send_err(ep, reason_of(e), e);
    }
}

/// One entry (a file, directory or symlink) announced by `h`.
fn receive_file(
    ep: &mut Endpoint,
    opts: &ReceiverOptions,
    st: &mut SessionState<'_, '_>,
    report: &mut SessionReport,
    nonce: &Digest,
    h: Hello,
) -> Result<()> {
    let SessionState {
        lease,
        ring,
        budget,
        stream,
        ..
    } = st;
    let kind = h.kind;
    let opened = admit(opts, nonce, &h).and_then(|rel| {
        if kind == EntryKind::File {
            open_sink(opts, &rel, &h)
        } else {
            receive_entry(opts, &rel, &h).map(|o| match o {
                entry::Outcome::Made => Opened::Made,
                entry::Outcome::Skipped(why, m) => Opened::Skip(why, m),
            })
        }
    });
    let sink = match opened {
        Ok(Opened::Sink(s)) => *s,
        Ok(Opened::Made) => {
            send_msg(
                ep,
                &Msg::Ack {
                    status: Reason::Ok,
                    message: String::new(),
                },
            )?;
            report.push(FileReport::made(&h.name, kind));
            budget.progress(FILE_CREDIT);
            return Ok(());
        }
        Ok(Opened::Skip(why, message)) => return answer_skip(ep, report, budget, &h, why, message),
        Err(e) => return answer_refuse(ep, report, budget, &h, e),
    };
    let r = match ensure_ring(ep, opts, lease, ring, h.chunk_size, h.size) {
        Ok(r) => r,
        Err(e) => return Err(file_failed(ep, report, &h.name, h.size, e)),
    };
    let mut sink = sink;
    let (held, held_hash) = match sink.start(r.slot_size, h.verify) {
        Ok(x) => x,
        Err(e) => return Err(file_failed(ep, report, &h.name, h.size, e)),
    };
    send_msg(ep, &r.offer(held, held_hash))?;

    let size = h.size;
    let label = fault::part_label(*stream, None, &h.name);
    let (mut sink, write_failure) = match receive_data(ep, r, budget, sink, (held, size), &label) {
        Ok(x) => x,
        Err(e) => return Err(file_failed(ep, report, &h.name, size, e)),
    };
    report.bytes += size - held;

    let fin = receive_digests(ep, budget, &mut sink, h.verify);
    let (bytes, hash) = match fin {
        Ok(Msg::Fin { bytes, hash }) if bytes == size => (bytes, hash),
        Ok(Msg::Err { reason, message }) => {
            let e = peer_err(reason, &message);
            report.push(FileReport::failed(&h.name, size, reason, e.to_string()));
            return Err(e);
        }
        other => {
            let e = match other {
                Ok(Msg::Fin { bytes, .. }) => Error::Protocol(format!(
                    "FIN announces {bytes} bytes, HELLO announced {size}"
                )),
                Ok(m) => Error::Protocol(format!("expected FIN, got {m:?}")),
                Err(e) => e,
            };
            return Err(file_failed(ep, report, &h.name, size, e));
        }
    };
    let result = match write_failure {
        Some(e) => {
            if let Err(e2) = sink.abort() {
                tracing::warn!("removing the partial file: {e2}");
            }
            Err(e)
        }
        None => {
            let layout = sink.layout().copied();
            sink.commit(&hash).and_then(|got| {
                Ok((
                    got,
                    layout.ok_or_else(|| Error::refused(Reason::Internal, "no layout"))?,
                ))
            })
        }
    };
    let (status, message) = match &result {
        Ok(_) => (Reason::Ok, String::new()),
        Err(e) => (reason_of(e), proto::truncate_text(&e.to_string())),
    };
    send_msg(ep, &Msg::Ack { status, message })?;
    let ok = result.is_ok();
    report.push(match result {
        Ok((got, layout)) => FileReport::ok(&h.name, bytes, &got, &layout),
        Err(e) => FileReport::failed(&h.name, bytes, status, e.to_string()),
    });
    if ok {
        budget.progress(FILE_CREDIT);
        Ok(())
    } else {
        budget.refused()
    }
}

/// The connection's staging ring for a transfer of `size` bytes in chunks of at most
/// `chunk_size`: kept from the last file when its slots fit, else (re)made within `lease`.
pub(super) fn ensure_ring<'r>(
    ep: &mut Endpoint,
    opts: &ReceiverOptions,
    lease: &mut RingLease,
    ring: &'r mut Option<StagingRing>,
    chunk_size: u32,
    size: u64,
) -> Result<&'r mut StagingRing> {
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
        let region = ExposedRegion::new(ep.pd(), len, RemoteAccess::Write).map_err(|e| {
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

/// Answers a HELLO with SKIP (nothing to do) and records it; skipping counts as progress.
pub(super) fn answer_skip(
    ep: &mut Endpoint,
    report: &mut SessionReport,
    budget: &mut Budget,
    h: &Hello,
    why: SkipWhy,
    message: String,
) -> Result<()> {
    send_msg(
        ep,
        &Msg::Skip {
            why,
            message: proto::truncate_text(&message),
        },
    )?;
    report.push(FileReport::skipped(
        &h.name,
        h.kind.as_str(),
        h.size,
        &message,
    ));
    budget.progress(FILE_CREDIT);
    Ok(())
}

/// Answers a HELLO with REFUSE and records it (a refusal spends the refusal budget); a failed
/// authentication ends the session.
pub(super) fn answer_refuse(
    ep: &mut Endpoint,
    report: &mut SessionReport,
    budget: &mut Budget,
    h: &Hello,
    e: Error,
) -> Result<()> {
    let reason = reason_of(&e);
    let refused = FileReport::failed(&h.name, h.size, reason, detail(&e)).of_kind(h.kind);
    if let Err(spent) = budget.refused() {
        report.push_refused(refused);
        return Err(spent);
    }
    send_msg(
        ep,
        &Msg::Refuse {
            reason,
            message: proto::truncate_text(&detail(&e)),
        },
    )?;
    report.push_refused(refused);
    if reason == Reason::AuthFailed {
        return Err(e);
    }
    Ok(())
}
