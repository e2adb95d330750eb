//! Ping-pong over an [`Endpoint`], compatible with ibv_rc_pingpong's flow: the client SENDs
//! `size` bytes and waits for the server's `size`-byte reply, `iters` times; both sides must
//! use the same size and count. Over RDMA CM the client states them in its handshake
//! ([`session_params`]) and the server adopts them ([`admit`]); over the out-of-band exchange
//! (the peer may be ibv_rc_pingpong, which exchanges none) both sides give them.
//!
//! Payload: a fixed byte pattern with the sequence number stamped at the start (big-endian, its
//! low bytes when `size < 8`) and its complement at the end (`size >= 16`). Every pong carries
//! the ping's sequence number and the pattern, and the client checks each one in full, so it
//! also works against `ibv_rc_pingpong`'s server (which echoes what it received). The server
//! checks the sequence stamps of each ping only when the peer is known to be rdmaxfer (the CM
//! handshake says so): an OOB peer may be ibv_rc_pingpong, whose pings carry no sequence
//! numbers.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::os;
use crate::verbs::WaitMode;
use crate::xfer::endpoint::{Endpoint, EndpointOptions, PeerKind, Transport};
use crate::xfer::params::{Limits, SessionKind, SessionParams};

mod summary;
pub use summary::Summary;

/// The payload pattern of a given size.
#[derive(Clone, Debug)]
pub struct Pattern {
    base: Vec<u8>,
}

fn stamp_len(size: usize) -> usize {
    size.min(8)
}

fn has_tail(size: usize) -> bool {
    size >= 16
}

/// `$f::<K>($args)` for `$n == K` in 1..=7, else `$other`: a fixed size per length, so that
/// each arm is a few loads and stores (not a `memcpy` call or a loop of shifts).
macro_rules! by_short_len {
    ($n:expr, $f:ident($($arg:expr),*), $other:expr) => {
        match $n {
            1 => $f::<1>($($arg),*),
            2 => $f::<2>($($arg),*),
            3 => $f::<3>($($arg),*),
            4 => $f::<4>($($arg),*),
            5 => $f::<5>($($arg),*),
            6 => $f::<6>($($arg),*),
            7 => $f::<7>($($arg),*),
            _ => $other,
        }
    };
}

/// Writes the last `buf.len()` bytes of `s` into `buf` (shorter than 8 bytes; else nothing).
#[inline(always)]
fn put_low(buf: &mut [u8], s: &[u8; 8]) {
    fn put<const K: usize>(buf: &mut [u8], s: &[u8; 8]) {
        if let (Ok(b), Some(low)) = (<&mut [u8; K]>::try_from(buf), s.last_chunk::<K>()) {
            *b = *low;
        }
    }
    by_short_len!(buf.len(), put(buf, s), ())
}

/// True if `buf` (shorter than 8 bytes) is the last `buf.len()` bytes of `s` (see [`put_low`]).
#[inline(always)]
fn is_low(buf: &[u8], s: &[u8; 8]) -> bool {
    fn is<const K: usize>(buf: &[u8], s: &[u8; 8]) -> bool {
        <&[u8; K]>::try_from(buf).ok() == s.last_chunk::<K>()
    }
    buf.is_empty() || by_short_len!(buf.len(), is(buf, s), false)
}

impl Pattern {
    /// The pattern for `size`-byte messages.
    pub fn new(size: usize) -> Pattern {
        Pattern {
            base: (0..size)
                .map(|i| ((i.wrapping_mul(31)) ^ (i >> 8) ^ 0xa5) as u8)
                .collect(),
        }
    }

    /// Message size.
    pub fn size(&self) -> usize {
        self.base.len()
    }

    /// Writes message `seq` into `buf` (which must be `size` bytes).
    pub fn fill(&self, buf: &mut [u8], seq: u64) {
        let n = buf.len().min(self.base.len());
        buf[..n].copy_from_slice(&self.base[..n]);
        self.stamp(&mut buf[..n], seq);
    }

