//! Safe wrappers over librdmacm (RDMA connection manager): event channels, CM ids, events.
//!
//! Every CM id owns its own event channel (`rdma_create_event_channel(3)`), made non-blocking so
//! that every wait is a `poll(2)` with a deadline. Connection requests that arrive on a listener
//! are acknowledged and then migrated (`rdma_migrate_id(3)`) to a fresh channel, so each
//! connection's events (DISCONNECTED, ...) reach only that connection.
//!
//! Events are acknowledged (`rdma_ack_cm_event(3)`) when an [`Event`](crate::cm::Event) is dropped, and an `Event`
//! keeps its CM id alive, so `rdma_destroy_id(3)` (which blocks until every retrieved event is
//! acknowledged) can never wait on an event that is still held.
#![allow(unsafe_code)]

mod event;
mod id;

pub use event::{reject_reason_str, Event, EventKind};
#[cfg(feature = "tokio")]
pub(crate) use id::CmChannel;
pub use id::{
    CmId, ConnParam, ConnectRequest, DEPTH_AUTO, MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA,
    MAX_REJECT_PRIVATE_DATA,
};
