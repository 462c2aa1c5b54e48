-- Owners' credentials at the gateway: an API token (`glo_`), a one-time sign-in link made from
-- it (`gll_`, used once), and a browser session that link opened (`gls_`, the cookie). Only a
-- secret's SHA-256 is stored. A link and a session name the token they came from: revoking the
-- token ends them too, from the next request.
CREATE TABLE owner_tokens (
    token_id     uuid        PRIMARY KEY,
    kind         text        NOT NULL,
    parent_id    uuid        REFERENCES owner_tokens (token_id),
    tenant_id    text        NOT NULL,
    principal_id text        NOT NULL,
    scopes       text[]      NOT NULL,
    token_sha256 bytea       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    used_at      timestamptz,
    revoked_at   timestamptz,
    CONSTRAINT owner_tokens_kind CHECK (kind IN ('token', 'link', 'session')),
    CONSTRAINT owner_tokens_parent CHECK ((kind = 'token') = (parent_id IS NULL)),
    CONSTRAINT owner_tokens_digest CHECK (octet_length(token_sha256) = 32),
    CONSTRAINT owner_tokens_scopes CHECK (
        scopes <@ ARRAY['approval.resolve', 'browser.grant.read', 'browser.grant.write']::text[])
);

CREATE UNIQUE INDEX owner_tokens_secret ON owner_tokens (token_sha256);
CREATE INDEX owner_tokens_tenant ON owner_tokens (tenant_id, created_at);
CREATE INDEX owner_tokens_parent ON owner_tokens (parent_id);

-- The gateway reads tokens, spends links and opens sessions; only an operator makes tokens.
GRANT SELECT, INSERT ON owner_tokens TO grant_ledger_service;
GRANT UPDATE (used_at, revoked_at) ON owner_tokens TO grant_ledger_service;

-- A session's activity includes its approvals' answers, which name the approval, not the session.
CREATE INDEX audit_log_approval ON audit_log (tenant_id, approval_id) WHERE approval_id IS NOT NULL;
