//! Connections and protocols on top of the safe verbs layer. No `unsafe` here.

pub mod endpoint;
pub mod loopback;
pub mod pingpong;
pub mod wire;
