//! Compiles the protos with protox (pure Rust), so no system `protoc` is needed. The descriptor
//! set is kept beside the generated code: the request checker walks every message with it.

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["grant_ledger/v1/authorizer.proto", "browser_runtime/v1/runtime.proto"];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let descriptors = protox::compile(files, ["."])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("descriptors.bin"), descriptors.encode_to_vec())?;
    let mut config = tonic_prost_build::Config::new();
    config.enable_type_names();
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Every request is checked against the field table before prost decodes it.
        .codec_path("crate::checked::CheckedCodec")
        .compile_fds_with_config(descriptors, config)?;
    Ok(())
}
