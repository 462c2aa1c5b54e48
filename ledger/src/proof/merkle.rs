//! The Merkle tree over the log, hashed as RFC 9162 §2.1 says: a leaf is `SHA-256(0x00 ‖ data)`,
//! a node `SHA-256(0x01 ‖ left ‖ right)`, and a tree of `n` leaves splits at the largest power of
//! two below `n`. Proofs are the RFC's inclusion and consistency proofs, so any implementation of
//! it checks them.
//!
//! Complete subtrees are addressed as `(level, index)`: the subtree of level `l` and index `i`
//! covers leaves `i·2^l .. (i+1)·2^l`. Every hash a proof needs is the hash of complete subtrees
//! combined, so a store keeps only those and [`needed`] says which ones to fetch.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use crate::envelope::RecordedEvent;

pub type Hash = [u8; 32];

/// The root of the empty tree: the hash of nothing.
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

pub fn leaf_hash(data: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(data);
    h.finalize().into()
}

pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// The bytes a leaf of the log commits to: its global position and its chain hash, which covers
/// every stored field of the event and the hash before it in its stream.
pub fn event_leaf_data(position: u64, chain_hash: &Hash) -> [u8; 60] {
    let mut data = [0u8; 60];
    data[..20].copy_from_slice(b"grant-ledger/leaf/v1");
    data[20..28].copy_from_slice(&position.to_be_bytes());
    data[28..].copy_from_slice(chain_hash);
    data
}

/// The leaf hash of a stored event, from its stored chain hash (verify the chain first).
pub fn event_leaf(e: &RecordedEvent) -> Hash {
    leaf_hash(&event_leaf_data(e.global_position, &e.hash))
}

/// The largest power of two strictly below `n` (`n ≥ 2`).
fn split(n: u64) -> u64 {
    debug_assert!(n >= 2);
    1 << (63 - (n - 1).leading_zeros())
}

/// A subtree's address: `(level, index)`.
pub type Node = (u8, u64);

/// Where a proof's hashes come from: complete subtrees only.
pub trait Nodes {
    fn node(&self, level: u8, index: u64) -> Hash;
}

impl Nodes for HashMap<Node, Hash> {
    fn node(&self, level: u8, index: u64) -> Hash {
        self.get(&(level, index)).copied().unwrap_or_default()
    }
}

/// The hash of leaves `lo..hi` (`hi > lo`) built from complete subtrees.
fn range_hash(t: &impl Nodes, lo: u64, hi: u64) -> Hash {
    let n = hi - lo;
    if n.is_power_of_two() && lo.is_multiple_of(n) {
        // A u64's trailing zeros number at most 64.
        let level = u8::try_from(n.trailing_zeros()).unwrap_or(u8::MAX);
        return t.node(level, lo / n);
    }
    let k = split(n);
    node_hash(&range_hash(t, lo, lo + k), &range_hash(t, lo + k, hi))
}

/// The root of a tree of `size` leaves.
pub fn root(t: &impl Nodes, size: u64) -> Hash {
    if size == 0 { empty_root() } else { range_hash(t, 0, size) }
}

fn inclusion_in(t: &impl Nodes, m: u64, lo: u64, hi: u64, out: &mut Vec<Hash>) {
    if hi - lo == 1 {
        return;
    }
    let k = split(hi - lo);
    if m < lo + k {
        inclusion_in(t, m, lo, lo + k, out);
        out.push(range_hash(t, lo + k, hi));
    } else {
        inclusion_in(t, m, lo + k, hi, out);
        out.push(range_hash(t, lo, lo + k));
    }
}

/// RFC 9162 §2.1.3.1: the proof that leaf `index` is in the tree of `size` leaves.
pub fn inclusion_proof(t: &impl Nodes, index: u64, size: u64) -> Vec<Hash> {
    assert!(index < size, "leaf {index} is not in a tree of {size}");
    let mut out = Vec::new();
    inclusion_in(t, index, 0, size, &mut out);
    out
}

