//! Fuzz checks for every decoder of peer input (see `docs/fuzzing.md`).
//!
//! Each `check_*` function takes arbitrary bytes, runs them through a decoder and asserts what
//! is cheap to assert: no panic, and decode → encode → decode gives the same value (byte-for-byte
//! the same message where the format has one canonical form). A failed assertion is a panic,
//! which AFL counts as a crash. The AFL binaries in `src/bin/` call these; the main crate's
//! `tests/fuzz_seeds.rs` includes this file and replays every seed and regression input
//! through the same functions, so `cargo test` covers them without AFL.
//!
//! Only the crate's public API and `std` are used here (the file is compiled in both packages).

use rdmaxfer::verbs::{Gid, RemoteAccess, RemoteRegion};
use rdmaxfer::xfer::file::recv::{entry, partial};
use rdmaxfer::xfer::file::{names, proto};
use rdmaxfer::xfer::onesided;
use rdmaxfer::xfer::params::{self, SessionParams};
use rdmaxfer::xfer::pingpong::Pattern;
use rdmaxfer::xfer::{rdma_rw, wire};

#[path = "part.rs"]
mod part;
#[path = "session.rs"]
mod session;
pub use part::check_file_part;
pub use session::{check_file_session, replay_session, session_seeds};

/// A fuzz target: its name (bin name, seed folder) and its check.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, in the order CI runs them.
pub const TARGETS: &[Target] = &[
    ("file_proto", check_file_proto),
    ("file_part", check_file_part),
    ("file_session", check_file_session),
    ("onesided", check_onesided),
    ("remote_region", check_remote_region),
    ("cm_handshake", check_cm_handshake),
    ("oob", check_oob),
    ("pingpong", check_pingpong),
];

/// The check of target `name`.
pub fn target(name: &str) -> Option<fn(&[u8])> {
    TARGETS.iter().find(|t| t.0 == name).map(|t| t.1)
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    let mut a = [0u8; 4];
    for (k, d) in a.iter_mut().enumerate() {
        *d = b.get(i + k).copied().unwrap_or(0);
    }
    u32::from_be_bytes(a)
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    (u64::from(u32_at(b, i)) << 32) | u64::from(u32_at(b, i + 4))
}

/// The file protocol's control messages as the receiver and sender read them (`decode_ctl`:
/// header first, then the whole message), the sanitizer of a HELLO's file name, and the
/// data-chunk immediate (first 4 bytes: immediate, next 4: slot count).
pub fn check_file_proto(data: &[u8]) {
    let header = proto::header(data);
    if let Ok(msg) = proto::decode(data) {
        let h = header.expect("a decodable message has a decodable header");
        assert_eq!(h.version, proto::VERSION);
        assert_eq!(h.len as usize, data.len() - proto::HEADER_LEN);
        // One canonical form: the encoder gives back the very bytes.
        let again = proto::encode(&msg);
        assert_eq!(again, data, "encode(decode(b)) != b for {msg:?}");
        if let proto::Msg::Hello(hello) = &msg {
            check_name(&hello.name);
            check_hello_kind(hello);
        }
        if let proto::Msg::Stripe(s) = &msg {
            assert!(s.count >= 2 && s.index < s.count);
            assert!(s.offset.checked_add(s.len).is_some());
        }
        if let proto::Msg::Session(s) = &msg {
            assert!(s.index < s.streams);
        }
        if let proto::Msg::Skip { why, .. } = &msg {
            assert_eq!(proto::SkipWhy::from_code(why.code()), Some(*why));
        }
        if let proto::Msg::Data(d) = &msg {
            assert!(d.bytes.len() <= proto::PIECE_MAX && d.offset < proto::INLINE_MAX);
            assert!(!d.abandon || (d.bytes.is_empty() && d.hash.is_none()));
        }
        if let proto::Msg::List(n) | proto::Msg::Delete(n) = &msg {
            assert!(!n.is_empty() && n.len() <= proto::MAX_NAME_LEN);
            check_name(n);
        }
        if let proto::Msg::Names(n) = &msg {
            assert!(n.last || !n.names.is_empty());
            for l in &n.names {
                assert!(proto::listable(&l.name) && l.name.len() <= proto::MAX_LISTED_LEN);
                assert_eq!(proto::ListedKind::from_code(l.kind.code()), Some(l.kind));
            }
        }
        if let proto::Msg::Repair(r) = &msg {
            assert!((1..=proto::MAX_REPAIR_ROUNDS).contains(&r.round));
            assert!((1..=proto::MAX_REPAIR_CHUNKS).contains(&r.chunks.len()));
            assert!(r.chunks.windows(2).all(|w| w[0] < w[1]));
        }
        if let proto::Msg::Digests(d) = &msg {
            assert!((1..=proto::MAX_DIGESTS).contains(&d.digests.len()));
            assert!(d.first.checked_add(d.digests.len() as u64).is_some());
            for x in &d.digests {
                assert_eq!(x.as_bytes().len(), d.algo.digest_len());
            }
        }
    }
    // A striped file's resume state as read back from disk (`partial::decode`), as is and
    // with a valid checksum appended (to reach the checks behind it): what it accepts is
    // consistent and re-encodes to the same bytes.
    for b in [data.to_vec(), partial::seal(data)] {
        if let Ok(st) = partial::decode(&b) {
            assert!((1..=usize::from(proto::MAX_STRIPES)).contains(&st.stripes.len()));
            for h in &st.stripes {
                assert!(h.held <= h.len);
                assert!(h.offset.checked_add(h.len).is_some_and(|e| e <= st.size));
            }
            assert_eq!(partial::encode(&st).expect("a decoded state encodes"), b);
        }
    }
    // Stripes planned for a file of any size: contiguous, covering it exactly.
    let (size, count) = (u64_at(data, 8) >> 20, (u32_at(data, 16) >> 26) as u16);
    let stripes = proto::plan_stripes(size, count, 1 << 20);
    let mut next = 0;
    for s in &stripes {
        assert_eq!((s.offset, usize::from(s.count)), (next, stripes.len()));
        next = s.end();
    }
    assert!(stripes.is_empty() || next == size);
    // The immediate of a data chunk (any u32) against a ring of any size.
    let (value, slots) = (u32_at(data, 0), u32_at(data, 4));
    match proto::decode_chunk_imm(value, slots) {
        Ok(imm) => {
            assert!(u32::from(imm.slot) < slots);
            assert_eq!(proto::encode_chunk_imm(imm), value);
        }
        Err(_) => assert!(value & 0xffff >= slots),
    }
}

