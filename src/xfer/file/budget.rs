//! The receiver's per-session budgets: what keeps one sender from holding a receiver with a
//! stall, a trickle or a stream of refused HELLOs. The per-step deadline of the endpoint bounds
//! each wait; these bound the session:
//!
//! - **idle**: no progress (data bytes received or a file committed) for [`Budgets::idle`];
//!   per stream: a stream of a session with several streams that moves nothing is idle,
//!   whatever its siblings move (they may keep it waiting past a step deadline, not forever);
//! - **rate floor**: fewer than [`Budgets::min_rate`] × [`Budgets::rate_window`] bytes of
//!   progress in a window of [`Budgets::rate_window`] (a committed file counts as
//!   [`FILE_CREDIT`] bytes, so many small files keep a session above the floor); counted over
//!   the whole session (its streams' bytes together);
//! - **refusals**: more than [`Budgets::max_refusals`] refused or failed files.
//!
//! A spent budget is `Error::Refused(Reason::Budget, …)`; the receiver sends it as ERR and ends
//! the session. Refusals are not progress. An answer without data (SKIP, a dry run's answer)
//! is progress once per name: a name answered again in the session is a refusal
//! (`Budget::answered`), so re-sending the HELLO of an existing entry keeps no session alive.

use std::collections::HashSet;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::proto::Reason;
use crate::error::{Error, Result};
use crate::xfer::file::link::Link;

/// Default idle budget: no progress for a minute. A lossy link stalls for seconds, and the
/// sender's own step deadline (10 s by default) ends its side long before.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(60);
/// Default rate floor, bytes per second (64 KiB/s: 1/50 of a 1 %-loss Soft-RoCE link).
pub const DEFAULT_MIN_RATE: u64 = 64 << 10;
/// Default window over which the rate floor is averaged.
pub const DEFAULT_RATE_WINDOW: Duration = Duration::from_secs(30);
/// Default budget of refused or failed files per session.
pub const DEFAULT_MAX_REFUSALS: u32 = 1000;
/// Progress a committed file counts for towards the rate floor (bytes).
pub const FILE_CREDIT: u64 = 64 << 10;
/// Names a stream remembers as answered without data (8 bytes each, hashed): past that many
/// it forgets them and starts over, so a repeat is seen within the last this many answers.
pub const MAX_ANSWERED: usize = 1 << 18;

/// A reading of the coarse monotonic clock (`CLOCK_MONOTONIC_COARSE`, clock_gettime(2): a few
/// milliseconds of resolution). Budgets count seconds, and this clock is read without a system
/// call even where the precise one takes one (an emulated guest without a usable TSC, where a
/// tree of small files read the clock thousands of times a second).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Instant(Duration);

impl Instant {
    pub(crate) fn now() -> Instant {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
        Instant(Duration::new(
            u64::try_from(t.tv_sec).unwrap_or(0),
            u32::try_from(t.tv_nsec).unwrap_or(0),
        ))
    }

    fn saturating_duration_since(self, earlier: Instant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

impl std::ops::Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d))
    }
}

/// The limits; `None` (or a rate of 0) switches one off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Budgets {
    /// End a session without progress for this long.
    pub idle: Option<Duration>,
    /// End a session below this many bytes per second, averaged over `rate_window` (0: off).
    pub min_rate: u64,
    /// The averaging window of `min_rate`.
    pub rate_window: Duration,
    /// End a session after more than this many refused or failed files.
    pub max_refusals: Option<u32>,
}

impl Budgets {
    setters! {
        idle: Option<Duration>,
        min_rate: u64,
        rate_window: Duration,
        max_refusals: Option<u32>,
    }
}

impl Default for Budgets {
    fn default() -> Self {
        Budgets {
            idle: Some(DEFAULT_IDLE),
            min_rate: DEFAULT_MIN_RATE,
            rate_window: DEFAULT_RATE_WINDOW,
            max_refusals: Some(DEFAULT_MAX_REFUSALS),
        }
    }
}

/// A stream's stop flag: raised when another stream takes over its part; the stream's waits
/// then end ([`Stop::error`]) and it lets go of what it holds.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stop(Arc<AtomicBool>);