    /// Writes only the sequence stamps of message `seq`: the rest of `buf` must already hold
    /// the pattern (from an earlier [`fill`](Self::fill)).
    ///
    /// This and the checks run once per message on the ping-pong's critical path: the stamps
    /// are written and compared as fixed-size arrays (or computed bytes below 8 bytes), never
    /// through a `memcpy`/`memcmp` call, and the error paths are out of line.
    #[inline]
    pub fn stamp(&self, buf: &mut [u8], seq: u64) {
        let s = seq.to_be_bytes();
        if let Some(head) = buf.first_chunk_mut::<8>() {
            *head = s;
        } else {
            // Shorter than 8 bytes: the low bytes of `seq`, big-endian.
            put_low(buf, &s);
        }
        if has_tail(buf.len()) {
            if let Some(tail) = buf.last_chunk_mut::<8>() {
                *tail = (!seq).to_be_bytes();
            }
        }
    }

    /// True if `buf` carries the stamps of message `seq` (its length is not checked).
    #[inline]
    fn stamps_ok(buf: &[u8], seq: u64) -> bool {
        let s = seq.to_be_bytes();
        let head = match buf.first_chunk::<8>() {
            Some(h) => *h == s,
            None => is_low(buf, &s),
        };
        head && (!has_tail(buf.len()) || buf.last_chunk::<8>() == Some(&(!seq).to_be_bytes()))
    }

    /// Checks the length and the sequence stamps only (cheap: for the server's side).
    #[inline]
    pub fn check_seq(&self, buf: &[u8], seq: u64, what: &str) -> Result<()> {
        if buf.len() == self.base.len() && Self::stamps_ok(buf, seq) {
            return Ok(());
        }
        self.check_seq_slow(buf, seq, what)
    }

    #[cold]
    #[inline(never)]
    fn check_seq_slow(&self, buf: &[u8], seq: u64, what: &str) -> Result<()> {
        self.check_len_and_head(buf, seq, what)?;
        let n = buf.len();
        if has_tail(n) && buf[n - 8..] != (!seq).to_be_bytes() {
            return Err(Error::Protocol(format!(
                "{what} {seq}: trailing sequence stamp mismatch"
            )));
        }
        Ok(())
    }

    fn check_len_and_head(&self, buf: &[u8], seq: u64, what: &str) -> Result<()> {
        let n = self.base.len();
        if buf.len() != n {
            return Err(Error::Protocol(format!(
                "{what} {seq}: got {} bytes, expected {n} (both sides must use the same -s)",
                buf.len()
            )));
        }
        let k = stamp_len(n);
        let want = &seq.to_be_bytes()[8 - k..];
        if &buf[..k] != want {
            let mut got = [0u8; 8];
            got[8 - k..].copy_from_slice(&buf[..k]);
            return Err(Error::Protocol(format!(
                "{what} {seq}: carries sequence number {} (low {k} bytes), expected {seq}",
                u64::from_be_bytes(got)
            )));
        }
        Ok(())
    }

    /// Checks that `buf` is message `seq`; the error says what differs.
    #[inline]
    pub fn check(&self, buf: &[u8], seq: u64, what: &str) -> Result<()> {
        let n = self.base.len();
        let (k, end) = (stamp_len(n), if has_tail(n) { n - 8 } else { n });
        if buf.len() == n
            && Self::stamps_ok(buf, seq)
            && (end <= k || buf[k..end] == self.base[k..end])
        {
            return Ok(());
        }
        self.check_slow(buf, seq, what)
    }

    #[cold]
    #[inline(never)]
    fn check_slow(&self, buf: &[u8], seq: u64, what: &str) -> Result<()> {
        self.check_len_and_head(buf, seq, what)?;
        let n = self.base.len();
        let k = stamp_len(n);
        let mid_end = if has_tail(n) { n - 8 } else { n };
        if buf[k..mid_end] != self.base[k..mid_end] {
            let at = (k..mid_end).find(|&i| buf[i] != self.base[i]).unwrap_or(k);
            return Err(Error::Protocol(format!(
                "{what} {seq}: pattern mismatch at byte {at}: {:#04x}, expected {:#04x}",
                buf[at], self.base[at]
            )));
        }
        self.check_seq(buf, seq, what)
    }

