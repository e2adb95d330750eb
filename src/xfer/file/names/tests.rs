use super::*;
use std::os::unix::fs::symlink;

fn refused(name: &str) -> String {
    match sanitize(name) {
        Err(Error::Refused {
            reason: Reason::BadName,
            message,
        }) => message,
        other => panic!("{name:?}: expected a bad-name refusal, got {other:?}"),
    }
}

#[test]
fn hostile_names_refused_with_reason() {
    assert!(refused("").contains("empty name"));
    assert!(refused("../x").contains("`..`"));
    assert!(refused("a/../../x").contains("`..`"));
    assert!(refused("/etc/x").contains("absolute"));
    assert!(refused("a\0b").contains("NUL"));
    assert!(refused("a\\b").contains("backslash"));
    assert!(refused("a//b").contains("empty component"));
    assert!(refused("a/").contains("empty component"));
    assert!(refused("./a").contains("`.`"));
    assert!(refused(&"a".repeat(5000)).contains("5000 bytes"));
    assert!(refused(&"a".repeat(256)).contains("component of 256 bytes"));
    assert!(refused("x.rdmaxfer-part").contains("reserved"));
    assert!(refused("d/x.rdmaxfer-stripes").contains("reserved"));
    assert_eq!(
        sanitize("d/x").unwrap().stripes_name(),
        ".x.rdmaxfer-stripes"
    );
}

#[test]
fn control_characters_refused_and_quoted_escaped() {
    for (name, code) in [
        ("a\nb", "U+000A"),
        ("x/\x1b[31mred", "U+001B"),
        ("tab\there", "U+0009"),
        ("del\x7f", "U+007F"),
        ("c1\u{85}next-line", "U+0085"),
        ("csi\u{9b}31m", "U+009B"),
        ("d\r/ok", "U+000D"),
    ] {
        let m = refused(name);
        assert!(m.contains(&format!("control character ({code})")), "{m}");
        assert!(!m.chars().any(|c| c.is_control()), "raw control in {m:?}");
    }
    // Bidirectional controls are allowed in names but never printed raw.
    let n = "evil\u{202e}txt.exe";
    assert_eq!(sanitize(n).unwrap().as_str(), n);
    assert_eq!(printable(n), "evil\\u{202e}txt.exe");
    let m = refused("\u{202e}a\nb");
    assert!(m.contains("\\u{202e}") && !m.contains('\u{202e}'), "{m}");
}

#[test]
fn printable_escapes_only_what_it_must() {
    assert!(matches!(printable("plain/name ü 名前"), Cow::Borrowed(_)));
    assert_eq!(printable("ok\nFAILED x"), "ok\\u{a}FAILED x");
    assert_eq!(printable("\x1b[31m\u{9b}\x7f"), "\\u{1b}[31m\\u{9b}\\u{7f}");
    assert_eq!(printable("back\\slash"), "back\\slash");
}

proptest::proptest! {
    #[test]
    fn no_control_character_survives(s in "\\PC*[\\p{Cc}\\u{202a}-\\u{202e}]\\PC*") {
        let p = printable(&s).into_owned();
        proptest::prop_assert!(!p.chars().any(is_unprintable), "{:?}", p);
        proptest::prop_assert_eq!(printable(&p).into_owned(), p.clone(), "idempotent");
        if s.chars().any(|c| c.is_control()) {
            let e = sanitize(&s).unwrap_err();
            proptest::prop_assert_eq!(e.reason(), Some(Reason::BadName));
            proptest::prop_assert!(!e.to_string().chars().any(is_unprintable), "{}", e);
        }
    }

    #[test]
    fn the_byte_searches_agree_with_the_character_rules(
        s in "[\\x00-\\x7f]{1,40}|\\PC{0,20}[\\p{Cc}\\u{202a}]\\PC{0,20}"
    ) {
        // printable borrows exactly when no character needs escaping.
        let borrowed = matches!(printable(&s), Cow::Borrowed(_));
        proptest::prop_assert_eq!(borrowed, !s.chars().any(is_unprintable));
        // sanitize names the first control character, when NUL and backslash are not there.
        if let Some(c) = s.chars().find(|c| c.is_control()) {
            let e = sanitize(&s).unwrap_err().to_string();
            if !s.contains('\0') && !s.contains('\\') {
                let want = format!("U+{:04X}", u32::from(c));
                proptest::prop_assert!(e.contains(&want), "{} lacks {}", e, want);
            }
        }
    }

    #[test]
    fn accepted_names_have_no_control_characters(s in "\\PC{1,40}") {
        if let Ok(r) = sanitize(&s) {
            proptest::prop_assert!(!r.as_str().chars().any(|c| c.is_control()));
        }
    }
}

