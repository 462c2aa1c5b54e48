-- The append-only event ledger.
CREATE TABLE events (
    global_position bigint GENERATED ALWAYS AS IDENTITY,
    tx_id           xid8        NOT NULL DEFAULT pg_current_xact_id(),
    stream_id       text        NOT NULL CHECK (length(stream_id) BETWEEN 1 AND 200),
    stream_version  bigint      NOT NULL CHECK (stream_version >= 1),
    event_id        uuid        NOT NULL,
    event_type      text        NOT NULL CHECK (length(event_type) BETWEEN 1 AND 200),
    schema_version  integer     NOT NULL CHECK (schema_version >= 1),
    tenant_id       text        NOT NULL CHECK (length(tenant_id) BETWEEN 1 AND 200),
    payload         jsonb       NOT NULL,
    metadata        jsonb       NOT NULL,
    recorded_at     timestamptz NOT NULL,
    prev_hash       bytea       NOT NULL CHECK (length(prev_hash) = 32),
    hash            bytea       NOT NULL CHECK (length(hash) = 32),
    -- The gap-safe global read orders and resumes on (tx_id, global_position); as the primary
    -- key it serves that read without a separate index on the position alone (one index fewer
    -- per append). The identity column cannot be written, so positions stay unique.
    CONSTRAINT events_pkey PRIMARY KEY (tx_id, global_position),
    CONSTRAINT events_event_id_key UNIQUE (event_id),
    CONSTRAINT events_stream_version_key UNIQUE (stream_id, stream_version)
);

CREATE FUNCTION events_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events is append-only: % refused', TG_OP
        USING ERRCODE = 'restrict_violation';
END
$$;

CREATE TRIGGER events_refuse_update_delete BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_refuse_change();
CREATE TRIGGER events_refuse_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_refuse_change();

-- The role services log in through may only insert and read.
DO $$
BEGIN
    CREATE ROLE grant_ledger_service NOLOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL; -- roles are cluster-wide; another database's migration made it
END
$$;
GRANT SELECT, INSERT ON events TO grant_ledger_service;
GRANT USAGE ON SEQUENCE events_global_position_seq TO grant_ledger_service;
