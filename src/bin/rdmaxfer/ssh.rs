//! The remote side of `cp` over ssh (or `-e CMD`): started, heard from, waited for.
//!
//! The local side holds the write end of the remote's standard input for the whole copy and
//! never writes to it: the remote side exits when it closes (`remote.rs`), so a local side that
//! dies (even by SIGKILL) or an ssh that dies ends the remote side too. The remote's standard
//! error is printed here line by line, prefixed with its host.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};

use crate::remote::Ready;

/// Splits `-e CMD` into words as a shell would for simple quoting: blanks separate words,
/// single quotes keep everything, double quotes and backslashes keep the next character.
pub fn split_command(cmd: &str) -> Result<Vec<String>> {
    let mut words = Vec::new();
    let mut cur: Option<String> = None;
    let mut chars = cmd.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => {
                if let Some(w) = cur.take() {
                    words.push(w);
                }
            }
            '\'' => {
                let w = cur.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => w.push(c),
                        None => bail!("-e {cmd:?}: a single quote is not closed"),
                    }
                }
            }
            '"' => {
                let w = cur.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => w.extend(chars.next()),
                        Some(c) => w.push(c),
                        None => bail!("-e {cmd:?}: a double quote is not closed"),
                    }
                }
            }
            '\\' => cur.get_or_insert_with(String::new).extend(chars.next()),
            c => cur.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(cur);
    if words.is_empty() {
        bail!("-e: the remote shell command is empty");
    }
    Ok(words)
}

/// `word` quoted for a POSIX shell (ssh hands the remote command to the login shell).
pub fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,@+%".contains(&b))
    {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// A remote side being run.
pub struct Remote {
    host: String,
    child: Child,
    /// Kept open (never written) for the whole copy: the remote side's lifeline.
    lifeline: Option<ChildStdin>,
    /// The stdout reader: the ready line, then its end (ssh gone or the remote side done).
    lines: mpsc::Receiver<Option<Result<Ready>>>,
}

impl Remote {
    /// Starts `rsh... [login@]host remote...` (each remote word quoted for the remote shell).
    pub fn start(rsh: &[String], login: &str, host: &str, remote: &[String]) -> Result<Remote> {
        let cmd: Vec<String> = remote.iter().map(|w| shell_quote(w)).collect();
        let (prog, opts) = rsh.split_first().context("-e: empty command")?;
        let mut child = Command::new(prog)
            .args(opts)
            .arg(login)
            .arg(cmd.join(" "))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {prog:?} (-e/--rsh) to reach {host}"))?;
        tracing::debug!("started {prog} {opts:?} {login} {}", cmd.join(" "));
        let lifeline = child.stdin.take();
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let (tx, lines) = mpsc::channel();
        if let Some(out) = stdout {
            std::thread::Builder::new()
                .name("remote-stdout".into())
                .spawn(move || {
                    for line in BufReader::new(out).lines() {
                        let Ok(line) = line else { break };
                        match Ready::parse(&line) {
                            Some(r) => drop(tx.send(Some(r))),
                            // A remote sender's lines and summary (a pull).
                            None => outln!("{line}"),
                        }
                    }
                    drop(tx.send(None));
                })
                .context("starting the remote output thread")?;
        }
        if let Some(err) = stderr {
            let prefix = host.to_string();
            std::thread::Builder::new()
                .name("remote-stderr".into())
                .spawn(move || {
                    for line in BufReader::new(err).split(b'\n') {
                        let Ok(line) = line else { break };
                        let line = String::from_utf8_lossy(&line);
                        // The remote receiver says where it listens and whom it serves; the
                        // local side says what it connects to.
                        let chatter = line.starts_with("listening on ")
                            || (line.starts_with("session ") && line.contains(": serving "));
                        if !chatter {
                            eprintln!("{prefix}: {line}");
                        }
                    }
                })
                .context("starting the remote error thread")?;
        }
        Ok(Remote {
            host: host.to_string(),
            child,
            lifeline,
            lines,
        })
    }

    /// Waits up to `wait` for the remote side to report where it listens.
    pub fn ready(&mut self, wait: Duration) -> Result<Ready> {
        match self.lines.recv_timeout(wait) {
            Ok(Some(r)) => r,
            Ok(None) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                let st = self.wait_exit(Duration::from_secs(5));
                bail!(
                    "the remote side on {} ended before it was ready ({}): is rdmaxfer installed \
                     there (--remote-path) and the host reachable by ssh (-e)?",
                    self.host,
                    st.map_or_else(|| "still running".to_string(), |s| s.to_string())
                )
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                self.stop();
                Err(rdmaxfer::Error::Timeout {
                    what: "the remote side to report its port (over ssh)",
                    after: wait,
                })
                .context(format!("starting rdmaxfer on {}", self.host))
            }
        }
    }

    /// Waits up to `wait` for the remote side to end; past it, closes its lifeline and waits
    /// a little more, then kills ssh. Its exit status, if it ended.
    pub fn finish(mut self, wait: Duration) -> Option<ExitStatus> {
        match self.wait_exit(wait) {
            Some(st) => Some(st),
            None => {
                tracing::warn!(
                    "the remote side on {} did not end in time: stopping it",
                    self.host
                );
                self.stop();
                None
            }
        }
    }

    /// The remote side's end: its output closed (ssh ended or is about to) within `wait`.
    fn wait_exit(&mut self, wait: Duration) -> Option<ExitStatus> {
        match self.lines.recv_timeout(wait) {
            Ok(_) | Err(mpsc::RecvTimeoutError::Disconnected) => self.child.wait().ok(),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
        }
    }

    /// Closes the lifeline (the remote side exits), waits a little, then kills ssh.
    fn stop(&mut self) {
        drop(self.lifeline.take());
        if self.wait_exit(Duration::from_secs(3)).is_none() {
            drop(self.child.kill());
            drop(self.child.wait());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rsh_commands_split_as_a_shell_would() {
        assert_eq!(split_command("ssh").unwrap(), ["ssh"]);
        assert_eq!(
            split_command("ssh -p 2222  -i '/k ey' -o \"A=b c\"").unwrap(),
            ["ssh", "-p", "2222", "-i", "/k ey", "-o", "A=b c"]
        );
        assert_eq!(split_command(r"a\ b").unwrap(), ["a b"]);
        assert!(split_command("ssh 'x").is_err());
        assert!(split_command("  ").is_err());
    }

    #[test]
    fn remote_words_are_quoted_for_the_remote_shell() {
        assert_eq!(shell_quote("/tmp/out"), "/tmp/out");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("$(rm -rf /)"), "'$(rm -rf /)'");
    }
}
