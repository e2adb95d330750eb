//! Handles: the opaque objects C holds (`rdmaxfer_config`, `_conn`, ...), and how a call, a
//! `*_free` and `rdmaxfer_conn_close` share one without a use of freed memory.
//!
//! A handle is a [`Slot`]: `calls` (bit 0 = open, bit 1 = closing, +4 per call inside) and the
//! state, `Mutex<Option<State>>`, only ever `try_lock`ed (a second call gets
//! `RDMAXFER_ERR_BUSY`, a call after a panic inside gets `RDMAXFER_ERR_PANIC`: poisoned).
//! - A call first counts itself in, then looks at the open bit: closed → it leaves again and
//!   fails with `RDMAXFER_ERR_INVALID_STATE` ("freed"); open → it locks the state.
//! - `*_free` clears the open bit (a second free finds it clear: "already freed") and sets
//!   closing. It does not wait: calls already inside finish on the state.
//! - Whoever sees "closing and no call inside" (the free itself, or the last call leaving)
//!   claims the release with one compare-exchange (closing → 0, so exactly one thread does):
//!   it takes the state out and drops it (a panic there is caught: Drop never unwinds into C),
//!   then returns the slot to its type's free list.
//!
//! The slot's memory itself is never given back to the allocator: a freed slot is recycled
//! through a per-type free list ([`Pool`]) for the next handle of that type. So any pointer C
//! got from us stays a valid `&Slot` of that type forever, and the dereference in
//! `handle::arg` needs no more than that. A stale pointer (use after free, double free)
//! then finds a closed slot (a clear error) or, once the slot was reused, a live handle of the
//! same type (the wrong object, never freed memory); the header says so. The price: slot
//! memory (a few dozen bytes per handle; the state itself is dropped at release) stays at the
//! peak number of live handles of each type. The alternatives considered: freeing after
//! waiting for calls to drain (a stale pointer would still reach freed memory), or giving C
//! generation-tagged indices instead of pointers (would catch every stale use, but changes the
//! ABI's handle types).

use std::ops::{Deref, DerefMut};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

use super::boundary::{self, check_ptr, run_or, CResult, Fail};
use super::status::rdmaxfer_status;

/// `Slot::calls`: the handle is open (made and not freed).
const OPEN: usize = 1;
/// `Slot::calls`: freed while open, its state not yet released.
const CLOSING: usize = 2;
/// `Slot::calls`: one call inside.
const CALL: usize = 4;

/// What an opaque handle holds (see the module comment).
pub(crate) struct Slot<S> {
    calls: AtomicUsize,
    state: Mutex<Option<S>>,
}

impl<S> Slot<S> {
    /// A closed, empty slot.
    pub(crate) const fn new() -> Self {
        Slot {
            calls: AtomicUsize::new(0),
            state: Mutex::new(None),
        }
    }
}

/// A type's free list of released slots (never deallocated).
pub(crate) struct Pool<H: 'static>(Mutex<Vec<&'static H>>);

impl<H> Pool<H> {
    /// An empty free list.
    pub(crate) const fn new() -> Self {
        Pool(Mutex::new(Vec::new()))
    }

    fn list(&self) -> MutexGuard<'_, Vec<&'static H>> {
        // Only push and pop run under this lock: a poison would come from an allocation
        // failure, which aborts first; the list stays consistent either way.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// An opaque handle type: a struct with one field `slot: Slot<State>` ([`impl_handle`]).
pub(crate) trait Handle: Sync + Sized + 'static {
    /// What the slot holds while the handle is open.
    type State: Send;
    /// The C type name, for messages.
    const NAME: &'static str;
    /// The handle's slot.
    fn slot(&self) -> &Slot<Self::State>;
    /// A new, closed handle (for a slot the free list cannot give).
    fn empty() -> Self;
    /// The type's free list.
    fn pool() -> &'static Pool<Self>;
}

/// Implements [`Handle`] for an opaque handle type whose only field is `slot: Slot<$state>`,
/// or whose other fields (`$field`, made with `$init` for a new slot) live outside the state's
/// lock: what a call may reach while another call holds the state (e.g. a listener's shutdown).
macro_rules! impl_handle {
    ($handle:ident, $state:ty $(, $field:ident: $init:expr)*) => {
        impl $crate::capi::handle::Handle for $handle {
            type State = $state;
            const NAME: &'static str = stringify!($handle);
            fn slot(&self) -> &$crate::capi::handle::Slot<$state> {
                &self.slot
            }
            fn empty() -> Self {
                $handle {
                    slot: $crate::capi::handle::Slot::new(),
                    $($field: $init,)*
                }
            }
            fn pool() -> &'static $crate::capi::handle::Pool<$handle> {
                static POOL: $crate::capi::handle::Pool<$handle> =
                    $crate::capi::handle::Pool::new();
                &POOL
            }
        }
    };
}
pub(crate) use impl_handle;

