// A buffer moves into a post list when pushed (and into the queue pair when the list is posted):
// no slice of it can be kept across, and it cannot be touched until a completion hands it back.
use rdmaxfer::verbs::{LocalBuf, QueuePair, SendBatch, SendRequest, Sge};

fn misuse(qp: &QueuePair, batch: &mut SendBatch, buf: LocalBuf) {
    let view: &[u8] = &buf;
    batch.push(SendRequest::send(1, [Sge::new(buf)]));
    qp.post_send_batch(batch).unwrap();
    let _ = view[0];
}

fn main() {}
