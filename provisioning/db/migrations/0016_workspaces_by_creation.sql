-- Every-workspace listings page in creation order (GET /api/v1/workspaces?all=true&limit=,
-- provisioning.db.repositories.workspaces_page): with this index a page reads
-- its own rows only, however many workspaces there are; without it each page
-- sorted the whole table. id breaks ties between rows made in one instant.
CREATE INDEX workspaces_created ON workspaces (created_at, id);
