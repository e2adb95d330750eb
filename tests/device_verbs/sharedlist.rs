//! Device tests for lean post lists of one shared source ([`QueuePair::post_shared_list`]): the
//! table keeps one clone of the source per signaled work request and per list end, and every
//! clone comes back exactly once (a completion, a `retired` list, an error or a flush), so the
//! source is whole again ([`SharedBuf::try_unfreeze`]) once the queue is done with it. They need
//! rxe0, so they are `#[ignore]`d on the host; ci/test.sh runs them in the guest.

use std::time::Instant;

use rdmaxfer::verbs::{
    Buf, Completion, ExposedRegion, LocalBuf, QueuePair, RemoteAccess, RemoteRegion, SendOp,
    SendRequest, Sge, SharedBuf, SharedList, SharedPost,
};
use rdmaxfer::xfer::loopback::LoopbackPair;

use crate::common::pattern;
use crate::common::verbs::{loopback_pair, REM_ACCESS_ERR, T, WR_FLUSH_ERR};

const LEN: usize = 4096;

fn source(p: &LoopbackPair) -> SharedBuf {
    let mut b = LocalBuf::new(&p.pd, LEN).unwrap();
    b.copy_from_slice(&pattern(LEN, 3));
    b.freeze()
}

/// A list of `n` WRITEs of all of `src` to `first` (the first WR) and `rest` (the others),
/// signaled where `sig` says; entries get the caller ids `base + i`.
fn post(
    qp: &QueuePair,
    l: &mut SharedList,
    src: &SharedBuf,
    n: usize,
    (first, rest): (&RemoteRegion, &RemoteRegion),
    base: u64,
    sig: impl FnMut(usize) -> bool,
) -> Result<usize, rdmaxfer::verbs::PostListError> {
    let p = SharedPost {
        src,
        off: 0,
        len: LEN,
        n,
        first: SendOp::Write(first.slice(0, LEN as u64).unwrap()),
        rest: SendOp::Write(rest.slice(0, LEN as u64).unwrap()),
    };
    qp.post_shared_list(l, &p, sig, |i, _| base + i as u64)
}

