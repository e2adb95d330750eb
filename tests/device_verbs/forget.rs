//! `mem::forget` of a handle only leaks (docs/soundness.md): posted memory is owned by the CQ's
//! in-flight table, not by the queue pair, and a CM event keeps its id alive, so forgetting a
//! QP or an event neither frees memory the device may use nor blocks `rdma_destroy_id(3)`.
//! Needs rxe0: `#[ignore]`d on the host, run by ci/test.sh in the guest (not under valgrind:
//! the forgotten handles are deliberate definite leaks).

use std::sync::mpsc;
use std::time::Duration;

use rdmaxfer::cm::{CmId, EventKind};
use rdmaxfer::verbs::{LocalBuf, SendRequest, Sge, WaitMode, WcOpcode};
use rdmaxfer::xfer::loopback::LoopbackPair;

use crate::common;
use crate::common::verbs::loopback;

const T: Duration = Duration::from_secs(10);

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_forgotten_queue_pair_leaves_its_posted_buffer_to_the_cq() {
    let p = loopback(WaitMode::Poll);
    let LoopbackPair {
        a,
        b,
        cq_a,
        cq_b,
        pd,
        ..
    } = p;
    let len = 8192;
    b.post_recv(7, [Sge::new(LocalBuf::new(&pd, len).unwrap())])
        .unwrap();
    // The receive buffer now belongs to cq_b's in-flight table; forgetting the QP leaks the QP
    // (never destroyed), not the buffer's ownership.
    std::mem::forget(b);
    let data: Vec<u8> = (0..len).map(|i| (i * 13 + 5) as u8).collect();
    let mut src = LocalBuf::new(&pd, len).unwrap();
    src.copy_from_slice(&data);
    a.post_send(SendRequest::send(8, [Sge::new(src)])).unwrap();
    let sc = cq_a.wait(1, T).unwrap().remove(0).result().unwrap();
    assert_eq!((sc.wr_id, sc.opcode), (8, WcOpcode::Send));
    let rc = cq_b.wait(1, T).unwrap().remove(0).result().unwrap();
    assert_eq!(
        (rc.wr_id, rc.opcode, rc.byte_len as usize),
        (7, WcOpcode::Recv, len)
    );
    let bufs = rc.into_local_bufs();
    assert_eq!(bufs.len(), 1, "the completion hands the posted buffer back");
    assert!(bufs[0][..] == data[..], "the received bytes differ");
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn dropping_a_cm_id_whose_event_was_forgotten_does_not_block() {
    let id = CmId::new().unwrap();
    // Only resolved (nothing listens there): any port will do.
    let dst = common::addr(common::port());
    id.resolve_addr(None, dst, T).unwrap();
    let ev = id
        .expect_event(EventKind::AddrResolved, T, "resolving rxe0's address")
        .expect("rxe0 must exist: these tests run in the rxe guest (ci/test.sh)");
    // Never acked: rdma_destroy_id(3) would block on it, but the event keeps the id alive, so
    // dropping the last `CmId` handle cannot reach rdma_destroy_id.
    std::mem::forget(ev);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        drop(id);
        let _ = tx.send(());
    });
    rx.recv_timeout(T).expect(
        "dropping a CmId whose event was forgotten blocked (rdma_destroy_id on an unacked event)",
    );
    // The CM still works for new ids.
    let id2 = CmId::new().unwrap();
    id2.resolve_addr(None, dst, T).unwrap();
    id2.expect_event(EventKind::AddrResolved, T, "resolving again")
        .unwrap();
}
