//! Connections and protocols on top of the safe verbs layer. No `unsafe` here.

pub mod loopback;
