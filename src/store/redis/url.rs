//! The Redis backend's URL: our own query parameters (`prefix=`, `lease_timeout_ms=`) split off
//! the driver's, and the URL as shown (without credentials).

use super::*;

pub(super) fn invalid_url(url: &str, reason: &'static str) -> StoreError {
    StoreError::InvalidUrl {
        url: url.to_owned(),
        reason,
    }
}

/// Our own query parameters of a Redis URL (`prefix=`, `lease_timeout_ms=`); other
/// parameters stay for the driver.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct UrlOptions {
    pub(super) prefix: Option<String>,
    pub(super) lease_timeout: Option<Duration>,
}

/// Splits our own query parameters ([`UrlOptions`]) off a Redis URL.
pub(super) fn split_options(url: &str) -> Result<(String, UrlOptions), StoreError> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), UrlOptions::default()));
    };
    let mut prefix = None;
    let mut lease_timeout = None;
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("prefix", value)) => {
                if value.is_empty() || value.contains(char::is_whitespace) {
                    return Err(invalid_url(
                        url,
                        "the key prefix must be non-empty, no spaces",
                    ));
                }
                prefix = Some(value.to_owned());
            }
            Some(("lease_timeout_ms", value)) => {
                let ms = value
                    .parse::<u64>()
                    .ok()
                    .filter(|ms| (1..=3_600_000).contains(ms))
                    .ok_or_else(|| {
                        invalid_url(
                            url,
                            "lease_timeout_ms must be a whole number of milliseconds, 1..=3600000",
                        )
                    })?;
                lease_timeout = Some(Duration::from_millis(ms));
            }
            _ => rest.push(pair),
        }
    }
    let base = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    Ok((
        base,
        UrlOptions {
            prefix,
            lease_timeout,
        },
    ))
}

/// `url` without `user:password@`.
pub(super) fn without_credentials(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('@') {
            Some((_, host)) => format!("{scheme}://***@{host}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}
