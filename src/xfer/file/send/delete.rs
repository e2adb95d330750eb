//! The sender's `--delete` (rsync's, without `--delete-excluded`): after every entry has its
//! answer, each directory the sender sent is listed on the receiver (LIST → NAMES) and what
//! the sender does not have there is deleted (DELETE → ACK or REFUSE), one name at a time.
//!
//! - The directories: every directory of the walk, that is every parent of an entry and every
//!   directory entry (never the receiver's output directory itself: a top-level name is not in
//!   a directory that was sent). A directory the walk did not enter (excluded) is not listed.
//! - The extras of a directory: the receiver's names that are no entry of the walk there and
//!   that the sender's rules (`--exclude`, `--include`) do not exclude. An extra directory goes
//!   whole (the receiver removes it recursively).
//! - A directory in which (or below which) an entry failed or was refused is not touched, and
//!   the report says so (`delete_skipped`, [`Progress::NotDeleting`]); nor is anything when a
//!   failure cannot be placed (its name was clipped in the report).
//! - A receiver without `recv --allow-delete` refuses the first LIST (`not allowed`): that is
//!   recorded as a refused entry (the run is partial) and nothing more is asked.
//! - With `dry_run`, the extras are reported as what would be deleted, and no DELETE is sent.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::source::{SourceEntry, SourceKind};
use crate::error::{Error, Result};
use crate::xfer::file::ctl::{peer_err, recv_ctl, send_msg};
use crate::xfer::file::link::Link;
use crate::xfer::file::names::sanitize;
use crate::xfer::file::options::SenderOptions;
use crate::xfer::file::proto::{EntryKind, Listed, ListedKind, Msg, Reason, MAX_NAME_LEN};
use crate::xfer::file::report::{FileReport, Progress, SessionReport};

/// Most names the sender takes from the receiver for one directory.
pub const MAX_LISTED: usize = 1 << 22;

/// Each directory the walk sent, with the names of its entries (one component each).
pub fn sent_dirs(entries: &[SourceEntry]) -> BTreeMap<String, BTreeSet<String>> {
    let mut dirs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in entries {
        let name = e.name.as_str();
        for (i, _) in name.match_indices('/') {
            let rest = &name[i + 1..];
            let child = rest.split('/').next().unwrap_or(rest);
            dirs.entry(name[..i].to_string())
                .or_default()
                .insert(child.to_string());
        }
        if e.kind == SourceKind::Dir {
            dirs.entry(name.to_string()).or_default();
        }
    }
    dirs
}

/// The directories not to delete in: each failure's own name and every directory above it;
/// `None` when a failure cannot be placed (then nothing is deleted).
fn blocked(entries: &[SourceEntry], report: &SessionReport) -> Option<HashSet<String>> {
    let listed = report.files.iter().filter(|f| !f.is_ok());
    let listed: Vec<&FileReport> = listed
        .filter(|f| !f.is_skipped() && !f.is_planned())
        .collect();
    if listed.len() as u64 != report.failures() {
        return None;
    }
    let known: HashSet<&str> = entries
        .iter()
        .map(|e| match &e.kind {
            SourceKind::Unsendable { shown, .. } => shown.as_str(),
            _ => e.name.as_str(),
        })
        .collect();
    let mut out = HashSet::new();
    for f in listed {
        if !known.contains(f.name.as_str()) {
            return None;
        }
        out.insert(f.name.clone());
        for (i, _) in f.name.match_indices('/') {
            out.insert(f.name[..i].to_string());
        }
    }
    Some(out)
}

/// The receiver's names in `dir`: `Err` with its REFUSE.
async fn names<L: Link>(ep: &mut L, dir: &str) -> Result<std::result::Result<Vec<Listed>, Error>> {
    send_msg(ep, &Msg::List(dir.to_string())).await?;
    let mut out = Vec::new();
    loop {
        match recv_ctl(ep).await? {
            Msg::Names(n) => {
                out.extend(n.names);
                if out.len() > MAX_LISTED {
                    return Err(Error::Protocol(format!(
                        "the receiver lists more than {MAX_LISTED} names in {dir}"
                    )));
                }
                if n.last {
                    return Ok(Ok(out));
                }
            }
            Msg::Refuse { reason, message } => return Ok(Err(Error::refused(reason, message))),
            Msg::Err { reason, message } => return Err(peer_err(reason, &message)),
            other => {
                return Err(Error::Protocol(format!(
                    "expected NAMES answering LIST of {dir}, got {other:?}"
                )))
            }
        }
    }
}

