//! Sender: one transfer over several streams (connections, possibly on several devices). The
//! first stream opens the session (OPEN → SESSION: an id and the streams granted), the others
//! join it (JOIN); a tree's entries are spread over the streams, and a large file is split into
//! stripes (byte ranges, one per stream), each sent on whichever stream takes it next. See
//! "Streams" in `docs/file-protocol.md`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use super::data::{Pacer, PHASE_TARGET as PHASE};
use super::delete::delete_extras;
use super::file::StreamState;
use super::part::{FileTrack, Part, StripeJob};
use super::pipe::Pipe;
use super::queue::{Handback, Job, Next, Queue, RECHECK};
use super::session::{challenge, drain, finish, send_done, send_entries, send_entry};
use super::source::{self, SourceEntry, SourceKind};
use crate::error::{Error, Result};
use crate::xfer::file::ctl::{is_lost, peer_err, recv_ctl, send_msg, stalled};
use crate::xfer::file::link::block::block_on;
use crate::xfer::file::link::Link;
use crate::xfer::file::options::SenderOptions;
use crate::xfer::file::proto::{self, Digest, Join, Msg, Open, Reason};
use crate::xfer::file::report::{FileReport, LostStream, Progress, SessionError, SessionReport};

/// Files at least this large are striped over the streams (smaller ones go whole).
pub const STRIPE_MIN: u64 = 8 << 20;
/// Stripes start at multiples of this, or of the chunk size when that is larger (see
/// [`stripe_align`]).
pub const STRIPE_ALIGN: u64 = 1 << 20;

/// Stripes of a file sent in `chunk`-byte chunks start at multiples of this: the least
/// common multiple of [`STRIPE_ALIGN`] and the chunk size (1 MiB for every power of two up to
/// 1 MiB, so that a resumed transfer with another such `--chunk` finds the same stripes), so
/// that every stripe starts on the file's chunk grid and the striped file's digest is the
/// whole file's. A chunk size whose multiple would be over 64 MiB keeps 1 MiB (the digest is
/// then the digest of the stripes' digests).
pub fn stripe_align(chunk: u32) -> u64 {
    let c = u64::from(chunk.max(1));
    let (mut a, mut b) = (STRIPE_ALIGN, c);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    let lcm = STRIPE_ALIGN / a * c;
    if lcm <= 64 << 20 {
        lcm
    } else {
        STRIPE_ALIGN
    }
}

/// Most streams the default ([`default_streams`]) picks.
pub const DEFAULT_STREAMS_CAP: u16 = 4;
/// Streams per device the default picks: on one emulated device (2 vCPUs, 128 MiB
/// tmpfs → tmpfs) 2 streams beat 1 (data phase 56–57 vs 40–42 MiB/s, whole command 42–44 vs
/// 34–35) and 4 fell below 2 (52–55, 37–39): see "Streams" in `docs/file-protocol.md`.
pub const DEFAULT_STREAMS_PER_DEVICE: u16 = 2;

