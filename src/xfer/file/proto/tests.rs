use super::*;
use proptest::prelude::*;

fn hello() -> Hello {
    Hello {
        version: 2,
        kind: EntryKind::File,
        name: "a/b.txt".into(),
        target: String::new(),
        size: 0x0102_0304_0506_0708,
        mode: 0o644,
        mtime_sec: -2,
        mtime_nsec: 999_999_999,
        chunk_size: 1 << 20,
        verify: Algo::Blake3,
        flags: HelloFlags {
            resume: true,
            last: true,
            ..HelloFlags::default()
        },
        checksum: None,
        auth: Some([0xAA; 32]),
    }
}

fn hdr(kind: u16, len: u32) -> Vec<u8> {
    let mut v = b"RXFR".to_vec();
    v.extend_from_slice(&VERSION.to_be_bytes());
    v.extend_from_slice(&kind.to_be_bytes());
    v.extend_from_slice(&len.to_be_bytes());
    v
}

/// `encode(m) == bytes` and `decode(bytes) == m`.
fn exact(m: Msg, bytes: Vec<u8>) {
    assert_eq!(encode(&m), bytes, "{m:?}");
    assert_eq!(decode(&bytes).unwrap(), m);
}

fn err(buf: &[u8]) -> String {
    match decode(buf) {
        Err(Error::Protocol(s)) => s,
        other => panic!("expected a protocol error, got {other:?}"),
    }
}

#[test]
fn hello_layout() {
    let mut b = hdr(1, 2 + 2 + 2 + 4 + 2 + 8 + 4 + 8 + 4 + 2 + 7 + 2 + 32);
    b.extend_from_slice(&[0, 2]); // version
    b.extend_from_slice(&[0, 0b1101]); // resume | last | auth
    b.extend_from_slice(&[0, 0]); // kind: file
    b.extend_from_slice(&[0, 0x10, 0, 0]); // chunk 1 MiB
    b.extend_from_slice(&[0, 1]); // verify: blake3
    b.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]); // size
    b.extend_from_slice(&[0, 0, 0x01, 0xA4]); // 0o644
    b.extend_from_slice(&[0xFF; 7]);
    b.push(0xFE); // -2
    b.extend_from_slice(&[0x3B, 0x9A, 0xC9, 0xFF]); // 999 999 999
    b.extend_from_slice(&[0, 7]);
    b.extend_from_slice(b"a/b.txt");
    b.extend_from_slice(&[0, 0]); // no symlink target
    b.extend_from_slice(&[0xAA; 32]);
    exact(Msg::Hello(hello()), b);
}

#[test]
fn hello_v2_layout_symlink_and_checksum() {
    let link = Hello {
        kind: EntryKind::Symlink,
        name: "l".into(),
        target: "../t".into(),
        size: 0,
        flags: HelloFlags {
            force: true,
            ignore_existing: true,
            update: true,
            ..HelloFlags::default()
        },
        auth: None,
        ..hello()
    };
    let b = encode(&Msg::Hello(link.clone()));
    assert_eq!(&b[HEADER_LEN + 2..HEADER_LEN + 6], &[0, 0b110_0010, 0, 2]);
    assert_eq!(&b[b.len() - 6..], b"\0\x04../t");
    assert_eq!(decode(&b).unwrap(), Msg::Hello(link));
    let mut sum = hello();
    sum.checksum = Some([0x55; 32]);
    let b = encode(&Msg::Hello(sum.clone()));
    assert_eq!(b[HEADER_LEN + 3], 0b1_1101);
    // The checksum comes before the answer.
    assert_eq!(&b[b.len() - 64..b.len() - 32], &[0x55; 32]);
    assert_eq!(decode(&b).unwrap(), Msg::Hello(sum));
}

