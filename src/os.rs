//! Small safe wrappers over libc calls the upper layers need.
#![allow(unsafe_code)]

use std::time::Duration;

/// CPU time (user + system) this process has used, from `getrusage(2)`.
pub fn cpu_time() -> Duration {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: RUSAGE_SELF with a valid out-pointer; zeroed rusage is a valid value either way.
    let ru = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr());
        ru.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}
