//! The send ring of a single-owner queue: send buffers owned by the CQ's table for good, filled
//! while free and posted by slot, so a SEND costs no table entry, no buffer move and no
//! allocation (see [`SoloQueue::set_send_ring`](crate::verbs::SoloQueue::set_send_ring)).
//!
//! Ownership: the ring keeps every slot's [`LocalBuf`] from its creation until the table is
//! dropped (after the QP is destroyed) or leaked with it. A posted slot (the device may read
//! it) is never lent out: [`next_free`](SendRing::next_free) lends only a free slot, and posting
//! takes the queue by `&mut`, so no lent slice can outlive it.
//!
//! Retiring: a send queue completes in post order, so a completion retires every send posted
//! before it. Each post takes the next number of the table's send-queue sequence; a ring
//! completion frees the ring's slots up to it, and a completion of a table entry frees the ring's
//! slots with a lower number. The owner learns how many of its sends completed from
//! [`take_retired`](SendRing::take_retired).

use crate::sys;
use crate::verbs::mr::LocalBuf;

/// True for the work request id of a send ring slot: bits 32..63 zero (a table entry's id has a
/// generation of at least 1 there, a receive ring slot's has bit 63).
#[inline(always)]
pub(crate) fn is_send_ring_id(id: u64) -> bool {
    id >> 32 == 0
}

/// One slot's work request, built once: a post sets only what changes (the length, opcode, flags
/// and immediate) and points the request at the slot's own SGE.
struct SendSlot {
    wr: sys::ibv_send_wr,
    /// The slot's buffer address and key, checked once; the length is set per post.
    sge: sys::ibv_sge,
    /// The slot's buffer length.
    cap: u32,
    /// The send-queue sequence number of the slot's last post.
    seq: u64,
}

// SAFETY: `wr`'s pointers are plain values (its own SGE in the slot's ring, or null; the other
// members are unused by a SEND), set and dereferenced only through `&mut` (a post takes the
// table by `&mut`); no `&self` path dereferences or changes them, so moving or sharing a slot
// between threads cannot race on what they point to.
unsafe impl Send for SendSlot {}
// SAFETY: as above.
unsafe impl Sync for SendSlot {}

/// The ring (empty until the owner sets one up). Slots are posted round the ring and retire in
/// the same order (a send queue completes in order), so the posted ones are always the run
/// `head, head + 1, ...` (mod the ring's size) of length `posted`.
#[derive(Default)]
pub(crate) struct SendRing {
    bufs: Vec<LocalBuf>,
    slots: Vec<SendSlot>,
    /// The oldest posted slot (the next to post when none is).
    head: u32,
    /// How many slots are posted (the device may read them).
    posted: u32,
    /// The next slot to post: `head + posted` round the ring.
    tail: u32,
    /// Sends retired (completed, signaled or not) since the owner last took the count.
    retired: usize,
    /// The owner's `wr_id` for its sends (named in a full completion).
    pub(crate) wr_id: u64,
}

/// The slots of `sges` (whole buffers), their work request ids the slot numbers.
fn slots_of(sges: Vec<sys::ibv_sge>) -> Vec<SendSlot> {
    sges.into_iter()
        .enumerate()
        .map(|(i, sge)| SendSlot {
            wr: sys::ibv_send_wr {
                wr_id: i as u64,
                num_sge: 1,
                ..Default::default()
            },
            sge,
            cap: sge.length,
            seq: 0,
        })
        .collect()
}

impl SendRing {
    /// True once the ring is set up.
    pub(crate) fn is_set(&self) -> bool {
        !self.slots.is_empty()
    }

    /// Takes `bufs` as the ring's slots with their checked SGEs (all free; at most `u32::MAX`).
    pub(crate) fn set(&mut self, wr_id: u64, bufs: Vec<LocalBuf>, sges: Vec<sys::ibv_sge>) {
        self.slots = slots_of(sges);
        self.bufs = bufs;
        (self.head, self.posted, self.tail, self.retired) = (0, 0, 0, 0);
        self.wr_id = wr_id;
    }

    /// The number of slots.
    #[inline(always)]
    fn size(&self) -> u32 {
        self.slots.len() as u32
    }

    /// The slot after `i` round the ring (`i` a slot).
    #[inline(always)]
    fn next(&self, i: u32) -> u32 {
        if i + 1 >= self.size() {
            0
        } else {
            i + 1
        }
    }