#[test]
fn created_dirs_removed_deepest_first_only_while_empty() {
    let out = tempfile::tempdir().unwrap();
    std::fs::create_dir(out.path().join("a")).unwrap();
    let rel = sanitize("a/b/c/f").unwrap();
    let (base, missing) = walk_existing(out.path(), &rel).unwrap();
    let (dir, created) = create_dirs(base, &rel, &missing).unwrap();
    assert_eq!(created, ["b", "c"]);
    assert!(out.path().join("a/b/c").is_dir());
    // Not empty: nothing removed.
    std::fs::write(out.path().join("a/b/other"), b"").unwrap();
    dir.remove_created(&created);
    assert!(!out.path().join("a/b/c").exists(), "c was empty");
    assert!(out.path().join("a/b/other").exists(), "b kept: not empty");
    std::fs::remove_file(out.path().join("a/b/other")).unwrap();
    let (base, missing) = walk_existing(out.path(), &rel).unwrap();
    let (dir, created) = create_dirs(base, &rel, &missing).unwrap();
    assert_eq!(created, ["c"], "b exists now");
    dir.remove_created(&created);
    assert!(out.path().join("a/b").is_dir() && !out.path().join("a/b/c").exists());
}

#[test]
fn ordinary_names_accepted() {
    for n in [
        "a",
        "a/b/c.txt",
        ".hidden",
        "..x",
        "x..",
        "名前/ファイル",
        &"a/".repeat(2000)[..3999],
    ] {
        assert_eq!(sanitize(n).unwrap().as_str(), n);
    }
    let r = sanitize("a/b/c.txt").unwrap();
    assert_eq!(r.parents().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(r.file_name(), "c.txt");
    assert_eq!(r.temp_name(), ".c.txt.rdmaxfer-part");
    assert_eq!(sanitize("c").unwrap().parents().count(), 0);
}

#[test]
fn long_final_component_gets_a_short_temp_name() {
    let r = sanitize(&"n".repeat(255)).unwrap();
    let t = r.temp_name();
    assert!(
        t.len() <= MAX_COMPONENT_LEN && t.ends_with(TEMP_SUFFIX),
        "{t}"
    );
    assert_eq!(
        t,
        sanitize(&"n".repeat(255)).unwrap().temp_name(),
        "deterministic"
    );
}

#[test]
fn nested_name_created_inside_out_dir() {
    let out = tempfile::tempdir().unwrap();
    let rel = sanitize("a/b/c.txt").unwrap();
    let (dir, _file) = create_confined(out.path(), &rel).unwrap();
    assert_eq!(dir.path(), out.path().join("a/b"));
    assert!(out.path().join("a/b/.c.txt.rdmaxfer-part").is_file());
    // Again: parents exist now, a stale temp is replaced.
    std::fs::write(out.path().join("a/b/.c.txt.rdmaxfer-part"), b"stale").unwrap();
    create_confined(out.path(), &rel).unwrap();
    assert_eq!(
        std::fs::read(out.path().join("a/b/.c.txt.rdmaxfer-part")).unwrap(),
        b""
    );
}

#[test]
fn symlinked_directory_refused() {
    let out = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    symlink(outside.path(), out.path().join("link")).unwrap();
    let rel = sanitize("link/x").unwrap();
    match create_confined(out.path(), &rel) {
        Err(Error::Refused {
            reason: Reason::BadName,
            message,
        }) => assert!(message.contains("symbolic link"), "{message}"),
        other => panic!("expected refusal, got {other:?}"),
    }
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        0,
        "nothing escaped"
    );
}

