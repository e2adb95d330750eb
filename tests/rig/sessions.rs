//! A receiver that serves many sessions: hundreds in a row with loss (the soak), several at once
//! with a hostile one among them, and peers whose host dies.

use crate::check::{error_of, json, json_lines, rate, says_why};
use crate::hosts::{log, show, Node, Rc, IP_A, IP_B};
use crate::transfer::{netem_both, recv_on};
use crate::Ctx;

/// "rss_kib fds" of the process whose pid is in the guest file `pidfile`.
fn sample(cx: &mut Ctx, pidfile: &str) -> (u64, u64) {
    let l = cx
        .rig
        .last_line(Node::A, 20, &format!("proc_sample $(cat {pidfile})"));
    let mut w = l.split_whitespace().map(|x| x.parse().unwrap_or(u64::MAX));
    (w.next().unwrap_or(u64::MAX), w.next().unwrap_or(u64::MAX))
}

/// `n` (RIG_SOAK_N, 500) sequential senders of random 1 B..256 KiB files to one receiver, with
/// 1 % loss: all arrive identical, and the receiver's memory, fds and RDMA resources stay flat.
pub fn soak(cx: &mut Ctx) -> (bool, String) {
    let mut t = cx.begin("soak");
    let n: u32 = crate::env_or("RIG_SOAK_N", 500);
    let p = cx.port;
    netem_both(cx, &mut t, "loss 1%");
    let base_a = cx.rig.last_line(Node::A, 20, "rdma_res");
    let rid = cx.rig.cmd(
        Node::A,
        &format!("rm -rf soak; mkdir soak; echo $$ >soak.pid; exec $BIN recv $EV --out soak --listen {IP_A} -p {p} --json >soak.json"),
    );
    if !t.step(
        cx.rig
            .wait_log(rid, "'listening on'", 30, |l| l.contains("listening on")),
    ) {
        netem_both(cx, &mut t, "");
        return t.end();
    }
    let listen_a = cx.rig.last_line(Node::A, 20, "rdma_res");
    // B: n sequential senders; the sample after 20 is "start".
    let sid = cx.rig.cmd(
        Node::B,
        &format!(
            r#"rm -rf soak; mkdir soak; fails=0
    for i in $(seq 1 {n}); do
      head -c $((RANDOM % 262144 + 1)) /dev/urandom >soak/s$i.bin
      $BIN send $EV soak/s$i.bin {IP_A}:{p} --json >soak/s$i.json 2>&1 || {{ fails=$((fails + 1)); echo "send $i failed: $(cat soak/s$i.json)"; }}
      ((i == 20)) && echo 'soak: 20 sent'
      ((i % 100 == 0)) && echo "soak: $i sent, $fails failed, ${{SECONDS}}s"
    done
    echo "soak: done, $fails failed"; (cd soak && sha256sum s*.bin | sort -k2) >soak.sums; ((fails == 0))"#
        ),
    );
    let ok = cx
        .rig
        .wait_log(sid, "'soak: 20 sent'", 120, |l| l == "soak: 20 sent");
    t.step(ok);
    let (rss0, fd0) = sample(cx, "soak.pid");
    let (src, se) = cx.rig.wait_rc(sid, u64::from(n) * 3 + 120);
    show("B", &cx.rig.log_of(sid));
    let (rss1, fd1) = sample(cx, "soak.pid");
    let after_a = cx.rig.last_line(Node::A, 20, "rdma_res");
    // The sums of what arrived, next to what was sent.
    let (c, _) = cx.rig.run(
        Node::A,
        60,
        r#"cd soak && sha256sum s*.bin | sort -k2 >../soak.sums.a; cd ..; wc -l <soak.sums.a; grep -c '"result":"ok"' soak.json; grep -v '"result":"ok"' soak.json | head -n 5; kill $(cat soak.pid)"#,
    );
    let got_ok = cx
        .rig
        .log_of(c)
        .lines()
        .nth(1)
        .unwrap_or("")
        .trim()
        .to_string();
    cx.rig.wait_rc(rid, 20);
    let end_a = cx.rig.last_line(Node::A, 20, "rdma_res");
    netem_both(cx, &mut t, "");
    let cb = cx.rig.cmd(Node::B, "cat /tmp/rig/soak.sums");
    cx.rig.wait_rc(cb, 20);
    let sums_b = cx.rig.log_of(cb);
    let ca = cx.rig.cmd(Node::A, "cat /tmp/rig/soak.sums.a");
    cx.rig.wait_rc(ca, 20);
    let sums_a = cx.rig.log_of(ca);
    t.expect(
        format!("all {n} senders exit 0 within the deadline (rc {src}, {se}s)"),
        src.ok(),
    );
    t.expect(
        format!("receiver reports {n} ok sessions (got {got_ok})"),
        got_ok == n.to_string(),
    );
    t.expect(
        format!("{n} files arrived identical (sha256 lists equal)"),
        !sums_a.is_empty() && sums_a == sums_b,
    );
    let lines = sums_b.lines().count();
    t.expect(format!("{lines} sums on B"), lines == n as usize);
    t.expect(
        format!("receiver open fds flat ({fd0} after 20, {fd1} after {n})"),
        fd0 == fd1 && fd0 != u64::MAX,
    );
    t.expect(
        format!("receiver RSS flat ({rss0} KiB after 20, {rss1} KiB after {n}; allowed +2048)"),
        rss1 <= rss0.saturating_add(2048),
    );
    t.expect(
        format!("rdma resources while listening back to before the soak ({listen_a} | {after_a})"),
        after_a == listen_a,
    );
    t.expect(
        format!(
            "rdma resources after the receiver exits back to the baseline ({base_a} | {end_a})"
        ),
        end_a == base_a,
    );
    t.note(format!(
        "{n} transfers in {se}s ({:.2} s each) with 1% loss; RSS {rss0}→{rss1} KiB, fds {fd0}→{fd1}",
        se as f64 / f64::from(n.max(1))
    ));
    t.end()
}