/// The source's clones a completion hands back (its own and those it retired), by caller id.
fn clones(c: &Completion, ids: &mut Vec<u64>) {
    for r in &c.retired {
        assert!(matches!(r.bufs.as_slice(), [Buf::Shared(_)]), "{r:?}");
        ids.push(r.wr_id);
    }
    assert!(matches!(c.bufs.as_slice(), [Buf::Shared(_)]), "{c:?}");
    ids.push(c.wr_id);
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_shared_list_lands_with_few_completions_and_the_source_comes_back_whole() {
    const N: usize = 10;
    let p = loopback_pair(64);
    let region = ExposedRegion::new(&p.pd, LEN, RemoteAccess::Write).unwrap();
    let d = region.descriptor();
    let src = source(&p);
    let mut l = SharedList::with_capacity(N);
    // Every fourth signaled (3 and 7); the list's last (9) unsignaled but entered.
    let k = post(&p.a, &mut l, &src, N, (&d, &d), 100, |i| i % 4 == 3).unwrap();
    assert_eq!(k, N);
    assert!(l.is_empty(), "the scratch is empty after a post");
    // A second list, its only WR signaled, retires the first's end.
    post(&p.a, &mut l, &src, 1, (&d, &d), 200, |_| true).unwrap();
    let mut ids = Vec::new();
    let t0 = Instant::now();
    while ids.len() < 4 {
        assert!(t0.elapsed() < T, "only {ids:?} came back");
        for c in p.cq_a.wait(16, T).unwrap() {
            let c = c.result().unwrap();
            assert!(
                [103, 107, 200].contains(&c.wr_id),
                "only signaled WRs complete: {c:?}"
            );
            clones(&c, &mut ids);
        }
    }
    assert_eq!(
        ids,
        vec![103, 107, 109, 200],
        "one clone per entry, each once"
    );
    let mut got = vec![0u8; LEN];
    region.read_at(0, &mut got).unwrap();
    assert_eq!(got, src.to_vec());
    assert!(p.cq_a.poll(4).unwrap().is_empty(), "nothing else completes");
    assert!(
        src.try_unfreeze().is_ok(),
        "the queue holds no clone any more"
    );
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn an_error_in_the_middle_returns_every_clone_exactly_once() {
    // List A: 4 good WRITEs, none signaled (its last entered); list B: 4 WRITEs, the first to a
    // wrong rkey (REM_ACCESS_ERR), the rest flushed. With B's first signaled its error is its
    // entry's; without, it completes with wr_id 0 (no entry) and B's last entry is flushed.
    for first_signaled in [true, false] {
        let p = loopback_pair(64);
        let region = ExposedRegion::new(&p.pd, LEN, RemoteAccess::Write).unwrap();
        let d = region.descriptor();
        let wrong = RemoteRegion {
            rkey: d.rkey ^ 0x5a5a00,
            ..d
        };
        let src = source(&p);
        let mut l = SharedList::default();
        assert_eq!(
            post(&p.a, &mut l, &src, 4, (&d, &d), 0, |_| false).unwrap(),
            4
        );
        let k = post(&p.a, &mut l, &src, 4, (&wrong, &d), 4, |i| {
            i == 0 && first_signaled
        })
        .unwrap();
        assert_eq!(k, 4);
        let want: Vec<u64> = if first_signaled {
            vec![3, 4, 7]
        } else {
            vec![3, 7]
        };
        let mut ids = Vec::new();
        let mut statuses = Vec::new();
        let t0 = Instant::now();
        while ids.len() < want.len() {
            assert!(t0.elapsed() < T, "only {ids:?} of {want:?} came back");
            for c in p.cq_a.wait(16, T).unwrap() {
                statuses.push((c.wr_id, c.status));
                clones(&c, &mut ids);
            }
        }
        assert_eq!(ids, want, "every entry's clone back exactly once");
        let failing = if first_signaled {
            vec![(4, REM_ACCESS_ERR), (7, WR_FLUSH_ERR)]
        } else {
            vec![(7, WR_FLUSH_ERR)]
        };
        assert_eq!(statuses, failing);
        assert!(p.cq_a.poll(4).unwrap().is_empty(), "nothing else completes");
        assert!(
            src.try_unfreeze().is_ok(),
            "the queue holds no clone any more"
        );
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_shared_list_longer_than_the_send_queue_keeps_its_source_until_retired() {
    let p = loopback_pair(16);
    // The device may round the queue up: 8 times the depth asked for cannot fit.
    let n = p.a.caps().max_send_wr as usize * 8 + 5;
    let region = ExposedRegion::new(&p.pd, LEN, RemoteAccess::Write).unwrap();
    let d = region.descriptor();
    let src = source(&p);
    let mut l = SharedList::default();
    let e = post(&p.a, &mut l, &src, n, (&d, &d), 0, |i| i % 4 == 3).unwrap_err();
    // At least one signaled WR posted (one in four), so a completion comes.
    assert!(e.posted >= 4 && e.posted < n, "posted {} of {n}", e.posted);
    assert!(
        e.unposted.is_empty(),
        "a shared source has nothing to give back"
    );
    assert!(l.is_empty());
    // The posted part completes; one more signaled WRITE (a buffer of its own) retires the
    // entries left after them, those of the WRs never posted included.
    let mut more = Some(SendRequest::new(
        1 << 20,
        SendOp::Write(d.slice(0, LEN as u64).unwrap()),
        [Sge::new(LocalBuf::new(&p.pd, LEN).unwrap())],
    ));
    let mut src = Some(src);
    let t0 = Instant::now();
    loop {
        assert!(t0.elapsed() < T, "the source never came back whole");
        for c in p.cq_a.wait(16, T).unwrap() {
            let c = c.result().unwrap();
            if c.wr_id == 1 << 20 {
                assert!(!c.retired.is_empty(), "the list's tail is retired with it");
            }
        }
        if let Some(wr) = more.take() {
            // Room again: a completion came.
            p.a.post_send(wr).unwrap();
            continue;
        }
        match src.take().unwrap().try_unfreeze() {
            Ok(_) => break,
            Err(s) => src = Some(s),
        }
    }
}
