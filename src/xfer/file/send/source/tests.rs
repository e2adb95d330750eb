use super::*;
use std::os::unix::fs::symlink;

fn names(v: &[SourceEntry]) -> Vec<&str> {
    v.iter().map(|e| e.name.as_str()).collect()
}

#[test]
fn walk_lists_tree_sorted_with_links_empty_dirs_and_skipped_specials() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("top");
    std::fs::create_dir_all(root.join("b/c")).unwrap();
    std::fs::create_dir_all(root.join("empty")).unwrap();
    std::fs::write(root.join("z.txt"), b"z").unwrap();
    std::fs::write(root.join("b/c/deep"), b"d").unwrap();
    std::fs::write(root.join("a"), b"a").unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"s").unwrap();
    symlink(outside.path(), root.join("link_dir")).unwrap();
    symlink(outside.path().join("secret"), root.join("link_file")).unwrap();
    let _sock = std::os::unix::net::UnixListener::bind(root.join("sock")).unwrap();
    let single = t.path().join("single");
    std::fs::write(&single, b"1").unwrap();
    let v = walk(&[root.clone(), single.clone()]).unwrap();
    assert_eq!(
        names(&v),
        [
            "single",
            "top/a",
            "top/b/c/deep",
            "top/empty",
            "top/link_dir",
            "top/link_file",
            "top/sock",
            "top/z.txt"
        ]
    );
    assert_eq!(v[2].path, root.join("b/c/deep"));
    assert_eq!(v[2].kind, SourceKind::File);
    // A file is listed with its size, mode and mtime (one stat); other kinds without.
    let deep = std::fs::metadata(root.join("b/c/deep")).unwrap();
    assert_eq!(v[2].listed, Some(Listed::of(&deep)));
    assert_eq!(v[2].listed.unwrap().size, 1);
    assert_eq!(v[3].kind, SourceKind::Dir);
    assert_eq!(v[3].listed, None);
    let secret = outside.path().join("secret");
    assert_eq!(
        v[5].kind,
        SourceKind::Symlink(secret.to_str().unwrap().into())
    );
    assert!(
        matches!(&v[6].kind, SourceKind::Skipped(why) if why.contains("socket")),
        "{v:?}"
    );

    // --copy-links: what the links point to; a loop and a dangling link are skipped.
    symlink(&root, root.join("b/loop")).unwrap();
    symlink(t.path().join("nowhere"), root.join("dangling")).unwrap();
    let v = walk_with(
        std::slice::from_ref(&root),
        WalkOptions {
            copy_links: true,
            ..WalkOptions::default()
        },
    )
    .unwrap();
    let kinds: Vec<(&str, &SourceKind)> =
        v.iter().map(|e| (e.name.as_str(), &e.kind)).collect();
    assert!(
        kinds.contains(&("top/link_dir/secret", &SourceKind::File)),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&("top/link_file", &SourceKind::File)),
        "{kinds:?}"
    );
    assert!(
        v.iter().any(|e| e.name.as_str() == "top/b/loop"
            && matches!(&e.kind, SourceKind::Skipped(w) if w.contains("loop"))),
        "{kinds:?}"
    );
    assert!(
        v.iter().any(|e| e.name.as_str() == "top/dangling"
            && matches!(&e.kind, SourceKind::Skipped(w) if w.contains("cannot be followed"))),
        "{kinds:?}"
    );

    // An empty root directory is sent as a directory.
    std::fs::create_dir(t.path().join("bare")).unwrap();
    let v = walk(&[t.path().join("bare")]).unwrap();
    assert_eq!(names(&v), ["bare"]);
    assert_eq!(v[0].kind, SourceKind::Dir);
}

#[test]
fn walk_refuses_duplicates_and_unsendable_names() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("x")).unwrap();
    std::fs::create_dir_all(t.path().join("y")).unwrap();
    std::fs::write(t.path().join("x/f"), b"").unwrap();
    std::fs::write(t.path().join("y/f"), b"").unwrap();
    let e = walk(&[t.path().join("x/f"), t.path().join("y/f")]).unwrap_err();
    assert!(e.to_string().contains("both be sent as f"), "{e}");
    // A root whose own name cannot be sent is refused up front.
    std::fs::write(t.path().join("x/back\\slash"), b"").unwrap();
    let e = walk(&[t.path().join("x/back\\slash")]).unwrap_err();
    assert!(e.to_string().contains("backslash"), "{e}");
    assert!(walk(&[t.path().join("missing")]).is_err());
}

