-- Issue 32, 3: a node's leases are held through one row per node. A claim
-- still sets each job's lease (owner, expiry) and bumps its token (rule 5),
-- and upserts its node's row; a heartbeat extends that one row, however
-- many jobs the node runs. A running job is claimable again once its own
-- lease and its node's have both run out: a node that stops beating loses
-- all its jobs at once, and 100,000 waiting runs cost one write a beat,
-- not 100,000. A claim finds expired jobs from the few expired nodes
-- (jobs_lease_owner), not by reading every running job.
CREATE TABLE node_leases (
    owner      text        PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
-- Jobs running now keep the lease they were given.
INSERT INTO node_leases (owner, expires_at)
SELECT lease_owner, max(lease_expires_at) FROM jobs
WHERE status = 'running' AND lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL
GROUP BY lease_owner;
