//! Sender: the jobs of a transfer over several streams, and who takes which. Entries go to
//! whichever stream is free; stripe *i* goes to stream *i* mod the streams (its home) unless
//! that stream could not join or was lost. A stream that is lost hands back what it held (the
//! part it was sending, the entries in flight without a verdict): the streams left take them
//! over. A stream with nothing left ends only once no other stream is still working, since a
//! working stream may yet be lost and hand work back.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use event_listener::{Event, EventListener};
use std::time::{Duration, Instant};

use super::part::{FileTrack, StripeJob};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A stream's unit of work.
#[derive(Debug, Clone)]
pub(super) enum Job {
    /// A whole entry (index into the entries).
    Whole(usize),
    /// One stripe of a file entry.
    Part(usize, StripeJob),
}

impl Job {
    /// The entry, and the stripe if it is one: what identifies the job.
    fn key(&self) -> (usize, Option<u16>) {
        match self {
            Job::Whole(i) => (*i, None),
            Job::Part(i, s) => (*i, Some(s.stripe.index)),
        }
    }
}

/// What a stream was doing, as the others see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Busy {
    /// Holding a job, or entries in flight: it may yet hand work back.
    Working,
    /// Nothing held; waiting for a job or for the others to end.
    Idle,
    /// Could not join, or was lost.
    Dead,
}

/// The streams' jobs (see the module's docs). At most as many striped files are unfinished at
/// once as there are streams (the receiver ends a session with more than twice that: "Streams"
/// in `docs/file-protocol.md`): a stream that would start another waits for one to finish,
/// taking stripes of those already started meanwhile.
pub(super) struct Queue {
    jobs: Mutex<Jobs>,
    /// Signalled when a stream settles, fails, goes idle or records a verdict.
    settled: Event,
    pub(super) streams: u16,
    /// The session's progress, counted by every stream: a stream's waits go on while it moves
    /// (a stream waiting its turn for the link or the receiver is not stalled; see
    /// `budget::wait_on!`).
    pub(super) progress: AtomicU64,
    /// Test-only (`SendHooks::lag_stream`): the stream that starts late, and until when.
    lag: Option<(u16, Instant)>,
}

/// The longest a lagging stream (`SendHooks::lag_stream`) waits.
const LAG_MAX: Duration = Duration::from_secs(60);

/// How often a stream waiting for a job looks again without being woken.
pub(super) const RECHECK: Duration = Duration::from_millis(100);

pub(super) struct Jobs {
    /// The jobs not taken yet.
    left: VecDeque<Job>,
    /// Each stream's state (every stream starts working: it has not settled).
    busy: Vec<Busy>,
    /// The streams settled (joined or failed to; stream 0 is).
    settled: u16,
    /// The striped files started (a stripe taken): entry and tracker, until every stripe has
    /// its verdict.
    open: Vec<(usize, Arc<FileTrack>)>,
    /// Of jobs handed back by a lost stream: the bytes of each it had sent from its start.
    again: HashMap<(usize, Option<u16>), u64>,
}

/// What [`Jobs::pick`] found for a stream.
#[derive(Debug)]
pub(super) enum Pick {
    Job(Job),
    /// Nothing it may take yet.
    Wait,
    /// Nothing left for it: first take the answers of its entries in flight, then ask again.
    Drain,
    /// Nothing left for it, and no other stream can hand any back.
    Done,
}

/// What [`Queue::next`] gives a stream.
#[derive(Debug)]
pub(super) enum Next {
    /// A job, with the bytes of it a lost stream had sent (taken over).
    Job(Job, Option<u64>),
    /// Nothing left for it: first take the answers of its entries in flight, then ask again.
    Drain,
    /// Nothing left for it.
    Done,
    /// Nothing for it yet: wait until woken (a stream settled, was lost, went idle or recorded
    /// a verdict), at most [`RECHECK`], then ask again.
    Wait(EventListener),
}

/// What a lost stream hands back: its jobs and, per job, the bytes it had sent of it.
pub(super) type Handback = Vec<(Job, u64)>;

