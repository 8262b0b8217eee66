//! Compiles tiktoken's `o200k_base` and `cl100k_base` into ready tables
//! (with the `tiktoken` feature): the vocabularies are taken from
//! tiktoken-rs, the same crate the tests hold the counts to, and written to
//! `OUT_DIR` in the layout of `src/select/bpe/table.rs`, which the library
//! reads in place with `include_bytes!`. Building tiktoken-rs's own
//! `CoreBPE` at run time took 0.1–0.8 s per process; reading these tables
//! takes nothing.

#[path = "src/select/bpe/table.rs"]
#[allow(dead_code)]
mod table;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=src/select/bpe/table.rs");
    #[cfg(feature = "tiktoken")]
    {
        let out =
            std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
        write_vocabulary(
            &out,
            "o200k_base",
            &tiktoken_rs::o200k_base().expect("o200k_base loads"),
        );
        write_vocabulary(
            &out,
            "cl100k_base",
            &tiktoken_rs::cl100k_base().expect("cl100k_base loads"),
        );
    }
}

/// Writes `NAME.tokens`, `NAME.offsets` and `NAME.slots` for the ordinary
/// tokens of `bpe`: ranks 0, 1, … up to the first rank that is a special
/// token or none at all (ordinary ranks are dense from 0 in both).
#[cfg(feature = "tiktoken")]
fn write_vocabulary(out: &std::path::Path, name: &str, bpe: &tiktoken_rs::CoreBPE) {
    let special: std::collections::HashSet<u32> = bpe
        .special_tokens()
        .into_iter()
        .flat_map(|s| bpe.encode_with_special_tokens(s))
        .collect();
    let tokens: Vec<Vec<u8>> = (0u32..)
        .take_while(|r| !special.contains(r))
        .map_while(|r| bpe.decode_bytes(&[r]).ok())
        .collect();
    assert!(
        tokens.len() > 50_000,
        "{name}: only {} ordinary tokens",
        tokens.len()
    );
    let mut bytes = Vec::new();
    let mut offsets = Vec::with_capacity((tokens.len() + 1) * 4);
    for t in &tokens {
        offsets.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        bytes.extend_from_slice(t);
    }
    offsets.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    let refs: Vec<&[u8]> = tokens.iter().map(Vec::as_slice).collect();
    let slots: Vec<u8> = table::build_slots(&refs)
        .into_iter()
        .flat_map(u32::to_le_bytes)
        .collect();
    for (ext, data) in [("tokens", &bytes), ("offsets", &offsets), ("slots", &slots)] {
        let path = out.join(format!("{name}.{ext}"));
        std::fs::write(&path, data).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }
}
