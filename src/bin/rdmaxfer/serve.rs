//! Serving several peers at once (`recv`): each connection is set up and served on its own
//! thread, up to a cap; a connection over the cap is answered "busy, retry" at once instead of
//! waiting.
//!
//! Why a thread per session rather than an event loop over the completion channels: a session
//! is a sequence of blocking steps (each `Endpoint` waits on its own completion channel, and a
//! file's data phase already runs a writer thread next to it), so a thread per session runs the
//! existing session code unchanged, one slow or hostile peer blocks only its own thread, and the
//! count is bounded (`--max-sessions` sessions and [`Limits::max_handshakes`] set-ups; a
//! connection over a cap is refused at once on the accept loop, CM or OOB, without a thread).
//! The accept loop only takes each request (the CM connect request, or the TCP socket); the
//! handshake (QP set-up, `rdma_accept` and ESTABLISHED, or the OOB exchange) runs on the
//! connection's own thread within `--timeout`, and only a peer whose handshake completed is
//! admitted to a session slot (and its memory lease): a peer that stalls mid-handshake holds
//! one set-up thread for that long, never a session slot, and never delays the other peers.
//! An event loop would need every session step rewritten as a state machine, for no gain at
//! this scale (tens of sessions; the data itself moves by RDMA WRITE without our threads).
//!
//! Each peer (source address) has a share of both: at most [`Limits::per_peer`] session slots
//! and [`Limits::per_peer_handshakes`] set-ups, so a greedy peer leaves room for another.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use rdmaxfer::xfer::endpoint::Endpoint;
use rdmaxfer::xfer::session::Server;

/// How often the accept loop looks at finished sessions while no peer connects (with `count`,
/// it must notice when the last session ended). The CM event channel or TCP listener is waited
/// on (not spun) in between.
const ACCEPT_POLL: Duration = Duration::from_millis(200);

/// Open files a session slot may hold at most: a connection (its CM id, completion channel and
/// event channel), and for each of its files the temporary file, its directory and a stripe's
/// own descriptor, with up to `UNFINISHED_PER_STREAM` striped files unfinished; rounded up.
pub const FDS_PER_SESSION: u64 = 16;
/// Open files of the receiver itself (standard streams, the listener, the device, logs).
pub const FDS_BASE: u64 = 64;

/// Raises the soft limit on open files to the hard one (setrlimit(2), `RLIMIT_NOFILE`) and
/// warns when it is still below what `max_sessions` session slots may hold
/// ([`FDS_PER_SESSION`] each): past it, new connections would fail with "Too many open files".
pub fn raise_fd_limit(max_sessions: u32) {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut l = getrlimit(Resource::Nofile);
    if l.current < l.maximum || (l.maximum.is_none() && l.current.is_some()) {
        l.current = l.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, l) {
            tracing::debug!("raising the open-file limit to its hard limit: {e}");
        }
    }
    let need = u64::from(max_sessions)
        .saturating_mul(FDS_PER_SESSION)
        .saturating_add(FDS_BASE);
    match getrlimit(Resource::Nofile).current {
        Some(n) if n < need => eprintln!(
            "rdmaxfer: warning: the open-file limit is {n}, below the {need} that \
             --max-sessions {max_sessions} may need: raise it (ulimit -n, limits.conf) or \
             lower --max-sessions"
        ),
        n => tracing::debug!("open-file limit {n:?}, {need} needed at most"),
    }
}

/// Limits of [`serve_concurrent`].
pub struct Limits {
    /// Stop after admitting this many sessions (then wait for them); `None`: serve forever.
    pub count: Option<u64>,
    /// Sessions served at once at most.
    pub max_sessions: usize,
    /// Why a peer is refused when all session slots are taken (e.g. "it serves 8 senders at
    /// once (its --max-sessions)").
    pub full: String,
    /// How long a set-up peer waits for a session slot before it is refused as busy (zero for
    /// `recv`, whose senders are refused at once; a one-at-a-time server lets the next peer
    /// wait a little for the current one to finish).
    pub wait_turn: Duration,
    /// While an admitted session is being served, a connection over `count` is still admitted
    /// to join it (its `admit` is told so: `recv --once` with `send --streams`).
    pub joins: bool,
    /// Session slots one peer (source address) may hold at once: with fewer than
    /// `max_sessions`, a peer that takes all it may (e.g. one session's many streams) still
    /// leaves a slot for another.
    pub per_peer: usize,
}