#[test]
fn hello_kind_rules() {
    let enc = |f: &dyn Fn(&mut Hello)| {
        let mut h = hello();
        f(&mut h);
        encode(&Msg::Hello(h))
    };
    // A symlink without a target, a file with one, a directory with bytes or a checksum.
    let b = enc(&|h| h.kind = EntryKind::Symlink);
    assert!(
        err(&b).contains("symlink has no symlink target"),
        "{}",
        err(&b)
    );
    let b = enc(&|h| h.target = "t".into());
    assert!(err(&b).contains("file has a symlink target"), "{}", err(&b));
    let b = enc(&|h| h.kind = EntryKind::Dir);
    assert!(err(&b).contains("dir announces"), "{}", err(&b));
    let b = enc(&|h| {
        h.kind = EntryKind::Dir;
        h.size = 0;
        h.checksum = Some([1; 32]);
    });
    assert!(err(&b).contains("carries a checksum"), "{}", err(&b));
    let mut b = enc(&|_| {});
    b[HEADER_LEN + 5] = 3;
    assert!(err(&b).contains("unknown entry kind 3"), "{}", err(&b));
    // No data follows a dry run: it carries neither inline nor resume (the sample has resume).
    let with_resume = |h: &mut Hello| h.flags.dry_run = true;
    let with_inline = |h: &mut Hello| {
        h.flags = HelloFlags {
            dry_run: true,
            inline: true,
            ..HelloFlags::default()
        };
        h.size = 10;
    };
    for b in [enc(&with_resume), enc(&with_inline)] {
        let e = err(&b);
        assert!(e.contains("dry run flagged inline or resume"), "{e}");
    }
    let b = enc(&|h| {
        h.flags = HelloFlags {
            dry_run: true,
            ..HelloFlags::default()
        }
    });
    match decode(&b).unwrap() {
        Msg::Hello(h) => assert!(h.flags.dry_run && !h.flags.inline),
        m => panic!("{m:?}"),
    }
}

#[test]
fn skip_layout() {
    let mut b = hdr(10, 2 + 2 + 9);
    b.extend_from_slice(&[0, 1, 0, 9]);
    b.extend_from_slice(b"identical");
    exact(
        Msg::Skip {
            why: SkipWhy::Identical,
            message: "identical".into(),
        },
        b,
    );
    for code in [0u16, 6, 0xffff] {
        let mut b = hdr(10, 4);
        b.extend_from_slice(&code.to_be_bytes());
        b.extend_from_slice(&[0, 0]);
        assert!(err(&b).contains(&format!("SKIP has unknown code {code}")));
    }
    for w in SkipWhy::ALL {
        assert_eq!(SkipWhy::from_code(w.code()), Some(w));
    }
}

#[test]
fn challenge_layout() {
    let mut b = hdr(2, 34);
    b.extend_from_slice(&[0, 3]);
    b.extend_from_slice(&[7; 32]);
    exact(
        Msg::Challenge {
            version: 3,
            nonce: [7; 32],
            proof: None,
        },
        b,
    );
    // With the receiver's proof: 32 more bytes; anything between is malformed.
    let mut b = hdr(2, 66);
    b.extend_from_slice(&[0, 3]);
    b.extend_from_slice(&[7; 32]);
    b.extend_from_slice(&[9; 32]);
    exact(
        Msg::Challenge {
            version: 3,
            nonce: [7; 32],
            proof: Some([9; 32]),
        },
        b,
    );
    for len in [35u32, 50, 65, 67] {
        let mut b = hdr(2, len);
        b.extend(std::iter::repeat_n(1u8, len as usize));
        assert!(decode(&b).is_err(), "a CHALLENGE body of {len} bytes");
    }
}

#[test]
fn the_receivers_proof_is_bound_to_token_and_nonce_and_is_not_the_senders_answer() {
    let (t, n) = (b"token".as_slice(), [5u8; 32]);
    let p = receiver_proof(t, &n);
    assert!(receiver_proof_ok(t, &n, Some(&p)));
    assert!(!receiver_proof_ok(b"other", &n, Some(&p)));
    assert!(!receiver_proof_ok(t, &[6u8; 32], Some(&p)));
    assert!(!receiver_proof_ok(t, &n, None));
    assert_ne!(p, auth_answer(t, &n));
    assert!(!auth_verify(t, &n, Some(&p)));
}

#[test]
fn mr_layout() {
    let mut b = hdr(3, 8 + 4 + 4 + 4 + 8 + 32);
    b.extend_from_slice(&[0, 0, 0x7f, 0, 0, 0, 0x10, 0]);
    b.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    b.extend_from_slice(&[0, 1, 0, 0]);
    b.extend_from_slice(&[0, 0, 0, 16]);
    b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0x20, 0]);
    b.extend_from_slice(&[9; 32]);
    exact(
        Msg::Mr(RingGrant {
            addr: 0x7f00_0000_1000,
            rkey: 0xdead_beef,
            slot_size: 65536,
            slot_count: 16,
            resume_offset: 0x2000,
            resume_hash: [9; 32],
        }),
        b,
    );
}

