//! GPU bundles (`--features gpu-dl`): the binary finds its shared libraries
//! (libllama, libggml*, the backend modules) in its own folder.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_GPU_DL").is_some() {
        println!("cargo:rustc-link-arg-bins=-Wl,--disable-new-dtags,-rpath,$ORIGIN");
    }
}
