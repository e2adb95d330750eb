//! Device tests for the verbs layer: two QPs on one device (rxe0), one process.
//! They need rxe0, so they are `#[ignore]`d on the host; ci/test.sh runs them in the guest with
//! `--ignored`, where a missing device makes them fail, never pass.

use std::process::Command;
use std::time::{Duration, Instant};

use rdmaxfer::verbs::{
    CompletionQueue, Context, ExposedRegion, InitAttr, LocalBuf, ProtectionDomain, QpCaps, QpState,
    QueuePair, RemoteAccess, RemoteRegion, SendOp, SendRequest, Sge, WaitMode, WcOpcode,
};
use rdmaxfer::xfer::loopback::{self, LoopbackOptions, LoopbackPair};
use rdmaxfer::Error;

const T: Duration = Duration::from_secs(10);
const SIZES: &[usize] = &[1, 4096, 65536, 1 << 20, 8 << 20];

fn opts(mode: WaitMode) -> LoopbackOptions {
    LoopbackOptions {
        device: Some("rxe0".into()),
        mode,
        ..Default::default()
    }
}

fn pair() -> LoopbackPair {
    LoopbackPair::new(&opts(WaitMode::Poll))
        .expect("rxe0 must exist: these tests run in the rxe guest (ci/test.sh)")
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 7 + i / 251) as u8).wrapping_add(seed))
        .collect()
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
    let p = pair();
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
    let p = pair();
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
    let p = pair();
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
    let p = pair();
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
    let p = pair();
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
    let p = pair();
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
    let p = pair();
    let region = ExposedRegion::new(&p.pd, 4096 * 8, RemoteAccess::Write).unwrap();
    for i in 0..8u64 {
        let remote = region.descriptor().slice(i * 4096, 4096).unwrap();
        let mut req = SendRequest::new(
            i,
            SendOp::Write(remote),
            [Sge::new(filled(&p.pd, &pattern(4096, i as u8)))],
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
        assert_eq!(got, pattern(4096, i as u8));
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn wrong_rkey_is_a_remote_access_error() {
    let p = pair();
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
    // Reading a write-only exposure is refused by the peer the same way.
    let p = pair();
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
    let p = pair();
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
    let p = pair();
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
    let p = pair();
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
        let p = LoopbackPair::new(&opts(mode)).unwrap();
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
    let p = LoopbackPair::new(&opts(WaitMode::Event)).unwrap();
    for i in 0..50u64 {
        p.b.post_recv(i, [Sge::new(LocalBuf::new(&p.pd, 64).unwrap())])
            .unwrap();
        p.a.post_send(SendRequest::send(
            i,
            [Sge::new(filled(&p.pd, &pattern(64, i as u8)))],
        ))
        .unwrap();
        one(&p.cq_a).result().unwrap();
        let rc = one(&p.cq_b).result().unwrap();
        assert_eq!(rc.wr_id, i);
        assert_eq!(rc.into_local_bufs()[0][..], pattern(64, i as u8)[..]);
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
    let r = loopback::round_trip(&opts(WaitMode::Poll), 3 << 20).unwrap();
    assert_eq!(r.bytes, 3 << 20);
    assert_eq!(r.written_hash, r.read_hash);
    assert_eq!(r.device, "rxe0");
}

/// `rdma resource show` counts for rxe0: (pd, cq, qp, mr).
fn resources() -> (u64, u64, u64, u64) {
    let out = Command::new("rdma")
        .args(["resource", "show"])
        .output()
        .expect("run `rdma resource show`");
    assert!(out.status.success(), "rdma resource show failed");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("rxe0"))
        .unwrap_or_else(|| panic!("no rxe0 in:\n{text}"));
    let field = |name: &str| -> u64 {
        let mut it = line.split_whitespace();
        while let Some(w) = it.next() {
            if w == name {
                return it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("bad {name} in {line}"));
            }
        }
        panic!("no {name} in {line}")
    };
    (field("pd"), field("cq"), field("qp"), field("mr"))
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn thousand_create_destroy_cycles_leave_nothing_behind() {
    let before = resources();
    {
        let p = pair();
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
