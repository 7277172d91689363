//! `saguin --licenses` prints the licences of what is compiled in, and
//! what it prints is what the crates Cargo.lock pins say now.

use std::path::Path;
use std::process::Command;

const FILE: &str = "packaging/licenses.txt";

#[test]
fn the_binary_prints_the_licences_file() {
    let output = Command::new(env!("CARGO_BIN_EXE_saguin"))
        .arg("--licenses")
        .output()
        .unwrap();
    assert!(output.status.success());
    let file = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(FILE)).unwrap();
    assert_eq!(String::from_utf8(output.stdout).unwrap(), file);
    // Each crate the broker is built with has its line, ring's C and
    // assembly under its own terms among them.
    for crate_line in ["redb ", "rustls ", "ring ", "miniz_oxide ", "smol "] {
        assert!(
            file.lines().any(|l| l.starts_with(crate_line)),
            "no line for {crate_line}"
        );
    }
}

/// Adding, removing or updating a crate without writing the file again
/// is caught here: the generator, asked to check, writes it afresh from
/// `cargo metadata` and compares.
#[test]
fn the_licences_file_is_what_the_crates_compiled_in_say() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new("python3")
        .arg(root.join("packaging/licenses.py"))
        .arg("--check")
        .env("CARGO", env!("CARGO"))
        .current_dir(root)
        .output()
        .expect("python3 runs packaging/licenses.py");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
