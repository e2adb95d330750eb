//! [`Reason`]: why a file transfer was refused or failed. It is the file protocol's wire code
//! (REFUSE, ACK and ERR carry it; `xfer::file::proto` re-exports it), defined here, beneath the
//! error type that carries it, so that `error` never reaches up into a protocol module.

use std::fmt;

/// Why something was refused or failed; the code carried by REFUSE, ACK and ERR.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
#[non_exhaustive]
pub enum Reason {
    /// Success (only valid in ACK).
    Ok = 0,
    /// The file name is unsafe or malformed.
    BadName = 1,
    /// The file is larger than the receiver's `--max-size`.
    TooLarge = 2,
    /// Not enough free space on the receiver.
    NoSpace = 3,
    /// The entry exists and differs, and the policies do not allow replacing it (the message
    /// names the option needed).
    Exists = 4,
    /// Missing or wrong authentication answer.
    AuthFailed = 5,
    /// Unsupported protocol version.
    Version = 6,
    /// Any other receiver-side failure.
    Internal = 7,
    /// The received bytes do not match the sender's hash.
    HashMismatch = 8,
    /// Writing or syncing the file failed.
    WriteError = 9,
    /// The peer broke the protocol.
    Protocol = 10,
    /// Reading the source failed (sender side).
    ReadError = 11,
    /// The receiver ended a session that spent its budget: no progress for too long, a rate
    /// below the floor, or too many refused or failed files.
    Budget = 12,
    /// The receiver serves as many sessions as it may (`--max-sessions`) or has no memory left
    /// for another staging ring (`--max-memory`): retry later.
    Busy = 13,
    /// A symlink whose target could resolve outside the receiver's output directory.
    UnsafeLink = 14,
    /// The receiver does not allow what was asked (a sender's deletions without
    /// `recv --allow-delete`).
    NotAllowed = 15,
}

impl Reason {
    /// Every reason, in code order.
    pub const ALL: [Reason; 16] = [
        Reason::Ok,
        Reason::BadName,
        Reason::TooLarge,
        Reason::NoSpace,
        Reason::Exists,
        Reason::AuthFailed,
        Reason::Version,
        Reason::Internal,
        Reason::HashMismatch,
        Reason::WriteError,
        Reason::Protocol,
        Reason::ReadError,
        Reason::Budget,
        Reason::Busy,
        Reason::UnsafeLink,
        Reason::NotAllowed,
    ];

    /// The wire code.
    pub fn code(self) -> u16 {
        self as u16
    }

    /// The reason for a wire code, if known.
    pub fn from_code(code: u16) -> Option<Reason> {
        Reason::ALL.get(usize::from(code)).copied()
    }

    /// Short lower-case name, e.g. `"hash mismatch"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Ok => "ok",
            Reason::BadName => "bad name",
            Reason::TooLarge => "too large",
            Reason::NoSpace => "no space",
            Reason::Exists => "exists",
            Reason::AuthFailed => "authentication failed",
            Reason::Version => "unsupported version",
            // Not "internal error": it also stands for ordinary ends (a lost connection, an
            // interrupted receiver), which its message names.
            Reason::Internal => "failed",
            Reason::HashMismatch => "hash mismatch",
            Reason::WriteError => "write error",
            Reason::Protocol => "protocol error",
            Reason::ReadError => "read error",
            Reason::Budget => "session budget spent",
            Reason::Busy => "busy",
            Reason::UnsafeLink => "unsafe symlink",
            Reason::NotAllowed => "not allowed",
        }
    }

    /// `text` without a leading "label: " of this reason (repeated, as a peer may send
    /// "exists: exists: …"; for [`Reason::Internal`] also its former label "internal error"),
    /// so that a cause is named once.
    pub fn strip_label(self, mut text: &str) -> &str {
        let former = (self == Reason::Internal).then_some("internal error");
        while let Some(rest) = [Some(self.as_str()), former]
            .into_iter()
            .flatten()
            .find_map(|l| text.strip_prefix(l)?.strip_prefix(": "))
        {
            text = rest;
        }
        text
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
