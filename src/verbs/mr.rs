//! Registered memory: `ibv_reg_mr(3)` / `ibv_dereg_mr(3)`.
//!
//! rdmaxfer owns every registered buffer (page-aligned, zeroed). Three handles share it out:
//! - [`LocalBuf`]: exclusive, readable and writable like a `Box<[u8]>`; never remotely accessible.
//!   Posting it moves it into the queue's in-flight table until its completion is polled.
//! - [`SharedBuf`]: a frozen, read-only `LocalBuf` that can be posted as a source many times at once.
//! - [`ExposedRegion`]: memory a peer may access with RDMA READ/WRITE. It has no `&[u8]` view: its
//!   owner copies in and out with volatile accesses, so a peer writing at any time cannot break
//!   Rust's aliasing rules.

use std::alloc::Layout;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::sys;
use crate::verbs::pd::ProtectionDomain;

const PAGE: usize = 4096;

/// The bytes allocated (and registered) for a buffer of `len` bytes: `len` (at least 1) rounded
/// up to a whole page. Fails with [`Error::TooLarge`] when the rounding overflows or the result
/// exceeds `isize::MAX` (what `Layout` accepts), so nothing is allocated for such a size.
pub(crate) fn alloc_len(len: usize) -> Result<usize> {
    len.max(1)
        .checked_next_multiple_of(PAGE)
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| Error::TooLarge {
            what: "registered buffer",
            detail: format!(
                "{len} bytes, rounded up to whole {PAGE}-byte pages, exceed isize::MAX ({})",
                isize::MAX
            ),
        })
}

/// The rights a peer gets on an [`ExposedRegion`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteAccess {
    /// Peer may RDMA READ.
    Read,
    /// Peer may RDMA WRITE.
    Write,
    /// Both.
    ReadWrite,
}

impl RemoteAccess {
    /// The `ibv_access_flags` to register with (REMOTE_WRITE needs LOCAL_WRITE).
    pub(crate) fn to_raw(self) -> u32 {
        let (r, w) = match self {
            RemoteAccess::Read => (true, false),
            RemoteAccess::Write => (false, true),
            RemoteAccess::ReadWrite => (true, true),
        };
        let mut f = sys::IBV_ACCESS_LOCAL_WRITE.0;
        if r {
            f |= sys::IBV_ACCESS_REMOTE_READ.0;
        }
        if w {
            f |= sys::IBV_ACCESS_REMOTE_WRITE.0;
        }
        f
    }

    /// True if the peer may read.
    pub fn can_read(self) -> bool {
        matches!(self, RemoteAccess::Read | RemoteAccess::ReadWrite)
    }

    /// True if the peer may write.
    pub fn can_write(self) -> bool {
        matches!(self, RemoteAccess::Write | RemoteAccess::ReadWrite)
    }
}

impl std::str::FromStr for RemoteAccess {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "r" | "read" => Ok(RemoteAccess::Read),
            "w" | "write" => Ok(RemoteAccess::Write),
            "rw" | "wr" | "read-write" => Ok(RemoteAccess::ReadWrite),
            _ => Err(Error::InvalidArgument(format!(
                "access must be r, w or rw, not {s:?}"
            ))),
        }
    }
}

/// One registration and the memory behind it.
pub(crate) struct MrInner {
    pd: ProtectionDomain,
    /// The device context of `pd`, copied here so that posting checks it with one compare.
    ctx: NonNull<sys::ibv_context>,
    mr: Option<NonNull<sys::ibv_mr>>,
    buf: NonNull<u8>,
    layout: Layout,
    len: usize,
    lkey: u32,
    rkey: u32,
}

// SAFETY: the memory is only reached through handles whose own types enforce exclusive or
// read-only access; the ibv_mr pointer is only passed to ibv_dereg_mr, which libibverbs allows
// from any thread; the context pointer is only compared, never dereferenced.
unsafe impl Send for MrInner {}
// SAFETY: as above.
unsafe impl Sync for MrInner {}

