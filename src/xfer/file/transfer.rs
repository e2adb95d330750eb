//! The file-transfer session over a connected [`Endpoint`]: the receiver ([`receive`]) and the
//! sender ([`send`]). Control messages are SENDs ([`proto`]); file data is RDMA WRITE_WITH_IMM
//! into the receiver's staging ring, one chunk per slot.
//!
//! # Ring flow control
//! The ring has exactly as many slots as the receiver keeps receives posted for the sender
//! (the endpoint's `recv_depth`, i.e. the send credits it grants). Every WRITE_WITH_IMM and
//! every control message consumes one such receive, and the receiver re-posts it (returning the
//! credit) only after it has copied the chunk out of its slot. Chunks are written to slot
//! `k mod slots` in order, so when the sender holds a credit for chunk `k`, at most
//! `slots − 1` earlier messages are unconsumed and chunk `k − slots` has been copied out: the
//! endpoint's credits are the slot credits, and the sender never overruns the ring. (`CREDIT`
//! messages are therefore not sent in version 1.)
//!
//! Memory is bounded by the ring on both sides: `slots × slot size` registered bytes (plus one
//! slot-sized copy buffer on the receiver), whatever the file size.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use super::budget::{Budget, Budgets, FILE_CREDIT};
use super::names;
use super::proto::{self, Digest, Hello, HelloFlags, Msg, Reason, Ring};
use super::ring_budget::{self, RingLease};
use super::sink::{Sink, SinkOptions};
use super::source::{Source, SourceEntry};
use crate::error::{Error, Result};
use crate::verbs::{
    Buf, ExposedRegion, LocalBuf, RemoteAccess, RemoteRegion, SendOp, SendRequest, Sge,
};
use crate::xfer::endpoint::{Endpoint, EndpointOptions};

/// Default chunk (ring slot) size.
pub const DEFAULT_CHUNK: u32 = 1 << 20;
/// Default number of ring slots (and chunks in flight).
pub const DEFAULT_SLOTS: u32 = 16;
/// Largest chunk: one RDMA WRITE of Soft-RoCE's 8 MiB maximum message.
pub const MAX_CHUNK: u32 = 8 << 20;
/// Largest ring the receiver exposes; the slot size is lowered to fit.
pub const MAX_RING_BYTES: u64 = 64 << 20;
/// Most ring slots.
pub const MAX_SLOTS: u32 = 1024;
/// Smallest slot the receiver offers for a small file.
const MIN_SLOT: u64 = 4096;
/// Smallest chunk size a HELLO may ask for (the receiver refuses smaller ones: a 1-byte chunk
/// would cost a completion, a copy and a credit per byte).
pub const MIN_CHUNK: u32 = 4096;
/// Entries a [`SessionReport`] keeps; later ones are only counted (`elided`).
pub const MAX_REPORTED_FILES: usize = 1000;
/// Bytes of a name or message a [`FileReport`] keeps.
pub const MAX_REPORT_TEXT: usize = 256;

/// The receiver's policy.
#[derive(Clone, Debug)]
pub struct ReceiverOptions {
    /// Where files go (must exist).
    pub out_dir: PathBuf,
    /// Shared secret; when set, senders must answer the challenge.
    pub token: Option<Vec<u8>>,
    /// Refuse files larger than this.
    pub max_size: Option<u64>,
    /// Overwrite existing files.
    pub force: bool,
    /// Keep partial files on failure and continue them when a sender asks to resume.
    pub resume: bool,
    /// Ring slots (= receives posted for the sender).
    pub slots: u32,
    /// Per-session limits (idle time, rate floor, refusals).
    pub budgets: Budgets,
}

impl ReceiverOptions {
    /// Receives into `out_dir` with defaults.
    pub fn new(out_dir: impl Into<PathBuf>) -> ReceiverOptions {
        ReceiverOptions {
            out_dir: out_dir.into(),
            token: None,
            max_size: None,
            force: false,
            resume: false,
            slots: DEFAULT_SLOTS,
            budgets: Budgets::default(),
        }
    }

    /// `base` adjusted for a receiving endpoint: control-message size, and `slots` receives.
    pub fn endpoint_options(&self, base: &EndpointOptions) -> EndpointOptions {
        EndpointOptions {
            msg_size: proto::MAX_MSG_LEN,
            recv_depth: self.slots.clamp(1, MAX_SLOTS),
            send_depth: 4,
            extra_send_wr: 0,
            ..base.clone()
        }
    }
}

