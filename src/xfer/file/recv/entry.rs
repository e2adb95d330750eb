//! The receiver's side of entries other than file data, independent of RDMA: what already
//! exists under a name (for `policy::decide`), directory and symlink entries, and the rule
//! that keeps a received symlink inside the output directory.

use std::path::Path;

use rustix::fs::FileType;

use super::policy::{self, Decision, Existing};
use crate::xfer::file::names::{self, RelPath};
use crate::xfer::file::proto::{EntryKind, Hello, Reason, SkipWhy};
use crate::{Error, Result};

/// What became of a directory or symlink entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Created (or replaced).
    Made,
    /// Nothing to do.
    Skipped(SkipWhy, String),
}

/// A refusal as `exists`; the report names the entry, the text says why.
fn exists(what: impl std::fmt::Display) -> Error {
    Error::refused(Reason::Exists, what.to_string())
}

// The `stat` field types differ between architectures.
#[allow(clippy::unnecessary_cast)]
fn mtime_of(st: &rustix::fs::Stat) -> (i64, i64) {
    (st.st_mtime as i64, st.st_mtime_nsec as i64)
}

fn newer(st: &rustix::fs::Stat, h: &Hello) -> bool {
    mtime_of(st) > (h.mtime_sec, i64::from(h.mtime_nsec))
}

/// Refuses a symlink target that could resolve outside the output directory: an absolute or
/// empty target, a `..` after a name (`a/../..`: what `a` is decides where that leads), or more
/// leading `..` than the link's directory is deep. With only leading `..` that stay inside and
/// then names, and every directory on the receiver reached without following symlinks, a
/// received link ends inside the output directory (a name on the way that is itself a received
/// link obeys the same rule).
pub fn check_link_target(rel: &RelPath, target: &str) -> Result<()> {
    let unsafe_link = |why: &str| {
        Error::refused(
            Reason::UnsafeLink,
            format!("-> {}: {why}", names::printable(target)),
        )
    };
    if target.is_empty() {
        return Err(unsafe_link("empty symlink target"));
    }
    if target.starts_with('/') {
        return Err(unsafe_link(
            "absolute symlink target: it would point outside --out",
        ));
    }
    if target.contains('\0') {
        return Err(unsafe_link("symlink target contains NUL"));
    }
    let mut depth = rel.parents().count();
    let mut named = false;
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." if named => {
                return Err(unsafe_link(
                    "'..' after a name in a symlink target is not accepted",
                ))
            }
            ".." => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| unsafe_link("symlink target would resolve outside --out"))?;
            }
            _ => named = true,
        }
    }
    Ok(())
}

/// What exists under `rel` when a file is offered by `h`: `None` if nothing; a directory is
/// refused. A regular file is the same when size and mtime match, or with `h.checksum` when
/// size and BLAKE3 match; anything else there (a symlink, a special file) differs.
pub fn inspect_file(out_dir: &Path, rel: &RelPath, h: &Hello) -> Result<Option<Existing>> {
    inspect_file_in(&mut names::DirCache::default(), out_dir, rel, h)
}

/// [`inspect_file`], walking through `dirs`.
pub fn inspect_file_in(
    dirs: &mut names::DirCache,
    out_dir: &Path,
    rel: &RelPath,
    h: &Hello,
) -> Result<Option<Existing>> {
    dirs.visit(out_dir, rel, |dir, missing| match missing.is_empty() {
        true => inspect_in(dir, rel, h),
        false => Ok(None),
    })?
}

/// [`inspect_file`] in `rel`'s directory `dir`.
fn inspect_in(dir: &names::ConfinedDir, rel: &RelPath, h: &Hello) -> Result<Option<Existing>> {
    let name = rel.file_name();
    let Some(st) = dir.stat(name) else {
        return Ok(None);
    };
    let kind = FileType::from_raw_mode(st.st_mode);
    if kind == FileType::Directory {
        return Err(exists("exists and is a directory"));
    }
    let newer = newer(&st, h);
    if kind != FileType::RegularFile || st.st_size as u64 != h.size {
        return Ok(Some(Existing { same: false, newer }));
    }
    let same = match &h.checksum {
        None => mtime_of(&st) == (h.mtime_sec, i64::from(h.mtime_nsec)),
        Some(want) => {
            let mut f = dir.open_read(name)?;
            let mut hasher = blake3::Hasher::new();
            std::io::copy(&mut f, &mut hasher)
                .map_err(|e| Error::io(format!("read {rel} to compare checksums"), e))?;
            hasher.finalize() == blake3::Hash::from(*want)
        }
    };
    Ok(Some(Existing { same, newer }))
}

/// The policy's verdict as a result: a refusal is an error ([`Reason::Exists`]).
pub fn decide(existing: Option<Existing>, h: &Hello, allow: bool) -> Result<Decision> {
    match policy::decide(existing, &h.flags, allow) {
        Decision::Refuse(why) => Err(exists(why)),
        d => Ok(d),
    }
}