impl MrInner {
    fn register(pd: &ProtectionDomain, len: usize, access: u32) -> Result<MrInner> {
        let alloc_len = alloc_len(len)?;
        let layout = Layout::from_size_align(alloc_len, PAGE).map_err(|e| Error::TooLarge {
            what: "registered buffer",
            detail: format!("layout of {alloc_len} bytes: {e}"),
        })?;
        // SAFETY: `alloc_len` returned at least one page (len.max(1) rounded up), so the layout
        // has a non-zero size, as alloc_zeroed requires.
        let buf = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })
            .ok_or_else(|| Error::InvalidArgument(format!("cannot allocate {len} bytes")))?;
        // SAFETY: `pd` is a live PD (its Arc is held); `buf` points to `alloc_len` bytes we
        // allocated above, own, and keep until deregistration (ibv_reg_mr(3)).
        let mr = unsafe {
            sys::shim_ibv_reg_mr(pd.as_ptr(), buf.as_ptr().cast(), alloc_len, access as i32)
        };
        let Some(mr) = NonNull::new(mr) else {
            let errno = crate::error::last_errno();
            // SAFETY: ibv_reg_mr returned NULL, so no registration refers to `buf`; it was
            // allocated above with `layout` and is freed once, here.
            unsafe { std::alloc::dealloc(buf.as_ptr(), layout) };
            return Err(reg_error(errno, alloc_len));
        };
        // SAFETY: `mr` is non-NULL, returned by ibv_reg_mr just now and not yet deregistered.
        let (lkey, rkey) = unsafe { ((*mr.as_ptr()).lkey, (*mr.as_ptr()).rkey) };
        Ok(MrInner {
            pd: pd.clone(),
            ctx: pd.context().as_non_null(),
            mr: Some(mr),
            buf,
            layout,
            len,
            lkey,
            rkey,
        })
    }

    /// `ibv_dereg_mr(3)` now. On failure the memory is leaked on drop rather than freed while the
    /// device may still reach it.
    fn deregister(&mut self) -> Result<()> {
        if let Some(mr) = self.mr {
            // Local work requests hold an Arc of this MrInner (LocalBuf / SharedBuf in the
            // in-flight table), so drop never gets here while one is posted; ExposedRegion is
            // never posted locally, and for peers ibv_dereg_mr(3) only makes later accesses fail.
            // SAFETY: `self.mr` is Some only until the one successful ibv_dereg_mr, so `mr` is a
            // live registration; no posted local work request still uses it (above).
            let rc = unsafe { sys::ibv_dereg_mr(mr.as_ptr()) };
            if rc != 0 {
                return Err(Error::verb("ibv_dereg_mr", rc));
            }
            self.mr = None;
        }
        Ok(())
    }

    fn addr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }
}

impl Drop for MrInner {
    fn drop(&mut self) {
        match self.deregister() {
            // Every handle to the memory owns this MrInner (directly or by Arc).
            // SAFETY: deregistered, so the device no longer reaches the memory; this MrInner is
            // being dropped (no handle is left); `layout` is the one `buf` was allocated with.
            Ok(()) => unsafe { std::alloc::dealloc(self.buf.as_ptr(), self.layout) },
            Err(e) => {
                tracing::warn!("{e}; leaking the buffer so the device cannot write freed memory")
            }
        }
        let _ = &self.pd; // the PD outlives the registration
    }
}

/// An exclusive slice of registered memory, local access only. Dereferences to `[u8]`.
pub struct LocalBuf {
    mr: Arc<MrInner>,
    off: usize,
    len: usize,
}

impl LocalBuf {
    /// Registers a new zeroed buffer of `len` bytes with local write access.
    pub fn new(pd: &ProtectionDomain, len: usize) -> Result<LocalBuf> {
        let mr = Arc::new(MrInner::register(pd, len, sys::IBV_ACCESS_LOCAL_WRITE.0)?);
        Ok(LocalBuf { mr, off: 0, len })
    }

    /// Registers one region of `count × slot_len` bytes and splits it into `count` buffers.
    pub fn slots(pd: &ProtectionDomain, slot_len: usize, count: usize) -> Result<Vec<LocalBuf>> {
        let total = slot_len.checked_mul(count).ok_or_else(|| Error::TooLarge {
            what: "buffer slots",
            detail: format!("{count} slots × {slot_len} bytes overflow usize"),
        })?;
        let mr = Arc::new(MrInner::register(pd, total, sys::IBV_ACCESS_LOCAL_WRITE.0)?);
        Ok((0..count)
            .map(|i| LocalBuf {
                mr: mr.clone(),
                off: i * slot_len,
                len: slot_len,
            })
            .collect())
    }

