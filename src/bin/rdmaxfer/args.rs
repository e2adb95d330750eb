//! Option values shared by the subcommands: sizes with K/M/G suffixes, a server's limits, and
//! the usage error of a value found wrong after parsing.

use rdmaxfer::xfer::params::{Limits, DEFAULT_MAX_ITERS, DEFAULT_MAX_SIZE};

/// A usage error found after parsing (a value out of range, options that do not go together):
/// the CLI exits 2 with this one line, as for clap's own errors. It names the option.
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// The other side of `cp` ended with this exit status (`None`: killed, or not ended).
#[derive(Debug)]
pub struct RemoteStatus {
    /// Its exit status.
    pub code: Option<i32>,
    /// What happened, naming the host.
    pub what: String,
}

impl std::fmt::Display for RemoteStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.what)
    }
}

impl std::error::Error for RemoteStatus {}

/// `Err` of a [`Usage`] error from a format string (as `anyhow::bail!`).
macro_rules! usage {
    ($($t:tt)*) => {
        return Err(anyhow::Error::new($crate::args::Usage(format!($($t)*))))
    };
}
pub(crate) use usage;

/// `e` (e.g. a value the library refused to parse) as a usage error, after `what` (nothing
/// when empty: the message names the option already).
pub fn usage_of(what: &str, e: impl std::fmt::Display) -> anyhow::Error {
    let e = e.to_string();
    let e = e.strip_prefix("invalid argument: ").unwrap_or(&e);
    match what {
        "" => anyhow::Error::new(Usage(e.to_string())),
        what => anyhow::Error::new(Usage(format!("{what}: {e}"))),
    }
}

/// Parses `1048576`, `64K`, `1M`, `2G` (binary units; `KB`, `KiB` and the like too).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        None => (t, 1u64),
        Some((i, _)) => {
            let m = match t[i..]
                .to_ascii_uppercase()
                .trim_end_matches("IB")
                .trim_end_matches('B')
            {
                "" => 1,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                "T" => 1 << 40,
                u => return Err(format!("unknown unit {u:?} in {s:?} (use K, M, G or T)")),
            };
            (&t[..i], m)
        }
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 1048576, 64K, 1M)"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// [`parse_size`] for sizes held in memory (`usize`).
pub fn parse_mem_size(s: &str) -> Result<usize, String> {
    let n = parse_size(s)?;
    usize::try_from(n).map_err(|_| format!("{s:?} is too large"))
}

// What a `pingpong` or `bench` server allows one client.
// (A plain comment: flattened into subcommands whose help a doc comment would replace.)
#[derive(clap::Args, Debug, Clone)]
pub struct LimitArgs {
    /// Server: largest -s a client may ask for (default 8M, Soft-RoCE's largest message).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value_t = DEFAULT_MAX_SIZE)]
    pub max_size: u64,
    /// Server: most iterations (-n) a client may ask for.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_ITERS)]
    pub max_iters: u64,
}

impl LimitArgs {
    /// The library's form.
    pub fn limits(&self) -> Limits {
        Limits::default()
            .max_size(self.max_size)
            .max_iters(self.max_iters)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("1Q").unwrap_err().contains("unknown unit"));
        assert!(parse_size("K").is_err());
        assert!(parse_size("99999999999T")
            .unwrap_err()
            .contains("too large"));
        assert_eq!(parse_mem_size("8M"), Ok(8 << 20));
    }
}
