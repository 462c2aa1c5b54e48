//! Checkpoints in the C2SP `tlog-checkpoint` form, the body of a signed note: the log's origin,
//! its size in decimal, and its root hash in base64, one per line. And the note by which a log
//! key introduces the key that follows it.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use super::merkle::Hash;
use super::note::{Note, NoteError, Signer, Verifier};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub origin: String,
    pub size: u64,
    pub root: Hash,
    /// Lines after the root: this log writes one, [`heads_line`].
    pub extensions: Vec<String>,
}

/// A stream's head as a checkpoint records it: its tenant, newest version and that event's hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub tenant: String,
    pub version: u64,
    pub hash: Hash,
}

/// The heads of the streams that moved since the previous checkpoint, by stream name.
pub type Heads = std::collections::BTreeMap<String, Head>;

/// Another tenant's part of a heads line, as a tenant's export carries it: the tenant's key
/// (a hash of its id) and the digest of its heads, so nothing of it shows but that it exists.
pub type Sealed = (Hash, Hash);

/// The first line of a rotation note's text.
const ROTATION_HEADER: &str = "grant-ledger key rotation";

/// The prefix of the extension line naming the size of the checkpoint before this one (0 for
/// the first): checkpoints form a chain, so one left out of a set is found.
pub const PREV_PREFIX: &str = "grant-ledger-prev ";

/// The extension line naming the checkpoint before.
pub fn prev_line(prev: u64) -> String {
    format!("{PREV_PREFIX}{prev}")
}

impl Checkpoint {
    /// The size its `prev` line names, if it has one.
    pub fn prev(&self) -> Option<u64> {
        self.extensions.iter().find_map(|l| l.strip_prefix(PREV_PREFIX)?.parse().ok())
    }
}

/// The prefix of the extension line that commits a checkpoint to the stream heads.
pub const HEADS_PREFIX: &str = "grant-ledger-heads ";

fn sha256(parts: &[&[u8]]) -> Hash {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    parts.iter().for_each(|p| h.update(p));
    h.finalize().into()
}

/// A tenant's key in a heads line.
pub fn tenant_key(tenant: &str) -> Hash {
    sha256(&[b"grant-ledger/tenant/", tenant.as_bytes()])
}

/// One tenant's heads: SHA-256 over a `stream version hash-hex` line per stream, in name order.
fn tenant_digest(heads: &Heads, tenant: &str) -> Hash {
    let lines: String = heads
        .iter()
        .filter(|(_, h)| h.tenant == tenant)
        .map(|(s, h)| format!("{s} {} {}\n", h.version, hex::encode(h.hash)))
        .collect();
    sha256(&[lines.as_bytes()])
}

/// The extension line for `heads` (and `others`, the sealed parts of tenants left out): SHA-256
/// over each tenant's key and digest, in key order. A tenant's export proves its own streams'
/// heads against it and learns nothing of another tenant's.
pub fn heads_line(heads: &Heads, others: &[Sealed]) -> String {
    let mut parts: Vec<Sealed> = heads
        .values()
        .map(|h| h.tenant.as_str())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(|t| (tenant_key(t), tenant_digest(heads, t)))
        .collect();
    parts.extend_from_slice(others);
    parts.sort();
    let joined: Vec<u8> = parts.iter().flat_map(|(k, d)| k.iter().chain(d.iter()).copied()).collect();
    format!("{HEADS_PREFIX}{}", B64.encode(sha256(&[&joined])))
}

/// `heads` split for one tenant's export: its own heads, and the others sealed.
pub fn heads_of(heads: &Heads, tenant: &str) -> (Heads, Vec<Sealed>) {
    let own = heads.iter().filter(|(_, h)| h.tenant == tenant).map(|(s, h)| (s.clone(), h.clone())).collect();
    let others = heads
        .values()
        .map(|h| h.tenant.as_str())
        .filter(|t| *t != tenant)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(|t| (tenant_key(t), tenant_digest(heads, t)))
        .collect();
    (own, others)
}

impl Checkpoint {
    pub fn body(&self) -> String {
        let mut body = format!("{}\n{}\n{}\n", self.origin, self.size, B64.encode(self.root));
        for line in &self.extensions {
            body.push_str(line);
            body.push('\n');
        }
        body
    }

    /// Parses a checkpoint body, extension lines kept.
    pub fn parse_body(text: &str) -> Result<Self, NoteError> {
        let mut lines = text.strip_suffix('\n').ok_or(NoteError::Malformed("no final newline"))?.split('\n');
        let (Some(origin), Some(size), Some(root)) = (lines.next(), lines.next(), lines.next()) else {
            return Err(NoteError::Malformed("a checkpoint has an origin, a size and a root hash"));
        };
        if origin.is_empty() {
            return Err(NoteError::Malformed("the origin is empty"));
        }
        let canonical = size.bytes().all(|b| b.is_ascii_digit()) && (size == "0" || !size.starts_with('0'));
        let size = size.parse().ok().filter(|_| canonical).ok_or(NoteError::Malformed("the size is not decimal"))?;
        let root = B64
            .decode(root)
            .ok()
            .and_then(|r| <Hash>::try_from(r).ok())
            .ok_or(NoteError::Malformed("the root is not a base64 SHA-256 hash"))?;
        Ok(Self { origin: origin.to_owned(), size, root, extensions: lines.map(str::to_owned).collect() })
    }