/// What is under a directory entry's name: its deepest existing parent and the names missing
/// below it, or `None` when a directory is there already; anything else there is refused.
fn look_dir<'r>(
    out_dir: &Path,
    rel: &'r RelPath,
) -> Result<Option<(names::ConfinedDir, Vec<&'r str>)>> {
    let (dir, missing) = names::walk_existing(out_dir, rel)?;
    if missing.is_empty() {
        match dir
            .stat(rel.file_name())
            .map(|st| FileType::from_raw_mode(st.st_mode))
        {
            Some(FileType::Directory) => return Ok(None),
            Some(_) => return Err(exists("exists and is not a directory")),
            None => {}
        }
    }
    Ok(Some((dir, missing)))
}

/// Receives a directory entry: creates it (and missing parents, mode 0755) below `out_dir`;
/// an existing directory is skipped as identical, anything else there is refused.
pub fn receive_dir(out_dir: &Path, rel: &RelPath) -> Result<Outcome> {
    let Some((dir, mut missing)) = look_dir(out_dir, rel)? else {
        return Ok(Outcome::Skipped(
            SkipWhy::Identical,
            "directory exists".into(),
        ));
    };
    missing.push(rel.file_name());
    names::create_dirs(dir, rel, &missing)?;
    Ok(Outcome::Made)
}

/// What is under a symlink entry's name (its target checked by [`check_link_target`]): its
/// deepest existing parent, the names missing below it, and the policy's verdict.
fn look_symlink<'r>(
    out_dir: &Path,
    rel: &'r RelPath,
    h: &Hello,
    allow: bool,
) -> Result<(names::ConfinedDir, Vec<&'r str>, Decision)> {
    check_link_target(rel, &h.target)?;
    let (dir, missing) = names::walk_existing(out_dir, rel)?;
    let name = rel.file_name();
    let existing = if missing.is_empty() {
        dir.stat(name)
            .map(|st| match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => Err(exists("exists and is a directory")),
                FileType::Symlink => Ok(Existing {
                    same: dir.read_link(name).as_deref() == Some(h.target.as_str()),
                    newer: newer(&st, h),
                }),
                _ => Ok(Existing {
                    same: false,
                    newer: newer(&st, h),
                }),
            })
            .transpose()?
    } else {
        None
    };
    let d = decide(existing, h, allow)?;
    Ok((dir, missing, d))
}

/// What receiving a directory or symlink entry would do, changing nothing (`send --dry-run`):
/// write it (over what is there if `replace`), skip it, or an error for a refusal.
pub fn plan_entry(out_dir: &Path, rel: &RelPath, h: &Hello, allow: bool) -> Result<Decision> {
    match h.kind {
        EntryKind::Dir => Ok(match look_dir(out_dir, rel)? {
            None => Decision::Skip(SkipWhy::Identical, "directory exists".into()),
            Some(_) => Decision::Write { replace: false },
        }),
        EntryKind::Symlink => look_symlink(out_dir, rel, h, allow).map(|(_, _, d)| d),
        EntryKind::File => Err(Error::Protocol("plan_entry of a file".into())),
    }
}

