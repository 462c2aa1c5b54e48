//! Signed notes as C2SP `signed-note` defines them, with Ed25519 keys: a text, a blank line,
//! then one line per signature, `— <key name> <base64(key id ‖ signature)>`. The key strings
//! are the format's own: `<name>+<key id hex>+<base64(0x01 ‖ public key)>` for a verifier and
//! `PRIVATE+KEY+<name>+<key id hex>+<base64(0x01 ‖ seed)>` for a signer.
//!
//! Written here over `ring` rather than taken from a crate: the one Rust port pulls a second
//! copy of several dependencies, and the format is a page long. Go's reference implementation
//! checks what this writes in the interoperability test.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair as _, UnparsedPublicKey};
use sha2::{Digest, Sha256};

/// The signature type byte of Ed25519 in key ids and key strings.
const ED25519_TYPE: u8 = 0x01;
/// A note with more signature lines than this is refused, as the reference does.
const MAX_SIGNATURES: usize = 100;
/// The marker that begins a signature line: an em dash and a space.
const SIG_PREFIX: &str = "\u{2014} ";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    #[error("key name {0:?} is empty or holds a space or a plus sign")]
    BadName(String),
    #[error("the key string is not in the signed-note format: {0}")]
    BadKey(&'static str),
    #[error("the note is malformed: {0}")]
    Malformed(&'static str),
    #[error("a signature by {name} (key {id:08x}) does not verify: the note was changed or forged")]
    BadSignature { name: String, id: u32 },
    #[error("no signature by a key this verifier trusts")]
    Unverified,
}

fn check_name(name: &str) -> Result<(), NoteError> {
    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control() || c == '+') {
        return Err(NoteError::BadName(name.to_owned()));
    }
    Ok(())
}

/// The key id the format recommends: the first four bytes of SHA-256(name ‖ LF ‖ 0x01 ‖ key).
pub fn key_id(name: &str, public_key: &[u8; 32]) -> u32 {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update(b"\n");
    h.update([ED25519_TYPE]);
    h.update(public_key);
    let d = h.finalize();
    u32::from_be_bytes([d[0], d[1], d[2], d[3]])
}

/// A public key an auditor holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verifier {
    pub name: String,
    pub id: u32,
    pub key: [u8; 32],
}

impl Verifier {
    pub fn parse(s: &str) -> Result<Self, NoteError> {
        let s = s.trim();
        // A name holds no plus sign; the base64 key may.
        let mut parts = s.splitn(3, '+');
        let (Some(name), Some(id), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(NoteError::BadKey("expected name+id+key"));
        };
        check_name(name)?;
        let id = parse_id(id)?;
        let key = typed_key(key)?;
        if key_id(name, &key) != id {
            return Err(NoteError::BadKey("the key id does not match the name and key"));
        }
        Ok(Self { name: name.to_owned(), id, key })
    }

    pub fn verifies(&self, text: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(&ED25519, &self.key).verify(text, signature).is_ok()
    }
}

impl std::fmt::Display for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut typed = vec![ED25519_TYPE];
        typed.extend_from_slice(&self.key);
        write!(f, "{}+{:08x}+{}", self.name, self.id, B64.encode(typed))
    }
}

fn parse_id(s: &str) -> Result<u32, NoteError> {
    if s.len() != 8 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(NoteError::BadKey("the key id is not eight hex digits"));
    }
    u32::from_str_radix(s, 16).map_err(|_| NoteError::BadKey("the key id is not hex"))
}

fn typed_key(s: &str) -> Result<[u8; 32], NoteError> {
    let bytes = B64.decode(s).map_err(|_| NoteError::BadKey("the key is not base64"))?;
    match bytes.split_first() {
        Some((&ED25519_TYPE, rest)) => rest.try_into().map_err(|_| NoteError::BadKey("an Ed25519 key is 32 bytes")),
        _ => Err(NoteError::BadKey("only Ed25519 keys (type 0x01) are supported")),
    }
}