/// A HELLO's entry kind and what goes with it (v2): only a symlink has a target, only a file
/// has bytes or a checksum; a symlink target the receiver accepts cannot lead out of `--out`.
fn check_hello_kind(h: &proto::Hello) {
    use proto::EntryKind;
    assert_eq!(h.kind == EntryKind::Symlink, !h.target.is_empty());
    if h.kind != EntryKind::File {
        assert_eq!(h.size, 0);
        assert!(h.checksum.is_none());
    }
    if h.flags.inline {
        assert!(h.kind == EntryKind::File && h.size <= proto::INLINE_MAX);
    }
    let Ok(rel) = names::sanitize(&h.name) else {
        return;
    };
    if entry::check_link_target(&rel, &h.target).is_ok() {
        assert!(!h.target.starts_with('/'));
        // Leading `..` only, no deeper than the link's directory; names after them.
        let mut depth = rel.parents().count() as i64;
        let mut named = false;
        for c in h.target.split('/') {
            match c {
                "" | "." => {}
                ".." => {
                    assert!(!named, "'..' after a name accepted: {:?}", h.target);
                    depth -= 1;
                    assert!(depth >= 0, "target escapes: {:?}", h.target);
                }
                _ => named = true,
            }
        }
    }
}

/// A peer-supplied file name: what the sanitizer accepts is a relative path of plain
/// components that stays inside the output folder.
fn check_name(name: &str) {
    if let Ok(rel) = names::sanitize(name) {
        assert_eq!(rel.as_str(), name);
        assert!(!name.starts_with('/') && !name.contains('\0') && !name.contains('\\'));
        let comps: Vec<&str> = rel.components().collect();
        assert!(!comps.is_empty());
        for c in &comps {
            assert!(!c.is_empty() && *c != "." && *c != ".." && !c.contains('/'));
        }
        assert_eq!(rel.file_name(), *comps.last().expect("non-empty"));
        assert_eq!(rel.parents().count(), comps.len() - 1);
        let temp = rel.temp_name();
        assert!(!temp.contains('/') && temp != "." && temp != "..");
        assert!(
            names::sanitize(&temp).is_err(),
            "a temp name is itself acceptable: {temp:?}"
        );
    }
}

