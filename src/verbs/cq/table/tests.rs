//! The in-flight table's unit tests.

use super::*;
use crate::error::Error;

pub(in crate::verbs::cq) fn wc(wr_id: u64, qp_num: u32, status: u32) -> sys::ibv_wc {
    sys::ibv_wc {
        wr_id,
        qp_num,
        status,
        ..Default::default()
    }
}

#[test]
fn qp_map_keeps_queues_apart() {
    let mut m: QpMap<Vec<u32>> = QpMap::default();
    assert!(m.get(7).is_none());
    m.get_or_default(7).push(1);
    m.get_or_default(9).push(2);
    m.get_or_default(7).push(3);
    assert_eq!(m.get(7), Some(&vec![1, 3]));
    assert_eq!(m.get_mut(9).map(|v| v.len()), Some(1));
    assert_eq!(m.remove(7), Some(vec![1, 3]));
    assert!(m.get(7).is_none() && m.remove(7).is_none());
    assert_eq!(m.get(9), Some(&vec![2]));
}

#[test]
fn signaled_completion_retires_earlier_unsignaled() {
    let mut t = Table::default();
    let a = t.push(5, false, 100, Bufs::new(), "RDMA WRITE").unwrap();
    let b = t.push(5, false, 101, Bufs::new(), "RDMA WRITE").unwrap();
    let c = t.push(5, false, 102, Bufs::new(), "SEND").unwrap();
    assert!(a < b && b < c);
    let done = t.complete(&wc(b, 5, 0)).unwrap();
    assert_eq!(done.wr_id, 101);
    assert_eq!(done.retired.len(), 1);
    assert_eq!(done.retired[0].wr_id, 100);
    assert_eq!(done.op(), "RDMA WRITE");
    assert_eq!(t.outstanding(5), 1);
    assert!(t.complete(&wc(a, 5, 0)).is_none(), "already retired");
    let done = t.complete(&wc(c, 5, 12)).unwrap();
    assert!(!done.is_success());
    assert!(matches!(
        done.to_error(),
        Error::Completion {
            status: 12,
            wr_id: 102,
            ..
        }
    ));
}

#[test]
fn recv_ids_are_separate_and_unknown_qp_is_ignored() {
    let mut t = Table::default();
    let r = t.push(9, true, 1, Bufs::new(), "RECV").unwrap();
    assert_ne!(r & RECV_BIT, 0);
    assert!(t.complete(&wc(r, 10, 0)).is_none());
    let mut w = wc(r, 9, 0);
    w.wc_flags = sys::IBV_WC_WITH_IMM.0;
    w.__bindgen_anon_1.imm_data = 0xdeadbeefu32.to_be();
    let c = t.complete(&w).unwrap();
    assert_eq!(c.imm, Some(0xdeadbeef));
    assert!(!t.has_entries(9));
}

#[test]
fn purge_and_pop_last() {
    let mut t = Table::default();
    let s1 = t.push(3, false, 1, Bufs::new(), "SEND").unwrap();
    let r = t.push(3, true, 2, Bufs::new(), "RECV").unwrap();
    assert_eq!(t.unpush(3, r).unwrap().wr_id, 2);
    assert!(t.has_entries(3));
    // A send taken back leaves the chain consistent for the next one.
    let s2 = t.push(3, false, 3, Bufs::new(), "SEND").unwrap();
    assert_eq!(t.unpush(3, s2).unwrap().wr_id, 3);
    let s3 = t.push(3, false, 4, Bufs::new(), "SEND").unwrap();
    let done = t.complete(&wc(s3, 3, 0)).unwrap();
    assert_eq!((done.wr_id, done.retired.len()), (4, 1));
    assert_eq!(done.retired[0].wr_id, 1);
    assert!(t.complete(&wc(s1, 3, 0)).is_none(), "retired");
    t.push(3, false, 5, Bufs::new(), "SEND").unwrap();
    assert_eq!(t.purge(3).len(), 1);
    assert!(!t.has_entries(3));
}

