//! HELLO (one entry announced by the sender) and SKIP (the receiver already has it).

use super::reader::{put_text, Reader};
use super::verify::{decode_algo, Algo};
use super::{malformed, Digest, MAX_NAME_LEN, MAX_TARGET_LEN, MAX_TEXT_LEN};
use crate::Result;

const F_RESUME: u16 = 1 << 0;
const F_FORCE: u16 = 1 << 1;
const F_LAST: u16 = 1 << 2;
const F_AUTH: u16 = 1 << 3;
const F_CHECKSUM: u16 = 1 << 4;
const F_IGNORE_EXISTING: u16 = 1 << 5;
const F_UPDATE: u16 = 1 << 6;
const F_INLINE: u16 = 1 << 7;
const F_DRY_RUN: u16 = 1 << 8;
const F_ALL: u16 = F_RESUME
    | F_FORCE
    | F_LAST
    | F_AUTH
    | F_CHECKSUM
    | F_IGNORE_EXISTING
    | F_UPDATE
    | F_INLINE
    | F_DRY_RUN;

/// Options carried in a HELLO.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HelloFlags {
    /// Continue a partial file the receiver holds.
    pub resume: bool,
    /// Replace an existing entry that differs (the receiver must allow it).
    pub force: bool,
    /// This is the last entry of the session (a DONE need not follow).
    pub last: bool,
    /// Skip any entry that exists on the receiver, identical or not.
    pub ignore_existing: bool,
    /// Skip entries newer on the receiver; replace older ones (the receiver must allow it).
    pub update: bool,
    /// A file of at most [`INLINE_MAX`](super::INLINE_MAX) bytes whose data comes in DATA
    /// messages once the receiver answers WANT (no staging ring); the sender may announce the
    /// next entries before the answer.
    pub inline: bool,
    /// `send --dry-run`: the receiver answers what it would do (SKIP with
    /// [`SkipWhy::WouldCreate`] or [`SkipWhy::WouldReplace`], or as for a real run) and
    /// changes nothing; no data follows.
    pub dry_run: bool,
}

/// What a HELLO announces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u16)]
pub enum EntryKind {
    /// A regular file: data follows after MR.
    #[default]
    File = 0,
    /// A directory (sent when nothing sent below it would create it): size 0, no data.
    Dir = 1,
    /// A symbolic link: `target` holds its text; size 0, no data.
    Symlink = 2,
}

impl EntryKind {
    /// The wire code.
    pub fn code(self) -> u16 {
        self as u16
    }

    /// The kind of a wire code, if known.
    pub fn from_code(code: u16) -> Option<EntryKind> {
        [EntryKind::File, EntryKind::Dir, EntryKind::Symlink]
            .get(usize::from(code))
            .copied()
    }

    /// `"file"`, `"dir"` or `"symlink"`.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::File => "file",
            EntryKind::Dir => "dir",
            EntryKind::Symlink => "symlink",
        }
    }
}

/// HELLO: the sender announces one entry (a file, a directory or a symlink).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hello {
    /// Highest protocol version the sender speaks.
    pub version: u16,
    /// What the entry is.
    pub kind: EntryKind,
    /// Relative name, `/`-separated, UTF-8, at most [`MAX_NAME_LEN`] bytes (not yet sanitized).
    pub name: String,
    /// Symlink target text (at most [`MAX_TARGET_LEN`] bytes; empty unless a symlink).
    pub target: String,
    /// File size in bytes (0 unless a file).
    pub size: u64,
    /// Unix permission bits.
    pub mode: u32,
    /// Modification time, seconds since the epoch.
    pub mtime_sec: i64,
    /// Modification time, nanoseconds (< 1 000 000 000).
    pub mtime_nsec: u32,
    /// Bytes per data chunk (RDMA WRITE).
    pub chunk_size: u32,
    /// How chunks are verified (the receiver accepts it or refuses the entry).
    pub verify: Algo,
    /// Options.
    pub flags: HelloFlags,
    /// BLAKE3 of the whole file (`send --checksum`, files only): the receiver compares it with
    /// its existing file instead of size and mtime.
    pub checksum: Option<Digest>,
    /// Answer to the CHALLENGE nonce; present iff a token is configured.
    pub auth: Option<Digest>,
}

/// Why the receiver skips an entry (SKIP): it needs nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum SkipWhy {
    /// Same size and mtime (or the same BLAKE3 with `--checksum`); a directory that exists;
    /// a symlink with the same target.
    Identical = 1,
    /// It exists and the sender asked `--ignore-existing`.
    Exists = 2,
    /// It is newer on the receiver and the sender asked `--update`.
    Newer = 3,
    /// `--dry-run`: it would be received (nothing is there).
    WouldCreate = 4,
    /// `--dry-run`: it would be received over what is there (the policy allows it).
    WouldReplace = 5,
}

impl SkipWhy {
    /// Every code, in order.
    pub const ALL: [SkipWhy; 5] = [
        SkipWhy::Identical,
        SkipWhy::Exists,
        SkipWhy::Newer,
        SkipWhy::WouldCreate,
        SkipWhy::WouldReplace,
    ];

    /// The wire code.
    pub fn code(self) -> u16 {
        self as u16
    }

    /// The value of a wire code, if known (0 is not one).
    pub fn from_code(code: u16) -> Option<SkipWhy> {
        SkipWhy::ALL.into_iter().find(|w| w.code() == code)
    }