    /// Splits off `[at, len)` into a new buffer, keeping `[0, at)`.
    pub fn split_off(&mut self, at: usize) -> Result<LocalBuf> {
        if at > self.len {
            return Err(Error::InvalidArgument(format!(
                "split at {at} past the end ({})",
                self.len
            )));
        }
        let tail = LocalBuf {
            mr: self.mr.clone(),
            off: self.off + at,
            len: self.len - at,
        };
        self.len = at;
        Ok(tail)
    }

    /// Freezes the buffer read-only so it can be posted as a source many times at once.
    pub fn freeze(self) -> SharedBuf {
        SharedBuf(Arc::new(self))
    }

    /// Local key of the registration.
    pub fn lkey(&self) -> u32 {
        self.mr.lkey
    }

    pub(crate) fn addr(&self) -> u64 {
        self.mr.addr() + self.off as u64
    }

    /// The device context the buffer is registered in (compared when posting).
    #[inline(always)]
    pub(crate) fn ctx(&self) -> *mut sys::ibv_context {
        self.mr.ctx.as_ptr()
    }
}

impl Deref for LocalBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // Disjoint ranges, not Clone: this is the only handle; posted ones sit in an in-flight table.
        // SAFETY: [off, off+len) lies in the allocation (`slots` checked count × slot_len against
        // it, `split_off` checks `at <= len`), and the LocalBufs of one MrInner have disjoint ranges.
        unsafe { std::slice::from_raw_parts(self.mr.buf.as_ptr().add(self.off), self.len) }
    }
}

impl DerefMut for LocalBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.mr.buf.as_ptr().add(self.off), self.len) }
    }
}

impl std::fmt::Debug for LocalBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LocalBuf({} bytes, lkey {:#x})", self.len, self.mr.lkey)
    }
}

/// A read-only registered buffer that may be posted as a source by many work requests at once.
#[derive(Clone, Debug)]
pub struct SharedBuf(Arc<LocalBuf>);

impl SharedBuf {
    /// Back to an exclusive buffer, if no other clone (and no work request) holds it.
    pub fn try_unfreeze(self) -> std::result::Result<LocalBuf, SharedBuf> {
        Arc::try_unwrap(self.0).map_err(SharedBuf)
    }

    /// Local key of the registration.
    pub fn lkey(&self) -> u32 {
        self.0.lkey()
    }

    pub(crate) fn addr(&self) -> u64 {
        self.0.addr()
    }

    #[inline(always)]
    pub(crate) fn ctx(&self) -> *mut sys::ibv_context {
        self.0.ctx()
    }
}

impl Deref for SharedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// Where a peer's exposed memory is: what travels over the wire to allow RDMA READ/WRITE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RemoteRegion {
    /// Virtual address on the peer.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length in bytes.
    pub len: u64,
}

impl RemoteRegion {
    /// Encoded size on the wire.
    pub const WIRE_LEN: usize = 20;

    /// A bounds-checked part of the region. Refuses anything outside `[0, len)`, including
    /// offsets that would wrap around `u64`, and lengths over `u32::MAX` (one work request).
    pub fn slice(&self, offset: u64, len: u64) -> Result<RemoteSlice> {
        let oob = || Error::OutOfBounds {
            offset,
            len,
            region_len: self.len,
        };
        let end = offset.checked_add(len).ok_or_else(oob)?;
        if end > self.len {
            return Err(oob());
        }
        let addr = self.addr.checked_add(offset).ok_or_else(oob)?;
        let len = u32::try_from(len).map_err(|_| {
            Error::InvalidArgument(format!("{len} bytes is too large for one work request"))
        })?;
        Ok(RemoteSlice {
            addr,
            rkey: self.rkey,
            len,
        })
    }