#[test]
fn symlink_deeper_and_file_as_dir_refused() {
    let out = tempfile::tempdir().unwrap();
    std::fs::create_dir(out.path().join("a")).unwrap();
    symlink("/tmp", out.path().join("a/up")).unwrap();
    std::fs::write(out.path().join("f"), b"").unwrap();
    let e = create_confined(out.path(), &sanitize("a/up/x").unwrap()).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    let e = create_confined(out.path(), &sanitize("f/x").unwrap()).unwrap_err();
    assert!(e.to_string().contains("not a directory"), "{e}");
}

#[test]
fn symlinked_temp_file_not_followed() {
    let out = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("victim");
    std::fs::write(&target, b"keep").unwrap();
    let rel = sanitize("x").unwrap();
    symlink(&target, out.path().join(rel.temp_name())).unwrap();
    let dir = open_parent(out.path(), &rel).unwrap();
    assert!(
        dir.open_file(&rel.temp_name(), false).is_err(),
        "O_NOFOLLOW"
    );
    // create_confined removes the link itself and creates a real file.
    create_confined(out.path(), &rel).unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    assert!(out.path().join(rel.temp_name()).is_file());
}

#[test]
fn walk_reports_missing_without_creating() {
    let out = tempfile::tempdir().unwrap();
    std::fs::create_dir(out.path().join("a")).unwrap();
    let rel = sanitize("a/b/c/f").unwrap();
    let (dir, missing) = walk_existing(out.path(), &rel).unwrap();
    assert_eq!(dir.path(), out.path().join("a"));
    assert_eq!(missing, ["b", "c"]);
    assert!(!out.path().join("a/b").exists());
}

#[test]
fn rename_refuses_to_replace_unless_asked() {
    let out = tempfile::tempdir().unwrap();
    let dir = ConfinedDir::open(out.path()).unwrap();
    std::fs::write(out.path().join("a"), b"new").unwrap();
    std::fs::write(out.path().join("b"), b"old").unwrap();
    let e = dir.rename("a", "b", false).unwrap_err();
    assert_eq!(e.reason(), Some(Reason::Exists));
    assert_eq!(std::fs::read(out.path().join("b")).unwrap(), b"old");
    dir.rename("a", "b", true).unwrap();
    assert_eq!(std::fs::read(out.path().join("b")).unwrap(), b"new");
    assert!(dir.free_bytes().unwrap() > 0);
}

/// A parent found missing is kept as missing (no second walk) until `forget`; then the made
/// directory is walked to once and kept.
#[test]
fn the_cache_keeps_a_missing_parent_until_told_it_was_made() {
    let out = tempfile::tempdir().unwrap();
    std::fs::create_dir(out.path().join("a")).unwrap();
    let mut cache = DirCache::default();
    let x = sanitize("a/b/c/x").unwrap();
    let y = sanitize("a/b/c/y").unwrap();
    let (d, missing) = cache.walk(out.path(), &x).unwrap();
    assert_eq!((d.path(), missing), (out.path().join("a").as_path(), vec!["b", "c"]));
    // Made behind the cache's back: it still says missing (creating them again is harmless).
    std::fs::create_dir_all(out.path().join("a/b/c")).unwrap();
    let seen = cache.visit(out.path(), &y, |d, m| (d.path().to_path_buf(), m.to_vec()));
    assert_eq!(seen.unwrap(), (out.path().join("a"), vec!["b", "c"]));
    let (d, missing) = cache.walk(out.path(), &y).unwrap();
    let (made, created) = create_dirs(d, &y, &missing).unwrap();
    assert_eq!((made.path(), created.len()), (out.path().join("a/b/c").as_path(), 0));
    cache.forget();
    let (d, missing) = cache.walk(out.path(), &y).unwrap();
    assert_eq!((d.path(), missing.len()), (out.path().join("a/b/c").as_path(), 0));
    // Kept: a file made through the kept handle lands in a/b/c.
    let (d, _) = cache.walk(out.path(), &x).unwrap();
    d.create_new("x", 0o600).unwrap().unwrap();
    assert!(out.path().join("a/b/c/x").is_file());
}
