//! Media URLs (`--media-allow-url`): only hosts in `--media-url-hosts`,
//! fetched with a deadline (`--media-url-timeout-s`), streamed and stopped
//! at the part's byte cap, and no redirect to another host.

use std::time::Duration;

use super::{refuse, MediaLimits};
use crate::http::error::ApiError;

/// Most redirects followed (each within the same host).
const MAX_REDIRECTS: usize = 5;

/// The host of an `http(s)` URL, lowercased.
pub fn host_of(url: &str) -> Option<String> {
    reqwest::Url::parse(url)
        .ok()?
        .host_str()
        .map(str::to_ascii_lowercase)
}

/// `host` is in the allowlist (`*` allows any).
pub fn host_allowed(hosts: &[String], host: &str) -> bool {
    hosts
        .iter()
        .any(|h| h == "*" || h.eq_ignore_ascii_case(host))
}

/// The client URL parts are fetched with: a redirect is followed only to
/// the host the URL named, at most `MAX_REDIRECTS` times.
pub fn client(l: &MediaLimits) -> Result<reqwest::Client, String> {
    let policy = reqwest::redirect::Policy::custom(|attempt| {
        let first = attempt.previous().first().and_then(|u| u.host_str());
        if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else if first.is_some() && first == attempt.url().host_str() {
            attempt.follow()
        } else {
            let to = attempt.url().host_str().unwrap_or("?").to_string();
            attempt.error(format!("it redirects to another host (`{to}`)"))
        }
    });
    reqwest::Client::builder()
        .redirect(policy)
        .timeout(l.url_timeout)
        .connect_timeout(l.url_timeout)
        .build()
        .map_err(|e| e.to_string())
}

/// The URL's body, at most `cap` bytes, within `deadline`.
pub async fn get(
    client: &reqwest::Client,
    url: &str,
    cap: usize,
    deadline: Duration,
    label: &str,
) -> Result<Vec<u8>, ApiError> {
    let work = async {
        let mut resp = client.get(url).send().await.map_err(|e| why(&e))?;
        if !resp.status().is_success() {
            return Err(format!("fetching the URL answered {}", resp.status()));
        }
        if resp.content_length().is_some_and(|n| n > cap as u64) {
            return Err(too_large(cap));
        }
        let mut out = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| why(&e))? {
            if out.len() + chunk.len() > cap {
                return Err(too_large(cap));
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    };
    match tokio::time::timeout(deadline, work).await {
        Err(_) => Err(refuse(
            label,
            format!(
                "the URL did not answer within {} s (--media-url-timeout-s)",
                deadline.as_secs_f64()
            ),
        )),
        Ok(r) => r.map_err(|e| refuse(label, e)),
    }
}

fn too_large(cap: usize) -> String {
    format!(
        "the URL's file is larger than {cap} bytes (--media-max-part-bytes, --media-max-request-bytes)"
    )
}

/// A fetch error's cause, the redirect policy's own message first.
fn why(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(c) = src {
        s = format!("{s}: {c}");
        src = c.source();
    }
    format!("the URL could not be fetched ({s})")
}
