//! Device tests (need rxe0; run inside the guest by ci/test.sh): two QPs on one device.

use std::time::Duration;

use rdmaxfer::verbs::{LocalBuf, SendRequest, Sge, WcOpcode};
use rdmaxfer::xfer::loopback::{LoopbackOptions, LoopbackPair};

const T: Duration = Duration::from_secs(10);

fn pair() -> LoopbackPair {
    LoopbackPair::new(&LoopbackOptions { device: Some("rxe0".into()), ..Default::default() })
        .expect("rxe0 must exist: these tests run in the rxe guest (ci/test.sh)")
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn send_recv_sizes() {
    let p = pair();
    for &len in &[1usize, 64, 4096, 65536, 1 << 20] {
        let rbuf = LocalBuf::new(&p.pd, len).unwrap();
        p.b.post_recv(1, [Sge::new(rbuf)]).unwrap();
        let mut sbuf = LocalBuf::new(&p.pd, len).unwrap();
        sbuf.copy_from_slice(&pattern(len, 3));
        p.a.post_send(SendRequest::send(2, [Sge::new(sbuf)])).unwrap();
        let sc = p.cq_a.wait(1, T).unwrap().remove(0).result().unwrap();
        assert_eq!(sc.wr_id, 2);
        assert_eq!(sc.opcode, WcOpcode::Send);
        let rc = p.cq_b.wait(1, T).unwrap().remove(0).result().unwrap();
        assert_eq!(rc.opcode, WcOpcode::Recv);
        assert_eq!(rc.byte_len as usize, len);
        let got = rc.into_local_bufs().remove(0);
        assert_eq!(&got[..], &pattern(len, 3)[..], "payload of {len} bytes");
    }
}
