// A received message is lent from a slot of the endpoint's receive ring, which goes back to the
// device when the endpoint is used again: its bytes cannot be kept past the closure (copy them).
use rdmaxfer::xfer::endpoint::Endpoint;

fn misuse(ep: &mut Endpoint) -> u8 {
    let mut kept: &[u8] = &[];
    ep.recv_with(|m| kept = m.data).unwrap();
    ep.send(b"next").unwrap();
    kept[0]
}

fn main() {}
