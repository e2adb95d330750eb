// A slice borrowed from a buffer cannot outlive posting that buffer.
use rdmaxfer::verbs::{LocalBuf, QueuePair, Sge};

fn misuse(qp: &QueuePair, buf: LocalBuf) -> u8 {
    let view: &[u8] = &buf;
    qp.post_recv(1, [Sge::new(buf)]).unwrap();
    view[0]
}

fn main() {}
