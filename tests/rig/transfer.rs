//! Transfers over the wire, clean and with the faults a fabric has: loss, delay and reordering,
//! a link that goes down, peers that do not match (token, GID, MTU).

use crate::check::{counter_delta, error_of, grown, json, rate, says_why, sha, Test};
use crate::hosts::{show, Cmd, Node, IP_A, IP_B};
use crate::Ctx;

/// netem's "5 ms ± 2 ms delay and reordering" (docs/rig.md): with `rate` set netem keeps its
/// queue in order (the jitter stays, the overtaking goes), and "reorder 25% 50%" sends a quarter
/// of the packets at once, ahead of the 5 ms queue: real reordering that RC retransmission must
/// repair. Jitter alone reorders nearly every packet, and go-back-N RC then barely moves. The
/// rate (1 Gbit/s) is far above what the TCG guests move (~10 MB/s), so it never limits.
pub const REORDER_NETEM: &str = "delay 5ms 2ms rate 1gbit reorder 25% 50%";

/// Starts `rdmaxfer recv` on `node` into `$W/out-PORT` and waits until it listens.
pub fn recv_on(cx: &mut Ctx, t: &mut Test, node: Node, extra: &str) -> Option<Cmd> {
    let listen = format!("--listen {}", node.ip());
    recv_with(cx, t, node, &listen, extra)
}

/// [`recv_on`] listening on every address of `node` (both wires).
pub fn recv_everywhere(cx: &mut Ctx, t: &mut Test, node: Node, extra: &str) -> Option<Cmd> {
    recv_with(cx, t, node, "", extra)
}

fn recv_with(cx: &mut Ctx, t: &mut Test, node: Node, listen: &str, extra: &str) -> Option<Cmd> {
    let p = cx.port;
    let c = cx.rig.cmd(
        node,
        &format!("rm -rf out-{p}; mkdir out-{p}; exec $BIN recv $EV --out out-{p} {listen} -p {p} --json {extra}"),
    );
    let ok = cx
        .rig
        .wait_log(c, "'listening on'", 30, |l| l.contains("listening on"));
    t.step(ok).then_some(c)
}

/// `mib` MiB from B to A: both must exit 0 within `secs` and the file's sha256 must agree on
/// both hosts. Returns the receiver's command.
pub fn xfer(
    cx: &mut Ctx,
    t: &mut Test,
    name: &str,
    mib: u32,
    secs: u64,
    rextra: &str,
    sextra: &str,
) -> Option<Cmd> {
    let rid = recv_on(cx, t, Node::A, &format!("--once {rextra}"))?;
    let p = cx.port;
    let sid = cx.rig.cmd(
        Node::B,
        &format!(
            "mkrand f{mib}.bin {mib} && exec $BIN send $EV f{mib}.bin {IP_A}:{p} --json {sextra}"
        ),
    );
    let (src, se) = cx.rig.wait_rc(sid, secs);
    let (rrc, _) = cx.rig.wait_rc(rid, 30);
    show("B send", &cx.rig.log_of(sid));
    show("A recv", &cx.rig.log_of(rid));
    t.expect(
        format!("sender exits 0 within {secs}s (rc {src}, {se}s)"),
        src.ok(),
    );
    t.expect(format!("receiver exits 0 (rc {rrc})"), rrc.ok());
    let hs = sha(&cx.rig.output(Node::B, 60, &format!("sha256sum f{mib}.bin")));
    let hr = sha(&cx
        .rig
        .output(Node::A, 60, &format!("sha256sum out-{p}/f{mib}.bin")));
    t.expect(
        format!(
            "received file == sent file (sha256 {}…)",
            hs.get(..16).unwrap_or("")
        ),
        !hs.is_empty() && hs == hr,
    );
    t.expect(
        "receiver reports ok",
        json(&cx.rig.log_of(rid), "result") == "ok",
    );
    t.note(format!(
        "{name}: {mib} MiB at {} MiB/s",
        rate(&cx.rig.log_of(sid), "mib_s")
    ));
    Some(rid)
}

