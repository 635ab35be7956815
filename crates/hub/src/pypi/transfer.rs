//! The project page and the file over HTTP(S): one reqwest client on a
//! current-thread runtime of the download thread, retries with backoff,
//! resume by `Range`, a stall watchdog, the sha256 taken as bytes arrive.

use super::index::{self, Dist};
use super::{normalize, redact, Pin, PypiError, PypiOptions};
use crate::download::chain;
use indicatif::{ProgressBar, ProgressStyle};
use reqwest::header::{ACCEPT, CONTENT_RANGE, CONTENT_TYPE, RANGE};
use reqwest::{Client, StatusCode, Url};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Duration;

/// JSON first (PEP 691); HTML from a mirror that has only that.
const ACCEPT_PAGE: &str = "application/vnd.pypi.simple.v1+json, text/html;q=0.01";
const PAGE_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

enum Attempt {
    Retry(String),
    Fatal(String),
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(500 << attempt.min(4))
}

fn tries(message: String, tries: u32) -> String {
    format!(
        "{message} ({tries} attempt{})",
        if tries == 1 { "" } else { "s" }
    )
}

/// The URL is left out of the message: the error names it once.
fn request_error(e: reqwest::Error) -> Attempt {
    let fatal = e.is_builder() || e.status().is_some_and(|s| s.is_client_error());
    let message = chain(&e.without_url());
    if fatal {
        Attempt::Fatal(message)
    } else {
        Attempt::Retry(message)
    }
}

fn status_error(status: StatusCode) -> Attempt {
    let message = format!("HTTP {status}");
    if status.is_server_error()
        || status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
    {
        Attempt::Retry(message)
    } else if status == StatusCode::NOT_FOUND {
        Attempt::Fatal(format!("{message} (no such project or file on this index)"))
    } else {
        Attempt::Fatal(message)
    }
}

