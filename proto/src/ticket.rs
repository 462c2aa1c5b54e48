//! Dispatch tickets: the authorizer's allow, sealed so that the browser runtime can check it on
//! its own. The MAC key is derived per tenant from a ticket key both services read from their
//! environment (never from the database); a keyring lists the key that seals first and the keys
//! still accepted after it, so a key is rotated by rolling restarts: add it second everywhere,
//! move it first, then drop the old one once its tickets have expired.
//!
//! The body is read only after its MAC verifies, and what it binds (the session's profile, the
//! run, snapshot, ref and action) is checked by the runtime against the act in hand.

use std::fmt;

use hmac::{Hmac, Mac};
use prost::Message;
use sha2::Sha256;

use crate::limits::MAX_KEY_ID_CHARS;
use crate::v1::{DispatchTicket, FactsBody, FormBody, SealedFacts, SealedForm, SealedText, TextBody, TicketBody};

/// The variable that names the keyring file.
pub const KEYS_FILE_VAR: &str = "TICKET_KEYS_FILE";
const SECRET_BYTES: usize = 32;
const LABEL: &[u8] = b"grant-ledger dispatch ticket v1";
const FACTS_LABEL: &[u8] = b"grant-ledger element facts v1";
const TEXT_LABEL: &[u8] = b"grant-ledger record text v1";
const FORM_LABEL: &[u8] = b"grant-ledger form read-back v1";
const FORM_DIGEST_LABEL: &[u8] = b"grant-ledger form digest v1";
const DIGEST_LABEL: &[u8] = b"grant-ledger text digest v1";
const TENANT_LABEL: &[u8] = b"grant-ledger ticket tenant key v1";
const APPROVAL_LABEL: &[u8] = b"grant-ledger approval token v1";

type HmacSha256 = Hmac<Sha256>;

struct Key {
    id: String,
    secret: [u8; SECRET_BYTES],
}

/// The ticket keys, the sealing one first. Its `Debug` names the ids only.
pub struct Keyring {
    keys: Vec<Key>,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring").field("ids", &self.keys.iter().map(|k| &k.id).collect::<Vec<_>>()).finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyringError {
    #[error("line {line}: {why}")]
    Line { line: usize, why: String },
    #[error("no ticket key: a line `<key id> <64 hex digits>` is needed (grantctl tickets keygen writes one)")]
    Empty,
}

/// Why a ticket was refused; all of them mean the same to the act: it is not authorized.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TicketError {
    #[error("the ticket names a key this runtime does not hold")]
    UnknownKey,
    #[error("the ticket's seal does not verify for this tenant")]
    Forged,
    #[error("the ticket's body does not decode")]
    Malformed,
}

impl Keyring {
    /// One key a line, `<key id> <64 lowercase hex digits>`; blank lines and `#` comments are
    /// skipped. The first key seals; every key verifies.
    pub fn parse(text: &str) -> Result<Self, KeyringError> {
        let mut keys: Vec<Key> = Vec::new();
        for (n, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why: &str| KeyringError::Line { line: n + 1, why: why.to_owned() };
            let mut words = line.split_whitespace();
            let (Some(id), Some(hex_secret), None) = (words.next(), words.next(), words.next()) else {
                return Err(bad("is not `<key id> <64 hex digits>`"));
            };
            let id_ok = id.len() <= MAX_KEY_ID_CHARS
                && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
            if !id_ok {
                return Err(bad("the key id is 1-32 letters, digits, '-', '_' or '.'"));
            }
            let mut secret = [0u8; SECRET_BYTES];
            if hex_secret.len() != 2 * SECRET_BYTES || hex::decode_to_slice(hex_secret, &mut secret).is_err() {
                return Err(bad("the secret is 64 hex digits (32 bytes)"));
            }
            if keys.iter().any(|k| k.id == id) {
                return Err(bad("the key id is listed twice"));
            }
            keys.push(Key { id: id.to_owned(), secret });
        }
        if keys.is_empty() {
            return Err(KeyringError::Empty);
        }
        Ok(Self { keys })
    }

