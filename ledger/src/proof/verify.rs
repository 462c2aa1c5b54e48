//! The auditor's walk over the log: every event's content against its hash, every stream's
//! links, each leaf in order, and at each signed checkpoint the heads it records and the root
//! it signs. Pure: the caller feeds events from the database or from an export.

use std::collections::{BTreeMap, HashMap};

use super::checkpoint::{Checkpoint, Heads, Sealed, heads_line, open_rotation};
use super::merkle::{self, Frontier, Hash, ProofError};
use super::note::{Note, NoteError, Verifier};
use crate::envelope::RecordedEvent;
use crate::hash::{GENESIS, content_hash};

/// A checkpoint whose log signature verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    pub checkpoint: Checkpoint,
    pub note: String,
    /// The heads it signed: every tenant's, or one tenant's with the rest in `others`.
    pub heads: Heads,
    pub others: Vec<Sealed>,
    /// The witnesses whose cosignatures verified.
    pub witnessed_by: Vec<String>,
}

/// A checkpoint as read from a file, a table or an export, not yet checked.
pub type Unchecked = (String, Heads, Vec<Sealed>);

/// The first thing found that is not what was signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Finding {
    #[error("key rotation note {index}: {reason}")]
    Rotation { index: usize, reason: NoteError },
    #[error("the checkpoint of size {size} does not verify: {reason}")]
    Checkpoint { size: String, reason: NoteError },
    #[error("two signed checkpoints of size {size} give different roots: the log was forked")]
    Fork { size: u64 },
    #[error("checkpoint {size} follows checkpoint {prev}, which is missing from this set: one was left out")]
    Gap { size: u64, prev: u64 },
    #[error("checkpoint {size}: the stream heads stored with it are not the ones it signed")]
    HeadsNotSigned { size: u64 },
    #[error("position {position}, stream {stream} version {version}: {what}")]
    Chain { position: u64, stream: String, version: u64, what: &'static str },
    #[error("stream {stream}: version {version} is missing from the log")]
    Missing { stream: String, version: u64 },
    #[error(
        "stream {stream}: checkpoint {size} signed its head at version {signed}; the log holds {found}: events \
         of it were deleted or changed"
    )]
    Head { size: u64, stream: String, signed: u64, found: String },
    #[error("checkpoint {size}: the log's leaves {from}..{size} do not give the signed root{at}{heads}")]
    Root {
        size: u64,
        from: u64,
        /// Where the first differing leaf is, when it can be told.
        at: String,
        /// What the signed stream heads say is missing or changed, if anything.
        heads: String,
    },
    #[error("the log ends at {leaves} events, but checkpoint {size} signed {size}: the newest events were deleted")]
    Truncated { size: u64, leaves: u64 },
    #[error("checkpoints {from} and {to}: {reason}")]
    Inconsistent { from: u64, to: u64, reason: ProofError },
    #[error("position {position} (leaf {leaf}): its inclusion proof fails: {reason}")]
    Inclusion { position: u64, leaf: u64, reason: ProofError },
}

