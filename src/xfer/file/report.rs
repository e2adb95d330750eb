//! What a session reports: each entry's verdict ([`FileReport`]), the session's totals
//! ([`SessionReport`], bounded) and the events a progress display hears ([`Progress`]).

use serde::Serialize;

use super::digest::Layout;
use super::names;
use super::proto::{Digest, EntryKind, Reason, SkipWhy};
use crate::error::{Error, Result};

/// Entries a [`SessionReport`] keeps; later ones are only counted (`elided`).
pub const MAX_REPORTED_FILES: usize = 1000;
/// Bytes of a name or message a [`FileReport`] keeps.
pub const MAX_REPORT_TEXT: usize = 256;

/// What [`send`](fn@super::send) and [`receive`](super::receive) report as a session goes on (to draw progress).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum Progress<'a> {
    /// Sender: a file is about to be announced (its size as opened).
    FileStart {
        /// Relative name, as sent.
        name: &'a str,
        /// Size in bytes.
        size: u64,
    },
    /// Sender: data written, of a file (from where it resumes) and in the session. Over several
    /// streams several files may be in flight at once: `name` says which.
    Bytes {
        /// Relative name of the file, as in its [`Progress::FileStart`].
        name: &'a str,
        /// Bytes of that file written so far (over every stream).
        file_done: u64,
        /// Bytes written in the session so far.
        total_done: u64,
    },
    /// A file's verdict (delivered, refused or failed), as recorded in the [`SessionReport`].
    FileDone(&'a FileReport),
    /// An entry deleted on the receiver (`send --delete`; a dry run's: would be deleted), as
    /// recorded in the [`SessionReport`] (`deleted`).
    Deleted {
        /// Relative name on the receiver (escaped as report names are).
        name: &'a str,
        /// `"file"`, `"dir"`, `"symlink"` or `"other"`.
        kind: &'static str,
        /// A dry run: nothing was deleted.
        dry_run: bool,
    },
    /// Sender (`send --delete`): nothing is deleted in this directory (counted in
    /// [`SessionReport::delete_skipped`]).
    NotDeleting {
        /// The directory, as sent.
        dir: &'a str,
        /// Why (e.g. an entry in it failed).
        why: &'a str,
    },
    /// Sender: the receiver granted this many streams of those asked for (fewer: its cap).
    Streams {
        /// Streams asked for (`--streams`).
        asked: u16,
        /// Streams granted.
        granted: u16,
    },
}

