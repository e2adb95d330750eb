//! AFL++ target `oob`: see `rdmaxfer_fuzz::check_oob` and docs/fuzzing.md.

fn main() {
    afl::fuzz!(|data: &[u8]| rdmaxfer_fuzz::check_oob(data));
}