    /// The sequence number stamped in `buf`, if it is at least 8 bytes.
    pub fn seq_of(buf: &[u8]) -> Option<u64> {
        buf.get(..8)
            .map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
    }
}

/// Fills send buffers: the whole pattern only into a buffer not seen before, then just the
/// stamps. The endpoint cycles through a few registered send buffers, which keep their contents
/// (the device only reads them), so this saves a copy of the message per iteration. The buffers
/// filled are remembered in a small open-addressed table (a look-up is a hash and a compare or
/// two, where a list was scanned); one it has no room for is filled in full every time.
struct Filler<'a> {
    pat: &'a Pattern,
    /// Addresses of filled buffers (0: free).
    primed: [usize; PRIMED],
}

/// Buffers a [`Filler`] remembers (twice a ping-pong's send buffers: short probes).
const PRIMED: usize = 2 * SEND_DEPTH;

impl<'a> Filler<'a> {
    fn new(pat: &'a Pattern) -> Filler<'a> {
        Filler {
            pat,
            primed: [0; PRIMED],
        }
    }

    /// How many buffers it has filled in full and remembers.
    #[cfg(test)]
    fn primed(&self) -> usize {
        self.primed.iter().filter(|&&k| k != 0).count()
    }

    #[inline(always)]
    fn fill(&mut self, buf: &mut [u8], seq: u64) {
        if buf.len() <= 8 {
            // The stamp is the whole message: no buffer to look up.
            self.pat.stamp(buf, seq);
            return;
        }
        let key = buf.as_ptr() as usize;
        // Fibonacci hashing: the top bits of the product pick the first slot.
        let mut i =
            (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (usize::BITS - PRIMED.ilog2())) % PRIMED;
        for _ in 0..PRIMED {
            let k = self.primed[i];
            if k == key {
                self.pat.stamp(buf, seq);
                return;
            }
            if k == 0 {
                self.primed[i] = key;
                break;
            }
            i = (i + 1) % PRIMED;
        }
        self.pat.fill(buf, seq);
    }
}

/// Which side ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Sent the pings.
    Client,
    /// Answered them.
    Server,
}

/// The results of one run; serialises to the `--json` object.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct Stats {
    /// Client or server.
    pub role: Role,
    /// CM or OOB.
    pub transport: Transport,
    /// "poll" or "event".
    pub wait: &'static str,
    /// Message size in bytes.
    pub size: usize,
    /// Round trips.
    pub iters: u64,
    /// Bytes moved both ways: size × iters × 2 (as ibv_rc_pingpong counts).
    pub bytes: u64,
    /// Wall time of the loop (client: from the first ping posted, as ibv_rc_pingpong times it).
    pub seconds: f64,
    /// bytes × 8 / µs.
    pub mbit_per_sec: f64,
    /// µs per round trip (ibv_rc_pingpong's usec/iter).
    pub usec_per_iter: f64,
    /// CPU time (user + system) the process used during the loop.
    pub cpu_seconds: f64,
    /// CPU seconds per iteration.
    pub cpu_seconds_per_iter: f64,
    /// Round-trip times, µs: from one round trip's start to the next's, as ib_send_lat takes
    /// them (client: before each ping, and after the last pong; server: as each ping arrived,
    /// one sample fewer).
    pub rtt_us: Summary,
    /// Half the round-trip times, µs.
    pub one_way_us: Summary,
    /// Number of round-trip samples.
    pub rtt_samples: usize,
    /// Whether every received message was checked (client: sequence and pattern, always;
    /// server: sequence stamps, with rdmaxfer peers).
    pub checked: bool,
}

impl Stats {
    /// ibv_rc_pingpong's two result lines.
    pub fn ibv_lines(&self) -> String {
        let usec = self.seconds * 1e6;
        format!(
            "{} bytes in {:.2} seconds = {:.2} Mbit/sec\n{} iters in {:.2} seconds = {:.2} usec/iter",
            self.bytes, self.seconds, self.mbit_per_sec, self.iters, self.seconds, usec / self.iters.max(1) as f64
        )
    }