#[test]
fn refuse_ack_err_layout() {
    for (kind, mk) in [
        (
            4u16,
            (|r, m| Msg::Refuse {
                reason: r,
                message: m,
            }) as fn(Reason, String) -> Msg,
        ),
        (7, |r, m| Msg::Ack {
            status: r,
            message: m,
        }),
        (8, |r, m| Msg::Err {
            reason: r,
            message: m,
        }),
    ] {
        let mut b = hdr(kind, 2 + 2 + 3);
        b.extend_from_slice(&[0, 4, 0, 3]);
        b.extend_from_slice(b"x.y");
        exact(mk(Reason::Exists, "x.y".into()), b);
    }
}

#[test]
fn credit_fin_done_layout() {
    let mut b = hdr(5, 4);
    b.extend_from_slice(&[0, 0, 1, 2]);
    exact(Msg::Credit { slots: 258 }, b);
    let mut b = hdr(6, 40);
    b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 5]);
    b.extend_from_slice(&[3; 32]);
    exact(
        Msg::Fin {
            bytes: 5,
            hash: [3; 32],
        },
        b,
    );
    exact(Msg::Done, hdr(9, 0));
}

#[test]
fn ack_ok_allowed_but_refuse_ok_is_not() {
    let ok = encode(&Msg::Ack {
        status: Reason::Ok,
        message: String::new(),
    });
    assert!(matches!(
        decode(&ok),
        Ok(Msg::Ack {
            status: Reason::Ok,
            ..
        })
    ));
    let mut refuse = hdr(4, 4);
    refuse.extend_from_slice(&[0, 0, 0, 0]);
    assert!(err(&refuse).contains("without a reason"));
}

#[test]
fn distinct_errors() {
    let good = encode(&Msg::Credit { slots: 1 });
    let mut bad = good.clone();
    bad[0] = b'X';
    assert!(err(&bad).contains("bad magic"));
    let mut bad = good.clone();
    bad[5] = 1;
    let Err(Error::Version { theirs, ours, .. }) = decode(&bad) else {
        panic!("{:?}", decode(&bad))
    };
    assert_eq!((theirs, ours), (1, 3));
    assert_eq!(
        header(&bad).unwrap().version,
        1,
        "header() reads any version"
    );
    let mut bad = good.clone();
    bad[7] = 99;
    assert!(err(&bad).contains("unknown message type 99"));
    assert!(err(&good[..good.len() - 1]).contains("truncated"));
    assert!(err(&good[..5]).contains("truncated header"));
    assert!(err(&[]).contains("truncated header"));
    let mut bad = good.clone();
    bad.push(0);
    assert!(err(&bad).contains("trailing"));
    // (A message other than a BATCH over 8192 bytes: batch.rs's tests.)
    assert!(err(&vec![0; MAX_BATCH_LEN + 1]).contains("exceeds the maximum"));
    // Header length agrees with the buffer, but the body has an extra byte.
    let mut b = hdr(5, 5);
    b.extend_from_slice(&[0, 0, 0, 1, 0]);
    assert!(err(&b).contains("CREDIT has 1 trailing bytes"));
    // A body shorter than its type needs.
    let mut b = hdr(6, 8);
    b.extend_from_slice(&[0; 8]);
    assert!(err(&b).contains("truncated FIN"));
}

