//! Device tests of the CLI (rxe0, in the guest): `rdmaxfer devices` and `rdmaxfer loopback`.

use std::process::Command;

use crate::common;

fn rdmaxfer(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(common::bin()).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn devices_json_describes_rxe0() {
    let (ok, out, err) = rdmaxfer(&["devices", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    let dev = v
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "rxe0")
        .expect("rxe0 listed");
    let port = &dev["ports"][0];
    assert_eq!(port["port"], 1);
    assert_eq!(port["active"], true);
    assert_eq!(port["link_layer"], "Ethernet");
    let gid1 = port["gids"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["index"] == 1)
        .expect("GID index 1");
    assert_eq!(gid1["gid"], "0000:0000:0000:0000:0000:ffff:c612:0001");
    assert_eq!(gid1["type"], "RoCE v2");
    assert_eq!(gid1["netdev"], "rx0");
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn devices_text_lists_ports_and_gids() {
    let (ok, out, err) = rdmaxfer(&["devices"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("rxe0:") && out.contains("port 1: active"),
        "{out}"
    );
    assert!(
        out.contains("GID[  1] 0000:0000:0000:0000:0000:ffff:c612:0001  RoCE v2"),
        "{out}"
    );
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn loopback_moves_and_verifies() {
    let (ok, out, err) = rdmaxfer(&["loopback", "-s", "2097152", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    assert_eq!(v["bytes"], 2097152);
    assert_eq!(v["device"], "rxe0");
    assert_eq!(v["written_hash"], v["read_hash"]);
    let (ok, out, _) = rdmaxfer(&["loopback"]);
    assert!(ok && out.contains("verified"), "{out}");
}

#[test]
#[ignore = "needs rxe0: run via ci/test.sh"]
fn loopback_bad_device_and_gid_are_clear_errors() {
    let (ok, _, err) = rdmaxfer(&["loopback", "-d", "nosuch0"]);
    assert!(!ok);
    assert!(
        err.contains("\"nosuch0\" not found") && err.contains("rxe0"),
        "{err}"
    );
    let (ok, _, err) = rdmaxfer(&["loopback", "-g", "77"]);
    assert!(!ok);
    assert!(err.contains("GID index 77"), "{err}");
}
