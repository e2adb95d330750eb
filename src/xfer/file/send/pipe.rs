//! Entries in flight on one stream: directories, symlinks and small files (inline, at most
//! [`proto::INLINE_MAX`] bytes and one chunk) are announced without waiting for each answer.
//! Up to a window of them have their answer outstanding: at most [`proto::MAX_IN_FLIGHT`], and
//! fewer than the receives this endpoint keeps posted, so the receiver's answers never wait for
//! a credit while this side sends. Answers come in the order of what asked for them; a WANT is
//! answered at once with the file's DATA, whose verdict (ACK) then joins the queue. Verdicts
//! are recorded (and told to `progress`) in the order of the entries, whatever order they come
//! in. A file through the staging ring, a stripe and DONE come after [`Pipe::drain`]. In a dry
//! run (`send --dry-run`) every entry, whatever its size, goes through the pipe and gets only
//! its answer (what the receiver would do).

use std::collections::{BTreeMap, VecDeque};

use super::core::{Answer, Asked, Verdict};
use super::file::StreamState;
use super::small::SmallReader;
use super::source::{self, read_err, Listed, SourceEntry, SourceKind};
use crate::error::{Error, Result};
use crate::xfer::file::waits::{moved, wait_on};
use crate::xfer::file::ctl::{awaiting, peer_err, recv_ctl};
use crate::xfer::file::digest::{self, Layout};
use crate::xfer::file::link::Link;
use crate::xfer::file::names;
use crate::xfer::file::proto::{self, Data, Digest, EntryKind, Hello, Msg, Reason};
use crate::xfer::file::report::{FileReport, Progress, SessionReport};

/// A stream's entries whose answer has not come yet.
pub(super) struct Pipe {
    /// What each outstanding answer is for, with its entry's number.
    waiting: VecDeque<(u64, Awaited)>,
    /// Inline files answered WANT whose DATA is not sent yet, in the order of the WANTs.
    wanted: VecDeque<(u64, Small)>,
    window: usize,
    /// The next entry's number.
    next: u64,
    /// The number of the first entry not yet recorded.
    first_unrecorded: u64,
    /// Verdicts of entries after it, held until it is recorded: `(report, refused)`.
    held: BTreeMap<u64, (FileReport, bool)>,
    /// HELLOs and DATA not sent yet: they go out together, in one BATCH, when the next does
    /// not fit or before this side waits.
    out: proto::Batch,
    /// Answers read in a BATCH and not taken yet.
    incoming: VecDeque<Msg>,
    /// Reads the wanted inline files.
    reader: SmallReader,
    /// The memory of the last inline file read, kept for the next.
    data: Vec<u8>,
}

/// What an outstanding answer is for.
enum Awaited {
    /// A directory's or symlink's HELLO: ACK, SKIP or REFUSE.
    Entry { name: String, kind: EntryKind },
    /// An inline file's HELLO: WANT, SKIP or REFUSE.
    Hello(Box<Small>),
    /// Any entry's HELLO in a dry run: SKIP (what the receiver would do) or REFUSE.
    Plan {
        name: String,
        kind: EntryKind,
        size: u64,
    },
    /// An inline file's DATA: its verdict (ACK). `local`: this side gave up on it (DATA said
    /// so), and whether the file was gone; the receiver's ACK confirms nothing was committed.
    Verdict {
        name: String,
        size: u64,
        hash: Digest,
        layout: Layout,
        local: Option<(Error, bool)>,
    },
}

/// An inline file announced: opened and read only when the receiver wants it (a re-run of
/// an unchanged tree opens nothing).
struct Small {
    name: String,
    path: std::path::PathBuf,
    size: u64,
}

/// Whether a file of `size` bytes goes inline with `opts`' chunk size.
fn inline(size: u64, chunk: u32) -> bool {
    size <= proto::INLINE_MAX && size <= u64::from(chunk)
}