/// Opens the rotation notes, in order, from the auditor's key, then every checkpoint, each
/// against the one log key that held at its size (a rotation hands over every larger size), and
/// each witness's cosignature against that witness's key alone. Sorted by size.
pub fn open_checkpoints(
    log_key: &Verifier,
    witnesses: &[Verifier],
    rotations: &[String],
    notes: &[Unchecked],
) -> Result<Vec<Signed>, Finding> {
    let mut keys: Vec<(u64, Verifier)> = vec![(0, log_key.clone())];
    for (index, r) in rotations.iter().enumerate() {
        let (after, current) = keys.last().cloned().unwrap_or((0, log_key.clone()));
        let (new, from) = open_rotation(r, &current).map_err(|reason| Finding::Rotation { index, reason })?;
        if from < after {
            let reason = NoteError::Malformed("a rotation hands over a size an earlier one already had");
            return Err(Finding::Rotation { index, reason });
        }
        keys.push((from, new));
    }
    // The key of a size: the newest whose rotation was made at a smaller size.
    let key_for =
        |size: u64| keys.iter().enumerate().rev().find(|(i, (after, _))| *i == 0 || size > *after).map(|(_, (_, k))| k);
    let mut out: Vec<Signed> = Vec::new();
    for (note, heads, others) in notes {
        let size = Note::parse(note).ok().and_then(|n| Checkpoint::parse_body(&n.text).ok()).map(|c| c.size);
        let bad = |reason| Finding::Checkpoint { size: size.map_or_else(|| "?".to_owned(), |s| s.to_string()), reason };
        let key = key_for(size.unwrap_or(0)).unwrap_or(log_key);
        let (checkpoint, _) = Checkpoint::open(note, std::slice::from_ref(key), &log_key.name).map_err(bad)?;
        if !checkpoint.extensions.iter().any(|l| *l == heads_line(heads, others)) {
            return Err(Finding::HeadsNotSigned { size: checkpoint.size });
        }
        let parsed = Note::parse(note).map_err(bad)?;
        let mut witnessed_by = Vec::new();
        for w in witnesses {
            match parsed.verify(std::slice::from_ref(w)) {
                Ok(_) => witnessed_by.push(w.name.clone()),
                Err(NoteError::Unverified) => {}
                Err(reason) => return Err(bad(reason)),
            }
        }
        out.push(Signed { checkpoint, note: note.clone(), heads: heads.clone(), others: others.clone(), witnessed_by });
    }
    out.sort_by_key(|s| s.checkpoint.size);
    for pair in out.windows(2) {
        if pair[0].checkpoint.size == pair[1].checkpoint.size && pair[0].checkpoint.root != pair[1].checkpoint.root {
            return Err(Finding::Fork { size: pair[0].checkpoint.size });
        }
    }
    out.dedup_by_key(|s| s.checkpoint.size);
    // Each names the one before it: none may be missing between the first and the newest.
    for (i, c) in out.iter().enumerate() {
        let before = if i == 0 { 0 } else { out[i - 1].checkpoint.size };
        if c.checkpoint.prev() != Some(before) {
            return Err(Finding::Gap { size: c.checkpoint.size, prev: c.checkpoint.prev().unwrap_or(0) });
        }
    }
    Ok(out)
}

/// Checks each consecutive pair of checkpoints with a consistency proof from `prove`.
pub fn check_consistency(
    checkpoints: &[Signed],
    mut prove: impl FnMut(u64, u64) -> Option<Vec<Hash>>,
) -> Result<usize, Finding> {
    let mut checked = 0;
    for pair in checkpoints.windows(2) {
        let (a, b) = (&pair[0].checkpoint, &pair[1].checkpoint);
        let proof = prove(a.size, b.size).unwrap_or_default();
        merkle::verify_consistency(a.size, b.size, &a.root, &b.root, &proof)
            .map_err(|reason| Finding::Inconsistent { from: a.size, to: b.size, reason })?;
        checked += 1;
    }
    Ok(checked)
}

#[derive(Debug, Default)]
struct Stream {
    /// The newest version linked from version 1 and its hash.
    linked: (u64, Hash),
    /// Versions seen before their predecessor: `version -> (position, prev_hash, hash)`.
    waiting: BTreeMap<u64, (u64, Hash, Hash)>,
    /// The highest version seen and its hash.
    newest: (u64, Hash),
}

/// What a finished walk saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walked {
    pub events: u64,
    pub streams: usize,
    pub checkpoints: usize,
    /// Events after the newest checkpoint: checked for content and links, not yet signed.
    pub unsigned: u64,
}

/// The walk over the whole log in leaf order.
#[derive(Debug)]
pub struct Walk<'a> {
    checkpoints: &'a [Signed],
    next: usize,
    frontier: Frontier,
    streams: HashMap<String, Stream>,
    leaves: Vec<Hash>,
}

impl<'a> Walk<'a> {
    pub fn new(checkpoints: &'a [Signed]) -> Self {
        Self { checkpoints, next: 0, frontier: Frontier::default(), streams: HashMap::new(), leaves: Vec::new() }
    }

    /// The newest version of `stream` seen and its hash.
    pub fn newest(&self, stream: &str) -> Option<(u64, Hash)> {
        self.streams.get(stream).map(|s| s.newest)
    }

    /// Every leaf hash so far, in order: for finding the first leaf that differs.
    pub fn leaves(&self) -> &[Hash] {
        &self.leaves
    }

    /// The next event in the log's order. An event is checked against its own hash and its
    /// stream's links before it is made a leaf.
    pub fn push(&mut self, e: &RecordedEvent) -> Result<(), Finding> {
        self.reach()?;
        self.link(e)?;
        let leaf = merkle::event_leaf(e);
        self.frontier.push(leaf);
        self.leaves.push(leaf);
        self.reach()
    }

