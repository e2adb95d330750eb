//! Receiver: `recv --allow-delete`, the other half of `send --delete`. After its entries, a
//! sender lists each directory it sent (LIST → NAMES) and asks for each name it does not have
//! to be removed (DELETE → ACK or REFUSE).
//!
//! Confined: only with `allow_delete`; only directories a HELLO of this session named (as the
//! parent of an entry, or as a directory entry: `SentDirs`, shared by the session's streams);
//! only names inside one of them and never one of them itself (so neither the output directory
//! nor anything outside the sent tree); each reached from the output directory without
//! following a symlink (`names::walk_existing`, then `openat(O_NOFOLLOW)`), and a directory
//! removed recursively the same way (a symlink in it is removed, never followed). This
//! receiver's temporary files (`.rdmaxfer-part`, `.rdmaxfer-stripes`) are never listed, and
//! names that are not UTF-8 are not listed either (so never deleted).

use std::collections::BTreeSet;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Mutex};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::error::{Error, Result};
use crate::xfer::file::budget::{Budget, FILE_CREDIT};
use crate::xfer::file::ctl::{detail, reason_of, send_msg};
use crate::xfer::file::link::Link;
use crate::xfer::file::names::{sanitize, walk_existing, RelPath, STRIPES_SUFFIX, TEMP_SUFFIX};
use crate::xfer::file::options::ReceiverOptions;
use crate::xfer::file::proto::{self, listable, EntryKind, Listed, ListedKind, Msg, Names, Reason};
use crate::xfer::file::report::{FileReport, Progress, SessionReport};

/// Most directories a session remembers for deletion; LIST and DELETE in others are refused.
pub const MAX_SENT_DIRS: usize = 100_000;

/// The message of a LIST or DELETE refused for want of `recv --allow-delete`.
pub const NOT_ALLOWED: &str =
    "the receiver does not allow deleting: run recv with --allow-delete to let send --delete remove what the sender does not have";

/// The directories the sender of a session sent (see the module docs); clones share them.
#[derive(Clone, Debug, Default)]
pub(crate) struct SentDirs(Arc<Mutex<BTreeSet<String>>>);

impl SentDirs {
    /// Records the directory a HELLO of `name` names: its parent, or itself when `dir`.
    pub(super) fn record(&self, name: &str, dir: bool) {
        let Ok(rel) = sanitize(name) else {
            return;
        };
        let d = match (dir, rel.as_str().rsplit_once('/')) {
            (true, _) => rel.as_str(),
            (false, Some((parent, _))) => parent,
            (false, None) => return,
        };
        let mut set = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if set.len() < MAX_SENT_DIRS && !set.contains(d) {
            set.insert(d.to_string());
        }
    }

    /// Whether directory `d` was sent: recorded, or the parent of one recorded.
    fn sent(&self, d: &str) -> bool {
        let set = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let below = format!("{d}/");
        set.contains(d)
            || set
                .range(below.clone()..)
                .next()
                .is_some_and(|r| r.starts_with(&below))
    }
}

fn refused(reason: Reason, msg: String) -> Error {
    Error::refused(reason, msg)
}

fn io(op: String, e: Errno) -> Error {
    Error::io(op, e.into())
}

fn kind_of(t: FileType) -> ListedKind {
    match t {
        FileType::RegularFile => ListedKind::File,
        FileType::Directory => ListedKind::Dir,
        FileType::Symlink => ListedKind::Symlink,
        _ => ListedKind::Other,
    }
}

/// One of this receiver's temporary names.
fn reserved(name: &str) -> bool {
    name.ends_with(TEMP_SUFFIX) || name.ends_with(STRIPES_SUFFIX)
}

