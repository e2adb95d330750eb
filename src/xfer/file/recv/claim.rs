//! Receiver: which stream of a session is receiving each part (a whole file, or a stripe of
//! one), so that a part the sender sends again on another stream, because it lost the first,
//! takes over from it: the first stream is stopped, and has let go of the part (its writes
//! ended, what it holds recorded), before the second starts. The first may not have noticed the
//! loss at all: over a rail that went down on the sender's side, it hears only silence.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::xfer::file::budget::Stop;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A part: the entry's name and, for a stripe, its index.
pub(super) type PartKey = (String, Option<u16>);

/// One stream's hold on a part.
#[derive(Debug)]
struct Claim {
    /// The holding stream's stop flag (see [`Stop`]).
    stop: Stop,
    released: Mutex<bool>,
    cv: Condvar,
}

/// The parts a session's streams are receiving.
#[derive(Debug, Default)]
pub(super) struct Claims(Mutex<HashMap<PartKey, Arc<Claim>>>);

/// A stream's hold on a part, let go when dropped.
#[derive(Debug)]
pub(super) struct Held<'c> {
    claims: &'c Claims,
    key: PartKey,
    claim: Arc<Claim>,
}

impl Claims {
    /// Part `key` for the stream whose stop flag is `stop`: if another stream holds it, that
    /// stream is stopped and this waits, at most `within`, until it lets go.
    pub(super) fn take(&self, key: PartKey, stop: &Stop, within: Duration) -> Result<Held<'_>> {
        let old = lock(&self.0).get(&key).cloned();
        if let Some(old) = old {
            tracing::warn!(
                "{:?} is sent again on another stream: stopping the stream that had it",
                key
            );
            old.stop.raise();
            let deadline = Instant::now() + within;
            let mut released = lock(&old.released);
            while !*released {
                let now = Instant::now();
                if now >= deadline {
                    return Err(Error::Timeout {
                        what: "the stream that had the part to let go of it",
                        after: within,
                    });
                }
                released = old
                    .cv
                    .wait_timeout(released, deadline - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        }
        let claim = Arc::new(Claim {
            stop: stop.clone(),
            released: Mutex::new(false),
            cv: Condvar::new(),
        });
        lock(&self.0).insert(key.clone(), claim.clone());
        Ok(Held {
            claims: self,
            key,
            claim,
        })
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut map = lock(&self.claims.0);
        if map
            .get(&self.key)
            .is_some_and(|c| Arc::ptr_eq(c, &self.claim))
        {
            map.remove(&self.key);
        }
        drop(map);
        *lock(&self.claim.released) = true;
        self.claim.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_taken_again_stops_its_first_stream_and_waits_for_it() {
        let claims = Claims::default();
        let (first, second) = (Stop::default(), Stop::default());
        let key = ("f".to_string(), Some(1));
        let held = claims
            .take(key.clone(), &first, Duration::from_secs(1))
            .unwrap();
        // Not let go within the time given: an error, and the first is asked to stop.
        let e = claims
            .take(key.clone(), &second, Duration::from_millis(50))
            .unwrap_err();
        assert!(e.is_timeout(), "{e}");
        assert!(first.raised() && !second.raised());
        std::thread::scope(|sc| {
            sc.spawn(|| {
                while !first.raised() {
                    std::thread::yield_now();
                }
                drop(held);
            });
            let again = claims.take(key.clone(), &second, Duration::from_secs(10));
            assert!(again.is_ok(), "taken over once the first let go");
        });
        // Another part is not affected.
        let other = claims.take(("f".to_string(), Some(0)), &first, Duration::ZERO);
        assert!(other.is_ok());
    }
}