#[test]
fn lean_path_falls_back_to_full_completions_and_keeps_stash_order() {
    let mut t = Table::default();
    // No buffer (a credit message's SEND), an error, an unsignaled predecessor: all full.
    let a = t.push(4, false, 1, Bufs::new(), "SEND").unwrap();
    let b = t.push(4, false, 2, Bufs::new(), "SEND").unwrap();
    let r = t.push(4, true, 3, Bufs::new(), "RECV").unwrap();
    assert!(
        t.complete_lean(&wc(a ^ (1 << 40), 4, 0)).is_none(),
        "stale id"
    );
    match t.complete_lean(&wc(b, 4, 0)) {
        Some(Polled::Full(c)) => {
            assert_eq!((c.wr_id, c.retired.len()), (2, 1));
            assert_eq!(c.retired[0].wr_id, 1);
        }
        _ => panic!("a completion that retires another is a full one"),
    }
    // Stashed completions come out in order, skipping unknown ones, before new polls.
    let r2 = t.push(4, true, 4, Bufs::new(), "RECV").unwrap();
    t.stash[0] = wc(0, 4, 0);
    t.stash[1] = wc(r, 4, 12);
    t.stash[2] = wc(r2, 4, 0);
    (t.stash_at, t.stash_len) = (0, 3);
    let first = t.take_polled().unwrap().into_completion(&mut t);
    assert_eq!((first.wr_id, first.is_success()), (3, false));
    let p = t.take_polled().unwrap();
    assert_eq!(p.into_completion(&mut t).wr_id, 4);
    assert!(t.take_polled().is_none());
    assert!(!t.has_entries(4));
}

#[test]
fn slab_reuses_slots_and_stale_ids_never_match() {
    let mut t = Table::with_capacity(4);
    let old = t.push(1, true, 10, Bufs::new(), "RECV").unwrap();
    assert_eq!(t.purge(1).len(), 1);
    // The slot is reused by another QP; the destroyed QP's late completion must not match
    // it, nor may the new entry's id with the old QP number.
    let new = t.push(2, true, 20, Bufs::new(), "RECV").unwrap();
    assert_eq!(old & INDEX_MASK, new & INDEX_MASK);
    assert_ne!(old, new);
    assert!(t.complete(&wc(old, 1, 0)).is_none());
    assert!(t.complete(&wc(old, 2, 0)).is_none());
    assert!(t.complete(&wc(new, 1, 0)).is_none());
    assert!(t.complete(&wc(0, 2, 0)).is_none());
    assert_eq!(t.complete(&wc(new, 2, 0)).unwrap().wr_id, 20);
    // Steady state: posting and completing in turn never grows the slab.
    let cap = t.slots.capacity();
    for k in 0..1000u64 {
        let s = t.push(2, false, k, Bufs::new(), "SEND").unwrap();
        let r = t.push(2, true, k, Bufs::new(), "RECV").unwrap();
        assert_eq!(t.complete(&wc(r, 2, 0)).unwrap().wr_id, k);
        assert_eq!(t.complete(&wc(s, 2, 0)).unwrap().wr_id, k);
    }
    assert_eq!((t.slots.len(), t.slots.capacity()), (2, cap));
    assert!(!t.has_entries(2));
}

#[test]
fn a_slot_that_used_its_last_generation_is_never_reused() {
    let mut t = Table::default();
    let first = t.push(1, false, 1, Bufs::new(), "SEND").unwrap();
    assert_eq!(first >> 32, 1, "a slot's first generation is 1");
    assert_eq!(t.complete(&wc(first, 1, 0)).unwrap().wr_id, 1);
    // Slot 0 one use short of its last generation (2^31 - 2 more uses, made at once).
    t.slots[0].gen = (GEN_MASK - 1) as u32;
    let last = t.push(1, false, 2, Bufs::new(), "SEND").unwrap();
    assert_eq!((last & INDEX_MASK, (last >> 32) & GEN_MASK), (0, GEN_MASK));
    assert_eq!(t.complete(&wc(last, 1, 0)).unwrap().wr_id, 2);
    // Its generations are used up: the next post takes a new slot, and slot 0 stays unused,
    // so neither of its ids can ever match again.
    for k in 3..10u64 {
        let id = t.push(1, k % 2 == 0, k, Bufs::new(), "SEND").unwrap();
        assert_eq!(id & INDEX_MASK, 1);
        assert!(t.complete(&wc(last, 1, 0)).is_none());
        assert!(t.complete(&wc(first, 1, 0)).is_none());
        assert_eq!(t.complete(&wc(id, 1, 0)).unwrap().wr_id, k);
    }
    assert_eq!(t.slots.len(), 2);
    // A purge releases the same way.
    t.slots[1].gen = GEN_MASK as u32 - 1;
    t.push(1, true, 11, Bufs::new(), "RECV").unwrap();
    assert_eq!(t.purge(1).len(), 1);
    let id = t.push(1, true, 12, Bufs::new(), "RECV").unwrap();
    assert_eq!((id & INDEX_MASK, (id >> 32) & GEN_MASK), (2, 1));
}
