use super::*;
use crate::xfer::file::digest::chunk_digest;
use crate::xfer::file::names::sanitize;
use std::os::unix::fs::MetadataExt;

const ALGO: Algo = Algo::Blake3;

/// The sender's chunk digests of `data` cut in `chunk`-byte chunks.
fn theirs(data: &[u8], chunk: u32) -> Vec<ChunkDigest> {
    data.chunks(chunk as usize)
        .map(|c| chunk_digest(ALGO, c))
        .collect()
}

/// The sender's file digest.
fn expected(data: &[u8], chunk: u32) -> Digest {
    let layout = Layout::new(ALGO, u64::from(chunk), data.len() as u64).unwrap();
    digest::combine(&layout, &theirs(data, chunk))
}

/// Starts `s`, writes all of `data` in chunks (from `held` on), in reverse order, and hands
/// it the sender's digests.
fn fill(s: &mut Sink, data: &[u8], chunk: u32) {
    let (held, _) = s.start(chunk, ALGO).unwrap();
    let first = (held / u64::from(chunk)) as usize;
    let parts: Vec<&[u8]> = data.chunks(chunk as usize).collect();
    for i in (first..parts.len()).rev() {
        s.write_chunk_at(i as u64, parts[i]).unwrap();
    }
    assert_eq!(s.check_digests(0, &theirs(data, chunk)).unwrap(), None);
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

fn sink(out: &Path, name: &str, size: u64, opts: SinkOptions) -> Result<Sink> {
    Sink::create(out, &sanitize(name).unwrap(), size, opts)
}

#[test]
fn commit_ok() {
    let out = tempfile::tempdir().unwrap();
    let data = b"hello, rdma world";
    let mtime = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
    let opts = SinkOptions {
        mode: Some(0o4755), // setuid is dropped
        mtime: Some(mtime),
        ..Default::default()
    };
    let mut s = sink(out.path(), "d/e/f.bin", data.len() as u64, opts).unwrap();
    assert_eq!(s.start(5, ALGO).unwrap(), (0, expected(b"", 5)));
    s.write_at(15, &data[15..]).unwrap();
    s.write_at(0, &data[..5]).unwrap();
    s.write_chunk_at(2, &data[10..15]).unwrap();
    s.write_chunk_at(1, &data[5..10]).unwrap();
    assert_eq!(s.chunks_done(), 4);
    s.check_digests(0, &theirs(data, 5)[..1]).unwrap();
    s.check_digests(1, &theirs(data, 5)[1..]).unwrap();
    assert_eq!(s.commit(&expected(data, 5)).unwrap(), expected(data, 5));
    let f = out.path().join("d/e/f.bin");
    assert_eq!(std::fs::read(&f).unwrap(), data);
    let meta = std::fs::metadata(&f).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o755);
    assert_eq!(meta.modified().unwrap(), mtime);
    assert_eq!(entries(&out.path().join("d/e")), ["f.bin"]);
}

#[test]
fn chunks_from_several_threads_commit() {
    let out = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 31 % 251) as u8).collect();
    let mut s = sink(out.path(), "par", data.len() as u64, SinkOptions::default()).unwrap();
    s.start(4096, ALGO).unwrap();
    let parts: Vec<&[u8]> = data.chunks(4096).collect();
    digest::par_for(0..parts.len() as u64, 4, |i| {
        s.write_chunk_at(i, parts[i as usize])
    })
    .unwrap();
    s.check_digests(0, &theirs(&data, 4096)).unwrap();
    s.commit(&expected(&data, 4096)).unwrap();
    assert_eq!(std::fs::read(out.path().join("par")).unwrap(), data);
}

#[test]
fn empty_file_commits() {
    let out = tempfile::tempdir().unwrap();
    let mut s = sink(out.path(), "empty", 0, SinkOptions::default()).unwrap();
    s.start(4096, ALGO).unwrap();
    s.commit(&expected(b"", 4096)).unwrap();
    assert_eq!(std::fs::read(out.path().join("empty")).unwrap(), b"");
}

