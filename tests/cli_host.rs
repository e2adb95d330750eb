//! Host tests of the CLI, no RDMA device needed: `rdmaxfer devices` never reports an empty
//! success, arguments are checked (and refused with a usage error) before connecting, and a
//! standard output that fails is no panic.

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
    // Named on the command line, it is refused before connecting (inside a tree it is reported
    // FAILED and the rest is sent: tests/device_cli/cli_ux.rs).
    let dir = tempfile::tempdir().unwrap();
    let evil = dir.path().join("evil\nok      forged\x1b[31m");
    std::fs::write(&evil, b"x").unwrap();
    let d = evil.to_str().unwrap();
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

#[test]
fn every_bad_value_exits_2_with_one_line_naming_the_option_before_any_device() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    let (p, o) = (f.to_str().unwrap(), dir.path().to_str().unwrap());
    let not_dir = f.to_str().unwrap();
    // (arguments, what the one line must name)
    let table: &[(&[&str], &str)] = &[
        (&["send", p, "127.0.0.1:1", "-s", "1K"], "--chunk"),
        (&["send", p, "127.0.0.1:1", "--slots", "0"], "--slots"),
        (&["send", p, "127.0.0.1:1", "--timeout", "0"], "--timeout"),
        (&["send", p, "127.0.0.1:99999"], "99999"),
        (&["send", p, "[::1]:x"], "not a port number"),
        (&["recv", "--out", o, "--slots", "0"], "--slots"),
        (&["recv", "--out", o, "--max-memory", "1K"], "--max-memory"),
        (&["recv", "--out", "/nonexistent/rdmaxfer"], "--out"),
        (&["recv", "--out", not_dir], "--out"),
        (
            &["recv", "--out", o, "--min-rate", "1K", "--rate-window", "0"],
            "--rate-window",
        ),
        (&["pingpong", "127.0.0.1", "-n", "0"], "-n"),
        (&["pingpong", "127.0.0.1", "-s", "0"], "-s"),
        (&["pingpong", "127.0.0.1", "--timeout", "0"], "--timeout"),
        (&["pingpong", "127.0.0.1", "-d", "a,b"], "-d"),
        (&["pingpong", "127.0.0.1", "-m", "1024"], "-m"),
        (&["bench", "foo", "127.0.0.1"], "write, read or send"),
        (&["bench", "write", "127.0.0.1", "-s", "0"], "-s"),
        (
            &["expose", "--listen", "--size", "4096", "--access", "x"],
            "--access",
        ),
        (&["expose", "--listen", "--size", "0"], "--size"),
        (&["read", "127.0.0.1", "--size", "0"], "-s"),
        (&["write", "127.0.0.1", "--data="], "--data"),
        (&["send", "127.0.0.1:1"], "PATH"),
        (&["send", p, "127.0.0.1:1", "--bwlimit", "0"], "--bwlimit"),
        (
            &["send", "--files-from", "/nonexistent/list", "127.0.0.1:1"],
            "--files-from",
        ),
        (
            &["send", p, "127.0.0.1:1", "--exclude", "a//b"],
            "--exclude",
        ),
        (&["cp", p, o], "HOST:PATH"),
        (&["cp", "h:a", "h2:b"], "both sides are remote"),
        (&["cp", p], "SRC"),
        (&["cp", "-e", "'ssh", p, "h:/x"], "-e"),
        (&["cp", "--timeout", "0", p, "h:/x"], "--timeout"),
        (&["cp", "--chunk", "1K", p, "h:/x"], "--chunk"),
        (&["cp", "--slots", "0", p, "h:/x"], "--slots"),
        (&["cp", "--bwlimit", "0", p, "h:/x"], "--bwlimit"),
        (&["cp", "--verify", "x", p, "h:/x"], "--verify"),
        (&["cp", "h1:a", "h2:b", o], "two hosts"),
        (
            &["send", p, "127.0.0.1:1", "--require-receiver-token"],
            "--require-receiver-token",
        ),
    ];
    assert!(table.len() >= 15);
    for (args, names) in table {
        let (code, out, err) = run_env(args, &[]);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(
            out.is_empty(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out)
        );
        let lines: Vec<&str> = err.lines().filter(|l| !l.contains("warning:")).collect();
        assert_eq!(lines.len(), 1, "{args:?}: one line, got {err:?}");
        assert!(lines[0].starts_with("rdmaxfer: error: "), "{args:?}: {err}");
        assert!(
            lines[0].contains(names),
            "{args:?} must name {names:?}: {err}"
        );
        assert!(
            !err.contains("RDMA device"),
            "{args:?}: checked after the device: {err}"
        );
    }
}

