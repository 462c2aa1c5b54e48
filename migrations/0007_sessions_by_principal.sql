-- The owner's Stop everything finds their sessions by principal: an index, not a scan of every
-- session the tenant ever had.
CREATE INDEX authority_sessions_principal ON authority_sessions (tenant_id, principal_id, session_id);