/// The same netem qdisc on both NICs ("" clears it).
pub fn netem_both(cx: &mut Ctx, t: &mut Test, args: &str) {
    for node in [Node::A, Node::B] {
        if args.is_empty() {
            cx.rig.run(node, 20, "netem_off");
        } else {
            let ok = cx.rig.run(node, 20, &format!("netem {args}")).1.ok();
            t.step(ok);
        }
    }
}

/// rxe0's hardware counters on `node`, one line.
pub fn counters(cx: &mut Ctx, node: Node) -> String {
    cx.rig.last_line(node, 20, "rxe_counters")
}

pub fn pingpong(cx: &mut Ctx, name: &'static str, extra: &str) -> (bool, String) {
    let mut t = cx.begin(name);
    let p = cx.port;
    let srv = cx.rig.cmd(
        Node::A,
        &format!("exec $BIN pingpong $EV --listen {IP_A} -p {p} --count 1 -n 500 {extra}"),
    );
    if t.step(
        cx.rig
            .wait_log(srv, "'listening on'", 30, |l| l.contains("listening on")),
    ) {
        let (cli, crc) = cx.rig.run(
            Node::B,
            60,
            &format!("exec $BIN pingpong $EV {IP_A} -p {p} -n 500 {extra}"),
        );
        let (src, _) = cx.rig.wait_rc(srv, 30);
        show("A server", &cx.rig.log_of(srv));
        t.expect(format!("client exits 0 (rc {crc})"), crc.ok());
        t.expect(format!("server exits 0 (rc {src})"), src.ok());
        let out = cx.rig.log_of(cli);
        t.expect(
            "client reports 500 round trips",
            out.contains("500 iters in"),
        );
        let lat = out
            .split_whitespace()
            .collect::<Vec<_>>()
            .windows(2)
            .find(|w| w[1] == "usec/iter")
            .map(|w| format!("{} usec/iter", w[0]))
            .unwrap_or_default();
        t.note(lat);
    }
    t.end()
}

pub fn xfer_test(cx: &mut Ctx, name: &'static str, label: &str, extra: &str) -> (bool, String) {
    let mut t = cx.begin(name);
    xfer(cx, &mut t, label, 32, 120, extra, extra);
    t.end()
}

pub fn loss(cx: &mut Ctx) -> (bool, String) {
    let mut t = cx.begin("loss");
    netem_both(cx, &mut t, "loss 1%");
    xfer(cx, &mut t, "1% loss", 32, 180, "", "");
    netem_both(cx, &mut t, "");
    t.end()
}

/// The 32 MiB file over `n` streams, every stream served; notes the rxe0 counters that grew on
/// both hosts meanwhile, and on a failure the kernel's side of it.
fn striped_xfer(cx: &mut Ctx, t: &mut Test, name: &str, n: u32) {
    let fails = t.fails;
    let (a0, b0) = (counters(cx, Node::A), counters(cx, Node::B));
    if let Some(rid) = xfer(cx, t, name, 32, 240, "", &format!("--streams {n}")) {
        let served = cx.rig.log_of(rid).matches("\"session\"").count();
        t.expect(
            format!("the receiver served {n} streams ({served})"),
            served == n as usize,
        );
    }
    let (a1, b1) = (counters(cx, Node::A), counters(cx, Node::B));
    t.note(format!(
        "rxe0 counters grown: A: {}; B: {}",
        grown(&a0, &a1),
        grown(&b0, &b1)
    ));
    if t.fails > fails {
        cx.rig.run(Node::A, 30, "fault_evidence");
        cx.rig.run(Node::B, 30, "fault_evidence");
    }
}

/// One file striped over 2 and over 4 streams (QPs) on a clean wire, 3 times each:
/// RIG_STRIPED_N ("2 4") and RIG_STRIPED_RUNS (3) change the mix.
pub fn striped(cx: &mut Ctx) -> (bool, String) {
    let mut t = cx.begin("striped");
    let ns = crate::env_or("RIG_STRIPED_N", "2 4".to_string());
    let runs: u32 = crate::env_or("RIG_STRIPED_RUNS", 3);
    for i in 1..=runs {
        for n in ns.split_whitespace().filter_map(|n| n.parse().ok()) {
            striped_xfer(cx, &mut t, &format!("striped, {n} streams, run {i}"), n);
            cx.port += 1;
        }
    }
    t.end()
}

