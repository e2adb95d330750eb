//! Writes the seed corpora (`fuzz/seeds/<target>/<name>`) from the real encoders:
//! `cargo run --example gen_seeds` in `fuzz/`.

use std::path::Path;

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    // Recorded sessions too: their answers' timing varies, so they are made once, not compared.
    for (target, name, bytes) in rdmaxfer_fuzz::seeds()
        .into_iter()
        .chain(rdmaxfer_fuzz::session_seeds())
    {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(&name), &bytes)?;
        println!("{target}/{name}: {} bytes", bytes.len());
    }
    Ok(())
}
