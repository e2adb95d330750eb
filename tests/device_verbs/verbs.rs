//! Device tests for the verbs layer: two QPs on one device (rxe0), one process.
//! They need rxe0, so they are `#[ignore]`d on the host; ci/test.sh runs them in the guest with
//! `--ignored`, where a missing device makes them fail, never pass.

use std::time::{Duration, Instant};

use rdmaxfer::cm::CmId;
use rdmaxfer::verbs::{
    Buf, BufRequest, CompletionQueue, Context, ExposedRegion, InitAttr, LocalBuf, PostError,
    ProtectionDomain, QpCaps, QpState, QueuePair, RemoteAccess, RemoteRegion, SendOp, SendRequest,
    Sge, WaitMode, WcOpcode,
};
use rdmaxfer::xfer::loopback::{round_trip, LoopbackOptions};
use rdmaxfer::Error;

use crate::common::verbs::loopback;
use crate::common::{self, pattern};

const T: Duration = Duration::from_secs(10);
const SIZES: &[usize] = &[1, 4096, 65536, 1 << 20, 8 << 20];

fn opts(mode: WaitMode) -> LoopbackOptions {
    LoopbackOptions::default()
        .device(Some("rxe0".into()))
        .mode(mode)
}

fn filled(pd: &ProtectionDomain, data: &[u8]) -> LocalBuf {
    let mut b = LocalBuf::new(pd, data.len()).unwrap();
    b.copy_from_slice(data);
    b
}

