//! Waits that go on while a session moves: a stream of a session with several streams waits its
//! turn past a step deadline while the others progress ([`wait_on!`]), and looks at its port
//! between slices of its wait. The coarse clock the waits and the receiver's budgets
//! (`budget`) read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::xfer::file::link::Link;

/// A reading of the coarse monotonic clock (`CLOCK_MONOTONIC_COARSE`, clock_gettime(2): a few
/// milliseconds of resolution). Budgets count seconds, and this clock is read without a system
/// call even where the precise one takes one (an emulated guest without a usable TSC, where a
/// tree of small files read the clock thousands of times a second).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Instant(pub(super) Duration);

impl Instant {
    pub(crate) fn now() -> Instant {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
        Instant(Duration::new(
            u64::try_from(t.tv_sec).unwrap_or(0),
            u32::try_from(t.tv_nsec).unwrap_or(0),
        ))
    }

    pub(crate) fn saturating_duration_since(self, earlier: Instant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

impl std::ops::Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d))
    }
}

/// How often a stream with a stop flag looks at it while it waits.
pub(crate) const STOP_SLICE: Duration = Duration::from_millis(250);

/// Waits for the step `$op` (an expression over the link `$ep`, with its `.await`) for one
/// stream of a session. With `$session` (the progress of a session carried by several
/// streams, counted by all of them), a step that times out while the session made progress
/// is run again: a stream that waits its turn while the others use the link or the peer goes
/// on waiting, and only a session that stalls as a whole for a step deadline (at most two
/// after its last progress) times out. Such a step runs in slices of at most [`STOP_SLICE`],
/// looking at the port between them: a stream of several whose rail goes down is found out at
/// once, not a step later (its peer, on the other side of that rail, may never answer).
/// `$op` must leave the link usable after a timeout (the links' waits do) and do nothing
/// before its wait that a second run would repeat. The receiver's equivalent is
/// [`budget_wait!`](super::budget::budget_wait).
macro_rules! wait_on {
    ($ep:ident, $session:expr, $op:expr) => {{
        let mut w = $crate::xfer::file::waits::WaitOn::new($session);
        loop {
            w.before(&mut *$ep);
            // In a block of its own: a `?` in `$op` ends the step, not the wait.
            let r = async { $op }.await;
            if let Some(r) = w.after(&mut *$ep, r) {
                break r;
            }
        }
    }};
}
pub(crate) use wait_on;

/// A wait of one stream of a session ([`wait_on!`]), around each run of its step.
pub(crate) struct WaitOn<'s> {
    session: Option<&'s AtomicU64>,
    run: Option<Run>,
}

/// One step deadline of a [`WaitOn`]: the session's progress when it began, the link's own
/// deadline, and when it ends.
struct Run {
    seen: Option<u64>,
    step: Duration,
    end: Instant,
}

impl<'s> WaitOn<'s> {
    pub(crate) fn new(session: Option<&'s AtomicU64>) -> WaitOn<'s> {
        WaitOn { session, run: None }
    }

    /// Before each run of the step: with a session, the link's deadline is the slice's.
    pub(crate) fn before<E: Waits>(&mut self, ep: &mut E) {
        let session = self.session;
        let run = self.run.get_or_insert_with(|| Run {
            seen: session.map(|s| s.load(Ordering::Relaxed)),
            step: ep.step(),
            end: Instant::now() + ep.step(),
        });
        if session.is_some() {
            let slice = run
                .end
                .saturating_duration_since(Instant::now())
                .min(STOP_SLICE);
            ep.set_step(slice.max(Duration::from_millis(1)));
        }
    }

    /// After each run of the step, with its result: the wait's result, or `None` to run the
    /// step again.
    pub(crate) fn after<E: Waits, T>(&mut self, ep: &mut E, r: Result<T>) -> Option<Result<T>> {
        let run = self.run.as_ref().expect("before() began the step");
        let r = match self.session {
            Some(_) => {
                ep.set_step(run.step);
                match r {
                    Err(Error::Timeout { what, .. }) if ep.rail_down() => Err(rail_down(what)),
                    Err(e) if e.is_timeout() && Instant::now() < run.end => return None,
                    Err(Error::Timeout { what, .. }) => Err(Error::Timeout {
                        what,
                        after: run.step,
                    }),
                    r => r,
                }
            }
            None => r,
        };
        let run = self.run.take().expect("before() began the step");
        match r {
            Err(e)
                if e.is_timeout()
                    && run.seen != self.session.map(|s| s.load(Ordering::Relaxed)) =>
            {
                tracing::debug!("waiting on while the session's other streams progress: {e}");
                None
            }
            r => Some(r),
        }
    }
}

/// What [`wait_on!`] needs of an endpoint: its step deadline, and whether its rail is down.
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

/// The error of a wait for `what` whose rail went down meanwhile.
pub(crate) fn rail_down(what: &str) -> Error {
    Error::Connection(format!(
        "the port of its device went down (its rail is gone) while waiting for {what}"
    ))
}

/// Counts `n` steps of progress of a session carried by several streams (see [`wait_on!`]).
pub(crate) fn moved(session: Option<&AtomicU64>, n: u64) {
    if let Some(s) = session {
        s.fetch_add(n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xfer::file::link::block::block_on;

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
        let c = &mut calls;
        let r: Result<()> = block_on(async {
            wait_on!(c, None, {
                *c += 1;
                Err(timeout())
            })
        });
        assert!(r.unwrap_err().is_timeout());
        assert_eq!(calls, 1);
        // Three steps time out while another stream moves, then the session stalls: four runs,
        // and the timeout of the last.
        let mut calls = 0;
        let c = &mut calls;
        let r: Result<()> = block_on(async {
            wait_on!(c, Some(&session), {
                *c += 1;
                if *c <= 3 {
                    moved(Some(&session), 1);
                }
                Err(timeout())
            })
        });
        assert!(r.unwrap_err().is_timeout());
        assert_eq!((calls, session.load(Ordering::Relaxed)), (4, 3));
        // A step that ends (with a value or another error) ends the wait, moving or not.
        let mut calls = 0;
        let c = &mut calls;
        let r = block_on(async {
            wait_on!(c, Some(&session), {
                *c += 1;
                moved(Some(&session), 1);
                match *c {
                    1 => Err(timeout()),
                    _ => Ok(*c),
                }
            })
        });
        assert_eq!((r.unwrap(), calls), (2, 2));
        let c = &mut 0u32;
        let r: Result<()> = block_on(async {
            wait_on!(c, Some(&session), {
                moved(Some(&session), 1);
                Err(Error::Connection("gone".into()))
            })
        });
        assert!(!r.unwrap_err().is_timeout());
    }
}
