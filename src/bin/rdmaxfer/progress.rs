//! What `send` and `recv` show as a session goes on: a line per file on stdout as each one's
//! verdict arrives, and for `send` on a terminal, progress bars on stderr (indicatif): the current
//! file (name, percentage, bytes, rate, ETA) and, for more than one file, the total.

use std::io::IsTerminal as _;
use std::io::Write as _;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use rdmaxfer::xfer::file::printable;
use rdmaxfer::xfer::file::{FileReport, Progress};

/// How much to show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Show {
    /// Nothing but errors (`-q`, or `--json`, whose one summary is printed apart).
    Quiet,
    /// A line per file and the summary.
    Lines,
    /// Lines, and progress bars on stderr (a terminal).
    Bars,
}

impl Show {
    /// `Bars` when stderr is a terminal, else `Lines`; `Quiet` with `quiet` or `json`.
    pub fn pick(quiet: bool, json: bool) -> Show {
        if quiet || json {
            Show::Quiet
        } else if std::io::stderr().is_terminal() {
            Show::Bars
        } else {
            Show::Lines
        }
    }
}

/// One entry's result line: `ok      NAME (N bytes, xxh3 H)` (the verification and the
/// file digest; `, N chunks repaired` if any were sent again), `ok      NAME (symlink)`,
/// `skipped  NAME (identical)`, `would create NAME (N bytes)` (a dry run) or
/// `FAILED  NAME: why`.
pub fn file_line(f: &FileReport) -> String {
    // The library escapes what the peer sent; escaping again changes nothing (defence in
    // depth: one line per file, whatever the names).
    let name = printable(&f.name);
    match (&f.hash, f.message.as_deref()) {
        (Some(h), _) if f.is_ok() => {
            let how = f.verify.as_deref().unwrap_or("digest");
            let algo = how.split('/').next().unwrap_or(how);
            let repaired = repaired(f.repaired, ", ", "");
            format!("ok      {name} ({} bytes, {algo} {h}{repaired})", f.bytes)
        }
        (None, _) if f.is_ok() => format!("ok      {name} ({})", f.kind),
        (_, m) if f.is_skipped() => format!("skipped  {name} ({})", printable(m.unwrap_or(""))),
        (_, m) if f.is_planned() => {
            // "would create NAME (4096 bytes)": what a dry run would send.
            let verb = printable(m.unwrap_or("would send"));
            match f.kind {
                "file" => format!("{verb} {name} ({} bytes)", f.bytes),
                kind => format!("{verb} {name} ({kind})"),
            }
        }
        (_, Some(m)) if !m.is_empty() => {
            let m = printable(m);
            // The reason in parentheses, unless the message already says it.
            if m.contains(f.result.as_str()) {
                format!("FAILED  {name}: {m}")
            } else {
                format!("FAILED  {name} ({}): {m}", f.result)
            }
        }
        _ => format!("FAILED  {name} ({})", f.result),
    }
}

/// `N chunks repaired` between `open` and `close`, or nothing for none.
pub fn repaired(n: u64, open: &str, close: &str) -> String {
    match n {
        0 => String::new(),
        1 => format!("{open}1 chunk repaired{close}"),
        n => format!("{open}{n} chunks repaired{close}"),
    }
}