/// Receives a symlink entry (`h.target`, checked by [`check_link_target`]): an existing link
/// with the same target is skipped; anything else there goes through the policy (a directory
/// is refused). The link is made under the temporary name and renamed into place.
pub fn receive_symlink(out_dir: &Path, rel: &RelPath, h: &Hello, allow: bool) -> Result<Outcome> {
    let (dir, missing, d) = look_symlink(out_dir, rel, h, allow)?;
    let name = rel.file_name();
    let replace = match d {
        Decision::Skip(why, msg) => return Ok(Outcome::Skipped(why, msg)),
        Decision::Write { replace } => replace,
        Decision::Refuse(_) => unreachable!("decide returns refusals as errors"),
    };
    let (dir, created) = names::create_dirs(dir, rel, &missing)?;
    let temp = rel.temp_name();
    let made = dir
        .remove(&temp)
        .and_then(|()| dir.symlink(&h.target, &temp))
        .and_then(|()| dir.rename(&temp, name, replace))
        .and_then(|()| dir.sync());
    if let Err(e) = made {
        let _ = dir.remove(&temp);
        dir.remove_created(&created);
        return Err(e);
    }
    Ok(Outcome::Made)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xfer::file::names::sanitize;
    use crate::xfer::file::proto::{EntryKind, HelloFlags};

    fn rel(s: &str) -> RelPath {
        sanitize(s).unwrap()
    }

    fn link(name: &str, target: &str, flags: HelloFlags) -> Hello {
        Hello {
            kind: EntryKind::Symlink,
            name: name.into(),
            target: target.into(),
            flags,
            ..Hello::default()
        }
    }

    #[test]
    fn link_targets_inside_accepted_outside_refused() {
        for (name, target) in [
            ("l", "f"),
            ("l", "./a/b"),
            ("d/l", "../f"),
            ("d/e/l", "../../f"),
            ("d/e/l", "../x/../"),
        ] {
            let r = check_link_target(&rel(name), target);
            if target == "../x/../" {
                assert!(r.is_err(), "{name} -> {target}");
            } else {
                r.unwrap_or_else(|e| panic!("{name} -> {target}: {e}"));
            }
        }
        for (name, target, why) in [
            ("l", "/etc/passwd", "absolute"),
            ("l", "..", "outside"),
            ("l", "../x", "outside"),
            ("d/l", "../../x", "outside"),
            ("d/l", "a/../../x", "after a name"),
            ("l", "", "empty"),
        ] {
            let e = check_link_target(&rel(name), target).unwrap_err();
            assert_eq!(e.reason(), Some(Reason::UnsafeLink), "{e}");
            assert!(e.to_string().contains(why), "{name} -> {target}: {e}");
        }
    }

    #[test]
    fn directories_made_once_then_skipped() {
        let out = tempfile::tempdir().unwrap();
        assert_eq!(
            receive_dir(out.path(), &rel("a/b/empty")).unwrap(),
            Outcome::Made
        );
        assert!(out.path().join("a/b/empty").is_dir());
        assert!(matches!(
            receive_dir(out.path(), &rel("a/b/empty")).unwrap(),
            Outcome::Skipped(SkipWhy::Identical, _)
        ));
        std::fs::write(out.path().join("f"), b"x").unwrap();
        let e = receive_dir(out.path(), &rel("f")).unwrap_err();
        assert_eq!(e.reason(), Some(Reason::Exists), "{e}");
    }

    #[test]
    fn symlinks_made_skipped_refused_and_replaced_by_policy() {
        let out = tempfile::tempdir().unwrap();
        let none = HelloFlags::default();
        let h = link("d/l", "../t", none);
        assert_eq!(
            receive_symlink(out.path(), &rel("d/l"), &h, false).unwrap(),
            Outcome::Made
        );
        let p = out.path().join("d/l");
        assert_eq!(std::fs::read_link(&p).unwrap(), Path::new("../t"));
        assert!(matches!(
            receive_symlink(out.path(), &rel("d/l"), &h, false).unwrap(),
            Outcome::Skipped(SkipWhy::Identical, _)
        ));
        let other = link("d/l", "../u", none);
        let e = receive_symlink(out.path(), &rel("d/l"), &other, true).unwrap_err();
        assert!(e.to_string().contains("send --force"), "{e}");
        let force = HelloFlags {
            force: true,
            ..none
        };
        let other = link("d/l", "../u", force);
        let e = receive_symlink(out.path(), &rel("d/l"), &other, false).unwrap_err();
        assert!(e.to_string().contains("recv with --force"), "{e}");
        receive_symlink(out.path(), &rel("d/l"), &other, true).unwrap();
        assert_eq!(std::fs::read_link(&p).unwrap(), Path::new("../u"));
        let bad = link("x", "../../etc", none);
        let e = receive_symlink(out.path(), &rel("x"), &bad, true).unwrap_err();
        assert_eq!(e.reason(), Some(Reason::UnsafeLink));
        assert!(
            !out.path().join("x").exists()
                && std::fs::symlink_metadata(out.path().join("x")).is_err()
        );
        let names: Vec<_> = std::fs::read_dir(out.path().join("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["l"], "no temporary link left");
    }

    #[test]
    fn existing_files_compared_by_size_and_mtime_or_checksum() {
        let out = tempfile::tempdir().unwrap();
        let p = out.path().join("f");
        std::fs::write(&p, b"abc").unwrap();
        let t = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::new(1_000_000, 5);
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(t)
            .unwrap();
        let mut h = Hello {
            name: "f".into(),
            size: 3,
            mtime_sec: 1_000_000,
            mtime_nsec: 5,
            ..Hello::default()
        };
        let f = rel("f");
        assert_eq!(
            inspect_file(out.path(), &f, &h).unwrap(),
            Some(Existing {
                same: true,
                newer: false
            })
        );
        h.mtime_nsec = 4;
        assert_eq!(
            inspect_file(out.path(), &f, &h).unwrap(),
            Some(Existing {
                same: false,
                newer: true
            })
        );
        h.checksum = Some(*blake3::hash(b"abc").as_bytes());
        assert!(inspect_file(out.path(), &f, &h).unwrap().unwrap().same);
        h.checksum = Some(*blake3::hash(b"abd").as_bytes());
        assert!(!inspect_file(out.path(), &f, &h).unwrap().unwrap().same);
        h.size = 4;
        h.checksum = None;
        h.mtime_nsec = 5;
        assert!(!inspect_file(out.path(), &f, &h).unwrap().unwrap().same);
        assert_eq!(inspect_file(out.path(), &rel("g"), &h).unwrap(), None);
        assert_eq!(inspect_file(out.path(), &rel("no/g"), &h).unwrap(), None);
        std::fs::create_dir(out.path().join("d")).unwrap();
        let e = inspect_file(out.path(), &rel("d"), &h).unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
    }
}
