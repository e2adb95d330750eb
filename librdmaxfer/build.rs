//! Gives the C library its SONAME, which carries the major version (ci/install.sh makes the
//! links to it).

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("set by cargo");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librdmaxfer.so.{major}");
}