/// Opens directory `rel` below `out_dir`, never through a symlink; `None` if it is not there.
fn open_dir(out_dir: &Path, rel: &RelPath) -> Result<Option<OwnedFd>> {
    let (parent, missing) = walk_existing(out_dir, rel)?;
    if !missing.is_empty() {
        return Ok(None);
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(parent.fd(), rel.file_name(), flags, Mode::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(refused(
            Reason::BadName,
            format!(
                "{} is not a directory (a symlink is not followed): {}",
                rel,
                std::io::Error::from(e)
            ),
        )),
    }
}

/// The names in directory `dir` (below `out_dir`), sorted; none if it is not there.
pub fn list(out_dir: &Path, dir: &str) -> Result<Vec<Listed>> {
    let rel = sanitize(dir)?;
    let Some(fd) = open_dir(out_dir, &rel)? else {
        return Ok(Vec::new());
    };
    let read = |e| io(format!("read directory {}", out_dir.join(dir).display()), e);
    let mut out = Vec::new();
    for ent in rustix::fs::Dir::read_from(&fd).map_err(read)? {
        let ent = ent.map_err(read)?;
        let Ok(name) = ent.file_name().to_str() else {
            continue;
        };
        // A name the sender could not send back (a control character, …) is not listed.
        if !listable(name) || reserved(name) || sanitize(name).is_err() {
            continue;
        }
        let st = match rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => continue,
            Err(e) => return Err(io(format!("stat {}/{name}", rel), e)),
        };
        let kind = kind_of(FileType::from_raw_mode(st.st_mode));
        out.push(Listed {
            kind,
            name: name.to_string(),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Removes entry `name` (below `out_dir`; a directory with all it holds), never through a
/// symlink. Returns what it was, or `None` when it was not there.
pub fn delete(out_dir: &Path, name: &str) -> Result<Option<ListedKind>> {
    let rel = sanitize(name)?;
    let (parent, missing) = walk_existing(out_dir, &rel)?;
    if !missing.is_empty() {
        return Ok(None);
    }
    let leaf = rel.file_name();
    let st = match rustix::fs::statat(parent.fd(), leaf, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(io(format!("stat {rel}"), e)),
    };
    let kind = kind_of(FileType::from_raw_mode(st.st_mode));
    match kind {
        ListedKind::Dir => remove_tree(parent.fd(), leaf, &rel)?,
        _ => rustix::fs::unlinkat(parent.fd(), leaf, AtFlags::empty())
            .or_else(|e| if e == Errno::NOENT { Ok(()) } else { Err(e) })
            .map_err(|e| io(format!("remove {rel}"), e))?,
    }
    if let Err(e) = parent.sync() {
        tracing::debug!("after deleting {rel}: {e}");
    }
    Ok(Some(kind))
}

/// Removes directory `name` of `top` and everything in it, depth first, without recursion
/// (any depth) and without following a symlink (each level opened with `O_NOFOLLOW`).
fn remove_tree(top: BorrowedFd<'_>, name: &str, rel: &RelPath) -> Result<()> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let err = |what: &str, e: Errno| io(format!("{what} in {rel}"), e);
    let first = rustix::fs::openat(top, name, flags, Mode::empty()).map_err(|e| err("open", e))?;
    // Each directory open, with its name in the one before it (the first's in `top`).
    let top_name = std::ffi::CString::new(name).map_err(|_| err("open", Errno::INVAL))?;
    let mut stack: Vec<(OwnedFd, std::ffi::CString)> = vec![(first, top_name)];
    while let Some((fd, _)) = stack.last() {
        let mut sub = None;
        for ent in rustix::fs::Dir::read_from(fd).map_err(|e| err("read", e))? {
            let ent = ent.map_err(|e| err("read", e))?;
            let n = ent.file_name();
            if n.to_bytes() == b"." || n.to_bytes() == b".." {
                continue;
            }
            let st = match rustix::fs::statat(fd, n, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(err("stat", e)),
            };
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                sub = Some(n.to_owned());
                break;
            }
            match rustix::fs::unlinkat(fd, n, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(e) => return Err(err("remove", e)),
            }
        }
        if let Some(n) = sub {
            let child = rustix::fs::openat(fd, n.as_c_str(), flags, Mode::empty())
                .map_err(|e| err("open", e))?;
            stack.push((child, n));
            continue;
        }
        let (_, n) = stack.pop().expect("not empty");
        let parent = stack.last().map_or(top, |(fd, _)| fd.as_fd());
        remove_dir(parent, n.as_c_str()).map_err(|e| err("remove", e))?;
    }
    Ok(())
}

fn remove_dir(parent: BorrowedFd<'_>, name: &std::ffi::CStr) -> std::result::Result<(), Errno> {
    match rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(e),
    }
}

/// What a LIST or DELETE needs: the receiver's permission and, for `name`'s `dir`, a directory
/// sent in this session.
fn check(opts: &ReceiverOptions, dirs: &SentDirs, dir: Option<&str>, name: &str) -> Result<()> {
    if !opts.allow_delete {
        return Err(refused(Reason::NotAllowed, NOT_ALLOWED.into()));
    }
    let rel = sanitize(name)?;
    let inside = dir.is_none_or(|d| dirs.sent(d));
    let own = match dir {
        None => dirs.sent(rel.as_str()),
        Some(_) => !dirs.sent(rel.as_str()),
    };
    if !inside || !own {
        return Err(refused(
            Reason::BadName,
            format!("{rel} is not in a directory sent in this session: not deleted"),
        ));
    }
    Ok(())
}

/// Answers LIST of `dir`: its names in NAMES (the last one flagged), or REFUSE.
pub(super) async fn on_list<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
    ep: &mut L,
    opts: &ReceiverOptions,
    dirs: &SentDirs,
    budget: &mut Budget,
    report: &mut SessionReport,
    progress: &mut P,
    dir: &str,
) -> Result<()> {
    let names = match check(opts, dirs, None, dir).and_then(|()| list(&opts.out_dir, dir)) {
        Ok(names) => names,
        Err(e) => {
            let before = report.file_count();
            let r = refuse(ep, budget, report, dir, EntryKind::Dir, e).await;
            report.announce_since(before, progress);
            return r;
        }
    };
    let mut msg = Names::default();
    for l in names {
        if !msg.fits(l.name.len()) {
            send_msg(ep, &Msg::Names(std::mem::take(&mut msg))).await?;
        }
        msg.names.push(l);
    }
    msg.last = true;
    send_msg(ep, &Msg::Names(msg)).await
}

/// Answers DELETE of `name`: ACK once it is gone, or REFUSE.
pub(super) async fn on_delete<L: Link, P: FnMut(Progress<'_>) + ?Sized>(
    ep: &mut L,
    opts: &ReceiverOptions,
    dirs: &SentDirs,
    budget: &mut Budget,
    report: &mut SessionReport,
    progress: &mut P,
    name: &str,
) -> Result<()> {
    let parent = name.rsplit_once('/').map(|(p, _)| p).unwrap_or("");
    let r = check(opts, dirs, Some(parent), name).and_then(|()| delete(&opts.out_dir, name));
    let message = match r {
        Ok(Some(kind)) => {
            budget.progress(FILE_CREDIT);
            report.push_deleted(name, kind.as_str(), false, progress);
            "deleted"
        }
        Ok(None) => "not there",
        Err(e) => {
            let before = report.file_count();
            let r = refuse(ep, budget, report, name, EntryKind::File, e).await;
            report.announce_since(before, progress);
            return r;
        }
    };
    let ack = Msg::Ack {
        status: Reason::Ok,
        message: message.into(),
    };
    send_msg(ep, &ack).await
}

/// REFUSE for `name`, recorded as refused; an error only when the connection fails or the
/// session has spent its refusals.
async fn refuse<L: Link>(
    ep: &mut L,
    budget: &mut Budget,
    report: &mut SessionReport,
    name: &str,
    kind: EntryKind,
    e: Error,
) -> Result<()> {
    let reason = reason_of(&e);
    let message = proto::truncate_text(&detail(&e));
    tracing::debug!("refusing to list or delete {name:?}: {message}");
    report.push_refused(FileReport::failed(name, 0, reason, message.clone()).of_kind(kind));
    send_msg(ep, &Msg::Refuse { reason, message }).await?;
    budget.refused()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sent_dirs_cover_their_parents_only() {
        let d = SentDirs::default();
        d.record("tree/sub/f", false);
        d.record("tree/empty", true);
        d.record("top.txt", false);
        d.record("../x/y", false);
        for yes in ["tree", "tree/sub", "tree/empty"] {
            assert!(d.sent(yes), "{yes}");
        }
        for no in [
            "",
            "tree/sub/f",
            "tre",
            "tree-x",
            "top.txt",
            "..",
            "x",
            "tree/su",
        ] {
            assert!(!d.sent(no), "{no}");
        }
    }

    #[test]
    fn only_allowed_and_only_inside_the_directories_sent() {
        let d = SentDirs::default();
        d.record("tree/sub/f", false);
        let mut opts = ReceiverOptions::new("/nonexistent");
        let reason = |r: Result<()>| r.err().and_then(|e| e.reason());
        assert_eq!(
            reason(check(&opts, &d, None, "tree")),
            Some(Reason::NotAllowed)
        );
        opts.allow_delete = true;
        assert!(check(&opts, &d, None, "tree").is_ok());
        assert!(check(&opts, &d, None, "tree/sub").is_ok());
        assert!(check(&opts, &d, Some("tree"), "tree/x").is_ok());
        assert!(check(&opts, &d, Some("tree/sub"), "tree/sub/f").is_ok());
        for (dir, name) in [
            (None, "sibling"),
            (None, "tree/sub/f"),
            (None, "tree/../sibling"),
            (Some(""), "tree"),
            (Some("sibling"), "sibling/s.txt"),
            (Some("tree"), "tree/sub"),
        ] {
            let r = check(&opts, &d, dir, name);
            assert_eq!(reason(r), Some(Reason::BadName), "{dir:?} {name}");
        }
    }

    #[test]
    fn lists_and_deletes_inside_never_through_symlinks() {
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("out");
        let tree = out.join("tree");
        std::fs::create_dir_all(tree.join("deep/er/still")).unwrap();
        std::fs::create_dir_all(out.join("elsewhere")).unwrap();
        std::fs::write(out.join("elsewhere/keep"), b"k").unwrap();
        std::fs::write(tree.join("deep/er/still/f"), b"f").unwrap();
        std::fs::write(tree.join("deep/er/g"), b"g").unwrap();
        std::fs::write(tree.join(".x.rdmaxfer-part"), b"").unwrap();
        std::fs::write(tree.join("file"), b"x").unwrap();
        // A link out of the tree, inside the tree to be deleted too.
        std::os::unix::fs::symlink(out.join("elsewhere"), tree.join("link")).unwrap();
        std::os::unix::fs::symlink(out.join("elsewhere"), tree.join("deep/out")).unwrap();
        let names: Vec<(String, ListedKind)> = list(&out, "tree")
            .unwrap()
            .into_iter()
            .map(|l| (l.name, l.kind))
            .collect();
        assert_eq!(
            names,
            [
                ("deep".into(), ListedKind::Dir),
                ("file".into(), ListedKind::File),
                ("link".into(), ListedKind::Symlink)
            ]
        );
        assert!(
            list(&out, "tree/link").is_err(),
            "a symlink is not listed through"
        );
        assert!(list(&out, "tree/link/x").is_err());
        assert!(list(&out, "missing").unwrap().is_empty());
        assert_eq!(
            delete(&out, "tree/link").unwrap(),
            Some(ListedKind::Symlink)
        );
        assert_eq!(delete(&out, "tree/deep").unwrap(), Some(ListedKind::Dir));
        assert_eq!(delete(&out, "tree/deep").unwrap(), None);
        assert_eq!(delete(&out, "tree/file").unwrap(), Some(ListedKind::File));
        assert!(delete(&out, "../out/elsewhere").is_err());
        assert!(out.join("elsewhere/keep").exists(), "nothing outside went");
        let left: Vec<_> = std::fs::read_dir(&tree).unwrap().collect();
        assert_eq!(left.len(), 1, "only the temporary file is left");
    }
}
