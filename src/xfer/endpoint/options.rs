//! What an endpoint is made with ([`EndpointOptions`]) and what its set-up tells about both
//! sides ([`LocalInfo`], [`PeerInfo`]).

use std::net::SocketAddr;
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::verbs::{Gid, Mtu, WaitMode};
use crate::xfer::params::SessionParams;

/// ibv_rc_pingpong's TCP port, also rdmaxfer's default RDMA CM port.
pub const DEFAULT_PORT: u16 = 18515;
/// Default deadline for every step.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// RNR retries: finite, and never needed thanks to flow control.
pub const RNR_RETRY: u8 = 3;
/// Transport retries (ibv_rc_pingpong's retry_cnt).
pub const RETRY_COUNT: u8 = 7;
/// Local ACK timeout code (ibv_rc_pingpong's: 4.096 µs × 2^14 ≈ 67 ms), OOB and CM alike: under
/// loss Soft-RoCE spends about one ACK timeout per lost packet.
pub const ACK_TIMEOUT: u8 = 14;
/// Work request ids at or above this value are the endpoint's own.
pub const RESERVED_WR_ID: u64 = 1 << 62;

/// How an [`Endpoint`](crate::xfer::endpoint::Endpoint) is made and behaves.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct EndpointOptions {
    /// RDMA device; `None`: the first with an active port (OOB), or the one rdma_cm routes to (CM).
    pub device: Option<String>,
    /// GID index; `None`: the IPv4-mapped RoCE v2 GID. With CM it selects the source address.
    pub gid_index: Option<u32>,
    /// Port of the device (1-based); `None`: the first active one (CM: the one the route uses,
    /// which must then be this one).
    pub ib_port: Option<u8>,
    /// Path MTU (OOB only; rdma_cm takes it from the route). `None`: 1024, as ibv_rc_pingpong.
    pub mtu: Option<Mtu>,
    /// Busy-poll or sleep on the completion channel.
    pub wait: WaitMode,
    /// Deadline for each step.
    pub timeout: Duration,
    /// Largest message either side sends (the size of each receive buffer).
    pub msg_size: usize,
    /// Receives kept posted: the credits granted to the peer.
    pub recv_depth: u32,
    /// Send buffers (messages in flight at once).
    pub send_depth: u32,
    /// Send-queue slots for the caller's own work requests ([`Endpoint::post`](crate::xfer::endpoint::Endpoint::post)).
    pub extra_send_wr: u32,
    /// A client's session parameters, sent in the RDMA CM handshake (see [`crate::xfer::params`]).
    pub session: Option<SessionParams>,
}

impl Default for EndpointOptions {
    fn default() -> Self {
        EndpointOptions {
            device: None,
            gid_index: None,
            mtu: None,
            wait: WaitMode::Poll,
            timeout: DEFAULT_TIMEOUT,
            msg_size: 4096,
            recv_depth: 16,
            send_depth: 16,
            extra_send_wr: 0,
            ib_port: None,
            session: None,
        }
    }
}

impl EndpointOptions {
    setters! {
        device: Option<String>,
        gid_index: Option<u32>,
        ib_port: Option<u8>,
        mtu: Option<Mtu>,
        wait: WaitMode,
        timeout: Duration,
        msg_size: usize,
        recv_depth: u32,
        send_depth: u32,
        extra_send_wr: u32,
        session: Option<SessionParams>,
    }

    pub(super) fn validate(&self) -> Result<()> {
        if self.msg_size == 0 || self.msg_size > u32::MAX as usize {
            return Err(Error::InvalidArgument(format!(
                "message size {} is out of range",
                self.msg_size
            )));
        }
        if self.recv_depth == 0 || self.recv_depth > 1 << 16 {
            return Err(Error::InvalidArgument(format!(
                "receive depth {} is outside 1..=65536",
                self.recv_depth
            )));
        }
        if self.send_depth == 0 || self.send_depth > 1 << 16 {
            return Err(Error::InvalidArgument(format!(
                "send depth {} is outside 1..=65536",
                self.send_depth
            )));
        }
        if self.timeout.is_zero() {
            return Err(Error::InvalidArgument("timeout must be positive".into()));
        }
        Ok(())
    }
}

/// How the connection was set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Transport {
    /// RDMA connection manager.
    Cm,
    /// ibv_rc_pingpong's out-of-band TCP exchange.
    Oob,
}

/// What the other side is, as far as the connection set-up tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
#[non_exhaustive]
pub enum PeerKind {
    /// rdmaxfer, speaking handshake `version` (CM).
    Rdmaxfer {
        /// Handshake version.
        version: u16,
    },
    /// Unknown: an OOB peer may be ibv_rc_pingpong or rdmaxfer.
    Unknown,
}

/// What was negotiated about the peer.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct PeerInfo {
    /// Its address (the TCP peer for OOB).
    pub addr: Option<SocketAddr>,
    /// rdmaxfer or unknown.
    pub kind: PeerKind,
    /// Its QP number (OOB), if known.
    pub qpn: Option<u32>,
    /// Its first PSN (OOB).
    pub psn: Option<u32>,
    /// Its LID (0 on RoCE).
    pub lid: u16,
    /// Its GID.
    pub gid: Gid,
    /// Receives it keeps posted (credits it granted), if it said.
    pub recv_depth: Option<u32>,
    /// Its largest accepted message, if it said.
    pub msg_size: Option<u32>,
}

/// What this side of the connection uses.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct LocalInfo {
    /// CM or OOB.
    pub transport: Transport,
    /// Device name.
    pub device: String,
    /// Port number.
    pub port: u8,
    /// Local address (CM: the RDMA address; OOB: the TCP socket's).
    pub addr: Option<SocketAddr>,
    /// Our QP number.
    pub qpn: u32,
    /// Our first PSN (OOB; rdma_cm picks its own).
    pub psn: Option<u32>,
    /// Our LID.
    pub lid: u16,
    /// Our GID.
    pub gid: Gid,
    /// Its index in the port's GID table, if chosen by us.
    pub gid_index: Option<u32>,
    /// Path MTU (OOB; CM: as the route says).
    pub path_mtu: Option<Mtu>,
    /// Largest message the port allows.
    pub port_max_msg: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_validated() {
        assert!(EndpointOptions::default().validate().is_ok());
        let bad = [
            EndpointOptions {
                msg_size: 0,
                ..Default::default()
            },
            EndpointOptions {
                recv_depth: 0,
                ..Default::default()
            },
            EndpointOptions {
                send_depth: 0,
                ..Default::default()
            },
            EndpointOptions {
                timeout: Duration::ZERO,
                ..Default::default()
            },
        ];
        for o in bad {
            assert!(
                matches!(o.validate(), Err(Error::InvalidArgument(_))),
                "{o:?}"
            );
        }
    }
}
