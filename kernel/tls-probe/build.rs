//! Passes the boot stub's linker script to the probe's link.
fn main() {
    let linker_script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../boot/link.ld");
    println!("cargo:rerun-if-changed={}", linker_script.display());
    println!("cargo:rustc-link-arg-bins=-T{}", linker_script.display());
}
