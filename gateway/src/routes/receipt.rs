//! A receipt for an answered card: the answer as the log holds it, the signed checkpoint that
//! holds it, and the inclusion proof, so the owner can show later that the log still says what
//! they answered (`grantctl audit verify` or any RFC 9162 and C2SP implementation checks it).

use axum::Json;
use axum::http::StatusCode;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use credentials::Scope;
use ledger::proof::{event_json, merkle};
use ledger::{EventStore, StreamId, TenantId};
use proto::ApprovalStatus;
use proto::v1 as pb;
use schemars::JsonSchema;

use crate::api::Approval;
use crate::call::{Answer, Call, Seg, status, uuid};
use crate::docs::{Doc, doc, schema};
use crate::problem::Problem;

pub(crate) const RECEIPT: Doc = Doc {
    scopes: &[Scope::ApprovalResolve],
    ..doc(
        "get",
        "/v1/approvals/{approval_id}/receipt",
        "Proof that the owner's answer to a card is in the signed log",
        schema::<Receipt>,
    )
};

#[derive(Debug, serde::Serialize, JsonSchema)]
pub(crate) struct Receipt {
    pub approval_id: String,
    /// The answer as the log stores it, every field, so its hash can be recomputed.
    pub event: serde_json::Value,
    /// Its place in the log's Merkle tree.
    pub leaf_index: u64,
    /// Base64 of SHA-256(0x00 ‖ "grant-ledger/leaf/v1" ‖ position ‖ the event's hash).
    pub leaf_hash: String,
    pub tree_size: u64,
    /// The signed checkpoint: a C2SP signed note over a tlog-checkpoint body.
    pub checkpoint: String,
    /// RFC 9162 inclusion proof of the leaf in the checkpoint's tree, base64 hashes.
    pub inclusion_proof: Vec<String>,
}

fn not_yet(detail: &str) -> Problem {
    Problem::new(StatusCode::CONFLICT, "receipt_not_ready", detail)
}

pub(super) async fn receipt(call: Call, Seg(approval_id): Seg) -> Answer<Receipt> {
    let (owner, _) = call.owner(&RECEIPT).await?;
    uuid("approval_id", &approval_id)?;
    // The owner's own card, asked of the authorizer: another's is a 404 there.
    let req = pb::GetApprovalRequest { approval_id: approval_id.clone(), min_position: None };
    let card: Approval =
        call.gateway.authorizer().get_approval(call.grpc(&owner, req)?).await.map_err(status)?.into_inner().into();
    if ApprovalStatus::from_code(&card.status) == Some(ApprovalStatus::Pending) {
        return Err(not_yet("the card is not answered yet"));
    }
    let store = &call.gateway.0.store;
    let unavailable = |e: &dyn std::fmt::Display| Problem::unavailable(e.to_string());
    let tenant = TenantId::new(owner.tenant.clone()).map_err(|e| unavailable(&e))?;
    let stream = StreamId::of_entity("approval", &tenant, &approval_id).map_err(|e| unavailable(&e))?;
    let events = store.read_stream(&stream, 1).await.map_err(|e| unavailable(&e))?;
    let answer = events
        .iter()
        .find(|e| e.event_type == "approval.resolved")
        .ok_or_else(|| not_yet("the card ended without an answer from you: there is nothing to prove"))?;
    let (_, leaf) =
        store.leaf_of(answer.event_id).await.map_err(|e| unavailable(&e))?.ok_or_else(Problem::not_found)?;
    let signed_soon = "the log has not signed your answer yet; the next checkpoint will (within a minute or so)";
    let leaf = leaf.ok_or_else(|| not_yet(signed_soon))?;
    let c = store.checkpoint_holding(leaf).await.map_err(|e| unavailable(&e))?.ok_or_else(|| not_yet(signed_soon))?;
    let (proof, _) = store.inclusion_proof(leaf, c.size).await.map_err(|e| unavailable(&e))?;
    Ok(Json(Receipt {
        approval_id,
        event: event_json(answer),
        leaf_index: leaf,
        leaf_hash: B64.encode(merkle::event_leaf(answer)),
        tree_size: c.size,
        checkpoint: c.note.clone(),
        inclusion_proof: proof.iter().map(|h| B64.encode(h)).collect(),
    }))
}
