//! Store URLs: which backend a node opens.
//!
//! | URL | backend |
//! |---|---|
//! | `memory:` | [`super::MemoryStore`] (this process only) |
//! | `sqlite:///abs/path.db`, `sqlite://rel/path.db` | [`super::SqliteStore`] on that file |
//! | `sqlite:///path.db?busy_timeout_ms=N&lease_busy_timeout_ms=M` | the same, with its [`SqliteOptions`] (either key may be left out) |
//! | `redis://HOST[:PORT][/DB][?prefix=NAME&lease_timeout_ms=N]` | [`super::RedisStore`] on that server, keys under `NAME` (default `zlink`), owner lease calls bounded by `N` ms (default 500) |
//! | `rediss://…` | Redis over TLS: parsed, refused by `open` (not built in) |

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{SqliteOptions, StoreError};

/// A parsed store URL.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreUrl {
    /// `memory:` — in-process store.
    Memory,
    /// `sqlite://PATH[?busy_timeout_ms=N&lease_busy_timeout_ms=M]` — the embedded store file
    /// (shared by every node process of a machine) and its handle's options.
    Sqlite(PathBuf, SqliteOptions),
    /// `redis://…` — the networked backend ([`super::RedisStore`]); `rediss://…` (TLS) is parsed
    /// and refused by [`super::open`] with [`StoreError::UnsupportedBackend`].
    Redis(String),
}

impl FromStr for StoreUrl {
    type Err = StoreError;

    fn from_str(url: &str) -> Result<Self, StoreError> {
        let invalid = |reason| StoreError::InvalidUrl {
            url: url.to_owned(),
            reason,
        };
        let Some((scheme, rest)) = url.split_once(':') else {
            return Err(invalid(
                "no scheme (expected sqlite:///path, memory: or redis://)",
            ));
        };
        match scheme {
            "memory" if rest.is_empty() || rest == "//" => Ok(StoreUrl::Memory),
            "memory" => Err(invalid("memory: takes no path")),
            "sqlite" => {
                let path = rest.strip_prefix("//").ok_or_else(|| {
                    invalid("expected sqlite://PATH, e.g. sqlite:///var/zlink/store.db")
                })?;
                let (path, query) = match path.split_once('?') {
                    Some((path, query)) => (path, Some(query)),
                    None => (path, None),
                };
                if path.is_empty() {
                    return Err(invalid("empty SQLite file path"));
                }
                let mut options = SqliteOptions::default();
                for pair in query.into_iter().flat_map(|q| q.split('&')) {
                    let (key, value) = pair.split_once('=').ok_or_else(|| {
                        invalid("expected busy_timeout_ms=N or lease_busy_timeout_ms=N")
                    })?;
                    let ms = value
                        .parse::<u64>()
                        .ok()
                        .filter(|ms| (1..=3_600_000).contains(ms))
                        .ok_or_else(|| invalid("a timeout is 1 to 3600000 ms"))?;
                    let d = std::time::Duration::from_millis(ms);
                    match key {
                        "busy_timeout_ms" => options.busy_timeout = d,
                        "lease_busy_timeout_ms" => options.lease_busy_timeout = d,
                        _ => {
                            return Err(invalid(
                                "unknown SQLite option (busy_timeout_ms, lease_busy_timeout_ms)",
                            ));
                        }
                    }
                }
                Ok(StoreUrl::Sqlite(PathBuf::from(path), options))
            }
            "redis" | "rediss" => {
                if rest.strip_prefix("//").is_none_or(str::is_empty) {
                    return Err(invalid("expected redis://HOST[:PORT]"));
                }
                Ok(StoreUrl::Redis(url.to_owned()))
            }
            other => Err(StoreError::UnsupportedBackend {
                scheme: other.to_owned(),
            }),
        }
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Memory => f.write_str("memory:"),
            StoreUrl::Sqlite(path, options) => {
                write!(f, "sqlite://{}", path.display())?;
                let default = SqliteOptions::default();
                let mut sep = '?';
                for (key, value, default) in [
                    (
                        "busy_timeout_ms",
                        options.busy_timeout,
                        default.busy_timeout,
                    ),
                    (
                        "lease_busy_timeout_ms",
                        options.lease_busy_timeout,
                        default.lease_busy_timeout,
                    ),
                ] {
                    if value != default {
                        write!(f, "{sep}{key}={}", value.as_millis())?;
                        sep = '&';
                    }
                }
                Ok(())
            }
            StoreUrl::Redis(url) => f.write_str(url),
        }
    }
}