/// The one-sided / bench control messages, and the bounds check a client applies to the
/// region the server exposes (bytes past the message: none here, offsets from the region).
pub fn check_onesided(data: &[u8]) {
    let Ok(msg) = onesided::Msg::decode(data) else {
        return;
    };
    let enc = msg.encode();
    let again = onesided::Msg::decode(&enc)
        .unwrap_or_else(|e| panic!("re-decoding {msg:?} ({enc:02x?}) failed: {e}"));
    assert_eq!(again, msg);
    // Only reserved bytes may differ between the input and the canonical form.
    assert_eq!(enc.len(), data.len());
    if let onesided::Msg::Expose { access, region } = msg {
        assert!(access.can_read() || access.can_write());
        assert!(matches!(
            access,
            RemoteAccess::Read | RemoteAccess::Write | RemoteAccess::ReadWrite
        ));
        check_region_bounds(&region, region.len / 2, region.len - region.len / 2);
    }
}

/// [`RemoteRegion::decode`] (first 20 bytes) and the bounds checks on it with an offset and
/// a length taken from the next 16 bytes.
pub fn check_remote_region(data: &[u8]) {
    let head = &data[..data.len().min(RemoteRegion::WIRE_LEN)];
    match RemoteRegion::decode(head) {
        Ok(r) => {
            assert_eq!(head.len(), RemoteRegion::WIRE_LEN);
            assert_eq!(&r.encode()[..], head);
            assert_eq!(RemoteRegion::decode(&r.encode()).expect("re-decode"), r);
            check_region_bounds(&r, u64_at(data, 20), u64_at(data, 28));
        }
        Err(_) => assert_ne!(head.len(), RemoteRegion::WIRE_LEN),
    }
    // Any other length is refused.
    assert!(RemoteRegion::decode(data).is_ok() == (data.len() == RemoteRegion::WIRE_LEN));
}

fn check_region_bounds(r: &RemoteRegion, offset: u64, len: u64) {
    let inside = offset.checked_add(len).is_some_and(|end| end <= r.len);
    assert_eq!(rdma_rw::check_bounds(r, offset, len).is_ok(), inside);
    match r.slice(offset, len) {
        Ok(s) => {
            assert!(inside);
            assert_eq!(u64::from(s.len()), len);
        }
        Err(_) => {
            assert!(!inside || len > u64::from(u32::MAX) || r.addr.checked_add(offset).is_none())
        }
    }
}

/// The RDMA CM handshake (connect / accept private data, with the client's session
/// parameters), the reject reason, and the immediate word of SEND_WITH_IMM (credits), as the
/// endpoint decodes them; the parameter block also on its own (its first 24 bytes), and the
/// server's limit check on what it carries.
pub fn check_cm_handshake(data: &[u8]) {
    if let Ok(h) = wire::Hello::decode(data) {
        assert_eq!(&h.encode()[..], &data[..wire::HELLO_LEN]);
        assert!(h.recv_depth >= 1 && h.recv_depth <= wire::MAX_CREDITS && h.msg_size > 0);
        assert_eq!(wire::Hello::decode(&h.encode()).expect("re-decode"), h);
        assert_eq!(
            SessionParams::decode(&data[wire::HELLO_LEN - params::PARAMS_LEN..wire::HELLO_LEN])
                .expect("the block of a decoded handshake"),
            h.params
        );
    }
    let head = &data[..data.len().min(params::PARAMS_LEN)];
    match SessionParams::decode(head) {
        Ok(p) => {
            assert_eq!(&SessionParams::encode(p.as_ref())[..], head);
            if let Some(p) = p {
                let limits = params::Limits::default();
                let ok = limits.check(p.size, p.iters).is_ok();
                assert_eq!(
                    ok,
                    (1..=limits.max_size).contains(&p.size)
                        && (1..=limits.max_iters).contains(&p.iters)
                );
            }
        }
        Err(_) => assert!(
            head.len() != params::PARAMS_LEN
                || head[1..4] != [0; 3]
                || head[0] > 4
                || (head[0] == 0 && head.iter().any(|&x| x != 0))
        ),
    }
    if let Some(r) = wire::Reject::decode(data) {
        assert!(!r.text.contains('\0'));
        let full = r.encode(wire::REJECT_HEADER_LEN + r.text.len());
        assert_eq!(wire::Reject::decode(&full).as_ref(), Some(&r));
        // Cut to the CM's private-data room, then decoded: a prefix of the text.
        let cut = r.encode(wire::REJECT_HEADER_LEN + data.len() % 64);
        let short = wire::Reject::decode(&cut).expect("a cut reject still decodes");
        assert_eq!(short.code, r.code);
        assert!(r.text.starts_with(&short.text));
    }
    let imm = u32_at(data, 0);
    match wire::decode_imm(imm) {
        Ok((kind, credits)) => {
            assert!(credits <= wire::MAX_CREDITS);
            assert_eq!(wire::encode_imm(kind, credits), imm);
        }
        Err(_) => assert!(imm >> 24 > 1),
    }
}