/// Prints a line on stdout (held for the line, so sessions' lines do not interleave mid-line).
fn print_line(line: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// Receiver: prints each file's line as its verdict arrives.
pub fn recv_observer(show: Show) -> impl FnMut(Progress<'_>) {
    move |p| match (p, show) {
        (_, Show::Quiet) => {}
        (Progress::FileDone(f), _) => print_line(&file_line(f)),
        (p, _) => {
            if let Some(line) = delete_line(p) {
                print_line(&line);
            }
        }
    }
}

/// `deleting NAME` / `would delete NAME` (as rsync), or `not deleting in DIR: why`.
fn delete_line(p: Progress<'_>) -> Option<String> {
    Some(match p {
        Progress::Deleted {
            name,
            kind,
            dry_run,
        } => {
            let verb = if dry_run { "would delete" } else { "deleting" };
            let slash = if kind == "dir" { "/" } else { "" };
            format!("{verb} {}{slash}", printable(name))
        }
        Progress::NotDeleting { dir: "", why } => format!("not deleting: {why}"),
        Progress::NotDeleting { dir, why } => {
            format!("not deleting in {}: {why}", printable(dir))
        }
        _ => return None,
    })
}

fn total_message(ended: usize, files: usize) -> String {
    format!("total: {ended} of {files} files")
}

/// The sender's display: bars (when shown) and the line of each file as it ends. Over several
/// streams several files are in flight at once: each has its own bar, and the total counts
/// every file that ended (its full size) plus what is written of those in flight.
pub struct SendDisplay {
    show: Show,
    bars: Option<Bars>,
    /// Bytes of the files that ended (their full size, delivered or not).
    ended_bytes: u64,
    /// The files in flight, in the order they started.
    flying: Vec<Flying>,
    /// Files that ended, and all of them.
    ended: usize,
    files: usize,
}

/// A file in flight: its name as printed, size, bytes written so far and bar (if shown).
struct Flying {
    key: String,
    size: u64,
    done: u64,
    bar: Option<ProgressBar>,
}

struct Bars {
    multi: MultiProgress,
    total: Option<ProgressBar>,
}

/// A bar: name (or "total: i of n files"), percentage, bar, bytes, rate, ETA.
const STYLE: &str = "{msg:24!} {percent:>3}% [{bar:24}] {bytes:>10}/{total_bytes:<10} \
                     {binary_bytes_per_sec:>12}  ETA {eta}";

fn style() -> ProgressStyle {
    ProgressStyle::with_template(STYLE)
        .expect("a valid template")
        .progress_chars("=> ")
}

/// Whether a verdict's name (printable, clipped with `…` when long) is that of the file
/// announced as `key` (printable).
fn same_file(reported: &str, key: &str) -> bool {
    reported == key
        || reported
            .strip_suffix('…')
            .is_some_and(|head| key.starts_with(head))
}

impl SendDisplay {
    /// For `files` files of `total` bytes together.
    pub fn new(show: Show, files: usize, total: u64) -> SendDisplay {
        let bars = (show == Show::Bars).then(|| {
            let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
            let total = (files > 1).then(|| {
                let b = multi.add(ProgressBar::new(total));
                b.set_style(style());
                b.set_message(total_message(0, files));
                b
            });
            Bars { multi, total }
        });
        SendDisplay {
            show,
            bars,
            ended_bytes: 0,
            flying: Vec::new(),
            ended: 0,
            files,
        }
    }

    /// Takes one event of the library's session.
    pub fn event(&mut self, p: Progress<'_>) {
        match p {
            Progress::FileStart { name, size } => {
                let key = printable(name).into_owned();
                let bar = self.bars.as_ref().map(|b| {
                    let bar = ProgressBar::new(size);
                    // Above the total bar.
                    let bar = match &b.total {
                        Some(t) => b.multi.insert_before(t, bar),
                        None => b.multi.add(bar),
                    };
                    bar.set_style(style());
                    bar.set_message(key.clone());
                    bar
                });
                self.flying.push(Flying {
                    key,
                    size,
                    done: 0,
                    bar,
                });
            }
            Progress::Bytes {
                name, file_done, ..
            } => {
                let key = printable(name);
                if let Some(f) = self.flying.iter_mut().find(|f| f.key == key) {
                    // Never past the file's size, whatever the source does meanwhile.
                    f.done = file_done.min(f.size);
                    if let Some(bar) = &f.bar {
                        bar.set_position(f.done);
                    }
                }
                self.show_total();
            }
            Progress::FileDone(f) => self.file_done(f),
            p => {
                if let (Some(line), false) = (delete_line(p), self.show == Show::Quiet) {
                    match &self.bars {
                        Some(b) => b.multi.suspend(|| print_line(&line)),
                        None => print_line(&line),
                    }
                }
            }
        }
    }

    /// The total bar: files ended plus what is written of those in flight.
    fn show_total(&self) {
        if let Some(t) = self.bars.as_ref().and_then(|b| b.total.as_ref()) {
            let flying: u64 = self.flying.iter().map(|f| f.done).sum();
            t.set_position(self.ended_bytes.saturating_add(flying));
        }
    }

    fn file_done(&mut self, f: &FileReport) {
        // Directories, symlinks and files refused before they started have no bar.
        let flying = match self.flying.iter().position(|x| same_file(&f.name, &x.key)) {
            Some(i) => Some(self.flying.remove(i)),
            None => None,
        };
        let size = flying.as_ref().map_or(0, |x| x.size);
        self.ended_bytes = self.ended_bytes.saturating_add(size.max(f.bytes));
        self.ended += 1;
        match &mut self.bars {
            Some(b) => {
                if let Some(bar) = flying.and_then(|x| x.bar) {
                    if f.is_ok() {
                        // A delivered file is shown whole (a resumed one started part-way).
                        bar.set_position(bar.length().unwrap_or(0));
                        bar.finish();
                    } else {
                        bar.abandon();
                    }
                    if b.total.is_some() {
                        // In a tree, its line replaces its bar.
                        b.multi.remove(&bar);
                    }
                }
                if let Some(t) = &b.total {
                    t.set_message(total_message(self.ended, self.files));
                }
                b.multi.suspend(|| print_line(&file_line(f)));
            }
            // The line is made only where it is shown (not for -q or --json).
            None if self.show == Show::Lines => print_line(&file_line(f)),
            None => {}
        }
        self.show_total();
    }

    /// Ends the bars (the total at 100 % when every file ended) before the summary is printed.
    pub fn finish(&mut self) {
        for f in self.flying.drain(..) {
            if let Some(bar) = f.bar {
                bar.abandon();
            }
        }
        if let Some(b) = self.bars.take() {
            if let Some(t) = b.total {
                if self.ended == self.files {
                    t.set_position(t.length().unwrap_or(0).max(t.position()));
                    t.finish();
                } else {
                    t.abandon();
                }
            }
        }
    }

    /// Bytes the total bar shows (files ended plus those in flight).
    #[cfg(test)]
    fn total_shown(&self) -> u64 {
        self.ended_bytes + self.flying.iter().map(|f| f.done).sum::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(result: &str, message: Option<&str>) -> FileReport {
        let mut r = FileReport::default();
        r.name = "d/f\n".into();
        r.kind = "file";
        r.bytes = 5;
        r.result = result.into();
        r.message = message.map(String::from);
        r
    }

    #[test]
    fn a_file_line_names_its_cause_once() {
        let exists = report(
            "exists",
            Some("the peer reports: /out/d/f exists (use --force to overwrite)"),
        );
        let line = file_line(&exists);
        assert_eq!(
            line,
            "FAILED  d/f\\u{a}: the peer reports: /out/d/f exists (use --force to overwrite)"
        );
        let big = report("too large", Some("d/f: 5 bytes exceeds the limit of 1"));
        assert_eq!(
            file_line(&big),
            "FAILED  d/f\\u{a} (too large): d/f: 5 bytes exceeds the limit of 1"
        );
        assert_eq!(file_line(&report("busy", None)), "FAILED  d/f\\u{a} (busy)");
        let mut ok = report("ok", None);
        ok.hash = Some("ab".into());
        ok.verify = Some("blake3/4096".into());
        assert_eq!(file_line(&ok), "ok      d/f\\u{a} (5 bytes, blake3 ab)");
        let mut repaired = ok;
        repaired.repaired = 1;
        assert_eq!(
            file_line(&repaired),
            "ok      d/f\\u{a} (5 bytes, blake3 ab, 1 chunk repaired)"
        );
    }

    #[test]
    fn files_in_flight_at_once_never_overshoot_the_total() {
        let (a, b) = (8u64 << 20, 2u64 << 20);
        let mut d = SendDisplay::new(Show::Quiet, 2, a + b);
        let done = |name: &str, bytes: u64| {
            let mut r = report("ok", None);
            r.name = name.into();
            r.bytes = bytes;
            r
        };
        let bytes = |name, n| Progress::Bytes {
            name,
            file_done: n,
            total_done: 0,
        };
        // The big file starts first (striped over two streams), the small one after it.
        d.event(Progress::FileStart {
            name: "big",
            size: a,
        });
        d.event(Progress::FileStart {
            name: "small",
            size: b,
        });
        d.event(bytes("big", 3 << 20));
        d.event(bytes("small", b));
        assert_eq!(d.total_shown(), (3 << 20) + b);
        d.event(Progress::FileDone(&done("small", b)));
        assert_eq!(
            d.total_shown(),
            (3 << 20) + b,
            "the small file counted once"
        );
        d.event(bytes("big", 6 << 20));
        assert_eq!(d.total_shown(), (6 << 20) + b);
        // A file's bytes never count past its size.
        d.event(bytes("big", a + 1));
        assert_eq!(d.total_shown(), a + b);
        d.event(Progress::FileDone(&done("big", a)));
        assert_eq!(d.total_shown(), a + b);
        assert_eq!(d.ended, 2);
        // A clipped name still ends its file.
        let mut d = SendDisplay::new(Show::Quiet, 1, 5);
        d.event(Progress::FileStart {
            name: "a-long-name",
            size: 5,
        });
        d.event(Progress::FileDone(&done("a-long…", 5)));
        assert!(d.flying.is_empty());
        assert_eq!(d.total_shown(), 5);
    }

    #[test]
    fn quiet_and_json_show_nothing() {
        assert_eq!(Show::pick(true, false), Show::Quiet);
        assert_eq!(Show::pick(false, true), Show::Quiet);
        assert_ne!(Show::pick(false, false), Show::Quiet);
    }
}
