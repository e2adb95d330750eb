//! The receive ring of a single-owner queue: receive buffers owned by the CQ's table for good,
//! posted and re-posted by slot, so a receive costs no table entry, no buffer move and no
//! allocation (see [`SoloQueue::set_recv_ring`](crate::verbs::SoloQueue::set_recv_ring)).
//!
//! Ownership: the ring keeps every slot's [`LocalBuf`] from its creation until the table is
//! dropped (after the QP is destroyed) or leaked with it. A posted slot (the device may write
//! it) is never lent out: [`data`](Ring::data) lends only a slot whose receive completed, and
//! re-posting takes the queue by `&mut`, so no lent slice can outlive it.

use crate::sys;
use crate::verbs::mr::LocalBuf;

use super::completion::{Bufs, Completion, WcOpcode};

/// Bit 63 of a work request id: a receive (ring slot or table entry).
pub(crate) const RECV_BIT: u64 = 1 << 63;

/// Bits 32..63 of a work request id: zero for a ring slot's, never zero for a table entry's
/// (whose generation is at least 1), so the two cannot be confused.
const GEN_BITS: u64 = 0x7fff_ffff << 32;

/// A successful receive into a ring slot: small and `Copy` (the buffer stays in the ring).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RingDone {
    /// The slot: read it with `SoloQueue::ring_data`, give it back with `SoloQueue::repost_ring`.
    pub(crate) slot: u32,
    /// An RDMA WRITE_WITH_IMM's (`IBV_WC_RECV_RDMA_WITH_IMM`), else a SEND's (`IBV_WC_RECV`,
    /// the only other opcode of a receive queue's successful completion).
    pub(crate) write_imm: bool,
    pub(crate) byte_len: u32,
    pub(crate) imm: Option<u32>,
}

/// One slot's receive request, built once (its id, and its SGE: the slot's whole buffer).
struct RecvSlot {
    wr: sys::ibv_recv_wr,
    sge: sys::ibv_sge,
    /// True while the slot's receive is posted (the device may write it).
    posted: bool,
}

/// The ring (empty until the owner sets one up).
#[derive(Default)]
pub(crate) struct Ring {
    bufs: Vec<LocalBuf>,
    /// Each slot's request; its SGE checked once when the ring was made.
    slots: Vec<RecvSlot>,
    /// The owner's `wr_id` for its receives (named in an error completion).
    wr_id: u64,
}

impl RingDone {
    /// The completion's opcode.
    pub(crate) fn opcode(&self) -> WcOpcode {
        if self.write_imm {
            WcOpcode::RecvRdmaWithImm
        } else {
            WcOpcode::Recv
        }
    }
}

impl Ring {
    /// True for the work request id of a ring slot.
    #[inline(always)]
    pub(crate) fn is_ring_id(id: u64) -> bool {
        id & RECV_BIT != 0 && id & GEN_BITS == 0
    }

    /// The work request id posted for `slot`.
    #[inline(always)]
    pub(crate) fn id(slot: u32) -> u64 {
        RECV_BIT | u64::from(slot)
    }

    /// True once the ring is set up.
    pub(crate) fn is_set(&self) -> bool {
        !self.bufs.is_empty()
    }

    /// Takes `bufs` as the ring's slots with their checked SGEs (none posted yet).
    pub(crate) fn set(&mut self, wr_id: u64, bufs: Vec<LocalBuf>, sges: Vec<sys::ibv_sge>) {
        self.slots = sges
            .into_iter()
            .enumerate()
            .map(|(i, sge)| RecvSlot {
                wr: sys::ibv_recv_wr {
                    wr_id: Ring::id(i as u32),
                    num_sge: 1,
                    ..Default::default()
                },
                sge,
                posted: false,
            })
            .collect();
        self.bufs = bufs;
        self.wr_id = wr_id;
    }

    /// Marks `slot` posted and returns its receive request, if it is a slot that is not posted.
    /// The request points into the ring: it is valid until the ring is changed again.
    #[inline(always)]
    pub(crate) fn take_for_post(&mut self, slot: u32) -> Option<*mut sys::ibv_recv_wr> {
        let s = self.slots.get_mut(slot as usize)?;
        if s.posted {
            return None;
        }
        s.posted = true;
        s.wr.sg_list = &mut s.sge;
        Some(&mut s.wr)
    }