    /// How far `slot` is from `head` round the ring, if it is posted.
    #[inline(always)]
    fn posted_at(&self, slot: u32) -> Option<u32> {
        let n = self.size();
        if slot >= n {
            return None;
        }
        let k = if slot >= self.head {
            slot - self.head
        } else {
            slot + (n - self.head)
        };
        (k < self.posted).then_some(k)
    }

    /// How many slots are free.
    #[inline(always)]
    pub(crate) fn free_slots(&self) -> usize {
        (self.size() - self.posted) as usize
    }

    /// The next free slot's whole buffer, to fill before [`take_for_post`](Self::take_for_post).
    #[inline(always)]
    pub(crate) fn next_free(&mut self) -> Option<&mut [u8]> {
        if self.posted >= self.size() {
            return None;
        }
        Some(&mut self.bufs.get_mut(self.tail as usize)?[..])
    }

    /// Marks the next free slot posted as send number `seq` of `len` bytes and returns its slot
    /// and its work request, set to post those bytes with `opcode`, `flags` and `imm` (network
    /// order); `None` if no slot is free or `len` exceeds it. The request points into the ring:
    /// it is valid until the ring is changed again.
    #[inline(always)]
    pub(crate) fn take_for_post(
        &mut self,
        seq: u64,
        len: usize,
        opcode: sys::ibv_wr_opcode,
        flags: u32,
        imm: u32,
    ) -> Option<(u32, *mut sys::ibv_send_wr)> {
        if self.posted >= self.size() {
            return None;
        }
        let slot = self.tail;
        let s = self.slots.get_mut(slot as usize)?;
        if len > s.cap as usize {
            return None;
        }
        s.sge.length = len as u32;
        s.seq = seq;
        s.wr.opcode = opcode;
        s.wr.send_flags = flags;
        s.wr.__bindgen_anon_1.imm_data = imm;
        s.wr.sg_list = &mut s.sge;
        let wr: *mut sys::ibv_send_wr = &mut s.wr;
        self.posted += 1;
        self.tail = self.next(slot);
        Some((slot, wr))
    }

    /// The post of `slot` (the newest) failed: it is free again.
    pub(crate) fn unpost(&mut self, slot: u32) {
        if self.posted > 0 && self.posted_at(slot) == Some(self.posted - 1) {
            self.posted -= 1;
            self.tail = slot;
        }
    }

    /// Frees the posted slots up to and including `slot` (its completion came) and returns its
    /// send-queue number; `None` if `slot` is not posted (not ours: nothing changes).
    #[inline(always)]
    pub(crate) fn complete(&mut self, slot: u32) -> Option<u64> {
        let k = self.posted_at(slot)? + 1;
        self.head = self.next(slot);
        self.posted -= k;
        self.retired += k as usize;
        Some(self.slots[slot as usize].seq)
    }

    /// Frees the posted slots whose sends were posted before send number `seq` (a later send's
    /// completion came).
    #[inline(always)]
    pub(crate) fn retire_before(&mut self, seq: u64) {
        while self.posted > 0 && self.slots[self.head as usize].seq < seq {
            self.head = self.next(self.head);
            self.posted -= 1;
            self.retired += 1;
        }
    }

    /// The send-queue number of the oldest posted slot, if any.
    #[cfg(test)]
    pub(crate) fn oldest(&self) -> Option<u64> {
        (self.posted > 0).then(|| self.slots[self.head as usize].seq)
    }

    /// How many sends completed since the last call.
    #[inline(always)]
    pub(crate) fn take_retired(&mut self) -> usize {
        std::mem::take(&mut self.retired)
    }
}

#[cfg(test)]
impl SendRing {
    /// A ring of `n` slots of 64 bytes with no buffers behind them (for the retiring logic).
    pub(crate) fn with_slots(wr_id: u64, n: u32) -> SendRing {
        SendRing {
            slots: slots_of(super::recv_ring::fake_sges(n, 64, 7)),
            wr_id,
            ..SendRing::default()
        }
    }

    /// [`take_for_post`](Self::take_for_post) of a SEND: the slot and the length posted.
    pub(crate) fn post(&mut self, seq: u64, len: usize) -> Option<(u32, u32)> {
        let (slot, wr) = self.take_for_post(seq, len, sys::IBV_WR_SEND, 0, 0)?;
        // SAFETY: `wr` points at the slot's request, and its SGE at the slot's SGE, both in
        // `self.slots`, unchanged since take_for_post.
        let n = unsafe { (*(*wr).sg_list).length };
        Some((slot, n))
    }
}

#[cfg(test)]
mod tests {
    use super::super::completion::Bufs;
    use super::super::table::tests::wc;
    use super::super::table::{Polled, Table};
    use super::*;

