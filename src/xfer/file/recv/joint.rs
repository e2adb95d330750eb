//! Receiver: sessions carried by several streams (OPEN, JOIN) and the files striped over them.
//!
//! A [`StreamRegistry`] lives as long as the receiver; each OPEN makes a [`Joint`] (the
//! session's shared state: its random id, the streams granted and joined, the striped files
//! being assembled) that the registry holds weakly, so it goes when its last stream ends.
//! Every stream is still its own connection, admitted (`--max-sessions`) and given its ring
//! (`--max-memory`) like any sender; a session has at most `--max-streams` of them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use super::claim::Claims;
use super::delete::SentDirs;
use super::partial;
use super::sink::Sink;
use crate::error::{Error, Result};
use crate::xfer::file::digest::{file_digest_of_stripes, Chunks, StripeDigests};
use crate::xfer::file::proto::{self, Reason, SessionId, Stripe, MAX_STREAMS};

/// Default `recv --max-streams`: streams one session may open.
pub const DEFAULT_MAX_STREAMS: u16 = 8;
/// Striped files a session may have unfinished (some stripe started, not every stripe ended),
/// per stream granted: each holds its temporary file open. The sender keeps to one a stream
/// (`send::streams`); a session that starts more is ended (ERR budget).
pub const UNFINISHED_PER_STREAM: usize = 2;

