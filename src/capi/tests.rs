//! Unit tests of the boundary that need a test-only hook: a panic injected inside a handle's
//! lock (the integration tests in `tests/capi_host.rs` cover the exports from outside).

use std::cell::Cell;

thread_local! {
    static PANIC_IN: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// Called by `boundary::lock` with the lock held: panics once when armed for this handle type.
pub(crate) fn maybe_panic(name: &str) {
    if let Some(armed) = PANIC_IN.with(Cell::get) {
        if armed == name {
            PANIC_IN.with(|p| p.set(None));
            panic!("injected test panic in {name}");
        }
    }
}