#[test]
fn the_token_file_is_its_first_line_and_must_be_private_and_not_empty() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().to_str().unwrap();
    let write = |name: &str, body: &[u8], mode: u32| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p.to_str().unwrap().to_string()
    };
    let open = write("open", b"secret\n", 0o644);
    let empty = write("empty", b"\nsecret\n", 0o600);
    let good = write("good", b"secret\r\nignored\n", 0o600);
    for (file, says) in [
        (open.as_str(), "chmod 600"),
        (empty.as_str(), "first line is empty"),
        ("/nonexistent/token", "--token-file"),
    ] {
        let (code, _, err) = run_env(&["recv", "--out", o, "--token-file", file], &[]);
        assert_eq!(code, Some(2), "{file}: {err}");
        assert!(err.contains(says), "{file}: {err}");
    }
    let (code, _, err) = run_env(
        &["send", &good, "h", "--token-file", &good, "--token", "x"],
        &[],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
    // A good file gets as far as the device (none here, or a port nobody serves).
    let (code, _, err) = run_env(&["recv", "--out", o, "--token-file", &good, "--once"], &[]);
    if !has_rdma_device() {
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains("no RDMA device"), "{err}");
    }
    assert!(!err.contains("warning"), "a token is given: {err}");
}

#[test]
fn recv_without_a_token_warns_on_every_start() {
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().to_str().unwrap();
    for _ in 0..2 {
        let (_, _, err) = run_env(
            &["recv", "--out", o, "--once", "--listen", "198.18.0.9"],
            &[],
        );
        let warning = err.lines().next().unwrap_or_default();
        assert!(
            warning.starts_with("rdmaxfer: warning: recv accepts files from any sender")
                && warning.contains("198.18.0.9")
                && warning.contains("--token-file"),
            "{err}"
        );
    }
    let (_, _, err) = run_env(&["recv", "--out", o, "--once"], &[("RDMAXFER_TOKEN", "t")]);
    assert!(!err.contains("warning"), "{err}");
}

#[test]
fn verbosity_and_the_environment_are_in_the_help() {
    let out = Command::new(env!("CARGO_BIN_EXE_rdmaxfer"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in ["-v, --verbose", "RDMAXFER_LOG", "RDMAXFER_TOKEN"] {
        assert!(help.contains(needle), "{needle}: {help}");
    }
    // -v counts, anywhere on the line.
    let p = parsed(&["send", "-vv", "f", "h"]).unwrap();
    assert!(p.contains("verbose: 2"), "{p}");
    let p = parsed(&["devices", "-v"]).unwrap();
    assert!(p.contains("verbose: 1"), "{p}");
}

/// `rdmaxfer --help` lists the commands, and each one's own help opens with the line the list
/// gives it (its options are built only when it is given, and no other text may take that
/// line's place), with `-v` among its options.
#[test]
fn help_lists_the_commands_and_each_ones_help_opens_with_its_line() {
    let (ok, help, _) = run(&["--help"]);
    assert!(ok);
    assert!(
        help.contains("devices") && help.contains("loopback"),
        "{help}"
    );
    let listed: Vec<(String, String)> = help
        .split_once("Commands:\n")
        .expect("a Commands: section")
        .1
        .lines()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.trim().split_once(char::is_whitespace))
        .map(|(name, about)| (name.to_string(), about.trim().to_string()))
        .filter(|(name, _)| name != "help")
        .collect();
    assert!(listed.len() >= 10, "{help}");
    for (name, about) in &listed {
        let (ok, sub, _) = run(&[name.as_str(), "--help"]);
        assert!(ok, "{name} --help");
        assert_eq!(
            sub.lines().next(),
            Some(about.as_str()),
            "{name} --help:\n{sub}"
        );
        assert!(sub.contains("-v, --verbose"), "{name} --help:\n{sub}");
    }
}

/// Standard output whose reader is gone (`rdmaxfer … | head -1`): the write end of a pipe
/// whose read end was closed, made by a `true` that exited without reading.
fn broken_pipe() -> std::process::Stdio {
    let mut reader = Command::new("true")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let write_end = reader.stdin.take().unwrap();
    assert!(reader.wait().unwrap().success());
    write_end.into()
}

#[test]
fn a_reader_gone_from_standard_output_is_no_panic_and_no_failure() {
    let out = Command::new(env!("CARGO_BIN_EXE_rdmaxfer"))
        .args(["completions", "bash"])
        .stdout(broken_pipe())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(stderr.is_empty(), "{stderr}");
}

#[test]
fn another_write_error_on_standard_output_is_said_and_fails_the_command() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rdmaxfer"))
        .args(["completions", "bash"])
        .stdout(full)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr
            .matches("rdmaxfer: writing to standard output: ")
            .count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
}
