//! AFL++ target `file_session`: see `rdmaxfer_fuzz::check_file_session` and docs/fuzzing.md.

fn main() {
    afl::fuzz!(|data: &[u8]| rdmaxfer_fuzz::check_file_session(data));
}
