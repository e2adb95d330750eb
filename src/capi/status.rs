//! Status codes, their texts, the thread-local last error message and the version.

use std::ffi::{c_char, c_int, CStr};

use crate::error::Error;

/// Major version of the library; the header's copy is checked against Cargo.toml at build time.
pub const RDMAXFER_VERSION_MAJOR: u32 = 0;
/// Minor version.
pub const RDMAXFER_VERSION_MINOR: u32 = 1;
/// Patch version.
pub const RDMAXFER_VERSION_PATCH: u32 = 0;

const fn parse_u32(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut v = 0u32;
    let mut i = 0;
    while i < b.len() {
        assert!(b[i].is_ascii_digit(), "version part is not a number");
        v = v * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    v
}

// The header's version macros are these constants (RDMAXFER_VERSION, the string, is made from
// them in cbindgen.toml): a build with a Cargo.toml version that differs fails here (bump them,
// then run ci/gen-header.sh).
const _: () = assert!(RDMAXFER_VERSION_MAJOR == parse_u32(env!("CARGO_PKG_VERSION_MAJOR")));
const _: () = assert!(RDMAXFER_VERSION_MINOR == parse_u32(env!("CARGO_PKG_VERSION_MINOR")));
const _: () = assert!(RDMAXFER_VERSION_PATCH == parse_u32(env!("CARGO_PKG_VERSION_PATCH")));

const VERSION_C: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(c) => c,
        Err(_) => panic!("the package version contains a NUL"),
    };

/// The result of every call that can fail. The numeric values are fixed: new codes are only
/// ever added at the end.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum rdmaxfer_status {
    /// Success.
    RDMAXFER_OK = 0,
    /// A required pointer argument was NULL.
    RDMAXFER_ERR_NULL_ARGUMENT = 1,
    /// An argument was out of range, not UTF-8, misaligned, or does not belong with the others
    /// (e.g. a buffer registered on another connection).
    RDMAXFER_ERR_INVALID_ARGUMENT = 2,
    /// The handle is in use by another call (another thread, or a callback calling back in).
    RDMAXFER_ERR_BUSY = 3,
    /// The library panicked (a bug); the handle involved is poisoned and can only be freed.
    RDMAXFER_ERR_PANIC = 4,
    /// There is no RDMA device on this machine.
    RDMAXFER_ERR_NO_DEVICE = 5,
    /// The named RDMA device does not exist.
    RDMAXFER_ERR_DEVICE_NOT_FOUND = 6,
    /// A verbs or rdma_cm call failed.
    RDMAXFER_ERR_VERBS = 7,
    /// A work request completed with an error status.
    RDMAXFER_ERR_COMPLETION = 8,
    /// A step ran past its deadline.
    RDMAXFER_ERR_TIMEOUT = 9,
    /// An offset/length lies outside the peer's exposed region.
    RDMAXFER_ERR_OUT_OF_BOUNDS = 10,
    /// The peer broke the protocol.
    RDMAXFER_ERR_PROTOCOL = 11,
    /// The peer refused or ended the connection.
    RDMAXFER_ERR_CONNECTION = 12,
    /// A file transfer was refused or a file failed (reason in the last error message).
    RDMAXFER_ERR_REFUSED = 13,
    /// A file or socket operation failed.
    RDMAXFER_ERR_IO = 14,
    /// The object is not in a state that allows the call (e.g. a closed session), or the handle
    /// was freed.
    RDMAXFER_ERR_INVALID_STATE = 15,
    /// The caller's buffer is too small for the result (the needed length is in the call's
    /// length out-parameter, where it has one: see `rdmaxfer_recv`).
    RDMAXFER_ERR_BUFFER_TOO_SMALL = 16,
    /// A non-blocking call found nothing to do yet (no connection request, no message, no
    /// send credit): wait for the handle's descriptor (`rdmaxfer_listener_fd`,
    /// `rdmaxfer_conn_fd`) to become readable, then call again.
    RDMAXFER_ERR_AGAIN = 17,
    /// The listener was shut down (`rdmaxfer_listener_shutdown` or `rdmaxfer_listener_free`,
    /// possibly from another thread) before or while the call waited.
    RDMAXFER_ERR_SHUTDOWN = 18,
    /// The caller stopped the call (a file transfer's progress callback returned non-zero):
    /// nothing it had not verified whole was committed.
    RDMAXFER_ERR_ABORTED = 19,
}

use rdmaxfer_status as S;

impl rdmaxfer_status {
    /// Every status, in numeric order.
    pub const ALL: [rdmaxfer_status; 20] = [
        S::RDMAXFER_OK,
        S::RDMAXFER_ERR_NULL_ARGUMENT,
        S::RDMAXFER_ERR_INVALID_ARGUMENT,
        S::RDMAXFER_ERR_BUSY,
        S::RDMAXFER_ERR_PANIC,
        S::RDMAXFER_ERR_NO_DEVICE,
        S::RDMAXFER_ERR_DEVICE_NOT_FOUND,
        S::RDMAXFER_ERR_VERBS,
        S::RDMAXFER_ERR_COMPLETION,
        S::RDMAXFER_ERR_TIMEOUT,
        S::RDMAXFER_ERR_OUT_OF_BOUNDS,
        S::RDMAXFER_ERR_PROTOCOL,
        S::RDMAXFER_ERR_CONNECTION,
        S::RDMAXFER_ERR_REFUSED,
        S::RDMAXFER_ERR_IO,
        S::RDMAXFER_ERR_INVALID_STATE,
        S::RDMAXFER_ERR_BUFFER_TOO_SMALL,
        S::RDMAXFER_ERR_AGAIN,
        S::RDMAXFER_ERR_SHUTDOWN,
        S::RDMAXFER_ERR_ABORTED,
    ];

