//! Exports the SPANK API (`spank_*`, `slurm_*` loggers) from the drover binary, so the plugins
//! sbatch loads find them: the list comes from drover-spank-compat.

fn main() {
    if let Ok(list) = std::env::var("DEP_DROVER_SPANK_DYNLIST") {
        println!("cargo:rustc-link-arg-bins=-Wl,--dynamic-list={list}");
    }
}
