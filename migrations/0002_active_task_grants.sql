-- The inline projection of task grants: updated in the same transaction as the events that
-- create, use and end them, and the row a use's conditional UPDATE locks.
CREATE TABLE active_task_grants (
    grant_id           uuid PRIMARY KEY,
    tenant_id          text        NOT NULL,
    principal_id       text        NOT NULL,
    session_id         text        NOT NULL,
    profile_id         text        NOT NULL,
    profile_generation bigint      NOT NULL,
    agent_version      text        NOT NULL,
    policy_version     text        NOT NULL,
    origin             text        NOT NULL,
    path_prefix        text        NOT NULL,
    approval_id        uuid        NOT NULL,
    created_at         timestamptz NOT NULL,
    expires_at         timestamptz NOT NULL,
    actions_used       integer     NOT NULL DEFAULT 0,
    chars_used         integer     NOT NULL DEFAULT 0,
    ended_at           timestamptz,
    end_reason         text,
    -- The limits are code constants; the database holds them too.
    CONSTRAINT active_task_grants_actions CHECK (actions_used BETWEEN 0 AND 200),
    CONSTRAINT active_task_grants_chars CHECK (chars_used BETWEEN 0 AND 4096),
    CONSTRAINT active_task_grants_duration CHECK (expires_at = created_at + interval '30 minutes'),
    CONSTRAINT active_task_grants_end CHECK ((ended_at IS NULL) = (end_reason IS NULL))
);

-- At most one active grant per session.
CREATE UNIQUE INDEX active_task_grants_one_per_session ON active_task_grants (session_id) WHERE ended_at IS NULL;
CREATE INDEX active_task_grants_profile ON active_task_grants (profile_id) WHERE ended_at IS NULL;

GRANT SELECT, INSERT, UPDATE ON active_task_grants TO grant_ledger_service;