impl Queue {
    /// The queue of `jobs` for `streams` streams (stream 0 settled).
    pub(super) fn new(jobs: Vec<Job>, streams: u16, lag_stream: Option<u16>) -> Queue {
        Queue {
            jobs: Mutex::new(Jobs::new(jobs, streams, 1)),
            settled: Event::new(),
            streams,
            progress: AtomicU64::new(0),
            lag: lag_stream.map(|i| (i, Instant::now() + LAG_MAX)),
        }
    }

    /// Stream `i` has joined (`ok`) or given up.
    pub(super) fn settle(&self, i: u16, ok: bool) {
        let mut g = lock(&self.jobs);
        if !ok {
            g.busy[usize::from(i)] = Busy::Dead;
        }
        g.settled += 1;
        drop(g);
        self.settled.notify(usize::MAX);
    }

    /// Stream `i` is lost: the streams left take over `back`. Returns `back` and every job
    /// not taken when there is no stream left (the transfer then fails with what was lost).
    pub(super) fn lose(&self, i: u16, mut back: Handback) -> Option<Handback> {
        let mut g = lock(&self.jobs);
        g.busy[usize::from(i)] = Busy::Dead;
        if g.busy.iter().all(|b| *b == Busy::Dead) {
            back.extend(g.left.drain(..).map(|j| (j, 0)));
            return Some(back);
        }
        for (job, sent) in back.into_iter().rev() {
            if sent > 0 {
                g.again.insert(job.key(), sent);
            }
            g.left.push_front(job);
        }
        drop(g);
        self.settled.notify(usize::MAX);
        None
    }

    /// Stream `i` failed for good (not lost: the transfer ends with its error).
    pub(super) fn fail(&self, i: u16) {
        lock(&self.jobs).busy[usize::from(i)] = Busy::Dead;
        self.settled.notify(usize::MAX);
    }

    /// A stream recorded a verdict: one waiting to start a striped file looks again.
    pub(super) fn recorded(&self) {
        self.settled.notify(usize::MAX);
    }

    /// The next job for stream `me` (`in_flight`: it has entries whose answers it has not
    /// taken), with the bytes a lost stream had sent of it: an entry, or one of its stripes;
    /// once it has none left (and every stream has settled, so that the session outlives every
    /// JOIN), the stripes of streams that could not join or were lost.
    pub(super) fn next(&self, me: u16, in_flight: bool) -> Next {
        // Listening before looking: a change after the look wakes the listener.
        let woken = self.settled.listen();
        let mut g = lock(&self.jobs);
        let lagging = self
            .lag
            .is_some_and(|(i, until)| i == me && Instant::now() < until);
        match g.pick(me, self.streams, self.lag.is_none(), lagging, in_flight) {
            Pick::Job(j) => {
                let again = g.again.remove(&j.key());
                Next::Job(j, again)
            }
            Pick::Done => {
                drop(g);
                self.settled.notify(usize::MAX);
                Next::Done
            }
            Pick::Drain => Next::Drain,
            // Woken by `recorded`, `settle`, `lose` or a stream going idle.
            Pick::Wait => Next::Wait(woken),
        }
    }
}

impl Jobs {
    pub(super) fn new(left: Vec<Job>, streams: u16, settled: u16) -> Jobs {
        Jobs {
            left: VecDeque::from(left),
            busy: vec![Busy::Working; usize::from(streams)],
            settled,
            open: Vec::new(),
            again: HashMap::new(),
        }
    }