#[test]
fn a_corrupted_chunk_is_named_and_nothing_is_left() {
    let out = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..40u8).collect();
    for resume in [false, true] {
        let opts = SinkOptions {
            resume,
            ..Default::default()
        };
        let mut s = sink(out.path(), "x", 40, opts).unwrap();
        s.start(8, ALGO).unwrap();
        let mut bad = data.clone();
        bad[19] ^= 0x40; // chunk 2
        bad[33] ^= 0x40; // chunk 4: only the first is named
        for (i, c) in bad.chunks(8).enumerate() {
            s.write_chunk_at(i as u64, c).unwrap();
        }
        assert_eq!(s.check_digests(0, &theirs(&data, 8)[..2]).unwrap(), None);
        assert_eq!(s.check_digests(2, &theirs(&data, 8)[2..]).unwrap(), Some(2));
        let e = s.commit(&expected(&data, 8)).unwrap_err();
        assert_eq!(e.reason(), Some(Reason::HashMismatch), "{e}");
        assert!(e.to_string().contains("chunk 2 (bytes 16..24)"), "{e}");
        assert!(entries(out.path()).is_empty(), "{:?}", entries(out.path()));
    }
}

#[test]
fn file_digest_mismatch_alone_is_refused() {
    let out = tempfile::tempdir().unwrap();
    let mut s = sink(out.path(), "x", 3, SinkOptions::default()).unwrap();
    fill(&mut s, b"abc", 4096);
    let e = s.commit(&expected(b"abd", 4096)).unwrap_err();
    assert_eq!(e.reason(), Some(Reason::HashMismatch), "{e}");
    assert!(e.to_string().contains("file digest"), "{e}");
    assert!(entries(out.path()).is_empty());
}

#[test]
fn existing_file_refused_unless_force() {
    let out = tempfile::tempdir().unwrap();
    let f = out.path().join("x");
    std::fs::write(&f, b"old").unwrap();
    let e = sink(out.path(), "x", 3, SinkOptions::default()).unwrap_err();
    assert_eq!(e.reason(), Some(Reason::Exists), "{e}");
    assert_eq!(std::fs::read(&f).unwrap(), b"old");
    assert_eq!(entries(out.path()), ["x"], "no temp file");
    let opts = SinkOptions {
        force: true,
        ..Default::default()
    };
    let mut s = sink(out.path(), "x", 3, opts).unwrap();
    fill(&mut s, b"new", 4096);
    s.commit(&expected(b"new", 4096)).unwrap();
    assert_eq!(std::fs::read(&f).unwrap(), b"new");
}

#[test]
fn directory_in_the_way_refused_even_with_force() {
    let out = tempfile::tempdir().unwrap();
    std::fs::create_dir(out.path().join("x")).unwrap();
    let opts = SinkOptions {
        force: true,
        ..Default::default()
    };
    let e = sink(out.path(), "x", 0, opts).unwrap_err();
    assert!(e.to_string().contains("is a directory"), "{e}");
}

#[test]
fn file_appearing_before_commit_is_not_overwritten() {
    let out = tempfile::tempdir().unwrap();
    let mut s = sink(out.path(), "x", 1, SinkOptions::default()).unwrap();
    fill(&mut s, b"n", 4096);
    std::fs::write(out.path().join("x"), b"raced").unwrap();
    let e = s.commit(&expected(b"n", 4096)).unwrap_err();
    assert_eq!(e.reason(), Some(Reason::Exists));
    assert_eq!(std::fs::read(out.path().join("x")).unwrap(), b"raced");
    assert_eq!(entries(out.path()), ["x"]);
}

#[test]
fn abort_and_drop_remove_temp() {
    let out = tempfile::tempdir().unwrap();
    let mut s = sink(out.path(), "a", 4, SinkOptions::default()).unwrap();
    s.start(2, ALGO).unwrap();
    s.write_at(0, b"ab").unwrap();
    assert_eq!(entries(out.path()), [".a.rdmaxfer-part"]);
    s.abort().unwrap();
    assert!(entries(out.path()).is_empty());
    let mut s = sink(out.path(), "b", 4, SinkOptions::default()).unwrap();
    s.start(2, ALGO).unwrap();
    s.write_at(0, b"ab").unwrap();
    drop(s);
    assert!(entries(out.path()).is_empty());
}

