//! AFL++ target `file_proto`: see `rdmaxfer_fuzz::check_file_proto` and docs/fuzzing.md.

fn main() {
    afl::fuzz!(|data: &[u8]| rdmaxfer_fuzz::check_file_proto(data));
}