    /// The next job for stream `me` of `streams` (see [`Queue::next`]): with `capped`, a
    /// stripe of a file not started yet only while fewer than `streams` striped files are
    /// unfinished; with `lagging` (test-only), nothing while jobs of other live streams (or
    /// whole entries) are left.
    pub(super) fn pick(
        &mut self,
        me: u16,
        streams: u16,
        capped: bool,
        lagging: bool,
        in_flight: bool,
    ) -> Pick {
        let Jobs {
            left,
            busy,
            open,
            settled,
            ..
        } = self;
        let dead = |h: u16| busy.get(usize::from(h)) == Some(&Busy::Dead);
        let home = |j: &Job| match j {
            Job::Whole(_) => None,
            Job::Part(_, s) => Some(s.stripe.index % streams),
        };
        let mine = |j: &Job| home(j).is_none_or(|h| h == me || dead(h));
        open.retain(|(_, t)| !t.ended());
        let full = capped && open.len() >= usize::from(streams);
        let startable = |j: &Job| match j {
            Job::Whole(_) => true,
            Job::Part(i, _) => !full || open.iter().any(|(o, _)| o == i),
        };
        // Lagging: while a job of another stream still alive is left.
        let others = |j: &Job| home(j).is_none_or(|h| h != me && !dead(h));
        let found = match lagging && left.iter().any(others) {
            true => None,
            false => left.iter().position(|j| mine(j) && startable(j)),
        };
        if let Some(job) = found.and_then(|k| left.remove(k)) {
            if let Job::Part(i, s) = &job {
                if !open.iter().any(|(o, _)| o == i) {
                    open.push((*i, s.track.clone()));
                }
            }
            busy[usize::from(me)] = Busy::Working;
            return Pick::Job(job);
        }
        if left.iter().any(mine) || *settled < streams {
            return Pick::Wait;
        }
        if in_flight {
            return Pick::Drain;
        }
        busy[usize::from(me)] = Busy::Idle;
        match busy.contains(&Busy::Working) {
            true => Pick::Wait,
            false => Pick::Done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xfer::file::proto::{self, Reason};
    use crate::xfer::file::report::FileReport;
    use crate::xfer::file::send::streams::STRIPE_ALIGN;

    /// Jobs of `files` striped files of 2 stripes each, for 2 streams, all settled.
    fn striped(files: usize) -> (Jobs, Vec<Arc<FileTrack>>) {
        let stripes = proto::plan_stripes(16 << 20, 2, STRIPE_ALIGN);
        let mut left = Vec::new();
        let mut tracks = Vec::new();
        for i in 0..files {
            let track = Arc::new(FileTrack::new(16 << 20, None, stripes.clone()));
            tracks.push(track.clone());
            for &stripe in &stripes {
                let (track, stream) = (track.clone(), stripe.index);
                left.push(Job::Part(
                    i,
                    StripeJob {
                        stripe,
                        track,
                        stream,
                    },
                ));
            }
        }
        (Jobs::new(left, 2, 2), tracks)
    }

    /// A queue of `files` striped files of 2 stripes each, for 2 streams, all settled.
    fn queue(files: usize) -> (Queue, Vec<Arc<FileTrack>>) {
        let (jobs, tracks) = striped(files);
        let q = Queue {
            jobs: Mutex::new(jobs),
            settled: Event::new(),
            streams: 2,
            progress: AtomicU64::new(0),
            lag: None,
        };
        (q, tracks)
    }

    fn taken(p: Pick) -> (usize, u16) {
        match p {
            Pick::Job(Job::Part(i, s)) => (i, s.stripe.index),
            p => panic!("expected a stripe, got {p:?}"),
        }
    }

    fn end(t: &FileTrack, index: u16) {
        let s = proto::plan_stripes(16 << 20, 2, STRIPE_ALIGN)[usize::from(index)];
        t.end(
            &s,
            FileReport::failed("f", 0, Reason::Internal, "x".into()),
            false,
            None,
        );
    }

    #[test]
    fn a_stream_starts_no_more_striped_files_than_there_are_streams_unfinished() {
        let (mut jobs, tracks) = striped(3);
        // Stream 0 runs ahead: its stripes of files 0 and 1, then it must wait.
        assert_eq!(taken(jobs.pick(0, 2, true, false, false)), (0, 0));
        assert_eq!(taken(jobs.pick(0, 2, true, false, false)), (1, 0));
        assert!(matches!(jobs.pick(0, 2, true, false, false), Pick::Wait));
        // Stream 1 takes stripes of the files started (not a new one).
        assert_eq!(taken(jobs.pick(1, 2, true, false, false)), (0, 1));
        end(&tracks[0], 0);
        assert!(
            matches!(jobs.pick(0, 2, true, false, false), Pick::Wait),
            "file 0 not ended"
        );
        end(&tracks[0], 1);
        assert_eq!(
            taken(jobs.pick(0, 2, true, false, false)),
            (2, 0),
            "file 0 ended"
        );
        // Uncapped (the test-only greed), stream 0 would have gone on.
        let (mut greedy, _) = striped(3);
        for i in 0..3 {
            assert_eq!(taken(greedy.pick(0, 2, false, false, false)), (i, 0));
        }
    }

    #[test]
    fn a_waiting_stream_takes_a_dead_streams_stripe_of_a_started_file() {
        let (mut jobs, _tracks) = striped(3);
        assert_eq!(taken(jobs.pick(0, 2, true, false, false)), (0, 0));
        assert_eq!(taken(jobs.pick(0, 2, true, false, false)), (1, 0));
        jobs.busy[1] = Busy::Dead;
        // Files 0 and 1 are unfinished: their stripes 1 (stream 1's, dead) come first.
        assert_eq!(taken(jobs.pick(0, 2, true, false, false)), (0, 1));
        assert_eq!(taken(jobs.pick(0, 2, true, false, false)), (1, 1));
        assert!(matches!(jobs.pick(0, 2, true, false, false), Pick::Wait));
    }

    #[test]
    fn a_lagging_stream_waits_while_others_have_jobs() {
        let (mut jobs, _tracks) = striped(1);
        assert!(matches!(jobs.pick(1, 2, false, true, false), Pick::Wait));
        assert_eq!(
            taken(jobs.pick(0, 2, false, false, false)),
            (0, 0),
            "the others do not lag"
        );
        assert_eq!(taken(jobs.pick(1, 2, false, true, false)), (0, 1));
        assert!(
            matches!(jobs.pick(1, 2, false, true, false), Pick::Wait),
            "stream 0 works on: it may yet be lost"
        );
        assert!(matches!(jobs.pick(0, 2, false, false, true), Pick::Drain));
        assert!(matches!(jobs.pick(0, 2, false, false, false), Pick::Done));
        assert!(matches!(jobs.pick(1, 2, false, true, false), Pick::Done));
    }

    #[test]
    fn a_lost_streams_work_goes_to_a_stream_that_has_none_left() {
        let (q, _tracks) = queue(1);
        let job = |n: Next| match n {
            Next::Job(j, again) => (j, again),
            n => panic!("expected a job, got {n:?}"),
        };
        let (j0, _) = job(q.next(0, false));
        let (j1, again) = job(q.next(1, false));
        assert_eq!(
            (j0.key(), j1.key(), again),
            ((0, Some(0)), (0, Some(1)), None)
        );
        // Stream 1 is lost 3 MiB into its stripe: stream 0 takes it over, with that count.
        assert!(q.lose(1, vec![(j1, 3 << 20)]).is_none());
        let (j, again) = job(q.next(0, false));
        assert_eq!((j.key(), again), ((0, Some(1)), Some(3 << 20)));
        assert!(matches!(q.next(0, true), Next::Drain));
        assert!(
            matches!(q.next(0, false), Next::Done),
            "nothing left, no one working"
        );
        // The last stream lost keeps what it holds: nobody is left to take it.
        let back = q.lose(0, vec![(j, 0)]).expect("handed back to the caller");
        assert_eq!(back.len(), 1);
        // With what nobody took yet.
        let (q, _tracks) = queue(2);
        let (j, _) = job(q.next(0, false));
        assert!(q.lose(1, Vec::new()).is_none());
        let back = q.lose(0, vec![(j, 0)]).expect("the last stream");
        assert_eq!(back.len(), 4, "its stripe and the 3 not taken");
    }
}