    /// Big-endian wire form: addr u64, rkey u32, len u64.
    pub fn encode(&self) -> [u8; Self::WIRE_LEN] {
        let mut b = [0u8; Self::WIRE_LEN];
        b[..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..].copy_from_slice(&self.len.to_be_bytes());
        b
    }

    /// Decodes [`encode`](Self::encode)'s form; the slice must be exactly `WIRE_LEN` bytes.
    pub fn decode(b: &[u8]) -> Result<RemoteRegion> {
        if b.len() != Self::WIRE_LEN {
            return Err(Error::Protocol(format!(
                "remote region descriptor is {} bytes, expected {}",
                b.len(),
                Self::WIRE_LEN
            )));
        }
        Ok(RemoteRegion {
            addr: u64::from_be_bytes(b[..8].try_into().expect("8")),
            rkey: u32::from_be_bytes(b[8..12].try_into().expect("4")),
            len: u64::from_be_bytes(b[12..].try_into().expect("8")),
        })
    }
}

/// A bounds-checked target inside a [`RemoteRegion`], made by [`RemoteRegion::slice`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteSlice {
    pub(crate) addr: u64,
    pub(crate) rkey: u32,
    pub(crate) len: u32,
}

impl RemoteSlice {
    /// Length in bytes.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// True when zero-length.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Memory a peer may read and/or write with RDMA. The owner never gets a `&[u8]` to it: reads and
/// writes are copies with volatile accesses, which stay sound while the NIC writes concurrently.
pub struct ExposedRegion {
    inner: MrInner,
    access: RemoteAccess,
}

impl ExposedRegion {
    /// Registers `len` zeroed bytes that peers may access with `access` rights.
    pub fn new(pd: &ProtectionDomain, len: usize, access: RemoteAccess) -> Result<ExposedRegion> {
        if len == 0 {
            return Err(Error::InvalidArgument(
                "cannot expose an empty region".into(),
            ));
        }
        Ok(ExposedRegion {
            inner: MrInner::register(pd, len, access.to_raw())?,
            access,
        })
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Never true (empty regions are refused).
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// The rights peers have.
    pub fn access(&self) -> RemoteAccess {
        self.access
    }

    /// What a peer needs to reach this region.
    pub fn descriptor(&self) -> RemoteRegion {
        RemoteRegion {
            addr: self.inner.addr(),
            rkey: self.inner.rkey,
            len: self.inner.len as u64,
        }
    }

    fn check(&self, off: usize, len: usize) -> Result<()> {
        match off.checked_add(len) {
            Some(end) if end <= self.inner.len => Ok(()),
            _ => Err(Error::OutOfBounds {
                offset: off as u64,
                len: len as u64,
                region_len: self.inner.len as u64,
            }),
        }
    }

    /// Copies `dst.len()` bytes at `off` out of the region.
    pub fn read_at(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        self.check(off, dst.len())?;
        // SAFETY: bounds checked; the source is only read with volatile loads.
        unsafe { volatile_copy_out(self.inner.buf.as_ptr().add(off), dst) };
        Ok(())
    }

    /// Copies `src` into the region at `off`.
    pub fn write_at(&mut self, off: usize, src: &[u8]) -> Result<()> {
        self.check(off, src.len())?;
        // SAFETY: bounds checked; `&mut self` excludes other local accesses; volatile stores.
        unsafe { volatile_copy_in(self.inner.buf.as_ptr().add(off), src) };
        Ok(())
    }

    /// A copy of the whole region.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len()];
        self.read_at(0, &mut v).expect("whole region is in bounds");
        v
    }

    /// Ends the exposure (`ibv_dereg_mr(3)`): later peer accesses fail with a remote access error.
    /// Returns the final contents.
    pub fn revoke(mut self) -> Result<Vec<u8>> {
        self.inner.deregister()?;
        Ok(self.to_vec())
    }
}

impl std::fmt::Debug for ExposedRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ExposedRegion({} bytes, {:?}, {:?})",
            self.len(),
            self.access,
            self.descriptor()
        )
    }
}