/// A private key the log (or a witness) signs with. It never enters the database.
pub struct Signer {
    pub name: String,
    pub id: u32,
    pair: Ed25519KeyPair,
    seed: [u8; 32],
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signer({}+{:08x})", self.name, self.id)
    }
}

impl Signer {
    pub fn from_seed(name: &str, seed: [u8; 32]) -> Result<Self, NoteError> {
        check_name(name)?;
        let pair = Ed25519KeyPair::from_seed_unchecked(&seed).map_err(|_| NoteError::BadKey("not an Ed25519 seed"))?;
        let public: [u8; 32] = pair.public_key().as_ref().try_into().map_err(|_| NoteError::BadKey("key length"))?;
        Ok(Self { name: name.to_owned(), id: key_id(name, &public), pair, seed })
    }

    /// A new key from the system's randomness.
    pub fn generate(name: &str) -> Result<Self, NoteError> {
        let mut seed = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut seed)
            .map_err(|_| NoteError::BadKey("the system gave no randomness"))?;
        Self::from_seed(name, seed)
    }

    pub fn parse(s: &str) -> Result<Self, NoteError> {
        let rest = s.trim().strip_prefix("PRIVATE+KEY+").ok_or(NoteError::BadKey("expected PRIVATE+KEY+…"))?;
        let mut parts = rest.splitn(3, '+');
        let (Some(name), Some(id), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(NoteError::BadKey("expected PRIVATE+KEY+name+id+key"));
        };
        let signer = Self::from_seed(name, typed_key(key)?)?;
        if signer.id != parse_id(id)? {
            return Err(NoteError::BadKey("the key id does not match the name and key"));
        }
        Ok(signer)
    }

    /// The private key string, for the operator's key file only.
    pub fn to_private_string(&self) -> String {
        let mut typed = vec![ED25519_TYPE];
        typed.extend_from_slice(&self.seed);
        format!("PRIVATE+KEY+{}+{:08x}+{}", self.name, self.id, B64.encode(typed))
    }

    pub fn verifier(&self) -> Verifier {
        let key = self.pair.public_key().as_ref().try_into().expect("an Ed25519 public key is 32 bytes");
        Verifier { name: self.name.clone(), id: self.id, key }
    }

    /// The signature line for `text`.
    pub fn sign_line(&self, text: &str) -> String {
        let mut sig = self.id.to_be_bytes().to_vec();
        sig.extend_from_slice(self.pair.sign(text.as_bytes()).as_ref());
        format!("{SIG_PREFIX}{} {}\n", self.name, B64.encode(sig))
    }
}

/// A parsed note: its text and its signature lines, none of them checked yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub text: String,
    pub signatures: Vec<Signature>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    pub name: String,
    pub id: u32,
    pub bytes: Vec<u8>,
}

impl Note {
    /// A new note signed by `signers`. `text` must end in a newline and hold no blank line.
    pub fn sign(text: &str, signers: &[&Signer]) -> Result<String, NoteError> {
        check_text(text)?;
        let mut out = format!("{text}\n");
        for s in signers {
            out.push_str(&s.sign_line(text));
        }
        Ok(out)
    }

    /// Adds a signature line to a note's text (a witness cosigning).
    pub fn cosign(note: &str, signer: &Signer) -> Result<String, NoteError> {
        let parsed = Self::parse(note)?;
        let mut out = note.to_owned();
        out.push_str(&signer.sign_line(&parsed.text));
        Ok(out)
    }

    pub fn parse(note: &str) -> Result<Self, NoteError> {
        let split = note.rfind("\n\n").ok_or(NoteError::Malformed("no blank line before the signatures"))?;
        let (text, sigs) = (&note[..=split], &note[split + 2..]);
        check_text(text)?;
        if sigs.is_empty() || !sigs.ends_with('\n') {
            return Err(NoteError::Malformed("the signatures do not end in a newline"));
        }
        let mut signatures = Vec::new();
        for line in sigs[..sigs.len() - 1].split('\n') {
            let rest = line.strip_prefix(SIG_PREFIX).ok_or(NoteError::Malformed("a signature line lacks its dash"))?;
            let (name, b64) = rest.split_once(' ').ok_or(NoteError::Malformed("a signature line lacks its space"))?;
            check_name(name).map_err(|_| NoteError::Malformed("a signature's key name is not valid"))?;
            let bytes = B64.decode(b64).map_err(|_| NoteError::Malformed("a signature is not base64"))?;
            if bytes.len() < 5 {
                return Err(NoteError::Malformed("a signature is too short"));
            }
            let id = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            signatures.push(Signature { name: name.to_owned(), id, bytes: bytes[4..].to_vec() });
            if signatures.len() > MAX_SIGNATURES {
                return Err(NoteError::Malformed("too many signatures"));
            }
        }
        Ok(Self { text: text.to_owned(), signatures })
    }

