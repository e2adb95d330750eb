// Raw bindings are crate-private: user code cannot reach ibv_* functions.
fn main() {
    let _ = rdmaxfer::sys::ibv_get_device_list;
}
