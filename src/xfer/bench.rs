//! Bandwidth measurement the way perftest does it: the initiator keeps up to `tx_depth` work
//! requests in flight, posts each refill as one list, signals one in `signal_every`, and times
//! first post to last completion.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::verbs::{
    LocalBuf, RemoteRegion, SendBatch, SendOp, SendRequest, Sge, SharedList, SharedPost,
};
use crate::xfer::rdma_rw::Initiator;

/// Which operation to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum BenchOp {
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// SEND (the peer must keep receives posted).
    Send,
}

impl std::str::FromStr for BenchOp {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "write" => Ok(BenchOp::Write),
            "read" => Ok(BenchOp::Read),
            "send" => Ok(BenchOp::Send),
            _ => Err(Error::InvalidArgument(format!(
                "bench op must be write, read or send, not {s:?}"
            ))),
        }
    }
}

/// One bandwidth result, in perftest's units (MB = 2^20 bytes).
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct BwReport {
    /// Operation.
    pub op: BenchOp,
    /// Message size in bytes.
    pub size: usize,
    /// Messages.
    pub iters: u64,
    /// Best rate over any window of `tx_depth` consecutive completions, MiB/s.
    pub bw_peak_mib_s: f64,
    /// Average rate, first post to last completion, MiB/s.
    pub bw_avg_mib_s: f64,
    /// Million messages per second.
    pub msg_rate_mpps: f64,
    /// Wall-clock seconds measured.
    pub seconds: f64,
    /// CPU seconds (user + system) this process used during the measurement.
    pub cpu_seconds: f64,
    /// The user-space part of `cpu_seconds` (the rest is the kernel's, which on Soft-RoCE
    /// includes the soft device's own work).
    pub cpu_user_seconds: f64,
}

impl BwReport {
    /// perftest's header line.
    pub const HEADER: &'static str =
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]   CPU[s]";

    /// perftest's result line (plus CPU seconds).
    pub fn line(&self) -> String {
        format!(
            " {:<10} {:<10}       {:<7.2}            {:<7.2}              {:<7.6}       {:.3}",
            self.size,
            self.iters,
            self.bw_peak_mib_s,
            self.bw_avg_mib_s,
            self.msg_rate_mpps,
            self.cpu_seconds
        )
    }
}

/// Parameters of [`run_initiator`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct BwParams {
    /// Operation.
    pub op: BenchOp,
    /// Message size.
    pub size: usize,
    /// Messages to send.
    pub iters: u64,
    /// Work requests kept in flight.
    pub tx_depth: u32,
    /// Deadline for each completion.
    pub timeout: Duration,
    /// SEND only: post each refill of the send queue as one list of SENDs of one shared source
    /// ([`Endpoint::send_shared_list`]) instead of one SEND per call from the endpoint's own
    /// send buffers ([`Endpoint::send_with`]).
    pub post_lists: bool,
}

impl BwParams {
    /// `op` on 64 KiB messages, 1000 of them, 128 in flight, 10 s for each completion, SENDs
    /// as post lists (the `rdmaxfer bench` defaults).
    pub fn new(op: BenchOp) -> BwParams {
        BwParams {
            op,
            size: 64 << 10,
            iters: 1000,
            tx_depth: 128,
            timeout: Duration::from_secs(10),
            post_lists: true,
        }
    }

    setters! {
        op: BenchOp,
        size: usize,
        iters: u64,
        tx_depth: u32,
        timeout: Duration,
        post_lists: bool,
    }
}

const MIB: f64 = 1048576.0;

/// CPU seconds used over a measurement.
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub struct CpuUsed {
    /// User + system.
    pub total: f64,
    /// User only.
    pub user: f64,
}

/// Measures the CPU time used from [`CpuMeter::start`] to [`CpuMeter::stop`].
struct CpuMeter(std::time::Duration, std::time::Duration);

impl CpuMeter {
    fn start() -> CpuMeter {
        let (u, s) = crate::os::cpu_times();
        CpuMeter(u, s)
    }

