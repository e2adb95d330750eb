//! Small safe wrappers over libc calls the upper layers need (`getrusage(2)`, `poll(2)`,
//! `epoll(7)`: `Epoll` and the readiness-only descriptors handed out, `fcntl(2)`,
//! `madvise(2)`) and the CPU's time-stamp counter (`ticks`), so `xfer` and the CLI stay free
//! of `unsafe`.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// CPU time (user + system) this process has used so far (`getrusage(2)`, `RUSAGE_SELF`).
pub fn cpu_time() -> Duration {
    let (user, sys) = cpu_times();
    user + sys
}

/// CPU time this process has used so far, split into (user, system) (`getrusage(2)`,
/// `RUSAGE_SELF`). On Soft-RoCE the system part holds the device's own work (packet building,
/// CRC, copies), which the kernel charges to whichever process is running.
pub fn cpu_times() -> (Duration, Duration) {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `ru` is a writable `struct rusage`, the one getrusage(2) fills.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    if rc != 0 {
        return (Duration::ZERO, Duration::ZERO);
    }
    // SAFETY: `ru` was zeroed when made, and all-zero is a valid `rusage` (integers only).
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| {
        Duration::new(
            t.tv_sec.max(0) as u64,
            (t.tv_usec.clamp(0, 999_999) as u32) * 1000,
        )
    };
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

/// A cheap, monotonic tick counter for per-iteration timing: the TSC on x86_64 (`rdtsc`; one
/// instruction, where `clock_gettime` can cost microseconds with the HPET clocksource of an
/// emulated guest), nanoseconds since the first call elsewhere. Convert with a rate measured
/// against [`Instant`] over the same interval.
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC is part of the x86_64 baseline (this block is x86_64-only) and only
        // reads the time-stamp counter: no memory is accessed.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Maps in every page of this process's file-backed code (its own and its libraries'), so a
/// timed loop does not pay first-touch page faults (`madvise(2)`, `MADV_POPULATE_READ`; Linux
/// 5.14+, else `MADV_WILLNEED`, which only starts the reads). Latency tools do the same with
/// `mlockall(2)` (cyclictest), which needs a memlock limit this does not. Returns the bytes it
/// covered (a range unmapped meanwhile is skipped); pages stay evictable.
pub fn prefault_code() -> io::Result<u64> {
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let mut total = 0u64;
    for line in maps.lines() {
        let mut f = line.split_ascii_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        // Executable and backed by a file (the path is the sixth field): not [vdso] and the like.
        let path = f.nth(3);
        if perms.as_bytes().get(2) != Some(&b'x') || !path.is_some_and(|p| p.starts_with('/')) {
            continue;
        }
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else {
            continue;
        };
        if b <= a {
            continue;
        }
        let (addr, len) = (a as *mut libc::c_void, b - a);
        // madvise(2): MADV_POPULATE_READ prefaults page tables "as if manually reading from each
        // page" and MADV_WILLNEED only starts read-ahead; neither changes contents or mappings.
        // SAFETY: madvise(2) with these advices accesses no memory from user space (above); a range
        // unmapped since /proc/self/maps was read makes the call fail (ENOMEM), nothing more.
        let mut rc = unsafe { libc::madvise(addr, len, libc::MADV_POPULATE_READ) };
        if rc != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            // SAFETY: as above.
            rc = unsafe { libc::madvise(addr, len, libc::MADV_WILLNEED) };
        }
        if rc == 0 {
            total += len as u64;
        }
    }
    Ok(total)
}

/// Waits until `fd` is readable (`poll(2)`, `POLLIN`), for at most `timeout` (`None`: forever).
/// Returns `Ok(false)` on timeout. `EINTR` is retried with the remaining time.
pub fn wait_readable(fd: impl AsFd, timeout: Option<Duration>) -> io::Result<bool> {
    wait_raw(fd.as_fd().as_raw_fd(), timeout)
}

