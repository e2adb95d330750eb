//! The C boundary: panic catching, the thread-local last error (and its export,
//! `rdmaxfer_last_error_message`) and pointer checks. Every dereference of a caller's pointer
//! happens here, except a handle's (`super::handle::arg`).

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, c_void, CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

use super::status::rdmaxfer_status;
use crate::error::Error;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    /// The OS error (errno) and work-completion status of the last failure, when it had them.
    static LAST_CAUSE: Cell<(Option<i32>, Option<u32>)> = const { Cell::new((None, None)) };
}

/// A failure on its way to C: the status and the detail for the last error message.
#[derive(Debug)]
pub(crate) struct Fail {
    /// The status returned.
    pub(crate) status: rdmaxfer_status,
    /// The detail.
    pub(crate) msg: String,
    /// The OS error (errno) behind it, if any.
    pub(crate) errno: Option<i32>,
    /// The work completion's status (`enum ibv_wc_status`) behind it, if any.
    pub(crate) wc_status: Option<u32>,
}

impl Fail {
    /// A failure with `status` and `msg`.
    pub(crate) fn new(status: rdmaxfer_status, msg: impl Into<String>) -> Fail {
        Fail {
            status,
            msg: msg.into(),
            errno: None,
            wc_status: None,
        }
    }

    /// An invalid argument.
    pub(crate) fn invalid(msg: impl Into<String>) -> Fail {
        Fail::new(rdmaxfer_status::RDMAXFER_ERR_INVALID_ARGUMENT, msg)
    }

    /// An object in the wrong state.
    pub(crate) fn state(msg: impl Into<String>) -> Fail {
        Fail::new(rdmaxfer_status::RDMAXFER_ERR_INVALID_STATE, msg)
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail {
            status: (&e).into(),
            msg: e.to_string(),
            errno: e.errno(),
            wc_status: e.wc_status(),
        }
    }
}

/// What the body of an export returns.
pub(crate) type CResult<T> = Result<T, Fail>;

/// Records `f` (of export `func`) as the calling thread's last failure.
fn set_last_fail(func: &str, f: Fail) {
    set_last_error(format!("{func}: {}", f.msg));
    LAST_CAUSE.with(|c| c.set((f.errno, f.wc_status)));
}

/// Records `msg` as the calling thread's last error (NULs become spaces), with no OS error or
/// completion status behind it.
pub(crate) fn set_last_error(msg: String) {
    LAST_CAUSE.with(|c| c.set((None, None)));
    let mut bytes = msg.into_bytes();
    bytes
        .iter_mut()
        .filter(|b| **b == 0)
        .for_each(|b| *b = b' ');
    let c = CString::new(bytes).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

/// The detail of the last failure on the calling thread: which call failed and why (never
/// NULL; "" before any failure). The text stays valid until the next failing call on this
/// thread; copy it to keep it.
/// Returns: never fails: never NULL.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_last_error_message() -> *const c_char {
    // The pointer stays valid until LAST_ERROR is replaced, which only `set_last_error` does,
    // on a failure on this thread.
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

/// The OS error number (errno, e.g. `ENOMEM` from a registration over the locked-memory
/// limit) behind the last failure on the calling thread; 0 when it had none (or before any).
/// Set with the last error message, by the same calls.
/// Returns: never fails: 0 when the last failure had no errno.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_last_os_error() -> c_int {
    LAST_CAUSE.with(|c| c.get().0.unwrap_or(0))
}

/// The work-completion status (`enum ibv_wc_status` of libibverbs, e.g. 10 for
/// `IBV_WC_REM_ACCESS_ERR`) behind the last failure on the calling thread; -1 when it had
/// none (or before any). Set with the last error message, by the same calls.
/// Returns: never fails: -1 when the last failure had no work completion.
/// Blocks: no.
#[no_mangle]
pub extern "C" fn rdmaxfer_last_wc_status() -> c_int {
    LAST_CAUSE.with(|c| {
        c.get()
            .1
            .and_then(|s| c_int::try_from(s).ok())
            .unwrap_or(-1)
    })
}

/// The calling thread's last error message, copied.
#[cfg(test)]
pub(crate) fn last_error() -> String {
    LAST_ERROR.with(|l| l.borrow().to_string_lossy().into_owned())
}

pub(crate) fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    let text = if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_string()
    };
    // A payload whose destructor panics must not unwind out of here either.
    if let Err(p) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(p);
    }
    text
}

