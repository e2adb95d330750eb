//! Host test of the CLI: `rdmaxfer devices` never reports an empty success.

use std::process::Command;

fn has_rdma_device() -> bool {
    std::fs::read_dir("/sys/class/infiniband")
        .map(|mut d| d.next().is_some())
        .unwrap_or(false)
}

#[test]
fn devices_without_a_device_fails_and_says_how_to_get_one() {
    let out = Command::new(env!("CARGO_BIN_EXE_rdmaxfer"))
        .arg("devices")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if has_rdma_device() {
        assert!(out.status.success(), "{stderr}");
        assert!(stdout.contains("port 1"), "{stdout}");
    } else {
        assert!(
            !out.status.success(),
            "must not succeed without a device: {stdout}"
        );
        assert!(stdout.is_empty(), "{stdout}");
        assert!(stderr.contains("no RDMA device found"), "{stderr}");
        assert!(
            stderr.contains("modprobe rdma_rxe") && stderr.contains("rdma link add"),
            "{stderr}"
        );
    }
}

#[test]
fn help_lists_the_commands() {
    let out = Command::new(env!("CARGO_BIN_EXE_rdmaxfer"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("devices") && s.contains("loopback"), "{s}");
}