/// What a receiver keeps of striped files abandoned with `--resume`: for each file name, the
/// stripe layout and how many bytes of each stripe are in its temporary file, so a resumed
/// transfer continues every stripe where it stopped. Kept in memory and on disk next to the
/// temporary file ([`partial`]), so a restarted receiver continues too.
#[derive(Clone, Debug)]
struct Partial {
    size: u64,
    /// (offset, length, bytes held from the offset) per stripe.
    stripes: Vec<(u64, u64, u64)>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The receiver's registry of sessions with several streams.
#[derive(Debug)]
pub struct StreamRegistry {
    max: u16,
    sessions: Mutex<HashMap<SessionId, Weak<Joint>>>,
    partials: Arc<Mutex<HashMap<String, Partial>>>,
}

impl StreamRegistry {
    /// A registry granting each session at most `max_streams` streams (1..=[`MAX_STREAMS`]).
    pub fn new(max_streams: u16) -> StreamRegistry {
        StreamRegistry {
            max: max_streams.clamp(1, MAX_STREAMS),
            sessions: Mutex::new(HashMap::new()),
            partials: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The cap on streams per session.
    pub fn max_streams(&self) -> u16 {
        self.max
    }

    /// A new session asking for `asked` streams: granted at most the cap.
    pub(super) fn open(&self, asked: u16) -> Arc<Joint> {
        let granted = asked.clamp(1, self.max);
        let mut joined = vec![false; usize::from(granted)];
        joined[0] = true;
        let j = Arc::new(Joint {
            id: proto::new_session_id(),
            granted,
            joined: Mutex::new(joined),
            files: Mutex::new(HashMap::new()),
            partials: self.partials.clone(),
            progress: Arc::new(AtomicU64::new(0)),
            dirs: SentDirs::default(),
            unfinished: Arc::new(AtomicUsize::new(0)),
            claims: Claims::default(),
            live: AtomicUsize::new(0),
        });
        let mut s = lock(&self.sessions);
        s.retain(|_, w| w.strong_count() > 0);
        s.insert(j.id, Arc::downgrade(&j));
        j
    }

    /// Stream `index` joining session `id`: refused (authentication failed) for an id that is
    /// not a live session, an index beyond the streams granted or one already joined.
    pub(super) fn join(&self, id: &SessionId, index: u16) -> Result<Arc<Joint>> {
        let j = lock(&self.sessions)
            .get(id)
            .and_then(Weak::upgrade)
            .ok_or_else(|| {
                Error::refused(
                    Reason::AuthFailed,
                    "JOIN names no session of this receiver (unknown or ended session id)",
                )
            })?;
        let mut joined = lock(&j.joined);
        match joined.get_mut(usize::from(index)) {
            Some(slot) if !*slot => *slot = true,
            Some(_) => {
                return Err(Error::refused(
                    Reason::Protocol,
                    format!("stream {index} of this session has joined already"),
                ))
            }
            None => {
                return Err(Error::refused(
                    Reason::Protocol,
                    format!(
                        "stream {index} is beyond the {} streams this session was granted",
                        j.granted
                    ),
                ))
            }
        }
        drop(joined);
        Ok(j)
    }
}

/// One session's state shared by its streams.
#[derive(Debug)]
pub(super) struct Joint {
    pub(super) id: SessionId,
    pub(super) granted: u16,
    joined: Mutex<Vec<bool>>,
    files: Mutex<HashMap<String, Arc<Mutex<FileState>>>>,
    partials: Arc<Mutex<HashMap<String, Partial>>>,
    /// Bytes received by all its streams: each stream's budget counts them (see
    /// `Budget::share`), so a stream waiting its turn does not time out while the others move.
    pub(super) progress: Arc<AtomicU64>,
    /// The directories its streams' HELLOs named (`recv --allow-delete`).
    pub(super) dirs: SentDirs,
    /// Its striped files being assembled ([`Unfinished`] counts them).
    unfinished: Arc<AtomicUsize>,
    /// The parts its streams are receiving (a part sent again takes over).
    pub(super) claims: Claims,
    /// Its streams being served.
    live: AtomicUsize,
}

/// One of a session's striped files being assembled, counted while it lives (an [`Assembly`]
/// holds it: it goes when the file ends, or with the session).
#[derive(Debug)]
pub(super) struct Unfinished(Arc<AtomicUsize>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How the receiver answered a striped file's first HELLO: every later stripe gets the same.
#[derive(Clone, Debug)]
pub(super) enum Answer {
    Skip(proto::SkipWhy, String),
    Refuse(Reason, String),
}

/// A striped file of a session.
#[derive(Debug)]
pub(super) enum FileState {
    /// No stripe has been decided on yet.
    Undecided,
    /// Skipped or refused (by the first stripe's HELLO).
    Answered(Answer),
    /// Being received.
    Open(Box<Assembly>),
    /// Committed or failed: later stripes of it are a protocol error.
    Ended,
}

/// For the test hold (`RecvHooks::hold_stripe`): waits (at most a minute) until every
/// stripe of `file` but `index` has ended, or the file has.
pub(super) fn wait_others(file: &Mutex<FileState>, index: u16) {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(60) {
        let done = match &*lock(file) {
            FileState::Open(a) => a
                .stripes
                .iter()
                .enumerate()
                .all(|(i, s)| s.ended || i == usize::from(index)),
            _ => true,
        };
        if done {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    tracing::info!(
        "test hold: stripe {index} answered after {:?}",
        t0.elapsed()
    );
}

/// Why a stripe failed (its file is then not committed): the reason, the text, and for a hash
/// mismatch the file's first chunk that differs (the text then leaves the file's name out).
#[derive(Clone, Debug)]
pub(super) struct StripeFailure {
    pub(super) reason: Reason,
    pub(super) message: String,
    pub(super) chunk: Option<u64>,
}

impl StripeFailure {
    /// The failure `e` is.
    pub(super) fn of(e: &Error) -> StripeFailure {
        StripeFailure {
            reason: crate::xfer::file::ctl::reason_of(e),
            message: e.to_string(),
            chunk: None,
        }
    }

    /// The file's error: [`Error::Verification`] for a hash mismatch.
    pub(super) fn into_error(self, file: &str) -> Error {
        match self.reason {
            Reason::HashMismatch => Error::Verification {
                file: proto::truncate_text(file),
                chunk: self.chunk,
                detail: self.message,
            },
            reason => Error::refused(reason, self.message),
        }
    }
}

/// A striped file being assembled: one temporary file, each stripe written at its offset by its
/// own stream and verified apart; committed once, when every stripe is verified.
#[derive(Debug)]
pub(super) struct Assembly {
    pub(super) name: String,
    pub(super) sink: Option<Sink>,
    pub(super) size: u64,
    /// Per stripe: the range announced, whether it started, its verified digest, the bytes
    /// written from its offset so far (for resume), and whether it ended.
    pub(super) stripes: Vec<StripeState>,
    /// The first failure of a stripe (the file is then not committed).
    pub(super) failure: Option<StripeFailure>,
    /// Chunks repaired in the stripes verified so far.
    pub(super) repaired: u64,
    /// Bytes held per stripe from an earlier, abandoned attempt (resume).
    pub(super) held: Vec<(u64, u64, u64)>,
    keep: bool,
    partials: Arc<Mutex<HashMap<String, Partial>>>,
    /// Per stripe being received: its chunk digests so far (the bytes written without a gap,
    /// for checkpoints of the resume state while it is received).
    live: Vec<Option<Arc<Chunks>>>,
    /// Counts it among the session's unfinished striped files while it lives.
    _counted: Unfinished,
}

#[derive(Clone, Debug, Default)]
pub(super) struct StripeState {
    pub(super) range: Option<(u64, u64)>,
    pub(super) digest: Option<StripeDigests>,
    pub(super) written: u64,
    pub(super) ended: bool,
}

impl Joint {
    /// A stream of it is being served.
    pub(super) fn enter(&self) {
        self.live.fetch_add(1, Ordering::AcqRel);
    }

    /// A stream of it has ended; returns how many are still served.
    pub(super) fn leave(&self) -> usize {
        self.live.fetch_sub(1, Ordering::AcqRel).saturating_sub(1)
    }

    /// Counts one more unfinished striped file: refused (budget) when the session has as many
    /// as [`UNFINISHED_PER_STREAM`] per stream granted already.
    pub(super) fn start_file(&self) -> Result<Unfinished> {
        let cap = UNFINISHED_PER_STREAM * usize::from(self.granted);
        self.unfinished
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < cap).then_some(n + 1)
            })
            .map(|_| Unfinished(self.unfinished.clone()))
            .map_err(|_| {
                Error::refused(
                    Reason::Budget,
                    format!(
                        "a striped file started with {cap} unfinished in this session ({} for \
                         each of its {} streams): a sender starts one as another ends",
                        UNFINISHED_PER_STREAM, self.granted
                    ),
                )
            })
    }

    /// The shared state of the striped file `name` (made undecided on first sight).
    pub(super) fn file(&self, name: &str) -> Arc<Mutex<FileState>> {
        lock(&self.files)
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(Mutex::new(FileState::Undecided)))
            .clone()
    }

    /// An assembly for `name` received into `sink`, continuing what an abandoned attempt with
    /// the same size left (when `sink` continued its temporary file).
    pub(super) fn assembly(
        &self,
        name: &str,
        sink: Sink,
        size: u64,
        count: u16,
        keep: bool,
        counted: Unfinished,
    ) -> Assembly {
        // This process's record, else the one kept on disk (a restarted receiver).
        let previous = lock(&self.partials).remove(name).or_else(|| {
            let kept = sink.load_stripe_state()?;
            match partial::decode(&kept) {
                Ok(st) => Some(Partial {
                    size: st.size,
                    stripes: st
                        .stripes
                        .iter()
                        .map(|h| (h.offset, h.len, h.held))
                        .collect(),
                }),
                Err(e) => {
                    tracing::warn!("{name}: ignoring its kept stripe state: {e}");
                    None
                }
            }
        });
        let held = match previous {
            Some(p) if p.size == size && sink.held() > 0 => p.stripes,
            _ => Vec::new(),
        };
        Assembly {
            name: name.to_string(),
            sink: Some(sink),
            size,
            stripes: vec![StripeState::default(); usize::from(count)],
            failure: None,
            repaired: 0,
            held,
            keep,
            partials: self.partials.clone(),
            live: vec![None; usize::from(count)],
            _counted: counted,
        }
    }
}

impl Assembly {
    /// Bytes of stripe `s` held from an earlier attempt (0 unless its layout is the same).
    pub(super) fn held_of(&self, s: &Stripe) -> u64 {
        self.held
            .get(usize::from(s.index))
            .filter(|h| (h.0, h.1) == (s.offset, s.len))
            .map_or(0, |h| h.2.min(s.len))
    }

