//! The `steward` binary's startup failures: one clear line, exit code != 0,
//! no panic, no hang.

use std::process::Command;
use std::time::Duration;

fn run(args: &[&str]) -> (i32, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_steward"))
        .args(args)
        .env_remove("RUST_LOG")
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..300 {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            return (
                status.code().unwrap_or(-1),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    panic!("steward {args:?} hung");
}

#[test]
fn bad_model_files_fail_with_one_line() {
    let dir = std::env::temp_dir().join(format!("steward-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let not_gguf = dir.join("x.gguf");
    std::fs::write(&not_gguf, b"hello, not a model").unwrap();
    let truncated = dir.join("t.gguf");
    let real = steward_engine::fetch::ensure_default_model().unwrap();
    let bytes = std::fs::read(real).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 50]).unwrap();
    let cases = [
        ("/definitely/not/here.gguf".to_string(), "not found"),
        (not_gguf.display().to_string(), "not a GGUF"),
        (truncated.display().to_string(), "could not load"),
    ];
    for (path, want) in cases {
        let (code, err) = run(&["serve", "--model", &path, "--port", "0"]);
        assert_ne!(code, 0, "{path}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "one line for {path}: {err}");
        assert!(
            lines[0].starts_with("steward: error:") && lines[0].contains(want),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
