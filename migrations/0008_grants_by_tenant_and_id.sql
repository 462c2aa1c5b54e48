-- A use finds its running grant by tenant and id. The primary key (tenant_id, grant_id) matches
-- that, but a plan made before the table has statistics (every connection's first, on a young
-- database, kept while the table grows) costs it the same as the tenant-led partial indexes,
-- whose `ended_at IS NULL` the use also says, and may take one of those: then each use reads
-- every running grant of the tenant. This index holds the same key over running grants only, so
-- it matches all a use's lookup says and is the one taken. A use's UPDATE changes no indexed
-- column: it stays a HOT update.
-- Built inside the migration's transaction (not CONCURRENTLY): writes to the table wait while it
-- builds, which on a large table is worth a quiet moment.
CREATE UNIQUE INDEX active_task_grants_running ON active_task_grants (tenant_id, grant_id) WHERE ended_at IS NULL;
