//! Lean post lists of one shared read-only source (a bandwidth stream): `n` SENDs or RDMA
//! WRITEs of the same registered range, posted with one `ibv_post_send(3)` (one doorbell), with
//! the range checked once per list and an in-flight table entry only where one is needed.
//!
//! Every work request of such a list reads the same [`SharedBuf`] range, so the queue does not
//! need one entry (one buffer) per work request to keep the memory alive: one clone of the
//! source, recorded with the table entry of a work request `j`, covers every work request of the
//! list up to `j`. An entry is recorded for every signaled work request and for the list's last
//! one (signaled or not); the others are posted unsignaled with `wr_id` 0, which no table entry
//! ever has. So:
//! - a work request `i` is always followed, in the same list, by an entry's work request
//!   `j >= i`; RC send queues complete in order, so `j`'s completion (or a later signaled one
//!   that retires `j`'s entry, or the QP's teardown) comes after `i` is done: the source outlives
//!   every work request that reads it, and `mem::forget` of any handle only leaks;
//! - a list whose post the device takes only in part keeps the entries of the work requests not
//!   posted: they sit after the posted ones in the QP's send chain, so a later completion retires
//!   them after the posted ones are done, or the QP's teardown drops them (nothing is given back:
//!   the caller still holds its source);
//! - an error on an unentried work request completes with `wr_id` 0, which matches no entry: it
//!   shows as the flush error of the list's next entry (the first failing work request's own
//!   status is lost; the source comes back all the same).

use crate::error::Error;
use crate::sys;
use crate::verbs::cq::{Buf, Table};
use crate::verbs::mr::SharedBuf;

use super::batch::posted_before;
use super::post::{not_rts, table_full};
use super::{PostListError, QpState, QueuePair, SendOp, Sge};

/// Scratch space for [`QueuePair::post_shared_list`] (and
/// [`SoloQueue::post_shared_list`](crate::verbs::SoloQueue::post_shared_list)): the raw work
/// requests, kept across calls so that a steady loop allocates nothing per list.
#[derive(Default)]
pub struct SharedList {
    raw: Vec<sys::ibv_send_wr>,
}

// SAFETY: the raw work requests' pointers (`sg_list`, `next`) are set and dereferenced only
// inside `post_shared_into`, which holds `&mut self`, and are cleared before it returns.
unsafe impl Send for SharedList {}
// SAFETY: `&SharedList` reaches nothing (no accessor).
unsafe impl Sync for SharedList {}

impl std::fmt::Debug for SharedList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedList").finish_non_exhaustive()
    }
}

impl SharedList {
    /// Scratch with room for lists of `n` work requests.
    pub fn with_capacity(n: usize) -> SharedList {
        SharedList {
            raw: Vec::with_capacity(n),
        }
    }

    /// True between posts (a post leaves nothing behind, whatever its outcome).
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }
}

/// One list of work requests over one shared source (why it is sound: the module docs of
/// `verbs::qp::shared` and `docs/soundness.md`).
#[derive(Clone, Copy, Debug)]
pub struct SharedPost<'a> {
    /// The source every work request reads.
    pub src: &'a SharedBuf,
    /// Where in it.
    pub off: usize,
    /// How many bytes each work request moves.
    pub len: usize,
    /// Work requests in the list.
    pub n: usize,
    /// The first work request's operation (SEND, SEND_WITH_IMM, RDMA WRITE or WRITE_WITH_IMM).
    pub first: SendOp,
    /// The other work requests' operation (e.g. the first SEND_WITH_IMM carries credits, the
    /// others none).
    pub rest: SendOp,
}

impl QueuePair {
    /// Posts a list of `p.n` work requests over one shared source with one `ibv_post_send(3)`;
    /// `signaled(i)` says whether work request `i` asks for a completion, and `wr_id(i, k)` is
    /// the caller's `wr_id` of work request `i` when it gets a table entry (a signaled one or the
    /// list's last; `k` is how many work requests that entry covers: those since the previous
    /// entry of the list, itself included). Returns how many were posted (all of them).
    ///
    /// Nothing is posted if a check fails (state, the source's range and registration, the
    /// operation: an RDMA READ would write its source). If the device takes only the first `k`
    /// (e.g. a full send queue), the error says so: see the module docs of `verbs::qp::shared`.
    pub fn post_shared_list(
        &self,
        l: &mut SharedList,
        p: &SharedPost<'_>,
        signaled: impl FnMut(usize) -> bool,
        wr_id: impl FnMut(usize, u32) -> u64,
    ) -> std::result::Result<usize, PostListError> {
        match self.send_cq.lock("ibv_post_send") {
            Ok(mut t) => self.post_shared_into(&mut t, l, p, signaled, wr_id),
            Err(error) => Err(refused(error)),
        }
    }

