//! The time left for the sleeps of one wait, kept as `ppoll(2)` takes and writes it back.

use std::time::Duration;

/// Time left for the sleeps of one wait on a completion channel: the kernel decreases it by the
/// time each sleep took (`ppoll(2)`, NOTES), so a wait keeps an honest deadline with no clock
/// read and no conversion per sleep. Always a valid timespec (at most `i32::MAX` seconds).
#[derive(Clone, Copy)]
pub(crate) struct SleepLeft(pub(super) libc::timespec);

impl SleepLeft {
    /// Nothing left.
    pub(crate) const ZERO: SleepLeft = SleepLeft(libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    });

    /// `d` (at most `i32::MAX` seconds).
    #[inline(always)]
    pub(crate) fn new(d: Duration) -> SleepLeft {
        SleepLeft(libc::timespec {
            tv_sec: d.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
        })
    }

    /// True when no time is left.
    #[inline(always)]
    pub(crate) fn is_zero(&self) -> bool {
        self.0.tv_sec <= 0 && self.0.tv_nsec <= 0
    }

    /// As a duration.
    pub(crate) fn duration(&self) -> Duration {
        Duration::new(
            u64::try_from(self.0.tv_sec).unwrap_or(0),
            u32::try_from(self.0.tv_nsec).unwrap_or(0).min(999_999_999),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_round_trips_and_zero_is_zero() {
        for d in [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::new(5, 999_999_999),
        ] {
            let l = SleepLeft::new(d);
            assert_eq!(l.duration(), d);
            assert_eq!(l.is_zero(), d.is_zero());
        }
        assert!(SleepLeft::ZERO.is_zero());
        let far = SleepLeft::new(Duration::MAX);
        assert_eq!(
            far.duration(),
            Duration::from_secs(i32::MAX as u64) + Duration::from_nanos(999_999_999)
        );
    }
}
