//! Device tests of the `rdmaxfer` command line, in one binary: `devices` and `loopback`, what a
//! user of `send` / `recv` sees (progress, exit statuses, messages), and `expose`, `write`,
//! `read` and `bench`. Every test is `#[ignore]`d: they need rxe0, so ci/test.sh runs them with
//! `--ignored` in the Soft-RoCE guest.

#[path = "../common/mod.rs"]
mod common;

mod cli;
mod cli_ux;
mod cp;
mod onesided;