#[test]
fn one_odd_name_never_stops_a_tree() {
    use std::os::unix::ffi::OsStrExt as _;
    let t = tempfile::tempdir().unwrap();
    let x = t.path().join("x");
    std::fs::create_dir_all(x.join("sub")).unwrap();
    std::fs::write(x.join("ok.txt"), b"ok").unwrap();
    std::fs::write(x.join("back\\slash"), b"").unwrap();
    std::fs::write(x.join("new\nline"), b"").unwrap();
    let raw = std::ffi::OsStr::from_bytes(b"caf\xe9.txt");
    std::fs::write(x.join("sub").join(raw), b"latin-1").unwrap();
    let v = walk(std::slice::from_ref(&x)).unwrap();
    let sendable: Vec<&str> = v
        .iter()
        .filter(|e| !matches!(e.kind, SourceKind::Unsendable { .. }))
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(sendable, ["x/ok.txt"], "{v:?}");
    let mut shown: Vec<(&str, &str)> = v
        .iter()
        .filter_map(|e| match &e.kind {
            SourceKind::Unsendable { shown, why } => Some((shown.as_str(), why.as_str())),
            _ => None,
        })
        .collect();
    shown.sort();
    assert_eq!(shown.len(), 3, "{v:?}");
    assert_eq!(shown[0].0, "x/back\\slash");
    assert!(shown[0].1.contains("backslash"), "{shown:?}");
    assert_eq!(shown[1].0, "x/new\\u{a}line");
    assert_eq!(shown[2].0, "x/sub/caf\\xe9.txt");
    assert!(shown[2].1.contains("not UTF-8"), "{shown:?}");
    // The stand-in names are sendable names of their own, never a real entry's.
    for e in &v {
        assert!(sanitize(e.name.as_str()).is_ok());
    }
}

#[test]
fn excluded_entries_are_not_listed_and_excluded_directories_not_entered() {
    let t = tempfile::tempdir().unwrap();
    let x = t.path().join("x");
    for f in ["a.c", "b.o", "keep.o", "cache/big", "sub/c.o", "sub/d.c"] {
        let p = x.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b"").unwrap();
    }
    // Unreadable below an excluded directory: it is never entered.
    std::fs::write(x.join("cache").join("bad\\name"), b"").unwrap();
    let mut filter = Filter::new();
    filter.include("keep.o").unwrap();
    filter.exclude("*.o").unwrap();
    filter.exclude("cache/").unwrap();
    let opts = WalkOptions {
        filter,
        ..WalkOptions::default()
    };
    let v = walk_with(std::slice::from_ref(&x), opts).unwrap();
    let names: Vec<&str> = v.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["x/a.c", "x/keep.o", "x/sub/d.c"]);
    // A root is filtered too.
    let mut filter = Filter::new();
    filter.exclude("/x").unwrap();
    let opts = WalkOptions {
        filter,
        ..WalkOptions::default()
    };
    assert!(walk_with(&[x], opts).unwrap().is_empty());
}

#[test]
fn a_root_without_a_name_sends_what_it_holds_at_the_top() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("d/e")).unwrap();
    std::fs::write(t.path().join("d/a"), b"a").unwrap();
    std::fs::write(t.path().join("top"), b"t").unwrap();
    // `DIR/d/..` is DIR, and has no file name, as `.` has none.
    let v = walk(&[t.path().join("d").join("..")]).unwrap();
    let names: Vec<&str> = v.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["d/a", "d/e", "top"]);
    assert!(walk(&[std::path::PathBuf::from("/nonexistent/..")]).is_err());
}

fn file_digest(data: &[u8], chunk: u64) -> Digest {
    let layout = Layout::new(Algo::Xxh3, chunk, data.len() as u64).unwrap();
    let ds: Vec<_> = data
        .chunks(chunk as usize)
        .map(|c| digest::chunk_digest(Algo::Xxh3, c))
        .collect();
    digest::combine(&layout, &ds)
}

#[test]
fn chunks_in_any_order_and_digest() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("f");
    let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&p, &data).unwrap();
    let mut s = Source::open(&p).unwrap();
    assert_eq!(s.size(), 10_000);
    assert!(s.read_chunk_at(0, &mut [0u8; 4096]).is_err(), "not started");
    s.start(4096, Algo::Xxh3).unwrap();
    let mut got = vec![0u8; 10_000];
    let mut sizes = Vec::new();
    for i in [2u64, 0, 1] {
        let mut buf = vec![0u8; 4096];
        let n = s.read_chunk_at(i, &mut buf).unwrap();
        sizes.push(n);
        got[i as usize * 4096..][..n].copy_from_slice(&buf[..n]);
        if i == 2 {
            let e = s.finish().unwrap_err();
            assert!(e.to_string().contains("before chunk 0"), "{e}");
        }
    }
    assert_eq!(sizes, [1808, 4096, 4096]);
    assert_eq!(got, data);
    assert!(s.read_chunk_at(3, &mut [0u8; 4096]).is_err());
    assert!(s.read_chunk_at(1, &mut [0u8; 4096]).is_err(), "read twice");
    assert_eq!(s.finish().unwrap(), file_digest(&data, 4096));
}

