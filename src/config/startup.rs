//! The programmatic startup of a node (SB-3): [`StartupBuilder`] → [`Startup`], with the
//! Location Store it opens ([`StoreChoice`]).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use zlink_wire::ids::{DispatchKey, MeshName, NodeRid};

use super::*;
use crate::store::{self, LocationStore, StoreError, StoreUrl};

/// Where the Location Store comes from.
#[derive(Clone)]
pub enum StoreChoice {
    /// Opened from a URL at startup ([`Startup::open_store`]).
    Url(StoreUrl),
    /// Provided by the embedding program (tests: a `CountingStore`).
    Provided(Arc<dyn LocationStore>),
}

impl fmt::Debug for StoreChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreChoice::Url(url) => write!(f, "Url({url})"),
            StoreChoice::Provided(store) => write!(f, "Provided({store:?})"),
        }
    }
}

/// Programmatic node startup, ending in [`StartupBuilder::build`] (SB-3).
///
/// Registration never fails on the spot: a duplicate packet key is remembered and reported by
/// `validate`/`build`, so startup fails as a whole with a configuration error (SB-3.3).
#[derive(Debug)]
pub struct StartupBuilder<H> {
    node: NodeRid,
    meshes: Vec<MeshName>,
    roles: ObjectRoles,
    store: Option<StoreChoice>,
    actor_dispatch: bool,
    handlers: Vec<(DispatchKey, H)>,
}

impl<H> StartupBuilder<H> {
    /// A node with nothing configured.
    #[must_use]
    pub fn new(node: NodeRid) -> Self {
        Self {
            node,
            meshes: Vec::new(),
            roles: ObjectRoles::default(),
            store: None,
            actor_dispatch: false,
            handlers: Vec::new(),
        }
    }

    /// Node, meshes, roles, store URL and the actor-dispatch switch of `config`.
    #[must_use]
    pub fn from_config(config: &NodeConfig) -> Self {
        let mut b = Self::new(config.node.clone());
        b.meshes = config.meshes.iter().map(|m| m.name.clone()).collect();
        b.roles = config.roles;
        b.store = config.store.clone().map(StoreChoice::Url);
        b.actor_dispatch = config.actor_dispatch;
        b
    }

    /// Adds a mesh (several are fine, SB-3.4).
    #[must_use]
    pub fn mesh(mut self, mesh: MeshName) -> Self {
        self.meshes.push(mesh);
        self
    }

    /// Enables the Object Client role.
    #[must_use]
    pub fn object_client(mut self) -> Self {
        self.roles.object_client = true;
        self
    }

    /// Enables the Object Server role.
    #[must_use]
    pub fn object_server(mut self) -> Self {
        self.roles.object_server = true;
        self
    }

    /// Uses the Location Store at `url`.
    #[must_use]
    pub fn location_store_url(mut self, url: StoreUrl) -> Self {
        self.store = Some(StoreChoice::Url(url));
        self
    }

    /// Uses an already opened Location Store.
    #[must_use]
    pub fn location_store(mut self, store: Arc<dyn LocationStore>) -> Self {
        self.store = Some(StoreChoice::Provided(store));
        self
    }

    /// `EnableActorDispatch()`: enables global object dispatch. Takes no `MeshName` (SB-3): the
    /// global ActorId authority (the Location Store) finds each actor's mesh and owner.
    #[must_use]
    pub fn enable_actor_dispatch(mut self) -> Self {
        self.actor_dispatch = true;
        self
    }

    /// Registers `handler` for packet `key`; a second handler for the same key fails `build`
    /// (SB-3.3).
    #[must_use]
    pub fn handler(mut self, key: DispatchKey, handler: H) -> Self {
        self.handlers.push((key, handler));
        self
    }

    /// Checks the SB-3 startup rules without consuming the builder.
    ///
    /// Order: duplicate packet key (SB-3.3), then — only with actor dispatch — object role
    /// (SB-3.1), Location Store (SB-3.2), mesh; then duplicate meshes and store URL support.
    ///
    /// # Errors
    /// The first [`ConfigError`] in that order.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut counts: BTreeMap<DispatchKey, usize> = BTreeMap::new();
        for (key, _) in &self.handlers {
            *counts.entry(*key).or_default() += 1;
        }
        if let Some((&key, &count)) = counts.iter().find(|(_, c)| **c > 1) {
            return Err(ConfigError::DuplicateHandler { key, count });
        }
        if self.actor_dispatch {
            if !self.roles.any() {
                return Err(ConfigError::NoObjectRole);
            }
            if self.store.is_none() {
                return Err(ConfigError::NoLocationStore);
            }
            if self.meshes.is_empty() {
                return Err(ConfigError::NoMesh);
            }
        }
        for (i, mesh) in self.meshes.iter().enumerate() {
            if self.meshes[..i].contains(mesh) {
                return Err(ConfigError::DuplicateMesh { mesh: mesh.clone() });
            }
        }
        if let Some(StoreChoice::Url(StoreUrl::Redis(url))) = &self.store {
            if url.starts_with("rediss:") {
                return Err(ConfigError::Store(StoreError::UnsupportedBackend {
                    scheme: "rediss".to_owned(),
                }));
            }
        }
        Ok(())
    }

    /// Validates and produces the startup plan.
    ///
    /// # Errors
    /// As [`StartupBuilder::validate`].
    pub fn build(self) -> Result<Startup<H>, ConfigError> {
        self.validate()?;
        let mut handlers = HandlerRegistry::new();
        for (key, handler) in self.handlers {
            handlers.register(key, handler)?;
        }
        Ok(Startup {
            node: self.node,
            meshes: self.meshes,
            roles: self.roles,
            store: self.store,
            actor_dispatch: self.actor_dispatch,
            handlers,
        })
    }
}

/// A validated startup plan: what the node code starts.
#[derive(Debug)]
#[non_exhaustive]
pub struct Startup<H> {
    /// The node's routing id.
    pub node: NodeRid,
    /// Meshes to join (distinct).
    pub meshes: Vec<MeshName>,
    /// Object roles.
    pub roles: ObjectRoles,
    /// The Location Store (always `Some` when actor dispatch is enabled).
    pub store: Option<StoreChoice>,
    /// Whether global actor dispatch is enabled.
    pub actor_dispatch: bool,
    /// Handlers by packet key, each key once.
    pub handlers: HandlerRegistry<H>,
}

impl<H> Startup<H> {
    /// Opens (or hands out) the configured Location Store; `None` when none is configured.
    ///
    /// # Errors
    /// [`ConfigError::Store`] when the backend cannot be opened.
    pub fn open_store(&self) -> Result<Option<Arc<dyn LocationStore>>, ConfigError> {
        match &self.store {
            None => Ok(None),
            Some(StoreChoice::Provided(store)) => Ok(Some(Arc::clone(store))),
            Some(StoreChoice::Url(url)) => store::open(url).map(Some).map_err(ConfigError::Store),
        }
    }
}
