//! Builds the C shim (variadic `spank_get_item`, the `slurm_*` loggers, the crash guard) into
//! the crate with `+whole-archive`, so its symbols reach every binary that links the crate, and
//! exports the SPANK API from this package's test binaries with `--dynamic-list`.
//!
//! A binary of another package that hosts plugins needs the same link argument in its own
//! build.rs (Cargo applies link arguments to the package that prints them only); this script
//! publishes the list's path as `DEP_DROVER_SPANK_DYNLIST` for them:
//! `println!("cargo:rustc-link-arg-bins=-Wl,--dynamic-list={}", env::var("DEP_DROVER_SPANK_DYNLIST")?)`.

use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let dynlist = manifest.join("spank.dynlist");
    println!("cargo:rerun-if-changed=csrc/shim.c");
    println!("cargo:rerun-if-changed=spank.dynlist");
    cc::Build::new()
        .file("csrc/shim.c")
        .flag_if_supported("-Wall")
        .flag_if_supported("-Wextra")
        .link_lib_modifier("+whole-archive")
        .compile("drover_spank_shim");
    println!("cargo:dynlist={}", dynlist.display());
    println!("cargo:rustc-link-arg-tests=-Wl,--dynamic-list={}", dynlist.display());
}
