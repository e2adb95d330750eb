//! Connections and protocols on top of the safe verbs layer. No `unsafe` here.
#![forbid(unsafe_code)]

pub mod bench;
pub mod endpoint;
pub mod file;
pub mod loopback;
pub mod onesided;
pub mod params;
pub mod pingpong;
pub mod rdma_rw;
pub mod session;
internal! { mod wire; }
