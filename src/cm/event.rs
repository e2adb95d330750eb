//! CM events: `rdma_get_cm_event(3)` results, acknowledged on drop (`rdma_ack_cm_event(3)`).
//!
//! This module and `id` import each other, and that is the natural shape: an [`Event`] keeps
//! the id it was read from alive (`id::IdInner`, so `rdma_destroy_id(3)` never waits on an
//! unacknowledged event), while an id reads events and turns a CONNECT_REQUEST, which carries a
//! new `rdma_cm_id` (`rdma_get_cm_event(3)`: "this references a new id for that
//! communication"), into a new id. Moving the channel or `IdInner` into a third module would
//! not break the loop: both ends still need both types.

use std::ffi::CStr;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::error::{last_errno, Error, Result};
use crate::sys;

use super::id::IdInner;

/// What happened (`enum rdma_cm_event_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// `rdma_resolve_addr` finished.
    AddrResolved,
    /// `rdma_resolve_addr` failed.
    AddrError,
    /// `rdma_resolve_route` finished.
    RouteResolved,
    /// `rdma_resolve_route` failed.
    RouteError,
    /// A peer wants to connect (listeners only).
    ConnectRequest,
    /// The peer answered (only without `rdma_create_qp`).
    ConnectResponse,
    /// Connecting failed.
    ConnectError,
    /// The peer did not answer.
    Unreachable,
    /// The peer (or its CM) refused the connection.
    Rejected,
    /// The connection is up.
    Established,
    /// The connection went down.
    Disconnected,
    /// The RDMA device went away.
    DeviceRemoval,
    /// A multicast join finished.
    MulticastJoin,
    /// A multicast join failed.
    MulticastError,
    /// The address's device changed.
    AddrChange,
    /// The QP left the timewait state after a disconnect.
    TimewaitExit,
    /// A value this build does not know.
    Other(u32),
}

impl EventKind {
    pub(crate) fn from_raw(v: sys::rdma_cm_event_type) -> EventKind {
        match v {
            sys::RDMA_CM_EVENT_ADDR_RESOLVED => EventKind::AddrResolved,
            sys::RDMA_CM_EVENT_ADDR_ERROR => EventKind::AddrError,
            sys::RDMA_CM_EVENT_ROUTE_RESOLVED => EventKind::RouteResolved,
            sys::RDMA_CM_EVENT_ROUTE_ERROR => EventKind::RouteError,
            sys::RDMA_CM_EVENT_CONNECT_REQUEST => EventKind::ConnectRequest,
            sys::RDMA_CM_EVENT_CONNECT_RESPONSE => EventKind::ConnectResponse,
            sys::RDMA_CM_EVENT_CONNECT_ERROR => EventKind::ConnectError,
            sys::RDMA_CM_EVENT_UNREACHABLE => EventKind::Unreachable,
            sys::RDMA_CM_EVENT_REJECTED => EventKind::Rejected,
            sys::RDMA_CM_EVENT_ESTABLISHED => EventKind::Established,
            sys::RDMA_CM_EVENT_DISCONNECTED => EventKind::Disconnected,
            sys::RDMA_CM_EVENT_DEVICE_REMOVAL => EventKind::DeviceRemoval,
            sys::RDMA_CM_EVENT_MULTICAST_JOIN => EventKind::MulticastJoin,
            sys::RDMA_CM_EVENT_MULTICAST_ERROR => EventKind::MulticastError,
            sys::RDMA_CM_EVENT_ADDR_CHANGE => EventKind::AddrChange,
            sys::RDMA_CM_EVENT_TIMEWAIT_EXIT => EventKind::TimewaitExit,
            x => EventKind::Other(x),
        }
    }

    fn to_raw(self) -> Option<sys::rdma_cm_event_type> {
        Some(match self {
            EventKind::AddrResolved => sys::RDMA_CM_EVENT_ADDR_RESOLVED,
            EventKind::AddrError => sys::RDMA_CM_EVENT_ADDR_ERROR,
            EventKind::RouteResolved => sys::RDMA_CM_EVENT_ROUTE_RESOLVED,
            EventKind::RouteError => sys::RDMA_CM_EVENT_ROUTE_ERROR,
            EventKind::ConnectRequest => sys::RDMA_CM_EVENT_CONNECT_REQUEST,
            EventKind::ConnectResponse => sys::RDMA_CM_EVENT_CONNECT_RESPONSE,
            EventKind::ConnectError => sys::RDMA_CM_EVENT_CONNECT_ERROR,
            EventKind::Unreachable => sys::RDMA_CM_EVENT_UNREACHABLE,
            EventKind::Rejected => sys::RDMA_CM_EVENT_REJECTED,
            EventKind::Established => sys::RDMA_CM_EVENT_ESTABLISHED,
            EventKind::Disconnected => sys::RDMA_CM_EVENT_DISCONNECTED,
            EventKind::DeviceRemoval => sys::RDMA_CM_EVENT_DEVICE_REMOVAL,
            EventKind::MulticastJoin => sys::RDMA_CM_EVENT_MULTICAST_JOIN,
            EventKind::MulticastError => sys::RDMA_CM_EVENT_MULTICAST_ERROR,
            EventKind::AddrChange => sys::RDMA_CM_EVENT_ADDR_CHANGE,
            EventKind::TimewaitExit => sys::RDMA_CM_EVENT_TIMEWAIT_EXIT,
            EventKind::Other(x) => return Some(x),
        })
    }

