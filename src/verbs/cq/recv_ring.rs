//! The receive ring of a single-owner queue: receive buffers owned by the CQ's table for good,
//! posted and re-posted by slot, so a receive costs no table entry, no buffer move and no
//! allocation (see [`SoloQueue::set_recv_ring`](crate::verbs::SoloQueue::set_recv_ring)).
//!
//! Ownership: the ring keeps every slot's [`LocalBuf`] from its creation until the table is
//! dropped (after the QP is destroyed) or leaked with it. A posted slot (the device may write
//! it) is never lent out: [`data`](RecvRing::data) lends only a slot whose receive completed, and
//! re-posting takes the queue by `&mut`, so no lent slice can outlive it. A slot released for
//! the next list post ([`release`](RecvRing::release)) counts as posted from then on.

use crate::sys;
use crate::verbs::mr::LocalBuf;

use super::completion::{Bufs, Completion, WcOpcode};

/// Bit 63 of a work request id: a receive (ring slot or table entry).
pub(crate) const RECV_BIT: u64 = 1 << 63;

/// Bits 32..63 of a work request id: zero for a ring slot's, never zero for a table entry's
/// (whose generation is at least 1), so the two cannot be confused.
const GEN_BITS: u64 = 0x7fff_ffff << 32;

/// A successful receive into a ring slot, as the slot keeps it until it is posted again: small
/// and `Copy` (the buffer stays in the ring).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RingDone {
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
    /// True while the slot is the queue's: its receive is posted (the device may write it), or
    /// it is released for the next list post.
    posted: bool,
    /// Its last receive's completion (while `posted` is false).
    done: RingDone,
}

// SAFETY: `wr`'s pointers are plain values (its own SGE, the next slot's request of a list, or
// null), set and dereferenced only through `&mut` (a post takes the table by `&mut`); no
// `&self` path dereferences or changes them, so moving or sharing a slot between threads cannot
// race on what they point to.
unsafe impl Send for RecvSlot {}
// SAFETY: as above.
unsafe impl Sync for RecvSlot {}

/// The ring (empty until the owner sets one up).
#[derive(Default)]
pub(crate) struct RecvRing {
    bufs: Vec<LocalBuf>,
    /// Each slot's request; its SGE checked once when the ring was made.
    slots: Vec<RecvSlot>,
    /// The owner's `wr_id` for its receives (named in an error completion).
    wr_id: u64,
    /// Slots released for the next list post, in order (room for every slot: no allocation).
    released: Vec<u32>,
}

