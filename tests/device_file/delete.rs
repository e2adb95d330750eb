//! Device tests (rxe0, in the guest) of `send --delete` and `recv --allow-delete`: what the
//! receiver has and the sender does not is deleted inside the directories sent, only where the
//! receiver allows it, never outside the sent tree, never a name the sender's --exclude
//! excludes, not at all in a dry run, and not in a directory where an entry failed.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use crate::common::{self, dirs, need_rxe0, recv, send, send_args, spawn};

const T: Duration = Duration::from_secs(120);

/// Every entry below `root` (relative names; directories end in `/`, symlinks in `@`).
fn state(root: &Path) -> BTreeSet<String> {
    common::entries(root)
        .into_iter()
        .map(|(rel, _, m)| match () {
            () if m.is_dir() => format!("{rel}/"),
            () if m.file_type().is_symlink() => format!("{rel}@"),
            () => rel,
        })
        .collect()
}

fn deleted(j: &serde_json::Value) -> BTreeSet<String> {
    let names = j["deleted"].as_array().unwrap_or_else(|| panic!("{j}"));
    names
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

/// Extras on the receiver: a file, a directory with contents, a symlink (to a directory
/// outside the sent tree) inside it; an excluded name; and a sibling outside the sent tree.
fn add_extras(out: &Path) {
    std::fs::write(out.join("tree/extra.txt"), b"extra").unwrap();
    std::fs::create_dir_all(out.join("tree/olddir/deeper")).unwrap();
    std::fs::write(out.join("tree/olddir/deeper/x"), b"x").unwrap();
    std::os::unix::fs::symlink("../../sibling", out.join("tree/sub/oldlink")).unwrap();
    std::fs::write(out.join("tree/cache.o"), b"excluded").unwrap();
    std::fs::create_dir_all(out.join("sibling")).unwrap();
    std::fs::write(out.join("sibling/s.txt"), b"outside").unwrap();
    std::fs::write(out.join("top.txt"), b"top").unwrap();
}

const EXTRAS: [&str; 3] = ["tree/extra.txt", "tree/olddir", "tree/sub/oldlink"];
const KEPT: [&str; 4] = ["tree/cache.o", "sibling/s.txt", "top.txt", "tree/a.txt"];

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn delete_removes_extras_inside_the_sent_tree_only_where_allowed() {
    need_rxe0();
    let (_tmp, src, out) = dirs();
    let root = src.join("tree");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("a.txt"), b"a").unwrap();
    std::fs::write(root.join("sub/b.txt"), b"b").unwrap();
    std::fs::write(root.join("local.o"), b"not sent").unwrap();
    let ex = ["--exclude", "*.o"];
    let (p1, p2) = (common::port(), common::port());

    // (1) A receiver without --allow-delete: the files arrive, nothing is deleted, exit 23.
    let r1 = recv(p1, &out, &[]);
    send(p1, &[&root], &ex).finish(T).ok("the first send");
    add_extras(&out);
    std::fs::write(root.join("new.txt"), b"new").unwrap();
    let before = state(&out);
    let d = send(p1, &[&root], &[&ex[..], &["--delete"]].concat()).finish(T);
    assert_eq!(d.status.code(), Some(23), "{}\n{}", d.out, d.err);
    let j = d.one_json();
    assert_eq!(j["files_deleted"], 0, "{j}");
    let refused = j["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "tree");
    let refused = refused.unwrap_or_else(|| panic!("no refusal of tree: {j}"));
    assert_eq!(refused["result"], "not allowed", "{j}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("run recv with --allow-delete"),
        "{j}"
    );
    assert_eq!(std::fs::read(out.join("tree/new.txt")).unwrap(), b"new");
    let mut want = before.clone();
    want.insert("tree/new.txt".into());
    assert_eq!(state(&out), want, "nothing deleted without --allow-delete");
    drop(r1);

    // (3) A dry run says what would be deleted, and deletes (and writes) nothing.
    let r2 = recv(p2, &out, &["--allow-delete"]);
    std::fs::write(root.join("newer.txt"), b"newer").unwrap();
    let before = state(&out);
    let d = send(
        p2,
        &[&root],
        &[&ex[..], &["--delete", "--dry-run"]].concat(),
    )
    .finish(T);
    d.ok("send --delete --dry-run");
    let j = d.one_json();
    assert_eq!(j["files_deleted"], 3, "{j}");
    assert_eq!(deleted(&j), EXTRAS.map(String::from).into(), "{j}");
    let mut args = send_args(p2, &[&root], &[&ex[..], &["--delete", "-n"]].concat());
    args.retain(|a| a != "--json");
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let d = spawn("send", &a).finish(T);
    d.ok("send --delete -n (text)");
    for line in [
        "would delete tree/extra.txt",
        "would delete tree/olddir/",
        "would delete tree/sub/oldlink",
    ] {
        assert!(d.out.contains(line), "{line}: {}", d.out);
    }
    assert!(!d.out.contains("deleting "), "{}", d.out);
    assert_eq!(state(&out), before, "a dry run changes nothing");

    // (2) Allowed: the extras go, a symlink without what it points to; the excluded name,
    // the sibling outside the sent tree and the top-level file stay.
    let d = send(p2, &[&root], &[&ex[..], &["--delete"]].concat()).finish(T);
    d.ok("send --delete");
    let j = d.one_json();
    assert_eq!(j["files_deleted"], 3, "{j}");
    assert_eq!(deleted(&j), EXTRAS.map(String::from).into(), "{j}");
    for gone in EXTRAS {
        assert!(
            std::fs::symlink_metadata(out.join(gone)).is_err(),
            "{gone} left"
        );
    }
    for kept in KEPT {
        assert!(out.join(kept).exists(), "{kept} deleted");
    }
    assert_eq!(std::fs::read(out.join("tree/newer.txt")).unwrap(), b"newer");
    assert!(!out.join("tree/local.o").exists(), "excluded, not sent");

    // (4) A re-run deletes nothing and exits 0 (the text says nothing about deleting).
    let d = send(p2, &[&root], &[&ex[..], &["--delete"]].concat()).finish(T);
    d.ok("the re-run");
    assert_eq!(d.one_json()["files_deleted"], 0);

    // Over two streams, stream 0 deletes after the others have finished.
    std::fs::write(out.join("tree/sub/late.txt"), b"late").unwrap();
    std::fs::write(root.join("big.bin"), vec![7u8; 9 << 20]).unwrap();
    let d = send(
        p2,
        &[&root],
        &[&ex[..], &["--delete", "--streams", "2"]].concat(),
    )
    .finish(T);
    d.ok("send --delete --streams 2");
    let j = d.one_json();
    assert_eq!(deleted(&j), ["tree/sub/late.txt".to_string()].into(), "{j}");
    assert!(out.join("tree/big.bin").exists() && !out.join("tree/sub/late.txt").exists());

    // A directory where an entry failed is not cleaned (nor the ones above it); others are.
    std::fs::create_dir_all(root.join("d2")).unwrap();
    std::fs::write(root.join("d2/c.txt"), b"c").unwrap();
    send(p2, &[&root], &ex).finish(T).ok("sending d2");
    std::fs::write(
        root.join("sub/b.txt"),
        b"changed, and refused without --force",
    )
    .unwrap();
    std::fs::write(out.join("tree/sub/stays.txt"), b"s").unwrap();
    std::fs::write(out.join("tree/d2/goes.txt"), b"g").unwrap();
    let d = send(p2, &[&root], &[&ex[..], &["--delete"]].concat()).finish(T);
    assert_eq!(d.status.code(), Some(23), "{}\n{}", d.out, d.err);
    let j = d.one_json();
    assert_eq!(deleted(&j), ["tree/d2/goes.txt".to_string()].into(), "{j}");
    assert_eq!(j["delete_skipped"], 2, "tree and tree/sub: {j}");
    assert!(out.join("tree/sub/stays.txt").exists());
    drop(r2);
}
