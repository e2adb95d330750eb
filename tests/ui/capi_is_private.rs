// The C API is reachable only through the C ABI: safe Rust cannot hand its exports (or the
// boundary's pointer helpers) an arbitrary pointer.
fn main() {
    let _ = rdmaxfer::capi::boundary::out::<u64>(16 as *mut u64, "o");
    let _ = rdmaxfer::capi::boundary::arg_bytes_mut(8 as *mut std::ffi::c_void, 4, "b");
    rdmaxfer::capi::config::rdmaxfer_config_free(std::ptr::dangling_mut());
}