    /// The keyring in the file the variable `TICKET_KEYS_FILE` names, as both services read it.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let Some(file) = get(KEYS_FILE_VAR) else {
            return Err(format!(
                "{KEYS_FILE_VAR} is not set: it names the dispatch-ticket keyring the authorizer and the \
                 runtime share (make one with `grantctl tickets keygen > FILE`)"
            ));
        };
        let text =
            std::fs::read_to_string(&file).map_err(|e| format!("{KEYS_FILE_VAR}={file:?} cannot be read: {e}"))?;
        Self::parse(&text).map_err(|e| format!("{KEYS_FILE_VAR}={file:?}: {e}"))
    }

    /// A keyring line for a new key from 32 random bytes.
    pub fn line(id: &str, secret: [u8; SECRET_BYTES]) -> String {
        format!("{id} {}", hex::encode(secret))
    }

    /// The id of the key that seals.
    pub fn sealing_id(&self) -> &str {
        &self.keys[0].id
    }

    /// Seals `body` for its own tenant with the first key.
    pub fn seal(&self, body: &TicketBody) -> DispatchTicket {
        let (key_id, body, mac) = self.seal_bytes(LABEL, &body.tenant_id, body.encode_to_vec());
        DispatchTicket { key_id, body, mac }
    }

    /// The body of `ticket` if its MAC verifies under `tenant`'s key: a ticket sealed for
    /// another tenant, with another key or with one byte changed is refused.
    pub fn open(&self, tenant: &str, ticket: &DispatchTicket) -> Result<TicketBody, TicketError> {
        self.open_bytes(LABEL, tenant, &ticket.key_id, &ticket.body, &ticket.mac)?;
        let body = TicketBody::decode(ticket.body.as_slice()).map_err(|_| TicketError::Malformed)?;
        // The MAC was under the caller's tenant already; the body must say the same.
        if body.tenant_id != tenant {
            return Err(TicketError::Forged);
        }
        Ok(body)
    }

    /// The runtime's facts of one element, sealed for their tenant with the first key (under a
    /// label of their own: a ticket is never read as facts, nor facts as a ticket).
    pub fn seal_facts(&self, body: &FactsBody) -> SealedFacts {
        let (key_id, body, mac) = self.seal_bytes(FACTS_LABEL, &body.tenant_id, body.encode_to_vec());
        SealedFacts { key_id, body, mac }
    }

    /// The body of sealed facts if their MAC verifies under `tenant`'s key.
    pub fn open_facts(&self, tenant: &str, sealed: &SealedFacts) -> Result<FactsBody, TicketError> {
        self.open_bytes(FACTS_LABEL, tenant, &sealed.key_id, &sealed.body, &sealed.mac)?;
        let body = FactsBody::decode(sealed.body.as_slice()).map_err(|_| TicketError::Malformed)?;
        if body.tenant_id != tenant {
            return Err(TicketError::Forged);
        }
        Ok(body)
    }

    /// One record value's shape, sealed for its tenant with the first key.
    pub fn seal_text(&self, body: &TextBody) -> SealedText {
        let (key_id, body, mac) = self.seal_bytes(TEXT_LABEL, &body.tenant_id, body.encode_to_vec());
        SealedText { key_id, body, mac }
    }

    /// The body of a sealed record text if its MAC verifies under `tenant`'s key.
    pub fn open_text(&self, tenant: &str, sealed: &SealedText) -> Result<TextBody, TicketError> {
        self.open_bytes(TEXT_LABEL, tenant, &sealed.key_id, &sealed.body, &sealed.mac)?;
        let body = TextBody::decode(sealed.body.as_slice()).map_err(|_| TicketError::Malformed)?;
        if body.tenant_id != tenant {
            return Err(TicketError::Forged);
        }
        Ok(body)
    }

    /// A form's read-back, sealed for its tenant with the first key.
    pub fn seal_form(&self, body: &FormBody) -> SealedForm {
        let (key_id, body, mac) = self.seal_bytes(FORM_LABEL, &body.tenant_id, body.encode_to_vec());
        SealedForm { key_id, body, mac }
    }

    /// The body of a sealed form read-back if its MAC verifies under `tenant`'s key.
    pub fn open_form(&self, tenant: &str, sealed: &SealedForm) -> Result<FormBody, TicketError> {
        self.open_bytes(FORM_LABEL, tenant, &sealed.key_id, &sealed.body, &sealed.mac)?;
        let body = FormBody::decode(sealed.body.as_slice()).map_err(|_| TicketError::Malformed)?;
        if body.tenant_id != tenant {
            return Err(TicketError::Forged);
        }
        Ok(body)
    }

    /// The keyed digest of a form's fields, each as (label, name, kind, value, checked), in page
    /// order: what an approval of its button binds. Length-prefixed, so no two forms share one.
    pub fn form_digest<'a>(&self, tenant: &str, fields: impl IntoIterator<Item = FormPart<'a>>) -> Vec<u8> {
        let key = &self.keys[0];
        let mut mac = tag(key, FORM_DIGEST_LABEL, tenant, &[]);
        for f in fields {
            for part in [f.label, f.name, f.kind, f.value, if f.checked { "1" } else { "0" }] {
                mac.update(&(part.len() as u64).to_be_bytes());
                mac.update(part.as_bytes());
            }
        }
        mac.finalize().into_bytes().to_vec()
    }

    /// The keyed digest of a text a type types, under the sealing key: what tickets, cards and
    /// redemptions bind. Keyed, so that a worker who sees it cannot guess a short secret from it.
    pub fn text_digest(&self, tenant: &str, text: &str) -> Vec<u8> {
        digest(&self.keys[0], tenant, text)
    }

    /// Whether `bound` is `text`'s keyed digest under any key of the ring (a digest made before a
    /// rotation still fits).
    pub fn digest_fits(&self, tenant: &str, text: &str, bound: &[u8]) -> bool {
        self.keys.iter().any(|k| digest(k, tenant, text).as_slice() == bound)
    }

    /// The approval token of approval `approval_id` under the sealing key: derived, never stored,
    /// so the authorizer can hand it to the session's worker when the owner approves. Only its
    /// SHA-256 is recorded; redeeming it needs that record, unspent.
    pub fn approval_token(&self, tenant: &str, approval_id: &[u8; 16]) -> String {
        approval_token_of(&self.keys[0], tenant, approval_id)
    }

    /// The token under every key of the ring, the sealing key's first: one issued before a
    /// rotation is still found.
    pub fn approval_tokens<'a>(
        &'a self,
        tenant: &'a str,
        approval_id: &'a [u8; 16],
    ) -> impl Iterator<Item = String> + 'a {
        self.keys.iter().map(move |k| approval_token_of(k, tenant, approval_id))
    }

    fn seal_bytes(&self, label: &[u8], tenant: &str, bytes: Vec<u8>) -> (String, Vec<u8>, Vec<u8>) {
        let key = &self.keys[0];
        let mac = tag(key, label, tenant, &bytes).finalize().into_bytes().to_vec();
        (key.id.clone(), bytes, mac)
    }

    fn open_bytes(&self, label: &[u8], tenant: &str, key_id: &str, body: &[u8], mac: &[u8]) -> Result<(), TicketError> {
        let key = self.keys.iter().find(|k| k.id == key_id).ok_or(TicketError::UnknownKey)?;
        tag(key, label, tenant, body).verify_slice(mac).map_err(|_| TicketError::Forged)
    }
}

