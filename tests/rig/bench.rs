//! The two-host benchmark: `ib_write_bw` against `rdmaxfer bench write` and `rdmaxfer send` at
//! 1 MiB, clean, with 1 % loss and with delay and reordering; then `send --streams N` for
//! N = 1, 2, 4 (clean). The table of rates and ratios is printed and kept in the run directory
//! (`bench/ratios.txt`), each client's output next to it.

use std::collections::BTreeMap;
use std::path::Path;

use crate::check::{json_lines, Test};
use crate::hosts::{log, show, Node, IP_A};
use crate::transfer::{netem_both, REORDER_NETEM};
use crate::Ctx;

const MODES: [&str; 3] = ["clean", "loss", "reorder"];

/// Server on A (waits until it listens), client on B; the client's output is kept as
/// `bench/NAME.txt`. perftest's clock calibration sometimes fails under TCG ("Correlation
/// coefficient"): such a run is repeated, up to 3 tries.
fn pair(cx: &mut Ctx, t: &mut Test, name: &str, secs: u64, server: &str, client: &str) {
    for attempt in 1..=3 {
        let srv = cx.rig.cmd(Node::A, server);
        if !t.step(
            cx.rig
                .wait_log(srv, "'listening on'", 30, |l| l.contains("listening on")),
        ) {
            return;
        }
        let cli = cx.rig.cmd(Node::B, client);
        let (crc, _) = cx.rig.wait_rc(cli, secs);
        let (src, _) = cx.rig.wait_rc(srv, 30);
        let out = cx.rig.log_of(cli);
        let _ = std::fs::write(cx.rig.run.join("bench").join(format!("{name}.txt")), &out);
        if !crc.ok() || !src.ok() {
            log(format!("  {name}: client rc {crc}, server rc {src}"));
            show("client", &tail(&out, 15));
            show("server", &tail(&cx.rig.log_of(srv), 15));
            t.step(false);
            return;
        }
        if !out.contains("Correlation coefficient") {
            return;
        }
        log(format!(
            "  {name}: perftest clock calibration failed (try {attempt}), again"
        ));
    }
    t.step(false);
}

fn tail(s: &str, n: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(n)..].join("\n")
}

pub fn bench(cx: &mut Ctx) -> (bool, String) {
    let mut t = cx.begin("bench");
    let dir = cx.rig.run.join("bench");
    let _ = std::fs::create_dir_all(&dir);
    let mib: u32 = crate::env_or("RIG_BENCH_MIB", 64);
    let rmib: u32 = crate::env_or("RIG_BENCH_REORDER_MIB", 8);
    let ok = cx
        .rig
        .run(
            Node::B,
            60,
            &format!("mkrand fb.bin {mib} && mkrand fr.bin {rmib}"),
        )
        .1
        .ok();
    t.step(ok);
    for mode in MODES {
        // Under reordering everything moves at ~0.3 MB/s: fewer MiB there, ~30 s a run.
        let (mut iters, mut file, mut secs) =
            (crate::env_or("RIG_BENCH_ITERS", 100), "fb.bin", 300);
        match mode {
            "loss" => netem_both(cx, &mut t, "loss 1%"),
            "reorder" => {
                netem_both(cx, &mut t, REORDER_NETEM);
                (iters, file, secs) = (rmib, "fr.bin", 180);
            }
            _ => {}
        }
        cx.port += 1;
        let p = cx.port;
        pair(
            cx,
            &mut t,
            &format!("ib_write_bw.{mode}"),
            secs,
            &format!("serve_tcp {p} ib_write_bw -d rxe0 -x 1 -F -s 1048576 -n {iters} -p {p}"),
            &format!("exec ib_write_bw -d rxe0 -x 1 -F -s 1048576 -n {iters} -p {p} {IP_A}"),
        );
        cx.port += 1;
        let p = cx.port;
        pair(
            cx,
            &mut t,
            &format!("rdx_write.{mode}"),
            secs,
            &format!("exec $BIN bench write $EV --listen {IP_A} --count 1 -d rxe0 --oob -s 1048576 -n {iters} -p {p} --timeout 120"),
            &format!("exec $BIN bench write $EV {IP_A} -d rxe0 --oob -s 1048576 -n {iters} -p {p} --json --timeout 120"),
        );
        cx.port += 1;
        let p = cx.port;
        pair(
            cx,
            &mut t,
            &format!("rdx_send.{mode}"),
            secs,
            &format!("rm -rf out-{p}; mkdir out-{p}; exec $BIN recv $EV --out out-{p} --listen {IP_A} -p {p} --once --json"),
            &format!("exec $BIN send $EV {file} {IP_A}:{p} --chunk 1M --json"),
        );
        if mode != "clean" {
            netem_both(cx, &mut t, "");
        }
    }
    // Streams: the same file over N = 1, 2, 4 connections (QPs) on the one wire, clean.
    for n in [1, 2, 4] {
        cx.port += 1;
        let p = cx.port;
        pair(
            cx,
            &mut t,
            &format!("rdx_streams{n}.clean"),
            300,
            &format!("rm -rf out-{p}; mkdir out-{p}; exec $BIN recv $EV --out out-{p} --listen {IP_A} -p {p} --once --json"),
            &format!("exec $BIN send $EV fb.bin {IP_A}:{p} --chunk 1M --streams {n} --json"),
        );
    }
    let table = ratios(&dir);
    print!("{table}");
    let _ = std::fs::write(dir.join("ratios.txt"), &table);
    t.expect("every benchmark figure present", !table.contains("missing"));
    let r: Vec<&str> = table.lines().filter(|l| l.contains(" ratio: ")).collect();
    t.note(r.join(";"));
    t.end()
}

