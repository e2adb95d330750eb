// A frozen (shared) buffer may be posted many times at once as a source, so it is read-only.
use rdmaxfer::verbs::SharedBuf;

fn misuse(b: &mut SharedBuf) {
    b[0] = 1;
}

fn main() {}