fn consistency_in(t: &impl Nodes, m: u64, lo: u64, hi: u64, whole: bool, out: &mut Vec<Hash>) {
    let n = hi - lo;
    if m == n {
        if !whole {
            out.push(range_hash(t, lo, hi));
        }
        return;
    }
    let k = split(n);
    if m <= k {
        consistency_in(t, m, lo, lo + k, whole, out);
        out.push(range_hash(t, lo + k, hi));
    } else {
        consistency_in(t, m - k, lo + k, hi, false, out);
        out.push(range_hash(t, lo, lo + k));
    }
}

/// RFC 9162 §2.1.4.1: the proof that the tree of `old` leaves is a prefix of the tree of `new`.
/// Empty when `old` is 0 or equals `new`.
pub fn consistency_proof(t: &impl Nodes, old: u64, new: u64) -> Vec<Hash> {
    assert!(old <= new, "a tree of {old} cannot be a prefix of one of {new}");
    let mut out = Vec::new();
    if old > 0 && old < new {
        consistency_in(t, old, 0, new, true, &mut out);
    }
    out
}

/// Records which subtrees a proof reads, answering zeros: run a proof with it first, fetch
/// what it saw, then run the proof again over what was fetched.
#[derive(Debug, Default)]
pub struct Needed(std::cell::RefCell<Vec<Node>>);

impl Nodes for Needed {
    fn node(&self, level: u8, index: u64) -> Hash {
        self.0.borrow_mut().push((level, index));
        Hash::default()
    }
}

impl Needed {
    pub fn into_nodes(self) -> Vec<Node> {
        let mut v = self.0.into_inner();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// The subtrees a proof of `old` in `new` (or of leaf `old` when `leaf`) reads, plus the roots.
pub fn needed(leaf: bool, old: u64, new: u64) -> Vec<Node> {
    let n = Needed::default();
    if leaf {
        inclusion_proof(&n, old, new);
    } else {
        consistency_proof(&n, old, new);
        if old > 0 {
            root(&n, old);
        }
    }
    if new > 0 {
        root(&n, new);
    }
    n.into_nodes()
}

/// Why a proof did not check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    #[error("leaf {index} cannot be in a tree of {size} leaves")]
    OutOfRange { index: u64, size: u64 },
    #[error("the proof has the wrong number of hashes for these sizes")]
    WrongLength,
    #[error("the proof leads to another root: the tree is not the one signed")]
    RootMismatch,
}

/// RFC 9162 §2.1.3.2: checks that `leaf` is leaf `index` of the tree of `size` with `root`.
pub fn verify_inclusion(index: u64, size: u64, leaf: &Hash, proof: &[Hash], root: &Hash) -> Result<(), ProofError> {
    if index >= size {
        return Err(ProofError::OutOfRange { index, size });
    }
    let (mut f, mut s, mut r) = (index, size - 1, *leaf);
    for p in proof {
        if s == 0 {
            return Err(ProofError::WrongLength);
        }
        if f & 1 == 1 || f == s {
            r = node_hash(p, &r);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            r = node_hash(&r, p);
        }
        f >>= 1;
        s >>= 1;
    }
    if s != 0 {
        return Err(ProofError::WrongLength);
    }
    if &r != root { Err(ProofError::RootMismatch) } else { Ok(()) }
}

/// RFC 9162 §2.1.4.2: checks that the tree of `old` leaves with `old_root` is a prefix of the
/// tree of `new` leaves with `new_root`.
pub fn verify_consistency(
    old: u64,
    new: u64,
    old_root: &Hash,
    new_root: &Hash,
    proof: &[Hash],
) -> Result<(), ProofError> {
    if old > new {
        return Err(ProofError::OutOfRange { index: old, size: new });
    }
    if old == new || old == 0 {
        if !proof.is_empty() {
            return Err(ProofError::WrongLength);
        }
        // The empty tree is a prefix of every tree, but only under its own root.
        let expected = if old == 0 { empty_root() } else { *new_root };
        return if *old_root == expected { Ok(()) } else { Err(ProofError::RootMismatch) };
    }
    let mut path: Vec<Hash> = Vec::with_capacity(proof.len() + 1);
    if old.is_power_of_two() {
        path.push(*old_root);
    }
    path.extend_from_slice(proof);
    let Some((first, rest)) = path.split_first() else { return Err(ProofError::WrongLength) };
    let (mut f, mut s) = (old - 1, new - 1);
    while f & 1 == 1 {
        f >>= 1;
        s >>= 1;
    }
    let (mut fr, mut sr) = (*first, *first);
    for c in rest {
        if s == 0 {
            return Err(ProofError::WrongLength);
        }
        if f & 1 == 1 || f == s {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            sr = node_hash(&sr, c);
        }
        f >>= 1;
        s >>= 1;
    }
    if s != 0 {
        return Err(ProofError::WrongLength);
    }
    if &fr != old_root || &sr != new_root { Err(ProofError::RootMismatch) } else { Ok(()) }
}

/// A whole tree in memory, every level kept: what a verifier or an export builds from leaves.
#[derive(Debug, Default, Clone)]
pub struct MemoryTree {
    levels: Vec<Vec<Hash>>,
}

impl MemoryTree {
    pub fn push(&mut self, leaf: Hash) {
        let mut h = leaf;
        let mut level = 0;
        loop {
            if self.levels.len() == level {
                self.levels.push(Vec::new());
            }
            let row = &mut self.levels[level];
            row.push(h);
            if row.len() % 2 == 1 {
                return;
            }
            h = node_hash(&row[row.len() - 2], &row[row.len() - 1]);
            level += 1;
        }
    }

