// Buffers returned by a completion are owned values; a second take is a use of a moved value.
use rdmaxfer::verbs::Completion;

fn misuse(c: Completion) {
    let a = c.into_local_bufs();
    let b = c.into_local_bufs();
    drop((a, b));
}

fn main() {}
