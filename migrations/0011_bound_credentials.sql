-- A worker credential an owner made for one chat: the agent client behind it (an MCP client)
-- may name only that chat, and may be offered a task permission only when the owner said the
-- client has no tools besides this browser.
ALTER TABLE credentials
    ADD COLUMN session_id   text,
    ADD COLUMN browser_only boolean NOT NULL DEFAULT false,
    ADD COLUMN start_url    text,
    ADD COLUMN browser_profile_id text,
    ADD CONSTRAINT credentials_binding CHECK (session_id IS NULL OR role = 'worker'),
    ADD CONSTRAINT credentials_browser_only CHECK (session_id IS NOT NULL OR NOT browser_only),
    ADD CONSTRAINT credentials_start_url CHECK ((session_id IS NULL) = (start_url IS NULL)),
    ADD CONSTRAINT credentials_profile CHECK ((session_id IS NULL) = (browser_profile_id IS NULL));

CREATE INDEX credentials_session ON credentials (tenant_id, session_id, created_at) WHERE session_id IS NOT NULL;