/// Copies from memory the device may be writing, with volatile loads (word-sized in the middle).
///
/// # Safety
/// `src..src+dst.len()` must be valid for reads.
unsafe fn volatile_copy_out(src: *const u8, dst: &mut [u8]) {
    let n = dst.len();
    let mut i = 0;
    while i < n && (src as usize + i) % 8 != 0 {
        // SAFETY: in bounds per the contract.
        dst[i] = unsafe { src.add(i).read_volatile() };
        i += 1;
    }
    while i + 8 <= n {
        // SAFETY: in bounds and 8-aligned.
        let w = unsafe { src.add(i).cast::<u64>().read_volatile() };
        dst[i..i + 8].copy_from_slice(&w.to_ne_bytes());
        i += 8;
    }
    while i < n {
        // SAFETY: in bounds per the contract.
        dst[i] = unsafe { src.add(i).read_volatile() };
        i += 1;
    }
}

/// Copies into memory the device may be reading or writing, with volatile stores.
///
/// # Safety
/// `dst..dst+src.len()` must be valid for writes and not referenced by any Rust reference.
unsafe fn volatile_copy_in(dst: *mut u8, src: &[u8]) {
    let n = src.len();
    let mut i = 0;
    while i < n && (dst as usize + i) % 8 != 0 {
        // SAFETY: in bounds per the contract.
        unsafe { dst.add(i).write_volatile(src[i]) };
        i += 1;
    }
    while i + 8 <= n {
        let w = u64::from_ne_bytes(src[i..i + 8].try_into().expect("8 bytes"));
        // SAFETY: in bounds and 8-aligned.
        unsafe { dst.add(i).cast::<u64>().write_volatile(w) };
        i += 8;
    }
    while i < n {
        // SAFETY: in bounds per the contract.
        unsafe { dst.add(i).write_volatile(src[i]) };
        i += 1;
    }
}

