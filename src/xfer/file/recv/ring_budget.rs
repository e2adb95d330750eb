//! The receiver's memory budget for staging rings, shared by the sessions it serves at once.
//!
//! A receiving session holds a [`RingLease`]: at least the smallest ring it could work with
//! (taken when the connection is admitted, so that a session, once admitted, always gets a ring),
//! grown to the ring a file asks for when the budget has room, else to what is left. The sum of
//! all leases never exceeds the budget's limit, so many sessions at once cannot make the
//! receiver pin more memory than it was allowed; a session that finds the budget short gets
//! smaller slots (the sender accepts any slot size up to its chunk size) instead of failing, and
//! a connection for which not even the smallest ring is left is refused as busy.
//!
//! A session grows only into what is left after setting aside the smallest ring of every
//! session that may still be admitted (up to the receiver's session cap): one session alone may
//! use nearly all of the budget, yet it never leaves a later sender without a ring (as long as
//! the budget holds the smallest ring of every session; these are small: 80 KiB for 16 slots).

use std::sync::{Arc, Mutex, PoisonError};

use crate::error::Result;
use crate::xfer::file::link::Link;
use crate::xfer::file::proto::{self, Msg, Reason};

/// Smallest slot a ring is cut down to (one page).
pub const MIN_SLOT: u64 = 4096;

/// Copy buffers a receiving session holds next to its ring (one slot each: the receiver's
/// writer thread pipeline), as counted by the budget.
pub const COPY_BUFS: u64 = 4;

/// Bytes a session with `slot_count` slots of `slot_size` bytes holds: the registered ring plus
/// its copy buffers. `None` on overflow.
pub fn ring_bytes(slot_count: u32, slot_size: u64) -> Option<u64> {
    u64::from(slot_count)
        .checked_add(COPY_BUFS)?
        .checked_mul(slot_size)
}

/// A limit on the staging-ring bytes of all sessions together.
#[derive(Debug)]
pub struct RingBudget {
    limit: u64,
    floor: u64,
    sessions: u64,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Bytes leased.
    used: u64,
    /// Leases out.
    leases: u64,
}

impl State {
    /// Bytes a lease may grow into: what is left after the floors of the sessions that may
    /// still be admitted.
    fn spare(&self, b: &RingBudget) -> u64 {
        let set_aside = b
            .sessions
            .saturating_sub(self.leases)
            .saturating_mul(b.floor);
        b.limit.saturating_sub(self.used).saturating_sub(set_aside)
    }
}

impl RingBudget {
    /// A budget of `limit` bytes for at most `sessions` leases of at least `floor` bytes each.
    pub fn new(limit: u64, floor: u64, sessions: u64) -> Arc<RingBudget> {
        Arc::new(RingBudget {
            limit,
            floor,
            sessions,
            state: Mutex::new(State::default()),
        })
    }

    /// The limit.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes leased now.
    pub fn in_use(&self) -> u64 {
        self.lock().used
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The counters stay consistent even if a holder panicked (each update is one step).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A lease of the floor (the smallest ring of a session), or `None` when it is not left:
    /// the connection is to be refused as busy.
    pub fn reserve(self: &Arc<Self>) -> Option<RingLease> {
        let mut st = self.lock();
        let after = st
            .used
            .checked_add(self.floor)
            .filter(|&u| u <= self.limit)?;
        st.used = after;
        st.leases += 1;
        Some(RingLease {
            budget: Some(Arc::clone(self)),
            held: self.floor,
            floor: self.floor,
        })
    }
}

/// One session's share of a [`RingBudget`]; given back when dropped.
#[derive(Debug)]
pub struct RingLease {
    budget: Option<Arc<RingBudget>>,
    held: u64,
    floor: u64,
}

impl RingLease {
    /// A lease without a limit (a session served on its own, e.g. through the C API).
    pub fn unlimited() -> RingLease {
        RingLease {
            budget: None,
            held: 0,
            floor: 0,
        }
    }

    /// Bytes held now.
    pub fn held(&self) -> u64 {
        self.held
    }