/// A HELLO of `name` (`kind`, its mode and mtime from `meta`), size 0 and no target.
fn hello<B>(st: &StreamState<'_, B>, name: &str, kind: EntryKind, meta: &Listed) -> Hello {
    let opts = st.opts;
    Hello {
        version: proto::VERSION,
        kind,
        name: name.to_string(),
        target: String::new(),
        size: 0,
        mode: meta.mode,
        mtime_sec: meta.mtime_sec,
        mtime_nsec: meta.mtime_nsec,
        chunk_size: opts.chunk,
        verify: opts.verify,
        flags: opts.hello_flags(),
        checksum: None,
        auth: opts
            .token
            .as_ref()
            .map(|t| proto::auth_answer(t, &st.nonce)),
    }
}

impl Pipe {
    /// An empty pipe for the stream on `ep`.
    pub(super) fn new<L: Link>(ep: &L) -> Pipe {
        let posted = ep.recv_depth() as usize;
        Pipe {
            waiting: VecDeque::new(),
            wanted: VecDeque::new(),
            window: posted.saturating_sub(1).clamp(1, proto::MAX_IN_FLIGHT),
            next: 0,
            first_unrecorded: 0,
            held: BTreeMap::new(),
            out: proto::Batch::with_limit(ep.max_msg_size()),
            incoming: VecDeque::new(),
            reader: SmallReader::default(),
            data: Vec::new(),
        }
    }

    /// Whether nothing is in flight or held.
    fn is_empty(&self) -> bool {
        self.first_unrecorded == self.next
    }

    /// Whether entries are in flight or held (their verdicts not recorded yet).
    pub(super) fn in_flight(&self) -> bool {
        !self.is_empty()
    }

    /// Entries that went through the pipe so far (the next entry's number).
    pub(super) fn count(&self) -> u64 {
        self.next
    }

    /// The stream is lost: records the verdicts that came (out of their turn) and returns the
    /// numbers of the entries still without one, to be sent again by another stream.
    pub(super) fn abandon(&mut self, report: &mut SessionReport) -> Vec<u64> {
        let mut unanswered = Vec::new();
        for seq in self.first_unrecorded..self.next {
            match self.held.remove(&seq) {
                Some((f, true)) => report.push_refused(f),
                Some((f, false)) => report.push(f),
                None => unanswered.push(seq),
            }
        }
        self.waiting.clear();
        self.wanted.clear();
        self.incoming.clear();
        drop(self.out.take());
        self.first_unrecorded = self.next;
        unanswered
    }

    /// Records entry `seq`'s verdict `f` once every earlier entry's is, telling `progress`.
    fn record<P: FnMut(Progress<'_>) + ?Sized>(
        &mut self,
        seq: u64,
        f: FileReport,
        refused: bool,
        report: &mut SessionReport,
        progress: &mut P,
    ) {
        self.held.insert(seq, (f, refused));
        while let Some((f, refused)) = self.held.remove(&self.first_unrecorded) {
            progress(Progress::FileDone(&f));
            if refused {
                report.push_refused(f);
            } else {
                report.push(f);
            }
            self.first_unrecorded += 1;
        }
    }