    /// Posts the next send ring slot as the table's next send; returns its work request id.
    fn ring_post(t: &mut Table) -> u64 {
        let seq = t.next_seq();
        u64::from(t.send_ring.post(seq, 8).expect("a free slot").0)
    }

    #[test]
    #[allow(clippy::field_reassign_with_default)] // Table's other fields are private
    fn send_ring_and_table_sends_retire_each_other_in_post_order() {
        let mut t = Table::default();
        t.send_ring = SendRing::with_slots(77, 4);
        // Ring sends alone: a signaled one frees those before it, with no full completion.
        let r0 = ring_post(&mut t);
        let r1 = ring_post(&mut t);
        match t.complete_lean(&wc(r1, 6, 0)) {
            Some(Polled::Sent { wr_id, qp_num }) => assert_eq!((wr_id, qp_num), (77, 6)),
            _ => panic!("a ring send that retires no table entry is a lean one"),
        }
        assert_eq!(t.take_retired(), 2);
        assert!(t.complete_lean(&wc(r0, 6, 0)).is_none(), "retired with r1");
        // A table send (a credit message's) retires the ring sends before it, not after it.
        let r2 = ring_post(&mut t);
        let credit = t.push(6, false, 500, Bufs::new(), "SEND").unwrap();
        let r3 = ring_post(&mut t);
        let c = t.complete(&wc(credit, 6, 0)).expect("the credit message's");
        assert_eq!((c.wr_id, c.retired.len(), t.take_retired()), (500, 0, 1));
        assert!(
            t.complete(&wc(r2, 6, 0)).is_none(),
            "retired with the credit message"
        );
        // A ring send retires an older unsignaled table send: a full completion lists it.
        let user = t.push(6, false, 42, Bufs::new(), "RDMA_WRITE").unwrap();
        let r4 = ring_post(&mut t);
        // r3 before it, signaled: lean.
        assert!(matches!(
            t.complete_lean(&wc(r3, 6, 0)),
            Some(Polled::Sent { .. })
        ));
        match t.complete_lean(&wc(r4, 6, 0)) {
            Some(Polled::Full(f)) => {
                assert_eq!((f.wr_id, f.is_success(), f.retired.len()), (77, true, 1));
                assert_eq!(f.retired[0].wr_id, 42);
            }
            _ => panic!("a ring send that retires a table entry is a full one"),
        }
        assert_eq!(t.take_retired(), 2);
        assert!(t.complete(&wc(user, 6, 0)).is_none(), "retired with r4");
        assert!(!t.has_entries(6) && t.send_ring.oldest().is_none());
        // An error completion of a ring send is a full one with the ring's wr_id.
        let r5 = ring_post(&mut t);
        let f = t.complete(&wc(r5, 6, 5)).expect("the flushed send");
        assert_eq!((f.wr_id, f.is_success(), t.take_retired()), (77, false, 1));
        assert_eq!(t.send_ring.free_slots(), 4);
    }

    #[test]
    fn ids_never_collide_with_table_or_receive_ring_ids() {
        assert!(is_send_ring_id(0) && is_send_ring_id(u64::from(u32::MAX)));
        assert!(!is_send_ring_id(1 << 32), "a table id (generation 1)");
        assert!(!is_send_ring_id(super::super::recv_ring::RecvRing::id(0)));
    }

    #[test]
    fn a_post_sets_its_slots_request_and_nothing_else() {
        let mut r = SendRing::with_slots(9, 2);
        let flags = sys::IBV_SEND_SIGNALED.0 | sys::IBV_SEND_INLINE.0;
        let (slot, wr) = r
            .take_for_post(5, 12, sys::IBV_WR_SEND_WITH_IMM, flags, 0xdead_beef)
            .unwrap();
        // SAFETY: `wr` points at slot 0's request in `r.slots`, and its SGE at the slot's SGE;
        // `r` is not changed before these reads.
        let (w, sge) = unsafe { (&*wr, *(*wr).sg_list) };
        assert_eq!((slot, w.wr_id, w.num_sge), (0, 0, 1));
        assert!(w.next.is_null(), "one request, not a list");
        assert_eq!((w.opcode, w.send_flags), (sys::IBV_WR_SEND_WITH_IMM, flags));
        // SAFETY: a SEND_WITH_IMM's union member is `imm_data`.
        assert_eq!(unsafe { w.__bindgen_anon_1.imm_data }, 0xdead_beef);
        assert_eq!((sge.addr, sge.length, sge.lkey), (0x1000, 12, 7));
        assert!(std::ptr::eq(w.sg_list, &r.slots[0].sge));
        // The next post is the next slot's, its own SGE, at its own length.
        let (slot, wr) = r.take_for_post(6, 64, sys::IBV_WR_SEND, 0, 0).unwrap();
        // SAFETY: as above, for slot 1.
        let (w, sge) = unsafe { (&*wr, *(*wr).sg_list) };
        assert_eq!(
            (slot, w.wr_id, w.opcode, w.send_flags),
            (1, 1, sys::IBV_WR_SEND, 0)
        );
        assert_eq!((sge.addr, sge.length), (0x2000, 64));
        assert_eq!(r.slots[0].sge.length, 12, "slot 0 untouched");
    }

