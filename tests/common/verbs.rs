//! Verbs-level set-up shared by the device tests of queues and post lists.

use std::time::Duration;

use rdmaxfer::verbs::{Context, InitAttr, Mtu, QpCaps, QueuePair, RtrAttr, RtsAttr, WaitMode};
use rdmaxfer::xfer::loopback::{LoopbackOptions, LoopbackPair};

/// How long a test waits for one completion.
pub const T: Duration = Duration::from_secs(10);
/// `IBV_WC_REM_ACCESS_ERR`.
pub const REM_ACCESS_ERR: u32 = 10;
/// `IBV_WC_WR_FLUSH_ERR`.
pub const WR_FLUSH_ERR: u32 = 5;

/// A loopback QP pair on rxe0 with the default capacities, its completions waited for in `mode`.
pub fn loopback(mode: WaitMode) -> LoopbackPair {
    LoopbackPair::new(
        &LoopbackOptions::default()
            .device(Some("rxe0".into()))
            .mode(mode),
    )
    .expect("rxe0 must exist: these tests run in the rxe guest (ci/test.sh)")
}

/// A busy-polled loopback QP pair on rxe0 with `send_depth` send slots and 16 receives a side.
pub fn loopback_pair(send_depth: u32) -> LoopbackPair {
    let opts = LoopbackOptions::default()
        .device(Some("rxe0".into()))
        .mode(WaitMode::Poll)
        .caps(QpCaps {
            max_send_wr: send_depth,
            max_recv_wr: 16,
            ..QpCaps::default()
        });
    LoopbackPair::new(&opts)
        .expect("rxe0 must exist: these tests run in the rxe guest (ci/test.sh)")
}

/// Connects `a` and `b` to each other (RESET → INIT → RTR → RTS) on `ctx`'s first active port.
pub fn connect_qps(ctx: &Context, a: &QueuePair, b: &QueuePair) {
    let port = ctx.first_active_port().unwrap();
    let gid = ctx.choose_gid(port.port, None).unwrap();
    let init = InitAttr {
        port: port.port,
        remote_read: true,
        remote_write: true,
    };
    let mtu = port.active_mtu.unwrap_or(Mtu::M1024);
    let sgid = u8::try_from(gid.index).unwrap();
    for (qp, peer, rq, sq) in [(a, b, 7, 5), (b, a, 5, 7)] {
        qp.to_init(&init).unwrap();
        let rtr = RtrAttr::new(peer.qp_num(), rq, mtu, gid.gid, sgid, port.port);
        qp.to_rtr(&rtr).unwrap();
        qp.to_rts(&RtsAttr::new(sq)).unwrap();
    }
}
