//! Device tests (rxe0, in the guest) of `rdmaxfer cp`: the other side started over ssh (an sshd
//! from Debian's openssh-server with key authentication, on 127.0.0.1 in the guest), the data
//! over RDMA. Push and pull of a tree, re-runs, a dry run, where the token never shows, and
//! what is left running after a copy that succeeds, one whose ssh is killed and one whose
//! local side gets SIGKILL.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::common::{self, bin, need_rxe0, pseudo_random, Proc};
use std::os::unix::fs::PermissionsExt as _;

const T: Duration = Duration::from_secs(120);
/// The copies' step deadline (`--timeout`): what is left running must be gone within it.
const STEP: u64 = 5;

/// The sshd of this test binary: its port and the client key.
struct Sshd {
    port: u16,
    dir: PathBuf,
}

fn sshd() -> &'static Sshd {
    static SSHD: OnceLock<Sshd> = OnceLock::new();
    SSHD.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("rdmaxfer-sshd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let port = common::port();
        let run = |prog: &str, args: &[&str]| {
            let o = Command::new(prog).args(args).output().unwrap_or_else(|e| {
                panic!("{prog}: {e} (openssh-server and openssh-client: ci/setup.sh)")
            });
            assert!(
                o.status.success(),
                "{prog} {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        };
        let d = |f: &str| dir.join(f).to_str().unwrap().to_string();
        for key in ["host_key", "id"] {
            if !dir.join(key).exists() {
                run(
                    "ssh-keygen",
                    &["-q", "-t", "ed25519", "-N", "", "-f", &d(key)],
                );
            }
        }
        std::fs::copy(d("id.pub"), d("authorized_keys")).unwrap();
        // Privilege separation wants this directory (root's, not group or world writable).
        std::fs::create_dir_all("/run/sshd").unwrap();
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {}\nAuthorizedKeysFile {}\n\
             PermitRootLogin prohibit-password\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nUsePAM yes\nStrictModes no\nPidFile {}\n\
             LogLevel DEBUG\n",
            d("host_key"),
            d("authorized_keys"),
            d("sshd.pid")
        );
        std::fs::write(d("sshd_config"), config).unwrap();
        // Every command over ssh runs through root's shell, which reads ~/.bashrc: the guest's is
        // the host's (its root is shared), whose pyenv set-up takes some 9 s under emulation, of
        // a copy's 14 s of ssh. Not what these tests are about: sshd runs in a mount namespace of
        // its own with an empty file bound over it (the rest of the guest keeps the real one).
        std::fs::write(d("bashrc"), "").unwrap();
        let script = format!(
            "if [ -f \"$HOME/.bashrc\" ]; then mount --bind {} \"$HOME/.bashrc\"; fi && \
             exec /usr/sbin/sshd -f {} -E {}",
            d("bashrc"),
            d("sshd_config"),
            d("sshd.log")
        );
        run(
            "unshare",
            &["--mount", "--propagation", "private", "sh", "-c", &script],
        );
        let s = Sshd {
            port,
            dir: dir.clone(),
        };
        // Ready when a command runs through it.
        let t = Instant::now();
        loop {
            let o = Command::new("ssh")
                .args(s.rsh_words())
                .arg("127.0.0.1")
                .arg("true")
                .output()
                .unwrap();
            if o.status.success() {
                break;
            }
            if t.elapsed() > Duration::from_secs(30) {
                let log = std::fs::read_to_string(dir.join("sshd.log")).unwrap_or_default();
                panic!(
                    "sshd did not let the key in: {}\nsshd.log:\n{log}",
                    String::from_utf8_lossy(&o.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        s
    })
}

impl Sshd {
    fn rsh_words(&self) -> Vec<String> {
        let key = self.dir.join("id");
        [
            "-p",
            &self.port.to_string(),
            "-i",
            key.to_str().unwrap(),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "LogLevel=ERROR",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// The `-e` of cp.
    fn rsh(&self) -> String {
        format!("ssh {}", self.rsh_words().join(" "))
    }
}

/// The remote side's program: the binary under test, with the memlock limit lifted (a login
/// over ssh gets pam_limits' 8 MiB; operators raise it in limits.conf).
fn remote_path() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        let p = sshd().dir.join("rdmaxfer-remote");
        std::fs::write(
            &p,
            format!("#!/bin/sh\nulimit -l unlimited\nexec {} \"$@\"\n", bin()),
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p.to_str().unwrap().to_string()
    })
}

/// `rdmaxfer cp -e SSH --remote-path BIN --timeout STEP ARGS...`.
fn cp(args: &[&str], env: &[(&str, &str)]) -> Proc {
    let rsh = sshd().rsh();
    let step = STEP.to_string();
    let bin = remote_path();
    let mut a = vec!["cp", "-e", &rsh, "--remote-path", bin, "--timeout", &step];
    a.extend_from_slice(args);
    common::spawn_env("cp", &a, env)
}

/// Relative name → (kind, contents) of everything below `root`.
fn tree(root: &Path) -> BTreeMap<String, (char, Vec<u8>)> {
    let what = |p: &Path, m: &std::fs::Metadata| {
        if m.is_dir() {
            ('d', Vec::new())
        } else if m.file_type().is_symlink() {
            let target = std::fs::read_link(p).unwrap();
            ('l', target.into_os_string().into_encoded_bytes())
        } else {
            ('f', std::fs::read(p).unwrap())
        }
    };
    common::entries(root)
        .into_iter()
        .map(|(rel, p, m)| (rel, what(&p, &m)))
        .collect()
}

/// A tree `t` below `dir`: small files in two levels, a 3 MiB file, a symlink, an empty dir.
fn make_tree(dir: &Path) -> PathBuf {
    let t = dir.join("t");
    for (i, sub) in ["", "a", "a/b"].iter().enumerate() {
        let d = t.join(sub);
        std::fs::create_dir_all(&d).unwrap();
        for k in 0..5u64 {
            let len = usize::try_from(k * 1000 + 1).unwrap();
            std::fs::write(
                d.join(format!("f{k}")),
                pseudo_random(len, k + 10 * i as u64),
            )
            .unwrap();
        }
    }
    std::fs::write(t.join("a/big"), pseudo_random(3 << 20, 99)).unwrap();
    std::os::unix::fs::symlink("f1", t.join("link")).unwrap();
    std::fs::create_dir(t.join("empty")).unwrap();
    t
}

/// The entries a JSON summary reports sent ("ok").
fn sent(j: &serde_json::Value) -> usize {
    let files = j["files"]
        .as_array()
        .unwrap_or_else(|| panic!("no files: {j}"));
    files.iter().filter(|f| f["result"] == "ok").count()
}

/// The cp-remote processes whose arguments contain `mark`.
fn remotes(mark: &str) -> Vec<String> {
    let o = Command::new("pgrep")
        .args(["-af", "cp-remote"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.contains(mark) && !l.contains("pgrep"))
        .map(String::from)
        .collect()
}

/// Waits (bounded by the step deadline and a margin) until no cp-remote process names `mark`.
fn none_left(mark: &str, what: &str) {
    let within = Duration::from_secs(STEP * 2 + 5);
    let t = Instant::now();
    loop {
        let left = remotes(mark);
        if left.is_empty() {
            return;
        }
        assert!(
            t.elapsed() < within,
            "{what}: still running after {within:?}: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "needs rxe0 and sshd: run by ci/test.sh in the guest"]
fn push_and_pull_a_tree_then_reruns_skip_everything() {
    need_rxe0();
    let tmp = tempfile::tempdir().unwrap();
    let src = make_tree(tmp.path());
    let there = tmp.path().join("there");
    let remote = format!("root@127.0.0.1:{}", there.display());

    let d = cp(&["--json", src.to_str().unwrap(), &remote], &[]).finish(T);
    d.ok("cp push");
    let j = d.one_json();
    assert_eq!(j["files_failed"], 0, "{j}");
    assert_eq!(
        tree(&there.join("t")),
        tree(&src),
        "the pushed tree differs"
    );
    none_left(there.to_str().unwrap(), "after a push that succeeded");

    let again = cp(&["--json", src.to_str().unwrap(), &remote], &[]).finish(T);
    again.ok("cp push again");
    let j = again.one_json();
    assert_eq!(sent(&j), 0, "a re-run sends nothing: {j}");
    assert!(j["files_skipped"].as_u64().unwrap() > 15, "{j}");

    let back = tmp.path().join("back");
    let from = format!("127.0.0.1:{}", there.join("t").display());
    let d = cp(&[&from, back.to_str().unwrap()], &[]).finish(T);
    d.ok("cp pull");
    assert!(
        d.out.contains("ok      t/a/big"),
        "the remote sender's lines are shown:\n{}",
        d.out
    );
    assert_eq!(tree(&back.join("t")), tree(&src), "the pulled tree differs");
    let again = cp(&["--json", &from, back.to_str().unwrap()], &[]).finish(T);
    again.ok("cp pull again");
    let j = again.one_json();
    assert_eq!(sent(&j), 0, "a re-run of the pull sends nothing: {j}");
    none_left(there.to_str().unwrap(), "after a pull that succeeded");
}

#[test]
#[ignore = "needs rxe0 and sshd: run by ci/test.sh in the guest"]
fn a_pull_over_two_streams_and_a_dry_run_push_that_writes_nothing() {
    need_rxe0();
    let tmp = tempfile::tempdir().unwrap();
    let src = make_tree(tmp.path());
    let back = tmp.path().join("back");
    let from = format!("127.0.0.1:{}", src.display());
    let d = cp(
        &["--json", "--streams", "2", &from, back.to_str().unwrap()],
        &[],
    )
    .finish(T);
    d.ok("cp pull --streams 2");
    assert_eq!(d.one_json()["streams"], 2, "{}", d.out);
    assert_eq!(tree(&back.join("t")), tree(&src));

    let there = tmp.path().join("there");
    std::fs::create_dir(&there).unwrap();
    let remote = format!("127.0.0.1:{}", there.display());
    let d = cp(&["-n", src.to_str().unwrap(), &remote], &[]).finish(T);
    d.ok("cp --dry-run");
    assert!(
        d.out.contains("would create t/a/big (3145728 bytes)"),
        "{}",
        d.out
    );
    assert!(
        tree(&there).is_empty(),
        "a dry run wrote {:?}",
        tree(&there)
    );
}

#[test]
#[ignore = "needs rxe0 and sshd: run by ci/test.sh in the guest"]
fn the_token_shows_in_no_process_arguments_or_environment() {
    need_rxe0();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("f"), pseudo_random(4 << 20, 5)).unwrap();
    let there = tmp.path().join("there");
    let token_file = tmp.path().join("token");
    let slow = [
        "--chunk",
        "16K",
        "--slots",
        "1",
        "--streams",
        "1",
        "--bwlimit",
        "1M",
    ];
    let remote = format!("127.0.0.1:{}", there.display());
    let f = tmp.path().join("f");
    let mut args = slow.to_vec();
    args.extend([f.to_str().unwrap(), remote.as_str()]);
    let mut c = cp(
        &args,
        &[("RDMAXFER_TEST_CP_TOKEN_OUT", token_file.to_str().unwrap())],
    );
    // The hook's write creates the file before it fills it: wait for the whole token.
    common::wait_until("the token hook", T, || {
        std::fs::metadata(&token_file).is_ok_and(|m| m.len() == 64)
    });
    let token = std::fs::read(&token_file).unwrap();
    assert_eq!(token.len(), 64);
    let mut looked = 0;
    for e in std::fs::read_dir("/proc").unwrap() {
        let p = e.unwrap().path();
        for what in ["cmdline", "environ"] {
            // Processes may end meanwhile; what cannot be read is not shown either.
            if let Ok(bytes) = std::fs::read(p.join(what)) {
                looked += 1;
                assert!(
                    !bytes.windows(token.len()).any(|w| w == token),
                    "the token shows in {}",
                    p.join(what).display()
                );
            }
        }
    }
    assert!(
        !remotes(there.to_str().unwrap()).is_empty(),
        "the remote side runs while we look"
    );
    assert!(c.running(), "the copy runs while we look:\n{}", c.dump());
    assert!(looked > 20, "looked at {looked} files only");
    c.finish(T).ok("the slow copy");
    assert_eq!(
        std::fs::read(there.join("f")).unwrap(),
        std::fs::read(&f).unwrap()
    );
}

/// Starts a slow push, waits until its remote side runs, applies `kill` to the local cp, and
/// checks nothing is left running and nothing partial is left on the remote side.
fn killed_mid_copy(kill: impl FnOnce(Proc)) {
    need_rxe0();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("f"), pseudo_random(8 << 20, 6)).unwrap();
    let there = tmp.path().join("there");
    let remote = format!("127.0.0.1:{}", there.display());
    let f = tmp.path().join("f");
    let c = cp(
        &[
            "--chunk",
            "16K",
            "--slots",
            "1",
            "--streams",
            "1",
            "--bwlimit",
            "1M",
            f.to_str().unwrap(),
            &remote,
        ],
        &[],
    );
    let mark = there.to_str().unwrap().to_string();
    common::wait_until("the remote side", T, || !remotes(&mark).is_empty());
    common::wait_until("data arriving", T, || {
        there.exists() && common::has_temp(&there)
    });
    kill(c);
    let t = Instant::now();
    none_left(&mark, "the remote side");
    let ssh_left = || {
        let o = Command::new("pgrep")
            .args(["-af", "ssh -p"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.contains(&mark))
            .count()
    };
    common::wait_until("ssh ending", Duration::from_secs(STEP * 2), || {
        ssh_left() == 0
    });
    assert!(
        !common::has_temp(&there),
        "a partial file is left on the remote side"
    );
    eprintln!("everything ended {:?} after the kill", t.elapsed());
}

#[test]
#[ignore = "needs rxe0 and sshd: run by ci/test.sh in the guest"]
fn a_copy_whose_ssh_is_killed_leaves_nothing_running() {
    killed_mid_copy(|c| {
        let o = Command::new("pgrep")
            .args(["-P", &c.pid().to_string(), "ssh"])
            .output()
            .unwrap();
        let pid = String::from_utf8_lossy(&o.stdout).trim().to_string();
        assert!(!pid.is_empty(), "no ssh child of cp");
        assert!(Command::new("kill")
            .args(["-9", &pid])
            .status()
            .unwrap()
            .success());
        let d = c.finish(T);
        d.failed("cp whose ssh was killed");
        assert!(
            d.elapsed < Duration::from_secs(STEP * 3),
            "cp took {:?} to end",
            d.elapsed
        );
    });
}

#[test]
#[ignore = "needs rxe0 and sshd: run by ci/test.sh in the guest"]
fn a_copy_whose_local_side_is_killed_leaves_nothing_running() {
    killed_mid_copy(|mut c| c.kill());
}

#[test]
#[ignore = "needs rxe0 and sshd: run by ci/test.sh in the guest"]
fn delete_removes_only_inside_the_copied_tree_and_spares_excluded_names() {
    need_rxe0();
    let tmp = tempfile::tempdir().unwrap();
    let src = make_tree(tmp.path());
    let there = tmp.path().join("there");
    let remote = format!("127.0.0.1:{}", there.display());
    cp(&[src.to_str().unwrap(), &remote], &[])
        .finish(T)
        .ok("first copy");
    // Extras on the receiving side: one in the tree, one excluded, one beside the tree.
    std::fs::write(there.join("t/a/extra"), b"x").unwrap();
    std::fs::write(there.join("t/keep.log"), b"x").unwrap();
    std::fs::write(there.join("beside"), b"x").unwrap();
    let excl = ["--exclude", "*.log"];
    let mut args = vec!["-n", "--delete"];
    args.extend(excl);
    args.extend([src.to_str().unwrap(), remote.as_str()]);
    let d = cp(&args, &[]).finish(T);
    d.ok("cp -n --delete");
    assert!(d.out.contains("would delete t/a/extra"), "{}", d.out);
    assert!(there.join("t/a/extra").exists(), "a dry run deleted");
    let mut args = vec!["--json", "--delete"];
    args.extend(excl);
    args.extend([src.to_str().unwrap(), remote.as_str()]);
    let d = cp(&args, &[]).finish(T);
    d.ok("cp --delete");
    assert_eq!(d.one_json()["files_deleted"], 1, "{}", d.out);
    assert!(
        !there.join("t/a/extra").exists(),
        "the extra file is still there"
    );
    assert!(
        there.join("t/keep.log").exists(),
        "an excluded name was deleted"
    );
    assert!(
        there.join("beside").exists(),
        "a file beside the tree was deleted"
    );
    assert_eq!(tree(&there.join("t")).len(), tree(&src).len() + 1);
}