/// The sender's settings.
#[derive(Clone, Debug)]
pub struct SenderOptions {
    /// Shared secret answering the receiver's challenge.
    pub token: Option<Vec<u8>>,
    /// Chunk size asked for (the receiver may lower it).
    pub chunk: u32,
    /// Chunks in flight at most (also capped by the receiver's ring).
    pub slots: u32,
    /// Ask the receiver to continue partial files.
    pub resume: bool,
    /// Test-only fault: flip a byte of this chunk (0-based, per file) after hashing it.
    pub corrupt_chunk: Option<u64>,
}

impl Default for SenderOptions {
    fn default() -> Self {
        SenderOptions {
            token: None,
            chunk: DEFAULT_CHUNK,
            slots: DEFAULT_SLOTS,
            resume: false,
            corrupt_chunk: None,
        }
    }
}

impl SenderOptions {
    /// `base` adjusted for a sending endpoint: control-message size and send-queue room for
    /// `slots` RDMA WRITEs.
    pub fn endpoint_options(&self, base: &EndpointOptions) -> EndpointOptions {
        EndpointOptions {
            msg_size: proto::MAX_MSG_LEN,
            recv_depth: 8,
            send_depth: 4,
            extra_send_wr: self.slots.clamp(1, MAX_SLOTS),
            ..base.clone()
        }
    }

    fn check(&self) -> Result<()> {
        if self.chunk < MIN_CHUNK || self.chunk > MAX_CHUNK {
            return Err(Error::InvalidArgument(format!(
                "chunk size {} is outside {MIN_CHUNK}..={MAX_CHUNK}",
                self.chunk
            )));
        }
        if self.slots == 0 || self.slots > MAX_SLOTS {
            return Err(Error::InvalidArgument(format!(
                "slots {} is outside 1..={MAX_SLOTS}",
                self.slots
            )));
        }
        Ok(())
    }
}

/// What happened to one file.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FileReport {
    /// Relative name (as sent, control characters escaped by `names::printable`; for hostile
    /// names, shortened).
    pub name: String,
    /// File size.
    pub bytes: u64,
    /// BLAKE3 (hex) of the verified file, when verified.
    pub hash: Option<String>,
    /// `"ok"` or the reason (e.g. `"hash mismatch"`).
    pub result: String,
    /// Details of a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl FileReport {
    fn ok(name: &str, bytes: u64, hash: &Digest) -> FileReport {
        FileReport {
            name: clip(&names::printable(name)),
            bytes,
            hash: Some(blake3::Hash::from(*hash).to_hex().to_string()),
            result: "ok".into(),
            message: None,
        }
    }

    fn failed(name: &str, bytes: u64, reason: Reason, message: String) -> FileReport {
        FileReport {
            name: clip(&names::printable(name)),
            bytes,
            hash: None,
            result: reason.as_str().to_string(),
            message: Some(clip(&names::printable(&message))),
        }
    }

    /// True when the file was verified and committed.
    pub fn is_ok(&self) -> bool {
        self.result == "ok"
    }
}

/// `s` cut to [`MAX_REPORT_TEXT`] bytes on a character boundary, marked with `…` when cut.
fn clip(s: &str) -> String {
    if s.len() <= MAX_REPORT_TEXT {
        return s.to_string();
    }
    let mut end = MAX_REPORT_TEXT - '…'.len_utf8();
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// What a session did, filled in as it goes (so it is there after an error too). Its size is
/// bounded whatever the peer sends: at most [`MAX_REPORTED_FILES`] entries of at most
/// [`MAX_REPORT_TEXT`]-byte texts.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SessionReport {
    /// The first [`MAX_REPORTED_FILES`] files announced, in order (see [`push`](Self::push)).
    pub files: Vec<FileReport>,
    /// Files announced after those, counted but not listed.
    pub elided: u64,
    /// Files that failed, listed or not.
    pub failed: u64,
    /// Bytes moved by RDMA WRITE in this session.
    pub bytes: u64,
    /// Sender: seconds from each file's first data chunk to the receiver's verdict on it
    /// (ACK), summed: the data phase, without connection set-up and per-file handshakes.
    pub data_seconds: f64,
}

