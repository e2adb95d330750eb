//! Lists the RDMA devices, as a program that depends on the rdmaxfer library would.

fn main() {
    match rdmaxfer::verbs::device_names() {
        Ok(names) if names.is_empty() => println!("no RDMA devices"),
        Ok(names) => println!("RDMA devices: {}", names.join(", ")),
        Err(e) => println!("listing RDMA devices: {e}"),
    }
}