    /// Short lower-case name, e.g. `"identical"`.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipWhy::Identical => "identical",
            SkipWhy::Exists => "exists",
            SkipWhy::Newer => "newer on the receiver",
            SkipWhy::WouldCreate => "would create",
            SkipWhy::WouldReplace => "would replace",
        }
    }
}

pub(super) fn decode_hello(r: &mut Reader<'_>) -> Result<Hello> {
    let version = r.u16()?;
    let bits = r.u16()?;
    if bits & !F_ALL != 0 {
        return Err(malformed(format!(
            "HELLO has unknown flag bits {bits:#06x}"
        )));
    }
    let code = r.u16()?;
    let kind = EntryKind::from_code(code)
        .ok_or_else(|| malformed(format!("HELLO has unknown entry kind {code}")))?;
    let chunk_size = r.u32()?;
    let verify = decode_algo(r, "HELLO")?;
    let size = r.u64()?;
    let mode = r.u32()?;
    let mtime_sec = r.u64()? as i64;
    let mtime_nsec = r.u32()?;
    if mtime_nsec >= 1_000_000_000 {
        return Err(malformed(format!(
            "HELLO mtime nanoseconds {mtime_nsec} out of range"
        )));
    }
    let name = r.text(MAX_NAME_LEN, "file name")?;
    let target = r.text(MAX_TARGET_LEN, "symlink target")?;
    if (kind == EntryKind::Symlink) == target.is_empty() {
        return Err(malformed(format!(
            "HELLO of a {} has {} symlink target",
            kind.as_str(),
            if target.is_empty() { "no" } else { "a" }
        )));
    }
    if kind != EntryKind::File && size != 0 {
        return Err(malformed(format!(
            "HELLO of a {} announces {size} bytes",
            kind.as_str()
        )));
    }
    if bits & F_INLINE != 0 && (kind != EntryKind::File || size > super::INLINE_MAX) {
        return Err(malformed(format!(
            "HELLO of an inline {} of {size} bytes (inline: files of at most {} bytes)",
            kind.as_str(),
            super::INLINE_MAX
        )));
    }
    if bits & F_DRY_RUN != 0 && bits & (F_INLINE | F_RESUME) != 0 {
        return Err(malformed(
            "HELLO of a dry run flagged inline or resume (no data follows a dry run)",
        ));
    }
    if kind != EntryKind::File && bits & F_CHECKSUM != 0 {
        return Err(malformed(format!(
            "HELLO of a {} carries a checksum",
            kind.as_str()
        )));
    }
    let checksum = if bits & F_CHECKSUM != 0 {
        Some(r.digest()?)
    } else {
        None
    };
    let auth = if bits & F_AUTH != 0 {
        Some(r.digest()?)
    } else {
        None
    };
    Ok(Hello {
        version,
        kind,
        name,
        target,
        size,
        mode,
        mtime_sec,
        mtime_nsec,
        chunk_size,
        verify,
        flags: HelloFlags {
            resume: bits & F_RESUME != 0,
            force: bits & F_FORCE != 0,
            last: bits & F_LAST != 0,
            ignore_existing: bits & F_IGNORE_EXISTING != 0,
            update: bits & F_UPDATE != 0,
            inline: bits & F_INLINE != 0,
            dry_run: bits & F_DRY_RUN != 0,
        },
        checksum,
        auth,
    })
}

pub(super) fn encode_hello(b: &mut Vec<u8>, h: &Hello) {
    let mut bits = 0;
    for (on, bit) in [
        (h.flags.resume, F_RESUME),
        (h.flags.force, F_FORCE),
        (h.flags.last, F_LAST),
        (h.auth.is_some(), F_AUTH),
        (h.checksum.is_some(), F_CHECKSUM),
        (h.flags.ignore_existing, F_IGNORE_EXISTING),
        (h.flags.update, F_UPDATE),
        (h.flags.inline, F_INLINE),
        (h.flags.dry_run, F_DRY_RUN),
    ] {
        if on {
            bits |= bit;
        }
    }
    b.extend_from_slice(&h.version.to_be_bytes());
    b.extend_from_slice(&bits.to_be_bytes());
    b.extend_from_slice(&h.kind.code().to_be_bytes());
    b.extend_from_slice(&h.chunk_size.to_be_bytes());
    b.extend_from_slice(&h.verify.code().to_be_bytes());
    b.extend_from_slice(&h.size.to_be_bytes());
    b.extend_from_slice(&h.mode.to_be_bytes());
    b.extend_from_slice(&h.mtime_sec.to_be_bytes());
    b.extend_from_slice(&h.mtime_nsec.to_be_bytes());
    put_text(b, &h.name, MAX_NAME_LEN);
    put_text(b, &h.target, MAX_TARGET_LEN);
    if let Some(c) = &h.checksum {
        b.extend_from_slice(c);
    }
    if let Some(a) = &h.auth {
        b.extend_from_slice(a);
    }
}

pub(super) fn decode_skip(r: &mut Reader<'_>) -> Result<(SkipWhy, String)> {
    let code = r.u16()?;
    let why = SkipWhy::from_code(code)
        .ok_or_else(|| malformed(format!("SKIP has unknown code {code}")))?;
    Ok((why, r.text(MAX_TEXT_LEN, "message")?))
}

pub(super) fn encode_skip(b: &mut Vec<u8>, why: SkipWhy, message: &str) {
    b.extend_from_slice(&why.code().to_be_bytes());
    put_text(b, message, MAX_TEXT_LEN);
}
