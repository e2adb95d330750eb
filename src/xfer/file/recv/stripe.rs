//! Receiver: one stripe of a file received over several streams (STRIPE, HELLO, MR, data,
//! FIN, ACK on this stream; see "Streams" in `docs/file-protocol.md`). Each stripe is written
//! at its offset into the file's one temporary file and verified on its own (BLAKE3 of its
//! range); the stream that ends the last stripe commits the file, or gives it up.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

use super::answer::{admit, answer_refuse, answer_skip, open_sink, tell_peer, Opened};
use super::core::{PartReceiver, Tail};
use super::data::{ensure_ring, receive_data, settle, ChunkTarget};
use super::file::SessionState;
use super::joint::{wait_others, Answer, FileState, Joint, StripeFailure};
use super::ring_budget;
use super::sink::write_err;
use crate::error::{Error, Result};
use crate::xfer::file::budget::{budget_wait, FILE_CREDIT};
use crate::xfer::file::ctl::{detail, is_lost, reason_of, recv_ctl, send_msg};
use crate::xfer::file::digest::{Chunks, Layout, StripeDigests};
use crate::xfer::file::fault;
use crate::xfer::file::link::Link;
use crate::xfer::file::options::ReceiverOptions;
use crate::xfer::file::proto::{self, Algo, Digest, EntryKind, Hello, Msg, Reason, Stripe};
use crate::xfer::file::report::{FileReport, SessionReport};

/// Writes one stripe's chunks at their offsets (from the pool of writer threads, in any
/// order) and hashes each: the stripe's digest is the file digest formula over its chunks.
struct StripeWriter {
    file: File,
    offset: u64,
    /// Bytes of the stripe held from an earlier attempt (whole chunks).
    held: u64,
    chunks: Arc<Chunks>,
    /// The file's shared state and the chunks between checkpoints of its resume state
    /// (`recv --resume`; see `Assembly::checkpoint`).
    checkpoint: Option<(Arc<Mutex<FileState>>, u64)>,
}

/// Bytes of a stripe received between checkpoints of the resume state (with `--resume`), at
/// most; fewer when the staging ring is smaller.
const CHECKPOINT_BYTES: u64 = 4 << 20;

impl StripeWriter {
    /// A writer of stripe `s` cut in `chunk`-byte chunks, continuing after the whole chunks of
    /// `held` bytes, which it reads back and hashes.
    fn new(file: File, s: &Stripe, held: u64, chunk: u32, algo: Algo) -> Result<StripeWriter> {
        let layout = Layout::new(algo, u64::from(chunk), s.len)?;
        let held = layout.whole_chunks(held);
        let chunks = Arc::new(Chunks::new(layout));
        let mut buf = vec![0u8; chunk as usize];
        for i in 0..layout.prefix(held).chunks() {
            let (off, len) = layout.range(i).expect("a chunk of the prefix");
            file.read_exact_at(&mut buf[..len], s.offset + off)
                .map_err(|e| Error::io("reading back a partial stripe", e))?;
            chunks.hash(i, &buf[..len])?;
        }
        Ok(StripeWriter {
            file,
            offset: s.offset,
            held,
            chunks,
            checkpoint: None,
        })
    }

    /// Writes chunk `index` (not one held) at its offset in the file.
    fn put(&self, index: u64, data: &[u8]) -> Result<()> {
        let off = self.chunks.check(index, data.len())?;
        if off < self.held {
            return Err(Error::Protocol(format!(
                "stripe chunk {index} is held from an earlier attempt"
            )));
        }
        self.file
            .write_all_at(data, self.offset + off)
            .map_err(|e| write_err("write a stripe of the temporary file".into(), e))
    }

    /// Bytes from the stripe's start written (or held) without a gap.
    fn contiguous(chunks: &Chunks) -> u64 {
        let l = chunks.layout();
        chunks
            .first_missing()
            .map_or(l.size, |i| i.saturating_mul(l.chunk).min(l.size))
    }
}

impl ChunkTarget for StripeWriter {
    fn write_chunk_at(&self, index: u64, data: &[u8]) -> Result<()> {
        self.put(index, data)?;
        self.chunks.hash(index, data)?;
        if let Some((state, every)) = &self.checkpoint {
            if (index + 1) % every == 0 {
                if let FileState::Open(a) = &*lock(state) {
                    a.checkpoint();
                }
            }
        }
        Ok(())
    }
    fn rewrite_chunk_at(&self, index: u64, data: &[u8]) -> Result<()> {
        self.put(index, data)?;
        self.chunks.rehash(index, data).map(|_| ())
    }

