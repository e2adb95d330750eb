//! Host test of `cleanup::interrupt` (its own process: the interrupt is for the whole process).

use rdmaxfer::xfer::file::cleanup;
use rdmaxfer::xfer::file::digest::{self, Algo, Layout};
use rdmaxfer::xfer::file::names::sanitize;
use rdmaxfer::xfer::file::proto::Reason;
use rdmaxfer::xfer::file::sink::{Sink, SinkOptions};

fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn interrupt_removes_unfinished_files_keeps_resumable_ones_and_refuses_new_ones() {
    let out = tempfile::tempdir().unwrap();
    std::fs::create_dir(out.path().join("old")).unwrap();
    let open = |name: &str, resume: bool| {
        let opts = SinkOptions {
            resume,
            ..Default::default()
        };
        let mut s = Sink::create(out.path(), &sanitize(name).unwrap(), 8, opts).unwrap();
        s.start(2, Algo::Blake3).unwrap();
        s
    };
    let a = open("old/new/a", false);
    a.write_at(0, b"ab").unwrap();
    a.write_at(2, b"cd").unwrap();
    let _b = open("b", false);
    let k = open("kept/k", true);
    k.write_at(0, b"ab").unwrap();
    let mut c = open("c", false);
    let theirs: Vec<_> = b"12345678"
        .chunks(2)
        .map(|x| digest::chunk_digest(Algo::Blake3, x))
        .collect();
    for (i, x) in b"12345678".chunks(2).enumerate() {
        c.write_chunk_at(i as u64, x).unwrap();
    }
    c.check_digests(0, &theirs).unwrap();
    let layout = Layout::new(Algo::Blake3, 2, 8).unwrap();
    c.commit(&digest::combine(&layout, &theirs)).unwrap();
    assert_eq!(cleanup::pending(), 3, "a, b and k are unfinished");

    assert_eq!(cleanup::interrupt(), 2, "a and b removed, k kept");
    assert_eq!(names(out.path()), ["c", "kept", "old"]);
    assert!(names(&out.path().join("old")).is_empty(), "old/new removed");
    assert_eq!(names(&out.path().join("kept")), [".k.rdmaxfer-part"]);
    assert_eq!(cleanup::pending(), 0);

    let e = Sink::create(
        out.path(),
        &sanitize("d/e").unwrap(),
        1,
        SinkOptions::default(),
    )
    .unwrap_err();
    assert_eq!(e.reason(), Some(Reason::Internal), "{e}");
    assert!(e.to_string().contains("interrupted"), "{e}");
    assert!(
        !out.path().join("d").exists(),
        "nothing created after the interrupt"
    );
    // The sinks still open end without harm (their files are gone already).
    drop(a);
    drop(k);
    assert_eq!(names(&out.path().join("kept")), [".k.rdmaxfer-part"]);
}