fn one(cq: &CompletionQueue) -> rdmaxfer::verbs::Completion {
    let mut v = cq.wait(1, T).unwrap();
    assert_eq!(v.len(), 1);
    v.remove(0)
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn send_recv_all_sizes() {
    let p = loopback(WaitMode::Poll);
    for &len in SIZES {
        p.b.post_recv(1, [Sge::new(LocalBuf::new(&p.pd, len).unwrap())])
            .unwrap();
        let data = pattern(len, 3);
        p.a.post_send(SendRequest::send(2, [Sge::new(filled(&p.pd, &data))]))
            .unwrap();
        let sc = one(&p.cq_a).result().unwrap();
        assert_eq!((sc.wr_id, sc.opcode), (2, WcOpcode::Send));
        let rc = one(&p.cq_b).result().unwrap();
        assert_eq!(
            (rc.wr_id, rc.opcode, rc.byte_len as usize, rc.imm),
            (1, WcOpcode::Recv, len, None)
        );
        assert!(
            rc.into_local_bufs()[0][..] == data[..],
            "SEND payload of {len} bytes differs"
        );
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn send_with_imm_delivers_immediate() {
    let p = loopback(WaitMode::Poll);
    for &len in &[1usize, 4096, 1 << 20] {
        p.b.post_recv(9, [Sge::new(LocalBuf::new(&p.pd, len).unwrap())])
            .unwrap();
        let data = pattern(len, 5);
        p.a.post_send(SendRequest::new(
            3,
            SendOp::SendWithImm(0xC0FFEE00 | len as u32 & 0xff),
            [Sge::new(filled(&p.pd, &data))],
        ))
        .unwrap();
        one(&p.cq_a).result().unwrap();
        let rc = one(&p.cq_b).result().unwrap();
        assert_eq!(rc.imm, Some(0xC0FFEE00 | len as u32 & 0xff));
        assert_eq!(rc.byte_len as usize, len);
        assert!(rc.into_local_bufs()[0][..] == data[..]);
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn rdma_write_all_sizes() {
    let p = loopback(WaitMode::Poll);
    for &len in SIZES {
        let region = ExposedRegion::new(&p.pd, len + 16, RemoteAccess::Write).unwrap();
        let remote = region.descriptor().slice(16, len as u64).unwrap();
        let data = pattern(len, 11);
        p.a.post_send(SendRequest::new(
            4,
            SendOp::Write(remote),
            [Sge::new(filled(&p.pd, &data))],
        ))
        .unwrap();
        let c = one(&p.cq_a).result().unwrap();
        assert_eq!(c.opcode, WcOpcode::RdmaWrite);
        let mut got = vec![0u8; len];
        region.read_at(16, &mut got).unwrap();
        assert!(got == data, "RDMA WRITE of {len} bytes differs");
        let mut head = [1u8; 16];
        region.read_at(0, &mut head).unwrap();
        assert_eq!(head, [0u8; 16], "bytes before the slice must be untouched");
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn rdma_write_with_imm_consumes_a_receive() {
    let p = loopback(WaitMode::Poll);
    let len = 1 << 20;
    let region = ExposedRegion::new(&p.pd, len, RemoteAccess::Write).unwrap();
    let remote = region.descriptor().slice(0, len as u64).unwrap();
    p.b.post_recv(77, [Sge::new(LocalBuf::new(&p.pd, 0).unwrap())])
        .unwrap();
    let data = pattern(len, 13);
    p.a.post_send(SendRequest::new(
        5,
        SendOp::WriteWithImm(remote, 42),
        [Sge::new(filled(&p.pd, &data))],
    ))
    .unwrap();
    one(&p.cq_a).result().unwrap();
    let rc = one(&p.cq_b).result().unwrap();
    assert_eq!(
        (rc.wr_id, rc.opcode, rc.imm),
        (77, WcOpcode::RecvRdmaWithImm, Some(42))
    );
    assert_eq!(rc.byte_len as usize, len);
    assert!(region.to_vec() == data);
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn rdma_read_all_sizes() {
    let p = loopback(WaitMode::Poll);
    for &len in SIZES {
        let mut region = ExposedRegion::new(&p.pd, len, RemoteAccess::Read).unwrap();
        let data = pattern(len, 17);
        region.write_at(0, &data).unwrap();
        let remote = region.descriptor().slice(0, len as u64).unwrap();
        p.a.post_send(SendRequest::new(
            6,
            SendOp::Read(remote),
            [Sge::new(LocalBuf::new(&p.pd, len).unwrap())],
        ))
        .unwrap();
        let c = one(&p.cq_a).result().unwrap();
        assert_eq!(c.opcode, WcOpcode::RdmaRead);
        assert!(
            c.into_local_bufs()[0][..] == data[..],
            "RDMA READ of {len} bytes differs"
        );
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn multi_sge_send_and_write() {
    let p = loopback(WaitMode::Poll);
    let parts = [pattern(100, 1), pattern(4000, 2), pattern(3, 3)];
    let whole: Vec<u8> = parts.concat();
    // Receive scattered into two buffers of 2000 + 2103 bytes.
    let r1 = LocalBuf::new(&p.pd, 2000).unwrap();
    let r2 = LocalBuf::new(&p.pd, 2103).unwrap();
    p.b.post_recv(1, [Sge::new(r1), Sge::new(r2)]).unwrap();
    let sges: Vec<Sge> = parts.iter().map(|d| Sge::new(filled(&p.pd, d))).collect();
    p.a.post_send(SendRequest::send(2, sges)).unwrap();
    let sc = one(&p.cq_a).result().unwrap();
    assert_eq!(sc.bufs.len(), 3, "all three source buffers come back");
    let rc = one(&p.cq_b).result().unwrap();
    assert_eq!(rc.byte_len as usize, whole.len());
    let got: Vec<u8> = rc
        .into_local_bufs()
        .iter()
        .flat_map(|b| b.to_vec())
        .collect();
    assert_eq!(got, whole);

    // A gather-WRITE from two ranges of one frozen buffer into the peer's region.
    let src = filled(&p.pd, &whole).freeze();
    let region = ExposedRegion::new(&p.pd, 200, RemoteAccess::Write).unwrap();
    let remote = region.descriptor().slice(0, 200).unwrap();
    p.a.post_send(SendRequest::new(
        3,
        SendOp::Write(remote),
        [
            Sge::range(src.clone(), 0, 100),
            Sge::range(src.clone(), 1000, 100),
        ],
    ))
    .unwrap();
    one(&p.cq_a).result().unwrap();
    let mut expect = whole[..100].to_vec();
    expect.extend_from_slice(&whole[1000..1100]);
    assert_eq!(region.to_vec(), expect);
    assert!(
        src.try_unfreeze().is_ok(),
        "completion gave every clone back"
    );
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn selective_signalling_returns_buffers() {
    let p = loopback(WaitMode::Poll);
    let region = ExposedRegion::new(&p.pd, 4096 * 8, RemoteAccess::Write).unwrap();
    for i in 0..8u64 {
        let remote = region.descriptor().slice(i * 4096, 4096).unwrap();
        let mut req = SendRequest::new(
            i,
            SendOp::Write(remote),
            [Sge::new(filled(&p.pd, &pattern(4096, i)))],
        );
        if i < 7 {
            req = req.unsignaled();
        }
        p.a.post_send(req).unwrap();
    }
    let c = one(&p.cq_a).result().unwrap();
    assert_eq!(c.wr_id, 7);
    assert_eq!(c.bufs.len(), 1);
    let retired: Vec<u64> = c.retired.iter().map(|r| r.wr_id).collect();
    assert_eq!(
        retired,
        (0..7).collect::<Vec<_>>(),
        "the signaled completion retires the 7 unsignaled writes"
    );
    assert_eq!(
        c.into_all_local_bufs().len(),
        8,
        "and gives all 8 buffers back"
    );
    for i in 0..8 {
        let mut got = vec![0u8; 4096];
        region.read_at(i * 4096, &mut got).unwrap();
        assert_eq!(got, pattern(4096, i as u64));
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn wrong_rkey_is_a_remote_access_error() {
    let p = loopback(WaitMode::Poll);
    let region = ExposedRegion::new(&p.pd, 4096, RemoteAccess::Write).unwrap();
    let d = region.descriptor();
    let bad = RemoteRegion {
        rkey: d.rkey ^ 0x5a5a00,
        ..d
    };
    let t0 = Instant::now();
    p.a.post_send(SendRequest::new(
        8,
        SendOp::Write(bad.slice(0, 4096).unwrap()),
        [Sge::new(LocalBuf::new(&p.pd, 4096).unwrap())],
    ))
    .unwrap();
    let c = one(&p.cq_a);
    assert!(t0.elapsed() < T);
    assert!(!c.is_success());
    match c.result() {
        Err(Error::Completion {
            op,
            wr_id,
            status,
            status_str,
            ..
        }) => {
            assert_eq!((op, wr_id), ("RDMA WRITE", 8));
            assert_eq!(status, 10, "IBV_WC_REM_ACCESS_ERR, got {status_str}");
            assert_eq!(status_str, "remote access error");
        }
        other => panic!("expected a completion error, got {other:?}"),
    }
    // The device moved the QP to ERR by itself: the cached state still says RTS until asked.
    assert_eq!(p.a.state(), QpState::Rts);
    assert_eq!(p.a.query_state().unwrap(), QpState::Error);
    assert_eq!(p.a.state(), QpState::Error);
    // Reading a write-only exposure is refused by the peer the same way.
    let p = loopback(WaitMode::Poll);
    let wo = ExposedRegion::new(&p.pd, 64, RemoteAccess::Write).unwrap();
    let s = wo.descriptor().slice(0, 64).unwrap();
    p.a.post_send(SendRequest::new(
        9,
        SendOp::Read(s),
        [Sge::new(LocalBuf::new(&p.pd, 64).unwrap())],
    ))
    .unwrap();
    assert_eq!(one(&p.cq_a).result().unwrap_err().wc_status(), Some(10));
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn revoked_exposure_fails_remotely() {
    let p = loopback(WaitMode::Poll);
    let mut region = ExposedRegion::new(&p.pd, 4096, RemoteAccess::ReadWrite).unwrap();
    region.write_at(0, b"before").unwrap();
    let s = region.descriptor().slice(0, 6).unwrap();
    let last = region.revoke().unwrap();
    assert_eq!(&last[..6], b"before");
    p.a.post_send(SendRequest::new(
        1,
        SendOp::Write(s),
        [Sge::range(filled(&p.pd, b"after!"), 0, 6)],
    ))
    .unwrap();
    assert_eq!(one(&p.cq_a).result().unwrap_err().wc_status(), Some(10));
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn posting_outside_rts_is_refused() {
    let ctx = Context::open(Some("rxe0")).unwrap();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let cq = CompletionQueue::new(&ctx, 16, WaitMode::Poll).unwrap();
    let qp = QueuePair::new_rc(&pd, &cq, &cq, QpCaps::default()).unwrap();
    assert_eq!(qp.state(), QpState::Reset);
    let e = qp
        .post_send(SendRequest::send(
            1,
            [Sge::new(LocalBuf::new(&pd, 8).unwrap())],
        ))
        .unwrap_err();
    assert!(
        matches!(
            e.error,
            Error::InvalidState {
                state: "RESET",
                needs: "RTS",
                ..
            }
        ),
        "{}",
        e.error
    );
    assert_eq!(e.bufs.len(), 1, "the buffer comes back with the error");
    assert!(qp
        .post_recv(1, [Sge::new(LocalBuf::new(&pd, 8).unwrap())])
        .is_err());
    qp.to_init(&InitAttr {
        port: 1,
        remote_read: false,
        remote_write: false,
    })
    .unwrap();
    qp.post_recv(2, [Sge::new(LocalBuf::new(&pd, 8).unwrap())])
        .expect("receives may be posted in INIT");
    let e = qp
        .post_send(SendRequest::send(
            3,
            [Sge::new(LocalBuf::new(&pd, 8).unwrap())],
        ))
        .unwrap_err();
    assert!(matches!(e.error, Error::InvalidState { state: "INIT", .. }));
    // A skipped transition is refused and names it.
    let e = qp.to_rts(&rdmaxfer::verbs::RtsAttr::new(0)).unwrap_err();
    assert!(e.to_string().contains("RTR->RTS"), "{e}");

    // A connected QP moved to ERR refuses sends; its posted receive is flushed back.
    let p = loopback(WaitMode::Poll);
    p.b.post_recv(5, [Sge::new(LocalBuf::new(&p.pd, 8).unwrap())])
        .unwrap();
    p.b.to_error().unwrap();
    let e =
        p.b.post_send(SendRequest::send(
            1,
            [Sge::new(LocalBuf::new(&p.pd, 8).unwrap())],
        ))
        .unwrap_err();
    assert!(matches!(e.error, Error::InvalidState { state: "ERR", .. }));
    let flushed = one(&p.cq_b);
    assert_eq!(
        (flushed.wr_id, flushed.status, flushed.op()),
        (5, 5, "RECV"),
        "IBV_WC_WR_FLUSH_ERR"
    );
    assert_eq!(flushed.into_local_bufs().len(), 1);
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn oversized_and_bad_sges_are_refused_locally() {
    let p = loopback(WaitMode::Poll);
    let big = LocalBuf::new(&p.pd, (8 << 20) + 1).unwrap();
    let e =
        p.a.post_send(SendRequest::send(1, [Sge::new(big)]))
            .unwrap_err();
    assert!(
        e.error.to_string().contains("max message size"),
        "{}",
        e.error
    );
    let e =
        p.a.post_send(SendRequest::send(
            1,
            [Sge::range(LocalBuf::new(&p.pd, 10).unwrap(), 5, 6)],
        ))
        .unwrap_err();
    assert!(matches!(e.error, Error::InvalidArgument(_)));
    let region = ExposedRegion::new(&p.pd, 64, RemoteAccess::ReadWrite).unwrap();
    let s = region.descriptor().slice(0, 64).unwrap();
    let shared = LocalBuf::new(&p.pd, 64).unwrap().freeze();
    let e =
        p.a.post_send(SendRequest::new(1, SendOp::Read(s), [Sge::new(shared)]))
            .unwrap_err();
    assert!(e.error.to_string().contains("shared"), "{}", e.error);
    assert!(matches!(
        region.descriptor().slice(60, 5),
        Err(Error::OutOfBounds { .. })
    ));
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn empty_cq_wait_times_out_in_both_modes() {
    for mode in [WaitMode::Poll, WaitMode::Event] {
        let p = loopback(mode);
        let t0 = Instant::now();
        let e = p.cq_a.wait(1, Duration::from_millis(300)).unwrap_err();
        let took = t0.elapsed();
        assert!(e.is_timeout(), "{mode:?}: {e}");
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(3),
            "{mode:?}: {took:?}"
        );
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn event_mode_wakes_on_completion() {
    let p = loopback(WaitMode::Event);
    for i in 0..50u64 {
        p.b.post_recv(i, [Sge::new(LocalBuf::new(&p.pd, 64).unwrap())])
            .unwrap();
        p.a.post_send(SendRequest::send(
            i,
            [Sge::new(filled(&p.pd, &pattern(64, i)))],
        ))
        .unwrap();
        one(&p.cq_a).result().unwrap();
        let rc = one(&p.cq_b).result().unwrap();
        assert_eq!(rc.wr_id, i);
        assert_eq!(rc.into_local_bufs()[0][..], pattern(64, i)[..]);
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn unknown_device_is_a_clear_error() {
    let e = Context::open(Some("mlx5_99")).unwrap_err();
    match &e {
        Error::DeviceNotFound { name, available } => {
            assert_eq!(name, "mlx5_99");
            assert!(available.iter().any(|d| d == "rxe0"), "{available:?}");
        }
        other => panic!("expected DeviceNotFound, got {other}"),
    }
    assert!(e.to_string().contains("rxe0"));
    let ctx = Context::open(Some("rxe0")).unwrap();
    assert!(
        ctx.choose_gid(1, Some(200)).is_err(),
        "unpopulated GID index is refused"
    );
    assert_eq!(
        ctx.choose_gid(1, None).unwrap().index,
        1,
        "the IPv4-mapped RoCE v2 GID is index 1 on rxe0"
    );
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn loopback_round_trip_verifies() {
    let r = round_trip(&opts(WaitMode::Poll), 3 << 20).unwrap();
    assert_eq!(r.bytes, 3 << 20);
    assert_eq!(r.written_hash, r.read_hash);
    assert_eq!(r.device, "rxe0");
}

/// Counts of this thread's objects (`rdma resource show KIND`, by creating thread): (pd, cq,
/// qp, mr). Objects of other processes (tests in another lane) do not count.
fn resources() -> (u64, u64, u64, u64) {
    let me = [common::tid()];
    let n = |kind: &str| common::our_resources(kind, &me).len() as u64;
    (n("pd"), n("cq"), n("qp"), n("mr"))
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn thousand_create_destroy_cycles_leave_nothing_behind() {
    let before = resources();
    {
        let p = loopback(WaitMode::Poll);
        let _mr = LocalBuf::new(&p.pd, 4096).unwrap();
        let during = resources();
        assert!(
            during.0 > before.0
                && during.1 >= before.1 + 2
                && during.2 >= before.2 + 2
                && during.3 > before.3,
            "live objects must show up: before {before:?} during {during:?}"
        );
    }
    assert_eq!(resources(), before, "after one pair");
    let ctx = Context::open(Some("rxe0")).unwrap();
    for i in 0..1000 {
        let pd = ProtectionDomain::new(&ctx).unwrap();
        let mut bufs = LocalBuf::slots(&pd, 4096, 2).unwrap();
        let cq = CompletionQueue::new(
            &ctx,
            8,
            if i % 2 == 0 {
                WaitMode::Poll
            } else {
                WaitMode::Event
            },
        )
        .unwrap();
        let qp = QueuePair::new_rc(&pd, &cq, &cq, QpCaps::default()).unwrap();
        qp.to_init(&InitAttr {
            port: 1,
            remote_read: true,
            remote_write: true,
        })
        .unwrap();
        // Dropped with a receive in flight: teardown must flush and free it.
        qp.post_recv(1, [Sge::new(bufs.pop().unwrap())]).unwrap();
        let _exposed = ExposedRegion::new(&pd, 4096, RemoteAccess::ReadWrite).unwrap();
    }
    drop(ctx);
    assert_eq!(resources(), before, "after 1000 cycles");
}

#[track_caller]
fn assert_too_large<T: std::fmt::Debug>(r: rdmaxfer::Result<T>, what: &str) {
    match r {
        Err(Error::TooLarge { .. }) => {}
        other => panic!("{what}: expected Error::TooLarge, got {other:?}"),
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn sizes_that_overflow_are_refused_before_allocating() {
    let ctx = Context::open(Some("rxe0")).unwrap();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let before = resources();
    let t = Instant::now();
    assert_too_large(LocalBuf::new(&pd, usize::MAX), "LocalBuf::new(usize::MAX)");
    assert_too_large(
        LocalBuf::new(&pd, (isize::MAX as usize) + 1),
        "LocalBuf::new(isize::MAX + 1)",
    );
    assert_too_large(
        LocalBuf::new(&pd, (isize::MAX as usize) - 100),
        "LocalBuf::new(isize::MAX - 100): rounds up past isize::MAX",
    );
    assert_too_large(
        ExposedRegion::new(&pd, usize::MAX, RemoteAccess::ReadWrite),
        "ExposedRegion::new(usize::MAX)",
    );
    assert_too_large(
        LocalBuf::slots(&pd, (usize::MAX / 2) + 1, 2),
        "LocalBuf::slots(usize::MAX / 2 + 1, 2)",
    );
    assert_too_large(
        LocalBuf::slots(&pd, 1 << 40, 1 << 30),
        "LocalBuf::slots(2^40, 2^30)",
    );
    // Refused by arithmetic, not by a failed allocation or registration: at once, and with no
    // memory region left behind.
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "refusals took {:?}",
        t.elapsed()
    );
    assert_eq!(resources(), before, "no registration was made");
    let mut b = LocalBuf::new(&pd, 4096).unwrap();
    b[4095] = 7;
    assert_eq!(b.len(), 4096);
    let slots = LocalBuf::slots(&pd, 4096, 3).unwrap();
    assert_eq!(slots.len(), 3);
}

fn context_mismatch_of<T: std::fmt::Debug>(r: rdmaxfer::Result<T>) -> (&'static str, &'static str) {
    match r {
        Err(Error::ContextMismatch { op, what, .. }) => (op, what),
        other => panic!("expected Error::ContextMismatch, got {other:?}"),
    }
}

#[track_caller]
fn assert_mismatch_returns(r: Result<(), PostError>, op: &str, len: usize) {
    let e = r.expect_err("a buffer of another context must be refused");
    match &e.error {
        Error::ContextMismatch { op: o, .. } => assert_eq!(*o, op),
        other => panic!("expected Error::ContextMismatch, got {other}"),
    }
    assert_eq!(e.bufs.len(), 1, "the buffer comes back");
    assert_eq!(e.bufs[0].as_slice().len(), len);
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn objects_of_another_context_are_refused() {
    let ctx1 = Context::open(Some("rxe0")).unwrap();
    let ctx2 = Context::open(Some("rxe0")).unwrap();
    assert!(!ctx1.same_as(&ctx2), "two opens are two contexts");
    assert!(ctx1.same_as(&ctx1.clone()));
    let pd1 = ProtectionDomain::new(&ctx1).unwrap();
    let pd2 = ProtectionDomain::new(&ctx2).unwrap();
    let cq1 = CompletionQueue::new(&ctx1, 16, WaitMode::Poll).unwrap();
    let cq2 = CompletionQueue::new(&ctx2, 16, WaitMode::Poll).unwrap();
    let before = resources();
    let caps = QpCaps::default();
    let (op, what) = context_mismatch_of(QueuePair::new_rc(&pd1, &cq2, &cq2, caps));
    assert_eq!((op, what), ("ibv_create_qp", "the send CQ"));
    let (_, what) = context_mismatch_of(QueuePair::new_rc(&pd1, &cq1, &cq2, caps));
    assert_eq!(what, "the receive CQ");
    let (_, what) = context_mismatch_of(QueuePair::new_rc(&pd2, &cq1, &cq2, caps));
    assert_eq!(what, "the send CQ");
    assert_eq!(resources().2, before.2, "no QP was created");

    // Posting: a connected pair on one context, buffers of another.
    let p = loopback(WaitMode::Poll);
    let ctx3 = Context::open(Some("rxe0")).unwrap();
    let pd3 = ProtectionDomain::new(&ctx3).unwrap();
    let foreign = |len| LocalBuf::new(&pd3, len).unwrap();
    assert_mismatch_returns(p.b.post_recv_buf(1, foreign(64)), "ibv_post_recv", 64);
    assert_mismatch_returns(
        p.b.post_recv(1, [Sge::new(foreign(65))]),
        "ibv_post_recv",
        65,
    );
    let own = LocalBuf::new(&p.pd, 32).unwrap();
    let e =
        p.b.post_recv(1, [Sge::new(own), Sge::new(foreign(33))])
            .expect_err("one foreign SGE is enough to refuse");
    assert!(
        matches!(e.error, Error::ContextMismatch { .. }),
        "{}",
        e.error
    );
    assert_eq!(e.bufs.len(), 2, "both buffers come back");
    assert_mismatch_returns(
        p.a.post_send_buf(BufRequest::new(2, SendOp::Send, foreign(66), 0, 66)),
        "ibv_post_send",
        66,
    );
    assert_mismatch_returns(
        p.a.post_send(SendRequest::send(2, [Sge::new(foreign(67))])),
        "ibv_post_send",
        67,
    );
    let shared = foreign(68).freeze();
    assert_mismatch_returns(
        p.a.post_send(SendRequest::send(2, [Sge::new(shared.clone())])),
        "ibv_post_send",
        68,
    );
    assert!(matches!(
        &p.a.post_send(SendRequest::send(2, [Sge::new(shared)]))
            .unwrap_err()
            .bufs[0],
        Buf::Shared(_)
    ));
    // Nothing was posted: the pair still works with its own buffers.
    p.b.post_recv_buf(3, LocalBuf::new(&p.pd, 16).unwrap())
        .unwrap();
    let data = pattern(16, 9);
    p.a.post_send(SendRequest::send(4, [Sge::new(filled(&p.pd, &data))]))
        .unwrap();
    assert_eq!(one(&p.cq_a).result().unwrap().wr_id, 4);
    let rc = one(&p.cq_b).result().unwrap();
    assert_eq!(rc.wr_id, 3);
    assert!(rc.into_local_bufs()[0][..] == data[..]);
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn cm_create_qp_refuses_cqs_of_another_context() {
    let id = CmId::new().unwrap();
    id.bind_addr(common::addr(0)).unwrap();
    let cm_ctx = id.context().unwrap();
    assert_eq!(cm_ctx.name(), "rxe0");
    let other = Context::open(Some("rxe0")).unwrap();
    assert!(!cm_ctx.same_as(&other));
    let pd = ProtectionDomain::new(&cm_ctx).unwrap();
    let own_cq = CompletionQueue::new(&cm_ctx, 16, WaitMode::Poll).unwrap();
    let other_cq = CompletionQueue::new(&other, 16, WaitMode::Poll).unwrap();
    let before = resources();
    let caps = QpCaps::default();
    let (op, what) = context_mismatch_of(id.create_qp(&pd, &other_cq, &own_cq, caps));
    assert_eq!((op, what), ("rdma_create_qp", "the send CQ"));
    let (_, what) = context_mismatch_of(id.create_qp(&pd, &own_cq, &other_cq, caps));
    assert_eq!(what, "the receive CQ");
    assert_eq!(resources().2, before.2, "no QP was created");
    // The same CQ of the id's context works, and the QP is destroyed (checked) on drop.
    let qp = id.create_qp(&pd, &own_cq, &own_cq, caps).unwrap();
    assert_eq!(qp.state(), QpState::Init);
    assert_eq!(resources().2, before.2 + 1);
    drop(qp);
    assert_eq!(resources().2, before.2, "the CM QP was destroyed");
    // The id outlives its QP: a second QP on the same id is made and destroyed again.
    let qp = id.create_qp(&pd, &own_cq, &own_cq, caps).unwrap();
    drop(qp);
    assert_eq!(resources().2, before.2);
}