impl SessionReport {
    /// Records a file: listed while there is room, else only counted.
    pub fn push(&mut self, f: FileReport) {
        if !f.is_ok() {
            self.failed += 1;
        }
        if self.files.len() < MAX_REPORTED_FILES {
            self.files.push(f);
        } else {
            self.elided += 1;
        }
    }

    /// Files announced, listed or not.
    pub fn file_count(&self) -> u64 {
        self.files.len() as u64 + self.elided
    }

    /// Files that failed, listed or not.
    pub fn failures(&self) -> u64 {
        self.failed
    }

    /// `Ok` when every file succeeded, else an error counting the files that were not `what`
    /// ("received", "delivered").
    fn result(&self, what: &str) -> Result<()> {
        match self.failures() {
            0 => Ok(()),
            n => Err(Error::refused(
                Reason::Internal,
                format!("{n} of {} files were not {what}", self.file_count()),
            )),
        }
    }
}

fn reason_of(e: &Error) -> Reason {
    e.reason().unwrap_or(match e {
        Error::Protocol(_) => Reason::Protocol,
        _ => Reason::Internal,
    })
}

fn send_msg(ep: &mut Endpoint, msg: &Msg) -> Result<()> {
    ep.send(&proto::encode(msg))
}

/// Best effort: tell the peer why the session ends.
fn send_err(ep: &mut Endpoint, reason: Reason, e: &Error) {
    let msg = Msg::Err {
        reason,
        message: proto::truncate_text(&e.to_string()),
    };
    if let Err(e2) = send_msg(ep, &msg) {
        tracing::debug!("sending ERR: {e2}");
    }
}

/// Decodes a control message; an unsupported version is `Refused(Version)`.
fn decode_ctl(data: &[u8]) -> Result<Msg> {
    let h = proto::header(data)?;
    if h.version != proto::VERSION {
        return Err(Error::refused(
            Reason::Version,
            format!(
                "peer speaks file protocol version {}, this build speaks {}",
                h.version,
                proto::VERSION
            ),
        ));
    }
    proto::decode(data)
}

/// Waits for the next control message (a data chunk here is a protocol error).
fn recv_ctl(ep: &mut Endpoint) -> Result<Msg> {
    let data = ep.recv_with(|m| match m.rdma_write_len {
        Some(_) => Err(Error::Protocol(
            "a data chunk arrived where a control message was expected".into(),
        )),
        None => Ok(m.data.to_vec()),
    })??;
    decode_ctl(&data)
}

/// How [`peer_err`] begins its message.
const PEER_REPORTS: &str = "the peer reports: ";

/// The peer's REFUSE/ERR as an error; its text is made printable here, where it enters.
fn peer_err(reason: Reason, message: &str) -> Error {
    let message = names::printable(message);
    Error::refused(reason, format!("{PEER_REPORTS}{message}"))
}

// ---- receiver ------------------------------------------------------------------------------

struct StagingRing {
    region: ExposedRegion,
    slot_size: u32,
    slot_count: u32,
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
    receive_leased(ep, opts, &mut RingLease::unlimited(), report)
}

