//! Host tests of the CLI, no RDMA device needed: `rdmaxfer devices` never reports an empty
//! success, and arguments are checked (and refused with a usage error) before connecting.

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

/// Parses a command line only (`RDMAXFER_PARSE_ONLY`: no device is touched) and returns what
/// the parser made of it, or the usage error.
fn parsed(args: &[&str]) -> Result<String, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_rdmaxfer"))
        .args(args)
        .env("RDMAXFER_PARSE_ONLY", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    match out.status.code() {
        Some(0) => Ok(stdout),
        Some(2) => Err(stderr),
        c => panic!("{args:?}: exit {c:?}\n{stdout}\n{stderr}"),
    }
}

#[test]
fn every_command_that_connects_or_listens_takes_perftests_options() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let perf = ["-i", "1", "-x", "1", "-d", "rxe0", "-p", "7000", "-e"];
    // (command line, what -s must have become), each with the options above.
    let cases: [(&[&str], &str); 11] = [
        (&["pingpong", "h", "-s", "64K", "-n", "5"], "size: 65536"),
        (&["pingpong", "--listen", "-s", "64K"], "size: 65536"),
        (
            &["bench", "write", "h", "-s", "64K", "-n", "5"],
            "size: 65536",
        ),
        (&["bench", "--listen", "-s", "64K"], "size: 65536"),
        (&["bench", "send", "--listen", "-s", "64K"], "size: 65536"),
        (&["expose", "--listen", "-s", "64K"], "size: 65536"),
        (&["write", "h", "-s", "64K"], "size: Some(65536)"),
        (&["read", "h", "-s", "64K"], "len: 65536"),
        (&["send", d, "h", "-s", "64K"], "chunk: 65536"),
        (&["recv", "--out", d, "--listen"], "listen: \"0.0.0.0\""),
        (
            &["recv", "--out", d, "--listen", "198.18.0.1"],
            "listen: \"198.18.0.1\"",
        ),
    ];
    for (args, want) in cases {
        let mut a = args.to_vec();
        a.extend_from_slice(&perf);
        let p = parsed(&a).unwrap_or_else(|e| panic!("{a:?} was refused:\n{e}"));
        for w in [
            want,
            "ib_port: Some(1)",
            "gid_index: Some(1)",
            "device: Some(\"rxe0\")",
            "port: 7000",
            "event: true",
        ] {
            assert!(p.contains(w), "{a:?}: {w} expected in\n{p}");
        }
        if a.contains(&"--listen") && !a.contains(&"198.18.0.1") {
            assert!(
                p.contains("\"0.0.0.0\""),
                "bare --listen: all addresses\n{p}"
            );
        }
    }
}

#[test]
fn gid_index_aliases_and_port_and_size_checks() {
    for g in ["-g", "-x", "--gid-idx", "--gid-index"] {
        let p = parsed(&["pingpong", "h", g, "3"]).unwrap();
        assert!(p.contains("gid_index: Some(3)"), "{g}: {p}");
    }
    let p = parsed(&["loopback", "-d", "rxe0", "-x", "1", "-s", "64K"]).unwrap();
    for w in [
        "device: Some(\"rxe0\")",
        "gid_index: Some(1)",
        "size: 65536",
    ] {
        assert!(p.contains(w), "{w}: {p}");
    }
    let p = parsed(&["loopback", "--ib-dev", "rxe0", "--gid-index", "1"]).unwrap();
    assert!(p.contains("device: Some(\"rxe0\")"), "{p}");
    let e = parsed(&["pingpong", "h", "-i", "0"]).unwrap_err();
    assert!(e.contains("-i") || e.contains("ib-port"), "{e}");
    let e = parsed(&["bench", "write", "h", "-s", "1Q"]).unwrap_err();
    assert!(e.contains("unknown unit"), "{e}");
    let p = parsed(&[
        "pingpong",
        "--listen",
        "--max-size",
        "1M",
        "--max-iters",
        "9",
    ])
    .unwrap();
    assert!(
        p.contains("max_size: 1048576") && p.contains("max_iters: 9"),
        "{p}"
    );
}

#[test]
fn timeout_help_does_not_promise_an_accept_deadline() {
    for cmd in ["pingpong", "bench", "expose", "recv", "send"] {
        let out = Command::new(env!("CARGO_BIN_EXE_rdmaxfer"))
            .args([cmd, "--help"])
            .output()
            .unwrap();
        let s = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{cmd} --help");
        assert!(
            s.contains("a server waits for its next client without one"),
            "{cmd}: {s}"
        );
        assert!(!s.contains("connect, accept,"), "{cmd}: {s}");
    }
}