/// ibv_rc_pingpong's out-of-band address message (52 bytes) and its `"done"` reply.
pub fn check_oob(data: &[u8]) {
    match wire::OobDest::decode(data) {
        Ok(d) => {
            let enc = d.encode();
            // The encoder writes lowercase hex; the decoder also takes uppercase.
            assert_eq!(&enc[..], &data.to_ascii_lowercase()[..]);
            assert_eq!(wire::OobDest::decode(&enc).expect("re-decode"), d);
            assert!(d.qpn <= 0xff_ffff && d.psn <= 0xff_ffff);
            let hex = std::str::from_utf8(&data[19..51]).expect("hex is ASCII");
            assert_eq!(Gid::from_wire_hex(hex).expect("GID"), d.gid);
        }
        Err(_) => assert!(!well_formed_oob(data), "a well-formed message was refused"),
    }
    assert_eq!(wire::check_done(data).is_ok(), data == wire::OOB_DONE);
}

/// LLLL:QQQQQQ:PPPPPP:GGGG…(32) and a NUL, every field hex digits.
fn well_formed_oob(b: &[u8]) -> bool {
    b.len() == wire::OOB_MSG_LEN
        && b[51] == 0
        && [4, 11, 18].iter().all(|&i| b[i] == b':')
        && [0..4, 5..11, 12..18, 19..51]
            .into_iter()
            .all(|r| b[r].iter().all(u8::is_ascii_hexdigit))
}

/// A ping-pong message checked against the pattern: size from the first 2 bytes (mod 2048),
/// sequence number from the next 8, the message is the rest. A message passes the full check
/// exactly when it is the pattern stamped with that number.
pub fn check_pingpong(data: &[u8]) {
    if data.len() < 10 {
        return;
    }
    let size = usize::from(u16::from_be_bytes([data[0], data[1]])) % 2048;
    let seq = u64_at(data, 2);
    let msg = &data[10..];
    let pat = Pattern::new(size);
    let mut want = vec![0u8; size];
    pat.fill(&mut want, seq);
    assert_eq!(pat.check(msg, seq, "pong").is_ok(), msg == &want[..]);
    if pat.check_seq(msg, seq, "ping").is_ok() {
        assert_eq!(msg.len(), size);
        assert_eq!(msg[..size.min(8)], want[..size.min(8)]);
        if size >= 16 {
            assert_eq!(msg[size - 8..], want[size - 8..]);
        }
    }
    if msg.len() >= 8 {
        assert_eq!(Pattern::seq_of(msg), Some(u64_at(msg, 0)));
    } else {
        assert_eq!(Pattern::seq_of(msg), None);
    }
}

