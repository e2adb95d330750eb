//! Protection domains: `ibv_alloc_pd(3)` / `ibv_dealloc_pd(3)`.

use std::ptr::NonNull;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::sys;
use crate::verbs::device::Context;

pub(crate) struct PdInner {
    pd: NonNull<sys::ibv_pd>,
    pub(crate) ctx: Context,
}

// SAFETY: the ibv_pd pointer is only passed to libibverbs calls, which may be made from any
// thread; nothing behind it is read or written from Rust.
unsafe impl Send for PdInner {}
// SAFETY: as above.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: every MrInner and QueuePair made on this PD holds a ProtectionDomain clone
        // (an Arc of this PdInner), so none is left; the pointer is freed once, here.
        let rc = unsafe { sys::ibv_dealloc_pd(self.pd.as_ptr()) };
        if rc != 0 {
            tracing::warn!(
                "ibv_dealloc_pd failed: {}",
                std::io::Error::from_raw_os_error(rc)
            );
        }
    }
}

/// A protection domain. Cheap to clone; memory regions and queue pairs keep it alive.
#[derive(Clone)]
pub struct ProtectionDomain {
    pub(crate) inner: Arc<PdInner>,
}

impl ProtectionDomain {
    /// `ibv_alloc_pd(3)`.
    pub fn new(ctx: &Context) -> Result<ProtectionDomain> {
        // SAFETY: `ctx` holds an open ibv_context (ContextInner closes it only when the last
        // clone is gone, and the PD keeps a clone).
        let pd = unsafe { sys::ibv_alloc_pd(ctx.as_ptr()) };
        let pd = NonNull::new(pd).ok_or_else(|| Error::last_os("ibv_alloc_pd"))?;
        Ok(ProtectionDomain {
            inner: Arc::new(PdInner {
                pd,
                ctx: ctx.clone(),
            }),
        })
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::ibv_pd {
        self.inner.pd.as_ptr()
    }

    /// The device context this PD belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }
}
