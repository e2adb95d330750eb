//! The rdmaxfer command-line tool.
fn main() {}
