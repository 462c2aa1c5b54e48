-- One read model per question. The owner's routes read grants and waiting cards from the
-- authorizer's inline tables (`active_task_grants`, `authority_approvals`), which are written in
-- the same transaction as their events; the `grant_list` and `pending_approvals` projections
-- answered the same questions a second time, for no reader, and are dropped. Their history stays
-- in the log; `grantctl projections verify` still replays grants against `active_task_grants`.
DROP VIEW IF EXISTS grant_list_status;
DROP TABLE IF EXISTS grant_list;
DROP TABLE IF EXISTS grant_list_next;
DROP TABLE IF EXISTS pending_approvals;
DROP TABLE IF EXISTS pending_approvals_next;
DELETE FROM projection_checkpoints WHERE projection IN ('grant_list', 'pending_approvals');
