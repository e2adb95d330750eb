//! Device tests of the verbs layer, in one binary: queue pairs on rxe0 in one process (sends,
//! one-sided READ/WRITE, post lists of buffers and of one shared source, receive lists,
//! single-owner and shared completion queues, forgotten handles), and `Endpoint`'s lists of
//! SENDs. Every device test is `#[ignore]`d (the one host test checks the test port blocks):
//! they need rxe0, so ci/test.sh runs them with `--ignored` in the Soft-RoCE guest, where a
//! missing device fails them, never skips them. ci/test.sh's
//! memcheck phase runs modules `verbs` and `rw` again under valgrind (filters `verbs::` `rw::`).

#[path = "../common/mod.rs"]
mod common;

mod batch;
mod errors;
mod forget;
mod recvlist;
mod rw;
mod sendlist;
mod sharedlist;
mod solo;
mod verbs;

/// The five device test binaries get five different blocks of ports from `common::port`.
#[test]
fn the_device_binaries_port_blocks_do_not_overlap() {
    let names = [
        "device_verbs",
        "device_conn",
        "device_file",
        "device_cli",
        "device_capi",
    ];
    let mut bases = names.map(common::port_base);
    bases.sort_unstable();
    for w in bases.windows(2) {
        assert!(
            w[1] - w[0] >= common::PORTS_PER_BINARY,
            "overlapping blocks: {names:?} -> {bases:?}"
        );
    }
}