/// 32 MiB over 3 streams with 1 % loss both ways: one verified file, three connections served.
pub fn striped_loss(cx: &mut Ctx) -> (bool, String) {
    let mut t = cx.begin("striped_loss");
    netem_both(cx, &mut t, "loss 1%");
    striped_xfer(cx, &mut t, "striped, 3 streams, 1% loss", 3);
    netem_both(cx, &mut t, "");
    t.end()
}

pub fn delay_reorder(cx: &mut Ctx) -> (bool, String) {
    let mut t = cx.begin("delay_reorder");
    netem_both(cx, &mut t, REORDER_NETEM);
    let (a0, b0) = (counters(cx, Node::A), counters(cx, Node::B));
    let mib = crate::env_or("RIG_REORDER_MIB", 16);
    xfer(cx, &mut t, "5ms±2ms delay, 25% reordered", mib, 180, "", "");
    let (a1, b1) = (counters(cx, Node::A), counters(cx, Node::B));
    netem_both(cx, &mut t, "");
    // B → A: A is the responder that sees the reordered WRITEs, B the requester that is NAKed.
    let d = |b: &str, a: &str, n: &str| counter_delta(b, a, n).unwrap_or(0);
    let oos = d(&a0, &a1, "out_of_seq_request");
    let dup = d(&a0, &a1, "duplicate_request");
    let nak = d(&b0, &b1, "rcvd_seq_err");
    let retry = d(&b0, &b1, "completer_retry_err");
    t.expect(
        format!("packets arrived out of order: A's rxe0 out_of_seq_request +{oos} (duplicate_request +{dup})"),
        oos > 0,
    );
    t.expect(
        format!("the sender was NAKed and went back: B's rxe0 rcvd_seq_err +{nak} (completer_retry_err +{retry})"),
        nak > 0,
    );
    t.note(format!(
        "rxe0: A out_of_seq_request +{oos}, duplicate_request +{dup}; B rcvd_seq_err +{nak}, completer_retry_err +{retry}"
    ));
    t.end()
}