    fn stop(&self) -> CpuUsed {
        let (u, s) = crate::os::cpu_times();
        let user = u.saturating_sub(self.0).as_secs_f64();
        CpuUsed {
            total: user + s.saturating_sub(self.1).as_secs_f64(),
            user,
        }
    }
}

/// Computes the report from completion timestamps (one per message, in order).
#[cfg(test)]
pub(crate) fn report(
    op: BenchOp,
    size: usize,
    start: Instant,
    done_at: &[Instant],
    window: usize,
    cpu: CpuUsed,
) -> BwReport {
    let marks: Vec<Mark> = done_at
        .iter()
        .enumerate()
        .map(|(i, t)| (i as u64 + 1, *t))
        .collect();
    report_marks(op, size, start, &marks, window, cpu)
}

/// A point of a run: how many messages had completed, and when (one per completion event, not
/// per message: a completion that retires many messages is one mark).
pub(crate) type Mark = (u64, Instant);

/// [`report`] from marks (in order): the peak is the best rate between two marks at least
/// `window` messages apart (the closest such pair for each mark).
pub(crate) fn report_marks(
    op: BenchOp,
    size: usize,
    start: Instant,
    marks: &[Mark],
    window: usize,
    cpu: CpuUsed,
) -> BwReport {
    let (iters, end) = marks.last().copied().unwrap_or((0, start));
    let secs = end.duration_since(start).as_secs_f64().max(1e-9);
    let avg = size as f64 * iters as f64 / secs / MIB;
    let w = window.max(1) as u64;
    let mut peak = avg;
    let mut j = 0;
    for &(n, t) in marks {
        // The latest mark at least `w` messages before this one.
        while j + 1 < marks.len() && marks[j + 1].0 + w <= n {
            j += 1;
        }
        let (m, u) = marks[j];
        if m + w <= n {
            let dt = t.duration_since(u).as_secs_f64();
            if dt > 0.0 {
                peak = peak.max(size as f64 * (n - m) as f64 / dt / MIB);
            }
        }
    }
    BwReport {
        op,
        size,
        iters,
        bw_peak_mib_s: peak,
        bw_avg_mib_s: avg,
        msg_rate_mpps: iters as f64 / secs / 1e6,
        seconds: secs,
        cpu_seconds: cpu.total,
        cpu_user_seconds: cpu.user,
    }
}

