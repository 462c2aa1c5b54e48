-- Credentials of the services that call the authorizer. Only a token's SHA-256 is stored; the
-- token is shown once, when `grantctl credentials create` makes it. Each credential has one role
-- and one tenant, and for the roles that act as one owner (worker, runtime) that owner.
CREATE TABLE credentials (
    credential_id uuid        PRIMARY KEY,
    tenant_id     text        NOT NULL,
    role          text        NOT NULL,
    principal_id  text,
    token_sha256  bytea       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz,
    revoked_at    timestamptz,
    CONSTRAINT credentials_role CHECK (role IN ('worker', 'runtime', 'gateway', 'profiles', 'operator')),
    CONSTRAINT credentials_digest CHECK (octet_length(token_sha256) = 32),
    CONSTRAINT credentials_principal CHECK ((role IN ('worker', 'runtime')) = (principal_id IS NOT NULL))
);

CREATE UNIQUE INDEX credentials_token ON credentials (token_sha256);
CREATE INDEX credentials_tenant ON credentials (tenant_id, created_at);

-- The service reads credentials; only an operator makes or revokes them.
GRANT SELECT ON credentials TO grant_ledger_service;
