//! The error variants a caller matches on, each from a real failure on a device: a port the
//! device lacks, a device with no active port, a registration over the locked-memory limit.

use std::process::Command;

use rdmaxfer::verbs::{Context, LocalBuf, ProtectionDomain};
use rdmaxfer::Error;

use crate::common::need_rxe0;

fn run(cmd: &str, args: &[&str]) {
    let o = Command::new(cmd).args(args).output().unwrap();
    assert!(
        o.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_port_the_device_lacks_is_port_not_found() {
    need_rxe0();
    let ctx = Context::open(Some("rxe0")).unwrap();
    match ctx.active_port(Some(2)) {
        Err(Error::PortNotFound {
            device,
            port: 2,
            ports: 1,
        }) => assert_eq!(device, "rxe0"),
        r => panic!("expected PortNotFound, got {:?}", r.map(|p| p.port)),
    }
    assert_eq!(ctx.active_port(Some(1)).unwrap().port, 1);
}

/// A Soft-RoCE device of its own on a dummy netdev that stays down, removed at the end.
struct DownDevice;

impl DownDevice {
    const NETDEV: &'static str = "rxdown0";
    const DEVICE: &'static str = "rxe_down0";

    fn new() -> DownDevice {
        Self::remove();
        run("ip", &["link", "add", Self::NETDEV, "type", "dummy"]);
        let d = DownDevice;
        run(
            "rdma",
            &[
                "link",
                "add",
                Self::DEVICE,
                "type",
                "rxe",
                "netdev",
                Self::NETDEV,
            ],
        );
        d
    }

    /// Removes the device and its netdev, if there (best effort).
    fn remove() {
        let _ = Command::new("rdma")
            .args(["link", "delete", Self::DEVICE])
            .output();
        let _ = Command::new("ip")
            .args(["link", "del", Self::NETDEV])
            .output();
    }
}

impl Drop for DownDevice {
    fn drop(&mut self) {
        Self::remove();
    }
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_device_whose_link_is_down_has_no_active_port() {
    need_rxe0();
    let _d = DownDevice::new();
    let ctx = Context::open(Some(DownDevice::DEVICE)).unwrap();
    match ctx.active_port(Some(1)) {
        Err(Error::PortNotActive {
            device,
            port: Some(1),
            state,
        }) => {
            assert_eq!(device, DownDevice::DEVICE);
            assert!(
                !state.is_empty() && !state.to_lowercase().contains("active"),
                "{state}"
            );
            println!("{} port 1: {state}", DownDevice::DEVICE);
        }
        r => panic!("expected PortNotActive, got {:?}", r.map(|p| p.port)),
    }
    let e = ctx.active_port(None).map(|p| p.port).unwrap_err();
    assert!(
        matches!(&e, Error::PortNotActive { port: None, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("has no active port"), "{e}");
}

const CHILD: &str = "RDMAXFER_TEST_MEMLOCK_CHILD";

/// The parent runs this test again as a child without CAP_IPC_LOCK (which would bypass the
/// limit) under `ulimit -l 64`, and checks that the child's assertions ran and passed.
#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn a_registration_over_the_locked_memory_limit_is_memlock_limit() {
    need_rxe0();
    if std::env::var_os(CHILD).is_some() {
        let ctx = Context::open(Some("rxe0")).unwrap();
        let pd = ProtectionDomain::new(&ctx).unwrap();
        match LocalBuf::new(&pd, 1 << 20).map(|_| ()) {
            Err(e @ Error::MemlockLimit { .. }) => {
                let Error::MemlockLimit { bytes, limit, .. } = &e else {
                    unreachable!()
                };
                assert_eq!((*bytes, *limit), (1 << 20, Some(64 << 10)), "{e}");
                assert!(e.errno().is_some(), "{e}");
                assert!(e.to_string().contains("is 64 KiB"), "{e}");
                println!("child: {e}");
            }
            r => panic!("expected MemlockLimit, got {r:?}"),
        }
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let me = "errors::a_registration_over_the_locked_memory_limit_is_memlock_limit";
    let o = Command::new("setpriv")
        .args([
            "--inh-caps=-ipc_lock",
            "--bounding-set=-ipc_lock",
            "bash",
            "-c",
        ])
        .arg("ulimit -l 64 && exec \"$0\" \"$@\"")
        .arg(&exe)
        .args(["--ignored", "--exact", me, "--nocapture"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("child: ibv_reg_mr") && out.contains("1 passed"),
        "{out}"
    );
}
