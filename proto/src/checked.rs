//! The codec both services decode requests with: before prost reads a request, its wire bytes are
//! walked with the compiled descriptors and every field is checked against the field table
//! (`limits`). A string must be UTF-8 without NUL and within its length, a repeated field within
//! its count, an enum one of its declared values, a closed set one of its members; an unknown
//! field, a field sent twice, two members of one oneof or a malformed message is refused. Every
//! refusal is INVALID_ARGUMENT naming the field, before the service sees the request, so nothing
//! is written. Replies and messages that are no service's input decode as prost decodes them.

use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::sync::OnceLock;

use prost::bytes::Buf;
use prost_reflect::{DescriptorPool, FieldDescriptor, Kind, MessageDescriptor};
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::limits::{self, Allowed, Rule};

pub(crate) const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));

/// Nesting deeper than any request has: a bound on the walk's recursion.
const MAX_DEPTH: usize = 8;

/// A refused field: its path from the request's root (`element.labels[2]`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub field: String,
    pub description: String,
}

/// The one shape of INVALID_ARGUMENT both services answer: `field: description`, with the
/// field as a `BadRequest` violation a client can branch on.
pub fn invalid_argument(field: &str, description: &str) -> Status {
    Violation::new(field, description).into_status()
}

impl Violation {
    fn new(field: impl Into<String>, description: impl Into<String>) -> Self {
        Self { field: field.into(), description: description.into() }
    }

    pub fn into_status(self) -> Status {
        Status::with_error_details(
            Code::InvalidArgument,
            format!("{}: {}", self.field, self.description),
            ErrorDetails::with_bad_request_violation(self.field, self.description),
        )
    }
}

struct Field {
    descriptor: FieldDescriptor,
    rule: Option<Rule>,
}

/// The descriptors, indexed by message and field number, and the set of request messages.
pub struct Checker {
    pool: DescriptorPool,
    fields: HashMap<String, HashMap<u32, Field>>,
    requests: HashSet<String>,
}

impl std::fmt::Debug for Checker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checker").field("requests", &self.requests).finish_non_exhaustive()
    }
}

impl Checker {
    /// The one checker, built from the descriptors compiled with this crate.
    pub fn get() -> &'static Self {
        static CHECKER: OnceLock<Checker> = OnceLock::new();
        CHECKER.get_or_init(|| {
            let pool = DescriptorPool::decode(DESCRIPTORS).expect("the descriptors compiled with this crate decode");
            Self::new(pool)
        })
    }

    fn new(pool: DescriptorPool) -> Self {
        let requests: HashSet<String> = pool
            .services()
            .flat_map(|s| s.methods().map(|m| m.input().full_name().to_owned()).collect::<Vec<_>>())
            .collect();
        let fields = pool
            .all_messages()
            .map(|m| {
                let by_number = m
                    .fields()
                    .map(|f| (f.number(), Field { rule: limits::rule(f.full_name()), descriptor: f }))
                    .collect();
                (m.full_name().to_owned(), by_number)
            })
            .collect();
        Self { pool, fields, requests }
    }

    pub fn pool(&self) -> &DescriptorPool {
        &self.pool
    }

    /// Every service's input messages and the messages they hold, by full name.
    pub fn request_messages(&self) -> Vec<MessageDescriptor> {
        let mut seen = HashSet::new();
        let mut todo: Vec<MessageDescriptor> =
            self.requests.iter().filter_map(|n| self.pool.get_message_by_name(n)).collect();
        let mut out = Vec::new();
        while let Some(m) = todo.pop() {
            if !seen.insert(m.full_name().to_owned()) {
                continue;
            }
            for f in m.fields() {
                if let Kind::Message(inner) = f.kind() {
                    todo.push(inner);
                }
            }
            out.push(m);
        }
        out.sort_by(|a, b| a.full_name().cmp(b.full_name()));
        out
    }

    /// Whether `message` is some service's input, and so is checked.
    pub fn is_request(&self, message: &str) -> bool {
        self.requests.contains(message)
    }

    /// Checks the wire bytes of one `message`.
    pub fn check(&self, message: &str, bytes: &[u8]) -> Result<(), Violation> {
        self.walk(message, bytes, "", 0)
    }

    fn walk(&self, message: &str, mut bytes: &[u8], path: &str, depth: usize) -> Result<(), Violation> {
        let here = |name: &str| if path.is_empty() { name.to_owned() } else { format!("{path}.{name}") };
        let malformed =
            || Violation::new(if path.is_empty() { "request" } else { path }, "is not a well-formed message");
        if depth > MAX_DEPTH {
            return Err(malformed());
        }
        let Some(fields) = self.fields.get(message) else { return Err(malformed()) };
        let mut counts: HashMap<u32, usize> = HashMap::new();
        let mut oneofs: HashMap<String, u32> = HashMap::new();
        while !bytes.is_empty() {
            let key = varint(&mut bytes).ok_or_else(malformed)?;
            let (number, wire) = (u32::try_from(key >> 3).map_err(|_| malformed())?, key & 7);
            let Some(field) = fields.get(&number) else {
                return Err(Violation::new(here(&format!("#{number}")), "is not a field of this message"));
            };
            let f = &field.descriptor;
            let Some(rule) = field.rule else {
                return Err(Violation::new(here(f.name()), "has no limit in the field table"));
            };
            let count = counts.entry(number).or_default();
            *count += 1;
            let name = if f.is_list() { format!("{}[{}]", here(f.name()), *count - 1) } else { here(f.name()) };
            if !f.is_list() && *count > 1 {
                return Err(Violation::new(name, "is sent more than once"));
            }
            if *count > rule.max_items {
                return Err(Violation::new(here(f.name()), format!("has at most {} items", rule.max_items)));
            }
            if let Some(o) = f.containing_oneof() {
                let first = *oneofs.entry(o.name().to_owned()).or_insert(number);
                if first != number {
                    return Err(Violation::new(here(o.name()), "holds more than one of its members"));
                }
            }
            match (f.kind(), wire) {
                (Kind::String, 2) => check_text(&name, delimited(&mut bytes).ok_or_else(malformed)?, rule)?,
                (Kind::Bytes, 2) => {
                    let b = delimited(&mut bytes).ok_or_else(malformed)?;
                    if b.len() > rule.max_len {
                        return Err(Violation::new(name, format!("is at most {} bytes", rule.max_len)));
                    }
                }
                (Kind::Message(inner), 2) => {
                    let b = delimited(&mut bytes).ok_or_else(malformed)?;
                    self.walk(inner.full_name(), b, &name, depth + 1)?;
                }
                (Kind::Enum(e), 0) => {
                    let v = varint(&mut bytes).ok_or_else(malformed)?;
                    let known = i32::try_from(v as i64).ok().is_some_and(|v| e.get_value(v).is_some());
                    if !known {
                        return Err(Violation::new(name, "is not one of its declared values"));
                    }
                }
                (Kind::Bool | Kind::Int32 | Kind::Int64 | Kind::Uint32 | Kind::Uint64, 0) => {
                    let v = varint(&mut bytes).ok_or_else(malformed)?;
                    check_number(&name, f.kind(), v, rule)?;
                }
                (Kind::Sint32 | Kind::Sint64, 0) => drop(varint(&mut bytes).ok_or_else(malformed)?),
                (Kind::Fixed64 | Kind::Sfixed64 | Kind::Double, 1) => skip(&mut bytes, 8).ok_or_else(malformed)?,
                (Kind::Fixed32 | Kind::Sfixed32 | Kind::Float, 5) => skip(&mut bytes, 4).ok_or_else(malformed)?,
                _ => return Err(Violation::new(name, "has the wrong wire type")),
            }
        }
        Ok(())
    }
}