/// Runs the initiator side of a WRITE / READ / SEND bandwidth test on a connected QP. For WRITE
/// and READ `remote` is the peer's exposed region (at least `size` bytes); every message targets
/// its start, as perftest does. For SEND the peer must have enough receives posted.
pub fn run_initiator(
    ini: &mut impl Initiator,
    remote: Option<&RemoteRegion>,
    p: &BwParams,
) -> Result<BwReport> {
    let depth = p.tx_depth.clamp(1, ini.send_depth().max(1)) as u64;
    // One completion per quarter of the queue, and at most 8 MiB between two (at 1 MiB a
    // quarter of 128 would leave 32 MiB unacknowledged between completions).
    let per_8mib = ((8u64 << 20) / (p.size as u64).max(1)).max(1);
    let signal_every = (depth / 4).clamp(1, per_8mib);
    let target = match (p.op, remote) {
        (BenchOp::Send, _) => None,
        (_, Some(r)) => Some(r.slice(0, p.size as u64)?),
        (_, None) => {
            return Err(Error::InvalidArgument(
                "WRITE/READ bandwidth needs the peer's region".into(),
            ))
        }
    };
    // Sources may be shared by every in-flight WR; READ destinations must be exclusive.
    let src = LocalBuf::new(ini.pd(), p.size)?.freeze();
    let mut dsts: Vec<LocalBuf> = if p.op == BenchOp::Read {
        LocalBuf::slots(ini.pd(), p.size, depth as usize)?
    } else {
        Vec::new()
    };
    // Every free slot of the send queue is filled with one post list (one doorbell), as
    // perftest does with -l; one WR in `signal_every` asks for a completion, which retires
    // the unsignaled ones before it. WRITEs of the one shared source go as a lean list (the
    // range checked once per list, a table entry only for the signaled WRs and the list's last).
    let mut batch = SendBatch::with_capacity(if p.op == BenchOp::Read {
        depth as usize
    } else {
        0
    });
    let mut list = SharedList::with_capacity(depth as usize);
    let cpu0 = CpuMeter::start();
    let start = Instant::now();
    let mut marks: Vec<Mark> = Vec::with_capacity(timestamps_capacity(p.iters));
    let (mut posted, mut completed) = (0u64, 0u64);
    while completed < p.iters {
        let room = (depth - (posted - completed)).min(p.iters - posted);
        if let (BenchOp::Write, Some(t), 1..) = (p.op, target, room) {
            let base = posted;
            let sp = SharedPost {
                src: &src,
                off: 0,
                len: p.size,
                n: room as usize,
                first: SendOp::Write(t),
                rest: SendOp::Write(t),
            };
            ini.post_shared(&mut list, &sp, base, |i| {
                let k = base + i as u64 + 1;
                k % signal_every == 0 || k == p.iters
            })?;
            posted += room;
        }
        while p.op != BenchOp::Write && posted < p.iters && posted - completed < depth {
            let last = posted + 1 == p.iters;
            let signaled = (posted + 1) % signal_every == 0 || last;
            let (op, sge) = match (p.op, target) {
                (BenchOp::Read, Some(t)) => (
                    SendOp::Read(t),
                    Sge::new(dsts.pop().expect("one READ buffer per WR in flight")),
                ),
                _ => (SendOp::Send, Sge::new(src.clone())),
            };
            let mut wr = SendRequest::new(posted, op, [sge]);
            if !signaled {
                wr = wr.unsignaled();
            }
            batch.push(wr);
            posted += 1;
        }
        if !batch.is_empty() {
            ini.post_batch(&mut batch)?;
        }
        for c in ini.wait_wc(16, p.timeout)? {
            let c = c.result()?;
            completed = c.wr_id + 1;
            marks.push((completed, Instant::now()));
            dsts.extend(c.into_all_local_bufs());
        }
    }
    let cpu = cpu0.stop();
    Ok(report_marks(
        p.op,
        p.size,
        start,
        &marks,
        depth as usize,
        cpu,
    ))
}

/// Room reserved up front for one mark per iteration (at most): capped (an iteration count is a
/// caller's value and may exceed memory), the vector grows past it if needed.
fn timestamps_capacity(iters: u64) -> usize {
    usize::try_from(iters.min(1 << 24)).unwrap_or(1 << 24)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_math() {
        let start = Instant::now();
        let done: Vec<Instant> = (1..=100)
            .map(|i| start + Duration::from_millis(i * 10))
            .collect();
        let cpu = CpuUsed {
            total: 0.5,
            user: 0.2,
        };
        let r = report(BenchOp::Write, 1 << 20, start, &done, 10, cpu);
        assert_eq!((r.cpu_seconds, r.cpu_user_seconds), (0.5, 0.2));
        assert_eq!(r.iters, 100);
        assert!((r.seconds - 1.0).abs() < 1e-6);
        assert!((r.bw_avg_mib_s - 100.0).abs() < 1e-6, "{}", r.bw_avg_mib_s);
        assert!((r.bw_peak_mib_s - 100.0).abs() < 1e-6);
        assert!((r.msg_rate_mpps - 0.0001).abs() < 1e-9);
        assert!(r.line().contains("1048576"));
        assert!("write".parse::<BenchOp>().is_ok() && "x".parse::<BenchOp>().is_err());
    }

    #[test]
    fn marks_cover_many_messages_each() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        // 4 messages by 1 s, 8 by 1.5 s (4 in 0.5 s: the peak), 12 by 3 s.
        let marks = [(4, at(1000)), (8, at(1500)), (12, at(3000))];
        let r = report_marks(
            BenchOp::Send,
            MIB as usize,
            start,
            &marks,
            4,
            CpuUsed::default(),
        );
        assert_eq!(r.iters, 12);
        assert!((r.bw_avg_mib_s - 4.0).abs() < 1e-9, "{}", r.bw_avg_mib_s);
        assert!((r.bw_peak_mib_s - 8.0).abs() < 1e-9, "{}", r.bw_peak_mib_s);
        // A window wider than the run: the peak is the average.
        let r = report_marks(BenchOp::Send, 1, start, &marks, 100, CpuUsed::default());
        assert_eq!(r.bw_peak_mib_s, r.bw_avg_mib_s);
    }
}