    /// The ibv_rc_pingpong lines plus latency and CPU lines.
    pub fn text(&self) -> String {
        let f = |s: &Summary| {
            format!(
                "min {:.2} p50 {:.2} mean {:.2} p99 {:.2} p99.9 {:.2} max {:.2}",
                s.min, s.p50, s.mean, s.p99, s.p999, s.max
            )
        };
        format!(
            "{}\nrtt_us:     {}\none_way_us: {}\ncpu: {:.3} seconds ({:.2} usec/iter, {} mode)",
            self.ibv_lines(),
            f(&self.rtt_us),
            f(&self.one_way_us),
            self.cpu_seconds,
            self.cpu_seconds_per_iter * 1e6,
            self.wait
        )
    }
}

/// Wall time, CPU time and TSC ticks since the start of a run; converts ticks to microseconds
/// with a rate measured over the run.
struct Clock {
    t0: Instant,
    k0: u64,
    cpu0: Duration,
}

impl Clock {
    fn start() -> Clock {
        Clock {
            cpu0: os::cpu_time(),
            t0: Instant::now(),
            k0: os::ticks(),
        }
    }

    /// Microseconds per tick over the run so far (falls back to 1 ns/tick).
    fn us_per_tick(&self) -> (Duration, f64) {
        let (el, k) = (self.t0.elapsed(), os::ticks());
        let dk = k.wrapping_sub(self.k0);
        let r = if dk > 0 {
            el.as_secs_f64() * 1e6 / dk as f64
        } else {
            1e-3
        };
        (el, r)
    }
}

fn finish(
    ep: &Endpoint,
    role: Role,
    size: usize,
    iters: u64,
    clock: Clock,
    stamps: &[u64],
    checked: bool,
) -> Stats {
    let (el, us_per_tick) = clock.us_per_tick();
    let cpu = os::cpu_time().saturating_sub(clock.cpu0).as_secs_f64();
    // One sample per pair of consecutive stamps (as ib_send_lat takes them): the loop reads the
    // clock once per round trip and does no arithmetic on it.
    let rtt: Vec<f64> = stamps
        .windows(2)
        .map(|w| w[1].wrapping_sub(w[0]) as f64 * us_per_tick)
        .collect();
    let rtt_us = Summary::of(&rtt);
    let bytes = size as u64 * iters * 2;
    let usec = el.as_secs_f64() * 1e6;
    Stats {
        role,
        transport: ep.local().transport,
        wait: match ep.cq().mode() {
            WaitMode::Poll => "poll",
            WaitMode::Event => "event",
        },
        size,
        iters,
        bytes,
        seconds: el.as_secs_f64(),
        mbit_per_sec: if usec > 0.0 {
            bytes as f64 * 8.0 / usec
        } else {
            0.0
        },
        usec_per_iter: usec / iters.max(1) as f64,
        cpu_seconds: cpu,
        cpu_seconds_per_iter: cpu / iters.max(1) as f64,
        rtt_us,
        one_way_us: rtt_us.halved(),
        rtt_samples: rtt.len(),
        checked,
    }
}

fn check_size(ep: &Endpoint, size: usize) -> Result<()> {
    if size > ep.max_msg_size() {
        return Err(Error::InvalidArgument(format!(
            "size {size} exceeds the endpoint's message size {}",
            ep.max_msg_size()
        )));
    }
    Ok(())
}

/// Send buffers of a ping-pong endpoint, at most (fewer for large messages: see
/// [`endpoint_options`]).
const SEND_DEPTH: usize = 16;
/// What a ping-pong endpoint's send buffers may take together before it keeps fewer.
const SEND_BYTES: usize = 256 << 10;
/// Receives of a ping-pong endpoint, at most (fewer for large messages: see
/// [`endpoint_options`]).
const RECV_DEPTH: usize = 32;

/// Endpoint options for a ping-pong of `size`-byte messages (either side): one message in
/// flight. Up to 32 receives (within 256 KiB, at least 4) keep credit returns piggy-backed and
/// let taken receives go back up to 15 at a time (one list post: see `credit_flow`). Up to 16 send
/// buffers (within 256 KiB, at least 2): every message but the last may go unsignaled, and one
/// signaled SEND per cycle through the buffers retires the ones before it (see
/// `Endpoint::send_then`).
pub fn endpoint_options(base: &EndpointOptions, size: usize) -> EndpointOptions {
    EndpointOptions {
        msg_size: size,
        recv_depth: (SEND_BYTES / size.max(1)).clamp(4, RECV_DEPTH) as u32,
        send_depth: (SEND_BYTES / size.max(1)).clamp(2, SEND_DEPTH) as u32,
        extra_send_wr: 0,
        ..base.clone()
    }
}