/// Whether every session in `ids` has a JSON line with result ok in `text`.
fn sessions_ok(text: &str, ids: &[u64]) -> bool {
    let ok: Vec<u64> = json_lines(text)
        .iter()
        .filter(|j| j["result"] == "ok")
        .filter_map(|j| j["session"].as_u64())
        .collect();
    ids.iter().all(|i| ok.contains(i))
}

/// The number of the first line of `text` for which `pred` holds (1-based; 0: none).
fn line_of(text: &str, pred: impl Fn(&str) -> bool) -> usize {
    text.lines().position(pred).map_or(0, |i| i + 1)
}

fn idle_end(l: &str) -> bool {
    l.contains("session 1: serving") && l.contains("--idle-timeout")
}

/// One `recv` (not --once) with a short idle budget; from B a staller (a `send` stopped with
/// SIGSTOP once its data flows), then, while it holds its session, two good `send`s at once. The
/// good files arrive intact, the staller's session is ended by --idle-timeout within a bound and
/// leaves nothing in --out.
pub fn multi_hostile(cx: &mut Ctx) -> (bool, String) {
    let mut t = cx.begin("multi_hostile");
    let (idle, mib, smib) = (8, 8, 64);
    let p = cx.port;
    let ok = cx
        .rig
        .run(
            Node::B,
            60,
            &format!("mkrand fm1.bin {mib} && mkrand fm2.bin {mib} && mkrand fstall.bin {smib}"),
        )
        .1
        .ok();
    t.step(ok);
    let rid = cx.rig.cmd(
        Node::A,
        &format!("rm -rf out-{p}; mkdir out-{p}; echo $$ >multi.pid; exec $BIN recv $EV --out out-{p} --listen {IP_A} -p {p} --json --idle-timeout {idle}"),
    );
    if !t.step(
        cx.rig
            .wait_log(rid, "'listening on'", 30, |l| l.contains("listening on")),
    ) {
        return t.end();
    }
    // The staller: session 1, stopped once a MiB of its file has arrived. One 64 KiB chunk in
    // flight, so it is far from its end when stopped.
    let stall = cx.rig.cmd(
        Node::B,
        &format!("echo $$ >stall.pid; exec $BIN send $EV fstall.bin {IP_A}:{p} --json --chunk 64K --slots 1"),
    );
    let served = cx.rig.wait_log(rid, "'session 1: serving'", 30, |l| {
        l.contains("session 1: serving")
    });
    t.expect("the staller is served as session 1", served);
    let flows = cx
        .rig
        .run(
            Node::A,
            60,
            &format!("wait_size 'out-{p}/.fstall.bin*' {} 50", 1 << 20),
        )
        .1
        .ok();
    t.expect(
        "the staller's data flows (1 MiB of its temporary file on A)",
        flows,
    );
    let stopped = cx
        .rig
        .run(
            Node::B,
            20,
            r#"p=$(cat stall.pid); kill -STOP $p
    for _ in $(seq 1 50); do [[ $(awk '{print $3}' /proc/$p/stat) == T ]] && break; sleep 0.1; done
    echo "staller $p: state $(awk '{print $3}' /proc/$p/stat)"; [[ $(awk '{print $3}' /proc/$p/stat) == T ]]"#,
        )
        .1
        .ok();
    t.expect("the staller is stopped (SIGSTOP, state T)", stopped);
    let t_stop = std::time::Instant::now();
    let short = cx
        .rig
        .run(Node::A, 20, &format!("ls -l out-{p}/.fstall.bin*"))
        .1
        .ok();
    t.expect(
        "the staller stopped short of its end (its temporary file still on A)",
        short,
    );
    // Two good senders at once, while the staller holds its session.
    let g1 = cx.rig.cmd(
        Node::B,
        &format!("exec $BIN send $EV fm1.bin {IP_A}:{p} --json"),
    );
    let g2 = cx.rig.cmd(
        Node::B,
        &format!("exec $BIN send $EV fm2.bin {IP_A}:{p} --json"),
    );
    let bound = idle + 20;
    cx.rig
        .wait_log(rid, "the staller's end by --idle-timeout", bound, idle_end);
    let took = t_stop.elapsed().as_secs();
    let rlog = cx.rig.log_of(rid);
    t.expect(
        format!(
            "A ends the staller's session by --idle-timeout within {bound}s of its stop ({took}s)"
        ),
        rlog.lines().any(idle_end),
    );
    let (rc1, _) = cx.rig.wait_rc(g1, 120);
    let (rc2, _) = cx.rig.wait_rc(g2, 120);
    show("B send 1", &cx.rig.log_of(g1));
    show("B send 2", &cx.rig.log_of(g2));
    t.expect(format!("good sender 1 exits 0 (rc {rc1})"), rc1.ok());
    t.expect(format!("good sender 2 exits 0 (rc {rc2})"), rc2.ok());
    let rlog = cx.rig.log_of(rid);
    let s2 = line_of(&rlog, |l| l.contains("session 2: serving"));
    let s3 = line_of(&rlog, |l| l.contains("session 3: serving"));
    let end1 = line_of(&rlog, idle_end);
    t.expect(
        format!("both good senders were served while the staller held session 1 (lines {s2}, {s3} < {end1})"),
        s2 > 0 && s3 > 0 && s2 < end1 && s3 < end1,
    );
    t.expect("A reports sessions 2 and 3 ok", sessions_ok(&rlog, &[2, 3]));
    let hs = cx.rig.output(Node::B, 60, "sha256sum fm1.bin fm2.bin");
    let hr = cx.rig.output(
        Node::A,
        60,
        &format!("cd out-{p} && sha256sum fm1.bin fm2.bin"),
    );
    t.expect(
        format!(
            "both files on A == on B (sha256 {}…)",
            hs.get(..16).unwrap_or("")
        ),
        !hs.is_empty() && hs == hr,
    );
    let left = cx.rig.last_line(
        Node::A,
        20,
        &format!("ls -A out-{p} | sort | paste -sd ' '"),
    );
    t.expect(
        format!(
            "nothing of the staller in --out (no final, no temp): only the good files ({left})"
        ),
        left == "fm1.bin fm2.bin",
    );
    // The staller, continued, learns its session is over and exits non-zero.
    let ok = cx
        .rig
        .run(Node::B, 20, "kill -CONT $(cat stall.pid) && echo continued")
        .1
        .ok();
    t.step(ok);
    let (src, se) = cx.rig.wait_rc(stall, 40);
    if src == Rc::Hang {
        cx.rig.run(Node::B, 20, "kill -KILL $(cat stall.pid)");
    }
    let stall_log = cx.rig.log_of(stall);
    show("B staller", &stall_log);
    t.expect(
        format!("the staller exits non-zero within 40s of SIGCONT (rc {src}, {se}s)"),
        src.failed(),
    );
    t.expect("the staller says why", says_why(&stall_log));
    t.expect("the receiver still serves (running)", !cx.rig.ended(rid));
    cx.rig.run(Node::A, 20, "kill $(cat multi.pid)");
    cx.rig.wait_rc(rid, 20);
    let rlog = cx.rig.log_of(rid);
    show("A recv", &rlog);
    let logs = [
        rlog.clone(),
        stall_log.clone(),
        cx.rig.log_of(g1),
        cx.rig.log_of(g2),
    ];
    t.expect("no panic", !logs.iter().any(|l| l.contains("panicked")));
    let why: String = rlog
        .lines()
        .find(|l| idle_end(l))
        .and_then(|l| l.split_once("--idle-timeout").map(|_| l))
        .unwrap_or("")
        .chars()
        .take(200)
        .collect();
    t.note(format!(
        "staller ended {took}s after SIGSTOP ({why}); 2 × {mib} MiB verified (senders at {} and {} MiB/s); staller after SIGCONT: {}",
        rate(&cx.rig.log_of(g1), "mib_s"),
        rate(&cx.rig.log_of(g2), "mib_s"),
        error_of(&stall_log, 120)
    ));
    t.end()
}