use crate::verbs::{ExposedRegion, RemoteAccess};
use crate::xfer::endpoint::{Endpoint, EndpointOptions, RecvScratch};
use crate::xfer::onesided::msg::{recv_msg, send_msg, Msg, Purpose};
use crate::xfer::params::{fmt_size, Limits, SessionKind, SessionParams};

fn purpose(op: BenchOp) -> Purpose {
    match op {
        BenchOp::Write => Purpose::BenchWrite,
        BenchOp::Read => Purpose::BenchRead,
        BenchOp::Send => Purpose::BenchSend,
    }
}

/// A generous deadline for a whole run of `bytes` (the emulated rxe moves ≈ 50 MB/s).
pub(crate) fn run_deadline(bytes: u64, step: Duration) -> Duration {
    step + Duration::from_secs_f64(bytes as f64 / 5e6)
}

/// What the server side of one bench run saw.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct ServedBench {
    /// Operation.
    pub op: BenchOp,
    /// Message size.
    pub size: u64,
    /// Messages the client ran.
    pub iters: u64,
}

impl BenchOp {
    /// The session kind a client of this op states in its handshake.
    pub fn kind(self) -> SessionKind {
        match self {
            BenchOp::Write => SessionKind::BenchWrite,
            BenchOp::Read => SessionKind::BenchRead,
            BenchOp::Send => SessionKind::BenchSend,
        }
    }

    /// The op of a bench session kind (`None`: not a bench).
    pub fn of_kind(k: SessionKind) -> Option<BenchOp> {
        match k {
            SessionKind::BenchWrite => Some(BenchOp::Write),
            SessionKind::BenchRead => Some(BenchOp::Read),
            SessionKind::BenchSend => Some(BenchOp::Send),
            SessionKind::Pingpong => None,
        }
    }

    fn of_purpose(p: Purpose) -> Option<BenchOp> {
        match p {
            Purpose::BenchWrite => Some(BenchOp::Write),
            Purpose::BenchRead => Some(BenchOp::Read),
            Purpose::BenchSend => Some(BenchOp::Send),
            Purpose::Session => None,
        }
    }
}

/// Most receives a SEND bench keeps posted (the endpoint's limit is 65536).
const MAX_RECV_DEPTH: u32 = 1 << 15;

/// Endpoint options for one side of a bench of `op` with `size`-byte messages and `tx_depth`
/// in flight (the same on both sides, so a server sized from the client's parameters matches
/// it): SEND needs receives of `size` bytes, twice `tx_depth` of them (as perftest's server
/// keeps more receives posted than its client keeps SENDs in flight: the sender then never
/// waits for the credits of receives the server has re-posted but not yet announced), at most
/// 64 MiB; WRITE and READ only carry control messages.
pub fn endpoint_options(
    base: &EndpointOptions,
    op: BenchOp,
    size: usize,
    tx_depth: u32,
) -> EndpointOptions {
    let (msg_size, recv_depth, send_depth) = match op {
        BenchOp::Send => {
            let fit = u32::try_from((64usize << 20) / size.max(1)).unwrap_or(u32::MAX);
            let depth = |d: u32| d.min(fit).clamp(2, MAX_RECV_DEPTH);
            (
                size.max(64),
                depth(tx_depth.saturating_mul(2)),
                depth(tx_depth),
            )
        }
        _ => (4096, 4, 4),
    };
    EndpointOptions {
        msg_size,
        recv_depth,
        send_depth,
        extra_send_wr: tx_depth,
        ..base.clone()
    }
}

/// The session parameters of a bench client.
pub fn session_params(p: &BwParams) -> SessionParams {
    SessionParams {
        kind: p.op.kind(),
        size: p.size as u64,
        iters: p.iters,
        depth: p.tx_depth,
    }
}