    /// Checks an event's content and links alone, without making it a leaf: for an export of
    /// one tenant, whose events are proven one by one.
    pub fn link(&mut self, e: &RecordedEvent) -> Result<(), Finding> {
        let chain = |what| Finding::Chain {
            position: e.global_position,
            stream: e.stream_id.to_string(),
            version: e.stream_version,
            what,
        };
        if content_hash(e) != e.hash {
            return Err(chain("its content does not match its hash: it was changed"));
        }
        let s = self.streams.entry(e.stream_id.to_string()).or_default();
        if e.stream_version <= s.linked.0 || s.waiting.contains_key(&e.stream_version) {
            return Err(chain("a second event holds this version"));
        }
        if e.stream_version > s.newest.0 {
            s.newest = (e.stream_version, e.hash);
        }
        s.waiting.insert(e.stream_version, (e.global_position, e.prev_hash, e.hash));
        while let Some(&(position, prev, hash)) = s.waiting.get(&(s.linked.0 + 1)) {
            let expected = if s.linked.0 == 0 { GENESIS } else { s.linked.1 };
            if prev != expected {
                return Err(Finding::Chain {
                    position,
                    stream: e.stream_id.to_string(),
                    version: s.linked.0 + 1,
                    what: "its link does not name the event before it: the stream was rewritten",
                });
            }
            s.waiting.remove(&(s.linked.0 + 1));
            s.linked = (s.linked.0 + 1, hash);
        }
        Ok(())
    }

    fn at_checkpoint(&self, c: &Signed) -> Result<(), Finding> {
        if self.frontier.root() != c.checkpoint.root {
            let from = self.checkpoints[..self.next].last().map_or(0, |p| p.checkpoint.size);
            let heads = self.heads_hold(c).err().map(|f| format!("; {f}")).unwrap_or_default();
            return Err(Finding::Root { size: c.checkpoint.size, from, at: String::new(), heads });
        }
        self.heads_hold(c)
    }

    /// Every stream head the checkpoint signed is the newest event of that stream seen.
    fn heads_hold(&self, c: &Signed) -> Result<(), Finding> {
        let size = c.checkpoint.size;
        for (stream, head) in &c.heads {
            let found = self.streams.get(stream).map(|s| s.newest);
            if found != Some((head.version, head.hash)) {
                let found = match found {
                    None => "none of it: the stream was dropped".to_owned(),
                    Some((v, h)) if v == head.version && h != head.hash => format!("version {v} with another hash"),
                    Some((v, _)) => format!("version {v}"),
                };
                return Err(Finding::Head { size, stream: stream.clone(), signed: head.version, found });
            }
        }
        Ok(())
    }

    /// Checks every checkpoint of the size the walk has reached: before the first leaf (a
    /// checkpoint of the empty log) and after each.
    fn reach(&mut self) -> Result<(), Finding> {
        while let Some(c) = self.checkpoints.get(self.next) {
            if c.checkpoint.size > self.frontier.size() {
                break;
            }
            self.at_checkpoint(c)?;
            self.next += 1;
        }
        Ok(())
    }

    /// Ends the walk: every stream must be linked without a gap, and no checkpoint may sign
    /// more events than the log holds.
    pub fn finish(mut self) -> Result<Walked, Finding> {
        self.reach()?;
        let leaves = self.frontier.size();
        if let Some(c) = self.checkpoints.get(self.next) {
            // Name what is missing where a signed head says so, before the bare count.
            for later in &self.checkpoints[self.next..] {
                self.heads_hold(later)?;
            }
            return Err(Finding::Truncated { size: c.checkpoint.size, leaves });
        }
        let mut streams: Vec<_> = self.streams.iter().collect();
        streams.sort_by(|a, b| a.0.cmp(b.0));
        for (name, s) in streams {
            if !s.waiting.is_empty() {
                return Err(Finding::Missing { stream: name.clone(), version: s.linked.0 + 1 });
            }
        }
        let signed = self.checkpoints.last().map_or(0, |c| c.checkpoint.size);
        Ok(Walked {
            events: leaves,
            streams: self.streams.len(),
            checkpoints: self.checkpoints.len(),
            unsigned: leaves.saturating_sub(signed),
        })
    }
}
