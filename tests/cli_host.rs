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

fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rdmaxfer"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn send_and_recv_refuse_bad_arguments_before_connecting() {
    let (ok, _, err) = run(&["recv", "--out", "/nonexistent/rdmaxfer-out"]);
    assert!(!ok);
    assert!(err.contains("create the directory first"), "{err}");
    let (ok, _, err) = run(&["send", "198.18.0.1"]);
    assert!(!ok, "send without a path must fail");
    assert!(err.contains("PATH"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    let p = f.to_str().unwrap();
    let (ok, _, err) = run(&["send", p, "127.0.0.1:1", "--chunk", "9M"]);
    assert!(!ok);
    assert!(err.contains("--chunk must be"), "{err}");
    let (ok, _, err) = run(&["send", p, "127.0.0.1:1", "--chunk", "1Q"]);
    assert!(!ok);
    assert!(err.contains("unknown unit"), "{err}");
    let (ok, _, err) = run(&["send", "/nonexistent/rdmaxfer-src", "127.0.0.1:1"]);
    assert!(!ok);
    assert!(err.contains("listing the files to send"), "{err}");
}

#[test]
fn event_and_poll_are_exclusive() {
    for cmd in [
        &["send", "x", "127.0.0.1:1", "--event", "--poll"][..],
        &["recv", "--out", ".", "--event", "--poll"][..],
        &["pingpong", "127.0.0.1", "-e", "--poll"][..],
    ] {
        let (ok, _, err) = run(cmd);
        assert!(!ok, "{cmd:?} must be refused");
        assert!(err.contains("cannot be used with"), "{cmd:?}: {err}");
    }
}