    /// The status with numeric value `v`, if there is one.
    pub fn from_raw(v: c_int) -> Option<rdmaxfer_status> {
        Self::ALL.iter().copied().find(|s| *s as c_int == v)
    }

    /// What the status means (static text).
    pub fn text(self) -> &'static CStr {
        match self {
            S::RDMAXFER_OK => c"success",
            S::RDMAXFER_ERR_NULL_ARGUMENT => c"a required pointer argument was NULL",
            S::RDMAXFER_ERR_INVALID_ARGUMENT => c"invalid argument",
            S::RDMAXFER_ERR_BUSY => c"the handle is in use by another call",
            S::RDMAXFER_ERR_PANIC => c"internal error (panic); the handle can only be freed",
            S::RDMAXFER_ERR_NO_DEVICE => c"no RDMA device found",
            S::RDMAXFER_ERR_DEVICE_NOT_FOUND => c"RDMA device not found",
            S::RDMAXFER_ERR_VERBS => c"a verbs or rdma_cm call failed",
            S::RDMAXFER_ERR_COMPLETION => c"a work request completed with an error",
            S::RDMAXFER_ERR_TIMEOUT => c"timed out",
            S::RDMAXFER_ERR_OUT_OF_BOUNDS => c"outside the peer's exposed region",
            S::RDMAXFER_ERR_PROTOCOL => c"protocol error",
            S::RDMAXFER_ERR_CONNECTION => c"the peer refused or ended the connection",
            S::RDMAXFER_ERR_REFUSED => c"the transfer was refused or a file failed",
            S::RDMAXFER_ERR_IO => c"I/O error",
            S::RDMAXFER_ERR_INVALID_STATE => c"the object is not in a state that allows this",
            S::RDMAXFER_ERR_BUFFER_TOO_SMALL => c"the buffer is too small",
            S::RDMAXFER_ERR_AGAIN => {
                c"nothing ready yet; try again when the descriptor is readable"
            }
            S::RDMAXFER_ERR_SHUTDOWN => c"the listener was shut down",
            S::RDMAXFER_ERR_ABORTED => c"stopped by the caller",
        }
    }
}

impl From<&Error> for rdmaxfer_status {
    fn from(e: &Error) -> rdmaxfer_status {
        match e {
            // The statuses these had before they were variants of their own.
            Error::Verb { .. } | Error::MemlockLimit { .. } => S::RDMAXFER_ERR_VERBS,
            Error::Completion { .. } => S::RDMAXFER_ERR_COMPLETION,
            Error::Timeout { .. } | Error::Stalled { .. } => S::RDMAXFER_ERR_TIMEOUT,
            Error::WouldBlock { .. } => S::RDMAXFER_ERR_AGAIN,
            Error::NoDevice { .. } => S::RDMAXFER_ERR_NO_DEVICE,
            Error::DeviceNotFound { .. } => S::RDMAXFER_ERR_DEVICE_NOT_FOUND,
            Error::InvalidArgument(_)
            | Error::TooLarge { .. }
            | Error::ContextMismatch { .. }
            | Error::PortNotFound { .. }
            | Error::PortNotActive { .. } => S::RDMAXFER_ERR_INVALID_ARGUMENT,
            Error::InvalidState { .. } => S::RDMAXFER_ERR_INVALID_STATE,
            Error::OutOfBounds { .. } => S::RDMAXFER_ERR_OUT_OF_BOUNDS,
            Error::Protocol(_) | Error::Version { .. } => S::RDMAXFER_ERR_PROTOCOL,
            Error::Connection(_) => S::RDMAXFER_ERR_CONNECTION,
            Error::Refused { .. } | Error::Incomplete { .. } | Error::Verification { .. } => {
                S::RDMAXFER_ERR_REFUSED
            }
            Error::Io { .. } => S::RDMAXFER_ERR_IO,
            Error::Shutdown { .. } => S::RDMAXFER_ERR_SHUTDOWN,
            Error::Cancelled => S::RDMAXFER_ERR_ABORTED,
        }
    }
}

/// A status passed in by C: `enum rdmaxfer_status` in the header, an integer here (any value).
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub struct StatusArg(pub c_int);

/// The library's version, "MAJOR.MINOR.PATCH" (static; never NULL). Compare with
/// `RDMAXFER_VERSION` to detect a header/library mismatch.
/// Returns: never fails: a static string, never NULL.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_version() -> *const c_char {
    VERSION_C.as_ptr()
}

/// A static, NUL-terminated description of `status` (never NULL; "unknown status" for a value
/// that is not an `rdmaxfer_status`, e.g. an integer cast to it).
/// Returns: never fails: a static string, never NULL.
/// Blocks: no.
// The header declares the parameter as `enum rdmaxfer_status` (cbindgen.toml renames
// `StatusArg`); it is read as a plain integer, so any value C passes is defined behaviour here.
#[no_mangle]
pub extern "C" fn rdmaxfer_strerror(status: StatusArg) -> *const c_char {
    let status = status.0;
    rdmaxfer_status::from_raw(status)
        .map_or(c"unknown status", rdmaxfer_status::text)
        .as_ptr()
}