#[test]
fn field_checks() {
    let mut h = encode(&Msg::Hello(hello()));
    h[HEADER_LEN + 2] = 0x80; // unknown flag
    assert!(err(&h).contains("unknown flag"));
    let mut h = encode(&Msg::Hello(hello()));
    h[HEADER_LEN + 32..HEADER_LEN + 36].copy_from_slice(&1_000_000_000u32.to_be_bytes());
    assert!(err(&h).contains("nanoseconds"));
    let mut h = encode(&Msg::Hello(hello()));
    h[HEADER_LEN + 38] = 0xff; // name byte 0 -> invalid UTF-8
    assert!(err(&h).contains("not UTF-8"));
    let mut h = encode(&Msg::Hello(hello()));
    h[HEADER_LEN + 11] = 9; // verification code
    assert!(err(&h).contains("HELLO has unknown verification 9"));
    let mut b = hdr(8, 4);
    b.extend_from_slice(&[0, 200, 0, 0]);
    assert!(err(&b).contains("unknown reason code 200"));
    // Name length over the limit, even with the bytes present.
    let mut b = hdr(1, 36 + 2 + 4097);
    b.extend_from_slice(&[0; 10]);
    b.extend_from_slice(&Algo::Xxh3.code().to_be_bytes());
    b.extend_from_slice(&[0; 24]);
    b.extend_from_slice(&4097u16.to_be_bytes());
    b.resize(b.len() + 4097, b'a');
    let full = b;
    assert!(err(&full).contains("file name length 4097 exceeds"));
}

#[test]
fn largest_messages_fit() {
    let mut h = hello();
    h.name = "n".repeat(MAX_NAME_LEN);
    h.checksum = Some([1; 32]);
    let b = encode(&Msg::Hello(h.clone()));
    assert!(b.len() <= MAX_MSG_LEN, "{}", b.len());
    assert_eq!(decode(&b).unwrap(), Msg::Hello(h.clone()));
    // The longest name with the longest symlink target (no checksum: links have none).
    h.kind = EntryKind::Symlink;
    h.size = 0;
    h.checksum = None;
    h.target = "t".repeat(MAX_TARGET_LEN);
    let b = encode(&Msg::Hello(h.clone()));
    assert!(b.len() <= MAX_MSG_LEN, "{}", b.len());
    assert_eq!(decode(&b).unwrap(), Msg::Hello(h));
    let e = Msg::Err {
        reason: Reason::Internal,
        message: "é".repeat(MAX_TEXT_LEN / 2),
    };
    assert_eq!(decode(&encode(&e)).unwrap(), e);
}

#[test]
fn digests_layout_and_checks() {
    let d = |b: u8| ChunkDigest::from_bytes(Algo::Xxh3, &[b; 16]).unwrap();
    let m = Msg::Digests(Digests {
        algo: Algo::Xxh3,
        first: 0x0102_0304_0506_0708,
        digests: vec![d(0xAB), d(0xCD)],
    });
    let mut b = hdr(11, 2 + 8 + 2 + 32);
    b.extend_from_slice(&[0, 2]); // xxh3
    b.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    b.extend_from_slice(&[0, 2]); // two digests
    b.extend_from_slice(&[0xAB; 16]);
    b.extend_from_slice(&[0xCD; 16]);
    exact(m, b.clone());
    // A BLAKE3 digest is 32 bytes: the same body is one BLAKE3 digest, not two.
    let mut one = b.clone();
    one[HEADER_LEN + 1] = 1;
    assert!(err(&one).contains("truncated DIGESTS") || err(&one).contains("trailing"));
    let mut zero = hdr(11, 12);
    zero.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert!(err(&zero).contains("carries 0 digests"));
    let mut many = hdr(11, 12);
    many.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
    many.extend_from_slice(&(MAX_DIGESTS as u16 + 1).to_be_bytes());
    assert!(err(&many).contains("carries 241 digests"));
    let mut unknown = b.clone();
    unknown[HEADER_LEN + 1] = 7;
    assert!(err(&unknown).contains("DIGESTS has unknown verification 7"));
    let mut wrap = b;
    wrap[HEADER_LEN + 2..HEADER_LEN + 10].copy_from_slice(&u64::MAX.to_be_bytes());
    assert!(err(&wrap).contains("overflows"));
    // The largest batch fits.
    let full = Msg::Digests(Digests {
        algo: Algo::Blake3,
        first: 0,
        digests: vec![ChunkDigest::from_bytes(Algo::Blake3, &[7; 32]).unwrap(); MAX_DIGESTS],
    });
    let enc = encode(&full);
    assert!(enc.len() <= MAX_MSG_LEN, "{}", enc.len());
    assert_eq!(decode(&enc).unwrap(), full);
}

#[test]
fn truncate_text_keeps_char_boundary() {
    let s = "é".repeat(MAX_TEXT_LEN); // 2 bytes each
    let t = truncate_text(&format!("x{s}"));
    assert!(t.len() <= MAX_TEXT_LEN && t.len() == MAX_TEXT_LEN - 1);
    assert_eq!(truncate_text("short"), "short");
}