fn approval_token_of(key: &Key, tenant: &str, approval_id: &[u8; 16]) -> String {
    let mac = tag(key, APPROVAL_LABEL, tenant, approval_id).finalize().into_bytes();
    let mut bits = [0; crate::limits::APPROVAL_TOKEN_HEX / 2];
    let n = bits.len();
    bits.copy_from_slice(&mac[..n]);
    crate::limits::approval_token(bits)
}

fn digest(key: &Key, tenant: &str, text: &str) -> Vec<u8> {
    tag(key, DIGEST_LABEL, tenant, text.as_bytes()).finalize().into_bytes().to_vec()
}

/// One field of a form as its digest reads it.
#[derive(Debug, Clone, Copy)]
pub struct FormPart<'a> {
    pub label: &'a str,
    pub name: &'a str,
    /// The field kind's stable name.
    pub kind: &'a str,
    pub value: &'a str,
    pub checked: bool,
}

/// The MAC state over (label, key id, body) under `tenant`'s key derived from `key`.
fn tag(key: &Key, label: &[u8], tenant: &str, body: &[u8]) -> HmacSha256 {
    let mut derive = HmacSha256::new_from_slice(&key.secret).expect("HMAC takes any key length");
    derive.update(TENANT_LABEL);
    derive.update(&[0]);
    derive.update(tenant.as_bytes());
    let tenant_key = derive.finalize().into_bytes();
    let mut mac = HmacSha256::new_from_slice(&tenant_key).expect("HMAC takes any key length");
    mac.update(label);
    mac.update(&[0]);
    mac.update(key.id.as_bytes());
    mac.update(&[0]);
    mac.update(body);
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(lines: &str) -> Keyring {
        Keyring::parse(lines).expect("keyring")
    }

    fn body() -> TicketBody {
        TicketBody { ticket_id: "t1".into(), tenant_id: "tenant-1".into(), run_id: "run".into(), ..Default::default() }
    }

    const K1: &str = "k1 0000000000000000000000000000000000000000000000000000000000000001";
    const K2: &str = "k2 0000000000000000000000000000000000000000000000000000000000000002";

    #[test]
    fn a_sealed_ticket_opens_for_its_tenant_only() {
        let keys = ring(K1);
        let t = keys.seal(&body());
        assert_eq!(keys.open("tenant-1", &t), Ok(body()));
        assert_eq!(keys.open("tenant-2", &t), Err(TicketError::Forged));
        // A body rewritten to name the other tenant does not verify there either.
        let other = TicketBody { tenant_id: "tenant-2".into(), ..body() };
        let swapped = DispatchTicket { body: other.encode_to_vec(), ..t.clone() };
        assert_eq!(keys.open("tenant-2", &swapped), Err(TicketError::Forged));
    }

    #[test]
    fn every_byte_is_sealed() {
        let keys = ring(K1);
        let t = keys.seal(&body());
        for i in 0..t.body.len() {
            let mut changed = t.clone();
            changed.body[i] ^= 1;
            assert_eq!(keys.open("tenant-1", &changed), Err(TicketError::Forged), "body byte {i}");
        }
        for i in 0..t.mac.len() {
            let mut changed = t.clone();
            changed.mac[i] ^= 0x80;
            assert_eq!(keys.open("tenant-1", &changed), Err(TicketError::Forged), "mac byte {i}");
        }
        let short = DispatchTicket { mac: t.mac[..16].to_vec(), ..t.clone() };
        assert_eq!(keys.open("tenant-1", &short), Err(TicketError::Forged));
        let renamed = DispatchTicket { key_id: "k2".into(), ..t };
        assert_eq!(keys.open("tenant-1", &renamed), Err(TicketError::UnknownKey));
    }

    #[test]
    fn rotation_keeps_old_tickets_valid_until_their_key_is_dropped() {
        let old = ring(K1);
        let during = ring(&format!("{K2}\n{K1}\n"));
        let after = ring(K2);
        let sealed_old = old.seal(&body());
        let sealed_new = during.seal(&body());
        assert_eq!(sealed_new.key_id, "k2");
        assert!(during.open("tenant-1", &sealed_old).is_ok());
        assert!(after.open("tenant-1", &sealed_new).is_ok());
        assert_eq!(after.open("tenant-1", &sealed_old), Err(TicketError::UnknownKey));
        // The same id with another secret is a forgery, not a rotation.
        let impostor = ring("k1 00000000000000000000000000000000000000000000000000000000000000ff");
        assert_eq!(impostor.open("tenant-1", &sealed_old), Err(TicketError::Forged));
    }

    #[test]
    fn facts_and_tickets_are_sealed_apart() {
        let keys = ring(K1);
        let facts = FactsBody { tenant_id: "tenant-1".into(), node_ref: "n1".into(), ..Default::default() };
        let sealed = keys.seal_facts(&facts);
        assert_eq!(keys.open_facts("tenant-1", &sealed), Ok(facts));
        assert_eq!(keys.open_facts("tenant-2", &sealed), Err(TicketError::Forged));
        // The same bytes and MAC presented as the other kind do not verify.
        let as_ticket = DispatchTicket { key_id: sealed.key_id, body: sealed.body, mac: sealed.mac };
        assert_eq!(keys.open("tenant-1", &as_ticket), Err(TicketError::Forged));
    }

    #[test]
    fn a_keyring_refuses_what_is_not_a_key() {
        assert_eq!(Keyring::parse("# none\n\n").unwrap_err(), KeyringError::Empty);
        for bad in [
            "k1",
            "k1 abc",
            "k1 zz00000000000000000000000000000000000000000000000000000000000000",
            "k 1 00",
            "bad/id 00",
        ] {
            assert!(matches!(Keyring::parse(bad), Err(KeyringError::Line { line: 1, .. })), "{bad:?}");
        }
        assert!(Keyring::parse(&format!("{K1}\n{K1}")).is_err(), "an id twice");
        assert!(!format!("{:?}", ring(K1)).contains("0000000000000001"), "Debug shows no secret");
        assert_eq!(ring(&Keyring::line("new", [7; 32])).sealing_id(), "new");
    }
}
