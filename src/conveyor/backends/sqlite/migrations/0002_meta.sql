-- Small shared records that are not jobs: live workers (with a TTL), schedule state.
CREATE TABLE conveyor_meta (
    namespace  TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    expires_at REAL,
    PRIMARY KEY (namespace, key)
);
