//! Host tests of what `rdmaxfer` generates from its own argument definitions (shell completions,
//! manual pages), of `ci/install.sh` into a temporary PREFIX, and of the exit statuses and
//! messages that need no RDMA device.

use std::path::Path;
use std::process::{Command, Output};

fn rdmaxfer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rdmaxfer"))
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The subcommands users see (the hidden `completions` and `man` are not among them).
const SUBCOMMANDS: [&str; 9] = [
    "devices", "loopback", "pingpong", "expose", "write", "read", "bench", "send", "recv",
];

#[test]
fn completions_name_every_subcommand_and_the_file_options() {
    for shell in ["bash", "zsh", "fish"] {
        let out = rdmaxfer(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        for sub in SUBCOMMANDS {
            assert!(script.contains(sub), "{shell} completion lacks {sub}");
        }
        for opt in ["max-size", "resume", "quiet"] {
            assert!(script.contains(opt), "{shell} completion lacks --{opt}");
        }
    }
    let bash = text(&rdmaxfer(&["completions", "bash"]).stdout);
    assert!(bash.contains("complete -F _rdmaxfer"), "{bash}");
    let bad = rdmaxfer(&["completions", "tcsh"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));
}

#[test]
fn man_writes_one_page_per_subcommand_with_the_exit_statuses() {
    let dir = tempfile::tempdir().unwrap();
    let out = rdmaxfer(&["man", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let page = |name: &str| {
        std::fs::read_to_string(dir.path().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let main = page("rdmaxfer.1");
    assert!(
        main.starts_with(".ie") || main.contains(".TH rdmaxfer"),
        "{main}"
    );
    assert!(
        main.contains("23") && main.contains("partial transfer"),
        "{main}"
    );
    for sub in SUBCOMMANDS {
        let p = page(&format!("rdmaxfer-{sub}.1"));
        assert!(p.contains(&format!(".TH rdmaxfer-{sub}")), "{sub}: {p}");
    }
    assert!(page("rdmaxfer-recv.1").contains("max\\-size"));
    assert!(
        !dir.path().join("rdmaxfer-completions.1").exists(),
        "hidden subcommands get no page"
    );
}

fn files_below(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = walk(dir)
        .iter()
        .map(|p| p.strip_prefix(dir).unwrap().to_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn install_puts_the_tool_library_header_completions_and_man_pages_under_prefix() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let prefix = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg(root.join("ci/install.sh"))
        .current_dir(root)
        .env("PREFIX", prefix.path())
        // The dev profile: the test must not wait for a release (LTO) build.
        .env("RDMAXFER_PROFILE", "dev")
        // The features this test was built with: librdmaxfer.rlib has one name whatever the
        // features, and the doc-tests that run after this test link it.
        .env(
            "RDMAXFER_FEATURES",
            if cfg!(feature = "tokio") { "tokio" } else { "" },
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ci/install.sh failed:\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let got = files_below(prefix.path());
    for want in [
        "bin/rdmaxfer",
        "include/rdmaxfer.h",
        "lib/librdmaxfer.so",
        // The SONAME's link: for 0.x, a minor release is a new ABI.
        "lib/librdmaxfer.so.0.1",
        "lib/pkgconfig/rdmaxfer.pc",
        "share/bash-completion/completions/rdmaxfer",
        "share/zsh/site-functions/_rdmaxfer",
        "share/fish/vendor_completions.d/rdmaxfer.fish",
        "share/man/man1/rdmaxfer.1",
        "share/man/man1/rdmaxfer-send.1",
        "share/man/man1/rdmaxfer-recv.1",
    ] {
        assert!(got.iter().any(|g| g == want), "{want} missing in {got:?}");
    }
    // The installed tool runs and is the one built here.
    let v = Command::new(prefix.path().join("bin/rdmaxfer"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(
        text(&v.stdout).contains(env!("CARGO_PKG_VERSION")),
        "{}",
        text(&v.stdout)
    );
    let zsh =
        std::fs::read_to_string(prefix.path().join("share/zsh/site-functions/_rdmaxfer")).unwrap();
    assert!(zsh.starts_with("#compdef rdmaxfer"), "{zsh}");
    // A C program built with the .pc runs without LD_LIBRARY_PATH (the .pc gives an rpath).
    let src = prefix.path().join("v.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <rdmaxfer.h>\n\
         int main(void) { printf(\"%s %s\\n\", rdmaxfer_version(), rdmaxfer_strerror(RDMAXFER_ERR_AGAIN)); return 0; }\n",
    )
    .unwrap();
    let pc = prefix.path().join("lib/pkgconfig");
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "rdmaxfer"])
        .env("PKG_CONFIG_PATH", &pc)
        .output()
        .unwrap();
    let flags = text(&flags.stdout);
    assert!(flags.contains("-Wl,-rpath,"), "{flags}");
    let exe = prefix.path().join("v");
    let cc = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cc -std=c11 -Wall -Wextra -Werror -o '{}' '{}' {flags}",
            exe.display(),
            src.display()
        ))
        .output()
        .unwrap();
    assert!(cc.status.success(), "{}", text(&cc.stderr));
    let run = Command::new(&exe)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert_eq!(
        text(&run.stdout),
        format!(
            "{} nothing ready yet; try again when the descriptor is readable\n",
            env!("CARGO_PKG_VERSION")
        )
    );
}

#[test]
fn usage_errors_exit_2_and_say_so_once() {
    for args in [
        &["send"][..],
        &["send", "x", "h", "--bogus"],
        &["recv", "--out", "/", "--max-size", "10Q"],
        &["send", "a", "h", "--json", "-q"],
    ] {
        let out = rdmaxfer(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.matches("error:").count(), 1, "{args:?}: {err}");
    }
}

#[test]
fn a_failed_connection_says_nothing_about_files() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("a");
    std::fs::write(&f, b"x").unwrap();
    // No RDMA device on the host (or nobody listening on port 1 with one): the connection fails.
    let out = rdmaxfer(&["send", f.to_str().unwrap(), "127.0.0.1:1", "--timeout", "2"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stdout.is_empty(), "nothing about files: {stdout}");
    assert!(!stderr.contains("files"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one error line: {stderr}");
    assert!(
        stderr.starts_with("rdmaxfer: error: connecting"),
        "{stderr}"
    );
}
