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
use super::waits::{rail_down, Instant, STOP_SLICE};
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

    /// Whether its waits run in slices of at most [`STOP_SLICE`] (it has a stop or cancel
    /// flag to look at between them).
    fn sliced(&self) -> bool {
        self.stop.is_some() || self.cancel.is_some()
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

    /// Starts a wait of `ep`'s next step within the budgets: see [`budget_wait!`].
    pub(crate) fn waiting(&mut self) -> BudgetWait<'_> {
        BudgetWait {
            b: self,
            step: None,
        }
    }
}

/// Waits for the step `$op` (an expression over the link `$ep`, with its `.await`) within the
/// budgets of `$budget`: the link's deadline is lowered to the budget's, and a step that times
/// out because a budget is spent returns the budget's error. With a shared session
/// ([`Budget::share`]), a step that times out while another stream of the session made
/// progress is run again (that progress counted toward the rate floor): only a session that
/// stalls as a whole for a step deadline times out, and a stream idle for its idle budget is
/// ended, whatever the others move. With a stop or cancel flag, the step runs in slices of at
/// most [`STOP_SLICE`], and the flag ends the wait.
///
/// A budget found spent when the wait starts is this side's lateness as much as the peer's (a
/// registration, a commit or a starved CPU outlasted it while the peer's next message
/// waited): what has arrived is taken, once until the next progress; a wait that finds
/// nothing is the budget's error.
///
/// `$op` must leave the link usable after a timeout (the links' waits do) and do nothing
/// before its wait that a second run would repeat.
macro_rules! budget_wait {
    ($budget:expr, $ep:ident, $op:expr) => {{
        let mut w = $budget.waiting();
        loop {
            if let Err(e) = w.before(&mut *$ep) {
                break Err(e);
            }
            // In a block of its own: a `?` in `$op` ends the step, not the wait.
            let r = async { $op }.await;
            if let Some(r) = w.after(&mut *$ep, r) {
                break r;
            }
        }
    }};
}
pub(crate) use budget_wait;

/// A wait within a [`Budget`] ([`budget_wait!`]), around each run of its step.
pub(crate) struct BudgetWait<'b> {
    b: &'b mut Budget,
    step: Option<Step>,
}

/// One step's deadline: until when, how long, the budget's error if it was spent when the step
/// began (a late wait), and the session's progress then.
struct Step {
    end: Instant,
    left: Duration,
    spent: Option<Error>,
    seen: u64,
}

impl BudgetWait<'_> {
    /// Before each run of the step: sets the link's deadline; an error ends the wait.
    pub(crate) fn before<L: Link>(&mut self, ep: &mut L) -> Result<()> {
        let b = &mut *self.b;
        let now = Instant::now();
        let step = match self.step.take() {
            Some(step) => step,
            None => match b.check(now) {
                Err(spent) => {
                    if std::mem::replace(&mut b.late, true) {
                        return Err(spent);
                    }
                    Step {
                        end: now,
                        left: Duration::ZERO,
                        spent: Some(spent),
                        seen: 0,
                    }
                }
                Ok(()) => {
                    let left = b.deadline().map_or(b.step, |d| {
                        d.saturating_duration_since(now).min(b.step)
                    });
                    Step {
                        end: now + left,
                        left,
                        spent: None,
                        seen: b.session_bytes(),
                    }
                }
            },
        };
        if b.stop.as_ref().is_some_and(Stop::raised) {
            return Err(Stop::error());
        }
        if b.cancel.as_ref().is_some_and(|c| c.load(Ordering::Acquire)) {
            return Err(Error::Cancelled);
        }
        let slice = match b.sliced() {
            true => step.end.saturating_duration_since(now).min(STOP_SLICE),
            false => step.left,
        };
        ep.set_timeout(slice.max(Duration::from_millis(1)));
        self.step = Some(step);
        Ok(())
    }

    /// After each run of the step, with its result: the wait's result, or `None` to run the
    /// step again.
    pub(crate) fn after<L: Link, T>(&mut self, ep: &mut L, r: Result<T>) -> Option<Result<T>> {
        let b = &mut *self.b;
        ep.set_timeout(b.step);
        let step = self.step.as_ref().expect("before() began the step");
        let sliced = b.sliced();
        let r = match r {
            Err(Error::Timeout { what, .. }) if b.stop.is_some() && ep.rail_down() => {
                Err(rail_down(what))
            }
            Err(e) if e.is_timeout() && sliced && Instant::now() < step.end => return None,
            // A sliced wait times out after all of its deadline, as one wait would.
            Err(Error::Timeout { what, .. }) if sliced => Err(Error::Timeout {
                what,
                after: step.left,
            }),
            r => r,
        };
        let step = self.step.take().expect("before() began the step");
        if let Some(spent) = step.spent {
            return Some(match r {
                Err(e) if e.is_timeout() => Err(spent),
                r => r,
            });
        }
        match r {
            Err(e) if e.is_timeout() => {
                let moved = b.session_bytes().saturating_sub(step.seen);
                if moved > 0 {
                    tracing::debug!("waiting on while the session's other streams progress");
                    b.credit_session(moved);
                    return None;
                }
                Some(b.check(Instant::now()).and(Err(e)))
            }
            r => Some(r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xfer::file::link::block::block_on;

    fn budgets(idle: u64, rate: u64, window: u64, refusals: u32) -> Budgets {
        Budgets {
            idle: Some(Duration::from_secs(idle)),
            min_rate: rate,
            rate_window: Duration::from_secs(window),
            max_refusals: Some(refusals),
        }
    }

    fn timeout() -> Error {
        Error::Timeout {
            what: "a message from the peer",
            after: Duration::from_secs(1),
        }
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
            block_on(async { budget_wait!(b, ep, ep.recv_with(|m| m.data.to_vec()).await) })
        };
        // This side was busy past its idle budget while the peer's messages arrived.
        late(&mut b);
        for m in [&b"one"[..], b"two", b"three"] {
            block_on(peer.send(m)).unwrap();
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
    fn a_question_mark_in_a_step_ends_the_step_not_the_wait() {
        use crate::xfer::file::link::{mem::MemLink, Link};
        let (_peer, mut ep) = MemLink::pair(8, 8);
        let mut b = Budget::new(budgets(10, 0, 30, 5), Duration::from_secs(10));
        // Sliced (a cancel flag to look at): a slice that times out is run again.
        b.cancel_with(Arc::new(AtomicBool::new(false)));
        let mut runs = 0;
        let mut step = |ep: &mut MemLink| -> Result<u32> {
            runs += 1;
            assert!(ep.timeout() <= STOP_SLICE, "a slice's deadline");
            match runs {
                1 | 2 => Err(timeout()),
                n => Ok(n),
            }
        };
        let ep = &mut ep;
        let r: Result<u32> = block_on(async {
            budget_wait!(b, ep, {
                let n = step(ep)?;
                Ok(n)
            })
        });
        assert_eq!(r.unwrap(), 3, "two slices timed out, the third ran");
        assert_eq!(ep.timeout(), Duration::from_secs(10), "the deadline is restored");
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