    /// [`post_shared_list`](Self::post_shared_list) recording into `t`, the send CQ's table.
    #[inline(always)]
    pub(crate) fn post_shared_into(
        &self,
        t: &mut Table,
        l: &mut SharedList,
        p: &SharedPost<'_>,
        mut signaled: impl FnMut(usize) -> bool,
        mut wr_id: impl FnMut(usize, u32) -> u64,
    ) -> std::result::Result<usize, PostListError> {
        let n = p.n;
        if n == 0 {
            return Ok(0);
        }
        let state = self.state();
        if state != QpState::Rts {
            return Err(refused(not_rts(state)));
        }
        if matches!(p.first, SendOp::Read(_)) || matches!(p.rest, SendOp::Read(_)) {
            return Err(refused(Error::InvalidArgument(
                "an RDMA READ writes into its local buffer: a shared source cannot take it".into(),
            )));
        }
        // One check for the whole list: every work request reads the same range.
        let probe = Sge::range(p.src.clone(), p.off, p.len);
        let mut sge = self
            .check_sge("ibv_post_send", &probe, false)
            .map_err(refused)?;
        drop(probe);
        let total = u64::from(sge.length);
        let first = self
            .send_wr(p.first, total, false, false)
            .map_err(refused)?;
        let rest = self.send_wr(p.rest, total, false, false).map_err(refused)?;
        let op = p.rest.name();
        l.raw.clear();
        l.raw.reserve(n);
        let mut since = 0u32;
        for i in 0..n {
            let mut w = if i == 0 { first } else { rest };
            since += 1;
            let sig = signaled(i);
            if sig {
                w.send_flags |= sys::IBV_SEND_SIGNALED.0;
            }
            if sig || i + 1 == n {
                let caller = wr_id(i, since);
                let bufs = smallvec::smallvec![Buf::Shared(p.src.clone())];
                match t.push(self.qpn, false, caller, bufs, op) {
                    Ok(id) => w.wr_id = id,
                    Err(bufs) => {
                        // Nothing posted yet: take back this list's entries (newest first).
                        unpush_all(t, self.qpn, &l.raw);
                        l.raw.clear();
                        return Err(refused(table_full(caller, bufs).error));
                    }
                }
                since = 0;
            }
            l.raw.push(w);
        }
        // Link: every request to the one SGE (the provider copies it at post time), each to the
        // next.
        let sg: *mut sys::ibv_sge = &mut sge;
        let base = l.raw.as_mut_ptr();
        for (i, r) in l.raw.iter_mut().enumerate() {
            r.sg_list = sg;
            r.num_sge = 1;
            // `wrapping_add` keeps the pointer arithmetic itself safe; `i + 1 < n` stays in the
            // array.
            r.next = if i + 1 < n {
                base.wrapping_add(i + 1)
            } else {
                std::ptr::null_mut()
            };
        }
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        // The in-flight table holds a clone of the source for every entry from here on, and
        // every work request is covered by an entry at or after it (see the module docs). The
        // SGE was checked against the source, registered in this QP's context (check_sge).
        // SAFETY: `self.qp` is live until drop; `l.raw` and `sge` are untouched until the call
        // returns, and the pointers set above stay within them.
        let rc = unsafe { sys::shim_ibv_post_send(self.qp.as_ptr(), base, &mut bad) };
        // Unknown which were posted: keep every entry (as if all were).
        let posted = if rc == 0 {
            n
        } else {
            posted_before(bad, base, n)
        };
        if posted == 0 {
            // Nothing on the send queue: every entry of the list goes.
            unpush_all(t, self.qpn, &l.raw);
        }
        for r in &mut l.raw {
            r.sg_list = std::ptr::null_mut();
            r.next = std::ptr::null_mut();
        }
        l.raw.clear();
        if rc != 0 {
            return Err(PostListError {
                error: Error::verb("ibv_post_send", rc),
                posted,
                unposted: Vec::new(),
            });
        }
        Ok(n)
    }
}

/// Takes back the table entries of `raw` (those with a non-zero id), newest first.
fn unpush_all(t: &mut Table, qpn: u32, raw: &[sys::ibv_send_wr]) {
    for r in raw.iter().rev() {
        if r.wr_id != 0 {
            drop(t.unpush(qpn, r.wr_id));
        }
    }
}

/// A list refused before anything was posted (nothing to give back: the source is shared).
#[cold]
#[inline(never)]
fn refused(error: Error) -> PostListError {
    PostListError {
        error,
        posted: 0,
        unposted: Vec::new(),
    }
}
