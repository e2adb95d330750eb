//! Which entries of a tree are sent: `send --exclude/--include`, rsync's rules (the part of them
//! a file list needs). Rules are tried in the order given; the first that matches an entry's
//! name decides, and an entry no rule matches is sent. An excluded directory is not entered.
//!
//! A pattern is matched against the name the receiver would get (`tree/sub/f.txt` for
//! `send tree`):
//! - `*` matches any characters but `/`, `**` any characters, `?` one character but `/`,
//!   `[abc]` / `[a-z]` / `[!abc]` one of (or none of) a set; anything else matches itself;
//! - a pattern ending in `/` matches directories only (the `/` is not part of it);
//! - a pattern starting with `/` is anchored: it must match the whole name;
//! - otherwise a pattern with no `/` matches the last component (`*.o` excludes every object
//!   file at any depth), and one with a `/` matches the name's last components
//!   (`sub/*.tmp` matches `tree/sub/a.tmp`, not `tree/other/sub2/a.tmp`).

use crate::error::{Error, Result};

/// One rule: include or exclude what its pattern matches.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rule {
    include: bool,
    /// The pattern, without a leading or trailing `/`.
    pattern: String,
    /// It began with `/`: it matches the whole name.
    anchored: bool,
    /// It ended with `/`: it matches directories only.
    dir_only: bool,
}

/// An ordered list of include and exclude rules (empty: everything is sent).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    rules: Vec<Rule>,
}

impl Filter {
    /// No rules: everything is sent.
    pub fn new() -> Filter {
        Filter::default()
    }

    /// Adds a rule that excludes what `pattern` matches (`send --exclude`).
    pub fn exclude(&mut self, pattern: &str) -> Result<()> {
        self.push(false, pattern)
    }

    /// Adds a rule that includes what `pattern` matches (`send --include`), before a later
    /// exclude rule can exclude it.
    pub fn include(&mut self, pattern: &str) -> Result<()> {
        self.push(true, pattern)
    }

    fn push(&mut self, include: bool, pattern: &str) -> Result<()> {
        let anchored = pattern.starts_with('/');
        let dir_only = pattern.len() > 1 && pattern.ends_with('/');
        let body = pattern.trim_start_matches('/');
        let body = body.strip_suffix('/').unwrap_or(body);
        if body.is_empty() || body.split('/').any(str::is_empty) {
            return Err(Error::InvalidArgument(format!(
                "{} pattern {pattern:?}: empty, or with an empty component",
                if include { "--include" } else { "--exclude" }
            )));
        }
        self.rules.push(Rule {
            include,
            pattern: body.to_string(),
            anchored,
            dir_only,
        });
        Ok(())
    }

    /// True when no rule is given.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether the entry named `name` (a directory when `is_dir`) is sent.
    pub fn allows(&self, name: &str, is_dir: bool) -> bool {
        for r in &self.rules {
            if r.dir_only && !is_dir {
                continue;
            }
            if r.matches(name) {
                return r.include;
            }
        }
        true
    }
}

impl Rule {
    fn matches(&self, name: &str) -> bool {
        if self.anchored {
            return glob(self.pattern.as_bytes(), name.as_bytes());
        }
        // The pattern's components against the name's last ones (or, with `**`, any suffix
        // that starts at a component).
        let n = self.pattern.split('/').count();
        let parts: Vec<&str> = name.split('/').collect();
        if self.pattern.contains("**") {
            return (0..parts.len())
                .any(|i| glob(self.pattern.as_bytes(), parts[i..].join("/").as_bytes()));
        }
        parts.len() >= n
            && glob(
                self.pattern.as_bytes(),
                parts[parts.len() - n..].join("/").as_bytes(),
            )
    }
}

