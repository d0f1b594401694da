//! Store URLs: which backend a node opens.
//!
//! | URL | backend |
//! |---|---|
//! | `memory:` | [`super::MemoryStore`] (this process only) |
//! | `sqlite:///abs/path.db`, `sqlite://rel/path.db` | [`super::SqliteStore`] on that file |
//! | `redis://HOST[:PORT][/DB][?prefix=NAME]` | [`super::RedisStore`] on that server, keys under `NAME` (default `zlink`) |
//! | `rediss://…` | Redis over TLS: parsed, refused by `open` (not built in) |

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::StoreError;

/// A parsed store URL.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreUrl {
    /// `memory:` — in-process store.
    Memory,
    /// `sqlite://PATH` — the embedded store file (shared by every node process of a machine).
    Sqlite(PathBuf),
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
                if path.is_empty() {
                    return Err(invalid("empty SQLite file path"));
                }
                Ok(StoreUrl::Sqlite(PathBuf::from(path)))
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
            StoreUrl::Sqlite(path) => write!(f, "sqlite://{}", path.display()),
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
            StoreUrl::Sqlite(PathBuf::from("/var/zlink/store.db"))
        );
        assert_eq!(
            "sqlite://run/store.db".parse::<StoreUrl>().unwrap(),
            StoreUrl::Sqlite(PathBuf::from("run/store.db"))
        );
        assert_eq!(
            "redis://127.0.0.1:6379".parse::<StoreUrl>().unwrap(),
            StoreUrl::Redis("redis://127.0.0.1:6379".into())
        );
        let url = StoreUrl::Sqlite(PathBuf::from("/tmp/a.db"));
        assert_eq!(url.to_string().parse::<StoreUrl>().unwrap(), url);
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
