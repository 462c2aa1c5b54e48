-- Async projections: each applies a batch of the global log and moves its checkpoint in the same
-- transaction, so its effects happen exactly once. The version is the code's: a projection whose
-- stored version differs from the build's is stale and must be rebuilt before it is served.
CREATE TABLE projection_checkpoints (
    projection text        PRIMARY KEY,
    version    integer     NOT NULL,
    tx_id      xid8        NOT NULL DEFAULT '0',
    position   bigint      NOT NULL DEFAULT 0,
    applied    bigint      NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- One row per event, tenant-scoped: who, what, when, and under which authorization.
CREATE TABLE audit_log (
    tenant_id       text        NOT NULL,
    global_position bigint      NOT NULL,
    tx_id           xid8        NOT NULL,
    recorded_at     timestamptz NOT NULL,
    stream_id       text        NOT NULL,
    event_type      text        NOT NULL,
    principal       text        NOT NULL,
    session_id      text,
    grant_id        uuid,
    approval_id     uuid,
    authorization_text text,
    summary         text        NOT NULL,
    PRIMARY KEY (tenant_id, global_position)
);
CREATE INDEX audit_log_session ON audit_log (tenant_id, session_id, global_position);
CREATE INDEX audit_log_grant ON audit_log (tenant_id, grant_id, global_position);

-- The task-grant list behind the owner's routes.
CREATE TABLE grant_list (
    tenant_id    text        NOT NULL,
    grant_id     uuid        NOT NULL,
    principal_id text        NOT NULL,
    session_id   text        NOT NULL,
    origin       text        NOT NULL,
    path_prefix  text        NOT NULL,
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    actions_used integer     NOT NULL DEFAULT 0,
    chars_used   integer     NOT NULL DEFAULT 0,
    end_reason   text,
    PRIMARY KEY (tenant_id, grant_id)
);
CREATE INDEX grant_list_owner ON grant_list (tenant_id, principal_id, created_at);

-- What the owner's routes show for each grant: its status and minutes left, derived at read time.
CREATE VIEW grant_list_status AS
    SELECT tenant_id, grant_id, principal_id, session_id, origin, path_prefix, created_at, expires_at,
           actions_used, chars_used, end_reason,
           CASE WHEN end_reason IS NOT NULL THEN 'ended'
                WHEN expires_at <= now() THEN 'expired'
                ELSE 'active' END AS status,
           GREATEST(0, CEIL(EXTRACT(EPOCH FROM expires_at - now()) / 60))::integer AS minutes_left
    FROM grant_list;

GRANT SELECT, INSERT, UPDATE ON projection_checkpoints, audit_log, grant_list TO grant_ledger_service;
GRANT SELECT ON grant_list_status TO grant_ledger_service;

-- Approvals still waiting for the owner, per session.
CREATE TABLE pending_approvals (
    tenant_id    text        NOT NULL,
    approval_id  uuid        NOT NULL,
    session_id   text        NOT NULL,
    requested_at timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    summary      text        NOT NULL,
    PRIMARY KEY (tenant_id, approval_id)
);
CREATE INDEX pending_approvals_session ON pending_approvals (tenant_id, session_id, requested_at);

-- Per-session activity: the audit rows of one chat, newest last.
CREATE VIEW session_activity AS
    SELECT tenant_id, session_id, global_position, recorded_at, event_type, authorization_text, summary
    FROM audit_log WHERE session_id IS NOT NULL;

GRANT SELECT, INSERT, DELETE ON pending_approvals TO grant_ledger_service;
GRANT SELECT ON session_activity TO grant_ledger_service;
