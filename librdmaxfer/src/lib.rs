//! librdmaxfer.so: the `rdmaxfer_*` exports of the rdmaxfer crate's C API (its feature `capi`),
//! and nothing else. The header is `include/rdmaxfer.h`; see the crate's README, "C API".
#![forbid(unsafe_code)]

// Links the crate, whose `#[no_mangle]` exports become this library's.
use rdmaxfer as _;
