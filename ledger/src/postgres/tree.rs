//! The Merkle tree in PostgreSQL: leaves added in the global read's order, each complete
//! subtree stored once, and the signed checkpoints beside it. An extension runs in one
//! transaction holding the head row, so any number of replicas extend it and each leaf is
//! added once.

use std::collections::HashMap;

use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::PgStore;
use super::failure::chain;
use super::rows::{parse_xid, to_u64};
use crate::envelope::{Checkpoint, RecordedEvent};
use crate::error::ReadError;
use crate::hash::hashed;
use crate::proof::checkpoint::{Head, Heads};
use crate::proof::merkle::{self, Frontier, Hash, Node};
use crate::store::EventStore;

#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error(transparent)]
    Read(#[from] ReadError),
    /// An event that does not match its own hash is never made a leaf: the tree stops before it.
    #[error("the event at position {position} does not match its stored hash: the tree stops before it")]
    Tampered { position: u64 },
    #[error("{0}")]
    Invalid(String),
}

fn unavailable(e: impl std::error::Error) -> TreeError {
    TreeError::Unavailable(chain(&e))
}

/// How far the tree reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeHead {
    pub size: u64,
    /// The global read's checkpoint after the last leaf.
    pub after: Checkpoint,
}

/// A checkpoint as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCheckpoint {
    pub size: u64,
    pub note: String,
    pub heads: Heads,
}

fn i64_of(v: u64) -> Result<i64, TreeError> {
    i64::try_from(v).map_err(|_| TreeError::Invalid(format!("{v} is out of range")))
}

impl PgStore {
    pub async fn tree_head(&self) -> Result<TreeHead, TreeError> {
        let client = self.pool.get().await.map_err(unavailable)?;
        let row = client
            .query_one("SELECT size, tx_id::text, global_position FROM log_tree_head", &[])
            .await
            .map_err(unavailable)?;
        head_of(&row)
    }

    /// Adds up to `limit` events after the tree's head as leaves, in the global read's order,
    /// with every subtree they complete, and moves the head: all in one transaction.
    pub async fn extend_tree(&self, limit: usize) -> Result<TreeHead, TreeError> {
        let mut client = self.pool.get().await.map_err(unavailable)?;
        let tx = client.transaction().await.map_err(unavailable)?;
        // The tree is derived from the log: a crash that loses this commit loses it whole, head
        // row included, and the next extension makes it again. So it waits for no flush, and
        // takes no turn at the disk from the appends it follows.
        tx.batch_execute("SET LOCAL synchronous_commit = off").await.map_err(unavailable)?;
        let row = tx
            .query_one("SELECT size, tx_id::text, global_position FROM log_tree_head FOR UPDATE", &[])
            .await
            .map_err(unavailable)?;
        let head = head_of(&row)?;
        let events = self.read_all(head.after, limit).await?;
        let Some(last) = events.last() else { return Ok(head) };
        let edge = Frontier::nodes(head.size);
        let stored = nodes_in(&tx, &edge).await?;
        if let Some((level, index)) = edge.iter().find(|n| !stored.contains_key(n)) {
            return Err(TreeError::Invalid(format!("the stored tree lacks its node {level}/{index}")));
        }
        let mut frontier = Frontier::of(&stored, head.size);
        let (mut levels, mut indexes, mut hashes) = (Vec::new(), Vec::new(), Vec::new());
        let (mut positions, mut leaves) = (Vec::new(), Vec::new());
        for e in &events {
            if hashed(e).hash(&e.prev_hash) != e.hash {
                return Err(TreeError::Tampered { position: e.global_position });
            }
            positions.push(i64_of(e.global_position)?);
            leaves.push(i64_of(frontier.size())?);
            for ((level, index), h) in frontier.push(merkle::event_leaf(e)) {
                levels.push(i16::from(level));
                indexes.push(i64_of(index)?);
                hashes.push(h.to_vec());
            }
        }
        tx.execute(
            "INSERT INTO log_tree_nodes (level, node_index, hash) \
             SELECT * FROM unnest($1::smallint[], $2::bigint[], $3::bytea[])",
            &[&levels, &indexes, &hashes],
        )
        .await
        .map_err(unavailable)?;
        tx.execute(
            "INSERT INTO log_tree_leaves (global_position, leaf_index) SELECT * FROM unnest($1::bigint[], $2::bigint[])",
            &[&positions, &leaves],
        )
        .await
        .map_err(unavailable)?;
        let after = last.checkpoint();
        let size = frontier.size();
        tx.execute(
            "UPDATE log_tree_head SET size = $1, tx_id = $2::text::xid8, global_position = $3",
            &[&i64_of(size)?, &after.tx_id.to_string(), &i64_of(after.position)?],
        )
        .await
        .map_err(unavailable)?;
        tx.commit().await.map_err(unavailable)?;
        Ok(TreeHead { size, after })
    }

    /// Stored subtrees by address; a missing one is left out.
    pub async fn tree_nodes(&self, nodes: &[Node]) -> Result<HashMap<Node, Hash>, TreeError> {
        let client = self.pool.get().await.map_err(unavailable)?;
        nodes_in(&client, nodes).await
    }