/// Whether `pat` matches all of `s` (see the module docs for the syntax).
fn glob(pat: &[u8], s: &[u8]) -> bool {
    match pat.first() {
        None => s.is_empty(),
        Some(b'*') if pat.get(1) == Some(&b'*') => {
            let rest = &pat[2..];
            (0..=s.len()).any(|i| glob(rest, &s[i..]))
        }
        Some(b'*') => {
            let rest = &pat[1..];
            for i in 0..=s.len() {
                if glob(rest, &s[i..]) {
                    return true;
                }
                if s.get(i) == Some(&b'/') {
                    return false;
                }
            }
            false
        }
        Some(b'?') => s.first().is_some_and(|&c| c != b'/') && glob(&pat[1..], &s[1..]),
        Some(b'[') => match class(&pat[1..]) {
            Some((set, negated, used)) => {
                s.first().is_some_and(|&c| {
                    c != b'/' && set.iter().any(|&(lo, hi)| (lo..=hi).contains(&c)) != negated
                }) && glob(&pat[1 + used..], &s[1..])
            }
            // No closing `]`: a literal `[`.
            None => s.first() == Some(&b'[') && glob(&pat[1..], &s[1..]),
        },
        Some(&c) => s.first() == Some(&c) && glob(&pat[1..], &s[1..]),
    }
}

/// A bracket set: its byte ranges, whether it is negated (`!` or `^`), and the pattern bytes it
/// used up to and with its `]`.
type Class = (Vec<(u8, u8)>, bool, usize);

/// The set after a `[`; `None` without a closing `]`.
fn class(p: &[u8]) -> Option<Class> {
    let negated = matches!(p.first(), Some(b'!' | b'^'));
    let mut i = usize::from(negated);
    let mut set = Vec::new();
    let mut first = true;
    while i < p.len() {
        let c = p[i];
        if c == b']' && !first {
            return Some((set, negated, i + 1));
        }
        first = false;
        if p.get(i + 1) == Some(&b'-') && p.get(i + 2).is_some_and(|&h| h != b']') {
            set.push((c, p[i + 2]));
            i += 3;
        } else {
            set.push((c, c));
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(rules: &[(&str, bool)]) -> Filter {
        let mut f = Filter::new();
        for (p, include) in rules {
            if *include {
                f.include(p).unwrap();
            } else {
                f.exclude(p).unwrap();
            }
        }
        f
    }

    #[test]
    fn globs_match_as_rsync_does() {
        for (pat, s, want) in [
            ("*.o", "a.o", true),
            ("*.o", "a.c", false),
            ("*", "a/b", false),
            ("**", "a/b", true),
            ("a/**/z", "a/b/c/z", true),
            ("?.txt", "a.txt", true),
            ("?.txt", "ab.txt", false),
            ("[ab].txt", "b.txt", true),
            ("[!ab].txt", "b.txt", false),
            ("[a-c]x", "cx", true),
            ("[a-c]x", "dx", false),
            ("[x", "[x", true),
            ("", "", true),
        ] {
            assert_eq!(glob(pat.as_bytes(), s.as_bytes()), want, "{pat} ~ {s}");
        }
    }

    #[test]
    fn the_first_matching_rule_decides_and_unmatched_entries_are_sent() {
        let f = filter(&[
            ("keep.o", true),
            ("*.o", false),
            ("cache/", false),
            ("/tree/top.txt", false),
        ]);
        assert!(f.allows("tree/a.c", false));
        assert!(!f.allows("tree/sub/a.o", false));
        assert!(f.allows("tree/sub/keep.o", false));
        assert!(!f.allows("tree/x/cache", true), "a directory");
        assert!(
            f.allows("tree/x/cache", false),
            "a file named cache: dir-only rule"
        );
        assert!(!f.allows("tree/top.txt", false), "anchored");
        assert!(
            f.allows("tree/sub/top.txt", false),
            "anchored: not at depth"
        );
        let f = filter(&[("sub/*.tmp", false)]);
        assert!(!f.allows("tree/sub/a.tmp", false));
        assert!(f.allows("tree/other/sub2/a.tmp", false));
        assert!(f.allows("tree/a.tmp", false));
        let f = filter(&[("*.txt", true), ("*", false)]);
        assert!(f.allows("tree/a.txt", false) && !f.allows("tree/a.bin", false));
        assert!(Filter::new().allows("anything", true));
        // Only .c files (and every directory on the way), as the README shows.
        let f = filter(&[("*/", true), ("*.c", true), ("*", false)]);
        assert!(f.allows("tree", true) && f.allows("tree/sub", true));
        assert!(f.allows("tree/sub/a.c", false) && !f.allows("tree/sub/a.o", false));
    }

    #[test]
    fn empty_patterns_are_refused() {
        for p in ["", "/", "a//b", "//"] {
            assert!(Filter::new().exclude(p).is_err(), "{p:?}");
        }
    }
}