/// The stream count `send` uses without `--streams`: 1 for a transfer too small to gain from
/// more (no file of [`STRIPE_MIN`] or more, and fewer than 2 files or less than
/// [`STRIPE_MIN`] in all through the staging ring: small files, of at most
/// `proto::INLINE_MAX`, travel pipelined in control messages and do not count), otherwise the machine's CPUs, at most
/// [`DEFAULT_STREAMS_PER_DEVICE`] per device (`devices`, at least 1) and at most
/// [`DEFAULT_STREAMS_CAP`]. The receiver may grant fewer (its `--max-streams`).
pub fn default_streams(entries: &[SourceEntry], devices: usize) -> u16 {
    let sizes: Vec<u64> = entries
        .iter()
        .filter(|e| e.kind == SourceKind::File)
        .filter_map(|e| e.listed.map(|m| m.size))
        .filter(|&s| s > proto::INLINE_MAX)
        .collect();
    let total = sizes.iter().fold(0u64, |a, &b| a.saturating_add(b));
    let big = sizes.iter().any(|&s| s >= STRIPE_MIN);
    if !big && (sizes.len() < 2 || total < STRIPE_MIN) {
        return 1;
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per_devices = usize::from(DEFAULT_STREAMS_PER_DEVICE).saturating_mul(devices.max(1));
    let n = cpus.min(per_devices).min(usize::from(DEFAULT_STREAMS_CAP));
    u16::try_from(n).unwrap_or(1).max(1)
}

/// The jobs of `entries` over `streams` streams: files of at least [`STRIPE_MIN`] bytes in
/// stripes (one per stream, aligned to [`STRIPE_ALIGN`]), the rest whole, in order.
fn plan(entries: &[SourceEntry], streams: u16, opts: &SenderOptions) -> Vec<Job> {
    let mut jobs = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let size = match (&e.kind, e.listed) {
            (SourceKind::File, Some(m)) => m.size,
            _ => 0,
        };
        let stripes = match size >= STRIPE_MIN {
            true => proto::plan_stripes(size, streams, stripe_align(opts.chunk)),
            false => Vec::new(),
        };
        let checksum = match opts.checksum && !stripes.is_empty() {
            true => source::hash_file(&e.path).ok(),
            false => None,
        };
        if stripes.is_empty() || (opts.checksum && checksum.is_none()) {
            jobs.push(Job::Whole(i));
            continue;
        }
        let track = Arc::new(FileTrack::new(size, checksum, stripes.clone()));
        for stripe in stripes {
            let track = track.clone();
            let stream = stripe.index;
            jobs.push(Job::Part(
                i,
                StripeJob {
                    stripe,
                    track,
                    stream,
                },
            ));
        }
    }
    jobs
}

/// What a stream tells the thread that reports progress.
enum Event {
    Start(usize),
    Bytes(usize, u16, u64),
    /// Bytes of a small file sent whole while a later job was being sent.
    Small(String, u64),
    Done(FileReport),
}