/// The error of a failed `ibv_reg_mr(3)` of `bytes`: [`Error::MemlockLimit`] when it failed as
/// pinning fails (ENOMEM, EPERM, EAGAIN) under a finite `RLIMIT_MEMLOCK` (getrlimit(2)).
fn reg_error(errno: i32, bytes: usize) -> Error {
    let pinning = matches!(errno, libc::ENOMEM | libc::EPERM | libc::EAGAIN);
    let limit = rustix::process::getrlimit(rustix::process::Resource::Memlock).current;
    match limit {
        Some(limit) if pinning => Error::MemlockLimit {
            verb: "ibv_reg_mr",
            bytes,
            limit: Some(limit),
            errno,
        },
        _ => Error::verb("ibv_reg_mr", errno),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What `alloc_len` must give, computed without overflow in u128.
    fn expected_alloc_len(len: usize) -> Option<usize> {
        let pages = (len.max(1) as u128).div_ceil(PAGE as u128);
        let n = pages * PAGE as u128;
        (n <= isize::MAX as u128).then_some(n as usize)
    }

    fn check_alloc_len(len: usize) {
        match (alloc_len(len), expected_alloc_len(len)) {
            (Ok(n), Some(want)) => {
                assert_eq!(n, want, "len {len}");
                assert_eq!(n % PAGE, 0, "len {len}");
                assert!(n >= len && n >= 1, "len {len} -> {n}");
                assert!(n <= isize::MAX as usize, "len {len} -> {n}");
                assert!(
                    n - len.max(1) < PAGE,
                    "len {len} -> {n}: more than a page of padding"
                );
                assert!(Layout::from_size_align(n, PAGE).is_ok(), "len {len}");
            }
            (Err(Error::TooLarge { what, detail }), None) => {
                assert_eq!(what, "registered buffer");
                assert!(detail.contains(&len.to_string()), "{detail}");
            }
            (got, want) => panic!("len {len}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn alloc_len_boundaries() {
        let max = isize::MAX as usize;
        let last_ok = max - (PAGE - 1); // 2^63 - 4096: the largest page multiple <= isize::MAX
        for len in [
            0,
            1,
            PAGE - 1,
            PAGE,
            PAGE + 1,
            last_ok - 1,
            last_ok,
            last_ok + 1,
            max,
            max + 1,
            usize::MAX - PAGE,
            usize::MAX,
        ] {
            check_alloc_len(len);
        }
        assert_eq!(alloc_len(0).unwrap(), PAGE);
        assert_eq!(alloc_len(PAGE + 1).unwrap(), 2 * PAGE);
        assert_eq!(alloc_len(last_ok).unwrap(), last_ok);
        for len in [last_ok + 1, max, max + 1, usize::MAX] {
            assert!(
                matches!(alloc_len(len), Err(Error::TooLarge { .. })),
                "{len}"
            );
        }
    }

    proptest! {
        #[test]
        fn alloc_len_is_a_page_multiple_or_too_large(len in any::<usize>()) {
            check_alloc_len(len);
        }

        #[test]
        fn alloc_len_near_the_isize_limit(back in 0usize..3 * PAGE, up in 0usize..3 * PAGE) {
            check_alloc_len((isize::MAX as usize) - back);
            check_alloc_len((isize::MAX as usize).wrapping_add(up));
            check_alloc_len(usize::MAX - back);
        }

        #[test]
        fn alloc_len_small(len in 0usize..(1 << 24)) {
            check_alloc_len(len);
        }
    }

    #[test]
    fn access_flags() {
        let lw = sys::IBV_ACCESS_LOCAL_WRITE.0;
        let rr = sys::IBV_ACCESS_REMOTE_READ.0;
        let rw = sys::IBV_ACCESS_REMOTE_WRITE.0;
        assert_eq!(RemoteAccess::Read.to_raw(), lw | rr);
        assert_eq!(RemoteAccess::Write.to_raw(), lw | rw);
        assert_eq!(RemoteAccess::ReadWrite.to_raw(), lw | rr | rw);
        assert!(RemoteAccess::Read.can_read() && !RemoteAccess::Read.can_write());
        assert_eq!(
            "rw".parse::<RemoteAccess>().unwrap(),
            RemoteAccess::ReadWrite
        );
        assert!("x".parse::<RemoteAccess>().is_err());
    }

    #[test]
    fn remote_slice_bounds() {
        let r = RemoteRegion {
            addr: 0x1000,
            rkey: 7,
            len: 100,
        };
        let s = r.slice(10, 90).unwrap();
        assert_eq!((s.addr, s.rkey, s.len), (0x1000 + 10, 7, 90));
        assert!(r.slice(0, 100).is_ok());
        assert!(r.slice(100, 0).is_ok());
        assert!(matches!(r.slice(101, 0), Err(Error::OutOfBounds { .. })));
        assert!(matches!(r.slice(1, 100), Err(Error::OutOfBounds { .. })));
        assert!(matches!(
            r.slice(u64::MAX, 2),
            Err(Error::OutOfBounds { .. })
        ));
        let huge = RemoteRegion {
            addr: u64::MAX - 5,
            rkey: 1,
            len: u64::MAX,
        };
        assert!(matches!(huge.slice(10, 1), Err(Error::OutOfBounds { .. })));
        let big = RemoteRegion {
            addr: 0,
            rkey: 1,
            len: 1 << 40,
        };
        assert!(matches!(
            big.slice(0, 1 << 33),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn remote_region_wire() {
        let r = RemoteRegion {
            addr: 0x0102030405060708,
            rkey: 0xa0b0c0d0,
            len: 42,
        };
        let b = r.encode();
        assert_eq!(&b[..4], &[1, 2, 3, 4]);
        assert_eq!(RemoteRegion::decode(&b).unwrap(), r);
        assert!(RemoteRegion::decode(&b[..19]).is_err());
    }

    #[test]
    fn volatile_copies_handle_unaligned_edges() {
        let src: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        for start in 0..9 {
            for len in [0, 1, 7, 8, 9, 63, 500] {
                let mut out = vec![0u8; len];
                // SAFETY: start+len <= 1000.
                unsafe { volatile_copy_out(src.as_ptr().add(start), &mut out) };
                assert_eq!(out, &src[start..start + len]);
                let mut dst = vec![0u8; 1000];
                // SAFETY: start+len <= 1000, `dst` is not borrowed elsewhere.
                unsafe { volatile_copy_in(dst.as_mut_ptr().add(start), &src[..len]) };
                assert_eq!(&dst[start..start + len], &src[..len]);
            }
        }
    }
}