/// The session parameters of a ping-pong client.
pub fn session_params(size: usize, iters: u64) -> SessionParams {
    SessionParams {
        kind: SessionKind::Pingpong,
        size: size as u64,
        iters,
        depth: 0,
    }
}

/// What a ping-pong server runs for a client: the size and count it stated (RDMA CM), within
/// `limits`, or else (`None`: OOB, C API clients) the server's own `size` and `iters`. The
/// refusal names what was asked for and the limit.
pub fn admit(
    params: Option<SessionParams>,
    limits: &Limits,
    own: (usize, u64),
) -> std::result::Result<(usize, u64), String> {
    let Some(p) = params else {
        return Ok(own);
    };
    if p.kind != SessionKind::Pingpong {
        return Err(format!(
            "this is a pingpong server; the client runs {}",
            p.kind.command()
        ));
    }
    limits.check(p.size, p.iters)?;
    let size = usize::try_from(p.size).map_err(|_| format!("-s {} is too large", p.size))?;
    Ok((size, p.iters))
}

/// Runs the client side: `iters` pings of `size` bytes, each pong checked.
pub fn run_client(ep: &mut Endpoint, size: usize, iters: u64) -> Result<Stats> {
    check_size(ep, size)?;
    let pat = Pattern::new(size);
    // The tick count at the start of each round trip, and once after the last.
    let mut stamps = Vec::with_capacity(iters.min(1 << 24) as usize + 1);
    let mut filler = Filler::new(&pat);
    let mut clock = None;
    let mut pings = || -> Result<()> {
        for seq in 0..iters {
            stamps.push(os::ticks());
            let last = seq + 1 == iters;
            // Pong `seq - 1` is checked once ping `seq` is posted, off the round trip. Every
            // ping but the last may go unsignaled (the next one's completion retires it).
            ep.send_then(
                size,
                |b| filler.fill(b, seq),
                |prev| match seq.checked_sub(1) {
                    Some(p) => pong_check(&pat, prev, p),
                    None => Ok(()),
                },
                !last,
            )?
            .map_err(|e| *e)?;
            if clock.is_none() {
                // ibv_rc_pingpong starts its clock once the first ping is posted; so does this.
                clock = Some(Clock::start());
            }
            // The pong stays with the endpoint until the next ping is posted; the last one is
            // checked here.
            ep.take_deferred()?;
            if last {
                pong_check(&pat, ep.last_deferred(), seq).map_err(|e| *e)?;
            }
        }
        stamps.push(os::ticks());
        Ok(())
    };
    pings().map_err(|e| ep.end_burst(e))?;
    // The clock stops when every ping has completed, as ibv_rc_pingpong's loop does; re-posting
    // the last receive (flush) is not part of the ping-pong.
    ep.wait_sent()?;
    let clock = clock.unwrap_or_else(Clock::start);
    let stats = finish(ep, Role::Client, size, iters, clock, &stamps, true);
    ep.flush()?;
    Ok(stats)
}

/// The client's check of a pong. Up to 8 bytes a message is its sequence stamp: one compare, in
/// line. Longer ones are checked out of line, in [`pong_check_full`].
///
/// Its error is boxed so that the closures returning it stay a pointer wide (a `Result<()>` is
/// moved through memory on every round trip).
#[inline(always)]
fn pong_check(pat: &Pattern, buf: &[u8], seq: u64) -> std::result::Result<(), Box<Error>> {
    let n = pat.size();
    if n <= 8 && buf.len() == n && Pattern::stamps_ok(buf, seq) {
        return Ok(());
    }
    pong_check_full(pat, buf, seq)
}

