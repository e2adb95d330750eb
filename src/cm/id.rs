//! CM ids and their event channels: `rdma_create_event_channel(3)`, `rdma_create_id(3)`,
//! `rdma_bind_addr(3)`, `rdma_listen(3)`, `rdma_resolve_addr(3)`, `rdma_resolve_route(3)`,
//! `rdma_create_qp(3)`, `rdma_connect(3)`, `rdma_accept(3)`, `rdma_reject(3)`,
//! `rdma_disconnect(3)`, `rdma_get_cm_event(3)`, `rdma_migrate_id(3)`, `rdma_destroy_id(3)`.

use std::mem::ManuallyDrop;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{last_errno, Error, Result};
use crate::os;
use crate::sys;
use crate::verbs::device::ContextOwner;
use crate::verbs::qp::{check_contexts, qp_init_attr, Destroy};
use crate::verbs::{CompletionQueue, Context, Gid, ProtectionDomain, QpCaps, QpState, QueuePair};

use super::event::{Event, EventKind};

/// For [`ConnParam`] depths in `rdma_accept(3)`: as many as the peer offered and the device
/// allows (`RDMA_MAX_RESP_RES`, `RDMA_MAX_INIT_DEPTH`).
pub const DEPTH_AUTO: u8 = sys::RDMA_MAX_RESP_RES as u8;
const _: () =
    assert!(sys::RDMA_MAX_RESP_RES == sys::RDMA_MAX_INIT_DEPTH && sys::RDMA_MAX_RESP_RES == 255);

/// Largest private data `rdma_connect(3)` carries on IB/RoCE (RDMA_PS_TCP).
pub const MAX_CONNECT_PRIVATE_DATA: usize = 56;
/// Largest private data `rdma_accept(3)` carries on IB/RoCE.
pub const MAX_ACCEPT_PRIVATE_DATA: usize = 196;
/// Largest private data `rdma_reject(3)` carries on IB/RoCE.
pub const MAX_REJECT_PRIVATE_DATA: usize = 148;

/// An event channel (`rdma_create_event_channel(3)`) with a non-blocking fd.
struct Channel(NonNull<sys::rdma_event_channel>);

impl Channel {
    fn new() -> Result<Channel> {
        // SAFETY: no arguments; returns NULL or an owned channel.
        let ch = unsafe { sys::rdma_create_event_channel() };
        let ch = Channel(NonNull::new(ch).ok_or_else(|| Error::Verb {
            verb: "rdma_create_event_channel",
            errno: last_errno(),
            hint: " (is the rdma_ucm kernel module loaded? /dev/infiniband/rdma_cm must exist)",
        })?);
        os::set_nonblocking_raw(ch.fd())
            .map_err(|e| Error::io("fcntl(rdma_cm channel, O_NONBLOCK)", e))?;
        Ok(ch)
    }

    fn fd(&self) -> i32 {
        // SAFETY: the channel is valid while `self` lives.
        unsafe { self.0.as_ref() }.fd
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: only dropped by IdInner::drop after the id using it was destroyed, or unused.
        unsafe { sys::rdma_destroy_event_channel(self.0.as_ptr()) };
    }
}

/// One `rdma_cm_id` and the channel its events arrive on. Destroyed when the last [`CmId`],
/// [`Event`], QP or borrowed device context that refers to it is gone.
pub(crate) struct IdInner {
    id: NonNull<sys::rdma_cm_id>,
    /// Serialises every librdmacm call on this id and every read of its fields.
    lock: Mutex<()>,
    /// Destroyed in `drop` only if the id was.
    channel: ManuallyDrop<Channel>,
    /// The readiness-only descriptor handed out for the channel ([`CmId::fd`]).
    ready: os::ReadyFd,
}

// SAFETY: librdmacm calls may be made from any thread; all of ours on this id (and all reads of
// the id's fields, which those calls update) are serialised by `lock`.
unsafe impl Send for IdInner {}
// SAFETY: as above: shared access only goes through `with`, which takes the lock.
unsafe impl Sync for IdInner {}