    /// Stripe `s` was lost with its stream, `written` bytes from its start held: it is no
    /// longer started, and another stream may send it again, from there.
    pub(super) fn release(&mut self, s: &Stripe, written: u64) {
        let i = usize::from(s.index);
        let Some(st) = self.stripes.get_mut(i) else {
            return;
        };
        if st.ended {
            return;
        }
        st.range = None;
        if self.held.len() < self.stripes.len() {
            self.held.resize(self.stripes.len(), (0, 0, 0));
        }
        self.held[i] = (s.offset, s.len, written.min(s.len));
        if let Some(l) = self.live.get_mut(i) {
            *l = None;
        }
    }

    /// Whether stripe `s` has ended in this session (verified or not).
    pub(super) fn verified(&self, s: &Stripe) -> bool {
        self.stripes
            .get(usize::from(s.index))
            .is_some_and(|st| st.ended && st.range == Some((s.offset, s.len)))
    }

    /// Checks `s` against the file and the stripes seen, and marks it started.
    pub(super) fn start(&mut self, s: &Stripe) -> Result<()> {
        if usize::from(s.count) != self.stripes.len() || s.end() > self.size {
            return Err(Error::Protocol(format!(
                "STRIPE {} of {} ({} bytes at {}) does not fit this file of {} bytes in {} stripes",
                s.index,
                s.count,
                s.len,
                s.offset,
                self.size,
                self.stripes.len()
            )));
        }
        let st = &mut self.stripes[usize::from(s.index)];
        if st.range.is_some() {
            return Err(Error::Protocol(format!(
                "stripe {} of this file was sent twice",
                s.index
            )));
        }
        st.range = Some((s.offset, s.len));
        Ok(())
    }

