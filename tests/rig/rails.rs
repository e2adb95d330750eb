//! A rail cut between two hosts: B sends one file striped over two streams, each on its own
//! wire (rxe0 on the first, rxe1 on the second), and B's second NIC goes down mid-file.

use crate::check::json_lines;
use crate::hosts::{show, Node, IP2_A, IP_A};
use crate::transfer::{final_and_source, recv_everywhere};
use crate::Ctx;

/// The streams a `--json` summary line names as lost: (stream, device).
fn lost(text: &str) -> Vec<(u64, String)> {
    json_lines(text)
        .iter()
        .flat_map(|j| {
            j["streams_lost"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|l| {
                    let stream = l["stream"].as_u64().unwrap_or(u64::MAX);
                    (stream, l["device"].as_str().unwrap_or("").to_string())
                })
        })
        .collect()
}

/// 64 MiB from B to A over two streams, stream 1 on the second wire (`-d rxe0,rxe1`, A's two
/// addresses). Once stream 1 moves data, B's second NIC goes down and stays down until both
/// sides are done: both exit 0 within a bound, the file arrives whole with no temporary left,
/// and both sides name stream 1 on rxe1 as lost; then the second wire works again.
pub fn rail_cut(cx: &mut Ctx) -> (bool, String) {
    let mut t = cx.begin("rail_cut");
    let p = cx.port;
    // The receiver listens on every address: A's end of both wires.
    let Some(rid) = recv_everywhere(cx, &mut t, Node::A, "--once") else {
        return t.end();
    };
    let sid = cx.rig.cmd(
        Node::B,
        &format!("mkrand f64.bin 64 && exec $BIN send $EV f64.bin {IP_A}:{p},{IP2_A}:{p} --streams 2 -d rxe0,rxe1 --json"),
    );
    // Stream 1 moves data on rxe1 (about a MiB of its 32), then its wire is cut on B's side,
    // in the same command: a second one would come a poll of each side later.
    let ok = cx
        .rig
        .run(
            Node::B,
            90,
            r#"wait_pkts rxe1 1000 80 && ip link set "$NIC2" down && echo "link $NIC2 (rxe1) down""#,
        )
        .1
        .ok();
    t.step(ok);
    let deadline = 120;
    let (src, se) = cx.rig.wait_rc(sid, deadline);
    let (rrc, _) = cx.rig.wait_rc(rid, 60);
    let ok = cx
        .rig
        .run(
            Node::B,
            30,
            r#"ip link set "$NIC2" up && echo "link $NIC2 (rxe1) up again""#,
        )
        .1
        .ok();
    t.step(ok);
    let (slog, rlog) = (cx.rig.log_of(sid), cx.rig.log_of(rid));
    show("B send", &slog);
    show("A recv", &rlog);
    t.expect(
        format!("the sender ends with 0 within {deadline}s of the cut (rc {src}, {se}s)"),
        src.ok(),
    );
    t.expect(format!("the receiver ends with 0 (rc {rrc})"), rrc.ok());
    let (hr, hs) = final_and_source(cx, &mut t, p, "f64.bin");
    t.expect("received file == sent file", !hr.is_empty() && hr == hs);
    // The guests' tmpfs holds what the later tests write (the benchmark's files).
    cx.rig.run(Node::A, 30, &format!("rm -rf out-{p}"));
    let want = [(1, "rxe1".to_string())];
    let (sl, rl) = (lost(&slog), lost(&rlog));
    t.expect(
        format!("the sender names stream 1 on rxe1 as lost ({sl:?})"),
        sl == want,
    );
    t.expect(
        format!("the receiver names stream 1 on rxe1 as lost ({rl:?})"),
        rl == want,
    );
    // The second wire carries RDMA again. Soft-RoCE (6.1) on B's rxe1 receives nothing more
    // after its port went down under a live QP (its rcvd_pkts stays still while A answers a
    // connect request; an idle flap does not do it: docs/rig.md), so rxe1 is made again first.
    let ok = cx
        .rig
        .run(
            Node::B,
            60,
            &format!(r#"rdma link delete rxe1 && rdma link add rxe1 type rxe netdev "$NIC2" && rxe_active 20 rxe1 && peer_reachable {IP2_A} 20 && echo "rxe1 made again""#),
        )
        .1
        .ok();
    t.step(ok);
    let pp = p + 500;
    let server = cx.rig.cmd(
        Node::A,
        &format!("exec $BIN pingpong $EV --listen {IP2_A} -p {pp} --count 1 -n 20"),
    );
    let ok = cx
        .rig
        .wait_log(server, "'listening on'", 30, |l| l.contains("listening on"));
    t.step(ok);
    let (client, crc) = cx.rig.run(
        Node::B,
        60,
        &format!("exec $BIN pingpong $EV {IP2_A} -p {pp} -n 20 -d rxe1"),
    );
    let (src2, _) = cx.rig.wait_rc(server, 30);
    t.expect(
        format!("a ping-pong over the second wire works again (client rc {crc}, server rc {src2})"),
        crc.ok() && src2.ok(),
    );
    if !crc.ok() {
        show("B pingpong", &cx.rig.log_of(client));
    }
    if src.ok() {
        let resent = json_lines(&slog)
            .last()
            .and_then(|j| j["bytes_resent"].as_u64())
            .unwrap_or(0);
        t.note(format!(
            "survived the cut in {se}s; {} MiB sent again",
            resent >> 20
        ));
    }
    t.end()
}