impl Serialize for StoreUrl {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for StoreUrl {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_supported_schemes() {
        assert_eq!("memory:".parse::<StoreUrl>().unwrap(), StoreUrl::Memory);
        assert_eq!(
            "sqlite:///var/zlink/store.db".parse::<StoreUrl>().unwrap(),
            StoreUrl::Sqlite(
                PathBuf::from("/var/zlink/store.db"),
                SqliteOptions::default()
            )
        );
        assert_eq!(
            "sqlite://run/store.db".parse::<StoreUrl>().unwrap(),
            StoreUrl::Sqlite(PathBuf::from("run/store.db"), SqliteOptions::default())
        );
        assert_eq!(
            "redis://127.0.0.1:6379".parse::<StoreUrl>().unwrap(),
            StoreUrl::Redis("redis://127.0.0.1:6379".into())
        );
        let url = StoreUrl::Sqlite(PathBuf::from("/tmp/a.db"), SqliteOptions::default());
        assert_eq!(url.to_string(), "sqlite:///tmp/a.db");
        assert_eq!(url.to_string().parse::<StoreUrl>().unwrap(), url);
    }

    #[test]
    fn sqlite_timeouts_are_settings_of_the_url() {
        let url: StoreUrl = "sqlite:///s.db?lease_busy_timeout_ms=100&busy_timeout_ms=2000"
            .parse()
            .unwrap();
        let StoreUrl::Sqlite(path, options) = &url else {
            panic!("{url:?}")
        };
        assert_eq!(path, &PathBuf::from("/s.db"));
        assert_eq!(options.busy_timeout, std::time::Duration::from_secs(2));
        assert_eq!(
            options.lease_busy_timeout,
            std::time::Duration::from_millis(100)
        );
        assert_eq!(
            url.to_string(),
            "sqlite:///s.db?busy_timeout_ms=2000&lease_busy_timeout_ms=100"
        );
        assert_eq!(url.to_string().parse::<StoreUrl>().unwrap(), url);
        let only: StoreUrl = "sqlite://s.db?busy_timeout_ms=9000".parse().unwrap();
        let StoreUrl::Sqlite(_, options) = only else {
            panic!()
        };
        assert_eq!(
            options.lease_busy_timeout,
            SqliteOptions::DEFAULT_LEASE_BUSY_TIMEOUT
        );
        for bad in [
            "sqlite:///s.db?busy_timeout_ms=0",
            "sqlite:///s.db?busy_timeout_ms=x",
            "sqlite:///s.db?busy_timeout=5",
            "sqlite:///s.db?lease_busy_timeout_ms",
            "sqlite://?busy_timeout_ms=5",
        ] {
            assert!(
                matches!(bad.parse::<StoreUrl>(), Err(StoreError::InvalidUrl { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn rejects_malformed_and_unknown_urls() {
        for bad in [
            "",
            "store.db",
            "sqlite:",
            "sqlite:/x",
            "sqlite://",
            "memory:/x",
            "redis://",
        ] {
            assert!(
                matches!(bad.parse::<StoreUrl>(), Err(StoreError::InvalidUrl { .. })),
                "{bad:?}"
            );
        }
        assert!(matches!(
            "postgres://db".parse::<StoreUrl>(),
            Err(StoreError::UnsupportedBackend { scheme }) if scheme == "postgres"
        ));
    }

    #[test]
    fn redis_opens_lazily_and_tls_is_refused() {
        // No server is contacted by open: the handle connects on its first call.
        let url: StoreUrl = "redis://localhost:1/0?prefix=m".parse().unwrap();
        crate::store::open(&url).unwrap();
        let url: StoreUrl = "rediss://localhost".parse().unwrap();
        let err = crate::store::open(&url).unwrap_err();
        assert!(matches!(err, StoreError::UnsupportedBackend { .. }));
        assert!(err.is_configuration());
    }
}