    /// `rdma_event_str(3)`: "RDMA_CM_EVENT_ESTABLISHED", ...
    pub fn name(self) -> &'static str {
        let Some(raw) = self.to_raw() else {
            return "RDMA_CM_EVENT_UNKNOWN";
        };
        // An unknown value takes its switch's default (librdmacm cma.c: "UNKNOWN EVENT").
        // SAFETY: rdma_event_str(3) takes the event type by value and returns "a pointer to a
        // static character string"; NULL is still checked below.
        let p = unsafe { sys::rdma_event_str(raw) };
        if p.is_null() {
            return "RDMA_CM_EVENT_UNKNOWN";
        }
        // SAFETY: `p` is non-null (checked above) and, per rdma_event_str(3), a static
        // NUL-terminated string, so the `'static` borrow holds.
        unsafe { CStr::from_ptr(p) }
            .to_str()
            .unwrap_or("RDMA_CM_EVENT_UNKNOWN")
    }
}

/// Text for an IB CM reject reason (`enum ib_cm_rej_reason`, the `status` of REJECTED on IB and
/// RoCE).
pub fn reject_reason_str(reason: i32) -> &'static str {
    match reason {
        1 => "no QP available",
        2 => "no EEC available",
        3 => "no resources at the peer",
        4 => "timeout",
        5 => "unsupported request",
        6 => "invalid communication id",
        7 => "invalid communication instance",
        8 => "nothing is listening on that address and port (invalid service id)",
        9 => "invalid transport type",
        10 => "stale connection",
        11 => "RDC does not exist",
        12 => "invalid GID",
        13 => "invalid LID",
        14 => "invalid service level",
        15 => "invalid traffic class",
        16 => "invalid hop limit",
        17 => "invalid packet rate",
        24 => "port CM redirect",
        25 => "port redirect",
        26 => "invalid MTU",
        27 => "insufficient responder resources",
        28 => "rejected by the peer application",
        29 => "invalid RNR retry count",
        30 => "duplicate local communication id",
        31 => "invalid class version",
        32 => "invalid flow label",
        33 => "invalid alternate flow label",
        _ => "unknown reason",
    }
}

/// One CM event. Dropping it acknowledges it (`rdma_ack_cm_event(3)`); it keeps the CM id it
/// was read from alive until then.
pub struct Event {
    raw: NonNull<sys::rdma_cm_event>,
    kind: EventKind,
    // Dropped after `drop()` acked the event, so the id outlives its unacked events.
    _id: Arc<IdInner>,
}

// SAFETY: an `Event` is the only handle to its `rdma_cm_event` (acked once, in `Drop`) and is
// not `Sync`, so moving it moves all access. Nothing ties the event to the thread that read it:
// rdma_ack_cm_event (librdmacm cma.c) takes the id's mutex, counts the ack and frees the event.
unsafe impl Send for Event {}

impl Event {
    /// The next event on `id`'s channel if one is queued (`rdma_get_cm_event(3)` on the
    /// non-blocking channel). It is the only way to make an `Event`, so every `Event` holds an
    /// event that call returned and that nothing has acked yet.
    pub(super) fn try_next(id: &Arc<IdInner>) -> Result<Option<Event>> {
        let mut ev: *mut sys::rdma_cm_event = std::ptr::null_mut();
        let res = id.with_channel(|ch| {
            // SAFETY: `ch` is the id's channel, which `IdInner` owns and keeps open; `ev` is a
            // valid out-pointer.
            let rc = unsafe { sys::rdma_get_cm_event(ch.as_ptr(), &mut ev) };
            if rc == 0 {
                Ok(())
            } else {
                Err(last_errno())
            }
        });
        match res {
            Ok(()) => {
                let raw =
                    NonNull::new(ev).ok_or_else(|| Error::verb("rdma_get_cm_event", libc::EIO))?;
                // SAFETY: rdma_get_cm_event succeeded and returned `raw` (non-null), an event it
                // allocated and that stays valid until rdma_ack_cm_event, which only `Drop` calls.
                let kind = EventKind::from_raw(unsafe { raw.as_ref() }.event);
                Ok(Some(Event {
                    raw,
                    kind,
                    _id: id.clone(),
                }))
            }
            Err(e) if e == libc::EAGAIN || e == libc::EWOULDBLOCK => Ok(None),
            Err(e) => Err(Error::verb("rdma_get_cm_event", e)),
        }
    }

    fn ev(&self) -> &sys::rdma_cm_event {
        // SAFETY: `raw` is the event `try_next` got from rdma_get_cm_event (the only
        // constructor); only `Drop` acks (frees) it, so it stays valid while `&self` is borrowed.
        unsafe { self.raw.as_ref() }
    }

