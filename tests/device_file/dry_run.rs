//! Device tests (rxe0, in the guest) of `send --dry-run`: every entry of a tree is answered with
//! what the receiver would do (create, replace, skip, refuse), nothing is sent, and nothing
//! changes on either side; the real run that follows does what the dry run said.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use crate::common::{self, dirs, need_rxe0, pseudo_random, recv, send, send_args, spawn};

const T: Duration = Duration::from_secs(120);

/// Every entry below `root`: relative name → (kind, size, mtime ns, contents of files).
type State = BTreeMap<String, (char, u64, i128, Vec<u8>)>;

fn state(root: &Path) -> State {
    let mut s = State::new();
    for (rel, p, m) in common::entries(root) {
        let mtime = i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec());
        let (kind, data) = if m.is_dir() {
            ('d', Vec::new())
        } else if m.file_type().is_symlink() {
            let target = std::fs::read_link(&p).unwrap();
            ('l', target.into_os_string().into_encoded_bytes())
        } else {
            ('f', std::fs::read(&p).unwrap())
        };
        s.insert(rel, (kind, m.len(), mtime, data));
    }
    s
}

/// (name, result, message) of each entry of a JSON summary.
fn outcomes(j: &serde_json::Value) -> BTreeMap<String, (String, String)> {
    j["files"]
        .as_array()
        .unwrap_or_else(|| panic!("no files: {j}"))
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or("").to_string();
            (s("name"), (s("result"), s("message")))
        })
        .collect()
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn dry_run_says_what_would_happen_and_changes_nothing_on_either_side() {
    need_rxe0();
    let port = common::port();
    let (_tmp, src, out) = dirs();
    let root = src.join("tree");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("same.bin"), pseudo_random(300_000, 1)).unwrap();
    std::fs::write(root.join("changed.txt"), b"first version\n").unwrap();
    let r = recv(port, &out, &["--force"]);
    send(port, &[&root], &[])
        .finish(T)
        .ok("the first, real send");

    // Since then: one file changed, new ones (small, through the ring, an empty directory, a
    // link). Directories are announced only when empty (the others come with their files).
    std::fs::write(root.join("changed.txt"), b"the second version, longer\n").unwrap();
    std::fs::write(root.join("sub/new.txt"), b"new\n").unwrap();
    let big = pseudo_random(3 << 20, 2);
    std::fs::write(root.join("big.bin"), &big).unwrap();
    std::fs::create_dir_all(root.join("empty")).unwrap();
    std::os::unix::fs::symlink("same.bin", root.join("link")).unwrap();
    let (src_before, out_before) = (state(&src), state(&out));

    // Without --force the changed file is refused, as a real run would: exit 23.
    let d = send(port, &[&root], &["--dry-run"]).finish(T);
    assert_eq!(
        d.status.code(),
        Some(23),
        "dry run without --force: {}\n{}",
        d.out,
        d.err
    );
    let o = outcomes(&d.one_json());
    assert_eq!(o["tree/changed.txt"].0, "exists", "{o:?}");
    assert!(o["tree/changed.txt"].1.contains("--force"), "{o:?}");

    let d = send(port, &[&root], &["--dry-run", "--force"]).finish(T);
    d.ok("send --dry-run --force");
    let j = d.one_json();
    let o = outcomes(&j);
    let want = [
        ("tree/big.bin", "would send", "would create"),
        ("tree/changed.txt", "would send", "would replace"),
        ("tree/empty", "would send", "would create"),
        ("tree/link", "would send", "would create"),
        ("tree/same.bin", "skipped", "identical"),
        ("tree/sub/new.txt", "would send", "would create"),
    ];
    for (name, result, message) in want {
        let got = o.get(name).unwrap_or_else(|| panic!("no {name} in {j}"));
        assert_eq!(
            (got.0.as_str(), got.1.as_str()),
            (result, message),
            "{name}: {j}"
        );
    }
    assert_eq!(o.len(), want.len(), "{j}");
    assert_eq!(j["bytes"], 0, "nothing sent: {j}");
    assert_eq!(j["files_planned"], 5, "{j}");
    let planned = big.len() + b"the second version, longer\n".len() + b"new\n".len();
    assert_eq!(j["bytes_planned"], planned, "{j}");
    assert_eq!(
        (state(&src), state(&out)),
        (src_before, out_before),
        "a dry run changes nothing on either side (no file, directory or temporary file)"
    );

    // The text lines say the same, one per entry.
    let mut args = send_args(port, &[&root], &["-n", "--force"]);
    args.retain(|a| a != "--json");
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let d = spawn("send", &a).finish(T);
    d.ok("send -n --force");
    let text = &d.out;
    assert!(
        text.contains("would create tree/big.bin (3145728 bytes)"),
        "{text}"
    );
    assert!(text.contains("would replace tree/changed.txt"), "{text}");
    assert!(text.contains("would create tree/empty (dir)"), "{text}");
    assert!(
        text.contains("skipped  tree/same.bin (identical)"),
        "{text}"
    );
    assert!(
        text.contains("dry run: 5 of 6 entries would be sent"),
        "{text}"
    );

    // The real run does what the dry run said.
    let d = send(port, &[&root], &["--force"]).finish(T);
    d.ok("the real send --force");
    let j = d.one_json();
    let o = outcomes(&j);
    for name in [
        "tree/big.bin",
        "tree/changed.txt",
        "tree/empty",
        "tree/link",
        "tree/sub/new.txt",
    ] {
        assert_eq!(o[name].0, "ok", "{name}: {j}");
    }
    assert_eq!(o["tree/same.bin"].0, "skipped", "{j}");
    assert!(std::fs::read(out.join("tree/big.bin")).unwrap() == big);
    drop(r);
}