    /// The largest slot (at most `want`) of a ring of `slot_count` slots that this lease could
    /// hold now: `want` when the budget has room, else what is left, rounded down to whole
    /// pages (at least [`MIN_SLOT`], which the floor taken at admission covers, or `want` if
    /// smaller). Nothing is taken: see [`resize`](Self::resize).
    pub fn fit_slot(&self, slot_count: u32, want: u64) -> u64 {
        let Some(b) = &self.budget else { return want };
        let room = self.held.saturating_add(b.lock().spare(b));
        let per = room / (u64::from(slot_count) + COPY_BUFS);
        let fit = if per >= MIN_SLOT {
            per - per % MIN_SLOT
        } else {
            MIN_SLOT
        };
        want.min(fit)
    }

    /// Holds `bytes` (the ring about to be made) if the budget allows, else as much as it
    /// allows (never less than the floor). Returns what is held.
    pub fn resize(&mut self, bytes: u64) -> u64 {
        let Some(b) = &self.budget else {
            self.held = bytes;
            return bytes;
        };
        let mut st = b.lock();
        let room = self.held.saturating_add(st.spare(b));
        let new = bytes.max(self.floor).min(room.max(self.floor));
        st.used = st.used - self.held + new;
        self.held = new;
        new
    }
}

impl Drop for RingLease {
    fn drop(&mut self) {
        if let Some(b) = &self.budget {
            let mut st = b.lock();
            st.used = st.used.saturating_sub(self.held);
            st.leases = st.leases.saturating_sub(1);
        }
    }
}

/// Tells a sender, in place of the CHALLENGE, that the receiver is busy (`REFUSE(busy)` with
/// `why`), and waits until it was delivered. The sender reports it and gives up (see
/// `docs/file-protocol.md`).
pub fn refuse_busy<L: Link>(ep: &mut L, why: &str) -> Result<()> {
    crate::xfer::file::link::block::block_on(refuse_busy_async(ep, why))
}

/// [`refuse_busy`] on a link whose waits are awaited.
pub(crate) async fn refuse_busy_async<L: Link>(ep: &mut L, why: &str) -> Result<()> {
    let message = proto::truncate_text(&format!("the receiver is busy: {why}; retry later"));
    ep.send(&proto::encode(&Msg::Refuse {
        reason: Reason::Busy,
        message,
    }))
    .await?;
    ep.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_never_exceed_the_limit_and_are_given_back() {
        let floor = ring_bytes(16, MIN_SLOT).unwrap();
        let b = RingBudget::new(3 * floor, floor, 2);
        let mut a = b.reserve().expect("room for one");
        // One floor is set aside for the second session that may come.
        assert_eq!(a.fit_slot(16, 1 << 20), 2 * MIN_SLOT);
        let c = b.reserve().expect("room for two");
        // `a` may grow into the one floor left, not further.
        assert_eq!(a.fit_slot(16, 1 << 20), 2 * MIN_SLOT);
        assert_eq!(a.resize(ring_bytes(16, 1 << 20).unwrap()), 2 * floor);
        assert_eq!(b.in_use(), 3 * floor);
        assert!(b.reserve().is_none(), "no floor left: busy");
        drop(c);
        assert_eq!(b.in_use(), 2 * floor);
        assert_eq!(a.resize(0), floor, "never below the floor");
        drop(a);
        assert_eq!(b.in_use(), 0);
    }

    #[test]
    fn a_greedy_session_leaves_the_floors_of_later_sessions() {
        let floor = ring_bytes(16, MIN_SLOT).unwrap();
        let b = RingBudget::new(100 * floor, floor, 8);
        let mut a = b.reserve().unwrap();
        a.resize(u64::MAX);
        assert_eq!(a.held(), 93 * floor, "7 floors set aside");
        let later: Vec<_> = (0..7).map(|_| b.reserve().expect("admitted")).collect();
        assert_eq!(b.in_use(), 100 * floor);
        drop(later);
    }

    #[test]
    fn fit_slot_gives_what_was_asked_when_there_is_room() {
        let b = RingBudget::new(1 << 30, ring_bytes(16, MIN_SLOT).unwrap(), 8);
        let l = b.reserve().unwrap();
        assert_eq!(l.fit_slot(16, 1 << 20), 1 << 20);
        assert_eq!(l.fit_slot(16, 1000), 1000);
        assert_eq!(RingLease::unlimited().fit_slot(16, 7 << 20), 7 << 20);
    }

    #[test]
    fn ring_bytes_overflow_is_none() {
        assert_eq!(ring_bytes(16, 4096), Some(20 * 4096));
        assert_eq!(ring_bytes(u32::MAX, u64::MAX), None);
    }
}
