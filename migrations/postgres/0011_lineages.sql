-- Repairs and their lineage (migration 0011, rule 14). A repair is a job of
-- its own that names the lineage's original (`lineage_root`), the version it
-- repairs (`repair_of`) and the person's instruction; its settings are the
-- original's. A lineage's row holds what is shared: the version the person
-- has now (`delivered`), the repairs taken (at most two, counted by a
-- conditional update, so racing requests cannot pass the limit; a failed or
-- cancelled repair gives its slot back), and whether a kept previous version
-- stopped further repairs.
ALTER TABLE jobs ADD COLUMN lineage_root uuid REFERENCES jobs (id);
ALTER TABLE jobs ADD COLUMN repair_of uuid REFERENCES jobs (id);
ALTER TABLE jobs ADD COLUMN instruction text CHECK (instruction IS NULL OR length(instruction) BETWEEN 1 AND 500);
CREATE INDEX jobs_lineage ON jobs (lineage_root, created_at) WHERE lineage_root IS NOT NULL;

CREATE TABLE lineages (
    root         uuid        PRIMARY KEY REFERENCES jobs (id),
    delivered    uuid        NOT NULL REFERENCES jobs (id),
    repairs_used integer     NOT NULL DEFAULT 0 CHECK (repairs_used BETWEEN 0 AND 2),
    stopped      boolean     NOT NULL DEFAULT false,
    updated_at   timestamptz NOT NULL
);
