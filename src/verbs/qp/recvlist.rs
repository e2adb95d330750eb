//! Receives posted as a list: several exclusive buffers, one `ibv_post_recv(3)` call, each buffer
//! moved into the CQ's in-flight table exactly as [`QueuePair::post_recv_buf`] moves it.

use crate::error::Error;
use crate::sys;
use crate::verbs::cq::{Buf, Bufs, Table};
use crate::verbs::mr::LocalBuf;
use crate::verbs::wr::one_sge;

use super::batch::posted_before;
use super::post::table_full;
use super::{PostListError, QpState, QueuePair};

/// Scratch space for [`SoloQueue::post_recv_list`](crate::verbs::SoloQueue::post_recv_list):
/// the raw receive requests and their SGEs, kept across calls so that a steady loop allocates
/// nothing per list.
#[derive(Default)]
pub struct RecvList {
    raw: Vec<sys::ibv_recv_wr>,
    sg: Vec<sys::ibv_sge>,
}

// SAFETY: the raw requests' pointers (`sg_list`, `next`) are set and dereferenced only inside
// `post_recv_list_into`, which holds `&mut self`, and are cleared before it returns.
unsafe impl Send for RecvList {}
// SAFETY: `&RecvList` reaches nothing (no accessor).
unsafe impl Sync for RecvList {}

impl std::fmt::Debug for RecvList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvList").finish_non_exhaustive()
    }
}

/// Every buffer of `bufs` (the first `done` already taken out of it) given back unposted.
#[cold]
#[inline(never)]
fn give_back(
    error: Error,
    posted: usize,
    wr_id: u64,
    mut unposted: Vec<(u64, Bufs)>,
    bufs: &mut Vec<LocalBuf>,
) -> PostListError {
    unposted.extend(
        bufs.drain(..)
            .map(|b| (wr_id, smallvec::smallvec![Buf::Local(b)])),
    );
    PostListError {
        error,
        posted,
        unposted,
    }
}

impl QueuePair {
    /// Posts one receive into each whole buffer of `bufs` (taken out of it, in order), all with
    /// `wr_id`, with one `ibv_post_recv(3)`; returns how many. A buffer that fails its check
    /// (another device context) fails the list before anything is posted; if the device takes
    /// only the first `k`, those stay posted and the others come back in the error.
    #[inline(always)]
    pub(crate) fn post_recv_list_into(
        &self,
        t: &mut Table,
        l: &mut RecvList,
        wr_id: u64,
        bufs: &mut Vec<LocalBuf>,
    ) -> std::result::Result<usize, PostListError> {
        let n = bufs.len();
        if n == 0 {
            return Ok(0);
        }
        let state = self.state();
        if matches!(state, QpState::Reset | QpState::Error) {
            let e = Error::InvalidState {
                op: "ibv_post_recv",
                object: "queue pair",
                state: state.name(),
                needs: "INIT, RTR or RTS",
            };
            return Err(give_back(e, 0, wr_id, Vec::new(), bufs));
        }
        l.raw.clear();
        l.sg.clear();
        for b in bufs.iter() {
            match one_sge(self.ctx, "ibv_post_recv", b, 0, b.len()) {
                Ok(sge) => l.sg.push(sge),
                Err(e) => {
                    l.sg.clear();
                    return Err(give_back(e, 0, wr_id, Vec::new(), bufs));
                }
            }
        }
        // The buffers move into the table, their ids into the raw requests.
        let mut drained = bufs.drain(..);
        while let Some(b) = drained.next() {
            match t.push(
                self.qpn,
                true,
                wr_id,
                smallvec::smallvec![Buf::Local(b)],
                "RECV",
            ) {
                Ok(id) => l.raw.push(sys::ibv_recv_wr {
                    wr_id: id,
                    num_sge: 1,
                    ..Default::default()
                }),
                Err(full) => {
                    // Nothing posted yet: take back the ones recorded, then give back all.
                    let mut unposted = take_back(t, self.qpn, &l.raw);
                    let full = table_full(wr_id, full);
                    unposted.push((wr_id, full.bufs));
                    let mut rest: Vec<LocalBuf> = drained.collect();
                    l.raw.clear();
                    l.sg.clear();
                    return Err(give_back(full.error, 0, wr_id, unposted, &mut rest));
                }
            }
        }
        let sg = l.sg.as_mut_ptr();
        let base = l.raw.as_mut_ptr();
        for (i, r) in l.raw.iter_mut().enumerate() {
            // In bounds: one SGE per request (`l.sg` and `l.raw` have `n` entries each);
            // `wrapping_add` keeps the pointer arithmetic itself safe.
            r.sg_list = sg.wrapping_add(i);
            r.next = if i + 1 < n {
                base.wrapping_add(i + 1)
            } else {
                std::ptr::null_mut()
            };
        }
        let mut bad: *mut sys::ibv_recv_wr = std::ptr::null_mut();
        // The in-flight table owns every buffer from here on; each SGE was checked against its
        // buffer, registered in this QP's context (one_sge).
        // SAFETY: `self.qp` is live until drop; `l.raw` and `l.sg` are untouched until the call
        // returns, and the pointers set above stay within them.
        let rc = unsafe { sys::shim_ibv_post_recv(self.qp.as_ptr(), base, &mut bad) };
        // Unknown which were posted: keep every entry (as if all were).
        let posted = if rc == 0 {
            n
        } else {
            posted_before(bad, base, n)
        };
        let unposted = take_back(t, self.qpn, &l.raw[posted..]);
        for r in &mut l.raw {
            r.sg_list = std::ptr::null_mut();
            r.next = std::ptr::null_mut();
        }
        l.raw.clear();
        l.sg.clear();
        if rc != 0 {
            return Err(PostListError {
                error: Error::verb("ibv_post_recv", rc),
                posted,
                unposted,
            });
        }
        Ok(n)
    }
}

/// The entries of `raw`, taken back out of the table in order.
fn take_back(t: &mut Table, qpn: u32, raw: &[sys::ibv_recv_wr]) -> Vec<(u64, Bufs)> {
    raw.iter()
        .filter_map(|r| t.unpush(qpn, r.wr_id))
        .map(|e| (e.wr_id, e.bufs))
        .collect()
}