/// Sends `entries` over up to `opts.streams` streams: `first` opens the session, `connect(i)`
/// makes the connection of stream `i` (1..), which joins it. With one stream (asked or granted)
/// this is [`send`](super::send). The result is as for `send`. A stream whose connection is
/// lost hands its work to the others (the report's `lost` names it); a stream that fails
/// otherwise, or the last one lost, ends the transfer with its error once the other streams
/// have finished their jobs.
pub fn send_streams<L: Link>(
    first: &mut L,
    connect: &(dyn Fn(u16) -> Result<L> + Sync),
    entries: &[SourceEntry],
    opts: &SenderOptions,
    progress: &mut dyn FnMut(Progress<'_>),
) -> std::result::Result<SessionReport, SessionError> {
    block_on(send_streams_async(first, connect, entries, opts, progress))
}

/// [`send_streams`] on a link whose waits are awaited.
pub(crate) async fn send_streams_async<L: Link, C, P>(
    first: &mut L,
    connect: &C,
    entries: &[SourceEntry],
    opts: &SenderOptions,
    progress: &mut P,
) -> std::result::Result<SessionReport, SessionError> where
    C: Connect<L> + ?Sized,
    P: FnMut(Progress<'_>) + ?Sized,
{
    let mut report = SessionReport::default();
    let r = send_streams_into_async(first, connect, entries, opts, &mut report, progress).await;
    report.ended(r)
}

/// [`send_streams`], recording into `report` as it goes (the C API's and the tool's form).
pub fn send_streams_into<L: Link>(
    first: &mut L,
    connect: &(dyn Fn(u16) -> Result<L> + Sync),
    entries: &[SourceEntry],
    opts: &SenderOptions,
    report: &mut SessionReport,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<()> {
    block_on(send_streams_into_async(first, connect, entries, opts, report, progress))
}

/// [`send_streams_into`] on a link whose waits are awaited.
pub(crate) async fn send_streams_into_async<L: Link, C, P>(
    first: &mut L,
    connect: &C,
    entries: &[SourceEntry],
    opts: &SenderOptions,
    report: &mut SessionReport,
    progress: &mut P,
) -> Result<()> where
    C: Connect<L> + ?Sized,
    P: FnMut(Progress<'_>) + ?Sized,
{
    opts.check()?;
    let nonce = challenge(first, opts).await.map_err(|e| stalled(e, 0, first))?;
    // A dry run moves no data: one stream asks the receiver about every entry.
    if opts.streams <= 1 || opts.dry_run {
        return send_entries(first, entries, opts, &nonce, report, progress).await
            .map_err(|e| stalled(e, 0, first));
    }
    let auth = opts.token.as_ref().map(|t| proto::auth_answer(t, &nonce));
    let open = Open {
        streams: opts.streams.min(proto::MAX_STREAMS),
        auth,
    };
    send_msg(first, &Msg::Open(open.clone())).await?;
    let session = match recv_ctl(first).await? {
        Msg::Session(s) if s.index == 0 => s,
        Msg::Refuse { reason, message } | Msg::Err { reason, message } => {
            return Err(peer_err(reason, &message))
        }
        other => return Err(Error::Protocol(format!("expected SESSION, got {other:?}"))),
    };
    tracing::debug!(target: PHASE, "stream 0: SESSION, {} streams granted", session.streams);
    progress(Progress::Streams {
        asked: open.streams,
        granted: session.streams,
    });
    if session.streams <= 1 {
        return send_entries(first, entries, opts, &nonce, report, progress).await
            .map_err(|e| stalled(e, 0, first));
    }
    let (tx, rx) = flume::unbounded::<Event>();
    let jobs = plan(entries, session.streams, opts);
    let queue = Queue::new(jobs, session.streams, opts.hooks().lag_stream);
    let all = Streams {
        connect,
        id: session.id,
        queue: &queue,
        entries,
        opts,
        nonce,
    };
    let mut streams = vec![stream(Some(first), 0, &all, tx.clone())];
    for i in 1..session.streams {
        streams.push(stream(None, i, &all, tx.clone()));
    }
    drop(tx);
    let results: Vec<_> = L::run_streams(streams, relay(rx, entries, progress))
        .await
        .into_iter()
        .map(|r| {
            r.unwrap_or_else(|_| {
                let e = Error::refused(Reason::Internal, "a stream's thread panicked");
                (SessionReport::default(), Err(e))
            })
        })
        .collect();
    let mut first_err = None;
    let mut data = 0f64;
    let first_ok = results
        .first()
        .is_some_and(|(r, res)| res.is_ok() && r.lost.is_empty());
    for (r, res) in results {
        data = data.max(r.data_seconds);
        report.merge(r);
        if let Err(e) = res {
            first_err.get_or_insert(e);
        }
    }
    report.data_seconds = data;
    // With --delete, stream 0 deletes once every stream has finished, then ends with DONE.
    if opts.delete && first_ok {
        if first_err.is_none() {
            if let Err(e) = delete_extras(first, entries, opts, report, progress).await {
                first_err = Some(e);
            }
        } else {
            report.delete_skipped += 1;
            let why = "a stream failed: nothing is deleted";
            progress(Progress::NotDeleting { dir: "", why });
        }
        send_done(first).await;
    }
    match first_err {
        // Every stream was lost: name them all.
        Some(e) if is_lost(&e) && report.lost.len() > 1 => {
            let lost: Vec<String> = report
                .lost
                .iter()
                .map(|l| {
                    format!(
                        "stream {} ({} to {}): {}",
                        l.stream, l.device, l.peer, l.error
                    )
                })
                .collect();
            Err(Error::Connection(format!(
                "every stream of the transfer was lost: {}",
                lost.join("; ")
            )))
        }
        Some(e) => Err(e),
        None => report.result("delivered"),
    }
}

/// What makes the connection of stream `i` (1..) of a session with several streams.
pub(crate) trait Connect<L>: Sync {
    /// Connects stream `i`.
    fn connect(&self, i: u16) -> impl Future<Output = Result<L>> + Send;
}

impl<L: Send, F: Fn(u16) -> Result<L> + Sync + ?Sized> Connect<L> for F {
    async fn connect(&self, i: u16) -> Result<L> {
        self(i)
    }
}

/// What the streams of a session share.
struct Streams<'a, C: ?Sized> {
    connect: &'a C,
    id: proto::SessionId,
    queue: &'a Queue,
    entries: &'a [SourceEntry],
    opts: &'a SenderOptions,
    /// Stream 0's CHALLENGE nonce.
    nonce: Digest,
}

/// Stream `i` of a session: stream 0 on `first`; another connects, joins, sends its jobs and
/// closes its connection. Its report, and how it ended.
async fn stream<L: Link, C: Connect<L> + ?Sized>(
    first: Option<&mut L>,
    i: u16,
    all: &Streams<'_, C>,
    tx: flume::Sender<Event>,
) -> (SessionReport, Result<()>) {
    let Streams {
        connect,
        id,
        queue,
        entries,
        opts,
        nonce,
    } = all;
    if let Some(first) = first {
        return work(first, 0, nonce, queue, entries, opts, &tx).await;
    }
    let joined = match connect.connect(i).await {
        Ok(mut ep) => {
            tracing::debug!(target: PHASE, "stream {i}: connected");
            match join(&mut ep, *id, i, opts).await {
                Ok(n) => {
                    tracing::debug!(target: PHASE, "stream {i}: joined");
                    Ok((ep, n))
                }
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    };
    queue.settle(i, joined.is_ok());
    match joined {
        Ok((mut ep, n)) => {
            let r = work(&mut ep, i, &n, queue, entries, opts, &tx).await;
            if let Err(e) = ep.close().await {
                tracing::debug!("closing stream {i}: {e}");
            }
            r
        }
        // The other streams take its jobs: the transfer goes on with fewer.
        Err(e) => {
            tracing::warn!("stream {i} could not join the session: {e}");
            (SessionReport::default(), Ok(()))
        }
    }
}

/// Joins the session on a further connection; returns its CHALLENGE nonce.
async fn join<L: Link>(
    ep: &mut L,
    id: proto::SessionId,
    index: u16,
    opts: &SenderOptions,
) -> Result<Digest> {
    let nonce = challenge(ep, opts).await?;
    let auth = opts.token.as_ref().map(|t| proto::auth_answer(t, &nonce));
    send_msg(ep, &Msg::Join(Join { id, index, auth })).await?;
    match recv_ctl(ep).await? {
        Msg::Session(s) if s.id == id && s.index == index => Ok(nonce),
        Msg::Refuse { reason, message } | Msg::Err { reason, message } => {
            Err(peer_err(reason, &message))
        }
        other => Err(Error::Protocol(format!(
            "expected SESSION answering JOIN, got {other:?}"
        ))),
    }
}

/// One stream: takes jobs until there are none, then DONE. Returns its report and result. A
/// stream whose connection is lost ([`is_lost`]) hands what it held back to the queue: its
/// result is then `Ok` and its report names it among the lost, unless no stream is left to
/// take its work.
async fn work<L: Link>(
    ep: &mut L,
    me: u16,
    nonce: &Digest,
    queue: &Queue,
    entries: &[SourceEntry],
    opts: &SenderOptions,
    tx: &flume::Sender<Event>,
) -> (SessionReport, Result<()>) {
    let mut report = SessionReport::default();
    let mut st = StreamState::new(opts, *nonce);
    st.session = Some(&queue.progress);
    st.retake = true;
    // Each stream takes an even share of --bwlimit.
    st.pace = opts
        .bwlimit
        .map(|r| Pacer::new(r / u64::from(queue.streams.max(1))));
    let mut pipe = Pipe::new(ep);
    // The entry of each number the pipe gave, and the job being sent.
    let mut piped: Vec<usize> = Vec::new();
    let mut current: Option<Job> = None;
    let small = |p: Progress<'_>| {
        let ev = match p {
            Progress::Bytes {
                name, file_done, ..
            } => Event::Small(name.to_string(), file_done),
            Progress::FileDone(f) => Event::Done(f.clone()),
            _ => return,
        };
        let _ = tx.send(ev);
    };
    let res: Result<()> = async {
        loop {
            let (job, again) = match queue.next(me, pipe.in_flight()) {
                Next::Job(job, again) => (job, again),
                Next::Drain => {
                    drain(ep, &st, &mut pipe, &mut report, &mut { small }).await?;
                    continue;
                }
                Next::Done => break,
                Next::Wait(woken) => {
                    L::wait_woken(woken, RECHECK).await;
                    continue;
                }
            };
            current = Some(job.clone());
            let (i, stripe) = match job {
                Job::Whole(i) => (i, None),
                Job::Part(i, s) => (i, Some(StripeJob { stream: me, ..s })),
            };
            let index = stripe.as_ref().map_or(0, |s| s.stripe.index);
            let mut events = |p: Progress<'_>| {
                let ev = match p {
                    Progress::FileStart { .. } => Event::Start(i),
                    Progress::Bytes {
                        name, file_done, ..
                    } if name != entries[i].name.as_str() => {
                        Event::Small(name.to_string(), file_done)
                    }
                    Progress::Bytes { file_done, .. } => Event::Bytes(i, index, file_done),
                    Progress::FileDone(f) => Event::Done(f.clone()),
                    _ => return,
                };
                let _ = tx.send(ev);
            };
            let part = stripe.as_ref().map_or(Part::Whole, Part::Stripe);
            let before = pipe.count();
            (st.again_from, st.sent_to) = (again, 0);
            send_entry(
                ep,
                &mut st,
                &mut pipe,
                &entries[i],
                part,
                &mut report,
                &mut events,
            ).await?;
            if pipe.count() > before {
                piped.push(i);
            }
            current = None;
            queue.recorded();
        }
        // Stream 0 of a --delete ends the session later (`send_streams`).
        match me == 0 && opts.delete {
            true => drain(ep, &st, &mut pipe, &mut report, &mut { small }).await,
            false => finish(ep, &st, &mut pipe, &mut report, &mut { small }).await,
        }
    }
    .await;
    report.resent += st.resent;
    let res = match res {
        Err(e) if is_lost(&e) => {
            let e = stalled(e, me, ep);
            let mut back: Handback = current
                .take()
                .map(|j| (j, st.sent_to))
                .into_iter()
                .collect();
            for seq in pipe.abandon(&mut report) {
                if let Some(&i) = usize::try_from(seq).ok().and_then(|k| piped.get(k)) {
                    back.push((Job::Whole(i), 0));
                }
            }
            let handed = back.len() as u64;
            let lost = LostStream {
                stream: me,
                device: ep.device_name(),
                peer: ep.peer_name(),
                error: e.to_string(),
                handed_back: handed,
            };
            report.lost.push(lost);
            match queue.lose(me, back) {
                None => {
                    tracing::warn!(
                        "stream {me} ({} to {}) was lost, the other streams take over its {handed} \
                         jobs: {e}",
                        ep.device_name(),
                        ep.peer_name()
                    );
                    Ok(())
                }
                // The last stream: what it held fails with it.
                Some(back) => {
                    for (k, (job, _)) in back.into_iter().enumerate() {
                        let entry = match &job {
                            Job::Whole(i) | Job::Part(i, _) => &entries[*i],
                        };
                        let why = match k < handed as usize {
                            true => e.to_string(),
                            false => "not sent: every stream of the transfer was lost".into(),
                        };
                        let kind = match entry.kind {
                            SourceKind::Dir => proto::EntryKind::Dir,
                            SourceKind::Symlink(_) => proto::EntryKind::Symlink,
                            _ => proto::EntryKind::File,
                        };
                        let name = entry.name.as_str();
                        let f = FileReport::failed(name, 0, Reason::Internal, why).of_kind(kind);
                        match &job {
                            Job::Part(_, s) => Part::Stripe(s).record(&mut report, f, false, None),
                            Job::Whole(_) => report.push(f),
                        }
                    }
                    Err(e)
                }
            }
        }
        Err(e) => {
            tracing::debug!("stream {me} ended early");
            queue.fail(me);
            Err(stalled(e, me, ep))
        }
        Ok(()) => Ok(()),
    };
    (report, res)
}

/// Turns the streams' events into `progress` calls on this thread until every stream ended.
async fn relay<P: FnMut(Progress<'_>) + ?Sized>(
    rx: flume::Receiver<Event>,
    entries: &[SourceEntry],
    progress: &mut P,
) {
    let mut started = vec![false; entries.len()];
    let mut done: HashMap<(usize, u16), u64> = HashMap::new();
    let mut total = 0u64;
    // Disconnected (an error) once every stream has ended.
    while let Ok(ev) = rx.recv_async().await {
        match ev {
            Event::Start(i) => {
                if !std::mem::replace(&mut started[i], true) {
                    let size = entries[i].listed.map_or(0, |m| m.size);
                    progress(Progress::FileStart {
                        name: entries[i].name.as_str(),
                        size,
                    });
                }
            }
            Event::Bytes(i, s, n) => {
                let before = done.insert((i, s), n).unwrap_or(0);
                total += n.saturating_sub(before);
                let file_done = done
                    .iter()
                    .filter(|((j, _), _)| *j == i)
                    .map(|(_, n)| n)
                    .sum();
                progress(Progress::Bytes {
                    name: entries[i].name.as_str(),
                    file_done,
                    total_done: total,
                });
            }
            Event::Small(name, n) => {
                total += n;
                progress(Progress::Bytes {
                    name: &name,
                    file_done: n,
                    total_done: total,
                });
            }
            Event::Done(f) => progress(Progress::FileDone(&f)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripes_start_on_the_chunk_grid() {
        assert_eq!(stripe_align(4096), 1 << 20);
        assert_eq!(stripe_align(1 << 20), 1 << 20);
        assert_eq!(stripe_align(4 << 20), 4 << 20);
        assert_eq!(stripe_align(3 << 20), 3 << 20);
        assert_eq!(stripe_align(3 << 19), 3 << 20);
        assert_eq!(stripe_align(4097), STRIPE_ALIGN, "too large a multiple");
        for c in [4096u32, 65536, 3 << 19, 4 << 20, 8 << 20] {
            assert_eq!(stripe_align(c) % u64::from(c), 0);
            assert_eq!(stripe_align(c) % STRIPE_ALIGN, 0);
        }
    }

    /// A directory of `n` sparse files of `size` bytes, listed.
    fn tree(n: usize, size: u64) -> (tempfile::TempDir, Vec<SourceEntry>) {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("t");
        std::fs::create_dir(&root).unwrap();
        for i in 0..n {
            let f = std::fs::File::create(root.join(format!("f{i:04}"))).unwrap();
            f.set_len(size).unwrap();
        }
        let entries = source::walk(&[root]).unwrap();
        (t, entries)
    }

    #[test]
    fn small_files_take_one_stream_whatever_their_total() {
        // 200 files of 64 KiB: 12.5 MiB in all, over STRIPE_MIN, all of them inline.
        let (_t, small) = tree(200, proto::INLINE_MAX);
        const { assert!(200 * proto::INLINE_MAX > STRIPE_MIN) };
        assert_eq!(default_streams(&small, 1), 1);
        // Just over the inline limit they go through the ring, and their total counts.
        let (_t, ring) = tree(200, proto::INLINE_MAX + 1);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let want = cpus.min(usize::from(DEFAULT_STREAMS_PER_DEVICE)) as u16;
        assert_eq!(default_streams(&ring, 1), want.max(1));
        // One big file is striped whatever else there is.
        let (_t, big) = tree(1, STRIPE_MIN);
        assert_eq!(default_streams(&big, 1), want.max(1));
    }
}