    /// Announces `e` if it travels through the pipe (a directory, a symlink, a small file; an
    /// entry not sent while others are in flight) and returns `true`; `false` for a file that
    /// goes through the staging ring (after [`drain`](Self::drain)) or an entry not sent. A
    /// failure to read `e` is recorded in `report`.
    pub(super) async fn offer<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
        &mut self,
        ep: &mut L,
        st: &StreamState<'_, L::Buf>,
        e: &SourceEntry,
        report: &mut SessionReport,
        progress: &mut P,
    ) -> Result<bool> {
        let name = e.name.as_str();
        let (kind, target) = match &e.kind {
            SourceKind::Dir => (EntryKind::Dir, String::new()),
            SourceKind::Symlink(t) => (EntryKind::Symlink, t.clone()),
            SourceKind::File => return self.offer_file(ep, st, e, report, progress).await,
            // Not sent: recorded at once, or in its turn after those in flight.
            _ if self.is_empty() => return Ok(false),
            SourceKind::Skipped(why) => {
                let f = FileReport::skipped(name, "other", 0, why);
                self.record_next(f, report, progress);
                return Ok(true);
            }
            SourceKind::Unsendable { shown, why } => {
                let f = FileReport::failed(shown, 0, Reason::BadName, why.clone());
                self.record_next(f, report, progress);
                return Ok(true);
            }
        };
        let meta = match std::fs::symlink_metadata(&e.path) {
            Ok(m) => m,
            Err(err) => {
                let gone = err.kind() == std::io::ErrorKind::NotFound;
                let err = read_err(&e.path, err).to_string();
                let f = if gone {
                    FileReport::vanished(name, &err)
                } else {
                    FileReport::failed(name, 0, Reason::ReadError, err)
                };
                let f = f.of_kind(kind);
                self.record_next(f, report, progress);
                return Ok(true);
            }
        };
        let mut h = hello(st, name, kind, &Listed::of(&meta));
        h.target = target;
        let awaited = match st.opts.dry_run {
            true => Awaited::Plan {
                name: name.to_string(),
                kind,
                size: 0,
            },
            false => Awaited::Entry {
                name: name.to_string(),
                kind,
            },
        };
        self.announce(ep, st, h, awaited, report, progress).await?;
        Ok(true)
    }

    /// Records the verdict of an entry that sends nothing, in its turn.
    fn record_next<P: FnMut(Progress<'_>) + ?Sized>(
        &mut self,
        f: FileReport,
        report: &mut SessionReport,
        progress: &mut P,
    ) {
        let seq = self.next;
        self.next += 1;
        self.record(seq, f, false, report, progress);
    }

    /// A regular file: announced inline if small, else `false`.
    async fn offer_file<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
        &mut self,
        ep: &mut L,
        st: &StreamState<'_, L::Buf>,
        e: &SourceEntry,
        report: &mut SessionReport,
        progress: &mut P,
    ) -> Result<bool> {
        let meta = match e.listed {
            Some(m) if inline(m.size, st.opts.chunk) || st.opts.dry_run => m,
            // Not there when listed, in a dry run: reported as the ring's path would.
            None if st.opts.dry_run => match std::fs::metadata(&e.path) {
                Ok(m) => Listed::of(&m),
                Err(err) => {
                    let gone = err.kind() == std::io::ErrorKind::NotFound;
                    let err = read_err(&e.path, err).to_string();
                    let f = match gone {
                        true => FileReport::vanished(e.name.as_str(), &err),
                        false => FileReport::failed(e.name.as_str(), 0, Reason::ReadError, err),
                    };
                    self.record_next(f, report, progress);
                    return Ok(true);
                }
            },
            // Large, or not there when listed: the ring's path opens it and reports what fails.
            _ => return Ok(false),
        };
        let name = e.name.as_str();
        let size = meta.size;
        let mut h = hello(st, name, EntryKind::File, &meta);
        h.size = size;
        h.flags.inline = !st.opts.dry_run;
        if st.opts.checksum {
            h.checksum = match source::hash_file(&e.path) {
                Ok(c) => Some(c),
                Err(err) => {
                    let f = FileReport::failed(name, size, Reason::ReadError, err.to_string());
                    self.record_next(f, report, progress);
                    return Ok(true);
                }
            };
        }
        progress(Progress::FileStart { name, size });
        let awaited = match st.opts.dry_run {
            true => Awaited::Plan {
                name: name.to_string(),
                kind: EntryKind::File,
                size,
            },
            false => Awaited::Hello(Box::new(Small {
                name: name.to_string(),
                path: e.path.clone(),
                size,
            })),
        };
        self.announce(ep, st, h, awaited, report, progress).await?;
        Ok(true)
    }

    /// Sends `h` once the window has room (taking answers meanwhile).
    async fn announce<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
        &mut self,
        ep: &mut L,
        st: &StreamState<'_, L::Buf>,
        h: Hello,
        awaited: Awaited,
        report: &mut SessionReport,
        progress: &mut P,
    ) -> Result<()> {
        loop {
            self.send_wanted(ep, st, report, progress).await?;
            if self.waiting.len() < self.window {
                break;
            }
            // The answers already here are taken before what is gathered goes out: a SEND then
            // carries the entries of many answers, not one entry per answer taken.
            if !self.answer_ready(ep).await? {
                self.flush(ep, st, report, progress).await?;
            }
            self.take_one(ep, st, report, progress).await?;
        }
        self.queue(ep, st, &Msg::Hello(h), report, progress).await?;
        self.waiting.push_back((self.next, awaited));
        self.next += 1;
        Ok(())
    }

    /// Whether an answer can be taken without waiting.
    async fn answer_ready<L: Link>(&self, ep: &mut L) -> Result<bool> {
        Ok(!self.incoming.is_empty() || (!self.waiting.is_empty() && ep.has_message()?))
    }

    /// Takes every outstanding answer (sending the DATA of the files wanted meanwhile).
    pub(super) async fn drain<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
        &mut self,
        ep: &mut L,
        st: &StreamState<'_, L::Buf>,
        report: &mut SessionReport,
        progress: &mut P,
    ) -> Result<()> {
        loop {
            self.send_wanted(ep, st, report, progress).await?;
            if self.answer_ready(ep).await? {
                self.take_one(ep, st, report, progress).await?;
                continue;
            }
            self.flush(ep, st, report, progress).await?;
            // Answers taken while sending may have asked for more DATA.
            if !self.wanted.is_empty() {
                continue;
            }
            if self.waiting.is_empty() {
                break;
            }
            self.take_one(ep, st, report, progress).await?;
        }
        debug_assert!(self.held.is_empty() && self.out.is_empty());
        Ok(())
    }

    /// Sends `msg` once a credit is free, taking the answers that arrive meanwhile: never
    /// waiting for a credit with answers unread, as the receiver may be waiting for a credit
    /// of ours to send more (the credits of the answers read go back with `msg` or a credit
    /// message; see `endpoint::credit_flow`).
    async fn send_taking<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
        &mut self,
        ep: &mut L,
        st: &StreamState<'_, L::Buf>,
        bytes: &[u8],
        report: &mut SessionReport,
        progress: &mut P,
    ) -> Result<()> {
        while !wait_on!(ep, st.session, ep.wait_send_or_message().await)? {
            // An answer is there: taking it does not wait.
            self.take_one(ep, st, report, progress).await?;
        }
        // A credit and a send buffer are free: this does not wait.
        wait_on!(ep, st.session, ep.send(bytes).await)
    }

    /// Adds `msg` to the batch going out, first sending what is gathered if `msg` does not
    /// fit with it.
    async fn queue<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
        &mut self,
        ep: &mut L,
        st: &StreamState<'_, L::Buf>,
        msg: &Msg,
        report: &mut SessionReport,
        progress: &mut P,
    ) -> Result<()> {
        self.queue_with(ep, st, report, progress, |b| proto::encode_into(b, msg)).await
    }

    /// Adds the message `encode` appends to the batch going out (as [`queue`](Self::queue)).
    async fn queue_with<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
        &mut self,
        ep: &mut L,
        st: &StreamState<'_, L::Buf>,
        report: &mut SessionReport,
        progress: &mut P,
        encode: impl Fn(&mut Vec<u8>),
    ) -> Result<()> {
        // A flush empties the batch, and a first message always fits: this sends at most once.
        while !self.out.push_with(&encode) {
            self.flush(ep, st, report, progress).await?;
        }
        Ok(())
    }

    /// Sends what is gathered (one message, or a BATCH), if anything: before this side waits
    /// for an answer.
    async fn flush<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
        &mut self,
        ep: &mut L,
        st: &StreamState<'_, L::Buf>,
        report: &mut SessionReport,
        progress: &mut P,
    ) -> Result<()> {
        match self.out.take() {
            Some(bytes) => {
                let sent = self.send_taking(ep, st, &bytes, report, progress).await;
                self.out.recycle(bytes);
                sent
            }
            None => Ok(()),
        }
    }

    /// Sends the DATA of every file wanted (and of those wanted meanwhile).
    async fn send_wanted<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
        &mut self,
        ep: &mut L,
        st: &StreamState<'_, L::Buf>,
        report: &mut SessionReport,
        progress: &mut P,
    ) -> Result<()> {
        while let Some((seq, small)) = self.wanted.pop_front() {
            self.send_small(ep, st, seq, small, report, progress).await?;
        }
        Ok(())
    }

    /// Takes the next answer and records what it says (a WANT: the file's DATA is to go out,
    /// by [`send_wanted`](Self::send_wanted)).
    async fn take_one<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
        &mut self,
        ep: &mut L,
        st: &StreamState<'_, L::Buf>,
        report: &mut SessionReport,
        progress: &mut P,
    ) -> Result<()> {
        let msg = match self.incoming.pop_front() {
            Some(m) => m,
            None => {
                let got = wait_on!(ep, st.session, recv_ctl(ep).await);
                match awaiting("the receiver's answers", got)? {
                    Msg::Batch(members) => {
                        self.incoming.extend(members);
                        self.incoming.pop_front().expect("a BATCH has members")
                    }
                    m => m,
                }
            }
        };
        moved(st.session, 1);
        if let Msg::Err { reason, message } = &msg {
            return Err(peer_err(*reason, message));
        }
        let Some((seq, awaited)) = self.waiting.pop_front() else {
            return Err(Error::Protocol(format!(
                "the receiver sent {} while nothing was asked",
                proto_name(&msg)
            )));
        };
        let (f, refused, fatal) = match awaited {
            Awaited::Entry { name, kind } => match Answer::of(msg, Asked::Entry)? {
                Answer::Made => (FileReport::made(&name, kind), false, None),
                other => refused_or_skipped(other, &name, kind, 0)?,
            },
            Awaited::Hello(small) => match Answer::of(msg, Asked::Inline)? {
                Answer::Want => {
                    self.wanted.push_back((seq, *small));
                    return Ok(());
                }
                other => refused_or_skipped(other, &small.name, EntryKind::File, small.size)?,
            },
            Awaited::Plan { name, kind, size } => match Answer::of(msg, Asked::DryRun)? {
                Answer::Would { replace } => {
                    (FileReport::would(&name, kind, size, replace), false, None)
                }
                other => refused_or_skipped(other, &name, kind, size)?,
            },
            Awaited::Verdict {
                name,
                size,
                hash,
                layout,
                local,
            } => {
                let f = match (Verdict::of(msg)?, local) {
                    (_, Some((err, true))) => FileReport::vanished(&name, &err.to_string()),
                    (_, Some((err, false))) => {
                        FileReport::failed(&name, size, Reason::ReadError, err.to_string())
                    }
                    (Verdict::Delivered, None) => FileReport::ok(&name, size, &hash, &layout),
                    (Verdict::Failed { status, message }, None) => FileReport::failed(
                        &name,
                        size,
                        status,
                        format!("the receiver reports: {}", names::printable(&message)),
                    ),
                };
                (f, false, None)
            }
        };
        self.record(seq, f, refused, report, progress);
        fatal.map_or(Ok(()), Err)
    }

    /// Reads a wanted inline file and sends it in DATA pieces (or gives it up, if it cannot be
    /// read as announced); its verdict joins the queue.
    async fn send_small<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
        &mut self,
        ep: &mut L,
        st: &StreamState<'_, L::Buf>,
        seq: u64,
        small: Small,
        report: &mut SessionReport,
        progress: &mut P,
    ) -> Result<()> {
        let opts = st.opts;
        let Small { name, path, size } = small;
        let mut data = std::mem::take(&mut self.data);
        let read = self
            .reader
            .read(&path, size, &mut data)
            .map_err(|e| read_err(&path, e))
            .and_then(|n| {
                if n as u64 == size {
                    Ok(())
                } else {
                    Err(read_err(
                        &path,
                        format_args!("size changed from {size} to {n} while being sent"),
                    ))
                }
            });
        let chunk = u64::from(opts.chunk);
        let digested = read.and_then(|()| {
            let layout = Layout::new(opts.verify, chunk, size)?;
            Ok((layout, digest::digest_of(opts.verify, chunk, &data)?))
        });
        let (layout, hash) = match digested {
            Ok(x) => x,
            Err(err) => {
                let gone = source::vanished(&path);
                let abandon = Msg::Data(Data {
                    offset: 0,
                    hash: None,
                    abandon: true,
                    vanished: gone,
                    bytes: Vec::new(),
                });
                self.queue(ep, st, &abandon, report, progress).await?;
                self.waiting.push_back((
                    seq,
                    Awaited::Verdict {
                        name,
                        size,
                        hash: [0; 32],
                        layout: Layout::new(opts.verify, chunk, 0)?,
                        local: Some((err, gone)),
                    },
                ));
                return Ok(());
            }
        };
        // Test hook: the file's only chunk flipped after hashing (the receiver must refuse it).
        let h = opts.hooks();
        let corrupt =
            h.corrupt_chunk == Some(0) && h.corrupt_name.as_deref().is_none_or(|n| n == name);
        if let (true, Some(b)) = (corrupt, data.first_mut()) {
            *b ^= 0xff;
        }
        let pieces = data.len().div_ceil(proto::PIECE_MAX).max(1);
        for i in 0..pieces {
            let start = i * proto::PIECE_MAX;
            let end = (start + proto::PIECE_MAX).min(data.len());
            let last = (i + 1 == pieces).then_some(hash);
            let piece = &data[start..end];
            self.queue_with(ep, st, report, progress, |b| {
                proto::encode_piece(b, start as u64, last, piece)
            }).await?;
        }
        self.data = data;
        report.bytes += size;
        progress(Progress::Bytes {
            name: &name,
            file_done: size,
            total_done: report.bytes,
        });
        self.waiting.push_back((
            seq,
            Awaited::Verdict {
                name,
                size,
                hash,
                layout,
                local: None,
            },
        ));
        Ok(())
    }
}

