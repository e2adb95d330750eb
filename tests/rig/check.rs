//! One rig test's verdict: its assertions (each printed as it is checked), its notes (figures for
//! the summary) and the JSON its commands print.

use std::time::Instant;

use crate::hosts::log;

/// The current test.
pub struct Test {
    pub name: &'static str,
    pub fails: u32,
    notes: Vec<String>,
    t0: Instant,
}

impl Test {
    pub fn begin(name: &'static str, port: u16) -> Test {
        log(format!("=== {name} (port {port})"));
        Test {
            name,
            fails: 0,
            notes: Vec::new(),
            t0: Instant::now(),
        }
    }

    /// An assertion of the test.
    pub fn expect(&mut self, desc: impl AsRef<str>, ok: bool) -> bool {
        if ok {
            log(format!("  ok: {}", desc.as_ref()));
        } else {
            log(format!("  FAIL: {}", desc.as_ref()));
            self.fails += 1;
        }
        ok
    }

    /// A step that must work for the test to go on (counted as a failure when it does not).
    pub fn step(&mut self, ok: bool) -> bool {
        if !ok {
            self.fails += 1;
        }
        ok
    }

    pub fn note(&mut self, s: impl Into<String>) {
        let s = s.into();
        log(format!("  {s}"));
        self.notes.push(s);
    }

    /// The summary row; prints the verdict.
    pub fn end(self) -> (bool, String) {
        let ok = self.fails == 0;
        let secs = self.t0.elapsed().as_secs();
        let verdict = if ok { "ok" } else { "FAIL" };
        log(format!("--- {}: {verdict} ({secs} s)", self.name));
        let row = format!(
            "{:<16} {:<4} {:>4}s  {}",
            self.name,
            verdict,
            secs,
            self.notes.join("; ")
        );
        (ok, row)
    }
}

/// The JSON lines of a command's output.
pub fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A top-level field of the last JSON line of `text`, as text ("" when there is none).
pub fn json(text: &str, key: &str) -> String {
    match json_lines(text).last().and_then(|j| j.get(key).cloned()) {
        Some(serde_json::Value::String(s)) => s,
        Some(serde_json::Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    }
}

/// A rate field of the last JSON line, printed with one decimal ("0.0" when missing).
pub fn rate(text: &str, key: &str) -> String {
    format!("{:.1}", json(text, key).parse::<f64>().unwrap_or(0.0))
}

/// The sender's (or receiver's) error message from its JSON, at most `max` characters.
pub fn error_of(text: &str, max: usize) -> String {
    let e = json_lines(text)
        .iter()
        .rev()
        .find_map(|j| j.get("error").and_then(|e| e.as_str()).map(str::to_string))
        .unwrap_or_default();
    e.chars().take(max).collect()
}

/// Whether the output has an error message of at least 10 characters in its JSON.
pub fn says_why(text: &str) -> bool {
    error_of(text, 200).chars().count() >= 10
}

/// The first 64-hex-digit word at the start of a line (a sha256sum), or "".
pub fn sha(text: &str) -> String {
    text.lines()
        .filter_map(|l| l.split_whitespace().next())
        .find(|w| w.len() == 64 && w.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or("")
        .to_string()
}

/// rxe0's counters ("NAME=VALUE …", from `rxe_counters` in a guest): how much `name` grew.
pub fn counter_delta(before: &str, after: &str, name: &str) -> Option<i64> {
    let get = |s: &str| {
        s.split_whitespace().find_map(|kv| {
            kv.strip_prefix(name)?
                .strip_prefix('=')?
                .parse::<i64>()
                .ok()
        })
    };
    Some(get(after)? - get(before)?)
}

/// The counters that grew between two readings (packet and byte counts left out).
pub fn grown(before: &str, after: &str) -> String {
    let names = after
        .split_whitespace()
        .filter_map(|kv| kv.split_once('=').map(|(k, _)| k))
        .filter(|k| !k.ends_with("pkts") && !k.ends_with("bytes"));
    let g: Vec<String> = names
        .filter_map(|n| match counter_delta(before, after, n) {
            Some(0) | None => None,
            Some(d) => Some(format!("{n} +{d}")),
        })
        .collect();
    if g.is_empty() {
        "none".into()
    } else {
        g.join(" ")
    }
}