#[test]
fn failed_file_removes_only_the_directories_made_for_it() {
    let out = tempfile::tempdir().unwrap();
    std::fs::create_dir(out.path().join("had")).unwrap();
    // Abort (an ERR mid-file): the new directories go, the existing one stays.
    let mut s = sink(out.path(), "had/new/deeper/x", 4, SinkOptions::default()).unwrap();
    s.start(2, ALGO).unwrap();
    s.write_at(0, b"ab").unwrap();
    drop(s);
    assert_eq!(entries(out.path()), ["had"]);
    assert!(entries(&out.path().join("had")).is_empty());
    // Commit failure: the same.
    let mut s = sink(out.path(), "n1/n2/y", 1, SinkOptions::default()).unwrap();
    fill(&mut s, b"y", 4096);
    s.commit(&expected(b"z", 4096)).unwrap_err();
    assert_eq!(entries(out.path()), ["had"]);
    // A directory another file of the session committed into stays.
    let mut a = sink(out.path(), "shared/a", 1, SinkOptions::default()).unwrap();
    fill(&mut a, b"a", 4096);
    a.commit(&expected(b"a", 4096)).unwrap();
    let b = sink(out.path(), "shared/b", 1, SinkOptions::default()).unwrap();
    b.abort().unwrap();
    assert_eq!(entries(&out.path().join("shared")), ["a"]);
    // Kept for resume: temp and directories stay.
    let opts = SinkOptions {
        resume: true,
        ..Default::default()
    };
    let mut r = sink(out.path(), "keep/me", 4, opts).unwrap();
    r.start(2, ALGO).unwrap();
    r.write_at(0, b"ab").unwrap();
    drop(r);
    assert_eq!(entries(&out.path().join("keep")), [".me.rdmaxfer-part"]);
}

#[test]
fn resume_continues_a_partial_file_in_whole_chunks() {
    let out = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    let opts = SinkOptions {
        resume: true,
        ..Default::default()
    };
    let mut s = sink(out.path(), "r", data.len() as u64, opts.clone()).unwrap();
    s.start(1024, ALGO).unwrap();
    for i in 0..5 {
        s.write_at(i * 1024, &data[i as usize * 1024..][..1024])
            .unwrap();
    }
    drop(s); // kept with resume: 5120 bytes
    assert_eq!(entries(out.path()), [".r.rdmaxfer-part"]);
    // A larger chunk size on this attempt: the held prefix is cut down to whole chunks.
    let mut s = sink(out.path(), "r", data.len() as u64, opts.clone()).unwrap();
    assert_eq!(
        s.start(4096, ALGO).unwrap(),
        (4096, expected(&data[..4096], 4096))
    );
    let e = s.write_chunk_at(0, &data[..4096]).unwrap_err();
    assert!(
        e.to_string().contains("held from an earlier attempt"),
        "{e}"
    );
    s.write_chunk_at(2, &data[8192..]).unwrap();
    s.write_chunk_at(1, &data[4096..8192]).unwrap();
    s.check_digests(0, &theirs(&data, 4096)).unwrap();
    s.commit(&expected(&data, 4096)).unwrap();
    assert_eq!(std::fs::read(out.path().join("r")).unwrap(), data);
    assert_eq!(entries(out.path()), ["r"]);
    // Without resume a leftover temp is discarded.
    std::fs::write(out.path().join(".q.rdmaxfer-part"), b"stale").unwrap();
    let mut s = sink(out.path(), "q", 9, SinkOptions::default()).unwrap();
    assert_eq!(s.start(4, ALGO).unwrap(), (0, expected(b"", 4)));
    // A leftover longer than the new size is not resumable.
    drop(s);
    std::fs::write(out.path().join(".q.rdmaxfer-part"), b"too long!!").unwrap();
    let mut s = sink(out.path(), "q", 9, opts).unwrap();
    assert_eq!(s.start(4, ALGO).unwrap().0, 0);
}

