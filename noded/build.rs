//! Exports the SPANK API (`spank_*`, `slurm_*` loggers) from the drover-noded binary, so the
//! plugins its job supervisors load find them: the list comes from drover-spank-compat.

fn main() {
    if let Ok(list) = std::env::var("DEP_DROVER_SPANK_DYNLIST") {
        println!("cargo:rustc-link-arg-bins=-Wl,--dynamic-list={list}");
    }
}