    pub fn size(&self) -> u64 {
        self.levels.first().map_or(0, |l| l.len() as u64)
    }

    pub fn root_at(&self, size: u64) -> Hash {
        root(self, size)
    }
}

impl Nodes for MemoryTree {
    fn node(&self, level: u8, index: u64) -> Hash {
        self.levels
            .get(usize::from(level))
            .and_then(|l| l.get(usize::try_from(index).ok()?))
            .copied()
            .unwrap_or_default()
    }
}

/// The right edge of a growing tree: one complete subtree per set bit of its size. Enough to
/// give the root at every size, and the interior nodes each new leaf completes, in O(1)
/// amortised memory and time per leaf.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    /// Complete subtrees from the largest (leftmost) to the smallest, with their levels.
    edge: Vec<(u8, Hash)>,
}

impl Frontier {
    /// A frontier from a stored tree: the subtrees of each set bit of `size`.
    pub fn of(t: &impl Nodes, size: u64) -> Self {
        let edge = Self::nodes(size).into_iter().map(|(l, i)| (l, t.node(l, i))).collect();
        Self { size, edge }
    }

    /// The subtrees a frontier of `size` holds, largest first.
    pub fn nodes(size: u64) -> Vec<Node> {
        (0..64u8).rev().filter(|l| size >> l & 1 == 1).map(|l| (l, (size >> l) - 1)).collect()
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// Adds a leaf; returns every complete subtree it finished, leaf first, each with its address.
    pub fn push(&mut self, leaf: Hash) -> Vec<(Node, Hash)> {
        let index = self.size;
        let mut made = vec![((0, index), leaf)];
        let mut h = leaf;
        let mut level = 0u8;
        while let Some(&(l, left)) = self.edge.last() {
            if l != level {
                break;
            }
            self.edge.pop();
            h = node_hash(&left, &h);
            level += 1;
            made.push(((level, ((index + 1) >> level) - 1), h));
        }
        self.edge.push((level, h));
        self.size += 1;
        made
    }

    pub fn root(&self) -> Hash {
        let mut it = self.edge.iter().rev();
        let Some(&(_, mut h)) = it.next() else { return empty_root() };
        for (_, left) in it {
            h = node_hash(left, &h);
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves(n: u64) -> Vec<Hash> {
        (0..n).map(|i| leaf_hash(&i.to_be_bytes())).collect()
    }

    /// The RFC's definition, recursively over the leaves: what everything else must agree with.
    fn mth(l: &[Hash]) -> Hash {
        match l.len() {
            0 => empty_root(),
            1 => l[0],
            n => {
                let k = usize::try_from(split(n as u64)).unwrap();
                node_hash(&mth(&l[..k]), &mth(&l[k..]))
            }
        }
    }

    fn tree(l: &[Hash]) -> MemoryTree {
        let mut t = MemoryTree::default();
        l.iter().for_each(|h| t.push(*h));
        t
    }

    #[test]
    fn roots_agree_with_the_definition_at_every_size() {
        let l = leaves(70);
        let t = tree(&l);
        let mut f = Frontier::default();
        assert_eq!(f.root(), empty_root());
        for n in 1..=70 {
            let made = f.push(l[usize::try_from(n).unwrap() - 1]);
            let want = mth(&l[..usize::try_from(n).unwrap()]);
            assert_eq!(t.root_at(n), want, "memory tree at {n}");
            assert_eq!(f.root(), want, "frontier at {n}");
            for ((level, index), h) in made {
                assert_eq!(t.node(level, index), h, "node {level}/{index} made at {n}");
            }
            assert_eq!(Frontier::of(&t, n), f, "frontier rebuilt at {n}");
        }
    }

    #[test]
    fn every_inclusion_proof_checks_and_a_wrong_one_does_not() {
        let l = leaves(33);
        let t = tree(&l);
        for size in 1..=33u64 {
            let root = t.root_at(size);
            for i in 0..size {
                let p = inclusion_proof(&t, i, size);
                let leaf = l[usize::try_from(i).unwrap()];
                assert_eq!(verify_inclusion(i, size, &leaf, &p, &root), Ok(()), "{i} in {size}");
                assert!(verify_inclusion(i, size, &leaf_hash(b"other"), &p, &root).is_err());
                if size > 1 {
                    assert!(verify_inclusion((i + 1) % size, size, &leaf, &p, &root).is_err(), "{i} moved");
                    assert!(verify_inclusion(i, size, &leaf, &p[1..], &root).is_err(), "{i} shortened");
                }
            }
        }
    }

    #[test]
    fn every_consistency_proof_checks_and_a_fork_does_not() {
        let l = leaves(40);
        let t = tree(&l);
        let mut forked = l.clone();
        forked[5] = leaf_hash(b"rewritten");
        let f = tree(&forked);
        for new in 1..=40u64 {
            for old in 1..=new {
                let p = consistency_proof(&t, old, new);
                assert_eq!(verify_consistency(old, new, &t.root_at(old), &t.root_at(new), &p), Ok(()), "{old}->{new}");
                // The old tree held leaf 5: the forked tree of `new` cannot extend it.
                if old > 5 && old < new {
                    let pf = consistency_proof(&f, old, new);
                    assert!(verify_consistency(old, new, &t.root_at(old), &f.root_at(new), &pf).is_err());
                    assert!(verify_consistency(old, new, &t.root_at(old), &f.root_at(new), &p).is_err());
                }
            }
        }
    }

    #[test]
    fn needed_names_every_node_a_proof_reads() {
        let t = tree(&leaves(37));
        for (leaf, old, new) in
            [(true, 0, 1), (true, 5, 37), (true, 36, 37), (false, 3, 37), (false, 16, 37), (false, 0, 9)]
        {
            let only: HashMap<Node, Hash> =
                needed(leaf, old, new).into_iter().map(|(l, i)| ((l, i), t.node(l, i))).collect();
            if leaf {
                assert_eq!(inclusion_proof(&only, old, new), inclusion_proof(&t, old, new));
            } else {
                assert_eq!(consistency_proof(&only, old, new), consistency_proof(&t, old, new));
            }
            assert_eq!(root(&only, new), t.root_at(new));
        }
    }
}