/// [`wait_readable`] on a raw descriptor the caller keeps open for the duration of the call.
pub(crate) fn wait_raw(fd: RawFd, timeout: Option<Duration>) -> io::Result<bool> {
    Ok(poll_in(&[fd], timeout)?.is_some())
}

/// Waits until one of `fds` is readable (`poll(2)`, `POLLIN`; also an error or hang-up), for
/// at most `timeout` (`None`: forever). Returns the index of the first ready one, `None` on
/// timeout. `EINTR` is retried with the remaining time.
pub fn wait_readable_any(
    fds: &[BorrowedFd<'_>],
    timeout: Option<Duration>,
) -> io::Result<Option<usize>> {
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    poll_in(&raw, timeout)
}

fn poll_in(fds: &[RawFd], timeout: Option<Duration>) -> io::Result<Option<usize>> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let n = libc::nfds_t::try_from(pfds.len())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    loop {
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                // Round up so a sub-millisecond remainder still waits instead of spinning.
                left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
            }
        };
        // SAFETY: `pfds` is `n` writable pollfds. poll(2) reports a descriptor that is not open
        // as POLLNVAL, so no `fd` value makes this call unsafe.
        let rc = unsafe { libc::poll(pfds.as_mut_ptr(), n, ms) };
        if rc > 0 {
            return Ok(pfds.iter().position(|p| p.revents != 0));
        }
        if rc == 0 {
            if deadline.is_none_or(|d| Instant::now() >= d) {
                return Ok(None);
            }
            continue;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// An epoll instance (`epoll(7)`) watching descriptors for reading, level-triggered: its own
/// descriptor is readable while one of theirs is, so one descriptor can stand for several in a
/// caller's `poll(2)` loop. A watched descriptor that is closed drops out by itself.
#[derive(Debug)]
pub struct Epoll(OwnedFd);

impl Epoll {
    /// A new instance watching nothing (`epoll_create1(2)`, close-on-exec).
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: no pointers; returns a new descriptor or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by epoll_create1 and is owned by nobody else.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Stops watching `fd` (`epoll_ctl(2)`, `EPOLL_CTL_DEL`).
    pub fn remove(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        // SAFETY: both descriptors are open (an OwnedFd and a BorrowedFd); EPOLL_CTL_DEL
        // ignores the event argument, which may be NULL since Linux 2.6.9 (epoll_ctl(2)).
        let rc = unsafe {
            libc::epoll_ctl(
                self.0.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd.as_raw_fd(),
                std::ptr::null_mut(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Watches `fd` for `EPOLLIN` (`epoll_ctl(2)`, `EPOLL_CTL_ADD`).
    pub fn add(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, false)
    }

    /// Watches `fd`, already watched, for `EPOLLIN`, and also for `EPOLLOUT` when `writable`
    /// (`epoll_ctl(2)`, `EPOLL_CTL_MOD`): the instance is then readable while `fd` is
    /// readable, or writable too.
    pub fn watch_writable(&self, fd: BorrowedFd<'_>, writable: bool) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, writable)
    }

    fn ctl(&self, op: libc::c_int, fd: BorrowedFd<'_>, writable: bool) -> io::Result<()> {
        let out = if writable { libc::EPOLLOUT } else { 0 };
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | out) as u32,
            u64: fd.as_raw_fd() as u64,
        };
        // SAFETY: `ev` is one readable epoll_event for the call; both descriptors are open
        // (an OwnedFd and a BorrowedFd).
        let rc = unsafe { libc::epoll_ctl(self.0.as_raw_fd(), op, fd.as_raw_fd(), &mut ev) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl AsFd for Epoll {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// The descriptor the crate hands out for a device channel (an RDMA CM event channel, a
/// completion channel): an [`Epoll`] watching the channel, made on first use. It is
/// readiness-only: readable while the channel is, and nothing else. The channel's own
/// descriptor is a device file (`/dev/infiniband/rdma_cm`) whose `write(2)` takes commands
/// with raw user pointers, so it never leaves the crate (`docs/soundness.md`, "Descriptors").
#[derive(Debug, Default)]
pub(crate) struct ReadyFd(OnceLock<Epoll>);

impl ReadyFd {
    /// The epoll descriptor watching `channel`, made on the first call; every call passes the
    /// owner's one channel, open as long as `self`.
    pub(crate) fn get(&self, channel: BorrowedFd<'_>) -> io::Result<BorrowedFd<'_>> {
        if let Some(ep) = self.0.get() {
            return Ok(ep.as_fd());
        }
        let ep = Epoll::new()?;
        ep.add(channel)?;
        // Two first calls at once: one instance is kept, the other closed.
        Ok(self.0.get_or_init(|| ep).as_fd())
    }
}

/// Sets `O_NONBLOCK` on a descriptor the caller keeps open (`fcntl(2)`).
pub(crate) fn set_nonblocking_raw(fd: RawFd) -> io::Result<()> {
    // That `fd` belongs to the caller, so no one else's flags change, is the crate-private
    // caller's contract: I/O safety, not memory safety.
    // SAFETY: F_GETFL takes no pointer; fcntl(2) answers EBADF for a descriptor that is not open.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if fl < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: F_SETFL takes an integer argument; as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn cpu_time_grows() {
        let a = cpu_time();
        let mut x = 0u64;
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(30) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(cpu_time() > a);
    }

    #[test]
    fn prefault_code_covers_this_test_binary() {
        let n = prefault_code().unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_str().unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let own: u64 = maps
            .lines()
            .filter(|l| l.ends_with(exe) && l.split_whitespace().nth(1).unwrap().contains('x'))
            .map(|l| {
                let (a, b) = l
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .split_once('-')
                    .unwrap();
                u64::from_str_radix(b, 16).unwrap() - u64::from_str_radix(a, 16).unwrap()
            })
            .sum();
        assert!(own > 0, "no executable mapping of {exe} in /proc/self/maps");
        assert!(
            n >= own,
            "prefaulted {n} bytes, this binary's code alone is {own}"
        );
    }

    #[test]
    fn ticks_advance() {
        let a = ticks();
        std::thread::sleep(Duration::from_millis(2));
        assert!(ticks() > a);
    }

    #[test]
    fn wait_readable_times_out_then_sees_data() {
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        let t = Instant::now();
        assert!(!wait_readable(&a, Some(Duration::from_millis(20))).unwrap());
        assert!(t.elapsed() >= Duration::from_millis(20));
        b.write_all(b"x").unwrap();
        assert!(wait_readable(&a, Some(Duration::from_secs(5))).unwrap());
        assert!(wait_readable(&a, None).unwrap());
    }

    #[test]
    fn epoll_is_readable_while_a_watched_fd_is() {
        let (a, mut a2) = std::os::unix::net::UnixStream::pair().unwrap();
        let (b, _b2) = std::os::unix::net::UnixStream::pair().unwrap();
        let ep = Epoll::new().unwrap();
        ep.add(a.as_fd()).unwrap();
        ep.add(b.as_fd()).unwrap();
        assert!(!wait_readable(&ep, Some(Duration::from_millis(10))).unwrap());
        a2.write_all(b"x").unwrap();
        assert!(wait_readable(&ep, Some(Duration::from_secs(5))).unwrap());
        // Level-triggered: still readable while the byte is unread.
        assert!(wait_readable(&ep, Some(Duration::ZERO)).unwrap());
        assert!(
            ep.add(a.as_fd()).is_err(),
            "a second add of one fd is EEXIST"
        );
    }

    #[test]
    fn wait_readable_any_names_the_ready_one() {
        let (a, _a2) = std::os::unix::net::UnixStream::pair().unwrap();
        let (b, mut b2) = std::os::unix::net::UnixStream::pair().unwrap();
        let fds = [a.as_fd(), b.as_fd()];
        assert_eq!(
            wait_readable_any(&fds, Some(Duration::from_millis(10))).unwrap(),
            None
        );
        b2.write_all(b"x").unwrap();
        assert_eq!(wait_readable_any(&fds, None).unwrap(), Some(1));
    }
}
