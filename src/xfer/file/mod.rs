//! Verified file transfer: the connection-independent core (wire protocol, safe names, the
//! receiver's commit logic, the sender's reader). See `docs/file-protocol.md`.

pub mod budget;
pub mod cleanup;
pub mod digest;
pub mod entry;
pub mod names;
pub mod partial;
pub mod policy;
pub mod proto;
pub mod ring_budget;
pub mod sink;
pub mod source;
pub mod transfer;
