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
//! messages are therefore not sent in versions 1 and 2.)
//!
//! Memory is bounded by the ring on both sides: `slots × slot size` registered bytes (plus one
//! slot-sized copy buffer on the receiver), whatever the file size.

use std::path::PathBuf;

use serde::Serialize;

use super::budget::Budgets;
use super::digest::{Algo, Layout};
use super::names;
use super::proto::{self, Digest, EntryKind, Msg, Reason};
use crate::error::{Error, Result};
use crate::xfer::endpoint::{Endpoint, EndpointOptions};

mod fault;
mod joint;
mod receive;
mod send;
mod streams;
mod stripe;

pub use joint::{StreamRegistry, DEFAULT_MAX_STREAMS};
pub use receive::{receive, receive_leased, receive_streams, Role};
pub use send::send;
pub use streams::{
    default_streams, send_streams, DEFAULT_STREAMS_CAP, DEFAULT_STREAMS_PER_DEVICE, PHASE_TARGET,
    STRIPE_MIN,
};

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
    /// Allow senders to replace existing entries that differ (`send --force`, `--update`);
    /// without it such a request is refused, naming `recv --force`.
    pub force: bool,
    /// Keep partial files on failure and continue them when a sender asks to resume.
    pub resume: bool,
    /// Ring slots (= receives posted for the sender).
    pub slots: u32,
    /// Per-session limits (idle time, rate floor, refusals).
    pub budgets: Budgets,
    /// The only chunk verification accepted (`recv --verify`); `None` accepts any.
    pub verify: Option<Algo>,
    /// Test-only hold: the stripe of this index (of every striped file) is answered (MR) only
    /// once every other stripe of its file has ended (the sender's stream waits for it).
    pub hold_stripe: Option<u16>,
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
            verify: None,
            hold_stripe: None,
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
    /// Ask the receiver to replace entries that differ (it must allow it: `recv --force`).
    pub force: bool,
    /// Skip every entry that exists on the receiver, identical or not.
    pub ignore_existing: bool,
    /// Skip entries newer on the receiver, replace older ones (the receiver must allow it).
    pub update: bool,
    /// Compare existing files by BLAKE3 (hashed on both sides) instead of size and mtime.
    pub checksum: bool,
    /// How chunks are verified (`send --verify`; the receiver may refuse it).
    pub verify: Algo,
    /// Test-only fault: flip a byte of this chunk (0-based, per file) after hashing it.
    pub corrupt_chunk: Option<u64>,
    /// Test-only fault: after posting this chunk (0-based, per file), post a zero-length RDMA
    /// WRITE_WITH_IMM repeating its immediate, as a faulty transport's retransmission may
    /// deliver (the receiver must name it and commit nothing).
    pub replay_chunk: Option<u64>,
    /// Test-only hold: the stripe of this index (of every striped file) sends its data only
    /// once every other stripe of its file has its verdict (its stream waits, MR in hand).
    pub hold_stripe: Option<u16>,
    /// Streams (connections) to ask the receiver for ([`send_streams`]); 1: one connection.
    pub streams: u16,
}

