-- The authority decides each request from these inline tables, written in the same transaction
-- as the events that change them, so any number of replicas serving any tenant agree. Every key
-- carries the tenant. `version` is the entity's stream version: a command appends expecting it.

-- Streams are named per tenant from here on and the inline state starts empty: a log written
-- before could not be decided on (its grants could never end). Refuse rather than half-upgrade.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM events) THEN
        RAISE EXCEPTION 'this database holds events written before tenant-scoped streams (migration 0005); '
            'an in-place upgrade is not supported: keep it for audit (grantctl audit export) and start the '
            'authorizer on a new database';
    END IF;
END
$$;

-- Grants were keyed globally; two tenants may hold the same ids.
ALTER TABLE active_task_grants DROP CONSTRAINT active_task_grants_pkey;
ALTER TABLE active_task_grants ADD CONSTRAINT active_task_grants_pkey PRIMARY KEY (tenant_id, grant_id);
DROP INDEX active_task_grants_one_per_session;
CREATE UNIQUE INDEX active_task_grants_one_per_session ON active_task_grants (tenant_id, session_id)
    WHERE ended_at IS NULL;
DROP INDEX active_task_grants_profile;
CREATE INDEX active_task_grants_profile ON active_task_grants (tenant_id, profile_id) WHERE ended_at IS NULL;
CREATE INDEX active_task_grants_expiry ON active_task_grants (expires_at) WHERE ended_at IS NULL;
CREATE INDEX active_task_grants_principal ON active_task_grants (tenant_id, principal_id, created_at);

CREATE TABLE authority_sessions (
    tenant_id    text   NOT NULL,
    session_id   text   NOT NULL,
    principal_id text   NOT NULL,
    version      bigint NOT NULL CHECK (version >= 1),
    state        jsonb  NOT NULL,
    PRIMARY KEY (tenant_id, session_id)
);

-- A profile or a tenant's settings row may be a placeholder at version 0 (the defaults), made
-- so that a command can lock it before its first event.
CREATE TABLE authority_profiles (
    tenant_id  text   NOT NULL,
    profile_id text   NOT NULL,
    version    bigint NOT NULL CHECK (version >= 0),
    state      jsonb  NOT NULL,
    PRIMARY KEY (tenant_id, profile_id)
);

CREATE TABLE authority_settings (
    tenant_id text   PRIMARY KEY,
    version   bigint NOT NULL CHECK (version >= 0),
    state     jsonb  NOT NULL
);

CREATE TABLE authority_approvals (
    tenant_id     text        NOT NULL,
    approval_id   uuid        NOT NULL,
    session_id    text        NOT NULL,
    version       bigint      NOT NULL CHECK (version >= 1),
    state         jsonb       NOT NULL,
    -- Search keys, kept from the state: the token's digest, and the expiry while pending.
    token_sha256  text,
    pending_until timestamptz,
    PRIMARY KEY (tenant_id, approval_id)
);
CREATE UNIQUE INDEX authority_approvals_token ON authority_approvals (tenant_id, token_sha256)
    WHERE token_sha256 IS NOT NULL;
CREATE INDEX authority_approvals_session ON authority_approvals (tenant_id, session_id);
CREATE INDEX authority_approvals_pending ON authority_approvals (pending_until) WHERE pending_until IS NOT NULL;

-- The snapshots each run has named, each at the log position of the event that first named it:
-- the newest in log order is the current one, as a replay of the log finds.
CREATE TABLE run_snapshots (
    tenant_id   text   NOT NULL,
    session_id  text   NOT NULL,
    run_id      text   NOT NULL,
    snapshot_id text   NOT NULL,
    tx_id       xid8   NOT NULL,
    position    bigint NOT NULL,
    PRIMARY KEY (tenant_id, session_id, run_id, snapshot_id)
);

GRANT SELECT, INSERT, UPDATE ON authority_sessions, authority_profiles, authority_settings, authority_approvals
    TO grant_ledger_service;
GRANT SELECT, INSERT, UPDATE ON run_snapshots TO grant_ledger_service;