/// A SKIP or REFUSE of an entry as its report, whether it was refused, and for a fatal
/// refusal the error that ends the session.
fn refused_or_skipped(
    answer: Answer,
    name: &str,
    kind: EntryKind,
    size: u64,
) -> Result<(FileReport, bool, Option<Error>)> {
    match answer {
        Answer::Skipped(message) => Ok((
            FileReport::skipped(name, kind.as_str(), size, &message),
            false,
            None,
        )),
        Answer::Refused {
            reason,
            message,
            fatal,
        } => {
            let fatal = fatal.then(|| peer_err(reason, &message));
            Ok((
                FileReport::failed(name, size, reason, message).of_kind(kind),
                true,
                fatal,
            ))
        }
        // `Answer::of` gave only what the question allows; these were taken by the caller.
        Answer::Made | Answer::Want | Answer::Ring(_) | Answer::Would { .. } => {
            Err(Error::Protocol("an answer this entry cannot have".into()))
        }
    }
}

/// The type name of `msg`, for errors.
fn proto_name(msg: &Msg) -> &'static str {
    match msg {
        Msg::Ack { .. } => "ACK",
        Msg::Want => "WANT",
        Msg::Skip { .. } => "SKIP",
        Msg::Refuse { .. } => "REFUSE",
        Msg::Err { .. } => "ERR",
        Msg::Mr(_) => "MR",
        _ => "a message",
    }
}
