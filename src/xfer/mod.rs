//! Connections and protocols on top of the safe verbs layer. No `unsafe` here.
#![forbid(unsafe_code)]

pub mod bench;
pub mod endpoint;
pub mod loopback;
pub mod pingpong;
pub mod rdma_rw;
pub mod onesided;
pub mod wire;
pub mod session;
