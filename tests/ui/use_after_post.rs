// A buffer moves into the queue pair when posted: it cannot be read or written until the
// completion hands it back.
use rdmaxfer::verbs::{LocalBuf, QueuePair, SendRequest, Sge};

fn misuse(qp: &QueuePair, mut buf: LocalBuf) {
    qp.post_send(SendRequest::send(1, [Sge::new(buf)])).unwrap();
    buf[0] = 1;
}

fn main() {}
