-- The sessions whose task a worker may take: a claim reads only these, one owner's at a time.
CREATE INDEX authority_sessions_open_tasks ON authority_sessions (tenant_id, principal_id, session_id)
    WHERE state->'task'->>'ended' = 'false';
