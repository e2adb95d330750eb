//! The token of `send` and `recv`: `--token`, `--token-file` (kept off the command line) or
//! `$RDMAXFER_TOKEN`, and the warning of a receiver that requires none.

use std::path::PathBuf;

use anyhow::Result;
use rdmaxfer::xfer::file::printable;

use crate::args::{usage, usage_of};

/// Environment variable holding the token when `--token` is not given.
pub const TOKEN_ENV: &str = "RDMAXFER_TOKEN";

/// `--token`: an empty token is a usage error (it must not turn authentication off).
pub fn parse_token(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("an empty token would turn authentication off: give a non-empty token, or leave --token out".into());
    }
    Ok(s.to_string())
}

/// The token: `--token`, else `--token-file`, else `$RDMAXFER_TOKEN` (any bytes). Set but
/// empty is a usage error.
pub fn token(arg: &Option<String>, file: &Option<PathBuf>) -> Result<Option<Vec<u8>>> {
    if let Some(t) = arg {
        return Ok(Some(t.clone().into_bytes()));
    }
    if let Some(path) = file {
        return token_file(path).map(Some);
    }
    match std::env::var_os(TOKEN_ENV) {
        None => Ok(None),
        Some(t) if t.is_empty() => usage!(
            "{TOKEN_ENV} is set but empty, which would turn authentication off: give a non-empty \
             token, or unset it"
        ),
        Some(t) => Ok(Some(std::os::unix::ffi::OsStringExt::into_vec(t))),
    }
}

/// `--token-file FILE`: the token is the file's first line (without its line end), as rsync's
/// `--password-file`. The file must not be readable by group or others (as ssh's keys), and the
/// token not empty: both are usage errors.
fn token_file(path: &std::path::Path) -> Result<Vec<u8>> {
    use std::os::unix::fs::MetadataExt as _;
    let shown = printable(&path.display().to_string()).into_owned();
    let meta =
        std::fs::metadata(path).map_err(|e| usage_of(&format!("--token-file {shown}"), e))?;
    if meta.mode() & 0o077 != 0 {
        usage!(
            "--token-file {shown}: readable by others (mode {:o}): chmod 600 it",
            meta.mode() & 0o777
        );
    }
    let bytes = std::fs::read(path).map_err(|e| usage_of(&format!("--token-file {shown}"), e))?;
    let line = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() {
        usage!(
            "--token-file {shown}: the first line is empty, which would turn authentication off"
        );
    }
    Ok(line.to_vec())
}

/// What `recv` says on every start without a token: anyone who reaches the address may write.
pub fn warn_without_token(listen: &str, out: &std::path::Path) {
    eprintln!(
        "rdmaxfer: warning: recv accepts files from any sender that reaches {listen} (no token): \
         anyone there can write into {}; give --token-file FILE (or $RDMAXFER_TOKEN) to require one",
        printable(&out.display().to_string())
    );
}
