//! Packet handlers by key, each key at most once (SB-3.3): [`HandlerRegistry`].

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use zlink_wire::ids::DispatchKey;

use super::*;

/// Handlers by packet key: at most one per [`DispatchKey`] (SB-3.3). `H` is whatever the node
/// code dispatches to (a boxed typed handler); the registry only guards uniqueness.
#[derive(Debug)]
pub struct HandlerRegistry<H> {
    handlers: BTreeMap<DispatchKey, H>,
}

impl<H> Default for HandlerRegistry<H> {
    fn default() -> Self {
        Self {
            handlers: BTreeMap::new(),
        }
    }
}

impl<H> HandlerRegistry<H> {
    /// An empty registry.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `handler` for `key`.
    ///
    /// # Errors
    /// [`ConfigError::DuplicateHandler`] when `key` already has a handler (the registry is
    /// unchanged).
    pub fn register(&mut self, key: DispatchKey, handler: H) -> Result<(), ConfigError> {
        match self.handlers.entry(key) {
            Entry::Occupied(_) => Err(ConfigError::DuplicateHandler { key, count: 2 }),
            Entry::Vacant(slot) => {
                slot.insert(handler);
                Ok(())
            }
        }
    }

    /// The handler of `key`.
    #[must_use]
    pub fn get(&self, key: DispatchKey) -> Option<&H> {
        self.handlers.get(&key)
    }

    /// Number of registered keys.
    #[must_use]
    pub fn len(&self) -> usize {
        self.handlers.len()
    }

    /// `true` when nothing is registered.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.handlers.is_empty()
    }

    /// Registered keys, ascending.
    pub fn keys(&self) -> impl Iterator<Item = DispatchKey> + '_ {
        self.handlers.keys().copied()
    }

    /// Key and handler pairs, ascending by key.
    pub fn iter(&self) -> impl Iterator<Item = (DispatchKey, &H)> + '_ {
        self.handlers.iter().map(|(k, h)| (*k, h))
    }
}

impl<H> IntoIterator for HandlerRegistry<H> {
    type Item = (DispatchKey, H);
    type IntoIter = std::collections::btree_map::IntoIter<DispatchKey, H>;

    fn into_iter(self) -> Self::IntoIter {
        self.handlers.into_iter()
    }
}