/// The receiver's host (B) dies mid-transfer: the sender ends within a bound, non-zero, saying
/// why. B is booted again afterwards.
pub fn receiver_killed(cx: &mut Ctx) -> (bool, String) {
    let mut t = cx.begin("receiver_killed");
    let p = cx.port;
    // Receiver on B (B's qemu is the one that can be rebooted: A's socket listens again).
    let Some(_rid) = recv_on(cx, &mut t, Node::B, "--once") else {
        return t.end();
    };
    let sid = cx.rig.cmd(
        Node::A,
        &format!(
            "rm -rf out-*; mkrand f128.bin 128 && exec $BIN send $EV f128.bin {IP_B}:{p} --json"
        ),
    );
    let ok = cx
        .rig
        .run(
            Node::B,
            90,
            &format!("wait_size 'out-{p}/.f128.bin*' {} 80", 4 << 20),
        )
        .1
        .ok();
    t.step(ok);
    t.step(cx.rig.kill_host(Node::B));
    let deadline = 30;
    let (rc, took) = cx.rig.wait_rc(sid, deadline);
    let slog = cx.rig.log_of(sid);
    show("A send", &slog);
    t.expect(
        format!("sender exits within {deadline}s of the receiver host's death (after {took}s)"),
        rc != Rc::Hang,
    );
    t.expect(format!("sender exits non-zero (rc {rc})"), rc.failed());
    t.expect("sender says why", says_why(&slog));
    t.expect("no panic", !slog.contains("panicked"));
    t.note(format!(
        "sender exit {rc} after {took}s: {}",
        error_of(&slog, 150)
    ));
    let r = t.end();
    cx.rig.boot(Node::B);
    let secs = crate::env_or("RIG_BOOT_SECS", 240);
    if !(cx.rig.ready(Node::B, secs) && cx.rig.wire_up()) {
        log("B did not come back: the tests after this fail");
    }
    r
}

