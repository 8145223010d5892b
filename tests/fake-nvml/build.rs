//! Builds `c/fake_nvml.c` into `$OUT_DIR/libnvidia-ml.so.1` with the C compiler `cc` finds,
//! and hands its path to the crate as `DROVER_FAKE_NVML_LIB`.

use std::path::PathBuf;

fn main() {
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let lib = out_dir.join("libnvidia-ml.so.1");
    let compiler = cc::Build::new().get_compiler();
    let status = compiler
        .to_command()
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&lib)
        .arg("c/fake_nvml.c")
        .status()
        .expect("running the C compiler");
    assert!(status.success(), "building the fake libnvidia-ml.so failed");
    println!("cargo:rerun-if-changed=c/fake_nvml.c");
    println!("cargo:rustc-env=DROVER_FAKE_NVML_LIB={}", lib.display());
}