#[test]
fn writes_checked_against_chunks_and_size() {
    let out = tempfile::tempdir().unwrap();
    let mut s = sink(out.path(), "w", 4, SinkOptions::default()).unwrap();
    let e = s.write_at(0, b"ab").unwrap_err();
    assert!(e.to_string().contains("not started"), "{e}");
    s.start(2, ALGO).unwrap();
    assert!(s.start(2, ALGO).is_err(), "started twice");
    let e = s.write_at(1, b"a").unwrap_err();
    assert!(e.to_string().contains("not at a chunk boundary"), "{e}");
    let e = s.write_chunk_at(0, b"abc").unwrap_err();
    assert!(e.to_string().contains("expected 2"), "{e}");
    let e = s.write_chunk_at(2, b"ab").unwrap_err();
    assert!(e.to_string().contains("beyond the 2 chunks"), "{e}");
    s.write_at(0, b"ab").unwrap();
    let e = s.write_at(0, b"ab").unwrap_err();
    assert!(e.to_string().contains("twice"), "{e}");
    let e = s.check_digests(1, &theirs(b"ab", 2)).unwrap_err();
    assert!(e.to_string().contains("expected chunk 0"), "{e}");
    let e = s.commit(&expected(b"ab", 2)).unwrap_err();
    assert!(e.to_string().contains("FIN before chunk 1"), "{e}");
    assert!(entries(out.path()).is_empty());
    // All chunks there, but not all digests from the sender.
    let mut s = sink(out.path(), "w", 4, SinkOptions::default()).unwrap();
    s.start(2, ALGO).unwrap();
    s.write_at(0, b"ab").unwrap();
    s.write_at(2, b"cd").unwrap();
    s.check_digests(0, &theirs(b"abcd", 2)[..1]).unwrap();
    let e = s.commit(&expected(b"abcd", 2)).unwrap_err();
    assert!(e.to_string().contains("digests of 1 of 2"), "{e}");
}

#[test]
fn size_limits_checked_before_creating_anything() {
    let out = tempfile::tempdir().unwrap();
    let opts = SinkOptions {
        max_size: Some(100),
        ..Default::default()
    };
    let e = sink(out.path(), "p/x", 101, opts).unwrap_err();
    assert_eq!(e.reason(), Some(Reason::TooLarge), "{e}");
    let e = sink(out.path(), "p/x", u64::MAX / 2, SinkOptions::default()).unwrap_err();
    assert_eq!(e.reason(), Some(Reason::NoSpace), "{e}");
    assert!(
        entries(out.path()).is_empty(),
        "no directory or temp created"
    );
}

#[test]
fn a_kept_file_is_cut_to_the_chunks_without_a_gap() {
    let out = tempfile::tempdir().unwrap();
    let opts = SinkOptions {
        resume: true,
        ..Default::default()
    };
    let data: Vec<u8> = (0..40u8).collect();
    let mut s = sink(out.path(), "g", 40, opts.clone()).unwrap();
    s.start(8, ALGO).unwrap();
    for i in [0u64, 1, 3] {
        s.write_chunk_at(i, &data[i as usize * 8..][..8]).unwrap();
    }
    drop(s); // chunk 2 never came: only 0 and 1 are kept
    let temp = out.path().join(".g.rdmaxfer-part");
    assert_eq!(std::fs::read(&temp).unwrap(), &data[..16]);
    let mut s = sink(out.path(), "g", 40, opts).unwrap();
    assert_eq!(s.start(8, ALGO).unwrap(), (16, expected(&data[..16], 8)));
}

#[test]
fn a_file_left_by_a_killed_receiver_is_trusted_only_before_its_last_chunks() {
    let out = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..20_000u32).map(|i| (i * 13) as u8).collect();
    let opts = SinkOptions {
        resume: true,
        ..Default::default()
    };
    // As a SIGKILLed receiver leaves it: 10 chunks' length, mode 0600, chunk 7 missing (its
    // writer had not run), chunks 8 and 9 there.
    let temp = out.path().join(".k.rdmaxfer-part");
    let mut left = data[..10 * 1024].to_vec();
    left[7 * 1024..8 * 1024].fill(0);
    std::fs::write(&temp, &left).unwrap();
    std::fs::set_permissions(&temp, Permissions::from_mode(0o600)).unwrap();
    let mut s = sink(out.path(), "k", data.len() as u64, opts.clone()).unwrap();
    // The last OUT_OF_ORDER chunks are not trusted: the resume starts at chunk 6.
    assert_eq!(
        s.start(1024, ALGO).unwrap(),
        (6 * 1024, expected(&data[..6 * 1024], 1024))
    );
    drop(s);
    // A clean stop cut it to what it held and sealed it: trusted to its length.
    let m = std::fs::metadata(&temp).unwrap();
    assert_eq!((m.len(), m.mode() & 0o777), (6 * 1024, SEALED_MODE));
    let mut s = sink(out.path(), "k", data.len() as u64, opts).unwrap();
    assert_eq!(s.start(1024, ALGO).unwrap().0, 6 * 1024);
    // Being written again, it is no longer sealed.
    assert_eq!(std::fs::metadata(&temp).unwrap().mode() & 0o777, 0o600);
    assert_eq!(
        OUT_OF_ORDER,
        crate::xfer::file::recv::ring_budget::COPY_BUFS
    );
}