    #[test]
    fn slots_go_round_and_complete_in_order() {
        let mut r = SendRing::with_slots(9, 3);
        assert_eq!(r.free_slots(), 3);
        let (a, la) = r.post(1, 10).unwrap();
        assert_eq!((a, la), (0, 10));
        assert!(r.post(2, 65).is_none(), "longer than the slot");
        let (b, _) = r.post(2, 64).unwrap();
        let (c, _) = r.post(3, 0).unwrap();
        assert!(r.post(4, 1).is_none(), "all posted");
        assert_eq!(r.complete(a), Some(1));
        assert_eq!(r.complete(a), None, "freed already");
        // A signaled completion frees the unsignaled sends before it.
        assert_eq!(r.complete(c), Some(3));
        assert!(r.complete(b).is_none());
        assert_eq!(
            (r.free_slots(), r.take_retired(), r.take_retired()),
            (3, 3, 0)
        );
    }

    #[test]
    fn a_later_send_retires_older_slots_and_a_failed_post_is_undone() {
        let mut r = SendRing::with_slots(9, 4);
        let (a, _) = r.post(10, 1).unwrap();
        let (b, _) = r.post(12, 1).unwrap();
        let (c, _) = r.post(13, 1).unwrap();
        r.unpost(b);
        assert_eq!(r.free_slots(), 1, "only the newest can be undone");
        r.unpost(c);
        assert_eq!(r.free_slots(), 2);
        r.retire_before(11);
        assert_eq!((r.take_retired(), r.oldest()), (1, Some(12)));
        assert!(r.complete(a).is_none());
        r.retire_before(14);
        assert_eq!((r.take_retired(), r.free_slots(), r.oldest()), (1, 4, None));
    }

    proptest::proptest! {
        /// Posts, completions, retirements and undone posts in any order keep the ring where a
        /// plain queue of (slot, seq) says it is: slots handed out round the ring in turn, a
        /// completion freeing its slot and every older one, the count of retired sends exact.
        #[test]
        fn the_ring_matches_a_queue_model(
            n in 1u32..6,
            ops in proptest::collection::vec((0u8..4, 0u32..8), 0..200),
        ) {
            let mut r = SendRing::with_slots(9, n);
            let mut model = std::collections::VecDeque::<(u32, u64)>::new();
            let (mut next, mut seq, mut retired) = (0u32, 0u64, 0usize);
            for (op, x) in ops {
                match op {
                    0 => {
                        seq += 1;
                        let got = r.post(seq, 1).map(|(slot, _)| slot);
                        if model.len() < n as usize {
                            proptest::prop_assert_eq!(got, Some(next));
                            model.push_back((next, seq));
                            next = (next + 1) % n;
                        } else {
                            proptest::prop_assert_eq!(got, None);
                        }
                    }
                    1 => {
                        let slot = x % n;
                        let want = model.iter().position(|&(s, _)| s == slot).map(|p| {
                            let q = model[p].1;
                            model.drain(..=p);
                            retired += p + 1;
                            q
                        });
                        proptest::prop_assert_eq!(r.complete(slot), want);
                    }
                    2 => {
                        let before = seq.saturating_sub(u64::from(x));
                        while model.front().is_some_and(|&(_, q)| q < before) {
                            model.pop_front();
                            retired += 1;
                        }
                        r.retire_before(before);
                    }
                    _ => {
                        let slot = x % n;
                        if model.back().is_some_and(|&(s, _)| s == slot) {
                            model.pop_back();
                            next = slot;
                        }
                        r.unpost(slot);
                    }
                }
                proptest::prop_assert_eq!(r.free_slots(), n as usize - model.len());
                proptest::prop_assert_eq!(r.oldest(), model.front().map(|&(_, q)| q));
            }
            proptest::prop_assert_eq!(r.take_retired(), retired);
        }
    }
}
