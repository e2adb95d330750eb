//! AFL++ target `pingpong`: see `rdmaxfer_fuzz::check_pingpong` and docs/fuzzing.md.

fn main() {
    afl::fuzz!(|data: &[u8]| rdmaxfer_fuzz::check_pingpong(data));
}