    /// What happened.
    pub fn kind(&self) -> EventKind {
        self.kind
    }

    /// The event's status: 0, a negative errno, or (REJECTED) the reject reason.
    pub fn status(&self) -> i32 {
        self.ev().status
    }

    fn has_conn_param(&self) -> bool {
        matches!(
            self.kind,
            EventKind::ConnectRequest
                | EventKind::ConnectResponse
                | EventKind::Established
                | EventKind::Rejected
        )
    }

    /// The peer's private data (connect request, accept or reject), empty for other events.
    /// On IB and RoCE the CM pads it with zeroes to the protocol's fixed size.
    pub fn private_data(&self) -> &[u8] {
        if !self.has_conn_param() {
            return &[];
        }
        // Every id here is RDMA_PS_TCP: `CmId::new` is the only rdma_create_id call, and a
        // CONNECT_REQUEST's id inherits its listener's port space. librdmacm zeroes the event
        // before it fills it and fills `param.conn` for these four kinds (cma.c,
        // ucma_copy_conn_event); the union's members are plain integers and pointers.
        // SAFETY: rdma_get_cm_event(3) says to read `param.conn` for RDMA_PS_TCP (every id here);
        // the read is of initialised bytes whichever union member was written (above).
        let c = unsafe { &self.ev().param.conn };
        if c.private_data.is_null() || c.private_data_len == 0 {
            return &[];
        }
        // rdma_get_cm_event(3): `private_data_len` is "the size of the private data buffer",
        // which is "deallocated when calling rdma_ack_cm_event" (only in `Drop`).
        // SAFETY: non-null and a non-zero length are checked above; the buffer lives until the
        // ack in `Drop` (rdma_get_cm_event(3), above), and the slice borrows `self`.
        unsafe {
            std::slice::from_raw_parts(c.private_data.cast::<u8>(), c.private_data_len.into())
        }
    }

    /// (responder_resources, initiator_depth) the peer offered, for connection events.
    pub fn rdma_read_depths(&self) -> (u8, u8) {
        if !self.has_conn_param() {
            return (0, 0);
        }
        // SAFETY: as in `private_data`: `param.conn` of an RDMA_PS_TCP connection event.
        let c = unsafe { &self.ev().param.conn };
        (c.responder_resources, c.initiator_depth)
    }

    /// The raw id the event is about (for CONNECT_REQUEST: the new connection's id).
    pub(crate) fn raw_id(&self) -> *mut sys::rdma_cm_id {
        self.ev().id
    }

    /// The error this event means when it was not the one expected; `doing` says what was
    /// being waited for, e.g. "connecting to 198.18.0.1:18515".
    pub fn to_error(&self, doing: &str) -> Error {
        let st = self.status();
        let errno = |s: i32| std::io::Error::from_raw_os_error(s.unsigned_abs() as i32);
        let msg = match self.kind {
            EventKind::AddrError => format!("{doing}: address resolution failed ({})", errno(st)),
            EventKind::RouteError => format!("{doing}: route resolution failed ({})", errno(st)),
            EventKind::Rejected => format!(
                "{doing}: connection rejected: {} (reason {st})",
                reject_reason_str(st)
            ),
            EventKind::Unreachable => format!("{doing}: peer unreachable ({})", errno(st)),
            EventKind::ConnectError => format!("{doing}: connection error ({})", errno(st)),
            EventKind::Disconnected => format!("{doing}: the peer disconnected"),
            EventKind::DeviceRemoval => format!("{doing}: the RDMA device was removed"),
            EventKind::TimewaitExit => {
                format!("{doing}: the connection already ended (TIMEWAIT_EXIT)")
            }
            k => format!("{doing}: unexpected CM event {} (status {st})", k.name()),
        };
        Error::Connection(msg)
    }
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Event({}, status {})", self.kind.name(), self.status())
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // rdma_ack_cm_event(3): "one-to-one correspondence between successful gets and acks".
        // SAFETY: the event came from rdma_get_cm_event (`try_next`, the only constructor) and
        // `Drop` runs once, so it is acked exactly once, as rdma_ack_cm_event(3) requires.
        let rc = unsafe { sys::rdma_ack_cm_event(self.raw.as_ptr()) };
        if rc != 0 {
            tracing::warn!(
                "rdma_ack_cm_event failed: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_and_have_names() {
        for raw in 0..=15u32 {
            let k = EventKind::from_raw(raw);
            assert!(!matches!(k, EventKind::Other(_)), "{raw}");
            assert_eq!(k.to_raw(), Some(raw));
            assert!(k.name().starts_with("RDMA_CM_EVENT_"), "{}", k.name());
        }
        assert_eq!(EventKind::from_raw(9).name(), "RDMA_CM_EVENT_ESTABLISHED");
        assert_eq!(EventKind::from_raw(99), EventKind::Other(99));
    }

    #[test]
    fn reject_reasons() {
        assert!(reject_reason_str(8).contains("listening"));
        assert!(reject_reason_str(28).contains("peer application"));
        assert_eq!(reject_reason_str(-5), "unknown reason");
    }
}
