// A buffer lent to an in-flight async RDMA operation cannot be touched: the future owns it
// (and, once posted, the queue does), so neither the buffer nor a slice kept from before can
// be used until the operation gives it back.
use rdmaxfer::aio::AsyncEndpoint;
use rdmaxfer::verbs::{LocalBuf, RemoteRegion};

async fn touch_while_in_flight(ep: &mut AsyncEndpoint, mut buf: LocalBuf, remote: RemoteRegion) {
    let write = ep.write(buf, 0, &remote, 0, 8);
    buf[0] = 1;
    let _ = write.await;
}

async fn keep_a_slice(ep: &mut AsyncEndpoint, mut buf: LocalBuf, remote: RemoteRegion) {
    let kept = &mut buf[..];
    let read = ep.read(buf, 0, &remote, 0, 8);
    kept[0] = 1;
    let _ = read.await;
}

fn main() {
    let _ = touch_while_in_flight;
    let _ = keep_a_slice;
}