/// Seed inputs made by the real encoders: `(target, file name, bytes)`.
pub fn seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut out = Vec::new();
    let digest = |b: u8| [b; proto::DIGEST_LEN];
    let hello = proto::Hello {
        version: proto::VERSION,
        name: "dir/sub/file.bin".into(),
        size: 1 << 30,
        mode: 0o644,
        mtime_sec: 1_700_000_000,
        mtime_nsec: 123_456_789,
        chunk_size: 1 << 20,
        verify: proto::Algo::Blake3,
        flags: proto::HelloFlags {
            resume: true,
            last: true,
            ..proto::HelloFlags::default()
        },
        auth: Some(digest(7)),
        ..proto::Hello::default()
    };
    let file_msgs = [
        ("hello", proto::Msg::Hello(hello.clone())),
        (
            "hello_plain",
            proto::Msg::Hello(proto::Hello {
                name: "a".into(),
                auth: None,
                flags: proto::HelloFlags::default(),
                ..hello.clone()
            }),
        ),
        (
            "hello_checksum",
            proto::Msg::Hello(proto::Hello {
                checksum: Some(digest(4)),
                flags: proto::HelloFlags {
                    force: true,
                    update: true,
                    ..proto::HelloFlags::default()
                },
                ..hello.clone()
            }),
        ),
        (
            "hello_dry_run",
            proto::Msg::Hello(proto::Hello {
                flags: proto::HelloFlags {
                    dry_run: true,
                    last: true,
                    ..proto::HelloFlags::default()
                },
                ..hello.clone()
            }),
        ),
        (
            "hello_dir",
            proto::Msg::Hello(proto::Hello {
                kind: proto::EntryKind::Dir,
                name: "tree/empty".into(),
                size: 0,
                auth: None,
                ..hello.clone()
            }),
        ),
        (
            "hello_symlink",
            proto::Msg::Hello(proto::Hello {
                kind: proto::EntryKind::Symlink,
                name: "tree/sub/link".into(),
                target: "../other/file".into(),
                size: 0,
                flags: proto::HelloFlags {
                    ignore_existing: true,
                    ..proto::HelloFlags::default()
                },
                ..hello
            }),
        ),
        (
            "skip",
            proto::Msg::Skip {
                why: proto::SkipWhy::Identical,
                message: "identical".into(),
            },
        ),
        (
            "challenge",
            proto::Msg::Challenge {
                version: proto::VERSION,
                nonce: digest(9),
                proof: None,
            },
        ),
        (
            "mr",
            proto::Msg::Mr(proto::RingGrant {
                addr: 0x7f00_0000_1000,
                rkey: 0x1234,
                slot_size: 1 << 20,
                slot_count: 16,
                resume_offset: 4096,
                resume_hash: digest(3),
            }),
        ),
        (
            "refuse",
            proto::Msg::Refuse {
                reason: proto::Reason::Exists,
                message: "file exists".into(),
            },
        ),
        ("credit", proto::Msg::Credit { slots: 4 }),
        (
            "fin",
            proto::Msg::Fin {
                bytes: 1 << 30,
                hash: digest(5),
            },
        ),
        (
            "ack",
            proto::Msg::Ack {
                status: proto::Reason::Ok,
                message: "verified ✓".into(),
            },
        ),
        (
            "err",
            proto::Msg::Err {
                reason: proto::Reason::WriteError,
                message: "disk full".into(),
            },
        ),
        ("done", proto::Msg::Done),
        (
            "digests_xxh3",
            proto::Msg::Digests(proto::Digests {
                algo: proto::Algo::Xxh3,
                first: 0,
                digests: (0..3u8)
                    .map(|b| proto::ChunkDigest::from_bytes(proto::Algo::Xxh3, &[b; 16]).unwrap())
                    .collect(),
            }),
        ),
        (
            "digests_blake3",
            proto::Msg::Digests(proto::Digests {
                algo: proto::Algo::Blake3,
                first: 240,
                digests: vec![
                    proto::ChunkDigest::from_bytes(proto::Algo::Blake3, &digest(3)).unwrap(),
                ],
            }),
        ),
        (
            "open",
            proto::Msg::Open(proto::Open {
                streams: 4,
                auth: Some(digest(5)),
            }),
        ),
        (
            "session",
            proto::Msg::Session(proto::Session {
                id: [6; proto::SESSION_ID_LEN],
                streams: 3,
                index: 0,
            }),
        ),
        (
            "join",
            proto::Msg::Join(proto::Join {
                id: [6; proto::SESSION_ID_LEN],
                index: 2,
                auth: None,
            }),
        ),
        (
            "stripe",
            proto::Msg::Stripe(proto::Stripe {
                index: 1,
                count: 3,
                offset: 11 << 20,
                len: 11 << 20,
            }),
        ),
        ("want", proto::Msg::Want),
        (
            "data_last",
            proto::Msg::Data(proto::Data {
                offset: 8134,
                hash: Some(digest(8)),
                abandon: false,
                vanished: false,
                bytes: b"the end of a small file".to_vec(),
            }),
        ),
        (
            "data_abandon",
            proto::Msg::Data(proto::Data {
                offset: 0,
                hash: None,
                abandon: true,
                vanished: false,
                bytes: Vec::new(),
            }),
        ),
        (
            "batch",
            proto::Msg::Batch(vec![
                proto::Msg::Want,
                proto::Msg::Ack {
                    status: proto::Reason::Ok,
                    message: String::new(),
                },
                proto::Msg::Data(proto::Data {
                    offset: 0,
                    hash: Some(digest(9)),
                    abandon: false,
                    vanished: false,
                    bytes: b"a small file".to_vec(),
                }),
            ]),
        ),
        ("list", proto::Msg::List("tree/sub".into())),
        (
            "names",
            proto::Msg::Names(proto::Names {
                last: true,
                names: vec![
                    proto::Listed {
                        kind: proto::ListedKind::File,
                        name: "extra.txt".into(),
                    },
                    proto::Listed {
                        kind: proto::ListedKind::Dir,
                        name: "old".into(),
                    },
                ],
            }),
        ),
        ("delete", proto::Msg::Delete("tree/sub/extra.txt".into())),
        (
            "repair",
            proto::Msg::Repair(proto::Repair {
                round: 1,
                chunks: vec![5, 9, 1 << 40],
            }),
        ),
    ];
    for (n, m) in file_msgs {
        out.push(("file_proto", n.to_string(), proto::encode(&m)));
    }
    let kept = partial::StripeState {
        size: 12 << 20,
        stripes: vec![
            partial::HeldStripe {
                offset: 0,
                len: 6 << 20,
                held: 3 << 20,
            },
            partial::HeldStripe {
                offset: 6 << 20,
                len: 6 << 20,
                held: 0,
            },
        ],
    };
    let kept = partial::encode(&kept).expect("a consistent state");
    out.push(("file_proto", "stripe_state".into(), kept.clone()));
    // Its body alone: the check appends the checksum.
    out.push((
        "file_proto",
        "stripe_state_body".into(),
        kept[..kept.len() - 32].to_vec(),
    ));
    let region = RemoteRegion {
        addr: 0x7f12_3456_7000,
        rkey: 0xabcd,
        len: 1 << 20,
    };
    let os_msgs = [
        (
            "setup",
            onesided::Msg::Setup {
                purpose: onesided::Purpose::BenchWrite,
                size: 65536,
                iters: 1000,
                tx_depth: 128,
            },
        ),
        (
            "expose",
            onesided::Msg::Expose {
                access: RemoteAccess::ReadWrite,
                region,
            },
        ),
        (
            "done",
            onesided::Msg::Done {
                ok: true,
                written: 4096,
                read: 0,
            },
        ),
        ("refuse", onesided::Msg::Refuse("busy".into())),
        // Cut by the encoder to the longest reason (on a character boundary).
        ("refuse_long", onesided::Msg::Refuse("é".repeat(600))),
    ];
    for (n, m) in os_msgs {
        out.push(("onesided", n.to_string(), m.encode()));
    }
    let mut rr = region.encode().to_vec();
    rr.extend_from_slice(&4096u64.to_be_bytes());
    rr.extend_from_slice(&8192u64.to_be_bytes());
    out.push(("remote_region", "region".into(), rr));
    let hello = wire::Hello::new(64, 4096).encode();
    let mut padded = hello.to_vec();
    padded.resize(56, 0); // the IB CM pads private data with zeroes
    out.push(("cm_handshake", "hello".into(), hello.to_vec()));
    out.push(("cm_handshake", "hello_padded".into(), padded));
    let with_params = wire::Hello::new(4, 1 << 20)
        .with_params(Some(SessionParams {
            kind: params::SessionKind::BenchSend,
            size: 1 << 20,
            iters: 1000,
            depth: 128,
        }))
        .encode();
    out.push(("cm_handshake", "hello_params".into(), with_params.to_vec()));
    let reject = wire::Reject {
        code: wire::RejectCode::Version,
        text: "unsupported version".into(),
    };
    out.push(("cm_handshake", "reject".into(), reject.encode(56)));
    out.push((
        "cm_handshake",
        "imm_credit".into(),
        wire::encode_imm(wire::ImmKind::Credit, 17)
            .to_be_bytes()
            .to_vec(),
    ));
    let mut gid = [0u8; 16];
    gid[10] = 0xff;
    gid[11] = 0xff;
    gid[12..].copy_from_slice(&[198, 18, 0, 1]);
    let dest = wire::OobDest {
        lid: 0,
        qpn: 0x11,
        psn: 0xabcdef,
        gid: Gid(gid),
    };
    out.push(("oob", "dest".into(), dest.encode().to_vec()));
    out.push(("oob", "done".into(), wire::OOB_DONE.to_vec()));
    for (size, seq) in [(4usize, 3u64), (64, 1 << 40)] {
        let pat = Pattern::new(size);
        let mut b = (size as u16).to_be_bytes().to_vec();
        b.extend_from_slice(&seq.to_be_bytes());
        let mut m = vec![0u8; size];
        pat.fill(&mut m, seq);
        b.extend_from_slice(&m);
        out.push(("pingpong", format!("size{size}"), b));
    }
    out.extend(part::seeds());
    out
}