// SAFETY: `verbs` is the id's `verbs` field, read under the lock. librdmacm sets it when it
// binds the id to a device, taking a reference on that device's open context for the id
// (cma.c: ucma_get_device), and drops the reference only in rdma_destroy_id (ucma_free_id),
// which only `IdInner`'s drop calls: the context stays open as long as `self`.
unsafe impl ContextOwner for IdInner {
    fn verbs(&self) -> Option<NonNull<sys::ibv_context>> {
        // SAFETY: the id is valid while `self` lives; its field is read under the lock.
        NonNull::new(self.with(|id| unsafe { (*id).verbs }))
    }
}

impl IdInner {
    /// Runs `f` on the raw id with the lock held.
    fn with<R>(&self, f: impl FnOnce(*mut sys::rdma_cm_id) -> R) -> R {
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        f(self.id.as_ptr())
    }

    /// Runs `f` on the id's event channel (open as long as `self`) with the lock held.
    pub(super) fn with_channel<R>(
        &self,
        f: impl FnOnce(NonNull<sys::rdma_event_channel>) -> R,
    ) -> R {
        self.with(|_| f(self.channel.0))
    }
}

impl Drop for IdInner {
    fn drop(&mut self) {
        // Every retrieved event holds an Arc to us and acks on drop, so none is unacked here and
        // rdma_destroy_id cannot block on one. The QP (if any) holds an Arc too: it is gone, and
        // its destroy closure either destroyed it (and cleared id->qp) or leaked this Arc.
        // SAFETY: the id is ours (from rdma_create_id or a connect request) and destroyed once,
        // here, when the last Arc goes.
        let rc = unsafe { sys::rdma_destroy_id(self.id.as_ptr()) };
        if rc != 0 {
            // The id may still be attached to the channel: leak the channel rather than destroy it.
            tracing::warn!(
                "rdma_destroy_id failed: {}; leaking its event channel",
                std::io::Error::last_os_error()
            );
            return;
        }
        // SAFETY: dropped once, here, after the id that used it is gone; never used again.
        unsafe { ManuallyDrop::drop(&mut self.channel) };
    }
}

/// Connection parameters for [`CmId::connect`] / [`CmId::accept`] (`struct rdma_conn_param`).
#[derive(Clone, Debug, Default)]
pub struct ConnParam {
    /// Private data for the peer (length limits: [`MAX_CONNECT_PRIVATE_DATA`],
    /// [`MAX_ACCEPT_PRIVATE_DATA`]).
    pub private_data: Vec<u8>,
    /// RDMA READs the peer may have outstanding against us (255: as many as both allow).
    pub responder_resources: u8,
    /// RDMA READs we may have outstanding against the peer (255: as many as both allow).
    pub initiator_depth: u8,
    /// Transport retries (0..=7).
    pub retry_count: u8,
    /// RNR retries (0..=7; 7 means forever, avoid it).
    pub rnr_retry_count: u8,
}

impl ConnParam {
    fn check(&self, max: usize, call: &str) -> Result<()> {
        if self.private_data.len() > max {
            return Err(Error::InvalidArgument(format!(
                "{call}: {} bytes of private data, at most {max} fit",
                self.private_data.len()
            )));
        }
        if self.retry_count > 7 || self.rnr_retry_count > 7 {
            return Err(Error::InvalidArgument(format!(
                "{call}: retry counts are 0..=7"
            )));
        }
        Ok(())
    }

    /// The C struct; it points into `self.private_data`, so it must not outlive `self`.
    fn to_raw(&self) -> sys::rdma_conn_param {
        sys::rdma_conn_param {
            private_data: if self.private_data.is_empty() {
                std::ptr::null()
            } else {
                self.private_data.as_ptr().cast()
            },
            private_data_len: self.private_data.len() as u8,
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            flow_control: 1,
            retry_count: self.retry_count,
            rnr_retry_count: self.rnr_retry_count,
            srq: 0,
            qp_num: 0,
        }
    }
}

/// A connection request taken from a listener by [`CmId::get_request`]: the new connection's id
/// (already on its own event channel) and what the peer sent.
#[derive(Debug)]
pub struct ConnectRequest {
    /// The new connection's id: accept or reject it.
    pub id: CmId,
    /// The peer's private data (zero-padded by the CM on IB/RoCE).
    pub private_data: Vec<u8>,
    /// RDMA READs the peer accepts from us.
    pub responder_resources: u8,
    /// RDMA READs the peer wants to issue.
    pub initiator_depth: u8,
}

