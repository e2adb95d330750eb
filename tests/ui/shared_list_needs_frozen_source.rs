// A lean post list lends one source to many work requests at once, and the queue keeps only a
// clone of it per entry: only a frozen (read-only) SharedBuf can be that source, never a
// LocalBuf its owner could still write while the list is in flight.
use rdmaxfer::verbs::{LocalBuf, SendOp, SharedPost};

fn misuse(b: &LocalBuf, op: SendOp) -> SharedPost<'_> {
    SharedPost {
        src: b,
        off: 0,
        len: 64,
        n: 4,
        first: op,
        rest: op,
    }
}

fn main() {}