#[test]
fn reason_codes_round_trip() {
    for r in Reason::ALL {
        assert_eq!(Reason::from_code(r.code()), Some(r));
    }
    assert_eq!(Reason::from_code(Reason::ALL.len() as u16), None);
    assert_eq!(Reason::HashMismatch.to_string(), "hash mismatch");
}

#[test]
fn imm_layout() {
    assert_eq!(
        encode_chunk_imm(Imm {
            slot: 3,
            seq: 0x1234
        }),
        0x1234_0003
    );
    assert_eq!(
        decode_chunk_imm(0xffff_0007, 8).unwrap(),
        Imm {
            slot: 7,
            seq: 0xffff
        }
    );
    assert!(decode_chunk_imm(0x0000_0008, 8).is_err());
    assert!(decode_chunk_imm(0xffff, IMM_SLOTS).is_ok());
}

#[test]
fn auth_answer_is_keyed_and_verifiable() {
    let n1 = new_nonce();
    let n2 = new_nonce();
    assert_ne!(n1, n2);
    let a = auth_answer(b"secret", &n1);
    assert!(auth_verify(b"secret", &n1, Some(&a)));
    assert!(!auth_verify(b"secret", &n2, Some(&a)), "other nonce");
    assert!(!auth_verify(b"Secret", &n1, Some(&a)), "other token");
    assert!(!auth_verify(b"secret", &n1, None), "no answer");
    // Pinned vector: the documented construction.
    let key = blake3::derive_key(AUTH_CONTEXT, b"secret");
    let mut input = b"rdmaxfer HELLO answer v1\0".to_vec();
    input.extend_from_slice(&[0u8; 32]);
    assert_eq!(
        auth_answer(b"secret", &[0; 32]),
        *blake3::keyed_hash(&key, &input).as_bytes()
    );
}

fn text(max: usize) -> impl Strategy<Value = String> {
    ".{0,40}".prop_map(move |s: String| {
        let mut end = s.len().min(max);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s[..end].to_string()
    })
}

fn reason(ok: bool) -> impl Strategy<Value = Reason> {
    let lo = if ok { 0 } else { 1 };
    (lo..Reason::ALL.len()).prop_map(|i| Reason::ALL[i])
}

