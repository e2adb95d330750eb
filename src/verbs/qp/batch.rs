//! Post lists: several send work requests chained through `next` and posted with one
//! `ibv_post_send(3)` call (one doorbell), their buffers moved into the CQ's in-flight table
//! exactly as [`QueuePair::post_send`] moves them.
//!
//! With selective signalling ([`SendRequest::unsignaled`]) most of a batch completes without a
//! completion of its own: the next signaled completion of the same QP retires it (its buffers
//! come back in [`Completion::retired`](crate::verbs::Completion::retired)). An error always
//! completes: with RC the failing work request completes with its status (signaled or not) and
//! every later one is flushed, so every buffer comes back exactly once.

use crate::error::Error;
use crate::sys;
use crate::verbs::cq::{Bufs, Table};

use super::post::{not_rts, table_full};
use super::{QpState, QueuePair, SendOp, SendRequest};

/// Send work requests to post together with [`QueuePair::post_send_batch`] (or
/// [`SoloQueue::post_send_batch`](crate::verbs::SoloQueue::post_send_batch)). Keep one and
/// refill it: its scratch space (the `ibv_send_wr` and `ibv_sge` arrays) is reused, so a steady
/// loop allocates nothing per batch.
#[derive(Default)]
pub struct SendBatch {
    wrs: Vec<SendRequest>,
    raw: Vec<sys::ibv_send_wr>,
    sg: Vec<sys::ibv_sge>,
}

// SAFETY: the raw work requests' pointers (`sg_list`, `next`) are set and dereferenced only
// inside `post_send_batch_into`, which holds `&mut self`; between calls nothing reads them and
// they are cleared. The requests themselves (buffers) are `Send`.
unsafe impl Send for SendBatch {}
// SAFETY: `&SendBatch` reaches only `len` and the requests' own `&self` accessors.
unsafe impl Sync for SendBatch {}

impl std::fmt::Debug for SendBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendBatch").field("wrs", &self.wrs).finish()
    }
}

impl SendBatch {
    /// An empty batch with room for `n` work requests.
    pub fn with_capacity(n: usize) -> SendBatch {
        SendBatch {
            wrs: Vec::with_capacity(n),
            raw: Vec::with_capacity(n),
            sg: Vec::with_capacity(n),
        }
    }

    /// Adds a work request (its buffers move into the batch).
    pub fn push(&mut self, wr: SendRequest) {
        self.wrs.push(wr);
    }

    /// Work requests waiting to be posted.
    pub fn len(&self) -> usize {
        self.wrs.len()
    }

    /// No work request waiting.
    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }

    /// The work requests waiting, in order.
    pub fn iter(&self) -> impl Iterator<Item = &SendRequest> + '_ {
        self.wrs.iter()
    }

    /// Takes every work request back out (unposted), buffers included.
    pub fn drain(&mut self) -> impl Iterator<Item = SendRequest> + '_ {
        self.wrs.drain(..)
    }
}

/// A post list that failed: the error, how many of its first work requests were posted (they
/// complete as usual), and the buffers of the others, given back with their `wr_id`s in order.
#[derive(Debug)]
pub struct PostListError {
    /// What went wrong.
    pub error: Error,
    /// Work requests posted before the failure (the batch's first `posted`).
    pub posted: usize,
    /// The work requests not posted: `(wr_id, buffers)`, in batch order.
    pub unposted: Vec<(u64, Bufs)>,
}

impl std::fmt::Display for PostListError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (after {} posted)", self.error, self.posted)
    }
}

impl std::error::Error for PostListError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<PostListError> for Error {
    fn from(e: PostListError) -> Error {
        e.error
    }
}

/// Every request of `b` given back unposted, for `error`.
#[cold]
#[inline(never)]
fn refuse_all(b: &mut SendBatch, error: Error) -> PostListError {
    b.raw.clear();
    b.sg.clear();
    PostListError {
        error,
        posted: 0,
        unposted: b.wrs.drain(..).map(|w| (w.wr_id, bufs_of(w))).collect(),
    }
}

/// How many requests of a list of `n` at `base` were posted when the post stopped at `bad`
/// (`ibv_post_send(3)`, `ibv_post_recv(3)`: the ones before it were); `n` when `bad` is not one
/// of the list (then which were posted is unknown: the caller keeps everything as if posted).
pub(super) fn posted_before<T>(bad: *mut T, base: *mut T, n: usize) -> usize {
    let k = (bad as usize).wrapping_sub(base as usize) / std::mem::size_of::<T>().max(1);
    if !bad.is_null() && (bad as usize) >= (base as usize) && k < n {
        k
    } else {
        n
    }
}

fn bufs_of(w: SendRequest) -> Bufs {
    w.into_bufs()
}

impl QueuePair {
    /// Posts every work request of `b` with one `ibv_post_send(3)` (a post list: one doorbell)
    /// and empties it; returns how many were posted. Each is checked as
    /// [`post_send`](Self::post_send) checks it, all before anything is posted: one that fails a
    /// check fails the whole batch (nothing posted). If the device takes only the first `k`
    /// (e.g. the send queue is full), those `k` stay posted and complete as usual; the others'
    /// buffers come back in the error.
    pub fn post_send_batch(&self, b: &mut SendBatch) -> std::result::Result<usize, PostListError> {
        match self.send_cq.lock("ibv_post_send") {
            Ok(mut t) => self.post_send_batch_into(&mut t, b),
            Err(error) => Err(refuse_all(b, error)),
        }
    }