/// A bench server's options for a client that stated `params` (RDMA CM), as
/// [`endpoint_options`] sizes them for that client; the refusal (over `limits`, or not a bench
/// client) names what was asked for. `Ok(None)`: the client sent no parameters (OOB), the
/// listener's options stand and [`serve_bench`] checks its SETUP.
pub fn admit(
    params: Option<SessionParams>,
    limits: &Limits,
    base: &EndpointOptions,
) -> std::result::Result<Option<EndpointOptions>, String> {
    let Some(p) = params else {
        return Ok(None);
    };
    let op = BenchOp::of_kind(p.kind).ok_or_else(|| {
        format!(
            "this is a bench server; the client runs {}",
            p.kind.command()
        )
    })?;
    limits.check(p.size, p.iters)?;
    let size = usize::try_from(p.size).map_err(|_| format!("-s {} is too large", p.size))?;
    let mut opts = endpoint_options(base, op, size, p.depth.max(1));
    // The target of WRITE/READ is passive until DONE: it sleeps on the completion channel
    // rather than busy-poll a core away from the (soft) NIC, as perftest's server does.
    if op != BenchOp::Send {
        opts.wait = crate::verbs::WaitMode::Event;
    }
    Ok(Some(opts))
}

/// Refuses a client's SETUP with `why` (the client's error says it) and fails the session.
fn refuse(ep: &mut Endpoint, why: String) -> Error {
    let _ = send_msg(ep, &Msg::Refuse(why.clone()));
    let _ = ep.flush();
    Error::Protocol(why)
}

/// Serves one `rdmaxfer bench` client: the op, size and count its SETUP asks for, within
/// `limits` (a SEND bench also within the endpoint's receive buffers).
pub fn serve_bench(ep: &mut Endpoint, limits: &Limits) -> Result<ServedBench> {
    let (op, iters, csize) = match recv_msg(ep)? {
        Msg::Setup {
            purpose: p,
            size: s,
            iters,
            ..
        } => {
            let Some(op) = BenchOp::of_purpose(p) else {
                return Err(refuse(
                    ep,
                    "this is a bench server; the client asked for an expose session".into(),
                ));
            };
            if let Err(why) = limits.check(s, iters) {
                return Err(refuse(ep, why));
            }
            if op == BenchOp::Send && s > ep.msg_size() as u64 {
                let why = format!(
                    "the server's receive buffers take SENDs of at most -s {}; asked for -s {} \
                     (over --oob they are sized when the server starts: give it -s {})",
                    fmt_size(ep.msg_size() as u64),
                    fmt_size(s),
                    fmt_size(s)
                );
                return Err(refuse(ep, why));
            }
            (op, iters, s)
        }
        m => return Err(Error::Protocol(format!("expected SETUP, got {m:?}"))),
    };
    let size = usize::try_from(csize)
        .map_err(|_| Error::InvalidArgument(format!("-s {csize} is too large")))?;
    let step = ep.timeout();
    ep.set_timeout(run_deadline(csize.saturating_mul(iters), step));
    match op {
        BenchOp::Write | BenchOp::Read => {
            let region = ExposedRegion::new(ep.pd(), size, RemoteAccess::ReadWrite)?;
            let sent = send_msg(
                ep,
                &Msg::Expose {
                    access: RemoteAccess::ReadWrite,
                    region: region.descriptor(),
                },
            );
            let done = sent.and_then(|()| recv_msg(ep));
            region.revoke()?;
            match done? {
                Msg::Done { ok: true, .. } => {}
                m => return Err(Error::Protocol(format!("client did not finish: {m:?}"))),
            }
        }
        BenchOp::Send => {
            let ready = RemoteRegion {
                addr: 0,
                rkey: 0,
                len: 0,
            };
            send_msg(
                ep,
                &Msg::Expose {
                    access: RemoteAccess::Read,
                    region: ready,
                },
            )?;
            // Every message that has arrived is taken at once (at most a poll batch), and their
            // receives go back as one list.
            let mut scratch = RecvScratch::default();
            let (mut seen, mut bad) = (0u64, None);
            while seen < iters {
                let want = usize::try_from(iters - seen).unwrap_or(usize::MAX).min(16);
                ep.recv_many(want, &mut scratch, |m| {
                    if m.data.len() != size && bad.is_none() {
                        bad = Some((seen, m.data.len()));
                    }
                    seen += 1;
                })?;
                if let Some((i, n)) = bad {
                    return Err(Error::Protocol(format!(
                        "message {i} is {n} bytes, expected {size}"
                    )));
                }
            }
            send_msg(
                ep,
                &Msg::Done {
                    ok: true,
                    written: 0,
                    read: iters * size as u64,
                },
            )?;
            match recv_msg(ep)? {
                Msg::Done { ok: true, .. } => {}
                m => return Err(Error::Protocol(format!("client did not finish: {m:?}"))),
            }
        }
    }
    ep.set_timeout(step);
    Ok(ServedBench {
        op,
        size: csize,
        iters,
    })
}