/// Runs the body of export `func`: its failure becomes a status and the last error message, a
/// panic becomes `RDMAXFER_ERR_PANIC`. Nothing unwinds into C.
pub(crate) fn run(func: &'static str, body: impl FnOnce() -> CResult<()>) -> rdmaxfer_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => rdmaxfer_status::RDMAXFER_OK,
        Ok(Err(f)) => {
            let status = f.status;
            set_last_fail(func, f);
            status
        }
        Err(p) => {
            set_last_error(format!("{func}: panicked: {}", panic_text(p)));
            rdmaxfer_status::RDMAXFER_ERR_PANIC
        }
    }
}

/// Like [`run`] for exports that return a value instead of a status: `fallback` on failure or
/// panic (the reason goes to the last error message).
pub(crate) fn run_or<T>(func: &'static str, fallback: T, body: impl FnOnce() -> CResult<T>) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(f)) => {
            set_last_fail(func, f);
            fallback
        }
        Err(p) => {
            set_last_error(format!("{func}: panicked: {}", panic_text(p)));
            fallback
        }
    }
}

/// NULL → `RDMAXFER_ERR_NULL_ARGUMENT`, misaligned → `RDMAXFER_ERR_INVALID_ARGUMENT`.
pub(crate) fn check_ptr<T>(p: *const T, name: &str) -> CResult<()> {
    if p.is_null() {
        return Err(Fail::new(
            rdmaxfer_status::RDMAXFER_ERR_NULL_ARGUMENT,
            format!("{name} is NULL"),
        ));
    }
    if !p.is_aligned() {
        return Err(Fail::invalid(format!("{name} is misaligned ({p:p})")));
    }
    Ok(())
}

/// A checked out-parameter: written once, only when the call succeeds.
pub(crate) struct Out<T>(*mut T);

impl<T> Out<T> {
    /// Stores `v` (the previous contents are not read or dropped: they may be uninitialised).
    pub(crate) fn set(self, v: T) {
        // `write` does not drop the old contents, which the caller may not have initialised.
        // SAFETY: non-NULL and aligned (checked in `out`); the header's contract is that an
        // out-parameter points to writable memory for one value of its type (`T`).
        unsafe { self.0.write(v) }
    }
}

/// A caller-allocated struct that can grow: its first field, `struct_size` (a `size_t`), says
/// how many bytes of it the caller has.
///
/// # Safety
/// `Self` is `repr(C)` and starts with a `usize` field (the header's `size_t struct_size`).
pub(crate) unsafe trait Growable: Copy {
    /// The struct as first released: the least `struct_size` accepted.
    const V1: usize;
}

/// A checked out-parameter of a growable struct (see [`Growable`]): written once, only when
/// the call succeeds, as many bytes as the caller's `struct_size` says it has (a program built
/// against an older header gets the fields it knows); then `struct_size` = the bytes written.
pub(crate) struct SizedOut<T> {
    p: *mut T,
    n: usize,
}

impl<T: Growable> SizedOut<T> {
    /// Stores `v`.
    pub(crate) fn set(self, v: T) {
        // `p` has `n` writable bytes (its `struct_size`, checked in `sized_out`), not overlapping
        // `v` (a local); `n` ≥ V1 covers `struct_size`, the first field (`Growable`'s contract).
        // SAFETY: `n` ≤ size_of::<T>() bytes of `v` into `p` (above), then its first usize.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&v as *const T).cast::<u8>(),
                self.p.cast::<u8>(),
                self.n,
            );
            self.p.cast::<usize>().write(self.n);
        }
    }
}

/// Checks a growable out-parameter: NULL → `RDMAXFER_ERR_NULL_ARGUMENT`; a `struct_size` below
/// the first release's → `RDMAXFER_ERR_INVALID_ARGUMENT`.
pub(crate) fn sized_out<T: Growable>(p: *mut T, name: &str) -> CResult<SizedOut<T>> {
    check_ptr(p, name)?;
    // The header's contract: `p` points to this struct, whose first field (`struct_size`, a
    // size_t: `Growable`'s contract) the caller has set.
    // SAFETY: non-NULL and aligned (check_ptr); a set usize per the contract above.
    let size = unsafe { p.cast::<usize>().read() };
    if size < T::V1 {
        return Err(Fail::invalid(format!(
            "{name}->struct_size is {size}: set it to sizeof the struct (at least {})",
            T::V1
        )));
    }
    Ok(SizedOut {
        p,
        n: size.min(std::mem::size_of::<T>()),
    })
}

