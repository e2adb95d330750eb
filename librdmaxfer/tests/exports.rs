//! The C library exports the C API and nothing else (`nm -D --defined-only`: only `rdmaxfer_*`
//! symbols), under the SONAME the version names (`librdmaxfer.so.0.MINOR` for 0.x, else
//! `librdmaxfer.so.MAJOR`).

use std::path::PathBuf;
use std::process::Command;

/// librdmaxfer_ffi.so as cargo built it for this test (next to it in `deps/`).
fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [deps, deps.parent().unwrap()]
        .iter()
        .map(|d| d.join("librdmaxfer_ffi.so"))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("librdmaxfer_ffi.so not found near {}", exe.display()))
}

fn run(prog: &str, args: &[&str]) -> String {
    let out = Command::new(prog).args(args).output().unwrap();
    assert!(out.status.success(), "{prog} {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn only_the_c_api_is_exported() {
    let lib = library();
    let nm = run("nm", &["-D", "--defined-only", lib.to_str().unwrap()]);
    let names: Vec<&str> = nm
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    let other: Vec<&&str> = names
        .iter()
        .filter(|n| !n.starts_with("rdmaxfer_"))
        .collect();
    assert!(other.is_empty(), "exported besides the C API: {other:?}");
    for f in [
        "rdmaxfer_version",
        "rdmaxfer_strerror",
        "rdmaxfer_config_new",
    ] {
        assert!(names.contains(&f), "{f} is not exported: {names:?}");
    }
}

#[test]
fn the_soname_names_the_abi_version() {
    let lib = library();
    let p = run("objdump", &["-p", lib.to_str().unwrap()]);
    let soname = p
        .lines()
        .find_map(|l| l.trim().strip_prefix("SONAME"))
        .map(str::trim);
    let (major, minor) = (
        env!("CARGO_PKG_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MINOR"),
    );
    let want = match major {
        "0" => format!("librdmaxfer.so.0.{minor}"),
        _ => format!("librdmaxfer.so.{major}"),
    };
    assert_eq!(soname, Some(want.as_str()), "{p}");
}
