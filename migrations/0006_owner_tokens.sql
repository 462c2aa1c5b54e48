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

-- Forward only: a revocation or a spent link is never undone; a service makes no token; and a
-- link or session is made only from a token of the same tenant and owner, with no more scopes
-- and no longer life.
CREATE FUNCTION owner_tokens_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF (OLD.revoked_at IS NOT NULL AND NEW.revoked_at IS DISTINCT FROM OLD.revoked_at)
           OR (OLD.used_at IS NOT NULL AND NEW.used_at IS DISTINCT FROM OLD.used_at) THEN
            RAISE EXCEPTION 'owner_tokens: a revocation or a spent link is never undone';
        END IF;
    ELSIF NEW.kind = 'token' AND current_user = 'grant_ledger_service' THEN
        RAISE EXCEPTION 'owner_tokens: only an operator makes owner tokens';
    ELSIF NEW.kind <> 'token' AND NOT EXISTS (
        SELECT 1 FROM owner_tokens p
        WHERE p.token_id = NEW.parent_id AND p.kind = 'token' AND p.tenant_id = NEW.tenant_id
          AND p.principal_id = NEW.principal_id AND NEW.scopes <@ p.scopes AND NEW.expires_at <= p.expires_at) THEN
        RAISE EXCEPTION 'owner_tokens: a link or session is made from a token of the same owner, within it';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER owner_tokens_guard BEFORE INSERT OR UPDATE ON owner_tokens
    FOR EACH ROW EXECUTE FUNCTION owner_tokens_guard();

-- The gateway reads tokens, spends links and opens sessions; only an operator makes tokens.
GRANT SELECT, INSERT ON owner_tokens TO grant_ledger_service;
GRANT UPDATE (used_at, revoked_at) ON owner_tokens TO grant_ledger_service;

-- A session's activity includes its approvals' answers, which name the approval, not the session.
CREATE INDEX audit_log_approval ON audit_log (tenant_id, approval_id) WHERE approval_id IS NOT NULL;