/// Runs one bench as the client: SETUP, the measured transfer, DONE.
pub fn run_bench_client(ep: &mut Endpoint, p: &BwParams) -> Result<BwReport> {
    send_msg(
        ep,
        &Msg::Setup {
            purpose: purpose(p.op),
            size: p.size as u64,
            iters: p.iters,
            tx_depth: p.tx_depth,
        },
    )?;
    let region = match recv_msg(ep)? {
        Msg::Expose { region, .. } => region,
        m => return Err(Error::Protocol(format!("expected EXPOSE, got {m:?}"))),
    };
    let step = ep.timeout();
    ep.set_timeout(run_deadline((p.size as u64).saturating_mul(p.iters), step));
    let report = match p.op {
        BenchOp::Write | BenchOp::Read => run_initiator(ep, Some(&region), p),
        BenchOp::Send => send_stream(ep, p),
    };
    let ok = report.is_ok();
    let sent = send_msg(
        ep,
        &Msg::Done {
            ok,
            written: 0,
            read: 0,
        },
    )
    .and_then(|()| ep.flush());
    let report = report?;
    sent?;
    ep.set_timeout(step);
    Ok(report)
}

/// SENDs `iters` messages as fast as credits allow; the server confirms it got them all. With
/// [`BwParams::post_lists`], as perftest's -l does: every message is the same registered source
/// (read-only, shared by every SEND in flight), each refill of the send queue is one post list,
/// one SEND in a quarter of the depth asks for a completion. Without, one SEND per call from the
/// endpoint's send buffers, each stamped with its sequence number.
fn send_stream(ep: &mut Endpoint, p: &BwParams) -> Result<BwReport> {
    let src = if p.post_lists {
        let mut b = LocalBuf::new(ep.pd(), p.size)?;
        b.fill(0xa5);
        Some(b.freeze())
    } else {
        None
    };
    let depth = p.tx_depth.max(1);
    let mut list = SharedList::with_capacity(if p.post_lists { depth as usize } else { 0 });
    let cpu0 = CpuMeter::start();
    let start = Instant::now();
    let mut marks: Vec<Mark> = Vec::with_capacity(timestamps_capacity(p.iters));
    let mut sent = 0u64;
    while sent < p.iters {
        let Some(src) = &src else {
            ep.send_with(p.size, |b| {
                if let Some(h) = b.get_mut(..8) {
                    h.copy_from_slice(&sent.to_be_bytes());
                }
            })?;
            sent += 1;
            marks.push((sent, Instant::now()));
            continue;
        };
        let left = usize::try_from(p.iters - sent).unwrap_or(usize::MAX);
        let more = left > depth as usize;
        let n = ep.send_shared_list(
            src,
            p.size,
            left.min(depth as usize),
            (depth / 4).max(1),
            more,
            &mut list,
        )?;
        sent += n as u64;
        marks.push((sent, Instant::now()));
    }
    ep.flush()?;
    if let Some(last) = marks.last_mut() {
        last.1 = Instant::now();
    }
    let cpu = cpu0.stop();
    match recv_msg(ep)? {
        Msg::Done { ok: true, read, .. } if read == p.iters * p.size as u64 => {}
        m => {
            return Err(Error::Protocol(format!(
                "server did not confirm every message: {m:?}"
            )))
        }
    }
    Ok(report_marks(
        BenchOp::Send,
        p.size,
        start,
        &marks,
        p.tx_depth as usize,
        cpu,
    ))
}
