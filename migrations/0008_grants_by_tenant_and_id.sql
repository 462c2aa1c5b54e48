-- A use finds its running grant by tenant and id. Before the table has statistics (every
-- connection's first plan, on a young database) the planner costs the primary key and the
-- tenant-led indexes alike and may take a tenant-led one: then each use reads every running
-- grant of the tenant. This index matches all a use's lookup says (tenant, id, not ended), so
-- it wins on any statistics. A use's UPDATE changes no indexed column: it stays a HOT update.
CREATE UNIQUE INDEX active_task_grants_running ON active_task_grants (tenant_id, grant_id) WHERE ended_at IS NULL;