    /// Records the end of stripe `index` (verified with `digest`, or failed). When every stripe
    /// has ended, commits the file (all verified, ranges covering it) or gives it up, and
    /// returns the file's verdict: its digest or the failure.
    pub(super) fn end(
        &mut self,
        index: u16,
        result: std::result::Result<StripeDigests, StripeFailure>,
        written: u64,
    ) -> Option<Result<proto::Digest>> {
        let st = &mut self.stripes[usize::from(index)];
        st.ended = true;
        st.written = written;
        match result {
            Ok(d) => st.digest = Some(d),
            Err(f) => {
                self.failure.get_or_insert(f);
            }
        }
        if !self.stripes.iter().all(|s| s.ended) {
            return None;
        }
        let sink = self.sink.take()?;
        let mut parts = Vec::with_capacity(self.stripes.len());
        let mut next = 0u64;
        for s in &self.stripes {
            match (s.range, &s.digest) {
                (Some((off, len)), Some(d)) if off == next && d.layout.size == len => {
                    parts.push(d.clone());
                    next = off + len;
                }
                _ => break,
            }
        }
        if self.failure.is_none() && (parts.len() != self.stripes.len() || next != self.size) {
            self.failure = Some(StripeFailure {
                reason: Reason::Protocol,
                message: "the stripes do not cover the file exactly".into(),
                chunk: None,
            });
        }
        // The whole file's digest when the stripes are on one chunk grid (as over one stream).
        let digest = file_digest_of_stripes(self.size, &parts);
        Some(match (self.failure.clone(), digest) {
            (None, Some((d, _))) => sink.commit_verified(&d),
            (None, None) => Err(Error::Protocol("a striped file without stripes".into())),
            (Some(f), _) => {
                self.record_partial(&sink);
                drop(sink);
                Err(f.into_error(&self.name))
            }
        })
    }

    /// Stripe `index` is being received into chunks `chunks` (for checkpoints).
    pub(super) fn track(&mut self, index: u16, chunks: Arc<Chunks>) {
        if let Some(l) = self.live.get_mut(usize::from(index)) {
            *l = Some(chunks);
        }
    }

    /// With `--resume`, while stripes are being received: writes what each holds now next to
    /// the temporary file, so that a receiver killed in the middle (no clean-up runs) still
    /// finds it. Only bytes already written (and hashed) count; the next attempt re-hashes them
    /// and the sender compares, so a state ahead of the data fails the resume, never the file.
    pub(super) fn checkpoint(&self) {
        if let (true, Some(sink)) = (self.keep, &self.sink) {
            self.save_partial(sink, &self.partial_now());
        }
    }

    fn partial_now(&self) -> Partial {
        let stripes = self
            .stripes
            .iter()
            .enumerate()
            .map(|(i, s)| match s.range {
                Some((off, len)) => {
                    let live = self.live.get(i).and_then(Option::as_ref).map_or(0, |c| {
                        let l = c.layout();
                        c.first_missing()
                            .map_or(l.size, |k| k.saturating_mul(l.chunk).min(l.size))
                    });
                    let held = if s.digest.is_some() {
                        len
                    } else {
                        s.written.max(live)
                    };
                    (off, len, held.min(len))
                }
                // Not started in this attempt: what it held before still holds.
                None => self.held.get(i).copied().unwrap_or((0, 0, 0)),
            })
            .collect();
        Partial {
            size: self.size,
            stripes,
        }
    }