fn msg() -> impl Strategy<Value = Msg> {
    let hello = (
        (
            any::<u16>(),
            0..3u16,
            text(MAX_NAME_LEN),
            text(MAX_TARGET_LEN),
        ),
        any::<u64>(),
        any::<u32>(),
        any::<i64>(),
        0..1_000_000_000u32,
        (any::<u32>(), prop::sample::select(Algo::ALL.to_vec())),
        any::<[bool; 6]>(),
        any::<Option<Digest>>(),
        any::<Option<Digest>>(),
    )
        .prop_map(
            |(
                (version, kind, name, target),
                size,
                mode,
                s,
                ns,
                (chunk_size, verify),
                f,
                sum,
                auth,
            )| {
                let kind = EntryKind::from_code(kind).expect("0..3");
                let file = kind == EntryKind::File;
                let target = match (kind, target.is_empty()) {
                    (EntryKind::Symlink, true) => "t".into(),
                    (EntryKind::Symlink, false) => target,
                    _ => String::new(),
                };
                Msg::Hello(Hello {
                    version,
                    kind,
                    name,
                    target,
                    size: match (file, f[5]) {
                        (false, _) => 0,
                        (true, false) => size,
                        (true, true) => size % (INLINE_MAX + 1),
                    },
                    mode,
                    mtime_sec: s,
                    mtime_nsec: ns,
                    chunk_size,
                    verify,
                    flags: HelloFlags {
                        resume: f[0],
                        force: f[1],
                        last: f[2],
                        ignore_existing: f[3],
                        update: f[4],
                        inline: f[5] && file,
                        // A dry run carries neither inline nor resume.
                        dry_run: f[1] && f[2] && !f[0] && !(f[5] && file),
                    },
                    checksum: sum.filter(|_| file),
                    auth,
                })
            },
        );
    let skip = (0..SkipWhy::ALL.len(), text(MAX_TEXT_LEN)).prop_map(|(i, message)| Msg::Skip {
        why: SkipWhy::ALL[i],
        message,
    });
    let digests = (
        prop::sample::select(Algo::ALL.to_vec()),
        any::<u64>(),
        prop::collection::vec(any::<[u8; 32]>(), 1..=MAX_DIGESTS),
    )
        .prop_map(|(algo, first, ds)| {
            let first = first.min(u64::MAX - ds.len() as u64);
            Msg::Digests(Digests {
                algo,
                first,
                digests: ds
                    .iter()
                    .map(|d| ChunkDigest::from_bytes(algo, &d[..algo.digest_len()]).unwrap())
                    .collect(),
            })
        });
    prop_oneof![
        hello,
        digests,
        (any::<u16>(), any::<Digest>(), any::<Option<Digest>>()).prop_map(
            |(version, nonce, proof)| Msg::Challenge {
                version,
                nonce,
                proof
            }
        ),
        any::<(u64, u32, u32, u32, u64, Digest)>().prop_map(|t| Msg::Mr(RingGrant {
            addr: t.0,
            rkey: t.1,
            slot_size: t.2,
            slot_count: t.3,
            resume_offset: t.4,
            resume_hash: t.5,
        })),
        (reason(false), text(MAX_TEXT_LEN))
            .prop_map(|(reason, message)| Msg::Refuse { reason, message }),
        any::<u32>().prop_map(|slots| Msg::Credit { slots }),
        (any::<u64>(), any::<Digest>()).prop_map(|(bytes, hash)| Msg::Fin { bytes, hash }),
        (reason(true), text(MAX_TEXT_LEN))
            .prop_map(|(status, message)| Msg::Ack { status, message }),
        (reason(false), text(MAX_TEXT_LEN))
            .prop_map(|(reason, message)| Msg::Err { reason, message }),
        Just(Msg::Done),
        skip,
        Just(Msg::Want),
        data(),
        (text(MAX_NAME_LEN), any::<bool>()).prop_map(|(n, del)| {
            let n = if n.is_empty() { "d".into() } else { n };
            if del {
                Msg::Delete(n)
            } else {
                Msg::List(n)
            }
        }),
        names(),
    ]
}

fn names() -> impl Strategy<Value = Msg> {
    let one = (0..4u16, "[a-z.é]{1,20}");
    (any::<bool>(), prop::collection::vec(one, 0..30)).prop_map(|(last, v)| {
        let names: Vec<Listed> = v
            .into_iter()
            .filter(|(_, n)| listable(n))
            .map(|(k, name)| Listed {
                kind: ListedKind::from_code(k).expect("0..4"),
                name,
            })
            .collect();
        let last = last || names.is_empty();
        Msg::Names(Names { last, names })
    })
}

fn data() -> impl Strategy<Value = Msg> {
    (
        0..INLINE_MAX,
        any::<Option<Digest>>(),
        any::<bool>(),
        prop::collection::vec(any::<u8>(), 0..=PIECE_MAX),
    )
        .prop_map(|(offset, hash, abandon, bytes)| {
            Msg::Data(if abandon {
                Data {
                    offset,
                    hash: None,
                    abandon,
                    vanished: bytes.first().is_some_and(|b| b % 2 == 1),
                    bytes: Vec::new(),
                }
            } else {
                Data {
                    offset,
                    hash,
                    abandon,
                    vanished: false,
                    bytes,
                }
            })
        })
}