/// Like [`receive`], with the staging ring sized within `lease` (a share of the memory budget
/// of a receiver serving several sessions at once): smaller slots when the budget is short.
pub fn receive_leased(
    ep: &mut Endpoint,
    opts: &ReceiverOptions,
    lease: &mut RingLease,
    report: &mut SessionReport,
) -> Result<()> {
    let mut ring: Option<StagingRing> = None;
    let mut budget = Budget::new(opts.budgets, ep.timeout());
    let r = receive_session(ep, opts, lease, report, &mut ring, &mut budget);
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

fn receive_session(
    ep: &mut Endpoint,
    opts: &ReceiverOptions,
    lease: &mut RingLease,
    report: &mut SessionReport,
    ring: &mut Option<StagingRing>,
    budget: &mut Budget,
) -> Result<()> {
    let nonce = proto::new_nonce();
    send_msg(
        ep,
        &Msg::Challenge {
            version: proto::VERSION,
            nonce,
        },
    )?;
    loop {
        let msg = match budget.wait(ep, recv_ctl) {
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
        match msg {
            Msg::Hello(h) => {
                let last = h.flags.last;
                receive_file(ep, opts, lease, report, ring, budget, &nonce, h)?;
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

/// The checks before anything is exposed: authentication, name, chunk size, then the sink's
/// (size limit, existing file, free space).
fn open_sink(opts: &ReceiverOptions, nonce: &Digest, h: &Hello) -> Result<Sink> {
    if let Some(token) = &opts.token {
        if !proto::auth_verify(token, nonce, h.auth.as_ref()) {
            let why = if h.auth.is_some() {
                "wrong token"
            } else {
                "this receiver requires a token (--token or RDMAXFER_TOKEN)"
            };
            return Err(Error::refused(Reason::AuthFailed, why));
        }
    }
    let rel = names::sanitize(&h.name)?;
    if h.chunk_size < MIN_CHUNK {
        return Err(Error::refused(
            Reason::Protocol,
            format!(
                "chunk size {} is below this receiver's minimum of {MIN_CHUNK} bytes",
                h.chunk_size
            ),
        ));
    }
    let mtime = (h.mtime_sec >= 0)
        .then(|| SystemTime::UNIX_EPOCH + Duration::new(h.mtime_sec as u64, h.mtime_nsec));
    let mut sink = Sink::create(
        &opts.out_dir,
        &rel,
        h.size,
        SinkOptions {
            force: opts.force,
            resume: opts.resume && h.flags.resume,
            max_size: opts.max_size,
            mode: Some(h.mode),
            mtime,
        },
    )?;
    sink.set_keep_on_abort(opts.resume);
    Ok(sink)
}

enum Chunk {
    Data(usize),
    Ctl(Result<Msg>),
}

/// Copy buffers between the receiving thread and the writer thread.
const WRITE_BUFS: usize = ring_budget::COPY_BUFS as usize;

/// Receives the data chunks of one file: this thread copies each chunk out of its slot (then
/// the slot's credit goes back), a writer thread writes and hashes it, so the network and the
/// disk overlap. A write error does not stop the draining: it is returned with the sink for the
/// ACK. Other errors (protocol, connection, an ERR from the sender) end the file (the sink is
/// dropped, which removes or keeps the temporary file).
fn receive_data(
    ep: &mut Endpoint,
    r: &mut StagingRing,
    budget: &mut Budget,
    sink: Sink,
    held: u64,
    size: u64,
) -> Result<(Sink, Option<Error>)> {
    let slot = u64::from(r.slot_size);
    let bufs = (size - held).div_ceil(slot).clamp(1, WRITE_BUFS as u64) as usize;
    std::thread::scope(|sc| {
        let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<(Vec<u8>, usize)>(bufs);
        let (free_tx, free_rx) = std::sync::mpsc::channel::<Vec<u8>>();
        for _ in 0..bufs {
            free_tx
                .send(vec![0u8; r.slot_size as usize])
                .expect("receiver alive");
        }
        let writer = sc.spawn(move || {
            let mut sink = sink;
            let mut failure: Option<Error> = None;
            let mut off = held;
            for (buf, n) in full_rx {
                if failure.is_none() {
                    if let Err(e) = sink.write_at(off, &buf[..n]) {
                        failure = Some(e);
                    }
                }
                off += n as u64;
                if free_tx.send(buf).is_err() {
                    break;
                }
            }
            (sink, failure)
        });
        let mut off = held;
        let mut seq: u16 = 0;
        let res: Result<()> = (|| {
            while off < size {
                let want = (size - off).min(slot) as usize;
                let mut buf = free_rx
                    .recv()
                    .map_err(|_| Error::refused(Reason::Internal, "the writer thread ended"))?;
                let StagingRing {
                    region, slot_count, ..
                } = &*r;
                let got = budget.wait(ep, |ep| {
                    ep.recv_with(|m| -> Result<Chunk> {
                        let (Some(imm), Some(len)) = (m.imm, m.rdma_write_len) else {
                            return Ok(Chunk::Ctl(decode_ctl(m.data)));
                        };
                        let imm = proto::decode_imm(imm, *slot_count)?;
                        if imm.seq != seq {
                            return Err(Error::Protocol(format!(
                                "data chunk {} arrived where chunk {seq} (mod 65536) was expected",
                                imm.seq
                            )));
                        }
                        if len as usize != want {
                            return Err(Error::Protocol(format!(
                                "data chunk {seq} is {len} bytes, expected {want}"
                            )));
                        }
                        region.read_at(usize::from(imm.slot) * slot as usize, &mut buf[..want])?;
                        Ok(Chunk::Data(want))
                    })?
                })?;
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
                    .send((buf, n))
                    .map_err(|_| Error::refused(Reason::Internal, "the writer thread ended"))?;
                budget.progress(n as u64);
                off += n as u64;
                seq = seq.wrapping_add(1);
            }
            Ok(())
        })();
        drop(full_tx);
        let (sink, failure) = writer
            .join()
            .map_err(|_| Error::refused(Reason::Internal, "the writer thread panicked"))?;
        match res {
            Ok(()) => Ok((sink, failure)),
            Err(e) => {
                drop(sink);
                Err(e)
            }
        }
    })
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
fn tell_peer(ep: &mut Endpoint, e: &Error) {
    let gone = matches!(
        e,
        Error::Connection(_) | Error::Completion { .. } | Error::InvalidState { .. }
    );
    let theirs = matches!(e, Error::Refused { message, .. } if message.starts_with(PEER_REPORTS));
    if !gone && !theirs {
        send_err(ep, reason_of(e), e);
    }
}

// The session's state, passed apart: the ring and its lease (memory), the budget (time).
#[allow(clippy::too_many_arguments)]
fn receive_file(
    ep: &mut Endpoint,
    opts: &ReceiverOptions,
    lease: &mut RingLease,
    report: &mut SessionReport,
    ring: &mut Option<StagingRing>,
    budget: &mut Budget,
    nonce: &Digest,
    h: Hello,
) -> Result<()> {
    let sink = match open_sink(opts, nonce, &h) {
        Ok(s) => s,
        Err(e) => {
            let reason = reason_of(&e);
            if let Err(spent) = budget.refused() {
                report.push(FileReport::failed(&h.name, h.size, reason, e.to_string()));
                return Err(spent);
            }
            send_msg(
                ep,
                &Msg::Refuse {
                    reason,
                    message: proto::truncate_text(&e.to_string()),
                },
            )?;
            report.push(FileReport::failed(&h.name, h.size, reason, e.to_string()));
            if reason == Reason::AuthFailed {
                return Err(e);
            }
            return Ok(());
        }
    };
    // The ring: one per connection, re-made only if the chunk size changes.
    // The ring must have at least as many slots as the sender may have messages in flight (the
    // credits this endpoint grants), or a credit would not imply a free slot (see module docs).
    let slot_count = opts.slots.max(ep.recv_depth()).clamp(1, proto::MAX_SLOTS);
    // A small file gets slots no bigger than itself (a power of two, at least MIN_SLOT): pinning
    // a 16 MiB ring to receive 1 KiB costs more than moving it. A ring with slots at least that
    // large is kept for the next file of the session.
    let slot_size = u64::from(h.chunk_size.min(MAX_CHUNK))
        .min(MAX_RING_BYTES / u64::from(slot_count))
        .min(h.size.max(MIN_SLOT).next_power_of_two())
        .max(1);
    // Within this session's share of the receiver's memory budget (smaller slots when short).
    let slot_size = lease.fit_slot(slot_count, slot_size) as u32;
    if ring
        .as_ref()
        .is_some_and(|r| r.slot_size < slot_size || r.slot_size > h.chunk_size)
    {
        if let Some(old) = ring.take() {
            if let Err(e) = old.region.revoke() {
                return Err(file_failed(ep, report, &h.name, h.size, e));
            }
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
        let region = match ExposedRegion::new(ep.pd(), len, RemoteAccess::Write) {
            Ok(region) => region,
            Err(e) => {
                // The sender waits for MR: tell it why there is none (e.g. the memlock limit).
                let e = Error::refused(
                    reason_of(&e),
                    format!("the receiver cannot register its staging ring of {len} bytes: {e}"),
                );
                return Err(file_failed(ep, report, &h.name, h.size, e));
            }
        };
        *ring = Some(StagingRing {
            region,
            slot_size,
            slot_count,
        });
    }
    let r = ring.as_mut().expect("made above");
    let desc = r.region.descriptor();
    let (held, held_hash) = sink.resume_state();
    send_msg(
        ep,
        &Msg::Mr(Ring {
            addr: desc.addr,
            rkey: desc.rkey,
            slot_size: r.slot_size,
            slot_count: r.slot_count,
            resume_offset: held,
            resume_hash: held_hash,
        }),
    )?;

    let size = h.size;
    let (sink, write_failure) = match receive_data(ep, r, budget, sink, held, size) {
        Ok(x) => x,
        Err(e) => return Err(file_failed(ep, report, &h.name, size, e)),
    };
    report.bytes += size - held;

    let fin = budget.wait(ep, recv_ctl);
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
        None => sink.commit(&hash),
    };
    let (status, message) = match &result {
        Ok(_) => (Reason::Ok, String::new()),
        Err(e) => (reason_of(e), proto::truncate_text(&e.to_string())),
    };
    send_msg(ep, &Msg::Ack { status, message })?;
    let ok = result.is_ok();
    report.push(match result {
        Ok(got) => FileReport::ok(&h.name, bytes, &got),
        Err(e) => FileReport::failed(&h.name, bytes, status, e.to_string()),
    });
    if ok {
        budget.progress(FILE_CREDIT);
        Ok(())
    } else {
        budget.refused()
    }
}

// ---- sender --------------------------------------------------------------------------------

struct SendRing {
    free: Vec<LocalBuf>,
    total: usize,
    slot_size: u32,
}

/// Sends `entries` (from [`source::walk`](super::source::walk)) on `ep`, one after another,
/// then DONE. Each file's verdict (the receiver's ACK) is recorded in `report`; refused or
/// failed files make the result an error at the end, but later files are still sent. A lost
/// connection, an ERR from the receiver or a failed authentication ends the session at once.
/// `progress` is called with the bytes written so far.
pub fn send(
    ep: &mut Endpoint,
    entries: &[SourceEntry],
    opts: &SenderOptions,
    report: &mut SessionReport,
    progress: &mut dyn FnMut(u64),
) -> Result<()> {
    opts.check()?;
    let nonce = match recv_ctl(ep)? {
        Msg::Challenge { nonce, .. } => nonce,
        Msg::Refuse { reason, message } | Msg::Err { reason, message } => {
            return Err(peer_err(reason, &message))
        }
        other => {
            return Err(Error::Protocol(format!(
                "expected CHALLENGE from the receiver, got {other:?} (is the peer `rdmaxfer recv`?)"
            )))
        }
    };
    let mut ring: Option<SendRing> = None;
    for e in entries {
        send_one(ep, e, opts, &nonce, &mut ring, report, progress)?;
    }
    // Every file has its verdict (ACK) now. The receiver ends the session when DONE arrives; if
    // the acknowledgement of DONE is lost on the wire, its disconnect can overtake it, so a
    // failure to see DONE acknowledged does not undo what was delivered.
    if let Err(e) = send_msg(ep, &Msg::Done).and_then(|()| ep.flush()) {
        tracing::debug!("DONE not acknowledged ({e}); every file already has its verdict");
    }
    report.result("delivered")
}

fn send_one(
    ep: &mut Endpoint,
    e: &SourceEntry,
    opts: &SenderOptions,
    nonce: &Digest,
    ring: &mut Option<SendRing>,
    report: &mut SessionReport,
    progress: &mut dyn FnMut(u64),
) -> Result<()> {
    let name = e.name.as_str();
    let mut src = match Source::open(&e.path) {
        Ok(s) => s,
        Err(err) => {
            report.push(FileReport::failed(
                name,
                0,
                reason_of(&err),
                err.to_string(),
            ));
            return Ok(());
        }
    };
    let size = src.size();
    let (mtime_sec, mtime_nsec) = src.mtime();
    let hello = Hello {
        version: proto::VERSION,
        name: name.to_string(),
        size,
        mode: src.mode(),
        mtime_sec,
        mtime_nsec,
        chunk_size: opts.chunk,
        flags: HelloFlags {
            resume: opts.resume,
            force: false,
            last: false,
        },
        auth: opts.token.as_ref().map(|t| proto::auth_answer(t, nonce)),
    };
    send_msg(ep, &Msg::Hello(hello))?;
    let mr = match recv_ctl(ep)? {
        Msg::Mr(r) => r,
        Msg::Refuse { reason, message } => {
            let err = peer_err(reason, &message);
            report.push(FileReport::failed(name, size, reason, err.to_string()));
            if matches!(reason, Reason::AuthFailed | Reason::Version) {
                return Err(err);
            }
            return Ok(());
        }
        Msg::Err { reason, message } => return Err(peer_err(reason, &message)),
        other => {
            return Err(Error::Protocol(format!(
                "expected MR or REFUSE, got {other:?}"
            )))
        }
    };
    if mr.slot_size == 0
        || mr.slot_size > opts.chunk
        || mr.slot_count == 0
        || mr.slot_count > proto::MAX_SLOTS
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
    if mr.resume_offset > 0 && !src.skip_verified(mr.resume_offset, &mr.resume_hash)? {
        let err = Error::refused(
            Reason::ReadError,
            format!(
                "{name}: the receiver's partial file ({} bytes) differs from this one; remove it there or send without --resume",
                mr.resume_offset
            ),
        );
        send_err(ep, Reason::ReadError, &err);
        report.push(FileReport::failed(
            name,
            size,
            Reason::ReadError,
            err.to_string(),
        ));
        return Err(err);
    }

    // Registered send buffers, re-made only if the slot size changes.
    let depth = opts.slots.min(mr.slot_count).max(1) as usize;
    if ring
        .as_ref()
        .is_none_or(|r| r.slot_size != mr.slot_size || r.total != depth)
    {
        *ring = None;
        let free = LocalBuf::slots(ep.pd(), mr.slot_size as usize, depth)?;
        *ring = Some(SendRing {
            free,
            total: depth,
            slot_size: mr.slot_size,
        });
    }
    let r = ring.as_mut().expect("made above");
    let sent_before = report.bytes;
    let data_start = Instant::now();
    let hash = match send_data(
        ep,
        r,
        src,
        &remote,
        mr.slot_count,
        opts.corrupt_chunk,
        &mut |n| progress(sent_before + n),
    ) {
        Ok((hash, n)) => {
            report.bytes += n;
            hash
        }
        Err((err, n)) => {
            report.bytes += n;
            if err.reason() == Some(Reason::ReadError) {
                send_err(ep, Reason::ReadError, &err);
            }
            report.push(FileReport::failed(
                name,
                size,
                reason_of(&err),
                err.to_string(),
            ));
            return Err(err);
        }
    };
    send_msg(ep, &Msg::Fin { bytes: size, hash })?;
    let verdict = recv_ctl(ep)?;
    report.data_seconds += data_start.elapsed().as_secs_f64();
    match verdict {
        Msg::Ack {
            status: Reason::Ok, ..
        } => report.push(FileReport::ok(name, size, &hash)),
        Msg::Ack { status, message } => report.push(FileReport::failed(
            name,
            size,
            status,
            format!("the receiver reports: {}", names::printable(&message)),
        )),
        Msg::Err { reason, message } => return Err(peer_err(reason, &message)),
        other => return Err(Error::Protocol(format!("expected ACK, got {other:?}"))),
    }
    Ok(())
}

/// Sends the rest of `src` (from its current offset): a reader thread reads and hashes chunks
/// into the registered buffers while this thread posts them and takes completed ones back, so
/// disk, hash and network overlap. Returns the whole file's hash and the bytes written (also
/// with an error).
fn send_data(
    ep: &mut Endpoint,
    r: &mut SendRing,
    src: Source,
    remote: &RemoteRegion,
    slot_count: u32,
    corrupt_chunk: Option<u64>,
    progress: &mut dyn FnMut(u64),
) -> std::result::Result<(Digest, u64), (Error, u64)> {
    let size = src.size();
    let slot = u64::from(r.slot_size);
    let chunks = (size - src.offset()).div_ceil(slot);
    let mut written = 0u64;
    std::thread::scope(|sc| {
        let (empty_tx, empty_rx) = std::sync::mpsc::channel::<LocalBuf>();
        let (full_tx, full_rx) = std::sync::mpsc::channel::<Result<(LocalBuf, usize)>>();
        let reader = sc.spawn(move || {
            let mut src = src;
            let mut k = 0u64;
            while src.offset() < size {
                let Ok(mut buf) = empty_rx.recv() else { break };
                let want = (size - src.offset()).min(slot) as usize;
                let r = src.read_chunk(&mut buf[..want]).map(|n| {
                    if corrupt_chunk == Some(k) && n > 0 {
                        buf[0] ^= 0xff;
                    }
                    (buf, n)
                });
                let failed = r.is_err();
                if full_tx.send(r).is_err() || failed {
                    break;
                }
                k += 1;
            }
            src
        });
        let mut at_reader = 0usize;
        for b in r.free.drain(..) {
            if empty_tx.send(b).is_ok() {
                at_reader += 1;
            }
        }
        let mut in_flight = 0usize;
        let res: Result<()> = (|| {
            let mut k = 0u64;
            while k < chunks {
                if at_reader == 0 {
                    collect(ep, r, &mut in_flight)?;
                    for b in r.free.drain(..) {
                        if empty_tx.send(b).is_ok() {
                            at_reader += 1;
                        }
                    }
                    continue;
                }
                let (buf, n) = full_rx
                    .recv()
                    .map_err(|_| Error::refused(Reason::Internal, "the reader thread ended"))??;
                at_reader -= 1;
                let slot_idx = (k % u64::from(slot_count)) as u16;
                let imm = proto::encode_imm(proto::Imm {
                    slot: slot_idx,
                    seq: k as u16,
                });
                let target = remote.slice(u64::from(slot_idx) * slot, n as u64)?;
                let wr = SendRequest::new(
                    k,
                    SendOp::WriteWithImm(target, imm),
                    [Sge::range(buf, 0, n)],
                );
                if let Err(pe) = ep.post(wr) {
                    r.free
                        .extend(pe.bufs.into_iter().filter_map(Buf::into_local));
                    return Err(pe.error);
                }
                in_flight += 1;
                k += 1;
                written += n as u64;
                progress(written);
            }
            while in_flight > 0 {
                collect(ep, r, &mut in_flight)?;
            }
            Ok(())
        })();
        drop(empty_tx);
        let src = reader.join();
        // Buffers the reader still held are dropped with the channel: make the ring whole again.
        r.free
            .extend(full_rx.try_iter().filter_map(|x| x.ok().map(|(b, _)| b)));
        if r.free.len() + in_flight < r.total {
            // Some buffers were lost (reader error path): re-made on the next file.
            r.total = usize::MAX;
        }
        let src = src.map_err(|_| {
            (
                Error::refused(Reason::Internal, "the reader thread panicked"),
                written,
            )
        })?;
        res.map_err(|e| (e, written))?;
        src.finish().map(|h| (h, written)).map_err(|e| (e, written))
    })
}

/// Waits for at least one data-chunk completion and takes its buffers back.
fn collect(ep: &mut Endpoint, r: &mut SendRing, in_flight: &mut usize) -> Result<()> {
    let timeout = ep.timeout();
    for c in ep.poll_user(r.total, timeout)? {
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
        *in_flight = in_flight.saturating_sub(1 + c.retired.len());
        r.free.extend(c.into_all_local_bufs());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_bounded_and_count_what_they_do_not_list() {
        let mut r = SessionReport::default();
        let long = "é".repeat(3000);
        let n = MAX_REPORTED_FILES as u64 + 500;
        for i in 0..n {
            if i % 2 == 0 {
                r.push(FileReport::failed(&long, 1, Reason::BadName, long.clone()));
            } else {
                r.push(FileReport::ok(&long, 1, &[0; 32]));
            }
        }
        assert_eq!(r.files.len(), MAX_REPORTED_FILES);
        assert_eq!(
            (r.elided, r.file_count(), r.failures()),
            (500, n, n.div_ceil(2))
        );
        for f in &r.files {
            assert!(f.name.len() <= MAX_REPORT_TEXT && f.name.ends_with('…'));
            assert!(f
                .message
                .as_ref()
                .is_none_or(|m| m.len() <= MAX_REPORT_TEXT));
        }
        let e = r.result("received").unwrap_err().to_string();
        assert!(
            e.contains(&format!("{} of {n} files", n.div_ceil(2))),
            "{e}"
        );
        assert_eq!(clip("short"), "short");
    }
}
