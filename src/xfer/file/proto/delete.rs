//! Deletion (version 3, `send --delete`, `recv --allow-delete`): after every entry has its
//! answer, the sender asks for the names in each directory it sent (LIST), the receiver
//! answers with them (NAMES, as many messages as they need, the last one flagged), and the
//! sender asks it to remove each name it does not have itself (DELETE), one at a time; each
//! DELETE is answered ACK (removed, or already gone) or REFUSE.
//!
//! Bodies: LIST and DELETE carry one name (text, 1..=[`MAX_NAME_LEN`] bytes); NAMES carries
//! flags u16 (bit 0 `last`), a count u16, then per name its kind u16 ([`ListedKind`]) and the
//! name (text, one path component: 1..=255 bytes, no `/`, no NUL, not `.` or `..`). Only the
//! last NAMES may be empty.

use super::reader::{put_text, Reader};
use super::{malformed, HEADER_LEN, MAX_MSG_LEN, MAX_NAME_LEN};
use crate::Result;

/// Longest name in NAMES (one path component).
pub const MAX_LISTED_LEN: usize = 255;

/// Bytes of a NAMES message besides its names: header, flags, count.
const NAMES_FIXED: usize = HEADER_LEN + 2 + 2;

const N_LAST: u16 = 1;

/// What a listed name is on the receiver (not following symlinks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListedKind {
    /// A regular file.
    File = 0,
    /// A directory.
    Dir = 1,
    /// A symbolic link.
    Symlink = 2,
    /// Anything else (a socket, a FIFO, a device).
    Other = 3,
}

impl ListedKind {
    /// The wire code.
    pub fn code(self) -> u16 {
        self as u16
    }

    /// The kind of a wire code, if known.
    pub fn from_code(code: u16) -> Option<ListedKind> {
        [Self::File, Self::Dir, Self::Symlink, Self::Other]
            .get(usize::from(code))
            .copied()
    }

    /// `"file"`, `"dir"`, `"symlink"` or `"other"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::File => "file",
            Self::Dir => "dir",
            Self::Symlink => "symlink",
            Self::Other => "other",
        }
    }
}

/// One name of a listed directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// What it is.
    pub kind: ListedKind,
    /// Its name in the directory (one component).
    pub name: String,
}

/// NAMES: receiver → sender, some names of the directory a LIST asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Names {
    /// No NAMES follows for this LIST.
    pub last: bool,
    /// The names (empty only in the last).
    pub names: Vec<Listed>,
}

impl Names {
    /// Whether a name of `len` bytes still fits this message.
    pub fn fits(&self, len: usize) -> bool {
        let used: usize = self.names.iter().map(|n| 4 + n.name.len()).sum();
        NAMES_FIXED + used + 4 + len <= MAX_MSG_LEN
    }
}

/// Whether `name` may be listed: one path component of at most [`MAX_LISTED_LEN`] bytes.
pub fn listable(name: &str) -> bool {
    (1..=MAX_LISTED_LEN).contains(&name.len())
        && name != "."
        && name != ".."
        && !name.contains(['/', '\0'])
}

/// LIST's and DELETE's body: a name.
pub(super) fn decode_name(r: &mut Reader<'_>) -> Result<String> {
    let name = r.text(MAX_NAME_LEN, "name")?;
    if name.is_empty() {
        return Err(malformed("an empty name in LIST or DELETE"));
    }
    Ok(name)
}

/// Panics on an empty name or one over [`MAX_NAME_LEN`]: the sender names its own directories.
pub(super) fn encode_name(b: &mut Vec<u8>, name: &str) {
    assert!(!name.is_empty());
    put_text(b, name, MAX_NAME_LEN);
}

pub(super) fn decode_names(r: &mut Reader<'_>) -> Result<Names> {
    let bits = r.u16()?;
    if bits & !N_LAST != 0 {
        return Err(malformed(format!(
            "NAMES has unknown flag bits {bits:#06x}"
        )));
    }
    let count = r.u16()?;
    let last = bits & N_LAST != 0;
    if count == 0 && !last {
        return Err(malformed("an empty NAMES that is not the last"));
    }
    let mut names = Vec::new();
    for _ in 0..count {
        let code = r.u16()?;
        let kind = ListedKind::from_code(code)
            .ok_or_else(|| malformed(format!("NAMES has unknown kind {code}")))?;
        let name = r.text(MAX_LISTED_LEN, "name")?;
        if !listable(&name) {
            return Err(malformed(format!(
                "NAMES lists {name:?}, not one path component"
            )));
        }
        names.push(Listed { kind, name });
    }
    Ok(Names { last, names })
}