#[test]
fn want_and_data_layout() {
    exact(Msg::Want, hdr(16, 0));
    let mut b = hdr(17, 2 + 8 + 4 + 32 + 3);
    b.extend_from_slice(&[0, 1]); // last
    b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0x20, 0]);
    b.extend_from_slice(&[0, 0, 0, 3]);
    b.extend_from_slice(&[7; 32]);
    b.extend_from_slice(b"abc");
    let d = Data {
        offset: 0x2000,
        hash: Some([7; 32]),
        abandon: false,
        vanished: false,
        bytes: b"abc".to_vec(),
    };
    exact(Msg::Data(d.clone()), b.clone());
    // The largest piece fits a control message.
    let big = Data {
        bytes: vec![1; PIECE_MAX],
        ..d.clone()
    };
    assert_eq!(encode(&Msg::Data(big)).len(), MAX_MSG_LEN);
    // A digest only in the last piece; an abandoning piece is empty and not last.
    let mut x = b.clone();
    x[HEADER_LEN + 1] = 0;
    assert!(
        err(&x).contains("other than the last carries a digest"),
        "{}",
        err(&x)
    );
    let mut x = b.clone();
    x[HEADER_LEN + 1] = 3;
    assert!(err(&x).contains("abandoning"), "{}", err(&x));
    let mut x = b.clone();
    x[HEADER_LEN + 1] = 8;
    assert!(err(&x).contains("unknown flag"), "{}", err(&x));
    // `vanished` (bit 2) only with `abandon`.
    let mut x = b.clone();
    x[HEADER_LEN + 1] = 5;
    assert!(err(&x).contains("flagged vanished"), "{}", err(&x));
    let gone = Msg::Data(Data {
        offset: 0,
        hash: None,
        abandon: true,
        vanished: true,
        bytes: Vec::new(),
    });
    let mut g = hdr(17, 2 + 8 + 4 + 32);
    g.extend_from_slice(&[0, 6]);
    g.extend_from_slice(&[0; 8 + 4 + 32]);
    exact(gone, g);
    // Offsets and lengths past the inline limit.
    let mut x = b.clone();
    x[HEADER_LEN + 2..HEADER_LEN + 10].copy_from_slice(&INLINE_MAX.to_be_bytes());
    assert!(err(&x).contains("beyond the inline limit"), "{}", err(&x));
    let mut x = b.clone();
    x[HEADER_LEN + 10..HEADER_LEN + 14].copy_from_slice(&(PIECE_MAX as u32 + 1).to_be_bytes());
    assert!(err(&x).contains("exceeds the maximum"), "{}", err(&x));
    // An inline HELLO is a file of at most INLINE_MAX bytes.
    let mut h = hello();
    h.flags.inline = true;
    h.size = INLINE_MAX;
    assert_eq!(
        decode(&encode(&Msg::Hello(h.clone()))).unwrap(),
        Msg::Hello(h.clone())
    );
    h.size = INLINE_MAX + 1;
    assert!(err(&encode(&Msg::Hello(h.clone()))).contains("inline"));
    h.size = 0;
    h.kind = EntryKind::Dir;
    assert!(err(&encode(&Msg::Hello(h))).contains("inline dir"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    #[test]
    fn round_trip(m in msg()) {
        let b = encode(&m);
        prop_assert!(b.len() <= MAX_MSG_LEN);
        prop_assert_eq!(decode(&b).unwrap(), m);
    }

    /// Every proper prefix and every extension of a valid message is refused.
    #[test]
    fn truncated_or_extended_refused(m in msg(), cut in any::<prop::sample::Index>(), extra in 1..8usize) {
        let b = encode(&m);
        let n = cut.index(b.len());
        prop_assert!(decode(&b[..n]).is_err());
        let mut long = b.clone();
        long.resize(b.len() + extra, 0);
        prop_assert!(decode(&long).is_err());
    }

    /// Arbitrary bytes never panic; bytes behind a valid header reach the body decoders.
    #[test]
    fn arbitrary_bytes_never_panic(kind in 0..23u16, body in prop::collection::vec(any::<u8>(), 0..200), raw in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = decode(&raw);
        let mut b = hdr(kind, body.len() as u32);
        b.extend_from_slice(&body);
        if let Ok(m) = decode(&b) {
            // Anything accepted re-encodes to the same bytes: the layout is canonical.
            prop_assert_eq!(encode(&m), b);
        }
    }

    /// Flipping any byte of a valid message never panics and is either refused or canonical.
    #[test]
    fn mutated_messages(m in msg(), at in any::<prop::sample::Index>(), x in 1..=255u8) {
        let mut b = encode(&m);
        let i = at.index(b.len());
        b[i] ^= x;
        if let Ok(m2) = decode(&b) {
            prop_assert_eq!(encode(&m2), b);
        }
    }

    #[test]
    fn imm_round_trip(slot in any::<u16>(), seq in any::<u16>()) {
        let imm = Imm { slot, seq };
        prop_assert_eq!(decode_chunk_imm(encode_chunk_imm(imm), IMM_SLOTS).unwrap(), imm);
    }
}
