//! AFL++ target `onesided`: see `rdmaxfer_fuzz::check_onesided` and docs/fuzzing.md.

fn main() {
    afl::fuzz!(|data: &[u8]| rdmaxfer_fuzz::check_onesided(data));
}