    /// The names of the `trusted` keys whose signatures verify. A signature by a trusted key
    /// that does not verify fails the whole note; signatures by other keys are ignored, as the
    /// format says. At least one trusted signature is required.
    pub fn verify(&self, trusted: &[Verifier]) -> Result<Vec<String>, NoteError> {
        let mut good = Vec::new();
        for s in &self.signatures {
            let Some(v) = trusted.iter().find(|v| v.name == s.name && v.id == s.id) else { continue };
            if !v.verifies(self.text.as_bytes(), &s.bytes) {
                return Err(NoteError::BadSignature { name: s.name.clone(), id: s.id });
            }
            if !good.contains(&v.name) {
                good.push(v.name.clone());
            }
        }
        if good.is_empty() { Err(NoteError::Unverified) } else { Ok(good) }
    }
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{}", self.text)?;
        for s in &self.signatures {
            let mut bytes = s.id.to_be_bytes().to_vec();
            bytes.extend_from_slice(&s.bytes);
            writeln!(f, "{SIG_PREFIX}{} {}", s.name, B64.encode(bytes))?;
        }
        Ok(())
    }
}

fn check_text(text: &str) -> Result<(), NoteError> {
    if !text.ends_with('\n') {
        return Err(NoteError::Malformed("the text does not end in a newline"));
    }
    if text.contains("\n\n") || text.starts_with('\n') {
        return Err(NoteError::Malformed("the text holds a blank line"));
    }
    if text.chars().any(|c| c.is_control() && c != '\n') {
        return Err(NoteError::Malformed("the text holds a control character"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example in the signed-note specification, checked with its published key.
    #[test]
    fn the_specifications_example_verifies() {
        let v = Verifier::parse("example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k").unwrap();
        let note = "This is an example message.\n\n\u{2014} example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n";
        assert_eq!(Note::parse(note).unwrap().verify(std::slice::from_ref(&v)), Ok(vec!["example.com/foo".to_owned()]));
        let changed = note.replace("example message", "exemple message");
        assert!(matches!(Note::parse(&changed).unwrap().verify(&[v]), Err(NoteError::BadSignature { .. })));
    }

    #[test]
    fn keys_round_trip_and_another_key_is_not_trusted() {
        let a = Signer::generate("log.example/a").unwrap();
        let b = Signer::generate("log.example/a").unwrap();
        assert_eq!(Signer::parse(&a.to_private_string()).unwrap().verifier(), a.verifier());
        assert_eq!(Verifier::parse(&a.verifier().to_string()).unwrap(), a.verifier());
        let note = Note::sign("hello\n", &[&a]).unwrap();
        assert!(Note::parse(&note).unwrap().verify(&[a.verifier()]).is_ok());
        assert_eq!(Note::parse(&note).unwrap().verify(&[b.verifier()]), Err(NoteError::Unverified));
        // A line claiming a's name and id over b's signature fails outright.
        let mut n = Note::parse(&Note::sign("hello\n", &[&b]).unwrap()).unwrap();
        n.signatures[0].id = a.id;
        assert!(matches!(n.verify(&[a.verifier()]), Err(NoteError::BadSignature { .. })));
        for bad in ["", "no blank line\n", "a\n\nb\n\n", "a\n\n\u{2014} x\n", "a\n\n- x AAAA\n"] {
            assert!(Note::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Verifier::parse("name+00000000+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k").is_err());
    }
}
