//! Gives the C library its SONAME, by the rule in the README ("C API"): `librdmaxfer.so.MAJOR`,
//! but for 0.x, whose minor releases may break the ABI (as Cargo reads 0.x versions),
//! `librdmaxfer.so.0.MINOR`. ci/install.sh makes the links to it.

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("set by cargo");
    let minor = std::env::var("CARGO_PKG_VERSION_MINOR").expect("set by cargo");
    let abi = if major == "0" {
        format!("0.{minor}")
    } else {
        major
    };
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librdmaxfer.so.{abi}");
}
