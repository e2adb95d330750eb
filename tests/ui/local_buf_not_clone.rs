// An exclusive buffer cannot be duplicated (a copy could be touched while the original is posted).
use rdmaxfer::verbs::LocalBuf;

fn misuse(b: &LocalBuf) -> LocalBuf {
    b.clone()
}

fn main() {}