/// An RDMA CM identifier (`struct rdma_cm_id`, port space `RDMA_PS_TCP`) with its own event
/// channel. Cheap to clone.
#[derive(Clone)]
pub struct CmId {
    inner: Arc<IdInner>,
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CmId(local {:?}, peer {:?})",
            self.local_addr(),
            self.peer_addr()
        )
    }
}

/// A C socket address built from a [`SocketAddr`].
enum RawAddr {
    V4(sys::sockaddr_in),
    V6(sys::sockaddr_in6),
}

impl RawAddr {
    fn new(a: &SocketAddr) -> RawAddr {
        match a {
            SocketAddr::V4(a) => RawAddr::V4(sys::sockaddr_in {
                sin_family: libc::AF_INET as sys::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: sys::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            }),
            SocketAddr::V6(a) => RawAddr::V6(sys::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as sys::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo().to_be(),
                sin6_addr: sys::in6_addr {
                    __in6_u: sys::in6_addr__bindgen_ty_1 {
                        __u6_addr8: a.ip().octets(),
                    },
                },
                sin6_scope_id: a.scope_id(),
            }),
        }
    }

    fn as_mut_ptr(&mut self) -> *mut sys::sockaddr {
        match self {
            RawAddr::V4(s) => (s as *mut sys::sockaddr_in).cast(),
            RawAddr::V6(s) => (s as *mut sys::sockaddr_in6).cast(),
        }
    }
}

