// Peer-writable memory is never handed out as a slice.
use rdmaxfer::verbs::ExposedRegion;

fn misuse(r: &ExposedRegion) -> &[u8] {
    &r[..]
}

fn main() {}
