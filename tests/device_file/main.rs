//! Device tests of file transfer (`rdmaxfer send` / `recv` and the file protocol), in one binary:
//! round trips, re-runs and resume, striping over streams and devices, a receiver serving many
//! senders, hostile and crafted senders, chunk repair, signals and the receiver's own failures. Every test is
//! `#[ignore]`d: they need rxe0 (some rxe1), so ci/test.sh runs them with `--ignored` in the
//! Soft-RoCE guest.

#[path = "../common/mod.rs"]
mod common;

mod delete;
mod dry_run;
mod file;
mod file_rerun;
mod harden;
mod hostile;
mod kills;
mod peers;
mod rails;
mod recv_multi;
mod repair;
mod share;
mod small;
mod streams;
