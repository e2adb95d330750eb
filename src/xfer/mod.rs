//! Connections and protocols on top of the safe verbs layer. No `unsafe` here.
#![forbid(unsafe_code)]

pub mod bench;
pub mod file;
pub mod loopback;
pub mod rdma_rw;
