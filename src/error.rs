//! The crate's one error type.
//!
//! What a caller usually handles, and the variant to match:
//!
//! | what happened | match |
//! |---|---|
//! | the peer refused, with its reason code | [`Error::Refused`] (`reason`: [`Reason`]) |
//! | the peer is busy: retry later | [`Error::Refused`] with [`Reason::Busy`] (a file receiver's `REFUSE`, or a connection refused before set-up) |
//! | authentication failed | [`Error::Refused`] with [`Reason::AuthFailed`] |
//! | a step ran past its deadline | [`Error::Timeout`] (`what`: the step) |
//! | a file transfer stalled | [`Error::Stalled`] (the stage, the stream, the peer) |
//! | received data failed verification | [`Error::Verification`] (file, chunk) on the receiving side; a sender hears [`Error::Refused`] with [`Reason::HashMismatch`] |
//! | no device, or no such device | [`Error::NoDevice`], [`Error::DeviceNotFound`] |
//! | no such port, or no active port | [`Error::PortNotFound`], [`Error::PortNotActive`] |
//! | the locked-memory limit | [`Error::MemlockLimit`] |
//! | the peer speaks another version | [`Error::Version`] (found here), [`Error::Refused`] with [`Reason::Version`] (found by the peer) |
//!
//! [`Error::reason`] gives the [`Reason`] of all three kinds that carry one.
//!
//! [`Reason`]: crate::error::Reason
//! [`Reason::Busy`]: crate::error::Reason::Busy
//! [`Reason::AuthFailed`]: crate::error::Reason::AuthFailed
//! [`Reason::HashMismatch`]: crate::error::Reason::HashMismatch
//! [`Reason::Version`]: crate::error::Reason::Version

use std::time::Duration;

mod reason;
pub use reason::Reason;