    /// The stored leaf hashes `from..to`, in order; a missing one ends the list early.
    pub async fn tree_leaves(&self, from: u64, to: u64) -> Result<Vec<Hash>, TreeError> {
        let client = self.pool.get().await.map_err(unavailable)?;
        let rows = client
            .query(
                "SELECT node_index, hash FROM log_tree_nodes WHERE level = 0 AND node_index >= $1 AND node_index < $2 \
                 ORDER BY log_tree_nodes.node_index",
                &[&i64_of(from)?, &i64_of(to)?],
            )
            .await
            .map_err(unavailable)?;
        let mut out = Vec::with_capacity(rows.len());
        for (expected, r) in (from..).zip(&rows) {
            if to_u64(r.get(0)) != expected {
                break;
            }
            let hash: Vec<u8> = r.get(1);
            out.push(hash.try_into().map_err(|_| TreeError::Invalid("a stored leaf is not 32 bytes".into()))?);
        }
        Ok(out)
    }

    /// The root of the tree of `size` leaves, from stored subtrees.
    pub async fn tree_root(&self, size: u64) -> Result<Hash, TreeError> {
        let nodes = self.tree_nodes(&merkle::needed(false, 0, size)).await?;
        Ok(merkle::root(&nodes, size))
    }

    /// The proof that leaf `index` is in the tree of `size`, with that tree's root.
    pub async fn inclusion_proof(&self, index: u64, size: u64) -> Result<(Vec<Hash>, Hash), TreeError> {
        if index >= size {
            return Err(TreeError::Invalid(format!("leaf {index} is not in a tree of {size} leaves")));
        }
        let nodes = self.tree_nodes(&merkle::needed(true, index, size)).await?;
        Ok((merkle::inclusion_proof(&nodes, index, size), merkle::root(&nodes, size)))
    }

    /// The proof that the tree of `old` is a prefix of the tree of `new`.
    pub async fn consistency_proof(&self, old: u64, new: u64) -> Result<Vec<Hash>, TreeError> {
        if old > new {
            return Err(TreeError::Invalid(format!("a tree of {old} leaves cannot be a prefix of one of {new}")));
        }
        let nodes = self.tree_nodes(&merkle::needed(false, old, new)).await?;
        Ok(merkle::consistency_proof(&nodes, old, new))
    }

    /// The event with this id and its leaf index, once the tree holds it.
    pub async fn leaf_of(&self, event_id: Uuid) -> Result<Option<(RecordedEvent, Option<u64>)>, TreeError> {
        let Some(event) = self.find_event(event_id).await? else { return Ok(None) };
        let client = self.pool.get().await.map_err(unavailable)?;
        let leaf = client
            .query_opt(
                "SELECT leaf_index FROM log_tree_leaves WHERE global_position = $1",
                &[&i64_of(event.global_position)?],
            )
            .await
            .map_err(unavailable)?
            .map(|r| to_u64(r.get(0)));
        Ok(Some((event, leaf)))
    }

    /// The head of every stream with an event among leaves `from..to`.
    pub async fn heads_between(&self, from: u64, to: u64) -> Result<Heads, TreeError> {
        let client = self.pool.get().await.map_err(unavailable)?;
        let rows = client
            .query(
                "SELECT DISTINCT ON (e.stream_id) e.stream_id, e.stream_version, e.hash, e.tenant_id \
                 FROM log_tree_leaves l JOIN events e ON e.global_position = l.global_position \
                 WHERE l.leaf_index >= $1 AND l.leaf_index < $2 \
                 ORDER BY e.stream_id, e.stream_version DESC",
                &[&i64_of(from)?, &i64_of(to)?],
            )
            .await
            .map_err(unavailable)?;
        rows.iter()
            .map(|r| {
                let hash: Vec<u8> = r.get(2);
                let hash = hash.try_into().map_err(|_| TreeError::Invalid("a stored hash is not 32 bytes".into()))?;
                Ok((r.get::<_, String>(0), Head { tenant: r.get(3), version: to_u64(r.get(1)), hash }))
            })
            .collect()
    }

    /// Stores a signed checkpoint; false when one of that size is stored already.
    pub async fn save_checkpoint(&self, c: &StoredCheckpoint) -> Result<bool, TreeError> {
        let client = self.pool.get().await.map_err(unavailable)?;
        let heads = heads_json(&c.heads);
        let n = client
            .execute(
                "INSERT INTO log_checkpoints (tree_size, note, heads) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                &[&i64_of(c.size)?, &c.note, &heads],
            )
            .await
            .map_err(unavailable)?;
        Ok(n == 1)
    }