/// What happened to one entry (a file, a directory or a symlink).
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileReport {
    /// Relative name (as sent, control characters escaped by `names::printable`; for hostile
    /// names, shortened).
    pub name: String,
    /// `"file"`, `"dir"`, `"symlink"`, or `"other"` (a special file the sender skipped).
    pub kind: &'static str,
    /// File size.
    pub bytes: u64,
    /// The verified file's digest (hex; see "Verification" in `docs/file-protocol.md`), when
    /// verified.
    pub hash: Option<String>,
    /// How it was verified: the chunk hash and the chunk size, e.g. `"xxh3/1048576"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify: Option<String>,
    /// `"ok"`, `"skipped"` (nothing to do: identical, or as the options say) or the reason
    /// (e.g. `"hash mismatch"`).
    pub result: String,
    /// Details of a skip or a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Chunks of a delivered file that arrived different from the sender's digest and were
    /// sent again and verified (chunk repair; 0 otherwise).
    #[serde(skip_serializing_if = "is_zero")]
    pub repaired: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The `result` of a skipped entry.
pub const SKIPPED: &str = "skipped";
/// The `result` of an entry gone from the sender's source between its listing and its turn.
pub const VANISHED: &str = "vanished";
/// The `result` of an entry a dry run would send (`message`: "would create" or "would
/// replace").
pub const WOULD_SEND: &str = "would send";

impl FileReport {
    pub(crate) fn ok(name: &str, bytes: u64, hash: &Digest, layout: &Layout) -> FileReport {
        FileReport {
            name: clip(&names::printable(name)),
            kind: EntryKind::File.as_str(),
            bytes,
            hash: Some(blake3::Hash::from(*hash).to_hex().to_string()),
            verify: Some(format!("{}/{}", layout.algo, layout.chunk)),
            result: "ok".into(),
            message: None,
            repaired: 0,
        }
    }

    /// A directory or symlink made on the receiver.
    pub(crate) fn made(name: &str, kind: EntryKind) -> FileReport {
        FileReport {
            name: clip(&names::printable(name)),
            kind: kind.as_str(),
            bytes: 0,
            hash: None,
            verify: None,
            result: "ok".into(),
            message: None,
            repaired: 0,
        }
    }

    pub(crate) fn skipped(name: &str, kind: &'static str, bytes: u64, why: &str) -> FileReport {
        FileReport {
            name: clip(&names::printable(name)),
            kind,
            bytes,
            hash: None,
            verify: None,
            result: SKIPPED.into(),
            message: Some(clip(&names::printable(why))),
            repaired: 0,
        }
    }

    pub(crate) fn failed(name: &str, bytes: u64, reason: Reason, message: String) -> FileReport {
        FileReport {
            name: clip(&names::printable(name)),
            kind: EntryKind::File.as_str(),
            bytes,
            hash: None,
            verify: None,
            result: reason.as_str().to_string(),
            // The reason is `result`: the message says the rest, without naming it again.
            message: Some(clip(&names::printable(reason.strip_label(&message)))),
            repaired: 0,
        }
    }

    /// What a dry run would do with an entry: send it, over what is there if `replace`.
    pub(crate) fn would(name: &str, kind: EntryKind, bytes: u64, replace: bool) -> FileReport {
        let why = match replace {
            true => SkipWhy::WouldReplace,
            false => SkipWhy::WouldCreate,
        };
        FileReport {
            name: clip(&names::printable(name)),
            kind: kind.as_str(),
            bytes,
            hash: None,
            verify: None,
            result: WOULD_SEND.into(),
            message: Some(why.as_str().into()),
            repaired: 0,
        }
    }

    /// The same with `n` chunks repaired.
    pub(crate) fn with_repaired(mut self, n: u64) -> FileReport {
        self.repaired = n;
        self
    }

    /// True for an entry a dry run would send.
    pub fn is_planned(&self) -> bool {
        self.result == WOULD_SEND
    }

    /// An entry listed but gone when its turn came (`message`: what failed), not announced.
    pub(crate) fn vanished(name: &str, message: &str) -> FileReport {
        FileReport {
            name: clip(&names::printable(name)),
            kind: EntryKind::File.as_str(),
            bytes: 0,
            hash: None,
            verify: None,
            result: VANISHED.into(),
            message: Some(clip(&names::printable(
                Reason::ReadError.strip_label(message),
            ))),
            repaired: 0,
        }
    }

    /// True for an entry gone from the sender's source before its turn.
    pub fn is_vanished(&self) -> bool {
        self.result == VANISHED
    }

    pub(crate) fn of_kind(mut self, kind: EntryKind) -> FileReport {
        self.kind = kind.as_str();
        self
    }

    /// True when the entry was delivered (a file verified and committed).
    pub fn is_ok(&self) -> bool {
        self.result == "ok"
    }

    /// True when nothing had to be done (identical, or skipped as the options say).
    pub fn is_skipped(&self) -> bool {
        self.result == SKIPPED
    }
}

/// `s` cut to [`MAX_REPORT_TEXT`] bytes on a character boundary, marked with `…` when cut.
fn clip(s: &str) -> String {
    if s.len() <= MAX_REPORT_TEXT {
        return s.to_string();
    }
    let mut end = MAX_REPORT_TEXT - '…'.len_utf8();
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// A stream lost during a session: its connection failed, and the other streams took over
/// what it held.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[non_exhaustive]
pub struct LostStream {
    /// Its index in the session.
    pub stream: u16,
    /// The device it ran on (its rail).
    pub device: String,
    /// The peer's address it was connected to.
    pub peer: String,
    /// Why it was lost (one line).
    pub error: String,
    /// Jobs (entries or stripes) it handed back.
    pub handed_back: u64,
}

/// What a session did, filled in as it goes (so it is there after an error too: see
/// [`SessionError`]). Its size is bounded whatever the peer sends: at most
/// [`MAX_REPORTED_FILES`] entries of at most [`MAX_REPORT_TEXT`]-byte texts.
#[derive(Clone, Debug, Default, Serialize)]
#[non_exhaustive]
pub struct SessionReport {
    /// The first [`MAX_REPORTED_FILES`] files announced, in order (see [`push`](Self::push)).
    pub files: Vec<FileReport>,
    /// Files announced after those, counted but not listed.
    pub elided: u64,
    /// Entries that failed or were refused, listed or not.
    pub failed: u64,
    /// Entries skipped (identical on the receiver, skipped as the options say, or special
    /// files the sender does not send), listed or not.
    pub skipped: u64,
    /// Entries the receiver refused before any data (a subset of `failed`).
    pub refused: u64,
    /// Entries a dry run would send ([`FileReport::is_planned`]), listed or not.
    pub planned: u64,
    /// Bytes of the files a dry run would send.
    pub planned_bytes: u64,
    /// Entries gone from the sender's source between its listing and their turn (a subset of
    /// `failed`; see [`FileReport::is_vanished`]).
    pub vanished: u64,
    /// Entries deleted on the receiver (`send --delete`; in a dry run, that would be), listed
    /// or not.
    pub deleted: u64,
    /// The first [`MAX_REPORTED_FILES`] of them (names escaped and clipped as in
    /// [`FileReport`]).
    pub deleted_names: Vec<String>,
    /// Sender: directories in which nothing was deleted because an entry in them failed.
    pub delete_skipped: u64,
    /// Chunks repaired in the files delivered (see [`FileReport::repaired`]).
    pub repaired: u64,
    /// Bytes moved by RDMA WRITE in this session.
    pub bytes: u64,
    /// Streams lost during the session whose work the others took over: the sender's, or
    /// this connection's on the receiver (at most 64).
    pub lost: Vec<LostStream>,
    /// Bytes sent again because a stream was lost: what a lost stream had sent of its parts
    /// that the receiver had not kept when another stream took them over (sender).
    pub resent: u64,
    /// Sender: seconds from each file's first data chunk to the receiver's verdict on it
    /// (ACK), summed: the data phase, without connection set-up and per-file handshakes.
    pub data_seconds: f64,
    /// The file recorded last (listed or not), for [`Progress::FileDone`].
    #[serde(skip)]
    last: Option<FileReport>,
}

impl SessionReport {
    /// Records a file: listed while there is room, else only counted.
    pub fn push(&mut self, f: FileReport) {
        self.repaired += f.repaired;
        if f.is_skipped() {
            self.skipped += 1;
        } else if f.is_planned() {
            self.planned += 1;
            self.planned_bytes += f.bytes;
        } else if !f.is_ok() {
            self.failed += 1;
            self.vanished += u64::from(f.is_vanished());
        }
        if self.files.len() < MAX_REPORTED_FILES {
            self.files.push(f.clone());
        } else {
            self.elided += 1;
        }
        self.last = Some(f);
    }

    /// Tells `progress` the verdict of the file recorded last if files were recorded since the
    /// count was `before` (one file's step records at most one).
    pub(crate) fn announce_since<P>(&self, before: u64, progress: &mut P)
    where
        P: FnMut(Progress<'_>) + ?Sized,
    {
        if self.file_count() > before {
            if let Some(last) = &self.last {
                progress(Progress::FileDone(last));
            }
        }
    }

    /// Adds what another stream of the same session recorded (its files after these).
    pub fn merge(&mut self, o: SessionReport) {
        for f in o.files {
            if self.files.len() < MAX_REPORTED_FILES {
                self.files.push(f);
            } else {
                self.elided += 1;
            }
        }
        self.elided += o.elided;
        self.failed += o.failed;
        self.skipped += o.skipped;
        self.refused += o.refused;
        self.planned += o.planned;
        self.planned_bytes += o.planned_bytes;
        self.vanished += o.vanished;
        self.deleted += o.deleted;
        self.delete_skipped += o.delete_skipped;
        self.repaired += o.repaired;
        let room = MAX_REPORTED_FILES.saturating_sub(self.deleted_names.len());
        self.deleted_names
            .extend(o.deleted_names.into_iter().take(room));
        self.bytes += o.bytes;
        self.lost.extend(o.lost);
        self.resent += o.resent;
        self.data_seconds += o.data_seconds;
        if o.last.is_some() {
            self.last = o.last;
        }
    }

    /// Records an entry the receiver refused (counted as failed and as refused).
    pub fn push_refused(&mut self, f: FileReport) {
        self.refused += 1;
        self.push(f);
    }

    /// Records an entry deleted (or, in a dry run, that would be) and tells `progress`.
    pub(crate) fn push_deleted<P: FnMut(Progress<'_>) + ?Sized>(
        &mut self,
        name: &str,
        kind: &'static str,
        dry_run: bool,
        progress: &mut P,
    ) {
        let name = clip(&names::printable(name));
        self.deleted += 1;
        progress(Progress::Deleted {
            name: &name,
            kind,
            dry_run,
        });
        if self.deleted_names.len() < MAX_REPORTED_FILES {
            self.deleted_names.push(name);
        }
    }

    /// Files announced, listed or not.
    pub fn file_count(&self) -> u64 {
        self.files.len() as u64 + self.elided
    }

    /// Files that failed, listed or not.
    pub fn failures(&self) -> u64 {
        self.failed
    }

    /// `Ok` when every file succeeded, else an error counting the files that were not `what`
    /// ("received", "delivered").
    pub(crate) fn result(&self, what: &'static str) -> Result<()> {
        match self.failures() {
            0 => Ok(()),
            failed => Err(Error::Incomplete {
                failed,
                total: self.file_count(),
                vanished: self.vanished,
                what,
            }),
        }
    }

    /// The result of a session that ended with `r`: this report, or the error with it.
    pub(crate) fn ended(self, r: Result<()>) -> std::result::Result<SessionReport, SessionError> {
        match r {
            Ok(()) => Ok(self),
            Err(error) => Err(SessionError {
                error,
                report: Box::new(self),
            }),
        }
    }
}

/// A file transfer that ended in an error, with what it did until then: which files were sent
/// or received, and which were refused or failed (an [`Error::Incomplete`] session is one that
/// ran to its end with some of them). `?` turns it into its [`Error`].
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
#[non_exhaustive]
pub struct SessionError {
    /// Why the session failed.
    pub error: Error,
    /// What it did before (boxed: an error stays small).
    pub report: Box<SessionReport>,
}

impl From<SessionError> for Error {
    fn from(e: SessionError) -> Error {
        e.error
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xfer::file::digest::Algo;

    #[test]
    fn reports_are_bounded_and_count_what_they_do_not_list() {
        let mut r = SessionReport::default();
        let long = "é".repeat(3000);
        let n = MAX_REPORTED_FILES as u64 + 500;
        for i in 0..n {
            if i % 2 == 0 {
                r.push(FileReport::failed(&long, 1, Reason::BadName, long.clone()));
            } else {
                r.push(FileReport::ok(
                    &long,
                    1,
                    &[0; 32],
                    &Layout::new(Algo::Xxh3, 4096, 1).unwrap(),
                ));
            }
        }
        assert_eq!(r.files.len(), MAX_REPORTED_FILES);
        assert_eq!(
            (r.elided, r.file_count(), r.failures()),
            (500, n, n.div_ceil(2))
        );
        for f in &r.files {
            assert!(f.name.len() <= MAX_REPORT_TEXT && f.name.ends_with('…'));
            assert!(f
                .message
                .as_ref()
                .is_none_or(|m| m.len() <= MAX_REPORT_TEXT));
        }
        let e = r.result("received").unwrap_err().to_string();
        assert!(
            e.contains(&format!("{} of {n} files", n.div_ceil(2))),
            "{e}"
        );
        assert_eq!(clip("short"), "short");
    }
}