/// Panics on more than `u16::MAX` names, a name [`listable`] refuses, or an empty NAMES that is
/// not the last: the receiver lists its own directory, within [`Names::fits`].
pub(super) fn encode_names(b: &mut Vec<u8>, n: &Names) {
    assert!(n.last || !n.names.is_empty());
    let bits = if n.last { N_LAST } else { 0 };
    b.extend_from_slice(&bits.to_be_bytes());
    let count = u16::try_from(n.names.len()).expect("at most u16::MAX names");
    b.extend_from_slice(&count.to_be_bytes());
    for l in &n.names {
        assert!(listable(&l.name), "{:?} is not one component", l.name);
        b.extend_from_slice(&l.kind.code().to_be_bytes());
        put_text(b, &l.name, MAX_LISTED_LEN);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{decode, encode, Msg, VERSION};
    use super::*;

    fn hdr(kind: u16, len: usize) -> Vec<u8> {
        let mut v = b"RXFR".to_vec();
        v.extend_from_slice(&VERSION.to_be_bytes());
        v.extend_from_slice(&kind.to_be_bytes());
        v.extend_from_slice(&(len as u32).to_be_bytes());
        v
    }

    fn err(b: &[u8]) -> String {
        decode(b).unwrap_err().to_string()
    }

    #[test]
    fn list_and_delete_layout() {
        for (kind, m) in [
            (19, Msg::List("tree/sub".into())),
            (21, Msg::Delete("tree/sub".into())),
        ] {
            let mut b = hdr(kind, 2 + 8);
            b.extend_from_slice(&[0, 8]);
            b.extend_from_slice(b"tree/sub");
            assert_eq!(encode(&m), b);
            assert_eq!(decode(&b).unwrap(), m);
            // Empty, truncated, over the name limit.
            let mut e = hdr(kind, 2);
            e.extend_from_slice(&[0, 0]);
            assert!(err(&e).contains("empty name"), "{}", err(&e));
            assert!(decode(&b[..b.len() - 1]).is_err());
            let long = MAX_NAME_LEN + 1;
            let mut l = hdr(kind, 2 + long);
            l.extend_from_slice(&(long as u16).to_be_bytes());
            l.extend_from_slice(&vec![b'a'; long]);
            assert!(err(&l).contains("exceeds the maximum"), "{}", err(&l));
        }
    }

    #[test]
    fn names_layout_and_checks() {
        let n = Names {
            last: true,
            names: vec![
                Listed {
                    kind: ListedKind::File,
                    name: "a".into(),
                },
                Listed {
                    kind: ListedKind::Symlink,
                    name: "bc".into(),
                },
            ],
        };
        let mut b = hdr(20, 2 + 2 + (2 + 2 + 1) + (2 + 2 + 2));
        b.extend_from_slice(&[0, 1, 0, 2]);
        b.extend_from_slice(&[0, 0, 0, 1, b'a']);
        b.extend_from_slice(&[0, 2, 0, 2, b'b', b'c']);
        assert_eq!(encode(&Msg::Names(n.clone())), b);
        assert_eq!(decode(&b).unwrap(), Msg::Names(n));
        let bad = |at: usize, v: &[u8]| {
            let mut x = b.clone();
            x[at..at + v.len()].copy_from_slice(v);
            err(&x)
        };
        let body = HEADER_LEN;
        assert!(bad(body, &[0, 2]).contains("unknown flag"));
        assert!(bad(body + 4, &[0, 4]).contains("unknown kind"));
        assert!(bad(body + 8, b"/").contains("not one path component"));
        assert!(bad(body + 13, b"..").contains("not one path component"));
        assert!(bad(body + 13, b"\0c").contains("not one path component"));
        assert!(bad(body + 2, &[0, 3]).contains("truncated"));
        assert!(bad(body + 2, &[0, 1]).contains("trailing"));
        // Only the last NAMES may be empty.
        let mut e = hdr(20, 4);
        e.extend_from_slice(&[0, 1, 0, 0]);
        assert_eq!(
            decode(&e).unwrap(),
            Msg::Names(Names::default().with_last())
        );
        e[HEADER_LEN + 1] = 0;
        assert!(err(&e).contains("empty NAMES"), "{}", err(&e));
        // A component is at most 255 bytes.
        let mut l = hdr(20, 4 + 4 + 256);
        l.extend_from_slice(&[0, 1, 0, 1, 0, 0, 1, 0]);
        l.extend_from_slice(&[b'x'; 256]);
        assert!(err(&l).contains("exceeds the maximum"), "{}", err(&l));
    }

    #[test]
    fn names_fill_one_message() {
        let mut n = Names::default();
        let name = "n".repeat(MAX_LISTED_LEN);
        while n.fits(name.len()) {
            n.names.push(Listed {
                kind: ListedKind::Dir,
                name: name.clone(),
            });
        }
        let full = encode(&Msg::Names(n.clone()));
        assert!(full.len() <= MAX_MSG_LEN && full.len() + 4 + name.len() > MAX_MSG_LEN);
        assert_eq!(decode(&full).unwrap(), Msg::Names(n));
        assert!(listable("a.b") && !listable("") && !listable(".") && !listable("a/b"));
    }

    impl Names {
        fn with_last(mut self) -> Names {
            self.last = true;
            self
        }
    }
}