/// Reads a socket address out of one of `struct rdma_addr`'s unions.
///
/// # Safety
/// `p` must point to at least a `sockaddr_storage`'s worth of readable, initialised bytes.
unsafe fn read_sockaddr(p: *const sys::sockaddr_storage) -> Option<SocketAddr> {
    // SAFETY: the caller guarantees a full sockaddr_storage; every prefix is a valid sockaddr.
    let family = unsafe { (*p.cast::<sys::sockaddr>()).sa_family } as i32;
    match family {
        libc::AF_INET => {
            // SAFETY: family says it is a sockaddr_in, which fits in the storage.
            let s = unsafe { &*p.cast::<sys::sockaddr_in>() };
            let ip = Ipv4Addr::from(s.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(s.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: family says it is a sockaddr_in6, which fits in the storage.
            let s = unsafe { &*p.cast::<sys::sockaddr_in6>() };
            // SAFETY: every bit pattern of the 16-byte union is a valid [u8; 16].
            let ip = Ipv6Addr::from(unsafe { s.sin6_addr.__in6_u.__u6_addr8 });
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(s.sin6_port),
                u32::from_be(s.sin6_flowinfo),
                s.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn check(rc: i32, verb: &'static str) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::last_os(verb))
    }
}

fn ms(t: Duration) -> i32 {
    t.as_millis().clamp(1, i32::MAX as u128) as i32
}

impl CmId {
    /// A descriptor that is readable while an event is queued on the id's own event channel,
    /// for [`CmId::try_next_event`] in an event loop (`poll(2)`, epoll, a reactor's
    /// registration). It is an epoll instance watching the channel (made on the first call,
    /// open as long as the id), never the channel's own descriptor: that one is
    /// `/dev/infiniband/rdma_cm`, whose `write(2)` takes commands with raw pointers.
    pub fn fd(&self) -> Result<std::os::fd::BorrowedFd<'_>> {
        self.inner
            .ready
            .get(self.channel_fd())
            .map_err(|e| Error::io("epoll_create1 (a CM id's readiness descriptor)", e))
    }

    /// The event channel's own descriptor (non-blocking), for the crate's own waits only.
    pub(crate) fn channel_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        // SAFETY: the channel (and so its fd) is destroyed only when the id's last reference
        // goes (`IdInner::drop`), and `self` holds one for the returned lifetime.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(self.inner.channel.fd()) }
    }

    /// Registers the id's event channel with the current tokio runtime's reactor, for
    /// readability. The returned `AsyncFd` holds this handle of the id.
    #[cfg(feature = "tokio")]
    pub(crate) fn register(self) -> std::io::Result<tokio::io::unix::AsyncFd<CmChannel>> {
        // SAFETY: register_with_interest's contract (fd open and the same while registered):
        // the AsyncFd owns the handle, which keeps the id's one channel (never replaced) open.
        unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(
                CmChannel(self),
                tokio::io::Interest::READABLE,
            )
        }
        .map_err(std::io::Error::from)
    }

    /// A new id on a new event channel: `rdma_create_event_channel(3)` + `rdma_create_id(3)`
    /// (`RDMA_PS_TCP`, reliable connected).
    pub fn new() -> Result<CmId> {
        let channel = Channel::new()?;
        let mut id: *mut sys::rdma_cm_id = std::ptr::null_mut();
        // SAFETY: valid channel and out-pointer; no user context.
        let rc = unsafe {
            sys::rdma_create_id(
                channel.0.as_ptr(),
                &mut id,
                std::ptr::null_mut(),
                sys::RDMA_PS_TCP,
            )
        };
        check(rc, "rdma_create_id")?;
        let id = NonNull::new(id).ok_or_else(|| Error::verb("rdma_create_id", libc::EIO))?;
        Ok(CmId {
            inner: Arc::new(IdInner {
                id,
                lock: Mutex::new(()),
                channel: ManuallyDrop::new(channel),
                ready: os::ReadyFd::default(),
            }),
        })
    }

    /// Binds to a local address and port (`rdma_bind_addr(3)`); port 0 picks a free one.
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<()> {
        let mut a = RawAddr::new(&addr);
        self.inner.with(|id| {
            // SAFETY: valid id and socket address that outlives the call.
            let rc = unsafe { sys::rdma_bind_addr(id, a.as_mut_ptr()) };
            check(rc, "rdma_bind_addr")
        })
    }

    /// Starts listening for connection requests (`rdma_listen(3)`).
    pub fn listen(&self, backlog: i32) -> Result<()> {
        self.inner.with(|id| {
            // SAFETY: valid, bound id.
            let rc = unsafe { sys::rdma_listen(id, backlog) };
            check(rc, "rdma_listen")
        })
    }

    /// Starts resolving `dst` to a device and GID (`rdma_resolve_addr(3)`), from `src` if given;
    /// completes with an ADDR_RESOLVED or ADDR_ERROR event.
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        let mut s = src.as_ref().map(RawAddr::new);
        let mut d = RawAddr::new(&dst);
        let sp = s.as_mut().map_or(std::ptr::null_mut(), RawAddr::as_mut_ptr);
        self.inner.with(|id| {
            // SAFETY: valid id; both addresses (or NULL) outlive the call.
            let rc = unsafe { sys::rdma_resolve_addr(id, sp, d.as_mut_ptr(), ms(timeout)) };
            check(rc, "rdma_resolve_addr")
        })
    }

    /// Starts resolving the route (`rdma_resolve_route(3)`); completes with ROUTE_RESOLVED or
    /// ROUTE_ERROR.
    pub fn resolve_route(&self, timeout: Duration) -> Result<()> {
        self.inner.with(|id| {
            // SAFETY: valid id with a resolved address.
            let rc = unsafe { sys::rdma_resolve_route(id, ms(timeout)) };
            check(rc, "rdma_resolve_route")
        })
    }

    /// The device context rdma_cm bound this id to (after address resolution, or for an id from
    /// a connection request). It keeps the id alive.
    pub fn context(&self) -> Result<Context> {
        Context::from_owner(self.inner.clone()).ok_or_else(|| {
            Error::InvalidArgument(
                "the CM id is not bound to a device yet (resolve an address first)".into(),
            )
        })
    }

    /// The device port the id is bound to (1-based; 0 before resolution).
    pub fn port_num(&self) -> u8 {
        // SAFETY: reading the id's field under the lock.
        self.inner.with(|id| unsafe { (*id).port_num })
    }

    /// The local address (`rdma_get_local_addr(3)`).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.inner.with(|id| {
            // SAFETY: the union is a full sockaddr_storage inside the live id; read under the lock.
            unsafe {
                read_sockaddr(std::ptr::addr_of!(
                    (*id).route.addr.__bindgen_anon_1.src_storage
                ))
            }
        })
    }

    /// The peer's address (`rdma_get_peer_addr(3)`).
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.inner.with(|id| {
            // SAFETY: as in `local_addr`.
            unsafe {
                read_sockaddr(std::ptr::addr_of!(
                    (*id).route.addr.__bindgen_anon_2.dst_storage
                ))
            }
        })
    }

    /// The source and destination GIDs rdma_cm resolved (zero before resolution).
    pub fn gids(&self) -> (Gid, Gid) {
        self.inner.with(|id| {
            // SAFETY: reading the id's fields under the lock; `raw` covers the whole GID union.
            let ib = unsafe { &(*id).route.addr.addr.ibaddr };
            // SAFETY: as above.
            unsafe { (Gid(ib.sgid.raw), Gid(ib.dgid.raw)) }
        })
    }

    /// Creates the id's RC QP on `pd`'s device with our CQs (`rdma_create_qp(3)`); rdma_cm
    /// moves it to INIT now and to RTR/RTS while connecting. The CQs must be of the PD's device
    /// context ([`Error::ContextMismatch`] otherwise). Dropping the QP destroys it with a
    /// checked `ibv_destroy_qp(3)`.
    pub fn create_qp(
        &self,
        pd: &ProtectionDomain,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        caps: QpCaps,
    ) -> Result<QueuePair> {
        check_contexts("rdma_create_qp", pd, send_cq, recv_cq)?;
        let mut attr = qp_init_attr(send_cq, recv_cq, &caps);
        let qp = self.inner.with(|id| {
            // librdmacm refuses a PD of another context than the id's (rdma-core 44
            // librdmacm/cma.c rdma_create_qp_ex: `id->verbs != attr->pd->context` → EINVAL).
            // SAFETY: the id is live (Arc held, `with` holds its lock); the PD and both CQs are
            // live (Arcs held) and of one context (checked above); `attr` outlives the call.
            let rc = unsafe { sys::rdma_create_qp(id, pd.as_ptr(), &mut attr) };
            if rc != 0 {
                return Err(Error::Verb {
                    verb: "rdma_create_qp",
                    errno: last_errno(),
                    hint: " (queue depth or SGE count above the device limits, or PD of another device?)",
                });
            }
            // SAFETY: rdma_create_qp succeeded, so `id->qp` is the new QP (cma.c sets it last).
            NonNull::new(unsafe { (*id).qp }).ok_or_else(|| Error::verb("rdma_create_qp", libc::EIO))
        })?;
        let owner = self.inner.clone();
        let destroy: Destroy = Box::new(move |qp| {
            let rc = owner.with(|id| {
                // rdma-core 44's rdma_destroy_qp (librdmacm/cma.c) is `ibv_destroy_qp(id->qp);
                // id->qp = NULL; ucma_destroy_cqs(id);`, and ucma_destroy_cqs only destroys CQs
                // librdmacm created itself (ucma_create_cqs makes one only for a NULL
                // attr->send_cq / recv_cq; qp_init_attr always sets both). So the same steps,
                // with the result checked, are: ibv_destroy_qp, then id->qp = NULL on success.
                // SAFETY: `qp` is id->qp, created above, and this closure runs once (from
                // QueuePair::drop); the captured Arc keeps the id alive and `with` holds its lock.
                let rc = unsafe { sys::ibv_destroy_qp(qp.as_ptr()) };
                if rc == 0 {
                    // Cleared as rdma_destroy_qp does, so later librdmacm calls on this id (e.g.
                    // rdma_disconnect, which moves id->qp to ERR) do not reach the destroyed QP.
                    // SAFETY: `id` is live and locked (above).
                    unsafe { (*id).qp = std::ptr::null_mut() };
                }
                rc
            });
            if rc != 0 {
                // The QP may still be live and id->qp still names it: keep the id (and with it
                // its channel) rather than let rdma_destroy_id run with it attached.
                std::mem::forget(owner);
            }
            rc
        });
        QueuePair::wrap(qp, pd, send_cq, recv_cq, attr.cap, QpState::Init, destroy)
    }

    /// Sets the local ACK timeout of the id's QP, code `t`: 4.096 µs × 2^`t`
    /// (`rdma_set_option(3)`, `RDMA_OPTION_ID_ACK_TIMEOUT`). Without it rdma_cm derives the
    /// timeout from the route's packet lifetime (code 19, 2.1 s, on Soft-RoCE). Call before
    /// [`connect`](Self::connect) (active side) or [`accept`](Self::accept) (passive side).
    pub fn set_ack_timeout(&self, t: u8) -> Result<()> {
        let mut v = t;
        self.inner.with(|id| {
            // SAFETY: valid id; `v` is the option's u8 value, alive across the call (copied).
            let rc = unsafe {
                sys::rdma_set_option(
                    id,
                    sys::RDMA_OPTION_ID as i32,
                    sys::RDMA_OPTION_ID_ACK_TIMEOUT as i32,
                    (&mut v as *mut u8).cast(),
                    std::mem::size_of::<u8>(),
                )
            };
            check(rc, "rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)")
        })
    }

    /// Sends a connection request (`rdma_connect(3)`); completes with ESTABLISHED (the peer's
    /// accept private data is in that event) or REJECTED / UNREACHABLE / CONNECT_ERROR.
    pub fn connect(&self, p: &ConnParam) -> Result<()> {
        p.check(MAX_CONNECT_PRIVATE_DATA, "rdma_connect")?;
        let mut raw = p.to_raw();
        self.inner.with(|id| {
            // SAFETY: valid id; `raw` points into `p`, alive across the call (the data is copied).
            let rc = unsafe { sys::rdma_connect(id, &mut raw) };
            check(rc, "rdma_connect")
        })
    }

    /// Accepts a connection request (`rdma_accept(3)`); completes with ESTABLISHED.
    pub fn accept(&self, p: &ConnParam) -> Result<()> {
        p.check(MAX_ACCEPT_PRIVATE_DATA, "rdma_accept")?;
        let mut raw = p.to_raw();
        self.inner.with(|id| {
            // SAFETY: as in `connect`.
            let rc = unsafe { sys::rdma_accept(id, &mut raw) };
            check(rc, "rdma_accept")
        })
    }

    /// Refuses a connection request with a reason for the peer (`rdma_reject(3)`).
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        if private_data.len() > MAX_REJECT_PRIVATE_DATA {
            return Err(Error::InvalidArgument(format!(
                "rdma_reject: {} bytes of private data, at most {MAX_REJECT_PRIVATE_DATA} fit",
                private_data.len()
            )));
        }
        let p = if private_data.is_empty() {
            std::ptr::null()
        } else {
            private_data.as_ptr().cast()
        };
        self.inner.with(|id| {
            // SAFETY: valid id; the data is copied during the call.
            let rc = unsafe { sys::rdma_reject(id, p, private_data.len() as u8) };
            check(rc, "rdma_reject")
        })
    }

    /// Disconnects (`rdma_disconnect(3)`): moves the QP to ERR and tells the peer.
    pub fn disconnect(&self) -> Result<()> {
        self.inner.with(|id| {
            // SAFETY: valid id.
            let rc = unsafe { sys::rdma_disconnect(id) };
            check(rc, "rdma_disconnect")
        })
    }

    /// The next event if one is queued (`rdma_get_cm_event(3)` on the non-blocking channel).
    pub fn try_next_event(&self) -> Result<Option<Event>> {
        Event::try_next(&self.inner)
    }

    /// Waits for the next event (`poll(2)` on the channel fd, then `rdma_get_cm_event(3)`), at
    /// most `timeout` (`None`: forever).
    pub fn next_event(&self, timeout: Option<Duration>, what: &'static str) -> Result<Event> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(ev) = self.try_next_event()? {
                return Ok(ev);
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                return Err(Error::Timeout {
                    what,
                    after: timeout.unwrap_or_default(),
                });
            }
            // The fd stays open: the channel lives as long as `self`.
            os::wait_raw(self.inner.channel.fd(), left)
                .map_err(|e| Error::io("poll(rdma_cm channel)", e))?;
        }
    }

    /// Waits for an event of kind `want` with status 0; anything else (REJECTED, UNREACHABLE,
    /// ADDR_ERROR, ...) becomes a clear error naming `what`. ADDR_CHANGE is skipped.
    pub fn expect_event(
        &self,
        want: EventKind,
        timeout: Duration,
        what: &'static str,
    ) -> Result<Event> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ev = self.next_event(Some(left), what).map_err(|e| match e {
                Error::Timeout { what, .. } => Error::Timeout {
                    what,
                    after: timeout,
                },
                e => e,
            })?;
            if ev.kind() == want && ev.status() == 0 {
                return Ok(ev);
            }
            if ev.kind() == EventKind::AddrChange {
                continue;
            }
            return Err(ev.to_error(what));
        }
    }

    /// On a listening id: waits (at most `timeout`; `None`: forever) for the next connection
    /// request, acknowledges it and moves the new id to its own event channel
    /// (`rdma_migrate_id(3)`). Any other event (DEVICE_REMOVAL, ...) is returned as an error.
    pub fn get_request(&self, timeout: Option<Duration>) -> Result<ConnectRequest> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let ev = loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let ev = self
                .next_event(left, "a connection request")
                .map_err(|e| match e {
                    Error::Timeout { what, .. } => Error::Timeout {
                        what,
                        after: timeout.unwrap_or_default(),
                    },
                    e => e,
                })?;
            match ev.kind() {
                EventKind::ConnectRequest => break ev,
                EventKind::DeviceRemoval | EventKind::Other(_) => {
                    return Err(ev.to_error("listening"))
                }
                // Late events of ids already handed out (before their migration): not ours.
                k => tracing::debug!("listener: ignoring {}", k.name()),
            }
        };
        let raw =
            NonNull::new(ev.raw_id()).ok_or_else(|| Error::verb("rdma_get_cm_event", libc::EIO))?;
        let private_data = ev.private_data().to_vec();
        let (responder_resources, initiator_depth) = ev.rdma_read_depths();
        let channel = match Channel::new() {
            Ok(c) => c,
            Err(e) => {
                drop(ev);
                // SAFETY: the new id is ours (from the request) and nothing else refers to it.
                unsafe { sys::rdma_destroy_id(raw.as_ptr()) };
                return Err(e);
            }
        };
        let new = CmId {
            inner: Arc::new(IdInner {
                id: raw,
                lock: Mutex::new(()),
                channel: ManuallyDrop::new(channel),
                ready: os::ReadyFd::default(),
            }),
        };
        // rdma_migrate_id waits until the id's retrieved events are acked: ack the request first.
        drop(ev);
        let ch = new.inner.channel.0.as_ptr();
        new.inner.with(|id| {
            // SAFETY: valid id and channel; on failure `new` is dropped, destroying the id.
            let rc = unsafe { sys::rdma_migrate_id(id, ch) };
            check(rc, "rdma_migrate_id")
        })?;
        Ok(ConnectRequest {
            id: new,
            private_data,
            responder_resources,
            initiator_depth,
        })
    }
}