/// The sender's host (B) dies mid-transfer: the receiver (not --once) fails that session within
/// a bound, leaves nothing, and serves the next sender.
pub fn sender_killed(cx: &mut Ctx) -> (bool, String) {
    let mut t = cx.begin("sender_killed");
    let p = cx.port;
    let rid = cx.rig.cmd(
        Node::A,
        &format!("rm -rf out-* f128.bin; mkdir out-{p}; echo $$ >recv.pid; exec $BIN recv $EV --out out-{p} --listen {IP_A} -p {p} --json"),
    );
    if !t.step(
        cx.rig
            .wait_log(rid, "'listening on'", 30, |l| l.contains("listening on")),
    ) {
        return t.end();
    }
    cx.rig.cmd(
        Node::B,
        &format!("mkrand f128.bin 128 && exec $BIN send $EV f128.bin {IP_A}:{p} --json"),
    );
    let ok = cx
        .rig
        .run(
            Node::A,
            90,
            &format!("wait_size 'out-{p}/.f128.bin*' {} 80", 4 << 20),
        )
        .1
        .ok();
    t.step(ok);
    t.step(cx.rig.kill_host(Node::B));
    let deadline = 40;
    let t0 = std::time::Instant::now();
    let failed = cx
        .rig
        .wait_log(rid, "'\"result\":\"error\"'", deadline, |l| {
            l.contains("\"result\":\"error\"")
        });
    let took = t0.elapsed().as_secs();
    t.expect(
        format!("receiver reports the session failed within {deadline}s ({took}s)"),
        failed,
    );
    t.expect(
        "receiver still running (listening again)",
        !cx.rig.ended(rid),
    );
    let left = cx
        .rig
        .last_line(Node::A, 20, &format!("ls -A out-{p} | wc -l"));
    t.expect(
        format!("no final file and no temporary file ({left})"),
        left.trim() == "0",
    );
    // Listening again: a small transfer from A itself (rxe0 to its own address) must get through.
    let (c, _) = cx.rig.run(
        Node::A,
        60,
        &format!("head -c 1000 /dev/urandom >small.bin && $BIN send $EV small.bin {IP_A}:{p} --json && cmp small.bin out-{p}/small.bin && echo same"),
    );
    t.expect(
        "receiver serves the next sender",
        cx.rig.log_of(c).lines().any(|l| l == "same"),
    );
    cx.rig.run(Node::A, 20, "kill $(cat recv.pid)");
    cx.rig.wait_rc(rid, 20);
    let rlog = cx.rig.log_of(rid);
    show("A recv", &rlog);
    let why = json_lines(&rlog)
        .iter()
        .find(|j| j["result"] == "error")
        .map(|j| json(&j.to_string(), "error"))
        .unwrap_or_default();
    t.note(format!(
        "receiver failed the session after {took}s: {}",
        why.chars().take(150).collect::<String>()
    ));
    t.end()
}