/// Checks an out-parameter (NULL → `RDMAXFER_ERR_NULL_ARGUMENT`).
pub(crate) fn out<T>(p: *mut T, name: &str) -> CResult<Out<T>> {
    check_ptr(p, name)?;
    Ok(Out(p))
}

/// A NUL-terminated UTF-8 string argument.
pub(crate) fn arg_str<'a>(p: *const c_char, name: &str) -> CResult<&'a str> {
    arg_cstr(p, name)?
        .to_str()
        .map_err(|_| Fail::invalid(format!("{name} is not valid UTF-8")))
}

/// Like [`arg_str`], but NULL gives `None`.
pub(crate) fn opt_str<'a>(p: *const c_char, name: &str) -> CResult<Option<&'a str>> {
    if p.is_null() {
        Ok(None)
    } else {
        arg_str(p, name).map(Some)
    }
}

fn arg_cstr<'a>(p: *const c_char, name: &str) -> CResult<&'a CStr> {
    check_ptr(p, name)?;
    // SAFETY: non-NULL (checked above); the header's contract is that a string argument is
    // NUL-terminated and readable for the whole call.
    Ok(unsafe { CStr::from_ptr(p) })
}

/// A path argument (any bytes but NUL; not necessarily UTF-8).
pub(crate) fn arg_path(p: *const c_char, name: &str) -> CResult<PathBuf> {
    let c = arg_cstr(p, name)?;
    if c.is_empty() {
        return Err(Fail::invalid(format!("{name} is empty")));
    }
    Ok(PathBuf::from(OsStr::from_bytes(c.to_bytes())))
}

fn check_len(len: usize, name: &str) -> CResult<()> {
    if len > isize::MAX as usize {
        return Err(Fail::invalid(format!("{name}: length {len} is too large")));
    }
    Ok(())
}

/// An array of `n` NUL-terminated UTF-8 strings, none empty, at most `max` of them (NULL
/// allowed when `n` is 0): NULL array or element → `RDMAXFER_ERR_NULL_ARGUMENT`; too many,
/// empty or not UTF-8 → `RDMAXFER_ERR_INVALID_ARGUMENT`.
pub(crate) fn arg_str_array<'a>(
    p: *const *const c_char,
    n: usize,
    max: usize,
    name: &str,
) -> CResult<Vec<&'a str>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if n > max {
        return Err(Fail::invalid(format!(
            "{name}: {n} entries (at most {max})"
        )));
    }
    check_ptr(p, name)?;
    let bytes = n
        .checked_mul(std::mem::size_of::<*const c_char>())
        .ok_or_else(|| Fail::invalid(format!("{name}: {n} entries is too many")))?;
    check_len(bytes, name)?;
    // The header's contract: an array argument points to `n` readable elements that nothing
    // writes during the call.
    // SAFETY: non-NULL, aligned (check_ptr), `n` pointers span ≤ isize::MAX bytes (checked).
    let ptrs = unsafe { std::slice::from_raw_parts(p, n) };
    ptrs.iter()
        .enumerate()
        .map(|(i, &s)| {
            let what = format!("{name}[{i}]");
            let s = arg_str(s, &what)?;
            if s.is_empty() {
                return Err(Fail::invalid(format!("{what} is empty")));
            }
            Ok(s)
        })
        .collect()
}

/// `len` bytes at `p` (NULL allowed when `len` is 0).
pub(crate) fn arg_bytes<'a>(p: *const c_void, len: usize, name: &str) -> CResult<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    check_ptr(p.cast::<u8>(), name)?;
    check_len(len, name)?;
    // SAFETY: non-NULL, `len` ≤ isize::MAX (checked above); the header's contract is that an
    // input data pointer points to `len` readable bytes that nothing writes during the call.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// `len` writable bytes at `p` (NULL allowed when `len` is 0).
pub(crate) fn arg_bytes_mut<'a>(p: *mut c_void, len: usize, name: &str) -> CResult<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    check_ptr(p.cast::<u8>(), name)?;
    check_len(len, name)?;
    // SAFETY: non-NULL, `len` ≤ isize::MAX (checked above); the header's contract: an output data
    // pointer points to `len` writable bytes that nothing else reads or writes during the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) })
}