fn entry_kind(k: ListedKind) -> EntryKind {
    match k {
        ListedKind::Dir => EntryKind::Dir,
        ListedKind::Symlink => EntryKind::Symlink,
        _ => EntryKind::File,
    }
}

/// Records a refused LIST or DELETE of `name`.
fn refused(report: &mut SessionReport, name: &str, kind: EntryKind, e: &Error) -> FileReport {
    let (reason, message) = match e {
        Error::Refused { reason, message } => (*reason, message.clone()),
        e => (Reason::Internal, e.to_string()),
    };
    let f = FileReport::failed(name, 0, reason, message).of_kind(kind);
    report.push_refused(f.clone());
    f
}

/// Deletes on the receiver what `entries` do not have in their directories (see the module
/// docs); its outcomes go to `report` and `progress`. An error only when the session fails.
pub(super) async fn delete_extras<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
    ep: &mut L,
    entries: &[SourceEntry],
    opts: &SenderOptions,
    report: &mut SessionReport,
    progress: &mut P,
) -> Result<()> {
    let blocked = blocked(entries, report);
    for (dir, mine) in sent_dirs(entries) {
        let why = match &blocked {
            None => Some("entries failed (not all listed in the report)"),
            Some(b) if b.contains(&dir) => Some("an entry in it failed or was refused"),
            Some(_) => None,
        };
        if let Some(why) = why {
            report.delete_skipped += 1;
            progress(Progress::NotDeleting { dir: &dir, why });
            continue;
        }
        let theirs = match names(ep, &dir).await? {
            Ok(v) => v,
            Err(e) => {
                let f = refused(report, &dir, EntryKind::Dir, &e);
                progress(Progress::FileDone(&f));
                if e.reason() == Some(Reason::NotAllowed) {
                    return Ok(());
                }
                continue;
            }
        };
        for l in theirs {
            let full = format!("{dir}/{}", l.name);
            let is_dir = l.kind == ListedKind::Dir;
            if mine.contains(&l.name)
                || !opts.filter.allows(&full, is_dir)
                || full.len() > MAX_NAME_LEN
                || sanitize(&full).is_err()
            {
                continue;
            }
            if opts.dry_run {
                report.push_deleted(&full, l.kind.as_str(), true, progress);
                continue;
            }
            send_msg(ep, &Msg::Delete(full.clone())).await?;
            match recv_ctl(ep).await? {
                Msg::Ack {
                    status: Reason::Ok, ..
                } => report.push_deleted(&full, l.kind.as_str(), false, progress),
                Msg::Refuse { reason, message } => {
                    let e = Error::refused(reason, message);
                    let f = refused(report, &full, entry_kind(l.kind), &e);
                    progress(Progress::FileDone(&f));
                }
                Msg::Err { reason, message } => return Err(peer_err(reason, &message)),
                other => {
                    return Err(Error::Protocol(format!(
                        "expected ACK answering DELETE of {full}, got {other:?}"
                    )))
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xfer::file::source;

    #[test]
    fn every_directory_of_the_walk_with_its_names() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("tree");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(root.join("empty")).unwrap();
        std::fs::write(root.join("a/b/f"), b"f").unwrap();
        std::fs::write(root.join("top"), b"t").unwrap();
        std::fs::write(t.path().join("single"), b"s").unwrap();
        let entries = source::walk(&[root, t.path().join("single")]).unwrap();
        let dirs = sent_dirs(&entries);
        let got: Vec<(&str, Vec<&str>)> = dirs
            .iter()
            .map(|(d, n)| (d.as_str(), n.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            got,
            [
                ("tree", vec!["a", "empty", "top"]),
                ("tree/a", vec!["b"]),
                ("tree/a/b", vec!["f"]),
                ("tree/empty", vec![]),
            ]
        );
        // A failure blocks its directory and those above it; an unplaceable one, all.
        let mut r = SessionReport::default();
        r.push(FileReport::failed(
            "tree/a/b/f",
            1,
            Reason::Exists,
            "x".into(),
        ));
        let b = blocked(&entries, &r).unwrap();
        for d in ["tree", "tree/a", "tree/a/b"] {
            assert!(b.contains(d), "{d}");
        }
        assert!(!b.contains("tree/empty"));
        r.push(FileReport::failed(
            "elsewhere",
            1,
            Reason::Exists,
            "x".into(),
        ));
        assert!(blocked(&entries, &r).is_none());
    }
}
