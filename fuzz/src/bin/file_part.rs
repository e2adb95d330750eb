//! AFL++ target `file_part`: see `rdmaxfer_fuzz::check_file_part` and docs/fuzzing.md.

fn main() {
    afl::fuzz!(|data: &[u8]| rdmaxfer_fuzz::check_file_part(data));
}