#[test]
fn resume_skips_only_verified_whole_chunks() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("f");
    std::fs::write(&p, b"0123456789").unwrap();
    let mut s = Source::open(&p).unwrap();
    s.start(4, Algo::Xxh3).unwrap();
    assert!(s.skip_verified(4, &file_digest(b"0123", 4)).unwrap());
    assert_eq!(s.first_chunk(), 1);
    let mut buf = [0u8; 4];
    assert_eq!(s.read_chunk_at(1, &mut buf).unwrap(), 4);
    assert_eq!(s.read_chunk_at(2, &mut buf).unwrap(), 2);
    assert_eq!(s.finish().unwrap(), file_digest(b"0123456789", 4));
    let mut s = Source::open(&p).unwrap();
    s.start(4, Algo::Xxh3).unwrap();
    assert!(!s.skip_verified(4, &file_digest(b"XXXX", 4)).unwrap());
    for (held, why) in [(11, "beyond the size"), (5, "not whole chunks")] {
        let mut s = Source::open(&p).unwrap();
        s.start(4, Algo::Xxh3).unwrap();
        assert!(!s.skip_verified(held, &[0; 32]).unwrap(), "{why}");
    }
    // The whole file held: nothing left to send.
    let mut s = Source::open(&p).unwrap();
    s.start(4, Algo::Xxh3).unwrap();
    assert!(s.skip_verified(10, &file_digest(b"0123456789", 4)).unwrap());
    assert_eq!(s.first_chunk(), 3);
    s.finish().unwrap();
}

#[test]
fn changed_file_detected() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("f");
    std::fs::write(&p, b"0123456789").unwrap();
    let mut s = Source::open(&p).unwrap();
    s.start(16, Algo::Xxh3).unwrap();
    std::fs::write(&p, b"01").unwrap();
    let e = s.read_chunk_at(0, &mut [0u8; 16]).unwrap_err();
    assert_eq!(e.reason(), Some(Reason::ReadError));
    assert!(e.to_string().contains("shrank"), "{e}");
    let mut s = Source::open(&p).unwrap();
    s.start(16, Algo::Xxh3).unwrap();
    std::fs::write(&p, b"0123456789").unwrap();
    s.read_chunk_at(0, &mut [0u8; 16]).unwrap();
    std::fs::write(&p, b"0123").unwrap();
    assert!(s.finish().unwrap_err().to_string().contains("size changed"));
}

#[test]
fn a_tree_listed_on_several_threads_is_the_whole_tree_with_loops_found_on_each_path() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("top");
    for d in ["a/x", "b/e", "c"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    for f in ["a/f1", "a/x/f2", "g"] {
        std::fs::write(root.join(f), f).unwrap();
    }
    // A link to its own parent (a loop on every path through it), and one to a sibling tree
    // (no loop: followed with --copy-links, its loop found on that path too).
    symlink("..", root.join("a/x/up")).unwrap();
    symlink("../a", root.join("b/toa")).unwrap();
    let opts = || WalkOptions {
        copy_links: true,
        ..Default::default()
    };
    let want = [
        "top/a/f1",
        "top/a/x/f2",
        "top/a/x/up",
        "top/b/e",
        "top/b/toa/f1",
        "top/b/toa/x/f2",
        "top/b/toa/x/up",
        "top/c",
        "top/g",
    ];
    for _ in 0..20 {
        let v = walk_with(std::slice::from_ref(&root), opts()).unwrap();
        assert_eq!(names(&v), want);
        let kind = |n: &str| &v.iter().find(|e| e.name.as_str() == n).unwrap().kind;
        for n in ["top/a/x/up", "top/b/toa/x/up"] {
            assert!(matches!(kind(n), SourceKind::Skipped(w) if w.contains("loop")), "{n}");
        }
        for n in ["top/b/e", "top/c"] {
            assert_eq!(kind(n), &SourceKind::Dir, "{n}");
        }
        assert_eq!(kind("top/b/toa/f1"), &SourceKind::File);
    }
    // A root without a name (`top/a/..`), listed as what it holds: the same without "top/".
    let v = walk_with(&[root.join("a/..")], opts()).unwrap();
    let want: Vec<&str> = want.iter().map(|n| &n[4..]).collect();
    assert_eq!(names(&v), want);
}
