use super::*;

fn data(n: usize) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

/// The digest computed the plain way: chunk by chunk, in order, on one thread.
fn sequential(algo: Algo, chunk: u64, bytes: &[u8]) -> Digest {
    let layout = Layout::new(algo, chunk, bytes.len() as u64).unwrap();
    let ds: Vec<ChunkDigest> = bytes
        .chunks(chunk as usize)
        .map(|c| chunk_digest(algo, c))
        .collect();
    combine(&layout, &ds)
}

#[test]
fn layout_cuts_the_file() {
    let l = Layout::new(Algo::Xxh3, 4096, 10_000).unwrap();
    assert_eq!(l.chunks(), 3);
    assert_eq!(l.range(0), Some((0, 4096)));
    assert_eq!(l.range(2), Some((8192, 1808)));
    assert_eq!(l.range(3), None);
    assert_eq!(l.whole_chunks(5000), 4096);
    assert_eq!(l.whole_chunks(10_000), 10_000);
    assert_eq!(l.whole_chunks(20_000), 10_000);
    assert_eq!(Layout::new(Algo::Xxh3, 4096, 0).unwrap().chunks(), 0);
    assert!(Layout::new(Algo::Xxh3, 0, 1).is_err());
}

#[test]
fn any_order_on_any_thread_equals_sequential() {
    let bytes = data(100_000);
    for algo in Algo::ALL {
        for chunk in [4096u64, 1 << 20] {
            let layout = Layout::new(algo, chunk, bytes.len() as u64).unwrap();
            let c = Chunks::new(layout);
            // Reverse order, four threads.
            let n = layout.chunks();
            par_for(0..n, 4, |i| {
                let k = n - 1 - i;
                let (off, len) = layout.range(k).unwrap();
                c.hash(k, &bytes[off as usize..off as usize + len])
                    .map(|_| ())
            })
            .unwrap();
            assert_eq!(c.first_missing(), None);
            assert_eq!(c.finish().unwrap(), sequential(algo, chunk, &bytes));
        }
    }
}

#[test]
fn digest_depends_on_algorithm_chunk_size_and_bytes() {
    let bytes = data(20_000);
    let a = sequential(Algo::Blake3, 4096, &bytes);
    assert_ne!(a, sequential(Algo::Xxh3, 4096, &bytes));
    assert_ne!(a, sequential(Algo::Blake3, 8192, &bytes));
    let mut other = bytes.clone();
    other[12_345] ^= 1;
    assert_ne!(a, sequential(Algo::Blake3, 4096, &other));
    // The empty file has a digest of its own (no chunks).
    let empty = Chunks::new(Layout::new(Algo::Blake3, 4096, 0).unwrap());
    assert_eq!(empty.finish().unwrap(), sequential(Algo::Blake3, 4096, b""));
    assert_ne!(empty.finish().unwrap(), a);
}

#[test]
fn chunks_refuse_wrong_lengths_duplicates_and_strays() {
    let c = Chunks::new(Layout::new(Algo::Xxh3, 4096, 5000).unwrap());
    let e = c.hash(0, &[0; 100]).unwrap_err();
    assert!(e.to_string().contains("expected 4096"), "{e}");
    let e = c.hash(2, &[0; 4096]).unwrap_err();
    assert!(e.to_string().contains("beyond the 2 chunks"), "{e}");
    c.hash(1, &[0; 904]).unwrap();
    let e = c.hash(1, &[0; 904]).unwrap_err();
    assert!(e.to_string().contains("twice"), "{e}");
    assert_eq!(c.first_missing(), Some(0));
    let e = c.finish().unwrap_err();
    assert!(e.to_string().contains("chunk 0 of 2"), "{e}");
}

#[test]
fn a_corrupted_chunk_is_named() {
    let bytes = data(50_000);
    let layout = Layout::new(Algo::Blake3, 4096, bytes.len() as u64).unwrap();
    let ours = Chunks::new(layout);
    let mut bad = bytes.clone();
    bad[3 * 4096 + 7] ^= 0x80;
    let theirs: Vec<ChunkDigest> = bad
        .chunks(4096)
        .map(|c| chunk_digest(Algo::Blake3, c))
        .collect();
    for (i, c) in bytes.chunks(4096).enumerate() {
        ours.hash(i as u64, c).unwrap();
    }
    assert_eq!(ours.first_mismatch(0, &theirs), Some(3));
    assert_eq!(ours.first_mismatch(4, &theirs[4..]), None);
    assert_eq!(ours.first_mismatch(0, &theirs[..3]), None);
    assert_eq!(
        ours.batch(2, 2),
        [ours.get(2).unwrap(), ours.get(3).unwrap()]
    );
    assert_eq!(ours.batch(10, 5).len(), 3, "13 chunks");
    assert_ne!(ours.finish().unwrap(), sequential(Algo::Blake3, 4096, &bad));
    // Repair: the chunk received again replaces its digest; the sender checks a re-read.
    let c3 = &bytes[3 * 4096..4 * 4096];
    assert!(ours.matches(3, c3).unwrap());
    assert!(!ours.matches(3, &bad[3 * 4096..4 * 4096]).unwrap());
    ours.rehash(3, &bad[3 * 4096..4 * 4096]).unwrap();
    assert_eq!(ours.first_mismatch(0, &theirs), None);
    assert_eq!(ours.finish().unwrap(), sequential(Algo::Blake3, 4096, &bad));
    let fresh = Chunks::new(layout);
    assert!(fresh
        .rehash(3, c3)
        .unwrap_err()
        .to_string()
        .contains("before it was received"));
    assert!(ours.rehash(3, &c3[1..]).is_err(), "wrong length");
}