impl Limits {
    /// Connections being set up at once at most: 4 per session slot (at least 16), so peers
    /// that stall their handshakes must outnumber the slots fourfold, and renew themselves every
    /// `--timeout`, to make a good sender wait; over it a connection is refused as busy.
    pub fn max_handshakes(&self) -> usize {
        self.max_sessions.saturating_mul(4).max(16)
    }

    /// Connections one peer (source address) may have being set up at once: a quarter of
    /// [`max_handshakes`](Self::max_handshakes) (at least 4), so a peer that stalls its
    /// handshakes leaves most of them to the others.
    pub fn per_peer_handshakes(&self) -> usize {
        (self.max_handshakes() / 4).max(4)
    }

    /// `recv`'s: senders refused at once when every slot is taken, streams joining the
    /// session being served, and a peer's share all slots but one (the one of
    /// `--max-sessions 1`), except with `--once`, whose one session's streams may all come
    /// from one peer.
    pub fn recv(max_sessions: u32, once: bool) -> Limits {
        let max = max_sessions as usize;
        Limits {
            count: once.then_some(1),
            max_sessions: max,
            full: format!("it serves {max} senders at once (its --max-sessions)"),
            wait_turn: Duration::ZERO,
            joins: true,
            per_peer: if once {
                max
            } else {
                max.saturating_sub(1).max(1)
            },
        }
    }
}

/// What one peer (source address) holds: connections being set up, and session slots.
#[derive(Default)]
struct Share {
    handshaking: usize,
    active: usize,
}

/// The shares of the peers holding anything, by address (an unknown address counts as one
/// peer).
#[derive(Default)]
struct Shares(HashMap<Option<IpAddr>, Share>);

impl Shares {
    fn of(&mut self, ip: Option<IpAddr>) -> &mut Share {
        self.0.entry(ip).or_default()
    }