fn check_text(name: &str, b: &[u8], rule: Rule) -> Result<(), Violation> {
    let s = std::str::from_utf8(b).map_err(|_| Violation::new(name, "is not valid UTF-8"))?;
    if s.contains('\0') {
        return Err(Violation::new(name, "contains a NUL character"));
    }
    if s.chars().count() > rule.max_len {
        return Err(Violation::new(name, format!("is at most {} characters", rule.max_len)));
    }
    if let Allowed::Strs(set) = rule.allowed
        && !s.is_empty()
        && !set.contains(&s)
    {
        return Err(Violation::new(name, format!("is one of {}", set.join(", "))));
    }
    Ok(())
}

fn check_number(name: &str, kind: Kind, v: u64, rule: Rule) -> Result<(), Violation> {
    // int32 travels sign-extended to 64 bits; anything else out of its type's range is malformed.
    let value = match kind {
        Kind::Int32 => i64::from(i32::try_from(v as i64).map_err(|_| Violation::new(name, "is out of range"))?),
        Kind::Uint32 => i64::from(u32::try_from(v).map_err(|_| Violation::new(name, "is out of range"))?),
        Kind::Bool if v > 1 => return Err(Violation::new(name, "is not a boolean")),
        _ => v as i64,
    };
    match rule.allowed {
        Allowed::Ints(set) if !set.iter().any(|s| i64::from(*s) == value) => {
            let set: Vec<String> = set.iter().map(ToString::to_string).collect();
            Err(Violation::new(name, format!("is one of {}", set.join(", "))))
        }
        Allowed::Range(lo, hi) if !(lo..=hi).contains(&v) => Err(Violation::new(name, format!("is {lo} to {hi}"))),
        _ => Ok(()),
    }
}

fn varint(b: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for i in 0..10 {
        let (&byte, rest) = b.split_first()?;
        *b = rest;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

fn delimited<'a>(b: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = usize::try_from(varint(b)?).ok()?;
    if len > b.len() {
        return None;
    }
    let (head, rest) = b.split_at(len);
    *b = rest;
    Some(head)
}

fn skip(b: &mut &[u8], n: usize) -> Option<()> {
    if n > b.len() {
        return None;
    }
    *b = &b[n..];
    Some(())
}

/// tonic's prost codec with the request check in front of decoding.
#[derive(Debug, Clone)]
pub struct CheckedCodec<T, U> {
    _pd: PhantomData<(T, U)>,
}

impl<T, U> Default for CheckedCodec<T, U> {
    fn default() -> Self {
        Self { _pd: PhantomData }
    }
}

impl<T, U> Codec for CheckedCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + prost::Name + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = tonic_prost::ProstEncoder<T>;
    type Decoder = CheckedDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        tonic_prost::ProstEncoder::new(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        CheckedDecoder { _pd: PhantomData }
    }
}

/// Decodes `U` after checking it, when `U` is a request.
#[derive(Debug, Clone)]
pub struct CheckedDecoder<U> {
    _pd: PhantomData<U>,
}

impl<U: prost::Message + prost::Name + Default> Decoder for CheckedDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        let bytes = buf.copy_to_bytes(buf.remaining());
        let checker = Checker::get();
        let name = U::full_name();
        if checker.is_request(&name) {
            checker.check(&name, &bytes).map_err(Violation::into_status)?;
        }
        // A request that does not decode is its caller's fault; a reply, its server's.
        U::decode(bytes).map(Some).map_err(|e| match checker.is_request(&name) {
            true => Status::invalid_argument(format!("request: {e}")),
            false => Status::internal(format!("the reply does not decode: {e}")),
        })
    }
}