    /// [`post_send_batch`](Self::post_send_batch) recording into `t`, the send CQ's table.
    pub(crate) fn post_send_batch_into(
        &self,
        t: &mut Table,
        b: &mut SendBatch,
    ) -> std::result::Result<usize, PostListError> {
        let n = b.wrs.len();
        if n == 0 {
            return Ok(0);
        }
        let state = self.state();
        if state != QpState::Rts {
            return Err(refuse_all(b, not_rts(state)));
        }
        // 1. Check every request and build its `ibv_send_wr` and SGEs (pointers set below, once
        //    the arrays no longer grow).
        b.raw.clear();
        b.sg.clear();
        for w in &b.wrs {
            if w.sges.len() > self.caps.max_send_sge as usize {
                let e = Error::InvalidArgument(format!(
                    "{} scatter/gather entries, the QP allows {}",
                    w.sges.len(),
                    self.caps.max_send_sge
                ));
                return Err(refuse_all(b, e));
            }
            let exclusive = matches!(w.op, SendOp::Read(_));
            let mut total = 0u64;
            for s in &w.sges {
                match self.check_sge("ibv_post_send", s, exclusive) {
                    Ok(sge) => {
                        total += u64::from(sge.length);
                        b.sg.push(sge);
                    }
                    Err(e) => return Err(refuse_all(b, e)),
                }
            }
            match self.send_wr(w.op, total, w.signaled, w.inline) {
                Ok(mut raw) => {
                    raw.num_sge = w.sges.len() as i32;
                    b.raw.push(raw);
                }
                Err(e) => return Err(refuse_all(b, e)),
            }
        }
        // 2. Move the buffers into the in-flight table (in order: the QP's send chain is the
        //    batch's order), the internal ids into the raw requests.
        let mut wrs = b.wrs.drain(..).enumerate();
        while let Some((i, w)) = wrs.next() {
            let (wr_id, name) = (w.wr_id, w.op.name());
            match t.push(self.qpn, false, wr_id, bufs_of(w), name) {
                Ok(id) => b.raw[i].wr_id = id,
                Err(bufs) => {
                    // Nothing is posted yet: take back the ones recorded (newest first), then
                    // give back everything.
                    let mut unposted = Vec::with_capacity(n);
                    for r in b.raw[..i].iter().rev() {
                        if let Some(e) = t.unpush(self.qpn, r.wr_id) {
                            unposted.push((e.wr_id, e.bufs));
                        }
                    }
                    unposted.reverse();
                    let full = table_full(wr_id, bufs);
                    unposted.push((wr_id, full.bufs));
                    unposted.extend(wrs.map(|(_, w)| (w.wr_id, bufs_of(w))));
                    b.raw.clear();
                    b.sg.clear();
                    return Err(PostListError {
                        error: full.error,
                        posted: 0,
                        unposted,
                    });
                }
            }
        }
        // 3. Link: each request's SGEs, each request to the next.
        let sg = b.sg.as_mut_ptr();
        let base = b.raw.as_mut_ptr();
        let mut at = 0usize;
        for (i, r) in b.raw.iter_mut().enumerate() {
            // In bounds: the SGE counts sum to `b.sg.len()` (step 1), `i + 1 < n` for `next`;
            // `wrapping_add` keeps the pointer arithmetic itself safe.
            r.sg_list = sg.wrapping_add(at);
            at += r.num_sge as usize;
            r.next = if i + 1 < n {
                base.wrapping_add(i + 1)
            } else {
                std::ptr::null_mut()
            };
        }
        let raw = b.raw.as_mut_ptr();
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        // The in-flight table owns every request's buffers from here on. Every SGE was checked
        // against a buffer registered in this QP's context (check_sge).
        // SAFETY: `self.qp` is live until drop; `b.raw` and `b.sg` are untouched until the call
        // returns, and the pointers set above stay within those two arrays.
        let rc = unsafe { sys::shim_ibv_post_send(self.qp.as_ptr(), raw, &mut bad) };
        let posted = if rc == 0 {
            n
        } else {
            // Unknown which were posted (n): keep every buffer in the table (a posted one must
            // stay there until its completion; the others are freed when the QP is).
            posted_before(bad, raw, n)
        };
        let mut unposted = Vec::new();
        if posted < n {
            for r in b.raw[posted..].iter().rev() {
                if let Some(e) = t.unpush(self.qpn, r.wr_id) {
                    unposted.push((e.wr_id, e.bufs));
                }
            }
            unposted.reverse();
        }
        for r in &mut b.raw {
            r.sg_list = std::ptr::null_mut();
            r.next = std::ptr::null_mut();
        }
        b.raw.clear();
        b.sg.clear();
        if rc != 0 {
            return Err(PostListError {
                error: Error::verb("ibv_post_send", rc),
                posted,
                unposted,
            });
        }
        Ok(n)
    }
}
