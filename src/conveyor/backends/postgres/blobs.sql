-- Queries of the PostgreSQL blob store (blobs.py). `{schema}` as in queries.sql.

-- name: put_blob
-- The key names the content, so a key already there holds these very bytes.
INSERT INTO {schema}.blobs (key, job_id, created_at, data)
VALUES (%(key)s, %(job_id)s, %(now)s, %(data)s)
ON CONFLICT (key) DO NOTHING

-- name: get_blob
SELECT data FROM {schema}.blobs WHERE key = %(key)s

-- name: delete_job_blobs
-- A key is <job digest>.<kind>.<content digest> (conveyor.backends.blobs.blob_key); a kind
-- given deletes only those of it (expired results, keeping the arguments).
DELETE FROM {schema}.blobs
WHERE job_id = ANY(%(job_ids)s)
  AND (%(kind)s::text IS NULL OR split_part(key, '.', 2) = %(kind)s::text)

-- name: list_blobs
SELECT key, job_id, created_at FROM {schema}.blobs
WHERE created_at < %(before)s
ORDER BY created_at
LIMIT %(limit)s