/// The page, the file chosen on it, the file downloaded to `dest` and checked.
pub(super) fn download(pin: &Pin, o: &PypiOptions, dest: &Path) -> Result<Dist, PypiError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| PypiError::Io {
            context: "starting a tokio runtime".to_string(),
            source,
        })?;
    let page_text = format!("{}/{}/", o.index, normalize(&pin.project));
    let page_err = |message: String| PypiError::Index {
        package: pin.to_string(),
        url: redact(&page_text),
        message,
    };
    let page_url = Url::parse(&page_text).map_err(|e| page_err(format!("not a URL: {e}")))?;
    rt.block_on(async {
        let client = Client::builder()
            .user_agent(concat!("steward/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| page_err(chain(&e)))?;
        let (found_at, files) = page(&client, &page_url, o).await.map_err(page_err)?;
        let Some(dist) = index::choose(pin, &files).cloned() else {
            return Err(PypiError::NoFile {
                package: pin.to_string(),
                version: pin.version.clone(),
                url: redact(&page_text),
                available: files.into_iter().map(|f| f.filename).collect(),
            });
        };
        let url = file_url(&found_at, &page_url, &dist.url)
            .map_err(|e| page_err(format!("bad URL {:?} for {}: {e}", dist.url, dist.filename)))?;
        let shown = redact(url.as_str());
        let download_err = |message: String| PypiError::Download {
            package: pin.to_string(),
            url: shown.clone(),
            message,
        };
        let actual = fetch_file(&client, o, &url, &dist, dest)
            .await
            .map_err(download_err)?;
        match &dist.sha256 {
            Some(expected) if *expected != actual => Err(PypiError::Sha256Mismatch {
                package: pin.to_string(),
                url: shown.clone(),
                expected: expected.clone(),
                actual,
            }),
            Some(_) => Ok(dist),
            None => {
                tracing::warn!(package = %pin, url = %shown, "the index gives no sha256 for this file; not checked");
                Ok(dist)
            }
        }
    })
}

/// `href` (maybe relative) against the page it was found on, without its
/// fragment; on the index's own origin it carries the index URL's
/// credentials (reqwest sends them as Basic auth and drops them on a
/// redirect to another host).
fn file_url(found_at: &Url, index: &Url, href: &str) -> Result<Url, String> {
    let mut url = found_at.join(href).map_err(|e| e.to_string())?;
    url.set_fragment(None);
    if url.username().is_empty() && url.password().is_none() && url.origin() == index.origin() {
        let _ = url.set_username(index.username());
        let _ = url.set_password(index.password());
    }
    Ok(url)
}

/// The project page's files, with the URL they are relative to.
async fn page(client: &Client, url: &Url, o: &PypiOptions) -> Result<(Url, Vec<Dist>), String> {
    let mut attempt = 0;
    loop {
        match page_attempt(client, url).await {
            Ok(found) => return Ok(found),
            Err(Attempt::Retry(message)) if attempt < o.retries => {
                tracing::warn!(url = %redact(url.as_str()), error = %message, "index page failed, retrying");
                tokio::time::sleep(backoff(attempt)).await;
                attempt += 1;
            }
            Err(Attempt::Retry(message) | Attempt::Fatal(message)) => {
                return Err(tries(message, attempt + 1))
            }
        }
    }
}

async fn page_attempt(client: &Client, url: &Url) -> Result<(Url, Vec<Dist>), Attempt> {
    let response = client
        .get(url.clone())
        .header(ACCEPT, ACCEPT_PAGE)
        .timeout(PAGE_TIMEOUT)
        .send()
        .await
        .map_err(request_error)?;
    let status = response.status();
    if !status.is_success() {
        return Err(status_error(status));
    }
    let found_at = response.url().clone();
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let body = response.bytes().await.map_err(request_error)?;
    if content_type.contains("html") {
        return Ok((found_at, index::parse_html(&String::from_utf8_lossy(&body))));
    }
    match index::parse_json(&body) {
        Ok(files) => Ok((found_at, files)),
        Err(e) => Err(Attempt::Fatal(format!(
            "not a simple-index page (content type {content_type:?}): {e}"
        ))),
    }
}

/// Bytes written so far and their running sha256.
struct Got {
    file: File,
    have: u64,
    hash: Sha256,
}

impl Got {
    /// Back to an empty file (the server ignored or botched `Range`).
    fn restart(&mut self) -> Result<(), Attempt> {
        self.file
            .set_len(0)
            .and_then(|()| self.file.seek(SeekFrom::Start(0)).map(drop))
            .map_err(|e| Attempt::Fatal(format!("truncating the download: {e}")))?;
        self.have = 0;
        self.hash = Sha256::new();
        Ok(())
    }
}

fn bar(o: &PypiOptions, dist: &Dist) -> Option<ProgressBar> {
    if !o.progress {
        return None;
    }
    let bar = ProgressBar::new(dist.size.unwrap_or(0));
    if let Ok(style) =
        ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(dist.filename.clone());
    Some(bar)
}

/// Downloads `url` into `dest` with retries; the sha256 of what was written.
async fn fetch_file(
    client: &Client,
    o: &PypiOptions,
    url: &Url,
    dist: &Dist,
    dest: &Path,
) -> Result<String, String> {
    let file = File::create(dest).map_err(|e| format!("creating {}: {e}", dest.display()))?;
    let mut got = Got {
        file,
        have: 0,
        hash: Sha256::new(),
    };
    let bar = bar(o, dist);
    let mut attempt = 0;
    loop {
        match file_attempt(client, url, &mut got, o.stall_timeout, bar.as_ref()).await {
            Ok(()) => break,
            Err(Attempt::Retry(message)) if attempt < o.retries => {
                tracing::warn!(file = %dist.filename, error = %message, have = got.have, "download failed, resuming");
                tokio::time::sleep(backoff(attempt)).await;
                attempt += 1;
            }
            Err(Attempt::Retry(message) | Attempt::Fatal(message)) => {
                if let Some(bar) = &bar {
                    bar.abandon();
                }
                return Err(tries(message, attempt + 1));
            }
        }
    }
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    match dist.size {
        Some(size) if size != got.have => {
            Err(format!("{} bytes arrived, the index says {size}", got.have))
        }
        _ => Ok(got
            .hash
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()),
    }
}

/// The first byte of a `Content-Range: bytes FIRST-LAST/TOTAL`.
fn range_start(value: &str) -> Option<u64> {
    value
        .trim()
        .strip_prefix("bytes ")?
        .split('-')
        .next()?
        .trim()
        .parse()
        .ok()
}

/// One request: from the start, or from `got.have` by `Range`.
async fn file_attempt(
    client: &Client,
    url: &Url,
    got: &mut Got,
    stall: Duration,
    bar: Option<&ProgressBar>,
) -> Result<(), Attempt> {
    let mut request = client.get(url.clone());
    if got.have > 0 {
        request = request.header(RANGE, format!("bytes={}-", got.have));
    }
    let mut response = match tokio::time::timeout(stall, request.send()).await {
        Err(_) => return Err(Attempt::Retry(format!("no answer for {stall:?}"))),
        Ok(sent) => sent.map_err(request_error)?,
    };
    match response.status() {
        StatusCode::OK if got.have > 0 => {
            tracing::debug!("the server ignored Range: downloading from the start");
            got.restart()?;
        }
        StatusCode::OK => {}
        StatusCode::PARTIAL_CONTENT if got.have > 0 => {
            let from = response
                .headers()
                .get(CONTENT_RANGE)
                .and_then(|v| v.to_str().ok())
                .and_then(range_start);
            if from != Some(got.have) {
                got.restart()?;
                return Err(Attempt::Retry(format!(
                    "asked to resume at byte {}, the server answered from {from:?}",
                    got.have
                )));
            }
        }
        StatusCode::RANGE_NOT_SATISFIABLE if got.have > 0 => {
            got.restart()?;
            return Err(Attempt::Retry("HTTP 416 when resuming".to_string()));
        }
        status => return Err(status_error(status)),
    }
    if let Some(bar) = bar {
        if let Some(len) = response.content_length() {
            bar.set_length(got.have + len);
        }
        bar.set_position(got.have);
    }
    loop {
        let chunk = match tokio::time::timeout(stall, response.chunk()).await {
            Err(_) => return Err(Attempt::Retry(format!("no data for {stall:?}"))),
            Ok(Err(e)) => return Err(Attempt::Retry(chain(&e.without_url()))),
            Ok(Ok(None)) => return Ok(()),
            Ok(Ok(Some(chunk))) => chunk,
        };
        got.file
            .write_all(&chunk)
            .map_err(|e| Attempt::Fatal(format!("writing the download: {e}")))?;
        got.hash.update(&chunk);
        got.have += chunk.len() as u64;
        if let Some(bar) = bar {
            bar.inc(chunk.len() as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_urls_and_credentials() {
        let index = Url::parse("https://u:p@mirror.example/simple/tiny/").unwrap();
        let found_at = Url::parse("https://mirror.example/simple/tiny/").unwrap();
        let u = file_url(&found_at, &index, "../../files/t-1.whl#sha256=ab").unwrap();
        assert_eq!(u.as_str(), "https://u:p@mirror.example/files/t-1.whl");
        let u = file_url(&found_at, &index, "https://files.example/t-1.whl").unwrap();
        assert_eq!(u.as_str(), "https://files.example/t-1.whl");
        assert_eq!(range_start("bytes 100-199/200"), Some(100));
        assert_eq!(range_start("bytes */200"), None);
    }
}