    /// Every stored checkpoint, smallest first.
    pub async fn checkpoints(&self) -> Result<Vec<StoredCheckpoint>, TreeError> {
        let client = self.pool.get().await.map_err(unavailable)?;
        let rows = client
            .query("SELECT tree_size, note, heads FROM log_checkpoints ORDER BY log_checkpoints.tree_size", &[])
            .await
            .map_err(unavailable)?;
        rows.iter()
            .map(|r| {
                let heads = heads_from_json(&r.get(2)).map_err(TreeError::Invalid)?;
                Ok(StoredCheckpoint { size: to_u64(r.get(0)), note: r.get(1), heads })
            })
            .collect()
    }

    /// The size of the newest checkpoint, if any.
    pub async fn newest_checkpoint_size(&self) -> Result<Option<u64>, TreeError> {
        let client = self.pool.get().await.map_err(unavailable)?;
        let row = client.query_one("SELECT max(tree_size) FROM log_checkpoints", &[]).await.map_err(unavailable)?;
        Ok(row.get::<_, Option<i64>>(0).map(to_u64))
    }

    /// The smallest checkpoint that holds leaf `leaf`, if one is signed yet.
    pub async fn checkpoint_holding(&self, leaf: u64) -> Result<Option<StoredCheckpoint>, TreeError> {
        let client = self.pool.get().await.map_err(unavailable)?;
        let row = client
            .query_opt(
                "SELECT tree_size, note, heads FROM log_checkpoints WHERE tree_size > $1 \
                 ORDER BY log_checkpoints.tree_size LIMIT 1",
                &[&i64_of(leaf)?],
            )
            .await
            .map_err(unavailable)?;
        row.map(|r| {
            let heads = heads_from_json(&r.get(2)).map_err(TreeError::Invalid)?;
            Ok(StoredCheckpoint { size: to_u64(r.get(0)), note: r.get(1), heads })
        })
        .transpose()
    }

    pub async fn save_rotation(&self, note: &str) -> Result<(), TreeError> {
        let client = self.pool.get().await.map_err(unavailable)?;
        client.execute("INSERT INTO log_key_rotations (note) VALUES ($1)", &[&note]).await.map_err(unavailable)?;
        Ok(())
    }

    /// Every key rotation note, oldest first.
    pub async fn rotations(&self) -> Result<Vec<String>, TreeError> {
        let client = self.pool.get().await.map_err(unavailable)?;
        let rows = client
            .query("SELECT note FROM log_key_rotations ORDER BY log_key_rotations.seq", &[])
            .await
            .map_err(unavailable)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}

/// Heads as stored and exported: `{stream: {"tenant": t, "version": n, "hash": hex}}`.
pub fn heads_json(heads: &Heads) -> serde_json::Value {
    heads
        .iter()
        .map(|(s, h)| {
            let head = serde_json::json!({ "tenant": h.tenant, "version": h.version, "hash": hex::encode(h.hash) });
            (s.clone(), head)
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

pub fn heads_from_json(v: &serde_json::Value) -> Result<Heads, String> {
    let map = v.as_object().ok_or("heads are not an object")?;
    map.iter()
        .map(|(s, h)| {
            let version = h.get("version").and_then(serde_json::Value::as_u64).ok_or("a head has no version")?;
            let tenant = h.get("tenant").and_then(serde_json::Value::as_str).ok_or("a head has no tenant")?.to_owned();
            let hash = h
                .get("hash")
                .and_then(serde_json::Value::as_str)
                .and_then(|x| hex::decode(x).ok())
                .and_then(|b| <Hash>::try_from(b).ok())
                .ok_or("a head's hash is not 32 bytes of hex")?;
            Ok((s.clone(), Head { tenant, version, hash }))
        })
        .collect()
}

fn head_of(row: &tokio_postgres::Row) -> Result<TreeHead, TreeError> {
    let tx_id = parse_xid(row.get(1)).map_err(|e| TreeError::Invalid(e.to_string()))?;
    Ok(TreeHead { size: to_u64(row.get(0)), after: Checkpoint { tx_id, position: to_u64(row.get(2)) } })
}

async fn nodes_in(
    client: &impl deadpool_postgres::GenericClient,
    nodes: &[Node],
) -> Result<HashMap<Node, Hash>, TreeError> {
    let levels: Vec<i16> = nodes.iter().map(|(l, _)| i16::from(*l)).collect();
    let indexes = nodes.iter().map(|(_, i)| i64_of(*i)).collect::<Result<Vec<_>, _>>()?;
    let params: [&(dyn ToSql + Sync); 2] = [&levels, &indexes];
    let rows = client
        .query(
            "SELECT n.level, n.node_index, n.hash FROM log_tree_nodes n \
             JOIN unnest($1::smallint[], $2::bigint[]) AS want(level, node_index) \
               ON n.level = want.level AND n.node_index = want.node_index",
            &params,
        )
        .await
        .map_err(unavailable)?;
    rows.iter()
        .map(|r| {
            let level = u8::try_from(r.get::<_, i16>(0)).map_err(|e| TreeError::Invalid(e.to_string()))?;
            let hash: Vec<u8> = r.get(2);
            let hash = hash.try_into().map_err(|_| TreeError::Invalid("a stored node is not 32 bytes".into()))?;
            Ok(((level, to_u64(r.get(1))), hash))
        })
        .collect()
}
