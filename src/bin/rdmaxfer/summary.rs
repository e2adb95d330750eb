//! What `send` and `recv` print at the end: the summary line, `--stats` and `--json`.

use rdmaxfer::xfer::file::names::printable;
use rdmaxfer::xfer::file::SessionReport;

use crate::progress;

/// `--stats`: the figures of a session (sender) or connection (receiver), one per line, as one
/// block (see [`summary`] for the JSON names). `streams`: the sender's; `verb`: "sent" or
/// "received".
pub(crate) fn stats_text(
    report: &SessionReport,
    secs: f64,
    streams: Option<u16>,
    verb: &str,
) -> String {
    let rate = |b: u64, s: f64| {
        if s > 0.0 {
            b as f64 / (1 << 20) as f64 / s
        } else {
            0.0
        }
    };
    let failed = report.failures();
    let total = report.file_count();
    let mut t = format!(
        "Number of entries: {total} (delivered or made: {}, skipped: {}, failed: {failed})\n",
        total - failed - report.skipped - report.planned,
        report.skipped
    );
    t += &format!(
        "Failed entries: {failed} (refused by the receiver: {}, vanished from the source: {})\n",
        report.refused, report.vanished
    );
    if report.deleted + report.delete_skipped > 0 {
        t += &format!(
            "Deleted entries: {} (directories not cleaned after a failure: {})\n",
            report.deleted, report.delete_skipped
        );
    }
    if report.planned > 0 {
        t += &format!(
            "Dry run: {} entries would be sent ({} bytes)\n",
            report.planned, report.planned_bytes
        );
    }
    if report.repaired > 0 {
        t += &format!("Repaired chunks: {} (sent again)\n", report.repaired);
    }
    t += &format!("File data {verb}: {} bytes\n", report.bytes);
    if streams.is_some() {
        // The sender times the data phase (first chunk to the receiver's verdict).
        t += &format!(
            "Data phase: {:.3} s ({:.1} MiB/s)\n",
            report.data_seconds,
            rate(report.bytes, report.data_seconds)
        );
    }
    t += &format!(
        "Total time: {secs:.3} s ({:.1} MiB/s)",
        rate(report.bytes, secs)
    );
    if let Some(streams) = streams {
        t += &format!("\nStreams: {streams}");
    }
    t
}

pub(crate) fn summary(
    report: &SessionReport,
    secs: f64,
    err: Option<&anyhow::Error>,
) -> serde_json::Value {
    let mib_s = if secs > 0.0 {
        report.bytes as f64 / (1 << 20) as f64 / secs
    } else {
        0.0
    };
    let mut v = serde_json::json!({
        "files": report.files,
        "files_elided": report.elided,
        "files_failed": report.failures(),
        "files_skipped": report.skipped,
        "files_refused": report.refused,
        "files_vanished": report.vanished,
        "files_planned": report.planned,
        "bytes_planned": report.planned_bytes,
        "files_deleted": report.deleted,
        "deleted": report.deleted_names,
        "delete_skipped": report.delete_skipped,
        "chunks_repaired": report.repaired,
        "streams_lost": report.lost,
        "bytes_resent": report.resent,
        "bytes": report.bytes,
        "seconds": secs,
        "mib_s": mib_s,
        "result": if err.is_none() { "ok" } else { "error" },
    });
    if report.data_seconds > 0.0 {
        // Sender only: the data phase (first chunk to the receiver's verdict), as perftest
        // times its transfers (without connection set-up).
        v["data_seconds"] = serde_json::json!(report.data_seconds);
        v["data_mib_s"] =
            serde_json::json!(report.bytes as f64 / (1 << 20) as f64 / report.data_seconds);
    }
    if let Some(e) = err {
        let text = format!("{e:#}");
        v["error"] = serde_json::Value::String(printable(&text).into_owned());
    }
    v
}

/// The summary line (the files' own lines were printed as each one ended).
pub(crate) fn print_summary(report: &SessionReport, secs: f64, verb: &str) {
    let mib = report.bytes as f64 / (1 << 20) as f64;
    let skipped = match (report.skipped, report.planned) {
        (0, 0) => String::new(),
        (n, 0) => format!(" ({n} skipped)"),
        (n, p) => format!(" ({n} skipped, {p} asked about by a dry run)"),
    };
    let skipped = match report.deleted {
        0 => skipped,
        n => format!("{skipped} ({n} deleted)"),
    };
    let skipped = skipped + &progress::repaired(report.repaired, " (", ")");
    let skipped = skipped + &lost_text(report);
    outln!(
        "{verb} {} of {} files{skipped}, {} bytes in {secs:.3} s ({:.1} MiB/s)",
        report.file_count() - report.failures() - report.skipped - report.planned,
        report.file_count(),
        report.bytes,
        if secs > 0.0 { mib / secs } else { 0.0 }
    );
}

/// What the summary says of streams lost: " (stream 1 on rxe1 to HOST lost, its work taken
/// over; 1048576 bytes sent again)", or nothing.
fn lost_text(report: &SessionReport) -> String {
    if report.lost.is_empty() {
        return String::new();
    }
    let lost: Vec<String> = report
        .lost
        .iter()
        .map(|l| format!("stream {} on {} to {}", l.stream, l.device, l.peer))
        .collect();
    format!(
        " ({} lost, its work taken over; {} bytes sent again)",
        lost.join(", "),
        report.resent
    )
}

/// A dry run's summary line: what would be sent, skipped and refused.
pub(crate) fn print_dry_summary(report: &SessionReport) {
    outln!(
        "dry run: {} of {} entries would be sent ({} bytes), {} skipped, {} failed or refused; nothing was sent or changed",
        report.planned,
        report.file_count(),
        report.planned_bytes,
        report.skipped,
        report.failures()
    );
}