/// Result alias used throughout rdmaxfer.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in rdmaxfer, with the operation that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A verbs or rdma_cm call failed with an errno.
    #[error("{verb} failed: {}{hint}", std::io::Error::from_raw_os_error(*errno))]
    Verb {
        /// The C call (and for QP transitions, the transition).
        verb: &'static str,
        /// The errno it reported.
        errno: i32,
        /// What to do about it, or empty.
        hint: &'static str,
    },
    /// A work request completed with an error status.
    #[error("{op} (wr_id {wr_id}) completed with {status_str} (status {status}, vendor error {vendor_err:#x}){}", completion_hint(*status))]
    Completion {
        /// What kind of work request it was.
        op: &'static str,
        /// The caller's wr_id.
        wr_id: u64,
        /// `ibv_wc_status` value.
        status: u32,
        /// `ibv_wc_status_str` text.
        status_str: String,
        /// Provider-specific error code.
        vendor_err: u32,
    },
    /// A wait ran past its deadline.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: &'static str,
        /// The deadline that passed.
        after: Duration,
    },
    /// A file transfer made no progress for its step deadline (`--timeout`, alias
    /// `--stall-timeout`): the stage it waited in, on which stream, for which peer. (The
    /// session's other streams moving keeps a stream waiting: only the whole session stalls.)
    #[error(
        "stalled: no progress for {after:?} waiting for {what} (stream {stream}, peer {peer})"
    )]
    Stalled {
        /// What was awaited, e.g. "send credit from the peer", "the receiver's verdict".
        what: &'static str,
        /// The deadline that passed.
        after: Duration,
        /// The stream (0 for a session of one).
        stream: u16,
        /// The peer's address, as known.
        peer: String,
    },
    /// The object was shut down (e.g. a listener, by its shutdown handle from another thread)
    /// before or while the call waited.
    #[error("{what} was shut down")]
    Shutdown {
        /// What was shut down, e.g. "the listener on 10.0.0.1:18515".
        what: String,
    },
    /// A non-blocking call (`try_*`, see `xfer::endpoint::nonblock`) could not make progress
    /// without waiting: nothing was done; wait until the object's file descriptor is readable
    /// (after arming it) and call again. Like [`std::io::ErrorKind::WouldBlock`].
    #[error("would block: {what} is not ready")]
    WouldBlock {
        /// What the call needs first (a message, a credit, a completion, a CM event, ...).
        what: &'static str,
    },
    /// There is no RDMA device on this machine.
    #[error("no RDMA device found{detail}. To get a Soft-RoCE device: `modprobe rdma_rxe && rdma link add rxe0 type rxe netdev <NETDEV>` (needs a kernel with CONFIG_RDMA_RXE), then check `ibv_devices`")]
    NoDevice {
        /// Extra context (e.g. the errno from ibv_get_device_list).
        detail: String,
    },
    /// The named device does not exist.
    #[error("RDMA device {name:?} not found (available: {})", if available.is_empty() { "none".to_string() } else { available.join(", ") })]
    DeviceNotFound {
        /// The name asked for.
        name: String,
        /// The devices that do exist.
        available: Vec<String>,
    },
    /// The device has no port of that number.
    #[error("device {device} has {}; there is no port {port} (-i/--ib-port)", ports_text(*ports))]
    PortNotFound {
        /// The device's name.
        device: String,
        /// The port asked for (1-based, as `ibv_devinfo` numbers them).
        port: u8,
        /// How many ports the device has.
        ports: u8,
    },
    /// The port exists but is not active (down, initializing, ...), or the device has no
    /// active port.
    #[error("{} (check `ibv_devinfo -d {device}` and the netdev's link state)", inactive_text(device, *port, state))]
    PortNotActive {
        /// The device's name.
        device: String,
        /// The port asked for (1-based); `None`: any port, and none is active.
        port: Option<u8>,
        /// The state of that port (or of the last port), as `ibv_port_state_str(3)` names it.
        state: String,
    },
    /// Registering memory (`ibv_reg_mr(3)`) failed under a finite locked-memory limit
    /// (`RLIMIT_MEMLOCK`, `ulimit -l`): pinned pages count against it.
    #[error("{verb} of {bytes} bytes failed: {}: the locked-memory limit is {} (raise it with `ulimit -l unlimited`, or `memlock` in /etc/security/limits.conf for logins)", std::io::Error::from_raw_os_error(*errno), limit_text(*limit))]
    MemlockLimit {
        /// The C call.
        verb: &'static str,
        /// The bytes being registered.
        bytes: usize,
        /// The soft limit in bytes (`None`: it could not be read).
        limit: Option<u64>,
        /// The errno the call reported (ENOMEM, EPERM or EAGAIN).
        errno: i32,
    },
    /// The peer speaks another version of a protocol than this side does.
    #[error("{what}: the peer speaks version {theirs}, this side version {ours}: use the same rdmaxfer release on both sides")]
    Version {
        /// The protocol, e.g. "file protocol HELLO".
        what: &'static str,
        /// The version this side speaks.
        ours: u16,
        /// The version the peer sent.
        theirs: u16,
    },
    /// Received data does not match the sender's digest: nothing of the file was committed.
    /// (A sender learns of it as [`Error::Refused`] with [`Reason::HashMismatch`].)
    #[error("{file}: {detail}")]
    Verification {
        /// The file's name as sent.
        file: String,
        /// The first chunk that differs (0-based); `None` when every chunk matched and the
        /// whole file's digest did not.
        chunk: Option<u64>,
        /// The digests compared.
        detail: String,
    },
    /// The caller stopped the operation (a file transfer's
    /// [`Cancel`](crate::xfer::file::Cancel)).
    #[error("cancelled by the caller")]
    Cancelled,
    /// A caller-supplied value is unusable.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The object is not in a state that allows the operation.
    #[error("{op} refused: the {object} is {state}, needs {needs}")]
    InvalidState {
        /// The operation attempted.
        op: &'static str,
        /// What is in the wrong state, e.g. "queue pair".
        object: &'static str,
        /// The state it was in.
        state: &'static str,
        /// The state it needs.
        needs: &'static str,
    },
    /// A remote access was outside the peer's exposed region.
    #[error("out of bounds: offset {offset} + length {len} exceeds the exposed region of {region_len} bytes")]
    OutOfBounds {
        /// Requested offset.
        offset: u64,
        /// Requested length.
        len: u64,
        /// Size of the region.
        region_len: u64,
    },
    /// The peer broke the protocol (bad message, bad version, ...).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The peer refused or ended the connection.
    #[error("connection: {0}")]
    Connection(String),
    /// A file transfer was refused or failed for a reason the protocol names (REFUSE/ACK/ERR).
    /// Shown as "reason: message", or the message alone for [`Reason::Internal`] (whose message
    /// says what happened; a label would add nothing).
    #[error("{}", refused_text(*reason, message))]
    Refused {
        /// The wire reason code.
        reason: Reason,
        /// Details.
        message: String,
    },
    /// A size on the way to an allocation or a registration does not fit (it would overflow,
    /// or exceed `isize::MAX` bytes). Nothing was allocated.
    #[error("{what} is too large: {detail}")]
    TooLarge {
        /// What was being sized, e.g. "registered buffer".
        what: &'static str,
        /// The numbers involved.
        detail: String,
    },
    /// Objects of different device contexts (`ibv_context`) were combined, e.g. a CQ of one
    /// context given to a QP of another, or a buffer registered on another device posted.
    #[error("{op} refused: {what} belongs to another device context than the {with}")]
    ContextMismatch {
        /// The operation refused.
        op: &'static str,
        /// The object from the other context.
        what: &'static str,
        /// The object it had to match.
        with: &'static str,
    },
    /// A file-transfer session ended, but some of its files were refused or failed (each one's
    /// reason is in the session's report); the others were delivered.
    #[error("{failed} of {total} files were not {what}")]
    Incomplete {
        /// Files refused or failed.
        failed: u64,
        /// Files announced.
        total: u64,
        /// Of the `failed`, files that vanished from the sender's source between its listing
        /// and their turn (when all of them did, the CLI exits 24, as rsync does).
        vanished: u64,
        /// What the others were, e.g. "delivered", "received".
        what: &'static str,
    },
    /// An I/O operation (socket, file) failed. The message already includes the cause, so it
    /// is not also chained as `source()` (which would print it twice under `{:#}`).
    #[error("{op}: {error}")]
    Io {
        /// What was being done.
        op: String,
        /// The underlying error.
        error: std::io::Error,
    },
}