/// B's NIC goes down for 2 s in the middle of a 64 MiB transfer: both sides end within a bound
/// and agree, with the file whole or nothing left; the wire works again afterwards.
pub fn link_down(cx: &mut Ctx) -> (bool, String) {
    let mut t = cx.begin("link_down");
    let p = cx.port;
    let Some(rid) = recv_on(cx, &mut t, Node::A, "--once") else {
        return t.end();
    };
    let sid = cx.rig.cmd(
        Node::B,
        &format!("mkrand f64.bin 64 && exec $BIN send $EV f64.bin {IP_A}:{p} --json"),
    );
    let ok = cx
        .rig
        .run(
            Node::A,
            60,
            &format!("wait_size 'out-{p}/.f64.bin*' {} 50", 4 << 20),
        )
        .1
        .ok();
    t.step(ok);
    // The fault: B's NIC down for 2 s (the sleep is the fault's length, not synchronisation).
    let ok = cx
        .rig
        .run(Node::B, 30, r#"ip link set "$NIC" down; sleep 2; ip link set "$NIC" up; echo "link $NIC down 2 s, up again""#)
        .1
        .ok();
    t.step(ok);
    let deadline = 90;
    let (src, se) = cx.rig.wait_rc(sid, deadline);
    let (rrc, _) = cx.rig.wait_rc(rid, 30);
    let (slog, rlog) = (cx.rig.log_of(sid), cx.rig.log_of(rid));
    show("B send", &slog);
    show("A recv", &rlog);
    t.expect(
        format!("sender ends within {deadline}s of the fault (rc {src})"),
        src != crate::hosts::Rc::Hang,
    );
    t.expect(
        format!("receiver ends within 30s more (rc {rrc})"),
        rrc != crate::hosts::Rc::Hang,
    );
    t.expect(
        format!("both sides agree (sender rc {src}, receiver rc {rrc})"),
        (src.ok() && rrc.ok()) || (src.failed() && rrc.failed()),
    );
    let (hr, hs) = final_and_source(cx, &mut t, p, "f64.bin");
    if src.ok() && rrc.ok() {
        t.expect(
            "recovered: received file == sent file",
            !hr.is_empty() && hr == hs,
        );
        t.note(format!(
            "recovered after 2 s link down, {} MiB/s overall",
            rate(&slog, "mib_s")
        ));
    } else {
        t.expect("failed: no final file", hr.is_empty());
        t.expect("sender says why", says_why(&slog));
        t.expect("receiver says why", rlog.contains("error"));
        t.note(format!(
            "both failed clearly (sender after {se}s): {}",
            error_of(&slog, 150)
        ));
    }
    for (node, peer) in [(Node::B, IP_A), (Node::A, IP_B)] {
        let ok = cx.rig.run(node, 30, "rxe_active 20").1.ok();
        t.step(ok);
        // The wire is whole again for the next test: each side reaches the other.
        let ok = cx
            .rig
            .run(node, 30, &format!("peer_reachable {peer} 20"))
            .1
            .ok();
        t.step(ok);
    }
    t.end()
}

/// A's `out-PORT` after a transfer of B's `name`: checks that no temporary file of it is left,
/// and returns the sha256 of the final file there ("" if there is none) and of B's source.
pub fn final_and_source(cx: &mut Ctx, t: &mut Test, p: u16, name: &str) -> (String, String) {
    let (ls, _) = cx.rig.run(
        Node::A,
        30,
        &format!("ls -A out-{p}; sha256sum out-{p}/{name} 2>/dev/null || echo 'no final file'"),
    );
    let listing = cx.rig.log_of(ls);
    t.expect(
        "no temporary file left",
        !listing.lines().any(|l| l.starts_with(&format!(".{name}"))),
    );
    let source = sha(&cx.rig.output(Node::B, 60, &format!("sha256sum {name}")));
    (sha(&listing), source)
}

/// The transfer fails: both exit non-zero within `secs`, the sender's error names `what`
/// (any of `words`), nothing is left in the out dir.
fn fails_clearly(
    cx: &mut Ctx,
    name: &'static str,
    secs: u64,
    rextra: &str,
    sextra: &str,
    words: &[&str],
) -> (bool, String) {
    let mut t = cx.begin(name);
    let p = cx.port;
    let Some(rid) = recv_on(cx, &mut t, Node::A, &format!("--once {rextra}")) else {
        return t.end();
    };
    let sid = cx.rig.cmd(
        Node::B,
        &format!("mkrand f1.bin 1 && exec $BIN send $EV f1.bin {IP_A}:{p} --json {sextra}"),
    );
    let (src, se) = cx.rig.wait_rc(sid, secs);
    let (rrc, re) = cx.rig.wait_rc(rid, secs);
    let (slog, rlog) = (cx.rig.log_of(sid), cx.rig.log_of(rid));
    show("B send", &slog);
    show("A recv", &rlog);
    t.expect(
        format!("sender exits non-zero within {secs}s (rc {src}, {se}s)"),
        src.failed(),
    );
    t.expect(
        format!("receiver exits non-zero within {secs}s (rc {rrc}, +{re}s)"),
        rrc.failed(),
    );
    t.expect(
        format!("sender's error names one of {words:?}"),
        words.iter().any(|w| slog.contains(w)),
    );
    t.expect("receiver says error", rlog.contains("error"));
    t.expect(
        "no panic",
        !slog.contains("panicked") && !rlog.contains("panicked"),
    );
    let left = cx
        .rig
        .last_line(Node::A, 20, &format!("ls -A out-{p} | wc -l"));
    t.expect(
        format!("nothing left in the receiver's directory ({left})"),
        left.trim() == "0",
    );
    t.note(error_of(&slog, 160));
    t.end()
}

pub fn wrong_token(cx: &mut Ctx) -> (bool, String) {
    fails_clearly(
        cx,
        "wrong_token",
        40,
        "--token right-token",
        "--token wrong-token",
        &["token"],
    )
}

/// Index 0 is the NIC's fe80:: link-local GID, not the peer-reachable IPv4-mapped one (index 1).
pub fn wrong_gid(cx: &mut Ctx) -> (bool, String) {
    fails_clearly(
        cx,
        "wrong_gid",
        60,
        "--oob --timeout 5",
        "--oob -g 0 --timeout 5",
        &["GID", "gid"],
    )
}

pub fn mtu_mismatch(cx: &mut Ctx) -> (bool, String) {
    fails_clearly(
        cx,
        "mtu_mismatch",
        60,
        "--oob -m 512 --timeout 5",
        "--oob -m 1024 --timeout 5",
        &["MTU", "mtu"],
    )
}

/// `rdmaxfer cp` between the hosts, the other side started over ssh (an sshd on B's wire
/// address, key authentication): a 64 MiB tree pushed A→B, then pulled back B→A; each copy
/// verified by the digests of every file, and a re-run of the push sends nothing.
pub fn cp(cx: &mut Ctx) -> (bool, String) {
    let mut t = cx.begin("cp");
    let p = cx.port;
    let keys = cx.rig.agent_dir(Node::B).join("ssh");
    let keys = keys.display();
    let root = cx.rig.root.join("ci/guest-sshd.sh");
    let (sshd, rc) = cx.rig.run(
        Node::B,
        120,
        &format!(
            "bash {} {keys} 2222 {IP_B} >/dev/null && printf '#!/bin/sh\\nulimit -l unlimited\\nexec %s \"$@\"\\n' \"$BIN\" >rr && chmod +x rr",
            root.display()
        ),
    );
    show("B sshd", &cx.rig.log_of(sshd));
    if !t.step(rc.ok()) {
        return t.end();
    }
    // A remote login gets pam_limits' memlock (8 MiB): rr lifts it, as limits.conf would.
    let rsh = format!(
        "ssh -p 2222 -i {keys}/id -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR"
    );
    let cp = format!("$BIN cp -e '{rsh}' --remote-path /tmp/rig/rr --json");
    let digest = "find . -type f | sort | xargs sha256sum | sha256sum";
    let (mk, rc) = cx.rig.run(
        Node::A,
        120,
        "for d in 0 1 2 3; do mkdir -p tree/d$d; for f in 0 1 2 3; do mkrand tree/d$d/f$f.bin 4; done; done",
    );
    show("A mktree", &cx.rig.log_of(mk));
    t.step(rc.ok());
    let src = sha(&cx.rig.output(Node::A, 60, &format!("cd tree && {digest}")));
    let dest = format!("/tmp/rig/cp-{p}");
    for (what, script, there, tree) in [
        (
            "push A→B",
            format!("{cp} tree {IP_B}:{dest}"),
            Node::B,
            format!("{dest}/tree"),
        ),
        (
            "re-run of the push",
            format!("{cp} tree {IP_B}:{dest}"),
            Node::B,
            format!("{dest}/tree"),
        ),
        (
            "pull B→A",
            format!("rm -rf back-{p}; {cp} {IP_B}:{dest}/tree back-{p}"),
            Node::A,
            format!("back-{p}/tree"),
        ),
    ] {
        let (c, rc) = cx.rig.run(Node::A, 300, &script);
        let log = cx.rig.log_of(c);
        show(&format!("A cp ({what})"), &log);
        t.expect(format!("{what}: cp exits 0 (rc {rc})"), rc.ok());
        let got = sha(&cx.rig.output(there, 60, &format!("cd {tree} && {digest}")));
        t.expect(
            format!(
                "{what}: the 16 files arrived whole ({}…)",
                src.get(..16).unwrap_or("")
            ),
            !src.is_empty() && got == src,
        );
        if what.starts_with("re-run") {
            let skipped = json(&log, "files_skipped");
            t.expect(
                format!("{what}: all 16 skipped ({skipped})"),
                skipped == "16",
            );
        }
        t.note(format!("{what}: {} MiB/s", rate(&log, "mib_s")));
    }
    let (_, left) = cx.rig.run(Node::B, 30, "! pgrep -f cp-remote");
    t.expect("no cp-remote left on B", left.ok());
    cx.rig
        .run(Node::B, 30, &format!("kill $(cat {keys}/sshd.pid)"));
    // The copies live in the guests' memory (tmpfs): 64 MiB each side, which the benchmark's
    // striped files need later (it found 10 MiB free once they stayed).
    cx.rig.run(Node::B, 60, &format!("rm -rf {dest}"));
    cx.rig.run(Node::A, 60, &format!("rm -rf back-{p} tree"));
    t.end()
}
