//! Device tests (rxe0, in the guest): one-sided READ/WRITE helpers and the bandwidth engine,
//! on two QPs of one device.

use std::time::Duration;

use rdmaxfer::verbs::{ExposedRegion, RemoteAccess, RemoteRegion, WaitMode};
use rdmaxfer::xfer::bench::{run_initiator, BenchOp, BwParams};
use rdmaxfer::xfer::loopback::LoopbackPair;
use rdmaxfer::xfer::rdma_rw::{self, RawQp};
use rdmaxfer::Error;

use crate::common::verbs::loopback;

const T: Duration = Duration::from_secs(10);

fn ops(p: &LoopbackPair, max_msg: usize) -> RawQp<'_> {
    RawQp {
        qp: &p.a,
        cq: &p.cq_a,
        pd: &p.pd,
        max_msg,
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn write_then_read_3_mib_split_into_messages() {
    let p = loopback(WaitMode::Poll);
    let len = 3 << 20;
    let region = ExposedRegion::new(&p.pd, len + 100, RemoteAccess::ReadWrite).unwrap();
    let remote = region.descriptor();
    let data: Vec<u8> = (0..len).map(|i| (i * 13 % 256) as u8).collect();
    let mut o = ops(&p, 1 << 20);
    rdma_rw::write(&mut o, &remote, 100, &data, T).unwrap();
    let mut got = vec![0u8; len];
    region.read_at(100, &mut got).unwrap();
    assert!(got == data, "region holds what was written");
    assert!(
        rdma_rw::read(&mut o, &remote, 100, len as u64, T).unwrap() == data,
        "READ gives it back"
    );
    assert_eq!(
        rdma_rw::read(&mut o, &remote, 0, 100, T).unwrap(),
        vec![0u8; 100]
    );
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn out_of_bounds_is_refused_before_posting() {
    let p = loopback(WaitMode::Poll);
    let region = ExposedRegion::new(&p.pd, 4096, RemoteAccess::ReadWrite).unwrap();
    let remote = region.descriptor();
    let mut o = ops(&p, 1 << 20);
    for (off, len) in [
        (4096u64, 1u64),
        (1, 4096),
        (u64::MAX, 2),
        (4000, u64::MAX - 10),
    ] {
        assert!(
            matches!(
                rdma_rw::read(&mut o, &remote, off, len, T),
                Err(Error::OutOfBounds { .. })
            ),
            "read {off}+{len}"
        );
    }
    assert!(matches!(
        rdma_rw::write(&mut o, &remote, 4095, b"ab", T),
        Err(Error::OutOfBounds { .. })
    ));
    // A forged descriptor claiming more than was exposed passes the local check but the peer's
    // NIC refuses it: a remote access error, not memory outside the region.
    let forged = RemoteRegion {
        len: 1 << 20,
        ..remote
    };
    let e = rdma_rw::read(&mut o, &forged, 0, 1 << 16, T).unwrap_err();
    assert_eq!(e.wc_status(), Some(10), "{e}");
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn bandwidth_engine_write_and_read() {
    for mode in [WaitMode::Poll, WaitMode::Event] {
        for op in [BenchOp::Write, BenchOp::Read] {
            for (size, iters) in [(4096usize, 400u64), (1 << 20, 12)] {
                let p = loopback(mode);
                let region = ExposedRegion::new(&p.pd, size, RemoteAccess::ReadWrite).unwrap();
                let params = BwParams::new(op)
                    .size(size)
                    .iters(iters)
                    .tx_depth(32)
                    .timeout(Duration::from_secs(10))
                    .post_lists(false);
                let r = run_initiator(&mut ops(&p, 8 << 20), Some(&region.descriptor()), &params)
                    .unwrap();
                assert_eq!((r.iters, r.size), (iters, size));
                assert!(
                    r.bw_avg_mib_s > 0.0 && r.bw_peak_mib_s >= r.bw_avg_mib_s * 0.999,
                    "{r:?}"
                );
                assert!(r.seconds > 0.0 && r.cpu_seconds >= 0.0);
            }
        }
    }
}