impl Error {
    /// Builds [`Error::Verb`] from `errno` with no hint.
    pub(crate) fn verb(verb: &'static str, errno: i32) -> Self {
        Error::Verb {
            verb,
            errno,
            hint: "",
        }
    }

    /// Builds [`Error::Verb`] from the calling thread's current errno.
    pub(crate) fn last_os(verb: &'static str) -> Self {
        Self::verb(verb, last_errno())
    }

    /// Wraps an `io::Error` with what was being done.
    pub fn io(op: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            op: op.into(),
            error: source,
        }
    }

    /// The errno carried by this error, if any.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Verb { errno, .. } | Error::MemlockLimit { errno, .. } => Some(*errno),
            Error::Io { error, .. } => error.raw_os_error(),
            _ => None,
        }
    }

    /// The completion status carried by this error, if any.
    pub fn wc_status(&self) -> Option<u32> {
        match self {
            Error::Completion { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Builds [`Error::Refused`].
    pub fn refused(reason: Reason, message: impl Into<String>) -> Self {
        Error::Refused {
            reason,
            message: message.into(),
        }
    }

    /// The file-transfer reason code of a [`Error::Refused`], [`Error::Verification`]
    /// (hash mismatch) or [`Error::Version`], if it is one.
    pub fn reason(&self) -> Option<Reason> {
        match self {
            Error::Refused { reason, .. } => Some(*reason),
            Error::Verification { .. } => Some(Reason::HashMismatch),
            Error::Version { .. } => Some(Reason::Version),
            _ => None,
        }
    }

    /// True for a timeout ([`Error::Timeout`], or a file transfer [`Error::Stalled`]).
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. } | Error::Stalled { .. })
    }

    /// True for [`Error::WouldBlock`]: a non-blocking call found nothing to do yet.
    pub fn is_would_block(&self) -> bool {
        matches!(self, Error::WouldBlock { .. })
    }
}

/// The text of [`Error::Refused`]: "reason: message", without the label when the message
/// already begins with it (a peer's text often does) or when the reason is
/// [`Reason::Internal`].
fn refused_text(reason: Reason, message: &str) -> String {
    let message = reason.strip_label(message);
    if reason == Reason::Internal {
        message.to_string()
    } else {
        format!("{reason}: {message}")
    }
}

/// "one port" or "N ports".
fn ports_text(n: u8) -> String {
    if n == 1 {
        "one port".to_string()
    } else {
        format!("{n} ports")
    }
}

/// What [`Error::PortNotActive`] says before its hint.
fn inactive_text(device: &str, port: Option<u8>, state: &str) -> String {
    match port {
        Some(p) => format!("port {p} of device {device} is {state}"),
        None => format!("device {device} has no active port"),
    }
}

/// A memlock limit in bytes, as `ulimit -l` would say it (KiB), or "unknown".
fn limit_text(limit: Option<u64>) -> String {
    match limit {
        Some(b) => format!("{} KiB", b / 1024),
        None => "unknown".to_string(),
    }
}