#[test]
fn a_file_kept_again_before_it_was_started_stays_as_unsealed_as_it_was() {
    let out = tempfile::tempdir().unwrap();
    let opts = SinkOptions {
        resume: true,
        ..Default::default()
    };
    let temp = out.path().join(".u.rdmaxfer-part");
    std::fs::write(&temp, vec![1u8; 8192]).unwrap();
    std::fs::set_permissions(&temp, Permissions::from_mode(0o600)).unwrap();
    // Opened (e.g. then refused) and kept without a start: nothing says it is gapless.
    drop(sink(out.path(), "u", 100_000, opts.clone()).unwrap());
    assert_eq!(std::fs::metadata(&temp).unwrap().mode() & 0o777, 0o600);
    let mut s = sink(out.path(), "u", 100_000, opts).unwrap();
    assert_eq!(s.start(1024, ALGO).unwrap().0, 4 * 1024);
}

/// A file written at once (an inline file) ends with exactly the mode asked for, whether the
/// temporary file could be made with it (the umask leaves it whole) or needed a chmod (it
/// does not, or it is the mode that marks a kept file), and never leaves the temporary file
/// under a mode that marks a kept file.
#[test]
fn a_file_written_at_once_gets_its_mode() {
    let out = tempfile::tempdir().unwrap();
    for (i, mode) in [0o640, 0o600, 0o666, 0o777, SEALED_MODE, 0o4755]
        .into_iter()
        .enumerate()
    {
        let name = format!("f{i}");
        let opts = SinkOptions {
            mode: Some(mode),
            at_once: true,
            planned: true,
            ..Default::default()
        };
        let mut s = sink(out.path(), &name, 2, opts).unwrap();
        let temp = s.temp_file().unwrap().metadata().unwrap().mode() & 0o777;
        assert_ne!(temp, SEALED_MODE, "{mode:o}: made with the mode of a kept file");
        s.start(8, ALGO).unwrap();
        s.write_chunk_at(0, b"hi").unwrap();
        s.commit_small(&expected(b"hi", 8)).unwrap();
        let got = std::fs::metadata(out.path().join(&name)).unwrap().mode() & 0o7777;
        assert_eq!(got, mode & 0o777, "asked for {mode:o}");
    }
    assert_eq!(entries(out.path()), ["f0", "f1", "f2", "f3", "f4", "f5"]);
}

/// A directory the cache kept and that is gone since (made for a file that failed, and removed
/// with it while empty) is made again for the next file, not reached through the stale handle.
#[test]
fn a_kept_directory_removed_since_is_made_again() {
    let out = tempfile::tempdir().unwrap();
    let mut dirs = DirCache::default();
    let opts = || SinkOptions {
        planned: true,
        ..Default::default()
    };
    // The first file of d/ makes it; a later file's plan keeps a handle on it.
    let a = sanitize("d/a").unwrap();
    let first = Sink::create_in(&mut dirs, out.path(), &a, 1, opts()).unwrap();
    dirs.forget();
    let b = sanitize("d/b").unwrap();
    dirs.visit(out.path(), &b, |_, missing| assert!(missing.is_empty()))
        .unwrap();
    // The first file fails: its temporary file and d/, made for it, are removed.
    drop(first);
    assert!(!out.path().join("d").exists());
    let mut s = Sink::create_in(&mut dirs, out.path(), &b, 2, opts()).unwrap();
    s.start(8, ALGO).unwrap();
    s.write_chunk_at(0, b"hi").unwrap();
    s.commit_small(&expected(b"hi", 8)).unwrap();
    assert_eq!(std::fs::read(out.path().join("d/b")).unwrap(), b"hi");
}