    /// Drops `ip`'s entry once it holds nothing (the map stays as small as the peers served).
    fn tidy(&mut self, ip: Option<IpAddr>) {
        if self
            .0
            .get(&ip)
            .is_some_and(|s| s.handshaking == 0 && s.active == 0)
        {
            self.0.remove(&ip);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Admission after a completed handshake: sessions admitted so far and the caller's `admit`.
struct Gate<A> {
    admitted: u64,
    admit: A,
}

/// Serves peers, each on its own thread, at most `limits.max_sessions` at once. Each connection
/// is set up on its own thread; once set up, `admit` decides (e.g. takes a memory lease) or
/// says why the receiver is busy; `refuse` tells a peer it is busy; `one` serves an admitted
/// session (numbered from 1). A failed handshake counts as a failed connection. Failing
/// sessions do not stop the server; the result is an error at the end if any failed:
/// [`rdmaxfer::Error::Incomplete`] (counting files) when every failed session did end, but with
/// some of its files refused or failed.
pub fn serve_concurrent<T: Send, A: FnMut(bool) -> std::result::Result<T, String> + Send>(
    server: &mut Server,
    limits: &Limits,
    admit: A,
    refuse: impl Fn(&mut Endpoint, &str) + Sync,
    one: impl Fn(u64, &mut Endpoint, T) -> Result<()> + Sync,
) -> Result<()> {
    let max = limits.max_sessions.max(1);
    let max_handshakes = limits.max_handshakes();
    let (per_peer, per_peer_handshakes) = (limits.per_peer.max(1), limits.per_peer_handshakes());
    let shares = Mutex::new(Shares::default());
    let full = &limits.full;
    let gate = Mutex::new(Gate { admitted: 0, admit });
    let turn = Condvar::new();
    let wait_turn = limits.wait_turn;
    let active = AtomicUsize::new(0);
    let handshaking = AtomicUsize::new(0);
    let failed = AtomicU64::new(0);
    // Of the failed sessions, those that ended with only some files refused or failed: their
    // count, and their files not delivered and announced.
    let partial = Mutex::new((0u64, 0u64, 0u64));
    let all_admitted = |g: &Gate<A>| limits.count.is_some_and(|c| g.admitted >= c);
    let (refuse, one, gate_r, turn_r) = (&refuse, &one, &gate, &turn);
    let (active_r, handshaking_r, failed_r, partial_r, shares_r) =
        (&active, &handshaking, &failed, &partial, &shares);
    let broken = std::thread::scope(|sc| {
        // Tells a set-up peer it is busy and closes (on the caller's thread).
        let refuse_now = move |mut ep: Endpoint, who: &str, why: &str| {
            eprintln!("refused {who}: busy: {why}");
            refuse(&mut ep, why);
            if let Err(e) = ep.close() {
                tracing::debug!("closing the refused connection to {who}: {e}");
            }
        };
        loop {
            {
                let g = gate.lock().unwrap_or_else(|p| p.into_inner());
                if all_admitted(&g)
                    && active.load(Ordering::Acquire) == 0
                    && handshaking.load(Ordering::Acquire) == 0
                {
                    return false;
                }
            }
            let incoming = match server.take(Some(ACCEPT_POLL)) {
                Ok(p) => p,
                Err(e) if e.is_timeout() => continue,
                Err(e) => {
                    eprintln!("rdmaxfer: error: accepting a connection: {e}");
                    if server.is_broken() {
                        return true;
                    }
                    continue;
                }
            };
            let who = incoming.peer_addr().map_or("?".into(), |a| a.to_string());
            let ip = incoming.peer_addr().map(|a| a.ip());
            let over = if handshaking.load(Ordering::Acquire) >= max_handshakes {
                Some(format!("{max_handshakes} connections are being set up"))
            } else {
                let mut sh = lock(&shares);
                let s = sh.of(ip);
                if s.handshaking >= per_peer_handshakes {
                    Some(format!(
                        "{per_peer_handshakes} connections from {}, a peer's share, are being set up",
                        ip.map_or("?".into(), |a| a.to_string())
                    ))
                } else {
                    s.handshaking += 1;
                    None
                }
            };
            if let Some(why) = over {
                // At once, with the reason (a CM reject, or the OOB refusal record, whose room
                // keeps the first 34 bytes): no set-up, no thread.
                eprintln!("refused {who}: busy: {why}");
                incoming.refuse_busy(&format!("retry later: {why}"));
                continue;
            }
            handshaking.fetch_add(1, Ordering::AcqRel);
            // Gives back the peer's set-up place (`admitted`: and takes a slot in its stead).
            let done_setting_up = move |admitted: bool| {
                let mut sh = lock(shares_r);
                let s = sh.of(ip);
                s.handshaking -= 1;
                s.active += usize::from(admitted);
                sh.tidy(ip);
            };
            sc.spawn(move || {
                let ep = incoming.finish();
                let ep = match ep {
                    Ok(ep) => ep,
                    Err(e) => {
                        // Counted as a served and failed connection, as one at a time did (the
                        // cause may be this side's, e.g. its locked-memory limit): `--once`
                        // then ends with its error. It never held a session slot.
                        {
                            let mut g = gate_r.lock().unwrap_or_else(|p| p.into_inner());
                            if !all_admitted(&g) {
                                g.admitted += 1;
                            }
                            failed_r.fetch_add(1, Ordering::Relaxed);
                            done_setting_up(false);
                            handshaking_r.fetch_sub(1, Ordering::AcqRel);
                        }
                        eprintln!("rdmaxfer: error: accepting a connection: {e}");
                        return;
                    }
                };
                // Admission: the slot is counted before the set-up count drops, so the accept
                // loop never sees both at zero while this peer is still to be served.
                let admitted = {
                    let mut g = gate_r.lock().unwrap_or_else(|p| p.into_inner());
                    let until = Instant::now() + wait_turn;
                    loop {
                        let left = until.saturating_duration_since(Instant::now());
                        if all_admitted(&g)
                            || active_r.load(Ordering::Acquire) < max
                            || left.is_zero()
                        {
                            break;
                        }
                        // Woken when a session ends (its count drops under the same lock).
                        g = turn_r
                            .wait_timeout(g, left)
                            .unwrap_or_else(|p| p.into_inner())
                            .0;
                    }
                    // Over `count`, only to join the session being served.
                    let join_only =
                        all_admitted(&g) && limits.joins && active_r.load(Ordering::Acquire) > 0;
                    let held = lock(shares_r).of(ip).active;
                    let r = if all_admitted(&g) && !join_only {
                        Err("it is finishing its last session".to_string())
                    } else if active_r.load(Ordering::Acquire) >= max {
                        Err(full.clone())
                    } else if held >= per_peer {
                        Err(format!(
                            "{} holds {held} of its {max} session slots, a peer's share \
                             (the others are kept for other peers)",
                            ip.map_or("?".into(), |a| a.to_string())
                        ))
                    } else {
                        (g.admit)(join_only)
                    };
                    let r = r.map(|ticket| {
                        if !join_only {
                            g.admitted += 1;
                        }
                        active_r.fetch_add(1, Ordering::AcqRel);
                        (g.admitted, ticket)
                    });
                    done_setting_up(r.is_ok());
                    r
                };
                handshaking_r.fetch_sub(1, Ordering::AcqRel);
                let (id, ticket) = match admitted {
                    Ok(a) => a,
                    Err(why) => return refuse_now(ep, &who, &why),
                };
                let mut ep = ep;
                eprintln!("session {id}: serving {who}");
                let r = one(id, &mut ep, ticket);
                if let Err(e) = ep.close() {
                    // The peer may already be gone; `one` reported what mattered.
                    tracing::debug!("closing the connection to {who}: {e}");
                }
                if let Some(&rdmaxfer::Error::Incomplete { failed, total, .. }) =
                    r.as_ref().err().and_then(|e| e.downcast_ref())
                {
                    let mut p = partial_r.lock().unwrap_or_else(|e| e.into_inner());
                    *p = (p.0 + 1, p.1 + failed, p.2 + total);
                }
                // The slot is free before the session's error line: a peer that reads the line
                // finds it free.
                let g = gate_r.lock().unwrap_or_else(|p| p.into_inner());
                if r.is_err() {
                    failed_r.fetch_add(1, Ordering::Relaxed);
                }
                active_r.fetch_sub(1, Ordering::AcqRel);
                {
                    let mut sh = lock(shares_r);
                    sh.of(ip).active -= 1;
                    sh.tidy(ip);
                }
                drop(g);
                turn_r.notify_all();
                if let Err(e) = r {
                    eprintln!("rdmaxfer: error: session {id}: serving {who}: {e:#}");
                }
            });
        }
    });
    if broken {
        bail!("the listener failed; stopping");
    }
    let served = gate
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .admitted;
    let failed = failed.load(Ordering::Relaxed);
    let (sessions, files_failed, files) = partial.into_inner().unwrap_or_else(|e| e.into_inner());
    if failed > 0 && sessions == failed {
        return Err(rdmaxfer::Error::Incomplete {
            failed: files_failed,
            total: files,
            // A receiver never hears of a file that vanished on the sender.
            vanished: 0,
            what: "received",
        }
        .into());
    }
    if failed > 0 {
        bail!("{failed} of {served} connections failed");
    }
    Ok(())
}