/// What a failed completion usually means on a real wire, or empty (`ibv_wc_status` values).
fn completion_hint(status: u32) -> &'static str {
    match status {
        // IBV_WC_WR_FLUSH_ERR
        5 => ": the connection had already failed (queue pair in the error state): the peer went away, or it or we got an invalid request or an error",
        // IBV_WC_REM_INV_REQ_ERR
        9 => ": the peer's queue pair rejected the request as invalid, e.g. the two hosts use different path MTUs (with --oob, -m must be the same on both sides) or a message larger than the peer accepts",
        // IBV_WC_RETRY_EXC_ERR
        12 => ": the peer did not acknowledge within the transport retries: its host or link is down, the peer is gone, or the peer cannot answer our GID (check -g on both sides)",
        // IBV_WC_RNR_RETRY_EXC_ERR
        13 => ": the peer had no receive posted (receiver not ready) for too long",
        _ => "",
    }
}

/// The calling thread's errno (never 0: falls back to EIO when a call failed without setting it).
pub(crate) fn last_errno() -> i32 {
    match std::io::Error::last_os_error().raw_os_error() {
        Some(0) | None => libc::EIO,
        Some(e) => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verb_error_names_call_and_errno() {
        let e = Error::verb("ibv_modify_qp(INIT->RTR)", libc::EINVAL);
        let s = e.to_string();
        assert!(s.contains("ibv_modify_qp(INIT->RTR)"), "{s}");
        assert!(s.contains("Invalid argument"), "{s}");
        assert_eq!(e.errno(), Some(libc::EINVAL));
        assert_eq!(e.wc_status(), None);
    }

    #[test]
    fn completion_error_carries_status() {
        let e = Error::Completion {
            op: "RDMA WRITE",
            wr_id: 7,
            status: 10,
            status_str: "remote access error".into(),
            vendor_err: 0,
        };
        assert_eq!(e.wc_status(), Some(10));
        assert!(e.to_string().contains("remote access error"));
        assert!(e.to_string().contains("wr_id 7"));
    }

    #[test]
    fn completion_errors_seen_on_a_wire_say_what_they_mean() {
        let e = |status| Error::Completion {
            op: "RDMA WRITE_WITH_IMM",
            wr_id: 0,
            status,
            status_str: "x".into(),
            vendor_err: 0,
        };
        assert!(e(9).to_string().contains("path MTU"), "{}", e(9));
        assert!(
            e(12).to_string().contains("host or link is down"),
            "{}",
            e(12)
        );
        assert!(e(5).to_string().contains("already failed"), "{}", e(5));
        assert!(e(1).to_string().ends_with("vendor error 0x0)"), "{}", e(1));
    }

    #[test]
    fn no_device_says_how_to_get_one() {
        let s = Error::NoDevice {
            detail: String::new(),
        }
        .to_string();
        assert!(s.contains("modprobe rdma_rxe"), "{s}");
        assert!(s.contains("rdma link add"), "{s}");
    }

    #[test]
    fn device_not_found_lists_available() {
        let e = Error::DeviceNotFound {
            name: "mlx9".into(),
            available: vec!["rxe0".into()],
        };
        assert!(e.to_string().contains("rxe0"));
        let e = Error::DeviceNotFound {
            name: "mlx9".into(),
            available: vec![],
        };
        assert!(e.to_string().contains("none"));
    }

    #[test]
    fn io_error_prints_its_cause_once_under_anyhow() {
        let e = Error::io(
            "connect 198.18.0.1:1",
            std::io::Error::from_raw_os_error(libc::ECONNREFUSED),
        );
        assert_eq!(e.errno(), Some(libc::ECONNREFUSED));
        let s = format!("{:#}", anyhow::Error::new(e));
        assert_eq!(s.matches("refused").count(), 1, "{s}");
    }

    #[test]
    fn a_refusal_names_its_reason_once_and_internal_is_no_label() {
        let e = Error::refused(
            Reason::Exists,
            "exists: exists: /out/x exists (use --force)",
        );
        assert_eq!(e.to_string(), "exists: /out/x exists (use --force)");
        let e = Error::refused(
            Reason::Internal,
            "internal error: the receiver is being interrupted",
        );
        assert_eq!(e.to_string(), "the receiver is being interrupted");
        assert_eq!(e.reason(), Some(Reason::Internal));
        let e = Error::Incomplete {
            failed: 1,
            total: 3,
            vanished: 0,
            what: "delivered",
        };
        assert_eq!(e.to_string(), "1 of 3 files were not delivered");
        assert_eq!(Reason::TooLarge.strip_label("too largely"), "too largely");
    }
}