impl Default for SenderOptions {
    fn default() -> Self {
        SenderOptions {
            token: None,
            chunk: DEFAULT_CHUNK,
            slots: DEFAULT_SLOTS,
            resume: false,
            force: false,
            ignore_existing: false,
            update: false,
            checksum: false,
            verify: Algo::DEFAULT,
            corrupt_chunk: None,
            replay_chunk: None,
            hold_stripe: None,
            streams: 1,
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

/// What [`send`] and [`receive_leased`] report as a session goes on (to draw progress).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum Progress<'a> {
    /// Sender: a file is about to be announced (its size as opened).
    FileStart {
        /// Relative name, as sent.
        name: &'a str,
        /// Size in bytes.
        size: u64,
    },
    /// Sender: data written, of a file (from where it resumes) and in the session. Over several
    /// streams several files may be in flight at once: `name` says which.
    Bytes {
        /// Relative name of the file, as in its [`Progress::FileStart`].
        name: &'a str,
        /// Bytes of that file written so far (over every stream).
        file_done: u64,
        /// Bytes written in the session so far.
        total_done: u64,
    },
    /// A file's verdict (delivered, refused or failed), as recorded in the [`SessionReport`].
    FileDone(&'a FileReport),
    /// Sender: the receiver granted this many streams of those asked for (fewer: its cap).
    Streams {
        /// Streams asked for (`--streams`).
        asked: u16,
        /// Streams granted.
        granted: u16,
    },
}

/// What happened to one entry (a file, a directory or a symlink).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FileReport {
    /// Relative name (as sent, control characters escaped by `names::printable`; for hostile
    /// names, shortened).
    pub name: String,
    /// `"file"`, `"dir"`, `"symlink"`, or `"other"` (a special file the sender skipped).
    pub kind: &'static str,
    /// File size.
    pub bytes: u64,
    /// The verified file's digest (hex; see "Verification" in `docs/file-protocol.md`), when
    /// verified.
    pub hash: Option<String>,
    /// How it was verified: the chunk hash and the chunk size, e.g. `"xxh3/1048576"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify: Option<String>,
    /// `"ok"`, `"skipped"` (nothing to do: identical, or as the options say) or the reason
    /// (e.g. `"hash mismatch"`).
    pub result: String,
    /// Details of a skip or a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The `result` of a skipped entry.
pub const SKIPPED: &str = "skipped";

impl FileReport {
    fn ok(name: &str, bytes: u64, hash: &Digest, layout: &Layout) -> FileReport {
        FileReport {
            name: clip(&names::printable(name)),
            kind: EntryKind::File.as_str(),
            bytes,
            hash: Some(blake3::Hash::from(*hash).to_hex().to_string()),
            verify: Some(format!("{}/{}", layout.algo, layout.chunk)),
            result: "ok".into(),
            message: None,
        }
    }

    /// A directory or symlink made on the receiver.
    fn made(name: &str, kind: EntryKind) -> FileReport {
        FileReport {
            name: clip(&names::printable(name)),
            kind: kind.as_str(),
            bytes: 0,
            hash: None,
            verify: None,
            result: "ok".into(),
            message: None,
        }
    }

    fn skipped(name: &str, kind: &'static str, bytes: u64, why: &str) -> FileReport {
        FileReport {
            name: clip(&names::printable(name)),
            kind,
            bytes,
            hash: None,
            verify: None,
            result: SKIPPED.into(),
            message: Some(clip(&names::printable(why))),
        }
    }

    fn failed(name: &str, bytes: u64, reason: Reason, message: String) -> FileReport {
        FileReport {
            name: clip(&names::printable(name)),
            kind: EntryKind::File.as_str(),
            bytes,
            hash: None,
            verify: None,
            result: reason.as_str().to_string(),
            // The reason is `result`: the message says the rest, without naming it again.
            message: Some(clip(&names::printable(reason.strip_label(&message)))),
        }
    }

    fn of_kind(mut self, kind: EntryKind) -> FileReport {
        self.kind = kind.as_str();
        self
    }

    /// True when the entry was delivered (a file verified and committed).
    pub fn is_ok(&self) -> bool {
        self.result == "ok"
    }

    /// True when nothing had to be done (identical, or skipped as the options say).
    pub fn is_skipped(&self) -> bool {
        self.result == SKIPPED
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
    /// Entries that failed or were refused, listed or not.
    pub failed: u64,
    /// Entries skipped (identical on the receiver, skipped as the options say, or special
    /// files the sender does not send), listed or not.
    pub skipped: u64,
    /// Entries the receiver refused before any data (a subset of `failed`).
    pub refused: u64,
    /// Bytes moved by RDMA WRITE in this session.
    pub bytes: u64,
    /// Sender: seconds from each file's first data chunk to the receiver's verdict on it
    /// (ACK), summed: the data phase, without connection set-up and per-file handshakes.
    pub data_seconds: f64,
    /// The file recorded last (listed or not), for [`Progress::FileDone`].
    #[serde(skip)]
    last: Option<FileReport>,
}

impl SessionReport {
    /// Records a file: listed while there is room, else only counted.
    pub fn push(&mut self, f: FileReport) {
        if f.is_skipped() {
            self.skipped += 1;
        } else if !f.is_ok() {
            self.failed += 1;
        }
        if self.files.len() < MAX_REPORTED_FILES {
            self.files.push(f.clone());
        } else {
            self.elided += 1;
        }
        self.last = Some(f);
    }

    /// Tells `progress` the verdict of the file recorded last if files were recorded since the
    /// count was `before` (one file's step records at most one).
    fn announce_since(&self, before: u64, progress: &mut dyn FnMut(Progress<'_>)) {
        if self.file_count() > before {
            if let Some(last) = &self.last {
                progress(Progress::FileDone(last));
            }
        }
    }

    /// Adds what another stream of the same session recorded (its files after these).
    pub fn merge(&mut self, o: SessionReport) {
        for f in o.files {
            if self.files.len() < MAX_REPORTED_FILES {
                self.files.push(f);
            } else {
                self.elided += 1;
            }
        }
        self.elided += o.elided;
        self.failed += o.failed;
        self.skipped += o.skipped;
        self.refused += o.refused;
        self.bytes += o.bytes;
        self.data_seconds += o.data_seconds;
        if o.last.is_some() {
            self.last = o.last;
        }
    }

    /// Records an entry the receiver refused (counted as failed and as refused).
    pub fn push_refused(&mut self, f: FileReport) {
        self.refused += 1;
        self.push(f);
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
    fn result(&self, what: &'static str) -> Result<()> {
        match self.failures() {
            0 => Ok(()),
            failed => Err(Error::Incomplete {
                failed,
                total: self.file_count(),
                what,
            }),
        }
    }
}

fn reason_of(e: &Error) -> Reason {
    e.reason().unwrap_or(match e {
        Error::Protocol(_) => Reason::Protocol,
        _ => Reason::Internal,
    })
}

/// The text of an error without its reason (REFUSE and reports carry the reason apart): one
/// clause per cause.
fn detail(e: &Error) -> String {
    match e {
        Error::Refused { message, .. } => message.clone(),
        e => e.to_string(),
    }
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
                "the peer speaks file protocol version {}, this build speaks version {}: run the same rdmaxfer release on both sides",
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
    // The reason travels as a code: a label at the front of the text would name it twice.
    let message = names::printable(reason.strip_label(message));
    Error::refused(reason, format!("{PEER_REPORTS}{message}"))
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
                r.push(FileReport::ok(
                    &long,
                    1,
                    &[0; 32],
                    &Layout::new(Algo::Xxh3, 4096, 1).unwrap(),
                ));
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
