-- The Merkle tree over the log (RFC 9162), leaves in the global read's order, and the signed
-- checkpoints of it. Kept by the checkpoint service; every table here is append-only except
-- the one-row head, which a tree extension locks so that replicas take turns.
CREATE TABLE log_tree_nodes (
    level      smallint NOT NULL CHECK (level BETWEEN 0 AND 63),
    node_index bigint   NOT NULL CHECK (node_index >= 0),
    hash       bytea    NOT NULL CHECK (length(hash) = 32),
    PRIMARY KEY (level, node_index)
);

-- Which leaf each event is: how a proof for an event finds its place.
CREATE TABLE log_tree_leaves (
    global_position bigint PRIMARY KEY,
    leaf_index      bigint NOT NULL UNIQUE CHECK (leaf_index >= 0)
);

CREATE TABLE log_tree_head (
    singleton       boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    size            bigint  NOT NULL CHECK (size >= 0),
    -- The global read's checkpoint after the last leaf.
    tx_id           xid8    NOT NULL,
    global_position bigint  NOT NULL
);
INSERT INTO log_tree_head (size, tx_id, global_position) VALUES (0, '0', 0);

-- Each signed checkpoint: the note as signed, and the head (version and hash) of every stream
-- that moved since the previous one, which the note's extension line commits to.
CREATE TABLE log_checkpoints (
    tree_size bigint      PRIMARY KEY CHECK (tree_size >= 0),
    note      text        NOT NULL,
    heads     jsonb       NOT NULL,
    signed_at timestamptz NOT NULL DEFAULT now()
);

-- Notes by which a log key introduces the next one, in order.
CREATE TABLE log_key_rotations (
    seq       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    note      text        NOT NULL,
    signed_at timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION log_tree_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'restrict_violation';
END
$$;

CREATE TRIGGER log_tree_nodes_append_only BEFORE UPDATE OR DELETE ON log_tree_nodes
    FOR EACH ROW EXECUTE FUNCTION log_tree_refuse_change();
CREATE TRIGGER log_tree_leaves_append_only BEFORE UPDATE OR DELETE ON log_tree_leaves
    FOR EACH ROW EXECUTE FUNCTION log_tree_refuse_change();
CREATE TRIGGER log_checkpoints_append_only BEFORE UPDATE OR DELETE ON log_checkpoints
    FOR EACH ROW EXECUTE FUNCTION log_tree_refuse_change();
CREATE TRIGGER log_key_rotations_append_only BEFORE UPDATE OR DELETE ON log_key_rotations
    FOR EACH ROW EXECUTE FUNCTION log_tree_refuse_change();

GRANT SELECT, INSERT ON log_tree_nodes, log_tree_leaves, log_checkpoints, log_key_rotations
    TO grant_ledger_service;
GRANT SELECT, UPDATE ON log_tree_head TO grant_ledger_service;
