//! `rdmaxfer_send_files` through the C example `send_files` (under valgrind): every send option
//! (every flag, chunk size, slots, verification, rate limit, exclusions and inclusions), the
//! per-file report, a dry run, and a progress callback that stops the transfer with nothing
//! half-committed.

use std::path::Path;

use crate::capi::{cli_recv, native, vg, vg_ok, T, TIMEOUT_MS};
use crate::common::{self, need_rxe0, pseudo_random, IP};

/// Every entry under `dir` (relative names, sorted), temporary files included.
fn everything(dir: &Path) -> Vec<String> {
    let mut v = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            v.push(p.strip_prefix(dir).unwrap().to_str().unwrap().to_string());
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
    v.sort();
    v
}

/// The `entry` lines of send_files' output for `name`.
fn entry<'a>(out: &'a str, name: &str) -> &'a str {
    let prefix = format!("entry {name} ");
    out.lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no entry line for {name}:\n{out}"))
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn c_send_files_with_options_reports_each_entry_and_a_dry_run_changes_nothing() {
    need_rxe0();
    let tmp = tempfile::tempdir().unwrap();
    let (src, out) = (tmp.path().join("src/t"), tmp.path().join("out"));
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::create_dir_all(out.join("t")).unwrap();
    let new = pseudo_random(200_000, 11);
    std::fs::write(src.join("same.txt"), b"the same on both sides").unwrap();
    std::fs::write(src.join("changed.txt"), b"the sender's version").unwrap();
    std::fs::write(src.join("new.bin"), &new).unwrap();
    std::fs::write(src.join("sub/new.txt"), b"new in a directory").unwrap();
    std::fs::write(src.join("junk.tmp"), b"excluded").unwrap();
    // The receiver has same.txt (same size and mtime) and an older changed.txt.
    std::fs::copy(src.join("same.txt"), out.join("t/same.txt")).unwrap();
    let mtime = std::fs::metadata(src.join("same.txt"))
        .unwrap()
        .modified()
        .unwrap();
    std::fs::File::options()
        .write(true)
        .open(out.join("t/same.txt"))
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    std::fs::write(out.join("t/changed.txt"), b"the receiver's old one").unwrap();
    let before = everything(&out);
    let o = out.to_str().unwrap();
    let t = src.to_str().unwrap();
    let opts = [
        "-k", "s3cret", "-T", TIMEOUT_MS, "-F", "-c", "65536", "-S", "8", "-V", "blake3", "-b",
        "50000000", "-x", "*.tmp", "-i", "sub/",
    ];

    // A dry run: what would happen, and nothing changes.
    let p = common::port().to_string();
    let r = cli_recv(o, &p, &["--force", "--token", "s3cret"]);
    let mut args = vec!["-p", p.as_str(), "-N"];
    args.extend_from_slice(&opts);
    args.extend([t, IP]);
    let s = native("send_files", &args).finish(T);
    s.ok("C send_files -N");
    assert!(
        entry(&s.out, "t/new.bin").contains(" would-send would send 200000"),
        "{}",
        s.out
    );
    assert!(
        entry(&s.out, "t/changed.txt").contains(" would-send "),
        "{}",
        s.out
    );
    assert!(
        entry(&s.out, "t/same.txt").contains(" skipped "),
        "{}",
        s.out
    );
    assert!(!s.out.contains("junk.tmp"), "excluded:\n{}", s.out);
    r.finish(T).ok("rdmaxfer recv (dry run)");
    assert_eq!(everything(&out), before, "a dry run wrote nothing");

    // The real run, under valgrind.
    let p = common::port().to_string();
    let r = cli_recv(o, &p, &["--force", "--token", "s3cret"]);
    let mut args = vec!["-p", p.as_str()];
    args.extend_from_slice(&opts);
    args.extend([t, IP]);
    let s = vg("send_files", &args).finish(T);
    vg_ok(&s, "C send_files");
    assert!(
        entry(&s.out, "t/same.txt").contains(" file skipped skipped "),
        "{}",
        s.out
    );
    assert!(
        entry(&s.out, "t/changed.txt").contains(" file delivered ok 20"),
        "{}",
        s.out
    );
    assert!(
        entry(&s.out, "t/new.bin").contains(" file delivered ok 200000"),
        "{}",
        s.out
    );
    assert!(
        entry(&s.out, "t/sub/new.txt").contains(" file delivered ok 18"),
        "{}",
        s.out
    );
    assert!(!s.out.contains("junk.tmp"), "excluded:\n{}", s.out);
    assert!(s.out.contains(" skipped, 0 failed, 0 planned"), "{}", s.out);
    // The skipped file leaves the progress total: done == total at the end.
    let last = s.out.lines().find(|l| l.starts_with("progress: ")).unwrap();
    let n = 200_000 + 20 + 18;
    assert!(
        s.out.contains("totals: 4 entries, 1 skipped, 0 failed"),
        "{}",
        s.out
    );
    assert!(last.ends_with(&format!("last {n} of {n}")), "{last}");
    r.finish(T).ok("rdmaxfer recv");
    assert_eq!(std::fs::read(out.join("t/new.bin")).unwrap(), new);
    assert_eq!(
        std::fs::read(out.join("t/changed.txt")).unwrap(),
        b"the sender's version"
    );
    assert!(!out.join("t/junk.tmp").exists());
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn c_send_files_stopped_by_its_progress_callback_commits_nothing_half_sent() {
    need_rxe0();
    let tmp = tempfile::tempdir().unwrap();
    let (src, out) = (tmp.path().join("src"), tmp.path().join("out"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(src.join("a.txt"), b"small, sent first").unwrap();
    std::fs::write(src.join("b.bin"), pseudo_random(4 << 20, 12)).unwrap();
    let p = common::port().to_string();
    let r = cli_recv(out.to_str().unwrap(), &p, &[]);
    // 4 MiB at 1 MB/s: the callback stops it once 1 MiB has gone out.
    let s = vg(
        "send_files",
        &[
            "-p",
            &p,
            "-T",
            TIMEOUT_MS,
            "-b",
            "1000000",
            "-A",
            "1048576",
            src.to_str().unwrap(),
            IP,
        ],
    )
    .finish(T);
    assert_eq!(s.status.code(), Some(3), "aborted:\n{}\n{}", s.out, s.err);
    assert!(s.out.contains("aborted"), "{}", s.out);
    assert!(s.err.contains("stopped by the caller"), "{}", s.err);
    assert!(entry(&s.out, "src/b.bin").contains(" failed "), "{}", s.out);
    let d = r.finish(T);
    d.failed("rdmaxfer recv of a stopped transfer");
    assert_eq!(
        everything(&out),
        ["src", "src/a.txt"],
        "only what was verified whole is committed"
    );
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn c_send_files_update_copy_links_delete_then_ignore_existing_checksum_resume() {
    need_rxe0();
    let tmp = tempfile::tempdir().unwrap();
    let (src, out) = (tmp.path().join("src/u"), tmp.path().join("out"));
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::create_dir_all(out.join("u")).unwrap();
    std::fs::write(src.join("a.txt"), b"the sender's newer a").unwrap();
    std::os::unix::fs::symlink("a.txt", src.join("link")).unwrap();
    std::fs::write(src.join("sub/b.txt"), b"b").unwrap();
    // The receiver has an older a.txt, and old.txt that the source does not have.
    std::fs::write(out.join("u/a.txt"), b"old a").unwrap();
    let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
    std::fs::File::options()
        .write(true)
        .open(out.join("u/a.txt"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    std::fs::write(out.join("u/old.txt"), b"not in the source").unwrap();
    let (o, t) = (out.to_str().unwrap(), src.to_str().unwrap());

    // --update (a.txt is older there), --copy-links (the link goes as a file), --delete.
    let p = common::port().to_string();
    let r = cli_recv(o, &p, &["--force", "--allow-delete"]);
    let s = vg(
        "send_files",
        &["-p", &p, "-T", TIMEOUT_MS, "-U", "-L", "-X", t, IP],
    )
    .finish(T);
    vg_ok(&s, "C send_files -U -L -X");
    assert!(
        entry(&s.out, "u/a.txt").contains(" file delivered ok 20"),
        "{}",
        s.out
    );
    assert!(
        entry(&s.out, "u/link").contains(" file delivered ok 20"),
        "{}",
        s.out
    );
    assert!(
        entry(&s.out, "u/sub/b.txt").contains(" file delivered ok 1"),
        "{}",
        s.out
    );
    assert!(
        s.out.contains(" 0 failed, 0 planned, 1 deleted"),
        "{}",
        s.out
    );
    r.finish(T).ok("rdmaxfer recv");
    assert_eq!(
        std::fs::read(out.join("u/a.txt")).unwrap(),
        b"the sender's newer a"
    );
    let link = std::fs::symlink_metadata(out.join("u/link")).unwrap();
    assert!(link.is_file(), "copied as a file: {link:?}");
    assert!(!out.join("u/old.txt").exists(), "deleted");
    let before = everything(&out);

    // --ignore-existing with --checksum and --resume: everything is there, so nothing moves.
    let p = common::port().to_string();
    let r = cli_recv(o, &p, &["--force", "--resume"]);
    let s = native(
        "send_files",
        &["-p", &p, "-T", TIMEOUT_MS, "-I", "-K", "-R", t, IP],
    )
    .finish(T);
    s.ok("C send_files -I -K -R");
    for name in ["u/a.txt", "u/link", "u/sub/b.txt"] {
        assert!(
            entry(&s.out, name).contains(" skipped skipped "),
            "{}",
            s.out
        );
    }
    assert!(
        s.out.contains("totals: 3 entries, 3 skipped, 0 failed"),
        "{}",
        s.out
    );
    assert!(s.out.contains(" 0 bytes\n"), "{}", s.out);
    r.finish(T).ok("rdmaxfer recv");
    assert_eq!(everything(&out), before, "nothing changed");
}

/// `rdmaxfer send` → C file_recv with `-M 1000` (`rdmaxfer_recv_options_set_max_size`): the
/// file over the limit is refused and named in the report, the others arrive.
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn c_receiver_options_refuse_a_file_over_its_max_size_and_report_it() {
    need_rxe0();
    let p = common::port().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let (src, out) = (tmp.path().join("src/m"), tmp.path().join("out"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(src.join("big.bin"), pseudo_random(300_000, 13)).unwrap();
    std::fs::write(src.join("small.txt"), b"under the limit").unwrap();
    let o = out.to_str().unwrap();
    let mut r = native(
        "file_recv",
        &[
            "-l", IP, "-p", &p, "-T", TIMEOUT_MS, "-M", "1000", "-V", "xxh3", o,
        ],
    );
    r.wait_for("listening on", T);
    let s = crate::common::spawn(
        "send",
        &["send", src.to_str().unwrap(), &format!("{IP}:{p}")],
    )
    .finish(T);
    assert_eq!(s.status.code(), Some(23), "partial:\n{}\n{}", s.out, s.err);
    let rd = r.finish(T);
    assert_eq!(rd.status.code(), Some(1), "{}\n{}", rd.out, rd.err);
    assert!(rd.out.contains("entry m/big.bin too large: "), "{}", rd.out);
    assert!(rd.err.contains("rdmaxfer_recv_files"), "{}", rd.err);
    assert_eq!(everything(&out), ["m", "m/small.txt"]);
}