    fn digests(&self) -> Result<&Chunks> {
        Ok(&self.chunks)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Ends stripe `index` of `file` with `result`; when it was the last one, records the file's
/// verdict in `report` and returns it.
fn end_stripe(
    file: &Mutex<FileState>,
    s: &Stripe,
    result: std::result::Result<StripeDigests, StripeFailure>,
    written: u64,
    report: &mut SessionReport,
    name: &str,
    layout: Option<&Layout>,
) -> Option<Result<Digest>> {
    let mut st = lock(file);
    let FileState::Open(a) = &mut *st else {
        return None;
    };
    let size = a.size;
    let verdict = a.end(s.index, result, written)?;
    let repaired = a.repaired;
    *st = FileState::Ended;
    drop(st);
    report.push(match (&verdict, layout) {
        (Ok(d), Some(l)) => FileReport::ok(name, size, d, l).with_repaired(repaired),
        (Ok(_), None) => FileReport::failed(name, size, Reason::Internal, "no layout".into()),
        (Err(e), _) => FileReport::failed(name, size, reason_of(e), e.to_string()),
    });
    Some(verdict)
}

/// What the first look at a stripe's file decided (under its lock).
enum Decided {
    Started(Started),
    /// End the session, telling the peer why.
    Tell(Error),
    Skip(proto::SkipWhy, String),
    Refuse(Error),
}

/// What a stripe's HELLO gets once the file is decided.
enum Started {
    Go(u64, File),
    Answer(Msg),
    Fail(Error),
}

/// A stripe as it arrives on a stream of a multi-stream session: the session, the STRIPE and
/// the HELLO of its file that followed it.
pub(super) struct StripeOffer<'j> {
    pub joint: &'j Joint,
    pub stripe: Stripe,
    pub hello: Hello,
}

/// Receives the stripe `offer` names, on this stream of its session.
pub(super) async fn receive_stripe<L: Link>(
    ep: &mut L,
    opts: &ReceiverOptions,
    st: &mut SessionState<'_, L::Ring>,
    report: &mut SessionReport,
    nonce: &Digest,
    offer: StripeOffer<'_>,
) -> Result<()> {
    let StripeOffer {
        joint,
        stripe: s,
        hello: h,
    } = offer;
    let SessionState {
        lease,
        ring,
        budget,
        stream,
        joint: joint_stop,
    } = st;
    if h.kind != EntryKind::File || s.end() > h.size {
        let e = Error::Protocol(format!(
            "STRIPE ({} bytes at {}) before a HELLO of a {} of {} bytes",
            s.len,
            s.offset,
            h.kind.as_str(),
            h.size
        ));
        tell_peer(ep, &e).await;
        return Err(e);
    }
    // A stripe sent again (its first stream lost) takes over from the stream that had it.
    let stop = joint_stop
        .as_ref()
        .map(|(_, stop)| stop.clone())
        .unwrap_or_default();
    let within = budget.step() * 2;
    let _held = match joint
        .claims
        .take((h.name.clone(), Some(s.index)), &stop, within)
    {
        Ok(held) => held,
        Err(e) => {
            tell_peer(ep, &e).await;
            return Err(e);
        }
    };
    let file = joint.file(&h.name);
    // Decided under the file's lock; told to the peer after it (no lock held over a wait).
    let decided = 'decide: {
    let mut st = lock(&file);
    if matches!(*st, FileState::Undecided) {
        // The first stripe to arrive decides for all: policy, size, space, the temporary file.
        // At most so many files unfinished: a peer that starts more is ended.
        let counted = match joint.start_file() {
            Ok(c) => c,
            Err(e) => break 'decide Decided::Tell(e),
        };
        match admit(opts, nonce, &h).and_then(|rel| open_sink(opts, &rel, &h)) {
            Ok(Opened::Sink(sink)) => {
                let a = joint.assembly(&h.name, *sink, h.size, s.count, opts.resume, counted);
                *st = FileState::Open(Box::new(a));
            }
            Ok(Opened::Skip(why, message)) => {
                *st = FileState::Answered(Answer::Skip(why, message.clone()));
                break 'decide Decided::Skip(why, message);
            }
            Ok(Opened::Made) => unreachable!("a file HELLO makes a sink or is skipped"),
            Err(e) => {
                *st = FileState::Answered(Answer::Refuse(reason_of(&e), detail(&e)));
                break 'decide Decided::Refuse(e);
            }
        }
    } else if let Err(e) = admit(opts, nonce, &h) {
        break 'decide Decided::Refuse(e);
    }
    Decided::Started(match &mut *st {
        FileState::Answered(Answer::Skip(why, message)) => Started::Answer(Msg::Skip {
            why: *why,
            message: proto::truncate_text(message),
        }),
        FileState::Answered(Answer::Refuse(reason, message)) => Started::Answer(Msg::Refuse {
            reason: *reason,
            message: proto::truncate_text(message),
        }),
        // Sent again by a stream taking over, though its first stream verified it (its ACK
        // was lost with that stream), or the whole file has ended since.
        FileState::Open(a) if a.verified(&s) => Started::Answer(again_answer(&s)),
        FileState::Ended => Started::Answer(again_answer(&s)),
        FileState::Open(a) => match a.start(&s).and_then(|()| {
            let tmp = a.sink.as_ref().expect("open until ended").temp_file()?;
            Ok((a.held_of(&s), tmp))
        }) {
            Ok((held, tmp)) => Started::Go(held, tmp),
            Err(e) => Started::Fail(e),
        },
        FileState::Undecided => Started::Fail(Error::Protocol(format!(
            "stripe {} of a file that has ended",
            s.index
        ))),
    })
    };
    let started = match decided {
        Decided::Started(started) => started,
        Decided::Tell(e) => {
            tell_peer(ep, &e).await;
            return Err(e);
        }
        Decided::Skip(why, message) => {
            return answer_skip(ep, report, budget, &h, why, message).await;
        }
        Decided::Refuse(e) => return answer_refuse(ep, report, budget, &h, e).await,
    };
    let (held, tmp) = match started {
        Started::Go(held, tmp) => (held, tmp),
        // Every later stripe of a skipped or refused file gets the first one's answer.
        Started::Answer(answer) => return send_msg(ep, &answer).await,
        Started::Fail(e) => return Err(failed(ep, &file, &s, e, 0, report, &h.name).await),
    };
    // Slots sized for the whole file, not the stripe: every stripe (the last, shorter one
    // too) is cut in the same chunks, on the file's grid (see `digest::file_digest_of_stripes`).
    let got = ensure_ring(ep, opts, lease, ring, h.chunk_size, h.size).await
        .and_then(|r| StripeWriter::new(tmp, &s, held, r.slot_size(), h.verify).map(|w| (r, w)));
    let (r, mut w) = match got {
        Ok(x) => x,
        Err(e) => return Err(failed(ep, &file, &s, e, held, report, &h.name).await),
    };
    if opts.resume {
        // What this stripe holds goes on disk now and every few MiB, for a restarted receiver.
        if let FileState::Open(a) = &mut *lock(&file) {
            a.track(s.index, w.chunks.clone());
            a.checkpoint();
        }
        // A ring's worth apart, less the chunks written in any order: what a killed receiver
        // had on disk and loses (written since the last checkpoint, or after a gap then) is
        // then no more than the ring holds.
        let slot = u64::from(r.slot_size()).max(1);
        let window = u64::from(r.slot_count).saturating_sub(ring_budget::COPY_BUFS);
        let every = (CHECKPOINT_BYTES / slot).min(window).max(1);
        w.checkpoint = Some((file.clone(), every));
    }
    let held = w.held;
    let held_digest = w
        .chunks
        .prefix_digest(held)
        .expect("the held chunks were hashed");
    if opts.hooks().hold_stripe == Some(s.index) {
        wait_others(&file, s.index);
    }
    let chunks = w.chunks.clone();
    let mut part = match PartReceiver::new(r.slot_size, r.slot_count, held, s.len, h.verify) {
        Ok(p) => p,
        Err(e) => {
            let n = StripeWriter::contiguous(&chunks);
            return Err(failed(ep, &file, &s, e, n, report, &h.name).await);
        }
    };
    send_msg(ep, &r.offer(held, held_digest)).await?;
    let label = fault::part_label(*stream, Some((s.index, s.count)), &h.name);
    let mut hooked = opts.hooks().break_streams.iter();
    let brk = hooked.find(|(i, _)| *stream == Some(*i)).map(|(_, k)| *k);
    let (w, write_failure) = match receive_data(ep, r, budget, w, &mut part, (&label, brk)).await {
        Ok(x) => x,
        Err(e) => {
            let n = StripeWriter::contiguous(&chunks);
            return Err(failed(ep, &file, &s, e, n, report, &h.name).await);
        }
    };
    report.bytes += s.len - held;
    let fin = loop {
        let tail = budget_wait!(budget, ep, recv_ctl(ep).await)
            .and_then(|m| part.on_control(m, "STRIPE"));
        match tail {
            Ok(Tail::Digests { first, digests }) => {
                part.compare(&w.chunks, first, &digests);
            }
            Ok(Tail::Fin(hash)) => break Ok(hash),
            Err(e) => break Err(e),
        }
    };
    // Chunks that differ from the sender's digests are asked for again (REPAIR).
    let settled = match fin {
        Ok(hash) => {
            let what = (&label[..], "STRIPE");
            settle(ep, r, budget, w, &mut part, what, write_failure)
                .await
                .map(|x| (hash, x))
        }
        Err(e) => Err(e),
    };
    let (hash, (w, write_failure, bad, again)) = match settled {
        Ok(x) => x,
        Err(e) => {
            let n = StripeWriter::contiguous(&chunks);
            return Err(failed(ep, &file, &s, e, n, report, &h.name).await);
        }
    };
    report.bytes += again;
    if bad.is_none() {
        if let FileState::Open(a) = &mut *lock(&file) {
            a.repaired += part.repaired();
        }
    }
    let n = StripeWriter::contiguous(&chunks);
    let got = w.chunks.finish();
    let (result, n) = match (write_failure, got) {
        (Some(e), _) | (None, Err(e)) => (Err(StripeFailure::of(&e)), n),
        (None, Ok(got)) if got == hash && bad.is_none() => (Ok(chunks.stripe(s.offset, got)), n),
        (None, Ok(_)) if bad.is_some() => {
            let m = bad.expect("checked");
            let i = m.chunk;
            let (off, len) = chunks.layout().range(i).unwrap_or((0, 0));
            let from = s.offset + off;
            let again = match m.rounds {
                0 => String::new(),
                n => format!(" (sent again {n} times)"),
            };
            let message = format!(
                "chunk {i} of stripe {} of {} (bytes {from}..{}) differs from the sender's {}{again}",
                s.index,
                s.count,
                from + len as u64,
                h.verify
            );
            // The file's chunk grid starts at the stripe's (stripes are cut on chunk bounds).
            let chunk = (h.chunk_size > 0).then(|| s.offset / u64::from(h.chunk_size) + i);
            (Err(StripeFailure { reason: Reason::HashMismatch, message, chunk }), 0)
        }
        (None, Ok(got)) => (
            Err(StripeFailure {
                reason: Reason::HashMismatch,
                message: format!(
                    "stripe {} of {} ({} bytes at {}): received bytes have the digest {}, the sender's is {}",
                    s.index,
                    s.count,
                    s.len,
                    s.offset,
                    blake3::Hash::from(got).to_hex(),
                    blake3::Hash::from(hash).to_hex()
                ),
                chunk: None,
            }),
            0,
        ),
    };
    let layout = *chunks.layout();
    let verdict = end_stripe(&file, &s, result.clone(), n, report, &h.name, Some(&layout));
    let (status, message) = match (&verdict, &result) {
        (Some(Ok(_)), _) => (Reason::Ok, String::new()),
        (Some(Err(e)), _) => (reason_of(e), e.to_string()),
        (None, Ok(_)) => (Reason::Ok, format!("stripe {} verified", s.index)),
        (None, Err(f)) => (f.reason, detail(&f.clone().into_error(&h.name))),
    };
    send_msg(
        ep,
        &Msg::Ack {
            status,
            message: proto::truncate_text(&message),
        },
    ).await?;
    match (verdict, result) {
        (Some(Ok(_)), _) => {
            budget.progress(FILE_CREDIT);
            Ok(())
        }
        (Some(Err(_)), _) | (None, Err(_)) => budget.refused(),
        // A verified stripe of a file still open is progress of the session too: the streams
        // waiting for theirs (held back by the sender) wait a step from its verdict.
        (None, Ok(_)) => {
            budget.progress(FILE_CREDIT);
            Ok(())
        }
    }
}

/// The answer to a stripe sent again after it ended (see [`receive_stripe`]).
fn again_answer(s: &Stripe) -> Msg {
    Msg::Skip {
        why: proto::SkipWhy::Identical,
        message: format!(
            "stripe {} of {} ended already in this session",
            s.index, s.count
        ),
    }
}

/// A stripe that failed while being received: tells the sender why, ends the stripe (the file
/// is then not committed; with `--resume` what it holds is kept) and returns the error.
async fn failed<L: Link>(
    ep: &mut L,
    file: &Mutex<FileState>,
    s: &Stripe,
    e: Error,
    written: u64,
    report: &mut SessionReport,
    name: &str,
) -> Error {
    tell_peer(ep, &e).await;
    // Lost with its stream: another stream of the session may take it over, from what it
    // holds (see `claim`).
    if is_lost(&e) {
        if let FileState::Open(a) = &mut *lock(file) {
            a.release(s, written);
            return e;
        }
    }
    end_stripe(
        file,
        s,
        Err(StripeFailure::of(&e)),
        written,
        report,
        name,
        None,
    );
    e
}