    fn save_partial(&self, sink: &Sink, p: &Partial) {
        let state = partial::StripeState {
            size: p.size,
            stripes: p
                .stripes
                .iter()
                .map(|&(offset, len, held)| partial::HeldStripe { offset, len, held })
                .collect(),
        };
        if let Err(e) = partial::encode(&state).and_then(|b| sink.save_stripe_state(&b)) {
            // The temporary file is still kept; a restarted receiver starts the stripes over.
            tracing::warn!("{}: keeping its stripe state: {e}", self.name);
        }
    }

    /// With `--resume`, what each stripe holds, for the next attempt: in memory and, fsynced,
    /// next to the temporary file that `sink` keeps.
    fn record_partial(&self, sink: &Sink) {
        if !self.keep {
            return;
        }
        let p = self.partial_now();
        self.save_partial(sink, &p);
        lock(&self.partials).insert(self.name.clone(), p);
    }
}

impl Drop for Assembly {
    fn drop(&mut self) {
        // A session that ended before every stripe did: keep what is there for a resume.
        if let Some(sink) = &self.sink {
            self.record_partial(sink);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xfer::file::digest::{digest_of, Algo, Chunks, Layout};
    use crate::xfer::file::names::sanitize;
    use crate::xfer::file::recv::sink::SinkOptions;
    use std::os::unix::fs::FileExt;

    fn stripe(index: u16, offset: u64, len: u64) -> Stripe {
        Stripe {
            index,
            count: 2,
            offset,
            len,
        }
    }

    /// Stripe `s` verified with `data`, hashed in 4-byte chunks.
    fn verified(s: &Stripe, data: &[u8]) -> StripeDigests {
        let c = Chunks::new(Layout::new(Algo::Xxh3, 4, s.len).unwrap());
        for (i, p) in data.chunks(4).enumerate() {
            c.hash(i as u64, p).unwrap();
        }
        c.stripe(s.offset, c.finish().unwrap())
    }

    /// `j.assembly(...)`, counted among `j`'s unfinished files.
    fn counted(j: &Joint, name: &str, sink: Sink, size: u64, count: u16, keep: bool) -> Assembly {
        let c = j.start_file().unwrap();
        j.assembly(name, sink, size, count, keep, c)
    }

    fn assembly(streams: &StreamRegistry, out: &std::path::Path, keep: bool) -> Assembly {
        let rel = sanitize("f").unwrap();
        let sink = Sink::create(out, &rel, 8, SinkOptions::default()).unwrap();
        counted(&streams.open(2), "f", sink, 8, 2, keep)
    }

    #[test]
    fn a_session_has_at_most_two_unfinished_striped_files_a_stream() {
        let j = StreamRegistry::new(4).open(2);
        let mut held: Vec<Unfinished> = (0..4).map(|_| j.start_file().unwrap()).collect();
        let e = j.start_file().unwrap_err();
        assert!(
            matches!(&e, Error::Refused { reason: Reason::Budget, message } if message.contains("4 unfinished")),
            "{e}"
        );
        held.pop();
        let again = j.start_file();
        assert!(again.is_ok(), "a file that ended frees its place");
        assert!(j.start_file().is_err(), "and only its place");
    }

    #[test]
    fn stripes_commit_once_all_are_verified_and_never_after_a_failure() {
        let out = tempfile::tempdir().unwrap();
        let streams = StreamRegistry::new(4);
        let mut a = assembly(&streams, out.path(), false);
        let (s0, s1) = (stripe(0, 0, 4), stripe(1, 4, 4));
        a.start(&s1).unwrap();
        a.start(&s0).unwrap();
        assert!(a.start(&s0).is_err(), "a stripe twice");
        let f = a.sink.as_ref().unwrap().temp_file().unwrap();
        f.write_all_at(b"efgh", 4).unwrap();
        f.write_all_at(b"abcd", 0).unwrap();
        assert!(
            a.end(1, Ok(verified(&s1, b"efgh")), 4).is_none(),
            "stripe 0 still to come"
        );
        let d = a.end(0, Ok(verified(&s0, b"abcd")), 4).unwrap().unwrap();
        assert_eq!(
            d,
            digest_of(Algo::Xxh3, 4, b"abcdefgh").unwrap(),
            "the whole file's"
        );
        assert_eq!(std::fs::read(out.path().join("f")).unwrap(), b"abcdefgh");

        let out2 = tempfile::tempdir().unwrap();
        let mut a = assembly(&streams, out2.path(), false);
        a.start(&s0).unwrap();
        a.start(&s1).unwrap();
        let fail = StripeFailure {
            reason: Reason::HashMismatch,
            message: "chunk 1 of stripe 0 differs".to_string(),
            chunk: Some(1),
        };
        assert!(a.end(0, Err(fail), 0).is_none());
        let e = a
            .end(1, Ok(verified(&s1, b"efgh")), 4)
            .unwrap()
            .unwrap_err();
        assert_eq!(e.reason(), Some(Reason::HashMismatch), "{e}");
        assert!(
            matches!(&e, Error::Verification { file, chunk: Some(1), .. } if file == "f"),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "f: chunk 1 of stripe 0 differs");
        drop(a);
        assert_eq!(
            std::fs::read_dir(out2.path()).unwrap().count(),
            0,
            "nothing left"
        );
    }

    #[test]
    fn an_abandoned_striped_file_is_resumed_stripe_by_stripe() {
        let out = tempfile::tempdir().unwrap();
        let streams = StreamRegistry::new(4);
        let opts = SinkOptions {
            resume: true,
            ..Default::default()
        };
        let rel = sanitize("f").unwrap();
        let sink = Sink::create(out.path(), &rel, 8, opts.clone()).unwrap();
        let mut a = counted(&streams.open(2), "f", sink, 8, 2, true);
        let (s0, s1) = (stripe(0, 0, 4), stripe(1, 4, 4));
        a.start(&s0).unwrap();
        a.start(&s1).unwrap();
        let f = a.sink.as_ref().unwrap().temp_file().unwrap();
        f.write_all_at(b"abcdef", 0).unwrap();
        let lost = StripeFailure {
            reason: Reason::Internal,
            message: "lost".to_string(),
            chunk: None,
        };
        assert!(a.end(0, Err(lost.clone()), 4).is_none());
        assert!(a.end(1, Err(lost), 2).unwrap().is_err());
        drop(a);
        // The next attempt finds what each stripe holds.
        let sink = Sink::create(out.path(), &rel, 8, opts.clone()).unwrap();
        let a = counted(&streams.open(2), "f", sink, 8, 2, true);
        assert_eq!((a.held_of(&s0), a.held_of(&s1)), (4, 2));
        assert_eq!(a.held_of(&stripe(1, 3, 5)), 0, "another layout starts over");
        drop(a);
        // A restarted receiver (a new registry: nothing in memory) reads it from disk.
        let restarted = StreamRegistry::new(4);
        let sink = Sink::create(out.path(), &rel, 8, opts.clone()).unwrap();
        let a = counted(&restarted.open(2), "f", sink, 8, 2, true);
        assert_eq!((a.held_of(&s0), a.held_of(&s1)), (4, 2), "from disk");
        drop(a);
        // A torn or altered state is ignored: the stripes start over.
        let state = out.path().join(".f.rdmaxfer-stripes");
        let mut b = std::fs::read(&state).unwrap();
        let last = b.len() - 1;
        b[last] ^= 1;
        std::fs::write(&state, &b).unwrap();
        let sink = Sink::create(out.path(), &rel, 8, opts).unwrap();
        let a = counted(&StreamRegistry::new(4).open(2), "f", sink, 8, 2, true);
        assert_eq!((a.held_of(&s0), a.held_of(&s1)), (0, 0), "altered");
    }

    #[test]
    fn joins_need_a_live_session_and_a_free_index() {
        let streams = StreamRegistry::new(3);
        let j = streams.open(5);
        assert_eq!(j.granted, 3, "capped");
        let e = streams.join(&proto::new_session_id(), 1).unwrap_err();
        assert_eq!(e.reason(), Some(Reason::AuthFailed), "{e}");
        streams.join(&j.id, 1).unwrap();
        assert!(streams.join(&j.id, 1).is_err(), "joined already");
        assert!(streams.join(&j.id, 3).is_err(), "beyond the grant");
        let id = j.id;
        drop(j);
        assert!(streams.join(&id, 2).is_err(), "an ended session");
    }
}
