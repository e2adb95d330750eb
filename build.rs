//! Generates the rdma-core FFI (bindgen over `wrapper.h`) and compiles the C shim (`csrc/`).
//! (The C library, with its SONAME, is built by the `librdmaxfer` package.)
//!
//! Headers and libraries come from pkg-config (`libibverbs`, `librdmacm`), or from
//! `RDMA_CORE_PREFIX` (`$PREFIX/include`, `$PREFIX/lib`) for a custom rdma-core build.

use std::env;
use std::path::PathBuf;

/// The pinned rdma-core release: Debian bookworm's 44.0-2 ships libibverbs 1.14.44.
const MIN_IBVERBS: &str = "1.14.44";
const MIN_RDMACM: &str = "1.3.44";

fn main() {
    for f in ["wrapper.h", "csrc/shim.c", "csrc/shim.h", "build.rs"] {
        println!("cargo:rerun-if-changed={f}");
    }
    for v in [
        "RDMA_CORE_PREFIX",
        "PKG_CONFIG_PATH",
        "LIBCLANG_PATH",
        "BINDGEN_EXTRA_CLANG_ARGS",
    ] {
        println!("cargo:rerun-if-env-changed={v}");
    }

    let include_dirs = match env::var_os("RDMA_CORE_PREFIX") {
        Some(prefix) => {
            let prefix = PathBuf::from(prefix);
            for lib in ["lib", "lib64", "lib/x86_64-linux-gnu"] {
                println!(
                    "cargo:rustc-link-search=native={}",
                    prefix.join(lib).display()
                );
            }
            println!("cargo:rustc-link-lib=dylib=ibverbs");
            println!("cargo:rustc-link-lib=dylib=rdmacm");
            vec![prefix.join("include")]
        }
        None => {
            let mut dirs = Vec::new();
            for (name, min) in [("libibverbs", MIN_IBVERBS), ("librdmacm", MIN_RDMACM)] {
                match pkg_config::Config::new().atleast_version(min).probe(name) {
                    Ok(lib) => dirs.extend(lib.include_paths),
                    Err(e) => panic!(
                        "\n\nrdmaxfer needs {name} >= {min} (rdma-core 44.0 or newer; pinned: Debian \
                         bookworm rdma-core 44.0-2).\npkg-config said: {e}\nInstall it with \
                         `apt-get install libibverbs-dev librdmacm-dev` (or run ci/setup.sh), or point \
                         RDMA_CORE_PREFIX at an rdma-core install.\n"
                    ),
                }
            }
            dirs
        }
    };

    let mut shim = cc::Build::new();
    shim.file("csrc/shim.c")
        .flag("-Wall")
        .flag("-Wextra")
        .flag("-Werror")
        .warnings(true);
    for d in &include_dirs {
        shim.include(d);
    }
    shim.compile("rdmaxfer_shim");

    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let mut b = bindgen::Builder::default()
        .header("wrapper.h")
        .allowlist_function("ibv_.*|rdma_.*|shim_.*")
        .allowlist_type("ibv_.*|rdma_.*|shim_.*")
        .allowlist_var("IBV_.*|RDMA_.*|SHIM_.*")
        // C value enums stay integers; flag enums become bitfield newtypes.
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .bitfield_enum("ibv_access_flags|ibv_send_flags|ibv_qp_attr_mask|ibv_wc_flags")
        .derive_default(true)
        .derive_debug(true)
        .layout_tests(true)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for d in &include_dirs {
        b = b.clang_arg(format!("-I{}", d.display()));
    }
    b.generate()
        .expect("bindgen failed on wrapper.h (is libclang-dev installed?)")
        .write_to_file(out.join("sys.rs"))
        .expect("writing OUT_DIR/sys.rs");

    // Providers (librxe etc.) are dlopen()ed by libibverbs at run time: link dynamically.
    println!("cargo:rustc-link-lib=dylib=ibverbs");
    println!("cargo:rustc-link-lib=dylib=rdmacm");
}