    /// The post of `slot` failed: it is not posted.
    pub(crate) fn unpost(&mut self, slot: u32) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            s.posted = false;
        }
    }

    /// The first `len` bytes of `slot`, if its receive completed and it is not posted again.
    #[inline(always)]
    pub(crate) fn data(&self, slot: u32, len: usize) -> Option<&[u8]> {
        let i = slot as usize;
        if self.slots.get(i)?.posted {
            return None;
        }
        self.bufs.get(i)?.get(..len)
    }

    /// Matches a ring slot's raw completion: the slot is no longer posted. A success is a
    /// [`RingDone`]; an error (a flush) a full completion without buffers (they stay here).
    /// `None` for a slot that was not posted (not ours).
    #[inline(always)]
    pub(crate) fn complete(
        &mut self,
        wc: &sys::ibv_wc,
    ) -> Option<Result<RingDone, Box<Completion>>> {
        let slot = wc.wr_id as u32;
        let s = self.slots.get_mut(slot as usize)?;
        if !s.posted {
            return None;
        }
        s.posted = false;
        if wc.status == sys::IBV_WC_SUCCESS {
            let with_imm = wc.wc_flags & sys::IBV_WC_WITH_IMM.0 != 0;
            return Some(Ok(RingDone {
                slot,
                write_imm: wc.opcode == sys::IBV_WC_RECV_RDMA_WITH_IMM,
                byte_len: wc.byte_len,
                // SAFETY: `imm_data` is the active union member when IBV_WC_WITH_IMM is set.
                imm: with_imm.then(|| u32::from_be(unsafe { wc.__bindgen_anon_1.imm_data })),
            }));
        }
        Some(Err(Box::new(Completion {
            wr_id: self.wr_id,
            status: wc.status,
            vendor_err: wc.vendor_err,
            opcode: WcOpcode::Other(wc.opcode),
            byte_len: wc.byte_len,
            imm: None,
            qp_num: wc.qp_num,
            bufs: Bufs::new(),
            retired: Vec::new(),
            op: "RECV",
        })))
    }
}

/// `n` SGEs of `length` bytes at 0x1000, 0x2000, ... with key `lkey`, no buffers behind them (for
/// the rings' bookkeeping tests).
#[cfg(test)]
pub(super) fn fake_sges(n: u32, length: u32, lkey: u32) -> Vec<sys::ibv_sge> {
    (0..n)
        .map(|i| sys::ibv_sge {
            addr: 0x1000 * u64::from(i + 1),
            length,
            lkey,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slots_request_is_its_own_and_posts_once() {
        let mut r = Ring::default();
        r.set(4, Vec::new(), fake_sges(3, 32, 5));
        let wr = r.take_for_post(2).expect("not posted");
        // SAFETY: `wr` points at slot 2's request in `r.slots`, and its SGE at the slot's SGE;
        // `r` is not changed before these reads.
        let (w, sge) = unsafe { (&*wr, *(*wr).sg_list) };
        assert_eq!((w.wr_id, w.num_sge), (Ring::id(2), 1));
        assert!(w.next.is_null());
        assert_eq!((sge.addr, sge.length, sge.lkey), (0x3000, 32, 5));
        assert!(r.take_for_post(2).is_none(), "posted already");
        r.unpost(2);
        assert!(r.take_for_post(2).is_some(), "a failed post is undone");
        assert!(r.take_for_post(3).is_none(), "no such slot");
    }

    #[test]
    fn ring_ids_never_collide_with_table_ids() {
        assert!(Ring::is_ring_id(Ring::id(0)));
        assert!(Ring::is_ring_id(Ring::id(u32::MAX)));
        // A table id has a generation of at least 1 in bits 32..62.
        assert!(!Ring::is_ring_id(RECV_BIT | (1 << 32)));
        assert!(!Ring::is_ring_id(5));
        let mut r = Ring::default();
        assert!(!r.is_set());
        assert!(r.take_for_post(0).is_none() && r.data(0, 0).is_none());
        let wc = sys::ibv_wc {
            wr_id: Ring::id(0),
            ..Default::default()
        };
        assert!(r.complete(&wc).is_none(), "no such slot");
    }
}