/// [`pong_check`] of a message longer than 8 bytes (or a short one that fails), out of line so
/// that a profile can tell it apart (`ci/guest-bench-instr.sh` counts the 4 KiB client with and
/// without it).
#[inline(never)]
fn pong_check_full(pat: &Pattern, buf: &[u8], seq: u64) -> std::result::Result<(), Box<Error>> {
    pat.check(buf, seq, "pong").map_err(Box::new)
}

/// Runs the server side: answers `iters` pings of `size` bytes. The sequence stamps of each ping
/// are checked when the peer is rdmaxfer (see the module docs); sizes always.
pub fn run_server(ep: &mut Endpoint, size: usize, iters: u64) -> Result<Stats> {
    check_size(ep, size)?;
    let check = matches!(ep.peer().kind, PeerKind::Rdmaxfer { .. });
    let pat = Pattern::new(size);
    // The tick count as each ping arrived: a round trip's sample is the time to the next.
    let mut stamps = Vec::with_capacity(iters.min(1 << 24) as usize);
    let mut filler = Filler::new(&pat);
    let clock = Clock::start();
    let mut pongs = || -> Result<()> {
        for seq in 0..iters {
            // The check's error is boxed (see pong_check).
            ep.recv_deferred(|m| {
                if check {
                    pat.check_seq(m.data, seq, "ping").map_err(Box::new)
                } else if m.data.len() != size {
                    Err(Box::new(Error::Protocol(format!(
                        "ping {seq}: got {} bytes, expected {size} (both sides must use the same -s)",
                        m.data.len()
                    ))))
                } else {
                    Ok(())
                }
            })?
            .map_err(|e| *e)?;
            // One tick read per round trip: the end of this sample is the start of the next.
            stamps.push(os::ticks());
            // Every pong but the last may go unsignaled: one wake-up per round trip.
            ep.send_then(size, |b| filler.fill(b, seq), |_| (), seq + 1 < iters)?;
        }
        Ok(())
    };
    pongs().map_err(|e| ep.end_burst(e))?;
    ep.wait_sent()?;
    let stats = finish(ep, Role::Server, size, iters, clock, &stamps, check);
    ep.flush()?;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pattern_round_trips_all_small_sizes() {
        for size in [1usize, 2, 7, 8, 9, 15, 16, 17, 64, 4096] {
            let p = Pattern::new(size);
            let mut b = vec![0u8; size];
            for seq in [0u64, 1, 255, 256, 0xdead_beef, u64::MAX] {
                p.fill(&mut b, seq);
                p.check(&b, seq, "pong").unwrap();
            }
        }
    }

    #[test]
    fn pattern_detects_wrong_seq_corruption_and_size() {
        let p = Pattern::new(4096);
        let mut b = vec![0u8; 4096];
        p.fill(&mut b, 7);
        let e = p.check(&b, 8, "pong").unwrap_err().to_string();
        assert!(e.contains("sequence number 7"), "{e}");
        b[100] ^= 1;
        let e = p.check(&b, 7, "pong").unwrap_err().to_string();
        assert!(e.contains("byte 100"), "{e}");
        b[100] ^= 1;
        b[4095] ^= 1;
        assert!(p
            .check(&b, 7, "pong")
            .unwrap_err()
            .to_string()
            .contains("trailing"));
        assert!(p
            .check(&b[..4000], 7, "pong")
            .unwrap_err()
            .to_string()
            .contains("same -s"));
        assert_eq!(
            Pattern::seq_of(&{
                p.fill(&mut b, 42);
                b.clone()
            }),
            Some(42)
        );
    }

    #[test]
    fn stamping_a_filled_buffer_equals_filling_it() {
        for size in [1usize, 8, 16, 100, 4096] {
            let p = Pattern::new(size);
            let (mut a, mut b) = (vec![0u8; size], vec![0u8; size]);
            p.fill(&mut a, 1);
            p.stamp(&mut a, 99);
            p.fill(&mut b, 99);
            assert_eq!(a, b);
            p.check(&a, 99, "pong").unwrap();
            let mut f = Filler::new(&p);
            let mut c = vec![0u8; size];
            f.fill(&mut c, 5);
            f.fill(&mut c, 6);
            p.check(&c, 6, "pong").unwrap();
            assert_eq!(f.primed(), usize::from(size > 8));
        }
    }

    #[test]
    fn filler_with_more_buffers_than_it_remembers_still_fills_each() {
        let p = Pattern::new(64);
        let mut f = Filler::new(&p);
        let mut bufs = vec![vec![0u8; 64]; PRIMED + 8];
        for seq in 0..3 {
            for b in &mut bufs {
                f.fill(b, seq);
                p.check(b, seq, "ping").unwrap();
            }
        }
        assert_eq!(f.primed(), PRIMED);
    }

    #[test]
    fn check_seq_ignores_the_pattern_but_not_the_stamps() {
        let p = Pattern::new(64);
        let mut b = vec![0u8; 64];
        p.fill(&mut b, 3);
        b[30] ^= 0xff;
        assert!(p.check_seq(&b, 3, "ping").is_ok());
        assert!(p.check(&b, 3, "ping").is_err());
        assert!(p.check_seq(&b, 4, "ping").is_err());
        b[63] ^= 1;
        assert!(p.check_seq(&b, 3, "ping").is_err());
        assert!(p.check_seq(&b[..10], 3, "ping").is_err());
    }

    #[test]
    fn one_byte_pattern_carries_low_seq_byte() {
        let p = Pattern::new(1);
        let mut b = [0u8];
        p.fill(&mut b, 0x1234);
        assert_eq!(b[0], 0x34);
        assert!(p.check(&b, 0x1235, "pong").is_err());
    }

    #[test]
    fn ibv_lines_match_ibv_rc_pingpong_format() {
        let s = Stats {
            role: Role::Client,
            transport: Transport::Oob,
            wait: "poll",
            size: 4096,
            iters: 1000,
            bytes: 8_192_000,
            seconds: 0.16,
            mbit_per_sec: 8_192_000.0 * 8.0 / 160_000.0,
            usec_per_iter: 160.0,
            cpu_seconds: 0.1,
            cpu_seconds_per_iter: 0.0001,
            rtt_us: Summary::default(),
            one_way_us: Summary::default(),
            rtt_samples: 0,
            checked: true,
        };
        assert_eq!(
            s.ibv_lines(),
            "8192000 bytes in 0.16 seconds = 409.60 Mbit/sec\n1000 iters in 0.16 seconds = 160.00 usec/iter"
        );
        let j: serde_json::Value = serde_json::to_value(&s).unwrap();
        for k in ["size", "iters", "seconds", "mbit_per_sec", "cpu_seconds"] {
            assert!(j[k].is_number(), "{k}");
        }
        for k in ["rtt_us", "one_way_us"] {
            for f in ["min", "p50", "mean", "p99", "p999", "max"] {
                assert!(j[k][f].is_number(), "{k}.{f}");
            }
        }
    }

    proptest! {
        #[test]
        fn check_accepts_exactly_the_message(size in 0usize..40, seq: u64, other: u64, flip: Option<(usize, u8)>) {
            let p = Pattern::new(size);
            let mut want = vec![0u8; size];
            p.fill(&mut want, seq);
            let mut b = vec![0u8; size];
            p.fill(&mut b, other);
            if let Some((i, x)) = flip.filter(|_| size > 0) {
                b[i % size] ^= x;
            }
            prop_assert_eq!(p.check(&b, seq, "pong").is_ok(), b == want);
            let stamps_match = (0..size).all(|i| {
                let stamp = i < 8 || (size >= 16 && i >= size - 8);
                !stamp || b[i] == want[i]
            });
            prop_assert_eq!(p.check_seq(&b, seq, "ping").is_ok(), stamps_match);
            prop_assert!(p.check_seq(&b[..size.saturating_sub(1)], seq, "ping").is_err() || size == 0);
        }

        #[test]
        fn check_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..64), size in 0usize..64, seq: u64) {
            let _ = Pattern::new(size).check(&buf, seq, "pong");
        }

        #[test]
        fn any_single_bit_flip_is_caught(size in 1usize..300, seq: u64, bit: usize) {
            let p = Pattern::new(size);
            let mut b = vec![0u8; size];
            p.fill(&mut b, seq);
            let bit = bit % (size * 8);
            b[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(p.check(&b, seq, "pong").is_err());
        }
    }
}
