//! Serving several peers at once (`recv`): each admitted connection on its own thread, up to a
//! cap; a connection over the cap is answered "busy, retry" at once instead of waiting.
//!
//! Why a thread per session rather than an event loop over the completion channels: a session
//! is a sequence of blocking steps (each `Endpoint` waits on its own completion channel, and a
//! file's data phase already runs a writer thread next to it), so a thread per session runs the
//! existing session code unchanged, one slow or hostile peer blocks only its own thread, and the
//! count is bounded by `--max-sessions` (plus at most as many short-lived refusal threads).
//! The accept loop only takes each request (the CM connect request, or the TCP socket); the
//! handshake (QP set-up, `rdma_accept` and ESTABLISHED, or the OOB exchange) runs on the
//! session's or refusal's thread within `--timeout`, so a peer that stalls mid-handshake holds
//! one slot for that long but never delays the other peers.
//! An event loop would need every session step rewritten as a state machine, for no gain at
//! this scale (tens of sessions; the data itself moves by RDMA WRITE without our threads).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Result};
use rdmaxfer::xfer::endpoint::Endpoint;
use rdmaxfer::xfer::session::Server;

/// How often the accept loop looks at finished sessions while no peer connects (with `count`,
/// it must notice when the last session ended). The CM event channel or TCP listener is waited
/// on (not spun) in between.
const ACCEPT_POLL: Duration = Duration::from_millis(200);

/// Limits of [`serve_concurrent`].
pub struct Limits {
    /// Stop after admitting this many sessions (then wait for them); `None`: serve forever.
    pub count: Option<u64>,
    /// Sessions served at once at most.
    pub max_sessions: usize,
}

/// Serves peers, each on its own thread, at most `limits.max_sessions` at once. For each
/// connection `admit` decides (e.g. takes a memory lease) or says why the receiver is busy,
/// before the handshake (which runs on the connection's own thread);
/// `refuse` tells a peer it is busy (on a short-lived thread, so a peer that does not take the
/// refusal does not hold the accept loop); `one` serves an admitted session (numbered from 1).
/// Failing sessions do not stop the server; the result is an error at the end if any failed:
/// [`rdmaxfer::Error::Incomplete`] (counting files) when every failed session did end, but with
/// some of its files refused or failed.
pub fn serve_concurrent<T: Send>(
    server: &mut Server,
    limits: &Limits,
    mut admit: impl FnMut() -> std::result::Result<T, String>,
    refuse: impl Fn(&mut Endpoint, &str) + Sync,
    one: impl Fn(u64, &mut Endpoint, T) -> Result<()> + Sync,
) -> Result<()> {
    let max = limits.max_sessions.max(1);
    let active = AtomicUsize::new(0);
    let refusing = AtomicUsize::new(0);
    let failed = AtomicU64::new(0);
    // Of the failed sessions, those that ended with only some files refused or failed: their
    // count, and their files not delivered and announced.
    let partial = Mutex::new((0u64, 0u64, 0u64));
    let mut admitted = 0u64;
    let (refuse, one) = (&refuse, &one);
    let (active_r, refusing_r, failed_r, partial_r) = (&active, &refusing, &failed, &partial);
    let broken = std::thread::scope(|sc| {
        loop {
            let all_admitted = limits.count.is_some_and(|c| admitted >= c);
            if all_admitted && active.load(Ordering::Acquire) == 0 {
                return false;
            }
            let incoming = match server.take(Some(ACCEPT_POLL)) {
                Ok(p) => p,
                Err(e) if e.is_timeout() => continue,
                Err(e) => {
                    if !all_admitted {
                        admitted += 1;
                    }
                    failed.fetch_add(1, Ordering::Relaxed);
                    eprintln!("rdmaxfer: error: accepting a connection: {e}");
                    if server.is_broken() {
                        return true;
                    }
                    continue;
                }
            };
            let who = incoming.peer_addr().map_or("?".into(), |a| a.to_string());
            let busy = if all_admitted {
                Err("it is finishing its last session".to_string())
            } else if active.load(Ordering::Acquire) >= max {
                Err(format!(
                    "it serves {max} senders at once (its --max-sessions)"
                ))
            } else {
                admit()
            };
            match busy {
                Ok(ticket) => {
                    // A peer that then fails its handshake counts as served (as one at a time
                    // did): its slot is taken until its set-up ends, on its own thread.
                    admitted += 1;
                    let id = admitted;
                    active.fetch_add(1, Ordering::AcqRel);
                    sc.spawn(move || {
                        let r = match incoming.finish() {
                            Ok(mut ep) => {
                                eprintln!("session {id}: serving {who}");
                                let r = one(id, &mut ep, ticket);
                                if let Err(e) = ep.close() {
                                    // The peer may already be gone; `one` reported what mattered.
                                    tracing::debug!("closing the connection to {who}: {e}");
                                }
                                if let Some(&rdmaxfer::Error::Incomplete {
                                    failed, total, ..
                                }) = r.as_ref().err().and_then(|e| e.downcast_ref())
                                {
                                    let mut p = partial_r.lock().unwrap_or_else(|e| e.into_inner());
                                    *p = (p.0 + 1, p.1 + failed, p.2 + total);
                                }
                                r.map_err(|e| format!("session {id}: serving {who}: {e:#}"))
                            }
                            Err(e) => Err(format!("accepting a connection: {e}")),
                        };
                        if let Err(e) = r {
                            failed_r.fetch_add(1, Ordering::Relaxed);
                            eprintln!("rdmaxfer: error: {e}");
                        }
                        active_r.fetch_sub(1, Ordering::AcqRel);
                    });
                }
                Err(why) => {
                    if refusing.fetch_add(1, Ordering::AcqRel) < max {
                        sc.spawn(move || {
                            match incoming.finish() {
                                Ok(mut ep) => {
                                    eprintln!("refused {who}: busy: {why}");
                                    refuse(&mut ep, &why);
                                    if let Err(e) = ep.close() {
                                        tracing::debug!(
                                            "closing the refused connection to {who}: {e}"
                                        );
                                    }
                                }
                                Err(e) => eprintln!("refused {who}: busy: {why} ({e})"),
                            }
                            refusing_r.fetch_sub(1, Ordering::AcqRel);
                        });
                    } else {
                        // Too many refusals in flight: this one is just disconnected.
                        refusing.fetch_sub(1, Ordering::AcqRel);
                        eprintln!("refused {who}: busy: {why} (disconnected: too many refusals)");
                        drop(incoming);
                    }
                }
            }
        }
    });
    if broken {
        bail!("the listener failed; stopping");
    }
    let (failed, served) = (failed.load(Ordering::Relaxed), admitted);
    let (sessions, files_failed, files) = partial.into_inner().unwrap_or_else(|e| e.into_inner());
    if failed > 0 && sessions == failed {
        return Err(rdmaxfer::Error::Incomplete {
            failed: files_failed,
            total: files,
            what: "received",
        }
        .into());
    }
    if failed > 0 {
        bail!("{failed} of {served} connections failed");
    }
    Ok(())
}