/// A CM id as the owner of its event channel's descriptor, for the crate's own reactor
/// registrations (`aio`); crate-private, so the device descriptor never reaches safe code.
#[cfg(feature = "tokio")]
pub(crate) struct CmChannel(CmId);

#[cfg(feature = "tokio")]
impl std::os::fd::AsRawFd for CmChannel {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.inner.channel.fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(a: SocketAddr) -> Option<SocketAddr> {
        let mut st = sys::sockaddr_storage::default();
        let mut raw = RawAddr::new(&a);
        let len = match &raw {
            RawAddr::V4(_) => std::mem::size_of::<sys::sockaddr_in>(),
            RawAddr::V6(_) => std::mem::size_of::<sys::sockaddr_in6>(),
        };
        // SAFETY: copying `len` bytes of a sockaddr into a larger storage.
        unsafe {
            std::ptr::copy_nonoverlapping(
                raw.as_mut_ptr().cast::<u8>(),
                (&mut st as *mut sys::sockaddr_storage).cast(),
                len,
            )
        };
        // SAFETY: a full, initialised storage.
        unsafe { read_sockaddr(&st) }
    }

    #[test]
    fn sockaddr_round_trips() {
        for s in [
            "198.18.0.1:18515",
            "0.0.0.0:0",
            "[fe80::1%3]:7471",
            "[::ffff:198.18.0.1]:1",
        ] {
            let a: SocketAddr = s.parse().unwrap();
            assert_eq!(round_trip(a), Some(a), "{s}");
        }
        let st = sys::sockaddr_storage::default();
        // SAFETY: a full, zeroed storage (family 0).
        assert_eq!(unsafe { read_sockaddr(&st) }, None);
    }

    #[test]
    fn conn_param_limits() {
        let p = ConnParam {
            private_data: vec![0; 57],
            ..Default::default()
        };
        assert!(p.check(MAX_CONNECT_PRIVATE_DATA, "rdma_connect").is_err());
        assert!(p.check(MAX_ACCEPT_PRIVATE_DATA, "rdma_accept").is_ok());
        let p = ConnParam {
            retry_count: 8,
            ..Default::default()
        };
        assert!(p.check(56, "x").is_err());
        let raw = ConnParam::default().to_raw();
        assert!(raw.private_data.is_null());
    }
}
