//! AFL++ target `cm_handshake`: see `rdmaxfer_fuzz::check_cm_handshake` and docs/fuzzing.md.

fn main() {
    afl::fuzz!(|data: &[u8]| rdmaxfer_fuzz::check_cm_handshake(data));
}