    /// The signed note of this checkpoint.
    pub fn sign(&self, signer: &Signer) -> Result<String, NoteError> {
        Note::sign(&self.body(), &[signer])
    }

    /// Opens a signed checkpoint: the names whose signatures verified, and the checkpoint.
    /// `origin` is the log the auditor expects; a checkpoint of another log is refused.
    pub fn open(note: &str, trusted: &[Verifier], origin: &str) -> Result<(Self, Vec<String>), NoteError> {
        let n = Note::parse(note)?;
        let names = n.verify(trusted)?;
        let c = Self::parse_body(&n.text)?;
        if c.origin != origin {
            return Err(NoteError::Malformed("the checkpoint is of another log"));
        }
        if !names.iter().any(|name| name == origin) {
            return Err(NoteError::Unverified);
        }
        Ok((c, names))
    }
}

/// The note by which `old` hands the log to `new`: checkpoints of up to `from` leaves stay the
/// old key's, every larger one is the new key's. Both sign it, so the new key is known to be held
/// by whoever made the note.
pub fn rotation_note(old: &Signer, new: &Signer, from: u64) -> Result<String, NoteError> {
    Note::sign(&format!("{ROTATION_HEADER}\n{}\nafter {from}\n", new.verifier()), &[old, new])
}

/// The key a rotation note introduces and the size after which it signs, when `current` (the
/// log's key until then) signed it, the new key did too, and the new key carries the log's name.
pub fn open_rotation(note: &str, current: &Verifier) -> Result<(Verifier, u64), NoteError> {
    let n = Note::parse(note)?;
    n.verify(std::slice::from_ref(current))?;
    let mut lines = n.text.lines();
    if lines.next() != Some(ROTATION_HEADER) {
        return Err(NoteError::Malformed("not a key rotation note"));
    }
    let new = Verifier::parse(lines.next().ok_or(NoteError::Malformed("the rotation names no key"))?)?;
    if new.name != current.name {
        return Err(NoteError::Malformed("a rotation may only introduce a key with the log's name"));
    }
    let from = lines
        .next()
        .and_then(|l| l.strip_prefix("after "))
        .and_then(|n| n.parse().ok())
        .ok_or(NoteError::Malformed("the rotation does not say after which size it holds"))?;
    n.verify(std::slice::from_ref(&new))?;
    Ok((new, from))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_round_trips_and_refuses_what_it_should() {
        let log = Signer::generate("log.example/ledger").unwrap();
        let other = Signer::generate("log.example/ledger").unwrap();
        let c = Checkpoint { origin: "log.example/ledger".into(), size: 1234, root: [7; 32], extensions: vec![] };
        let note = c.sign(&log).unwrap();
        assert_eq!(Checkpoint::open(&note, &[log.verifier()], "log.example/ledger").unwrap().0, c);
        // Signed by another key with the same name: refused.
        assert_eq!(
            Checkpoint::open(&c.sign(&other).unwrap(), &[log.verifier()], "log.example/ledger"),
            Err(NoteError::Unverified)
        );
        assert!(Checkpoint::open(&note, &[log.verifier()], "log.example/other").is_err());
        for body in ["o\n01\nAAAA\n", "o\n1\n", "\n1\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n", "o\n-1\nx\n"] {
            assert!(Checkpoint::parse_body(body).is_err(), "{body:?}");
        }
        let ext = format!("{}extension line\n", c.body());
        assert_eq!(Checkpoint::parse_body(&ext).unwrap().extensions, vec!["extension line".to_owned()]);
    }

    #[test]
    fn a_witness_cosigns_and_a_rotation_introduces_the_next_key() {
        let log = Signer::generate("log.example/ledger").unwrap();
        let witness = Signer::generate("witness.example").unwrap();
        let c = Checkpoint {
            origin: "log.example/ledger".into(),
            size: 5,
            root: [1; 32],
            extensions: vec![heads_line(&Heads::new(), &[])],
        };
        let cosigned = Note::cosign(&c.sign(&log).unwrap(), &witness).unwrap();
        let _ = Heads::new();
        let (_, names) = Checkpoint::open(&cosigned, &[log.verifier(), witness.verifier()], &c.origin).unwrap();
        assert_eq!(names, vec!["log.example/ledger".to_owned(), "witness.example".to_owned()]);
        // A witness line that does not verify fails the note for an auditor who trusts the witness.
        let mut forged = Note::parse(&cosigned).unwrap();
        assert_eq!(forged.to_string(), cosigned);
        forged.signatures[1].bytes[0] ^= 1;
        let forged = forged.to_string();
        assert!(Checkpoint::open(&forged, &[log.verifier(), witness.verifier()], &c.origin).is_err());

        let next = Signer::generate("log.example/ledger").unwrap();
        let rot = rotation_note(&log, &next, 7).unwrap();
        assert_eq!(open_rotation(&rot, &log.verifier()).unwrap(), (next.verifier(), 7));
        assert!(open_rotation(&rot, &witness.verifier()).is_err());
        let self_made = rotation_note(&next, &next, 7).unwrap();
        assert!(open_rotation(&self_made, &log.verifier()).is_err());
        // The log's key cannot bring in a key under another name (a witness's, say).
        let posing = Signer::generate("witness.example").unwrap();
        assert!(open_rotation(&rotation_note(&log, &posing, 7).unwrap(), &log.verifier()).is_err());
    }
}
