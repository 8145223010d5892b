//! drover-noded: placeholder entry point until the node daemon lands.

fn main() {}