impl RecvRing {
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
                    wr_id: RecvRing::id(i as u32),
                    num_sge: 1,
                    ..Default::default()
                },
                sge,
                posted: false,
                done: RingDone::default(),
            })
            .collect();
        self.bufs = bufs;
        self.wr_id = wr_id;
        self.released = Vec::with_capacity(self.slots.len());
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
        s.wr.next = std::ptr::null_mut();
        Some(&mut s.wr)
    }

    /// Releases `slot` (its receive completed and its owner is done with it) for the next list
    /// post, [`take_list`](Self::take_list): it counts as posted from here. Returns how many
    /// slots are released; `None` if `slot` is not one whose receive completed.
    #[inline(always)]
    pub(crate) fn release(&mut self, slot: u32) -> Option<usize> {
        let s = self.slots.get_mut(slot as usize)?;
        if s.posted {
            return None;
        }
        s.posted = true;
        self.released.push(slot);
        Some(self.released.len())
    }

    /// Links the released slots' receive requests into one list, in release order, and returns
    /// its head (`None` if none is released). The list points into the ring: it is valid until
    /// the ring is changed again. After posting it, call [`list_posted`](Self::list_posted).
    pub(crate) fn take_list(&mut self) -> Option<*mut sys::ibv_recv_wr> {
        if self.released.is_empty() {
            return None;
        }
        // One base pointer for every link: no reference to another slot is made in between,
        // so the links stay valid.
        let base = self.slots.as_mut_ptr();
        let mut next: *mut sys::ibv_recv_wr = std::ptr::null_mut();
        for &i in self.released.iter().rev() {
            // SAFETY: `release` pushed only indexes of `slots`, each once (a released slot is
            // `posted` until `list_posted`), and `slots` is not resized after `set`.
            let s = unsafe { &mut *base.add(i as usize) };
            s.wr.sg_list = &mut s.sge;
            s.wr.next = next;
            next = &mut s.wr;
        }
        Some(next)
    }

    /// After the post of [`take_list`](Self::take_list)'s list: the slots from `bad` on (the
    /// request `ibv_post_recv(3)` stopped at; null if all were posted) are not posted. Returns
    /// how many were.
    pub(crate) fn list_posted(&mut self, bad: *const sys::ibv_recv_wr) -> usize {
        if bad.is_null() {
            let n = self.released.len();
            self.released.clear();
            return n;
        }
        let at = self
            .released
            .iter()
            .position(|&i| std::ptr::eq(&self.slots[i as usize].wr, bad))
            .unwrap_or(self.released.len());
        for &i in &self.released[at..] {
            self.slots[i as usize].posted = false;
        }
        self.released.clear();
        at
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

    /// The completion of `slot`'s last receive (what the slot holds while its owner has it:
    /// after its completion, before it is posted again); `None` if there is no such slot.
    #[inline(always)]
    pub(crate) fn done(&self, slot: u32) -> Option<&RingDone> {
        self.slots.get(slot as usize).map(|s| &s.done)
    }

    /// Slot `slot`'s last receive as a [`Completion`]: without buffers (they stay in the ring),
    /// its `wr_id` the slot's internal id.
    pub(crate) fn completion(&self, slot: u32) -> Completion {
        let d = self.done(slot).copied().unwrap_or_default();
        Completion {
            wr_id: RecvRing::id(slot),
            status: sys::IBV_WC_SUCCESS,
            vendor_err: 0,
            opcode: if d.write_imm {
                WcOpcode::RecvRdmaWithImm
            } else {
                WcOpcode::Recv
            },
            byte_len: d.byte_len,
            imm: d.imm,
            qp_num: 0,
            bufs: Bufs::new(),
            retired: Vec::new(),
            op: "RECV",
        }
    }

    /// Matches a ring slot's raw completion: the slot is no longer posted. A success is the
    /// slot, whose [`done`](Self::done) then tells what came; an error (a flush) a full
    /// completion without buffers (they stay here). `None` for a slot that was not posted (not
    /// ours).
    #[inline(always)]
    pub(crate) fn complete(&mut self, wc: &sys::ibv_wc) -> Option<Result<u32, Box<Completion>>> {
        let slot = wc.wr_id as u32;
        let s = self.slots.get_mut(slot as usize)?;
        if !s.posted {
            return None;
        }
        s.posted = false;
        if wc.status == sys::IBV_WC_SUCCESS {
            let with_imm = wc.wc_flags & sys::IBV_WC_WITH_IMM.0 != 0;
            // Kept in the slot, not handed up: the slot number alone moves.
            s.done = RingDone {
                write_imm: wc.opcode == sys::IBV_WC_RECV_RDMA_WITH_IMM,
                byte_len: wc.byte_len,
                // SAFETY: `imm_data` is the active union member when IBV_WC_WITH_IMM is set.
                imm: with_imm.then(|| u32::from_be(unsafe { wc.__bindgen_anon_1.imm_data })),
            };
            return Some(Ok(slot));
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
        let mut r = RecvRing::default();
        r.set(4, Vec::new(), fake_sges(3, 32, 5));
        let wr = r.take_for_post(2).expect("not posted");
        // SAFETY: `wr` points at slot 2's request in `r.slots`, and its SGE at the slot's SGE;
        // `r` is not changed before these reads.
        let (w, sge) = unsafe { (&*wr, *(*wr).sg_list) };
        assert_eq!((w.wr_id, w.num_sge), (RecvRing::id(2), 1));
        assert!(w.next.is_null());
        assert_eq!((sge.addr, sge.length, sge.lkey), (0x3000, 32, 5));
        assert!(r.take_for_post(2).is_none(), "posted already");
        r.unpost(2);
        assert!(r.take_for_post(2).is_some(), "a failed post is undone");
        assert!(r.take_for_post(3).is_none(), "no such slot");
    }

    #[test]
    fn released_slots_post_as_one_list_in_order() {
        let mut r = RecvRing::default();
        r.set(4, Vec::new(), fake_sges(4, 32, 5));
        assert!(r.take_list().is_none(), "nothing released");
        for (n, slot) in [2, 0, 3].into_iter().enumerate() {
            assert_eq!(r.release(slot), Some(n + 1));
        }
        assert!(r.release(0).is_none(), "released already");
        assert!(r.release(4).is_none(), "no such slot");
        assert!(
            r.take_for_post(2).is_none(),
            "a released slot counts as posted"
        );
        let head = r.take_list().expect("three released");
        let mut seen = Vec::new();
        let mut wr = head;
        while !wr.is_null() {
            // SAFETY: the list links requests in `r.slots`, each with its slot's SGE; `r` is
            // not changed during these reads.
            let (w, sge) = unsafe { (&*wr, *(*wr).sg_list) };
            assert_eq!((w.num_sge, sge.length, sge.lkey), (1, 32, 5));
            assert_eq!(sge.addr, 0x1000 * (w.wr_id - RecvRing::id(0) + 1));
            seen.push(w.wr_id);
            wr = w.next;
        }
        assert_eq!(seen, [RecvRing::id(2), RecvRing::id(0), RecvRing::id(3)]);
        assert_eq!(r.list_posted(std::ptr::null()), 3);
        assert!(r.take_list().is_none(), "the list went");
        assert!(r.take_for_post(3).is_none(), "posted");
        assert!(r.take_for_post(1).is_some(), "never released");
    }

    #[test]
    fn a_failed_list_post_gives_back_the_slots_from_where_it_stopped() {
        let mut r = RecvRing::default();
        r.set(4, Vec::new(), fake_sges(3, 32, 5));
        for slot in 0..3 {
            r.release(slot).expect("not posted");
        }
        let head = r.take_list().expect("released");
        // SAFETY: `head` is slot 0's request in `r.slots`, linked to slot 1's; no change to `r`
        // before this read.
        let second = unsafe { (*head).next };
        assert_eq!(r.list_posted(second), 1);
        assert!(r.take_for_post(0).is_none(), "posted before the failure");
        assert!(r.take_for_post(1).is_some() && r.take_for_post(2).is_some());
        r.unpost(2);
        let w = r.take_for_post(2).expect("unposted");
        // SAFETY: `w` is slot 2's request in `r.slots`; `r` is not changed before this read.
        let next = unsafe { (*w).next };
        assert!(next.is_null(), "a single post is a list of one");
    }

    #[test]
    fn ring_ids_never_collide_with_table_ids() {
        assert!(RecvRing::is_ring_id(RecvRing::id(0)));
        assert!(RecvRing::is_ring_id(RecvRing::id(u32::MAX)));
        // A table id has a generation of at least 1 in bits 32..62.
        assert!(!RecvRing::is_ring_id(RECV_BIT | (1 << 32)));
        assert!(!RecvRing::is_ring_id(5));
        let mut r = RecvRing::default();
        assert!(!r.is_set());
        assert!(r.take_for_post(0).is_none() && r.data(0, 0).is_none());
        let wc = sys::ibv_wc {
            wr_id: RecvRing::id(0),
            ..Default::default()
        };
        assert!(r.complete(&wc).is_none(), "no such slot");
    }
}