/// BW average (MB/s) of perftest's result row (the line after the `#bytes` header).
pub fn perftest_bw(text: &str) -> Option<f64> {
    let lines: Vec<&str> = text.lines().collect();
    let i = lines
        .iter()
        .position(|l| l.trim_start().starts_with("#bytes"))?;
    let f: Vec<&str> = lines.get(i + 1)?.split_whitespace().collect();
    if f.len() >= 4 && f[0].bytes().all(|b| b.is_ascii_digit()) {
        f[3].parse().ok()
    } else {
        None
    }
}

/// A rate of the last JSON line (`None` for a failed run: its rate is not a figure).
pub fn last_rate(text: &str, key: &str) -> Option<f64> {
    let j = json_lines(text).pop()?;
    if j.get("result").is_some_and(|r| r != "ok") {
        return None;
    }
    j.get(key)?.as_f64()
}

fn fmt(v: Option<f64>) -> String {
    v.map_or_else(|| "  missing".into(), |v| format!("{v:9.2}"))
}

/// The table from the client outputs in `dir` (MB = 2^20 bytes, as perftest prints).
pub fn ratios(dir: &Path) -> String {
    let text = |n: &str| std::fs::read_to_string(dir.join(format!("{n}.txt"))).unwrap_or_default();
    type Get = fn(&str) -> Option<f64>;
    // The data phase (first chunk to the receiver's verified ACK), timed like perftest (which
    // leaves out its set-up); "send cmd" is the whole command, connection set-up included.
    let rows: [(&str, &str, Get); 4] = [
        ("ib_write_bw", "ib_write_bw", perftest_bw),
        ("write bench", "rdx_write", |t| last_rate(t, "bw_avg_mib_s")),
        ("send file", "rdx_send", |t| last_rate(t, "data_mib_s")),
        ("send cmd", "rdx_send", |t| last_rate(t, "mib_s")),
    ];
    let mut v = BTreeMap::new();
    for (tool, file, get) in rows {
        for m in MODES {
            v.insert((tool, m), get(&text(&format!("{file}.{m}"))));
        }
    }
    let anchor = v[&("ib_write_bw", "clean")];
    let mut out = String::from("== two-host benchmark, 1 MiB messages / chunks (MB/s = MiB/s)\n");
    out += &format!(
        "{:<12} {:>9} {:>9} {:>9}   ratio to ib_write_bw clean\n",
        "tool", "clean", "1% loss", "reorder"
    );
    for (tool, _, _) in rows {
        let mut ratio = String::new();
        if tool != "ib_write_bw" {
            match (v[&(tool, "clean")], anchor) {
                (Some(c), Some(a)) if a > 0.0 => {
                    ratio = format!("clean {:5.3}", c / a);
                    if tool != "send cmd" {
                        let met = if c / a >= 0.95 { "met" } else { "NOT met" };
                        ratio += &format!(" (goal >= 0.95: {met})");
                    }
                }
                _ => ratio = "clean missing".into(),
            }
            for (m, what) in [("loss", "loss"), ("reorder", "reordering")] {
                if let (Some(x), Some(a)) = (v[&(tool, m)], v[&("ib_write_bw", m)]) {
                    ratio += &format!(", {what} vs ib_write_bw {what} {:5.3}", x / a);
                }
            }
        }
        let cells: Vec<String> = MODES.iter().map(|m| fmt(v[&(tool, *m)])).collect();
        out += &format!("{tool:<12} {}   {ratio}\n", cells.join(" "));
    }
    for m in MODES {
        for tool in ["write bench", "send file"] {
            match (v[&(tool, m)], v[&("ib_write_bw", m)]) {
                (Some(x), Some(a)) if a > 0.0 => {
                    out += &format!("{tool} {m} ratio: {:.3}\n", x / a)
                }
                _ => out += &format!("{tool} {m} ratio: missing\n"),
            }
        }
    }
    out += "== streams (clean): send --streams N, one file over N connections\n";
    let base = last_rate(&text("rdx_streams1.clean"), "data_mib_s");
    for n in [1, 2, 4] {
        let t = text(&format!("rdx_streams{n}.clean"));
        let (d, w) = (last_rate(&t, "data_mib_s"), last_rate(&t, "mib_s"));
        let mut line = format!(
            "streams N={n}: data phase {} MiB/s, whole command {} MiB/s",
            fmt(d),
            fmt(w)
        );
        if let (Some(d), Some(a)) = (d, anchor) {
            line += &format!(", data / ib_write_bw clean {:5.3}", d / a);
        }
        if n > 1 {
            match (d, base) {
                (Some(d), Some(b)) if b > 0.0 => {
                    let met = if d / b >= 0.95 { "met" } else { "NOT met" };
                    line += &format!(", N/N=1 {:5.3} (goal >= 0.95: {met})", d / b);
                }
                _ => line += ", N/N=1 missing",
            }
        }
        out += &line;
        out.push('\n');
    }
    out
}
