//! Device tests for receives posted as a list ([`SoloQueue::post_recv_list`]): every buffer is
//! either posted (and comes back in exactly one completion) or given back in the error, never
//! both, never lost. They need rxe0 (and rxe1 for a buffer of another device), so they are
//! `#[ignore]`d on the host; ci/test.sh runs them in the guest.

use std::collections::BTreeSet;
use std::time::Instant;

use rdmaxfer::verbs::{
    Context, LocalBuf, ProtectionDomain, QpCaps, QueuePair, RecvList, SendRequest, Sge, SoloQueue,
    WaitMode, WcOpcode,
};
use rdmaxfer::Error;

use crate::common::verbs::{connect_qps, T};

const LEN: usize = 256;

fn addrs(bufs: &[LocalBuf]) -> Vec<usize> {
    bufs.iter().map(|b| b.as_ptr() as usize).collect()
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_receive_list_posts_every_buffer_once_or_gives_it_back() {
    let ctx = Context::open(Some("rxe0"))
        .expect("rxe0 must exist: these tests run in the rxe guest (ci/test.sh)");
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let caps = QpCaps {
        max_recv_wr: 16,
        ..QpCaps::default()
    };
    let mut q = SoloQueue::new(&ctx, 256, WaitMode::Poll, |cq| {
        QueuePair::new_rc(&pd, cq, cq, caps)
    })
    .unwrap();
    let peer_cq = rdmaxfer::verbs::CompletionQueue::new(&ctx, 256, WaitMode::Poll).unwrap();
    let peer = QueuePair::new_rc(&pd, &peer_cq, &peer_cq, QpCaps::default()).unwrap();
    connect_qps(&ctx, q.qp(), &peer);
    let mut l = RecvList::default();

    // A buffer of another device fails the whole list: nothing posted, all given back in order.
    let other = Context::open(Some("rxe1")).expect("rxe1 (the guest's second rail)");
    let other_pd = ProtectionDomain::new(&other).unwrap();
    let mut bufs: Vec<LocalBuf> = (0..3).map(|_| LocalBuf::new(&pd, LEN).unwrap()).collect();
    bufs.insert(1, LocalBuf::new(&other_pd, LEN).unwrap());
    let want = addrs(&bufs);
    let e = q.post_recv_list(&mut l, 7, &mut bufs).unwrap_err();
    assert!(
        matches!(e.error, Error::ContextMismatch { .. }),
        "{}",
        e.error
    );
    assert_eq!(e.posted, 0);
    let back: Vec<usize> = e
        .unposted
        .iter()
        .map(|(id, b)| {
            assert_eq!(*id, 7);
            b[0].as_slice().as_ptr() as usize
        })
        .collect();
    assert_eq!(back, want, "every buffer back, in order");
    assert!(bufs.is_empty());

    // A good list: one message into each buffer, each buffer back in exactly one completion.
    const N: usize = 8;
    let mut bufs: Vec<LocalBuf> = (0..N).map(|_| LocalBuf::new(&pd, LEN).unwrap()).collect();
    let posted: BTreeSet<usize> = addrs(&bufs).into_iter().collect();
    assert_eq!(q.post_recv_list(&mut l, 9, &mut bufs).unwrap(), N);
    assert!(bufs.is_empty(), "the buffers moved into the queue");
    for i in 0..N {
        let mut b = LocalBuf::new(&pd, LEN).unwrap();
        b.fill(i as u8 + 1);
        peer.post_send(SendRequest::send(i as u64, [Sge::new(b)]))
            .unwrap();
    }
    let mut got = BTreeSet::new();
    let mut firsts = Vec::new();
    let t0 = Instant::now();
    while got.len() < N {
        assert!(
            t0.elapsed() < T,
            "only {} of {N} receives completed",
            got.len()
        );
        if let Some(c) = q.poll_one().unwrap() {
            let c = c.result().unwrap();
            assert_eq!(
                (c.wr_id, c.opcode, c.byte_len),
                (9, WcOpcode::Recv, LEN as u32)
            );
            let b = c.into_local_bufs().pop().expect("the receive's buffer");
            firsts.push(b[0]);
            assert!(got.insert(b.as_ptr() as usize), "a buffer came back twice");
        }
        // The peer's send completions are not this test's.
        let _ = peer_cq.poll(16).unwrap();
    }
    assert_eq!(got, posted, "every posted buffer back");
    assert_eq!(firsts, (1..=N as u8).collect::<Vec<_>>(), "in order");

    // Longer than the receive queue: what fits is posted, the rest comes back in order.
    let n = q.qp().caps().max_recv_wr as usize * 8 + 5;
    let mut bufs: Vec<LocalBuf> = (0..n).map(|_| LocalBuf::new(&pd, LEN).unwrap()).collect();
    let want = addrs(&bufs);
    let e = q.post_recv_list(&mut l, 11, &mut bufs).unwrap_err();
    assert!(e.posted >= 1 && e.posted < n, "posted {} of {n}", e.posted);
    let back: Vec<usize> = e
        .unposted
        .iter()
        .map(|(_, b)| b[0].as_slice().as_ptr() as usize)
        .collect();
    assert_eq!(back, want[e.posted..], "the tail, in order");
}