#[test]
fn prefix_digest_is_the_digest_of_the_prefix_file() {
    let bytes = data(30_000);
    let layout = Layout::new(Algo::Xxh3, 4096, bytes.len() as u64).unwrap();
    let c = Chunks::new(layout);
    for i in 0..3u64 {
        let (off, len) = layout.range(i).unwrap();
        c.hash(i, &bytes[off as usize..off as usize + len]).unwrap();
    }
    assert_eq!(
        c.prefix_digest(3 * 4096),
        Some(sequential(Algo::Xxh3, 4096, &bytes[..3 * 4096]))
    );
    assert_eq!(c.prefix_digest(4 * 4096), None, "chunk 3 is missing");
    assert_eq!(c.prefix_digest(0), Some(sequential(Algo::Xxh3, 4096, b"")));
}

#[test]
fn algo_codes_and_names_round_trip() {
    for a in Algo::ALL {
        assert_eq!(Algo::from_code(a.code()), Some(a));
        assert_eq!(a.as_str().parse::<Algo>(), Ok(a));
        assert_eq!(chunk_digest(a, b"x").as_bytes().len(), a.digest_len());
    }
    assert_eq!(Algo::from_code(0), None);
    assert!("md5".parse::<Algo>().is_err());
}

#[test]
fn par_for_returns_the_first_error_and_stops() {
    let seen = AtomicU64::new(0);
    let e = par_for(0..1000, 3, |i| {
        seen.fetch_add(1, Ordering::Relaxed);
        if i == 10 {
            Err(Error::Protocol("ten".into()))
        } else {
            Ok(())
        }
    })
    .unwrap_err();
    assert!(e.to_string().contains("ten"), "{e}");
    assert!(seen.load(Ordering::Relaxed) < 1000);
    par_for(0..0, 4, |_| Err(Error::Protocol("never".into()))).unwrap();
}

/// The stripes of `data` at `offsets` (then to the end), each cut in `chunk`-byte chunks and
/// hashed on its own, as a stream receives it.
fn stripes_of(algo: Algo, chunk: u64, data: &[u8], offsets: &[u64]) -> Vec<StripeDigests> {
    let ends: Vec<u64> = offsets[1..]
        .iter()
        .copied()
        .chain([data.len() as u64])
        .collect();
    offsets
        .iter()
        .zip(ends)
        .map(|(&off, end)| {
            let part = &data[off as usize..end as usize];
            let layout = Layout::new(algo, chunk, part.len() as u64).unwrap();
            let c = Chunks::new(layout);
            for (i, p) in part.chunks(chunk as usize).enumerate() {
                c.hash(i as u64, p).unwrap();
            }
            let d = c.finish().unwrap();
            c.stripe(off, d)
        })
        .collect()
}

#[test]
fn a_striped_file_has_the_digest_of_the_whole_file_whatever_the_stripes() {
    let data: Vec<u8> = (0..(3u32 << 20) + 12345)
        .map(|i| (i * 7 + i / 911) as u8)
        .collect();
    let size = data.len() as u64;
    for algo in Algo::ALL {
        for chunk in [4096u64, 64 << 10, 1 << 20] {
            let whole = digest_of(algo, chunk, &data).unwrap();
            for offsets in [&[0u64][..], &[0, 1 << 20], &[0, 1 << 20, 2 << 20]] {
                let stripes = stripes_of(algo, chunk, &data, offsets);
                let (d, layout) = file_digest_of_stripes(size, &stripes).unwrap();
                assert_eq!(d, whole, "{algo} chunk {chunk} stripes at {offsets:?}");
                assert_eq!(layout, Layout::new(algo, chunk, size).unwrap());
            }
        }
        // Stripes not on the chunk grid (or cut in different sizes) cannot give the file's
        // chunks: the digest of the stripes' digests instead, never the whole file's.
        let odd = stripes_of(algo, 1 << 20, &data, &[0, 3 << 19]);
        let (d, _) = file_digest_of_stripes(size, &odd).unwrap();
        let parts: Vec<_> = odd
            .iter()
            .map(|s| (s.offset, s.layout.size, s.digest))
            .collect();
        assert_eq!(d, crate::xfer::file::proto::striped_digest(&parts));
        assert_ne!(d, digest_of(algo, 1 << 20, &data).unwrap());
        let mut mixed = stripes_of(algo, 1 << 20, &data, &[0, 2 << 20]);
        mixed[1] = stripes_of(algo, 4096, &data, &[0, 2 << 20]).remove(1);
        let (d, _) = file_digest_of_stripes(size, &mixed).unwrap();
        assert_ne!(d, digest_of(algo, 1 << 20, &data).unwrap());
        // Stripes that do not cover the file are not the file.
        let short = stripes_of(algo, 1 << 20, &data, &[0, 1 << 20]);
        let (d, _) = file_digest_of_stripes(size + 1, &short).unwrap();
        assert_ne!(d, digest_of(algo, 1 << 20, &data).unwrap());
    }
    assert!(file_digest_of_stripes(0, &[]).is_none());
}
