-- The sessions whose task a worker may take: a claim reads only these.
CREATE INDEX authority_sessions_open_tasks ON authority_sessions (tenant_id, session_id)
    WHERE state->'task'->>'ended' = 'false';
