//! Single-owner and shared completion queues (docs/soundness.md): a `SoloQueue` posts and polls
//! through `&mut self` without a lock and refuses every other way into its CQ's table; a shared
//! `CompletionQueue` may be polled from several threads at once and still hands each buffer back
//! with its own completion. Needs rxe0: `#[ignore]`d on the host, run in the guest by ci/test.sh.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rdmaxfer::verbs::{
    BufRequest, CompletionQueue, Context, LocalBuf, ProtectionDomain, QpCaps, QueuePair, SendOp,
    SendRequest, Sge, SoloQueue, WaitMode, WcOpcode,
};
use rdmaxfer::Error;

use crate::common::pattern;
use crate::common::verbs::{connect_qps, loopback, T};

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn solo_queue_posts_and_polls_through_mut_and_refuses_every_shared_path() {
    let ctx = Context::open(Some("rxe0"))
        .expect("rxe0 must exist: these tests run in the rxe guest (ci/test.sh)");
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let caps = QpCaps::default();
    let mut q = SoloQueue::new(&ctx, 64, WaitMode::Poll, |cq| {
        QueuePair::new_rc(&pd, cq, cq, caps)
    })
    .unwrap();
    // A second QP on the single-owner CQ would reach its table: refused.
    let again = QueuePair::new_rc(&pd, q.cq(), q.cq(), caps);
    assert!(matches!(again, Err(Error::InvalidArgument(_))), "{again:?}");
    let peer_cq = CompletionQueue::new(&ctx, 64, WaitMode::Poll).unwrap();
    let mixed = QueuePair::new_rc(&pd, &peer_cq, q.cq(), caps);
    assert!(matches!(mixed, Err(Error::InvalidArgument(_))), "{mixed:?}");
    let peer = QueuePair::new_rc(&pd, &peer_cq, &peer_cq, caps).unwrap();
    connect_qps(&ctx, q.qp(), &peer);

    // The QP's and the CQ's own `&self` paths refuse the single-owner CQ, giving buffers back.
    let e = q
        .qp()
        .post_recv_buf(1, LocalBuf::new(&pd, 64).unwrap())
        .unwrap_err();
    assert!(matches!(e.error, Error::InvalidState { .. }), "{e}");
    assert_eq!(e.bufs.len(), 1, "the refused buffer comes back");
    let e = q.qp().post_send(SendRequest::send(1, [])).unwrap_err();
    assert!(matches!(e.error, Error::InvalidState { .. }), "{e}");
    assert!(matches!(q.cq().poll_one(), Err(Error::InvalidState { .. })));
    assert!(matches!(q.cq().wait(1, T), Err(Error::InvalidState { .. })));

    // Through the queue: a receive and a send each way, buffers back with their completions.
    for round in 0..50u64 {
        let data = pattern(256, round);
        q.post_recv_buf(100 + round, LocalBuf::new(&pd, 256).unwrap())
            .unwrap();
        let mut src = LocalBuf::new(&pd, 256).unwrap();
        src.copy_from_slice(&data);
        peer.post_send(SendRequest::send(200 + round, [Sge::new(src)]))
            .unwrap();
        let c = q.wait(1, T).unwrap().remove(0).result().unwrap();
        assert_eq!(
            (c.wr_id, c.opcode, c.byte_len),
            (100 + round, WcOpcode::Recv, 256)
        );
        let back = c.into_local_bufs().remove(0);
        assert_eq!(&back[..], &data[..], "round {round}: received payload");
        assert_eq!(peer_cq.wait(1, T).unwrap()[0].wr_id, 200 + round);

        peer.post_recv(300 + round, [Sge::new(LocalBuf::new(&pd, 256).unwrap())])
            .unwrap();
        q.post_send_buf(BufRequest::new(400 + round, SendOp::Send, back, 0, 256))
            .unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + T;
        while got.is_empty() {
            assert!(
                Instant::now() < deadline,
                "round {round}: no send completion"
            );
            q.poll_into(4, &mut got).unwrap();
        }
        let c = got.remove(0).result().unwrap();
        assert_eq!((c.wr_id, c.opcode), (400 + round, WcOpcode::Send));
        assert_eq!(&c.into_local_bufs().remove(0)[..], &data[..]);
        let r = peer_cq.wait(1, T).unwrap().remove(0).result().unwrap();
        assert_eq!(r.wr_id, 300 + round);
        assert_eq!(&r.into_local_bufs().remove(0)[..], &data[..]);
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn shared_cq_matches_completions_to_their_buffers_under_two_polling_threads() {
    const N: u64 = 600;
    const LEN: usize = 512;
    let p = loopback(WaitMode::Poll);
    let window = u64::from(p.a.caps().max_send_wr.min(p.b.caps().max_recv_wr)).min(32);
    // Each receive i gets send i (a receive queue completes in order); its buffer must come
    // back with completion i, whichever thread polls it.
    let stops = AtomicUsize::new(0);
    // Receive completions the pollers have taken.
    let polled = AtomicU64::new(0);
    let per_thread = std::thread::scope(|s| {
        let pollers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut seen = BTreeMap::new();
                    let deadline = Instant::now() + Duration::from_secs(120);
                    let mut batch = Vec::new();
                    while stops.load(Ordering::Acquire) < 2 {
                        assert!(Instant::now() < deadline, "receives did not all complete");
                        p.cq_b.poll_into(4, &mut batch).unwrap();
                        for c in batch.drain(..) {
                            let c = c.result().unwrap();
                            if c.wr_id == u64::MAX {
                                // A stop marker: both pollers stop once both markers are in.
                                stops.fetch_add(1, Ordering::AcqRel);
                                continue;
                            }
                            assert_eq!(c.byte_len as usize, LEN);
                            let id = c.wr_id;
                            let buf = c.into_local_bufs().remove(0);
                            let ok = buf[..] == pattern(LEN, id)[..];
                            assert!(seen.insert(id, ok).is_none(), "completion {id} twice");
                            polled.fetch_add(1, Ordering::Release);
                        }
                        std::thread::yield_now();
                    }
                    seen
                })
            })
            .collect();
        let mut posted = 0;
        while posted < N {
            // Completions nobody polled stay in cq_b, and a CQ that overflows breaks its QP: a
            // window waits until at most one window of them is unpolled, however the pollers
            // are scheduled.
            let deadline = Instant::now() + T;
            while posted - polled.load(Ordering::Acquire) > window {
                assert!(
                    Instant::now() < deadline,
                    "the pollers took {} of {posted} receive completions",
                    polled.load(Ordering::Acquire)
                );
                std::thread::yield_now();
            }
            let n = window.min(N - posted);
            for i in posted..posted + n {
                p.b.post_recv(i, [Sge::new(LocalBuf::new(&p.pd, LEN).unwrap())])
                    .unwrap();
                let mut src = LocalBuf::new(&p.pd, LEN).unwrap();
                src.copy_from_slice(&pattern(LEN, i));
                p.a.post_send(SendRequest::send(i, [Sge::new(src)]))
                    .unwrap();
            }
            let mut done = 0;
            while done < n {
                let got = p.cq_a.wait(16, T).unwrap_or_else(|e| {
                    panic!(
                        "{e}: {done} of sends {posted}..{} completed, the pollers took {} receive completions",
                        posted + n,
                        polled.load(Ordering::Acquire)
                    )
                });
                for c in got {
                    c.result().unwrap();
                    done += 1;
                }
            }
            posted += n;
        }
        // Two empty SENDs into receives with wr_id u64::MAX stop the pollers.
        for _ in 0..2 {
            p.b.post_recv(u64::MAX, [Sge::new(LocalBuf::new(&p.pd, LEN).unwrap())])
                .unwrap();
            p.a.post_send(SendRequest::send(N, [])).unwrap();
            p.cq_a.wait(1, T).unwrap().remove(0).result().unwrap();
        }
        pollers
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    let mut all = BTreeMap::new();
    for m in &per_thread {
        for (&i, &ok) in m {
            assert!(
                all.insert(i, ok).is_none(),
                "completion {i} handed out twice"
            );
        }
    }
    assert_eq!(all.len() as u64, N, "every receive completed once");
    let bad: Vec<_> = all
        .iter()
        .filter(|(_, ok)| !**ok)
        .map(|(i, _)| *i)
        .collect();
    assert!(
        bad.is_empty(),
        "buffers not matching their completion: {bad:?}"
    );
}