/// The handle `p` points to (argument `name`).
pub(crate) fn arg<H: Handle>(p: *const H, name: &str) -> CResult<&'static H> {
    check_ptr(p, name)?;
    // The header's contract is that a handle argument is a pointer this library returned for a
    // handle of this type (freed since or not). Those all come from `into_handle`: a slot leaked
    // with `Box::leak` or taken from the type's free list, and no slot is ever deallocated.
    // SAFETY: `p` is non-NULL and aligned (checked above) and, by that contract, addresses an
    // `H` that lives for the rest of the process; only shared references to it are made.
    Ok(unsafe { &*p })
}

fn freed<H: Handle>() -> Fail {
    Fail::state(format!("this {} was freed", H::NAME))
}

/// One call counted in on a handle: leaving (drop) counts it out, and releases the state when
/// this was the last call on a freed handle.
struct Entered<H: Handle>(&'static H);

impl<H: Handle> Entered<H> {
    /// Counts a call in; fails ("freed") when the handle is not open.
    fn new(h: &'static H) -> CResult<Entered<H>> {
        let prev = h.slot().calls.fetch_add(CALL, SeqCst);
        if prev > usize::MAX / 2 {
            // Over usize::MAX / 8 calls inside one handle at once: cannot happen (threads are
            // far fewer); stop before the count could wrap, as `Arc` does.
            std::process::abort();
        }
        let e = Entered(h);
        if prev & OPEN == 0 {
            return Err(freed::<H>());
        }
        Ok(e)
    }
}

impl<H: Handle> Drop for Entered<H> {
    fn drop(&mut self) {
        let prev = self.0.slot().calls.fetch_sub(CALL, SeqCst);
        if prev == CLOSING | CALL {
            release_if_idle(self.0);
        }
    }
}

/// Counts a call in on handle `h` without locking its state (freed → `RDMAXFER_ERR_INVALID_STATE`):
/// for the few calls that may run while another call holds the state (they touch only the
/// handle's fields outside the state). The state is not released while the guard lives.
pub(crate) fn enter<H: Handle>(h: &'static H) -> CResult<impl Drop> {
    Entered::new(h)
}

/// Clears the open bit (false: it was not open) and releases the state if no call is inside.
fn close<H: Handle>(h: &'static H) -> bool {
    let closed = h
        .slot()
        .calls
        .fetch_update(SeqCst, SeqCst, |v| {
            (v & OPEN != 0).then_some((v & !OPEN) | CLOSING)
        })
        .is_ok();
    if closed {
        release_if_idle(h);
    }
    closed
}

/// Releases the state of a freed handle with no call inside; of all the threads that may try
/// (the free and every call leaving), the compare-exchange lets exactly one through.
fn release_if_idle<H: Handle>(h: &'static H) {
    let s = h.slot();
    if s.calls
        .compare_exchange(CLOSING, 0, SeqCst, SeqCst)
        .is_err()
    {
        return;
    }
    // No call is inside (the count was 0) and none can lock the state until the slot is made
    // open again by `into_handle`, after the push below: this lock does not wait.
    let state = s
        .state
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    s.state.clear_poison();
    if let Err(p) = catch_unwind(AssertUnwindSafe(move || drop(state))) {
        boundary::set_last_error(format!(
            "{}: dropping the freed handle's state panicked: {}",
            H::NAME,
            boundary::panic_text(p)
        ));
    }
    H::pool().list().push(h);
}

/// A call inside an open handle with its state locked; dereferences to the state.
pub(crate) struct Call<H: Handle> {
    // Fields drop in order: unlock first, then count the call out (which may release).
    guard: MutexGuard<'static, Option<H::State>>,
    _entered: Entered<H>,
}

impl<H: Handle> Deref for Call<H> {
    type Target = H::State;
    fn deref(&self) -> &H::State {
        match &*self.guard {
            Some(s) => s,
            None => unreachable!("a Call is only made on a slot with a state"),
        }
    }
}

impl<H: Handle> DerefMut for Call<H> {
    fn deref_mut(&mut self) -> &mut H::State {
        match &mut *self.guard {
            Some(s) => s,
            None => unreachable!("a Call is only made on a slot with a state"),
        }
    }
}

/// Enters handle `h` and locks its state without waiting: freed → `RDMAXFER_ERR_INVALID_STATE`,
/// busy → `RDMAXFER_ERR_BUSY`, poisoned (an earlier call panicked) → `RDMAXFER_ERR_PANIC`.
pub(crate) fn lock<H: Handle>(h: &'static H) -> CResult<Call<H>> {
    let entered = Entered::new(h)?;
    let guard = match h.slot().state.try_lock() {
        Ok(g) => g,
        Err(TryLockError::WouldBlock) => {
            return Err(Fail::new(
                rdmaxfer_status::RDMAXFER_ERR_BUSY,
                format!(
                "this {} is in use by another call (another thread, or a callback calling back in)",
                H::NAME
            ),
            ))
        }
        Err(TryLockError::Poisoned(_)) => {
            return Err(Fail::new(
                rdmaxfer_status::RDMAXFER_ERR_PANIC,
                format!(
                    "an earlier call on this {} panicked; it can only be freed",
                    H::NAME
                ),
            ))
        }
    };
    if guard.is_none() {
        // Closed by `take_state` between the count and the lock.
        return Err(freed::<H>());
    }
    #[cfg(test)]
    super::tests::maybe_panic(H::NAME);
    Ok(Call {
        guard,
        _entered: entered,
    })
}

/// Checks the handle pointer `p` (argument `name`) and locks it ([`lock`]).
pub(crate) fn handle<H: Handle>(p: *const H, name: &str) -> CResult<Call<H>> {
    lock(arg(p, name)?)
}

/// Makes an open handle holding `state` (a recycled slot when the type has one) and gives its
/// pointer to C.
pub(crate) fn into_handle<H: Handle>(state: H::State) -> *mut H {
    let recycled = H::pool().list().pop();
    let h: &'static H = recycled.unwrap_or_else(|| Box::leak(Box::new(H::empty())));
    let s = h.slot();
    // Closed, so no call locks it: this does not wait. The old value is `None`.
    *s.state.lock().unwrap_or_else(PoisonError::into_inner) = Some(state);
    s.calls.fetch_or(OPEN, SeqCst);
    std::ptr::from_ref(h).cast_mut()
}

/// Frees handle `p` (NULL: nothing) as export `func`: closed at once, its state released when
/// no call is inside any more. A second free (of a slot not reused since) changes nothing and
/// says "already freed" in the last error message.
pub(crate) fn free_handle<H: Handle>(func: &'static str, p: *mut H) {
    run_or(func, (), || {
        if p.is_null() {
            return Ok(());
        }
        if !close(arg(p.cast_const(), H::NAME)?) {
            return Err(Fail::state(format!("this {} was already freed", H::NAME)));
        }
        Ok(())
    })
}

/// Frees handle `p` (not NULL) and hands its state to the caller, as long as no other call is
/// inside: busy → `RDMAXFER_ERR_BUSY` and the handle stays open. A poisoned handle is freed
/// without its state (`RDMAXFER_ERR_PANIC`).
pub(crate) fn take_state<H: Handle>(p: *mut H) -> CResult<H::State> {
    let h = arg(p.cast_const(), H::NAME)?;
    let entered = Entered::new(h)?;
    let mut guard = match h.slot().state.try_lock() {
        Ok(g) => g,
        Err(TryLockError::WouldBlock) => {
            return Err(Fail::new(
                rdmaxfer_status::RDMAXFER_ERR_BUSY,
                format!("this {} is in use by another call; left open", H::NAME),
            ))
        }
        Err(TryLockError::Poisoned(_)) => {
            // Released (state dropped) when `entered` leaves, unless a free came first.
            close(h);
            return Err(Fail::new(
                rdmaxfer_status::RDMAXFER_ERR_PANIC,
                format!(
                    "an earlier call on this {} panicked; freed without closing",
                    H::NAME
                ),
            ));
        }
    };
    if guard.is_none() || !close(h) {
        // Taken by another `take_state`, or freed since this call counted itself in (its
        // state is then released when `entered` leaves).
        return Err(freed::<H>());
    }
    let state = guard.take();
    drop(guard);
    // The last call out: releases the (now empty) slot to the free list.
    drop(entered);
    state.ok_or_else(freed::<H>)
}
