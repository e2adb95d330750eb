//! What the receiver does with an entry that already exists: the decision table of the
//! sender's wishes (`send --force`, `--ignore-existing`, `--update`) against the receiver's
//! policy (`recv --force`), which wins. Pure: the caller inspects the file system.

pub use crate::xfer::file::names::DIFFERS;
use crate::xfer::file::proto::{HelloFlags, SkipWhy};

/// What the receiver found under the entry's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Existing {
    /// The same as what is offered: size and mtime (or BLAKE3 with `--checksum`) for a file,
    /// the target for a symlink, any directory for a directory.
    pub same: bool,
    /// Its mtime is later than the offered one.
    pub newer: bool,
}

/// The verdict on one entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Receive it; `replace`: over the existing entry.
    Write {
        /// Replace what is there.
        replace: bool,
    },
    /// Nothing to do (SKIP).
    Skip(SkipWhy, String),
    /// Refused (REFUSE with reason `exists`), with a message naming the option needed.
    Refuse(String),
}

/// Refusal: the sender asked to replace, the receiver does not allow it.
pub const NOT_ALLOWED: &str =
    "exists and differs, and the receiver does not allow overwriting: run recv with --force";

/// The decision for an entry: `existing` is `None` when nothing is there; `want` the sender's
/// flags; `allow_overwrite` the receiver's `--force`.
pub fn decide(existing: Option<Existing>, want: &HelloFlags, allow_overwrite: bool) -> Decision {
    let Some(ex) = existing else {
        return Decision::Write { replace: false };
    };
    if ex.same {
        return Decision::Skip(SkipWhy::Identical, SkipWhy::Identical.as_str().into());
    }
    if want.ignore_existing {
        return Decision::Skip(
            SkipWhy::Exists,
            "exists on the receiver (send --ignore-existing)".into(),
        );
    }
    if want.update && ex.newer {
        return Decision::Skip(
            SkipWhy::Newer,
            "newer on the receiver (send --update)".into(),
        );
    }
    if want.force || want.update {
        if allow_overwrite {
            return Decision::Write { replace: true };
        }
        return Decision::Refuse(NOT_ALLOWED.into());
    }
    Decision::Refuse(DIFFERS.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(force: bool, ignore_existing: bool, update: bool) -> HelloFlags {
        HelloFlags {
            force,
            ignore_existing,
            update,
            ..HelloFlags::default()
        }
    }

    fn ex(same: bool, newer: bool) -> Option<Existing> {
        Some(Existing { same, newer })
    }

    #[test]
    fn nothing_there_is_written_whatever_the_flags() {
        for bits in 0..16u8 {
            let f = flags(bits & 1 != 0, bits & 2 != 0, bits & 4 != 0);
            assert_eq!(
                decide(None, &f, bits & 8 != 0),
                Decision::Write { replace: false }
            );
        }
    }

    #[test]
    fn identical_is_skipped_whatever_the_flags() {
        for bits in 0..32u8 {
            let f = flags(bits & 1 != 0, bits & 2 != 0, bits & 4 != 0);
            let d = decide(ex(true, bits & 16 != 0), &f, bits & 8 != 0);
            assert_eq!(d, Decision::Skip(SkipWhy::Identical, "identical".into()));
        }
    }

    #[test]
    fn decision_table_for_a_differing_entry() {
        use Decision::*;
        let skip_exists = || Skip(SkipWhy::Exists, "x".into());
        let skip_newer = || Skip(SkipWhy::Newer, "x".into());
        let write = || Write { replace: true };
        let differs = || Refuse(DIFFERS.into());
        let not_allowed = || Refuse(NOT_ALLOWED.into());
        // (force, ignore_existing, update, receiver newer, recv --force) → decision
        type Row = ((bool, bool, bool, bool, bool), Decision);
        let table: Vec<Row> = vec![
            ((false, false, false, false, false), differs()),
            ((false, false, false, false, true), differs()),
            ((false, false, false, true, true), differs()),
            ((true, false, false, false, false), not_allowed()),
            ((true, false, false, true, false), not_allowed()),
            ((true, false, false, false, true), write()),
            ((true, false, false, true, true), write()),
            ((false, true, false, false, false), skip_exists()),
            ((true, true, false, false, true), skip_exists()),
            ((false, true, true, true, true), skip_exists()),
            ((false, false, true, true, false), skip_newer()),
            ((false, false, true, true, true), skip_newer()),
            ((true, false, true, true, true), skip_newer()),
            ((false, false, true, false, false), not_allowed()),
            ((false, false, true, false, true), write()),
        ];
        for ((force, ign, upd, newer, allow), want) in table {
            let got = decide(ex(false, newer), &flags(force, ign, upd), allow);
            let same_kind = match (&got, &want) {
                (Skip(a, _), Skip(b, _)) => a == b,
                _ => got == want,
            };
            assert!(
                same_kind,
                "force={force} ignore={ign} update={upd} newer={newer} allow={allow}: {got:?}, want {want:?}"
            );
        }
    }

    #[test]
    fn refusals_name_the_option_needed() {
        assert!(DIFFERS.contains("send --force") && DIFFERS.contains("recv --force"));
        assert!(NOT_ALLOWED.contains("recv with --force"));
        assert!(!NOT_ALLOWED.contains("send --force"));
    }
}
