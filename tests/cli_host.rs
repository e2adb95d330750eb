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

/// Runs with extra environment variables (and without an inherited $RDMAXFER_TOKEN).
fn run_env(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, Vec<u8>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rdmaxfer"))
        .args(args)
        .env_remove("RDMAXFER_TOKEN")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code(),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_empty_token_is_a_usage_error_not_authentication_off() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    let (p, o) = (f.to_str().unwrap(), dir.path().to_str().unwrap());
    for cmd in [
        &["send", p, "127.0.0.1:1", "--token", ""][..],
        &["recv", "--out", o, "--once", "--token", ""][..],
    ] {
        let (code, _, err) = run_env(cmd, &[]);
        assert_eq!(code, Some(2), "{cmd:?}: {err}");
        assert!(
            err.contains("empty token would turn authentication off"),
            "{cmd:?}: {err}"
        );
    }
    for cmd in [
        &["send", p, "127.0.0.1:1"][..],
        &["recv", "--out", o, "--once"][..],
    ] {
        let (code, _, err) = run_env(cmd, &[("RDMAXFER_TOKEN", "")]);
        assert_eq!(code, Some(2), "{cmd:?}: {err}");
        assert!(
            err.contains("RDMAXFER_TOKEN is set but empty"),
            "{cmd:?}: {err}"
        );
    }
}

#[test]
fn a_file_name_with_control_characters_is_refused_and_printed_escaped() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("evil\nok      forged\x1b[31m"), b"x").unwrap();
    let d = dir.path().to_str().unwrap();
    let (code, out, err) = run_env(&["send", d, "127.0.0.1:1", "--json"], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("control character (U+000A)"), "{err}");
    assert!(err.contains("\\u{a}ok      forged\\u{1b}[31m"), "{err}");
    for s in [&out, err.as_bytes()] {
        let raw: Vec<u8> = s
            .iter()
            .copied()
            .filter(|&b| (b < 0x20 && b != b'\n') || b == 0x7f)
            .collect();
        assert!(raw.is_empty(), "raw control bytes {raw:?} in {err}");
    }
    assert_eq!(err.lines().count(), 1, "one error line: {err}");
}