impl Stop {
    /// Whether it was raised.
    pub(crate) fn raised(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    pub(crate) fn raise(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// What a stopped stream's wait ends with (a lost connection: its part is let go, not
    /// failed).
    pub(crate) fn error() -> Error {
        Error::Connection(
            "another stream of this session took over its part: this one was lost".into(),
        )
    }
}

/// How often a stream with a stop flag looks at it while it waits.
pub(crate) const STOP_SLICE: Duration = Duration::from_millis(250);

/// A session's account against its [`Budgets`].
pub(crate) struct Budget {
    b: Budgets,
    /// The endpoint's own step deadline, restored after each budgeted wait.
    step: Duration,
    last_progress: Instant,
    window_start: Instant,
    window_bytes: u64,
    refusals: u32,
    /// With several streams: the session's progress (bytes of all its streams), shared.
    session: Option<Arc<AtomicU64>>,
    /// Hashes of the names answered without data ([`answered`](Self::answered)).
    answered: HashSet<u64>,
    hasher: std::collections::hash_map::RandomState,
    /// With several streams: this stream's stop flag (another stream took over its part).
    stop: Option<Stop>,
    /// The receiver's cancel flag (`ReceiverOptions::cancel`).
    cancel: Option<Arc<AtomicBool>>,
    /// A wait found the budget spent and took what had arrived instead ([`wait`](Self::wait));
    /// cleared by progress.
    late: bool,
}

impl Budget {
    /// Starts the clocks now; `step` is the endpoint's per-step deadline.
    pub(crate) fn new(b: Budgets, step: Duration) -> Budget {
        let now = Instant::now();
        Budget {
            b,
            step,
            last_progress: now,
            window_start: now,
            window_bytes: 0,
            refusals: 0,
            session: None,
            answered: HashSet::new(),
            hasher: std::collections::hash_map::RandomState::new(),
            stop: None,
            cancel: None,
            late: false,
        }
    }

    /// Counts an answer without data for `name` (SKIP, a dry run's answer): progress the first
    /// time in this stream, a refusal when answered before (an error once over the budget).
    pub(crate) fn answered(&mut self, name: &str) -> Result<()> {
        if self.answered.len() >= MAX_ANSWERED {
            self.answered.clear();
        }
        if self.answered.insert(self.hasher.hash_one(name)) {
            self.progress(FILE_CREDIT);
            Ok(())
        } else {
            self.refused()
        }
    }

    /// Joins the account of a session carried by several streams: the progress of each counts
    /// for all in the rate floor, and lets a stream wait its turn past a step deadline while
    /// the others use the link; its idle budget counts only its own progress.
    pub(crate) fn share(&mut self, session: Arc<AtomicU64>) {
        self.session = Some(session);
    }

    /// The endpoint's step deadline.
    pub(crate) fn step(&self) -> Duration {
        self.step
    }

    /// This stream's stop flag, raised when another stream takes over its part: its waits
    /// then end with [`Stop::error`] (looked at every [`STOP_SLICE`]).
    pub(crate) fn stop_with(&mut self, stop: Stop) {
        self.stop = Some(stop);
    }

    /// A cancel flag: once raised, waits end with [`Error::Cancelled`] (looked at every
    /// [`STOP_SLICE`]).
    pub(crate) fn cancel_with(&mut self, cancel: Arc<AtomicBool>) {
        self.cancel = Some(cancel);
    }

    /// Runs `f` on `ep` with the deadline `left`: in slices of at most [`STOP_SLICE`] when
    /// there is a stop or cancel flag, which ends the wait once raised.
    fn step_once<T, L: Link>(
        &self,
        ep: &mut L,
        left: Duration,
        f: &mut impl FnMut(&mut L) -> Result<T>,
    ) -> Result<T> {
        let end = Instant::now() + left;
        let sliced = self.stop.is_some() || self.cancel.is_some();
        loop {
            if self.stop.as_ref().is_some_and(Stop::raised) {
                return Err(Stop::error());
            }
            if self.cancel.as_ref().is_some_and(|c| c.load(Ordering::Acquire)) {
                return Err(Error::Cancelled);
            }
            let slice = match sliced {
                true => end
                    .saturating_duration_since(Instant::now())
                    .min(STOP_SLICE),
                false => left,
            };
            ep.set_timeout(slice.max(Duration::from_millis(1)));
            let r = f(ep);
            ep.set_timeout(self.step);
            match r {
                Err(Error::Timeout { what, .. }) if self.stop.is_some() && ep.rail_down() => {
                    return Err(rail_down(what));
                }
                Err(e) if e.is_timeout() && sliced && Instant::now() < end => {}
                // A sliced wait times out after all of `left`, as one wait would.
                Err(Error::Timeout { what, .. }) if sliced => {
                    return Err(Error::Timeout { what, after: left })
                }
                r => return r,
            }
        }
    }

    fn session_bytes(&self) -> u64 {
        self.session
            .as_ref()
            .map_or(0, |s| s.load(Ordering::Relaxed))
    }

    fn rate_on(&self) -> bool {
        self.b.min_rate > 0 && !self.b.rate_window.is_zero()
    }

    /// Bytes the window needs.
    fn need(&self) -> u64 {
        let n = u128::from(self.b.min_rate) * self.b.rate_window.as_millis() / 1000;
        u64::try_from(n).unwrap_or(u64::MAX)
    }

    /// Starts a new window once the current one is over and met the floor.
    fn roll(&mut self, now: Instant) {
        if self.rate_on()
            && now >= self.window_start + self.b.rate_window
            && self.window_bytes >= self.need()
        {
            self.window_start = now;
            self.window_bytes = 0;
        }
    }

    /// Records `bytes` of progress (a data chunk, or [`FILE_CREDIT`] for a committed file).
    pub(crate) fn progress(&mut self, bytes: u64) {
        if let Some(s) = &self.session {
            s.fetch_add(bytes, Ordering::Relaxed);
        }
        self.credit(bytes);
    }

    /// Counts `bytes` of this stream's own progress.
    fn credit(&mut self, bytes: u64) {
        self.last_progress = Instant::now();
        self.late = false;
        self.credit_session(bytes);
    }

    /// Counts `bytes` the session's other streams moved: toward the rate floor, not as this
    /// stream's progress (its idle clock runs on).
    fn credit_session(&mut self, bytes: u64) {
        self.roll(Instant::now());
        self.window_bytes = self.window_bytes.saturating_add(bytes);
    }

    /// Counts a refused or failed file; an error once there are more than allowed.
    pub(crate) fn refused(&mut self) -> Result<()> {
        self.refusals = self.refusals.saturating_add(1);
        match self.b.max_refusals {
            Some(max) if self.refusals > max => Err(Error::refused(
                Reason::Budget,
                format!("more than {max} refused or failed files in this session (--max-refusals)"),
            )),
            _ => Ok(()),
        }
    }

    /// When the next budget would be spent without progress.
    fn deadline(&self) -> Option<Instant> {
        let idle = self.b.idle.map(|d| self.last_progress + d);
        let rate = (self.rate_on() && self.window_bytes < self.need())
            .then(|| self.window_start + self.b.rate_window);
        match (idle, rate) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// An error when a budget is spent at `now`.
    pub(crate) fn check(&mut self, now: Instant) -> Result<()> {
        self.roll(now);
        if let Some(idle) = self.b.idle {
            if now >= self.last_progress + idle {
                return Err(Error::refused(
                    Reason::Budget,
                    format!(
                        "no progress (no data, no file committed) for {} s (--idle-timeout)",
                        idle.as_secs_f64()
                    ),
                ));
            }
        }
        if self.rate_on() && now >= self.window_start + self.b.rate_window {
            // `roll` kept the window: it fell short.
            return Err(Error::refused(
                Reason::Budget,
                format!(
                    "{} bytes in {} s, below the floor of {} bytes/s (--min-rate, --rate-window)",
                    self.window_bytes,
                    self.b.rate_window.as_secs_f64(),
                    self.b.min_rate
                ),
            ));
        }
        Ok(())
    }

    /// Runs the blocking step `f` on `ep` with its deadline lowered to the budget's; a step that
    /// times out because a budget is spent returns the budget's error. With a shared session
    /// ([`share`](Self::share)), a step that times out while another stream of the session made
    /// progress is run again (that progress counted toward the rate floor): only a session that
    /// stalls as a whole for a step deadline times out, and a stream idle for its idle budget
    /// is ended, whatever the others move.
    ///
    /// A budget found spent when the wait starts is this side's lateness as much as the
    /// peer's (a registration, a commit or a starved CPU outlasted it while the peer's next
    /// message waited): what has arrived is taken, once until the next progress; a wait that
    /// finds nothing is the budget's error.
    pub(crate) fn wait<T, L: Link>(
        &mut self,
        ep: &mut L,
        mut f: impl FnMut(&mut L) -> Result<T>,
    ) -> Result<T> {
        loop {
            let now = Instant::now();
            if let Err(spent) = self.check(now) {
                if std::mem::replace(&mut self.late, true) {
                    return Err(spent);
                }
                return match self.step_once(ep, Duration::ZERO, &mut f) {
                    Err(e) if e.is_timeout() => Err(spent),
                    r => r,
                };
            }
            let left = self.deadline().map_or(self.step, |d| {
                d.saturating_duration_since(now).min(self.step)
            });
            let seen = self.session_bytes();
            match self.step_once(ep, left, &mut f) {
                Err(e) if e.is_timeout() => {
                    let moved = self.session_bytes().saturating_sub(seen);
                    if moved > 0 {
                        tracing::debug!("waiting on while the session's other streams progress");
                        self.credit_session(moved);
                        continue;
                    }
                    self.check(Instant::now())?;
                    return Err(e);
                }
                r => return r,
            }
        }
    }
}

/// Runs the blocking step `f` on `ep` for one stream of a session. With `session` (the
/// progress of a session carried by several streams, counted by all of them), a step that
/// times out while the session made progress is run again: a stream that waits its turn while
/// the others use the link or the peer goes on waiting, and only a session that stalls as a
/// whole for a step deadline (at most two after its last progress) times out. `f` must leave
/// `ep` usable after a timeout (the endpoint's waits do) and do nothing before its wait that a
/// second run would repeat. The receiver's equivalent is [`Budget::wait`].
pub(crate) fn wait_on<E: Waits, T>(
    ep: &mut E,
    session: Option<&AtomicU64>,
    mut f: impl FnMut(&mut E) -> Result<T>,
) -> Result<T> {
    loop {
        let seen = session.map(|s| s.load(Ordering::Relaxed));
        let r = match session {
            Some(_) => sliced(ep, &mut f),
            None => f(ep),
        };
        match r {
            Err(e) if e.is_timeout() && seen != session.map(|s| s.load(Ordering::Relaxed)) => {
                tracing::debug!("waiting on while the session's other streams progress: {e}");
            }
            r => return r,
        }
    }
}

/// What [`wait_on`] needs of an endpoint: its step deadline, and whether its rail is down.
pub(crate) trait Waits {
    /// The deadline of each wait.
    fn step(&self) -> Duration;
    /// Sets it.
    fn set_step(&mut self, t: Duration);
    /// Whether this side's port is down.
    fn rail_down(&self) -> bool;
}

impl<L: Link> Waits for L {
    fn step(&self) -> Duration {
        self.timeout()
    }
    fn set_step(&mut self, t: Duration) {
        self.set_timeout(t);
    }
    fn rail_down(&self) -> bool {
        Link::rail_down(self)
    }
}

/// Runs `f` on `ep` for one step deadline in slices of at most [`STOP_SLICE`], looking at the
/// port between them: a stream of several whose rail goes down is found out at once, not a
/// step later (its peer, on the other side of that rail, may never answer).
fn sliced<E: Waits, T>(ep: &mut E, f: &mut impl FnMut(&mut E) -> Result<T>) -> Result<T> {
    let step = ep.step();
    let end = Instant::now() + step;
    loop {
        let slice = end
            .saturating_duration_since(Instant::now())
            .min(STOP_SLICE);
        ep.set_step(slice.max(Duration::from_millis(1)));
        let r = f(ep);
        ep.set_step(step);
        match r {
            Err(Error::Timeout { what, .. }) if ep.rail_down() => return Err(rail_down(what)),
            Err(e) if e.is_timeout() && Instant::now() < end => {}
            Err(Error::Timeout { what, .. }) => return Err(Error::Timeout { what, after: step }),
            r => return r,
        }
    }
}

/// The error of a wait for `what` whose rail went down meanwhile.
fn rail_down(what: &str) -> Error {
    Error::Connection(format!(
        "the port of its device went down (its rail is gone) while waiting for {what}"
    ))
}

/// Counts `n` steps of progress of a session carried by several streams (see [`wait_on`]).
pub(crate) fn moved(session: Option<&AtomicU64>, n: u64) {
    if let Some(s) = session {
        s.fetch_add(n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budgets(idle: u64, rate: u64, window: u64, refusals: u32) -> Budgets {
        Budgets {
            idle: Some(Duration::from_secs(idle)),
            min_rate: rate,
            rate_window: Duration::from_secs(window),
            max_refusals: Some(refusals),
        }
    }

    impl Waits for u32 {
        fn step(&self) -> Duration {
            Duration::ZERO
        }
        fn set_step(&mut self, _: Duration) {}
        fn rail_down(&self) -> bool {
            false
        }
    }

    fn timeout() -> Error {
        Error::Timeout {
            what: "a message from the peer",
            after: Duration::from_secs(1),
        }
    }

    #[test]
    fn a_stream_waits_on_only_while_its_session_moves() {
        let session = AtomicU64::new(0);
        // Alone (no session): the first timeout is the result.
        let mut calls = 0;
        let r: Result<()> = wait_on(&mut calls, None, |c| {
            *c += 1;
            Err(timeout())
        });
        assert!(r.unwrap_err().is_timeout());
        assert_eq!(calls, 1);
        // Three steps time out while another stream moves, then the session stalls: four runs,
        // and the timeout of the last.
        let mut calls = 0;
        let r: Result<()> = wait_on(&mut calls, Some(&session), |c| {
            *c += 1;
            if *c <= 3 {
                moved(Some(&session), 1);
            }
            Err(timeout())
        });
        assert!(r.unwrap_err().is_timeout());
        assert_eq!((calls, session.load(Ordering::Relaxed)), (4, 3));
        // A step that ends (with a value or another error) ends the wait, moving or not.
        let mut calls = 0;
        let r = wait_on(&mut calls, Some(&session), |c| {
            *c += 1;
            moved(Some(&session), 1);
            match *c {
                1 => Err(timeout()),
                _ => Ok(*c),
            }
        });
        assert_eq!((r.unwrap(), calls), (2, 2));
        let r: Result<()> = wait_on(&mut 0u32, Some(&session), |_| {
            moved(Some(&session), 1);
            Err(Error::Connection("gone".into()))
        });
        assert!(!r.unwrap_err().is_timeout());
    }

    #[test]
    fn a_spent_budget_takes_what_had_arrived_once_until_the_next_progress() {
        use crate::xfer::file::link::{mem::MemLink, Link};
        let (mut peer, mut ep) = MemLink::pair(8, 8);
        let mut b = Budget::new(budgets(10, 0, 30, 5), Duration::from_secs(10));
        let late = |b: &mut Budget| {
            b.last_progress = Instant(Instant::now().0.saturating_sub(Duration::from_secs(11)));
        };
        let next = |b: &mut Budget, ep: &mut MemLink| {
            b.wait(ep, |ep| ep.recv_with(|m| m.data.to_vec()))
        };
        // This side was busy past its idle budget while the peer's messages arrived.
        late(&mut b);
        for m in [&b"one"[..], b"two", b"three"] {
            peer.send(m).unwrap();
        }
        assert_eq!(next(&mut b, &mut ep).unwrap(), b"one");
        // Once: without progress since, the next wait is the budget's, though a message waits.
        let e = next(&mut b, &mut ep).unwrap_err();
        assert_eq!(e.reason(), Some(Reason::Budget), "{e}");
        // Progress renews it.
        b.progress(1);
        late(&mut b);
        assert_eq!(next(&mut b, &mut ep).unwrap(), b"two");
        b.progress(1);
        assert_eq!(next(&mut b, &mut ep).unwrap(), b"three");
        // Nothing waiting: the budget's error, without a step's wait (10 s).
        late(&mut b);
        let t = std::time::Instant::now();
        let e = next(&mut b, &mut ep).unwrap_err();
        assert_eq!(e.reason(), Some(Reason::Budget), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    }

    #[test]
    fn idle_is_spent_without_progress_and_reset_by_it() {
        let mut b = Budget::new(budgets(10, 0, 30, 5), Duration::from_secs(10));
        let t0 = b.last_progress;
        assert!(b.check(t0 + Duration::from_secs(9)).is_ok());
        let e = b.check(t0 + Duration::from_secs(10)).unwrap_err();
        assert_eq!(e.reason(), Some(Reason::Budget));
        assert!(e.to_string().contains("--idle-timeout"), "{e}");
        b.progress(1);
        let t1 = b.last_progress;
        assert!(b.check(t1 + Duration::from_secs(9)).is_ok());
        assert_eq!(b.deadline(), Some(t1 + Duration::from_secs(10)));
    }

    #[test]
    fn a_stream_is_idle_on_its_own_while_the_rate_floor_counts_its_session() {
        // 100 B/s over 10 s; idle after 10 s.
        let mut b = Budget::new(budgets(10, 100, 10, 5), Duration::from_secs(10));
        b.share(Arc::new(AtomicU64::new(0)));
        let t0 = b.last_progress;
        // The other streams moved 5000 bytes: the floor is met, the idle clock runs on.
        b.credit_session(5000);
        assert_eq!(b.last_progress, t0);
        assert_eq!(b.window_bytes, 5000);
        let e = b.check(t0 + Duration::from_secs(10)).unwrap_err();
        assert!(e.to_string().contains("--idle-timeout"), "{e}");
        // Its own progress is both (the check rolled the met window over), and is counted for
        // the session.
        b.progress(7);
        assert!(b.last_progress >= t0);
        assert_eq!(b.window_bytes, 7);
        assert_eq!(b.session_bytes(), 7);
    }

    #[test]
    fn an_answer_without_data_is_progress_once_per_name_then_a_refusal() {
        let mut b = Budget::new(budgets(10, 0, 30, 2), Duration::from_secs(10));
        b.answered("d").unwrap();
        b.answered("e").unwrap();
        assert_eq!(b.window_bytes, 2 * FILE_CREDIT, "two names, two credits");
        b.answered("d").unwrap();
        b.answered("e").unwrap();
        assert_eq!(b.window_bytes, 2 * FILE_CREDIT, "repeats earn nothing");
        assert_eq!(b.refusals, 2);
        let e = b.answered("d").unwrap_err();
        assert!(e.to_string().contains("--max-refusals"), "{e}");
    }

    #[test]
    fn rate_floor_is_checked_at_the_window_end() {
        // 100 B/s over 10 s: the window needs 1000 bytes.
        let mut b = Budget::new(budgets(1000, 100, 10, 5), Duration::from_secs(10));
        let t0 = b.window_start;
        assert_eq!(b.need(), 1000);
        b.progress(999);
        assert_eq!(b.deadline(), Some(t0 + Duration::from_secs(10)));
        let e = b.check(t0 + Duration::from_secs(10)).unwrap_err();
        assert!(e.to_string().contains("999 bytes in 10 s"), "{e}");
        b.progress(1);
        // Met: no rate deadline, and the next check after the window rolls it over.
        assert_eq!(
            b.deadline(),
            Some(b.last_progress + Duration::from_secs(1000))
        );
        let t = t0 + Duration::from_secs(11);
        assert!(b.check(t).is_ok());
        assert_eq!((b.window_start, b.window_bytes), (t, 0));
        assert!(b.check(t + Duration::from_secs(10)).is_err());
    }

    #[test]
    fn refusals_are_counted_and_off_switches_work() {
        let mut b = Budget::new(budgets(1, 1, 1, 2), Duration::from_secs(10));
        assert!(b.refused().is_ok() && b.refused().is_ok());
        let e = b.refused().unwrap_err();
        assert!(e.to_string().contains("more than 2"), "{e}");
        let off = Budgets {
            idle: None,
            min_rate: 0,
            rate_window: Duration::from_secs(1),
            max_refusals: None,
        };
        let mut b = Budget::new(off, Duration::from_secs(10));
        assert_eq!(b.deadline(), None);
        assert!(b
            .check(b.last_progress + Duration::from_secs(1 << 20))
            .is_ok());
        for _ in 0..10 {
            assert!(b.refused().is_ok());
        }
    }
}
