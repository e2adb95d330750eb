//! AFL++ target `remote_region`: see `rdmaxfer_fuzz::check_remote_region` and docs/fuzzing.md.

fn main() {
    afl::fuzz!(|data: &[u8]| rdmaxfer_fuzz::check_remote_region(data));
}
