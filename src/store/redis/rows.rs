//! The Redis backend's rows: the JSON values of the lease, counters and actor keys, encoded and
//! decoded (a row that does not decode is corrupt store data, never a panic).

use super::*;

#[derive(Serialize, Deserialize)]
pub(super) struct LeaseRow {
    pub(super) node_generation: u64,
    pub(super) lease_generation: u64,
    pub(super) expires_at_ms: u64,
}

#[derive(Serialize, Deserialize)]
pub(super) struct CountersRow {
    pub(super) object_generation: u64,
    pub(super) authority: u64,
    pub(super) version: u64,
}

#[derive(Serialize, Deserialize)]
struct ActorRow {
    actor_type: String,
    object_generation: u64,
    mesh: String,
    owner_node: String,
    node_generation: u64,
    authority_owner_generation: u64,
    owner_lease_generation: u64,
    state: RowState,
    version: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum RowState {
    Activating,
    Ready,
}

pub(super) fn json<T: Serialize>(row: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(row).map_err(|e| StoreError::backend(BACKEND, e))
}

pub(super) fn encode_lease(lease: &OwnerLease) -> Result<Vec<u8>, StoreError> {
    json(&LeaseRow {
        node_generation: lease.holder.node_generation.get(),
        lease_generation: lease.holder.lease_generation.get(),
        expires_at_ms: lease.expires_at.as_millis(),
    })
}

pub(super) fn encode_counters(c: ActorCounters) -> Result<Vec<u8>, StoreError> {
    json(&CountersRow {
        object_generation: c.object_generation,
        authority: c.authority,
        version: c.version,
    })
}

pub(super) fn encode_actor(l: &ActorLocation) -> Result<Vec<u8>, StoreError> {
    json(&ActorRow {
        actor_type: l.actor_type.clone(),
        object_generation: l.object_generation.get(),
        mesh: l.mesh.as_str().to_owned(),
        owner_node: l.owner_node.as_str().to_owned(),
        node_generation: l.node_generation.get(),
        authority_owner_generation: l.authority_owner_generation.get(),
        owner_lease_generation: l.owner_lease_generation.get(),
        state: match l.state {
            ActivationState::Activating => RowState::Activating,
            ActivationState::Ready => RowState::Ready,
        },
        version: l.version.get(),
    })
}

pub(super) fn decode_actor(id: &ActorId, raw: &[u8]) -> Result<ActorLocation, StoreError> {
    let row: ActorRow = serde_json::from_slice(raw).map_err(|_| corrupt("actor row"))?;
    Ok(ActorLocation {
        actor_id: id.clone(),
        actor_type: row.actor_type,
        object_generation: ObjectGeneration::new(row.object_generation),
        mesh: MeshName::new(row.mesh).map_err(|_| corrupt("mesh name"))?,
        owner_node: NodeRid::new(row.owner_node).map_err(|_| corrupt("owner node rid"))?,
        node_generation: NodeGeneration::new(row.node_generation),
        authority_owner_generation: AuthorityOwnerGeneration::new(row.authority_owner_generation),
        owner_lease_generation: OwnerLeaseGeneration::new(row.owner_lease_generation),
        state: match row.state {
            RowState::Activating => ActivationState::Activating,
            RowState::Ready => ActivationState::Ready,
        },
        version: StoreVersion::new(row.version),
    })
}
